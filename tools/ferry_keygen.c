/*
 * tools/ferry_keygen.c — `ferry keygen DIR`: a new Ed25519 key pair for
 * signed generations (catalog.h, cat_sign_keygen): DIR/sign.key for
 * ferry-replicator --sign-key, DIR/sign.pub for the clients' --trust-key.
 * An existing key is never overwritten. Exit: 0 made, 1 failed (a key is
 * there already, DIR cannot be written), 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(
	    f, "Usage: ferry keygen [OPTIONS] DIR\n"
	       "\n"
	       "Make a new Ed25519 key pair for signed generations:\n"
	       "  DIR/sign.key  the private key (PEM, mode 0600), for\n"
	       "                ferry-replicator --sign-key; keep it secret\n"
	       "  DIR/sign.pub  the public key (PEM), for the --trust-key of\n"
	       "                ferry-hydrator and ferry sync\n"
	       "DIR is created (mode 0700) when missing. A key already there\n"
	       "is never overwritten. Prints the key's id (the SHA-256 of the\n"
	       "public key), which the replicator and clients log.\n"
	       "\n"
	       "Options:\n"
	       "  -q, --quiet    print nothing on success\n"
	       "  -h, --help     this text\n"
	       "\n"
	       "Exit status: 0 made, 1 failed (a key exists, DIR cannot be\n"
	       "written), 2 bad usage. See ferry(1).\n");
}

int ferry_cmd_keygen(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct cat_sign_key k;
	char path[4200], id[65];
	const char *dir;
	struct ferry_opts fo = {.prog = "ferry keygen",
				.shortopts = ":qh",
				.longopts = longopts,
				.usage = usage};
	int ch, r;

	ch = ferry_opts_parse(argc, argv, &fo);
	if (ch >= 0)
		return ch;
	if (argc - optind != 1) {
		base_error("expected one DIR (see --help)");
		return FERRY_EXIT_USAGE;
	}
	dir = argv[optind];
	if (strlen(dir) > 4096) {
		base_error("directory name too long");
		return FERRY_EXIT_USAGE;
	}
	r = cat_sign_keygen(dir);
	if (r == -EEXIST) {
		base_error("a key exists already in %s (sign.key or sign.pub): "
			   "not overwriting it",
			   dir);
		return 1;
	}
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot make a key pair dir=%s",
			     dir);
		return 1;
	}
	/* Read back what was written: the id printed is the file's. */
	snprintf(path, sizeof(path), "%s/sign.key", dir);
	r = cat_sign_key_load(path, &k);
	if (r == 0)
		r = cat_sign_key_id(k.pub, id);
	cat_sign_key_wipe(&k);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot read the new key path=%s", path);
		return 1;
	}
	if (!fo.quiet)
		printf("%s/sign.key: private key (keep it secret)\n"
		       "%s/sign.pub: public key, key id %s\n",
		       dir, dir, id);
	return 0;
}
