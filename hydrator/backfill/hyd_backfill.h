/*
 * hydrator/backfill/hyd_backfill.h — background hydration of a mount.
 *
 * Once mounted, one scheduler thread walks the catalog and asks the
 * fetcher (at HYD_PRIO_BACKFILL, so always after demand reads and
 * readahead) for every chunk the store does not have — for a pending file
 * of a format 2 catalog whose manifest is not local yet, after fetching
 * the manifests of its segment (hyd_manifest_segment) — keeping a bounded
 * number of flights outstanding. Order: the files of directories users
 * opened something in, then catalog (inode) order, the scan's depth-first
 * order, which is the order a sequential reader of the tree visits. The store
 * is the progress record: after a crash, a new run asks only for what
 * hyd_store_has says is missing. When a pass finds nothing missing the
 * state is COMPLETE.
 *
 * The same object also keeps the wire rate samples and the cumulative wire
 * byte count (store meta "wire_bytes"), and fills the live status for the
 * control socket. Readahead is not here: the read path owns it
 * (hyd_read_ahead).
 * Faults: failed flights (server gone, 5xx past retries, 404/409) and a
 * full disk put the state to STALLED with the last error; the scheduler
 * backs off (capped) and tries again by itself, so it resumes when the
 * link or the space returns.
 */
#ifndef FERRY_HYD_BACKFILL_H
#define FERRY_HYD_BACKFILL_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/store/hyd_store.h"
#include "hydrator/hydrator.h"
#include "hydrator/trace/hyd_trace.h"

typedef struct hyd_backfill hyd_backfill;

struct hyd_backfill_config {
	cat_reader *cat;  /* borrowed until free; best a reader of its own
			   * (the walk then never waits on FUSE's) */
	hyd_store *store; /* borrowed */
	hyd_fetch *fetch; /* borrowed; must outlive hyd_backfill_stop */
	/* borrowed, like fetch; NULL when nothing is pending (a pending
	 * manifest that is not local is then a failure of the pass) */
	hyd_manifest *manifest;
	/* How long one segment's manifests may keep a pass waiting for the
	 * source's hashing before the pass goes on without them; 0: 15 s */
	unsigned manifest_wait_ms;
	uint32_t max_raw;      /* the catalog's max chunk size */
	int enabled;	       /* 0 (--no-backfill): no walk; rates, status
				* and wire byte persistence still work */
	unsigned window;       /* most backfill flights outstanding, 0: 512 */
	uint64_t window_bytes; /* their raw bytes, 0: 64 MiB */
	int log_progress;      /* an info line every few seconds (every pass
				* at debug level) */
	/* --prefetch: traces whose ranges go first, in their order, ahead
	 * of the walk (and with backfill disabled too); borrowed until
	 * free. Planned again after a switch (what is stored is skipped). */
	const struct hyd_trace *const *traces;
	size_t ntraces;
	/* --seed: called once on the scheduler thread, after the traces
	 * and before the first pass, with the backfill reader and the stop
	 * flag (non-zero: return soon); NULL: none. */
	int (*seed)(void *arg, cat_reader *cat, const int *stop);
	void *seed_arg;
	/* --cache-max: the store's bound (0: none). The walk then fetches
	 * only while the store holds less than 90% of it, and stops there
	 * (hyd_backfill_pins.c) */
	uint64_t bound;
	/* --pin patterns (borrowed until free) and the file of those
	 * `ferry pin` adds (CACHEDIR/pins; NULL: none): pinned files are
	 * fetched first and their chunks never evicted */
	const char *const *pins;
	size_t npins;
	const char *pins_file;
};

/* The replay of --prefetch traces. */
enum hyd_prefetch_state {
	HYD_PREFETCH_NONE = 0, /* no trace given */
	HYD_PREFETCH_PLANNING,
	HYD_PREFETCH_RUNNING,
	HYD_PREFETCH_DONE, /* every range asked for, and landed or failed */
};

struct hyd_backfill_stats {
	enum hyd_state state;
	uint64_t chunks_total;	  /* distinct chunk ids of the catalog's local
				   * manifests at the last census, plus the
				   * chunks of manifests fetched since (counted
				   * as they arrive, see hyd_backfill.c) */
	uint64_t chunks_stored;	  /* of them, in the store (at the last census,
				   * plus what backfill stored since) */
	uint64_t manifests_total; /* pending files of the catalog */
	uint64_t manifests_missing; /* of them, not local at the last census */
	uint64_t bytes_total, bytes_stored; /* their raw bytes */
	uint64_t queued;		    /* backfill flights outstanding */
	uint64_t submitted; /* new backfill flights (not joins), this run */
	uint64_t failed;    /* of them, ended in an error */
	uint64_t passes;
	uint64_t wire_total; /* wire bytes of all runs (store meta) */
	double rate_now;     /* wire bytes/s over the last ~2 s */
	double rate_avg;     /* wire bytes/s since start */
	double elapsed_s;
	char last_error[256];
	/* --prefetch */
	enum hyd_prefetch_state pf_state;
	uint64_t pf_files;		  /* files the traces name */
	uint64_t pf_skipped;		  /* of them, gone or changed */
	uint64_t pf_steps, pf_steps_done; /* ranges, and ranges asked for */
	uint64_t pf_bytes;		  /* raw bytes of the ranges kept */
	uint64_t pf_bytes_done;		  /* of them, asked for (or stored) */
	uint64_t pin_files, pin_bytes; /* regular files pinned, their bytes */
	int full;		       /* the walk stopped at the cache bound */
};

/* Allocate; reads "wire_bytes" from the store meta. Registers its done
 * hook on cfg->fetch: call before hyd_fetch_start. No thread yet.
 * Returns 0, -EINVAL, -ENOMEM. */
int hyd_backfill_new(const struct hyd_backfill_config *cfg, hyd_backfill **ret);

/* Start the scheduler thread (signals blocked in it). After the fetcher
 * started and after any fork. Returns 0 or -errno. */
int hyd_backfill_start(hyd_backfill *bf);

/* The pins file changed (ferry pin): the scheduler walks the pins again
 * at its next step. Any thread. */
void hyd_backfill_pins_changed(hyd_backfill *bf);

/* Stop and join the thread, write "wire_bytes" to the store meta (the
 * fetcher must still exist). Idempotent: once stopped, later calls (and
 * hyd_backfill_free) touch neither the fetcher nor the store. Flights
 * already submitted are the fetcher's to end. */
void hyd_backfill_stop(hyd_backfill *bf);

/* Stop if needed and free. The fetcher must be stopped first (its done
 * hook points here); if hyd_backfill_stop was not called, the fetcher must
 * also still exist. NULL is a no-op. */
void hyd_backfill_free(hyd_backfill *bf);

/* Go on with another catalog (a newer generation of the same tree, its
 * manifest fetcher or NULL): the scheduler ends its pass at the next
 * check, takes cat (borrowed, like cfg->cat, until the next switch or
 * free) and begins again with a census, so only what the store lacks is
 * fetched; flights already out end as usual. Blocks until the thread has
 * let go of the old reader, which is handed back in *ret_old (the
 * caller's to close). -ECANCELED when backfill stops first (cat stays the
 * caller's). Any thread but the scheduler. */
int hyd_backfill_switch(hyd_backfill *bf, cat_reader *cat,
			hyd_manifest *manifest, cat_reader **ret_old);

/* A FUSE open of regular file ino: a model file's tensors are asked for
 * in offset order (hyd_backfill_model.c; with backfill disabled too),
 * then its directory goes to the front of the backfill order. Any thread;
 * cheap (no I/O). NULL bf is a no-op. */
void hyd_backfill_note_open(hyd_backfill *bf, uint64_t ino);
/* The same as a struct hyd_fs on_open hook: arg is the hyd_backfill. */
void hyd_backfill_on_open(void *arg, uint64_t ino);

/* Snapshot of progress. Any thread. */
void hyd_backfill_stats(hyd_backfill *bf, struct hyd_backfill_stats *ret);

/* hyd_control_live_fn: arg is the hyd_backfill. Fills state, last_error,
 * pid, wire_bytes (all runs), mismatches, retries, failures, rate_now,
 * rate_avg, eta_s and elapsed_s of *st (already filled from the cache). */
void hyd_backfill_live(void *arg, struct hyd_status *st);

/* ---- backfill's own: the file table (hyd_backfill_files.c) ---- */

/* Every regular file of the catalog once (hard links: the first name's
 * directory), for ordering the walk. Built by the scheduler thread and
 * read only by it. */
struct hyd_bf_file {
	uint64_t ino;
	uint64_t parent; /* directory ino */
	uint64_t size;
};

struct hyd_bf_files {
	struct hyd_bf_file *v; /* sorted by ino */
	size_t n;
	uint32_t *by_parent; /* indices into v: grouped by directory */
	uint32_t *by_size;   /* indices into v: by size class (a quarter
			      * octave wide), smallest first, each in ino
			      * order */
	uint64_t dirs;
};

/* Walk the tree from the root with cat_readdir (in pages, so FUSE's
 * lookups are never held up for long when the reader is shared) and build
 * the table. A catalog whose tree is not a tree (a directory reached twice,
 * more entries than it has inodes allow) is -EBADMSG. stop, when it
 * becomes non-zero, ends the walk with -ECANCELED. Returns 0 or -errno;
 * on failure *ret is empty. */
int hyd_bf__files_build(cat_reader *cat, const int *stop,
			struct hyd_bf_files *ret);
void hyd_bf__files_free(struct hyd_bf_files *t);

/* Index in t->v of ino, or -1. */
long hyd_bf__files_find(const struct hyd_bf_files *t, uint64_t ino);

/* The range [*ret_lo, *ret_hi) of t->by_parent whose files are in dir. */
void hyd_bf__files_in_dir(const struct hyd_bf_files *t, uint64_t dir,
			  size_t *ret_lo, size_t *ret_hi);

#endif
