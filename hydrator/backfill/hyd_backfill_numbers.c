/*
 * hydrator/backfill/hyd_backfill_numbers.c — the backfill's live numbers:
 * its state, the wire rate (samples every TICK_MS, over RATE_WINDOW_NS),
 * the cumulative wire bytes kept in the store's meta, the progress lines
 * of the log, and the figures behind `ferry status` (hyd_backfill_stats,
 * hyd_backfill_live). The scheduler (hyd_backfill.c) calls hyd_bf__tick
 * often; the status side reads under the lock.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/backfill/hyd_backfill_priv.h"

void hyd_bf__persist_wire(hyd_backfill *bf, uint64_t wire_run)
{
	char buf[32];
	int r;

	if (!bf->cfg.store || wire_run == bf->persisted)
		return;
	snprintf(buf, sizeof(buf), "%" PRIu64, bf->wire_base + wire_run);
	r = hyd_store_meta_set(bf->cfg.store, "wire_bytes", buf);
	if (r == 0)
		bf->persisted = wire_run;
}

/* The state and its error; lock held. */
static enum hyd_state state_locked(hyd_backfill *bf,
				   const struct hyd_fetch_stats *fs, char *err,
				   size_t cap)
{
	uint64_t now = base_now_ns();

	err[0] = '\0';
	if (!bf->cfg.enabled)
		return HYD_STATE_BROWSING;
	if (bf->complete)
		return HYD_STATE_COMPLETE;
	if (bf->full)
		return HYD_STATE_BROWSING; /* the bound stopped the walk */
	if (bf->nospc || bf->backing_off) {
		snprintf(err, cap, "%s",
			 bf->last_error[0] ? bf->last_error : fs->last_error);
		return HYD_STATE_STALLED;
	}
	if (bf->outstanding && now - bf->last_progress_ns > STALL_NS &&
	    fs->last_error_ns > bf->last_progress_ns) {
		snprintf(err, cap, "%s", fs->last_error);
		return HYD_STATE_STALLED;
	}
	if (fs->last_error[0])
		snprintf(err, cap, "%s", fs->last_error);
	return HYD_STATE_BACKFILLING;
}

static double rate_now_locked(hyd_backfill *bf)
{
	unsigned i, last, k;
	uint64_t dt;

	if (bf->s_n < 2)
		return 0;
	last = (bf->s_head + RATE_SAMPLES - 1) % RATE_SAMPLES;
	/* The oldest sample not older than the window. */
	for (k = bf->s_n; k > 1; k--) {
		i = (bf->s_head + RATE_SAMPLES - k) % RATE_SAMPLES;
		if (bf->s_ns[last] - bf->s_ns[i] <=
		    RATE_WINDOW_NS + TICK_MS * 1000000ull)
			break;
	}
	dt = bf->s_ns[last] - bf->s_ns[i];
	if (k < 2 || dt == 0)
		return 0;
	return (double)(bf->s_wire[last] - bf->s_wire[i]) * 1e9 / (double)dt;
}

static void log_progress(hyd_backfill *bf, const struct hyd_fetch_stats *fs)
{
	char err[256], man[64] = "";
	enum hyd_state s;
	double rate;

	pthread_mutex_lock(&bf->lock);
	s = state_locked(bf, fs, err, sizeof(err));
	rate = rate_now_locked(bf);
	/* Local of all pending manifests, as of the last census. */
	if (bf->manifests_total)
		snprintf(man, sizeof(man), " manifests=%" PRIu64 "/%" PRIu64,
			 bf->manifests_total - bf->manifests_missing,
			 bf->manifests_total);
	base_info("backfill state=%s chunks=%" PRIu64 "/%" PRIu64
		  " bytes=%" PRIu64 "/%" PRIu64 "%s queued=%" PRIu64
		  " wire_bytes=%" PRIu64 " rate=%.0f chunks_fetched=%" PRIu64
		  " batches=%" PRIu64 " retries=%" PRIu64 " mismatches=%" PRIu64
		  " failures=%" PRIu64 " last_error=\"%s\"",
		  hyd_state_name(s), bf->chunks_stored, bf->chunks_total,
		  bf->bytes_stored, bf->bytes_total, man, bf->outstanding,
		  bf->wire_base + fs->wire_bytes, rate, fs->chunks, fs->batches,
		  fs->retries, fs->mismatches, fs->failures, err);
	bf->logged_state = s;
	pthread_mutex_unlock(&bf->lock);
}

void hyd_bf__tick(hyd_backfill *bf)
{
	struct hyd_fetch_stats fs;
	uint64_t now = base_now_ns();
	char err[256];
	int changed;

	if (now < bf->next_sample_ns)
		return;
	bf->next_sample_ns = now + TICK_MS * 1000000ull;
	hyd_fetch_stats(bf->cfg.fetch, &fs);
	pthread_mutex_lock(&bf->lock);
	bf->s_ns[bf->s_head] = now;
	bf->s_wire[bf->s_head] = fs.wire_bytes;
	bf->s_head = (bf->s_head + 1) % RATE_SAMPLES;
	if (bf->s_n < RATE_SAMPLES)
		bf->s_n++;
	changed = state_locked(bf, &fs, err, sizeof(err)) != bf->logged_state;
	pthread_mutex_unlock(&bf->lock);
	if (now >= bf->next_persist_ns) {
		bf->next_persist_ns = now + PERSIST_NS;
		hyd_bf__persist_wire(bf, fs.wire_bytes);
	}
	if (bf->cfg.log_progress &&
	    (changed ||
	     (now >= bf->next_log_ns && !bf->complete && bf->cfg.enabled))) {
		bf->next_log_ns = now + LOG_NS;
		log_progress(bf, &fs);
	}
}

void hyd_backfill_stats(hyd_backfill *bf, struct hyd_backfill_stats *ret)
{
	struct hyd_fetch_stats fs;
	double el;

	hyd_fetch_stats(bf->cfg.fetch, &fs);
	memset(ret, 0, sizeof(*ret));
	el = (double)(base_now_ns() - bf->start_ns) / 1e9;
	pthread_mutex_lock(&bf->lock);
	ret->state =
	    state_locked(bf, &fs, ret->last_error, sizeof(ret->last_error));
	ret->chunks_total = bf->chunks_total;
	ret->chunks_stored = bf->chunks_stored;
	ret->bytes_total = bf->bytes_total;
	ret->bytes_stored = bf->bytes_stored;
	ret->manifests_total = bf->manifests_total;
	ret->manifests_missing = bf->manifests_missing;
	ret->queued = bf->outstanding;
	ret->submitted = bf->submitted;
	ret->failed = bf->failed;
	ret->passes = bf->passes;
	ret->rate_now = rate_now_locked(bf);
	ret->pf_state = bf->pf_state;
	ret->pf_files = bf->pf_files;
	ret->pf_skipped = bf->pf_skipped;
	ret->pf_steps = bf->pf_steps;
	ret->pf_steps_done = bf->pf_steps_done;
	ret->pf_bytes = bf->pf_bytes;
	ret->pf_bytes_done = bf->pf_bytes_done;
	ret->pin_files = bf->pin_files;
	ret->pin_bytes = bf->pin_bytes;
	ret->full = bf->full;
	pthread_mutex_unlock(&bf->lock);
	ret->wire_total = bf->wire_base + fs.wire_bytes;
	ret->elapsed_s = el;
	ret->rate_avg = el > 0 ? (double)fs.wire_bytes / el : 0;
}

void hyd_backfill_live(void *arg, struct hyd_status *st)
{
	hyd_backfill *bf = arg;
	struct hyd_backfill_stats bs;
	struct hyd_fetch_stats fs;
	uint64_t left;
	double rate;

	hyd_backfill_stats(bf, &bs);
	hyd_fetch_stats(bf->cfg.fetch, &fs);
	st->state = bs.state;
	/* What the cache says wins over a census that may be older; with
	 * manifests still missing its chunk totals are not the whole. */
	if (st->chunks_total && st->chunks_stored >= st->chunks_total &&
	    st->manifests_local >= st->manifests_total &&
	    bs.state != HYD_STATE_STALLED)
		st->state = HYD_STATE_COMPLETE;
	/* Complete means a census just found every chunk stored, and its
	 * counts are exact; the cache's numbers may be from a little
	 * earlier (before the last manifests were local, even): the census
	 * wins, so a complete answer never shows chunks missing (files only
	 * when none lacks a manifest for good: those are never hydrated). */
	if (bs.state == HYD_STATE_COMPLETE && bs.chunks_total) {
		st->chunks_total = st->chunks_stored = bs.chunks_total;
		st->unique_bytes_total = st->unique_bytes_stored =
		    bs.bytes_total;
		st->manifests_local = st->manifests_total;
		if (!st->manifests_changed) {
			st->files_hydrated = st->files_total;
			st->bytes_hydrated = st->bytes_total;
		}
	}
	snprintf(st->last_error, sizeof(st->last_error), "%s", bs.last_error);
	st->pid = (long)getpid();
	st->wire_bytes = bs.wire_total;
	{
		uint64_t link_rate, link_rtt;

		hyd_fetch_link(bf->cfg.fetch, &link_rate, &link_rtt);
		st->link_rate = (double)link_rate;
		st->link_rtt_ms = (double)link_rtt / 1e6;
	}
	if (bs.pf_state != HYD_PREFETCH_NONE) {
		static const char *const pf[] = {"", "planning", "running",
						 "done"};

		snprintf(st->prefetch, sizeof(st->prefetch), "%s",
			 pf[bs.pf_state]);
		st->prefetch_files = bs.pf_files;
		st->prefetch_skipped = bs.pf_skipped;
		st->prefetch_ranges = bs.pf_steps;
		st->prefetch_ranges_done = bs.pf_steps_done;
		st->prefetch_bytes = bs.pf_bytes;
		st->prefetch_bytes_done = bs.pf_bytes_done;
	}
	st->mismatches = fs.mismatches;
	st->retries = fs.retries;
	st->failures = fs.failures;
	st->rate_now = bs.rate_now;
	st->rate_avg = bs.rate_avg;
	st->elapsed_s = bs.elapsed_s;
	left = st->unique_bytes_total > st->unique_bytes_stored
		   ? st->unique_bytes_total - st->unique_bytes_stored
		   : 0;
	rate = bs.rate_now > 0 ? bs.rate_now : bs.rate_avg;
	if (!left || st->state == HYD_STATE_COMPLETE)
		st->eta_s = 0;
	else if (rate > 0 && st->state == HYD_STATE_BACKFILLING)
		st->eta_s = (int64_t)((double)left / rate + 0.5);
	else
		st->eta_s = -1;
}
