/*
 * hydrator/store/hyd_store_priv.h — the store's own pieces, shared by its
 * two files: hyd_store.c (open, recovery, lookups, gets, meta) and
 * hyd_store_put.c (appending frames, group commit). Nothing outside
 * hydrator/store includes this.
 *
 * Locking. `wmu` serializes appends (the current volume and its end) and
 * the groups of puts waiting to be made durable; `mu` serializes SQLite,
 * the read-fd cache, the reader pool and the counters. Lock order is wmu,
 * then mu. Neither is held across an fdatasync.
 */
#ifndef FERRY_HYD_STORE_PRIV_H
#define FERRY_HYD_STORE_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include <sqlite3.h>

#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"

#define HYD_FD_CACHE 32	  /* read fds kept open on volumes */
#define HYD_READER_POOL 8 /* idle get contexts kept for reuse */
/* The largest number "%08u" keeps at 8 digits. */
#define HYD_VOL_MAX 99999999u
/* An open group this large makes async puts wait for the sync in
 * progress: the bound on frames appended and not yet durable. */
#define HYD_GROUP_BYTES (32u << 20)

/* One cached read-only fd on a volume. refs > 0 while a get preads it, so it
 * is never closed (and its number never reused) under a reader. */
struct hyd_vol_fd {
	uint32_t vol;
	int fd; /* -1: slot empty */
	unsigned refs;
	uint64_t used; /* LRU clock */
};

/* Where a chunk's frame rests: one index row. */
struct hyd_loc {
	uint32_t vol;
	uint64_t off;
	uint32_t frame_len;
	uint32_t raw_len;
	uint8_t codec; /* what the row says; the frame header decides */
	int has_xxh;   /* 0: a row from schema 1, checked by SHA-256 */
	uint64_t xxh;  /* XXH3-64 of the frame bytes as written */
};

/* What one get needs besides the fd, pooled so a get allocates nothing: a
 * frame coder (zstd context) and a buffer for a compressed frame. */
struct hyd_store_reader {
	frame_coder *coder; /* NULL is fine: frame_decode makes its own */
	uint8_t *buf;
	size_t cap;
};

struct hyd_group; /* hyd_store_put.c */

/* The bound (hyd_store_evict.c). chunk.used orders eviction: the access
 * number of a chunk's last put or get; a pinned chunk's is HYD_USED_PIN,
 * above every number, and is never evicted. */
#define HYD_USED_PIN (INT64_C(1) << 62)
/* Gets recorded in memory before their numbers are written. */
#define HYD_TOUCH_MAX 4096u
/* Reads in flight whose chunk eviction must not take. */
#define HYD_BUSY_MAX 256u

struct hyd_touch {
	chunk_id id;
	int64_t used;
};

struct hyd_busy {
	chunk_id id;
	unsigned n; /* 0: slot free */
};

/* A write fd on a volume that rolled over while a group still had frames
 * in it: closed once group `seq` is durable. */
struct hyd_retired_fd {
	int fd;
	uint64_t seq;
};

struct hyd_store {
	char *dir;
	int lock_fd;
	int vols_fd; /* dir/volumes, for openat and for fsync after a create */
	uint32_t max_raw; /* __atomic: read by gets without a lock */
	uint64_t roll_bytes;

	pthread_mutex_t mu; /* guards everything down to wmu */
	sqlite3 *db;
	sqlite3_stmt *st_find, *st_insert, *st_drop, *st_meta_get, *st_meta_set;
	int in_read; /* a read transaction is open on db (the read session) */
	struct hyd_vol_fd fds[HYD_FD_CACHE];
	uint64_t fd_clock;
	struct hyd_store_reader *readers[HYD_READER_POOL];
	size_t n_readers;
	struct hyd_store_stats st;

	pthread_mutex_t wmu; /* guards the append state below */
	uint32_t cur_vol;    /* 0: no volume yet */
	int cur_fd;	     /* write fd on cur_vol, -1 until needed */
	uint64_t cur_end;    /* where the next frame goes */
	/* group commit (hyd_store_put.c) */
	pthread_cond_t gcv; /* a group became durable (or failed) */
	pthread_cond_t scv; /* for the syncer: a group is open, or stop */
	pthread_t syncer;
	int syncer_started;
	int stopping; /* close began: the syncer ends when no group is open */
	struct hyd_group *open;	   /* collecting puts; NULL: none yet */
	struct hyd_group *leading; /* being made durable; NULL: none */
	unsigned waiters;	   /* puts waiting for a group to be done */
	uint64_t next_seq;	   /* of the next group */
	struct hyd_retired_fd *retired;
	size_t n_retired, cap_retired;
	unsigned sync_delay_ms; /* test hook: FERRY_STORE_SYNC_DELAY_MS */
	/* hyd_store_place.c: read-held around calls into the placer */
	pthread_rwlock_t place_lk;
	struct hyd_store_placer placer;
	int has_placer;
	int gcv_ready;

	/* hyd_store_evict.c; the bound and tier are set before any put */
	uint64_t bound;	     /* --cache-max on frame bytes; 0: none */
	int evicting;	     /* under wmu: the syncer is evicting */
	hyd_store *lower;    /* capacity tier evictions go to; NULL */
	pthread_mutex_t emu; /* one eviction at a time */
	int evict_warned;    /* "only pinned chunks left" said once */
	/* under mu: */
	int64_t used_clock;	 /* next access number */
	struct hyd_touch *touch; /* gets not yet written to chunk.used */
	size_t n_touch;
	struct hyd_busy busy[HYD_BUSY_MAX];
	uint64_t pinned_at_ns; /* when st.pinned_* were counted */
};

/* hyd_store_place.c: the placer's answer for an id the index lacks
 * (as hyd_store_has / hyd_store_get; 0 and -ENOENT without a placer). */
int hyd_store__placed_has(hyd_store *s, const chunk_id *id);
int hyd_store__placed_get(hyd_store *s, const chunk_id *id, void *out,
			  size_t cap, size_t *ret_len);

/* hyd_store.c */
int hyd_store__vol_name(uint32_t vol, char *buf, size_t cap);
/* Look id up in the index. 1 with *ret filled (if ret), 0 when absent,
 * -errno. Under mu. */
/* The read session: lookups share one read transaction, begun by the
 * first of them and ended (hyd_store__read_end_locked) before anything
 * writes. This connection is the store's only writer (the lock file), so
 * the snapshot it holds is never stale, and a lookup costs no locking
 * syscalls. Under mu. */
void hyd_store__read_end_locked(hyd_store *s);
int hyd_store__find_locked(hyd_store *s, const chunk_id *id,
			   struct hyd_loc *ret);
/* The checksum a row keeps of its frame (XXH3-64). */
uint64_t hyd_store__frame_sum(const uint8_t *hdr, const void *payload,
			      size_t len);

/* hyd_store.c: the read-fd cache, shared with eviction's frame copies. */
int hyd_store__fd_acquire_locked(hyd_store *s, uint32_t vol, int *ret_slot,
				 int *ret_fd);
void hyd_store__fd_release_locked(hyd_store *s, int slot, int fd);

/* hyd_store_evict.c */
int hyd_store__evict_init(hyd_store *s); /* at open, after the index */
void hyd_store__evict_fini(hyd_store *s);
/* A get found id (under mu): note the access; mark it busy (1) or let
 * it go (0) around the read of its frame. */
void hyd_store__touch_locked(hyd_store *s, const chunk_id *id);
void hyd_store__busy_locked(hyd_store *s, const chunk_id *id, int on);
/* 1 when a get is reading id's frame now. Under mu. */
int hyd_store__busy_has_locked(const hyd_store *s, const chunk_id *id);
/* Count the pinned chunks into st (at most once a second). Under mu. */
void hyd_store__pinned_count_locked(hyd_store *s);
/* Write the noted accesses into chunk.used, inside a transaction the
 * caller has open. Under mu. */
int hyd_store__touch_apply_locked(hyd_store *s);
/* The next access number, for a put's row. Under mu. */
int64_t hyd_store__next_used_locked(hyd_store *s);
/* After a group committed, on the syncer, no lock held: evict down under
 * the bound if the store is over it. */
void hyd_store__evict(hyd_store *s);
/* A get or has missed the index and the placer: the capacity tier's
 * answer (a get's hit there is copied up). 0 / -ENOENT without one. */
int hyd_store__lower_has(hyd_store *s, const chunk_id *id);
int hyd_store__lower_get(hyd_store *s, const chunk_id *id, void *out,
			 size_t cap, size_t *ret_len);

/* hyd_store_gc.c: rows going with the space of their frames. */
struct hyd_gc_row {
	chunk_id id;
	uint32_t vol, frame_len, raw_len;
	uint64_t off;
	uint32_t punch_len; /* the bytes to give back; 0: frame_len */
};
/* Remove the rows of v[0..n) still there and record their frames in
 * gc_free, in one transaction (with the complete mark too when
 * drop_complete: the chunks are still wanted); a row already gone gets
 * frame_len 0. Then punch them (hyd_store__punch_free). Takes mu. */
int hyd_store__sweep(hyd_store *s, struct hyd_gc_row *v, size_t n,
		     int drop_complete, size_t *ret_gone, uint64_t *ret_bytes);
int hyd_store__punch_free(hyd_store *s);
/* Remove the volumes among vols[0..n) below the current one that no row
 * points into any more. Takes wmu, then mu. */
void hyd_store__vols_drop_empty(hyd_store *s, const uint32_t *vols, size_t n);

/* hyd_store_gc.c: punch the frames a collection recorded in gc_free and
 * forget them (at open, before anything is appended). 0 or -errno. */
int hyd_store__gc_recover(hyd_store *s);

/* Under a bound frames start at multiples of this; what the bound
 * counts is each frame rounded up to it (held_bytes). */
#define HYD_BLOCK 4096u
#define HYD_HELD(len)                                                          \
	(((uint64_t)(len) + HYD_BLOCK - 1) / HYD_BLOCK * HYD_BLOCK)
/* hyd_store_put_async, but -EAGAIN instead of waiting for a sync or an
 * eviction (a copy up that a read need not wait for). */
int hyd_store__put_async_nowait(hyd_store *s, const chunk_id *id,
				const void *frame, size_t frame_len,
				hyd_store_put_cb cb, void *arg);
/* hyd_store_put.c: frame bytes of the groups not indexed yet. Under
 * wmu. */
uint64_t hyd_store__pending_locked(const hyd_store *s);
/* hyd_store_put.c: set up and tear down the append side (at open, before
 * any put; at close, after the last). */
int hyd_store__put_init(hyd_store *s);
/* Make every appended group durable and end the syncer (first in close,
 * while SQLite is still open); puts after it fail with -ESHUTDOWN. */
void hyd_store__put_stop(hyd_store *s);
void hyd_store__put_fini(hyd_store *s);

#endif
