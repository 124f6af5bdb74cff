/*
 * tests/unit/test_catalog.c — the SQLite catalog: a writer-to-reader round
 * trip over every kind of entry and awkward names, files past 4 GiB,
 * resumable readdir of a large directory, and the reader's refusal of
 * foreign, damaged or hostile catalogs (which arrive from the network).
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
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "tsupport.h"

#define GIB (UINT64_C(1) << 30)
#define BIG_SIZE (5 * GIB + 123)
#define MANY 20000
#define PIECE 97

struct fx {
	char dir[PATH_MAX / 2]; /* half, so dir + a name always fits path */
	char path[PATH_MAX];	/* the catalog under test */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (tsup_tmpdir(f->dir, sizeof(f->dir), "test_catalog") < 0) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof(f->path), "%s/catalog.db", f->dir);
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

/* ---------------------------------------------------------------- */
/* Building catalogs                                                */
/* ---------------------------------------------------------------- */

static void test_meta(struct cat_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->generation = 7;
	m->parent_generation = 6;
	m->created_ns = INT64_C(1700000000123456789);
	chunk_params_default(&m->params);
}

static void add_inode(cat_writer *w, uint64_t ino, enum cat_kind kind,
		      uint32_t mode, uint64_t size, uint32_t nlink,
		      const char *target)
{
	struct cat_inode in = {
	    .ino = ino,
	    .kind = kind,
	    .mode = mode,
	    .uid = 1000 + (uint32_t)ino,
	    .gid = 100,
	    .size = size,
	    .nlink = nlink,
	    .mtime_ns = (int64_t)ino * 1000000007,
	    .ctime_ns = -5,
	};

	if (kind == CAT_CHR)
		in.rdev = makedev(4, 1);
	assert_int_equal(
	    cat_writer_add_inode(w, &in, target, target ? strlen(target) : 0),
	    0);
}

static void add_dirent(cat_writer *w, uint64_t parent, const char *name,
		       size_t len, uint64_t ino)
{
	assert_int_equal(cat_writer_add_dirent(w, parent, name, len, ino), 0);
}

static void id_of(const void *buf, size_t len, chunk_id *ret)
{
	assert_int_equal(chunk_id_compute(buf, len, ret), 0);
}

/* Ids of a max-size run of zeros and of the 123-byte tail of BIG. */
static void zero_ids(chunk_id *zmax, chunk_id *ztail)
{
	uint8_t *z = calloc(1, CHUNK_MAX_DEFAULT);

	assert_non_null(z);
	id_of(z, CHUNK_MAX_DEFAULT, zmax);
	id_of(z, 123, ztail);
	free(z);
}

static const char unicode_name[] = "\xc3\xbcn\xc3\xaf"
				   "c\xc3\xb8"
				   "d\xc3\xa9 \xe2\x9c\x93";
static const char nonutf8_name[] = "\xff\xfe";
static const char link_target[] = "target/../x y";
static char long_name[CAT_NAME_MAX + 1]; /* 255 'L' + NUL, built in main */

/* Root entries in the order they are added (pos 1..n), with their inos. */
static const struct {
	const char *name;
	uint64_t ino;
} root_entries[] = {
    {"with space", 2}, {unicode_name, 3}, {"-leading-dash", 4},
    {nonutf8_name, 5}, {"hard1", 6},	  {"hard2", 6},
    {"fifo", 7},       {"tty", 8},	  {"big", 9},
    {"sub", 10},       {long_name, 12},
};
#define N_ROOT (sizeof(root_entries) / sizeof(root_entries[0]))
#define N_INODES 12

/* The round-trip tree. Returns nothing; asserts on every step. */
static void build_basic(const char *path)
{
	uint8_t data[100];
	struct cat_meta m;
	cat_writer *w = NULL;
	chunk_id id10, id100, zmax, ztail, idinner;
	uint64_t off;

	test_meta(&m);
	memset(data, 'd', sizeof(data));
	id_of(data, 10, &id10);
	id_of(data, 100, &id100);
	id_of("inner!", 6, &idinner);
	zero_ids(&zmax, &ztail);

	assert_int_equal(cat_writer_open(path, &m, &w), 0);
	/* Inode order is free: add some out of order. */
	add_inode(w, 9, CAT_REG, S_IFREG | 0600, BIG_SIZE, 1, NULL);
	add_inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0, 4, NULL);
	add_inode(w, 2, CAT_REG, S_IFREG | 0644, 10, 1, NULL);
	add_inode(w, 3, CAT_REG, S_IFREG | 0644, 0, 1, NULL);
	add_inode(w, 4, CAT_DIR, S_IFDIR | 0700, 0, 2, NULL);
	add_inode(w, 5, CAT_LNK, S_IFLNK | 0777, strlen(link_target), 1,
		  link_target);
	add_inode(w, 6, CAT_REG, S_IFREG | 04755, 100, 2, NULL);
	add_inode(w, 7, CAT_FIFO, S_IFIFO | 0644, 0, 1, NULL);
	add_inode(w, 8, CAT_CHR, S_IFCHR | 0620, 0, 1, NULL);
	add_inode(w, 10, CAT_DIR, S_IFDIR | 0755, 0, 2, NULL);
	add_inode(w, 11, CAT_REG, S_IFREG | 0644, 6, 1, NULL);
	add_inode(w, 12, CAT_REG, S_IFREG | 0644, 0, 1, NULL);

	for (size_t i = 0; i + 1 < N_ROOT; i++)
		add_dirent(w, 1, root_entries[i].name,
			   strlen(root_entries[i].name), root_entries[i].ino);
	add_dirent(w, 10, "inner", 5, 11);
	/* Back to the root after another directory: numbering continues. */
	add_dirent(w, 1, long_name, strlen(long_name), 12);

	assert_int_equal(cat_writer_add_xattr(w, 2, "user.a", 6, "hello", 5),
			 0);
	assert_int_equal(
	    cat_writer_add_xattr(w, 2, "user.bin", 8, "\0\1\2\xff\0", 5), 0);
	assert_int_equal(cat_writer_add_xattr(w, 2, "user.empty", 10, NULL, 0),
			 0);
	assert_int_equal(cat_writer_add_xattr(w, 6, "trusted.x", 9, "", 0), 0);

	assert_int_equal(cat_writer_add_chunk(w, 2, 0, 10, &id10), 0);
	assert_int_equal(cat_writer_add_chunk(w, 6, 0, 100, &id100), 0);
	/* A sparse 5 GiB file: max-size chunks of zeros, one id repeated. */
	for (off = 0; off + CHUNK_MAX_DEFAULT <= BIG_SIZE;
	     off += CHUNK_MAX_DEFAULT)
		assert_int_equal(
		    cat_writer_add_chunk(w, 9, off, CHUNK_MAX_DEFAULT, &zmax),
		    0);
	assert_int_equal(off, 5 * GIB);
	assert_int_equal(cat_writer_add_chunk(w, 9, off, 123, &ztail), 0);
	assert_int_equal(cat_writer_add_chunk(w, 11, 0, 6, &idinner), 0);
	assert_int_equal(cat_writer_commit(w), 0);
}

/* Run SQL on a committed catalog, as an attacker or a bad disk would. */
static void patch(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static cat_reader *open_ok(const char *path)
{
	cat_reader *r = NULL;

	assert_int_equal(cat_reader_open(path, &r), 0);
	assert_non_null(r);
	return r;
}

/* ---------------------------------------------------------------- */
/* Names                                                            */
/* ---------------------------------------------------------------- */

static void test_name_check(void **state)
{
	char big[CAT_NAME_MAX + 1];

	(void)state;
	memset(big, 'a', sizeof(big));
	assert_int_equal(cat_name_check("a", 1), 0);
	assert_int_equal(cat_name_check("...", 3), 0);
	assert_int_equal(cat_name_check(".a", 2), 0);
	assert_int_equal(cat_name_check(nonutf8_name, 2), 0);
	assert_int_equal(cat_name_check(big, CAT_NAME_MAX), 0);
	assert_int_equal(cat_name_check(big, CAT_NAME_MAX + 1), -EINVAL);
	assert_int_equal(cat_name_check("", 0), -EINVAL);
	assert_int_equal(cat_name_check(".", 1), -EINVAL);
	assert_int_equal(cat_name_check("..", 2), -EINVAL);
	assert_int_equal(cat_name_check("a/b", 3), -EINVAL);
	assert_int_equal(cat_name_check("/", 1), -EINVAL);
	assert_int_equal(cat_name_check("a\0b", 3), -EINVAL);
	assert_int_equal(cat_xattr_name_check("user.x", 6), 0);
	assert_int_equal(cat_xattr_name_check("a/b", 3), 0);
	assert_int_equal(cat_xattr_name_check("", 0), -EINVAL);
	assert_int_equal(cat_xattr_name_check("a\0", 2), -EINVAL);
	assert_int_equal(cat_xattr_name_check(big, CAT_XATTR_NAME_MAX + 1),
			 -EINVAL);
}

/* ---------------------------------------------------------------- */
/* Round trip                                                       */
/* ---------------------------------------------------------------- */

struct collect {
	size_t n;
	uint64_t last_pos;
	char names[32][CAT_NAME_MAX + 1];
	size_t lens[32];
	uint64_t inos[32];
};

static int collect_cb(void *ctx, const void *name, size_t len,
		      const struct cat_inode *in, uint64_t pos)
{
	struct collect *c = ctx;

	assert_true(c->n < 32);
	assert_int_equal(cat_name_check(name, len), 0);
	assert_true(pos > c->last_pos);
	c->last_pos = pos;
	memcpy(c->names[c->n], name, len);
	c->lens[c->n] = len;
	c->inos[c->n] = in->ino;
	c->n++;
	return 0;
}

static size_t find_name(const struct collect *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->lens[i] == strlen(name) &&
		    !memcmp(c->names[i], name, c->lens[i]))
			return i;
	return SIZE_MAX;
}

static void check_inode_fields(cat_reader *r)
{
	struct cat_inode in;

	assert_int_equal(cat_getattr(r, 1, &in), 0);
	assert_int_equal(in.kind, CAT_DIR);
	assert_int_equal(in.mode, S_IFDIR | 0755);
	assert_int_equal(in.nlink, 4);
	assert_int_equal(in.uid, 1001);
	assert_int_equal(in.gid, 100);
	assert_int_equal(in.mtime_ns, 1000000007);
	assert_int_equal(in.ctime_ns, -5);

	assert_int_equal(cat_getattr(r, 8, &in), 0);
	assert_int_equal(in.kind, CAT_CHR);
	assert_int_equal(in.mode, S_IFCHR | 0620);
	assert_int_equal(in.rdev, makedev(4, 1));
	assert_int_equal(cat_getattr(r, 7, &in), 0);
	assert_int_equal(in.kind, CAT_FIFO);
	assert_int_equal(in.size, 0);
	assert_int_equal(cat_getattr(r, 6, &in), 0);
	assert_int_equal(in.mode, S_IFREG | 04755);
	assert_int_equal(cat_getattr(r, 9, &in), 0);
	assert_int_equal(in.size, BIG_SIZE);
	assert_int_equal(cat_getattr(r, 3, &in), 0);
	assert_int_equal(in.size, 0);
	assert_int_equal(cat_getattr(r, 99, &in), -ENOENT);
	assert_int_equal(cat_getattr(r, 0, &in), -ENOENT);
	assert_int_equal(cat_getattr(r, UINT64_MAX, &in), -ENOENT);
}

static void check_names(cat_reader *r)
{
	struct collect *c = calloc(1, sizeof(*c));
	struct cat_inode in, in2;

	assert_non_null(c);
	assert_int_equal(cat_readdir(r, 1, 0, collect_cb, c), 0);
	assert_int_equal(c->n, N_ROOT);
	/* pos is 1..n in the order entries were added. */
	assert_int_equal(c->last_pos, N_ROOT);
	for (size_t i = 0; i < N_ROOT; i++) {
		size_t k = find_name(c, root_entries[i].name);

		assert_int_equal(k, i);
		assert_int_equal(c->inos[k], root_entries[i].ino);
		assert_int_equal(cat_lookup(r, 1, root_entries[i].name,
					    strlen(root_entries[i].name), &in),
				 0);
		assert_int_equal(in.ino, root_entries[i].ino);
	}
	/* Hard links: two names, one inode, nlink 2. */
	assert_int_equal(cat_lookup(r, 1, "hard1", 5, &in), 0);
	assert_int_equal(cat_lookup(r, 1, "hard2", 5, &in2), 0);
	assert_int_equal(in.ino, in2.ino);
	assert_int_equal(in.nlink, 2);
	/* Empty directory, and a subdirectory's entry. */
	memset(c, 0, sizeof(*c));
	assert_int_equal(cat_readdir(r, 4, 0, collect_cb, c), 0);
	assert_int_equal(c->n, 0);
	assert_int_equal(cat_lookup(r, 10, "inner", 5, &in), 0);
	assert_int_equal(in.ino, 11);
	assert_int_equal(cat_readdir(r, 2, 0, collect_cb, c), -ENOTDIR);
	assert_int_equal(cat_readdir(r, 99, 0, collect_cb, c), -ENOENT);
	/* Missing names and names that can never exist. */
	assert_int_equal(cat_lookup(r, 1, "nope", 4, &in), -ENOENT);
	assert_int_equal(cat_lookup(r, 1, "inner", 5, &in), -ENOENT);
	assert_int_equal(cat_lookup(r, 99, "hard1", 5, &in), -ENOENT);
	assert_int_equal(cat_lookup(r, 1, "..", 2, &in), -EINVAL);
	assert_int_equal(cat_lookup(r, 1, "sub/inner", 9, &in), -EINVAL);
	free(c);
}

static void check_link_and_xattrs(cat_reader *r)
{
	char buf[64];
	size_t n = 0;
	static const char list[] = "user.a\0user.bin\0user.empty";

	assert_int_equal(cat_readlink(r, 5, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, strlen(link_target));
	assert_memory_equal(buf, link_target, n);
	assert_int_equal(cat_readlink(r, 5, buf, 3, &n), -ERANGE);
	assert_int_equal(n, strlen(link_target));
	assert_int_equal(cat_readlink(r, 2, buf, sizeof(buf), &n), -EINVAL);

	assert_int_equal(cat_getxattr(r, 2, "user.a", 6, NULL, 0, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(cat_getxattr(r, 2, "user.a", 6, buf, 4, &n), -ERANGE);
	assert_int_equal(cat_getxattr(r, 2, "user.a", 6, buf, 5, &n), 0);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(
	    cat_getxattr(r, 2, "user.bin", 8, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 5);
	assert_memory_equal(buf, "\0\1\2\xff\0", 5);
	n = 99;
	assert_int_equal(cat_getxattr(r, 2, "user.empty", 10, NULL, 0, &n), 0);
	assert_int_equal(n, 0);
	n = 99;
	assert_int_equal(
	    cat_getxattr(r, 2, "user.empty", 10, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(
	    cat_getxattr(r, 6, "trusted.x", 9, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(
	    cat_getxattr(r, 2, "user.none", 9, buf, sizeof(buf), &n), -ENODATA);
	assert_int_equal(cat_getxattr(r, 3, "user.a", 6, buf, sizeof(buf), &n),
			 -ENODATA);

	assert_int_equal(cat_listxattr(r, 2, NULL, 0, &n), 0);
	assert_int_equal(n, sizeof(list));
	assert_int_equal(cat_listxattr(r, 2, buf, 10, &n), -ERANGE);
	assert_int_equal(cat_listxattr(r, 2, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, sizeof(list));
	assert_memory_equal(buf, list, sizeof(list));
	assert_int_equal(cat_listxattr(r, 3, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 0);
}

static void check_chunks(cat_reader *r)
{
	struct cat_chunk c[8];
	chunk_id zmax, ztail, id10;
	uint64_t base = UINT64_C(1) << 32, off;
	size_t n = 99, total;

	zero_ids(&zmax, &ztail);
	id_of("dddddddddd", 10, &id10);
	assert_int_equal(cat_chunks_range(r, 2, 0, 10, c, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(c[0].len, 10);
	assert_memory_equal(c[0].id.b, id10.b, CHUNK_ID_LEN);
	/* Empty file, empty range, past EOF: nothing. */
	assert_int_equal(cat_chunks_range(r, 3, 0, 4096, c, 8, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(cat_chunks_range(r, 2, 3, 0, c, 8, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(cat_chunks_range(r, 2, 10, 5, c, 8, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(cat_chunks_range(r, 1, 0, 5, c, 8, &n), -EINVAL);

	/* Above 4 GiB: the chunk holding off, then the next one. */
	assert_int_equal(cat_chunks_range(r, 9, base + 1000, 300000, c, 8, &n),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(c[0].off, base);
	assert_int_equal(c[1].off, base + CHUNK_MAX_DEFAULT);
	assert_int_equal(c[0].len, CHUNK_MAX_DEFAULT);
	assert_memory_equal(c[1].id.b, zmax.b, CHUNK_ID_LEN);
	/* Across the 4 GiB line. */
	assert_int_equal(cat_chunks_range(r, 9, base - 10, 20, c, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(c[0].off, base - CHUNK_MAX_DEFAULT);
	assert_int_equal(c[1].off, base);
	/* The last, partial chunk; a range running past EOF is clipped. */
	assert_int_equal(cat_chunks_range(r, 9, BIG_SIZE - 50, 1000, c, 8, &n),
			 0);
	assert_int_equal(n, 1);
	assert_int_equal(c[0].off, 5 * GIB);
	assert_int_equal(c[0].len, 123);
	assert_memory_equal(c[0].id.b, ztail.b, CHUNK_ID_LEN);
	assert_int_equal(cat_chunks_range(r, 9, 5 * GIB - 1, 2, c, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(c[1].len, 123);
	assert_int_equal(cat_chunks_range(r, 9, BIG_SIZE, 10, c, 8, &n), 0);
	assert_int_equal(n, 0);
	/* cap smaller than the range: continue from the end of the last. */
	off = 4 * GIB + 7;
	total = 0;
	while (off < 4 * GIB + 10 * CHUNK_MAX_DEFAULT) {
		assert_int_equal(
		    cat_chunks_range(r, 9, off,
				     4 * GIB + 10 * CHUNK_MAX_DEFAULT - off, c,
				     3, &n),
		    0);
		assert_true(n >= 1 && n <= 3);
		total += n;
		off = c[n - 1].off + c[n - 1].len;
	}
	assert_int_equal(total, 10);
}

struct reenter_ctx {
	cat_reader *r;
	int rc;
};

/* A callback that calls back into the reader, which the header forbids:
 * it must get an error, not hang. */
static int reenter_cb(void *ctx, const void *name, size_t len,
		      const struct cat_inode *in, uint64_t pos)
{
	struct reenter_ctx *x = ctx;
	struct cat_inode tmp;

	(void)name;
	(void)len;
	(void)pos;
	x->rc = cat_getattr(x->r, in->ino, &tmp);
	return 1;
}

struct each_ctx {
	size_t n;
	chunk_id ids[16];
};

static int each_cb(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	struct each_ctx *e = ctx;

	assert_true(ino >= 2 && ino <= 11);
	for (size_t i = 0; i < e->n; i++)
		assert_memory_not_equal(e->ids[i].b, c->id.b, CHUNK_ID_LEN);
	assert_true(e->n < 16);
	e->ids[e->n++] = c->id;
	return 0;
}

static void test_round_trip(void **state)
{
	struct fx *f = *state;
	struct cat_meta m;
	struct each_ctx e = {0};
	cat_reader *r;
	char tmp[PATH_MAX + 8];

	build_basic(f->path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", f->path);
	assert_int_equal(access(tmp, F_OK), -1); /* renamed into place */
	r = open_ok(f->path);
	cat_reader_meta(r, &m);
	assert_int_equal(m.generation, 7);
	assert_int_equal(m.parent_generation, 6);
	assert_int_equal(m.created_ns, INT64_C(1700000000123456789));
	assert_int_equal(m.params.min, CHUNK_MIN_DEFAULT);
	assert_int_equal(m.params.avg, CHUNK_AVG_DEFAULT);
	assert_int_equal(m.params.max, CHUNK_MAX_DEFAULT);
	assert_int_equal(m.inodes, N_INODES);
	assert_int_equal(m.bytes, 10 + 100 + BIG_SIZE + 6);
	check_inode_fields(r);
	check_names(r);
	check_link_and_xattrs(r);
	check_chunks(r);
	{
		struct reenter_ctx x = {r, 0};

		assert_int_equal(cat_readdir(r, 1, 0, reenter_cb, &x), 1);
		assert_int_equal(x.rc, -EDEADLK);
	}
	/* Distinct ids: 10 d's, 100 d's, zeros max, zeros tail, "inner!". */
	assert_int_equal(cat_chunks_each(r, each_cb, &e), 0);
	assert_int_equal(e.n, 5);
	cat_reader_close(r);
}

/* ---------------------------------------------------------------- */
/* A big directory read in pieces                                   */
/* ---------------------------------------------------------------- */

struct piece_ctx {
	uint8_t seen[MANY];
	size_t total, in_call;
	uint64_t last_pos;
};

static int piece_cb(void *ctx, const void *name, size_t len,
		    const struct cat_inode *in, uint64_t pos)
{
	struct piece_ctx *p = ctx;
	char buf[16];
	char *end;
	unsigned long k;

	assert_true(len > 6 && len < sizeof(buf));
	memcpy(buf, name, len);
	buf[len] = '\0';
	assert_memory_equal(buf, "entry-", 6);
	k = strtoul(buf + 6, &end, 10);
	assert_true(*end == '\0' && k < MANY);
	assert_int_equal(p->seen[k], 0);
	assert_int_equal(in->ino, 100 + k);
	assert_true(pos > p->last_pos);
	p->seen[k] = 1;
	p->last_pos = pos;
	p->total++;
	return ++p->in_call == PIECE ? 1 : 0;
}

static void test_readdir_pieces(void **state)
{
	struct fx *f = *state;
	struct piece_ctx *p = calloc(1, sizeof(*p));
	struct cat_meta m;
	cat_writer *w = NULL;
	cat_reader *r;
	char name[32];
	size_t calls = 0;
	int rc;

	assert_non_null(p);
	test_meta(&m);
	assert_int_equal(cat_writer_open(f->path, &m, &w), 0);
	add_inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0, 3, NULL);
	add_inode(w, 2, CAT_DIR, S_IFDIR | 0755, 0, 2, NULL);
	add_dirent(w, 1, "many", 4, 2);
	for (unsigned i = 0; i < MANY; i++) {
		/* Added in a scrambled order: pos follows call order, not
		 * name order. */
		unsigned k = (i * 7919u) % MANY;
		int len = snprintf(name, sizeof(name), "entry-%u", k);

		add_inode(w, 100 + k, CAT_REG, S_IFREG | 0644, 0, 1, NULL);
		add_dirent(w, 2, name, (size_t)len, 100 + k);
	}
	assert_int_equal(cat_writer_commit(w), 0);

	r = open_ok(f->path);
	do {
		p->in_call = 0;
		rc = cat_readdir(r, 2, p->last_pos, piece_cb, p);
		assert_true(rc == 0 || rc == 1);
		calls++;
	} while (rc == 1);
	assert_int_equal(p->total, MANY);
	for (unsigned k = 0; k < MANY; k++)
		assert_int_equal(p->seen[k], 1);
	assert_int_equal(calls,
			 (MANY + PIECE - 1) / PIECE + (MANY % PIECE == 0));
	assert_int_equal(p->last_pos, MANY);
	cat_reader_close(r);
	free(p);
}

/* ---------------------------------------------------------------- */
/* What the writer refuses                                          */
/* ---------------------------------------------------------------- */

static void test_writer_rejects(void **state)
{
	struct fx *f = *state;
	struct cat_meta m;
	struct cat_inode in = {
	    .ino = 3, .kind = CAT_REG, .mode = S_IFDIR | 0644};
	cat_writer *w = NULL;
	cat_reader *r;
	char big[CAT_NAME_MAX + 1];
	chunk_id id = {{1}};

	memset(big, 'n', sizeof(big));
	test_meta(&m);
	m.generation = 0;
	assert_int_equal(cat_writer_open(f->path, &m, &w), -EINVAL);
	assert_null(w);
	test_meta(&m);
	m.params.max = m.params.avg; /* fails chunk_params_check */
	assert_int_equal(cat_writer_open(f->path, &m, &w), -EINVAL);

	test_meta(&m);
	assert_int_equal(cat_writer_open(f->path, &m, &w), 0);
	add_inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0, 2, NULL);
	add_inode(w, 2, CAT_REG, S_IFREG | 0644, 1000, 1, NULL);
	assert_int_equal(cat_writer_add_dirent(w, 1, "", 0, 2), -EINVAL);
	assert_int_equal(cat_writer_add_dirent(w, 1, ".", 1, 2), -EINVAL);
	assert_int_equal(cat_writer_add_dirent(w, 1, "..", 2, 2), -EINVAL);
	assert_int_equal(cat_writer_add_dirent(w, 1, "a/b", 3, 2), -EINVAL);
	assert_int_equal(cat_writer_add_dirent(w, 1, "a\0b", 3, 2), -EINVAL);
	assert_int_equal(cat_writer_add_dirent(w, 1, big, sizeof(big), 2),
			 -EINVAL);
	assert_int_equal(cat_writer_add_dirent(w, 1, "root", 4, CAT_ROOT_INO),
			 -EINVAL);
	add_dirent(w, 1, "ok", 2, 2);
	assert_int_equal(cat_writer_add_dirent(w, 1, "ok", 2, 2), -EEXIST);
	add_dirent(w, 1, "ok2", 3, 2);
	/* Inode rows that break the kind/mode/size/target rules. */
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), -EINVAL);
	in.mode = S_IFREG | 0644;
	assert_int_equal(cat_writer_add_inode(w, &in, "x", 1), -EINVAL);
	in.size = CAT_SIZE_MAX + 1;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), -EINVAL);
	in.kind = CAT_LNK;
	in.mode = S_IFLNK | 0777;
	in.size = 3;
	assert_int_equal(cat_writer_add_inode(w, &in, "a\0b", 3), -EINVAL);
	in.size = 2;
	assert_int_equal(cat_writer_add_inode(w, &in, "abc", 3), -EINVAL);
	in.kind = CAT_FIFO;
	in.mode = S_IFIFO | 0644;
	in.size = 1;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), -EINVAL);
	in.kind = CAT_REG;
	in.mode = S_IFREG | 0644;
	in.size = 0;
	in.ino = 2;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), -EEXIST);
	/* Xattrs and chunks out of bounds or out of order. */
	assert_int_equal(cat_writer_add_xattr(w, 2, "", 0, "v", 1), -EINVAL);
	assert_int_equal(cat_writer_add_xattr(w, 2, "u\0x", 3, "v", 1),
			 -EINVAL);
	assert_int_equal(cat_writer_add_xattr(w, 2, "user.v", 6, big,
					      CAT_XATTR_VALUE_MAX + 1),
			 -EINVAL);
	assert_int_equal(cat_writer_add_xattr(w, 2, "user.v", 6, "v", 1), 0);
	assert_int_equal(cat_writer_add_xattr(w, 2, "user.v", 6, "w", 1),
			 -EEXIST);
	assert_int_equal(cat_writer_add_chunk(w, 2, 0, 0, &id), -EINVAL);
	assert_int_equal(
	    cat_writer_add_chunk(w, 2, 0, CHUNK_MAX_DEFAULT + 1, &id), -EINVAL);
	assert_int_equal(cat_writer_add_chunk(w, 2, 5, 10, &id), -EINVAL);
	assert_int_equal(cat_writer_add_chunk(w, 2, 0, 500, &id), 0);
	assert_int_equal(cat_writer_add_chunk(w, 2, 501, 499, &id), -EINVAL);
	assert_int_equal(cat_writer_add_chunk(w, 2, 500, 500, &id), 0);
	assert_int_equal(cat_writer_commit(w), 0);

	/* The refused calls left no trace and the rest is intact. */
	r = open_ok(f->path);
	{
		struct collect *c = calloc(1, sizeof(*c));
		struct cat_meta rm;

		assert_non_null(c);
		assert_int_equal(cat_readdir(r, 1, 0, collect_cb, c), 0);
		assert_int_equal(c->n, 2);
		assert_int_equal(c->last_pos, 2);
		cat_reader_meta(r, &rm);
		assert_int_equal(rm.inodes, 2);
		assert_int_equal(rm.bytes, 1000);
		free(c);
	}
	cat_reader_close(r);

	/* No root directory: commit fails and leaves no file behind. */
	snprintf(f->path, sizeof(f->path), "%s/noroot.db", f->dir);
	assert_int_equal(cat_writer_open(f->path, &m, &w), 0);
	add_inode(w, 2, CAT_REG, S_IFREG | 0644, 0, 1, NULL);
	assert_int_equal(cat_writer_commit(w), -EINVAL);
	assert_int_equal(access(f->path, F_OK), -1);

	/* Abort drops the temp file; a stale temp file is replaced. */
	{
		char tmp[PATH_MAX + 8];
		int fd;

		snprintf(f->path, sizeof(f->path), "%s/aborted.db", f->dir);
		snprintf(tmp, sizeof(tmp), "%s.tmp", f->path);
		fd = open(tmp, O_WRONLY | O_CREAT, 0644);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "stale", 5), 5);
		close(fd);
		assert_int_equal(cat_writer_open(f->path, &m, &w), 0);
		cat_writer_abort(w);
		assert_int_equal(access(tmp, F_OK), -1);
		assert_int_equal(access(f->path, F_OK), -1);
		cat_writer_abort(NULL);
	}
}

/* ---------------------------------------------------------------- */
/* What the reader refuses                                          */
/* ---------------------------------------------------------------- */

static void expect_bad(const char *path, int err)
{
	cat_reader *r = (cat_reader *)1;

	assert_int_equal(cat_reader_open(path, &r), err);
	assert_null(r);
}

static void test_reader_rejects_files(void **state)
{
	struct fx *f = *state;
	char p[PATH_MAX + 32];
	uint8_t junk[8192];
	uint64_t s = 42;

	snprintf(p, sizeof(p), "%s/missing.db", f->dir);
	expect_bad(p, -ENOENT);
	expect_bad(f->dir, -EBADMSG);

	for (size_t i = 0; i < sizeof(junk); i++) {
		s = s * 6364136223846793005u + 1442695040888963407u;
		junk[i] = (uint8_t)(s >> 56);
	}
	snprintf(p, sizeof(p), "%s/random.db", f->dir);
	tsup_write_file(p, junk, sizeof(junk));
	expect_bad(p, -EBADMSG);
	/* Random bytes behind a valid SQLite magic string. */
	memcpy(junk, "SQLite format 3", 16);
	tsup_write_file(p, junk, sizeof(junk));
	expect_bad(p, -EBADMSG);

	snprintf(p, sizeof(p), "%s/empty.db", f->dir);
	tsup_write_file(p, "", 0);
	expect_bad(p, -EBADMSG);

	snprintf(p, sizeof(p), "%s/other.db", f->dir);
	patch(p, "CREATE TABLE t(x); INSERT INTO t VALUES(1);");
	expect_bad(p, -EBADMSG);
	/* Right identity, foreign tables. */
	patch(p, "PRAGMA application_id=1178948185; PRAGMA user_version=1;");
	expect_bad(p, -EBADMSG);
}

/* Build the basic catalog under name, apply sql, expect open to fail. */
static void expect_patched_bad(struct fx *f, const char *name, const char *sql)
{
	snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
	build_basic(f->path);
	patch(f->path, sql);
	expect_bad(f->path, -EBADMSG);
}

static void test_reader_rejects_meta(void **state)
{
	struct fx *f = *state;

	expect_patched_bad(
	    f, "fmt.db",
	    "UPDATE meta SET value='ferry-catalog/3' WHERE key='format'");
	/* a format 2 file calling itself format 1 */
	expect_patched_bad(
	    f, "fmt1.db",
	    "UPDATE meta SET value='ferry-catalog/1' WHERE key='format'");
	expect_patched_bad(f, "fmtblob.db",
			   "UPDATE meta SET value=CAST('ferry-catalog/2' AS "
			   "BLOB) WHERE key='format'");
	expect_patched_bad(f, "hash.db",
			   "UPDATE meta SET value='md5' WHERE key='hash'");
	expect_patched_bad(f, "nogen.db",
			   "DELETE FROM meta WHERE key='generation'");
	expect_patched_bad(f, "gen0.db",
			   "UPDATE meta SET value=0 WHERE key='generation'");
	expect_patched_bad(f, "max.db",
			   "UPDATE meta SET value=3 WHERE key='chunk_max'");
	expect_patched_bad(
	    f, "maxtext.db",
	    "UPDATE meta SET value='262144' WHERE key='chunk_max'");
	expect_patched_bad(f, "appid.db", "PRAGMA application_id=0");
	expect_patched_bad(f, "uver0.db", "PRAGMA user_version=0");
	/* a later format of ours: not garbage, this build is too old */
	snprintf(f->path, sizeof(f->path), "%s/uver.db", f->dir);
	build_basic(f->path);
	patch(f->path, "PRAGMA user_version=3");
	expect_bad(f->path, -EPROTONOSUPPORT);
	/* format 2 without its pending table, format 1 with one */
	expect_patched_bad(f, "nopending.db", "DROP TABLE pending");
	expect_patched_bad(f, "v1pending.db",
			   "PRAGMA user_version=1; UPDATE meta SET "
			   "value='ferry-catalog/1' WHERE key='format'");
	expect_patched_bad(f, "pendingtext.db",
			   "UPDATE meta SET value='1' WHERE key='pending'");
	expect_patched_bad(f, "noroot.db", "DELETE FROM inode WHERE ino=1");
	expect_patched_bad(f, "rootreg.db",
			   "UPDATE inode SET kind=1, mode=33188 WHERE ino=1");
	expect_patched_bad(f, "nochunk.db", "DROP TABLE chunk");
	expect_patched_bad(f, "noindex.db", "DROP INDEX dirent_name");
	expect_patched_bad(f, "nocol.db",
			   "ALTER TABLE xattr DROP COLUMN value");
}

static void test_reader_hostile_rows(void **state)
{
	struct fx *f = *state;
	struct collect *c = calloc(1, sizeof(*c));
	struct cat_inode in;
	cat_reader *r;
	char sql[1024];
	size_t n;

	assert_non_null(c);
	build_basic(f->path);
	/* Names a hostile catalog might carry: "a/b", "..", "a\0b", 256
	 * bytes. None may come out of lookup or readdir. */
	n = (size_t)snprintf(
	    sql, sizeof(sql),
	    "UPDATE dirent SET name=X'612F62' WHERE name=CAST('with space' AS "
	    "BLOB);"
	    "UPDATE dirent SET name=X'2E2E' WHERE name=CAST('-leading-dash' AS "
	    "BLOB);"
	    "UPDATE dirent SET name=X'610062' WHERE name=CAST('fifo' AS BLOB);"
	    "UPDATE dirent SET name=CAST(name || 'x' AS BLOB) WHERE "
	    "length(name)=255;");
	assert_true(n < sizeof(sql));
	patch(f->path, sql);
	r = open_ok(f->path);
	assert_int_equal(cat_readdir(r, 1, 0, collect_cb, c), 0);
	assert_int_equal(c->n, N_ROOT - 4);
	assert_int_equal(find_name(c, "a/b"), SIZE_MAX);
	assert_int_equal(find_name(c, ".."), SIZE_MAX);
	assert_int_equal(find_name(c, "a"), SIZE_MAX);
	assert_int_equal(cat_lookup(r, 1, "a/b", 3, &in), -EINVAL);
	assert_int_equal(cat_lookup(r, 1, "..", 2, &in), -EINVAL);
	assert_int_equal(cat_lookup(r, 1, "with space", 10, &in), -ENOENT);
	assert_int_equal(cat_lookup(r, 1, "hard1", 5, &in), 0);
	cat_reader_close(r);

	/* Inode rows that break the rules are -EBADMSG, never handed out. */
	patch(f->path,
	      "UPDATE inode SET mode=16877 WHERE ino=2;" /* S_IFDIR on a REG */
	      "UPDATE inode SET size=999 WHERE ino=5;"	 /* size != target */
	      "UPDATE inode SET target=X'610062', size=3 WHERE ino=12;"
	      "UPDATE inode SET kind=9 WHERE ino=7;"
	      "UPDATE inode SET size=4611686018427387905 WHERE ino=3;" /* > 2^62
									*/
	      "UPDATE inode SET uid='x' WHERE ino=11;");
	r = open_ok(f->path);
	for (uint64_t ino = 2; ino <= 12; ino++) {
		int want = (ino == 2 || ino == 5 || ino == 12 || ino == 7 ||
			    ino == 3 || ino == 11)
			       ? -EBADMSG
			       : 0;

		assert_int_equal(cat_getattr(r, ino, &in), want);
	}
	assert_int_equal(cat_lookup(r, 1, "hard1", 5, &in), 0);
	assert_int_equal(cat_lookup(r, 10, "inner", 5, &in), -EBADMSG);
	memset(c, 0, sizeof(*c));
	assert_int_equal(cat_readdir(r, 1, 0, collect_cb, c), -EBADMSG);
	cat_reader_close(r);
	free(c);
}

static void expect_range_bad(struct fx *f, const char *name, const char *sql,
			     uint64_t ino, uint64_t off)
{
	struct cat_chunk c[4];
	cat_reader *r;
	size_t n = 99;

	snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
	build_basic(f->path);
	patch(f->path, sql);
	r = open_ok(f->path);
	assert_int_equal(cat_chunks_range(r, ino, off, 1, c, 4, &n), -EBADMSG);
	assert_int_equal(n, 0);
	cat_reader_close(r);
}

static void test_reader_hostile_chunks(void **state)
{
	struct fx *f = *state;
	uint64_t g4 = UINT64_C(1) << 32;

	expect_range_bad(f, "id31.db",
			 "UPDATE chunk SET id=zeroblob(31) WHERE ino=2", 2, 0);
	expect_range_bad(f, "id33.db",
			 "UPDATE chunk SET id=zeroblob(33) WHERE ino=2", 2, 0);
	expect_range_bad(f, "idtext.db",
			 "UPDATE chunk SET "
			 "id='0123456789abcdef0123456789abcdef' WHERE ino=2",
			 2, 0);
	expect_range_bad(
	    f, "lenmax.db",
	    "UPDATE chunk SET len=262145 WHERE ino=9 AND off=4294967296", 9,
	    g4);
	expect_range_bad(f, "len0.db", "UPDATE chunk SET len=0 WHERE ino=2", 2,
			 0);
	expect_range_bad(f, "pastsize.db",
			 "UPDATE chunk SET len=11 WHERE ino=2", 2, 0);
	expect_range_bad(f, "gap.db",
			 "DELETE FROM chunk WHERE ino=9 AND off=4294967296", 9,
			 g4 + 5);
	expect_range_bad(f, "nochunks.db", "DELETE FROM chunk WHERE ino=6", 6,
			 50);
	expect_range_bad(f, "tail.db",
			 "DELETE FROM chunk WHERE ino=9 AND off=5368709120", 9,
			 5 * GIB + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_name_check),
	    cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_readdir_pieces, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_writer_rejects, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_reader_rejects_files, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_reader_rejects_meta, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_reader_hostile_rows, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_reader_hostile_chunks, setup,
					    teardown),
	};

	memset(long_name, 'L', CAT_NAME_MAX);
	long_name[CAT_NAME_MAX] = '\0';
	return cmocka_run_group_tests(tests, NULL, NULL);
}
