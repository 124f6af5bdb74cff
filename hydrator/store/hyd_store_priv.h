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

/* hyd_store_gc.c: punch the frames a collection recorded in gc_free and
 * forget them (at open, before anything is appended). 0 or -errno. */
int hyd_store__gc_recover(hyd_store *s);

/* hyd_store_put.c: set up and tear down the append side (at open, before
 * any put; at close, after the last). */
int hyd_store__put_init(hyd_store *s);
/* Make every appended group durable and end the syncer (first in close,
 * while SQLite is still open); puts after it fail with -ESHUTDOWN. */
void hyd_store__put_stop(hyd_store *s);
void hyd_store__put_fini(hyd_store *s);

#endif
