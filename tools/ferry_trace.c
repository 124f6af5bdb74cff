/*
 * tools/ferry_trace.c — `ferry trace export` (a mount's record of first
 * reads as a trace file) and `ferry trace show` (a trace file for people).
 * The format is docs/formats.md's "Traces"; ferry-hydrator --prefetch
 * and ferry sync --prefetch replay it. Exit: 0 done, 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry trace export [OPTIONS] MOUNTPOINT|CACHEDIR\n"
	    "       ferry trace show [OPTIONS] FILE\n"
	    "\n"
	    "A mount records the order in which its files and byte ranges\n"
	    "are first read (CACHEDIR/" HYD_TRACE_REC_NAME "). export writes\n"
	    "that record as a trace file: paths (not inode numbers), each\n"
	    "file's size and mtime, its ranges in the order they were first\n"
	    "read. ferry-hydrator --prefetch FILE (at a later mount) and\n"
	    "ferry sync --prefetch FILE fetch what it names first; files\n"
	    "changed since are skipped.\n"
	    "show prints a trace file (\"-\": standard input).\n"
	    "\n"
	    "export options:\n"
	    "  -o, --output FILE  write here (replaced atomically); default:\n"
	    "                     standard output\n"
	    "      --previous     the mount before the last one's record\n"
	    "                     (kept once, when the last mount read\n"
	    "                     nothing it is still the one before)\n"
	    "      --reads-only   leave out the small files the mount pushed\n"
	    "                     into the kernel's cache after a read in\n"
	    "                     their directory (kept by default: the\n"
	    "                     job's reads of them never reach the mount)\n"
	    "show options:\n"
	    "      --files        one line a file (bytes read, ranges, first\n"
	    "                     read), not one a range\n"
	    "common:\n"
	    "  -q, --quiet        no summary line on standard error\n"
	    "  -h, --help         this text\n"
	    "\n"
	    "Exit status: 0 done, 1 failed (no record, a bad trace file),\n"
	    "2 bad usage. See ferry(1) and docs/formats.md.\n");
}

struct trace_opts {
	const char *out;
	int previous, files, reads_only;
};

enum { OPT_PREVIOUS = 256, OPT_FILES, OPT_READS_ONLY };

static int extra(void *ctx, int ch, const char *arg)
{
	struct trace_opts *t = ctx;

	switch (ch) {
	case 'o':
		t->out = arg;
		return 0;
	case OPT_PREVIOUS:
		t->previous = 1;
		return 0;
	case OPT_FILES:
		t->files = 1;
		return 0;
	case OPT_READS_ONLY:
		t->reads_only = 1;
		return 0;
	}
	return -1;
}

static uint64_t trace_bytes(const struct hyd_trace *t)
{
	uint64_t b = 0;
	size_t i;

	for (i = 0; i < t->nranges; i++)
		b += t->ranges[i].len;
	return b;
}

/* t to path, through a temporary file renamed over it. */
static int write_atomic(const char *path, const struct hyd_trace *t)
{
	char tmp[PATH_MAX];
	int fd, r;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
	    (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = hyd_trace_write(fd, t);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

static int do_export(const struct trace_opts *to, const char *where, int quiet)
{
	char cache[PATH_MAX], why[256], human[32];
	struct hyd_trace t;
	int r;

	if (ferry_find_cache(where, cache, sizeof(cache)) != 0)
		return 1;
	r = hyd_trace_export(cache,
			     (to->previous ? HYD_TRACE_PREVIOUS : 0) |
				 (to->reads_only ? HYD_TRACE_READS_ONLY : 0),
			     &t, why, sizeof(why));
	if (r == -ENOENT) {
		base_error("no record of reads in %s (a mount with "
			   "--no-record, or none yet): %s",
			   cache, why);
		return 1;
	}
	if (r < 0) {
		base_error("cannot export the trace of %s: %s", cache, why);
		return 1;
	}
	r = to->out ? write_atomic(to->out, &t) : hyd_trace_write(1, &t);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot write the trace to %s",
			     to->out ? to->out : "standard output");
		hyd_trace_free(&t);
		return 1;
	}
	if (!quiet) {
		ferry_human(trace_bytes(&t), human, sizeof(human));
		fprintf(stderr,
			"ferry trace: %zu files, %zu ranges, %s read, "
			"generation %" PRIu64 "%s%s\n",
			t.nfiles, t.nranges, human, t.generation,
			to->out ? " -> " : "", to->out ? to->out : "");
	}
	hyd_trace_free(&t);
	return 0;
}

/* A path as shown on a terminal: control bytes as \xNN (as log lines
 * show them), the rest as it is. */
static void shown_path(const char *p, char *buf, size_t cap)
{
	base_text_escape(buf, cap, p, strlen(p));
}

/* Per file: bytes, ranges, first read; in the order of first reads. */
static void show_files(const struct hyd_trace *t)
{
	uint64_t *bytes = calloc(t->nfiles ? t->nfiles : 1, sizeof(*bytes));
	uint32_t *n = calloc(t->nfiles ? t->nfiles : 1, sizeof(*n));
	int64_t *first = malloc((t->nfiles ? t->nfiles : 1) * sizeof(*first));
	char hb[32], hs[32], path[PATH_MAX * 4];
	size_t i;

	if (!bytes || !n || !first) {
		base_error("out of memory");
		goto out;
	}
	for (i = 0; i < t->nfiles; i++)
		first[i] = -1;
	for (i = 0; i < t->nranges; i++) {
		const struct hyd_trace_range *g = &t->ranges[i];

		bytes[g->file] += g->len;
		n[g->file]++;
		if (first[g->file] < 0)
			first[g->file] = (int64_t)i;
	}
	printf("%10s %8s %8s %6s  %s\n", "first s", "read", "size", "ranges",
	       "path");
	for (i = 0; i < t->nranges; i++) {
		uint32_t f = t->ranges[i].file;

		if (first[f] != (int64_t)i)
			continue;
		ferry_human(bytes[f], hb, sizeof(hb));
		ferry_human(t->files[f].size, hs, sizeof(hs));
		shown_path(t->files[f].path, path, sizeof(path));
		printf("%10.3f %8s %8s %6" PRIu32 "  %s\n",
		       t->ranges[i].t_ms / 1000.0, hb, hs, n[f], path);
	}
out:
	free(bytes);
	free(n);
	free(first);
}

static int do_show(const struct trace_opts *to, const char *path, int quiet)
{
	static char shown[PATH_MAX * 4];
	struct hyd_trace t;
	char why[256], human[32];
	size_t i;
	int r;

	r = hyd_trace_load(path, &t, why, sizeof(why));
	if (r < 0) {
		base_error("%s: %s", path, why);
		return 1;
	}
	if (to->files) {
		show_files(&t);
	} else {
		printf("%10s %14s %10s  %s\n", "at s", "offset", "length",
		       "path");
		for (i = 0; i < t.nranges; i++) {
			const struct hyd_trace_range *g = &t.ranges[i];

			ferry_human(g->len, human, sizeof(human));
			shown_path(t.files[g->file].path, shown, sizeof(shown));
			printf("%10.3f %14" PRIu64 " %10s  %s\n",
			       g->t_ms / 1000.0, g->off, human, shown);
		}
	}
	if (!quiet) {
		ferry_human(trace_bytes(&t), human, sizeof(human));
		fprintf(stderr,
			"%s: generation %" PRIu64 ", %zu files, %zu ranges, "
			"%s read over %.3f s\n",
			path, t.generation, t.nfiles, t.nranges, human,
			t.nranges ? t.ranges[t.nranges - 1].t_ms / 1000.0 : 0);
	}
	hyd_trace_free(&t);
	return 0;
}

int ferry_cmd_trace(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"output", required_argument, NULL, 'o'},
	    {"previous", no_argument, NULL, OPT_PREVIOUS},
	    {"files", no_argument, NULL, OPT_FILES},
	    {"reads-only", no_argument, NULL, OPT_READS_ONLY},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct trace_opts to = {0};
	struct ferry_opts fo = {.prog = "ferry trace",
				.shortopts = ":o:qh",
				.longopts = longopts,
				.usage = usage,
				.extra = extra,
				.ctx = &to};
	const char *verb;
	int ch;

	if (argc >= 2 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 2 ||
	    (strcmp(argv[1], "export") && strcmp(argv[1], "show"))) {
		base_error("expected export or show (see ferry trace --help)");
		return FERRY_EXIT_USAGE;
	}
	verb = argv[1];
	ch = ferry_opts_parse(argc - 1, argv + 1, &fo);
	if (ch >= 0)
		return ch;
	if (argc - 1 - optind != 1) {
		base_error("expected one %s (see --help)",
			   !strcmp(verb, "export") ? "MOUNTPOINT or CACHEDIR"
						   : "FILE");
		return FERRY_EXIT_USAGE;
	}
	if (!strcmp(verb, "export")) {
		if (to.files) {
			base_error("--files is show's (see --help)");
			return FERRY_EXIT_USAGE;
		}
		return do_export(&to, argv[1 + optind], fo.quiet);
	}
	if (to.out || to.previous || to.reads_only) {
		base_error("-o, --previous and --reads-only are export's (see "
			   "--help)");
		return FERRY_EXIT_USAGE;
	}
	return do_show(&to, argv[1 + optind], fo.quiet);
}
