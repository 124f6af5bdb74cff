/*
 * hydrator/fetch/hyd_fetch.c — the fetcher: one libuv loop thread driving a
 * curl multi handle through the socket-action API (curl's
 * docs/examples/multi-uv.c).
 *
 * FUSE threads join flights in the single-flight table (hyd_fetch_flight.c);
 * a new flight wakes this loop through uv_async_send. The loop starts the
 * most urgent queued flights while fewer than `connections` transfers run:
 * demand and readahead flights as one GET BASE/chunk/<hex> each (lowest
 * latency), backfill flights as POST BASE/chunks batches
 * (hyd_fetch_batch.c), which never take more than bg_max transfers, so a
 * read never waits for a free one behind the backfill. hyd_fetch_pace.c
 * decides who may receive bytes (the --bwlimit bucket, backfill yielding
 * to running demand transfers). A finished 200 answer goes to the libuv
 * thread pool (uv_queue_work): decode, SHA-256 check, publish to the
 * waiters, hyd_store_put — never on the loop thread.
 * Transient failures (connect refused or reset, timeouts, 5xx) are retried
 * with capped exponential backoff and jitter until the flight's deadline;
 * 404 and 409 end the flight at once; a frame or hash mismatch is retried
 * once.
 *
 * Threads: every field under "loop thread only" is touched by the loop
 * thread alone (and by hyd_fetch_start before the thread exists). Counters
 * are relaxed atomics. No curl call happens outside the loop thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <uv.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/fetch/hyd_fetch_loop_priv.h"
#include "hydrator/hydrator.h"

#define HYD_BACKOFF_FIRST_MS 100u
#define HYD_BACKOFF_MAX_MS 2000u
#define HYD_MISMATCH_TRIES 2u /* the first fetch and one retry */
/* Chunks per batch: the protocol's bound. Bytes bound a batch of big
 * chunks; small files' chunks would otherwise make a batch a round trip
 * for a few hundred KB. */
#define HYD_BATCH_MAX_DEFAULT 1024u
#define HYD_BATCH_BYTES_DEFAULT (8ull << 20)

static void xfer_start(struct hyd_xfer *x);

/* ------------------------------------------------------------------ */
/* frame coder pool (any thread)                                      */
/* ------------------------------------------------------------------ */

static frame_coder *coder_get(hyd_fetch *f)
{
	frame_coder *c = NULL;

	pthread_mutex_lock(&f->coder_lock);
	if (f->n_coders)
		c = f->coders[--f->n_coders];
	pthread_mutex_unlock(&f->coder_lock);
	return c ? c : frame_coder_new(); /* NULL is fine: a temporary one */
}

static void coder_put(hyd_fetch *f, frame_coder *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&f->coder_lock);
	if (f->n_coders < HYD_CODER_POOL) {
		f->coders[f->n_coders++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&f->coder_lock);
	frame_coder_free(c);
}

/* ------------------------------------------------------------------ */
/* transfers                                                          */
/* ------------------------------------------------------------------ */

void hyd_fetch__note_error(hyd_fetch *f, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&f->err_lock);
	va_start(ap, fmt);
	vsnprintf(f->stats.last_error, sizeof(f->stats.last_error), fmt, ap);
	va_end(ap);
	f->stats.last_error_ns = base_now_ns();
	pthread_mutex_unlock(&f->err_lock);
}

static int where_busy(enum xfer_where w)
{
	return w == XFER_CURL || w == XFER_RETRY;
}

/* Every change of x->where goes through here, to keep the counts right. */
void hyd_fetch__xfer_set(struct hyd_xfer *x, enum xfer_where w)
{
	hyd_fetch *f = x->f;

	if (where_busy(x->where)) {
		f->n_busy--;
		if (x->bg)
			f->n_bg--;
	}
	if (x->where == XFER_CURL && x->urgent) {
		f->n_urgent--;
		f->urgent_bytes -= x->want_bytes;
		/* Backfill held for this one may go on. */
		hyd_fetch__pace_kick(f);
	}
	x->where = w;
	if (w != XFER_CURL)
		x->paused = 0; /* curl forgets a removed handle's pause */
	if (where_busy(w)) {
		f->n_busy++;
		if (x->bg)
			f->n_bg++;
	}
	if (w == XFER_CURL && x->urgent) {
		f->n_urgent++;
		f->urgent_bytes += x->want_bytes;
	}
	__atomic_store_n(&f->stats.active, (uint64_t)f->n_busy,
			 __ATOMIC_RELAXED);
}

static void xfer_unlink(struct hyd_xfer *x)
{
	hyd_fetch *f = x->f;

	if (x->prev)
		x->prev->next = x->next;
	else
		f->xfers = x->next;
	if (x->next)
		x->next->prev = x->prev;
	x->prev = x->next = NULL;
}

void hyd_fetch__xfer_free(struct hyd_xfer *x)
{
	hyd_fetch__xfer_set(x, XFER_DONE);
	xfer_unlink(x);
	curl_easy_cleanup(x->easy);
	hyd_fetch__batch_free(x->bx);
	free(x->url);
	free(x->body);
	free(x);
}

/* End the flight with rc (0: verified and stored) and free the transfer. */
static void xfer_end(struct hyd_xfer *x, int rc)
{
	hyd_fetch *f = x->f;
	char hex[CHUNK_ID_HEX_LEN + 1];

	if (x->bx) {
		hyd_fetch__batch_end(x, rc);
		return;
	}
	if (rc < 0) {
		STAT_ADD(f, failures, 1);
		/* -ECANCELED is shutdown, not news. */
		if (rc != -ECANCELED) {
			chunk_id_to_hex(&x->fl->id, hex);
			base_warn("fetch failed chunk=%s url=%s errno=%s "
				  "requests=%u why=\"%s\"",
				  hex, x->url, base_errname(rc), x->requests,
				  x->why);
			hyd_fetch__note_error(f, "chunk %.16s: %s (%s)", hex,
					      base_errname(rc), x->why);
		}
	}
	hyd_flights_finish(&f->flights, x->fl, rc);
	x->fl = NULL;
	hyd_fetch__xfer_free(x);
}

static uint64_t rng_next(hyd_fetch *f)
{
	uint64_t v = f->rng;

	v ^= v << 13;
	v ^= v >> 7;
	v ^= v << 17;
	f->rng = v;
	return v;
}

uint64_t hyd_fetch__backoff_ms(hyd_fetch *f, unsigned attempts)
{
	unsigned shift = attempts < 16 ? attempts : 16;
	uint64_t delay_ms = (uint64_t)HYD_BACKOFF_FIRST_MS << shift;

	if (delay_ms > HYD_BACKOFF_MAX_MS)
		delay_ms = HYD_BACKOFF_MAX_MS;
	/* Jitter in [delay/2, delay] keeps many readers from retrying in
	 * lockstep against a recovering server. */
	return delay_ms / 2 + rng_next(f) % (delay_ms / 2 + 1);
}

void hyd_fetch__note_transient(hyd_fetch *f)
{
	uint64_t ok = __atomic_load_n(&f->stats.last_ok_ns, __ATOMIC_RELAXED);

	/* The first failure since the last chunk that got through. */
	if (!f->down_since || ok > f->down_since)
		f->down_since = base_now_ns();
}

/* A transient failure: try again after a jittered, capped exponential
 * backoff, unless that would pass the flight's deadline. */
static void xfer_retry(struct hyd_xfer *x)
{
	hyd_fetch *f = x->f;
	uint64_t now = base_now_ns(), deadline, delay_ms;
	char hex[CHUNK_ID_HEX_LEN + 1];

	deadline = hyd_flights_deadline(&f->flights, x->fl);
	delay_ms = hyd_fetch__backoff_ms(f, x->attempts);
	x->attempts++;
	hyd_fetch__note_transient(f);
	if (f->shutting_down) {
		xfer_end(x, -ECANCELED);
		return;
	}
	if (now + delay_ms * 1000000ull >= deadline) {
		xfer_end(x, -ETIMEDOUT);
		return;
	}
	STAT_ADD(f, retries, 1);
	chunk_id_to_hex(&x->fl->id, hex);
	hyd_fetch__note_error(f, "chunk %.16s: %s (retrying)", hex, x->why);
	base_debug("fetch retry chunk=%s attempt=%u delay_ms=%" PRIu64
		   " why=\"%s\"",
		   hex, x->attempts, delay_ms, x->why);
	hyd_fetch__xfer_set(x, XFER_RETRY);
	x->retry_at_ns = now + delay_ms * 1000000ull;
	hyd_fetch__arm_retry_timer(f);
}

/* A frame that failed decoding or the hash check (or an oversized body):
 * discard it, count it, and fetch once more. */
static void xfer_mismatch(struct hyd_xfer *x)
{
	STAT_ADD(x->f, mismatches, 1);
	x->mismatches++;
	if (x->mismatches >= HYD_MISMATCH_TRIES) {
		xfer_end(x, -EBADMSG);
		return;
	}
	if (x->f->shutting_down) {
		xfer_end(x, -ECANCELED);
		return;
	}
	xfer_start(x);
}

/* What the store did with a verified frame: counted, and a failure
 * logged; written before the flight ends (under the table lock), which is
 * what orders it for the done hook. */
static void store_outcome(hyd_fetch *f, struct hyd_flight *fl, int r)
{
	char hex[CHUNK_ID_HEX_LEN + 1];

	if (r < 0) {
		STAT_ADD(f, store_errors, 1);
		__atomic_store_n(&f->stats.last_store_err, r, __ATOMIC_RELAXED);
		chunk_id_to_hex(&fl->id, hex);
		base_log_err(BASE_LOG_WARN, r,
			     "cannot store a verified chunk chunk=%s dir=%s",
			     hex, hyd_store_dir(f->store));
	} else {
		__atomic_store_n(&f->stats.last_store_err, 0, __ATOMIC_RELAXED);
	}
	fl->store_rc = r;
}

/* An async put of a landed frame, on its way back to the loop. */
struct hyd_stored {
	hyd_fetch *f;
	struct hyd_flight *fl; /* holds the fetch reference */
	int rc;
	struct hyd_stored *next;
};

/* The store's syncer thread: the frame's group is done. */
static void stored_cb(void *arg, int rc)
{
	struct hyd_stored *p = arg;
	hyd_fetch *f = p->f;

	p->rc = rc;
	pthread_mutex_lock(&f->stored_lock);
	p->next = f->stored;
	f->stored = p;
	pthread_mutex_unlock(&f->stored_lock);
	uv_async_send(&f->stored_async);
}

/* Loop thread: end the flights whose frames became durable. */
static void on_stored(uv_async_t *a)
{
	hyd_fetch *f = a->loop->data;
	struct hyd_stored *p, *next;

	pthread_mutex_lock(&f->stored_lock);
	p = f->stored;
	f->stored = NULL;
	pthread_mutex_unlock(&f->stored_lock);
	for (; p; p = next) {
		next = p->next;
		store_outcome(f, p->fl, p->rc);
		hyd_flights_finish(&f->flights, p->fl, 0);
		__atomic_fetch_sub(&f->store_pending, 1, __ATOMIC_RELAXED);
		free(p);
	}
	hyd_fetch__pump(f);
	hyd_fetch__maybe_close(f);
}

int hyd_fetch__frame_land(hyd_fetch *f, struct hyd_flight *fl,
			  const uint8_t *frame, size_t frame_len, int async,
			  char *why, size_t whycap)
{
	struct hyd_stored *p;
	frame_coder *coder;
	uint8_t *raw;
	size_t n = 0;
	int r;

	raw = malloc(fl->raw_len ? fl->raw_len : 1);
	if (!raw) {
		snprintf(why, whycap, "out of memory");
		return -ENOMEM;
	}
	coder = coder_get(f);
	/* The catalog's length for this chunk bounds the decode: a frame
	 * claiming more is bad, whatever its header says. */
	r = frame_decode(coder, frame, frame_len, fl->raw_len, raw, fl->raw_len,
			 &n);
	coder_put(f, coder);
	if (r == -ENOBUFS || (r == 0 && n != fl->raw_len))
		r = -EBADMSG;
	if (r == 0)
		r = chunk_id_verify(&fl->id, raw, n);
	if (r < 0) {
		snprintf(why, whycap, "frame or hash check: %s",
			 base_errname(r));
		free(raw);
		return r;
	}
	/* Readers may go now; the store write below only makes it durable.
	 * Count first, so whoever wakes sees the counter already moved. */
	STAT_ADD(f, chunks, 1);
	__atomic_store_n(&f->stats.last_ok_ns, base_now_ns(), __ATOMIC_RELAXED);
	hyd_flights_verified(&f->flights, fl, raw);
	if (!f->store) {
		fl->store_rc = 0;
		return 0;
	}
	/* Out of memory for the async record: the waiting put still
	 * stores the frame. */
	p = async ? malloc(sizeof(*p)) : NULL;
	if (p) {
		p->f = f;
		p->fl = fl;
		__atomic_fetch_add(&f->store_pending, 1, __ATOMIC_RELAXED);
		/* the flight keeps raw until it ends, after the put */
		r = hyd_store_put_raw_async(f->store, &fl->id, frame, frame_len,
					    raw, n, stored_cb, p);
		if (r == 0)
			return HYD_LAND_STORING;
		__atomic_fetch_sub(&f->store_pending, 1, __ATOMIC_RELAXED);
		free(p);
	} else {
		r = hyd_store_put_raw(f->store, &fl->id, frame, frame_len, raw,
				      n);
	}
	store_outcome(f, fl, r);
	return 0;
}

/* libuv pool thread: decode, verify, publish, store. */
static void verify_work(uv_work_t *w)
{
	struct hyd_xfer *x = w->data;

	x->work_rc = hyd_fetch__frame_land(x->f, x->fl, x->body, x->body_len, 0,
					   x->why, sizeof(x->why));
}

/* Loop thread, after verify_work. */
static void verify_done(uv_work_t *w, int status)
{
	struct hyd_xfer *x = w->data;
	hyd_fetch *f = x->f;
	int rc = status == UV_ECANCELED ? -ECANCELED : x->work_rc;

	if (rc == -EBADMSG)
		xfer_mismatch(x);
	else
		xfer_end(x, rc);
	hyd_fetch__pump(f);
	hyd_fetch__maybe_close(f);
}

static void xfer_verify(struct hyd_xfer *x)
{
	int r;

	hyd_fetch__xfer_set(x, XFER_WORK);
	x->work.data = x;
	r = uv_queue_work(&x->f->loop, &x->work, verify_work, verify_done);
	if (r < 0) {
		snprintf(x->why, sizeof(x->why), "uv_queue_work: %s",
			 uv_strerror(r));
		xfer_end(x, -EIO);
	}
}

/* Loop thread: a transfer left curl; decide what its answer means. */
static void xfer_done(struct hyd_xfer *x, CURLcode res)
{
	long code = 0;
	int rc;

	if (x->bx) {
		hyd_fetch__batch_done(x, res);
		return;
	}
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if ((res == CURLE_OK || res == CURLE_WRITE_ERROR) && code != 200 &&
	    code != 0) {
		snprintf(x->why, sizeof(x->why), "HTTP %ld", code);
		if (code == 404)
			xfer_end(x, -ENOENT);
		else if (code == 409)
			xfer_end(x, -ESTALE);
		else if (code >= 500 || code == 408 || code == 429)
			xfer_retry(x);
		else
			xfer_end(x, -EPROTO);
		return;
	}
	if (res == CURLE_WRITE_ERROR) {
		snprintf(x->why, sizeof(x->why),
			 "response larger than a frame of %" PRIu32 " bytes",
			 x->fl->raw_len);
		xfer_mismatch(x);
		return;
	}
	if (res == CURLE_OK) {
		STAT_ADD(x->f, wire_bytes, x->body_len);
		xfer_verify(x);
		return;
	}
	snprintf(x->why, sizeof(x->why), "curl %d: %s", (int)res,
		 x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
	rc = base_curl_errno(res);
	if (base_err_transient(rc))
		xfer_retry(x);
	else
		xfer_end(x, rc);
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct hyd_xfer *x = userdata;
	size_t n = size * nmemb;
	unsigned why;

	/* Returning less than n aborts with CURLE_WRITE_ERROR: a body past
	 * frame_bound(raw_len) is not a frame of this chunk. */
	if (n > x->body_cap - x->body_len)
		return 0;
	why = hyd_fetch__gate(x, n);
	if (why) {
		/* curl keeps these bytes and hands them over again later. */
		x->paused |= why;
		return CURL_WRITEFUNC_PAUSE;
	}
	memcpy(x->body + x->body_len, ptr, n);
	x->body_len += n;
	return n;
}

/* (Re)start the transfer of x with what is left of its deadline. */
static void xfer_start(struct hyd_xfer *x)
{
	hyd_fetch *f = x->f;
	uint64_t now = base_now_ns(), deadline;
	long left_ms, conn_ms;
	CURLMcode mc;

	if (x->bx) {
		hyd_fetch__batch_start(x);
		return;
	}
	deadline = hyd_flights_deadline(&f->flights, x->fl);
	if (now >= deadline) {
		if (!x->why[0])
			snprintf(x->why, sizeof(x->why), "deadline passed");
		xfer_end(x, -ETIMEDOUT);
		return;
	}
	left_ms = (long)((deadline - now) / 1000000ull);
	if (left_ms < 1)
		left_ms = 1;
	conn_ms =
	    f->connect_timeout_ms < left_ms ? f->connect_timeout_ms : left_ms;
	curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, left_ms);
	curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, conn_ms);
	x->body_len = 0;
	x->errbuf[0] = '\0';
	x->last_rx_ns = now;
	mc = curl_multi_add_handle(f->multi, x->easy);
	if (mc != CURLM_OK) {
		snprintf(x->why, sizeof(x->why), "curl_multi_add_handle: %s",
			 curl_multi_strerror(mc));
		xfer_end(x, -EIO);
		return;
	}
	hyd_fetch__xfer_set(x, XFER_CURL);
	x->requests++;
	STAT_ADD(f, requests, 1);
}

struct hyd_xfer *hyd_fetch__xfer_alloc(hyd_fetch *f)
{
	struct hyd_xfer *x;

	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->f = f;
	x->easy = curl_easy_init();
	if (!x->easy) {
		free(x);
		return NULL;
	}
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(x->easy, CURLOPT_HTTP_VERSION,
			 (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(x->easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(x->easy, CURLOPT_USERAGENT,
			 "ferry-hydrator/" FERRY_VERSION);
	/* Options that only fail without memory; then the transfer fails,
	 * as any other would. */
	(void)hyd_curl_creds(x->easy, f->creds);
	if (f->bwlimit) {
		curl_easy_setopt(x->easy, CURLOPT_SOCKOPTFUNCTION,
				 hyd_fetch__sockopt);
		curl_easy_setopt(x->easy, CURLOPT_SOCKOPTDATA, f);
	}
	x->next = f->xfers;
	if (f->xfers)
		f->xfers->prev = x;
	f->xfers = x;
	return x;
}

static struct hyd_xfer *xfer_new(hyd_fetch *f, struct hyd_flight *fl)
{
	struct hyd_xfer *x;
	char hex[CHUNK_ID_HEX_LEN + 1];
	size_t ulen;

	x = hyd_fetch__xfer_alloc(f);
	if (!x)
		return NULL;
	x->fl = fl;
	/* The class is fixed at start: a flight bumped to demand while
	 * queued starts as demand. Readahead is a read too: backfill holds
	 * for it, so a stream gets the link (hyd_fetch__gate). */
	x->bg = fl->prio >= HYD_PRIO_NEAR;
	x->urgent = !x->bg;
	x->near = fl->prio == HYD_PRIO_NEAR;
	x->want_bytes = fl->raw_len;
	chunk_id_to_hex(&fl->id, hex);
	ulen = strlen(f->base_url) + sizeof("/chunk/") + CHUNK_ID_HEX_LEN;
	x->url = malloc(ulen);
	x->body_cap = frame_bound(fl->raw_len);
	x->body = malloc(x->body_cap);
	if (!x->url || !x->body) {
		x->fl = NULL;
		hyd_fetch__xfer_free(x);
		return NULL;
	}
	snprintf(x->url, ulen, "%s/chunk/%s", f->base_url, hex);
	curl_easy_setopt(x->easy, CURLOPT_URL, x->url);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
	/* A single GET is never held for long (only by the bucket), so
	 * curl's own low-speed check is safe for it. */
	curl_easy_setopt(x->easy, CURLOPT_LOW_SPEED_LIMIT, HYD_LOW_SPEED_BYTES);
	curl_easy_setopt(x->easy, CURLOPT_LOW_SPEED_TIME, HYD_LOW_SPEED_TIME_S);
	return x;
}

static void start_single(hyd_fetch *f, struct hyd_flight *fl)
{
	struct hyd_xfer *x = xfer_new(f, fl);

	if (!x) {
		STAT_ADD(f, failures, 1);
		hyd_flights_finish(&f->flights, fl, -ENOMEM);
		return;
	}
	xfer_start(x);
}

/* Start queued flights, most urgent first, while their lane has room.
 * Reads (demand and readahead) have read_max transfers of their own and
 * backfill bg_max: backfill can never hold what a read needs. Backfill
 * also starts nothing while a read waits for a transfer, so it only ever
 * takes what reads leave. Several queued chunks of one read class go in
 * one POST BASE/chunks (as backfill's do): a stream's window is a few
 * requests, not one per chunk. */
static void on_gather(uv_timer_t *t)
{
	hyd_fetch__pump(t->loop->data);
}

/* A backfill batch waits up to GATHER_NS for its flights to gather while
 * only a few are queued: the scheduler submits them one by one, and a
 * batch launched at the first would carry a handful of small files where
 * it could carry a thousand, for the same round trip. */
#define GATHER_NS 2000000ull

static int gather_more(hyd_fetch *f, enum hyd_prio prio)
{
	uint64_t age;

	if (hyd_flights_queued_prio(&f->flights, prio) >= f->batch_max / 8)
		return 0;
	age = hyd_flights_head_age(&f->flights, prio, base_now_ns());
	if (age >= GATHER_NS)
		return 0;
	if (!f->closed)
		uv_timer_start(&f->gather_timer, on_gather,
			       (GATHER_NS - age + 999999ull) / 1000000ull, 0);
	return 1;
}

void hyd_fetch__pump(hyd_fetch *f)
{
	struct hyd_flight *fl;
	int top, nobatch;

	while (!f->shutting_down) {
		top = hyd_flights_top(&f->flights, &nobatch);
		if (top < 0)
			break;
		if (top >= HYD_PRIO_NEAR) {
			if (f->n_bg >= f->bg_max)
				break;
			/* --cacheable: packs, or single GETs; never POST. */
			if (f->cacheable) {
				if (top == HYD_PRIO_BACKFILL && !nobatch &&
				    !f->pack_off && hyd_fetch__pack_launch(f))
					continue;
			} else if (!nobatch && !f->batch_off &&
				   f->batch_max > 1) {
				if (gather_more(f, (enum hyd_prio)top))
					break;
				if (!hyd_fetch__batch_launch(
					f, (enum hyd_prio)top))
					break;
				continue;
			}
		} else {
			if (f->n_busy - f->n_bg >= f->read_max)
				break;
			/* A lone chunk goes as a GET (cacheable, and
			 * nothing to gather); --cacheable never POSTs. */
			if (!nobatch && !f->batch_off && !f->cacheable &&
			    f->batch_max > 1 &&
			    hyd_flights_queued_prio(&f->flights,
						    (enum hyd_prio)top) > 1) {
				if (!hyd_fetch__batch_launch(
					f, (enum hyd_prio)top))
					break;
				continue;
			}
		}
		fl = hyd_flights_next(&f->flights);
		if (!fl)
			break;
		start_single(f, fl);
	}
}

/* ---- connections opened ahead (hyd_fetch_warm) ---- */

/* CURLOPT_PRIVATE of a warm-up GET: not a transfer of ours. */
static char warm_tag;

static size_t warm_discard(char *ptr, size_t size, size_t nmemb, void *ud)
{
	(void)ptr;
	(void)ud;
	return size * nmemb;
}

/* Loop thread: start the warm-up GETs asked for. One that cannot start is
 * skipped: the reads connect for themselves, as without it. */
static void warm_start(hyd_fetch *f)
{
	unsigned n = __atomic_exchange_n(&f->warm_want, 0, __ATOMIC_RELAXED);
	size_t len = strlen(f->base_url) + sizeof("/HEAD");
	char *url;

	if (!n || f->shutting_down || !f->multi)
		return;
	url = malloc(len);
	if (!url)
		return;
	snprintf(url, len, "%s/HEAD", f->base_url);
	for (unsigned i = 0; i < HYD_FETCH_WARM_MAX && n; i++) {
		CURL *e;

		if (f->warm[i])
			continue;
		n--;
		e = curl_easy_init();
		if (!e)
			break;
		/* CURLOPT_URL copies the string */
		if (hyd_curl_get_setup(e, NULL, f->creds) != CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, warm_discard) !=
			CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_PRIVATE, &warm_tag) !=
			CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
				     f->connect_timeout_ms) != CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
				     f->connect_timeout_ms) != CURLE_OK ||
		    curl_multi_add_handle(f->multi, e) != CURLM_OK) {
			curl_easy_cleanup(e);
			break;
		}
		f->warm[i] = e;
	}
	free(url);
}

/* Loop thread: a warm-up GET is done (or abandoned): its connection stays
 * in curl's cache for the transfers to come. */
static void warm_end(hyd_fetch *f, CURL *easy, int ok)
{
	for (unsigned i = 0; i < HYD_FETCH_WARM_MAX; i++)
		if (f->warm[i] == easy)
			f->warm[i] = NULL;
	if (ok)
		hyd_fetch__link_sample(f, easy);
	curl_multi_remove_handle(f->multi, easy);
	curl_easy_cleanup(easy);
}

void hyd_fetch_warm(hyd_fetch *f, unsigned n)
{
	if (!f || !f->started || !n)
		return;
	__atomic_store_n(&f->warm_want, n, __ATOMIC_RELAXED);
	uv_async_send(&f->async);
}

static void check_multi_info(hyd_fetch *f)
{
	struct hyd_xfer *x;
	CURLMsg *msg;
	CURLcode res;
	CURL *easy;
	int pending;

	while ((msg = curl_multi_info_read(f->multi, &pending))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		/* msg is invalid after remove_handle: copy what we need. */
		easy = msg->easy_handle;
		res = msg->data.result;
		x = NULL;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
		if ((void *)x == (void *)&warm_tag) {
			warm_end(f, easy, res == CURLE_OK);
			continue;
		}
		curl_multi_remove_handle(f->multi, easy);
		if (x) {
			hyd_fetch__xfer_set(x, XFER_IDLE);
			if (res == CURLE_OK)
				hyd_fetch__link_sample(f, easy);
			xfer_done(x, res);
		}
	}
}

/* ------------------------------------------------------------------ */
/* timers                                                             */
/* ------------------------------------------------------------------ */

static void on_retry_timer(uv_timer_t *t)
{
	hyd_fetch *f = t->loop->data;
	struct hyd_xfer *x, *next;
	uint64_t now = base_now_ns();

	for (x = f->xfers; x; x = next) {
		next = x->next;
		if (x->where == XFER_RETRY && x->retry_at_ns <= now)
			xfer_start(x);
	}
	hyd_fetch__arm_retry_timer(f);
	hyd_fetch__pump(f);
}

void hyd_fetch__arm_retry_timer(hyd_fetch *f)
{
	struct hyd_xfer *x;
	uint64_t next = UINT64_MAX, now = base_now_ns();

	for (x = f->xfers; x; x = x->next)
		if (x->where == XFER_RETRY && x->retry_at_ns < next)
			next = x->retry_at_ns;
	if (next == UINT64_MAX) {
		uv_timer_stop(&f->retry_timer);
		return;
	}
	uv_timer_start(&f->retry_timer, on_retry_timer,
		       next > now ? (next - now + 999999ull) / 1000000ull : 0,
		       0);
}

static void on_curl_timeout(uv_timer_t *t)
{
	hyd_fetch *f = t->loop->data;
	int running;

	curl_multi_socket_action(f->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_multi_info(f);
	hyd_fetch__pump(f);
}

/* CURLMOPT_TIMERFUNCTION: curl wants socket_action called after ms. */
static int on_curl_timer(CURLM *multi, long ms, void *userp)
{
	hyd_fetch *f = userp;

	(void)multi;
	if (f->closed)
		return 0;
	if (ms < 0)
		uv_timer_stop(&f->curl_timer);
	else
		uv_timer_start(&f->curl_timer, on_curl_timeout, (uint64_t)ms,
			       0);
	return 0;
}

/* ------------------------------------------------------------------ */
/* sockets                                                            */
/* ------------------------------------------------------------------ */

static void on_poll_close(uv_handle_t *h)
{
	free(h->data);
}

static void poll_drop(hyd_fetch *f, struct hyd_poll *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		f->polls = p->next;
	if (p->next)
		p->next->prev = p->prev;
	uv_poll_stop(&p->h);
	uv_close((uv_handle_t *)&p->h, on_poll_close);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct hyd_poll *p = h->data;
	hyd_fetch *f = p->f;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	/* p may be closed by the socket callback inside; do not touch it
	 * after this call. */
	curl_multi_socket_action(f->multi, p->fd, flags, &running);
	check_multi_info(f);
	hyd_fetch__pump(f);
}

/* CURLMOPT_SOCKETFUNCTION: watch (or stop watching) one socket. */
static int on_socket(CURL *easy, curl_socket_t s, int action, void *userp,
		     void *socketp)
{
	hyd_fetch *f = userp;
	struct hyd_poll *p = socketp;
	int events = 0, r;

	(void)easy;
	if (action == CURL_POLL_REMOVE) {
		if (p) {
			if (!f->cleaning)
				curl_multi_assign(f->multi, s, NULL);
			poll_drop(f, p);
		}
		return 0;
	}
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return -1;
		r = uv_poll_init_socket(&f->loop, &p->h, s);
		if (r < 0) {
			base_error("uv_poll_init_socket failed fd=%d "
				   "err=\"%s\"",
				   (int)s, uv_strerror(r));
			free(p);
			return -1;
		}
		p->h.data = p;
		p->f = f;
		p->fd = s;
		p->next = f->polls;
		if (f->polls)
			f->polls->prev = p;
		f->polls = p;
		curl_multi_assign(f->multi, s, p);
	}
	if (action == CURL_POLL_IN || action == CURL_POLL_INOUT)
		events |= UV_READABLE;
	if (action == CURL_POLL_OUT || action == CURL_POLL_INOUT)
		events |= UV_WRITABLE;
	uv_poll_start(&p->h, events, on_poll);
	return 0;
}

/* ------------------------------------------------------------------ */
/* loop lifecycle                                                     */
/* ------------------------------------------------------------------ */

static void close_handles(hyd_fetch *f)
{
	uv_handle_t *hs[] = {
	    (uv_handle_t *)&f->async,	     (uv_handle_t *)&f->stored_async,
	    (uv_handle_t *)&f->curl_timer,   (uv_handle_t *)&f->retry_timer,
	    (uv_handle_t *)&f->pace_timer,   (uv_handle_t *)&f->tick_timer,
	    (uv_handle_t *)&f->gather_timer,
	};
	size_t i;

	f->closed = 1;
	for (i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
		if (!uv_is_closing(hs[i]))
			uv_close(hs[i], NULL);
}

/* Once shutting down and no transfer is left (pool work included), tear
 * curl down while the loop still runs, so its last socket callbacks can
 * close their polls; then close our handles and let uv_run return. */
void hyd_fetch__maybe_close(hyd_fetch *f)
{
	if (!f->shutting_down || f->xfers || f->closed || f->fq_len ||
	    f->fw_running ||
	    __atomic_load_n(&f->store_pending, __ATOMIC_RELAXED))
		return;
	f->cleaning = 1;
	curl_multi_cleanup(f->multi);
	f->multi = NULL;
	while (f->polls)
		poll_drop(f, f->polls);
	close_handles(f);
}

static void begin_shutdown(hyd_fetch *f)
{
	struct hyd_xfer *x, *next;

	f->shutting_down = 1;
	for (unsigned i = 0; i < HYD_FETCH_WARM_MAX; i++)
		if (f->warm[i])
			warm_end(f, f->warm[i], 0);
	for (x = f->xfers; x; x = next) {
		next = x->next;
		if (x->where == XFER_CURL) {
			curl_multi_remove_handle(f->multi, x->easy);
			xfer_end(x, -ECANCELED);
		} else if (x->where == XFER_RETRY) {
			xfer_end(x, -ECANCELED);
		}
		/* XFER_WORK: verify_done ends it. */
	}
	hyd_fetch__fwork_cancel_queued(f);
	uv_timer_stop(&f->retry_timer);
	uv_timer_stop(&f->pace_timer);
	uv_timer_stop(&f->tick_timer);
	uv_timer_stop(&f->gather_timer);
	hyd_fetch__maybe_close(f);
}

static void on_async(uv_async_t *a)
{
	hyd_fetch *f = a->loop->data;

	if (f->shutting_down)
		return;
	/* The table is closed (and this wake-up sent) under its lock, so no
	 * kick can follow once we see it closed. */
	if (!hyd_flights_is_open(&f->flights)) {
		begin_shutdown(f);
		return;
	}
	warm_start(f);
	hyd_fetch__pump(f);
}

static void kick(void *arg)
{
	hyd_fetch *f = arg;

	uv_async_send(&f->async);
}

static void *loop_main(void *arg)
{
	hyd_fetch *f = arg;

	base_thread_name("fetch");
	uv_run(&f->loop, UV_RUN_DEFAULT);
	uv_loop_close(&f->loop);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* public                                                             */
/* ------------------------------------------------------------------ */

/* The single-flight table's have hook: is the chunk in the store? */
static int store_have(void *arg, const chunk_id *id)
{
	return hyd_store_has(arg, id);
}

int hyd_fetch_new(const struct hyd_fetch_config *cfg, hyd_fetch **ret)
{
	hyd_fetch *f;
	int r;

	*ret = NULL;
	if (!cfg->base_url || !cfg->connections || !cfg->max_raw ||
	    cfg->max_raw > CHUNK_MAX_LIMIT)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->base_url = strdup(cfg->base_url);
	if (!f->base_url) {
		free(f);
		return -ENOMEM;
	}
	/* "…/v1/NAME/" and "…/v1/NAME" name the same base. */
	while (strlen(f->base_url) &&
	       f->base_url[strlen(f->base_url) - 1] == '/')
		f->base_url[strlen(f->base_url) - 1] = '\0';
	f->store = cfg->store;
	f->max_raw = cfg->max_raw;
	f->connections = cfg->connections;
	f->read_max = cfg->read_connections ? cfg->read_connections
					    : HYD_READ_CONNS_DEFAULT;
	if (f->read_max < cfg->connections)
		f->read_max = cfg->connections;
	f->read_batch_bytes = cfg->read_batch_bytes
				  ? cfg->read_batch_bytes
				  : HYD_READ_BATCH_BYTES_DEFAULT;
	f->connect_timeout_ms =
	    cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 5000;
	f->rng = base_now_ns() | 1;
	/* The last transfer is never backfill's (unless there is only one:
	 * then backfill may use it, and demand still goes first in pump). */
	f->bg_max = f->connections;
	if (cfg->bg_connections && cfg->bg_connections < f->bg_max)
		f->bg_max = cfg->bg_connections;
	f->connections = f->bg_max + f->read_max;
	f->batch_max = cfg->batch_max ? cfg->batch_max : HYD_BATCH_MAX_DEFAULT;
	f->cacheable = cfg->cacheable;
	if (f->batch_max > HYD_BATCH_MAX_IDS)
		f->batch_max = HYD_BATCH_MAX_IDS;
	f->batch_bytes =
	    cfg->batch_bytes ? cfg->batch_bytes : HYD_BATCH_BYTES_DEFAULT;
	f->bwlimit = cfg->bwlimit;
	f->creds = cfg->creds;
	r = -ENOMEM;
	f->batch_url = malloc(strlen(f->base_url) + sizeof("/chunks"));
	if (!f->batch_url)
		goto fail;
	snprintf(f->batch_url, strlen(f->base_url) + sizeof("/chunks"),
		 "%s/chunks", f->base_url);
	r = -pthread_mutex_init(&f->coder_lock, NULL);
	if (r < 0)
		goto fail;
	r = -pthread_mutex_init(&f->err_lock, NULL);
	if (r < 0) {
		pthread_mutex_destroy(&f->coder_lock);
		goto fail;
	}
	r = -pthread_mutex_init(&f->stored_lock, NULL);
	if (r == 0)
		r = hyd_flights_init(&f->flights, kick, f);
	if (r < 0) {
		pthread_mutex_destroy(&f->stored_lock);
		pthread_mutex_destroy(&f->err_lock);
		pthread_mutex_destroy(&f->coder_lock);
		goto fail;
	}
	if (f->store)
		hyd_flights_set_have_hook(&f->flights, store_have, f->store);
	*ret = f;
	return 0;
fail:
	free(f->batch_url);
	free(f->base_url);
	free(f);
	return r;
}

int hyd_fetch_start(hyd_fetch *f)
{
	sigset_t all, old;
	int r;

	if (f->started)
		return -EALREADY;
	r = uv_loop_init(&f->loop);
	if (r < 0)
		return r;
	f->loop.data = f;
	uv_async_init(&f->loop, &f->async, on_async);
	uv_async_init(&f->loop, &f->stored_async, on_stored);
	uv_timer_init(&f->loop, &f->curl_timer);
	uv_timer_init(&f->loop, &f->retry_timer);
	uv_timer_init(&f->loop, &f->gather_timer);
	hyd_fetch__pace_init(f);
	f->multi = curl_multi_init();
	if (!f->multi) {
		r = -ENOMEM;
		goto fail;
	}
	curl_multi_setopt(f->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(f->multi, CURLMOPT_SOCKETDATA, f);
	curl_multi_setopt(f->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(f->multi, CURLMOPT_TIMERDATA, f);
	curl_multi_setopt(f->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
			  (long)f->connections);
	/* Keep every connection we may use alive between requests. */
	curl_multi_setopt(f->multi, CURLMOPT_MAXCONNECTS,
			  (long)f->connections * 2);
	hyd_flights_open(&f->flights);
	/* The loop thread (and the libuv pool threads it spawns) must not
	 * take SIGTERM/SIGINT: those belong to the FUSE main thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&f->thread, NULL, loop_main, f);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		hyd_flights_close(&f->flights, -ECANCELED);
		goto fail;
	}
	f->started = 1;
	return 0;
fail:
	if (f->multi)
		curl_multi_cleanup(f->multi);
	f->multi = NULL;
	close_handles(f);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	uv_loop_close(&f->loop);
	f->closed = 0;
	return r;
}

void hyd_fetch_stop(hyd_fetch *f)
{
	if (!f || !f->started)
		return;
	/* Closing the table ends queued flights and kicks the loop, which
	 * then cancels what it owns and closes down. */
	hyd_flights_close(&f->flights, -ECANCELED);
	pthread_join(f->thread, NULL);
	f->started = 0;
}

void hyd_fetch_cancel(hyd_fetch *f)
{
	/* The loop notices the closed table and shuts down on its own. */
	hyd_flights_close(&f->flights, -ECANCELED);
}

void hyd_fetch_free(hyd_fetch *f)
{
	size_t i;

	if (!f)
		return;
	hyd_fetch_stop(f);
	hyd_flights_close(&f->flights, -ECANCELED);
	hyd_flights_fini(&f->flights);
	for (i = 0; i < f->n_coders; i++)
		frame_coder_free(f->coders[i]);
	pthread_mutex_destroy(&f->coder_lock);
	pthread_mutex_destroy(&f->err_lock);
	pthread_mutex_destroy(&f->stored_lock);
	free(f->batch_url);
	free(f->base_url);
	free(f);
}

int hyd_fetch_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
}

void hyd_fetch_global_cleanup(void)
{
	curl_global_cleanup();
}

int hyd_fetch_submit(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
		     enum hyd_prio prio, uint64_t deadline_ns,
		     struct hyd_flight **ret)
{
	*ret = NULL;
	if (!raw_len || raw_len > f->max_raw)
		return -EINVAL;
	return hyd_flights_join(&f->flights, id, raw_len, prio, deadline_ns,
				ret);
}

int hyd_fetch_submit_pack(hyd_fetch *f, struct hyd_pack_obj *obj,
			  const uint8_t *want, unsigned watched,
			  struct hyd_flight **fls, uint8_t *state)
{
	return hyd_flights_join_pack(&f->flights, obj, want, HYD_PRIO_BACKFILL,
				     watched ? 1 : 0, fls, state);
}

int hyd_fetch_packs(const hyd_fetch *f)
{
	return f->cacheable && !__atomic_load_n(&f->pack_off, __ATOMIC_RELAXED);
}

const char *hyd_fetch_base_url(const hyd_fetch *f)
{
	return f->base_url;
}

int hyd_fetch_submit_checked(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
			     enum hyd_prio prio, uint64_t deadline_ns,
			     unsigned watched, struct hyd_flight **ret)
{
	*ret = NULL;
	if (!raw_len || raw_len > f->max_raw)
		return -EINVAL;
	return hyd_flights_join_checked(&f->flights, id, raw_len, prio,
					deadline_ns, watched, ret);
}

uint32_t hyd_fetch_stamp(hyd_fetch *f, const chunk_id *id)
{
	return hyd_flights_stamp(&f->flights, id);
}

int hyd_fetch_submit_after(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
			   enum hyd_prio prio, uint64_t deadline_ns,
			   unsigned watched, uint32_t stamp,
			   struct hyd_flight **ret)
{
	*ret = NULL;
	if (!raw_len || raw_len > f->max_raw)
		return -EINVAL;
	return hyd_flights_join_after(&f->flights, id, raw_len, prio,
				      deadline_ns, watched, stamp, ret);
}

void hyd_fetch_note_read(hyd_fetch *f)
{
	uint64_t now = base_now_ns();

	/* One relaxed store a millisecond at most: reads come by the
	 * thousand a second. */
	if (now >
	    __atomic_load_n(&f->read_at_ns, __ATOMIC_RELAXED) + 1000000ull)
		__atomic_store_n(&f->read_at_ns, now, __ATOMIC_RELAXED);
}

int hyd_fetch_wait(hyd_fetch *f, struct hyd_flight *fl, uint64_t deadline_ns)
{
	return hyd_flights_wait(&f->flights, fl, deadline_ns);
}

/* How long a demand read waits on a flight of backfill's before it
 * rescues it: a round trip (at most 200 ms), the time a chunk already on
 * its way needs at most to come; before any is measured, a WAN's. Near
 * the source (a round trip under HYD_FETCH_WAN_RTT_NS) never (0): a
 * reader of the whole tree behind backfill (tar of a mount at 200
 * Mbit/s) joins its flights all along, and rescuing them after a couple
 * of milliseconds fetched them twice (the small tree complete in
 * 8.1-8.3 s against 6.9-7.0 s). */
static uint64_t rescue_after(const hyd_fetch *f)
{
	uint64_t rtt = __atomic_load_n(&f->rtt_ns, __ATOMIC_RELAXED);

	if (!rtt)
		return HYD_RESCUE_UNKNOWN_NS;
	if (rtt < HYD_FETCH_WAN_RTT_NS)
		return 0;
	return rtt > 200000000ull ? 200000000ull : rtt;
}

int hyd_fetch_wait_demand(hyd_fetch *f, struct hyd_flight **fl,
			  uint64_t deadline_ns)
{
	struct hyd_flight *r = NULL, *won;
	uint64_t after = rescue_after(f), soon = base_now_ns() + after;
	int rc;

	if (!after || soon >= deadline_ns)
		return hyd_flights_wait(&f->flights, *fl, deadline_ns);
	rc = hyd_flights_wait(&f->flights, *fl, soon);
	if (rc != -ETIMEDOUT)
		return rc;
	rc = hyd_flights_rescue(&f->flights, *fl, HYD_PRIO_DEMAND, deadline_ns,
				&r);
	if (rc == 1)
		STAT_ADD(f, rescues, 1);
	if (!r)
		return hyd_flights_wait(&f->flights, *fl, deadline_ns);
	rc = hyd_flights_wait_either(&f->flights, *fl, r, deadline_ns, &won);
	if (rc == 0 && won == r) {
		hyd_flights_release(&f->flights, *fl);
		*fl = r;
	} else {
		hyd_flights_release(&f->flights, r);
	}
	return rc;
}

int hyd_fetch_rescue(hyd_fetch *f, struct hyd_flight *fl, enum hyd_prio prio)
{
	struct hyd_flight *r = NULL;
	int rc;

	rc = hyd_flights_rescue(&f->flights, fl, prio, HYD_DEADLINE_NONE, &r);
	if (rc == 1)
		STAT_ADD(f, rescues, 1);
	hyd_flights_release(&f->flights, r);
	return rc == 1;
}

int hyd_fetch_ready(hyd_fetch *f, struct hyd_flight *fl)
{
	return hyd_flights_ready(&f->flights, fl);
}

uint64_t hyd_fetch_deadline(hyd_fetch *f, struct hyd_flight *fl)
{
	return hyd_flights_deadline(&f->flights, fl);
}

void hyd_fetch_release(hyd_fetch *f, struct hyd_flight *fl)
{
	hyd_flights_release(&f->flights, fl);
}

void hyd_fetch_stats(hyd_fetch *f, struct hyd_fetch_stats *ret)
{
	ret->requests = __atomic_load_n(&f->stats.requests, __ATOMIC_RELAXED);
	ret->chunks = __atomic_load_n(&f->stats.chunks, __ATOMIC_RELAXED);
	ret->wire_bytes =
	    __atomic_load_n(&f->stats.wire_bytes, __ATOMIC_RELAXED);
	ret->failures = __atomic_load_n(&f->stats.failures, __ATOMIC_RELAXED);
	ret->mismatches =
	    __atomic_load_n(&f->stats.mismatches, __ATOMIC_RELAXED);
	ret->retries = __atomic_load_n(&f->stats.retries, __ATOMIC_RELAXED);
	ret->store_errors =
	    __atomic_load_n(&f->stats.store_errors, __ATOMIC_RELAXED);
	ret->batches = __atomic_load_n(&f->stats.batches, __ATOMIC_RELAXED);
	ret->batch_bytes =
	    __atomic_load_n(&f->stats.batch_bytes, __ATOMIC_RELAXED);
	ret->batch_frames =
	    __atomic_load_n(&f->stats.batch_frames, __ATOMIC_RELAXED);
	ret->rescues = __atomic_load_n(&f->stats.rescues, __ATOMIC_RELAXED);
	ret->queued = hyd_flights_queued(&f->flights);
	ret->active = __atomic_load_n(&f->stats.active, __ATOMIC_RELAXED);
	ret->last_ok_ns =
	    __atomic_load_n(&f->stats.last_ok_ns, __ATOMIC_RELAXED);
	ret->last_store_err =
	    __atomic_load_n(&f->stats.last_store_err, __ATOMIC_RELAXED);
	pthread_mutex_lock(&f->err_lock);
	ret->last_error_ns = f->stats.last_error_ns;
	memcpy(ret->last_error, f->stats.last_error, sizeof(ret->last_error));
	pthread_mutex_unlock(&f->err_lock);
}

int hyd_fetch_submit_watched(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
			     enum hyd_prio prio, uint64_t deadline_ns,
			     struct hyd_flight **ret)
{
	*ret = NULL;
	if (!raw_len || raw_len > f->max_raw)
		return -EINVAL;
	return hyd_flights_join_watched(&f->flights, id, raw_len, prio,
					deadline_ns, ret);
}

void hyd_fetch_set_done_hook(
    hyd_fetch *f,
    void (*done)(void *arg, const struct hyd_flight *fl, int result), void *arg)
{
	hyd_flights_set_done_hook(&f->flights, done, arg);
}
