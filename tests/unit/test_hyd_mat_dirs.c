/*
 * tests/unit/test_hyd_mat_dirs.c — the list of directories a landing pass
 * left files in (hydrator/sync/hyd_mat_dirs.c): paths kept in order and
 * whole, a clear keeps nothing, and the bound: past HYD_MAT_DIRS_MAX
 * directories (or HYD_MAT_DIRS_BYTES of paths) the list says overflow and
 * stops growing, so the landing walks the tree instead.
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

static void test_add_and_clear(void **state)
{
	struct hyd_mat_dirs d;
	char p[64];
	size_t i;

	(void)state;
	memset(&d, 0, sizeof(d));
	hyd_mat_dirs_add(&d, 1, "");
	for (i = 0; i < 1000; i++) {
		snprintf(p, sizeof(p), "a/b%zu/c", i);
		hyd_mat_dirs_add(&d, 100 + i, p);
	}
	assert_int_equal(d.n, 1001);
	assert_false(d.overflow);
	assert_string_equal(hyd_mat_dirs_path(&d, 0), "");
	assert_int_equal(d.v[0].ino, 1);
	assert_string_equal(hyd_mat_dirs_path(&d, 1), "a/b0/c");
	assert_string_equal(hyd_mat_dirs_path(&d, 1000), "a/b999/c");
	assert_int_equal(d.v[1000].ino, 1099);
	assert_null(hyd_mat_dirs_path(&d, 1001));
	hyd_mat_dirs_clear(&d);
	assert_int_equal(d.n, 0);
	assert_null(hyd_mat_dirs_path(&d, 0));
	hyd_mat_dirs_add(&d, 7, "x");
	assert_int_equal(d.n, 1);
	assert_string_equal(hyd_mat_dirs_path(&d, 0), "x");
	hyd_mat_dirs_free(&d);
	assert_null(d.v);
	assert_int_equal(d.n, 0);
}

static void test_bound_by_count(void **state)
{
	struct hyd_mat_dirs d;
	size_t i;

	(void)state;
	memset(&d, 0, sizeof(d));
	for (i = 0; i < HYD_MAT_DIRS_MAX; i++)
		hyd_mat_dirs_add(&d, i + 1, "d");
	assert_false(d.overflow);
	assert_int_equal(d.n, HYD_MAT_DIRS_MAX);
	hyd_mat_dirs_add(&d, 0, "one too many");
	assert_true(d.overflow);
	assert_int_equal(d.n, HYD_MAT_DIRS_MAX);
	/* a clear starts a list again */
	hyd_mat_dirs_clear(&d);
	assert_false(d.overflow);
	hyd_mat_dirs_add(&d, 5, "d");
	assert_int_equal(d.n, 1);
	hyd_mat_dirs_free(&d);
}

static void test_bound_by_bytes(void **state)
{
	struct hyd_mat_dirs d;
	size_t len = 4000, i, fits = HYD_MAT_DIRS_BYTES / (len + 1);
	char *p = malloc(len + 1);

	(void)state;
	assert_non_null(p);
	memset(p, 'p', len);
	p[len] = '\0';
	memset(&d, 0, sizeof(d));
	for (i = 0; i < fits; i++)
		hyd_mat_dirs_add(&d, i + 1, p);
	assert_false(d.overflow);
	assert_int_equal(d.n, fits);
	hyd_mat_dirs_add(&d, 0, p);
	assert_true(d.overflow);
	assert_int_equal(d.n, fits);
	/* nothing more is taken once overflowed, however short */
	hyd_mat_dirs_add(&d, 0, "");
	assert_int_equal(d.n, fits);
	assert_int_equal(strlen(hyd_mat_dirs_path(&d, fits - 1)), len);
	hyd_mat_dirs_free(&d);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_add_and_clear),
	    cmocka_unit_test(test_bound_by_count),
	    cmocka_unit_test(test_bound_by_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
