/*
 * tests/unit/test_hyd_status.c — status from a cache, its JSON both ways,
 * and the control socket.
 *
 * Every test gets a temp CACHEDIR laid out like the hydrator's
 * (catalogs/1.db, catalogs/url, state.db + volumes through hyd_store). The
 * catalog has four regular files over three chunk ids A, B, C (two ids
 * shared), one empty file, a symlink and a directory, so "hydrated" and
 * "dedup" have exact expected numbers at every step. The control tests talk
 * over the real AF_UNIX socket; a fake server plays a hydrator that answers
 * garbage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/catalog.h"
#include "hydrator/status/hyd_control.h"
#include "hydrator/store/hyd_store.h"
#include "tsupport.h"

#define TEST_URL "http://127.0.0.1:8700/v1/demo"

/* One test chunk: raw bytes, id and a frame. */
struct tchunk {
	uint8_t raw[4096];
	size_t raw_len;
	chunk_id id;
	uint8_t *frame;
	size_t frame_len;
};

struct fx {
	char dir[64];
	char sock[100];
	struct tchunk a, b, c, d; /* d is stored but not in the catalog */
};

static void fill(uint8_t *buf, size_t len, uint32_t seed, int text)
{
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = text ? (uint8_t)("ferry moves trees "[(i + seed) % 18])
			      : (uint8_t)x;
	}
	memcpy(buf, &seed, sizeof(seed));
}

static void tchunk_make(struct tchunk *c, uint32_t seed, size_t len, int text)
{
	size_t cap = frame_bound(len);

	c->raw_len = len;
	c->frame = malloc(cap);
	assert_non_null(c->frame);
	fill(c->raw, len, seed, text);
	assert_int_equal(chunk_id_compute(c->raw, len, &c->id), 0);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 0, c->raw, len,
				      c->frame, cap, &c->frame_len),
			 0);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void add_file(cat_writer *w, uint64_t ino, const char *name,
		     const struct tchunk *const *chunks, size_t n)
{
	struct cat_inode in = {
	    .ino = ino, .kind = CAT_REG, .mode = S_IFREG | 0644, .nlink = 1};
	uint64_t off = 0;
	size_t i;

	for (i = 0; i < n; i++)
		in.size += chunks[i]->raw_len;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(cat_writer_add_chunk(
				     w, ino, off, (uint32_t)chunks[i]->raw_len,
				     &chunks[i]->id),
				 0);
		off += chunks[i]->raw_len;
	}
	(void)name;
}

/* files: f1 = A+B (4000), f2 = B+C (3500), f3 = A (1000), empty (0). */
static void build_catalog(struct fx *fx)
{
	struct cat_meta m = {.generation = 1, .created_ns = 1};
	struct cat_inode root = {
	    .ino = 1, .kind = CAT_DIR, .mode = S_IFDIR | 0755, .nlink = 3};
	struct cat_inode sub = {
	    .ino = 7, .kind = CAT_DIR, .mode = S_IFDIR | 0755, .nlink = 2};
	struct cat_inode lnk = {.ino = 6,
				.kind = CAT_LNK,
				.mode = S_IFLNK | 0777,
				.size = 2,
				.nlink = 1};
	const struct tchunk *f1[] = {&fx->a, &fx->b}, *f2[] = {&fx->b, &fx->c},
			    *f3[] = {&fx->a};
	cat_writer *w = NULL;
	char p[256];

	chunk_params_default(&m.params);
	snprintf(p, sizeof(p), "%s/catalogs/1.db", fx->dir);
	assert_int_equal(cat_writer_open(p, &m, &w), 0);
	assert_int_equal(cat_writer_add_inode(w, &root, NULL, 0), 0);
	add_file(w, 2, "f1", f1, 2);
	add_file(w, 3, "f2", f2, 2);
	add_file(w, 4, "f3", f3, 1);
	add_file(w, 5, "empty", NULL, 0);
	assert_int_equal(cat_writer_add_inode(w, &lnk, "f1", 2), 0);
	assert_int_equal(cat_writer_add_inode(w, &sub, NULL, 0), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "f1", 2, 2), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "f2", 2, 3), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "f3", 2, 4), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "empty", 5, 5), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "l", 1, 6), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "d", 1, 7), 0);
	assert_int_equal(cat_writer_commit(w), 0);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char p[128];

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ferry-test-status-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->sock, sizeof(fx->sock), "%s/control.sock", fx->dir);
	snprintf(p, sizeof(p), "%s/catalogs", fx->dir);
	assert_int_equal(mkdir(p, 0700), 0);
	write_file(fx->dir, "catalogs/url", TEST_URL "\n");
	tchunk_make(&fx->a, 1, 1000, 1);
	tchunk_make(&fx->b, 2, 3000, 0);
	tchunk_make(&fx->c, 3, 500, 1);
	tchunk_make(&fx->d, 4, 700, 0);
	build_catalog(fx);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	tsup_rm_rf(fx->dir);
	free(fx->a.frame);
	free(fx->b.frame);
	free(fx->c.frame);
	free(fx->d.frame);
	free(fx);
	return 0;
}

static void put(hyd_store *s, const struct tchunk *c)
{
	assert_int_equal(hyd_store_put(s, &c->id, c->frame, c->frame_len), 0);
}

static void check_counts(const struct hyd_status *st, uint64_t files,
			 uint64_t bytes, uint64_t chunks, uint64_t ubytes,
			 uint64_t rest)
{
	assert_int_equal(st->generation, 1);
	assert_string_equal(st->url, TEST_URL);
	assert_int_equal(st->files_total, 4);
	assert_int_equal(st->bytes_total, 8500);
	assert_int_equal(st->chunks_total, 3);
	assert_int_equal(st->unique_bytes_total, 4500);
	assert_int_equal(st->files_hydrated, files);
	assert_int_equal(st->bytes_hydrated, bytes);
	assert_int_equal(st->chunks_stored, chunks);
	assert_int_equal(st->unique_bytes_stored, ubytes);
	assert_int_equal(st->rest_bytes, rest);
	assert_int_equal(st->mismatches, 0);
	assert_true(st->rate_now == 0 && st->elapsed_s == 0);
}

/* Zero, partial (with a foreign chunk stored), more, complete; read while
 * the store is open, as a running hydrator would have it. */
static void test_from_cache_steps(void **state)
{
	struct fx *fx = *state;
	struct hyd_status st;
	hyd_store *s = NULL;
	uint64_t rest;

	/* No state.db at all: only the empty file is hydrated. */
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 1, 0, 0, 0, 0);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	assert_int_equal(st.eta_s, -1);
	assert_int_equal(st.pid, 0);
	assert_int_equal(st.wire_bytes, 0);

	assert_int_equal(hyd_store_open(fx->dir, CHUNK_MAX_DEFAULT, &s), 0);
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 1, 0, 0, 0, 0);

	/* A (in f1 and f3) and D (not in the catalog). */
	put(s, &fx->a);
	put(s, &fx->d);
	assert_int_equal(hyd_store_meta_set(s, "wire_bytes", "12345"), 0);
	rest = fx->a.frame_len + fx->d.frame_len;
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 2, 1000, 1, 1000, rest);
	assert_int_equal(st.wire_bytes, 12345);
	assert_int_equal(st.state, HYD_STATE_STOPPED);

	/* B: f1 is whole now, f2 still lacks C. */
	put(s, &fx->b);
	rest += fx->b.frame_len;
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 3, 5000, 2, 4000, rest);

	put(s, &fx->c);
	rest += fx->c.frame_len;
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 4, 8500, 3, 4500, rest);
	assert_int_equal(st.state, HYD_STATE_COMPLETE);
	assert_int_equal(st.eta_s, 0);
	hyd_store_close(s);

	/* Closed store (WAL checkpointed away): same answer. */
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 4, 8500, 3, 4500, rest);
}

/* A state.db with no tables yet, a newer catalog by number, the pid file,
 * and a cache with no catalog. */
static void test_from_cache_edges(void **state)
{
	struct fx *fx = *state;
	struct hyd_status st;
	char p[256], pid[32], comm[17] = "";
	pid_t child;
	int wst;
	int fd;

	snprintf(p, sizeof(p), "%s/state.db", fx->dir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	check_counts(&st, 1, 0, 0, 0, 0);

	/* Our own pid is alive, but not a ferry program until we say so (a
	 * pid reused after a crash); a reaped child's is not alive. */
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	write_file(fx->dir, "hydrator.pid", pid);
	assert_int_equal(prctl(PR_GET_NAME, comm), 0);
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_int_equal(st.pid, 0);
	assert_int_equal(prctl(PR_SET_NAME, "ferry-hydrator"), 0);
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_int_equal(prctl(PR_SET_NAME, comm), 0);
	assert_int_equal(st.pid, getpid());
	child = fork();
	assert_true(child >= 0);
	if (child == 0)
		_exit(0);
	assert_int_equal(waitpid(child, &wst, 0), child);
	assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
	snprintf(pid, sizeof(pid), "%ld\n", (long)child);
	write_file(fx->dir, "hydrator.pid", pid);
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_int_equal(st.pid, 0);
	write_file(fx->dir, "hydrator.pid", "12abc");
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_int_equal(st.pid, 0);

	/* Numbers, not names, pick the newest: 10.db beats 9.db; junk and
	 * temp files are not catalogs. */
	snprintf(p, sizeof(p), "%s/catalogs/1.db", fx->dir);
	{
		char q[256];

		snprintf(q, sizeof(q), "%s/catalogs/10.db", fx->dir);
		assert_int_equal(rename(p, q), 0);
	}
	write_file(fx->dir, "catalogs/9.db", "not a catalog");
	write_file(fx->dir, "catalogs/11.db.tmp", "not a catalog");
	write_file(fx->dir, "catalogs/x11.db", "not a catalog");
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_int_equal(st.generation, 1);
	assert_int_equal(st.files_total, 4);

	/* The newest is broken: an error, not numbers from an older one. */
	write_file(fx->dir, "catalogs/12.db", "not a catalog");
	assert_true(hyd_status_from_cache(fx->dir, &st) < 0);

	snprintf(p, sizeof(p), "%s/nothing-here", fx->dir);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(hyd_status_from_cache(p, &st), -ENOENT);
	assert_int_equal(hyd_status_from_cache("/nonexistent/ferry", &st),
			 -ENOENT);
}

/* ------------------------------------------------------------------ */
/* JSON                                                               */
/* ------------------------------------------------------------------ */

static void sample(struct hyd_status *st)
{
	memset(st, 0, sizeof(*st));
	st->state = HYD_STATE_STALLED;
	snprintf(st->url, sizeof(st->url), "%s", TEST_URL);
	snprintf(st->last_error, sizeof(st->last_error),
		 "disk full: \"/var/cache\" \\ tab\there\nnew\x01\x1f\x7f "
		 "caf\xc3\xa9 \xf0\x9f\x9a\xa2");
	st->pid = 4242;
	st->generation = 7;
	st->files_total = 10;
	st->files_hydrated = 3;
	st->bytes_total = INT64_MAX; /* the largest count JSON carries */
	st->bytes_hydrated = 1;
	st->chunks_total = 5;
	st->chunks_stored = 2;
	st->unique_bytes_total = 100;
	st->unique_bytes_stored = 40;
	st->rest_bytes = 50; /* compression "saves" -10 */
	st->wire_bytes = 60;
	st->mismatches = 1;
	st->retries = 2;
	st->failures = 3;
	st->rate_now = 1234.5;
	st->rate_avg = 0.125;
	st->eta_s = -1;
	st->elapsed_s = 86400.001;
	st->link_rtt_ms = 50.25;
	st->link_rate = 125000000.0;
	memcpy(st->prefetch, "running", 8);
	st->prefetch_files = 3;
	st->prefetch_skipped = 1;
	st->prefetch_ranges = 40;
	st->prefetch_ranges_done = 12;
	st->prefetch_bytes = 8388608;
	st->prefetch_bytes_done = 1048576;
	memcpy(st->into, "landing", 8);
	snprintf(st->into_dir, sizeof(st->into_dir), "/data/into");
	st->into_generation = 6;
	st->into_landing = 7;
	st->into_failed = 2;
	st->cache_max = 1ull << 40;
	st->cache_pinned = 5;
	st->cache_evicted = 6;
	st->cache_hits = 7;
	st->cache_misses = 8;
	st->cold_max = 9;
	st->cold_bytes = 10;
	st->cache_full = 1;
	st->pin_files = 11;
	st->pin_bytes = 12;
}

static void assert_status_equal(const struct hyd_status *a,
				const struct hyd_status *b)
{
	assert_int_equal(a->state, b->state);
	assert_string_equal(a->url, b->url);
	assert_string_equal(a->last_error, b->last_error);
	assert_int_equal(a->pid, b->pid);
	assert_int_equal(a->generation, b->generation);
	assert_int_equal(a->files_total, b->files_total);
	assert_int_equal(a->files_hydrated, b->files_hydrated);
	assert_int_equal(a->bytes_total, b->bytes_total);
	assert_int_equal(a->bytes_hydrated, b->bytes_hydrated);
	assert_int_equal(a->chunks_total, b->chunks_total);
	assert_int_equal(a->chunks_stored, b->chunks_stored);
	assert_int_equal(a->unique_bytes_total, b->unique_bytes_total);
	assert_int_equal(a->unique_bytes_stored, b->unique_bytes_stored);
	assert_int_equal(a->rest_bytes, b->rest_bytes);
	assert_int_equal(a->wire_bytes, b->wire_bytes);
	assert_int_equal(a->mismatches, b->mismatches);
	assert_int_equal(a->retries, b->retries);
	assert_int_equal(a->failures, b->failures);
	assert_true(fabs(a->rate_now - b->rate_now) < 0.0005);
	assert_true(fabs(a->rate_avg - b->rate_avg) < 0.0005);
	assert_true(a->eta_s == b->eta_s);
	assert_true(fabs(a->elapsed_s - b->elapsed_s) < 0.0005);
	assert_true(fabs(a->link_rtt_ms - b->link_rtt_ms) < 0.0005);
	assert_true(fabs(a->link_rate - b->link_rate) < 0.0005);
	assert_string_equal(a->prefetch, b->prefetch);
	assert_string_equal(a->into, b->into);
	assert_string_equal(a->into_dir, b->into_dir);
	assert_int_equal(a->into_generation, b->into_generation);
	assert_int_equal(a->into_landing, b->into_landing);
	assert_int_equal(a->into_failed, b->into_failed);
	assert_int_equal(a->cache_max, b->cache_max);
	assert_int_equal(a->cache_pinned, b->cache_pinned);
	assert_int_equal(a->cache_evicted, b->cache_evicted);
	assert_int_equal(a->cache_hits, b->cache_hits);
	assert_int_equal(a->cache_misses, b->cache_misses);
	assert_int_equal(a->cold_max, b->cold_max);
	assert_int_equal(a->cold_bytes, b->cold_bytes);
	assert_int_equal(a->cache_full, b->cache_full);
	assert_int_equal(a->pin_files, b->pin_files);
	assert_int_equal(a->pin_bytes, b->pin_bytes);
	assert_int_equal(a->prefetch_files, b->prefetch_files);
	assert_int_equal(a->prefetch_skipped, b->prefetch_skipped);
	assert_int_equal(a->prefetch_ranges, b->prefetch_ranges);
	assert_int_equal(a->prefetch_ranges_done, b->prefetch_ranges_done);
	assert_int_equal(a->prefetch_bytes, b->prefetch_bytes);
	assert_int_equal(a->prefetch_bytes_done, b->prefetch_bytes_done);
}

/* ferry status --json: the same line plus source_hashing, null when the
 * replicator could not be asked; the replicator's state word is network
 * bytes and comes out as valid JSON whatever it holds. */
static void test_json_source(void **state)
{
	struct hyd_status a, b;
	struct hyd_source_hashing h = {
	    .files = 40,
	    .files_done = 12,
	    .bytes = 1 << 30,
	    .bytes_done = 1 << 20,
	    .changed = 1,
	    .rate = 1048576.25,
	    .eta_s = 1023.0004,
	};
	char buf[HYD_STATUS_JSON_MAX + 512], plain[HYD_STATUS_JSON_MAX];
	int n, m;

	(void)state;
	sample(&a);
	m = hyd_status_json(&a, plain, sizeof(plain));
	n = hyd_status_json_source(&a, NULL, buf, sizeof(buf));
	/* the status keys first, unchanged; then the one more key */
	assert_true(m > 0 && n > m);
	assert_memory_equal(buf, plain, (size_t)m - 1);
	assert_string_equal(buf + m - 1, ",\"source_hashing\":null}");
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_status_equal(&a, &b);

	memcpy(h.state, "hashing", 8);
	n = hyd_status_json_source(&a, &h, buf, sizeof(buf));
	assert_true(n > m);
	assert_string_equal(buf + m - 1,
			    ",\"source_hashing\":{\"state\":\"hashing\","
			    "\"files\":40,\"files_done\":12,"
			    "\"bytes\":1073741824,\"bytes_done\":1048576,"
			    "\"changed\":1,\"rate\":1048576.25,"
			    "\"eta_s\":1023.0}}");
	/* a state of 16 bytes, no NUL, not UTF-8 */
	memset(h.state, 0xff, sizeof(h.state));
	n = hyd_status_json_source(&a, &h, buf, sizeof(buf));
	assert_true(n > m);
	assert_non_null(strstr(buf, "\"state\":\"\\\\xff\\\\xff"));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	/* too small: nothing, never a cut line */
	assert_int_equal(hyd_status_json_source(&a, &h, buf, (size_t)m),
			 -ENOBUFS);
	assert_string_equal(buf, "");
}

static void test_json_round_trip(void **state)
{
	struct hyd_status a, b;
	char buf[HYD_STATUS_JSON_MAX];
	char small[16];
	int n;

	(void)state;
	sample(&a);
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_true(n > 0 && (size_t)n < sizeof(buf));
	assert_int_equal(strlen(buf), n);
	/* Key order and number spelling are the contract; JSON's own
	 * escapes for '"', '\\' and control characters (DEL is not one). */
	assert_true(!strncmp(buf, "{\"state\":\"stalled\",\"url\":", 25));
	assert_non_null(strstr(buf, "\"last_error\":\"disk full: \\\"/var/cache"
				    "\\\" \\\\ tab\\there\\nnew\\u0001\\u001F"
				    "\x7f caf\xc3\xa9 \xf0\x9f\x9a\xa2\","
				    "\"pid\":4242,\"generation\":7,"));
	assert_non_null(strstr(buf, "\"bytes_total\":9223372036854775807,"));
	assert_non_null(strstr(buf, "\"dedup_savings_bytes\":"
				    "9223372036854775707,"));
	assert_non_null(strstr(buf, "\"compression_savings_bytes\":-10,"));
	assert_non_null(strstr(buf,
			       "\"rate_now\":1234.5,\"rate_avg\":0.125,"
			       "\"eta_s\":-1,\"elapsed_s\":86400.001,"
			       "\"link_rtt_ms\":50.25,\"link_rate\":"
			       "125000000.0,\"prefetch\":\"running\","
			       "\"prefetch_files\":3,\"prefetch_skipped\":1,"
			       "\"prefetch_ranges\":40,"
			       "\"prefetch_ranges_done\":12,"
			       "\"prefetch_bytes\":8388608,"
			       "\"prefetch_bytes_done\":1048576,"
			       "\"into\":\"landing\","
			       "\"into_dir\":\"/data/into\","
			       "\"into_generation\":6,\"into_landing\":7,"
			       "\"into_failed\":2,"
			       "\"cache_max\":1099511627776,"
			       "\"cache_pinned\":5,\"cache_evicted\":6,"
			       "\"cache_hits\":7,\"cache_misses\":8,"
			       "\"cold_max\":9,\"cold_bytes\":10,"
			       "\"cache_full\":1,\"pin_files\":11,"
			       "\"pin_bytes\":12}"));
	assert_null(strchr(buf, '\n'));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_status_equal(&a, &b);

	/* A line that does not fit is an error and an empty buffer, never a
	 * cut line that looks like JSON. */
	assert_int_equal(hyd_status_json(&a, small, sizeof(small)), -ENOBUFS);
	assert_string_equal(small, "");
	assert_int_equal(hyd_status_json(&a, buf, (size_t)n), -ENOBUFS);
	assert_int_equal(hyd_status_json(&a, buf, (size_t)n + 1), n);
	assert_int_equal(hyd_status_json(&a, NULL, 0), -ENOBUFS);

	/* NaN and negative doubles come out as 0, still valid JSON; the
	 * others are rounded to 3 decimals; counters past jansson's int64
	 * are INT64_MAX, and so is a saving past it either way. */
	a.rate_now = NAN;
	a.rate_avg = -5;
	a.elapsed_s = INFINITY;
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_true(b.rate_now == 0 && b.rate_avg == 0 && b.elapsed_s == 0);
	a.rate_now = 0.00049;
	a.rate_avg = 2.0 / 3.0;
	a.elapsed_s = 1e300;
	a.bytes_total = UINT64_MAX;
	a.unique_bytes_total = 0;
	a.rest_bytes = UINT64_MAX;
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"bytes_total\":9223372036854775807,"));
	assert_non_null(strstr(buf, "\"dedup_savings_bytes\":"
				    "9223372036854775807,"));
	assert_non_null(strstr(buf, "\"compression_savings_bytes\":"
				    "-9223372036854775807,"));
	assert_non_null(strstr(buf, "\"rate_now\":0.0,\"rate_avg\":0.667,"));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_true(b.elapsed_s == 9.0e15);
	assert_int_equal(b.bytes_total, INT64_MAX);
}

/* UTF-8 text comes back byte for byte; a byte that is not UTF-8 becomes
 * the text \xNN (as in a log line), and that text then round-trips too. */
static void test_json_utf8_round_trip(void **state)
{
	static const char url[] = "http://h\xc3\xa9te.example:8700/v1/"
				  "\xe6\xa8\xa1\xe5\x9e\x8b-\xf0\x9f\x9a\xa2";
	static const char err[] = "cannot open \"/data/caf\xc3\xa9/\xce\xb1"
				  "\xce\xb2\xce\xb3\": \xe2\x82\xac 5 "
				  "\xf0\x9f\x98\x80\t\xef\xbf\xbd end";
	char buf[HYD_STATUS_JSON_MAX];
	struct hyd_status a, b;
	int n;

	(void)state;
	sample(&a);
	snprintf(a.url, sizeof(a.url), "%s", url);
	snprintf(a.last_error, sizeof(a.last_error), "%s", err);
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_true(n > 0);
	/* Written raw, not as \u escapes. */
	assert_non_null(strstr(buf, "\"url\":\"http://h\xc3\xa9te.example"));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_string_equal(b.url, url);
	assert_string_equal(b.last_error, err);
	assert_int_equal(memcmp(b.url, url, sizeof(url)), 0);

	/* An invalid byte in last_error: \xNN, lowercase, and the valid
	 * UTF-8 around it untouched. */
	snprintf(a.last_error, sizeof(a.last_error),
		 "read caf\xc3\xa9/x\xff"
		 "y\xc3 z");
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"last_error\":\"read caf\xc3\xa9/x"
				    "\\\\xffy\\\\xc3 z\","));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_string_equal(b.last_error, "read caf\xc3\xa9/x\\xffy\\xc3 z");
}

/* Bytes that are not UTF-8 become \xNN; the worst case fits the bound;
 * json -> parse -> json is stable. */
static void test_json_hostile_strings(void **state)
{
	static const char bad[] = "a\xff"
				  "b\xc0\x80"
				  "c\x80"
				  "d\xe2\x82"
				  "e\xed\xa0\x80"
				  "f\xf4\x90\x80\x80";
	char buf[HYD_STATUS_JSON_MAX], buf2[HYD_STATUS_JSON_MAX];
	struct hyd_status a, b;
	int n, n2;

	(void)state;
	sample(&a);
	snprintf(a.url, sizeof(a.url), "%s", bad);
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"url\":\"a\\\\xffb\\\\xc0\\\\x80c\\\\x80"
				    "d\\\\xe2\\\\x82e\\\\xed\\\\xa0\\\\x80"
				    "f\\\\xf4\\\\x90\\\\x80\\\\x80\","));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_string_equal(b.url, "a\\xffb\\xc0\\x80c\\x80d\\xe2\\x82e\\xed"
				   "\\xa0\\x80f\\xf4\\x90\\x80\\x80");
	/* The escape comes back as plain text, written as such from then
	 * on: one more round is a fixed point. */
	n2 = hyd_status_json(&b, buf2, sizeof(buf2));
	assert_int_equal(hyd__status_parse(buf2, (size_t)n2, &a), 0);
	assert_status_equal(&a, &b);
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_int_equal(n, n2);
	assert_string_equal(buf, buf2);
	sample(&a);

	/* Every byte of the strings escaped: still under the bound. */
	memset(a.url, 0xff, sizeof(a.url) - 1);
	a.url[sizeof(a.url) - 1] = '\0';
	memset(a.last_error, 0x01, sizeof(a.last_error) - 1);
	a.last_error[sizeof(a.last_error) - 1] = '\0';
	memset(a.into_dir, 0xff, sizeof(a.into_dir) - 1);
	a.into_dir[sizeof(a.into_dir) - 1] = '\0';
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_true(n > 0 && (size_t)n < HYD_STATUS_JSON_MAX);
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	/* Four bytes of text per escaped one: cut to the field. */
	assert_int_equal(strlen(b.url), sizeof(b.url) - 1);
	assert_int_equal(strlen(b.last_error), sizeof(b.last_error) - 1);
	/* Fields that are not NUL-terminated are cut at their size. */
	memset(a.last_error, 'x', sizeof(a.last_error));
	n = hyd_status_json(&a, buf, sizeof(buf));
	assert_int_equal(hyd__status_parse(buf, (size_t)n, &b), 0);
	assert_int_equal(strlen(b.last_error), sizeof(b.last_error) - 1);
}

static int parse_str(const char *s, struct hyd_status *ret)
{
	return hyd__status_parse(s, strlen(s), ret);
}

static void test_json_parse_accepts(void **state)
{
	struct hyd_status st;

	(void)state;
	memset(&st, 0x5a, sizeof(st));
	assert_int_equal(parse_str(" {\"state\":\"complete\"}\n", &st), 0);
	assert_int_equal(st.state, HYD_STATE_COMPLETE);
	assert_int_equal(st.eta_s, -1);
	assert_int_equal(st.files_total, 0);
	assert_string_equal(st.url, "");
	assert_int_equal(parse_str("{\"state\":\"complete\"}\r\n", &st), 0);

	/* Any order, unknown keys ignored whatever they hold (a newer
	 * hydrator may add an object), escapes decoded, integers as reals. */
	assert_int_equal(
	    parse_str("{\"x\":true,\"files_total\":5,\"y\":null,"
		      "\"z\":\"skip \\\" me\",\"w\":-1.5e3,\"v\":false,"
		      "\"future\":{\"a\":[1,{\"b\":null}]},\"list\":[],"
		      "\"url\":\"a\\/b\\u00e9\\ud83d\\ude80\\b\\f\","
		      "\"eta_s\":-9223372036854775808,"
		      "\"rate_now\":1.5E+2,\"rate_avg\":7,\"pid\":0,"
		      "\"dedup_savings_bytes\":-3,"
		      "\"state\":\"backfilling\"}",
		      &st),
	    0);
	assert_int_equal(st.state, HYD_STATE_BACKFILLING);
	assert_int_equal(st.files_total, 5);
	assert_string_equal(st.url, "a/b\xc3\xa9\xf0\x9f\x9a\x80\b\f");
	assert_true(st.eta_s == INT64_MIN);
	assert_true(st.rate_now == 150.0);
	assert_true(st.rate_avg == 7.0);
	assert_int_equal(st.pid, 0);
	/* The largest values of each kind. */
	assert_int_equal(parse_str("{\"state\":\"stopped\",\"pid\":2147483647,"
				   "\"files_total\":9223372036854775807,"
				   "\"eta_s\":9223372036854775807}",
				   &st),
			 0);
	assert_int_equal(st.pid, INT_MAX);
	assert_int_equal(st.files_total, INT64_MAX);
	assert_true(st.eta_s == INT64_MAX);
}

static void test_json_parse_rejects(void **state)
{
	static const char *const bad[] = {
	    /* Not one JSON object. */
	    "",
	    "   ",
	    "{",
	    "{}",
	    "[]",
	    "null",
	    "\"state\"",
	    "[{\"state\":\"complete\"}]",
	    "{\"state\":\"complete\",}",
	    "{\"state\":\"complete\"} x",
	    "{\"state\":\"complete\"}{}",
	    "{\"state\":\"complete\",\"x\":tru}",
	    "{\"state\":\"complete\" \"x\":1}",
	    "{\"state\":\"complete\",\"x\" 1}",
	    "{\"state\":\"complete\",\"x\":[1,]}",
	    "{\"state\":\"complete\",\"x\":{\"a\"}}",
	    "{'state':'complete'}",
	    "{state:\"complete\"}",
	    /* No state, or not a known one. */
	    "{\"files_total\":1}",
	    "{\"state\":\"bogus\"}",
	    "{\"state\":\"Complete\"}",
	    "{\"state\":complete}",
	    "{\"state\":\"\"}",
	    /* Duplicate keys, also in an object we would ignore. */
	    "{\"state\":\"complete\",\"state\":\"complete\"}",
	    "{\"state\":\"complete\",\"pid\":1,\"pid\":1}",
	    "{\"state\":\"complete\",\"x\":{\"a\":1,\"a\":2}}",
	    /* Wrong types. */
	    "{\"state\":1}",
	    "{\"state\":null}",
	    "{\"state\":[\"complete\"]}",
	    "{\"state\":\"complete\",\"files_total\":1.5}",
	    "{\"state\":\"complete\",\"files_total\":1e3}",
	    "{\"state\":\"complete\",\"files_total\":1.0}",
	    "{\"state\":\"complete\",\"files_total\":\"1\"}",
	    "{\"state\":\"complete\",\"files_total\":true}",
	    "{\"state\":\"complete\",\"files_total\":null}",
	    "{\"state\":\"complete\",\"pid\":\"42\"}",
	    "{\"state\":\"complete\",\"eta_s\":-1.0}",
	    "{\"state\":\"complete\",\"rate_now\":\"1.5\"}",
	    "{\"state\":\"complete\",\"rate_now\":false}",
	    "{\"state\":\"complete\",\"url\":1}",
	    "{\"state\":\"complete\",\"url\":null}",
	    "{\"state\":\"complete\",\"last_error\":[\"x\"]}",
	    "{\"state\":\"complete\",\"last_error\":{}}",
	    "{\"state\":\"complete\",\"dedup_savings_bytes\":\"x\"}",
	    "{\"state\":\"complete\",\"compression_savings_bytes\":0.5}",
	    /* Out of range, huge numbers. */
	    "{\"state\":\"complete\",\"files_total\":-1}",
	    "{\"state\":\"complete\",\"files_total\":9223372036854775808}",
	    "{\"state\":\"complete\",\"files_total\":18446744073709551616}",
	    "{\"state\":\"complete\",\"files_total\":"
	    "1000000000000000000000000000000000000000}",
	    "{\"state\":\"complete\",\"pid\":-1}",
	    "{\"state\":\"complete\",\"pid\":2147483648}",
	    "{\"state\":\"complete\",\"pid\":99999999999}",
	    "{\"state\":\"complete\",\"eta_s\":-9223372036854775809}",
	    "{\"state\":\"complete\",\"eta_s\":9223372036854775808}",
	    "{\"state\":\"complete\",\"rate_now\":1e999}",
	    "{\"state\":\"complete\",\"rate_now\":-1e999}",
	    /* Bad number syntax. */
	    "{\"state\":\"complete\",\"files_total\":01}",
	    "{\"state\":\"complete\",\"files_total\":+1}",
	    "{\"state\":\"complete\",\"rate_now\":NaN}",
	    "{\"state\":\"complete\",\"rate_now\":Infinity}",
	    "{\"state\":\"complete\",\"rate_now\":1.}",
	    "{\"state\":\"complete\",\"rate_now\":.5}",
	    "{\"state\":\"complete\",\"rate_now\":1e}",
	    "{\"state\":\"complete\",\"rate_now\":-}",
	    "{\"state\":\"complete\",\"rate_now\":0x10}",
	    /* Bad strings. */
	    "{\"state\":\"complete\",\"url\":\"\\u0000\"}",
	    "{\"state\":\"complete\",\"url\":\"\\ud800\"}",
	    "{\"state\":\"complete\",\"url\":\"\\ud800\\u0041\"}",
	    "{\"state\":\"complete\",\"url\":\"\\udc00\"}",
	    "{\"state\":\"complete\",\"url\":\"\\u12\"}",
	    "{\"state\":\"complete\",\"url\":\"\\x\"}",
	    "{\"state\":\"complete\",\"url\":\"tab\there\"}",
	    "{\"state\":\"complete\",\"url\":\"nl\nhere\"}",
	    "{\"state\":\"complete\",\"url\":\"open}",
	    /* Not UTF-8: in a value, in a key, in an ignored value, outside
	     * any string; overlong, surrogate, past U+10FFFF, cut short. */
	    "{\"state\":\"complete\",\"url\":\"a\xff\"}",
	    "{\"state\":\"complete\",\"last_error\":\"\xc0\x80\"}",
	    "{\"state\":\"complete\",\"last_error\":\"\xed\xa0\x80\"}",
	    "{\"state\":\"complete\",\"last_error\":\"\xf4\x90\x80\x80\"}",
	    "{\"state\":\"complete\",\"last_error\":\"caf\xc3\"}",
	    "{\"state\":\"complete\",\"k\xfe\":1}",
	    "{\"state\":\"complete\",\"x\":[\"\x80\"]}",
	    "{\"state\":\"complete\"\xa0}",
	    "\xef\xbb\xbf{\"state\":\"complete\"}",
	};
	struct hyd_status st, keep;
	char *big;
	size_t i, n;

	(void)state;
	memset(&keep, 0x33, sizeof(keep));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		st = keep;
		if (parse_str(bad[i], &st) != -EBADMSG)
			fail_msg("accepted: %s", bad[i]);
		/* Untouched on failure. */
		assert_memory_equal(&st, &keep, sizeof(st));
	}
	/* A NUL inside the buffer, before or after the object. */
	assert_int_equal(
	    hyd__status_parse("{\"state\":\"complete\"}\0", 21, &st), -EBADMSG);
	assert_int_equal(
	    hyd__status_parse("{\"state\":\"comp\0lete\"}", 21, &st), -EBADMSG);
	assert_int_equal(hyd__status_parse(NULL, 0, &st), -EBADMSG);

	/* A string too long for its field is cut at a character boundary. */
	big = malloc(HYD_STATUS_LINE_MAX + 64);
	assert_non_null(big);
	n = (size_t)snprintf(big, 64, "{\"state\":\"complete\",\"url\":\"");
	memset(big + n, 'u', HYD_URL_MAX + 10);
	n += HYD_URL_MAX + 10;
	memcpy(big + n, "\"}", 3);
	assert_int_equal(parse_str(big, &st), 0);
	assert_int_equal(strlen(st.url), HYD_URL_MAX - 1);
	n = (size_t)snprintf(big, 64, "{\"state\":\"complete\",\"url\":\"");
	for (i = 0; i < HYD_URL_MAX - 2; i += 2)
		memcpy(big + n + i, "\xc3\xa9", 2); /* 1023 times e-acute */
	memcpy(big + n + HYD_URL_MAX - 2, "\xe2\x82\xac\"}", 6); /* euro */
	assert_int_equal(parse_str(big, &st), 0);
	assert_int_equal(strlen(st.url), HYD_URL_MAX - 2);
	assert_int_equal((unsigned char)st.url[HYD_URL_MAX - 3], 0xa9);
	/* Escaped 4-byte characters: 511 whole ones fit. */
	n = (size_t)snprintf(big, 64, "{\"state\":\"complete\",\"url\":\"");
	for (i = 0; i < 1000; i++)
		memcpy(big + n + 12 * i, "\\ud83d\\ude80", 12);
	memcpy(big + n + 12000, "\"}", 3);
	assert_int_equal(parse_str(big, &st), 0);
	assert_int_equal(strlen(st.url), 2044);
	assert_int_equal((unsigned char)st.url[2040], 0xf0);
	/* An unknown key may be long, and carry a long string, up to the
	 * line bound. */
	n = (size_t)snprintf(big, 64, "{\"state\":\"complete\",\"");
	memset(big + n, 'k', 100);
	memcpy(big + n + 100, "\":1}", 5);
	assert_int_equal(parse_str(big, &st), 0);
	n = (size_t)snprintf(big, 64, "{\"state\":\"complete\",\"k\":\"");
	memset(big + n, 'v', 60000);
	memcpy(big + n + 60000, "\"}", 3);
	assert_int_equal(parse_str(big, &st), 0);
	/* Deep nesting in an ignored value: refused by jansson's depth
	 * limit, not by a crash. */
	n = (size_t)snprintf(big, 64, "{\"state\":\"complete\",\"k\":");
	memset(big + n, '[', 30000);
	memset(big + n + 30000, ']', 30000);
	memcpy(big + n + 60000, "}", 2);
	assert_int_equal(parse_str(big, &st), -EBADMSG);
	/* Oversized input: refused before it is looked at. */
	memset(big, ' ', HYD_STATUS_LINE_MAX + 1);
	memcpy(big, "{\"state\":\"complete\"}", 20);
	assert_int_equal(hyd__status_parse(big, HYD_STATUS_LINE_MAX + 1, &st),
			 -EBADMSG);
	assert_int_equal(hyd__status_parse(big, HYD_STATUS_LINE_MAX, &st), 0);
	free(big);
}

/* Every truncation of a valid line is refused; random corruption never
 * crashes, and whatever is accepted re-encodes to something parseable. */
static void test_json_parse_truncated_and_mutated(void **state)
{
	char buf[HYD_STATUS_JSON_MAX], mut[HYD_STATUS_JSON_MAX];
	char out[HYD_STATUS_JSON_MAX];
	struct hyd_status a, b;
	uint32_t x = 12345;
	size_t len, i;
	int n, k, m;

	(void)state;
	sample(&a);
	n = hyd_status_json(&a, buf, sizeof(buf));
	len = (size_t)n;
	for (i = 0; i < len; i++)
		if (hyd__status_parse(buf, i, &b) != -EBADMSG)
			fail_msg("accepted a prefix of %zu bytes", i);
	for (k = 0; k < 20000; k++) {
		memcpy(mut, buf, len);
		for (i = 0; i < 1 + (size_t)(k % 4); i++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			mut[x % len] = (char)(x >> 8);
		}
		if (hyd__status_parse(mut, len, &b) == 0) {
			m = hyd_status_json(&b, out, sizeof(out));
			assert_int_equal(hyd__status_parse(out, (size_t)m, &a),
					 0);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Control socket                                                     */
/* ------------------------------------------------------------------ */

struct live_ctx {
	int calls;
};

static void live_cb(void *arg, struct hyd_status *st)
{
	struct live_ctx *l = arg;

	l->calls++;
	st->state = HYD_STATE_BACKFILLING;
	st->pid = 4242;
	snprintf(st->last_error, sizeof(st->last_error), "retrying \"x\"\n");
	st->wire_bytes += 100;
	st->mismatches = 3;
	st->retries = 4;
	st->failures = 5;
	st->rate_now = 1.5;
	st->rate_avg = 2.25;
	st->eta_s = 77;
	st->elapsed_s = 9.5;
}

/* Connect, send req (may be NULL), read the reply into buf. */
static ssize_t raw_ask(const char *sock, const char *req, char *buf, size_t cap)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t got = 0;
	ssize_t n;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (req)
		assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL),
				 (ssize_t)strlen(req));
	while (got < cap - 1 && (n = recv(fd, buf + got, cap - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	return (ssize_t)got;
}

static void test_control_live(void **state)
{
	struct fx *fx = *state;
	struct live_ctx l = {0};
	hyd_control *c = NULL, *c2 = NULL;
	int i;
	struct hyd_status st;
	hyd_store *s = NULL;
	char buf[HYD_STATUS_JSON_MAX];
	struct stat sb;

	assert_int_equal(hyd_store_open(fx->dir, CHUNK_MAX_DEFAULT, &s), 0);
	put(s, &fx->a);
	assert_int_equal(hyd_store_meta_set(s, "wire_bytes", "1000"), 0);

	assert_int_equal(hyd_control_start(fx->dir, live_cb, NULL, &l, &c), 0);
	assert_non_null(c);
	assert_int_equal(lstat(fx->sock, &sb), 0);
	assert_true(S_ISSOCK(sb.st_mode));
	assert_int_equal(sb.st_mode & 0777, 0600);

	assert_int_equal(hyd_status_query(fx->dir, &st), 0);
	assert_int_equal(l.calls, 1);
	assert_int_equal(st.state, HYD_STATE_BACKFILLING);
	assert_int_equal(st.pid, 4242);
	assert_string_equal(st.last_error, "retrying \"x\"\n");
	assert_int_equal(st.wire_bytes, 1100);
	assert_int_equal(st.mismatches, 3);
	assert_int_equal(st.retries, 4);
	assert_int_equal(st.failures, 5);
	assert_true(st.rate_now == 1.5 && st.rate_avg == 2.25);
	assert_true(st.eta_s == 77 && st.elapsed_s == 9.5);
	/* The cache half came along. */
	assert_string_equal(st.url, TEST_URL);
	assert_int_equal(st.files_hydrated, 2);
	assert_int_equal(st.chunks_stored, 1);

	/* The cache half is reused for a second (the scan is costly on big
	 * trees); the live half is fresh on every request. */
	put(s, &fx->b);
	assert_int_equal(hyd_status_query(fx->dir, &st), 0);
	assert_int_equal(l.calls, 2);
	assert_int_equal(st.chunks_stored, 1);

	/* A second server on the same cache is refused; the first lives. */
	assert_int_equal(hyd_control_start(fx->dir, live_cb, NULL, &l, &c2),
			 -EBUSY);
	assert_null(c2);
	assert_int_equal(lstat(fx->sock, &sb), 0);

	/* Protocol by hand: one line, CRLF tolerated, unknown commands. */
	assert_true(raw_ask(fx->sock, "status\r\n", buf, sizeof(buf)) > 0);
	assert_int_equal(buf[strlen(buf) - 1], '\n');
	assert_true(!strncmp(buf, "{\"state\":\"backfilling\"", 22));
	raw_ask(fx->sock, "reboot\n", buf, sizeof(buf));
	assert_string_equal(buf, "{\"error\":\"unknown command\"}\n");
	/* A client that never finishes its line gets nothing, and the
	 * server goes on. */
	raw_ask(fx->sock, NULL, buf, sizeof(buf));
	assert_string_equal(buf, "");
	/* Over a second later the memo is stale: that request answers from
	 * it and has the scanner count again; a later one sees B. */
	for (i = 0; i < 100; i++) {
		assert_int_equal(hyd_status_query(fx->dir, &st), 0);
		assert_int_equal(st.pid, 4242);
		if (st.chunks_stored == 2)
			break;
		usleep(20 * 1000);
	}
	assert_int_equal(st.chunks_stored, 2);

	hyd_control_stop(c);
	assert_int_equal(lstat(fx->sock, &sb), -1);
	assert_int_equal(errno, ENOENT);

	/* No server: the cache answers. */
	assert_int_equal(hyd_status_query(fx->dir, &st), 0);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	assert_int_equal(st.pid, 0);
	assert_int_equal(st.wire_bytes, 1000);
	assert_int_equal(st.files_hydrated, 3);
	hyd_store_close(s);
}

/* A silent client holding the server must not delay stop. */
static void test_control_stop_while_busy(void **state)
{
	struct fx *fx = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timespec t0, t1;
	hyd_control *c = NULL;
	int fd;

	assert_int_equal(hyd_control_start(fx->dir, NULL, NULL, NULL, &c), 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx->sock);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	usleep(50 * 1000); /* let the thread take it */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	hyd_control_stop(c);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	close(fd);
	assert_true((t1.tv_sec - t0.tv_sec) * 1000 +
			(t1.tv_nsec - t0.tv_nsec) / 1000000 <
		    1000);
}

/* A socket file left by a dead hydrator is replaced; a file that is not a
 * socket is not ours to remove; a too-long path is refused. */
static void test_control_stale_and_bad_paths(void **state)
{
	struct fx *fx = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char longdir[200], empty[80], esock[100], reply[256];
	hyd_control *c = NULL;
	struct hyd_status st;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx->sock);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd); /* bound, never listening: a stale file */
	assert_int_equal(hyd_status_query(fx->dir, &st), 0);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	assert_int_equal(hyd_control_start(fx->dir, NULL, NULL, NULL, &c), 0);
	assert_int_equal(hyd_status_query(fx->dir, &st), 0);
	assert_int_equal(st.files_total, 4);
	hyd_control_stop(c);

	write_file(fx->dir, "control.sock", "a regular file");
	assert_int_equal(hyd_control_start(fx->dir, NULL, NULL, NULL, &c),
			 -EEXIST);
	assert_null(c);
	unlink(fx->sock);

	/* A cache with no catalog: the server says so in an error line, the
	 * client falls back to the files, which say -ENOENT. */
	snprintf(empty, sizeof(empty), "%s/empty", fx->dir);
	assert_int_equal(mkdir(empty, 0700), 0);
	assert_int_equal(hyd_control_start(empty, NULL, NULL, NULL, &c), 0);
	snprintf(esock, sizeof(esock), "%s/control.sock", empty);
	raw_ask(esock, "status\n", reply, sizeof(reply));
	assert_string_equal(reply, "{\"error\":\"cannot count the cache: "
				   "No such file or directory\"}\n");
	assert_int_equal(hyd_status_query(empty, &st), -ENOENT);
	hyd_control_stop(c);

	memset(longdir, 'd', sizeof(longdir) - 1);
	longdir[0] = '/';
	longdir[sizeof(longdir) - 1] = '\0';
	assert_int_equal(hyd_control_start(longdir, NULL, NULL, NULL, &c),
			 -ENAMETOOLONG);
}

/* A fake hydrator that answers one client with a fixed reply. */
struct fake {
	int lfd;
	const char *reply;
	size_t len;
};

static void *fake_thread(void *p)
{
	struct fake *f = p;
	char req[64];
	int fd = accept(f->lfd, NULL, NULL);

	if (fd >= 0) {
		(void)!recv(fd, req, sizeof(req), 0);
		(void)!send(fd, f->reply, f->len, MSG_NOSIGNAL);
		close(fd);
	}
	return NULL;
}

static void fake_answer(struct fx *fx, const char *reply, size_t len,
			struct hyd_status *st)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct fake f = {.reply = reply, .len = len};
	pthread_t th;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx->sock);
	unlink(fx->sock);
	f.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f.lfd, 1), 0);
	assert_int_equal(pthread_create(&th, NULL, fake_thread, &f), 0);
	assert_int_equal(hyd_status_query(fx->dir, st), 0);
	pthread_join(th, NULL);
	close(f.lfd);
	unlink(fx->sock);
}

static void test_query_garbage_falls_back(void **state)
{
	struct fx *fx = *state;
	static const char ok[] = "{\"state\":\"browsing\",\"pid\":99}\n";
	struct hyd_status st;
	char *huge;

	fake_answer(fx, ok, sizeof(ok) - 1, &st);
	assert_int_equal(st.state, HYD_STATE_BROWSING);
	assert_int_equal(st.pid, 99);

	fake_answer(fx, "garbage\n", 8, &st);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	assert_int_equal(st.files_total, 4);
	/* No newline before close: not a whole line. */
	fake_answer(fx, ok, sizeof(ok) - 2, &st);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	fake_answer(fx, "{\"error\":\"unknown command\"}\n", 28, &st);
	assert_int_equal(st.state, HYD_STATE_STOPPED);

	/* More than a line's bound without a newline. */
	huge = malloc(HYD_STATUS_LINE_MAX + 100);
	assert_non_null(huge);
	memset(huge, ' ', HYD_STATUS_LINE_MAX + 100);
	memcpy(huge, ok, sizeof(ok) - 2);
	huge[HYD_STATUS_LINE_MAX + 99] = '\n';
	fake_answer(fx, huge, HYD_STATUS_LINE_MAX + 100, &st);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	free(huge);
}

/* CACHEDIR/into.state (ferry-hydrator --into): read back as written, a
 * damaged one refused, and the status from the cache says whether DIR
 * holds the generation the cache serves. */
static void test_into_state(void **state)
{
	struct fx *fx = *state;
	static const char *const bad[] = {
	    "dir=/data\n",				    /* no generation */
	    "generation=3\n",				    /* no dir */
	    "dir=relative\ngeneration=3\n",		    /* not absolute */
	    "dir=/data\ngeneration=3x\n",		    /* not a number */
	    "dir=/data\ngeneration=-1\n",		    /* negative */
	    "dir=/data\ngeneration=99999999999999999999\n", /* too big */
	};
	struct hyd_status st;
	char dir[64];
	uint64_t gen = 0;

	assert_int_equal(hyd_into_state_read(fx->dir, dir, sizeof(dir), &gen),
			 -ENOENT);
	write_file(fx->dir, HYD_INTO_STATE, "dir=/data/copy\ngeneration=1\n");
	assert_int_equal(hyd_into_state_read(fx->dir, dir, sizeof(dir), &gen),
			 0);
	assert_string_equal(dir, "/data/copy");
	assert_int_equal(gen, 1);
	/* a DIR longer than the caller's room is not cut: refused */
	assert_int_equal(hyd_into_state_read(fx->dir, dir, 5, &gen), -EINVAL);
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_string_equal(st.into, "landed");
	assert_string_equal(st.into_dir, "/data/copy");
	assert_int_equal(st.into_generation, 1);
	write_file(fx->dir, HYD_INTO_STATE, "dir=/data/copy\ngeneration=0\n");
	assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
	assert_string_equal(st.into, "behind");
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		write_file(fx->dir, HYD_INTO_STATE, bad[i]);
		if (hyd_into_state_read(fx->dir, dir, sizeof(dir), &gen) !=
		    -EINVAL)
			fail_msg("accepted: %s", bad[i]);
		assert_int_equal(hyd_status_from_cache(fx->dir, &st), 0);
		assert_string_equal(st.into, "");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_from_cache_steps, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_from_cache_edges, setup,
					    teardown),
	    cmocka_unit_test(test_json_round_trip),
	    cmocka_unit_test(test_json_source),
	    cmocka_unit_test(test_json_utf8_round_trip),
	    cmocka_unit_test(test_json_hostile_strings),
	    cmocka_unit_test(test_json_parse_accepts),
	    cmocka_unit_test(test_json_parse_rejects),
	    cmocka_unit_test(test_json_parse_truncated_and_mutated),
	    cmocka_unit_test_setup_teardown(test_control_live, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_control_stop_while_busy, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_control_stale_and_bad_paths,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_query_garbage_falls_back,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_into_state, setup, teardown),
	};

	/* A client that hangs up must not kill the test with SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
