/*
 * tests/unit/test_hyd_fetch.c — the single-flight table and the fetcher.
 *
 * The table is tested alone (join/queue order/priority bump/wake-ups/close).
 * The fetcher is tested against a real loopback HTTP server started here
 * (python3 -m http.server over a temp dir holding v1/ns/chunk/<hex> frame
 * files): one fetch, 8 threads asking for one chunk at once (exactly one
 * HTTP request), many chunks in parallel, a missing chunk (fails fast), a
 * corrupt frame (one retry, then -EBADMSG), a server that is down (fails
 * within the deadline), and the store receiving what was verified. Also
 * the URL checks of hydrator.h, and the round trip estimate (a stalled
 * sample or two too short is not taken for the link).
 */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_fetch_loop_priv.h"
#include "hydrator/store/hyd_store.h"
#include "hydrator/hydrator.h"
#include "tsupport.h"

#define SEC 1000000000ull
#define MAX_RAW CHUNK_MAX_DEFAULT

/* The server shared by the fetcher tests. */
struct server {
	char dir[64];
	char base[128];
	pid_t pid;
};

static struct server srv;

/* Put raw as a frame at v1/ns/chunk/<id>; frame_of (if not NULL) gives the
 * bytes to frame instead (a corrupt chunk). */
static void put_chunk(const void *raw, size_t len, const void *frame_of,
		      chunk_id *ret_id)
{
	size_t cap = frame_bound(len), flen = 0;
	uint8_t *frame = malloc(cap);
	char hex[CHUNK_ID_HEX_LEN + 1], path[256];

	assert_non_null(frame);
	assert_int_equal(chunk_id_compute(raw, len, ret_id), 0);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 0,
				      frame_of ? frame_of : raw, len, frame,
				      cap, &flen),
			 0);
	chunk_id_to_hex(ret_id, hex);
	snprintf(path, sizeof(path), "%s/v1/ns/chunk/%s", srv.dir, hex);
	tsup_write_file(path, frame, flen);
	free(frame);
}

/* Start python3 -m http.server on port 0 and read the port it chose from
 * its first line: "Serving HTTP on 127.0.0.1 port N (...)". */
static int server_start(void **state)
{
	char buf[512], *p;
	int pfd[2], port = 0;
	size_t len = 0;
	struct pollfd pp;

	(void)state;
	snprintf(srv.dir, sizeof(srv.dir), "/tmp/ferry-test-fetch-XXXXXX");
	if (!mkdtemp(srv.dir))
		return -1;
	snprintf(buf, sizeof(buf), "%s/v1", srv.dir);
	mkdir(buf, 0755);
	snprintf(buf, sizeof(buf), "%s/v1/ns", srv.dir);
	mkdir(buf, 0755);
	snprintf(buf, sizeof(buf), "%s/v1/ns/chunk", srv.dir);
	mkdir(buf, 0755);
	if (pipe(pfd) < 0)
		return -1;
	srv.pid = fork();
	if (srv.pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		close(pfd[0]);
		close(pfd[1]);
		execlp("python3", "python3", "-u", "-m", "http.server", "0",
		       "--bind", "127.0.0.1", "--directory", srv.dir,
		       (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	pp.fd = pfd[0];
	pp.events = POLLIN;
	while (len < sizeof(buf) - 1 && !strchr(buf, '\n')) {
		ssize_t n;

		if (poll(&pp, 1, 10000) <= 0)
			break;
		n = read(pfd[0], buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
	}
	close(pfd[0]);
	buf[len] = '\0';
	p = strstr(buf, " port ");
	if (p)
		port = (int)strtol(p + 6, NULL, 10);
	if (port <= 0) {
		fprintf(stderr, "cannot start python3 -m http.server: '%s'\n",
			buf);
		return -1;
	}
	snprintf(srv.base, sizeof(srv.base), "http://127.0.0.1:%d/v1/ns", port);
	return 0;
}

static int server_stop(void **state)
{
	char cmd[128];
	int rc = 0;

	(void)state;
	/* cmocka prints a failed group teardown but exits 0: tests/run.sh
	 * fails the test on its "[  FAILED  ]" line. */
	if (srv.pid > 0 && tsup_stop_server(srv.pid, "python3 http.server"))
		rc = -1;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", srv.dir);
	if (system(cmd) != 0)
		rc = -1;
	return rc;
}

static hyd_fetch *fetcher(const char *base, hyd_store *store)
{
	struct hyd_fetch_config c;
	hyd_fetch *f = NULL;

	memset(&c, 0, sizeof(c));
	c.base_url = base;
	c.store = store;
	c.max_raw = MAX_RAW;
	/* python's http.server listens with a backlog of 5: more
	 * connections at once than that get resets (and retries), which
	 * the counts below would see. Two for backfill, two for reads. */
	c.connections = 2;
	c.read_connections = 2;
	c.connect_timeout_ms = 1000;
	assert_int_equal(hyd_fetch_new(&c, &f), 0);
	assert_int_equal(hyd_fetch_start(f), 0);
	return f;
}

/* Submit, wait, check bytes; returns the wait result. */
static int fetch_one(hyd_fetch *f, const chunk_id *id, const void *want,
		     size_t len, uint64_t timeout_ns)
{
	struct hyd_flight *fl = NULL;
	uint64_t deadline = base_now_ns() + timeout_ns;
	int r;

	r = hyd_fetch_submit(f, id, (uint32_t)len, HYD_PRIO_DEMAND, deadline,
			     &fl);
	assert_true(r == 0 || r == 1);
	r = hyd_fetch_wait(f, fl, deadline + 5 * SEC);
	if (r == 0) {
		assert_int_equal(fl->raw_len, len);
		assert_memory_equal(fl->raw, want, len);
	}
	hyd_fetch_release(f, fl);
	return r;
}

/* ------------------------------------------------------------------ */
/* single-flight table                                                */
/* ------------------------------------------------------------------ */

static void count_kick(void *arg)
{
	(*(int *)arg)++;
}

static chunk_id mk_id(uint8_t v)
{
	chunk_id id;

	memset(&id, v, sizeof(id));
	return id;
}

static void test_flights_join_and_order(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *a, *a2, *b, *c, *d, *e;
	chunk_id ia = mk_id(1), ib = mk_id(2), ic = mk_id(3), idd = mk_id(4),
		 ie = mk_id(5);
	uint64_t far = base_now_ns() + 60 * SEC;
	int kicks = 0;

	(void)state;
	assert_int_equal(hyd_flights_init(&t, count_kick, &kicks), 0);
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 10, HYD_PRIO_DEMAND, far, &a),
	    -ESHUTDOWN);
	hyd_flights_open(&t);
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 10, HYD_PRIO_DEMAND, far, &a), 1);
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 10, HYD_PRIO_DEMAND, far + SEC, &a2), 0);
	assert_ptr_equal(a, a2);
	assert_int_equal(kicks, 1); /* a join of a live flight is silent */
	assert_int_equal(a->refs, 3);
	assert_true(a->deadline_ns == far + SEC); /* extended */
	assert_int_equal(
	    hyd_flights_join(&t, &ib, 10, HYD_PRIO_BACKFILL, far, &b), 1);
	assert_int_equal(
	    hyd_flights_join(&t, &ic, 10, HYD_PRIO_DEMAND, far, &c), 1);
	assert_int_equal(
	    hyd_flights_join(&t, &idd, 10, HYD_PRIO_BACKFILL, far, &d), 1);
	assert_int_equal(
	    hyd_flights_join(&t, &ie, 10, HYD_PRIO_BACKFILL, far, &e), 1);
	/* A demand reader of a queued backfill flight moves it up. */
	assert_int_equal(
	    hyd_flights_join(&t, &ie, 10, HYD_PRIO_DEMAND, far, &a2), 0);
	assert_ptr_equal(a2, e);
	hyd_flights_release(&t, a2);
	assert_ptr_equal(hyd_flights_next(&t), a);
	assert_ptr_equal(hyd_flights_next(&t), c);
	assert_ptr_equal(hyd_flights_next(&t), e);
	assert_ptr_equal(hyd_flights_next(&t), b);
	assert_int_equal(a->state, HYD_FLIGHT_ACTIVE);
	/* d stays queued: close ends it. */
	assert_int_equal(hyd_flights_close(&t, -ECANCELED), 1);
	assert_int_equal(hyd_flights_wait(&t, d, far), -ECANCELED);
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 10, HYD_PRIO_DEMAND, far, &a2),
	    -ESHUTDOWN);
	hyd_flights_finish(&t, a, -ENOENT);
	assert_int_equal(hyd_flights_wait(&t, a, far), -ENOENT);
	hyd_flights_finish(&t, b, -EIO);
	hyd_flights_finish(&t, c, -EIO);
	hyd_flights_finish(&t, e, -EIO);
	hyd_flights_release(&t, a);
	hyd_flights_release(&t, a); /* the second join */
	hyd_flights_release(&t, b);
	hyd_flights_release(&t, c);
	hyd_flights_release(&t, d);
	hyd_flights_release(&t, e);
	assert_int_equal(t.count, 0);
	hyd_flights_fini(&t);
}

struct waiter {
	struct hyd_flights *t;
	struct hyd_flight *fl;
	int r;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->r = hyd_flights_wait(w->t, w->fl, base_now_ns() + 10 * SEC);
	return NULL;
}

/* A rescue: only of a backfill flight already sent, once per flight
 * (joined after), out of the table, queued at its own prio; a waiter
 * takes whichever lands first, and the pair comes apart cleanly as each
 * ends. */
static void test_flights_rescue(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *a, *b, *d, *r, *r2, *won, *q;
	chunk_id ia = mk_id(1), ib = mk_id(2), idd = mk_id(3);
	uint64_t far = base_now_ns() + 60 * SEC;
	uint8_t *raw;
	int kicks = 0;

	(void)state;
	assert_int_equal(hyd_flights_init(&t, count_kick, &kicks), 0);
	hyd_flights_open(&t);
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 10, HYD_PRIO_BACKFILL, far, &a), 1);
	assert_int_equal(
	    hyd_flights_join(&t, &ib, 10, HYD_PRIO_BACKFILL, far, &b), 1);
	assert_int_equal(
	    hyd_flights_join(&t, &idd, 10, HYD_PRIO_DEMAND, far, &d), 1);
	/* Queued still (a join moves it up): no rescue. */
	assert_int_equal(hyd_flights_rescue(&t, a, HYD_PRIO_DEMAND, far, &r),
			 0);
	assert_null(r);
	assert_ptr_equal(hyd_flights_next(&t), d);
	assert_ptr_equal(hyd_flights_next(&t), a);
	assert_ptr_equal(hyd_flights_next(&t), b);
	/* A demand flight sent is as urgent as it gets. */
	assert_int_equal(hyd_flights_rescue(&t, d, HYD_PRIO_DEMAND, far, &r),
			 0);
	assert_null(r);
	/* A directory's rescue at NEAR, then a read's moves it up. */
	assert_int_equal(hyd_flights_rescue(&t, a, HYD_PRIO_NEAR, far, &r), 1);
	assert_non_null(r);
	assert_ptr_not_equal(r, a);
	assert_int_equal(r->prio, HYD_PRIO_NEAR);
	assert_int_equal(t.count, 3); /* not in the table */
	assert_int_equal(
	    hyd_flights_rescue(&t, a, HYD_PRIO_DEMAND, far + SEC, &r2), 0);
	assert_ptr_equal(r2, r);
	assert_int_equal(r->prio, HYD_PRIO_DEMAND);
	assert_true(r->deadline_ns >= far + SEC); /* and its queue time */
	hyd_flights_release(&t, r2);
	/* A rescue is not rescued. */
	assert_int_equal(hyd_flights_rescue(&t, r, HYD_PRIO_DEMAND, far, &r2),
			 0);
	assert_null(r2);
	/* Nothing landed: the wait ends at its deadline. */
	assert_int_equal(
	    hyd_flights_wait_either(&t, a, r, base_now_ns() + SEC / 50, &won),
	    -ETIMEDOUT);
	/* The rescue lands first: the waiter takes it. */
	q = hyd_flights_next(&t);
	assert_ptr_equal(q, r);
	raw = calloc(1, 10);
	hyd_flights_verified(&t, r, raw);
	assert_int_equal(hyd_flights_wait_either(&t, a, r, far, &won), 0);
	assert_ptr_equal(won, r);
	hyd_flights_finish(&t, r, 0);
	assert_null(a->rescue);
	/* The parent fails after: the rescue's bytes stand. */
	hyd_flights_finish(&t, a, -EIO);
	assert_int_equal(hyd_flights_wait_either(&t, a, r, far, &won), 0);
	assert_ptr_equal(won, r);
	hyd_flights_release(&t, r);
	hyd_flights_release(&t, a);
	/* The parent lands first, and ends before its rescue is sent. */
	assert_int_equal(hyd_flights_rescue(&t, b, HYD_PRIO_DEMAND, far, &r),
			 1);
	raw = calloc(1, 10);
	hyd_flights_verified(&t, b, raw);
	assert_int_equal(hyd_flights_wait_either(&t, b, r, far, &won), 0);
	assert_ptr_equal(won, b);
	hyd_flights_finish(&t, b, 0);
	assert_null(r->parent);
	/* Both failed: the parent's error. */
	hyd_flights_finish(&t, d, -EIO);
	assert_int_equal(hyd_flights_close(&t, -ECANCELED), 1); /* r */
	assert_int_equal(hyd_flights_wait_either(&t, d, r, far, &won), -EIO);
	hyd_flights_release(&t, r);
	hyd_flights_release(&t, b);
	hyd_flights_release(&t, d);
	assert_int_equal(t.count, 0);
	hyd_flights_fini(&t);
}

static void test_flights_wake_and_rejoin(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *a, *a2;
	struct waiter w;
	pthread_t th;
	chunk_id ia = mk_id(7);
	uint64_t far = base_now_ns() + 60 * SEC;
	uint8_t *raw = malloc(4);

	(void)state;
	assert_non_null(raw);
	memcpy(raw, "abcd", 4);
	assert_int_equal(hyd_flights_init(&t, NULL, NULL), 0);
	hyd_flights_open(&t);
	assert_int_equal(hyd_flights_join(&t, &ia, 4, HYD_PRIO_DEMAND, far, &a),
			 1);
	/* Sent (popped), nothing lands: a wait with a short deadline times
	 * out. */
	assert_ptr_equal(hyd_flights_next(&t), a);
	assert_int_equal(hyd_flights_wait(&t, a, base_now_ns() + SEC / 50),
			 -ETIMEDOUT);
	w.t = &t;
	w.fl = a;
	w.r = 1;
	assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
	usleep(20000);
	hyd_flights_verified(&t, a, raw);
	pthread_join(th, NULL);
	assert_int_equal(w.r, 0);
	assert_memory_equal(a->raw, "abcd", 4);
	/* VERIFIED but not finished: a late reader joins, no new flight. */
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 4, HYD_PRIO_DEMAND, far, &a2), 0);
	assert_ptr_equal(a, a2);
	assert_int_equal(hyd_flights_wait(&t, a2, far), 0);
	hyd_flights_release(&t, a2);
	/* A failure after VERIFIED (say, the store) does not undo it. */
	hyd_flights_finish(&t, a, -EIO);
	assert_int_equal(hyd_flights_wait(&t, a, far), 0);
	/* Finished: out of the table, the next join starts afresh. */
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 4, HYD_PRIO_DEMAND, far, &a2), 1);
	assert_ptr_not_equal(a, a2);
	hyd_flights_release(&t, a);
	assert_ptr_equal(hyd_flights_next(&t), a2);
	hyd_flights_finish(&t, a2, -ECANCELED);
	hyd_flights_release(&t, a2);
	hyd_flights_close(&t, -ECANCELED);
	hyd_flights_fini(&t);
}

struct late_verify {
	struct hyd_flights *t;
	struct hyd_flight *fl;
	unsigned queued_ms, sent_ms; /* time in the queue, then on the wire */
};

/* The loop's part, late: the flight waits in the queue (all transfers
 * busy), then is sent, then lands. */
static void *late_verify_thread(void *p)
{
	struct late_verify *lv = p;
	uint8_t *raw = malloc(4);

	usleep(lv->queued_ms * 1000u);
	assert_ptr_equal(hyd_flights_next(lv->t), lv->fl);
	usleep(lv->sent_ms * 1000u);
	memcpy(raw, "wxyz", 4);
	hyd_flights_verified(lv->t, lv->fl, raw);
	hyd_flights_finish(lv->t, lv->fl, 0);
	return NULL;
}

/* A timeout counts from when the request is sent: a read whose flight
 * waited in the queue longer than its whole timeout still gets its bytes
 * when they come within the timeout of the send; and the flight's own
 * deadline (which the fetcher retries by) moves on by the queue time. */
static void test_flights_timeout_from_send(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *a, *b;
	struct late_verify lv;
	pthread_t th;
	chunk_id ia = mk_id(0x61), ib = mk_id(0x62);
	uint64_t t0 = base_now_ns(), timeout = 300 * 1000000ull;

	(void)state;
	assert_int_equal(hyd_flights_init(&t, NULL, NULL), 0);
	hyd_flights_open(&t);
	assert_int_equal(
	    hyd_flights_join(&t, &ia, 4, HYD_PRIO_DEMAND, t0 + timeout, &a), 1);
	lv = (struct late_verify){
	    .t = &t, .fl = a, .queued_ms = 900, .sent_ms = 100};
	assert_int_equal(pthread_create(&th, NULL, late_verify_thread, &lv), 0);
	/* Three timeouts in the queue, then a tenth of a second on the
	 * wire: no -ETIMEDOUT. */
	assert_int_equal(hyd_flights_wait(&t, a, t0 + timeout), 0);
	assert_memory_equal(a->raw, "wxyz", 4);
	assert_true(base_now_ns() - t0 >= 900 * 1000000ull);
	pthread_join(th, NULL);
	/* Its deadline moved on by the time it was queued. */
	assert_true(a->deadline_ns >= t0 + timeout + 800 * 1000000ull);
	hyd_flights_release(&t, a);
	/* Sent at once and then nothing: the timeout runs. */
	t0 = base_now_ns();
	assert_int_equal(
	    hyd_flights_join(&t, &ib, 4, HYD_PRIO_DEMAND, t0 + timeout, &b), 1);
	assert_ptr_equal(hyd_flights_next(&t), b);
	assert_int_equal(hyd_flights_wait(&t, b, t0 + timeout), -ETIMEDOUT);
	assert_true(base_now_ns() - t0 < 3 * timeout);
	hyd_flights_finish(&t, b, -ECANCELED);
	hyd_flights_release(&t, b);
	hyd_flights_close(&t, -ECANCELED);
	hyd_flights_fini(&t);
}

/* While the link is down, queue time counts again: hyd_flights_expire
 * ends the queued reads whose deadline passed, and only those (not
 * backfill's, not a read with time left, not one on the wire). */
static void test_flights_expire(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *old, *young, *bg, *sent;
	chunk_id i1 = mk_id(0x71), i2 = mk_id(0x72), i3 = mk_id(0x73),
		 i4 = mk_id(0x74);
	uint64_t now = base_now_ns();

	(void)state;
	assert_int_equal(hyd_flights_init(&t, NULL, NULL), 0);
	hyd_flights_open(&t);
	assert_int_equal(hyd_flights_join(&t, &i4, 4, HYD_PRIO_DEMAND,
					  now + SEC / 10, &sent),
			 1);
	assert_ptr_equal(hyd_flights_next(&t), sent);
	assert_int_equal(hyd_flights_join(&t, &i1, 4, HYD_PRIO_READAHEAD,
					  now + SEC / 10, &old),
			 1);
	assert_int_equal(hyd_flights_join(&t, &i2, 4, HYD_PRIO_DEMAND,
					  now + 60 * SEC, &young),
			 1);
	assert_int_equal(hyd_flights_join(&t, &i3, 4, HYD_PRIO_BACKFILL,
					  HYD_DEADLINE_NONE, &bg),
			 1);
	usleep(200000);
	assert_int_equal(hyd_flights_expire(&t, base_now_ns()), 1);
	assert_int_equal(hyd_flights_wait(&t, old, now), -ETIMEDOUT);
	assert_int_equal(old->state, HYD_FLIGHT_DONE);
	assert_int_equal(young->state, HYD_FLIGHT_QUEUED);
	assert_int_equal(bg->state, HYD_FLIGHT_QUEUED);
	assert_int_equal(sent->state, HYD_FLIGHT_ACTIVE);
	assert_int_equal(hyd_flights_queued(&t), 2);
	assert_int_equal(hyd_flights_queued_prio(&t, HYD_PRIO_DEMAND), 1);
	assert_int_equal(hyd_flights_queued_prio(&t, HYD_PRIO_BACKFILL), 1);
	hyd_flights_finish(&t, sent, -ECANCELED);
	hyd_flights_release(&t, old);
	hyd_flights_release(&t, young);
	hyd_flights_release(&t, bg);
	hyd_flights_release(&t, sent);
	hyd_flights_close(&t, -ECANCELED);
	hyd_flights_fini(&t);
}

/* ------------------------------------------------------------------ */
/* fetcher against the loopback server                                */
/* ------------------------------------------------------------------ */

static void test_fetch_one(void **state)
{
	struct hyd_fetch_stats st;
	uint8_t *raw = tsup_random_bytes(100000, 1);
	chunk_id id;
	hyd_fetch *f;

	(void)state;
	put_chunk(raw, 100000, NULL, &id);
	f = fetcher(srv.base, NULL);
	assert_int_equal(fetch_one(f, &id, raw, 100000, 10 * SEC), 0);
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.chunks, 1);
	assert_int_equal(st.failures, 0);
	assert_true(st.wire_bytes >= 100000);
	hyd_fetch_free(f);
	free(raw);
}

struct reader {
	hyd_fetch *f;
	const chunk_id *id;
	const uint8_t *want;
	size_t len;
	pthread_barrier_t *go;
	int r;
};

static void *reader_thread(void *arg)
{
	struct reader *rd = arg;
	struct hyd_flight *fl = NULL;
	uint64_t deadline;

	pthread_barrier_wait(rd->go);
	deadline = base_now_ns() + 10 * SEC;
	rd->r = hyd_fetch_submit(rd->f, rd->id, (uint32_t)rd->len,
				 HYD_PRIO_DEMAND, deadline, &fl);
	if (rd->r < 0)
		return NULL;
	rd->r = hyd_fetch_wait(rd->f, fl, deadline + SEC);
	if (rd->r == 0 &&
	    (fl->raw_len != rd->len || memcmp(fl->raw, rd->want, rd->len)))
		rd->r = -EBADMSG;
	hyd_fetch_release(rd->f, fl);
	return NULL;
}

static void test_fetch_single_flight(void **state)
{
	enum { N = 8 };
	struct hyd_fetch_stats st;
	struct reader rd[N];
	pthread_t th[N];
	pthread_barrier_t go;
	size_t len = MAX_RAW; /* big and random: in flight for a while */
	uint8_t *raw = tsup_random_bytes(len, 2);
	chunk_id id;
	hyd_fetch *f;
	int i;

	(void)state;
	put_chunk(raw, len, NULL, &id);
	f = fetcher(srv.base, NULL);
	pthread_barrier_init(&go, NULL, N);
	for (i = 0; i < N; i++) {
		rd[i] = (struct reader){f, &id, raw, len, &go, 1};
		assert_int_equal(
		    pthread_create(&th[i], NULL, reader_thread, &rd[i]), 0);
	}
	for (i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(rd[i].r, 0);
	}
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.chunks, 1);
	pthread_barrier_destroy(&go);
	hyd_fetch_free(f);
	free(raw);
}

static void test_fetch_many_parallel(void **state)
{
	enum { N = 40 };
	struct hyd_fetch_stats st;
	struct hyd_flight *fl[N];
	uint8_t *raw[N];
	chunk_id id[N];
	uint64_t deadline;
	hyd_fetch *f;
	int i;

	(void)state;
	for (i = 0; i < N; i++) {
		raw[i] = tsup_random_bytes(5000 + (size_t)i, 100 + (uint64_t)i);
		put_chunk(raw[i], 5000 + (size_t)i, NULL, &id[i]);
	}
	f = fetcher(srv.base, NULL);
	deadline = base_now_ns() + 20 * SEC;
	/* Everything submitted first, then waited for. */
	for (i = 0; i < N; i++)
		assert_int_equal(hyd_fetch_submit(f, &id[i], 5000 + (uint32_t)i,
						  i % 2 ? HYD_PRIO_BACKFILL
							: HYD_PRIO_DEMAND,
						  deadline, &fl[i]),
				 1);
	for (i = 0; i < N; i++) {
		assert_int_equal(hyd_fetch_wait(f, fl[i], deadline + SEC), 0);
		assert_memory_equal(fl[i]->raw, raw[i], 5000 + (size_t)i);
		hyd_fetch_release(f, fl[i]);
		free(raw[i]);
	}
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.requests, N);
	assert_int_equal(st.chunks, N);
	hyd_fetch_free(f);
}

static void test_fetch_missing(void **state)
{
	struct hyd_fetch_stats st;
	chunk_id id = mk_id(0x42);
	uint64_t t0 = base_now_ns();
	hyd_fetch *f;

	(void)state;
	f = fetcher(srv.base, NULL);
	assert_int_equal(fetch_one(f, &id, NULL, 1000, 10 * SEC), -ENOENT);
	assert_true(base_now_ns() - t0 < 3 * SEC); /* no retrying a 404 */
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.failures, 1);
	hyd_fetch_free(f);
}

static void test_fetch_corrupt(void **state)
{
	struct hyd_fetch_stats st;
	uint8_t *raw = tsup_random_bytes(3000, 3);
	uint8_t *other = tsup_random_bytes(3000, 4);
	chunk_id id;
	hyd_fetch *f;

	(void)state;
	/* The file under id holds a well-formed frame of other bytes. */
	put_chunk(raw, 3000, other, &id);
	f = fetcher(srv.base, NULL);
	assert_int_equal(fetch_one(f, &id, raw, 3000, 10 * SEC), -EBADMSG);
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.requests, 2); /* one retry */
	assert_int_equal(st.mismatches, 2);
	assert_int_equal(st.chunks, 0);
	hyd_fetch_free(f);
	free(raw);
	free(other);
}

static void test_fetch_server_down(void **state)
{
	struct hyd_fetch_stats st;
	char base[128];
	chunk_id id = mk_id(0x43);
	uint64_t t0, dt;
	hyd_fetch *f;

	(void)state;
	snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1/ns",
		 tsup_free_port());
	f = fetcher(base, NULL);
	t0 = base_now_ns();
	assert_int_equal(fetch_one(f, &id, NULL, 1000, 3 * SEC / 2),
			 -ETIMEDOUT);
	dt = base_now_ns() - t0;
	/* Retried until close to the deadline, not past it. */
	assert_true(dt >= SEC / 2);
	assert_true(dt < 3 * SEC);
	hyd_fetch_stats(f, &st);
	assert_true(st.retries >= 2);
	assert_true(st.requests >= 3);
	hyd_fetch_free(f);
}

/* An outage with more flights than connections: only `connections` of
 * them back off and retry at a time, the others wait in the queue; every
 * one still ends by its deadline, none hangs. */
static void test_fetch_outage_bounded(void **state)
{
	enum { N = 6 };
	struct hyd_fetch_config c;
	struct hyd_fetch_stats st;
	struct hyd_flight *fl[N];
	char base[128];
	chunk_id id[N];
	uint64_t t0, deadline;
	hyd_fetch *f = NULL;
	int i;

	(void)state;
	snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1/ns",
		 tsup_free_port());
	memset(&c, 0, sizeof(c));
	c.base_url = base;
	c.max_raw = MAX_RAW;
	c.connections = 2;
	c.connect_timeout_ms = 1000;
	assert_int_equal(hyd_fetch_new(&c, &f), 0);
	assert_int_equal(hyd_fetch_start(f), 0);
	t0 = base_now_ns();
	deadline = t0 + SEC;
	for (i = 0; i < N; i++) {
		id[i] = mk_id((uint8_t)(0x50 + i));
		assert_int_equal(hyd_fetch_submit(f, &id[i], 100,
						  HYD_PRIO_DEMAND, deadline,
						  &fl[i]),
				 1);
	}
	for (i = 0; i < N; i++) {
		assert_int_equal(hyd_fetch_wait(f, fl[i], deadline + 5 * SEC),
				 -ETIMEDOUT);
		hyd_fetch_release(f, fl[i]);
	}
	assert_true(base_now_ns() - t0 < 3 * SEC);
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.failures, N);
	assert_true(st.retries >= 2);
	hyd_fetch_free(f);
}

/* A server for the lane test: files under DIR as http.server serves
 * them, except that a chunk with a DIR/v1/ns/chunk/HEX.hang beside it is
 * never answered (the request hangs until the client goes). */
static const char HANG_SERVER[] =
    "import http.server, os, sys, time\n"
    "d = sys.argv[1]\n"
    "class H(http.server.SimpleHTTPRequestHandler):\n"
    "    def __init__(s, *a, **k): super().__init__(*a, directory=d, **k)\n"
    "    def log_message(s, *a): pass\n"
    "    def do_GET(s):\n"
    "        if os.path.exists(d + s.path + '.hang'):\n"
    "            time.sleep(60)\n"
    "            return\n"
    "        try:\n"
    "            os.remove(d + s.path + '.hang1')\n"
    "            time.sleep(60)\n"
    "            return\n"
    "        except FileNotFoundError:\n"
    "            pass\n"
    "        return super().do_GET()\n"
    "class S(http.server.ThreadingHTTPServer):\n"
    "    request_queue_size = 64\n"
    "    daemon_threads = True\n"
    "srv = S(('127.0.0.1', 0), H)\n"
    "print('port', srv.server_address[1], flush=True)\n"
    "srv.serve_forever()\n";

/* Start HANG_SERVER over srv.dir; its base URL into base. */
static pid_t hang_server_start(char *base, size_t cap)
{
	char buf[128] = "";
	int pfd[2], port = 0;
	struct pollfd pp;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		close(pfd[0]);
		close(pfd[1]);
		execlp("python3", "python3", "-u", "-c", HANG_SERVER, srv.dir,
		       (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	pp.fd = pfd[0];
	pp.events = POLLIN;
	/* The line may come in pieces; python may be slow to start on a
	 * loaded machine. */
	while (len < sizeof(buf) - 1 && !strchr(buf, '\n') &&
	       poll(&pp, 1, 30000) > 0) {
		n = read(pfd[0], buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
	}
	close(pfd[0]);
	if (!strncmp(buf, "port ", 5))
		port = (int)strtol(buf + 5, NULL, 10);
	assert_true(port > 0);
	snprintf(base, cap, "http://127.0.0.1:%d/v1/ns", port);
	return pid;
}

/* Transfers running (or backing off) once there are n, or after 2 s. */
static uint64_t wait_active(hyd_fetch *f, uint64_t n)
{
	struct hyd_fetch_stats st;

	for (int i = 0; i < 100; i++) {
		hyd_fetch_stats(f, &st);
		if (st.active >= n)
			break;
		usleep(20000);
	}
	return st.active;
}

/* Reads keep their share of transfers while backfill is saturated: with
 * every backfill transfer stuck on a server that does not answer (and
 * more backfill queued behind them), demand reads still go out at once,
 * on transfers of their own, and complete. */
static void test_fetch_reads_keep_share(void **state)
{
	enum { NB = 12, ND = 6 };
	struct hyd_fetch_config c;
	struct hyd_fetch_stats st;
	struct hyd_flight *bg[NB];
	uint8_t *raw[ND];
	chunk_id bid[NB], did[ND];
	char base[128], hex[CHUNK_ID_HEX_LEN + 1], path[300];
	uint64_t t0;
	hyd_fetch *f = NULL;
	pid_t pid;
	int i;

	(void)state;
	for (i = 0; i < NB; i++) {
		uint8_t *b = tsup_random_bytes(3000, 900 + (uint64_t)i);

		put_chunk(b, 3000, NULL, &bid[i]);
		chunk_id_to_hex(&bid[i], hex);
		snprintf(path, sizeof(path), "%s/v1/ns/chunk/%s.hang", srv.dir,
			 hex);
		tsup_write_file(path, "", 0);
		free(b);
	}
	for (i = 0; i < ND; i++) {
		raw[i] = tsup_random_bytes(4000, 950 + (uint64_t)i);
		put_chunk(raw[i], 4000, NULL, &did[i]);
	}
	pid = hang_server_start(base, sizeof(base));
	memset(&c, 0, sizeof(c));
	c.base_url = base;
	c.max_raw = MAX_RAW;
	c.connections = 3; /* backfill's: all of them will hang */
	c.read_connections = 2;
	c.batch_max = 1; /* GETs, as this server has no POST */
	c.connect_timeout_ms = 1000;
	assert_int_equal(hyd_fetch_new(&c, &f), 0);
	assert_int_equal(hyd_fetch_start(f), 0);
	for (i = 0; i < NB; i++)
		assert_int_equal(hyd_fetch_submit(f, &bid[i], 3000,
						  HYD_PRIO_BACKFILL,
						  HYD_DEADLINE_NONE, &bg[i]),
				 1);
	/* Backfill holds every transfer of its own before the reads come. */
	assert_int_equal(wait_active(f, 3), 3);
	t0 = base_now_ns();
	for (i = 0; i < ND; i++)
		assert_int_equal(fetch_one(f, &did[i], raw[i], 4000, 5 * SEC),
				 0);
	/* Well within the timeout: they never waited for backfill. */
	assert_true(base_now_ns() - t0 < 4 * SEC);
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.chunks, ND);
	for (i = 0; i < NB; i++)
		hyd_fetch_release(f, bg[i]);
	hyd_fetch_free(f);
	for (i = 0; i < ND; i++)
		free(raw[i]);
	assert_int_equal(tsup_stop_server(pid, "the hanging server"), 0);
}

/* A demand read that joins a backfill transfer stuck on the server (its
 * first GET of the chunk hangs, as a batch streaming megabytes ahead of
 * it would for a while) gets the chunk by a rescue GET of its own within
 * the round trip's wait, not at the end of its timeout (the old wait). */
static void test_fetch_rescue(void **state)
{
	struct hyd_fetch_config c;
	struct hyd_fetch_stats st;
	struct hyd_flight *bg = NULL, *fl = NULL, *joined;
	uint8_t *raw = tsup_random_bytes(5000, 977);
	char base[128], hex[CHUNK_ID_HEX_LEN + 1], path[300];
	uint64_t t0;
	chunk_id id;
	hyd_fetch *f = NULL;
	pid_t pid;

	(void)state;
	put_chunk(raw, 5000, NULL, &id);
	chunk_id_to_hex(&id, hex);
	snprintf(path, sizeof(path), "%s/v1/ns/chunk/%s.hang1", srv.dir, hex);
	tsup_write_file(path, "", 0);
	pid = hang_server_start(base, sizeof(base));
	memset(&c, 0, sizeof(c));
	c.base_url = base;
	c.max_raw = MAX_RAW;
	c.connections = 2;
	c.read_connections = 2;
	c.batch_max = 1; /* GETs, as this server has no POST */
	c.connect_timeout_ms = 1000;
	assert_int_equal(hyd_fetch_new(&c, &f), 0);
	assert_int_equal(hyd_fetch_start(f), 0);
	assert_int_equal(hyd_fetch_submit(f, &id, 5000, HYD_PRIO_BACKFILL,
					  HYD_DEADLINE_NONE, &bg),
			 1);
	assert_int_equal(wait_active(f, 1), 1);
	/* The read joins the stuck flight, and waits at most 5 s. */
	t0 = base_now_ns();
	assert_int_equal(
	    hyd_fetch_submit(f, &id, 5000, HYD_PRIO_DEMAND, t0 + 5 * SEC, &fl),
	    0);
	assert_ptr_equal(fl, bg);
	joined = fl;
	assert_int_equal(hyd_fetch_wait_demand(f, &fl, t0 + 5 * SEC), 0);
	assert_true(base_now_ns() - t0 < 4 * SEC);
	assert_ptr_not_equal(fl, joined); /* the rescue's bytes */
	assert_int_equal(fl->raw_len, 5000);
	assert_memory_equal(fl->raw, raw, 5000);
	hyd_fetch_stats(f, &st);
	assert_int_equal(st.rescues, 1);
	/* The backfill transfer is still stuck: nothing ended it. */
	assert_false(hyd_fetch_ready(f, bg));
	hyd_fetch_release(f, fl);
	hyd_fetch_release(f, bg);
	hyd_fetch_free(f);
	free(raw);
	assert_int_equal(tsup_stop_server(pid, "the hanging server"), 0);
}

static void test_fetch_stores(void **state)
{
	char dir[] = "/tmp/ferry-test-store-XXXXXX", cmd[128];
	uint8_t *raw = tsup_random_bytes(70000, 5), *back = malloc(MAX_RAW);
	hyd_store *s = NULL;
	size_t n = 0;
	chunk_id id;
	hyd_fetch *f;

	(void)state;
	assert_non_null(back);
	assert_non_null(mkdtemp(dir));
	assert_int_equal(hyd_store_open(dir, MAX_RAW, &s), 0);
	put_chunk(raw, 70000, NULL, &id);
	assert_int_equal(hyd_store_has(s, &id), 0);
	f = fetcher(srv.base, s);
	assert_int_equal(fetch_one(f, &id, raw, 70000, 10 * SEC), 0);
	/* The store write follows the wake-up; stop waits for it. */
	hyd_fetch_free(f);
	assert_int_equal(hyd_store_has(s, &id), 1);
	assert_int_equal(hyd_store_get(s, &id, back, MAX_RAW, &n), 0);
	assert_int_equal(n, 70000);
	assert_memory_equal(back, raw, 70000);
	hyd_store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	free(raw);
	free(back);
}

/* Stopping with a transfer in the air ends it with -ECANCELED. */
static void test_fetch_stop_in_flight(void **state)
{
	struct hyd_flight *fl = NULL;
	char base[128];
	chunk_id id = mk_id(0x44);
	hyd_fetch *f;

	(void)state;
	snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1/ns",
		 tsup_free_port());
	f = fetcher(base, NULL);
	assert_int_equal(hyd_fetch_submit(f, &id, 100, HYD_PRIO_DEMAND,
					  base_now_ns() + 60 * SEC, &fl),
			 1);
	usleep(50000);
	hyd_fetch_stop(f);
	assert_int_equal(hyd_fetch_wait(f, fl, base_now_ns() + SEC),
			 -ECANCELED);
	hyd_fetch_release(f, fl);
	assert_int_equal(hyd_fetch_submit(f, &id, 100, HYD_PRIO_DEMAND,
					  base_now_ns() + SEC, &fl),
			 -ESHUTDOWN);
	hyd_fetch_free(f);
}

/* ------------------------------------------------------------------ */
/* URLs                                                               */
/* ------------------------------------------------------------------ */

static int have_calls;
static int have_stub(void *arg, const chunk_id *id)
{
	(void)id;
	have_calls++;
	return *(const int *)arg;
}

/* A checked join asks the store only when no flight exists, and then
 * creates none when the chunk is stored; a flight in the table wins. */
static void test_flights_checked_join(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *a = NULL, *b = NULL;
	chunk_id ia = mk_id(9);
	uint64_t far = base_now_ns() + 60 * SEC;
	int stored = 1;

	(void)state;
	assert_int_equal(hyd_flights_init(&t, NULL, NULL), 0);
	hyd_flights_set_have_hook(&t, have_stub, &stored);
	hyd_flights_open(&t);
	have_calls = 0;
	assert_int_equal(
	    hyd_flights_join_checked(&t, &ia, 4, HYD_PRIO_DEMAND, far, 0, &a),
	    2);
	assert_null(a);
	assert_int_equal(have_calls, 1);
	assert_null(hyd_flights_next(&t)); /* nothing was queued */
	/* Not stored: a flight is created; a plain join never asks. */
	stored = 0;
	assert_int_equal(
	    hyd_flights_join_checked(&t, &ia, 4, HYD_PRIO_DEMAND, far, 0, &a),
	    1);
	assert_int_equal(have_calls, 2);
	stored = 1;
	assert_int_equal(
	    hyd_flights_join_checked(&t, &ia, 4, HYD_PRIO_DEMAND, far, 0, &b),
	    0);
	assert_ptr_equal(a, b);
	assert_int_equal(have_calls, 2);
	assert_ptr_equal(hyd_flights_next(&t), a);
	hyd_flights_finish(&t, a, -ECANCELED);
	hyd_flights_release(&t, a);
	hyd_flights_release(&t, b);
	hyd_flights_close(&t, -ECANCELED);
	hyd_flights_fini(&t);
}

/* A pack's entries join in one go: a flight in the table is joined, a
 * stored chunk gets none, the rest are created carrying the pack and
 * their places; the loop pops the pack's flights together, only when
 * the head is one of them, and leaves other flights queued. */
static void test_flights_pack(void **state)
{
	struct hyd_flights t;
	struct hyd_flight *x = NULL, *y = NULL, *fls[4], *got[4];
	struct hyd_pack_obj *o = calloc(1, sizeof(*o)), other = {0};
	uint8_t want[4] = {1, 1, 0, 1}, st[4];
	uint64_t far = base_now_ns() + 60 * SEC;
	int stored = 0, kicks = 0;
	size_t i, n;

	(void)state;
	assert_non_null(o);
	o->refs = 1;
	o->n = 4;
	o->ids = calloc(4, sizeof(*o->ids));
	o->lens = calloc(4, sizeof(*o->lens));
	assert_true(o->ids && o->lens);
	for (i = 0; i < 4; i++) {
		o->ids[i] = mk_id((uint8_t)(20 + i));
		o->lens[i] = 100;
	}
	assert_int_equal(hyd_flights_init(&t, count_kick, &kicks), 0);
	hyd_flights_set_have_hook(&t, have_stub, &stored);
	hyd_flights_open(&t);
	/* a read is fetching entry 1 already; entry 3 is stored */
	assert_int_equal(
	    hyd_flights_join(&t, &o->ids[1], 100, HYD_PRIO_DEMAND, far, &x), 1);
	assert_ptr_equal(hyd_flights_next(&t), x);
	assert_int_equal(
	    hyd_flights_join(&t, &o->ids[0], 100, HYD_PRIO_BACKFILL, far, &y),
	    1); /* not of the pack, queued first */
	stored = 1;
	{
		/* the have hook answers for every id alike: only entry 3 is
		 * asked (0 is in the table, 1 too, 2 is not wanted) */
		assert_int_equal(hyd_flights_join_pack(&t, o, want,
						       HYD_PRIO_BACKFILL, 1,
						       fls, st),
				 0);
	}
	assert_int_equal(st[0], 0);
	assert_int_equal(st[1], 0);
	assert_int_equal(st[2], 3);
	assert_int_equal(st[3], 2);
	assert_ptr_equal(fls[0], y);
	assert_null(fls[3]);
	assert_null(y->obj); /* joined, not created: no pack */
	hyd_flights_release(&t, fls[0]);
	hyd_flights_release(&t, fls[1]);
	/* now a fresh one: entry 3 not stored */
	stored = 0;
	want[0] = want[1] = 0;
	assert_int_equal(
	    hyd_flights_join_pack(&t, o, want, HYD_PRIO_BACKFILL, 1, fls, st),
	    0);
	assert_int_equal(st[3], 1);
	assert_ptr_equal(fls[3]->obj, o);
	assert_int_equal(fls[3]->obj_idx, 3);
	assert_int_equal(o->refs, 2);
	/* the head (y) is of no pack: nothing popped as a pack */
	assert_null(hyd_flights_head_pack(&t, HYD_PRIO_BACKFILL));
	assert_int_equal(hyd_flights_next_pack(&t, HYD_PRIO_BACKFILL, o, got),
			 0);
	assert_ptr_equal(hyd_flights_next(&t), y);
	/* now the pack's flight is the head: popped, but not for another */
	assert_ptr_equal(hyd_flights_head_pack(&t, HYD_PRIO_BACKFILL), o);
	hyd_pack_obj_unref(o); /* head_pack's reference */
	assert_int_equal(
	    hyd_flights_next_pack(&t, HYD_PRIO_BACKFILL, &other, got), 0);
	n = hyd_flights_next_pack(&t, HYD_PRIO_BACKFILL, o, got);
	assert_int_equal(n, 1);
	assert_ptr_equal(got[0], fls[3]);
	assert_int_equal(got[0]->state, HYD_FLIGHT_ACTIVE);
	hyd_flights_finish(&t, got[0], -ECANCELED);
	hyd_flights_release(&t, fls[3]);
	assert_int_equal(o->refs, 1); /* the flight's went with it */
	hyd_flights_finish(&t, x, -ECANCELED);
	hyd_flights_finish(&t, y, -ECANCELED);
	hyd_flights_release(&t, x);
	hyd_flights_release(&t, y);
	hyd_flights_close(&t, -ECANCELED);
	assert_int_equal(t.count, 0);
	hyd_flights_fini(&t);
	hyd_pack_obj_unref(o);
}

/* Browsing holds background transfers (and backfill's scheduler) for the
 * time asked, then not; a read lifts the hold for a second: the lookups
 * are then a job's, which needs the backfill. */
static void test_hold_background(void **state)
{
	hyd_fetch *f = fetcher("http://127.0.0.1:1/v1/x", NULL);

	(void)state;
	assert_int_equal(hyd_fetch_browsing(f), 0);
	hyd_fetch_hold_background(f, 150);
	assert_int_equal(hyd_fetch_browsing(f), 1);
	usleep(250000);
	assert_int_equal(hyd_fetch_browsing(f), 0);
	hyd_fetch_hold_background(f, 2000);
	assert_int_equal(hyd_fetch_browsing(f), 1);
	hyd_fetch_note_read(f);
	assert_int_equal(hyd_fetch_browsing(f), 0);
	usleep(1200000); /* the read is more than a second old */
	/* lookups again (a slow machine may have outlived the first hold):
	 * with no read in the last second they hold */
	hyd_fetch_hold_background(f, 2000);
	assert_int_equal(hyd_fetch_browsing(f), 1);
	hyd_fetch_free(f);
}

static void test_url_parse(void **state)
{
	char base[256], name[80], err[256], dir[512];

	(void)state;
	assert_int_equal(hyd_url_parse("http://127.0.0.1:8700/v1/data", base,
				       sizeof(base), name, sizeof(name), err,
				       sizeof(err)),
			 0);
	assert_string_equal(base, "http://127.0.0.1:8700/v1/data");
	assert_string_equal(name, "data");
	assert_int_equal(hyd_url_parse("https://Example.com/v1/a.b-c_d/", base,
				       sizeof(base), name, sizeof(name), err,
				       sizeof(err)),
			 0);
	assert_string_equal(name, "a.b-c_d");
	assert_true(base[strlen(base) - 1] != '/');
	static const char *const bad[] = {
	    "ftp://h/v1/a",	 "http://h/v2/a",   "http://h/v1/",
	    "http://h/v1/a/b",	 "http://h/v1/.a",  "http://h/v1/a?x=1",
	    "http://u:p@h/v1/a", "http://h/v1/a#f", "not a url",
	    "http://h/v1/a%2fb", "/v1/a",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		err[0] = '\0';
		assert_int_equal(hyd_url_parse(bad[i], base, sizeof(base), name,
					       sizeof(name), err, sizeof(err)),
				 -EINVAL);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(hyd_cache_dir_default("http://127.0.0.1:8700/v1/data",
					       "data", dir, sizeof(dir)),
			 0);
	/* NAME-<12 hex>, under a cache root. */
	assert_non_null(strstr(dir, "/ferry/data-"));
	assert_int_equal(strlen(strstr(dir, "/ferry/data-")),
			 strlen("/ferry/data-") + 12);
}

/* How far the source hashes: the replicator's /stats "hashing" object,
 * here a file the server hands out. Only the state words the protocol
 * has are taken (the word reaches a terminal); no object, another word or
 * no answer are errors, never a half-filled struct used as real. */
static void put_stats(const char *json)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/v1/ns/stats", srv.dir);
	tsup_write_file(path, json, strlen(json));
}

static void test_source_hashing(void **state)
{
	struct hyd_source_hashing h;
	char path[256];

	(void)state;
	put_stats("{\"generation\":1,\"hashing\":{\"state\":\"hashing\","
		  "\"files\":40,\"files_done\":3,\"bytes\":1000,"
		  "\"bytes_done\":75,\"changed\":1,\"bytes_read\":75,"
		  "\"rate\":12.5,\"eta_s\":74}}");
	assert_int_equal(hyd_source_hashing(srv.base, NULL, &h), 0);
	assert_string_equal(h.state, "hashing");
	assert_int_equal(h.files, 40);
	assert_int_equal(h.files_done, 3);
	assert_int_equal(h.bytes, 1000);
	assert_int_equal(h.bytes_done, 75);
	assert_int_equal(h.changed, 1);
	assert_true(h.rate == 12.5 && h.eta_s == 74);
	put_stats("{\"hashing\":{\"state\":\"\\u001b[2Jhashing\"}}");
	assert_int_equal(hyd_source_hashing(srv.base, NULL, &h), -EBADMSG);
	put_stats("{\"hashing\":{\"state\":\"finished\"}}");
	assert_int_equal(hyd_source_hashing(srv.base, NULL, &h), -EBADMSG);
	put_stats("{\"generation\":1}");
	assert_int_equal(hyd_source_hashing(srv.base, NULL, &h), -EBADMSG);
	put_stats("not json");
	assert_int_equal(hyd_source_hashing(srv.base, NULL, &h), -EBADMSG);
	snprintf(path, sizeof(path), "%s/v1/ns/stats", srv.dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(hyd_source_hashing(srv.base, NULL, &h), -EPROTO);
}

/* A token file: its first line is the token; nothing else passes. */
static void test_token_file(void **state)
{
	char dir[] = "/tmp/ferry-test-token-XXXXXX", p[128], err[256];
	struct hyd_creds c;
	char big[5000];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/t", dir);
	memset(&c, 0, sizeof(c));
	tsup_write_file(p, "abc.DEF-123_~+/=\nsecond line\n", 29);
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)), 0);
	assert_string_equal(c.token, "abc.DEF-123_~+/=");
	memset(&c, 0, sizeof(c));
	tsup_write_file(p, "no spaces allowed\n", 18);
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(c.token, "");
	/* the message never quotes the file's content */
	assert_null(strstr(err, "spaces"));
	tsup_write_file(p, "\n", 1);
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)),
			 -EINVAL);
	memset(big, 'a', sizeof(big));
	tsup_write_file(p, big, HYD_TOKEN_MAX + 1);
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)),
			 -EINVAL);
	tsup_write_file(p, big, sizeof(big));
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)),
			 -EINVAL);
	tsup_write_file(p, big, HYD_TOKEN_MAX);
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)), 0);
	assert_int_equal(strlen(c.token), HYD_TOKEN_MAX);
	snprintf(p, sizeof(p), "%s/missing", dir);
	assert_int_equal(hyd_creds_token_load(&c, p, err, sizeof(err)),
			 -ENOENT);
	tsup_rm_rf(dir);
}

/* The estimate is the third least sample of an epoch: two short samples
 * (a thread stalled between the send and curl's note of it) do not pull
 * it below the path's; a third does. The last epoch's estimate holds
 * into the next; an epoch later it is forgotten. */
static void test_rtt_estimate(void **state)
{
	struct hyd_rtt r;
	uint64_t t = 100 * SEC, ms = 1000000ull;
	int i;

	(void)state;
	memset(&r, 0, sizeof(r));
	assert_int_equal(hyd_rtt_add(&r, 0, t), 0);
	assert_int_equal(hyd_rtt_add(&r, 52 * ms, t), 52 * ms);
	for (i = 0; i < 20; i++)
		hyd_rtt_add(&r, (51 + i % 7) * ms, t + (uint64_t)i * ms);
	assert_int_equal(hyd_rtt_add(&r, 0, t), 51 * ms);
	assert_int_equal(hyd_rtt_add(&r, 18 * ms, t), 51 * ms);
	assert_int_equal(hyd_rtt_add(&r, 17 * ms, t), 51 * ms);
	assert_int_equal(hyd_rtt_add(&r, 19 * ms, t), 19 * ms);
	/* the next epoch: 19 ms holds while its own samples are longer */
	assert_int_equal(hyd_rtt_add(&r, 80 * ms, t + 11 * SEC), 19 * ms);
	for (i = 0; i < 5; i++)
		hyd_rtt_add(&r, 80 * ms, t + 12 * SEC);
	/* and the one after: the path's 80 ms */
	assert_int_equal(hyd_rtt_add(&r, 81 * ms, t + 22 * SEC), 80 * ms);
	assert_int_equal(hyd_rtt_add(&r, 81 * ms, t + 23 * SEC), 80 * ms);
	assert_int_equal(hyd_rtt_add(&r, 81 * ms, t + 24 * SEC), 80 * ms);
}

int main(void)
{
	const struct CMUnitTest table[] = {
	    cmocka_unit_test(test_flights_join_and_order),
	    cmocka_unit_test(test_flights_wake_and_rejoin),
	    cmocka_unit_test(test_flights_timeout_from_send),
	    cmocka_unit_test(test_flights_expire),
	    cmocka_unit_test(test_flights_checked_join),
	    cmocka_unit_test(test_flights_pack),
	    cmocka_unit_test(test_flights_rescue),
	    cmocka_unit_test(test_hold_background),
	    cmocka_unit_test(test_url_parse),
	};
	const struct CMUnitTest net[] = {
	    cmocka_unit_test(test_fetch_one),
	    cmocka_unit_test(test_fetch_single_flight),
	    cmocka_unit_test(test_fetch_many_parallel),
	    cmocka_unit_test(test_fetch_missing),
	    cmocka_unit_test(test_fetch_corrupt),
	    cmocka_unit_test(test_fetch_server_down),
	    cmocka_unit_test(test_fetch_outage_bounded),
	    cmocka_unit_test(test_fetch_stores),
	    cmocka_unit_test(test_fetch_reads_keep_share),
	    cmocka_unit_test(test_fetch_rescue),
	    cmocka_unit_test(test_source_hashing),
	    cmocka_unit_test(test_fetch_stop_in_flight),
	    cmocka_unit_test(test_token_file),
	    cmocka_unit_test(test_rtt_estimate),
	};
	int fails;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	fails = cmocka_run_group_tests_name("hyd_flights", table, NULL, NULL);
	if (system("python3 -c '' >/dev/null 2>&1") != 0) {
		curl_global_cleanup();
		printf(
		    "SKIP: python3 is needed for the loopback HTTP server\n");
		return fails ? 1 : 77;
	}
	fails += cmocka_run_group_tests_name("hyd_fetch", net, server_start,
					     server_stop);
	curl_global_cleanup();
	return fails ? 1 : 0;
}
