/*
 * tests/unit/test_cat_overlay.c — pending manifests (catalog format 2),
 * the destination's manifest overlay and the manifests wire format: a
 * pending file reads -EAGAIN until a checked body is stored, a body that
 * is wrong in any one way stores nothing, a tampered overlay row is
 * refused like a tampered catalog row, and the tree digest does not
 * depend on where manifests live.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "tsupport.h"

/* The tree: / (1) holds a (2, 3000 bytes, pending), b (3, 10 bytes, in
 * the catalog), d/ (4), and c (5, 0 bytes, pending), e (6, 5000 bytes,
 * pending). */
#define A_SIZE 3000u
#define E_SIZE 5000u

struct fx {
	char dir[PATH_MAX / 2];
	char cat[PATH_MAX];
	char ov[PATH_MAX];
	uint8_t a[A_SIZE], e[E_SIZE];
	cat_reader *r;
	cat_overlay *o;
};

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/test_cat_overlay.XXXXXX",
		 tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->cat, sizeof(f->cat), "%s/1.db", f->dir);
	snprintf(f->ov, sizeof(f->ov), "%s/1.overlay.db", f->dir);
	for (size_t i = 0; i < A_SIZE; i++)
		f->a[i] = (uint8_t)(i * 7);
	for (size_t i = 0; i < E_SIZE; i++)
		f->e[i] = (uint8_t)(i * 13 + 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	cat_overlay_close(f->o);
	cat_reader_close(f->r);
	tsup_rm_rf(f->dir);
	free(f);
	return 0;
}

static void meta_of(struct cat_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->generation = 3;
	m->parent_generation = 2;
	m->created_ns = 1;
	/* small chunks so a few thousand bytes make several */
	m->params.min = 256;
	m->params.avg = 1024;
	m->params.max = 2048;
}

static void inode(cat_writer *w, uint64_t ino, enum cat_kind k, uint32_t mode,
		  uint64_t size)
{
	struct cat_inode in = {.ino = ino,
			       .kind = k,
			       .mode = mode,
			       .size = size,
			       .nlink = k == CAT_DIR ? 3 : 1,
			       .mtime_ns = (int64_t)ino * 1000,
			       .ctime_ns = (int64_t)ino * 2000};

	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
}

/* Chunks of buf cut at fixed points (what a manifest says is up to the
 * source; the reader only checks shape). */
static size_t cut(const uint8_t *buf, size_t len, struct cat_chunk *v)
{
	size_t n = 0, off = 0;

	while (off < len) {
		size_t l = len - off > 1500 ? 1500 : len - off;

		v[n].off = off;
		v[n].len = (uint32_t)l;
		assert_int_equal(chunk_id_compute(buf + off, l, &v[n].id), 0);
		off += l;
		n++;
	}
	return n;
}

/* Build the catalog; with_pending 0 writes every manifest into it. */
static void build(struct fx *f, const char *path, int with_pending,
		  struct cat_meta *ret_meta)
{
	struct cat_chunk v[8];
	struct cat_meta m;
	cat_writer *w = NULL;
	chunk_id idb;
	size_t n;

	meta_of(&m);
	assert_int_equal(cat_writer_open(path, &m, &w), 0);
	inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0);
	inode(w, 2, CAT_REG, S_IFREG | 0644, A_SIZE);
	inode(w, 3, CAT_REG, S_IFREG | 0644, 10);
	inode(w, 4, CAT_DIR, S_IFDIR | 0755, 0);
	inode(w, 5, CAT_REG, S_IFREG | 0600, 0);
	inode(w, 6, CAT_REG, S_IFREG | 0600, E_SIZE);
	assert_int_equal(cat_writer_add_dirent(w, 1, "a", 1, 2), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "b", 1, 3), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "d", 1, 4), 0);
	assert_int_equal(cat_writer_add_dirent(w, 4, "c", 1, 5), 0);
	assert_int_equal(cat_writer_add_dirent(w, 4, "e", 1, 6), 0);
	assert_int_equal(chunk_id_compute("0123456789", 10, &idb), 0);
	assert_int_equal(cat_writer_add_chunk(w, 3, 0, 10, &idb), 0);
	if (with_pending) {
		assert_int_equal(cat_writer_add_pending(w, 2), 0);
		assert_int_equal(cat_writer_add_pending(w, 2), -EEXIST);
		assert_int_equal(cat_writer_add_pending(w, 5), 0);
		assert_int_equal(cat_writer_add_pending(w, 6), 0);
	} else {
		n = cut(f->a, A_SIZE, v);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(cat_writer_add_chunk(w, 2, v[i].off,
							      v[i].len,
							      &v[i].id),
					 0);
		n = cut(f->e, E_SIZE, v);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(cat_writer_add_chunk(w, 6, v[i].off,
							      v[i].len,
							      &v[i].id),
					 0);
	}
	assert_int_equal(cat_writer_commit(w), 0);
	if (ret_meta) {
		cat_reader *r = NULL;

		assert_int_equal(cat_reader_open(path, &r), 0);
		cat_reader_meta(r, ret_meta);
		cat_reader_close(r);
	}
}

static void open_all(struct fx *f)
{
	assert_int_equal(cat_reader_open(f->cat, &f->r), 0);
	assert_int_equal(cat_overlay_open(f->ov, &f->o), 0);
	assert_int_equal(cat_reader_attach_overlay(f->r, f->ov), 0);
	assert_int_equal(cat_reader_attach_overlay(f->r, f->ov), -EEXIST);
}

/* A body with records for the given inos (a and e get their real
 * manifests, c its empty one). */
static void body_of(struct fx *f, struct cat_buf *b, uint64_t first,
		    uint64_t last, const uint64_t *inos, size_t n)
{
	struct cat_chunk v[8];
	size_t k;

	assert_int_equal(cat_mwire_begin(b, 3, first, last), 0);
	for (size_t i = 0; i < n; i++) {
		if (inos[i] == 2) {
			k = cut(f->a, A_SIZE, v);
			assert_int_equal(
			    cat_mwire_add(b, 2, A_SIZE, (uint32_t)k, v), 0);
		} else if (inos[i] == 6) {
			k = cut(f->e, E_SIZE, v);
			assert_int_equal(
			    cat_mwire_add(b, 6, E_SIZE, (uint32_t)k, v), 0);
		} else {
			assert_int_equal(cat_mwire_add(b, inos[i], 0, 0, NULL),
					 0);
		}
	}
}

static void test_pending_reads_eagain(void **state)
{
	struct fx *f = *state;
	struct cat_chunk c[8];
	struct cat_meta m;
	uint64_t miss[8];
	size_t n;

	build(f, f->cat, 1, &m);
	assert_int_equal(m.pending, 3);
	assert_int_equal(cat_reader_open(f->cat, &f->r), 0);
	/* no overlay yet: pending files are missing, others read */
	assert_int_equal(cat_chunks_range(f->r, 2, 0, 100, c, 8, &n), -EAGAIN);
	assert_int_equal(cat_manifest_state(f->r, 2), CAT_MANIFEST_MISSING);
	assert_int_equal(cat_manifest_state(f->r, 3), CAT_MANIFEST_CATALOG);
	assert_int_equal(cat_manifest_state(f->r, 4), -EINVAL);
	assert_int_equal(cat_chunks_range(f->r, 3, 0, 10, c, 8, &n), 0);
	assert_int_equal(n, 1);
	/* an empty pending file has nothing to read either way */
	assert_int_equal(cat_chunks_range(f->r, 5, 0, 10, c, 8, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(cat_pending_missing(f->r, 0, miss, 8, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(miss[0], 2);
	assert_int_equal(miss[2], 6);
	assert_int_equal(cat_pending_missing(f->r, 2, miss, 1, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(miss[0], 5);
}

static int count_cb(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	(void)ino;
	(void)c;
	(*(size_t *)ctx)++;
	return 0;
}

/* A body that is right: stored, with `files` records new to the overlay
 * and `missing` pending files still missing after it. */
static void expect_stored(struct fx *f, struct cat_buf *b, uint64_t first,
			  uint64_t last, size_t files, size_t missing)
{
	uint64_t miss[8];
	size_t n, got = 99;

	assert_int_equal(
	    cat_overlay_put_wire(f->o, f->r, first, last, b->p, b->n, &got), 0);
	assert_int_equal(got, files);
	assert_int_equal(cat_pending_missing(f->r, 0, miss, 8, &n), 0);
	assert_int_equal(n, missing);
}

static void test_overlay_put_and_read(void **state)
{
	struct fx *f = *state;
	struct cat_chunk c[8], want[8];
	struct cat_buf b = {0};
	uint64_t all[] = {2, 5, 6}, miss[8];
	size_t n, files, each = 0;
	sqlite3 *db = NULL;

	build(f, f->cat, 1, NULL);
	open_all(f);
	assert_int_equal(cat_chunks_each(f->r, count_cb, &each), 0);
	assert_int_equal(each, 1); /* b's chunk only */
	/* one file on its own, as a read asks for it */
	body_of(f, &b, 6, 6, all + 2, 1);
	assert_int_equal(
	    cat_overlay_put_wire(f->o, f->r, 6, 6, b.p, b.n, &files), 0);
	assert_int_equal(files, 1);
	assert_int_equal(cat_manifest_state(f->r, 6), CAT_MANIFEST_LOCAL);
	assert_int_equal(cat_chunks_range(f->r, 6, 1600, 100, c, 8, &n), 0);
	assert_int_equal(cut(f->e, E_SIZE, want), 4);
	assert_int_equal(n, 1);
	assert_int_equal(c[0].off, 1500);
	assert_memory_equal(&c[0].id, &want[1].id, CHUNK_ID_LEN);
	assert_int_equal(cat_pending_missing(f->r, 0, miss, 8, &n), 0);
	assert_int_equal(n, 2);
	/* a segment with all three: e is kept, a and c are added */
	body_of(f, &b, 1, 1024, all, 3);
	expect_stored(f, &b, 1, 1024, 2, 0);
	assert_int_equal(cat_chunks_range(f->r, 2, 0, A_SIZE, c, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(c[1].off + c[1].len, A_SIZE);
	assert_int_equal(cat_manifest_state(f->r, 5), CAT_MANIFEST_LOCAL);
	each = 0;
	assert_int_equal(cat_chunks_each(f->r, count_cb, &each), 0);
	assert_int_equal(each, 1 + 2 + 4);
	/* overlay rows for a file that is not pending never count */
	assert_int_equal(sqlite3_open(f->ov, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "INSERT INTO file VALUES(3,0);"
				      "INSERT INTO chunk VALUES(3,0,5,"
				      "zeroblob(32))",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	each = 0;
	assert_int_equal(cat_chunks_each(f->r, count_cb, &each), 0);
	assert_int_equal(each, 1 + 2 + 4);
	cat_buf_fini(&b);
}

/* Snapshots (cat_reader_snapshots): a manifest stored by the overlay's
 * writer while a snapshot is open is found at once, not missed for the
 * older view ("missing" is asked again in a fresh one); what was found
 * stays found; and off again, every query is its own. */
static void test_snapshot_sees_new_manifests(void **state)
{
	struct fx *f = *state;
	struct cat_chunk c[8];
	struct cat_buf b = {0};
	uint64_t all[] = {2, 5, 6}, one[] = {6};
	cat_reader *r2 = NULL;
	size_t n, files;

	build(f, f->cat, 1, NULL);
	open_all(f);
	/* the writer checks bodies through a reader of its own */
	assert_int_equal(cat_reader_open(f->cat, &r2), 0);
	cat_reader_snapshots(f->r, 3600ull * 1000000000ull);
	/* these reads open the snapshot: nothing is stored yet */
	assert_int_equal(cat_manifest_state(f->r, 6), CAT_MANIFEST_MISSING);
	assert_int_equal(cat_chunks_range(f->r, 2, 0, 100, c, 8, &n), -EAGAIN);
	body_of(f, &b, 6, 6, one, 1);
	assert_int_equal(cat_overlay_put_wire(f->o, r2, 6, 6, b.p, b.n, &files),
			 0);
	assert_int_equal(files, 1);
	/* stored after the snapshot began: found */
	assert_int_equal(cat_manifest_state(f->r, 6), CAT_MANIFEST_LOCAL);
	assert_int_equal(cat_chunks_range(f->r, 6, 0, E_SIZE, c, 8, &n), 0);
	assert_int_equal(n, 4);
	/* a new snapshot began with that fresh look: the rest comes now */
	assert_int_equal(cat_chunks_range(f->r, 2, 0, 100, c, 8, &n), -EAGAIN);
	body_of(f, &b, 1, 1024, all, 3);
	assert_int_equal(
	    cat_overlay_put_wire(f->o, r2, 1, 1024, b.p, b.n, &files), 0);
	assert_int_equal(files, 2);
	assert_int_equal(cat_chunks_range(f->r, 2, 0, A_SIZE, c, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(cat_manifest_state(f->r, 5), CAT_MANIFEST_LOCAL);
	assert_int_equal(cat_manifest_state(f->r, 6), CAT_MANIFEST_LOCAL);
	cat_reader_snapshots(f->r, 0);
	assert_int_equal(cat_manifest_state(f->r, 2), CAT_MANIFEST_LOCAL);
	cat_reader_close(r2);
	cat_buf_fini(&b);
}

/* Each body is wrong in one way: -EBADMSG and nothing stored. */
static void expect_refused(struct fx *f, struct cat_buf *b, uint64_t first,
			   uint64_t last)
{
	uint64_t miss[8];
	size_t n, files = 99;

	assert_int_equal(
	    cat_overlay_put_wire(f->o, f->r, first, last, b->p, b->n, &files),
	    -EBADMSG);
	assert_int_equal(files, 0);
	assert_int_equal(cat_pending_missing(f->r, 0, miss, 8, &n), 0);
	assert_int_equal(n, 3);
}

static void test_overlay_refuses_bad_bodies(void **state)
{
	struct fx *f = *state;
	struct cat_chunk v[8];
	struct cat_buf b = {0};
	uint64_t all[] = {2, 5, 6}, rev[] = {6, 2}, notpend[] = {2, 3};
	size_t k;

	build(f, f->cat, 1, NULL);
	open_all(f);
	body_of(f, &b, 1, 1024, all, 3);
	b.p[0] ^= 1; /* magic */
	expect_refused(f, &b, 1, 1024);
	body_of(f, &b, 1, 1024, all, 3);
	b.p[8] ^= 1; /* generation 2, not 3 */
	expect_refused(f, &b, 1, 1024);
	body_of(f, &b, 1, 1024, all, 3);
	expect_refused(f, &b, 1, 2048);	 /* not the range asked for */
	body_of(f, &b, 3, 1024, all, 3); /* a record below first */
	expect_refused(f, &b, 3, 1024);
	body_of(f, &b, 1, 1024, rev, 2); /* not ascending */
	expect_refused(f, &b, 1, 1024);
	body_of(f, &b, 1, 1024, notpend, 2); /* b's manifest is the catalog's */
	expect_refused(f, &b, 1, 1024);
	body_of(f, &b, 1, 1024, all, 3);
	b.n--; /* truncated */
	expect_refused(f, &b, 1, 1024);
	body_of(f, &b, 1, 1024, all, 3);
	b.p[b.n++] = 0; /* trailing byte */
	expect_refused(f, &b, 1, 1024);
	body_of(f, &b, 1, 1024, all, 3);
	b.p[32]++; /* one record more than there is */
	expect_refused(f, &b, 1, 1024);
	/* a's manifest one chunk short: does not cover the file */
	k = cut(f->a, A_SIZE, v);
	assert_int_equal(cat_mwire_begin(&b, 3, 2, 2), 0);
	assert_int_equal(cat_mwire_add(&b, 2, A_SIZE, (uint32_t)k - 1, v), 0);
	expect_refused(f, &b, 2, 2);
	/* a size that is not the catalog's */
	assert_int_equal(cat_mwire_begin(&b, 3, 2, 2), 0);
	assert_int_equal(cat_mwire_add(&b, 2, A_SIZE - 1, (uint32_t)k, v), 0);
	expect_refused(f, &b, 2, 2);
	/* a chunk longer than chunk_max (2048) */
	v[0].len = 3000;
	assert_int_equal(cat_mwire_begin(&b, 3, 2, 2), 0);
	assert_int_equal(cat_mwire_add(&b, 2, A_SIZE, 1, v), 0);
	expect_refused(f, &b, 2, 2);
	/* an unknown marker */
	assert_int_equal(cat_mwire_begin(&b, 3, 2, 2), 0);
	assert_int_equal(cat_mwire_add(&b, 2, A_SIZE, 0xfffffff5u, NULL), 0);
	expect_refused(f, &b, 2, 2);
	/* a record for a directory */
	assert_int_equal(cat_mwire_begin(&b, 3, 4, 4), 0);
	assert_int_equal(cat_mwire_add(&b, 4, 0, 0, NULL), 0);
	expect_refused(f, &b, 4, 4);
	/* after the good ones, an ino the catalog has no inode for */
	assert_int_equal(cat_mwire_begin(&b, 3, 1, 1024), 0);
	k = cut(f->a, A_SIZE, v);
	assert_int_equal(cat_mwire_add(&b, 2, A_SIZE, (uint32_t)k, v), 0);
	assert_int_equal(cat_mwire_add(&b, 5, 0, 0, NULL), 0);
	assert_int_equal(cat_mwire_add(&b, 99, 0, 0, NULL), 0);
	expect_refused(f, &b, 1, 1024);
	cat_buf_fini(&b);
}

/* A body may leave pending files out (the server's answer for them
 * comes another way): the ones it names are stored, the rest stay
 * missing. */
static void test_overlay_subset(void **state)
{
	struct fx *f = *state;
	struct cat_buf b = {0};
	uint64_t some[] = {2, 6}, miss[8];
	size_t n;

	build(f, f->cat, 1, NULL);
	open_all(f);
	body_of(f, &b, 1, 1024, some, 2);
	expect_stored(f, &b, 1, 1024, 2, 1);
	assert_int_equal(cat_pending_missing(f->r, 0, miss, 8, &n), 0);
	assert_int_equal(miss[0], 5);
	/* the same body again stores nothing new */
	expect_stored(f, &b, 1, 1024, 0, 1);
	cat_buf_fini(&b);
}

struct seen {
	uint64_t ino[8], size[8];
	int kind[8];
	size_t n, stop_after;
};

static int note(void *ctx, uint64_t ino, int kind, uint64_t size)
{
	struct seen *s = ctx;

	if (s->n == 8)
		return -ENOSPC;
	s->ino[s->n] = ino;
	s->kind[s->n] = kind;
	s->size[s->n] = size;
	s->n++;
	return s->n == s->stop_after ? 1 : 0;
}

static int refuse(void *ctx, uint64_t ino, int kind, uint64_t size)
{
	(void)ctx;
	(void)ino;
	(void)kind;
	(void)size;
	return -EIO;
}

/* cat_pending_each: a range of pending files with their kinds and sizes,
 * in ino order; 1 from the callback stops, an error comes back. */
static void test_pending_each(void **state)
{
	struct fx *f = *state;
	struct seen s = {0};

	build(f, f->cat, 1, NULL);
	open_all(f);
	assert_int_equal(cat_pending_each(f->r, 1, 1024, note, &s), 0);
	assert_int_equal(s.n, 3);
	assert_int_equal(s.ino[0], 2);
	assert_int_equal(s.kind[0], CAT_REG);
	assert_int_equal(s.size[0], A_SIZE);
	assert_int_equal(s.ino[1], 5);
	assert_int_equal(s.size[1], 0);
	assert_int_equal(s.ino[2], 6);
	assert_int_equal(s.size[2], E_SIZE);
	memset(&s, 0, sizeof(s));
	assert_int_equal(cat_pending_each(f->r, 3, 5, note, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.ino[0], 5);
	memset(&s, 0, sizeof(s));
	s.stop_after = 1;
	assert_int_equal(cat_pending_each(f->r, 1, UINT64_MAX, note, &s), 0);
	assert_int_equal(s.n, 1);
	memset(&s, 0, sizeof(s));
	assert_int_equal(cat_pending_each(f->r, 7, 2, note, &s), 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(cat_pending_each(f->r, 1, 1024, refuse, NULL), -EIO);
	assert_int_equal(cat_pending_each(NULL, 1, 2, note, &s), -EINVAL);
}

static void test_overlay_markers(void **state)
{
	struct fx *f = *state;
	struct cat_chunk c[8];
	struct cat_buf b = {0};
	size_t n, files;

	build(f, f->cat, 1, NULL);
	open_all(f);
	assert_int_equal(cat_mwire_begin(&b, 3, 1, 1024), 0);
	assert_int_equal(cat_mwire_add(&b, 2, A_SIZE, CAT_MWIRE_CHANGED, NULL),
			 0);
	assert_int_equal(cat_mwire_add(&b, 6, E_SIZE, CAT_MWIRE_ALONE, NULL),
			 0);
	assert_int_equal(
	    cat_overlay_put_wire(f->o, f->r, 1, 1024, b.p, b.n, &files), 0);
	assert_int_equal(files, 1);
	/* changed at the source: no manifest will come */
	assert_int_equal(cat_manifest_state(f->r, 2), CAT_MANIFEST_CHANGED);
	assert_int_equal(cat_chunks_range(f->r, 2, 0, 10, c, 8, &n), -ESTALE);
	/* "fetch on its own": still missing */
	assert_int_equal(cat_manifest_state(f->r, 6), CAT_MANIFEST_MISSING);
	cat_buf_fini(&b);
}

/* The overlay file is on this machine's disk but no more trusted than the
 * catalog: a row changed behind the writer's back is refused on read. */
static void test_overlay_tampered_rows(void **state)
{
	struct fx *f = *state;
	struct cat_chunk c[8];
	struct cat_buf b = {0};
	uint64_t all[] = {2, 5, 6};
	sqlite3 *db = NULL;
	size_t n, files;

	build(f, f->cat, 1, NULL);
	open_all(f);
	body_of(f, &b, 1, 1024, all, 3);
	assert_int_equal(
	    cat_overlay_put_wire(f->o, f->r, 1, 1024, b.p, b.n, &files), 0);
	assert_int_equal(sqlite3_open(f->ov, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "UPDATE chunk SET len=1400 WHERE ino=2 "
				      "AND off=0; UPDATE chunk SET len=9999 "
				      "WHERE ino=6 AND off=0",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	/* rows for b, whose manifest is the catalog's, are never read */
	assert_int_equal(sqlite3_exec(db,
				      "INSERT INTO file VALUES(3,0);"
				      "INSERT INTO chunk VALUES(3,0,5,"
				      "zeroblob(32))",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(cat_chunks_range(f->r, 2, 0, A_SIZE, c, 8, &n),
			 -EBADMSG);
	assert_int_equal(cat_chunks_range(f->r, 6, 0, E_SIZE, c, 8, &n),
			 -EBADMSG);
	assert_int_equal(cat_chunks_range(f->r, 3, 0, 10, c, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(c[0].len, 10);
	cat_buf_fini(&b);
}

static void test_overlay_not_an_overlay(void **state)
{
	struct fx *f = *state;
	sqlite3 *db = NULL;

	build(f, f->cat, 1, NULL);
	assert_int_equal(cat_reader_open(f->cat, &f->r), 0);
	/* a SQLite file of another shape */
	assert_int_equal(sqlite3_open(f->ov, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(db, "CREATE TABLE file(x)", NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(cat_reader_attach_overlay(f->r, f->ov), -EBADMSG);
	assert_int_equal(cat_overlay_open(f->ov, &f->o), -EBADMSG);
	assert_null(f->o);
}

static void test_writer_checks_pending(void **state)
{
	struct fx *f = *state;
	struct cat_meta m;
	cat_writer *w = NULL;
	chunk_id id;

	meta_of(&m);
	assert_int_equal(chunk_id_compute("x", 1, &id), 0);
	/* a pending directory */
	assert_int_equal(cat_writer_open(f->cat, &m, &w), 0);
	inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0);
	assert_int_equal(cat_writer_add_pending(w, 1), 0);
	assert_int_equal(cat_writer_commit(w), -EINVAL);
	assert_int_equal(access(f->cat, F_OK), -1);
	/* a pending file that has chunk rows too */
	assert_int_equal(cat_writer_open(f->cat, &m, &w), 0);
	inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0);
	inode(w, 2, CAT_REG, S_IFREG | 0644, 1);
	assert_int_equal(cat_writer_add_dirent(w, 1, "f", 1, 2), 0);
	assert_int_equal(cat_writer_add_chunk(w, 2, 0, 1, &id), 0);
	assert_int_equal(cat_writer_add_pending(w, 2), 0);
	assert_int_equal(cat_writer_commit(w), -EINVAL);
	/* a pending ino no inode row has */
	assert_int_equal(cat_writer_open(f->cat, &m, &w), 0);
	inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0);
	assert_int_equal(cat_writer_add_pending(w, 9), 0);
	assert_int_equal(cat_writer_commit(w), -EINVAL);
	assert_int_equal(access(f->cat, F_OK), -1);
}

/* Where the manifests are does not change the tree's digest; a change of
 * one inode row does. */
static void test_digest_ignores_manifests(void **state)
{
	struct fx *f = *state;
	struct cat_meta m1, m2;
	char other[PATH_MAX];

	snprintf(other, sizeof(other), "%s/full.db", f->dir);
	build(f, f->cat, 1, &m1);
	build(f, other, 0, &m2);
	assert_int_equal(m2.pending, 0);
	assert_string_equal(m1.tree_sha256, m2.tree_sha256);
}

/* A format 1 catalog (no pending table) still opens and reads. */
static void test_format1_still_reads(void **state)
{
	struct fx *f = *state;
	struct cat_chunk c[8];
	sqlite3 *db = NULL;
	size_t n;

	build(f, f->cat, 0, NULL);
	assert_int_equal(sqlite3_open(f->cat, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(db,
			 "DROP TABLE pending; PRAGMA user_version=1;"
			 "UPDATE meta SET value='ferry-catalog/1' WHERE "
			 "key='format'; DELETE FROM meta WHERE key='pending'",
			 NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(cat_reader_open(f->cat, &f->r), 0);
	assert_int_equal(cat_manifest_state(f->r, 2), CAT_MANIFEST_CATALOG);
	assert_int_equal(cat_chunks_range(f->r, 2, 0, A_SIZE, c, 8, &n), 0);
	assert_int_equal(n, 2);
	/* an overlay means nothing to it */
	assert_int_equal(cat_overlay_open(f->ov, &f->o), 0);
	assert_int_equal(cat_reader_attach_overlay(f->r, f->ov), 0);
	assert_int_equal(cat_pending_missing(f->r, 0, (uint64_t[1]){0}, 1, &n),
			 0);
	assert_int_equal(n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_pending_reads_eagain, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_overlay_put_and_read, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_snapshot_sees_new_manifests,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overlay_refuses_bad_bodies,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overlay_subset, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_pending_each, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overlay_markers, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_overlay_tampered_rows, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_overlay_not_an_overlay, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_writer_checks_pending, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_digest_ignores_manifests,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_format1_still_reads, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
