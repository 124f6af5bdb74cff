/*
 * tools/ferry_gc.c — `ferry gc CACHEDIR`: drop the chunks that no catalog
 * kept in the cache names any more, and give their space back. A running
 * mount does it itself when a generation leaves; this is for asking now,
 * or for an idle cache. Exit: 0 done, 1 failed, 2 bad usage.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry gc [OPTIONS] CACHEDIR\n"
	    "\n"
	    "Drop from CACHEDIR's chunk store every chunk that no catalog\n"
	    "kept in CACHEDIR/catalogs names (the generations a mount still\n"
	    "serves, or the one an idle cache holds), and give their space\n"
	    "back to the file system. A hydrator running on the cache does\n"
	    "the work itself, between two generation switches; an idle\n"
	    "cache is collected here. Safe to interrupt at any moment.\n"
	    "\n"
	    "Options:\n"
	    "  -q, --quiet    no summary line\n"
	    "  -v, --verbose  debug lines\n"
	    "  -h, --help     this text\n"
	    "\n"
	    "Exit status: 0 done, 1 failed (the cache is in use by a\n"
	    "process that does not collect, such as a ferry sync), 2 bad\n"
	    "usage. See ferry(1).\n");
}

int ferry_cmd_gc(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"quiet", no_argument, NULL, 'q'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct hyd_gc_result r;
	char freed[32];
	struct ferry_opts fo = {.prog = "ferry gc",
				.shortopts = ":qvh",
				.longopts = longopts,
				.usage = usage};
	int ch;

	ch = ferry_opts_parse(argc, argv, &fo);
	if (ch >= 0)
		return ch;
	if (argc - optind != 1) {
		base_error("expected one CACHEDIR (see --help)");
		return FERRY_EXIT_USAGE;
	}
	if (hyd_gc(argv[optind], &r) < 0)
		return 1;
	if (!fo.quiet) {
		ferry_human(r.dropped_bytes, freed, sizeof(freed));
		printf("%s: %" PRIu64 " chunks dropped (%s freed), %" PRIu64
		       " kept for %" PRIu64 " catalog file%s, %.1f s%s\n",
		       argv[optind], r.dropped, freed, r.kept, r.catalogs,
		       r.catalogs == 1 ? "" : "s", r.elapsed_s,
		       r.by_daemon ? " (by the running hydrator)" : "");
	}
	return 0;
}
