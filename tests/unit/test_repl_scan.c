/*
 * tests/unit/test_repl_scan.c — the replicator's scanner: a temp tree with
 * the awkward cases (non-UTF-8 and odd names, symlink, hard link pair,
 * user.* xattr, empty file, empty dir, fifo, a 1 MiB random file) is
 * scanned with repl_scan and read back with cat_reader: entries, order,
 * nlink, target, xattr, and chunk manifests that tile each file and hash to
 * its bytes. Also: an entry removed between the walk and the read is left
 * out with a warning while the scan succeeds; the source index maps ids
 * back to file bytes; repl_generation_build advances HEAD.
 */
#include <errno.h>
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

#include "catalog/catalog.h"
#include "replicator/replicator.h"
#include "replicator/repl_srcindex_internal.h"
#include "tsupport.h"

#define BIG_LEN (1024u * 1024u)
static const char ODD_NAME[] = "caf\xe9 \x01odd\xff";

struct fixture {
	char root[64];	/* temp dir holding src/ and state/ */
	char src[96];
	char state[96];
	uint8_t *big;	/* contents of src/big.bin */
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
			     size_t cap)
{
	char cat[256];
	struct repl_scan_opts o = {
		.generation = 1,
		.warn = on_warn,
		.before_read = before_read,
		.ctx = w,
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
		assert_int_equal(cat_chunks_range(r, ino, off, size - off, c, 64,
						  &n),
				 0);
		assert_true(n > 0);
		for (i = 0; i < n; i++) {
			assert_int_equal(c[i].off, off);
			assert_true(c[i].len >= 1 &&
				    c[i].len <= CHUNK_MAX_DEFAULT);
			assert_int_equal(chunk_id_compute(data + off, c[i].len,
							  &id),
					 0);
			assert_memory_equal(id.b, c[i].id.b, CHUNK_ID_LEN);
			off += c[i].len;
		}
		total += n;
	}
	assert_int_equal(off, size);
	*ret_n = total;
}

static void test_scan_tree(void **state)
{
	struct fixture *f = *state;
	struct warn_log w = { .victim = "vanish.txt" };
	struct repl_scan_stats st;
	struct cat_inode root, in, hl, sub, big;
	struct names nm = { .n = 0 };
	struct cat_meta meta;
	char srcidx[256], buf[64];
	size_t len, nchunks;
	cat_reader *r = scan_tree(f, &w, &st, srcidx, sizeof(srcidx));
	static const char *const sorted[] = {
		"a.txt", "big.bin", "caf\xe9 \x01odd\xff", "dangling", "empty",
		"emptydir", "fifo", "link", "sub",
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
		chunk_id unknown = { { 0 } };

		assert_int_equal(cat_chunks_range(r, big.ino, 0, 1, &c, 1, &len),
				 0);
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

/* Every start is a new generation; HEAD moves last and older catalogs
 * stay. */
static void test_generation_build(void **state)
{
	struct fixture *f = *state;
	struct repl_scan_opts o = { 0 };
	struct repl_generation g;
	char ns[256], p[320];
	uint64_t head = 99;
	struct stat st;

	path_in(ns, sizeof(ns), f->state, "ns");
	assert_int_equal(repl_head_read(ns, &head), 0);
	assert_int_equal(head, 0);
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 1);
	assert_int_equal(strlen(g.sha256), 64);
	assert_int_equal(repl_generation_build(ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 2);
	assert_int_equal(repl_head_read(ns, &head), 0);
	assert_int_equal(head, 2);
	snprintf(p, sizeof(p), "%s/catalog/1.db.zst", ns);
	assert_int_equal(stat(p, &st), 0);
	snprintf(p, sizeof(p), "%s/catalog/2.db.zst.sha256", ns);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 65);
	snprintf(p, sizeof(p), "%s/source/2.db", ns);
	assert_int_equal(stat(p, &st), 0);
}

static void test_bad_input(void **state)
{
	struct fixture *f = *state;
	struct repl_scan_opts o = { .generation = 1 };
	struct repl_scan_stats st;
	char cat[256], missing[256];

	path_in(cat, sizeof(cat), f->state, "x.db");
	path_in(missing, sizeof(missing), f->root, "missing");
	assert_int_equal(repl_scan(missing, cat, &o, &st), -ENOENT);
	assert_int_equal(access(cat, F_OK), -1);
	o.generation = 0;
	assert_int_equal(repl_scan(f->src, cat, &o, &st), -EINVAL);
	assert_int_equal(repl_ns_name_check("data-1.x_y"), 0);
	assert_int_equal(repl_ns_name_check(".hidden"), -EINVAL);
	assert_int_equal(repl_ns_name_check(""), -EINVAL);
	assert_int_equal(repl_ns_name_check("a/b"), -EINVAL);
	assert_int_equal(
		repl_ns_name_check("a1234567890123456789012345678901234567890"
				   "123456789012345678901234"),
		-EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_scan_tree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generation_build, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
