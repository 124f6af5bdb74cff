/*
 * hydrator/fetch/hyd_fetch_pack.c — backfill's transfers with --cacheable:
 * GET BASE/pack/GEN/INO/K, an immutable object every hydrator asks for
 * by the same URL (catalog.h, cat_pack), so an HTTP cache in between
 * keeps one copy for all of them. The answer is a batch answer of the
 * pack's whole list; frames of entries no flight of ours waits for (the
 * store had them) are dropped, the rest land as a batch's do
 * (hyd_fetch_batch.c). The answer may leave out entries of the list as
 * this side works it out: a chunk is sent in the one pack where the
 * replicator first found it, so shared chunks cross the WAN once; a
 * flight the answer did not serve goes alone afterwards.
 *
 * What goes wrong: a transient failure (no answer, 5xx, 408, 429, a
 * body cut short) goes again after a backoff, up to PACK_TRIES times,
 * the whole object each time; then, or after any other answer, the
 * flights still waiting go alone as single GETs of chunk/ID (cacheable
 * too). A 404 that is not the replicator's JSON, 405 or 501 means the
 * server has no packs (a static store): from then on every backfill
 * flight is a single GET.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch_loop_priv.h"

#define PACK_TRIES 3u

size_t hyd_fetch__pack_left(const struct hyd_batch_xfer *bx)
{
	size_t i, n = 0;

	for (i = 0; i < bx->n; i++)
		n += bx->fls[i] != NULL;
	return n;
}

int hyd_fetch__pack_launch(hyd_fetch *f)
{
	struct hyd_pack_obj *obj =
	    hyd_flights_head_pack(&f->flights, HYD_PRIO_BACKFILL);
	struct hyd_flight **got;
	struct hyd_batch_xfer *bx = NULL;
	struct hyd_xfer *x = NULL;
	size_t n, i;

	if (!obj)
		return 0;
	/* Room for the pack's whole list: its flights sit at their places. */
	got = calloc(obj->n, sizeof(*got));
	n = got ? hyd_flights_next_pack(&f->flights, HYD_PRIO_BACKFILL, obj,
					got)
		: 0;
	if (!n) {
		/* Out of memory (then a single GET), or the head changed. */
		free(got);
		hyd_pack_obj_unref(obj);
		return got ? 1 : 0;
	}
	x = hyd_fetch__xfer_alloc(f);
	bx = calloc(1, sizeof(*bx));
	if (x && bx) {
		x->bx = bx; /* freed with x from here */
		bx->fls = calloc(obj->n, sizeof(*bx->fls));
		x->url = strdup(obj->url);
	}
	if (!x || !bx || !bx->fls || !x->url) {
		if (x)
			hyd_fetch__xfer_free(x);
		else
			free(bx);
		for (i = 0; i < n; i++) {
			STAT_ADD(f, failures, 1);
			hyd_flights_finish(&f->flights, got[i], -ENOMEM);
		}
		free(got);
		hyd_pack_obj_unref(obj);
		return 1;
	}
	bx->obj = obj; /* our reference */
	bx->n = obj->n;
	for (i = 0; i < n; i++)
		bx->fls[got[i]->obj_idx] = got[i];
	free(got);
	x->bg = 1;
	curl_easy_setopt(x->easy, CURLOPT_URL, x->url);
	curl_easy_setopt(x->easy, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(x->easy, CURLOPT_BUFFERSIZE, HYD_BULK_BUFFER);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION,
			 hyd_fetch__batch_write);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS,
			 f->connect_timeout_ms);
	hyd_fetch__batch_start(x);
	return 1;
}

/* Every flight still waiting goes alone; the transfer is freed. */
static void pack_give_up(struct hyd_xfer *x)
{
	hyd_fetch__batch_requeue(x, 0);
	hyd_fetch__xfer_free(x);
}

void hyd_fetch__pack_done(struct hyd_xfer *x, CURLcode res)
{
	struct hyd_batch_xfer *bx = x->bx;
	hyd_fetch *f = x->f;
	long code = bx->code;
	uint64_t delay_ms;
	int transient;

	if (!code)
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (hyd_fetch__pack_left(bx) == 0) {
		hyd_fetch__xfer_free(x);
		return;
	}
	if (code == 200 && res == CURLE_OK && !bx->parse_err &&
	    hyd_batch_parser_finish(&bx->p) == 0) {
		/* Whole, but without some of ours: the server sends those in
		 * the packs where it first found them. Alone, then. */
		pack_give_up(x);
		return;
	}
	if (code != 200 && code != 0) {
		snprintf(x->why, sizeof(x->why), "pack: HTTP %ld", code);
		if (hyd_fetch__no_endpoint(x, code)) {
			if (!f->pack_off)
				base_warn("no pack endpoint: fetching chunks "
					  "one by one url=%s http=%ld",
					  x->url, code);
			__atomic_store_n(&f->pack_off, 1, __ATOMIC_RELAXED);
			pack_give_up(x);
			return;
		}
		transient = (code >= 500) || code == 408 || code == 429;
	} else if (code == 200 && bx->parse_err) {
		if (bx->parse_err == -EBADMSG)
			STAT_ADD(f, mismatches, 1);
		snprintf(x->why, sizeof(x->why),
			 "pack body broken after %zu of %zu entries: %s",
			 hyd_batch_parser_delivered(&bx->p), bx->body_n,
			 bx->parse_err == -EBADMSG
			     ? "wrong id or bad frame header"
			     : base_errname(bx->parse_err));
		/* A wrong byte will be wrong again from a cache: alone. */
		pack_give_up(x);
		return;
	} else {
		snprintf(x->why, sizeof(x->why), "pack: curl %d: %s", (int)res,
			 x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
		transient =
		    code == 200 || base_err_transient(base_curl_errno(res));
	}
	if (!transient || f->shutting_down || x->attempts + 1 >= PACK_TRIES) {
		base_debug("pack goes alone url=%s why=\"%s\"", x->url, x->why);
		pack_give_up(x);
		return;
	}
	delay_ms = hyd_fetch__backoff_ms(f, x->attempts);
	x->attempts++;
	STAT_ADD(f, retries, 1);
	hyd_fetch__note_error(f, "%s (retrying)", x->why);
	hyd_fetch__xfer_set(x, XFER_RETRY);
	x->retry_at_ns = base_now_ns() + delay_ms * 1000000ull;
	hyd_fetch__arm_retry_timer(f);
}
