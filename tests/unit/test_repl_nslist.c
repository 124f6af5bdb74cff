/*
 * tests/unit/test_repl_nslist.c — the namespaces the replicator is given
 * (replicator/serve/repl_nslist.c): NAME=DIR arguments, the lines of a
 * --namespaces file (comments, blank lines, blanks around a line, CRLF,
 * a DIR with '=' and blanks inside), every malformed line refused with
 * its number and the list left as it was, a name given twice (in the
 * file, or in an argument and the file), loading (missing, too large,
 * an empty file), the DIR checks naming the line, and a copy.
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

#include "replicator/serve/repl_nslist.h"
#include "tsupport.h"

static int parse(struct repl_ns_list *l, const char *text, char *err,
		 size_t cap)
{
	return repl_ns_list_parse(l, text, strlen(text), err, cap);
}

static void test_parse(void **state)
{
	struct repl_ns_list l = {0};
	char err[256];
	const char *text = "# tenants\n"
			   "\n"
			   "a=/srv/a\n"
			   "   \t\n"
			   "  # indented comment\n"
			   "  b=/srv/b  \r\n"
			   "c.x-1_2=/srv/with=equals and blanks\n"
			   "last=rel/dir"; /* no newline at the end */

	(void)state;
	assert_int_equal(parse(&l, text, err, sizeof(err)), 0);
	assert_int_equal(l.n, 4);
	assert_string_equal(l.v[0].name, "a");
	assert_string_equal(l.v[0].dir, "/srv/a");
	assert_int_equal(l.v[0].lineno, 3);
	assert_string_equal(l.v[1].name, "b");
	assert_string_equal(l.v[1].dir, "/srv/b");
	assert_int_equal(l.v[1].lineno, 6);
	assert_string_equal(l.v[2].name, "c.x-1_2");
	assert_string_equal(l.v[2].dir, "/srv/with=equals and blanks");
	assert_int_equal(l.v[2].lineno, 7);
	assert_string_equal(l.v[3].name, "last");
	assert_string_equal(l.v[3].dir, "rel/dir");
	assert_non_null(repl_ns_list_find(&l, "b", 1));
	assert_null(repl_ns_list_find(&l, "bb", 2));
	assert_null(repl_ns_list_find(&l, "c", 1)); /* a prefix of c.x-1_2 */
	repl_ns_list_fini(&l);
	assert_int_equal(l.n, 0);

	/* empty text and only comments: an empty set, not an error */
	assert_int_equal(parse(&l, "", err, sizeof(err)), 0);
	assert_int_equal(parse(&l, "# none yet\n\n", err, sizeof(err)), 0);
	assert_int_equal(l.n, 0);
	repl_ns_list_fini(&l);
}

/* text must fail with r, err starting with want, and leave the list's
 * one entry ("keep") alone. */
static void bad(const char *text, size_t len, int r, const char *want)
{
	struct repl_ns_list l = {0};
	char err[256];

	assert_int_equal(
	    repl_ns_list_add_arg(&l, "keep=/k", 7, err, sizeof(err)), 0);
	assert_int_equal(repl_ns_list_parse(&l, text, len, err, sizeof(err)),
			 r);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("for %s: got \"%s\", want \"%s...\"", text, err, want);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.v[0].name, "keep");
	repl_ns_list_fini(&l);
}

static void test_parse_bad(void **state)
{
	char *longline;
	size_t n = REPL_NSFILE_LINE_MAX + 1;

	(void)state;
	bad("a=/a\nb /b\n", 10, -EINVAL, "line 2: 'b /b' is not NAME=DIR");
	bad("a=/a\n\n.hidden=/h\n", 17, -EINVAL,
	    "line 3: bad namespace name '.hidden'");
	bad("x/y=/a\n", 7, -EINVAL, "line 1: bad namespace name 'x/y'");
	bad("=/a\n", 4, -EINVAL, "line 1: bad namespace name ''");
	bad("a=\n", 3, -EINVAL, "line 1: namespace 'a' has no DIR");
	bad("a=/a\nb=/b\na=/c\n", 15, -EEXIST,
	    "line 3: namespace 'a' given twice");
	/* a name of the arguments (here "keep") may not come again */
	bad("keep=/other\n", 12, -EEXIST, "line 1: namespace 'keep' given");
	bad("a=/a\nb=/b\0c\n", 12, -EINVAL, "line 2: holds a NUL byte");
	/* 65 characters: one over the name limit */
	bad("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "=/a\n",
	    69, -EINVAL, "line 1: bad namespace name");
	longline = malloc(n + 8);
	assert_non_null(longline);
	memcpy(longline, "ok=/ok\nl=/", 10);
	memset(longline + 10, 'x', n - 3);
	bad(longline, n + 7, -EINVAL, "line 2: longer than 8192 bytes");
	free(longline);
}

static void test_args(void **state)
{
	struct repl_ns_list l = {0};
	char err[256];

	(void)state;
	assert_int_equal(
	    repl_ns_list_add_arg(&l, "data=/srv/d", 11, err, sizeof(err)), 0);
	assert_int_equal(l.v[0].lineno, 0);
	assert_int_equal(repl_ns_list_add_arg(&l, "nodir", 5, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "'nodir' is not NAME=DIR");
	assert_int_equal(
	    repl_ns_list_add_arg(&l, "data=/other", 11, err, sizeof(err)),
	    -EEXIST);
	assert_string_equal(err, "namespace 'data' given twice");
	assert_int_equal(
	    repl_ns_list_add_arg(&l, ".d=/other", 9, err, sizeof(err)),
	    -EINVAL);
	assert_int_equal(l.n, 1);
	/* the file comes after the arguments: a duplicate is its line */
	assert_int_equal(parse(&l, "m=/m\n# c\ndata=/x\n", err, sizeof(err)),
			 -EEXIST);
	assert_string_equal(err, "line 3: namespace 'data' given twice");
	assert_int_equal(l.n, 1);
	repl_ns_list_fini(&l);
}

static void test_load_and_dirs(void **state)
{
	char root[] = "/tmp/ferry-nslist.XXXXXX", path[256], d[256], text[1024],
	     err[512];
	struct repl_ns_list l = {0}, c = {0};
	char *big;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/missing", root);
	assert_int_equal(repl_ns_list_load(&l, path, err, sizeof(err)),
			 -ENOENT);
	assert_string_equal(err, "No such file or directory");

	snprintf(d, sizeof(d), "%s/src", root);
	assert_int_equal(mkdir(d, 0755), 0);
	snprintf(path, sizeof(path), "%s/ns", root);
	snprintf(text, sizeof(text),
		 "one=%s\n# two is a file, three missing\ntwo=%s/ns\n"
		 "three=%s/nowhere\n",
		 d, root, root);
	tsup_write_file(path, text, strlen(text));
	assert_int_equal(repl_ns_list_load(&l, path, err, sizeof(err)), 0);
	assert_int_equal(l.n, 3);
	/* the first is a directory, the second not: its line is named */
	assert_int_equal(repl_ns_list_check_dirs(&l, 2, err, sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "line 4: cannot use the source "
				    "directory of namespace 'three'"));
	assert_int_equal(repl_ns_list_check_dirs(&l, 0, err, sizeof(err)),
			 -ENOTDIR);
	assert_non_null(strstr(err, "line 3: "));
	assert_non_null(strstr(err, "'two'"));
	assert_int_equal(repl_ns_list_check_dirs(&l, 3, err, sizeof(err)), 0);

	assert_int_equal(repl_ns_list_copy(&c, &l), 0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.v[2].name, "three");
	assert_true(c.v[2].dir != l.v[2].dir);
	assert_string_equal(c.v[2].dir, l.v[2].dir);
	assert_int_equal(c.v[2].lineno, 4);
	repl_ns_list_fini(&c);
	repl_ns_list_fini(&l);

	/* over the size cap: refused whole */
	snprintf(path, sizeof(path), "%s/big", root);
	f = fopen(path, "w");
	assert_non_null(f);
	big = calloc(1, 1 << 20);
	assert_non_null(big);
	memset(big, '#', (1 << 20) - 1);
	big[(1 << 20) - 1] = '\n';
	for (unsigned i = 0; i <= REPL_NSFILE_MAX >> 20; i++)
		assert_int_equal(fwrite(big, 1, 1 << 20, f), 1 << 20);
	assert_int_equal(fclose(f), 0);
	free(big);
	assert_int_equal(repl_ns_list_load(&l, path, err, sizeof(err)), -EFBIG);
	assert_int_equal(l.n, 0);
	tsup_rm_rf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_parse_bad),
	    cmocka_unit_test(test_args),
	    cmocka_unit_test(test_load_and_dirs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
