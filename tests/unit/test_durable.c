/*
 * test_durable.c — catalog/cat_durable.c: whole writes, mkdir -p, fsync by
 * name; the primitives every crash-safe write of both sites goes through.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

static char root[64];

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/ferry-durable.XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_mkdir_p(void **state)
{
	char p[256], f[256];
	struct stat sb;
	int fd;

	(void)state;
	snprintf(p, sizeof(p), "%s/a/b/c", root);
	assert_int_equal(base_mkdir_p(p, 0700), 0);
	assert_int_equal(stat(p, &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(sb.st_mode & 0777, 0700);
	/* Again: already there is fine; a trailing slash too. */
	assert_int_equal(base_mkdir_p(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/a/b/c/", root);
	assert_int_equal(base_mkdir_p(p, 0700), 0);
	/* A file in the way is -ENOTDIR, at the end or in the middle. */
	snprintf(f, sizeof(f), "%s/file", root);
	fd = open(f, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(base_mkdir_p(f, 0700), -ENOTDIR);
	snprintf(p, sizeof(p), "%s/file/sub", root);
	assert_int_equal(base_mkdir_p(p, 0700), -ENOTDIR);
	assert_int_equal(base_mkdir_p("", 0700), -EINVAL);
}

static void test_write_all(void **state)
{
	static char back[3 << 20];
	char p[256];
	static char buf[3 << 20];
	int fd;

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7);
	snprintf(p, sizeof(p), "%s/w", root);
	fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(base_write_all(fd, buf, sizeof(buf)), 0);
	/* pwrite at an offset past the end leaves a hole, then the bytes. */
	assert_int_equal(base_pwrite_all(fd, "tail", 4, sizeof(buf) + 100), 0);
	assert_int_equal(pread(fd, back, sizeof(buf), 0), (ssize_t)sizeof(buf));
	assert_memory_equal(back, buf, sizeof(buf));
	assert_int_equal(pread(fd, back, 104, sizeof(buf)), 104);
	assert_memory_equal(back + 100, "tail", 4);
	assert_int_equal(back[0], 0);
	close(fd);
	/* A bad descriptor is an error, not a hang or a crash. */
	assert_int_equal(base_write_all(-1, "x", 1), -EBADF);
	assert_int_equal(base_pwrite_all(-1, "x", 1, 0), -EBADF);
}

static void test_fsync(void **state)
{
	char p[256];

	(void)state;
	snprintf(p, sizeof(p), "%s/w2", root);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	assert_int_equal(base_fsync_path(p), 0);
	assert_int_equal(base_fsync_path(root), 0);
	assert_int_equal(base_fsync_parent(p), 0);
	snprintf(p, sizeof(p), "%s/missing/x", root);
	assert_int_equal(base_fsync_parent(p), -ENOENT);
	assert_int_equal(base_fsync_path(p), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_mkdir_p, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_all, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fsync, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
