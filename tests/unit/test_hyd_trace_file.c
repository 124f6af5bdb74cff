/*
 * tests/unit/test_hyd_trace_file.c — the trace file format
 * (hydrator/trace/hyd_trace_file.c): a written trace parses back to the
 * same files and ranges (paths with every byte the writer escapes, files
 * renumbered in the order of their first range, files without a range
 * left out), every malformed input is refused with -EBADMSG and a why
 * naming its line, the lenient parts of the format (comments, empty
 * lines, negative mtimes, files without ranges) are taken, and
 * hyd_trace_load reports open and read errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hydrator/hydrator.h"
#include "tsupport.h"

#define WHY_CAP 256

/* The bytes hyd_trace_write gives for t, through a temporary file (the
 * writer's fd may be any file), NUL-terminated; *ret_len without it. */
static char *write_bytes(const struct hyd_trace *t, size_t *ret_len)
{
	char path[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;
	int fd;

	assert_non_null(buf);
	snprintf(path, sizeof(path), "%s/ferry-trace.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(hyd_trace_write(fd, t), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	for (;;) {
		if (len + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		n = read(fd, buf + len, cap - 1 - len);
		assert_true(n >= 0);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*ret_len = len;
	return buf;
}

/* buf[0..len) must be refused with -EBADMSG and a why that starts with
 * "line LINE: "; the trace is left empty. */
static void refused_n(const char *buf, size_t len, size_t line)
{
	struct hyd_trace t;
	char why[WHY_CAP], want[32];
	int r;

	memset(why, 'x', sizeof(why));
	r = hyd_trace_parse(buf, len, &t, why, sizeof(why));
	if (r != -EBADMSG)
		fail_msg("accepted (%d), expected a refusal at line %zu: "
			 "\"%.*s\"",
			 r, line, (int)len, buf);
	snprintf(want, sizeof(want), "line %zu: ", line);
	if (strncmp(why, want, strlen(want)) != 0)
		fail_msg("why \"%s\" does not start with \"%s\" for \"%.*s\"",
			 why, want, (int)len, buf);
	assert_true(strlen(why) > strlen(want));
	assert_null(t.files);
	assert_null(t.ranges);
	assert_int_equal(t.nfiles, 0);
	assert_int_equal(t.nranges, 0);
}

static void refused(const char *text, size_t line)
{
	refused_n(text, strlen(text), line);
}

/* text must parse; the caller frees *t. */
static void accepted(const char *text, struct hyd_trace *t)
{
	char why[WHY_CAP];
	int r = hyd_trace_parse(text, strlen(text), t, why, sizeof(why));

	if (r != 0)
		fail_msg("refused (%d: %s): \"%s\"", r, why, text);
}

static void add_file(struct hyd_trace *t, const char *path, uint64_t size,
		     int64_t mtime_ns)
{
	t->files = realloc(t->files, (t->nfiles + 1) * sizeof(*t->files));
	assert_non_null(t->files);
	t->files[t->nfiles].path = strdup(path);
	assert_non_null(t->files[t->nfiles].path);
	t->files[t->nfiles].size = size;
	t->files[t->nfiles].mtime_ns = mtime_ns;
	t->capfiles = ++t->nfiles;
}

static void add_range(struct hyd_trace *t, uint32_t file, uint32_t t_ms,
		      uint64_t off, uint64_t len)
{
	t->ranges = realloc(t->ranges, (t->nranges + 1) * sizeof(*t->ranges));
	assert_non_null(t->ranges);
	t->ranges[t->nranges].file = file;
	t->ranges[t->nranges].t_ms = t_ms;
	t->ranges[t->nranges].off = off;
	t->ranges[t->nranges].len = len;
	t->capranges = ++t->nranges;
}

/* got is want written and parsed back: the same generation and ranges in
 * the same order, files renumbered by first range, unranged files
 * gone. */
static void assert_same(const struct hyd_trace *want,
			const struct hyd_trace *got)
{
	uint32_t map[64];
	size_t i, used = 0;

	assert_true(want->nfiles <= 64);
	for (i = 0; i < want->nfiles; i++)
		map[i] = UINT32_MAX;
	assert_int_equal(got->generation,
			 want->generation ? want->generation : 1);
	assert_int_equal(got->nranges, want->nranges);
	for (i = 0; i < want->nranges; i++) {
		const struct hyd_trace_range *w = &want->ranges[i];
		const struct hyd_trace_range *g = &got->ranges[i];

		if (map[w->file] == UINT32_MAX)
			map[w->file] = (uint32_t)used++;
		assert_int_equal(g->file, map[w->file]);
		assert_int_equal(g->t_ms, w->t_ms);
		assert_int_equal(g->off, w->off);
		assert_int_equal(g->len, w->len);
	}
	assert_int_equal(got->nfiles, used);
	for (i = 0; i < want->nfiles; i++) {
		const struct hyd_trace_file *w = &want->files[i], *g;

		if (map[i] == UINT32_MAX)
			continue;
		g = &got->files[map[i]];
		assert_string_equal(g->path, w->path);
		assert_int_equal(g->size, w->size);
		assert_true(g->mtime_ns == w->mtime_ns);
	}
}

/* Paths with every kind of byte the writer escapes or keeps, ranges
 * interleaved across files, a file no range names. */
static void test_round_trip(void **state)
{
	struct hyd_trace t = {0}, back;
	char why[WHY_CAP], *text, *text2;
	size_t len, len2;

	(void)state;
	t.generation = 42;
	add_file(&t, "dir with space/a b", 1000, 1700000000123456789);
	add_file(&t, "100%real", 50, -1);
	add_file(&t, "new\nline", 10, 0);
	add_file(&t, "tab\there\x7f\x01", 20, -5000000000);
	add_file(&t,
		 "bad\xff"
		 "byte",
		 30, 5);
	add_file(&t, "a/b/c", 4096, 7);
	add_file(&t, "never read", 9, 1);
	add_file(&t, "caf\xc3\xa9/#not-a-comment", 8, 2);
	add_range(&t, 5, 0, 0, 4096);
	add_range(&t, 1, 3, 10, 40);
	add_range(&t, 5, 4, 100, 1);
	add_range(&t, 0, 10, 999, 1);
	add_range(&t, 4, 11, 0, 30);
	add_range(&t, 2, 12, 9, 1);
	add_range(&t, 1, 13, 0, 10);
	add_range(&t, 3, 14, 0, 20);
	add_range(&t, 7, 4000000000u, 0, 8);
	add_range(&t, 0, 15, 0, 1000);

	text = write_bytes(&t, &len);
	/* The start and the end as the format says: files numbered by
	 * first range, so a/b/c (the first read) is file 0. */
	assert_true(len > 0 && text[len - 1] == '\n');
	assert_int_equal(strlen(text), len);
	assert_true(strncmp(text,
			    "ferry-trace 1\ngeneration 42\n"
			    "f 0 4096 7 a/b/c\nr 0 0 0 4096\n"
			    "f 1 50 -1 100%25real\nr 3 1 10 40\nr 4 0 100 1\n",
			    strlen("ferry-trace 1\ngeneration 42\n"
				   "f 0 4096 7 a/b/c\nr 0 0 0 4096\n"
				   "f 1 50 -1 100%25real\nr 3 1 10 40\n"
				   "r 4 0 100 1\n")) == 0);
	assert_true(len >= 4 && strcmp(text + len - 4, "end\n") == 0);
	assert_non_null(strstr(text, "\nf 2 1000 1700000000123456789 "
				     "dir%20with%20space/a%20b\n"));
	assert_non_null(strstr(text, "\nf 3 30 5 bad\xff"
				     "byte\n"));
	assert_non_null(strstr(text, "\nf 4 10 0 new%0Aline\n"));
	assert_non_null(strstr(text, "\nf 5 20 -5000000000 "
				     "tab%09here%7F%01\n"));
	assert_non_null(strstr(text, "\nf 6 8 2 caf\xc3\xa9/#not-a-comment\n"
				     "r 4000000000 6 0 8\n"));
	assert_null(strstr(text, "never"));
	assert_null(strstr(text, "f 7 "));

	assert_int_equal(hyd_trace_parse(text, len, &back, why, sizeof(why)),
			 0);
	assert_same(&t, &back);
	assert_int_equal(back.nfiles, 7);

	/* Parsed back, the trace is in the writer's order already: a
	 * second write gives the same bytes. */
	text2 = write_bytes(&back, &len2);
	assert_int_equal(len2, len);
	assert_memory_equal(text2, text, len);

	free(text);
	free(text2);
	hyd_trace_free(&back);
	hyd_trace_free(&t);
	/* Freed is empty, and freeing again (or NULL) is harmless. */
	assert_null(t.files);
	assert_int_equal(t.nfiles, 0);
	hyd_trace_free(&t);
	hyd_trace_free(NULL);
}

/* No ranges: the header and "end" only, generation 0 written as 1. */
static void test_write_empty(void **state)
{
	struct hyd_trace t = {0}, back;
	char *text;
	size_t len;

	(void)state;
	add_file(&t, "unread", 5, 5);
	text = write_bytes(&t, &len);
	assert_string_equal(text, "ferry-trace 1\ngeneration 1\nend\n");
	accepted(text, &back);
	assert_int_equal(back.generation, 1);
	assert_int_equal(back.nfiles, 0);
	assert_int_equal(back.nranges, 0);
	free(text);
	hyd_trace_free(&back);
	hyd_trace_free(&t);
}

/* More than the writer's 64 KiB buffer, with lines of up to PATH_MAX - 1
 * bytes that all need escaping (three times as long written): every
 * flush keeps whole lines, and it all parses back. */
static void test_round_trip_large(void **state)
{
	struct hyd_trace t = {0}, back;
	char why[WHY_CAP], path[PATH_MAX], *text;
	uint64_t seed = 7;
	size_t len, i, k;

	(void)state;
	t.generation = UINT64_MAX;
	for (i = 0; i < 2000; i++) {
		size_t plen = 1 + (size_t)(tsup_splitmix64(&seed) % 300);

		for (k = 0; k < plen; k++) {
			/* bytes 1..255: escaped or not, '/' between
			 * components that never come out empty. */
			uint8_t c = (uint8_t)(1 + tsup_splitmix64(&seed) % 255);

			path[k] = k % 50 == 49 && k + 1 < plen ? '/'
				  : c == '/'		       ? 'x'
							       : (char)c;
		}
		path[plen] = '\0';
		add_file(&t, path, 1 + i, (int64_t)i - 1000);
	}
	/* Components of dots only (".", "..") are not valid names. */
	for (i = 0; i < t.nfiles; i++) {
		char *p = t.files[i].path;

		for (k = 0; p[k]; k++)
			if (p[k] == '.')
				p[k] = ',';
	}
	/* Two paths of PATH_MAX - 1 bytes in components of 255, all of
	 * them bytes the writer escapes: 12 KiB lines. */
	for (i = 0; i < 2; i++) {
		for (k = 0; k < PATH_MAX - 1; k++)
			path[k] = k % 256 == 255 ? '/' : (char)(1 + i);
		path[PATH_MAX - 1] = '\0';
		add_file(&t, path, 1u << 20, 0);
	}
	for (i = t.nfiles; i-- > 0;)
		add_range(&t, (uint32_t)i, (uint32_t)i, 0, t.files[i].size);
	for (i = 0; i < t.nfiles; i += 3)
		add_range(&t, (uint32_t)i, 5000, 0, 1);

	text = write_bytes(&t, &len);
	assert_true(len > 3 * 65536);
	assert_int_equal(hyd_trace_parse(text, len, &back, why, sizeof(why)),
			 0);
	assert_int_equal(back.nfiles, t.nfiles);
	assert_int_equal(back.generation, UINT64_MAX);
	/* The files were listed last-read-first: numbered in reverse. */
	for (i = 0; i < t.nfiles; i++) {
		const struct hyd_trace_file *g = &back.files[t.nfiles - 1 - i];

		assert_string_equal(g->path, t.files[i].path);
		assert_int_equal(g->size, t.files[i].size);
		assert_true(g->mtime_ns == t.files[i].mtime_ns);
	}
	assert_int_equal(back.nranges, t.nranges);
	for (i = 0; i < t.nranges; i++) {
		assert_int_equal(back.ranges[i].file,
				 t.nfiles - 1 - t.ranges[i].file);
		assert_int_equal(back.ranges[i].t_ms, t.ranges[i].t_ms);
		assert_int_equal(back.ranges[i].len, t.ranges[i].len);
	}
	free(text);
	hyd_trace_free(&back);
	hyd_trace_free(&t);
}

/* A write that fails says so. */
static void test_write_error(void **state)
{
	struct hyd_trace t = {0};
	int fds[2];

	(void)state;
	add_file(&t, "a", 10, 1);
	add_range(&t, 0, 0, 0, 10);
	assert_int_equal(hyd_trace_write(-1, &t), -EBADF);
	/* The read end of a pipe cannot be written. */
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(hyd_trace_write(fds[0], &t), -EBADF);
	close(fds[0]);
	close(fds[1]);
	hyd_trace_free(&t);
}

#define HEAD "ferry-trace 1\ngeneration 3\n"
#define F0 "f 0 100 5 a\n" /* line 3 */

static void test_refuse_structure(void **state)
{
	char why[8];
	struct hyd_trace t;

	(void)state;
	/* the magic */
	refused("ferry-trace 2\ngeneration 1\nend\n", 1);
	refused("ferry-trace 1 \ngeneration 1\nend\n", 1);
	refused("# a comment first\nferry-trace 1\ngeneration 1\nend\n", 1);
	refused("\nferry-trace 1\ngeneration 1\nend\n", 1);
	refused("ferry-trace\ngeneration 1\nend\n", 1);
	refused("ferry-trace 1\r\ngeneration 1\nend\n", 1);
	refused_n("", 0, 1);
	refused("\n", 1);
	/* "end": missing, text after it, no newline after it */
	refused(HEAD, 2);
	refused(HEAD F0 "r 0 0 0 1\n", 4);
	refused("ferry-trace 1\nend\n", 2); /* no generation */
	refused(HEAD "end\nr 0 0 0 1\n", 4);
	refused(HEAD "end\n\n", 4);
	refused(HEAD "end\n# late\n", 4);
	refused(HEAD "end\nend\n", 4);
	refused(HEAD "end", 3);
	refused(HEAD "end\nx", 4);
	refused("ferry-trace 1", 1);
	/* generation: first, once, >= 1 */
	refused("ferry-trace 1\nf 0 1 1 a\ngeneration 1\nend\n", 2);
	refused("ferry-trace 1\nr 0 0 0 1\ngeneration 1\nend\n", 2);
	refused("ferry-trace 1\ngeneration 0\nend\n", 2);
	refused("ferry-trace 1\ngeneration 1\ngeneration 1\nend\n", 3);
	refused("ferry-trace 1\ngeneration 1\n#\ngeneration 2\nend\n", 4);
	refused("ferry-trace 1\ngeneration\nend\n", 2);
	refused("ferry-trace 1\ngeneration \nend\n", 2);
	refused("ferry-trace 1\ngeneration 1 2\nend\n", 2);
	refused("ferry-trace 1\ngeneration 18446744073709551616\nend\n", 2);
	/* unknown lines */
	refused(HEAD "x 1\nend\n", 3);
	refused(HEAD "F 0 100 5 a\nend\n", 3);
	refused(HEAD "f\nend\n", 3);
	refused(HEAD "r\nend\n", 3);
	refused(HEAD " end\n", 3);
	refused(HEAD "end \n", 3);
	refused(HEAD "END\n", 3);
	refused(HEAD "ferry-trace 1\nend\n", 3);
	refused(HEAD " # indented comment\nend\n", 3);
	refused(HEAD "\tf 0 100 5 a\nend\n", 3);
	/* The why is cut to its cap, and no cap at all is fine. */
	memset(why, 'x', sizeof(why));
	assert_int_equal(hyd_trace_parse("bogus\n", 6, &t, why, sizeof(why)),
			 -EBADMSG);
	assert_int_equal(strlen(why), sizeof(why) - 1);
	assert_int_equal(hyd_trace_parse("bogus\n", 6, &t, NULL, 0), -EBADMSG);
}

static void test_refuse_files(void **state)
{
	(void)state;
	/* ids from 0, in order */
	refused(HEAD "f 1 100 5 a\nend\n", 3);
	refused(HEAD F0 "f 0 100 5 b\nend\n", 4);
	refused(HEAD F0 "f 2 100 5 b\nend\n", 4);
	refused(HEAD F0 "f 1 1 1 b\nf 1 1 1 c\nend\n", 5);
	/* fields: four, one space apart, decimal, no sign but mtime's '-',
	 * no leading zero */
	refused(HEAD "f 0 100 5\nend\n", 3);
	refused(HEAD "f 0 100\nend\n", 3);
	refused(HEAD "f 0\nend\n", 3);
	refused(HEAD "f \nend\n", 3);
	refused(HEAD "f  0 100 5 a\nend\n", 3);
	refused(HEAD "f 0  100 5 a\nend\n", 3);
	refused(HEAD "f 0 100  5 a\nend\n", 3);
	refused(HEAD "f 0 100 5  a\nend\n", 3);
	refused(HEAD "f 00 100 5 a\nend\n", 3);
	refused(HEAD "f 0 0100 5 a\nend\n", 3);
	refused(HEAD "f 0 100 05 a\nend\n", 3);
	refused(HEAD "f 0 100 -05 a\nend\n", 3);
	refused(HEAD "f 0 100 -0 a\nend\n", 3);
	refused(HEAD "f 0 100 - a\nend\n", 3);
	refused(HEAD "f 0 100 -- a\nend\n", 3);
	refused(HEAD "f 0 100 --5 a\nend\n", 3);
	refused(HEAD "f +0 100 5 a\nend\n", 3);
	refused(HEAD "f 0 +100 5 a\nend\n", 3);
	refused(HEAD "f 0 100 +5 a\nend\n", 3);
	refused(HEAD "f 0 -100 5 a\nend\n", 3);
	refused(HEAD "f 0 0x10 5 a\nend\n", 3);
	refused(HEAD "f 0 1e3 5 a\nend\n", 3);
	refused(HEAD "f 0 10a 5 a\nend\n", 3);
	refused(HEAD "f 0 9223372036854775808 5 a\nend\n", 3);
	refused(HEAD "f 0 100 9223372036854775808 a\nend\n", 3);
	refused(HEAD "f 0 100 123456789012345678901 a\nend\n", 3);
	/* a NUL inside a number is not a digit */
	refused_n(HEAD "f 0 1\0 5 a\nend\n",
		  sizeof(HEAD "f 0 1\0 5 a\nend\n") - 1, 3);
	refused_n(HEAD "f 0\0 1 5 a\nend\n",
		  sizeof(HEAD "f 0\0 1 5 a\nend\n") - 1, 3);
}

static void test_refuse_paths(void **state)
{
	static const char *const paths[] = {
	    "..",    "a/../b", "../a",	"a/..", "/abs",	 "a//b",  "",
	    "a/./b", ".",      "./a",	"a/.",	"a/",	 "/",	  "%2Fabs",
	    "a%2F",  "%2E%2E", "a%00b", "%00",	"%zz",	 "%4",	  "%",
	    "a%",    "a%4",    "%g0",	"%0g",	"a b",	 "a\tb",  "a\x7f",
	    "a\x01", "a\rb",   " a",	"a ",	"%2e/a", "a/%2e",
	};
	char line[512], name[300];
	size_t i;
	int n;

	(void)state;
	for (i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
		n = snprintf(line, sizeof(line), HEAD "f 0 100 5 %s\nend\n",
			     paths[i]);
		assert_true(n > 0 && (size_t)n < sizeof(line));
		refused(line, 3);
	}
	/* A component of 256 bytes; 255 is fine. */
	memset(name, 'n', 256);
	name[256] = '\0';
	snprintf(line, sizeof(line), HEAD "f 0 1 1 d/%s\nend\n", name);
	refused(line, 3);
	name[255] = '\0';
	snprintf(line, sizeof(line), HEAD "f 0 1 1 d/%s\nr 0 0 0 1\nend\n",
		 name);
	{
		struct hyd_trace t;

		accepted(line, &t);
		assert_int_equal(strlen(t.files[0].path), 257);
		hyd_trace_free(&t);
	}
}

/* A path longer than PATH_MAX - 1 bytes (its components all valid). */
static void test_refuse_long_path(void **state)
{
	char *text = malloc(16384), *p;
	size_t i;

	(void)state;
	assert_non_null(text);
	p = text + snprintf(text, 16384, HEAD "f 0 1 1 ");
	for (i = 0; i < PATH_MAX; i++)
		*p++ = i % 200 == 199 ? '/' : 'p';
	memcpy(p, "\nend\n", 6);
	refused(text, 3);
	/* One byte less is fine. */
	memmove(p - 1, p, strlen(p) + 1);
	{
		struct hyd_trace t;

		accepted(text, &t);
		assert_int_equal(strlen(t.files[0].path), PATH_MAX - 1);
		hyd_trace_free(&t);
	}
	free(text);
}

static void test_refuse_ranges(void **state)
{
	(void)state;
	/* of a declared file only */
	refused(HEAD "r 0 0 0 1\nend\n", 3);
	refused(HEAD F0 "r 0 1 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 4294967295 0 1\nend\n", 4);
	/* len >= 1, within the file's size (100) */
	refused(HEAD F0 "r 0 0 0 0\nend\n", 4);
	refused(HEAD F0 "r 0 0 90 11\nend\n", 4);
	refused(HEAD F0 "r 0 0 100 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 0 101\nend\n", 4);
	refused(HEAD F0 "r 0 0 101 0\nend\n", 4);
	refused(HEAD F0 "r 0 0 9223372036854775807 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 1 9223372036854775807\nend\n", 4);
	refused(HEAD "f 0 0 5 a\nr 0 0 0 1\nend\n", 4);
	/* fields: four numbers, one space apart, nothing after */
	refused(HEAD F0 "r 0 0 0\nend\n", 4);
	refused(HEAD F0 "r 0 0 0 1 2\nend\n", 4);
	refused(HEAD F0 "r 0 0 0 1 \nend\n", 4);
	refused(HEAD F0 "r  0 0 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 0  0 1\nend\n", 4);
	refused(HEAD F0 "r 00 0 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 00 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 0 01\nend\n", 4);
	refused(HEAD F0 "r +0 0 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 +0 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 +0 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 0 +1\nend\n", 4);
	refused(HEAD F0 "r -1 0 0 1\nend\n", 4);
	refused(HEAD F0 "r 4294967296 0 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 4294967296 0 1\nend\n", 4);
	refused(HEAD F0 "r 0 0 0 1x\nend\n", 4);
	refused_n(HEAD F0 "r 0 0 0 1\0\nend\n",
		  sizeof(HEAD F0 "r 0 0 0 1\0\nend\n") - 1, 4);
	refused_n(HEAD F0 "r 0 0 0 1\0junk\nend\n",
		  sizeof(HEAD F0 "r 0 0 0 1\0junk\nend\n") - 1, 4);
	refused_n("ferry-trace 1\ngeneration 1\0\nend\n",
		  sizeof("ferry-trace 1\ngeneration 1\0\nend\n") - 1, 2);
	refused("ferry-trace 1\ngeneration 1 \nend\n", 2);
	/* the first bad line is the one named */
	refused(HEAD F0 "r 0 0 0 1\nr 0 0 0 0\nr 0 5 0 1\nend\n", 5);
}

/* Lines up to HYD_TRACE_LINE_MAX bytes (the newline not counted). */
static void test_line_max(void **state)
{
	size_t head = strlen(HEAD), n = head + HYD_TRACE_LINE_MAX + 16;
	char *text = malloc(n + 1);
	struct hyd_trace t;

	(void)state;
	assert_non_null(text);
	memcpy(text, HEAD, head);
	text[head] = '#';
	memset(text + head + 1, 'c', HYD_TRACE_LINE_MAX - 1);
	memcpy(text + head + HYD_TRACE_LINE_MAX, "\nend\n", 6);
	accepted(text, &t);
	hyd_trace_free(&t);
	/* One byte more: too long, even for a comment, and wherever. */
	memset(text + head + 1, 'c', HYD_TRACE_LINE_MAX);
	memcpy(text + head + HYD_TRACE_LINE_MAX + 1, "\nend\n", 6);
	refused(text, 3);
	refused_n(text, head + HYD_TRACE_LINE_MAX + 1, 3);
	memcpy(text, "ferry-trace 1\n", 14);
	memset(text + 14, 'g', HYD_TRACE_LINE_MAX + 1);
	memcpy(text + 14 + HYD_TRACE_LINE_MAX + 1, "\nend\n", 6);
	refused(text, 2);
	free(text);
}

static void test_accepted(void **state)
{
	struct hyd_trace t;

	(void)state;
	/* comments and empty lines anywhere after the magic and before
	 * "end"; a negative mtime; escapes */
	accepted("ferry-trace 1\n# made by hand\n\ngeneration 7\n#\n"
		 "f 0 10 -5 a%20b/c%25d%0A\n\n# f 1 2 3 x\n"
		 "r 5 0 0 10\n#end\nend\n",
		 &t);
	assert_int_equal(t.generation, 7);
	assert_int_equal(t.nfiles, 1);
	assert_string_equal(t.files[0].path, "a b/c%d\n");
	assert_int_equal(t.files[0].size, 10);
	assert_true(t.files[0].mtime_ns == -5);
	assert_int_equal(t.nranges, 1);
	assert_int_equal(t.ranges[0].t_ms, 5);
	assert_int_equal(t.ranges[0].file, 0);
	assert_int_equal(t.ranges[0].off, 0);
	assert_int_equal(t.ranges[0].len, 10);
	hyd_trace_free(&t);

	/* files with no ranges (one empty), ranges of earlier files after
	 * later ones, bytes >= 0x80 and punctuation as themselves */
	accepted(HEAD "f 0 10 1 a\nf 1 0 -1 b\nf 2 3 0 "
		      "\xff\xfe/-/~!#$&'()*+,:;<=>?@[]^`{|}\"\\\n"
		      "r 9 2 2 1\nr 1 0 9 1\nend\n",
		 &t);
	assert_int_equal(t.generation, 3);
	assert_int_equal(t.nfiles, 3);
	assert_string_equal(t.files[1].path, "b");
	assert_int_equal(t.files[1].size, 0);
	assert_true(t.files[1].mtime_ns == -1);
	assert_string_equal(t.files[2].path,
			    "\xff\xfe/-/~!#$&'()*+,:;<=>?@[]^`{|}\"\\");
	assert_int_equal(t.nranges, 2);
	assert_int_equal(t.ranges[0].file, 2);
	assert_int_equal(t.ranges[0].off, 2);
	assert_int_equal(t.ranges[1].file, 0);
	assert_int_equal(t.ranges[1].off, 9);
	hyd_trace_free(&t);

	/* no files at all */
	accepted("ferry-trace 1\ngeneration 1\nend\n", &t);
	assert_int_equal(t.generation, 1);
	assert_int_equal(t.nfiles, 0);
	assert_int_equal(t.nranges, 0);
	hyd_trace_free(&t);

	/* every bound at its limit */
	accepted("ferry-trace 1\ngeneration 18446744073709551615\n"
		 "f 0 9223372036854775807 -9223372036854775807 big\n"
		 "f 1 1 9223372036854775807 one\n"
		 "r 4294967295 0 9223372036854775806 1\n"
		 "r 0 0 0 9223372036854775807\nr 0 1 0 1\nend\n",
		 &t);
	assert_true(t.generation == UINT64_MAX);
	assert_true(t.files[0].size == (uint64_t)INT64_MAX);
	assert_true(t.files[0].mtime_ns == -INT64_MAX);
	assert_true(t.files[1].mtime_ns == INT64_MAX);
	assert_int_equal(t.ranges[0].t_ms, UINT32_MAX);
	assert_true(t.ranges[0].off == (uint64_t)INT64_MAX - 1);
	assert_true(t.ranges[1].len == (uint64_t)INT64_MAX);
	hyd_trace_free(&t);
}

static void test_load(void **state)
{
	static const char good[] = HEAD F0 "r 0 0 0 100\nend\n";
	char dir[PATH_MAX], path[PATH_MAX + 32], why[WHY_CAP];
	struct hyd_trace t;
	int fd, saved;

	(void)state;
	assert_int_equal(tsup_tmpdir(dir, sizeof(dir), "ferry-trace"), 0);

	snprintf(path, sizeof(path), "%s/missing", dir);
	why[0] = '\0';
	assert_int_equal(hyd_trace_load(path, &t, why, sizeof(why)), -ENOENT);
	assert_true(strlen(why) > 0);
	assert_non_null(strstr(why, strerror(ENOENT)));
	assert_int_equal(t.nfiles, 0);

	/* a directory opens but does not read */
	why[0] = '\0';
	assert_int_equal(hyd_trace_load(dir, &t, why, sizeof(why)), -EISDIR);
	assert_true(strlen(why) > 0);

	snprintf(path, sizeof(path), "%s/good.trace", dir);
	tsup_write_file(path, good, sizeof(good) - 1);
	assert_int_equal(hyd_trace_load(path, &t, why, sizeof(why)), 0);
	assert_int_equal(t.generation, 3);
	assert_int_equal(t.nfiles, 1);
	assert_string_equal(t.files[0].path, "a");
	assert_int_equal(t.nranges, 1);
	assert_int_equal(t.ranges[0].len, 100);
	hyd_trace_free(&t);

	/* "-" is standard input, which stays open */
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	saved = dup(0);
	assert_true(saved >= 0);
	assert_int_equal(dup2(fd, 0), 0);
	close(fd);
	assert_int_equal(hyd_trace_load("-", &t, why, sizeof(why)), 0);
	assert_int_equal(t.nranges, 1);
	hyd_trace_free(&t);
	assert_true(fcntl(0, F_GETFD) >= 0);
	assert_int_equal(dup2(saved, 0), 0);
	close(saved);

	/* a bad file: the parser's answer */
	snprintf(path, sizeof(path), "%s/bad.trace", dir);
	tsup_write_file(path, HEAD F0 "r 0 0 0 101\nend\n",
			strlen(HEAD F0 "r 0 0 0 101\nend\n"));
	assert_int_equal(hyd_trace_load(path, &t, why, sizeof(why)), -EBADMSG);
	assert_true(strncmp(why, "line 4: ", 8) == 0);

	/* an empty file */
	snprintf(path, sizeof(path), "%s/empty.trace", dir);
	tsup_write_file(path, "", 0);
	assert_int_equal(hyd_trace_load(path, &t, why, sizeof(why)), -EBADMSG);
	assert_true(strncmp(why, "line 1: ", 8) == 0);

	/* what the writer wrote, bigger than the loader's first buffer */
	{
		struct hyd_trace w = {0};
		char name[32];
		size_t i;

		w.generation = 9;
		for (i = 0; i < 5000; i++) {
			snprintf(name, sizeof(name), "dir %zu/file%%%zu", i % 7,
				 i);
			add_file(&w, name, 1000 + i, -(int64_t)i);
			add_range(&w, (uint32_t)i, (uint32_t)i, i, 1000);
		}
		snprintf(path, sizeof(path), "%s/written.trace", dir);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		assert_int_equal(hyd_trace_write(fd, &w), 0);
		close(fd);
		assert_int_equal(hyd_trace_load(path, &t, why, sizeof(why)), 0);
		assert_int_equal(t.nfiles, 5000);
		assert_int_equal(t.nranges, 5000);
		assert_string_equal(t.files[4999].path, "dir 1/file%4999");
		assert_true(t.files[4999].mtime_ns == -4999);
		hyd_trace_free(&t);
		hyd_trace_free(&w);
	}
	tsup_rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_write_empty),
	    cmocka_unit_test(test_round_trip_large),
	    cmocka_unit_test(test_write_error),
	    cmocka_unit_test(test_refuse_structure),
	    cmocka_unit_test(test_refuse_files),
	    cmocka_unit_test(test_refuse_paths),
	    cmocka_unit_test(test_refuse_long_path),
	    cmocka_unit_test(test_refuse_ranges),
	    cmocka_unit_test(test_line_max),
	    cmocka_unit_test(test_accepted),
	    cmocka_unit_test(test_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
