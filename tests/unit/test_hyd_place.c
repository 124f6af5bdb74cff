/*
 * tests/unit/test_hyd_place.c — --into's placement (hydrator/sync/
 * hyd_place.c) on a real SQLite record and real files: a chunk is written
 * at every offset a file of the catalog has it, recorded only once durable,
 * read back checked; a whole part is renamed in; bytes written over in DIR
 * are refused and forgotten; and a crash between the data and its record
 * leaves no record (the chunk is placed again), never a record of bytes
 * that are not there; the landing hears of a file once it is whole; a
 * landed file is served from DIR only while the sync record vouches; a
 * chunk that came before any file wanted it is listed among the ranges
 * a part lacks and is written in when handed again.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hydrator/sync/hyd_sync_priv.h"
#include "tests/unit/tsupport.h"

#define LEN 4096
#define INO_A 2
#define INO_B 3

/* A: c0 c1 z (all zero bytes, a real chunk); B: c1 c3. c1 repeats. */
struct fx {
	char dir[64], cache[96], into[96], cat[128];
	uint8_t data[4][LEN]; /* c0, c1, z, c3 */
	chunk_id id[4];
	int cbs, cb_rc; /* callbacks: none (puts are answered at once) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void cb(void *arg, int rc)
{
	struct fx *fx = arg;

	pthread_mutex_lock(&fx->mu);
	fx->cbs++;
	fx->cb_rc = rc;
	pthread_cond_broadcast(&fx->cv);
	pthread_mutex_unlock(&fx->mu);
}

static void add_file(cat_writer *w, uint64_t ino, const chunk_id *const *ids,
		     int n)
{
	struct cat_inode in;

	memset(&in, 0, sizeof(in));
	in.ino = ino;
	in.kind = CAT_REG;
	in.mode = S_IFREG | 0644;
	in.nlink = 1;
	in.size = (uint64_t)n * LEN;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(cat_writer_add_chunk(w, ino, (uint64_t)i * LEN,
						      LEN, ids[i]),
				 0);
}

/* The fixture's catalog at path: A, and B when with_b (a generation that
 * deleted B has only A). */
static void write_catalog(struct fx *fx, const char *path, int with_b)
{
	const chunk_id *a[] = {&fx->id[0], &fx->id[1], &fx->id[2]};
	const chunk_id *b[] = {&fx->id[1], &fx->id[3]};
	cat_writer *w = tsup_cat_begin(path);

	add_file(w, INO_A, a, 3);
	if (with_b)
		add_file(w, INO_B, b, 2);
	assert_int_equal(cat_writer_add_dirent(w, CAT_ROOT_INO, "a", 1, INO_A),
			 0);
	if (with_b)
		assert_int_equal(
		    cat_writer_add_dirent(w, CAT_ROOT_INO, "b", 1, INO_B), 0);
	assert_int_equal(cat_writer_commit(w), 0);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	uint64_t seed = 11;

	assert_non_null(fx);
	pthread_mutex_init(&fx->mu, NULL);
	pthread_cond_init(&fx->cv, NULL);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ferry-test-place-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->cache, sizeof(fx->cache), "%s/cache", fx->dir);
	snprintf(fx->into, sizeof(fx->into), "%s/into", fx->dir);
	snprintf(fx->cat, sizeof(fx->cat), "%s/cat.db", fx->dir);
	assert_int_equal(mkdir(fx->cache, 0700), 0);
	assert_int_equal(mkdir(fx->into, 0755), 0);
	for (int c = 0; c < 4; c++) {
		for (int k = 0; k < LEN; k++)
			fx->data[c][k] =
			    c == 2 ? 0 : (uint8_t)(tsup_splitmix64(&seed) >> 7);
		assert_int_equal(chunk_id_compute(fx->data[c], LEN, &fx->id[c]),
				 0);
	}
	write_catalog(fx, fx->cat, 1);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", fx->dir);
	assert_int_equal(system(cmd), 0);
	pthread_mutex_destroy(&fx->mu);
	pthread_cond_destroy(&fx->cv);
	free(fx);
	return 0;
}

static hyd_place *open_place(struct fx *fx)
{
	hyd_place *p = NULL;

	assert_int_equal(hyd_place_open(fx->into, fx->cache, &p), 0);
	assert_int_equal(hyd_place_gen(p, 1, fx->cat, NULL), 0);
	return p;
}

/* The bytes at off of DIR/name equal want (LEN of them). */
static void file_has(struct fx *fx, const char *name, uint64_t off,
		     const uint8_t *want)
{
	char path[256];
	uint8_t buf[LEN];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", fx->into, name);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, LEN, (off_t)off), LEN);
	close(fd);
	assert_memory_equal(buf, want, LEN);
}

static void test_place_everywhere(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	struct hyd_place_stats st;
	uint8_t out[LEN];
	chunk_id other;
	size_t got = 0;
	char part[64];

	assert_int_equal(hyd_place_has(p, &fx->id[1]), 0);
	assert_int_equal(hyd_place_get(p, &fx->id[1], out, LEN, &got), -ENOENT);
	/* c1: written into both parts, at 4096 in A and 0 in B */
	assert_int_equal(
	    hyd_place_place(p, &fx->id[1], fx->data[1], LEN, cb, fx), 2);
	assert_int_equal(hyd_place_has(p, &fx->id[1]), 1);
	snprintf(part, sizeof(part), HYD_PLACE_PARTS "/%d", INO_A);
	file_has(fx, part, LEN, fx->data[1]);
	snprintf(part, sizeof(part), HYD_PLACE_PARTS "/%d", INO_B);
	file_has(fx, part, 0, fx->data[1]);
	assert_int_equal(hyd_place_get(p, &fx->id[1], out, LEN, &got), 0);
	assert_int_equal(got, LEN);
	assert_memory_equal(out, fx->data[1], LEN);
	assert_int_equal(hyd_place_get(p, &fx->id[1], out, LEN - 1, &got),
			 -ENOBUFS);
	/* again: placed already, no callback */
	assert_int_equal(
	    hyd_place_place(p, &fx->id[1], fx->data[1], LEN, cb, fx), 2);
	/* a chunk no file has: the store's */
	memset(&other, 7, sizeof(other));
	assert_int_equal(hyd_place_place(p, &other, fx->data[0], LEN, cb, fx),
			 0);
	/* the zero chunk: recorded, left a hole, read back as zeros */
	assert_int_equal(
	    hyd_place_place(p, &fx->id[2], fx->data[2], LEN, cb, fx), 2);
	assert_int_equal(hyd_place_get(p, &fx->id[2], out, LEN, &got), 0);
	assert_memory_equal(out, fx->data[2], LEN);
	hyd_place_stats(p, &st);
	assert_int_equal(st.chunks, 2);
	assert_int_equal(st.bytes, 3 * LEN);
	hyd_place_close(p);
	/* the record survives a reopen */
	p = open_place(fx);
	assert_int_equal(hyd_place_has(p, &fx->id[1]), 1);
	assert_int_equal(hyd_place_has(p, &fx->id[0]), 0);
	hyd_place_close(p);
}

/* Place chunk c, wait for its round: the files the landing is told
 * are whole, which must be exactly want (0: none). */
static void place_then_whole(struct fx *fx, hyd_place *p, int c, uint64_t want)
{
	uint64_t *v = NULL;
	size_t n;

	assert_int_equal(
	    hyd_place_place(p, &fx->id[c], fx->data[c], LEN, cb, fx), 2);
	hyd_place_settle(p);
	n = hyd_place_take_whole(p, &v);
	assert_int_equal(n, want ? 1 : 0);
	if (want)
		assert_int_equal(v[0], want);
	free(v);
}

/* The landing hears of a file once every range it wants is recorded,
 * and not before, and once. */
static void test_whole_files(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	uint64_t *v = NULL;

	assert_int_equal(hyd_place_take_whole(p, &v), 0);
	free(v);
	/* c1 is in both files, neither is whole; c3 ends B; A lacks c0
	 * and the zero chunk until the last of them */
	place_then_whole(fx, p, 1, 0);
	place_then_whole(fx, p, 3, INO_B);
	place_then_whole(fx, p, 0, 0);
	place_then_whole(fx, p, 2, INO_A);
	/* taken: not told again */
	assert_int_equal(hyd_place_take_whole(p, &v), 0);
	free(v);
	hyd_place_close(p);
}

/* A range forgotten (its part's bytes no longer matched) is wanted
 * again: the file is not whole until it is placed again, however far
 * the look for a missing range had gone before. */
static void test_whole_after_forget(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	uint8_t junk[LEN], buf[LEN];
	char part[256];
	size_t len = 0;
	int fd;

	int dfd = open(fx->into, O_RDONLY | O_DIRECTORY);
	uint64_t from = 1;

	assert_true(dfd >= 0);
	place_then_whole(fx, p, 0, 0);
	place_then_whole(fx, p, 1, 0); /* A: lacks only the zero chunk */
	/* not whole: where each first lacks a range */
	assert_int_equal(hyd_place_adopt(p, INO_A, LEN, dfd, "a.tmp", &from),
			 0);
	assert_int_equal(from, 2 * LEN);
	assert_int_equal(hyd_place_adopt(p, INO_B, LEN, dfd, "b.tmp", &from),
			 0);
	assert_int_equal(from, LEN);
	close(dfd);
	snprintf(part, sizeof(part), "%s/" HYD_PLACE_PARTS "/%d", fx->into,
		 INO_A);
	memset(junk, 0x5a, sizeof(junk));
	fd = open(part, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, junk, LEN, 0), LEN);
	close(fd);
	assert_int_equal(hyd_place_get(p, &fx->id[0], buf, sizeof(buf), &len),
			 -EBADMSG);
	place_then_whole(fx, p, 2, 0); /* c0 at 0 is missing again */
	place_then_whole(fx, p, 0, INO_A);
	hyd_place_close(p);
}

static void test_adopt_and_written_over(void **state)
{
	struct fx *fx = *state;
	hyd_place *p;
	struct hyd_place_stats st;
	uint8_t out[LEN];
	size_t got = 0;
	int dfd = open(fx->into, O_RDONLY | O_DIRECTORY);
	char path[256];
	int fd;

	/* each round takes 2 s from its sync to its record */
	setenv("FERRY_PLACE_RECORD_DELAY_MS", "2000", 1);
	p = open_place(fx);
	unsetenv("FERRY_PLACE_RECORD_DELAY_MS");
	assert_true(dfd >= 0);
	for (int c = 0; c < 3; c++)
		assert_int_equal(
		    hyd_place_place(p, &fx->id[c], fx->data[c], LEN, cb, fx),
		    2);
	/* no settle: adopting waits for the round its ranges are in
	 * (a round gathers for 200 ms) */
	/* B lacks c3: not whole, and no round is waited for (none is
	 * recorded 2 s on) */
	assert_int_equal(hyd_place_adopt(p, INO_B, LEN, dfd, "b.tmp", NULL), 0);
	hyd_place_stats(p, &st);
	assert_int_equal(st.flushes, 0);
	assert_int_equal(hyd_place_adopt(p, INO_A, LEN, dfd, "a.tmp", NULL), 1);
	assert_int_equal(renameat(dfd, "a.tmp", dfd, "a"), 0);
	hyd_place_landed_file(p, INO_A, "a", 1, NULL);
	for (int c = 0; c < 3; c++)
		file_has(fx, "a", (uint64_t)c * LEN, fx->data[c]);
	/* read from DIR/a now, the part gone */
	assert_int_equal(hyd_place_get(p, &fx->id[0], out, LEN, &got), 0);
	assert_memory_equal(out, fx->data[0], LEN);
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_PARTS "/%d", fx->into,
		 INO_A);
	assert_int_equal(access(path, F_OK), -1);
	/* someone writes over DIR/a: refused, forgotten, fetched again */
	snprintf(path, sizeof(path), "%s/a", fx->into);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "x", 1, 10), 1);
	close(fd);
	assert_int_equal(hyd_place_get(p, &fx->id[0], out, LEN, &got),
			 -EBADMSG);
	assert_int_equal(hyd_place_has(p, &fx->id[0]), 0);
	/* and the rest of it still reads */
	assert_int_equal(hyd_place_get(p, &fx->id[2], out, LEN, &got), 0);
	/* the landing's rows ride a transaction, committed at the close:
	 * reopened, A is still read from DIR/a (its part is gone) */
	hyd_place_close(p);
	p = open_place(fx);
	memset(out, 0, sizeof(out));
	assert_int_equal(hyd_place_get(p, &fx->id[2], out, LEN, &got), 0);
	assert_memory_equal(out, fx->data[2], LEN);
	/* a part written over while no hydrator ran: the next run reads
	 * parts back before it renames them in, and forgets the bad range */
	assert_int_equal(
	    hyd_place_place(p, &fx->id[3], fx->data[3], LEN, cb, fx), 2);
	hyd_place_close(p);
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_PARTS "/%d", fx->into,
		 INO_B);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "y", 1, LEN + 5), 1);
	close(fd);
	p = open_place(fx);
	assert_int_equal(hyd_place_adopt(p, INO_B, LEN, dfd, "b.tmp", NULL), 0);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 0);
	assert_int_equal(
	    hyd_place_place(p, &fx->id[3], fx->data[3], LEN, cb, fx), 2);
	hyd_place_settle(p);
	assert_int_equal(hyd_place_adopt(p, INO_B, LEN, dfd, "b.tmp", NULL), 1);
	close(dfd);
	hyd_place_close(p);
}

/* A file DIR holds already (the landing found it there): its ranges are
 * read from it, checked against their ids, and recorded. */
/* A landed file is served from DIR (hyd_place_serve.c) only while the
 * sync record vouches for it, synced, unchanged, with its digest. */
static void test_landed_fd(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	struct hyd_sync_rec *rec = NULL;
	uint8_t dg[HYD_SYNC_DIGEST_LEN], other[HYD_SYNC_DIGEST_LEN];
	uint8_t out[LEN];
	char path[256];
	struct stat st;
	int dfd = open(fx->into, O_RDONLY | O_DIRECTORY), fd = -1;

	assert_true(dfd >= 0);
	memset(dg, 7, sizeof(dg));
	memset(other, 8, sizeof(other));
	for (int c = 0; c < 3; c++)
		assert_int_equal(
		    hyd_place_place(p, &fx->id[c], fx->data[c], LEN, cb, fx),
		    2);
	assert_int_equal(hyd_place_adopt(p, INO_A, LEN, dfd, "a.tmp", NULL), 1);
	assert_int_equal(renameat(dfd, "a.tmp", dfd, "a"), 0);
	assert_int_equal(hyd_sync__rec_open(fx->cache, fx->into, &rec), 0);
	hyd_place_landed_file(p, INO_A, "a", 1, dg);
	/* landed, not recorded yet (the record follows DIR's sync) */
	assert_int_equal(hyd_place_landed_fd(p, INO_A, 3 * LEN, &fd, &st),
			 -ENOENT);
	assert_int_equal(fd, -1);
	snprintf(path, sizeof(path), "%s/a", fx->into);
	assert_int_equal(stat(path, &st), 0);
	hyd_sync__rec_note(rec, &st, dg);
	assert_int_equal(hyd_sync__rec_commit(rec, 0), 0);
	assert_int_equal(hyd_place_landed_fd(p, INO_A, 3 * LEN, &fd, &st), 0);
	assert_true(fd >= 0);
	/* with the stat the record matched */
	assert_int_equal(st.st_size, 3 * LEN);
	assert_int_equal(pread(fd, out, LEN, LEN), LEN);
	assert_memory_equal(out, fx->data[1], LEN);
	close(fd);
	/* another size, a file not landed: no */
	assert_int_equal(hyd_place_landed_fd(p, INO_A, 2 * LEN, &fd, &st),
			 -ENOENT);
	assert_int_equal(hyd_place_landed_fd(p, INO_B, 2 * LEN, &fd, &st),
			 -ENOENT);
	/* the record holds it with another digest than the placer's */
	hyd_place_landed_file(p, INO_A, "a", 0, other);
	assert_int_equal(hyd_place_landed_fd(p, INO_A, 3 * LEN, &fd, &st),
			 -ENOENT);
	hyd_place_landed_file(p, INO_A, "a", 0, dg);
	assert_int_equal(hyd_place_landed_fd(p, INO_A, 3 * LEN, &fd, &st), 0);
	close(fd);
	/* chmod'ed since (its ctime moved): no */
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(hyd_place_landed_fd(p, INO_A, 3 * LEN, &fd, &st),
			 -ENOENT);
	assert_int_equal(fd, -1);
	hyd_sync__rec_close(rec);
	close(dfd);
	hyd_place_close(p);
}

/* DIR/b as written by someone else: chunk c0 of the fixture at 0, c1 at
 * LEN. */
static void write_b(struct fx *fx, int c0, int c1)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/b", fx->into);
	fd = open(path, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, fx->data[c0], LEN, 0), LEN);
	assert_int_equal(pwrite(fd, fx->data[c1], LEN, LEN), LEN);
	close(fd);
}

static void test_found_in_dir(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	struct hyd_place_stats st;

	/* its second chunk is not the catalog's: not recorded */
	write_b(fx, 1, 0);
	hyd_place_landed_file(p, INO_B, "b", 0, NULL);
	assert_int_equal(hyd_place_has(p, &fx->id[1]), 1);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 0);
	hyd_place_stats(p, &st);
	assert_int_equal(st.found, 1);
	hyd_place_close(p);
}

/* The same with the file's first range placed already: only what
 * follows it is read from DIR's file (the look starts at the first range
 * not recorded). */
static void test_found_in_dir_after_placed(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	struct hyd_place_stats st;

	place_then_whole(fx, p, 1, 0); /* B at 0 (and A at LEN) */
	write_b(fx, 1, 3);
	hyd_place_landed_file(p, INO_B, "b", 0, NULL);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 1);
	hyd_place_stats(p, &st);
	assert_int_equal(st.found, 1); /* c3 only: c1 was recorded */
	hyd_place_close(p);
}

/* A crash after the data is written and before its record commits: the
 * child dies while the flusher holds the rows (FERRY_PLACE_RECORD_DELAY_MS).
 * Reopened, nothing is recorded: the chunk is wanted and placed again. */
static void test_crash_between_data_and_record(void **state)
{
	struct fx *fx = *state;
	hyd_place *p;
	uint8_t out[LEN];
	size_t got;
	int status;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("FERRY_PLACE_RECORD_DELAY_MS", "10000", 1);
		if (hyd_place_open(fx->into, fx->cache, &p) < 0 ||
		    hyd_place_gen(p, 1, fx->cat, NULL) < 0 ||
		    hyd_place_place(p, &fx->id[3], fx->data[3], LEN, cb, fx) !=
			2)
			_exit(2);
		usleep(300000); /* written and synced, not recorded */
		kill(getpid(), SIGKILL);
		_exit(3);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	p = open_place(fx);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 0);
	assert_int_equal(hyd_place_get(p, &fx->id[3], out, LEN, &got), -ENOENT);
	assert_int_equal(
	    hyd_place_place(p, &fx->id[3], fx->data[3], LEN, cb, fx), 2);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 1);
	assert_int_equal(hyd_place_get(p, &fx->id[3], out, LEN, &got), 0);
	assert_memory_equal(out, fx->data[3], LEN);
	hyd_place_close(p);
}

/* A generation that deleted B: once the cache keeps only its catalog,
 * B's rows and its part (not landed) go; A's stay, and so does DIR's
 * parts directory while A's part is in it. With no catalog at all,
 * nothing is removed. */
static void test_prune(void **state)
{
	struct fx *fx = *state;
	hyd_place *p = open_place(fx);
	struct hyd_place_stats st;
	char path[256];

	for (int c = 0; c < 4; c++)
		assert_int_equal(
		    hyd_place_place(p, &fx->id[c], fx->data[c], LEN, cb, fx),
		    2);
	hyd_place_settle(p);
	assert_int_equal(hyd_place_prune(p, fx->cache), -ENOENT);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 1);
	snprintf(path, sizeof(path), "%s/catalogs", fx->cache);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/catalogs/2.db", fx->cache);
	write_catalog(fx, path, 0);
	assert_int_equal(hyd_place_prune(p, fx->cache), 0);
	hyd_place_stats(p, &st);
	assert_int_equal(st.pruned, 1);
	assert_int_equal(hyd_place_has(p, &fx->id[3]), 0); /* B's only */
	assert_int_equal(hyd_place_has(p, &fx->id[1]), 1); /* A has it too */
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_PARTS "/%d", fx->into,
		 INO_B);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_PARTS "/%d", fx->into,
		 INO_A);
	assert_int_equal(access(path, F_OK), 0);
	hyd_place_close(p);
}

/* A chunk that came before any file wanted it (the store kept it) is
 * what a part lacks once a new generation wants it: the landing asks for
 * the ranges not recorded, hands the chunk to the placer again, and the
 * part is whole; a range placed in a round under way is listed until
 * that round is recorded. */
static void test_unrecorded_then_filled(void **state)
{
	struct fx *fx = *state;
	char cat1[160];
	hyd_place *p = NULL;
	struct cat_chunk *cs = NULL;
	size_t n = 0;
	uint64_t from = 0;
	int dfd = open(fx->into, O_RDONLY | O_DIRECTORY);

	assert_true(dfd >= 0);
	snprintf(cat1, sizeof(cat1), "%s/cat1.db", fx->dir);
	write_catalog(fx, cat1, 0); /* A only */
	assert_int_equal(hyd_place_open(fx->into, fx->cache, &p), 0);
	assert_int_equal(hyd_place_gen(p, 1, cat1, NULL), 0);
	/* wanted nowhere: the store keeps it */
	assert_int_equal(
	    hyd_place_place(p, &fx->id[3], fx->data[3], LEN, cb, fx), 0);
	assert_int_equal(hyd_place_gen(p, 2, fx->cat, NULL), 0);
	assert_int_not_equal(
	    hyd_place_place(p, &fx->id[1], fx->data[1], LEN, cb, fx), 0);
	hyd_place_settle(p);
	/* B has c1 at 0, lacks c3 at LEN */
	assert_int_equal(hyd_place_adopt(p, INO_B, LEN, dfd, "b.tmp", &from),
			 0);
	assert_int_equal(from, LEN);
	assert_int_equal(hyd_place_unrecorded(p, INO_B, 0, 8, &cs, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(cs[0].off, LEN);
	assert_int_equal(cs[0].len, LEN);
	assert_memory_equal(&cs[0].id, &fx->id[3], sizeof(chunk_id));
	free(cs);
	/* A lacks c0 and z: the first one only, then the next from past it */
	assert_int_equal(hyd_place_unrecorded(p, INO_A, 0, 1, &cs, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(cs[0].off, 0);
	free(cs);
	assert_int_equal(hyd_place_unrecorded(p, INO_A, 1, 8, &cs, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(cs[0].off, 2 * LEN);
	assert_memory_equal(&cs[0].id, &fx->id[2], sizeof(chunk_id));
	free(cs);
	/* from past it: nothing */
	assert_int_equal(hyd_place_unrecorded(p, INO_B, LEN + 1, 8, &cs, &n),
			 0);
	assert_int_equal(n, 0);
	assert_null(cs);
	/* handed again: written into B's part now */
	assert_int_not_equal(
	    hyd_place_place(p, &fx->id[3], fx->data[3], LEN, cb, fx), 0);
	assert_int_equal(hyd_place_unrecorded(p, INO_B, LEN, 8, &cs, &n), 0);
	assert_int_equal(n, 1); /* placed, its round not recorded yet */
	free(cs);
	hyd_place_settle(p);
	assert_int_equal(hyd_place_unrecorded(p, INO_B, 0, 8, &cs, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(hyd_place_adopt(p, INO_B, LEN, dfd, "b.tmp", &from),
			 1);
	assert_int_equal(renameat(dfd, "b.tmp", dfd, "b"), 0);
	file_has(fx, "b", 0, fx->data[1]);
	file_has(fx, "b", LEN, fx->data[3]);
	close(dfd);
	hyd_place_close(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_place_everywhere, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_whole_files, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_whole_after_forget, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_adopt_and_written_over, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_found_in_dir, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_found_in_dir_after_placed,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_landed_fd, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_between_data_and_record,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unrecorded_then_filled, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
