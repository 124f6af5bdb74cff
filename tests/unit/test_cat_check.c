/*
 * tests/unit/test_cat_check.c — the tree rule (catalog/cat_check.c): a
 * catalog whose entries are not one tree of directories is refused whole
 * with a line naming the inode and parent at fault, whatever shape the
 * graph takes (entries back to the root or an ancestor, a directory hard
 * link, an orphan, a cycle the root never reaches, an entry under a file
 * or naming nothing); trees pass, file hard links and numbers in any
 * order included; a graph that doubles at every level, or names one big
 * directory thousands of times, is refused in bounded time; and the marker that
 * remembers a pass vouches only for the file as it was.
 *
 * Good catalogs come from cat_writer; the bad ones are those, changed
 * with SQLite directly, as a compromised source or a cache in between
 * could hand them out.
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "tsupport.h"

struct fx {
	char dir[PATH_MAX / 2];
	char path[PATH_MAX]; /* the catalog under test */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (tsup_tmpdir(f->dir, sizeof(f->dir), "test_cat_check") < 0) {
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

static void add_inode(cat_writer *w, uint64_t ino, enum cat_kind kind)
{
	struct cat_inode in = {
	    .ino = ino,
	    .kind = kind,
	    .mode = (kind == CAT_DIR   ? S_IFDIR | 0755
		     : kind == CAT_LNK ? S_IFLNK | 0777
				       : S_IFREG | 0644),
	    .nlink = kind == CAT_DIR ? 2 : 1,
	    .size = kind == CAT_LNK ? 1 : 0,
	};

	assert_int_equal(cat_writer_add_inode(w, &in,
					      kind == CAT_LNK ? "x" : NULL,
					      kind == CAT_LNK ? 1 : 0),
			 0);
}

static void add_dirent(cat_writer *w, uint64_t parent, const char *name,
		       uint64_t ino)
{
	assert_int_equal(
	    cat_writer_add_dirent(w, parent, name, strlen(name), ino), 0);
}

/* The tree every bad catalog starts from:
 *   /a (2)  /a/b (3)  /a/b/f (4)  /a/b/g2 (5)  /g (5)  /c (6)  /c/s (7)
 * g and a/b/g2 are one file: a hard link, which the rule allows. */
static void build_tree(const char *path)
{
	cat_writer *w = tsup_cat_begin(path);

	add_inode(w, 2, CAT_DIR);
	add_inode(w, 3, CAT_DIR);
	add_inode(w, 4, CAT_REG);
	add_inode(w, 5, CAT_REG);
	add_inode(w, 6, CAT_DIR);
	add_inode(w, 7, CAT_LNK);
	add_dirent(w, 1, "a", 2);
	add_dirent(w, 1, "c", 6);
	add_dirent(w, 1, "g", 5);
	add_dirent(w, 2, "b", 3);
	add_dirent(w, 3, "f", 4);
	add_dirent(w, 3, "g2", 5);
	add_dirent(w, 6, "s", 7);
	assert_int_equal(cat_writer_commit(w), 0);
}

/* Run SQL on a committed catalog, as a compromised source would. */
static void patch(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	char *err = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("patch: %s", err ? err : "?");
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* A directory inode row, for patches. */
#define DIR_ROW(ino)                                                           \
	"INSERT INTO inode VALUES(" #ino ",2,16877,0,0,0,2,0,0,0,NULL,0);"

/* cat_check_tree on path: its result, with the line in why. */
static int check(const char *path, char *why, size_t cap)
{
	cat_reader *r = NULL;
	int rc;

	/* Every shape here is one cat_reader_open takes: the rule is what
	 * refuses it, not the row checks. */
	assert_int_equal(cat_reader_open(path, &r), 0);
	rc = cat_check_tree(r, why, cap);
	cat_reader_close(r);
	return rc;
}

/* The tree plus sql must be refused with a line holding each of the
 * NULL-terminated words. */
static void expect_refused(struct fx *f, const char *name, const char *sql, ...)
{
	char why[256];
	const char *word;
	va_list ap;

	snprintf(f->path, sizeof(f->path), "%s/%s.db", f->dir, name);
	build_tree(f->path);
	patch(f->path, sql);
	assert_int_equal(check(f->path, why, sizeof(why)), -EBADMSG);
	assert_null(strchr(why, '\n'));
	va_start(ap, sql);
	while ((word = va_arg(ap, const char *)) != NULL)
		if (!strstr(why, word))
			fail_msg("%s: \"%s\" does not say \"%s\"", name, why,
				 word);
	va_end(ap);
}

static void test_tree_passes(void **state)
{
	struct fx *f = *state;
	char why[256] = "x";

	build_tree(f->path);
	assert_int_equal(check(f->path, why, sizeof(why)), 0);
	assert_string_equal(why, "");
	/* More hard links to the file, in every directory: still a tree. */
	patch(f->path, "INSERT INTO dirent VALUES(2,2,CAST('h' AS BLOB),5);"
		       "INSERT INTO dirent VALUES(6,2,CAST('h' AS BLOB),5);"
		       "UPDATE inode SET nlink=4 WHERE ino=5;");
	assert_int_equal(check(f->path, why, sizeof(why)), 0);
	/* A root with nothing in it. */
	snprintf(f->path, sizeof(f->path), "%s/empty.db", f->dir);
	assert_int_equal(cat_writer_commit(tsup_cat_begin(f->path)), 0);
	assert_int_equal(check(f->path, why, sizeof(why)), 0);
}

/* Numbers stay across generations (docs/catalog.md), so a directory
 * moved under a newer one has a smaller number than its parent: the
 * rule must not lean on order. */
static void test_numbers_in_any_order(void **state)
{
	struct fx *f = *state;
	cat_writer *w = tsup_cat_begin(f->path);
	char why[256];

	add_inode(w, 2, CAT_DIR);
	add_inode(w, 9, CAT_DIR);
	add_inode(w, 5, CAT_DIR);
	add_inode(w, 3, CAT_REG);
	add_dirent(w, 1, "new", 9);
	add_dirent(w, 9, "moved", 2);
	add_dirent(w, 2, "deeper", 5);
	add_dirent(w, 5, "file", 3);
	assert_int_equal(cat_writer_commit(w), 0);
	assert_int_equal(check(f->path, why, sizeof(why)), 0);
}

static void test_cycles_refused(void **state)
{
	struct fx *f = *state;

	/* The shape that made sync create 245,935 directories. */
	expect_refused(f, "root_twice",
		       "INSERT INTO dirent VALUES(1,10,CAST('x' AS BLOB),1);"
		       "INSERT INTO dirent VALUES(1,11,CAST('y' AS BLOB),1);",
		       "root directory (inode 1)", "directory 1", NULL);
	/* /a/b/up -> /a: a is named in 1 and in 3. */
	expect_refused(f, "ancestor",
		       "INSERT INTO dirent VALUES(3,10,CAST('up' AS BLOB),2);",
		       "directory inode 2", "2 entries",
		       "in directories 1 and 3", NULL);
	/* /a/b/top -> / */
	expect_refused(f, "to_root",
		       "INSERT INTO dirent VALUES(3,10,CAST('top' AS BLOB),1);",
		       "root directory (inode 1)", "directory 3", NULL);
	/* /a/b/me -> /a/b */
	expect_refused(f, "self",
		       "INSERT INTO dirent VALUES(3,10,CAST('me' AS BLOB),3);",
		       "directory inode 3", "in directories 2 and 3", NULL);
	/* Two directories naming each other, neither in the tree: each
	 * has exactly one parent, only the walk can tell. */
	expect_refused(
	    f, "island",
	    DIR_ROW(20) DIR_ROW(
		21) "INSERT INTO dirent VALUES(20,1,CAST('x' AS BLOB),21);"
		    "INSERT INTO dirent VALUES(21,1,CAST('y' AS BLOB),20);",
	    "not reachable from the root", "a cycle", NULL);
}

static void test_links_and_holes_refused(void **state)
{
	struct fx *f = *state;

	/* /c/b2 -> /a/b: a directory hard link. */
	expect_refused(f, "dir_link",
		       "INSERT INTO dirent VALUES(6,10,CAST('b2' AS BLOB),3);",
		       "directory inode 3", "2 entries",
		       "in directories 2 and 6", "hard link", NULL);
	expect_refused(
	    f, "dangling",
	    "INSERT INTO dirent VALUES(6,10,CAST('ghost' AS BLOB),999);",
	    "directory 6", "inode 999", "does not exist", NULL);
	expect_refused(f, "orphan", DIR_ROW(20), "directory inode 20",
		       "named by no entry", NULL);
	/* A directory whose only entry hangs under a file. */
	expect_refused(
	    f, "under_file",
	    DIR_ROW(20) "INSERT INTO dirent VALUES(4,1,CAST('d' AS BLOB),20);",
	    "inode 4", "not a directory", NULL);
	expect_refused(f, "parent_missing",
		       "INSERT INTO dirent VALUES(77,1,CAST('f' AS BLOB),4);",
		       "inode 77", "not a directory", NULL);
	/* The root's only name for a directory removed: an orphan with
	 * everything under it. */
	expect_refused(f, "cut", "DELETE FROM dirent WHERE parent=1 AND ino=2",
		       "directory inode 2", "named by no entry", NULL);
}

/* 60 levels, each directory naming the next twice: 2^60 paths for any
 * walker that trusts the entries. The check stops after the first
 * directory seen twice, in well under a second. */
static void test_doubling_graph_is_quick(void **state)
{
	struct fx *f = *state;
	cat_writer *w = tsup_cat_begin(f->path);
	struct timespec t0, t1;
	char why[256];
	double s;

	for (uint64_t i = 2; i <= 61; i++)
		add_inode(w, i, CAT_DIR);
	add_dirent(w, 1, "l", 2);
	for (uint64_t i = 2; i < 61; i++)
		add_dirent(w, i, "l", i + 1);
	assert_int_equal(cat_writer_commit(w), 0);
	assert_int_equal(check(f->path, why, sizeof(why)), 0);
	patch(f->path, "INSERT INTO dirent SELECT parent, 2,"
		       " CAST('r' AS BLOB), ino FROM dirent;");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(check(f->path, why, sizeof(why)), -EBADMSG);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	assert_true(s < 1.0);
	assert_non_null(strstr(why, "named by 2 entries"));
}

/* The counts balanced by orphans (one directory named 3,000 times from
 * the root, 2,999 directories named by nothing) and the walk cannot be
 * made to go through the big directory once per name: 3,000 x 3,000
 * entry lookups if it did. */
static void test_many_names_one_walk(void **state)
{
	struct fx *f = *state;
	cat_writer *w = tsup_cat_begin(f->path);
	struct timespec t0, t1;
	char name[32], why[256];
	double s;

	add_inode(w, 2, CAT_DIR);
	for (uint64_t i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "n%04u", (unsigned)i);
		add_dirent(w, 1, name, 2);
	}
	for (uint64_t i = 0; i < 3000; i++) {
		add_inode(w, 10 + i, CAT_REG);
		snprintf(name, sizeof(name), "f%04u", (unsigned)i);
		add_dirent(w, 2, name, 10 + i);
	}
	for (uint64_t i = 0; i < 2999; i++)
		add_inode(w, 10000 + i, CAT_DIR);
	assert_int_equal(cat_writer_commit(w), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(check(f->path, why, sizeof(why)), -EBADMSG);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	assert_true(s < 1.0);
	assert_non_null(strstr(why, "directory inode 2 is named by 3000"));
}

/* A chain 20,000 directories deep: no recursion limit in the way. */
static void test_deep_chain_passes(void **state)
{
	struct fx *f = *state;
	cat_writer *w = tsup_cat_begin(f->path);
	char why[256];

	for (uint64_t i = 2; i <= 20001; i++)
		add_inode(w, i, CAT_DIR);
	add_dirent(w, 1, "d", 2);
	for (uint64_t i = 2; i < 20001; i++)
		add_dirent(w, i, "d", i + 1);
	assert_int_equal(cat_writer_commit(w), 0);
	assert_int_equal(check(f->path, why, sizeof(why)), 0);
}

static void touch_later(const char *path)
{
	struct timespec ts[2] = {{.tv_sec = 1, .tv_nsec = 0},
				 {.tv_sec = 1, .tv_nsec = 0}};

	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void test_marker(void **state)
{
	struct fx *f = *state;
	char bad[PATH_MAX + 16], mark[PATH_MAX + 16], why[256];
	cat_reader *r = (cat_reader *)1;

	build_tree(f->path);
	snprintf(mark, sizeof(mark), "%s%s", f->path, CAT_CHECK_MARK_SUFFIX);
	assert_int_equal(cat_check_remembered(f->path), 0);
	/* remember = 0: checked, nothing written */
	assert_int_equal(
	    cat_reader_open_checked(f->path, 0, &r, why, sizeof(why)), 0);
	cat_reader_close(r);
	assert_int_equal(access(mark, F_OK), -1);
	assert_int_equal(
	    cat_reader_open_checked(f->path, 1, &r, why, sizeof(why)), 0);
	assert_non_null(r);
	cat_reader_close(r);
	assert_int_equal(access(mark, F_OK), 0);
	assert_int_equal(cat_check_remembered(f->path), 1);
	/* Any change to the file voids it. */
	touch_later(f->path);
	assert_int_equal(cat_check_remembered(f->path), 0);
	assert_int_equal(cat_check_remember(f->path), 0);
	assert_int_equal(cat_check_remembered(f->path), 1);

	/* A bad catalog renamed over a marked good one: the marker names
	 * the old file and vouches for nothing. */
	snprintf(bad, sizeof(bad), "%s/bad.db", f->dir);
	build_tree(bad);
	patch(bad, "INSERT INTO dirent VALUES(1,10,CAST('x' AS BLOB),1);");
	assert_int_equal(rename(bad, f->path), 0);
	assert_int_equal(cat_check_remembered(f->path), 0);
	r = (cat_reader *)1;
	assert_int_equal(
	    cat_reader_open_checked(f->path, 1, &r, why, sizeof(why)),
	    -EBADMSG);
	assert_null(r);
	assert_non_null(strstr(why, "root directory"));
	/* ... and a refusal writes none. */
	unlink(mark);
	assert_int_equal(
	    cat_reader_open_checked(f->path, 1, &r, why, sizeof(why)),
	    -EBADMSG);
	assert_int_equal(access(mark, F_OK), -1);

	/* cat_reader_open's own errors come through unchanged. */
	snprintf(bad, sizeof(bad), "%s/none.db", f->dir);
	assert_int_equal(cat_reader_open_checked(bad, 1, &r, why, sizeof(why)),
			 -ENOENT);
	assert_int_equal(cat_check_remembered(bad), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tree_passes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_numbers_in_any_order, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_cycles_refused, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_links_and_holes_refused, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_doubling_graph_is_quick, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_many_names_one_walk, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_deep_chain_passes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_marker, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
