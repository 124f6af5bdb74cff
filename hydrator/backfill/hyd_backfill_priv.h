/*
 * hydrator/backfill/hyd_backfill_priv.h — the backfill's own pieces,
 * shared by its files: hyd_backfill.c (the scheduler thread: census,
 * passes, switches) and hyd_backfill_numbers.c (state, rate, progress
 * lines, status). Nothing outside hydrator/backfill includes this.
 */
#ifndef FERRY_HYD_BACKFILL_PRIV_H
#define FERRY_HYD_BACKFILL_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include "hydrator/backfill/hyd_backfill.h"

#define TICK_MS 250u
#define RATE_SAMPLES 16u /* 4 s of samples at TICK_MS */
#define RATE_WINDOW_NS 2000000000ull
#define PERSIST_NS 5000000000ull /* wire_bytes to the store meta */
#define LOG_NS 10000000000ull	 /* a progress line */
#define STALL_NS 5000000000ull
#define OPENED_RING 16u
#define MODEL_SEEN 16u
/* Files opened from this size on are checked for a model header */
#define HYD_BF_MODEL_MIN (1u << 20)

struct hyd_backfill {
	struct hyd_backfill_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop; /* atomic, STOP_*; the file walk polls it too */
	/* under lock: a catalog to switch to (taken by the thread, which
	 * leaves the one it let go of in old_cat) */
	cat_reader *next_cat, *old_cat;
	hyd_manifest *next_manifest;
	uint64_t switches;

	/* under lock */
	uint64_t outstanding, outstanding_bytes;
	uint64_t submitted, failed;
	uint64_t failed_pass;
	int nospc;
	int probing; /* after a full disk: a small window until a put works */
	int backing_off;
	int complete;
	uint64_t last_progress_ns;
	uint64_t chunks_total, chunks_stored, bytes_total, bytes_stored;
	uint64_t manifests_total, manifests_missing;
	uint64_t passes;
	char last_error[256];
	uint64_t opened[OPENED_RING];
	unsigned opened_n;
	int in_opened; /* the pass thread is doing opened directories */
	/* Bytes of an opened directory's files that may still be rescued
	 * (hyd_fetch_rescue) out of the backfill transfers they are in:
	 * set per directory, 0 elsewhere. Pass thread only. */
	uint64_t rescue_left;
	/* do_opened asks for a file the pass did already (for rescues):
	 * its chunks are in the totals from the first time. */
	int reasking;
	uint64_t s_ns[RATE_SAMPLES], s_wire[RATE_SAMPLES];
	unsigned s_n, s_head;
	enum hyd_state logged_state;

	uint64_t wire_base; /* "wire_bytes" of earlier runs */
	uint64_t start_ns;

	/* scheduler thread only */
	struct hyd_bf_files files;
	uint8_t *done;
	/* pending inos whose manifest was not local at the last census,
	 * ascending: their chunks are counted as the pass meets them */
	uint64_t *fresh;
	size_t nfresh, capfresh;
	uint64_t waiting_seg;  /* the first segment not hashed yet this pass:
				* its files and later ones wait (UINT64_MAX:
				* none) */
	int manifests_waiting; /* a segment not hashed yet: no sweep of
				* the missing manifests this pass */
	int seg_failed_set;
	uint64_t seg_failed; /* its files are skipped this pass */
	uint64_t changed_pass, changed_last; /* files the source changed */
	/* the manifest prefetch's progress (segments made local, running)
	 * at the last look over the files set aside for their manifests:
	 * until it moves, a look finds the same (UINT64_MAX: look) */
	uint64_t def_segs;
	int def_running;
	uint64_t next_sample_ns, next_persist_ns, next_log_ns;
	uint64_t persisted;
	/* --prefetch: the plan and where it is (scheduler thread), the
	 * numbers status shows (under lock) */
	struct hyd_trace_plan plan;
	size_t plan_at;
	enum hyd_prefetch_state pf_state;
	uint64_t pf_files, pf_skipped, pf_steps, pf_steps_done;
	uint64_t pf_bytes, pf_bytes_done;
	/* model files (hyd_backfill_model.c): the last looked at
	 * (scheduler thread) */
	uint64_t model_seen[MODEL_SEEN];
	unsigned model_seen_at;
	/* pins and the bound (hyd_backfill_pins.c): under lock */
	int pins_dirty; /* ferry pin added one: walk the pins again */
	uint64_t pin_files, pin_bytes; /* regular files pinned, their bytes */
	int full;		       /* the walk stopped at the bound */
	int pinning; /* the pins are being asked for: no room check */
	uint64_t evicted_at_walk; /* the store's evicted + 1 when the walk
				   * began (0: not yet); scheduler thread */
	pthread_t th;
	int started;
	int finished; /* hyd_backfill_stop ran: the fetcher may be gone */
};

/* hyd_backfill.c, for hyd_backfill_prefetch.c: ask for one chunk once
 * the window has room (prio: HYD_PRIO_NEAR when bf->in_opened); make a
 * pending file's manifest local (0), leave the file for later (1), or
 * -ECANCELED; and whether the scheduler is to stop. */
int hyd_bf__submit_chunk(hyd_backfill *bf, const struct cat_chunk *c,
			 int fresh);
int hyd_bf__file_manifest(hyd_backfill *bf, uint64_t ino);
int hyd_bf__stopped(hyd_backfill *bf);
/* Wait (ticking) until no backfill flight is outstanding, or stop. */
void hyd_bf__drain(hyd_backfill *bf);

/* hyd_backfill_pins.c: pinned files' chunks pinned and asked for (0,
 * or -ECANCELED); 1 while the walk has room under the bound. */
#define HYD_BF_FILL_PCT 90u
int hyd_bf__pins(hyd_backfill *bf);
int hyd_bf__room(hyd_backfill *bf);

/* hyd_backfill_prefetch.c: every chunk of [off, off + len) of ino asked
 * for (a pending file's manifest made local first), as the replay of a
 * trace and a model file's tensors ask. 0, or -ECANCELED / -ENOSPC. */
int hyd_bf__ask_range(hyd_backfill *bf, uint64_t ino, uint64_t off,
		      uint64_t len);

/* hyd_backfill_prefetch.c: replay the --prefetch traces' plan (made on
 * the first call after start or a switch) from where it stopped. 0 when
 * done (or none), -ECANCELED on stop. Scheduler thread. */
int hyd_bf__prefetch(hyd_backfill *bf);

/* hyd_backfill_model.c: opened regular file ino, if a safetensors or
 * GGUF file not looked at lately, gets its header read now and its
 * tensors asked for in offset order. 1 when it was a model file, 0 when
 * not (or its header could not be had), -ECANCELED / -ENOSPC. */
int hyd_bf__model(hyd_backfill *bf, uint64_t ino);

/* hyd_backfill_numbers.c. Housekeeping, called often by the scheduler
 * thread (lock not held): a rate sample, the wire bytes persisted every
 * PERSIST_NS, a progress line on a state change or every LOG_NS. */
void hyd_bf__tick(hyd_backfill *bf);
/* The store meta's "wire_bytes": earlier runs' plus wire_run. */
void hyd_bf__persist_wire(hyd_backfill *bf, uint64_t wire_run);

#endif
