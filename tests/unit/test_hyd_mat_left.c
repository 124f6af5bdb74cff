/*
 * tests/unit/test_hyd_mat_left.c — the list of files a landing pass left
 * for the next (hydrator/sync/hyd_mat_left.c): each directory once, with
 * its path, its files in the order added even when another directory's
 * come between (a walk goes down into subdirectories in the middle of a
 * directory); a clear keeps nothing; and the bound: past HYD_MAT_LEFT_MAX
 * files (or HYD_MAT_LEFT_BYTES of paths and names) the list says overflow
 * and stops growing, so the landing walks the tree instead; the placer's
 * list of whole files sorted and searched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hydrator/sync/hyd_sync_priv.h"

static void add(struct hyd_mat_left *l, size_t *slot, uint64_t ino,
		const char *path, const char *name)
{
	hyd_mat_left_add(l, slot, ino, path, strlen(path), name, strlen(name),
			 ino * 1000 + strlen(name));
}

static void test_by_directory(void **state)
{
	struct hyd_mat_left l;
	size_t root = HYD_MAT_LEFT_END, sub = HYD_MAT_LEFT_END, f, len;
	const char *names[] = {"a", "b", "c"};
	int i = 0;

	(void)state;
	memset(&l, 0, sizeof(l));
	add(&l, &root, 1, "", "a");
	/* a subdirectory's files between the root's; its path given as a
	 * prefix of a longer buffer */
	hyd_mat_left_add(&l, &sub, 7, "x/y/file", 3, "f1", 2, 71);
	add(&l, &root, 1, "", "b");
	add(&l, &sub, 7, "x/y", "f2");
	add(&l, &root, 1, "", "c");
	assert_int_equal(l.ndirs, 2);
	assert_int_equal(l.nfiles, 5);
	assert_false(l.overflow);
	assert_string_equal(hyd_mat_left_path(&l, root), "");
	assert_string_equal(hyd_mat_left_path(&l, sub), "x/y");
	assert_int_equal(l.dirs[sub].ino, 7);
	for (f = hyd_mat_left_first(&l, root); f != HYD_MAT_LEFT_END;
	     f = hyd_mat_left_next(&l, f)) {
		assert_true(i < 3);
		assert_string_equal(hyd_mat_left_name(&l, f, &len), names[i]);
		assert_int_equal(len, 1);
		i++;
	}
	assert_int_equal(i, 3);
	f = hyd_mat_left_first(&l, sub);
	assert_string_equal(hyd_mat_left_name(&l, f, &len), "f1");
	assert_int_equal(l.files[f].ino, 71);
	f = hyd_mat_left_next(&l, f);
	assert_string_equal(hyd_mat_left_name(&l, f, &len), "f2");
	assert_int_equal(hyd_mat_left_next(&l, f), HYD_MAT_LEFT_END);
	assert_null(hyd_mat_left_path(&l, 2));
	assert_int_equal(hyd_mat_left_first(&l, 2), HYD_MAT_LEFT_END);
	hyd_mat_left_clear(&l);
	assert_int_equal(l.ndirs, 0);
	assert_int_equal(l.nfiles, 0);
	/* a new pass: its slots start over */
	root = HYD_MAT_LEFT_END;
	add(&l, &root, 1, "", "z");
	assert_int_equal(root, 0);
	assert_int_equal(l.nfiles, 1);
	hyd_mat_left_free(&l);
	assert_null(l.files);
}

static void test_bound_by_count(void **state)
{
	struct hyd_mat_left l;
	size_t slot = HYD_MAT_LEFT_END, i;

	(void)state;
	memset(&l, 0, sizeof(l));
	for (i = 0; i < HYD_MAT_LEFT_MAX; i++)
		add(&l, &slot, 1, "d", "f");
	assert_false(l.overflow);
	assert_int_equal(l.nfiles, HYD_MAT_LEFT_MAX);
	add(&l, &slot, 1, "d", "one too many");
	assert_true(l.overflow);
	assert_int_equal(l.nfiles, HYD_MAT_LEFT_MAX);
	hyd_mat_left_clear(&l);
	assert_false(l.overflow);
	slot = HYD_MAT_LEFT_END;
	add(&l, &slot, 1, "d", "f");
	assert_int_equal(l.nfiles, 1);
	hyd_mat_left_free(&l);
}

static void test_bound_by_bytes(void **state)
{
	struct hyd_mat_left l;
	size_t len = 4000, i, fits, slot;
	char *p = malloc(len + 1);

	(void)state;
	assert_non_null(p);
	memset(p, 'p', len);
	p[len] = '\0';
	memset(&l, 0, sizeof(l));
	/* one directory per file: a path and a name each */
	fits = HYD_MAT_LEFT_BYTES / (2 * (len + 1));
	for (i = 0; i < fits; i++) {
		slot = HYD_MAT_LEFT_END;
		add(&l, &slot, i + 1, p, p);
	}
	assert_false(l.overflow);
	assert_int_equal(l.nfiles, fits);
	slot = HYD_MAT_LEFT_END;
	add(&l, &slot, 0, p, p);
	assert_true(l.overflow);
	/* nothing more is taken once overflowed, however short */
	slot = 0;
	add(&l, &slot, 1, "", "x");
	assert_int_equal(l.nfiles, fits);
	hyd_mat_left_free(&l);
	free(p);
}

/* The placer's list of whole files, as a pass takes it: sorted, each
 * number once, looked up by number. */
static void test_whole(void **state)
{
	uint64_t v[] = {9, 3, 3, 7, 1, 9, 9, 2};
	size_t n = hyd_mat_whole_sort(v, sizeof(v) / sizeof(*v));

	(void)state;
	assert_int_equal(n, 5);
	assert_int_equal(v[0], 1);
	assert_int_equal(v[1], 2);
	assert_int_equal(v[2], 3);
	assert_int_equal(v[3], 7);
	assert_int_equal(v[4], 9);
	assert_true(hyd_mat_whole_has(v, n, 7));
	assert_true(hyd_mat_whole_has(v, n, 1));
	assert_false(hyd_mat_whole_has(v, n, 4));
	assert_false(hyd_mat_whole_has(v, 0, 1));
	assert_int_equal(hyd_mat_whole_sort(v, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_by_directory),
	    cmocka_unit_test(test_bound_by_count),
	    cmocka_unit_test(test_bound_by_bytes),
	    cmocka_unit_test(test_whole),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
