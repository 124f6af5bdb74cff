/*
 * tests/unit/test_cat_pack.c — the shape and the lists of packs
 * (catalog/cat_pack.c) on a catalog written for it: small files grouped
 * until 4 MiB within a segment, a big file ending a group and cut in
 * 4 MiB parts by where its chunks start, empty files, symlinks and
 * directories in no pack, a new segment starting a new group, an id
 * twice in a pack listed once, a hole never listed, and names that are
 * no pack's refused.
 */
#include <errno.h>
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
#include "tsupport.h"

#define MIB (1u << 20)
#define CH (256u << 10) /* every chunk here is 256 KiB but the tails */

struct fx {
	char root[64], path[128];
	cat_reader *r;
};

static void id_for(uint64_t ino, uint64_t k, chunk_id *ret)
{
	char text[64];

	snprintf(text, sizeof(text), "ino %llu chunk %llu",
		 (unsigned long long)ino, (unsigned long long)k);
	assert_int_equal(chunk_id_compute(text, strlen(text), ret), 0);
}

static void add(cat_writer *w, uint64_t ino, enum cat_kind kind, uint64_t size)
{
	struct cat_inode in = {
	    .ino = ino,
	    .kind = kind,
	    .mode = (kind == CAT_DIR   ? S_IFDIR
		     : kind == CAT_LNK ? S_IFLNK
				       : S_IFREG) |
		    0644,
	    .size = size,
	    .nlink = kind == CAT_DIR ? 2 : 1,
	};

	assert_int_equal(cat_writer_add_inode(w, &in,
					      kind == CAT_LNK ? "target" : NULL,
					      kind == CAT_LNK ? 6 : 0),
			 0);
}

/* Chunks of CH bytes (the last shorter), ids of (ino, k); hole_k gets
 * the hole id (-1: none). */
static void chunks(cat_writer *w, uint64_t ino, uint64_t size, long hole_k)
{
	chunk_id id;
	uint64_t off;
	long k = 0;

	for (off = 0; off < size; off += CH, k++) {
		uint32_t len = size - off < CH ? (uint32_t)(size - off) : CH;

		if (k == hole_k)
			memset(&id, 0, sizeof(id));
		else
			id_for(ino, (uint64_t)k, &id);
		assert_int_equal(cat_writer_add_chunk(w, ino, off, len, &id),
				 0);
	}
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct cat_meta m;
	cat_writer *w;
	chunk_id shared;
	char name[32];
	uint64_t ino;

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_cat_pack.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->path, sizeof(f->path), "%s/1.db", f->root);
	memset(&m, 0, sizeof(m));
	m.generation = 1;
	chunk_params_default(&m.params);
	assert_int_equal(cat_writer_open(f->path, &m, &w), 0);
	add(w, 1, CAT_DIR, 0);
	/* 2..5: four files of 1 MiB: one group of exactly 4 MiB */
	for (ino = 2; ino <= 5; ino++)
		add(w, ino, CAT_REG, MIB);
	add(w, 6, CAT_REG, 10);	     /* a group of its own: 9 follows */
	add(w, 7, CAT_REG, 0);	     /* empty: no pack */
	add(w, 8, CAT_LNK, 6);	     /* a symlink: no pack */
	add(w, 9, CAT_REG, 9 * MIB); /* big: 3 parts */
	add(w, 10, CAT_REG, 100);
	add(w, 11, CAT_REG, 100); /* the same bytes as 10 */
	add(w, 1024, CAT_REG, 100);
	for (ino = 2; ino <= 1024; ino++) {
		if (ino > 11 && ino < 1024)
			continue;
		snprintf(name, sizeof(name), "n%llu", (unsigned long long)ino);
		assert_int_equal(
		    cat_writer_add_dirent(w, 1, name, strlen(name), ino), 0);
	}
	for (ino = 2; ino <= 5; ino++)
		chunks(w, ino, MIB, -1);
	chunks(w, 6, 10, -1);
	chunks(w, 9, 9 * MIB, 17); /* a hole in part 1 */
	id_for(10, 0, &shared);
	assert_int_equal(cat_writer_add_chunk(w, 10, 0, 100, &shared), 0);
	assert_int_equal(cat_writer_add_chunk(w, 11, 0, 100, &shared), 0);
	chunks(w, 1024, 100, -1);
	assert_int_equal(cat_writer_commit(w), 0);
	assert_int_equal(cat_reader_open(f->path, &f->r), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	cat_reader_close(f->r);
	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

static void expect(cat_reader *r, uint64_t ino, uint64_t first, uint64_t last,
		   int big, uint64_t parts)
{
	struct cat_pack p;

	assert_int_equal(cat_pack_find(r, ino, &p), 0);
	assert_int_equal(p.first, first);
	assert_int_equal(p.last, last);
	assert_int_equal(p.big, big);
	assert_int_equal(p.parts, parts);
}

static void test_shapes(void **state)
{
	struct fx *f = *state;
	struct cat_pack p;

	for (uint64_t ino = 2; ino <= 5; ino++)
		expect(f->r, ino, 2, 5, 0, 1);
	expect(f->r, 6, 6, 6, 0, 1);
	expect(f->r, 9, 9, 9, 1, 3);
	expect(f->r, 10, 10, 11, 0, 1);
	expect(f->r, 11, 10, 11, 0, 1);
	/* a new segment starts a new group */
	expect(f->r, 1024, 1024, 1024, 0, 1);
	assert_int_equal(cat_pack_find(f->r, 7, &p), -ENOENT);
	assert_int_equal(cat_pack_find(f->r, 8, &p), -ENOENT);
	assert_int_equal(cat_pack_find(f->r, 1, &p), -ENOENT);
	assert_int_equal(cat_pack_find(f->r, 500, &p), -ENOENT);
}

static void test_names(void **state)
{
	struct fx *f = *state;
	struct cat_pack p;

	assert_int_equal(cat_pack_named(f->r, 2, 0, &p), 0);
	assert_int_equal(p.last, 5);
	assert_int_equal(cat_pack_named(f->r, 9, 2, &p), 0);
	assert_int_equal(cat_pack_named(f->r, 1024, 0, &p), 0);
	/* inside a group, past the parts, no file, 0, huge */
	assert_int_equal(cat_pack_named(f->r, 3, 0, &p), -ENOENT);
	assert_int_equal(cat_pack_named(f->r, 11, 0, &p), -ENOENT);
	assert_int_equal(cat_pack_named(f->r, 2, 1, &p), -ENOENT);
	assert_int_equal(cat_pack_named(f->r, 9, 3, &p), -ENOENT);
	assert_int_equal(cat_pack_named(f->r, 7, 0, &p), -ENOENT);
	assert_int_equal(cat_pack_named(f->r, 0, 0, &p), -ENOENT);
	assert_int_equal(cat_pack_named(f->r, UINT64_MAX, 0, &p), -ENOENT);
}

static void list(cat_reader *r, uint64_t first, uint64_t part,
		 struct cat_pack_list *l)
{
	struct cat_pack p;

	assert_int_equal(cat_pack_named(r, first, part, &p), 0);
	assert_int_equal(cat_pack_ids(r, &p, part, cat_pack_rows_reader, r, l),
			 0);
}

static void test_lists(void **state)
{
	struct fx *f = *state;
	struct cat_pack_list l = {0};
	chunk_id id;

	/* the group: every chunk of 2, then 3, 4, 5 */
	list(f->r, 2, 0, &l);
	assert_int_equal(l.n, 16);
	id_for(2, 0, &id);
	assert_memory_equal(l.ids[0].b, id.b, CHUNK_ID_LEN);
	id_for(5, 3, &id);
	assert_memory_equal(l.ids[15].b, id.b, CHUNK_ID_LEN);
	assert_int_equal(l.lens[15], CH);
	/* part 1 of 9: the chunks starting in [4, 8) MiB, the hole (k 17)
	 * left out */
	list(f->r, 9, 1, &l);
	assert_int_equal(l.n, 15);
	id_for(9, 16, &id);
	assert_memory_equal(l.ids[0].b, id.b, CHUNK_ID_LEN);
	id_for(9, 18, &id);
	assert_memory_equal(l.ids[1].b, id.b, CHUNK_ID_LEN);
	/* part 2: [8, 9) MiB */
	list(f->r, 9, 2, &l);
	assert_int_equal(l.n, 4);
	id_for(9, 32, &id);
	assert_memory_equal(l.ids[0].b, id.b, CHUNK_ID_LEN);
	/* one id in two files of a group: once */
	list(f->r, 10, 0, &l);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.lens[0], 100);
	cat_pack_list_fini(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_shapes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_names, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lists, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
