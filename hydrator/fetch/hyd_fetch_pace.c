/*
 * hydrator/fetch/hyd_fetch_pace.c — who may receive bytes right now.
 *
 * Every write callback asks hyd_fetch__gate before taking bytes; a "no"
 * pauses that transfer (CURL_WRITEFUNC_PAUSE: curl keeps the bytes and
 * stops reading the socket, so TCP pushes back on the sender) and the pace
 * timer lets it go again later with curl_easy_pause. Three reasons:
 *   - the --bwlimit token bucket is empty. One bucket for the whole
 *     hydrator, so demand and backfill together stay under the cap; when
 *     tokens come back, urgent transfers are let go first;
 *   - a demand transfer is running: backfill holds still, so a cold read
 *     gets the link (and the server's attention) to itself; readahead
 *     does not hold it (a sequential reader behind the backfill would
 *     otherwise leave the link idle between its requests);
 *   - someone browses (FUSE metadata requests in the last moment,
 *     hyd_fetch_hold_background): backfill holds still, so the CPU and
 *     the link go to `ls -lR` or `find` first;
 *   - too many batch frames wait for verification: the batch pauses until
 *     the pool catches up (memory stays bounded).
 * A once-a-second tick is the stall watchdog of batch transfers. curl's
 * CURLOPT_LOW_SPEED is not used for them: its timer keeps running across
 * long pauses and would then cut a healthy transfer the moment it
 * resumes; here the clock restarts whenever a transfer is let go.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/fetch/hyd_fetch_loop_priv.h"
#include "hydrator/hydrator.h"

#define PACE_RETRY_MS 20u /* look again this soon while held */
/* The watchdog's and the link meter's tick: a rate sample each quarter
 * second follows a stream whose window grows within a second. */
#define TICK_MS 250u
#define FW_BACKLOG 64u /* batch frames waiting for verification */
/* Failing this long with no chunk through, the link counts as down. */
#define DOWN_AFTER_NS 2000000000ull
#define STALL_NS ((uint64_t)HYD_LOW_SPEED_TIME_S * 1000000000ull)
#define RCVBUF_MIN (32u * 1024u)
#define RCVBUF_MAX (4u * 1024u * 1024u)

static void on_tick(uv_timer_t *t);
static void on_pace(uv_timer_t *t);

void hyd_pool_default(void)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", HYD_POOL_THREADS);
	/* 0: a size the user set stays */
	setenv("UV_THREADPOOL_SIZE", v, 0);
}

void hyd_fetch__pace_init(hyd_fetch *f)
{
	const char *env = getenv("UV_THREADPOOL_SIZE");
	long pool = 4; /* libuv's default */

	uv_timer_init(&f->loop, &f->pace_timer);
	uv_timer_init(&f->loop, &f->tick_timer);
	if (env && base_parse_long(env, 1, 1024, &pool) < 0)
		pool = 4;
	/* Most of the pool for batch frames, four threads (half of a small
	 * pool) always free for demand reads' frames. (Batch frames are put
	 * with hyd_store_put_async, so a landing thread no longer waits for
	 * its group; the split stays for the demand reads.) */
	f->fw_max = pool >= 8 ? (unsigned)(pool - 4)
			      : (pool >= 2 ? (unsigned)(pool / 2) : 1);
	if (f->bwlimit)
		hyd_bucket_init(&f->bucket, f->bwlimit, base_now_ns());
	uv_timer_start(&f->tick_timer, on_tick, TICK_MS, TICK_MS);
}

/* Backfill holds while reads have more than this on the wire: half the
 * link's bandwidth-delay product (as measured), at least HOLD_MIN_BYTES,
 * HOLD_UNKNOWN_BYTES until it is measured. Reads that are bound by round
 * trips (a few chunks each, many readers) leave the link mostly idle, and
 * backfill filling it is what makes their next reads hits; a stream whose
 * window fills the link gets it to itself. */
#define HOLD_MIN_BYTES (1ull << 20)
#define HOLD_UNKNOWN_BYTES (4ull << 20)
/* Browsing holds backfill only while no job reads: a read in the last
 * second says the lookups are a job's, which needs the backfill (an
 * import-like walk that reads each file as it finds it would otherwise
 * wait a round trip per directory with backfill held all along). Not
 * only a read that waited for the wire: a job that reads the hydrated
 * part of a tree for days would then hold the rest of it back as long. */
#define READ_RECENT_NS 1000000000ull

static uint64_t hold_bytes(const hyd_fetch *f)
{
	uint64_t rate = __atomic_load_n(&f->rate_bps, __ATOMIC_RELAXED);
	uint64_t rtt = __atomic_load_n(&f->rtt_ns, __ATOMIC_RELAXED), b;

	if (!rate || !rtt)
		return HOLD_UNKNOWN_BYTES;
	b = rate > UINT64_MAX / rtt ? UINT64_MAX : rate * rtt / 2000000000ull;
	return b > HOLD_MIN_BYTES ? b : HOLD_MIN_BYTES;
}

/* Someone browses and no job reads (see READ_RECENT_NS). */
static int browse_hold(hyd_fetch *f, uint64_t now)
{
	return now < __atomic_load_n(&f->browse_until_ns, __ATOMIC_RELAXED) &&
	       now > __atomic_load_n(&f->read_at_ns, __ATOMIC_RELAXED) +
			 READ_RECENT_NS;
}

/* The reasons that still hold x back. */
static unsigned pause_reasons(hyd_fetch *f, const struct hyd_xfer *x)
{
	uint64_t now;
	unsigned why = 0;

	/* What follows the job (the files around what it opened) is the
	 * job's too: it shares the link with the reads, it is not held. */
	if (x->bg && !x->near) {
		now = base_now_ns();
		if (f->urgent_bytes > hold_bytes(f) || browse_hold(f, now))
			why |= HYD_PAUSE_HOLD;
	}
	if (x->bx && f->fq_len + f->fw_running >= FW_BACKLOG)
		why |= HYD_PAUSE_WORK;
	if (f->bwlimit && !hyd_bucket_ready(&f->bucket))
		why |= HYD_PAUSE_BUCKET;
	return why;
}

static void pace_arm(hyd_fetch *f, uint64_t ms)
{
	if (f->closed)
		return;
	/* An earlier wake-up already armed wins: restarting would delay. */
	if (f->pace_armed && uv_timer_get_due_in(&f->pace_timer) <= ms)
		return;
	f->pace_armed = 1;
	uv_timer_start(&f->pace_timer, on_pace, ms, 0);
}

unsigned hyd_fetch__gate(struct hyd_xfer *x, size_t n)
{
	hyd_fetch *f = x->f;
	uint64_t now = base_now_ns(), wait_ms = PACE_RETRY_MS;
	unsigned why;

	if (f->bwlimit)
		hyd_bucket_refill(&f->bucket, now);
	why = pause_reasons(f, x);
	if (why) {
		if (why == HYD_PAUSE_BUCKET)
			wait_ms = (hyd_bucket_wait_ns(&f->bucket) + 999999ull) /
				  1000000ull;
		pace_arm(f, wait_ms);
		return why;
	}
	if (f->bwlimit)
		hyd_bucket_take(&f->bucket, n);
	x->last_rx_ns = now;
	return 0;
}

void hyd_fetch_hold_background(hyd_fetch *f, unsigned ms)
{
	uint64_t until = base_now_ns() + (uint64_t)ms * 1000000ull;

	/* One relaxed store per call, so a burst of lookups costs nothing;
	 * a racing older value only shortens one hold. */
	if (until >
	    __atomic_load_n(&f->browse_until_ns, __ATOMIC_RELAXED) + 1000000ull)
		__atomic_store_n(&f->browse_until_ns, until, __ATOMIC_RELAXED);
}

int hyd_fetch_browsing(hyd_fetch *f)
{
	return browse_hold(f, base_now_ns());
}

int hyd_fetch_serving(hyd_fetch *f, uint64_t within_ns)
{
	uint64_t now = base_now_ns();

	return now < __atomic_load_n(&f->browse_until_ns, __ATOMIC_RELAXED) ||
	       now < __atomic_load_n(&f->read_at_ns, __ATOMIC_RELAXED) +
			 within_ns;
}

/* Let go every paused transfer whose reasons are gone, urgent ones first
 * (they take the tokens before backfill sees any). */
static void on_pace(uv_timer_t *t)
{
	hyd_fetch *f = t->loop->data;
	struct hyd_xfer *x;
	uint64_t now = base_now_ns(), wait_ms = PACE_RETRY_MS;
	int pass, still = 0;

	f->pace_armed = 0;
	if (f->shutting_down)
		return;
	if (f->bwlimit)
		hyd_bucket_refill(&f->bucket, now);
	for (pass = 0; pass < 2; pass++) {
		for (x = f->xfers; x; x = x->next) {
			if (x->where != XFER_CURL || !x->paused ||
			    x->urgent != (pass == 0))
				continue;
			if (pause_reasons(f, x)) {
				still = 1;
				continue;
			}
			x->paused = 0;
			x->last_rx_ns = now;
			/* May call the write callback at once with the bytes
			 * curl kept, which may pause it again. The transfer
			 * stays on the list either way: only
			 * check_multi_info removes one. */
			curl_easy_pause(x->easy, CURLPAUSE_CONT);
			if (x->paused)
				still = 1;
		}
	}
	if (still && !f->pace_armed) {
		if (f->bwlimit && !hyd_bucket_ready(&f->bucket))
			wait_ms = (hyd_bucket_wait_ns(&f->bucket) + 999999ull) /
				  1000000ull;
		pace_arm(f, wait_ms ? wait_ms : 1);
	}
}

void hyd_fetch__pace_kick(hyd_fetch *f)
{
	struct hyd_xfer *x;

	if (f->closed)
		return;
	for (x = f->xfers; x; x = x->next)
		if (x->paused)
			break;
	if (x)
		pace_arm(f, 0);
}

/* Batch transfers that got no byte for STALL_NS while not paused are cut
 * and retried (the link or the server is gone without a word). */
static void on_tick(uv_timer_t *t)
{
	hyd_fetch *f = t->loop->data;
	struct hyd_xfer *x, *next;
	uint64_t now = base_now_ns();

	if (f->shutting_down)
		return;
	hyd_fetch__link_tick(f, now);
	/* While nothing gets through, time in the queue counts: reads
	 * waiting there for a link that is down get their EIO on time. */
	if (f->down_since &&
	    __atomic_load_n(&f->stats.last_ok_ns, __ATOMIC_RELAXED) <
		f->down_since &&
	    now - f->down_since >= DOWN_AFTER_NS)
		STAT_ADD(f, failures, hyd_flights_expire(&f->flights, now));
	for (x = f->xfers; x; x = next) {
		next = x->next;
		if (!x->bx || x->where != XFER_CURL || x->paused ||
		    now - x->last_rx_ns < STALL_NS)
			continue;
		curl_multi_remove_handle(f->multi, x->easy);
		hyd_fetch__xfer_set(x, XFER_IDLE);
		snprintf(x->errbuf, sizeof(x->errbuf),
			 "stalled: no bytes for %ld s", HYD_LOW_SPEED_TIME_S);
		hyd_fetch__batch_done(x, CURLE_OPERATION_TIMEDOUT);
	}
	hyd_fetch__pump(f);
}

int hyd_fetch__sockopt(void *clientp, curl_socket_t fd, curlsocktype purpose)
{
	hyd_fetch *f = clientp;
	uint64_t want = f->bwlimit / 16;
	int v;

	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKOPT_OK;
	/* A small receive buffer keeps what the kernel accepts on our
	 * behalf (beyond the bucket's sight) to a sixteenth of a second
	 * (the kernel doubles it). */
	if (want < RCVBUF_MIN)
		want = RCVBUF_MIN;
	if (want > RCVBUF_MAX)
		want = RCVBUF_MAX;
	v = (int)want;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	return CURL_SOCKOPT_OK;
}

/* A round trip estimate lives two epochs, so one slow answer (a server
 * reading a cold disk) never counts, and a changed path is learnt within
 * two epochs. */
#define LINK_EPOCH_NS 10000000000ull
#define LINK_RATE_TICKS 32u /* 8 s */

static uint64_t rtt_epoch_est(const struct hyd_rtt *r)
{
	unsigned i = HYD_RTT_LOW;

	while (i > 0 && !r->low[i - 1])
		i--;
	return i ? r->low[i - 1] : 0;
}

uint64_t hyd_rtt_add(struct hyd_rtt *r, uint64_t ns, uint64_t now)
{
	uint64_t best, prev;
	unsigned i;

	if (now - r->epoch_ns >= LINK_EPOCH_NS) {
		prev = rtt_epoch_est(r);
		if (prev)
			r->prev = prev;
		memset(r->low, 0, sizeof(r->low));
		r->epoch_ns = now;
	}
	if (ns) {
		for (i = 0; i < HYD_RTT_LOW; i++)
			if (!r->low[i] || ns < r->low[i])
				break;
		if (i < HYD_RTT_LOW) {
			memmove(&r->low[i + 1], &r->low[i],
				(HYD_RTT_LOW - 1 - i) * sizeof(r->low[0]));
			r->low[i] = ns;
		}
	}
	best = rtt_epoch_est(r);
	if (r->prev && (!best || r->prev < best))
		best = r->prev;
	return best;
}

void hyd_fetch__link_sample(hyd_fetch *f, CURL *easy)
{
	uint64_t ns = hyd_curl_rtt_ns(easy);

	if (!ns)
		return;
	__atomic_store_n(&f->rtt_ns, hyd_rtt_add(&f->rtt, ns, base_now_ns()),
			 __ATOMIC_RELAXED);
}

void hyd_fetch_link_seed(hyd_fetch *f, uint64_t rtt_ns)
{
	if (!rtt_ns || f->rtt.low[0])
		return;
	__atomic_store_n(&f->rtt_ns,
			 hyd_rtt_add(&f->rtt, rtt_ns, base_now_ns()),
			 __ATOMIC_RELAXED);
}

void hyd_fetch__link_tick(hyd_fetch *f, uint64_t now)
{
	uint64_t bytes =
	    __atomic_load_n(&f->stats.wire_bytes, __ATOMIC_RELAXED);
	uint64_t dt = now - f->rate_last_ns, best = 0;
	unsigned i;

	if (f->rate_last_ns && dt > 0) {
		f->rate_ring[f->rate_pos++ % LINK_RATE_TICKS] =
		    (bytes - f->rate_last_bytes) * 1000000000ull / dt;
		for (i = 0; i < LINK_RATE_TICKS; i++)
			if (f->rate_ring[i] > best)
				best = f->rate_ring[i];
		__atomic_store_n(&f->rate_bps, best, __ATOMIC_RELAXED);
	}
	f->rate_last_bytes = bytes;
	f->rate_last_ns = now;
}

void hyd_fetch_link(const hyd_fetch *f, uint64_t *ret_rate, uint64_t *ret_rtt)
{
	*ret_rate = __atomic_load_n(&f->rate_bps, __ATOMIC_RELAXED);
	*ret_rtt = __atomic_load_n(&f->rtt_ns, __ATOMIC_RELAXED);
}
