/*
 * tools/ferry_pin.c — `ferry pin MOUNTPOINT PATH...`: keep PATHs whole in
 * a bounded cache. The running hydrator records each (CACHEDIR/pins, so a
 * restart keeps them), fetches the files they name in full ahead of the
 * rest of backfill, and never evicts their chunks. Exit: 0 every PATH
 * pinned, 1 one failed, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: ferry pin [OPTIONS] MOUNTPOINT PATH...\n"
		"\n"
		"Pin PATHs of the ferry mount at MOUNTPOINT: their files are\n"
		"fetched in full, ahead of the rest of backfill, and their\n"
		"chunks are never evicted under --cache-max. PATH is a file\n"
		"or a directory (all below it), given from the tree's root\n"
		"(models/llama) or as a path under MOUNTPOINT\n"
		"(/mnt/data/models/llama). The mount records pins in\n"
		"CACHEDIR/pins and keeps them across restarts and new\n"
		"generations; ferry status shows pinned bytes.\n"
		"\n"
		"Options:\n"
		"  -q, --quiet    no line per path\n"
		"  -h, --help     this text\n"
		"\n"
		"Exit status: 0 all pinned, 1 a path was not (no hydrator\n"
		"runs on the mount, or it refused), 2 bad usage. See "
		"ferry(1).\n");
}

/* PATH from the tree's root: a path under mnt (absolute) loses mnt. */
static const char *tree_path(const char *mnt, const char *path)
{
	size_t n = strlen(mnt);

	if (path[0] != '/')
		return path;
	if (!strncmp(path, mnt, n) && (path[n] == '/' || !path[n]))
		return path + n;
	return NULL;
}

int ferry_cmd_pin(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct ferry_opts fo = {.prog = "ferry pin",
				.shortopts = ":qh",
				.longopts = longopts,
				.usage = usage};
	char cache[PATH_MAX], mnt[PATH_MAX], err[512];
	int ch, rc = 0;

	ch = ferry_opts_parse(argc, argv, &fo);
	if (ch >= 0)
		return ch;
	if (argc - optind < 2) {
		base_error("expected MOUNTPOINT and at least one PATH (see "
			   "--help)");
		return FERRY_EXIT_USAGE;
	}
	if (!realpath(argv[optind], mnt)) {
		base_log_err(BASE_LOG_ERROR, -errno,
			     "no such mountpoint path=%s", argv[optind]);
		return 1;
	}
	if (ferry_find_cache(mnt, cache, sizeof(cache)) != 0)
		return 1;
	for (int i = optind + 1; i < argc; i++) {
		const char *p = tree_path(mnt, argv[i]);

		if (!p) {
			base_error("%s is not under the mount %s", argv[i],
				   mnt);
			rc = 1;
			continue;
		}
		while (*p == '/')
			p++;
		if (!*p) {
			base_error("pinning the whole tree: use backfill "
				   "without --cache-max instead");
			rc = 1;
			continue;
		}
		if (hyd_pin(cache, p, err, sizeof(err)) < 0) {
			base_error("%s: %s", argv[i], err);
			rc = 1;
			continue;
		}
		if (!fo.quiet)
			printf("pinned %s\n", p);
	}
	return rc;
}
