/*
 * hydrator/backfill/hyd_backfill.c — the backfill scheduler (its live
 * numbers, behind `ferry status`, are hyd_backfill_numbers.c).
 *
 * One thread, started once the mount is up. A run is a series of passes:
 *   census   every distinct chunk id of the catalog is checked against the
 *            store (hyd_store_has): the store is the progress record, so
 *            after a crash only what is missing is ever asked for; nothing
 *            missing means COMPLETE;
 *   pass     files in order — the directories of recently opened files
 *            first (also between the steps of a big file), at a priority
 *            of their own ahead of the rest, then the rest in catalog
 *            (inode) order, the scan's depth-first order and so the
 *            order in which a sequential reader (tar, cp -r, rsync)
 *            visits them; across a WAN smallest first by size class
 *            (a quarter octave wide), each class in catalog order
 *            (pass_order) — and for each,
 *            its chunks not yet stored are submitted at HYD_PRIO_BACKFILL
 *            with no deadline (the fetcher retries transient failures by
 *            itself, capped backoff), at most `window` flights and
 *            `window_bytes` raw bytes outstanding. A chunk shared by many
 *            files is one flight (single flight) and, once stored, skipped
 *            (hyd_store_has);
 *   drain    wait for the pass's flights to end. Failures (404, 409, a
 *            frame bad twice) or a full disk make the next pass wait
 *            (1 s doubling to 30 s, state STALLED); otherwise the next
 *            census follows at once and confirms what the pass did.
 * Pending files (catalog format 2): a file whose manifest is not local
 * makes the pass fetch its segment's manifests (ino / 1024, then the big
 * ones on their own: hyd_manifest_segment) and carry on with the file.
 * A segment the source has not hashed by manifest_wait_ms leaves every
 * missing manifest to the next pass (the source hashes in ino order, so
 * later segments are not ready either); files whose manifest is local
 * still go on. Any other failure skips that segment's files for the pass
 * and counts as a failed pass. At the end of a pass, manifests still
 * missing that no file asked for (empty files, which need none to be
 * read, or inos no directory names) are fetched by segment too. The run
 * is COMPLETE only when a census
 * finds no chunk missing and no manifest missing; a file whose source
 * changed before it was hashed has no manifest in this generation and is
 * left out (a warning at completion says how many).
 * Totals as manifests arrive: the census counts the distinct ids of the
 * manifests local then (a recount at every census); a pass then counts
 * each chunk of a manifest that was missing at the census as it comes to
 * it — one more in chunks_total, and in chunks_stored too when stored
 * already, else once its flight lands. A chunk those new manifests share
 * with each other or with older ones may be counted twice until the next
 * census; chunks_stored never passes chunks_total.
 * Outcomes arrive through the fetcher's done hook (called under the flight
 * table's lock, so it only counts and signals). The state is STALLED while
 * the disk is full, while backing off after failures, or while flights are
 * outstanding and nothing landed for STALL_NS but errors did — and goes
 * back by itself when chunks land again.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/backfill/hyd_backfill_priv.h"

#define WINDOW_DEFAULT 512u
#define WINDOW_BYTES_DEFAULT (64ull << 20)
#define STEP_CHUNKS 256u
#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 30000u
#define PROBE_WINDOW 4u
#define YIELD_NS 10000000L /* 10 ms naps while someone browses */
#define YIELD_EVERY 256u   /* census rows between browse checks */
#define DEFER_POLL_MS 10u  /* the pass's end: looks for segments this often */
/* How long a segment's manifests may take by default: a server that is
 * still hashing holds each request up to its ?wait=; past this the pass
 * goes on. */
#define MANIFEST_WAIT_MS_DEFAULT 15000u
#define MISSING_PAGE 1024u /* pending inos per cat_pending_missing call */

/* Values of stop: the thread ends, or its run ends to take another
 * catalog (hyd_backfill_switch) and begins again. */
#define STOP_END 1
#define STOP_SWITCH 2

static int stopped(hyd_backfill *bf)
{
	return __atomic_load_n(&bf->stop, __ATOMIC_RELAXED);
}

int hyd_bf__stopped(hyd_backfill *bf)
{
	return stopped(bf);
}

/* ------------------------------------------------------------------ */
/* outcomes (done hook, under the flight table's lock)                */
/* ------------------------------------------------------------------ */

static void on_done(void *arg, const struct hyd_flight *fl, int result)
{
	hyd_backfill *bf = arg;
	uint64_t w = fl->watch, bytes = (uint64_t)fl->raw_len * fl->watch;

	pthread_mutex_lock(&bf->lock);
	bf->outstanding = bf->outstanding > w ? bf->outstanding - w : 0;
	bf->outstanding_bytes =
	    bf->outstanding_bytes > bytes ? bf->outstanding_bytes - bytes : 0;
	if (result == 0 && fl->store_rc >= 0) {
		if (fl->store_rc == 0) {
			bf->chunks_stored++;
			bf->bytes_stored += fl->raw_len;
			bf->probing = 0;
		}
		bf->last_progress_ns = base_now_ns();
	} else if (result == 0) {
		bf->failed++;
		bf->failed_pass++;
		if (fl->store_rc == -ENOSPC) {
			bf->nospc = 1;
			bf->probing = 1;
			snprintf(bf->last_error, sizeof(bf->last_error),
				 "disk full: cannot store chunks in %s",
				 hyd_store_dir(bf->cfg.store));
		} else {
			snprintf(bf->last_error, sizeof(bf->last_error),
				 "chunk store: %s",
				 strerrordesc_np(-fl->store_rc));
		}
	} else if (result != -ECANCELED) {
		bf->failed++;
		bf->failed_pass++;
	}
	pthread_cond_broadcast(&bf->cond);
	pthread_mutex_unlock(&bf->lock);
}

/* Wait on the condvar for at most ms; lock held. */
static void wait_locked(hyd_backfill *bf, unsigned ms)
{
	base_cond_wait_until(&bf->cond, &bf->lock,
			     base_now_ns() + (uint64_t)ms * 1000000ull);
}

/* Sleep up to ms (ticking), ending early on stop. */
/* While someone browses, the scheduler itself waits too (its census and
 * walks cost CPU that `ls -lR` on 2 cores would otherwise share). */
static void yield_to_browsing(hyd_backfill *bf)
{
	while (!stopped(bf) && hyd_fetch_browsing(bf->cfg.fetch))
		nanosleep(&(struct timespec){0, YIELD_NS}, NULL);
}

static void nap(hyd_backfill *bf, unsigned ms)
{
	uint64_t until = base_now_ns() + (uint64_t)ms * 1000000ull;

	while (!stopped(bf) && base_now_ns() < until) {
		hyd_bf__tick(bf);
		pthread_mutex_lock(&bf->lock);
		if (!stopped(bf))
			wait_locked(bf, TICK_MS);
		pthread_mutex_unlock(&bf->lock);
	}
}

/* ------------------------------------------------------------------ */
/* census and passes (scheduler thread)                               */
/* ------------------------------------------------------------------ */

struct census {
	hyd_backfill *bf;
	uint64_t total, stored, bytes_total, bytes_stored, seen;
};

static int census_one(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	struct census *cs = ctx;

	(void)ino;
	cs->total++;
	cs->bytes_total += c->len;
	if (hyd_store_has(cs->bf->cfg.store, &c->id) == 1) {
		cs->stored++;
		cs->bytes_stored += c->len;
	}
	if (++cs->seen % 4096 == 0)
		hyd_bf__tick(cs->bf);
	if (cs->seen % YIELD_EVERY == 0)
		yield_to_browsing(cs->bf);
	return stopped(cs->bf) ? 1 : 0;
}

/* The pending inos whose manifest the overlay lacks, into bf->fresh. */
static int fresh_list(hyd_backfill *bf)
{
	uint64_t *nv, after = 0;
	size_t n;
	int r;

	bf->nfresh = 0;
	for (;;) {
		if (bf->capfresh - bf->nfresh < MISSING_PAGE) {
			nv = realloc(bf->fresh, (bf->capfresh + MISSING_PAGE) *
						    sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			bf->fresh = nv;
			bf->capfresh += MISSING_PAGE;
		}
		r = cat_pending_missing(bf->cfg.cat, after,
					bf->fresh + bf->nfresh, MISSING_PAGE,
					&n);
		if (r < 0)
			return r;
		bf->nfresh += n;
		if (n < MISSING_PAGE)
			return 0;
		after = bf->fresh[bf->nfresh - 1];
	}
}

/* Was ino's manifest missing at the last census? */
static int is_fresh(const hyd_backfill *bf, uint64_t ino)
{
	size_t lo = 0, hi = bf->nfresh, m;

	while (lo < hi) {
		m = lo + (hi - lo) / 2;
		if (bf->fresh[m] < ino)
			lo = m + 1;
		else
			hi = m;
	}
	return lo < bf->nfresh && bf->fresh[lo] == ino;
}

/* Count what is stored, over every manifest that is local now, and list
 * the pending manifests that are not (the recount that keeps the totals
 * honest as manifests arrive). Returns how many chunks are missing, or
 * -errno. */
static int64_t census(hyd_backfill *bf)
{
	struct census cs = {.bf = bf};
	struct cat_meta meta;
	int r;

	cat_reader_meta(bf->cfg.cat, &meta);
	/* Missing manifests first: one that lands between the two steps is
	 * then counted by the chunk walk and also fresh, which only counts
	 * its chunks once more (the safe side), never not at all. */
	r = meta.pending ? fresh_list(bf) : 0;
	if (r < 0)
		return r;
	r = cat_chunks_each(bf->cfg.cat, census_one, &cs);
	if (r < 0)
		return r;
	if (stopped(bf))
		return -ECANCELED;
	pthread_mutex_lock(&bf->lock);
	bf->chunks_total = cs.total;
	bf->chunks_stored = cs.stored;
	bf->bytes_total = cs.bytes_total;
	bf->bytes_stored = cs.bytes_stored;
	bf->manifests_total = meta.pending;
	bf->manifests_missing = bf->nfresh;
	pthread_mutex_unlock(&bf->lock);
	return (int64_t)(cs.total - cs.stored);
}

/* One chunk of a manifest that arrived after the census, counted when the
 * pass meets it (stored: it is in the store already). */
static void count_fresh(hyd_backfill *bf, uint32_t len, int stored)
{
	pthread_mutex_lock(&bf->lock);
	bf->chunks_total++;
	bf->bytes_total += len;
	if (stored) {
		bf->chunks_stored++;
		bf->bytes_stored += len;
	}
	pthread_mutex_unlock(&bf->lock);
}

/* No room for one more flight of len bytes? Lock held. After a full disk
 * only a few go out until one is stored again: each chunk fetched while
 * the disk is still full is wire spent for nothing. */
static int window_full(hyd_backfill *bf, uint32_t len)
{
	uint64_t n = bf->probing ? PROBE_WINDOW : bf->cfg.window;
	uint64_t bytes = bf->cfg.window_bytes;

	/* What follows a job must not wait for the bulk ahead of it to
	 * land: it may go a window past it (and goes first). */
	if (bf->in_opened && !bf->probing) {
		n *= 2;
		bytes *= 2;
	}
	return bf->outstanding >= n ||
	       (bf->outstanding && bf->outstanding_bytes + len > bytes);
}

/* Ask for one chunk unless stored, once the window has room. fresh: it
 * belongs to a manifest that was not local at the census, so the totals
 * count it now. Returns 0, -ECANCELED (stopping), -ENOSPC (the disk
 * filled up: end the pass). */
/* Under a bound, everything but pins asks only while the store has
 * room (hyd_bf__room): else the walk is over, -EDQUOT. */
static int no_room(hyd_backfill *bf)
{
	if (bf->pinning || hyd_bf__room(bf))
		return 0;
	pthread_mutex_lock(&bf->lock);
	bf->full = 1;
	pthread_mutex_unlock(&bf->lock);
	return -EDQUOT;
}

static int drain_opened(hyd_backfill *bf);

int hyd_bf__submit_chunk(hyd_backfill *bf, const struct cat_chunk *c, int fresh)
{
	struct hyd_flight *fl = NULL;
	int r, opened;

	if (!c->len || c->len > bf->cfg.max_raw)
		return 0;
	if (hyd_store_has(bf->cfg.store, &c->id) == 1) {
		if (fresh)
			count_fresh(bf, c->len, 1);
		return 0;
	}
	r = no_room(bf);
	if (r < 0)
		return r;
	pthread_mutex_lock(&bf->lock);
	while (!stopped(bf) && !bf->nospc && window_full(bf, c->len)) {
		/* What a job opened meanwhile goes first, in the window of
		 * its own (window_full): a model file opened while the pass
		 * waited here for room got its tensors asked for only once
		 * the pass's own chunks had landed (0.7 s later at 100 ms,
		 * with the rest of the tree held behind the job's reads). */
		opened = !bf->in_opened && bf->opened_n;
		pthread_mutex_unlock(&bf->lock);
		if (opened) {
			r = drain_opened(bf);
			if (r < 0)
				return r;
			pthread_mutex_lock(&bf->lock);
			continue;
		}
		hyd_bf__tick(bf);
		pthread_mutex_lock(&bf->lock);
		if (window_full(bf, c->len))
			wait_locked(bf, TICK_MS);
	}
	if (stopped(bf) || bf->nospc) {
		r = stopped(bf) ? -ECANCELED : -ENOSPC;
		pthread_mutex_unlock(&bf->lock);
		return r;
	}
	bf->outstanding++;
	bf->outstanding_bytes += c->len;
	bf->submitted++;
	pthread_mutex_unlock(&bf->lock);
	/* The wait for a window can be long; a read may have fetched and
	 * stored the chunk meanwhile: the checked join looks once more, in
	 * one step with finding no flight. */
	/* An opened directory's files go ahead of the rest of the backfill
	 * (and move up what of them is queued already). */
	r = hyd_fetch_submit_checked(bf->cfg.fetch, &c->id, c->len,
				     bf->in_opened ? HYD_PRIO_NEAR
						   : HYD_PRIO_BACKFILL,
				     HYD_DEADLINE_NONE, 1, &fl);
	if (r == 2) {
		pthread_mutex_lock(&bf->lock);
		bf->outstanding--;
		bf->outstanding_bytes -= c->len;
		bf->submitted--;
		pthread_mutex_unlock(&bf->lock);
		if (fresh)
			count_fresh(bf, c->len, 1);
		return 0;
	}
	/* Created or joined: the done hook counts it stored when it lands
	 * (once per flight), so the total counts it now. */
	if (r >= 0 && fresh)
		count_fresh(bf, c->len, 0);
	if (r == 0) {
		/* A directory's file the backfill sent already, in a batch
		 * that may stream in behind megabytes of others: the job
		 * walking it would wait for them, file by file. */
		if (bf->rescue_left >= c->len &&
		    hyd_fetch_rescue(bf->cfg.fetch, fl, HYD_PRIO_NEAR))
			bf->rescue_left -= c->len;
		/* Joined a flight already on its way (the same chunk earlier
		 * in this file or a neighbour, or a read's): not a new ask. */
		pthread_mutex_lock(&bf->lock);
		bf->submitted--;
		pthread_mutex_unlock(&bf->lock);
	}
	if (r < 0) {
		/* Not joined: the hook will not count it. */
		pthread_mutex_lock(&bf->lock);
		bf->outstanding--;
		bf->outstanding_bytes -= c->len;
		pthread_mutex_unlock(&bf->lock);
		return r == -ESHUTDOWN ? -ECANCELED : 0;
	}
	/* The outcome comes through the hook; the flight lives on with the
	 * fetcher's own reference. */
	hyd_fetch_release(bf->cfg.fetch, fl);
	return 0;
}

/* A failure of the pass that is not a chunk's: the pass ends STALLED and
 * is retried after a backoff. */
static void pass_failed(hyd_backfill *bf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void pass_failed(hyd_backfill *bf, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&bf->lock);
	bf->failed_pass++;
	va_start(ap, fmt);
	vsnprintf(bf->last_error, sizeof(bf->last_error), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&bf->lock);
}

/* Make the manifest of pending file ino local with its segment's answer
 * (whole: and every manifest of the segment that answer left to
 * requests of their own). 0 when it is, 1 when the file is left for a
 * later pass (the source is still hashing, or the segment failed: logged
 * by the manifest fetcher), -ECANCELED. */
static int seg_manifests(hyd_backfill *bf, uint64_t ino, int whole)
{
	uint64_t seg = ino / HYD_MANIFEST_SEG_INOS;
	uint64_t deadline;
	size_t files = 0;
	int r;

	if (!bf->cfg.manifest) {
		pass_failed(bf, "manifests of pending files are not local and "
				"there is no manifest fetcher");
		return 1;
	}
	if (seg >= bf->waiting_seg ||
	    (bf->seg_failed_set && bf->seg_failed == seg))
		return 1;
	hyd_bf__tick(bf);
	deadline =
	    base_now_ns() + (uint64_t)bf->cfg.manifest_wait_ms * 1000000ull;
	r = whole ? hyd_manifest_segment(bf->cfg.manifest, bf->cfg.cat, seg,
					 deadline, &bf->stop, &files)
		  : hyd_manifest_segment_for(bf->cfg.manifest, bf->cfg.cat, ino,
					     deadline, &bf->stop, &files);
	hyd_bf__tick(bf);
	if (r == 0) {
		base_debug("backfill manifests segment=%" PRIu64 " files=%zu",
			   seg, files);
		return 0;
	}
	if (r == -ECANCELED)
		return r;
	if (r == -EAGAIN) {
		/* Hashed in ino order: the next segments are not ready
		 * either (earlier ones may be: the pass goes by size, not
		 * by ino). Files with local manifests go on. */
		bf->manifests_waiting = 1;
		if (seg < bf->waiting_seg)
			bf->waiting_seg = seg;
		return 1;
	}
	bf->seg_failed_set = 1;
	bf->seg_failed = seg;
	pass_failed(bf, "manifests of segment %" PRIu64 ": %s", seg,
		    strerrordesc_np(-r));
	return 1;
}

/* The pass's files, the pins, the traces and model files ask for their
 * own manifest: the segment's answer, not the big files it left out
 * (one of them, a 2 GiB file's chunk list, held the first files of a
 * mount's pass 0.3 s at 50 ms). */
int hyd_bf__file_manifest(hyd_backfill *bf, uint64_t ino)
{
	return seg_manifests(bf, ino, 0);
}

static int is_done(hyd_backfill *bf, size_t idx)
{
	return bf->done[idx / 8] & (1u << (idx % 8));
}

static void set_done(hyd_backfill *bf, size_t idx)
{
	bf->done[idx / 8] |= (uint8_t)(1u << (idx % 8));
}

/* Ask for the missing entries of pack obj in one go, once the window
 * has room for all of them. As submit_chunk, per entry. */
static int submit_pack(hyd_backfill *bf, struct hyd_pack_obj *obj, int fresh)
{
	struct hyd_flight **fls = calloc(obj->n ? obj->n : 1, sizeof(*fls));
	uint8_t *want = calloc(obj->n ? obj->n : 1, 1);
	uint8_t *state = calloc(obj->n ? obj->n : 1, 1);
	uint64_t k = 0, bytes = 0;
	size_t i;
	int r = 0;

	if (!fls || !want || !state) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < obj->n; i++) {
		if (hyd_store_has(bf->cfg.store, &obj->ids[i]) == 1) {
			if (fresh)
				count_fresh(bf, obj->lens[i], 1);
			continue;
		}
		want[i] = 1;
		k++;
		bytes += obj->lens[i];
	}
	if (!k)
		goto out;
	r = no_room(bf);
	if (r < 0)
		goto out;
	pthread_mutex_lock(&bf->lock);
	/* The whole pack at once: it may pass window_bytes by one pack. */
	while (!stopped(bf) && !bf->nospc && window_full(bf, 1)) {
		pthread_mutex_unlock(&bf->lock);
		hyd_bf__tick(bf);
		pthread_mutex_lock(&bf->lock);
		if (window_full(bf, 1))
			wait_locked(bf, TICK_MS);
	}
	if (stopped(bf) || bf->nospc) {
		r = stopped(bf) ? -ECANCELED : -ENOSPC;
		pthread_mutex_unlock(&bf->lock);
		goto out;
	}
	bf->outstanding += k;
	bf->outstanding_bytes += bytes;
	bf->submitted += k;
	pthread_mutex_unlock(&bf->lock);
	r = hyd_fetch_submit_pack(bf->cfg.fetch, obj, want, 1, fls, state);
	pthread_mutex_lock(&bf->lock);
	for (i = 0; i < obj->n; i++) {
		if (!want[i])
			continue;
		if (state[i] == 0) /* joined: not a new ask */
			bf->submitted--;
		if (state[i] == 2 || state[i] == 3) {
			/* stored after all, or never reached: no hook */
			bf->outstanding--;
			bf->outstanding_bytes -= obj->lens[i];
			bf->submitted--;
		}
	}
	pthread_mutex_unlock(&bf->lock);
	for (i = 0; i < obj->n; i++) {
		if (fresh && want[i] && state[i] != 3)
			count_fresh(bf, obj->lens[i], state[i] == 2);
		hyd_fetch_release(bf->cfg.fetch, fls[i]);
	}
	if (r == -ESHUTDOWN)
		r = -ECANCELED;
out:
	free(fls);
	free(want);
	free(state);
	return r;
}

/* --cacheable: the packs of file idx (its group's, or its parts), each
 * asked for whole; the group's other files are done with it. 1 when the
 * file has no pack to ask for (the caller goes chunk by chunk), else as
 * do_file. */
static int do_file_packs(hyd_backfill *bf, size_t idx)
{
	const struct hyd_bf_file *fi = &bf->files.v[idx];
	struct hyd_pack_obj *obj;
	struct cat_pack p;
	struct cat_meta m;
	uint64_t part, ino;
	long j;
	int r, fetched = 0;

	r = cat_pack_find(bf->cfg.cat, fi->ino, &p);
	if (r < 0)
		return r == -ENOENT ? 0 : 1;
	cat_reader_meta(bf->cfg.cat, &m);
	for (ino = p.first; !p.big && ino <= p.last; ino++) {
		j = hyd_bf__files_find(&bf->files, ino);
		if (j >= 0)
			set_done(bf, (size_t)j);
	}
	for (part = 0; part < p.parts; part++) {
		r = hyd_pack_obj_make(hyd_fetch_base_url(bf->cfg.fetch),
				      m.generation, bf->cfg.cat, &p, part,
				      &obj);
		if (r == -EAGAIN && !fetched) {
			/* A pending file's manifest: the segment's, once,
			 * then the same part again. */
			fetched = 1;
			r = hyd_bf__file_manifest(bf, p.first);
			if (r != 0)
				return r < 0 ? r : 0;
			r = hyd_pack_obj_make(hyd_fetch_base_url(bf->cfg.fetch),
					      m.generation, bf->cfg.cat, &p,
					      part, &obj);
		}
		if (r < 0) {
			base_debug("backfill skips a pack ino=%" PRIu64
				   " part=%" PRIu64 " errno=%s",
				   p.first, part, base_errname(r));
			return r == -EAGAIN ? 0 : 1;
		}
		r = submit_pack(bf, obj, is_fresh(bf, p.first));
		hyd_pack_obj_unref(obj);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Every missing chunk of file idx. */
static int do_file(hyd_backfill *bf, size_t idx)
{
	const struct hyd_bf_file *fi = &bf->files.v[idx];
	struct cat_chunk cs[STEP_CHUNKS];
	uint64_t off = 0;
	size_t n, i;
	int r, fresh = -1, fetched = 0;

	r = no_room(bf);
	if (r < 0)
		return r;
	set_done(bf, idx);
	if (hyd_fetch_packs(bf->cfg.fetch)) {
		r = do_file_packs(bf, idx);
		if (r <= 0)
			return r;
	}
	while (off < fi->size) {
		r = cat_chunks_range(bf->cfg.cat, fi->ino, off, fi->size - off,
				     cs, STEP_CHUNKS, &n);
		if (r == -EAGAIN && !fetched) {
			/* A pending file whose manifest is not local. */
			fetched = 1;
			r = hyd_bf__file_manifest(bf, fi->ino);
			if (r == 0)
				continue;
			return r < 0 ? r : 0;
		}
		if (r == -ESTALE) {
			/* No manifest in this generation: nothing to fetch;
			 * reads of it fail and say why. */
			bf->changed_pass++;
			return 0;
		}
		if (r < 0 || n == 0) {
			/* The read path reports such a file when it is read;
			 * here it is only skipped. */
			base_debug("backfill skips a file with a bad chunk "
				   "manifest ino=%" PRIu64,
				   fi->ino);
			return 0;
		}
		/* A file asked for again (do_opened) was counted the
		 * first time. */
		if (fresh < 0)
			fresh = !bf->reasking && is_fresh(bf, fi->ino);
		for (i = 0; i < n; i++) {
			if (chunk_id_is_hole(&cs[i].id))
				continue; /* zeros from nowhere */
			r = hyd_bf__submit_chunk(bf, &cs[i], fresh);
			if (r < 0)
				return r;
		}
		off = cs[n - 1].off + cs[n - 1].len;
		/* A big file takes a while: what a job just opened goes
		 * first (not from inside an opened directory's own). */
		if (!bf->in_opened && off < fi->size) {
			r = drain_opened(bf);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int do_opened(hyd_backfill *bf);

/* Every directory opened since: their files now. */
static int drain_opened(hyd_backfill *bf)
{
	int r;

	bf->in_opened = 1;
	while ((r = do_opened(bf)) > 0)
		;
	bf->in_opened = 0;
	return r;
}

/* An opened directory's files (smallest first) already in backfill's
 * transfers are asked for again ahead of them, up to this many bytes:
 * the small files a walk reads next, not a data set's bulk. */
#define RESCUE_DIR_BYTES (256u << 10)
#define RESCUE_DIR_FILES 64u

/* A directory someone opened a file in: its files now, smallest first. */
static int do_opened(hyd_backfill *bf)
{
	uint64_t ino = 0;
	size_t lo, hi, k;
	unsigned again;
	long idx;
	int r, have = 0;

	pthread_mutex_lock(&bf->lock);
	if (bf->opened_n) {
		ino = bf->opened[0];
		memmove(bf->opened, bf->opened + 1,
			--bf->opened_n * sizeof(bf->opened[0]));
		have = 1;
	}
	pthread_mutex_unlock(&bf->lock);
	if (!have)
		return 0;
	idx = hyd_bf__files_find(&bf->files, ino);
	if (idx < 0)
		return 0;
	/* A model file: its tensors in offset order, before its
	 * directory's other files. */
	r = hyd_bf__model(bf, ino);
	if (r < 0)
		return r;
	if (r == 1)
		set_done(bf, (size_t)idx);
	hyd_bf__files_in_dir(&bf->files, bf->files.v[idx].parent, &lo, &hi);
	/* Files the pass asked for already are asked again (joins) for
	 * their rescue, the first RESCUE_DIR_FILES of them. */
	bf->rescue_left = RESCUE_DIR_BYTES;
	for (k = lo, r = 0, again = 0; k < hi && r >= 0; k++) {
		bf->reasking = is_done(bf, bf->files.by_parent[k]);
		if (bf->reasking &&
		    (!bf->rescue_left || again++ >= RESCUE_DIR_FILES))
			continue;
		r = do_file(bf, bf->files.by_parent[k]);
	}
	bf->rescue_left = 0;
	bf->reasking = 0;
	return r < 0 ? r : 1;
}

/* The manifests no file of the pass asked for, segment by segment. */
static int sweep_manifests(hyd_backfill *bf)
{
	uint64_t after = 0, ino, seg_end;
	size_t n;
	int r;

	while (!bf->manifests_waiting) {
		if (stopped(bf))
			return -ECANCELED;
		r = cat_pending_missing(bf->cfg.cat, after, &ino, 1, &n);
		if (r < 0 || n == 0)
			return 0; /* the next census says it again */
		r = seg_manifests(bf, ino, 1);
		if (r < 0)
			return r;
		if (!bf->cfg.manifest)
			return 0;
		/* Done or failed, the rest of this segment was its answer. */
		seg_end =
		    (ino / HYD_MANIFEST_SEG_INOS + 1) * HYD_MANIFEST_SEG_INOS -
		    1;
		after = seg_end > ino ? seg_end : ino;
	}
	return 0;
}

/* 1 when file idx's manifest is still to come from the bulk prefetch
 * (pending, not local, and the prefetch still runs): the pass goes on with
 * files it can fetch now and comes back to this one once its segment is
 * in, instead of waiting for that segment while others are ready. */
static int manifest_coming(hyd_backfill *bf, size_t idx)
{
	uint64_t segs, files;
	int running;

	if (!bf->cfg.manifest)
		return 0;
	/* The cheap look first: once the prefetch ended, nothing is. */
	hyd_manifest_prefetch_progress(bf->cfg.manifest, &segs, &files,
				       &running);
	return running &&
	       cat_manifest_state(bf->cfg.cat, bf->files.v[idx].ino) ==
		   CAT_MANIFEST_MISSING;
}

/* Has the manifest prefetch made a segment local, or ended, since it
 * stood at segs / running? */
static int prefetch_moved(hyd_backfill *bf, uint64_t segs, int running)
{
	uint64_t s, files;
	int run;

	hyd_manifest_prefetch_progress(bf->cfg.manifest, &s, &files, &run);
	return s != segs || run != running;
}

/* The files set aside for their manifests whose manifest is in now (all
 * of them, waiting as needed, when all is set): in the order they were
 * set aside, which is the pass's. */
static int do_deferred(hyd_backfill *bf, size_t *def, size_t *ndef, int all)
{
	uint64_t segs = 0, files;
	size_t i, k = 0;
	int r, running = 0;

	/* A look costs a catalog query per file set aside (thousands at a
	 * mount's start, when every manifest is still to come, once every
	 * 64 files of the pass: 9,700 queries of the first 1,000 files of
	 * a 5,000-file tree, on the catalog's lock that lookups take too).
	 * Only a segment made local, or the prefetch's end, changes what it
	 * finds. */
	if (bf->cfg.manifest)
		hyd_manifest_prefetch_progress(bf->cfg.manifest, &segs, &files,
					       &running);
	if (!all && segs == bf->def_segs && running == bf->def_running)
		return 0;
	bf->def_segs = segs;
	bf->def_running = running;
	for (i = 0; i < *ndef; i++) {
		/* A segment came while this look did files after the ones
		 * it kept: the next look starts over, so the set-aside
		 * files go in the pass's order (its smallest first), not
		 * all of one early segment's (a data set's) ahead of a
		 * later one's small files. */
		if (!all && k && prefetch_moved(bf, segs, running)) {
			memmove(def + k, def + i, (*ndef - i) * sizeof(*def));
			k += *ndef - i;
			break;
		}
		if (!all && manifest_coming(bf, def[i])) {
			def[k++] = def[i];
			continue;
		}
		if (is_done(bf, def[i]))
			continue;
		r = do_file(bf, def[i]);
		if (r < 0) {
			memmove(def + k, def + i + 1,
				(*ndef - i - 1) * sizeof(*def));
			*ndef = k + *ndef - i - 1;
			return r;
		}
	}
	*ndef = k;
	return 0;
}

/* The end of a pass, while the prefetch still brings manifests of files
 * set aside: each as its segment comes, and what a job opens meanwhile
 * at once. Waiting in do_file for the first of them instead left the
 * job's directories unserved for as long as that segment took (0.4 s at
 * 20 ms for the tts tree's segment 0, which holds the chunk list of a
 * 2 GiB file), and an import-like walk read file by file on demand. */
static int wait_deferred(hyd_backfill *bf, size_t *def, size_t *ndef)
{
	uint64_t segs, files;
	int r = 0, running = 1;

	while (r == 0 && *ndef && bf->cfg.manifest) {
		hyd_manifest_prefetch_progress(bf->cfg.manifest, &segs, &files,
					       &running);
		if (!running || stopped(bf))
			break;
		r = drain_opened(bf);
		if (r == 0)
			r = do_deferred(bf, def, ndef, 0);
		hyd_bf__tick(bf);
		pthread_mutex_lock(&bf->lock);
		if (r == 0 && *ndef && !bf->opened_n && !stopped(bf))
			wait_locked(bf, DEFER_POLL_MS);
		pthread_mutex_unlock(&bf->lock);
	}
	return r;
}

/* The order of a pass. Across a WAN (a measured round trip of
 * HYD_FETCH_WAN_RTT_NS or more) smallest first, by size class (a quarter
 * octave wide; each class in catalog order, the scan's depth-first order):
 * a file read on demand costs a round trip whatever its size, so there the
 * small ones are where reading ahead saves the most time per byte moved,
 * and a job that walks a tree of small files (imports, a data set's
 * samples) finds them there; a big file read on demand streams at the
 * link's rate once its window has grown. Near the source (or before any
 * round trip is measured) catalog order: a read on demand costs little
 * there, and a reader of the whole tree in its order (tar, cp -a, rsync
 * from the mount) finds each file fetched just ahead of it instead of
 * waiting on big files while backfill brings small ones it reads only later
 * (the small tree at 200 Mbit/s: 7.4-7.9 s smallest first, 7.0-7.2 s in
 * catalog order). Sets *ret_known once a round trip is measured. */
static const uint32_t *pass_order(hyd_backfill *bf, int *ret_known)
{
	uint64_t rate = 0, rtt = 0;

	if (bf->cfg.fetch)
		hyd_fetch_link(bf->cfg.fetch, &rate, &rtt);
	*ret_known = rtt != 0;
	return rtt >= HYD_FETCH_WAN_RTT_NS ? bf->files.by_size : NULL;
}

static int run_pass(hyd_backfill *bf)
{
	size_t k, idx, ndef = 0, *def;
	const uint32_t *order, *o;
	int r = 0, known;

	memset(bf->done, 0, (bf->files.n + 7) / 8);
	bf->manifests_waiting = 0;
	bf->waiting_seg = UINT64_MAX;
	bf->seg_failed_set = 0;
	bf->changed_pass = 0;
	bf->def_segs = UINT64_MAX;
	def = malloc((bf->files.n ? bf->files.n : 1) * sizeof(*def));
	if (!def)
		return -ENOMEM;
	order = pass_order(bf, &known);
	for (k = 0; k < bf->files.n; k++) {
		if (stopped(bf)) {
			r = -ECANCELED;
			goto out;
		}
		/* The first round trip measured may call for the other order:
		 * the pass starts over in it (what is done is skipped). */
		if (!known && (k % 64) == 0 &&
		    (o = pass_order(bf, &known)) != order) {
			order = o;
			k = 0;
		}
		r = drain_opened(bf);
		if (r == 0 && ndef && (k % 64) == 0)
			r = do_deferred(bf, def, &ndef, 0);
		if (r < 0)
			goto out;
		idx = order ? order[k] : k;
		if (is_done(bf, idx))
			continue;
		if ((k % 64) == 0 &&
		    __atomic_load_n(&bf->pins_dirty, __ATOMIC_RELAXED))
			r = hyd_bf__pins(bf);
		if (r < 0)
			goto out;
		if (manifest_coming(bf, idx)) {
			def[ndef++] = idx;
			continue;
		}
		yield_to_browsing(bf);
		r = do_file(bf, idx);
		if (r < 0)
			goto out;
	}
	r = wait_deferred(bf, def, &ndef);
	if (r == 0)
		r = do_deferred(bf, def, &ndef, 1);
	if (r == 0)
		r = sweep_manifests(bf);
out:
	free(def);
	return r;
}

void hyd_bf__drain(hyd_backfill *bf)
{
	pthread_mutex_lock(&bf->lock);
	while (!stopped(bf) && bf->outstanding) {
		pthread_mutex_unlock(&bf->lock);
		hyd_bf__tick(bf);
		pthread_mutex_lock(&bf->lock);
		if (bf->outstanding)
			wait_locked(bf, TICK_MS);
	}
	pthread_mutex_unlock(&bf->lock);
}

/* Without the walk (--no-backfill, or complete), a model file a job
 * opens still gets its tensors asked for ahead of its reads. */
static void idle(hyd_backfill *bf)
{
	uint64_t ino;
	int have;

	while (!stopped(bf)) {
		pthread_mutex_lock(&bf->lock);
		have = bf->opened_n > 0;
		ino = have ? bf->opened[0] : 0;
		if (have)
			memmove(bf->opened, bf->opened + 1,
				--bf->opened_n * sizeof(bf->opened[0]));
		if (!have && !stopped(bf) && !bf->pins_dirty)
			wait_locked(bf, TICK_MS);
		pthread_mutex_unlock(&bf->lock);
		if (__atomic_load_n(&bf->pins_dirty, __ATOMIC_RELAXED))
			hyd_bf__pins(bf);
		if (have)
			hyd_bf__model(bf, ino);
		hyd_bf__tick(bf);
	}
}

/* The complete mark (HYD_STORE_META_COMPLETE): the catalog it was made
 * for (generation, creation time, tree digest), then the census totals. A
 * store only loses chunks by dropping rows, which deletes the mark, so a
 * mark of this very catalog proves what a census would: nothing missing.
 * A mount of a complete cache then walks nothing (a census reads every
 * chunk row of the catalog and looks each up in the store). */
static int mark_ident(const struct cat_meta *m, char *buf, size_t cap)
{
	int n =
	    snprintf(buf, cap, "%" PRIu64 " %" PRId64 " %s", m->generation,
		     m->created_ns, m->tree_sha256[0] ? m->tree_sha256 : "-");

	return n > 0 && (size_t)n < cap ? n : -1;
}

static void mark_save(hyd_backfill *bf)
{
	char buf[256];
	struct cat_meta meta;
	int n, r;

	cat_reader_meta(bf->cfg.cat, &meta);
	n = mark_ident(&meta, buf, sizeof(buf));
	if (n < 0)
		return;
	pthread_mutex_lock(&bf->lock);
	r = snprintf(buf + n, sizeof(buf) - (size_t)n,
		     " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
		     bf->chunks_total, bf->bytes_total, bf->manifests_total,
		     bf->changed_last);
	pthread_mutex_unlock(&bf->lock);
	if (r < 0 || (size_t)r >= sizeof(buf) - (size_t)n)
		return;
	r = hyd_store_meta_set(bf->cfg.store, HYD_STORE_META_COMPLETE, buf);
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "cannot mark the store complete (the next mount "
			     "counts it again)");
}

/* 1 when the store carries a complete mark for this catalog (the totals
 * are then set from it), else 0. */
static int mark_load(hyd_backfill *bf)
{
	char buf[256], want[160], tail[256];
	uint64_t chunks, bytes, manifests, changed;
	struct cat_meta meta;
	int n;

	cat_reader_meta(bf->cfg.cat, &meta);
	n = mark_ident(&meta, want, sizeof(want));
	if (n < 0 ||
	    hyd_store_meta_get(bf->cfg.store, HYD_STORE_META_COMPLETE, buf,
			       sizeof(buf)) < 0 ||
	    strncmp(buf, want, (size_t)n) != 0 || buf[n] != ' ')
		return 0;
	if (sscanf(buf + n,
		   " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 "%255s",
		   &chunks, &bytes, &manifests, &changed, tail) != 4 ||
	    manifests != meta.pending)
		return 0;
	pthread_mutex_lock(&bf->lock);
	bf->chunks_total = bf->chunks_stored = chunks;
	bf->bytes_total = bf->bytes_stored = bytes;
	bf->manifests_total = manifests;
	bf->manifests_missing = 0;
	bf->changed_last = changed;
	bf->complete = 1;
	pthread_mutex_unlock(&bf->lock);
	return 1;
}

static void backfill_run(hyd_backfill *bf)
{
	unsigned backoff_ms = 0;
	int64_t missing;
	int r, bad;

	if (mark_load(bf)) {
		base_debug("backfill: the store is complete for this catalog "
			   "(its mark), nothing to count");
		return;
	}
	yield_to_browsing(bf);
	r = hyd_bf__files_build(bf->cfg.cat, &bf->stop, &bf->files);
	if (r == 0) {
		bf->done = calloc(bf->files.n / 8 + 1, 1);
		if (!bf->done)
			r = -ENOMEM;
	}
	if (r < 0) {
		if (r == -ECANCELED)
			return;
		base_log_err(BASE_LOG_ERROR, r,
			     "backfill cannot walk the catalog; it stops");
		pthread_mutex_lock(&bf->lock);
		snprintf(bf->last_error, sizeof(bf->last_error),
			 "catalog walk: %s", strerror(-r));
		bf->backing_off = 1; /* STALLED, for good */
		pthread_mutex_unlock(&bf->lock);
		return;
	}
	while (!stopped(bf)) {
		yield_to_browsing(bf);
		missing = census(bf);
		if (missing == 0 && bf->nfresh == 0) {
			pthread_mutex_lock(&bf->lock);
			bf->complete = 1;
			pthread_mutex_unlock(&bf->lock);
			mark_save(bf);
			/* The state line at once, not at the next tick: it
			 * is the moment the cache became complete. */
			bf->next_sample_ns = 0;
			hyd_bf__tick(bf);
			if (bf->changed_last)
				base_warn("backfill complete without files "
					  "whose source changed before their "
					  "manifest was made (reads of them "
					  "fail; a newer generation has them) "
					  "files=%" PRIu64,
					  bf->changed_last);
			return;
		}
		if (missing < 0 && missing != -ECANCELED)
			base_log_err(BASE_LOG_WARN, (int)missing,
				     "backfill census failed; it goes on");
		pthread_mutex_lock(&bf->lock);
		bf->failed_pass = 0;
		bf->nospc = 0;
		bf->passes++;
		bf->last_progress_ns = base_now_ns();
		pthread_mutex_unlock(&bf->lock);
		base_debug("backfill pass=%" PRIu64 " missing=%" PRId64,
			   bf->passes, missing);
		run_pass(bf);
		bf->changed_last = bf->changed_pass;
		hyd_bf__drain(bf);
		if (bf->full) {
			base_info(
			    "backfill stops at the cache bound (it "
			    "fills %u%% of --cache-max and never evicts): "
			    "reads fetch the rest bound=%" PRIu64,
			    HYD_BF_FILL_PCT, bf->cfg.bound);
			bf->next_sample_ns = 0;
			hyd_bf__tick(bf);
			return;
		}
		pthread_mutex_lock(&bf->lock);
		bad = bf->failed_pass || bf->nospc;
		pthread_mutex_unlock(&bf->lock);
		if (!bad) {
			backoff_ms = 0;
			continue;
		}
		backoff_ms = backoff_ms ? backoff_ms * 2 : BACKOFF_FIRST_MS;
		if (backoff_ms > BACKOFF_MAX_MS)
			backoff_ms = BACKOFF_MAX_MS;
		pthread_mutex_lock(&bf->lock);
		bf->backing_off = 1;
		if (!bf->last_error[0] || !bf->nospc)
			snprintf(bf->last_error, sizeof(bf->last_error),
				 "%" PRIu64 " chunks failed in the last pass; "
				 "retrying",
				 bf->failed_pass);
		pthread_mutex_unlock(&bf->lock);
		nap(bf, backoff_ms);
		pthread_mutex_lock(&bf->lock);
		bf->backing_off = 0;
		pthread_mutex_unlock(&bf->lock);
	}
}

/* After a run ended for a switch: take the new catalog and start over
 * (1), or 0 when the thread is to end. The flights of the old run end
 * through the hook as always; the census of the new run recounts. */
static int take_switch(hyd_backfill *bf)
{
	pthread_mutex_lock(&bf->lock);
	if (__atomic_load_n(&bf->stop, __ATOMIC_RELAXED) != STOP_SWITCH ||
	    !bf->next_cat) {
		pthread_mutex_unlock(&bf->lock);
		return 0;
	}
	bf->old_cat = bf->cfg.cat;
	bf->cfg.cat = bf->next_cat;
	bf->cfg.manifest = bf->next_manifest;
	bf->next_cat = NULL;
	bf->next_manifest = NULL;
	bf->switches++;
	bf->complete = 0;
	bf->chunks_total = bf->chunks_stored = 0;
	bf->bytes_total = bf->bytes_stored = 0;
	bf->manifests_total = bf->manifests_missing = 0;
	bf->changed_last = 0;
	bf->full = 0;
	bf->evicted_at_walk = 0;
	bf->last_error[0] = '\0';
	__atomic_store_n(&bf->stop, 0, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&bf->cond);
	pthread_mutex_unlock(&bf->lock);
	hyd_bf__files_free(&bf->files);
	free(bf->done);
	bf->done = NULL;
	bf->nfresh = 0;
	/* The traces again, by the new catalog's inos (what is stored is
	 * skipped, a file changed by the switch is left out). */
	hyd_trace_plan_free(&bf->plan);
	bf->plan_at = 0;
	bf->pf_state =
	    bf->cfg.ntraces ? HYD_PREFETCH_PLANNING : HYD_PREFETCH_NONE;
	/* The new state line at once. */
	bf->next_sample_ns = 0;
	return 1;
}

static void *bf_main(void *arg)
{
	hyd_backfill *bf = arg;
	int seeded = !bf->cfg.seed;

	base_thread_name("backfill");
	do {
		/* Pinned files first, then a trace's ranges: the job it
		 * recorded is starting. */
		if (hyd_bf__pins(bf) == 0 && hyd_bf__prefetch(bf) == 0 &&
		    bf->cfg.enabled) {
			/* then local copies, so the pass fetches the rest */
			if (!seeded)
				bf->cfg.seed(bf->cfg.seed_arg, bf->cfg.cat,
					     &bf->stop);
			seeded = 1;
			backfill_run(bf);
		}
		/* Complete, disabled or stuck for good: rates and
		 * persistence go on until stop or a switch. */
		idle(bf);
	} while (take_switch(bf));
	return NULL;
}

/* ------------------------------------------------------------------ */
/* public                                                             */
/* ------------------------------------------------------------------ */

int hyd_backfill_new(const struct hyd_backfill_config *cfg, hyd_backfill **ret)
{
	hyd_backfill *bf;
	char buf[32];
	uint64_t v;

	*ret = NULL;
	if (!cfg->cat || !cfg->fetch || !cfg->max_raw)
		return -EINVAL;
	bf = calloc(1, sizeof(*bf));
	if (!bf)
		return -ENOMEM;
	bf->cfg = *cfg;
	if (!bf->cfg.window)
		bf->cfg.window = WINDOW_DEFAULT;
	if (!bf->cfg.window_bytes)
		bf->cfg.window_bytes = WINDOW_BYTES_DEFAULT;
	if (!bf->cfg.manifest_wait_ms)
		bf->cfg.manifest_wait_ms = MANIFEST_WAIT_MS_DEFAULT;
	if (base_cond_init(&bf->cond) < 0) {
		free(bf);
		return -ENOMEM;
	}
	pthread_mutex_init(&bf->lock, NULL);
	if (cfg->store && hyd_store_meta_get(cfg->store, "wire_bytes", buf,
					     sizeof(buf)) == 0) {
		if (base_parse_u64(buf, 0, UINT64_MAX, &v) == 0)
			bf->wire_base = v;
	}
	bf->start_ns = base_now_ns();
	bf->last_progress_ns = bf->start_ns;
	bf->logged_state =
	    cfg->enabled ? HYD_STATE_BACKFILLING : HYD_STATE_BROWSING;
	bf->pf_state = cfg->ntraces ? HYD_PREFETCH_PLANNING : HYD_PREFETCH_NONE;
	hyd_fetch_set_done_hook(cfg->fetch, on_done, bf);
	*ret = bf;
	return 0;
}

int hyd_backfill_start(hyd_backfill *bf)
{
	sigset_t all, old;
	int r;

	if (bf->started)
		return -EALREADY;
	bf->start_ns = base_now_ns();
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&bf->th, NULL, bf_main, bf);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0)
		bf->started = 1;
	return r;
}

void hyd_backfill_stop(hyd_backfill *bf)
{
	struct hyd_fetch_stats fs;

	if (!bf || bf->finished)
		return;
	bf->finished = 1;
	if (bf->started) {
		pthread_mutex_lock(&bf->lock);
		__atomic_store_n(&bf->stop, STOP_END, __ATOMIC_RELAXED);
		pthread_cond_broadcast(&bf->cond);
		pthread_mutex_unlock(&bf->lock);
		pthread_join(bf->th, NULL);
		bf->started = 0;
	}
	hyd_fetch_stats(bf->cfg.fetch, &fs);
	hyd_bf__persist_wire(bf, fs.wire_bytes);
}

void hyd_backfill_free(hyd_backfill *bf)
{
	if (!bf)
		return;
	hyd_backfill_stop(bf);
	hyd_trace_plan_free(&bf->plan);
	hyd_bf__files_free(&bf->files);
	free(bf->done);
	free(bf->fresh);
	pthread_cond_destroy(&bf->cond);
	pthread_mutex_destroy(&bf->lock);
	free(bf);
}

int hyd_backfill_switch(hyd_backfill *bf, cat_reader *cat,
			hyd_manifest *manifest, cat_reader **ret_old)
{
	int r = 0;

	*ret_old = NULL;
	pthread_mutex_lock(&bf->lock);
	if (bf->finished ||
	    __atomic_load_n(&bf->stop, __ATOMIC_RELAXED) == STOP_END) {
		pthread_mutex_unlock(&bf->lock);
		return -ECANCELED;
	}
	if (!bf->started) {
		/* No thread reads the catalog yet: swap it here. */
		*ret_old = bf->cfg.cat;
		bf->cfg.cat = cat;
		bf->cfg.manifest = manifest;
		pthread_mutex_unlock(&bf->lock);
		return 0;
	}
	bf->next_cat = cat;
	bf->next_manifest = manifest;
	__atomic_store_n(&bf->stop, STOP_SWITCH, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&bf->cond);
	while (bf->next_cat &&
	       __atomic_load_n(&bf->stop, __ATOMIC_RELAXED) != STOP_END)
		pthread_cond_wait(&bf->cond, &bf->lock);
	if (bf->next_cat) {
		/* Stopped before it was taken: the caller keeps it. */
		bf->next_cat = NULL;
		bf->next_manifest = NULL;
		r = -ECANCELED;
	} else {
		*ret_old = bf->old_cat;
		bf->old_cat = NULL;
	}
	pthread_mutex_unlock(&bf->lock);
	return r;
}

void hyd_backfill_note_open(hyd_backfill *bf, uint64_t ino)
{
	unsigned i;

	if (!bf)
		return;
	pthread_mutex_lock(&bf->lock);
	for (i = 0; i < bf->opened_n; i++)
		if (bf->opened[i] == ino)
			break;
	if (i == bf->opened_n) {
		/* Full: the oldest open matters least. */
		if (bf->opened_n == OPENED_RING) {
			memmove(bf->opened, bf->opened + 1,
				(OPENED_RING - 1) * sizeof(bf->opened[0]));
			bf->opened_n--;
		}
		bf->opened[bf->opened_n++] = ino;
	}
	/* An idle scheduler (no walk) looks at it at once. */
	pthread_cond_broadcast(&bf->cond);
	pthread_mutex_unlock(&bf->lock);
}

void hyd_backfill_on_open(void *arg, uint64_t ino)
{
	hyd_backfill_note_open(arg, ino);
}
