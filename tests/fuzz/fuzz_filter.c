/*
 * fuzz_filter.c — a per-directory merge file (the source's bytes, so
 * untrusted) loaded into `ferry sync`'s filter with hyd_filter_merge_load,
 * then paths judged. The verdict (fuzz_verdict.h) is the load's. Whatever
 * the file says, its rules reach only the paths below its directory:
 * paths elsewhere are judged as with no file at all.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/hydrator.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const paths[] = {
    "d",    "d/x", "d/x.o", "d/sub/y", "d/sub", "top",	    "e/x.o",
    "dd/x", "d.o", "e",	    "e/d/x",   "x.log", "d/.rules",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	hyd_filter *f = hyd_filter_new();
	const char *why = "";
	int before[sizeof(paths) / sizeof(*paths)][3];
	size_t i;
	int ok, side;

	if (!f || hyd_filter_rule(f, "- *.log", &why) < 0 ||
	    hyd_filter_rule(f, ": .rules", &why) < 0 ||
	    hyd_filter_rule(f, ":w- .words", &why) < 0)
		abort();
	for (i = 0; i < sizeof(paths) / sizeof(*paths); i++)
		for (side = 0; side < 3; side++)
			before[i][side] =
			    hyd_filter_excluded(f, paths[i], 0, side);
	ok = hyd_filter_merge_load(f, 0, "d", (const char *)data, size, &why) ==
	     0;
	fuzz_report(ok);
	if (!why)
		abort(); /* a refusal always says why */
	/* the same bytes as words of patterns: at most a word too long */
	(void)hyd_filter_merge_load(f, 1, "d/sub", (const char *)data, size,
				    &why);
	for (i = 0; i < sizeof(paths) / sizeof(*paths); i++)
		for (side = 0; side < 3; side++) {
			int v = hyd_filter_excluded(f, paths[i], i & 1, side);

			if (v != 0 && v != 1)
				abort();
			/* outside d/: as before the file */
			if (strncmp(paths[i], "d/", 2) &&
			    hyd_filter_excluded(f, paths[i], 0, side) !=
				before[i][side])
				abort();
		}
	hyd_filter_free(f);
	return 0;
}
