/*
 * tests/unit/test_hyd_attrmap.c — rsync's --chmod, --chown, --usermap and
 * --groupmap (hydrator/sync/hyd_attrmap.c). The mode table is what rsync
 * 3.2 gave under umask 022 for a file 0444, a directory 0555 and a file
 * 0640 (e2e 160 compares whole trees with rsync's as well); then the id
 * maps, and the specs refused.
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

#include <cmocka.h>

#include "hydrator/sync/hyd_sync_priv.h"
#include "tsupport.h"

struct mcase {
	const char *spec;
	unsigned f444, d555, f640; /* what rsync made of each */
};

static unsigned mapped(const hyd_attrmap *m, enum cat_kind kind, unsigned mode)
{
	struct cat_inode in = {.ino = 2, .kind = kind};

	in.mode = (kind == CAT_DIR ? S_IFDIR : S_IFREG) | mode;
	hyd_attrmap_apply(m, &in);
	assert_int_equal(in.mode & S_IFMT, kind == CAT_DIR ? S_IFDIR : S_IFREG);
	return in.mode & 07777;
}

static void test_chmod_like_rsync(void **state)
{
	static const struct mcase cases[] = {
	    {"+w", 0644, 0755, 0640},	       {"a+w", 0666, 0777, 0662},
	    {"go-r", 0400, 0511, 0600},	       {"D755,F644", 0644, 0755, 0644},
	    {"u=rwX,go=rX", 0644, 0755, 0644}, {"Fu+x", 0544, 0555, 0740},
	    {"g+s", 02444, 02555, 02640},      {"o=", 0440, 0550, 0640},
	    {"+X", 0444, 0555, 0640},	       {"=r", 0444, 0444, 0444},
	};
	mode_t old = umask(022);

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		hyd_attrmap *m;

		assert_int_equal(hyd_attrmap_new(&m), 0);
		assert_int_equal(hyd_attrmap_chmod(m, cases[i].spec), 0);
		assert_true(hyd_attrmap_active(m));
		if (mapped(m, CAT_REG, 0444) != cases[i].f444 ||
		    mapped(m, CAT_DIR, 0555) != cases[i].d555 ||
		    mapped(m, CAT_REG, 0640) != cases[i].f640)
			fail_msg("--chmod=%s: %o %o %o, rsync: %o %o %o",
				 cases[i].spec, mapped(m, CAT_REG, 0444),
				 mapped(m, CAT_DIR, 0555),
				 mapped(m, CAT_REG, 0640), cases[i].f444,
				 cases[i].d555, cases[i].f640);
		hyd_attrmap_free(m);
	}
	umask(old);
}

static void test_ids(void **state)
{
	struct cat_inode in = {.ino = 2, .kind = CAT_REG, .mode = S_IFREG};
	hyd_attrmap *m;

	(void)state;
	assert_int_equal(hyd_attrmap_new(&m), 0);
	assert_false(hyd_attrmap_active(m));
	assert_int_equal(hyd_attrmap_ids(m, 1, "0:1234,5-9:55,*:99"), 0);
	assert_int_equal(hyd_attrmap_ids(m, 0, "root:7"), 0);
	in.uid = 0;
	in.gid = 0;
	hyd_attrmap_apply(m, &in);
	assert_int_equal(in.uid, 1234);
	assert_int_equal(in.gid, 7);
	in.uid = 7;
	in.gid = 3;
	hyd_attrmap_apply(m, &in);
	assert_int_equal(in.uid, 55);
	assert_int_equal(in.gid, 3); /* no group pair matches */
	in.uid = 10;
	hyd_attrmap_apply(m, &in);
	assert_int_equal(in.uid, 99);
	hyd_attrmap_free(m);

	assert_int_equal(hyd_attrmap_new(&m), 0);
	assert_int_equal(hyd_attrmap_chown(m, ":42"), 0);
	in.uid = 5;
	in.gid = 6;
	hyd_attrmap_apply(m, &in);
	assert_int_equal(in.uid, 5);
	assert_int_equal(in.gid, 42);
	hyd_attrmap_free(m);
}

static void test_refused(void **state)
{
	static const char *const chmods[] = {"",    "g=u", "x",	   "D",	   "9",
					     "u+q", "Du",  "755,", "12345"};
	static const char *const maps[] = {
	    "", "0", "0:", ":5", "9-1:0", "0:no-such-user-here"};
	hyd_attrmap *m;

	(void)state;
	assert_int_equal(hyd_attrmap_new(&m), 0);
	for (size_t i = 0; i < sizeof(chmods) / sizeof(*chmods); i++)
		if (hyd_attrmap_chmod(m, chmods[i]) == 0)
			fail_msg("--chmod '%s' taken", chmods[i]);
	for (size_t i = 0; i < sizeof(maps) / sizeof(*maps); i++)
		if (hyd_attrmap_ids(m, 1, maps[i]) == 0)
			fail_msg("--usermap '%s' taken", maps[i]);
	assert_int_equal(hyd_attrmap_ids(m, 1, "0:no-such-user-here"), -ENOENT);
	assert_true(hyd_attrmap_chown(m, ":") < 0);
	hyd_attrmap_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chmod_like_rsync),
	    cmocka_unit_test(test_ids),
	    cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
