/*
 * hydrator/fetch/hyd_fetch_batch.c — backfill's transfers: one POST BASE/chunks
 * carries up to batch_max flights (or batch_bytes of raw data), and the
 * answer is parsed as it streams in (hyd_batch_parse.c). Each frame that
 * completes becomes a frame work: decode, verify, publish, store, in the
 * libuv pool — never on the loop — exactly as a single GET's frame.
 *
 * What already arrived stands; whatever did not is the batch's to retry:
 *   - no answer at all (refused, reset, timeout), 5xx: the rest of the
 *     batch backs off and tries again, for as long as its flights'
 *     deadlines allow (backfill's never pass);
 *   - a body that broke after the status (truncated, a wrong id, a bad
 *     header, the replicator cutting the stream on a changed source): the
 *     flight where it broke is sent off alone as a GET, which gets the
 *     precise answer (404, 409, a mismatch retried once) a batch cannot
 *     give; the rest backs off and goes again;
 *   - 404 or another 4xx for the whole batch: every flight goes alone;
 *     405, 501, and a 404 without the replicator's JSON error body mean
 *     the server does no batches (a static layout behind nginx or in a
 *     bucket): from then on every flight is a GET.
 * A frame failing its hash is counted, never stored, and fetched again
 * alone. Frames wait in a bounded queue for a pool slot; while it is full
 * the batch transfers are paused (hyd_fetch_pace.c), so memory stays
 * bounded and the pool always has room for a demand read's frame.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch_loop_priv.h"

/* Most bytes of an error body we read (and drop) before giving up. */
#define HYD_BATCH_ERRBODY_MAX 65536u

void hyd_fetch__batch_free(struct hyd_batch_xfer *bx)
{
	if (!bx)
		return;
	if (bx->parser_live)
		hyd_batch_parser_fini(&bx->p);
	curl_slist_free_all(bx->hdrs);
	hyd_pack_obj_unref(bx->obj);
	free(bx->fls);
	free(bx->ids);
	free(bx->lens);
	free(bx);
}

/* Drop delivered (NULL) entries; returns how many flights are left. */
static size_t batch_compact(struct hyd_batch_xfer *bx)
{
	size_t i, n = 0;

	for (i = 0; i < bx->n; i++)
		if (bx->fls[i])
			bx->fls[n++] = bx->fls[i];
	bx->n = n;
	return n;
}

/* End the flights of a batch whose deadline falls at or before `at`
 * (monotonic ns) with -ETIMEDOUT, and compact the rest: how many remain. */
static size_t batch_expire(struct hyd_xfer *x, uint64_t at)
{
	struct hyd_batch_xfer *bx = x->bx;
	hyd_fetch *f = x->f;
	size_t i;

	/* A pack's flights are backfill's (no deadline), and its entries
	 * keep their places. */
	if (bx->obj)
		return hyd_fetch__pack_left(bx);
	for (i = 0; i < bx->n; i++) {
		if (bx->fls[i] &&
		    hyd_flights_deadline(&f->flights, bx->fls[i]) <= at) {
			STAT_ADD(f, failures, 1);
			hyd_flights_finish(&f->flights, bx->fls[i], -ETIMEDOUT);
			bx->fls[i] = NULL;
		}
	}
	return batch_compact(bx);
}

void hyd_fetch__batch_end(struct hyd_xfer *x, int rc)
{
	struct hyd_batch_xfer *bx = x->bx;
	hyd_fetch *f = x->f;
	size_t i, n = batch_compact(bx);

	if (rc < 0 && n) {
		STAT_ADD(f, failures, n);
		if (rc != -ECANCELED) {
			base_warn("batch failed chunks=%zu url=%s errno=%s "
				  "requests=%u why=\"%s\"",
				  n, x->url, base_errname(rc), x->requests,
				  x->why);
			hyd_fetch__note_error(f, "batch of %zu: %s (%s)", n,
					      base_errname(rc), x->why);
		}
	}
	for (i = 0; i < n; i++) {
		hyd_flights_finish(&f->flights, bx->fls[i], rc);
		bx->fls[i] = NULL;
	}
	bx->n = 0;
	hyd_fetch__xfer_free(x);
}

/* Send the flights of x from index `from` on off alone (GETs) and free
 * the transfer when nothing is left in it. */
void hyd_fetch__batch_requeue(struct hyd_xfer *x, size_t from)
{
	struct hyd_batch_xfer *bx = x->bx;
	size_t i;

	for (i = from; i < bx->n; i++) {
		if (!bx->fls[i])
			continue;
		hyd_flights_requeue(&x->f->flights, bx->fls[i], 1);
		bx->fls[i] = NULL;
	}
}

/* ---- frame works ---- */

static void fwork_run(uv_work_t *w)
{
	static __thread int named;
	struct hyd_fwork *fw = w->data;

	if (!named) { /* libuv's pool: these are its threads' only work */
		base_thread_name("verify");
		named = 1;
	}
	fw->rc = hyd_fetch__frame_land(fw->f, fw->fl, fw->frame, fw->frame_len,
				       1, fw->why, sizeof(fw->why));
}

static void fwork_dispatch(hyd_fetch *f);

static void fwork_after(uv_work_t *w, int status)
{
	struct hyd_fwork *fw = w->data;
	hyd_fetch *f = fw->f;
	char hex[CHUNK_ID_HEX_LEN + 1];
	int rc = status == UV_ECANCELED ? -ECANCELED : fw->rc;

	f->fw_running--;
	if (rc == -EBADMSG) {
		/* Never stored; fetched again alone, where one more bad
		 * frame ends it (and backfill's next pass tries again). */
		STAT_ADD(f, mismatches, 1);
		chunk_id_to_hex(&fw->fl->id, hex);
		base_warn("batch frame rejected chunk=%s why=\"%s\"", hex,
			  fw->why);
		hyd_fetch__note_error(f, "chunk %.16s: %s", hex, fw->why);
		hyd_flights_requeue(&f->flights, fw->fl, 1);
	} else if (rc == HYD_LAND_STORING) {
		/* The flight ends when its frame is durable (on_stored). */
	} else {
		if (rc < 0)
			STAT_ADD(f, failures, 1);
		hyd_flights_finish(&f->flights, fw->fl, rc);
	}
	free(fw->frame);
	free(fw);
	fwork_dispatch(f);
	hyd_fetch__pace_kick(f); /* the backlog shrank */
	hyd_fetch__pump(f);
	hyd_fetch__maybe_close(f);
}

/* Feed waiting frames to the pool, at most fw_max at a time: the other
 * pool threads stay free for demand reads' frames. */
static void fwork_dispatch(hyd_fetch *f)
{
	struct hyd_fwork *fw;
	int r;

	while (f->fq_head && f->fw_running < f->fw_max) {
		fw = f->fq_head;
		f->fq_head = fw->next;
		if (!f->fq_head)
			f->fq_tail = NULL;
		f->fq_len--;
		fw->next = NULL;
		fw->work.data = fw;
		r = uv_queue_work(&f->loop, &fw->work, fwork_run, fwork_after);
		if (r < 0) {
			STAT_ADD(f, failures, 1);
			hyd_flights_finish(&f->flights, fw->fl, -EIO);
			free(fw->frame);
			free(fw);
			continue;
		}
		f->fw_running++;
	}
}

void hyd_fetch__fwork_cancel_queued(hyd_fetch *f)
{
	struct hyd_fwork *fw;

	while ((fw = f->fq_head)) {
		f->fq_head = fw->next;
		f->fq_len--;
		hyd_flights_finish(&f->flights, fw->fl, -ECANCELED);
		free(fw->frame);
		free(fw);
	}
	f->fq_tail = NULL;
}

/* Parser callback: one whole frame of the flight at idx. */
static int on_frame(void *ctx, size_t idx, uint8_t *frame, size_t frame_len)
{
	struct hyd_xfer *x = ctx;
	struct hyd_batch_xfer *bx = x->bx;
	hyd_fetch *f = x->f;
	struct hyd_fwork *fw;
	struct hyd_flight *fl;

	if (idx < bx->n && !bx->fls[idx] && bx->obj) {
		/* A pack entry no flight of ours waits for. */
		free(frame);
		return 0;
	}
	if (idx >= bx->n || !bx->fls[idx]) {
		free(frame);
		return -EBADMSG; /* cannot happen: the parser counts */
	}
	fl = bx->fls[idx];
	bx->fls[idx] = NULL;
	STAT_ADD(f, batch_frames, 1);
	fw = calloc(1, sizeof(*fw));
	if (!fw) {
		free(frame);
		STAT_ADD(f, failures, 1);
		hyd_flights_finish(&f->flights, fl, -ENOMEM);
		return 0;
	}
	fw->f = f;
	fw->fl = fl;
	fw->frame = frame;
	fw->frame_len = frame_len;
	if (f->fq_tail)
		f->fq_tail->next = fw;
	else
		f->fq_head = fw;
	f->fq_tail = fw;
	f->fq_len++;
	fwork_dispatch(f);
	return 0;
}

size_t hyd_fetch__batch_write(char *ptr, size_t size, size_t nmemb,
			      void *userdata)
{
	struct hyd_xfer *x = userdata;
	struct hyd_batch_xfer *bx = x->bx;
	size_t n = size * nmemb;
	unsigned why;
	int r;

	if (!bx->code)
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &bx->code);
	if (bx->code != 200) {
		/* An error body: drop it, but not forever. */
		x->body_len += n;
		return x->body_len > HYD_BATCH_ERRBODY_MAX ? 0 : n;
	}
	why = hyd_fetch__gate(x, n);
	if (why) {
		/* curl keeps these bytes and hands them over again later. */
		x->paused |= why;
		return CURL_WRITEFUNC_PAUSE;
	}
	STAT_ADD(x->f, wire_bytes, n);
	STAT_ADD(x->f, batch_bytes, n);
	r = hyd_batch_parser_feed(&bx->p, ptr, n, on_frame, x);
	if (r < 0) {
		bx->parse_err = r;
		return 0; /* abort: CURLE_WRITE_ERROR */
	}
	return n;
}

void hyd_fetch__batch_start(struct hyd_xfer *x)
{
	struct hyd_batch_xfer *bx = x->bx;
	hyd_fetch *f = x->f;
	uint64_t now = base_now_ns();
	size_t i, n;
	CURLMcode mc;

	/* Flights a joiner's deadline no longer covers end here; backfill's
	 * own never expire. */
	n = batch_expire(x, now);
	if (!n) {
		hyd_fetch__xfer_free(x);
		return;
	}
	if (bx->obj) {
		/* The whole list parses; our flights sit at their places. */
		bx->body_n = bx->obj->n;
		if (bx->parser_live)
			hyd_batch_parser_fini(&bx->p);
		hyd_batch_parser_init_pack(&bx->p, bx->obj->ids, bx->obj->lens,
					   bx->obj->n, f->max_raw);
	} else {
		for (i = 0; i < n; i++) {
			bx->ids[i] = bx->fls[i]->id;
			bx->lens[i] = bx->fls[i]->raw_len;
		}
		bx->body_n = n;
		if (bx->parser_live)
			hyd_batch_parser_fini(&bx->p);
		hyd_batch_parser_init(&bx->p, bx->ids, bx->lens, n, f->max_raw);
	}
	bx->parser_live = 1;
	bx->code = 0;
	bx->parse_err = 0;
	x->body_len = 0;
	x->errbuf[0] = '\0';
	x->last_rx_ns = now;
	if (!bx->obj) {
		curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS,
				 (const char *)bx->ids);
		curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(n * CHUNK_ID_LEN));
	}
	mc = curl_multi_add_handle(f->multi, x->easy);
	if (mc != CURLM_OK) {
		snprintf(x->why, sizeof(x->why), "curl_multi_add_handle: %s",
			 curl_multi_strerror(mc));
		hyd_fetch__batch_end(x, -EIO);
		return;
	}
	hyd_fetch__xfer_set(x, XFER_CURL);
	x->requests++;
	STAT_ADD(f, batches, 1);
}

/* A transient failure: back off (jittered, capped) and go again with what
 * is left. Flights whose deadline the delay would pass end now. */
static void batch_retry(struct hyd_xfer *x)
{
	hyd_fetch *f = x->f;
	uint64_t now = base_now_ns(), delay_ms, at;
	size_t n;

	delay_ms = hyd_fetch__backoff_ms(f, x->attempts);
	x->attempts++;
	hyd_fetch__note_transient(f);
	if (f->shutting_down) {
		hyd_fetch__batch_end(x, -ECANCELED);
		return;
	}
	at = now + delay_ms * 1000000ull;
	n = batch_expire(x, at);
	if (!n) {
		hyd_fetch__xfer_free(x);
		return;
	}
	STAT_ADD(f, retries, 1);
	hyd_fetch__note_error(f, "%s (retrying)", x->why);
	base_debug("batch retry chunks=%zu attempt=%u delay_ms=%" PRIu64
		   " why=\"%s\"",
		   n, x->attempts, delay_ms, x->why);
	hyd_fetch__xfer_set(x, XFER_RETRY);
	x->retry_at_ns = at;
	hyd_fetch__arm_retry_timer(f);
}

int hyd_fetch__no_endpoint(struct hyd_xfer *x, long code)
{
	char *ct = NULL;

	if (code == 405 || code == 501)
		return 1;
	if (code != 404)
		return 0;
	/* Every error of the replicator's protocol has a JSON body. */
	curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
	return !ct || strncasecmp(ct, "application/json", 16) != 0;
}

void hyd_fetch__batch_done(struct hyd_xfer *x, CURLcode res)
{
	struct hyd_batch_xfer *bx = x->bx;
	hyd_fetch *f = x->f;
	size_t delivered = hyd_batch_parser_delivered(&bx->p);
	long code = bx->code;
	int rc;

	if (bx->obj) {
		hyd_fetch__pack_done(x, res);
		return;
	}
	if (!code)
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (batch_compact(bx) == 0) {
		/* All delivered; anything after the last frame is ignored. */
		hyd_fetch__xfer_free(x);
		return;
	}
	if (delivered)
		x->attempts = 0; /* progress: keep the backoff short */
	if (code != 200 && code != 0) {
		snprintf(x->why, sizeof(x->why), "batch: HTTP %ld", code);
		if ((code >= 500 && code != 501) || code == 408 ||
		    code == 429) {
			batch_retry(x);
			return;
		}
		if (hyd_fetch__no_endpoint(x, code) && !f->batch_off) {
			f->batch_off = 1;
			base_warn("no batch endpoint: fetching chunks one by "
				  "one url=%s http=%ld",
				  f->batch_url, code);
		}
		/* 404 (one unknown id spoils the batch), 4xx: alone, each
		 * gets its own precise answer. */
		hyd_fetch__batch_requeue(x, 0);
		hyd_fetch__xfer_free(x);
		return;
	}
	if (code == 200) {
		if (bx->parse_err) {
			if (bx->parse_err == -EBADMSG)
				STAT_ADD(f, mismatches, 1);
			snprintf(x->why, sizeof(x->why),
				 "batch body broken after %zu of %zu frames: "
				 "%s",
				 delivered, bx->body_n,
				 bx->parse_err == -EBADMSG
				     ? "wrong id or bad frame header"
				     : base_errname(bx->parse_err));
		} else {
			snprintf(x->why, sizeof(x->why),
				 "batch body ended after %zu of %zu frames: "
				 "curl %d: %s",
				 delivered, bx->body_n, (int)res,
				 x->errbuf[0] ? x->errbuf
					      : curl_easy_strerror(res));
		}
		/* The first undelivered flight is where it broke: let it
		 * get its own answer alone. */
		hyd_flights_requeue(&f->flights, bx->fls[0], 1);
		bx->fls[0] = NULL;
		bx->peeled++;
		if (batch_compact(bx) == 0) {
			hyd_fetch__xfer_free(x);
			return;
		}
		batch_retry(x);
		return;
	}
	snprintf(x->why, sizeof(x->why), "batch: curl %d: %s", (int)res,
		 x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
	rc = base_curl_errno(res);
	if (base_err_transient(rc))
		batch_retry(x);
	else
		hyd_fetch__batch_end(x, rc);
}

static struct curl_slist *batch_headers(void)
{
	struct curl_slist *h, *h2;

	h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	if (!h)
		return NULL;
	/* No "Expect: 100-continue" round trip for a small body. */
	h2 = curl_slist_append(h, "Expect:");
	if (!h2) {
		curl_slist_free_all(h);
		return NULL;
	}
	return h2;
}

/* A backfill batch's bytes: batch_bytes, and on a long fat link the
 * bandwidth-delay product (as measured), so each transfer spends most of
 * its time moving bytes, not waiting a round trip for the first; never
 * under --bwlimit, whose batch_bytes keeps the server close behind the
 * bucket. Across a WAN (HYD_FETCH_WAN_RTT_NS and more) no more than
 * twice the product over all backfill transfers, at least BG_WAN_MIN: a
 * read that joins a chunk at a batch's tail waits for what the batches
 * hold ahead of it (four of 8 MiB at 1 Gbit/s: 0.27 s), and twice the
 * product keeps the link as full. */
#define BG_WAN_MIN (2ull << 20)

static uint64_t bg_batch_bytes(const hyd_fetch *f)
{
	uint64_t rate = __atomic_load_n(&f->rate_bps, __ATOMIC_RELAXED);
	uint64_t rtt = __atomic_load_n(&f->rtt_ns, __ATOMIC_RELAXED), bdp, b;

	if (f->bwlimit || !rate || !rtt || rate > UINT64_MAX / rtt)
		return f->batch_bytes;
	bdp = rate * rtt / 1000000000ull;
	if (bdp > HYD_BATCH_BYTES_MAX)
		bdp = HYD_BATCH_BYTES_MAX;
	b = bdp > f->batch_bytes ? bdp : f->batch_bytes;
	if (rtt >= HYD_FETCH_WAN_RTT_NS && f->bg_max > 2) {
		uint64_t wan = 2 * bdp / f->bg_max;

		if (wan < BG_WAN_MIN)
			wan = BG_WAN_MIN;
		if (wan < b)
			b = wan;
	}
	return b;
}

/* A read batch's bytes: read_batch_bytes, or on a link whose
 * bandwidth-delay product needs more than the read lane's transfers hold
 * at that size, an eighth of it (up to 16 MiB), so that one stream's
 * window fits on the lane. */
static uint64_t read_batch_bytes(const hyd_fetch *f)
{
	uint64_t rate = __atomic_load_n(&f->rate_bps, __ATOMIC_RELAXED);
	uint64_t rtt = __atomic_load_n(&f->rtt_ns, __ATOMIC_RELAXED), b;

	if (!rate || !rtt || rate > UINT64_MAX / rtt)
		return f->read_batch_bytes;
	b = rate * rtt / 1000000000ull / 8;
	if (b > (16ull << 20))
		b = 16ull << 20;
	return b > f->read_batch_bytes ? b : f->read_batch_bytes;
}

int hyd_fetch__batch_launch(hyd_fetch *f, enum hyd_prio prio)
{
	int bg = prio >= HYD_PRIO_NEAR;
	struct hyd_flight *fls[HYD_BATCH_MAX_IDS];
	struct hyd_batch_xfer *bx = NULL;
	struct curl_slist *hdrs = NULL;
	struct hyd_xfer *x = NULL;
	size_t n, i;

	n = hyd_flights_next_batch(&f->flights, prio, f->batch_max,
				   bg ? bg_batch_bytes(f) : read_batch_bytes(f),
				   fls);
	if (!n)
		return 0;
	x = hyd_fetch__xfer_alloc(f);
	bx = calloc(1, sizeof(*bx));
	if (!x || !bx)
		goto nomem;
	x->bx = bx;
	bx->fls = malloc(n * sizeof(*bx->fls));
	bx->ids = malloc(n * sizeof(*bx->ids));
	bx->lens = malloc(n * sizeof(*bx->lens));
	x->url = strdup(f->batch_url);
	hdrs = batch_headers();
	if (!bx->fls || !bx->ids || !bx->lens || !x->url || !hdrs)
		goto nomem;
	memcpy(bx->fls, fls, n * sizeof(*fls));
	bx->n = n;
	x->bg = bg;
	x->urgent = !bg;
	x->near = prio == HYD_PRIO_NEAR;
	for (i = 0; i < n; i++)
		x->want_bytes += fls[i]->raw_len;
	/* curl borrows the header list: it is freed with the transfer,
	 * after curl_easy_cleanup (hyd_fetch__batch_free). */
	curl_easy_setopt(x->easy, CURLOPT_URL, x->url);
	curl_easy_setopt(x->easy, CURLOPT_POST, 1L);
	curl_easy_setopt(x->easy, CURLOPT_BUFFERSIZE, HYD_BULK_BUFFER);
	curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION,
			 hyd_fetch__batch_write);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS,
			 f->connect_timeout_ms);
	bx->hdrs = hdrs;
	base_debug("batch prio=%d chunks=%zu bytes=%" PRIu64, (int)prio, n,
		   x->want_bytes);
	hyd_fetch__batch_start(x);
	return 1;
nomem:
	curl_slist_free_all(hdrs);
	if (x && !x->bx)
		free(bx);
	else if (!x)
		free(bx);
	if (x)
		hyd_fetch__xfer_free(x); /* frees bx; the flights are ours */
	for (i = 0; i < n; i++) {
		STAT_ADD(f, failures, 1);
		hyd_flights_finish(&f->flights, fls[i], -ENOMEM);
	}
	return 1;
}
