/*
 * tests/unit/test_hyd_trace_rec.c — a mount's trace: the recorder
 * (CACHEDIR/trace.rec), its export to paths over a real catalog, and the
 * replay plan resolved against that catalog.
 *
 *   rec_lines       header, then one "r" line per stretch of a file:
 *                   reads that touch or overlap coalesce per ino, however
 *                   another file's reads interleave; a far read is a new
 *                   line; lines in order of first read
 *   rec_bound       max_records lines, then "cut" and nothing after
 *   rec_prev        the last record is kept as trace.prev.rec, unless the
 *                   last mount read nothing (then the older one stays)
 *   rec_prev_pushed the same when the record holds pushes ("p" lines):
 *                   only pushes, or many before the first read
 *   rec_pushed      a file pushed into the page cache is a "p" line,
 *                   apart from the file's reads
 *   rec_flusher     without close, the recorder's thread writes a read
 *                   out within a few seconds
 *   export          record -> trace: paths from the catalog, touching
 *                   ranges merged in the place and time of the first,
 *                   cut to the file's size, unknown inos and symlinks
 *                   dropped
 *   export_errors   a bad "r" line is -EBADMSG with why, no record is
 *                   -ENOENT, a last line without newline is left out,
 *                   HYD_TRACE_PREVIOUS exports trace.prev.rec; "p"
 *                   lines count as reads unless HYD_TRACE_READS_ONLY
 *   plan            paths resolved: unchanged files by ino, changed and
 *                   missing ones skipped and counted, two traces in order
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"
#include "hydrator/trace/hyd_trace.h"
#include "tsupport.h"

/* The catalog's tree (generation 7):
 *   a/ (2)  a/b/ (3)  a/x (4, 1000 B)  a/b/y (5, 5000 B)  z (6, 10 B)
 *   l -> a/x (7) */
#define GEN 7
#define INO_A 2
#define INO_B 3
#define INO_X 4
#define INO_Y 5
#define INO_Z 6
#define INO_L 7
#define MT_X INT64_C(1700000000123456789)
#define MT_Y INT64_C(1700000001000000000)
#define MT_Z INT64_C(1700000002000000007)

struct fx {
	char dir[PATH_MAX / 2];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (tsup_tmpdir(f->dir, sizeof(f->dir), "test_hyd_trace_rec") < 0) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	tsup_rm_rf(f->dir);
	free(f);
	return 0;
}

/* ---- helpers ---- */

static void path_of(const struct fx *f, const char *name, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/%s", f->dir, name);

	assert_true(n > 0 && (size_t)n < cap);
}

/* The file f->dir/name, NUL-terminated. */
static char *slurp(const struct fx *f, const char *name)
{
	char p[PATH_MAX];
	size_t len;
	char *buf;

	path_of(f, name, p, sizeof(p));
	buf = tsup_read_file(p, &len);
	buf[len] = '\0';
	return buf;
}

/* The next line of *cur (without its newline) into line[cap]; 0 at the
 * end. Every line the recorder writes ends in a newline. */
static int next_line(char **cur, char *line, size_t cap)
{
	char *nl;
	size_t n;

	if (**cur == '\0')
		return 0;
	nl = strchr(*cur, '\n');
	assert_non_null(nl);
	n = (size_t)(nl - *cur);
	assert_true(n < cap);
	memcpy(line, *cur, n);
	line[n] = '\0';
	*cur = nl + 1;
	return 1;
}

/* Check the header: magic, "start MS" near now, "g gen". */
static void expect_header(char **cur, uint64_t gen)
{
	char line[256], *end;
	struct timespec now;
	long long now_ms, ms;
	unsigned long long g;

	assert_int_equal(next_line(cur, line, sizeof(line)), 1);
	assert_string_equal(line, HYD_TRACE_REC_MAGIC);
	assert_int_equal(next_line(cur, line, sizeof(line)), 1);
	assert_memory_equal(line, "start ", 6);
	errno = 0;
	ms = strtoll(line + 6, &end, 10);
	assert_int_equal(errno, 0);
	assert_true(end != line + 6 && *end == '\0');
	clock_gettime(CLOCK_REALTIME, &now);
	now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	assert_true(ms <= now_ms && ms > now_ms - 600000);
	assert_int_equal(next_line(cur, line, sizeof(line)), 1);
	assert_memory_equal(line, "g ", 2);
	g = strtoull(line + 2, &end, 10);
	assert_true(*end == '\0');
	assert_int_equal(g, gen);
}

/* Check the next line is "KIND T ino off len" (KIND 'r' a read, 'p' a
 * push) with T a number of ms (under a minute: the test is quick). */
static void expect_line(char **cur, char kind, uint64_t ino, uint64_t off,
			uint64_t len)
{
	char line[256], *p, *end;
	unsigned long long v[4];
	int i;

	assert_int_equal(next_line(cur, line, sizeof(line)), 1);
	assert_int_equal(line[0], kind);
	assert_int_equal(line[1], ' ');
	p = line + 2;
	for (i = 0; i < 4; i++) {
		assert_true(*p >= '0' && *p <= '9');
		errno = 0;
		v[i] = strtoull(p, &end, 10);
		assert_int_equal(errno, 0);
		assert_true(end != p);
		assert_true(*end == (i < 3 ? ' ' : '\0'));
		p = end + (i < 3);
	}
	assert_true(v[0] < 60000);
	assert_int_equal(v[1], ino);
	assert_int_equal(v[2], off);
	assert_int_equal(v[3], len);
}

static void expect_read(char **cur, uint64_t ino, uint64_t off, uint64_t len)
{
	expect_line(cur, 'r', ino, off, len);
}

static void add_inode(cat_writer *w, uint64_t ino, enum cat_kind kind,
		      uint64_t size, int64_t mtime_ns, const char *target)
{
	struct cat_inode in;

	memset(&in, 0, sizeof(in));
	in.ino = ino;
	in.kind = kind;
	in.mode = (uint32_t)cat_kind_ifmt(kind) | (kind == CAT_LNK   ? 0777u
						   : kind == CAT_DIR ? 0755u
								     : 0644u);
	in.nlink = kind == CAT_DIR ? 2 : 1;
	in.size = size;
	in.mtime_ns = mtime_ns;
	in.ctime_ns = mtime_ns;
	assert_int_equal(
	    cat_writer_add_inode(w, &in, target, target ? strlen(target) : 0),
	    0);
}

static void add_dirent(cat_writer *w, uint64_t parent, const char *name,
		       uint64_t ino)
{
	assert_int_equal(
	    cat_writer_add_dirent(w, parent, name, strlen(name), ino), 0);
}

/* CACHEDIR/catalogs/7.db with the tree above; its path into catpath. */
static void write_catalog(const struct fx *f, char *catpath, size_t cap)
{
	char d[PATH_MAX];
	struct cat_meta m;
	cat_writer *w = NULL;
	int n;

	path_of(f, "catalogs", d, sizeof(d));
	assert_int_equal(mkdir(d, 0700), 0);
	n = snprintf(catpath, cap, "%s/%d.db", d, GEN);
	assert_true(n > 0 && (size_t)n < cap);
	memset(&m, 0, sizeof(m));
	m.generation = GEN;
	chunk_params_default(&m.params);
	assert_int_equal(cat_writer_open(catpath, &m, &w), 0);
	add_inode(w, CAT_ROOT_INO, CAT_DIR, 0, 0, NULL);
	add_inode(w, INO_A, CAT_DIR, 0, 0, NULL);
	add_inode(w, INO_B, CAT_DIR, 0, 0, NULL);
	add_inode(w, INO_X, CAT_REG, 1000, MT_X, NULL);
	add_inode(w, INO_Y, CAT_REG, 5000, MT_Y, NULL);
	add_inode(w, INO_Z, CAT_REG, 10, MT_Z, NULL);
	add_inode(w, INO_L, CAT_LNK, 3, 0, "a/x");
	add_dirent(w, CAT_ROOT_INO, "a", INO_A);
	add_dirent(w, CAT_ROOT_INO, "z", INO_Z);
	add_dirent(w, CAT_ROOT_INO, "l", INO_L);
	add_dirent(w, INO_A, "b", INO_B);
	add_dirent(w, INO_A, "x", INO_X);
	add_dirent(w, INO_B, "y", INO_Y);
	assert_int_equal(cat_writer_commit(w), 0);
}

static void write_text(const struct fx *f, const char *name, const char *s)
{
	char p[PATH_MAX];

	path_of(f, name, p, sizeof(p));
	tsup_write_file(p, s, strlen(s));
}

static void expect_range(const struct hyd_trace *t, size_t i, uint32_t file,
			 uint32_t t_ms, uint64_t off, uint64_t len)
{
	assert_true(i < t->nranges);
	assert_int_equal(t->ranges[i].file, file);
	assert_int_equal(t->ranges[i].t_ms, t_ms);
	assert_int_equal(t->ranges[i].off, off);
	assert_int_equal(t->ranges[i].len, len);
}

static void expect_step(const struct hyd_trace_plan *p, size_t i, uint64_t ino,
			uint64_t off, uint64_t len)
{
	assert_true(i < p->nsteps);
	assert_int_equal(p->steps[i].ino, ino);
	assert_int_equal(p->steps[i].off, off);
	if (ino) /* a skipped step's length is not used */
		assert_int_equal(p->steps[i].len, len);
}

/* ---- the recorder ---- */

static void test_rec_lines(void **state)
{
	struct fx *f = *state;
	hyd_trace_rec *rec = NULL;
	char *buf, *cur;

	assert_int_equal(hyd_trace_rec_open(f->dir, 5, 0, &rec), 0);
	assert_non_null(rec);
	hyd_trace_rec_read(rec, 10, 0, 4096);
	hyd_trace_rec_read(rec, 10, 4096, 4096);  /* touches: 0..8192 */
	hyd_trace_rec_read(rec, 10, 2048, 4096);  /* inside it */
	hyd_trace_rec_read(rec, 11, 0, 100);	  /* another file */
	hyd_trace_rec_read(rec, 10, 6000, 4000);  /* overlaps: 0..10000 */
	hyd_trace_rec_read(rec, 11, 100, 100);	  /* 11 goes on: 0..200 */
	hyd_trace_rec_read(rec, 10, 10000, 2288); /* 10 goes on: 0..12288 */
	hyd_trace_rec_read(rec, 10, 0, 0);	  /* empty: nothing */
	hyd_trace_rec_read(rec, 10, UINT64_C(1) << 30, 4096); /* far */
	hyd_trace_rec_read(rec, 10, 0, 512); /* the old stretch: new line */
	hyd_trace_rec_read(NULL, 10, 0, 1);  /* no record: a no-op */
	hyd_trace_rec_close(rec);
	hyd_trace_rec_close(NULL);

	buf = cur = slurp(f, HYD_TRACE_REC_NAME);
	expect_header(&cur, 5);
	expect_read(&cur, 10, 0, 12288);
	expect_read(&cur, 11, 0, 200);
	expect_read(&cur, 10, UINT64_C(1) << 30, 4096);
	expect_read(&cur, 10, 0, 512);
	assert_string_equal(cur, "");
	free(buf);
}

static void test_rec_bound(void **state)
{
	struct fx *f = *state;
	hyd_trace_rec *rec = NULL;
	char *buf, *cur, line[64];

	assert_int_equal(hyd_trace_rec_open(f->dir, 2, 3, &rec), 0);
	hyd_trace_rec_read(rec, 1, 0, 10);
	hyd_trace_rec_read(rec, 2, 0, 10);
	hyd_trace_rec_read(rec, 1, 10, 10); /* coalesced: no new line */
	hyd_trace_rec_read(rec, 3, 0, 10);
	hyd_trace_rec_read(rec, 4, 0, 10); /* the fourth line: cut */
	hyd_trace_rec_read(rec, 5, 0, 10);
	hyd_trace_rec_read(rec, 1, 20, 10); /* past the cut, even coalesced */
	assert_int_equal(hyd_trace_rec_flush(rec), 0);
	hyd_trace_rec_read(rec, 6, 0, 10);
	hyd_trace_rec_close(rec);

	buf = cur = slurp(f, HYD_TRACE_REC_NAME);
	expect_header(&cur, 2);
	expect_read(&cur, 1, 0, 20);
	expect_read(&cur, 2, 0, 10);
	expect_read(&cur, 3, 0, 10);
	assert_int_equal(next_line(&cur, line, sizeof(line)), 1);
	assert_string_equal(line, "cut");
	assert_string_equal(cur, "");
	free(buf);
}

static void test_rec_prev(void **state)
{
	struct fx *f = *state;
	hyd_trace_rec *rec = NULL;
	char prev[PATH_MAX], *first, *third, *buf, *cur;
	struct stat st;

	path_of(f, HYD_TRACE_PREV_NAME, prev, sizeof(prev));
	/* the first mount reads */
	assert_int_equal(hyd_trace_rec_open(f->dir, 1, 0, &rec), 0);
	hyd_trace_rec_read(rec, 42, 0, 100);
	hyd_trace_rec_close(rec);
	first = slurp(f, HYD_TRACE_REC_NAME);
	assert_non_null(strstr(first, "\nr "));
	assert_int_equal(stat(prev, &st), -1);

	/* the second: the first's record becomes the previous one */
	assert_int_equal(hyd_trace_rec_open(f->dir, 2, 0, &rec), 0);
	buf = slurp(f, HYD_TRACE_PREV_NAME);
	assert_string_equal(buf, first);
	free(buf);
	hyd_trace_rec_close(rec); /* read nothing */
	buf = cur = slurp(f, HYD_TRACE_REC_NAME);
	expect_header(&cur, 2);
	assert_string_equal(cur, "");
	free(buf);

	/* the third: the second read nothing, so the first stays previous */
	assert_int_equal(hyd_trace_rec_open(f->dir, 3, 0, &rec), 0);
	buf = slurp(f, HYD_TRACE_PREV_NAME);
	assert_string_equal(buf, first);
	free(buf);
	hyd_trace_rec_read(rec, 43, 8, 8);
	hyd_trace_rec_close(rec);
	third = cur = slurp(f, HYD_TRACE_REC_NAME);
	expect_header(&cur, 3);
	expect_read(&cur, 43, 8, 8);
	assert_string_equal(cur, "");

	/* the fourth: the third read, so it pushes the first out */
	assert_int_equal(hyd_trace_rec_open(f->dir, 4, 0, &rec), 0);
	hyd_trace_rec_close(rec);
	buf = slurp(f, HYD_TRACE_PREV_NAME);
	assert_string_equal(buf, third);
	free(buf);
	free(third);
	free(first);
}

/* Pushes count as reads: a record that begins with many "p" lines (a
 * push job outruns the read that queued it, whose line comes after its
 * reply) is still the previous one at the next mount. */
static void test_rec_prev_pushed(void **state)
{
	struct fx *f = *state;
	hyd_trace_rec *rec = NULL;
	char *first, *buf;
	uint64_t ino;

	assert_int_equal(hyd_trace_rec_open(f->dir, 1, 0, &rec), 0);
	for (ino = 1000; ino < 1300; ino++)
		hyd_trace_rec_pushed(rec, ino, 123456);
	hyd_trace_rec_read(rec, 999, 0, 4096);
	hyd_trace_rec_close(rec);
	first = slurp(f, HYD_TRACE_REC_NAME);
	assert_true(strlen(first) > 4096);

	assert_int_equal(hyd_trace_rec_open(f->dir, 2, 0, &rec), 0);
	hyd_trace_rec_pushed(rec, 7, 10); /* pushes only */
	hyd_trace_rec_close(rec);
	buf = slurp(f, HYD_TRACE_PREV_NAME);
	assert_string_equal(buf, first);
	free(buf);
	free(first);
	first = slurp(f, HYD_TRACE_REC_NAME);

	assert_int_equal(hyd_trace_rec_open(f->dir, 3, 0, &rec), 0);
	hyd_trace_rec_close(rec);
	buf = slurp(f, HYD_TRACE_PREV_NAME);
	assert_string_equal(buf, first);
	free(buf);
	free(first);
}

static void test_rec_pushed(void **state)
{
	struct fx *f = *state;
	hyd_trace_rec *rec = NULL;
	char *buf, *cur;

	assert_int_equal(hyd_trace_rec_open(f->dir, 6, 0, &rec), 0);
	hyd_trace_rec_read(rec, 30, 0, 100);
	hyd_trace_rec_pushed(rec, 31, 5000);
	hyd_trace_rec_read(rec, 31, 0, 10); /* a read is not a push */
	hyd_trace_rec_read(rec, 30, 100, 100);
	hyd_trace_rec_pushed(rec, 32, 0); /* an empty file: nothing */
	hyd_trace_rec_pushed(NULL, 33, 1);
	hyd_trace_rec_close(rec);

	buf = cur = slurp(f, HYD_TRACE_REC_NAME);
	expect_header(&cur, 6);
	expect_read(&cur, 30, 0, 200);
	expect_line(&cur, 'p', 31, 0, 5000);
	expect_read(&cur, 31, 0, 10);
	assert_string_equal(cur, "");
	free(buf);
}

static void test_rec_flusher(void **state)
{
	struct fx *f = *state;
	hyd_trace_rec *rec = NULL;
	uint64_t t0;
	char *buf, *cur;
	int seen = 0;

	assert_int_equal(hyd_trace_rec_open(f->dir, 9, 0, &rec), 0);
	hyd_trace_rec_read(rec, 77, 0, 4096);
	/* No read comes after it: only the recorder's thread can write it
	 * (about a second on); allow three. */
	t0 = base_now_ns();
	while (!seen && base_now_ns() - t0 < UINT64_C(3000000000)) {
		buf = slurp(f, HYD_TRACE_REC_NAME);
		seen = strstr(buf, "\nr ") != NULL;
		free(buf);
		if (!seen)
			usleep(20000);
	}
	assert_true(seen);
	buf = cur = slurp(f, HYD_TRACE_REC_NAME);
	expect_header(&cur, 9);
	expect_read(&cur, 77, 0, 4096);
	assert_string_equal(cur, "");
	free(buf);
	hyd_trace_rec_close(rec);
}

/* ---- the export ---- */

/* The index of path among t's files (asserts it is there). */
static uint32_t file_index(const struct hyd_trace *t, const char *path)
{
	size_t i;

	for (i = 0; i < t->nfiles; i++)
		if (strcmp(t->files[i].path, path) == 0)
			return (uint32_t)i;
	fail_msg("%s is not among the trace's files", path);
	return 0;
}

static void test_export(void **state)
{
	struct fx *f = *state;
	char catpath[PATH_MAX], why[256];
	struct hyd_trace t;
	uint32_t ix, iy, iz;

	write_catalog(f, catpath, sizeof(catpath));
	/* y's reads touch (0..100, 100..200): one range, in the first's
	 * place and time; z's too, though the later read comes first in
	 * the file (5..10 at 6, then 0..5 at 15: 0..10 at 6, second) */
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC
		   "\nstart 1700000000000\ng 7\n"
		   "r 5 5 0 100\n"	/* y */
		   "r 6 6 5 5\n"	/* z */
		   "r 7 4 0 1000\n"	/* x */
		   "r 9 5 100 100\n"	/* y, touching */
		   "r 11 5 4000 2000\n" /* y, past its end */
		   "r 12 99 0 10\n"	/* no such ino */
		   "r 13 7 0 3\n"	/* the symlink */
		   "r 15 6 0 5\n"	/* z, before it */
		   "r 16 5 6000 10\n"	/* y, past its end */
		   "cut\n");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)), 0);
	assert_int_equal(t.generation, GEN);
	assert_int_equal(t.nfiles, 3);
	/* the files in whichever order the walk found them */
	ix = file_index(&t, "a/x");
	iy = file_index(&t, "a/b/y");
	iz = file_index(&t, "z");
	assert_int_equal(t.files[ix].size, 1000);
	assert_true(t.files[ix].mtime_ns == MT_X);
	assert_int_equal(t.files[iy].size, 5000);
	assert_true(t.files[iy].mtime_ns == MT_Y);
	assert_int_equal(t.files[iz].size, 10);
	assert_true(t.files[iz].mtime_ns == MT_Z);
	assert_int_equal(t.nranges, 4);
	expect_range(&t, 0, iy, 5, 0, 200);
	expect_range(&t, 1, iz, 6, 0, 10);
	expect_range(&t, 2, ix, 7, 0, 1000);
	expect_range(&t, 3, iy, 11, 4000, 1000);
	hyd_trace_free(&t);
}

static void test_export_errors(void **state)
{
	struct fx *f = *state;
	char catpath[PATH_MAX], why[256];
	struct hyd_trace t;

	write_catalog(f, catpath, sizeof(catpath));
	/* no record */
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)),
			 -ENOENT);
	assert_int_equal(
	    hyd_trace_export(f->dir, HYD_TRACE_PREVIOUS, &t, why, sizeof(why)),
	    -ENOENT);
	assert_true(why[0] != '\0');

	/* a bad read line */
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 1 4 0 10\n"
				       "r 2 4 x 10\n");
	why[0] = '\0';
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)),
			 -EBADMSG);
	assert_true(why[0] != '\0');
	assert_null(strchr(why, '\n'));
	/* a read of no bytes, trailing junk, a time past 32 bits */
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 1 4 0 0\n");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)),
			 -EBADMSG);
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 1 4 0 10 x\n");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)),
			 -EBADMSG);
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 4294967296 4 0 10\n");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)),
			 -EBADMSG);
	/* not a record */
	write_text(f, HYD_TRACE_REC_NAME, "ferry-trace 1\nr 1 4 0 10\n");
	why[0] = '\0';
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)),
			 -EBADMSG);
	assert_true(why[0] != '\0');

	/* a last line cut short (a crash while it was written) is left out,
	 * even a bad one */
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 3 4 0 10\nr 4 6 0 1");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)), 0);
	assert_int_equal(t.nfiles, 1);
	assert_string_equal(t.files[0].path, "a/x");
	assert_int_equal(t.nranges, 1);
	expect_range(&t, 0, 0, 3, 0, 10);
	hyd_trace_free(&t);
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 3 4 0 10\nr 4 6 x");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)), 0);
	assert_int_equal(t.nranges, 1);
	hyd_trace_free(&t);

	/* a push counts as a read of the whole file, unless reads only */
	write_text(f, HYD_TRACE_REC_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 3 4 0 10\n"
				       "p 4 5 0 5000\n");
	assert_int_equal(hyd_trace_export(f->dir, 0, &t, why, sizeof(why)), 0);
	assert_int_equal(t.nfiles, 2);
	assert_int_equal(t.nranges, 2);
	expect_range(&t, 0, file_index(&t, "a/x"), 3, 0, 10);
	expect_range(&t, 1, file_index(&t, "a/b/y"), 4, 0, 5000);
	hyd_trace_free(&t);
	assert_int_equal(hyd_trace_export(f->dir, HYD_TRACE_READS_ONLY, &t, why,
					  sizeof(why)),
			 0);
	assert_int_equal(t.nfiles, 1);
	assert_string_equal(t.files[0].path, "a/x");
	assert_int_equal(t.nranges, 1);
	expect_range(&t, 0, 0, 3, 0, 10);
	hyd_trace_free(&t);

	/* the previous mount's record, not this one's */
	write_text(f, HYD_TRACE_PREV_NAME,
		   HYD_TRACE_REC_MAGIC "\nstart 1\ng 7\nr 8 6 2 5\n");
	assert_int_equal(
	    hyd_trace_export(f->dir, HYD_TRACE_PREVIOUS, &t, why, sizeof(why)),
	    0);
	assert_int_equal(t.nfiles, 1);
	assert_string_equal(t.files[0].path, "z");
	assert_true(t.files[0].mtime_ns == MT_Z);
	assert_int_equal(t.nranges, 1);
	expect_range(&t, 0, 0, 8, 2, 5);
	hyd_trace_free(&t);
}

/* ---- the plan ---- */

static void test_plan(void **state)
{
	struct fx *f = *state;
	char catpath[PATH_MAX];
	char px[] = "a/x", py[] = "a/b/y", pq[] = "nope/q", pa[] = "a";
	char pz[] = "z";
	struct hyd_trace_file f1[] = {
	    {.path = px, .size = 1000, .mtime_ns = MT_X},
	    {.path = py, .size = 5000, .mtime_ns = MT_Y + 1}, /* changed */
	    {.path = pq, .size = 10, .mtime_ns = MT_Z},	      /* missing */
	    {.path = pa, .size = 0, .mtime_ns = 0},	      /* a dir */
	};
	struct hyd_trace_range r1[] = {
	    {.file = 0, .t_ms = 1, .off = 0, .len = 100},
	    {.file = 1, .t_ms = 2, .off = 0, .len = 200},
	    {.file = 2, .t_ms = 3, .off = 0, .len = 10},
	    {.file = 0, .t_ms = 4, .off = 900, .len = 600}, /* past the end */
	    {.file = 3, .t_ms = 5, .off = 0, .len = 1},
	};
	struct hyd_trace_file f2[] = {
	    {.path = pz, .size = 10, .mtime_ns = MT_Z},
	    {.path = px, .size = 1000, .mtime_ns = MT_X},
	};
	struct hyd_trace_range r2[] = {
	    {.file = 1, .t_ms = 0, .off = 0, .len = 1000},
	    {.file = 0, .t_ms = 1, .off = 0, .len = 10},
	};
	struct hyd_trace t1 = {.generation = GEN,
			       .files = f1,
			       .nfiles = 4,
			       .ranges = r1,
			       .nranges = 5};
	struct hyd_trace t2 = {.generation = GEN,
			       .files = f2,
			       .nfiles = 2,
			       .ranges = r2,
			       .nranges = 2};
	const struct hyd_trace *one[] = {&t1}, *both[] = {&t1, &t2};
	struct hyd_trace_plan p;
	cat_reader *r = NULL;

	write_catalog(f, catpath, sizeof(catpath));
	assert_int_equal(cat_reader_open(catpath, &r), 0);

	assert_int_equal(hyd_trace_plan_make(r, one, 1, &p), 0);
	assert_int_equal(p.files, 4);
	assert_int_equal(p.missing, 2);
	assert_int_equal(p.changed, 1);
	assert_int_equal(p.nsteps, 5);
	expect_step(&p, 0, INO_X, 0, 100);
	expect_step(&p, 1, 0, 0, 0);
	expect_step(&p, 2, 0, 0, 0);
	expect_step(&p, 3, INO_X, 900, 100);
	expect_step(&p, 4, 0, 0, 0);
	assert_int_equal(p.bytes, 200);
	hyd_trace_plan_free(&p);
	assert_null(p.steps);

	assert_int_equal(hyd_trace_plan_make(r, both, 2, &p), 0);
	assert_int_equal(p.files, 6);
	assert_int_equal(p.missing, 2);
	assert_int_equal(p.changed, 1);
	assert_int_equal(p.nsteps, 7);
	expect_step(&p, 0, INO_X, 0, 100);
	expect_step(&p, 3, INO_X, 900, 100);
	expect_step(&p, 4, 0, 0, 0);
	expect_step(&p, 5, INO_X, 0, 1000);
	expect_step(&p, 6, INO_Z, 0, 10);
	assert_int_equal(p.bytes, 200 + 1000 + 10);
	hyd_trace_plan_free(&p);

	/* no traces: an empty plan */
	assert_int_equal(hyd_trace_plan_make(r, NULL, 0, &p), 0);
	assert_int_equal(p.nsteps, 0);
	assert_int_equal(p.files, 0);
	assert_int_equal(p.bytes, 0);
	hyd_trace_plan_free(&p);
	cat_reader_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_rec_lines, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rec_bound, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rec_prev, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rec_prev_pushed, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_rec_pushed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rec_flusher, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_export, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_export_errors, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_plan, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
