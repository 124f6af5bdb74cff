/*
 * tests/unit/test_hyd_files.c — the open-file table of no-open mode
 * (hydrator/read/hyd_fuse_files.c), on a real catalog of more files than
 * the table has slots.
 *
 * Each file's size is distinct (3 * ino), so a state given for the wrong
 * inode shows. Checked: the first get makes a state (and says so), the
 * next returns the same one; a directory, a symlink and an absent inode are
 * errors; cycling through every file evicts, yet a state a reader still
 * holds stays valid (ASan would see a use after free) and a get after its
 * eviction makes a fresh one; two threads asking for the same inodes at
 * once never get two states for one inode while it stays in the table.
 */
#include <errno.h>
#include <pthread.h>
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

#include "catalog/catalog.h"
#include "hydrator/read/hyd_fuse.h"
#include "tsupport.h"

#define N_FILES 6000u /* > HYD_FILES_SLOTS */
#define FIRST_FILE 3u /* 1: root, 2: a symlink */
#define LINK_INO 2u

struct fx {
	char dir[64];
	struct hyd_fs fs; /* its generation owns the catalog's reader */
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct cat_inode in;
	cat_writer *w = NULL;
	char path[128], name[32];
	uint64_t ino;

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ferry-test-files-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(path, sizeof(path), "%s/cat.db", fx->dir);
	w = tsup_cat_begin(path);
	memset(&in, 0, sizeof(in));
	in.ino = LINK_INO;
	in.kind = CAT_LNK;
	in.mode = S_IFLNK | 0777;
	in.nlink = 1;
	in.size = 1;
	assert_int_equal(cat_writer_add_inode(w, &in, "x", 1), 0);
	assert_int_equal(
	    cat_writer_add_dirent(w, CAT_ROOT_INO, "l", 1, LINK_INO), 0);
	for (ino = FIRST_FILE; ino < FIRST_FILE + N_FILES; ino++) {
		in.ino = ino;
		in.kind = CAT_REG;
		in.mode = S_IFREG | 0644;
		in.size = 3 * ino; /* no chunks: only the size is read here */
		assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
		snprintf(name, sizeof(name), "f%llu", (unsigned long long)ino);
		assert_int_equal(cat_writer_add_dirent(w, CAT_ROOT_INO, name,
						       strlen(name), ino),
				 0);
	}
	assert_int_equal(cat_writer_commit(w), 0);
	{
		cat_reader *cat = NULL;
		struct hyd_gen *g = NULL;

		assert_int_equal(cat_reader_open(path, &cat), 0);
		assert_int_equal(hyd_gen_new(cat, NULL, NULL, path, NULL, &g),
				 0);
		hyd_fs_gens_init(&fx->fs, g);
	}
	hyd_files_init(&fx->fs.files);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	hyd_files_fini(&fx->fs.files);
	hyd_fs_gens_fini(&fx->fs);
	tsup_rm_rf(fx->dir);
	free(fx);
	return 0;
}

static struct hyd_read_open *get(struct fx *fx, uint64_t ino, int want_new)
{
	struct hyd_read_open *of = NULL;
	int made = -1;

	assert_int_equal(hyd_files_get(&fx->fs.files, &fx->fs, ino, &of, &made),
			 0);
	assert_non_null(of);
	assert_int_equal(of->ino, ino);
	assert_int_equal(of->size, 3 * ino);
	if (want_new >= 0)
		assert_int_equal(made, want_new);
	return of;
}

static void test_get_and_reuse(void **state)
{
	struct fx *fx = *state;
	struct hyd_read_open *a, *b, *of = NULL;
	int made = 0;

	a = get(fx, FIRST_FILE, 1);
	b = get(fx, FIRST_FILE, 0);
	assert_ptr_equal(a, b);
	hyd_read_open_unref(a);
	hyd_read_open_unref(b);
	assert_int_equal(
	    hyd_files_get(&fx->fs.files, &fx->fs, CAT_ROOT_INO, &of, &made),
	    -EISDIR);
	assert_null(of);
	assert_int_equal(
	    hyd_files_get(&fx->fs.files, &fx->fs, LINK_INO, &of, &made),
	    -EINVAL);
	assert_true(hyd_files_get(&fx->fs.files, &fx->fs,
				  FIRST_FILE + N_FILES + 7, &of, &made) < 0);
	assert_null(of);
}

static void test_evict_while_held(void **state)
{
	struct fx *fx = *state;
	struct hyd_read_open *held, *again, *of;
	unsigned remade = 0;
	uint64_t ino;

	held = get(fx, FIRST_FILE + 5, 1);
	for (ino = FIRST_FILE; ino < FIRST_FILE + N_FILES; ino++) {
		of = get(fx, ino, -1);
		hyd_read_open_unref(of);
	}
	/* More files than slots: some early ones were evicted and come back
	 * as new states. */
	for (ino = FIRST_FILE; ino < FIRST_FILE + 64; ino++) {
		int made = 0;

		assert_int_equal(
		    hyd_files_get(&fx->fs.files, &fx->fs, ino, &of, &made), 0);
		remade += (unsigned)made;
		hyd_read_open_unref(of);
	}
	assert_true(remade > 0);
	/* The held state outlived its slot and is still whole. */
	assert_int_equal(held->ino, FIRST_FILE + 5);
	assert_int_equal(held->size, 3 * (FIRST_FILE + 5));
	again = get(fx, FIRST_FILE + 5, -1);
	assert_int_equal(again->size, held->size);
	hyd_read_open_unref(again);
	hyd_read_open_unref(held);
}

struct racer {
	struct fx *fx;
	struct hyd_read_open *got[256];
	int err;
};

static void *race(void *p)
{
	struct racer *r = p;

	for (unsigned i = 0; i < 256; i++) {
		int made = 0;

		if (hyd_files_get(&r->fx->fs.files, &r->fx->fs,
				  FIRST_FILE + 1000 + i, &r->got[i],
				  &made) != 0 ||
		    r->got[i]->size != 3 * (FIRST_FILE + 1000 + i))
			r->err = 1;
	}
	return NULL;
}

static void test_two_readers(void **state)
{
	struct fx *fx = *state;
	struct racer a = {.fx = fx}, b = {.fx = fx};
	pthread_t ta, tb;

	assert_int_equal(pthread_create(&ta, NULL, race, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, race, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(a.err, 0);
	assert_int_equal(b.err, 0);
	/* 256 consecutive inodes fit the table: one state per inode. */
	for (unsigned i = 0; i < 256; i++) {
		assert_ptr_equal(a.got[i], b.got[i]);
		hyd_read_open_unref(a.got[i]);
		hyd_read_open_unref(b.got[i]);
	}
}

/* A catalog of generation gen at path with regular files inos[] (size 3 *
 * ino, named f<ino>). */
static void gen_catalog(const char *path, uint64_t gen, const uint64_t *inos,
			size_t n)
{
	struct cat_meta m;
	struct cat_inode in;
	cat_writer *w = NULL;
	char name[32];

	memset(&m, 0, sizeof(m));
	m.generation = gen;
	chunk_params_default(&m.params);
	assert_int_equal(cat_writer_open(path, &m, &w), 0);
	memset(&in, 0, sizeof(in));
	in.ino = CAT_ROOT_INO;
	in.kind = CAT_DIR;
	in.mode = S_IFDIR | 0755;
	in.nlink = 2;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
	for (size_t i = 0; i < n; i++) {
		in.ino = inos[i];
		in.kind = CAT_REG;
		in.mode = S_IFREG | 0644;
		in.nlink = 1;
		in.size = 3 * inos[i];
		assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
		snprintf(name, sizeof(name), "f%llu",
			 (unsigned long long)inos[i]);
		assert_int_equal(cat_writer_add_dirent(w, CAT_ROOT_INO, name,
						       strlen(name), inos[i]),
				 0);
	}
	assert_int_equal(cat_writer_commit(w), 0);
}

static struct hyd_gen *gen_open(const char *path)
{
	cat_reader *cat = NULL;
	struct hyd_gen *g = NULL;

	assert_int_equal(cat_reader_open(path, &cat), 0);
	assert_int_equal(hyd_gen_new(cat, NULL, NULL, path, NULL, &g), 0);
	return g;
}

/* Generations of a mount that follows: after a switch an ino only the
 * older kept one has (and only such an ino) is answered by it, an
 * open-file state made then keeps that generation, and a generation that
 * falls out of the kept ones leaves the cache with its last reference. */
static void test_generations(void **state)
{
	struct fx *fx = *state;
	const uint64_t g1[] = {7, 8}, g2[] = {7, 9}, gone12[] = {8};
	struct hyd_fs fs;
	struct hyd_read_open *of = NULL;
	struct cat_inode in;
	struct hyd_gen *g;
	char p1[128], p2[128], p3[128];
	int r, made = 0;

	snprintf(p1, sizeof(p1), "%s/1.db", fx->dir);
	snprintf(p2, sizeof(p2), "%s/2.db", fx->dir);
	snprintf(p3, sizeof(p3), "%s/3.db", fx->dir);
	gen_catalog(p1, 1, g1, 2);
	gen_catalog(p2, 2, g2, 2);
	gen_catalog(p3, 3, g2, 2);
	memset(&fs, 0, sizeof(fs));
	hyd_fs_gens_init(&fs, gen_open(p1));
	hyd_files_init(&fs.files);
	assert_int_equal(hyd_fs_gens_switch(&fs, gen_open(p2), 2, gone12, 1),
			 0);
	/* 8 is gone from 2: generation 1 answers; 9 and 7 are 2's */
	g = hyd_fs_gen_for(&fs, 8, &in, &r);
	assert_int_equal(r, 0);
	assert_int_equal(g->generation, 1);
	assert_int_equal(in.size, 24);
	hyd_gen_unref(g);
	g = hyd_fs_gen_for(&fs, 9, &in, &r);
	assert_int_equal(r, 0);
	assert_int_equal(g->generation, 2);
	hyd_gen_unref(g);
	g = hyd_fs_gen_for(&fs, 7, NULL, NULL);
	assert_int_equal(g->generation, 2);
	hyd_gen_unref(g);
	/* an ino nobody has: the current one's ENOENT */
	g = hyd_fs_gen_for(&fs, 99, &in, &r);
	assert_int_equal(r, -ENOENT);
	assert_int_equal(g->generation, 2);
	hyd_gen_unref(g);
	/* a reader of 8 keeps generation 1 */
	assert_int_equal(hyd_files_get(&fs.files, &fs, 8, &of, &made), 0);
	assert_int_equal(made, 1);
	assert_non_null(of->gen);
	assert_int_equal(of->gen->generation, 1);
	/* 3 in, 1 out (keep 2): its file stays while the reader holds it */
	assert_int_equal(hyd_fs_gens_switch(&fs, gen_open(p3), 2, NULL, 0), 1);
	assert_int_equal(access(p1, F_OK), 0);
	assert_int_equal(of->gen->generation, 1);
	hyd_read_open_unref(of);
	assert_int_equal(access(p1, F_OK), -1);
	assert_int_equal(access(p2, F_OK), 0);
	/* nobody answers for 8 any more */
	assert_int_equal(hyd_files_get(&fs.files, &fs, 8, &of, &made), -ENOENT);
	hyd_files_fini(&fs.files);
	hyd_fs_gens_fini(&fs);
	/* the kept ones are not dropped at the end: their files stay */
	assert_int_equal(access(p2, F_OK), 0);
	assert_int_equal(access(p3, F_OK), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_get_and_reuse, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_evict_while_held, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_two_readers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_generations, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
