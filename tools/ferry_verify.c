/*
 * tools/ferry_verify.c — `ferry verify CACHEDIR|DEST`: re-hash a cache's
 * chunk store, or check a tree written by `ferry sync` against a catalog.
 *
 * PATH is a cache directory when it holds state.db and no catalog option
 * is given. A tree needs its catalog: --catalog FILE, or -c CACHEDIR whose
 * newest catalogs/GEN.db is used (the one a sync from that cache wrote).
 * Mismatches are named on stderr, a summary goes to stdout. Exit: 0 all
 * good, 1 any mismatch or error, 2 bad usage.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry verify [OPTIONS] CACHEDIR\n"
	    "       ferry verify [OPTIONS] (--catalog FILE | -c CACHEDIR) "
	    "DEST\n"
	    "\n"
	    "Re-hash every chunk stored in CACHEDIR (read-only: works while a\n"
	    "hydrator runs on it), or compare the tree DEST with a catalog:\n"
	    "type, mode, size, mtime, symlink targets, hard links, user.*\n"
	    "xattrs and the content of every file, hashed chunk by chunk.\n"
	    "\n"
	    "Options:\n"
	    "      --catalog FILE   the catalog DEST was written from\n"
	    "  -c, --cache-dir DIR  use DIR's newest catalogs/GEN.db\n"
	    "  -q, --quiet          no summary line\n"
	    "  -v, --verbose        debug lines (the SQLite and curl codes\n"
	    "                       behind an error)\n"
	    "  -h, --help           this text\n"
	    "\n"
	    "Exit status: 0 when everything matches, 1 on any mismatch or\n"
	    "error, 2 on bad usage. See ferry(1).\n");
}

struct verify_args {
	const char *catalog, *cache;
};

/* --catalog and --cache-dir. */
static int verify_opt(void *ctx, int ch, const char *arg)
{
	struct verify_args *va = ctx;

	if (ch == 'C')
		va->catalog = arg;
	else if (ch == 'c')
		va->cache = arg;
	else
		return -1;
	return 0;
}

int ferry_cmd_verify(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"catalog", required_argument, NULL, 'C'},
	    {"cache-dir", required_argument, NULL, 'c'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *catalog, *cache, *path;
	char cat_path[PATH_MAX + 32], probe[PATH_MAX + 16];
	uint64_t checked = 0;
	struct stat st;
	struct verify_args va = {0};
	struct ferry_opts fo = {.prog = "ferry verify",
				.shortopts = ":c:qvh",
				.longopts = longopts,
				.usage = usage,
				.extra = verify_opt,
				.ctx = &va};
	int ch, r;

	ch = ferry_opts_parse(argc, argv, &fo);
	if (ch >= 0)
		return ch;
	catalog = va.catalog;
	cache = va.cache;
	if (argc - optind != 1) {
		base_error("expected one CACHEDIR or DEST (see --help)");
		return FERRY_EXIT_USAGE;
	}
	path = argv[optind];
	if (!catalog && !cache) {
		snprintf(probe, sizeof(probe), "%s/state.db", path);
		if (stat(probe, &st) < 0) {
			base_error(
			    "not a cache directory (no state.db); to "
			    "check a tree give its catalog with --catalog "
			    "FILE or -c CACHEDIR path=%s",
			    path);
			/* ferry(1): not a ferry cache is 1, as for status */
			return 1;
		}
		r = hyd_verify_cache(path, &checked);
		if (r < 0)
			return 1;
		if (!fo.quiet)
			printf("%s: %" PRIu64
			       " chunks checked, %d mismatch%s\n",
			       path, checked, r, r == 1 ? "" : "es");
		return r ? 1 : 0;
	}
	if (!catalog) {
		r = hyd_cache_catalog_newest(cache, cat_path, sizeof(cat_path),
					     NULL);
		if (r < 0) {
			base_log_err(BASE_LOG_ERROR, r,
				     "no catalog in the cache directory dir=%s",
				     cache);
			return 1;
		}
		catalog = cat_path;
	}
	r = hyd_verify_tree(path, catalog, &checked);
	if (r < 0)
		return 1;
	if (!fo.quiet)
		printf("%s: %" PRIu64 " entries checked against %s, %d "
		       "mismatch%s\n",
		       path, checked, catalog, r, r == 1 ? "" : "es");
	return r ? 1 : 0;
}
