/*
 * hydrator/metrics/hyd_metrics.c — what ferry-hydrator's GET /metrics
 * says (docs/metrics.md): transfers by kind, the read path, generations,
 * and backfill's progress, read from where they are already counted.
 *
 * Nothing is counted twice: chunk and batch transfers are the fetcher's
 * own counters (hyd_fetch_stats), reads and store hits the read path's
 * (struct hyd_read_counts), catalog and manifest transfers and switches
 * the mount's (struct hyd_mount_counts), and progress is the control
 * socket's status (hyd_control_status), the numbers `ferry status`
 * prints.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/metrics/hyd_metrics.h"

#define LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)

static void one(struct base_prom *p, const char *name, const char *type,
		const char *help, uint64_t v)
{
	base_prom_family(p, name, type, help);
	base_prom_u64(p, name, NULL, 0, v);
}

/* A family with one label and a sample per (value, number). */
static void labelled(struct base_prom *p, const char *name, const char *type,
		     const char *help, const char *label,
		     const char *const *values, const uint64_t *v, size_t n)
{
	struct base_prom_label l;
	size_t i;

	base_prom_family(p, name, type, help);
	for (i = 0; i < n; i++) {
		l = (struct base_prom_label){label, values[i]};
		base_prom_u64(p, name, &l, 1, v[i]);
	}
}

static void render_fetch(const struct hyd_metrics_src *src, struct base_prom *p)
{
	static const char *const kinds[4] = {"chunk", "batch", "catalog",
					     "manifest"};
	static const char *const errs[4] = {"fetch_failed", "mismatch", "retry",
					    "store"};
	struct hyd_fetch_stats fs;
	uint64_t req[4], bytes[4], err[4];

	memset(&fs, 0, sizeof(fs));
	if (src->fetch)
		hyd_fetch_stats(src->fetch, &fs);
	req[0] = fs.requests;
	req[1] = fs.batches;
	bytes[0] = fs.wire_bytes - fs.batch_bytes;
	bytes[1] = fs.batch_bytes;
	req[2] = req[3] = bytes[2] = bytes[3] = 0;
	if (src->mount) {
		req[2] = LOAD(&src->mount->catalog_requests);
		bytes[2] = LOAD(&src->mount->catalog_bytes);
		req[3] = LOAD(&src->mount->manifest_requests);
		bytes[3] = LOAD(&src->mount->manifest_bytes);
	}
	labelled(p, "ferry_hydrator_fetch_requests_total", "counter",
		 "Requests sent to the replicator, by kind: chunk (GET "
		 "chunk/ID), batch (POST chunks, or GET pack with "
		 "--cacheable), catalog (HEAD polls, "
		 "catalogs, deltas, signatures), manifest.",
		 "kind", kinds, req, 4);
	labelled(p, "ferry_hydrator_fetch_bytes_total", "counter",
		 "Response body bytes received, by kind (compressed frames "
		 "for chunk and batch).",
		 "kind", kinds, bytes, 4);
	one(p, "ferry_hydrator_chunks_fetched_total", "counter",
	    "Chunks fetched and verified (alone or in batches).", fs.chunks);
	one(p, "ferry_hydrator_fetch_rescues_total", "counter",
	    "Chunks asked for a second time, ahead of the backfill "
	    "transfer they were in: for a read that waited a round trip "
	    "for it, or for a directory a job opened.",
	    fs.rescues);
	one(p, "ferry_hydrator_fetch_queued", "gauge",
	    "Chunk fetches waiting for a transfer.", fs.queued);
	one(p, "ferry_hydrator_fetch_active", "gauge",
	    "Chunk transfers running or backing off.", fs.active);
	if (src->fetch) {
		uint64_t rate, rtt;

		hyd_fetch_link(src->fetch, &rate, &rtt);
		base_prom_family(p, "ferry_hydrator_link_rtt_seconds", "gauge",
				 "The least time from a request sent to its "
				 "first byte lately (0: not measured yet).");
		base_prom_double(p, "ferry_hydrator_link_rtt_seconds", NULL, 0,
				 (double)rtt / 1e9);
		one(p, "ferry_hydrator_link_rate_bytes", "gauge",
		    "The most body bytes a second received lately (what a "
		    "stream's readahead window is sized by, with the round "
		    "trip).",
		    rate);
	}
	err[0] = fs.failures;
	err[1] = fs.mismatches;
	err[2] = fs.retries;
	err[3] = fs.store_errors;
	labelled(p, "ferry_hydrator_errors_total", "counter",
		 "Chunk fetch errors by kind: fetch_failed (a flight ended in "
		 "an error), mismatch (a frame failed its decode or hash "
		 "check), retry (a transient failure retried), store (a "
		 "verified chunk the store refused).",
		 "kind", errs, err, 4);
}

static void render_read(const struct hyd_metrics_src *src, struct base_prom *p)
{
	static const char *const res[2] = {"hit", "miss"};
	const struct hyd_read_counts *c = src->read;
	uint64_t v[2];

	if (!c)
		return;
	v[0] = LOAD(&c->chunk_hits);
	v[1] = LOAD(&c->chunk_misses);
	labelled(p, "ferry_hydrator_store_lookups_total", "counter",
		 "Chunks FUSE reads needed: hit (in the decoded cache or the "
		 "store) or miss (fetched, or joined a fetch in flight).",
		 "result", res, v, 2);
	one(p, "ferry_hydrator_reads_total", "counter",
	    "FUSE reads answered with data.", LOAD(&c->reads));
	one(p, "ferry_hydrator_read_bytes_total", "counter",
	    "Bytes served to FUSE reads.", LOAD(&c->read_bytes));
	one(p, "ferry_hydrator_dir_read_bytes_total", "counter",
	    "Of those, bytes served from files landed in --into's DIR.",
	    LOAD(&c->dir_read_bytes));
	one(p, "ferry_hydrator_read_errors_total", "counter",
	    "FUSE reads answered with an error (EIO and the like).",
	    LOAD(&c->read_errors));
	base_prom_family(p, "ferry_hydrator_read_duration_seconds", "histogram",
			 "FUSE reads answered with data, from the request to "
			 "the reply (a cold read includes its fetch).");
	base_prom_hist(p, "ferry_hydrator_read_duration_seconds", NULL, 0,
		       &c->latency);
}

/* Backfill's progress and the state, from the control socket's status;
 * left out when there is none (no control socket, no count yet). */
static void render_status(const struct hyd_metrics_src *src,
			  struct base_prom *p, uint64_t *gen)
{
	static const char *const states[5] = {"browsing", "backfilling",
					      "complete", "stalled", "stopped"};
	static const char *const dp[2] = {"done", "pending"};
	hyd_control *ctl = __atomic_load_n(&src->ctl, __ATOMIC_ACQUIRE);
	struct hyd_status *st;
	struct base_prom_label l[1];
	uint64_t v[2];
	size_t i;

	if (!ctl)
		return;
	st = malloc(sizeof(*st));
	if (!st || hyd_control_status(ctl, st) < 0) {
		free(st);
		return;
	}
	if (!*gen)
		*gen = st->generation;
	base_prom_family(p, "ferry_hydrator_state", "gauge",
			 "1 for the mount's state now (as ferry status "
			 "says it), 0 for the others.");
	for (i = 0; i < 5; i++) {
		l[0] = (struct base_prom_label){"state", states[i]};
		base_prom_u64(p, "ferry_hydrator_state", l, 1,
			      (size_t)st->state == i);
	}
#define PAIR(done, total)                                                      \
	v[0] = (done) < (total) ? (done) : (total), v[1] = (total)-v[0]
	PAIR(st->files_hydrated, st->files_total);
	labelled(p, "ferry_hydrator_backfill_files", "gauge",
		 "Regular files of the generation served: done (hydrated: "
		 "every chunk stored) or pending.",
		 "state", dp, v, 2);
	PAIR(st->bytes_hydrated, st->bytes_total);
	labelled(p, "ferry_hydrator_backfill_bytes", "gauge",
		 "Logical file bytes of those files, done or pending.", "state",
		 dp, v, 2);
	PAIR(st->chunks_stored, st->chunks_total);
	labelled(p, "ferry_hydrator_backfill_chunks", "gauge",
		 "Distinct chunks of the manifests known: done (stored) or "
		 "pending.",
		 "state", dp, v, 2);
	if (st->prefetch[0]) {
		PAIR(st->prefetch_bytes_done, st->prefetch_bytes);
		labelled(p, "ferry_hydrator_prefetch_bytes", "gauge",
			 "Raw bytes of the --prefetch traces' ranges (files "
			 "unchanged since): done (asked for, or stored) or "
			 "pending.",
			 "state", dp, v, 2);
		one(p, "ferry_hydrator_prefetch_skipped_files", "gauge",
		    "Files the --prefetch traces name that are gone or "
		    "changed since the trace was taken.",
		    st->prefetch_skipped);
	}
#undef PAIR
	one(p, "ferry_hydrator_wire_bytes_all_runs", "gauge",
	    "Bytes received into this cache by every run so far (ferry "
	    "status's wire bytes).",
	    st->wire_bytes);
	free(st);
}

void hyd_metrics_render(const struct hyd_metrics_src *src, struct base_prom *p)
{
	uint64_t gen = src->mount ? LOAD(&src->mount->generation) : 0;

	render_fetch(src, p);
	render_read(src, p);
	render_status(src, p, &gen);
	one(p, "ferry_hydrator_generation", "gauge",
	    "The generation the mount serves now.", gen);
	one(p, "ferry_hydrator_generation_switches_total", "counter",
	    "Switches to a newer generation in place.",
	    src->mount ? LOAD(&src->mount->switches) : 0);
}
