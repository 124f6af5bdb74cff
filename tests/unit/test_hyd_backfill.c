/*
 * tests/unit/test_hyd_backfill.c — backfill, batches, readahead and resume
 * against the real ferry-replicator (the one built next to this test, in
 * ../bin), started here on a free loopback port over a generated tree:
 * small files, files sharing a large prefix (dedup), and one big file.
 *
 *   all_and_dedup     with nothing read, everything gets stored; the
 *                     replicator served each distinct chunk exactly once;
 *                     files read back from the store alone are the source
 *   no_backfill       enabled = 0 fetches nothing, state browsing
 *   demand_during     a cold read in the middle of a (capped) backfill is
 *                     answered, right, and quickly
 *   pass_order        near the source a pass goes in catalog order; with
 *                     a WAN's round trip, smallest first
 *   warm              hyd_fetch_warm opens connections (the replicator
 *                     accepts them), and a cold read then opens none
 *   readahead         sequential reads get the next chunks asked for
 *   resume            a backfill stopped midway, restarted on the same
 *                     cache, asks only for what is missing: nothing stored
 *                     is fetched again
 *   stall_recover     the replicator goes away: STALLED with an error;
 *                     it comes back: COMPLETE without help
 * Skips (with the reason) when the replicator binary is not built.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/backfill/hyd_backfill.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/store/hyd_store.h"
#include "tsupport.h"

#define SEC 1000000000ull
#define BIG_MIB 24
#define SHARED_FILES 6

struct fixture {
	char dir[64];
	char repl[PATH_MAX];
	char base[128];
	int port;
	pid_t pid;
	unsigned caches;
};

static struct fixture fx;
/* A round trip rig_up gives the fetcher before it starts, as a mount's
 * catalog fetch does (0: none, the fetcher measures its own). */
static uint64_t rig_seed_rtt;

/* A fetcher, store, catalog and backfill on one cache directory. */
struct rig {
	char cache[PATH_MAX];
	hyd_store *store;
	cat_reader *cat, *bf_cat;
	struct cat_meta meta;
	hyd_fetch *f;
	hyd_backfill *bf;
	struct hyd_read_ctx rd;
	/* the replicator publishes before it hashes: pending manifests
	 * arrive through these, as on a mount */
	char ovpath[PATH_MAX];
	cat_overlay *ov;
	hyd_manifest *man;
};

/* ---- the source tree ---- */

static void fill(uint8_t *b, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(tsup_splitmix64(&seed) >> 29);
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(base_write_all(fd, buf, len), 0);
	close(fd);
}

static void make_tree(void)
{
	char p[PATH_MAX];
	uint8_t *buf = malloc((size_t)BIG_MIB << 20);
	size_t i, n;

	assert_non_null(buf);
	snprintf(p, sizeof(p), "%s/src", fx.dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/src/small", fx.dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/src/shared", fx.dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/src/big", fx.dir);
	mkdir(p, 0755);
	for (i = 0; i < 40; i++) {
		n = 1 + (i * 7919) % 40000;
		fill(buf, n, 1000 + i);
		snprintf(p, sizeof(p), "%s/src/small/f%02zu", fx.dir, i);
		write_file(p, buf, n);
	}
	/* 1 MiB each: the same 768 KiB first (content-defined chunks make
	 * that the same chunks), then their own 256 KiB. */
	fill(buf, 768u << 10, 7);
	for (i = 0; i < SHARED_FILES; i++) {
		fill(buf + (768u << 10), 256u << 10, 2000 + i);
		snprintf(p, sizeof(p), "%s/src/shared/s%zu", fx.dir, i);
		write_file(p, buf, 1u << 20);
	}
	fill(buf, (size_t)BIG_MIB << 20, 3);
	snprintf(p, sizeof(p), "%s/src/big/big", fx.dir);
	write_file(p, buf, (size_t)BIG_MIB << 20);
	free(buf);
}

/* ---- the replicator ---- */

/* Count " ready" lines in the replicator's log. */
static int ready_lines(void)
{
	char p[PATH_MAX], buf[8192];
	int fd, n = 0;
	ssize_t got;

	snprintf(p, sizeof(p), "%s/repl.log", fx.dir);
	fd = open(p, O_RDONLY);
	if (fd < 0)
		return 0;
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (got <= 0)
		return 0;
	buf[got] = '\0';
	for (char *q = buf; (q = strstr(q, " ready")); q++)
		n++;
	return n;
}

static int repl_start(void)
{
	char listen[64], ns[PATH_MAX + 8], state[PATH_MAX], log[PATH_MAX];
	int before = ready_lines(), fd, i;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", fx.port);
	snprintf(ns, sizeof(ns), "ns=%s/src", fx.dir);
	snprintf(state, sizeof(state), "%s/state", fx.dir);
	snprintf(log, sizeof(log), "%s/repl.log", fx.dir);
	fx.pid = fork();
	if (fx.pid < 0)
		return -1;
	if (fx.pid == 0) {
		/* A test that crashes must not leave its server behind. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(fx.repl, fx.repl, "-l", listen, "-s", state, ns,
		      (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 600; i++) {
		if (ready_lines() > before)
			return 0;
		if (waitpid(fx.pid, NULL, WNOHANG) == fx.pid) {
			fx.pid = 0;
			return -1;
		}
		usleep(50000);
	}
	return -1;
}

/* SIGTERM: the replicator must exit 0, and its log hold no sanitizer
 * report. 0 or -1 (said on stderr). */
static int repl_stop(void)
{
	char log[PATH_MAX];
	int r = 0;

	if (fx.pid > 0)
		r = tsup_stop_child(fx.pid, "ferry-replicator");
	fx.pid = 0;
	snprintf(log, sizeof(log), "%s/repl.log", fx.dir);
	if (tsup_log_clean(log) < 0)
		r = -1;
	return r;
}

static size_t collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
	char *buf = ud;
	size_t have = strlen(buf), n = size * nmemb;

	if (have + n >= 1024)
		return 0;
	memcpy(buf + have, ptr, n);
	buf[have + n] = '\0';
	return n;
}

/* One counter of GET BASE/stats. */
static uint64_t repl_stat(const char *key)
{
	char url[256], buf[1024] = "", pat[64], *q;
	CURL *e = curl_easy_init();

	assert_non_null(e);
	snprintf(url, sizeof(url), "%s/stats", fx.base);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, buf);
	assert_int_equal(curl_easy_perform(e), CURLE_OK);
	curl_easy_cleanup(e);
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	q = strstr(buf, pat);
	assert_non_null(q);
	return strtoull(q + strlen(pat), NULL, 10);
}

struct mbuf {
	char b[1 << 16];
	size_t n;
};

static size_t collect_big(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct mbuf *m = ud;
	size_t n = size * nmemb;

	if (m->n + n >= sizeof(m->b))
		return 0;
	memcpy(m->b + m->n, ptr, n);
	m->n += n;
	m->b[m->n] = '\0';
	return n;
}

/* The value of the line that starts with `series ` in GET /metrics (the
 * probe's own connection is counted among the accepted ones). */
static uint64_t repl_metric(const char *series)
{
	static struct mbuf m;
	char url[128], *q;
	CURL *e = curl_easy_init();
	size_t len = strlen(series);

	assert_non_null(e);
	m.n = 0;
	m.b[0] = '\0';
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", fx.port);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect_big);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &m);
	assert_int_equal(curl_easy_perform(e), CURLE_OK);
	curl_easy_cleanup(e);
	for (q = m.b; q; q = strchr(q, '\n')) {
		q += *q == '\n';
		if (strncmp(q, series, len) == 0 && q[len] == ' ')
			return strtoull(q + len + 1, NULL, 10);
	}
	return 0; /* not there yet: none counted */
}

static int group_setup(void **state)
{
	char self[PATH_MAX], *slash;
	ssize_t n;

	(void)state;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	if (strlen(self) + sizeof("/../bin/ferry-replicator") > sizeof(fx.repl))
		return -1;
	memcpy(fx.repl, self, strlen(self));
	memcpy(fx.repl + strlen(self), "/../bin/ferry-replicator",
	       sizeof("/../bin/ferry-replicator"));
	snprintf(fx.dir, sizeof(fx.dir), "/tmp/ferry-test-bf-XXXXXX");
	if (!mkdtemp(fx.dir))
		return -1;
	if (access(fx.repl, X_OK) != 0)
		return 0; /* each test skips */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	make_tree();
	fx.port = tsup_free_port();
	snprintf(fx.base, sizeof(fx.base), "http://127.0.0.1:%d/v1/ns",
		 fx.port);
	return repl_start();
}

static int group_teardown(void **state)
{
	char cmd[PATH_MAX + 16];
	int rc = 0;

	(void)state;
	/* cmocka prints a failed group teardown but still exits 0: tests/
	 * run.sh fails the test on its "[  FAILED  ]" line. */
	if (repl_stop() < 0)
		rc = -1;
	if (fx.dir[0] && !getenv("KEEP_TMP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx.dir);
		if (system(cmd) != 0)
			rc = -1;
	}
	curl_global_cleanup();
	return rc;
}

#define NEED_REPL()                                                            \
	do {                                                                   \
		if (access(fx.repl, X_OK) != 0) {                              \
			fprintf(stderr, "SKIP: %s not built\n", fx.repl);      \
			skip();                                                \
		}                                                              \
	} while (0)

/* ---- a hydrator without FUSE ---- */

static void rig_new_cache(struct rig *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->cache, sizeof(r->cache), "%s/cache%u", fx.dir, fx.caches++);
}

static void rig_up(struct rig *r, int enabled, uint64_t bwlimit)
{
	struct hyd_catalog_result res;
	struct hyd_fetch_config fc;
	struct hyd_backfill_config bc;
	char err[512];

	assert_int_equal(base_mkdir_p(r->cache, 0700), 0);
	assert_int_equal(hyd_store_open(r->cache, CHUNK_MAX_LIMIT, &r->store),
			 0);
	memset(&res, 0, sizeof(res));
	assert_int_equal(hyd_catalog_fetch(fx.base, r->cache, NULL, 2, &res,
					   err, sizeof(err)),
			 0);
	assert_int_equal(cat_reader_open(res.path, &r->cat), 0);
	assert_int_equal(cat_reader_open(res.path, &r->bf_cat), 0);
	cat_reader_meta(r->cat, &r->meta);
	if (r->meta.pending) {
		struct hyd_manifest_config mc = {.base_url = fx.base};

		assert_int_equal(hyd_cache_overlay_path(res.path, r->ovpath,
							sizeof(r->ovpath)),
				 0);
		assert_int_equal(cat_overlay_open(r->ovpath, &r->ov), 0);
		assert_int_equal(cat_reader_attach_overlay(r->cat, r->ovpath),
				 0);
		assert_int_equal(
		    cat_reader_attach_overlay(r->bf_cat, r->ovpath), 0);
		mc.ov = r->ov;
		assert_int_equal(hyd_manifest_new(&mc, &r->man), 0);
	}
	hyd_store_set_max_raw(r->store, r->meta.params.max);
	memset(&fc, 0, sizeof(fc));
	fc.base_url = fx.base;
	fc.store = r->store;
	fc.max_raw = r->meta.params.max;
	fc.connections = 4;
	fc.bg_connections = bwlimit ? 1 : 3;
	fc.bwlimit = bwlimit;
	fc.connect_timeout_ms = 2000;
	assert_int_equal(hyd_fetch_new(&fc, &r->f), 0);
	hyd_fetch_link_seed(r->f, rig_seed_rtt);
	memset(&bc, 0, sizeof(bc));
	bc.cat = r->bf_cat;
	bc.store = r->store;
	bc.fetch = r->f;
	bc.max_raw = r->meta.params.max;
	bc.enabled = enabled;
	bc.window = 384;
	bc.manifest = r->man;
	assert_int_equal(hyd_backfill_new(&bc, &r->bf), 0);
	assert_int_equal(hyd_fetch_start(r->f), 0);
	assert_int_equal(hyd_backfill_start(r->bf), 0);
	r->rd.cat = r->cat;
	r->rd.store = r->store;
	r->rd.fetch = r->f;
	r->rd.max_raw = r->meta.params.max;
	r->rd.timeout_ns = 10 * SEC;
	r->rd.manifest = r->man;
}

static void rig_down(struct rig *r)
{
	if (r->man)
		hyd_manifest_cancel(r->man);
	hyd_backfill_stop(r->bf);
	hyd_fetch_stop(r->f);
	hyd_fetch_free(r->f);
	hyd_backfill_free(r->bf);
	hyd_manifest_free(r->man);
	cat_reader_close(r->bf_cat);
	cat_reader_close(r->cat);
	cat_overlay_close(r->ov);
	hyd_store_close(r->store);
	r->f = NULL;
	r->bf = NULL;
	r->man = NULL;
	r->ov = NULL;
	r->cat = r->bf_cat = NULL;
	r->store = NULL;
}

static int wait_state(struct rig *r, enum hyd_state want, unsigned secs)
{
	struct hyd_backfill_stats st;
	uint64_t until = base_now_ns() + secs * SEC;

	while (base_now_ns() < until) {
		hyd_backfill_stats(r->bf, &st);
		if (st.state == want)
			return 0;
		usleep(50000);
	}
	hyd_backfill_stats(r->bf, &st);
	fprintf(stderr,
		"state %s, wanted %s; stored %" PRIu64 "/%" PRIu64
		" last_error=%s\n",
		hyd_state_name(st.state), hyd_state_name(want),
		st.chunks_stored, st.chunks_total, st.last_error);
	return -1;
}

static uint64_t stored_chunks(struct rig *r)
{
	struct hyd_store_stats ss;

	assert_int_equal(hyd_store_stats(r->store, &ss), 0);
	return ss.chunks;
}

struct distinct {
	hyd_store *store;
	uint64_t n, stored;
};

static int count_one(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	struct distinct *d = ctx;

	(void)ino;
	d->n++;
	if (hyd_store_has(d->store, &c->id) == 1)
		d->stored++;
	return 0;
}

/* Distinct chunks of the manifests the rig has locally: the whole tree
 * once every pending manifest is (all_manifests). */
static struct distinct distinct_chunks(struct rig *r)
{
	struct distinct d = {.store = r->store};

	assert_int_equal(cat_chunks_each(r->cat, count_one, &d), 0);
	return d;
}

/* Every pending manifest made local now (the replicator has hashed them
 * all: earlier tests waited for it), so counts are the whole tree's. */
static void all_manifests(struct rig *r)
{
	uint64_t miss[1];
	size_t n;

	if (!r->man)
		return;
	for (;;) {
		assert_int_equal(cat_pending_missing(r->cat, 0, miss, 1, &n),
				 0);
		if (n == 0)
			return;
		assert_int_equal(
		    hyd_manifest_segment(r->man, r->cat,
					 miss[0] / HYD_MANIFEST_SEG_INOS,
					 base_now_ns() + 60 * SEC, NULL, NULL),
		    0);
	}
}

/* Read rel (under src/) through the read path and compare. */
static void check_file(struct rig *r, const char *rel)
{
	char p[PATH_MAX];
	struct cat_inode in;
	uint8_t *want, *got;
	size_t len, n = 0;
	const char *name = strrchr(rel, '/') + 1;
	char dir[64];

	snprintf(p, sizeof(p), "%s/src/%s", fx.dir, rel);
	want = tsup_read_file(p, &len);
	snprintf(dir, sizeof(dir), "%.*s", (int)(name - 1 - rel), rel);
	assert_int_equal(
	    cat_lookup(r->cat, CAT_ROOT_INO, dir, strlen(dir), &in), 0);
	assert_int_equal(cat_lookup(r->cat, in.ino, name, strlen(name), &in),
			 0);
	got = malloc(len + 1);
	assert_non_null(got);
	assert_int_equal(
	    hyd_read_file(&r->rd, in.ino, in.size, 0, len, got, &n), 0);
	assert_int_equal(n, len);
	assert_memory_equal(got, want, len);
	free(got);
	free(want);
}

/* ---- tests ---- */

static void test_all_and_dedup(void **state)
{
	struct hyd_fetch_stats fs;
	struct hyd_backfill_stats bs;
	struct distinct d;
	struct rig r;
	uint64_t served0, served, gets0;
	char rel[32];
	int i;

	(void)state;
	NEED_REPL();
	served0 = repl_stat("chunks_served");
	rig_new_cache(&r);
	rig_up(&r, 1, 0);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 120), 0);
	d = distinct_chunks(&r);
	assert_int_equal(d.stored, d.n);
	hyd_backfill_stats(r.bf, &bs);
	assert_int_equal(bs.chunks_total, d.n);
	assert_int_equal(bs.chunks_stored, d.n);
	served = repl_stat("chunks_served") - served0;
	hyd_fetch_stats(r.f, &fs);
	fprintf(
	    stderr,
	    "# %" PRIu64 " distinct chunks, served %" PRIu64 ", %" PRIu64
	    " batches, %" PRIu64 " GETs, wire %" PRIu64 " bytes in %.2f s\n",
	    d.n, served, fs.batches, fs.requests, fs.wire_bytes, bs.elapsed_s);
	/* Shared chunks travelled once: the server sent each distinct
	 * chunk exactly once, and mostly inside batches. */
	assert_int_equal(served, d.n);
	assert_int_equal(fs.chunks, d.n);
	assert_true(fs.batches > 0);
	assert_true(fs.batch_frames >= d.n / 2);
	assert_int_equal(fs.mismatches, 0);
	/* Read back with no fetch at all. */
	gets0 = fs.requests;
	for (i = 0; i < SHARED_FILES; i++) {
		snprintf(rel, sizeof(rel), "shared/s%d", i);
		check_file(&r, rel);
	}
	check_file(&r, "small/f07");
	check_file(&r, "big/big");
	hyd_fetch_stats(r.f, &fs);
	assert_int_equal(fs.requests, gets0);
	rig_down(&r);
}

static void test_no_backfill(void **state)
{
	struct hyd_backfill_stats bs;
	struct rig r;
	uint64_t served0;

	(void)state;
	NEED_REPL();
	served0 = repl_stat("chunks_served");
	rig_new_cache(&r);
	rig_up(&r, 0, 0);
	usleep(1500000);
	hyd_backfill_stats(r.bf, &bs);
	assert_int_equal(bs.state, HYD_STATE_BROWSING);
	assert_int_equal(repl_stat("chunks_served"), served0);
	assert_int_equal(stored_chunks(&r), 0);
	/* A read still works, and fetches just what it needs. */
	check_file(&r, "small/f03");
	assert_true(repl_stat("chunks_served") - served0 <= 2);
	rig_down(&r);
}

/* Time one cold 128 KiB read at off of the big file. */
static uint64_t cold_read_ns(struct rig *r, uint64_t off)
{
	char p[PATH_MAX];
	struct cat_inode in;
	uint8_t *got = malloc(128u << 10), *want;
	size_t n = 0, len;
	uint64_t t0, t;

	assert_non_null(got);
	assert_int_equal(cat_lookup(r->cat, CAT_ROOT_INO, "big", 3, &in), 0);
	assert_int_equal(cat_lookup(r->cat, in.ino, "big", 3, &in), 0);
	t0 = base_now_ns();
	assert_int_equal(
	    hyd_read_file(&r->rd, in.ino, in.size, off, 128u << 10, got, &n),
	    0);
	t = base_now_ns() - t0;
	assert_int_equal(n, 128u << 10);
	snprintf(p, sizeof(p), "%s/src/big/big", fx.dir);
	want = tsup_read_file(p, &len);
	assert_memory_equal(got, want + off, n);
	free(want);
	free(got);
	return t;
}

static void test_demand_during(void **state)
{
	struct hyd_backfill_stats bs;
	struct rig r;
	uint64_t idle, busy, cap = 16u << 20;
	int i;

	(void)state;
	NEED_REPL();
	/* The same capped link, idle: no backfill. */
	rig_new_cache(&r);
	rig_up(&r, 0, cap);
	idle = cold_read_ns(&r, 5u << 20);
	rig_down(&r);
	/* A full backfill on it (catalog order on the loopback: the big
	 * file first, and the read below is ahead of it). */
	rig_new_cache(&r);
	rig_up(&r, 1, cap);
	for (i = 0; i < 200; i++) {
		hyd_backfill_stats(r.bf, &bs);
		if (bs.chunks_stored > bs.chunks_total / 4)
			break;
		usleep(20000);
	}
	busy = cold_read_ns(&r, 20u << 20);
	hyd_backfill_stats(r.bf, &bs);
	fprintf(stderr,
		"# cold 128 KiB read on a 16 MiB/s cap: idle %.1f ms, during "
		"backfill %.1f ms (backfill %s, %" PRIu64 " of %" PRIu64
		" chunks)\n",
		(double)idle / 1e6, (double)busy / 1e6,
		hyd_state_name(bs.state), bs.chunks_stored, bs.chunks_total);
	assert_int_equal(bs.state, HYD_STATE_BACKFILLING);
	/* Never queued behind the backfill's batches: a few times idle at
	 * worst (the CPU is shared with the replicator here). */
	assert_true(busy < 5 * idle + SEC / 5);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 120), 0);
	rig_down(&r);
}

/* Chunks of [a, b) of ino the store holds (rows that start in it). */
static unsigned stored_in(struct rig *r, uint64_t ino, uint64_t a, uint64_t b)
{
	struct cat_chunk cs[256];
	unsigned k = 0;
	size_t n = 0, i;

	assert_int_equal(cat_chunks_range(r->cat, ino, a, b - a, cs, 256, &n),
			 0);
	for (i = 0; i < n; i++)
		if (cs[i].off >= a && hyd_store_has(r->store, &cs[i].id) == 1)
			k++;
	return k;
}

/* The ino of rel (under src/, one directory deep). */
static uint64_t ino_of(struct rig *r, const char *dir, const char *name)
{
	struct cat_inode in;

	assert_int_equal(
	    cat_lookup(r->cat, CAT_ROOT_INO, dir, strlen(dir), &in), 0);
	assert_int_equal(cat_lookup(r->cat, in.ino, name, strlen(name), &in),
			 0);
	return in.ino;
}

/* Small files (src/small/fNN) whose every chunk is stored. */
static unsigned small_done(struct rig *r, const uint64_t *inos)
{
	struct cat_chunk cs[64];
	struct cat_inode in;
	unsigned done = 0, i;
	size_t n, k;

	for (i = 0; i < 40; i++) {
		assert_int_equal(cat_getattr(r->cat, inos[i], &in), 0);
		n = 0;
		assert_int_equal(
		    cat_chunks_range(r->cat, inos[i], 0, in.size, cs, 64, &n),
		    0);
		for (k = 0; k < n; k++)
			if (hyd_store_has(r->store, &cs[k].id) != 1)
				break;
		done += k == n;
	}
	return done;
}

/* The order of a pass follows the link. On the loopback (its round trip
 * measured: well under a WAN's) catalog order, so the big file, the
 * first regular file of the scan, goes ahead of the small ones; with a
 * WAN's round trip (seeded, as a mount's catalog fetch seeds it) smallest
 * first, every small file ahead of the big one. One backfill connection
 * and a capped link keep the order visible. */
static void test_pass_order(void **state)
{
	uint64_t small[40], big, until;
	char name[16];
	unsigned done, bigk, i;
	struct rig r;
	int wan;

	(void)state;
	NEED_REPL();
	for (wan = 0; wan < 2; wan++) {
		rig_new_cache(&r);
		rig_seed_rtt = wan ? 50 * 1000000ull : 0;
		rig_up(&r, 1, 8u << 20);
		rig_seed_rtt = 0;
		all_manifests(&r);
		big = ino_of(&r, "big", "big");
		for (i = 0; i < 40; i++) {
			snprintf(name, sizeof(name), "f%02u", i);
			small[i] = ino_of(&r, "small", name);
		}
		until = base_now_ns() + 60 * SEC;
		for (;;) {
			bigk = stored_in(&r, big, 0, 4u << 20);
			done = small_done(&r, small);
			if ((wan ? bigk > 0 : done > 0) ||
			    base_now_ns() > until)
				break;
			usleep(2000);
		}
		fprintf(stderr,
			"# %s: %u of the big file's first chunks stored when "
			"%u of 40 small files are\n",
			wan ? "50 ms seeded" : "loopback", bigk, done);
		if (wan)
			assert_true(bigk > 0 && done >= 38);
		else
			assert_true(done > 0 && bigk >= 8);
		rig_down(&r);
	}
}

/* hyd_fetch_warm: the connections it opens are the replicator's to see
 * (each GET of HEAD answered), and a cold read afterwards rides one of
 * them: the replicator accepts no connection for it. */
static void test_warm(void **state)
{
	static const char acc[] = "ferry_replicator_connections_accepted_total";
	static const char head[] =
	    "ferry_replicator_requests_total{route=\"head\",code=\"2xx\"}";
	uint64_t a0, h0, a1, a2;
	struct rig r;
	int i;

	(void)state;
	NEED_REPL();
	rig_new_cache(&r);
	rig_up(&r, 0, 0);
	all_manifests(&r); /* the manifests' connections come first */
	h0 = repl_metric(head);
	a0 = repl_metric(acc);
	hyd_fetch_warm(r.f, 3);
	for (i = 0; i < 100 && repl_metric(head) < h0 + 3; i++)
		usleep(20000);
	assert_int_equal(repl_metric(head), h0 + 3);
	usleep(100000); /* the answers reach curl, the connections idle */
	a1 = repl_metric(acc);
	/* 3 warm, and the probes since a0 (each its own connection): the
	 * loop's i + 1, the assert's, a1's */
	fprintf(stderr, "# warm: %" PRIu64 " connections accepted for 3\n",
		a1 - a0 - (uint64_t)i - 3);
	assert_int_equal(a1 - a0, 3 + (uint64_t)i + 3);
	check_file(&r, "small/f05");
	a2 = repl_metric(acc);
	assert_int_equal(a2 - a1, 1); /* the probe alone */
	rig_down(&r);
}

/* Every chunk that lies wholly in [a, b) of ino is stored, and there is
 * at least one. */
static void all_stored(struct rig *r, uint64_t ino, uint64_t a, uint64_t b)
{
	struct cat_chunk cs[256];
	size_t n = 0, i, inside = 0;

	assert_int_equal(cat_chunks_range(r->cat, ino, a, b - a, cs, 256, &n),
			 0);
	for (i = 0; i < n; i++) {
		if (cs[i].off < a || cs[i].off + cs[i].len > b)
			continue;
		inside++;
		assert_int_equal(hyd_store_has(r->store, &cs[i].id), 1);
	}
	assert_true(inside > 0);
}

/* One FUSE-like read of [off, off+len) of of, then its readahead. */
static void ra_read(struct rig *r, struct hyd_read_open *of, uint64_t off,
		    size_t len)
{
	struct hyd_read_iov rv;

	assert_int_equal(hyd_read_open_iov(&r->rd, of, off, len, &rv), 0);
	assert_int_equal(rv.len, len);
	hyd_read_iov_release(&r->rd, &rv);
	hyd_read_ahead(&r->rd, of, off, len);
}

/* Wait until the fetcher has nothing in flight. */
static void ra_settle(struct rig *r)
{
	struct hyd_fetch_stats a, b;
	int i;

	hyd_fetch_stats(r->f, &a);
	for (i = 0; i < 100; i++) {
		usleep(50000);
		hyd_fetch_stats(r->f, &b);
		if (b.chunks == a.chunks && i > 4)
			return;
		a = b;
	}
}

/* Readahead belongs to the read path: a stream detected on the open file
 * (out-of-order kernel requests still count) gets the next
 * HYD_READ_AHEAD_BYTES fetched at readahead priority; a jump gets none. */
static void test_readahead(void **state)
{
	const uint64_t K = 1024, step = 128 * K, M = 1024 * K;
	uint64_t jump = 12 * M;
	struct hyd_read_open *of;
	struct cat_inode in;
	struct rig r;

	(void)state;
	NEED_REPL();
	rig_new_cache(&r);
	rig_up(&r, 0, 0); /* no backfill: whatever is stored was asked for */
	assert_int_equal(cat_lookup(r.cat, CAT_ROOT_INO, "big", 3, &in), 0);
	assert_int_equal(cat_lookup(r.cat, in.ino, "big", 3, &in), 0);
	assert_int_equal(hyd_read_open_new(NULL, in.ino, in.size, &of), 0);
	/* A first read at 0 starts a stream: the next MiB is asked for,
	 * and nothing that starts past it. */
	ra_read(&r, of, 0, step);
	ra_settle(&r);
	all_stored(&r, in.ino, step, step + M);
	assert_int_equal(stored_in(&r, in.ino, step + M, 4 * M), 0);
	/* The kernel's requests of one reader finish out of order: the later
	 * one arrives first, and it still extends the stream by what it
	 * added, [step + M, 3 * step + M). */
	ra_read(&r, of, 2 * step, step);
	ra_read(&r, of, step, step);
	ra_settle(&r);
	all_stored(&r, in.ino, step + M, 3 * step + M);
	assert_int_equal(stored_in(&r, in.ino, 3 * step + M, 6 * M), 0);
	/* A jump far ahead starts a new stream: nothing past its own read. */
	ra_read(&r, of, jump, step);
	ra_settle(&r);
	assert_int_equal(stored_in(&r, in.ino, jump + step, jump + 3 * M), 0);
	/* Its next read continues it. */
	ra_read(&r, of, jump + step, step);
	ra_settle(&r);
	all_stored(&r, in.ino, jump + 2 * step, jump + 2 * step + M);
	hyd_read_open_unref(of);
	rig_down(&r);
}

static void test_resume(void **state)
{
	struct hyd_backfill_stats bs;
	struct distinct d;
	struct rig r;
	uint64_t served0, served1, stored1, served2, i;

	(void)state;
	NEED_REPL();
	served0 = repl_stat("chunks_served");
	rig_new_cache(&r);
	rig_up(&r, 1, 8u << 20); /* slow enough to stop midway */
	all_manifests(&r);
	d = distinct_chunks(&r);
	for (i = 0; i < 600 && stored_chunks(&r) < d.n * 4 / 10; i++)
		usleep(50000);
	rig_down(&r); /* in-flight flights are cancelled, never stored */
	served1 = repl_stat("chunks_served") - served0;
	rig_up(&r, 1, 0);
	stored1 = stored_chunks(&r);
	assert_true(stored1 >= d.n * 4 / 10);
	assert_true(stored1 < d.n);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 120), 0);
	hyd_backfill_stats(r.bf, &bs);
	served2 = repl_stat("chunks_served") - served0;
	fprintf(stderr,
		"# resume: %" PRIu64 " distinct, stopped with %" PRIu64
		" stored and %" PRIu64 " served; second run asked for %" PRIu64
		", %" PRIu64 " served in all\n",
		d.n, stored1, served1, bs.submitted, served2);
	/* The second run asked for exactly what was missing... */
	assert_int_equal(bs.submitted, d.n - stored1);
	/* ...and the only waste is what was in flight at the stop. */
	assert_true(served2 - d.n <= served1 - stored1);
	assert_int_equal(distinct_chunks(&r).stored, d.n);
	rig_down(&r);
}

static void db_exec(const char *cache, const char *sql)
{
	char path[PATH_MAX + 16];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/state.db", cache);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* A complete run marks the store complete for its catalog. A mount of that
 * cache then counts nothing: even a row removed behind the store's back
 * (which a real store never loses without dropping its mark) is not
 * noticed, which proves no census ran. A mark made for another catalog is
 * ignored: the census runs, finds the missing chunk, fetches exactly it,
 * and the mark is made again for this catalog. */
static void test_complete_mark(void **state)
{
	struct hyd_backfill_stats bs, first;
	char mark[256], other[256];
	struct rig r;

	(void)state;
	NEED_REPL();
	rig_new_cache(&r);
	rig_up(&r, 1, 0);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 120), 0);
	hyd_backfill_stats(r.bf, &first);
	assert_true(first.chunks_total > 1);
	assert_int_equal(hyd_store_meta_get(r.store, HYD_STORE_META_COMPLETE,
					    mark, sizeof(mark)),
			 0);
	rig_down(&r);

	db_exec(r.cache,
		"DELETE FROM chunk WHERE id = (SELECT MIN(id) FROM chunk)");
	rig_up(&r, 1, 0);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 10), 0);
	hyd_backfill_stats(r.bf, &bs);
	assert_int_equal(bs.submitted, 0);
	assert_int_equal(bs.chunks_total, first.chunks_total);
	assert_int_equal(bs.chunks_stored, first.chunks_total);
	assert_int_equal(bs.bytes_total, first.bytes_total);
	assert_int_equal(bs.manifests_total, first.manifests_total);
	assert_int_equal(stored_chunks(&r), first.chunks_total - 1);
	/* The same mark, one generation on: not this catalog's. */
	snprintf(other, sizeof(other), "%" PRIu64 "%s", r.meta.generation + 1,
		 strchr(mark, ' '));
	assert_int_equal(
	    hyd_store_meta_set(r.store, HYD_STORE_META_COMPLETE, other), 0);
	rig_down(&r);

	rig_up(&r, 1, 0);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 120), 0);
	hyd_backfill_stats(r.bf, &bs);
	assert_int_equal(bs.submitted, 1);
	assert_int_equal(stored_chunks(&r), first.chunks_total);
	assert_int_equal(hyd_store_meta_get(r.store, HYD_STORE_META_COMPLETE,
					    other, sizeof(other)),
			 0);
	assert_string_equal(other, mark);
	rig_down(&r);
}

static void test_stall_recover(void **state)
{
	struct hyd_backfill_stats bs;
	struct distinct d;
	struct rig r;
	int i;

	(void)state;
	NEED_REPL();
	rig_new_cache(&r);
	rig_up(&r, 1, 6u << 20);
	all_manifests(&r);
	d = distinct_chunks(&r);
	for (i = 0; i < 600 && stored_chunks(&r) < d.n / 4; i++)
		usleep(50000);
	assert_int_equal(repl_stop(), 0);
	assert_int_equal(wait_state(&r, HYD_STATE_STALLED, 30), 0);
	hyd_backfill_stats(r.bf, &bs);
	fprintf(stderr, "# stalled: %s\n", bs.last_error);
	assert_true(bs.last_error[0] != '\0');
	assert_int_equal(repl_start(), 0);
	assert_int_equal(wait_state(&r, HYD_STATE_COMPLETE, 120), 0);
	assert_int_equal(distinct_chunks(&r).stored, d.n);
	rig_down(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_all_and_dedup),
	    cmocka_unit_test(test_no_backfill),
	    cmocka_unit_test(test_demand_during),
	    cmocka_unit_test(test_pass_order),
	    cmocka_unit_test(test_warm),
	    cmocka_unit_test(test_readahead),
	    cmocka_unit_test(test_resume),
	    cmocka_unit_test(test_complete_mark),
	    cmocka_unit_test(test_stall_recover),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
