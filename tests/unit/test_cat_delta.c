/*
 * tests/unit/test_cat_delta.c — delta catalogs (catalog/cat_delta.c) on
 * real generations: the replicator's generation build over a temp tree,
 * changed (content, a file added, one removed, a directory renamed, an
 * xattr, a mode), rebuilt; the delta from 1 to 2 applied to 1 gives a
 * catalog with 2's digest, holding 2's rows. A delta with one row changed,
 * or applied to another generation, is refused and leaves nothing; one
 * made to order passes its own digest but not a signed one.
 * cat_diff names exactly what a mount switching from 1 to 2 must tell the
 * kernel.
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
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "replicator/publish/repl_publish.h"
#include "tsupport.h"

struct fx {
	char root[64], src[96], ns[96];
	char c1[160], c2[160], delta[160], out[160];
};

static void put(const char *dir, const char *name, const char *text)
{
	char p[512];

	assert_true(snprintf(p, sizeof(p), "%s/%s", dir, name) <
		    (int)sizeof(p));
	tsup_write_file(p, text, strlen(text));
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char p[256];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_cat_delta.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->src, sizeof(f->src), "%s/src", f->root);
	snprintf(f->ns, sizeof(f->ns), "%s/state/ns", f->root);
	assert_int_equal(mkdir(f->src, 0755), 0);
	for (int d = 0; d < 4; d++) {
		snprintf(p, sizeof(p), "%s/d%d", f->src, d);
		assert_int_equal(mkdir(p, 0755), 0);
		for (int i = 0; i < 50; i++) {
			char name[32], text[64];

			snprintf(name, sizeof(name), "f%03d", i);
			snprintf(text, sizeof(text), "file %d of %d\n", i, d);
			put(p, name, text);
		}
	}
	snprintf(f->c1, sizeof(f->c1), "%s/catalog/1.db", f->ns);
	snprintf(f->c2, sizeof(f->c2), "%s/catalog/2.db", f->ns);
	snprintf(f->delta, sizeof(f->delta), "%s/d.db", f->root);
	snprintf(f->out, sizeof(f->out), "%s/out.db", f->root);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

/* Two generations of the tree, the second after a change of each kind. */
static void two_generations(struct fx *f)
{
	struct repl_scan_opts o = {.defer = 1};
	struct repl_generation g;
	char p[256], q[256];

	assert_int_equal(repl_generation_build(f->ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 1);
	snprintf(p, sizeof(p), "%s/d0", f->src);
	put(p, "f000", "changed content, longer than before\n");
	put(p, "aaa-new", "a name that sorts first\n");
	snprintf(p, sizeof(p), "%s/d1/f010", f->src);
	assert_int_equal(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/d2", f->src);
	snprintf(q, sizeof(q), "%s/d3/moved", f->src);
	assert_int_equal(rename(p, q), 0);
	snprintf(p, sizeof(p), "%s/d3/f001", f->src);
	assert_int_equal(chmod(p, 0600), 0);
	(void)setxattr(p, "user.tag", "v", 1, 0);
	assert_int_equal(repl_generation_build(f->ns, f->src, &o, &g), 0);
	assert_int_equal(g.generation, 2);
}

static int64_t count(const char *db, const char *sql)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return n;
}

static void test_round_trip(void **state)
{
	struct fx *f = *state;
	char d1[65], d2[65], dout[65];
	uint64_t from = 0, to = 0;

	two_generations(f);
	assert_int_equal(cat_digest(f->c1, d1), 0);
	assert_int_equal(cat_digest(f->c2, d2), 0);
	assert_string_not_equal(d1, d2);
	assert_int_equal(cat_delta_build(f->c1, f->c2, f->delta), 0);
	/* the delta holds what changed, not the tree: 200 files, a handful
	 * of inode rows (the changed file, the new one, the chmod, the
	 * directories whose times moved); the removed file and the two
	 * changed ones (a changed file gets a new number) go */
	assert_true(count(f->delta, "SELECT count(*) FROM put_inode") < 12);
	assert_true(count(f->delta, "SELECT count(*) FROM put_inode") >= 3);
	assert_int_equal(count(f->delta, "SELECT count(*) FROM del_inode"), 3);
	assert_int_equal(cat_delta_apply(f->c1, f->delta, f->out, &from, &to),
			 0);
	assert_int_equal(from, 1);
	assert_int_equal(to, 2);
	assert_int_equal(cat_digest(f->out, dout), 0);
	assert_string_equal(dout, d2);
	/* and it reads as generation 2 */
	{
		cat_reader *r = NULL;
		struct cat_meta m;

		assert_int_equal(cat_reader_open(f->out, &r), 0);
		cat_reader_meta(r, &m);
		assert_int_equal(m.generation, 2);
		cat_reader_close(r);
	}
}

static void test_refused(void **state)
{
	struct fx *f = *state;
	sqlite3 *h = NULL;

	two_generations(f);
	assert_int_equal(cat_delta_build(f->c1, f->c2, f->delta), 0);
	/* applied to the wrong generation */
	assert_int_equal(cat_delta_apply(f->c2, f->delta, f->out, NULL, NULL),
			 -EBADMSG);
	assert_int_equal(access(f->out, F_OK), -1);
	/* from a later to an earlier one */
	assert_int_equal(cat_delta_build(f->c2, f->c1, f->delta), -EINVAL);
	assert_int_equal(cat_delta_build(f->c1, f->c2, f->delta), 0);
	/* one row changed in transit */
	assert_int_equal(sqlite3_open(f->delta, &h), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h,
				      "UPDATE put_inode SET size = size + 1 "
				      "WHERE rowid = (SELECT min(rowid) FROM "
				      "put_inode)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_changes(h), 1);
	sqlite3_close(h);
	assert_int_equal(cat_delta_apply(f->c1, f->delta, f->out, NULL, NULL),
			 -EBADMSG);
	assert_int_equal(access(f->out, F_OK), -1);
	/* not a delta at all */
	tsup_write_file(f->delta, "garbage", 7);
	assert_int_equal(cat_delta_apply(f->c1, f->delta, f->out, NULL, NULL),
			 -EBADMSG);
	assert_int_equal(access(f->out, F_OK), -1);
}

/* A delta made to order: the rows of a changed copy of generation 2,
 * with that copy's digest. cat_delta_apply takes it (the delta's own
 * digest only guards against cuts and mix-ups); with the digest a
 * signed statement names for generation 2 it is refused. */
static void test_bound_to_signed_digest(void **state)
{
	struct fx *f = *state;
	char d2[65], forged[65], want[65], c3[200], cmd[600];
	sqlite3 *h = NULL;

	two_generations(f);
	assert_int_equal(cat_digest(f->c2, d2), 0);
	snprintf(c3, sizeof(c3), "%s/forged.db", f->root);
	snprintf(cmd, sizeof(cmd), "cp %s %s", f->c2, c3);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(sqlite3_open(c3, &h), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h,
				      "UPDATE inode SET mode = mode | 0002 "
				      "WHERE ino = (SELECT max(ino) FROM inode "
				      "WHERE kind = 1)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_changes(h), 1);
	sqlite3_close(h);
	assert_int_equal(cat_digest(c3, forged), 0);
	assert_string_not_equal(forged, d2);
	assert_int_equal(cat_delta_build(f->c1, c3, f->delta), 0);
	/* the delta vouches for itself */
	assert_int_equal(cat_delta_apply(f->c1, f->delta, f->out, NULL, NULL),
			 0);
	assert_int_equal(cat_digest(f->out, want), 0);
	assert_string_equal(want, forged);
	unlink(f->out);
	/* the signed digest does not */
	assert_int_equal(
	    cat_delta_apply_want(f->c1, f->delta, f->out, d2, NULL, NULL),
	    -EBADMSG);
	assert_int_equal(access(f->out, F_OK), -1);
	/* and the real delta passes both */
	assert_int_equal(cat_delta_build(f->c1, f->c2, f->delta), 0);
	assert_int_equal(
	    cat_delta_apply_want(f->c1, f->delta, f->out, d2, NULL, NULL), 0);
	assert_int_equal(cat_digest(f->out, want), 0);
	assert_string_equal(want, d2);
}

/* What cat_diff reports, gathered. */
struct seen {
	char names[64][80]; /* "PARENT/NAME" */
	size_t nn;
	uint64_t dirs[32], attrs[32], data[32], gone[32];
	size_t nd, na, nx, ng;
};

static int seen_cb(void *ctx, const struct cat_diff_item *it)
{
	struct seen *s = ctx;

	switch (it->kind) {
	case CAT_DIFF_NAME:
		assert_true(s->nn < 64);
		snprintf(s->names[s->nn++], sizeof(s->names[0]), "%llu/%.*s",
			 (unsigned long long)it->ino, (int)it->name_len,
			 (const char *)it->name);
		break;
	case CAT_DIFF_DIR:
		assert_true(s->nd < 32);
		s->dirs[s->nd++] = it->ino;
		break;
	case CAT_DIFF_ATTR:
		assert_true(s->na < 32);
		s->attrs[s->na++] = it->ino;
		break;
	case CAT_DIFF_DATA:
		assert_true(s->nx < 32);
		s->data[s->nx++] = it->ino;
		break;
	case CAT_DIFF_GONE:
		assert_true(s->ng < 32);
		/* ascending */
		assert_true(s->ng == 0 || s->gone[s->ng - 1] < it->ino);
		s->gone[s->ng++] = it->ino;
		break;
	}
	return 0;
}

static int has_name(const struct seen *s, uint64_t parent, const char *name)
{
	char want[80];

	snprintf(want, sizeof(want), "%llu/%s", (unsigned long long)parent,
		 name);
	for (size_t i = 0; i < s->nn; i++)
		if (!strcmp(s->names[i], want))
			return 1;
	return 0;
}

static int has_ino(const uint64_t *v, size_t n, uint64_t ino)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == ino)
			return 1;
	return 0;
}

static uint64_t ino_of(const char *cat, uint64_t parent, const char *name)
{
	cat_reader *r = NULL;
	struct cat_inode in;
	int rc;

	assert_int_equal(cat_reader_open(cat, &r), 0);
	rc = cat_lookup(r, parent, name, strlen(name), &in);
	cat_reader_close(r);
	return rc == 0 ? in.ino : 0;
}

/* The names that came, went or now name another ino (and not the ones
 * whose position moved because of them), the directories whose listing
 * changed, the inodes whose rows moved under the same number. */
static void test_diff(void **state)
{
	struct fx *f = *state;
	struct seen s;
	uint64_t d0, d1, d2, d3;

	two_generations(f);
	memset(&s, 0, sizeof(s));
	assert_int_equal(cat_diff(f->c1, f->c2, seen_cb, &s), 0);
	d0 = ino_of(f->c1, CAT_ROOT_INO, "d0");
	d1 = ino_of(f->c1, CAT_ROOT_INO, "d1");
	d2 = ino_of(f->c1, CAT_ROOT_INO, "d2");
	d3 = ino_of(f->c1, CAT_ROOT_INO, "d3");
	assert_int_equal(ino_of(f->c2, d3, "moved"), d2);
	assert_true(has_name(&s, d0, "aaa-new"));
	assert_true(has_name(&s, d0, "f000")); /* changed: a new number */
	assert_true(has_name(&s, d1, "f010"));
	assert_true(has_name(&s, CAT_ROOT_INO, "d2"));
	assert_true(has_name(&s, d3, "moved"));
	assert_true(has_name(&s, d3, "f001")); /* chmod moved its ctime */
	/* f001 of d0 moved to another position, its entry did not change */
	assert_false(has_name(&s, d0, "f001"));
	assert_int_equal(s.nn, 6);
	assert_true(has_ino(s.dirs, s.nd, d0));
	assert_true(has_ino(s.dirs, s.nd, d1));
	assert_true(has_ino(s.dirs, s.nd, d3));
	assert_true(has_ino(s.dirs, s.nd, CAT_ROOT_INO));
	assert_false(has_ino(s.dirs, s.nd, d2)); /* moved, listing the same */
	assert_int_equal(s.nd, 4);
	/* directories whose times moved; no regular file (a changed one has
	 * a new number) */
	assert_true(has_ino(s.attrs, s.na, d0));
	assert_true(s.na <= 5);
	assert_int_equal(s.nx, 0);
	/* gone: the removed file and the old numbers of the two changed */
	assert_int_equal(s.ng, 3);
	assert_true(has_ino(s.gone, s.ng, ino_of(f->c1, d1, "f010")));
	assert_true(has_ino(s.gone, s.ng, ino_of(f->c1, d0, "f000")));
	assert_true(has_ino(s.gone, s.ng, ino_of(f->c1, d3, "f001")));
	/* the same catalog twice: nothing */
	memset(&s, 0, sizeof(s));
	assert_int_equal(cat_diff(f->c2, f->c2, seen_cb, &s), 0);
	assert_int_equal(s.nn + s.nd + s.na + s.nx + s.ng, 0);
	/* not a catalog */
	tsup_write_file(f->out, "garbage", 7);
	assert_int_equal(cat_diff(f->c1, f->out, seen_cb, &s), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bound_to_signed_digest, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_diff, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
