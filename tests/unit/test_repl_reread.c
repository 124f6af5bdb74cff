/*
 * tests/unit/test_repl_reread.c — a chunk read again from the source
 * (replicator/source/repl_reread.c) is hashed again unless its file is,
 * before and after the read, what the walk saw, and had settled then.
 * Real files and a real source index: an index written with no settle
 * time serves a file's chunk without a second hash; the same with the
 * default settle time (the file was just written) hashes it, and so does
 * one the walk looked at within the settle time of its ctime however
 * later the index is written; a file
 * changed in place with its size and mtime put back (ctime moves) is
 * hashed and refused (-EBADMSG, the server's 409); with rehash set
 * (--rehash, a publish) a settled file's chunk is hashed; a file replaced by a
 * copy of the same bytes (another inode) is hashed and served; an index
 * from a build that kept no identity (its file table has no such
 * columns) is served by hashing.
 */
#include <errno.h>
#include <fcntl.h>
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
#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "replicator/source/repl_source.h"
#include "replicator/source/repl_srcindex.h"
#include "tsupport.h"

#define LEN 70000u
#define INO 7u

struct fix {
	char dir[256], src[300], idx[300];
	int dirfd;
	uint8_t *bytes;
	chunk_id id;
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(tsup_tmpdir(f->dir, sizeof(f->dir), "reread"), 0);
	snprintf(f->src, sizeof(f->src), "%s/src", f->dir);
	snprintf(f->idx, sizeof(f->idx), "%s/1.db", f->dir);
	assert_int_equal(mkdir(f->src, 0755), 0);
	f->bytes = tsup_random_bytes(LEN, 42);
	assert_int_equal(chunk_id_compute(f->bytes, LEN, &f->id), 0);
	f->dirfd = open(f->src, O_RDONLY | O_DIRECTORY);
	assert_true(f->dirfd >= 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	close(f->dirfd);
	tsup_rm_rf(f->dir);
	free(f->bytes);
	free(f);
	return 0;
}

static void seen_of(const char *path, struct repl_src_todo *t)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	t->dev = (uint64_t)st.st_dev;
	t->sino = (uint64_t)st.st_ino;
	t->size = (uint64_t)st.st_size;
	t->mtime_ns =
	    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	t->ctime_ns =
	    (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

/* The file "a" with the fixture's bytes, and an index of it (one chunk,
 * the whole file) written with settle time settle_ns, the walk having
 * looked at the file after_ns past its ctime (< 0: now). */
static void make_looked(struct fix *f, int64_t settle_ns, int64_t after_ns)
{
	repl_srcindex_writer *w;
	struct repl_src_todo t;
	char p[320];

	snprintf(p, sizeof(p), "%s/a", f->src);
	tsup_write_file(p, f->bytes, LEN);
	seen_of(p, &t);
	unlink(f->idx);
	assert_int_equal(repl_srcindex_create(f->idx, 1, &w), 0);
	repl_srcindex_set_settle(w, settle_ns);
	assert_int_equal(repl_srcindex_add_file(w, INO, "a", 1, &t,
						after_ns < 0
						    ? base_wall_ns()
						    : t.ctime_ns + after_ns),
			 0);
	assert_int_equal(repl_srcindex_add_chunk(w, &f->id, INO, 0, LEN), 1);
	assert_int_equal(repl_srcindex_commit(w), 0);
}

/* The same, the walk looking at it now. */
static void make(struct fix *f, int64_t settle_ns)
{
	make_looked(f, settle_ns, -1);
}

/* Serve the chunk (every chunk hashed when rehash); its error, *hashed
 * whether it was hashed again. */
static int serve_as(struct fix *f, int rehash, int *hashed)
{
	struct repl_worker *w;
	struct repl_chunk_res res;
	uint8_t *raw = malloc(LEN);
	size_t got = 0;
	int r;

	assert_non_null(raw);
	assert_int_equal(repl_chunk_worker_open(f->idx, 1, &w), 0);
	w->rehash = rehash;
	r = repl_chunk_frame(w, f->dirfd, FRAME_POLICY_LZ4, &f->id, &res);
	*hashed = res.hashed;
	if (r == 0) {
		/* the frame holds the file's bytes */
		assert_int_equal(res.raw_len, LEN);
		assert_int_equal(frame_decode(w->coder, res.frame,
					      res.frame_len, LEN, raw, LEN,
					      &got),
				 0);
		assert_int_equal(got, LEN);
		assert_memory_equal(raw, f->bytes, LEN);
	}
	repl_chunk_res_fini(&res);
	repl_chunk_workers_free(w);
	free(raw);
	return r;
}

static int serve(struct fix *f, int *hashed)
{
	return serve_as(f, 0, hashed);
}

static void test_settled_not_hashed(void **state)
{
	struct fix *f = *state;
	int hashed = -1;

	make(f, 0);
	assert_int_equal(serve(f, &hashed), 0);
	assert_int_equal(hashed, 0);
	/* --rehash (and every publish): hashed all the same */
	assert_int_equal(serve_as(f, 1, &hashed), 0);
	assert_int_equal(hashed, 1);
}

static void test_fresh_file_hashed(void **state)
{
	struct fix *f = *state;
	int hashed = -1;

	/* written just now: within the default settle time */
	make(f, REPL_SETTLE_NS);
	assert_int_equal(serve(f, &hashed), 0);
	assert_int_equal(hashed, 1);
}

/* What counts is when the walk looked, not when the index was written:
 * a file looked at 1 ms after its last write is hashed, one looked at 3 s
 * after it is not. */
static void test_settled_when_looked(void **state)
{
	struct fix *f = *state;
	int hashed = -1;

	make_looked(f, REPL_SETTLE_NS, 1000000);
	assert_int_equal(serve(f, &hashed), 0);
	assert_int_equal(hashed, 1);
	make_looked(f, REPL_SETTLE_NS, 3000000000ll);
	assert_int_equal(serve(f, &hashed), 0);
	assert_int_equal(hashed, 0);
}

static void test_changed_in_place_refused(void **state)
{
	struct fix *f = *state;
	struct timespec ts[2];
	struct stat st;
	char p[320];
	int hashed = -1;

	make(f, 0);
	snprintf(p, sizeof(p), "%s/a", f->src);
	assert_int_equal(stat(p, &st), 0);
	tsup_flip_byte(p, 100, 0x01);
	/* size and mtime as the walk saw them; only ctime tells */
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
	assert_int_equal(serve(f, &hashed), -EBADMSG);
	assert_int_equal(hashed, 1);
}

static void test_replaced_hashed(void **state)
{
	struct fix *f = *state;
	char p[320], q[320];
	int hashed = -1;

	make(f, 0);
	snprintf(p, sizeof(p), "%s/a", f->src);
	snprintf(q, sizeof(q), "%s/a.new", f->src);
	tsup_write_file(q, f->bytes, LEN);
	assert_int_equal(rename(q, p), 0);
	assert_int_equal(serve(f, &hashed), 0);
	assert_int_equal(hashed, 1);
}

static void test_index_without_identity(void **state)
{
	struct fix *f = *state;
	sqlite3 *db;
	int hashed = -1;

	make(f, 0);
	assert_int_equal(sqlite3_open(f->idx, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "ALTER TABLE file DROP COLUMN dev;"
				      "ALTER TABLE file DROP COLUMN sino;"
				      "ALTER TABLE file DROP COLUMN size;"
				      "ALTER TABLE file DROP COLUMN mtime_ns;"
				      "ALTER TABLE file DROP COLUMN ctime_ns;",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(serve(f, &hashed), 0);
	assert_int_equal(hashed, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_settled_not_hashed, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_fresh_file_hashed, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_settled_when_looked, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_changed_in_place_refused,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replaced_hashed, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_index_without_identity, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
