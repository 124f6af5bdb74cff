/*
 * tests/unit/test_repl_scan.c — the replicator's scanner: a temp tree with
 * the awkward cases (non-UTF-8 and odd names, symlink, hard link pair,
 * user.* xattr, empty file, empty dir, fifo, a 1 MiB random file) is
 * scanned with repl_scan and read back with cat_reader: entries, order,
 * nlink, target, xattr, and chunk manifests that tile each file and hash to
 * its bytes. Also: an entry removed between the walk and the read is left
 * out with a warning while the scan succeeds; the source index maps ids
 * back to file bytes; repl_generation_build advances HEAD. The scan is
 * threaded: the same tree scanned with 1, 2, 4 and 7 threads gives the
 * same catalog and source index rows, and a cancelled threaded scan stops
 * cleanly.
 */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/source/repl_scan_priv.h"
#include "replicator/source/repl_srcindex.h"
#include "tsupport.h"

#define BIG_LEN (1024u * 1024u)
static const char ODD_NAME[] = "caf\xe9 \x01odd\xff";

struct fixture {
	char root[64]; /* temp dir holding src/ and state/ */
	char src[96];
	char state[96];
	uint8_t *big; /* contents of src/big.bin */
	int have_xattr;
};

struct warn_log {
	int count;
	char last[256];
	int last_err;
	const char *victim; /* before_read unlinks this name once */
};

static void path_in(char *buf, size_t cap, const char *dir, const char *name)
{
	snprintf(buf, cap, "%s/%s", dir, name);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char p[256], q[256];
	uint64_t x = 0x12345678abcdefull;
	size_t i;

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_repl_scan.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	path_in(f->src, sizeof(f->src), f->root, "src");
	path_in(f->state, sizeof(f->state), f->root, "state");
	assert_int_equal(mkdir(f->src, 0755), 0);
	assert_int_equal(mkdir(f->state, 0755), 0);

	f->big = malloc(BIG_LEN);
	assert_non_null(f->big);
	for (i = 0; i < BIG_LEN; i++) { /* xorshift: incompressible */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		f->big[i] = (uint8_t)(x >> 24);
	}
	path_in(p, sizeof(p), f->src, "big.bin");
	tsup_write_file(p, f->big, BIG_LEN);
	path_in(p, sizeof(p), f->src, "a.txt");
	tsup_write_file(p, "hello\n", 6);
	f->have_xattr = setxattr(p, "user.color", "blue", 4, 0) == 0;
	path_in(q, sizeof(q), f->src, "sub");
	assert_int_equal(mkdir(q, 0755), 0);
	path_in(q, sizeof(q), f->src, "sub/hardlink");
	assert_int_equal(link(p, q), 0);
	path_in(p, sizeof(p), f->src, "link");
	assert_int_equal(symlink("a.txt", p), 0);
	path_in(p, sizeof(p), f->src, "dangling");
	assert_int_equal(symlink("nowhere/at/all", p), 0);
	path_in(p, sizeof(p), f->src, "empty");
	tsup_write_file(p, "", 0);
	path_in(p, sizeof(p), f->src, "emptydir");
	assert_int_equal(mkdir(p, 0700), 0);
	path_in(p, sizeof(p), f->src, "fifo");
	assert_int_equal(mkfifo(p, 0600), 0);
	path_in(p, sizeof(p), f->src, ODD_NAME);
	tsup_write_file(p, "odd", 3);
	path_in(p, sizeof(p), f->src, "vanish.txt");
	tsup_write_file(p, "now you see me", 14);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
	assert_int_equal(system(cmd), 0);
	free(f->big);
	free(f);
	return 0;
}

static void on_warn(void *ctx, const char *rel, size_t rel_len, int err,
		    const char *why)
{
	struct warn_log *w = ctx;

	(void)why;
	w->count++;
	w->last_err = err;
	snprintf(w->last, sizeof(w->last), "%.*s", (int)rel_len, rel);
}

/* Remove the victim just before the scanner opens it: the window between
 * the directory walk and the read, where a real tree changes under us. */
static int before_read(void *ctx, int dirfd, const char *name)
{
	struct warn_log *w = ctx;

	if (w->victim && !strcmp(name, w->victim)) {
		unlinkat(dirfd, name, 0);
		w->victim = NULL;
	}
	return 0;
}

static cat_reader *scan_tree(struct fixture *f, struct warn_log *w,
			     struct repl_scan_stats *st, char *srcidx,
			     size_t cap, unsigned threads)
{
	char cat[256];
	struct repl_scan_opts o = {
	    .generation = 1,
	    .warn = on_warn,
	    .before_read = before_read,
	    .ctx = w,
	    .threads = threads,
	};
	cat_reader *r = NULL;

	path_in(cat, sizeof(cat), f->state, "1.db");
	path_in(srcidx, cap, f->state, "src-1.db");
	o.srcindex_path = srcidx;
	assert_int_equal(repl_scan(f->src, cat, &o, st), 0);
	assert_int_equal(cat_reader_open(cat, &r), 0);
	return r;
}

struct names {
	char v[16][64];
	size_t len[16];
	int n;
};

static int collect(void *ctx, const void *name, size_t len,
		   const struct cat_inode *in, uint64_t pos)
{
	struct names *nm = ctx;

	(void)in;
	assert_int_equal(pos, (uint64_t)nm->n + 1);
	assert_true(nm->n < 16 && len < 64);
	memcpy(nm->v[nm->n], name, len);
	nm->len[nm->n] = len;
	nm->n++;
	return 0;
}

static void lookup(cat_reader *r, uint64_t parent, const char *name,
		   struct cat_inode *in)
{
	assert_int_equal(cat_lookup(r, parent, name, strlen(name), in), 0);
}

/* The manifest of ino tiles [0, size) and every chunk hashes to its id. */
static void check_manifest(cat_reader *r, uint64_t ino, const uint8_t *data,
			   uint64_t size, size_t *ret_n)
{
	struct cat_chunk c[64];
	uint64_t off = 0;
	size_t n, i, total = 0;
	chunk_id id;

	while (off < size) {
		assert_int_equal(
		    cat_chunks_range(r, ino, off, size - off, c, 64, &n), 0);
		assert_true(n > 0);
		for (i = 0; i < n; i++) {
			assert_int_equal(c[i].off, off);
			assert_true(c[i].len >= 1 &&
				    c[i].len <= CHUNK_MAX_DEFAULT);
			assert_int_equal(
			    chunk_id_compute(data + off, c[i].len, &id), 0);
			assert_memory_equal(id.b, c[i].id.b, CHUNK_ID_LEN);
			off += c[i].len;
		}
		total += n;
	}
	assert_int_equal(off, size);
	*ret_n = total;
}

static void check_scan_tree(void **state, unsigned threads)
{
	struct fixture *f = *state;
	struct warn_log w = {.victim = "vanish.txt"};
	struct repl_scan_stats st;
	struct cat_inode root, in, hl, sub, big;
	struct names nm = {.n = 0};
	struct cat_meta meta;
	char srcidx[256], buf[64];
	size_t len, nchunks;
	cat_reader *r = scan_tree(f, &w, &st, srcidx, sizeof(srcidx), threads);
	static const char *const sorted[] = {
	    "a.txt",	"big.bin", "caf\xe9 \x01odd\xff",
	    "dangling", "empty",   "emptydir",
	    "fifo",	"link",	   "sub",
	};
	int i;

	/* the vanished file is reported by path and left out */
	assert_int_equal(w.count, 1);
	assert_string_equal(w.last, "vanish.txt");
	assert_int_equal(w.last_err, ENOENT);
	assert_int_equal(st.left_out, 1);

	cat_reader_meta(r, &meta);
	assert_int_equal(meta.generation, 1);
	assert_int_equal(cat_getattr(r, CAT_ROOT_INO, &root), 0);
	assert_int_equal(root.kind, CAT_DIR);
	assert_int_equal(root.nlink, 4); /* 2 + sub + emptydir */

	/* entries in name-byte order; the odd name sorts by its bytes */
	assert_int_equal(cat_readdir(r, CAT_ROOT_INO, 0, collect, &nm), 0);
	assert_int_equal(nm.n, 9);
	for (i = 0; i < 9; i++) {
		assert_int_equal(nm.len[i], strlen(sorted[i]));
		assert_memory_equal(nm.v[i], sorted[i], nm.len[i]);
	}

	/* hard link pair: one inode, nlink 2, same ino from both names */
	lookup(r, CAT_ROOT_INO, "a.txt", &in);
	lookup(r, CAT_ROOT_INO, "sub", &sub);
	assert_int_equal(sub.kind, CAT_DIR);
	assert_int_equal(sub.nlink, 2);
	lookup(r, sub.ino, "hardlink", &hl);
	assert_int_equal(hl.ino, in.ino);
	assert_int_equal(in.nlink, 2);
	assert_int_equal(in.kind, CAT_REG);
	assert_int_equal(in.size, 6);
	if (f->have_xattr) {
		assert_int_equal(cat_getxattr(r, in.ino, "user.color", 10, buf,
					      sizeof(buf), &len),
				 0);
		assert_int_equal(len, 4);
		assert_memory_equal(buf, "blue", 4);
	}

	/* symlinks, dangling or not, keep their text */
	lookup(r, CAT_ROOT_INO, "link", &in);
	assert_int_equal(in.kind, CAT_LNK);
	assert_int_equal(in.size, 5);
	assert_int_equal(cat_readlink(r, in.ino, buf, sizeof(buf), &len), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "a.txt", 5);
	lookup(r, CAT_ROOT_INO, "dangling", &in);
	assert_int_equal(cat_readlink(r, in.ino, buf, sizeof(buf), &len), 0);
	assert_memory_equal(buf, "nowhere/at/all", len);

	lookup(r, CAT_ROOT_INO, "fifo", &in);
	assert_int_equal(in.kind, CAT_FIFO);
	lookup(r, CAT_ROOT_INO, "empty", &in);
	assert_int_equal(in.kind, CAT_REG);
	assert_int_equal(in.size, 0);
	check_manifest(r, in.ino, NULL, 0, &nchunks);
	assert_int_equal(nchunks, 0);
	lookup(r, CAT_ROOT_INO, "emptydir", &in);
	assert_int_equal(in.kind, CAT_DIR);
	assert_int_equal(in.nlink, 2);
	assert_int_equal(in.mode & 07777, 0700);

	/* the 1 MiB file: several chunks that tile it and hash right */
	lookup(r, CAT_ROOT_INO, "big.bin", &big);
	assert_int_equal(big.size, BIG_LEN);
	check_manifest(r, big.ino, f->big, BIG_LEN, &nchunks);
	assert_true(nchunks >= 4);
	assert_int_equal(st.files, 4); /* a.txt, big.bin, empty, odd */
	assert_int_equal(st.dirs, 3);
	assert_int_equal(st.bytes, BIG_LEN + 6 + 3);

	/* the source index maps a chunk id back to (file, offset) */
	{
		struct cat_chunk c;
		struct repl_src_loc loc;
		repl_srcindex *idx;
		chunk_id unknown = {{0}};

		assert_int_equal(
		    cat_chunks_range(r, big.ino, 0, 1, &c, 1, &len), 0);
		assert_int_equal(repl_srcindex_open(srcidx, &idx), 0);
		assert_int_equal(repl_srcindex_lookup(idx, &c.id, &loc), 0);
		assert_string_equal(loc.path, "big.bin");
		assert_int_equal(loc.off, 0);
		assert_int_equal(loc.len, c.len);
		assert_int_equal(repl_srcindex_lookup(idx, &unknown, &loc),
				 -ENOENT);
		repl_srcindex_close(idx);
	}
	cat_reader_close(r);
}

/* threads 0 is one per CPU; 1 is the walker alone; 4 oversubscribes. */
static void test_scan_tree(void **state)
{
	check_scan_tree(state, 0);
}

static void test_scan_tree_1(void **state)
{
	check_scan_tree(state, 1);
}

static void test_scan_tree_4(void **state)
{
	check_scan_tree(state, 4);
}

/* Every start is a new generation; HEAD moves last and older catalogs
 * stay. */
/* The manifest of name under src in the catalog at path, as "off:len:id"
 * lines, for comparing two generations. */
static char *manifest_of(const char *catpath, const char *name)
{
	struct cat_chunk cs[64];
	struct cat_inode in;
	char *out = calloc(1, 64 * 100), hex[65];
	cat_reader *r = NULL;
	size_t n = 0, i, at = 0;

	assert_non_null(out);
	assert_int_equal(cat_reader_open(catpath, &r), 0);
	assert_int_equal(cat_lookup(r, CAT_ROOT_INO, name, strlen(name), &in),
			 0);
	assert_int_equal(cat_chunks_range(r, in.ino, 0, in.size, cs, 64, &n),
			 0);
	for (i = 0; i < n; i++) {
		chunk_id_to_hex(&cs[i].id, hex);
		at += (size_t)snprintf(out + at, 64 * 100 - at, "%llu:%u:%s\n",
				       (unsigned long long)cs[i].off, cs[i].len,
				       hex);
	}
	cat_reader_close(r);
	return out;
}

static void test_generation_build(void **state)
{
	struct fixture *f = *state;
	struct repl_scan_opts o = {0};
	struct repl_generation g;
	struct timespec keep[2];
	char ns[256], p[320], q[320], *m1, *m2;
	uint64_t head = 99, files;
	struct stat st;

	path_in(ns, sizeof(ns), f->state, "ns");
	assert_int_equal(repl_head_read(ns, &head), 0);
	assert_int_equal(head, 0);
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 1);
	assert_int_equal(g.unchanged, 0);
	assert_int_equal(strlen(g.sha256), 64);
	assert_int_equal(g.stats.reused, 0);
	assert_true(g.stats.bytes_read >= g.stats.bytes);
	files = g.stats.files;
	snprintf(p, sizeof(p), "%s/catalog/1.db.zst", ns);
	assert_int_equal(stat(p, &st), 0);
	snprintf(p, sizeof(p), "%s/catalog/1.db.zst.sha256", ns);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 65);
	snprintf(p, sizeof(p), "%s/source/1.db", ns);
	assert_int_equal(stat(p, &st), 0);

	/* The same tree again: nothing is read, nothing new is published. */
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 1);
	assert_int_equal(g.unchanged, 1);
	assert_int_equal(g.stats.reused, files);
	assert_int_equal(g.stats.bytes_read, 0);
	assert_int_equal(strlen(g.sha256), 64);
	assert_int_equal(repl_head_read(ns, &head), 0);
	assert_int_equal(head, 1);
	snprintf(p, sizeof(p), "%s/catalog/2.db", ns);
	assert_int_equal(stat(p, &st), -1);
	snprintf(p, sizeof(p), "%s/source/2.db", ns);
	assert_int_equal(stat(p, &st), -1);

	/* One file rewritten in place, its size and mtime put back: ctime
	 * still moved, so it alone is read again, and its new bytes are in
	 * the new generation. */
	path_in(p, sizeof(p), f->src, "big.bin");
	assert_int_equal(stat(p, &st), 0);
	keep[0] = st.st_atim;
	keep[1] = st.st_mtim;
	f->big[100000] ^= 0x5a;
	tsup_write_file(p, f->big, BIG_LEN);
	assert_int_equal(utimensat(AT_FDCWD, p, keep, 0), 0);
	snprintf(q, sizeof(q), "%s/catalog/1.db", ns);
	m1 = manifest_of(q, "big.bin");
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 2);
	assert_int_equal(g.unchanged, 0);
	assert_int_equal(g.stats.reused, files - 1);
	assert_int_equal(g.stats.bytes_read, BIG_LEN);
	snprintf(q, sizeof(q), "%s/catalog/2.db", ns);
	m2 = manifest_of(q, "big.bin");
	assert_string_not_equal(m1, m2);
	free(m2);
	/* The unchanged ones keep their manifests. */
	snprintf(q, sizeof(q), "%s/catalog/1.db", ns);
	m1 = (free(m1), manifest_of(q, "a.txt"));
	snprintf(q, sizeof(q), "%s/catalog/2.db", ns);
	m2 = manifest_of(q, "a.txt");
	assert_string_equal(m1, m2);
	free(m1);
	free(m2);

	/* A file replaced by another inode of the same size and mtime is a
	 * new identity: read. Its old inode lives on as sub/hardlink, whose
	 * ctime the lost link moved: read again too (6 + 6 bytes). */
	path_in(p, sizeof(p), f->src, "a.txt");
	path_in(q, sizeof(q), f->src, "a.new");
	assert_int_equal(stat(p, &st), 0);
	keep[0] = st.st_atim;
	keep[1] = st.st_mtim;
	tsup_write_file(q, "HELLO\n", 6);
	assert_int_equal(utimensat(AT_FDCWD, q, keep, 0), 0);
	assert_int_equal(rename(q, p), 0);
	if (f->have_xattr)
		assert_int_equal(setxattr(p, "user.color", "blue", 4, 0), 0);
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 3);
	assert_int_equal(g.stats.bytes_read, 12);
	/* Unchanged once more: generation 3 stays. */
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 3);
	assert_int_equal(g.unchanged, 1);
	assert_int_equal(g.stats.bytes_read, 0);
}

/* 1 when STATE/ns/SUB/NAME exists. */
static int state_has(const char *ns, const char *sub, const char *name)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s/%s", ns, sub, name);
	return stat(p, &st) == 0;
}

static void touch_in(const char *ns, const char *sub, const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s/%s", ns, sub, name);
	tsup_write_file(p, "x", 1);
}

/* Older generations go, newer and unrelated names stay; leftovers of a
 * removal cut short (a digest without its catalog, SQLite side files)
 * go with the next one. */
static void test_prune_generations(void **state)
{
	struct fixture *f = *state;
	static const char *const cat_names[] = {
	    "1.db",
	    "1.db.zst",
	    "1.db.zst.sha256",
	    "2.db.zst.sha256",
	    "3.db",
	    "3.db.zst",
	    "3.db.zst.sha256",
	    "4.db",
	    "4.db.zst",
	    "4.db.zst.sha256",
	    "10.db.zst",
	    "02.db",
	    "x.db",
	    "3db",
	    "1.txt",
	};
	static const char *const src_names[] = {"1.db",	    "2.db", "2.db-wal",
						"2.db-shm", "3.db", "4.db"};
	char ns[256], p[320];
	uint64_t removed = 99;
	size_t i;

	path_in(ns, sizeof(ns), f->state, "ns");
	snprintf(p, sizeof(p), "%s/catalog", ns);
	assert_int_equal(base_mkdir_p(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/source", ns);
	assert_int_equal(base_mkdir_p(p, 0755), 0);
	for (i = 0; i < sizeof(cat_names) / sizeof(*cat_names); i++)
		touch_in(ns, "catalog", cat_names[i]);
	for (i = 0; i < sizeof(src_names) / sizeof(*src_names); i++)
		touch_in(ns, "source", src_names[i]);

	/* fewer generations than kept: nothing goes */
	assert_int_equal(repl_generations_prune(ns, 4, 4, &removed), 0);
	assert_int_equal(removed, 0);
	assert_true(state_has(ns, "catalog", "1.db.zst"));

	/* keep 2 of 4: 1 and 2 go, 3 and 4 stay, and so does 10 (newer:
	 * never touched) and every name that is not GEN.db* */
	assert_int_equal(repl_generations_prune(ns, 4, 2, &removed), 0);
	assert_int_equal(removed, 1); /* 2 had no compressed catalog left */
	assert_false(state_has(ns, "catalog", "1.db"));
	assert_false(state_has(ns, "catalog", "1.db.zst"));
	assert_false(state_has(ns, "catalog", "1.db.zst.sha256"));
	assert_false(state_has(ns, "catalog", "2.db.zst.sha256"));
	for (i = 0; i < 4; i++)
		assert_false(state_has(ns, "source", src_names[i]));
	assert_true(state_has(ns, "source", "3.db"));
	assert_true(state_has(ns, "source", "4.db"));
	assert_true(state_has(ns, "catalog", "3.db"));
	assert_true(state_has(ns, "catalog", "3.db.zst"));
	assert_true(state_has(ns, "catalog", "3.db.zst.sha256"));
	assert_true(state_has(ns, "catalog", "4.db.zst"));
	assert_true(state_has(ns, "catalog", "10.db.zst"));
	assert_true(state_has(ns, "catalog", "02.db"));
	assert_true(state_has(ns, "catalog", "x.db"));
	assert_true(state_has(ns, "catalog", "3db"));
	assert_true(state_has(ns, "catalog", "1.txt"));

	/* keep 1: only 4 (and the newer 10) */
	assert_int_equal(repl_generations_prune(ns, 4, 1, &removed), 0);
	assert_int_equal(removed, 1);
	assert_false(state_has(ns, "catalog", "3.db.zst"));
	assert_false(state_has(ns, "source", "3.db"));
	assert_true(state_has(ns, "catalog", "4.db.zst"));
	assert_true(state_has(ns, "source", "4.db"));
	/* no state at all is no error */
	path_in(p, sizeof(p), f->state, "none");
	assert_int_equal(repl_generations_prune(p, 9, 1, &removed), 0);
	assert_int_equal(removed, 0);
}

/* The ino of the entry at the '/'-separated path rel in the catalog at
 * catpath; 0 when it is not there. */
static uint64_t ino_at(const char *catpath, const char *rel)
{
	struct cat_inode in = {.ino = CAT_ROOT_INO};
	cat_reader *r = NULL;
	const char *p = rel;

	assert_int_equal(cat_reader_open(catpath, &r), 0);
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (cat_lookup(r, in.ino, p, n, &in) < 0) {
			in.ino = 0;
			break;
		}
		p += n + (slash != NULL);
	}
	cat_reader_close(r);
	return in.ino;
}

/* Inode numbers stay with their entries across generations: an entry
 * the next walk finds again (same source identity and kind), even moved
 * to another directory, keeps its ino; a new one gets a number above
 * every one used before; a deleted one's number is not given out again.
 * Nothing is read for the numbers (the walk reads no more bytes). */
static void test_stable_inos(void **state)
{
	struct fixture *f = *state;
	struct repl_scan_opts o = {.defer = 1};
	struct repl_generation g;
	char ns[256], c1[320], c2[320], c3[320], p[320], q[320];
	uint64_t a1, sub1, link1, big1, empty1, max1 = 0;
	static const char *const names[] = {
	    "a.txt", "big.bin",	 "link", "dangling",
	    "empty", "emptydir", "sub",	 "sub/hardlink"};

	path_in(ns, sizeof(ns), f->state, "ns");
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	snprintf(c1, sizeof(c1), "%s/catalog/1.db", ns);
	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		uint64_t ino = ino_at(c1, names[i]);

		assert_true(ino > CAT_ROOT_INO);
		if (ino > max1)
			max1 = ino;
	}
	a1 = ino_at(c1, "a.txt");
	sub1 = ino_at(c1, "sub");
	link1 = ino_at(c1, "link");
	big1 = ino_at(c1, "big.bin");
	empty1 = ino_at(c1, "empty");

	/* A name sorting first (it would shift every later number of a
	 * walk that numbered in order), a file gone, a directory moved
	 * into another one. */
	path_in(p, sizeof(p), f->src, "0first");
	tsup_write_file(p, "new\n", 4);
	path_in(p, sizeof(p), f->src, "empty");
	assert_int_equal(unlink(p), 0);
	path_in(p, sizeof(p), f->src, "emptydir");
	path_in(q, sizeof(q), f->src, "sub/moved");
	assert_int_equal(rename(p, q), 0);
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 2);
	assert_int_equal(g.stats.bytes_read, 0);
	snprintf(c2, sizeof(c2), "%s/catalog/2.db", ns);
	assert_int_equal(ino_at(c2, "a.txt"), a1);
	assert_int_equal(ino_at(c2, "sub"), sub1);
	assert_int_equal(ino_at(c2, "link"), link1);
	assert_int_equal(ino_at(c2, "big.bin"), big1);
	assert_int_equal(ino_at(c2, "sub/hardlink"), a1);
	assert_int_equal(ino_at(c2, "sub/moved"), ino_at(c1, "emptydir"));
	assert_int_equal(ino_at(c2, "empty"), 0);
	assert_true(ino_at(c2, "0first") > max1);

	/* A new file after the deletion does not get the deleted number.
	 * A file whose content changed in place gets a new number (a
	 * number names one content: a mount that switches in place keeps
	 * the old number's bytes for whoever holds it open); its hard link
	 * follows it. */
	path_in(p, sizeof(p), f->src, "later");
	tsup_write_file(p, "later\n", 6);
	path_in(p, sizeof(p), f->src, "a.txt");
	tsup_write_file(p, "changed content\n", 16);
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	snprintf(c3, sizeof(c3), "%s/catalog/3.db", ns);
	assert_true(ino_at(c3, "later") > ino_at(c3, "0first"));
	assert_int_not_equal(ino_at(c3, "later"), empty1);
	assert_true(ino_at(c3, "a.txt") > ino_at(c3, "0first"));
	assert_int_equal(ino_at(c3, "sub/hardlink"), ino_at(c3, "a.txt"));
	assert_int_equal(ino_at(c3, "sub"), sub1);
	assert_int_equal(ino_at(c3, "big.bin"), big1);
}

static void test_bad_input(void **state)
{
	struct fixture *f = *state;
	struct repl_scan_opts o = {.generation = 1};
	struct repl_scan_stats st;
	char cat[256], missing[256];

	path_in(cat, sizeof(cat), f->state, "x.db");
	path_in(missing, sizeof(missing), f->root, "missing");
	assert_int_equal(repl_scan(missing, cat, &o, &st), -ENOENT);
	assert_int_equal(access(cat, F_OK), -1);
	o.generation = 0;
	assert_int_equal(repl_scan(f->src, cat, &o, &st), -EINVAL);
}

/*
 * A tree where thread timing could show: many small files in several
 * directories (files before and after subdirectories in name order),
 * files big enough to be hashed in several windows by several threads,
 * the same content under several names (the source index keeps the first
 * location), hard links across directories, symlinks and empty files.
 */
static void make_busy_tree(const char *src)
{
	static const char *const dirs[] = {"a", "a/b", "a/b/c", "m", "z"};
	char p[512], q[512];
	uint8_t *big = tsup_random_bytes(9u << 20, 4242);
	size_t i, d;

	for (d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		snprintf(p, sizeof(p), "%s/%s", src, dirs[d]);
		assert_int_equal(mkdir(p, 0755), 0);
		for (i = 0; i < 40; i++) {
			size_t len = (i * 7919 + d * 131) % 70000;

			snprintf(p, sizeof(p), "%s/%s/f%02zu", src, dirs[d], i);
			tsup_write_file(p, big + i * 1000 + d, len);
		}
	}
	snprintf(p, sizeof(p), "%s/0first.bin", src);
	tsup_write_file(p, big, 9u << 20);
	snprintf(p, sizeof(p), "%s/a/b/same.bin", src);
	tsup_write_file(p, big, 5u << 20); /* a prefix: shared chunks */
	snprintf(p, sizeof(p), "%s/z/zz.bin", src);
	tsup_write_file(p, big + 12345, 6u << 20);
	snprintf(p, sizeof(p), "%s/m/f03", src);
	snprintf(q, sizeof(q), "%s/z/hard", src);
	assert_int_equal(link(p, q), 0);
	snprintf(q, sizeof(q), "%s/a/hard2", src);
	assert_int_equal(link(p, q), 0);
	snprintf(p, sizeof(p), "%s/a/ln", src);
	assert_int_equal(symlink("../z/zz.bin", p), 0);
	snprintf(p, sizeof(p), "%s/m/empty", src);
	tsup_write_file(p, "", 0);
	snprintf(p, sizeof(p), "%s/m/f07", src);
	if (setxattr(p, "user.k", "v", 1, 0) < 0)
		print_message("no user xattrs here: %s\n", strerror(errno));
	free(big);
}

/* Append every row of sql's result to *buf: column types and bytes. */
static void dump_rows(sqlite3 *db, const char *sql, char **buf, size_t *len)
{
	sqlite3_stmt *st;
	FILE *f;
	int rc, c;

	f = open_memstream(buf, len);
	assert_non_null(f);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (c = 0; c < sqlite3_column_count(st); c++) {
			int t = sqlite3_column_type(st, c);
			const void *b = sqlite3_column_blob(st, c);
			int n = sqlite3_column_bytes(st, c);

			fprintf(f, "%d:%d:", t, n);
			if (n)
				fwrite(b, 1, (size_t)n, f);
			fputc('|', f);
		}
		fputc('\n', f);
	}
	assert_int_equal(rc, SQLITE_DONE);
	sqlite3_finalize(st);
	fclose(f);
}

/* All rows of the tables in sqls, in key order, as one byte string. */
static char *dump_db(const char *path, const char *const *sqls, size_t n,
		     size_t *ret_len)
{
	sqlite3 *db;
	char *all = NULL, *part;
	size_t alen = 0, plen, i;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	for (i = 0; i < n; i++) {
		part = NULL;
		dump_rows(db, sqls[i], &part, &plen);
		all = realloc(all, alen + plen + 1);
		assert_non_null(all);
		memcpy(all + alen, part, plen);
		alen += plen;
		free(part);
	}
	sqlite3_close(db);
	*ret_len = alen;
	return all;
}

static const char *const CAT_SQL[] = {
    "SELECT * FROM meta WHERE key != 'created_ns' ORDER BY key",
    "SELECT * FROM inode ORDER BY ino",
    "SELECT * FROM dirent ORDER BY parent, pos",
    "SELECT * FROM xattr ORDER BY ino, name",
    "SELECT * FROM chunk ORDER BY ino, off",
};

static const char *const SRC_SQL[] = {
    "SELECT * FROM meta ORDER BY key",
    "SELECT * FROM file ORDER BY ino",
    "SELECT * FROM chunk ORDER BY id",
};

static int count_chunk(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	(void)ino;
	(void)c;
	(*(size_t *)ctx)++;
	return 0;
}

/* Collect a catalog file's manifest rows in order. */
struct rows {
	struct cat_chunk v[64];
	size_t n, holes;
	uint64_t hole_bytes, data_bytes;
};

static void rows_of(cat_reader *r, uint64_t ino, uint64_t size,
		    struct rows *out)
{
	struct cat_chunk cs[64];
	uint64_t off = 0;
	size_t n;

	memset(out, 0, sizeof(*out));
	while (off < size) {
		assert_int_equal(
		    cat_chunks_range(r, ino, off, size - off, cs, 64, &n), 0);
		assert_true(n > 0);
		for (size_t i = 0; i < n; i++) {
			if (chunk_id_is_hole(&cs[i].id)) {
				out->holes++;
				out->hole_bytes += cs[i].len;
			} else {
				out->data_bytes += cs[i].len;
				if (out->n < 64)
					out->v[out->n++] = cs[i];
			}
		}
		off = cs[n - 1].off + cs[n - 1].len;
	}
	assert_int_equal(off, size);
}

/* A sparse file: holes are mapped, never read, recorded as hole rows; the
 * data between them is cut and hashed; blocks is the source's. */
static void test_sparse_holes(void **state)
{
	struct fixture *f = *state;
	struct repl_scan_opts o = {0};
	struct repl_scan_stats st;
	uint64_t size = 64ull << 20, at[2] = {8ull << 20, 40ull << 20};
	uint8_t *data = tsup_random_bytes(1 << 20, 77);
	char dir[160], p[200], cat[200];
	struct cat_inode in;
	struct stat sb;
	struct rows rw;
	cat_reader *r;
	int fd;

	snprintf(dir, sizeof(dir), "%s/sparse", f->root);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(p, sizeof(p), "%s/holes.bin", dir);
	fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pwrite(fd, data, 1 << 20, (off_t)at[i]),
				 1 << 20);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	close(fd);
	assert_int_equal(stat(p, &sb), 0);
	if ((uint64_t)sb.st_blocks * 512 >= size) {
		free(data);
		skip(); /* a file system without holes */
	}
	snprintf(cat, sizeof(cat), "%s/sparse.db", f->root);
	o.generation = 1;
	assert_int_equal(repl_scan(dir, cat, &o, &st), 0);
	/* only the data was read */
	assert_int_equal(st.bytes_read, 2u << 20);
	assert_int_equal(cat_reader_open(cat, &r), 0);
	assert_int_equal(cat_lookup(r, 1, "holes.bin", 9, &in), 0);
	assert_int_equal(in.blocks, (uint64_t)sb.st_blocks);
	rows_of(r, in.ino, size, &rw);
	assert_int_equal(rw.data_bytes, 2u << 20);
	assert_int_equal(rw.hole_bytes, size - (2u << 20));
	assert_true(rw.holes >= (size - (2u << 20)) / CHUNK_MAX_DEFAULT);
	/* the data chunks are the data's bytes, from its offsets */
	for (size_t i = 0; i < rw.n; i++) {
		uint64_t base = rw.v[i].off >= at[1] ? at[1] : at[0];
		chunk_id id;

		assert_true(rw.v[i].off >= base &&
			    rw.v[i].off + rw.v[i].len <= base + (1 << 20));
		assert_int_equal(chunk_id_compute(data + (rw.v[i].off - base),
						  rw.v[i].len, &id),
				 0);
		assert_memory_equal(id.b, rw.v[i].id.b, CHUNK_ID_LEN);
	}
	/* holes are nothing to fetch; the same MiB at both places is cut
	 * from each region's start the same way: its chunks once */
	{
		size_t each = 0;

		assert_int_equal(cat_chunks_each(r, count_chunk, &each), 0);
		assert_int_equal(each * 2, rw.n);
	}
	cat_reader_close(r);
	free(data);
}

/* With hashing deferred, a regular file is never opened by the walk: its
 * xattrs are read by name, like a symlink's. The syscalls (listxattrat,
 * getxattrat) and the /proc path older kernels get must give the same
 * catalog, and neither may follow the symlink to its target. */
static char *xattr_dump_deferred(struct fixture *f, const char *tag,
				 int use_proc, size_t *len)
{
	static const char *const sql[] = {
	    "SELECT * FROM inode ORDER BY ino",
	    "SELECT * FROM xattr ORDER BY ino, name",
	    "SELECT * FROM pending ORDER BY ino",
	};
	char cat[256], idx[256];
	struct warn_log w = {0};
	struct repl_scan_opts o = {
	    .generation = 1, .warn = on_warn, .ctx = &w, .defer = 1};
	struct repl_scan_stats st;
	cat_reader *r = NULL;
	struct cat_inode in;
	char buf[64];
	size_t n;

	snprintf(cat, sizeof(cat), "%s/%s.db", f->state, tag);
	snprintf(idx, sizeof(idx), "%s/%s-src.db", f->state, tag);
	o.srcindex_path = idx;
	repl_xattrs_use_proc(use_proc);
	assert_int_equal(repl_scan(f->src, cat, &o, &st), 0);
	repl_xattrs_use_proc(0);
	assert_int_equal(w.count, 0);
	assert_true(st.pending >= 2); /* a.txt, big.bin, odd: not read */
	assert_int_equal(st.bytes_read, 0);
	assert_int_equal(cat_reader_open(cat, &r), 0);
	lookup(r, CAT_ROOT_INO, "a.txt", &in);
	if (f->have_xattr) {
		assert_int_equal(cat_getxattr(r, in.ino, "user.color", 10, buf,
					      sizeof(buf), &n),
				 0);
		assert_int_equal(n, 4);
		assert_memory_equal(buf, "blue", 4);
	}
	lookup(r, CAT_ROOT_INO, "link", &in);
	/* the symlink's own xattrs, not a.txt's */
	assert_int_not_equal(
	    cat_getxattr(r, in.ino, "user.color", 10, buf, sizeof(buf), &n), 0);
	if (geteuid() == 0) {
		assert_int_equal(cat_getxattr(r, in.ino, "trusted.ferry", 13,
					      buf, sizeof(buf), &n),
				 0);
		assert_memory_equal(buf, "lnk", 3);
	}
	cat_reader_close(r);
	return dump_db(cat, sql, 3, len);
}

static void test_xattrs_by_name(void **state)
{
	struct fixture *f = *state;
	char p[256], *a, *b;
	size_t alen, blen;

	path_in(p, sizeof(p), f->src, "vanish.txt");
	assert_int_equal(unlink(p), 0);
	path_in(p, sizeof(p), f->src, "link");
	if (geteuid() == 0)
		assert_int_equal(lsetxattr(p, "trusted.ferry", "lnk", 3, 0), 0);
	a = xattr_dump_deferred(f, "at", 0, &alen);
	b = xattr_dump_deferred(f, "proc", 1, &blen);
	assert_int_equal(alen, blen);
	assert_memory_equal(a, b, alen);
	free(a);
	free(b);
}

static void test_threads_same_catalog(void **state)
{
	static const unsigned threads[] = {1, 2, 4, 7};
	struct fixture *f = *state;
	char *cat0 = NULL, *src0 = NULL;
	size_t clen0 = 0, slen0 = 0;
	struct repl_scan_stats st0 = {0};
	char src[160];
	size_t t;

	snprintf(src, sizeof(src), "%s/busy", f->root);
	assert_int_equal(mkdir(src, 0755), 0);
	make_busy_tree(src);
	for (t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
		char cat[256], idx[256];
		struct repl_scan_opts o = {.generation = 1,
					   .threads = threads[t]};
		struct repl_scan_stats st;
		size_t clen, slen;
		char *c, *x;

		snprintf(cat, sizeof(cat), "%s/t%u.db", f->state, threads[t]);
		snprintf(idx, sizeof(idx), "%s/t%u-src.db", f->state,
			 threads[t]);
		o.srcindex_path = idx;
		assert_int_equal(repl_scan(src, cat, &o, &st), 0);
		assert_int_equal(st.left_out, 0);
		c = dump_db(cat, CAT_SQL, 5, &clen);
		x = dump_db(idx, SRC_SQL, 3, &slen);
		if (t == 0) {
			/* 200 small (one hard-linked twice more), 3 big,
			 * one empty; and dedup between the big ones */
			assert_int_equal(st.files, 204);
			assert_true(st.unique < st.chunks);
			cat0 = c;
			src0 = x;
			clen0 = clen;
			slen0 = slen;
			st0 = st;
			continue;
		}
		assert_int_equal(st.files, st0.files);
		assert_int_equal(st.chunks, st0.chunks);
		assert_int_equal(st.unique, st0.unique);
		assert_int_equal(clen, clen0);
		assert_memory_equal(c, cat0, clen);
		assert_int_equal(slen, slen0);
		assert_memory_equal(x, src0, slen);
		free(c);
		free(x);
	}
	free(cat0);
	free(src0);
}

/* Cancel from inside the scan (the hook runs on pool threads): the scan
 * stops with -ECANCELED, leaves no catalog or index, and every job and
 * hash task is finished before it returns (ASan checks the rest). */
struct cancel_ctx {
	atomic_int flag;
	int calls;
};

static int cancel_after(void *ctx, int dirfd, const char *name)
{
	struct cancel_ctx *c = ctx;

	(void)dirfd;
	(void)name;
	if (++c->calls == 30)
		atomic_store(&c->flag, 1);
	return 0;
}

static void test_threads_cancel(void **state)
{
	struct fixture *f = *state;
	struct cancel_ctx cc = {.calls = 0};
	struct repl_scan_opts o = {.generation = 1, .threads = 3};
	struct repl_scan_stats st;
	char src[160], cat[256], idx[256];

	atomic_init(&cc.flag, 0);
	o.cancel = &cc.flag;
	o.before_read = cancel_after;
	o.ctx = &cc;
	snprintf(src, sizeof(src), "%s/busy", f->root);
	assert_int_equal(mkdir(src, 0755), 0);
	make_busy_tree(src);
	snprintf(cat, sizeof(cat), "%s/c.db", f->state);
	snprintf(idx, sizeof(idx), "%s/c-src.db", f->state);
	o.srcindex_path = idx;
	assert_int_equal(repl_scan(src, cat, &o, &st), -ECANCELED);
	assert_true(cc.calls >= 30);
	assert_int_equal(access(cat, F_OK), -1);
	assert_int_equal(access(idx, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_scan_tree, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sparse_holes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_xattrs_by_name, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_scan_tree_1, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_scan_tree_4, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_threads_same_catalog, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_threads_cancel, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_generation_build, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prune_generations, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_stable_inos, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
