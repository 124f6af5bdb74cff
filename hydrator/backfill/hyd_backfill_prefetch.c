/*
 * hydrator/backfill/hyd_backfill_prefetch.c — --prefetch: the traces'
 * ranges before anything else of backfill's, in the traces' order.
 *
 * The plan (hyd_trace_plan_make) names each range by the ino the catalog
 * has for its path now, or skips it (gone, or another size or mtime: the
 * file changed since the trace). Each range's chunks are asked for at
 * HYD_PRIO_NEAR with the doubled window of what follows a job (so below
 * demand reads and readahead, above the walk), each once: a chunk stored
 * or on its way already is joined or skipped. A pending file's manifest
 * is fetched with its segment first; a segment the source has not hashed
 * yet leaves that file to the walk. Runs before the walk of the catalog,
 * so a big tree's walk does not hold the trace up, and with backfill
 * disabled too (then the trace is all that moves ahead of the reads).
 * The walk starts once every chunk asked for has landed: until then the
 * job the trace is for has the link and the CPU to itself (at 1 Gbit/s
 * and 50 ms, a walk of 2,000 small files with its trace: 0.87-0.96 s
 * with the walk beside it, 0.68-0.73 s with no backfill).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>

#include "catalog/base/base.h"
#include "hydrator/backfill/hyd_backfill_priv.h"

#define STEP_CHUNKS 256u

/* The segments of the plan's files go first in the mount's bulk fetch of
 * manifests, in the plan's order (as many as it keeps asked for), so the
 * replay finds most manifests local or on their way instead of waiting a
 * round trip for each segment in turn. */
static void want_manifests(hyd_backfill *bf)
{
	uint64_t seg, last = UINT64_MAX;
	size_t i;

	if (!bf->cfg.manifest)
		return;
	for (i = 0; i < bf->plan.nsteps; i++) {
		if (!bf->plan.steps[i].ino)
			continue;
		seg = bf->plan.steps[i].ino / HYD_MANIFEST_SEG_INOS;
		if (seg == last ||
		    cat_manifest_state(bf->cfg.cat, bf->plan.steps[i].ino) !=
			CAT_MANIFEST_MISSING)
			continue;
		last = seg;
		hyd_manifest_want(bf->cfg.manifest, bf->plan.steps[i].ino);
	}
}

static int plan(hyd_backfill *bf)
{
	struct hyd_trace_plan *p = &bf->plan;
	int r;

	r = hyd_trace_plan_make(bf->cfg.cat, bf->cfg.traces, bf->cfg.ntraces,
				p);
	if (r < 0) {
		base_log_err(BASE_LOG_WARN, r,
			     "prefetch: cannot plan the traces; backfill goes "
			     "on without them");
		pthread_mutex_lock(&bf->lock);
		bf->pf_state = HYD_PREFETCH_DONE;
		pthread_mutex_unlock(&bf->lock);
		return r;
	}
	pthread_mutex_lock(&bf->lock);
	bf->pf_files = p->files;
	bf->pf_skipped = p->missing + p->changed;
	bf->pf_steps = p->nsteps;
	bf->pf_steps_done = 0;
	bf->pf_bytes = p->bytes;
	bf->pf_bytes_done = 0;
	bf->pf_state = HYD_PREFETCH_RUNNING;
	pthread_mutex_unlock(&bf->lock);
	want_manifests(bf);
	base_info("prefetch starts files=%" PRIu64 " gone=%" PRIu64
		  " changed=%" PRIu64 " ranges=%zu bytes=%" PRIu64,
		  p->files, p->missing, p->changed, p->nsteps, p->bytes);
	return 0;
}

int hyd_bf__ask_range(hyd_backfill *bf, uint64_t ino, uint64_t off,
		      uint64_t len)
{
	struct cat_chunk cs[STEP_CHUNKS];
	uint64_t end = off + len;
	size_t n, i;
	int r, fetched = 0;

	while (off < end) {
		r = cat_chunks_range(bf->cfg.cat, ino, off, end - off, cs,
				     STEP_CHUNKS, &n);
		if (r == -EAGAIN && !fetched) {
			fetched = 1;
			r = hyd_bf__file_manifest(bf, ino);
			if (r == 0)
				continue;
			return r < 0 ? r : 0;
		}
		if (r < 0 || n == 0)
			return 0; /* the read path says why, if it is read */
		for (i = 0; i < n; i++) {
			if (chunk_id_is_hole(&cs[i].id))
				continue;
			r = hyd_bf__submit_chunk(bf, &cs[i], 0);
			if (r < 0)
				return r;
		}
		off = cs[n - 1].off + cs[n - 1].len;
	}
	return 0;
}

int hyd_bf__prefetch(hyd_backfill *bf)
{
	const struct hyd_trace_step *st;
	uint64_t t0 = base_now_ns();
	int r = 0;

	if (bf->pf_state == HYD_PREFETCH_NONE ||
	    bf->pf_state == HYD_PREFETCH_DONE)
		return 0;
	if (bf->pf_state == HYD_PREFETCH_PLANNING && plan(bf) < 0)
		return 0;
	bf->waiting_seg = UINT64_MAX;
	bf->seg_failed_set = 0;
	bf->manifests_waiting = 0;
	bf->in_opened = 1; /* HYD_PRIO_NEAR, the doubled window */
	for (; bf->plan_at < bf->plan.nsteps; bf->plan_at++) {
		if (hyd_bf__stopped(bf)) {
			r = -ECANCELED;
			break;
		}
		st = &bf->plan.steps[bf->plan_at];
		if (st->ino) {
			r = hyd_bf__ask_range(bf, st->ino, st->off, st->len);
			if (r < 0)
				break;
		}
		pthread_mutex_lock(&bf->lock);
		bf->pf_steps_done = bf->plan_at + 1;
		if (st->ino)
			bf->pf_bytes_done += st->len;
		pthread_mutex_unlock(&bf->lock);
		if ((bf->plan_at & 63) == 0)
			hyd_bf__tick(bf);
	}
	bf->in_opened = 0;
	/* The rest of backfill waits until the trace's chunks are in: the
	 * job they are for has the link (and the CPU that stores what comes
	 * in) to itself meanwhile. */
	if (r == 0)
		hyd_bf__drain(bf);
	if (r == -ENOSPC || r == -EDQUOT) {
		/* The walk meets the full disk (or the bound) again and
		 * backs off (or stops). */
		r = 0;
	}
	if (r < 0)
		return r;
	pthread_mutex_lock(&bf->lock);
	bf->pf_state = HYD_PREFETCH_DONE;
	pthread_mutex_unlock(&bf->lock);
	base_info("prefetch done ranges=%zu bytes=%" PRIu64 " seconds=%.2f",
		  bf->plan.nsteps, bf->plan.bytes,
		  (double)(base_now_ns() - t0) / 1e9);
	return 0;
}
