/*
 * test_base_file.c — catalog/base/base_file.c: whole writes and reads,
 * small files read whole and replaced durably, mkdir -p, fsync by name;
 * the primitives every crash-safe write of both sites goes through.
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
#include "tsupport.h"

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

static void test_read_small(void **state)
{
	char p[256], buf[8];
	size_t n = 99;

	(void)state;
	snprintf(p, sizeof(p), "%s/small", root);
	tsup_write_file(p, "12345\n", 6);
	assert_int_equal(base_file_read_small(p, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 6);
	assert_string_equal(buf, "12345\n");
	/* Exactly cap - 1 bytes may be a cut: too big, and buf is "". */
	tsup_write_file(p, "1234567", 7);
	assert_int_equal(base_file_read_small(p, buf, sizeof(buf), &n), -EFBIG);
	assert_string_equal(buf, "");
	assert_int_equal(n, 0);
	tsup_write_file(p, "", 0);
	assert_int_equal(base_file_read_small(p, buf, sizeof(buf), NULL), 0);
	assert_string_equal(buf, "");
	snprintf(p, sizeof(p), "%s/absent", root);
	assert_int_equal(base_file_read_small(p, buf, sizeof(buf), &n),
			 -ENOENT);
	assert_int_equal(base_file_read_small(root, buf, sizeof(buf), &n),
			 -EISDIR);
	assert_int_equal(base_file_read_small(p, buf, 1, &n), -EINVAL);
}

static void test_write_atomic(void **state)
{
	char p[256], t[256], *back;
	struct stat sb;
	size_t n;

	(void)state;
	snprintf(p, sizeof(p), "%s/HEAD", root);
	snprintf(t, sizeof(t), "%s/HEAD.tmp", root);
	/* A stale temp file of a crash is replaced, and none is left. */
	tsup_write_file(t, "stale", 5);
	assert_int_equal(base_file_write_atomic(p, "1\n", 2, 0600), 0);
	assert_int_equal(access(t, F_OK), -1);
	back = tsup_read_file(p, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(back, "1\n", 2);
	free(back);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	/* Replacing keeps readers of the old name whole: new content. */
	assert_int_equal(base_file_write_atomic(p, "22\n", 3, 0644), 0);
	back = tsup_read_file(p, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(back, "22\n", 3);
	free(back);
	snprintf(p, sizeof(p), "%s/missing/HEAD", root);
	assert_int_equal(base_file_write_atomic(p, "x", 1, 0644), -ENOENT);
}

/* A new file only: exact mode whatever the umask, never over an existing
 * one (which stays as it was), no temp file left either way. */
static void test_write_new(void **state)
{
	char p[256], t[256], *back;
	struct stat sb;
	mode_t old;
	size_t n;

	(void)state;
	snprintf(p, sizeof(p), "%s/sign.key", root);
	snprintf(t, sizeof(t), "%s/sign.key.tmp", root);
	old = umask(077);
	assert_int_equal(base_file_write_new(p, "key\n", 4, 0644), 0);
	umask(old);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0644);
	assert_int_equal(access(t, F_OK), -1);
	assert_int_equal(base_file_write_new(p, "other", 5, 0600), -EEXIST);
	assert_int_equal(access(t, F_OK), -1);
	back = tsup_read_file(p, &n);
	assert_int_equal(n, 4);
	assert_memory_equal(back, "key\n", 4);
	free(back);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0644);
}

static void test_pread_full(void **state)
{
	char p[256], buf[64];
	size_t got = 7;
	int fd;

	(void)state;
	snprintf(p, sizeof(p), "%s/pr", root);
	tsup_write_file(p, "0123456789", 10);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(base_pread_full(fd, buf, 4, 3, &got), 0);
	assert_int_equal(got, 4);
	assert_memory_equal(buf, "3456", 4);
	/* Short only at the end of the file. */
	assert_int_equal(base_pread_full(fd, buf, sizeof(buf), 6, &got), 0);
	assert_int_equal(got, 4);
	assert_int_equal(base_pread_full(fd, buf, 4, 100, &got), 0);
	assert_int_equal(got, 0);
	close(fd);
	assert_int_equal(base_pread_full(-1, buf, 4, 0, &got), -EBADF);
	assert_int_equal(got, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_mkdir_p, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_all, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fsync, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_small, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_atomic, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_new, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pread_full, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
