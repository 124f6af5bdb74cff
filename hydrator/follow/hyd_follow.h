/*
 * hydrator/follow/hyd_follow.h — a mount that follows its
 * source: new generations switched to in place.
 *
 * A thread of its own asks the server's HEAD every poll_s seconds (and
 * when told to: hyd_follow_poke). For a newer generation it installs the
 * catalog (made from the one the mount serves and the delta, or fetched
 * whole; hyd_catalog_update), opens it (with its manifest overlay and
 * fetcher when files are pending), reads off what changed (cat_diff),
 * makes it current (hyd_fs_gens_switch: one pointer under a mutex; older
 * generations stay for files opened before), tells the kernel what it
 * must forget (FUSE notifications: the names that changed, the listings
 * of their directories, the attributes of inodes whose rows moved), and
 * hands backfill the new catalog (hyd_backfill_switch: it fetches only
 * what the store lacks). A generation that falls out of the kept ones
 * leaves the cache with its last reader, and the store then drops the
 * chunks no catalog names any more (hyd_store_gc). The same thread runs
 * a collection asked for over the control socket (`ferry gc`), so a
 * collection never races a switch.
 *
 * Crash safety: the only thing a switch writes is the new catalog file
 * (temp file, fsync, rename), the time of the switch in the store's meta,
 * and what a collection does (crash-safe in the store); a kill -9 at any
 * moment leaves a cache that mounts generation N or N+1, whole.
 */
#ifndef FERRY_HYD_FOLLOW_H
#define FERRY_HYD_FOLLOW_H

#include <stdint.h>

#include <fuse_lowlevel.h>

#include "hydrator/backfill/hyd_backfill.h"
#include "hydrator/read/hyd_fuse.h"
#include "hydrator/store/hyd_store.h"

typedef struct hyd_follow hyd_follow;

struct hyd_follow_config {
	const char *base_url;	 /* borrowed until free */
	const char *cache_dir;	 /* borrowed until free */
	hyd_store *store;	 /* borrowed */
	struct hyd_fs *fs;	 /* borrowed: the mount's generations */
	struct fuse_session *se; /* borrowed: for the kernel's caches */
	hyd_backfill *bf;	 /* borrowed; may be NULL */
	int prefetch; /* a new generation's manifests in bulk (with bf) */
	/* Backfill's own reader of the current catalog: the follower owns
	 * it from now on (closed when replaced, or at free). May be NULL. */
	cat_reader *bf_cat;
	const struct hyd_creds *creds; /* borrowed until free; may be NULL */
	unsigned poll_s;	/* seconds between HEADs; 0: never poll */
	unsigned keep;		/* generations kept, the current one too */
	long connect_timeout_s; /* for HEAD, catalog and manifests */
	int64_t started_ns;	/* when the first generation was mounted
				 * (wall clock): the first switched_at */
	/* catalog and manifest transfers and switches are counted here
	 * (metrics); borrowed until free; NULL: not counted */
	struct hyd_mount_counts *counts;
};

/* Allocate; no thread yet. Records switched_at in the store's meta.
 * 0, -EINVAL, -ENOMEM. */
int hyd_follow_new(const struct hyd_follow_config *cfg, hyd_follow **ret);

/* Start the thread (signals blocked in it), after the FUSE session is up
 * and after any fork. 0 or -errno. */
int hyd_follow_start(hyd_follow *f);

/* Stop and join the thread; a switch in progress finishes first. Before
 * backfill stops (a switch calls into it). Idempotent. */
void hyd_follow_stop(hyd_follow *f);

/* Stop if needed and free (closes the backfill reader it owns: after
 * backfill was freed). NULL is a no-op. */
void hyd_follow_free(hyd_follow *f);

/* Ask HEAD now, without waiting for the next poll. Any thread. */
void hyd_follow_poke(hyd_follow *f);

/* The generation served now and since when (wall clock, ns). Any
 * thread. */
void hyd_follow_info(hyd_follow *f, uint64_t *ret_gen,
		     int64_t *ret_switched_ns);

/* Run a collection of the store on the follower's thread and wait for
 * it (at most timeout_ms). 0 with *ret filled, -ETIMEDOUT, -ECANCELED
 * (stopping), or the collection's -errno. Any thread but the
 * follower's. */
int hyd_follow_gc(hyd_follow *f, unsigned timeout_ms,
		  struct hyd_gc_result *ret);

#endif
