/*
 * tests/unit/test_hyd_filter.c — `ferry sync`'s include/exclude rules
 * (hydrator/sync/hyd_filter.c) on a table of (rules, path, verdict) cases
 * with rsync's meanings; e2e 160 runs the same kinds of rules through
 * both ferry sync and rsync and compares the trees.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hydrator/hydrator.h"
#include "tsupport.h"

struct fcase {
	const char *rules; /* '|'-separated --filter rules */
	const char *path;
	int is_dir;
	int excluded; /* expected for the transfer */
};

static hyd_filter *build(const char *rules)
{
	hyd_filter *f = hyd_filter_new();
	char *dup = strdup(rules), *save = NULL, *tok;
	const char *why = "";

	assert_non_null(f);
	assert_non_null(dup);
	for (tok = strtok_r(dup, "|", &save); tok;
	     tok = strtok_r(NULL, "|", &save))
		if (hyd_filter_rule(f, tok, &why) < 0)
			fail_msg("rule '%s' refused: %s", tok, why);
	free(dup);
	return f;
}

static void test_patterns(void **state)
{
	static const struct fcase cases[] = {
	    /* a name without '/' matches the last component anywhere */
	    {"- *.o", "a.o", 0, 1},
	    {"- *.o", "x/y/a.o", 0, 1},
	    {"- *.o", "a.c", 0, 0},
	    {"- *.o", "a.o/b", 0, 0},
	    /* '*' stops at '/', "**" does not */
	    {"- x/*", "x/a", 0, 1},
	    {"- x/*", "x/a/b", 0, 0},
	    {"- x/**", "x/a/b", 0, 1},
	    {"- /x/**", "y/x/a", 0, 0},
	    /* unanchored with a '/': any tail at a component */
	    {"- a/b", "a/b", 0, 1},
	    {"- a/b", "z/a/b", 0, 1},
	    {"- a/b", "za/b", 0, 0},
	    /* anchored: only at the root */
	    {"- /top", "top", 1, 1},
	    {"- /top", "x/top", 1, 0},
	    /* trailing '/': directories only */
	    {"- tmp/", "tmp", 1, 1},
	    {"- tmp/", "tmp", 0, 0},
	    {"- tmp/", "q/tmp", 1, 1},
	    /* '?', classes, escapes */
	    {"- ?.txt", "a.txt", 0, 1},
	    {"- ?.txt", "ab.txt", 0, 0},
	    {"- [ab].c", "b.c", 0, 1},
	    {"- [!ab].c", "b.c", 0, 0},
	    {"- [!ab].c", "c.c", 0, 1},
	    {"- [a-c]x", "bx", 0, 1},
	    {"- [a-c]x", "dx", 0, 0},
	    {"- \\*lit", "*lit", 0, 1},
	    {"- \\*lit", "alit", 0, 0},
	    /* the first matching rule decides */
	    {"+ keep.o|- *.o", "keep.o", 0, 0},
	    {"- *.o|+ keep.o", "keep.o", 0, 1},
	    {"+ */|+ *.c|- *", "src", 1, 0},
	    {"+ */|+ *.c|- *", "src/a.c", 0, 0},
	    {"+ */|+ *.c|- *", "src/a.h", 0, 1},
	    /* "DIR/" "***": the directory and all below */
	    {"+ /d/***|- *", "d", 1, 0},
	    {"+ /d/***|- *", "d/e/f", 0, 0},
	    {"+ /d/***|- *", "e", 1, 1},
	    /* unanchored: the directory at any depth */
	    {"- d/***", "x/d", 1, 1},
	    {"- d/***", "x/d/e/f", 0, 1},
	    {"- d/***", "x/dd/e", 0, 0},
	    /* long names, and '!' clears */
	    {"exclude *.tmp", "a.tmp", 0, 1},
	    {"include *.tmp|exclude *", "a.tmp", 0, 0},
	    {"- *.tmp|!", "a.tmp", 0, 0},
	    /* receiver-only rules do not touch the transfer */
	    {"P *.keep", "a.keep", 0, 0},
	    {"H *.hide", "a.hide", 0, 1},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		hyd_filter *f = build(cases[i].rules);
		int got =
		    hyd_filter_excluded(f, cases[i].path, cases[i].is_dir, 0);

		if (got != cases[i].excluded)
			fail_msg("rules '%s' path '%s'%s: excluded=%d, want %d",
				 cases[i].rules, cases[i].path,
				 cases[i].is_dir ? " (dir)" : "", got,
				 cases[i].excluded);
		hyd_filter_free(f);
	}
}

/* Which rules protect DEST's entries from --delete. */
static void test_delete_side(void **state)
{
	hyd_filter *f = build("- *.o|P keep/|H *.hide");
	const char *why = "";

	(void)state;
	assert_true(hyd_filter_excluded(f, "a.o", 0, 1));     /* both sides */
	assert_true(hyd_filter_excluded(f, "keep", 1, 1));    /* protect */
	assert_false(hyd_filter_excluded(f, "keep", 1, 0));   /* sent */
	assert_false(hyd_filter_excluded(f, "x.hide", 0, 1)); /* may go */
	assert_false(hyd_filter_excluded(f, "a.c", 0, 1));
	/* --delete-excluded: + and - stop protecting; P still does */
	hyd_filter_delete_excluded(f);
	assert_false(hyd_filter_excluded(f, "a.o", 0, 1));
	assert_true(hyd_filter_excluded(f, "a.o", 0, 0));
	assert_true(hyd_filter_excluded(f, "keep", 1, 1));
	hyd_filter_free(f);

	/* a "- " or "+ " prefix overrides --exclude / --include */
	f = hyd_filter_new();
	assert_non_null(f);
	assert_int_equal(hyd_filter_pattern(f, 0, "+ *.c", &why), 0);
	assert_int_equal(hyd_filter_pattern(f, 0, "*", &why), 0);
	assert_false(hyd_filter_excluded(f, "a.c", 0, 0));
	assert_true(hyd_filter_excluded(f, "a.h", 0, 0));
	assert_int_equal(hyd_filter_count(f), 2);
	hyd_filter_free(f);
}

static void test_bad_rules(void **state)
{
	static const char *const bad[] = {
	    ". /nonexistent/merge-file",
	    "-",
	    "- ",
	    "x *.o",
	    "exclude",
	    "- /",
	    "protect",
	    "-x *.o", /* xattr rules: refused, named */
	    "-/ *.o", /* absolute-path rules: the same */
	    "Hs *.o",
	    ": a/.rules", /* a dir-merge file is a name */
	    "dir-merge",  /* and needs one */
	    ":! .rules",  /* no negated merges */
	    "-C *.o",	  /* the CVS list takes no pattern */
	    "+C",
	};
	hyd_filter *f = hyd_filter_new();
	const char *why = NULL;

	(void)state;
	assert_non_null(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		why = NULL;
		if (hyd_filter_rule(f, bad[i], &why) == 0)
			fail_msg("rule '%s' accepted", bad[i]);
		assert_non_null(why);
	}
	assert_int_equal(hyd_filter_count(f), 0);
	assert_int_equal(hyd_filter_merges(f), 0);
	/* a missing file is an error naming why */
	assert_int_equal(
	    hyd_filter_file(f, 0, "/nonexistent/ferry-rules", &why), -ENOENT);
	hyd_filter_free(f);
}

static void test_rules_file(void **state)
{
	char path[] = "/tmp/test_hyd_filter.XXXXXX";
	static const char text[] = "# comment\n"
				   "; also a comment\n"
				   "\n"
				   "*.log\n"
				   "+ important.log\n"
				   "build/\r\n";
	const char *why = "";
	hyd_filter *f = hyd_filter_new();
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	tsup_write_file(path, text, sizeof(text) - 1);
	assert_non_null(f);
	assert_int_equal(hyd_filter_file(f, 0, path, &why), 0);
	unlink(path);
	assert_int_equal(hyd_filter_count(f), 3);
	assert_true(hyd_filter_excluded(f, "x.log", 0, 0));
	/* the first match wins: *.log came first */
	assert_true(hyd_filter_excluded(f, "important.log", 0, 0));
	assert_true(hyd_filter_excluded(f, "a/build", 1, 0));
	assert_false(hyd_filter_excluded(f, "build", 0, 0));
	hyd_filter_free(f);
}

/* Load merge 0's text for dir; 0 or the error. */
static int load(hyd_filter *f, size_t i, const char *dir, const char *text)
{
	const char *why = "";
	int r = hyd_filter_merge_load(f, i, dir, text, strlen(text), &why);

	if (r < 0)
		print_message("load %s: %s\n", dir, why);
	return r;
}

static void test_dir_merge(void **state)
{
	hyd_filter *f = build("- *.tmp|: .rules|+ *.keep|- *.o");
	const char *why = "";

	(void)state;
	assert_int_equal(hyd_filter_merges(f), 1);
	assert_string_equal(hyd_filter_merge_name(f, 0), ".rules");
	/* the root's file: its rules hold everywhere below, at the
	 * dir-merge rule's place (after "- *.tmp", before the rest) */
	assert_int_equal(load(f, 0, "", "- *.log\n+ x.tmp\n# note\n"), 0);
	/* a sub-directory's file goes before its parents' */
	assert_int_equal(load(f, 0, "a", "+ b.log\n- /top\n- /deep/**\n"), 0);
	assert_true(hyd_filter_excluded(f, "x.log", 0, 0));
	assert_true(hyd_filter_excluded(f, "z/x.log", 0, 0));
	assert_true(hyd_filter_excluded(f, "x.tmp", 0, 0)); /* top wins */
	assert_false(hyd_filter_excluded(f, "a/b.log", 0, 0));
	assert_true(hyd_filter_excluded(f, "a/c.log", 0, 0));
	assert_true(hyd_filter_excluded(f, "z/b.log", 0, 0));
	/* anchored in a's file: at a */
	assert_true(hyd_filter_excluded(f, "a/top", 0, 0));
	assert_false(hyd_filter_excluded(f, "top", 0, 0));
	assert_false(hyd_filter_excluded(f, "a/x/top", 0, 0));
	assert_true(hyd_filter_excluded(f, "a/deep/q/r", 0, 0));
	assert_false(hyd_filter_excluded(f, "deep/q", 0, 0));
	/* the rules after the dir-merge still count */
	assert_true(hyd_filter_excluded(f, "a/m.o", 0, 0));
	/* a second load of a directory keeps the first */
	assert_int_equal(load(f, 0, "a", "- b.log\n"), 0);
	assert_false(hyd_filter_excluded(f, "a/b.log", 0, 0));
	/* a bad rule in a file, and a merge rule in one, are refused */
	assert_int_equal(hyd_filter_merge_load(f, 0, "q", "bogus\n", 6, &why),
			 -EINVAL);
	assert_int_equal(hyd_filter_merge_load(f, 0, "q", ": .x\n", 5, &why),
			 -EINVAL);
	assert_false(hyd_filter_excluded(f, "q/bogus", 0, 0));
	/* a new run forgets the files */
	hyd_filter_merge_reset(f);
	assert_false(hyd_filter_excluded(f, "x.log", 0, 0));
	hyd_filter_free(f);

	/* 'n': a file's rules hold in its directory only; "!" ends the
	 * chain of parents */
	f = build(":n .local|: .rules");
	assert_int_equal(load(f, 0, "", "- *.n\n"), 0);
	assert_int_equal(load(f, 1, "", "- *.r\n"), 0);
	assert_int_equal(load(f, 1, "s", "!\n- *.s\n"), 0);
	assert_true(hyd_filter_excluded(f, "x.n", 0, 0));
	assert_false(hyd_filter_excluded(f, "d/x.n", 0, 0));
	assert_true(hyd_filter_excluded(f, "d/x.r", 0, 0));
	assert_false(hyd_filter_excluded(f, "s/x.r", 0, 0));
	assert_true(hyd_filter_excluded(f, "s/t/x.s", 0, 0));
	hyd_filter_free(f);

	/* modifiers: '-' (patterns only), 'w' (words), 'e' (the file
	 * itself excluded), '!' negation, 'p' perishable */
	f = build(":-we .ex|-p *.bak|-! *.c");
	assert_true(hyd_filter_excluded(f, ".ex", 0, 0));
	assert_int_equal(load(f, 0, "", "one two\tthree"), 0);
	assert_true(hyd_filter_excluded(f, "two", 0, 0));
	assert_true(hyd_filter_excluded(f, "d/three", 0, 0));
	assert_true(hyd_filter_excluded(f, "x.h", 0, 0)); /* not *.c */
	assert_false(hyd_filter_excluded(f, "x.c", 0, 0));
	assert_true(hyd_filter_excluded(f, "x.c.bak", 0, 1));
	hyd_filter_free(f);
	f = build("-p *.bak");
	assert_true(hyd_filter_excluded(f, "x.bak", 0, 1));
	assert_false(hyd_filter_excluded(f, "x.bak", 0, 2));
	hyd_filter_free(f);
}

static void test_cvs(void **state)
{
	char dir[256], path[300];
	hyd_filter *f = build("+ core");
	const char *why = "", *home = getenv("HOME");
	char *saved = home ? strdup(home) : NULL;

	(void)state;
	assert_int_equal(tsup_tmpdir(dir, sizeof(dir), "test_hyd_filter"), 0);
	snprintf(path, sizeof(path), "%s/.cvsignore", dir);
	tsup_write_file(path, "*.home  other\n", 14);
	setenv("HOME", dir, 1);
	setenv("CVSIGNORE", "*.env", 1);
	assert_int_equal(hyd_filter_cvs(f, &why), 0);
	assert_int_equal(hyd_filter_merges(f), 1);
	assert_string_equal(hyd_filter_merge_name(f, 0), ".cvsignore");
	assert_true(hyd_filter_excluded(f, "a.o", 0, 0));
	assert_true(hyd_filter_excluded(f, "d/.git", 1, 0));
	assert_false(hyd_filter_excluded(f, "d/.git", 0, 0)); /* dirs only */
	assert_false(hyd_filter_excluded(f, "core", 0, 0));   /* + came first */
	assert_true(hyd_filter_excluded(f, "x.home", 0, 0));
	assert_true(hyd_filter_excluded(f, "x.env", 0, 0));
	/* the defaults are perishable, the user's lists are not */
	assert_true(hyd_filter_excluded(f, "a.o", 0, 1));
	assert_false(hyd_filter_excluded(f, "a.o", 0, 2));
	assert_true(hyd_filter_excluded(f, "x.home", 0, 2));
	/* .cvsignore: words, excludes, not inherited, "!" clears */
	assert_int_equal(load(f, 0, "d", "*.x ! *.y"), 0);
	assert_false(hyd_filter_excluded(f, "d/a.x", 0, 0));
	assert_true(hyd_filter_excluded(f, "d/a.y", 0, 0));
	assert_false(hyd_filter_excluded(f, "d/e/a.y", 0, 0));
	hyd_filter_free(f);
	unlink(path);
	rmdir(dir);
	unsetenv("CVSIGNORE");
	if (saved)
		setenv("HOME", saved, 1);
	free(saved);
}

static void test_merge_file(void **state)
{
	char dir[256], path[300], rule[320];
	hyd_filter *f = hyd_filter_new();
	const char *why = "";

	(void)state;
	assert_non_null(f);
	assert_int_equal(tsup_tmpdir(dir, sizeof(dir), "test_hyd_filter"), 0);
	snprintf(path, sizeof(path), "%s/rules", dir);
	tsup_write_file(path, "+ keep.o\n- *.o\n: .inner\n", 24);
	snprintf(rule, sizeof(rule), "merge %s", path);
	assert_int_equal(hyd_filter_rule(f, rule, &why), 0);
	assert_false(hyd_filter_excluded(f, "keep.o", 0, 0));
	assert_true(hyd_filter_excluded(f, "a.o", 0, 0));
	assert_int_equal(hyd_filter_merges(f), 1);
	/* '+' modifier: every line an include */
	snprintf(rule, sizeof(rule), ".+ %s", path);
	assert_int_equal(hyd_filter_rule(f, "!", &why), 0);
	assert_int_equal(hyd_filter_count(f), 0);
	tsup_write_file(path, "*.h\n", 4);
	assert_int_equal(hyd_filter_rule(f, rule, &why), 0);
	assert_int_equal(hyd_filter_rule(f, "- *", &why), 0);
	assert_false(hyd_filter_excluded(f, "a.h", 0, 0));
	assert_true(hyd_filter_excluded(f, "a.c", 0, 0));
	hyd_filter_free(f);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_patterns),
	    cmocka_unit_test(test_delete_side),
	    cmocka_unit_test(test_bad_rules),
	    cmocka_unit_test(test_rules_file),
	    cmocka_unit_test(test_dir_merge),
	    cmocka_unit_test(test_cvs),
	    cmocka_unit_test(test_merge_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
