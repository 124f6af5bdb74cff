/*
 * tests/fuzz/fuzz_trace.c — the trace file parser (hydrator/trace/
 * hyd_trace_file.c, hyd_trace_parse) on arbitrary bytes, and the writer
 * on whatever it accepts.
 *
 * Properties (a violation aborts):
 *   - a refusal is -EBADMSG (or -ENOMEM) with a why that starts with
 *     "line ", and leaves the trace empty;
 *   - an accepted trace keeps the format's bounds: generation >= 1, at
 *     most HYD_TRACE_MAX_FILES files and HYD_TRACE_MAX_RANGES ranges,
 *     every path non-empty, shorter than PATH_MAX, not starting with '/'
 *     and made of components that pass cat_name_check; every range names
 *     a file, has len >= 1 and ends within the file's size;
 *   - hyd_trace_write of it (to a memfd) parses back to the same
 *     generation and ranges, files renumbered in the order of their
 *     first range and files no range names left out, and writing that
 *     again gives the same bytes (the writer's output is canonical).
 * Verdict (fuzz_verdict.h): accepted when hyd_trace_parse returns 0.
 *
 * Corpus (tests/fuzz/corpus/trace): written by hand (printf): ok_* are
 * traces the parser takes (the smallest, comments and empty lines,
 * escaped and non-UTF-8 paths, a negative mtime, a file without ranges,
 * every number at its bound); bad_* break one rule each (magic, no "end",
 * text after it, no final newline, a file before "generation", ids out of
 * order, a range of an undeclared file, len 0, a range past the size,
 * "..", an absolute path, a bad escape, a raw space, a leading zero,
 * generation 0, two generations, a line over HYD_TRACE_LINE_MAX, an
 * unknown line, a NUL in a number, a trailing space).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "hydrator/hydrator.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort unless the trace keeps the bounds the parser promises. */
static void check_bounds(const struct hyd_trace *t)
{
	size_t i, k, comp;

	if (t->generation == 0 || t->nfiles > HYD_TRACE_MAX_FILES ||
	    t->nranges > HYD_TRACE_MAX_RANGES)
		abort();
	if ((t->nfiles && !t->files) || (t->nranges && !t->ranges))
		abort();
	for (i = 0; i < t->nfiles; i++) {
		const char *p = t->files[i].path;
		size_t n;

		if (!p)
			abort();
		n = strlen(p);
		if (n == 0 || n >= PATH_MAX || p[0] == '/' ||
		    t->files[i].size > (uint64_t)INT64_MAX)
			abort();
		for (comp = 0, k = 0; k <= n; k++) {
			if (k < n && p[k] != '/')
				continue;
			if (cat_name_check(p + comp, k - comp) != 0)
				abort();
			comp = k + 1;
		}
	}
	for (i = 0; i < t->nranges; i++) {
		const struct hyd_trace_range *g = &t->ranges[i];

		if (g->file >= t->nfiles || g->len == 0 ||
		    g->off > t->files[g->file].size ||
		    g->len > t->files[g->file].size - g->off)
			abort();
	}
}

/* hyd_trace_write of t into a new memfd, read back into a heap buffer
 * of exactly its length (ASan sees a read past it). */
static uint8_t *write_trace(const struct hyd_trace *t, size_t *ret_len)
{
	uint8_t *buf;
	off_t end;
	int fd = memfd_create("fuzz_trace", MFD_CLOEXEC);

	if (fd < 0)
		abort();
	if (hyd_trace_write(fd, t) != 0)
		abort();
	end = lseek(fd, 0, SEEK_END);
	if (end <= 0)
		abort();
	buf = malloc((size_t)end);
	if (!buf || pread(fd, buf, (size_t)end, 0) != end)
		abort();
	close(fd);
	*ret_len = (size_t)end;
	return buf;
}

/* got is want after a write and a parse: see the header. */
static void check_same(const struct hyd_trace *want,
		       const struct hyd_trace *got)
{
	uint32_t *map, used = 0;
	size_t i;

	if (got->generation != want->generation ||
	    got->nranges != want->nranges)
		abort();
	map = calloc(want->nfiles ? want->nfiles : 1, sizeof(*map));
	if (!map)
		abort();
	/* map[i]: 1 + file i's number in got, 0 while unseen */
	for (i = 0; i < want->nranges; i++) {
		const struct hyd_trace_range *w = &want->ranges[i];
		const struct hyd_trace_range *g = &got->ranges[i];

		if (!map[w->file])
			map[w->file] = ++used;
		if (g->file != map[w->file] - 1 || g->t_ms != w->t_ms ||
		    g->off != w->off || g->len != w->len)
			abort();
	}
	if (got->nfiles != used)
		abort();
	for (i = 0; i < want->nfiles; i++) {
		const struct hyd_trace_file *w = &want->files[i], *g;

		if (!map[i])
			continue;
		g = &got->files[map[i] - 1];
		if (strcmp(g->path, w->path) != 0 || g->size != w->size ||
		    g->mtime_ns != w->mtime_ns)
			abort();
	}
	free(map);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hyd_trace t, back;
	char why[256];
	uint8_t *text, *text2;
	size_t len, len2;
	int r;

	why[0] = 'x';
	r = hyd_trace_parse((const char *)data, size, &t, why, sizeof(why));
	fuzz_report(r == 0);
	if (r != 0) {
		if (r != -EBADMSG && r != -ENOMEM)
			abort();
		if (r == -EBADMSG && strncmp(why, "line ", 5) != 0)
			abort();
		if (t.files || t.ranges || t.nfiles || t.nranges)
			abort();
		return 0;
	}
	check_bounds(&t);

	text = write_trace(&t, &len);
	if (hyd_trace_parse((const char *)text, len, &back, why, sizeof(why)) !=
	    0)
		abort();
	check_bounds(&back);
	check_same(&t, &back);
	text2 = write_trace(&back, &len2);
	if (len2 != len || memcmp(text, text2, len) != 0)
		abort();
	free(text);
	free(text2);
	hyd_trace_free(&back);
	hyd_trace_free(&t);
	return 0;
}
