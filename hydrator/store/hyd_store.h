/*
 * hydrator/store/hyd_store.h — the destination chunk store.
 *
 * A CACHEDIR holds:
 *   lock             flock()ed exclusively by the one hydrator using it
 *   state.db         SQLite (WAL): chunk index and small key/value meta
 *   volumes/NNNNNNNN.vol  the store's volumes: append-only files of frames
 *                    (catalog.h frame format); packs/NNNNNNNN.pack until
 *                    schema 4
 *   catalogs/GEN.db  downloaded, checked catalogs (see hyd_catalog.h)
 *
 * Crash safety: a frame is written and fdatasync()ed before the index row
 * that points at it commits (for a group of puts at once), so the index
 * never points at garbage; at open, volume bytes beyond the furthest indexed
 * frame are truncated: a crash loses at most the groups not committed.
 * Each distinct chunk id is stored once.
 *
 * All functions are safe to call from any thread.
 */
#ifndef FERRY_HYD_STORE_H
#define FERRY_HYD_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "catalog/catalog.h"
#include "hydrator/hydrator.h"

typedef struct hyd_store hyd_store;

/* Volumes roll at this size. */
#define HYD_VOL_ROLL_BYTES (256ull * 1024 * 1024)

/* Open (creating if needed) the store in dir. Takes the exclusive lock on
 * dir/lock: -EBUSY when another process holds it. max_raw bounds the
 * raw_len of any frame read back (the catalog's max chunk size). A cache
 * from before volumes (packs/NNNNNNNN.pack, schema 3 or older) is moved
 * to them in place, crash-safe: a crash at any point is finished by the
 * next open.
 * Returns 0, -EBUSY, -ENOTDIR, -EACCES, -EPROTO (state.db was written by
 * a newer ferry: schema above this build's), -EBADMSG (state.db is not a
 * database or is damaged), -EEXIST (a half-moved cache this cannot
 * finish: packs/ with files beside volumes/, or a volume under both
 * names; logged as an error), -EIO, -ENOMEM. Logs nothing else but a volume
 * tail it truncated (a warning) and a move from packs/ (info); the caller
 * names the directory. */
int hyd_store_open(const char *dir, uint32_t max_raw, hyd_store **ret_s);

/* Write the calling process's pid into dir/lock, so a refused second
 * hydrator can name the holder. The lock itself survives fork (it belongs
 * to the open file description): call this in the child after
 * daemonizing. Returns 0 or -errno. */
int hyd_store_claim(hyd_store *s);

/* Close; releases the lock. NULL is a no-op. */
void hyd_store_close(hyd_store *s);

/* The directory the store was opened on (borrowed until close). */
const char *hyd_store_dir(const hyd_store *s);

/* Change the bound on raw_len (after the catalog is known). */
void hyd_store_set_max_raw(hyd_store *s, uint32_t max_raw);

/* 1 when id is stored, 0 when not, -errno. */
int hyd_store_has(hyd_store *s, const chunk_id *id);

/* Read a stored chunk into out (cap >= its raw length): pread the frame,
 * decode, verify the SHA-256 against id. Returns 0 with *ret_len set,
 * -ENOENT when not stored, -EBADMSG when what rests on disk is corrupt (a
 * frame: its index row is then removed, with a warning, so a later fetch
 * can replace it; state.db itself: nothing is removed), -ENOBUFS, -EIO. */
int hyd_store_get(hyd_store *s, const chunk_id *id, void *out, size_t cap,
		  size_t *ret_len);

/* Store one frame whose decoded bytes the caller has already verified
 * against id. Appends to the current volume; puts from several threads at
 * once are made durable together: one fdatasync, then one transaction of
 * their index rows (group commit). Returns once this frame's row is
 * committed: 0 when stored, 1 when id was already stored or on its way
 * (nothing written), -errno (-ENOSPC on a full disk; nothing indexed
 * then). */
int hyd_store_put(hyd_store *s, const chunk_id *id, const void *frame,
		  size_t frame_len);

/* The same without waiting for durability: appends the frame, joins the
 * open group and returns. Then cb(arg, rc) is called once, on the store's
 * own thread, when the group is done: rc 0 (stored), 1 (id was already
 * on its way and that group committed), -errno (nothing indexed). cb must
 * not call into this store. Returns 0 (cb will be called), 1 (already
 * stored: cb is not called), -errno (cb is not called). An async put may
 * wait for a sync in progress when about HYD_GROUP_BYTES are appended and
 * not durable yet. hyd_store_close makes every group durable first. */
typedef void (*hyd_store_put_cb)(void *arg, int rc);
int hyd_store_put_async(hyd_store *s, const chunk_id *id, const void *frame,
			size_t frame_len, hyd_store_put_cb cb, void *arg);

struct hyd_store_stats {
	uint64_t chunks;       /* distinct chunks stored */
	uint64_t raw_bytes;    /* sum of their raw lengths */
	uint64_t stored_bytes; /* sum of their frame lengths (at rest) */
	uint64_t vols;	       /* volume files */
	/* since open: */
	uint64_t groups;	/* index transactions of puts (group commit) */
	uint64_t syncs;		/* fdatasync()s of volumes for puts */
	uint64_t pending_bytes; /* frame bytes appended, not indexed yet
				 * (each rounded up to a 4 KiB block) */
	uint64_t held_bytes;	/* stored_bytes with each frame rounded up
				 * to a 4 KiB block: what a bound counts */
	/* the bound (hyd_store_set_bound); since open but pinned_*: */
	uint64_t bound;		/* the bound on stored_bytes; 0: none */
	uint64_t pinned_chunks; /* stored chunks pinned, and their */
	uint64_t pinned_bytes;	/* frame bytes (counted at most 1/s) */
	uint64_t hits;		/* gets answered from the store */
	uint64_t misses;	/* gets of ids it did not hold */
	uint64_t evicted;	/* chunks evicted, and their */
	uint64_t evicted_bytes; /* frame bytes */
	uint64_t demoted;	/* of them, kept by the capacity tier */
	uint64_t promoted;	/* chunks copied up from that tier */
};
int hyd_store_stats(hyd_store *s, struct hyd_store_stats *ret);

/* Garbage collection (hyd_store_gc.c). */
/* Drop every chunk that no catalog in DIR/catalogs names (its chunk rows
 * and the manifests of its overlay, GEN.overlay.db): their index rows go
 * and the space of their frames is given back to the file system (holes
 * punched in the volumes; a volume left with no chunk at all is removed).
 * Crash-safe: rows are removed in the transaction that records their
 * frames as free, and the frames are punched only after it committed; a
 * crash in between is finished at the next open, before anything is
 * appended. Puts may go on meanwhile; the caller makes sure that nothing
 * puts a chunk only a removed catalog named (the mount runs collections
 * on the thread that switches generations). Frames appended and not yet
 * indexed (an open group) are never touched. The complete mark stays
 * (a dropped chunk is in no catalog, so none is missing). Blocking: a
 * scan of the store's index and of the catalogs' chunk rows. Returns 0,
 * -ENOMEM, -EIO, -EBADMSG (a file in catalogs/ that is not a catalog:
 * nothing is dropped then). */
/* ret: hydrator.h's result (by_daemon is left 0). */
int hyd_store_gc(hyd_store *s, struct hyd_gc_result *ret);

/* The bound (hyd_store_evict.c; --cache-max, --cold-dir).
 * With a bound, the store keeps its chunks' blocks (held_bytes: each
 * frame rounded up to 4 KiB; frames put under a bound start on a block,
 * and an evicted one gives all of them back) under `bound`: after each group of
 * puts commits, chunks are evicted, least recently used first (the order of
 * their last put or get; a get is noted in memory and written with the next
 * group, at most HYD_TOUCH_MAX gets later), down to bound - bound/32. Never
 * evicted: a pinned chunk, a chunk a get is reading at that moment, frames of a
 * group not yet durable (so the store exceeds the bound by at most the
 * puts in flight: HYD_GROUP_BYTES). An eviction is a collection of those
 * rows (hyd_store_gc: rows and the free record in one transaction, holes
 * punched after, a crash finished at the next open) that also drops the
 * complete mark; its cost is the chunks it evicts (an index on the
 * access order), not the store's size.
 * lower, when not NULL, is a capacity tier (a store of its own, with its
 * own bound): evicted frames are copied into it (durable there before
 * their rows go here), a has or get that misses here asks it, and a get
 * it answers copies the frame back up (the capacity tier keeps its copy
 * until its own bound evicts it). Call before any put; lower is borrowed
 * and closed after s. A store over a new bound evicts now. 0 or -errno. */
int hyd_store_set_bound(hyd_store *s, uint64_t bound, hyd_store *lower);

/* Pin ids: never evicted (neither stored ones nor those put later); ids
 * only the capacity tier holds are copied up. Durable across opens.
 * 0 or -errno. */
int hyd_store_pin(hyd_store *s, const chunk_id *ids, size_t n);

/* Placement (a mount's --into, hydrator/sync/hyd_place.c): chunks that
 * land as plain bytes in files outside the store. With a placer set,
 * hyd_store_put_raw_async offers it a chunk's verified bytes first, and
 * hyd_store_has and hyd_store_get ask it about an id the index lacks. */
struct hyd_store_placer {
	/* raw is id's verified bytes: 2 when they are where they are
	 * wanted (written now, or before; no cb: the placer answers for
	 * them from here on), 1 when written and cb(cb_arg, rc) follows
	 * once they are durable and recorded, 0 when not wanted, -errno */
	int (*place)(void *arg, const chunk_id *id, const void *raw, size_t len,
		     hyd_store_put_cb cb, void *cb_arg);
	int (*has)(void *arg, const chunk_id *id); /* as hyd_store_has */
	int (*get)(void *arg, const chunk_id *id, void *out, size_t cap,
		   size_t *ret_len); /* as hyd_store_get */
	/* regular file ino of size bytes whole in the placer's directory
	 * and vouched for as landed: a new read-only fd of it in *ret_fd
	 * and the fstat it was vouched for by in *ret_st, 0; else -ENOENT
	 * (not landed, or changed since), -errno. NULL: none. */
	int (*landed)(void *arg, uint64_t ino, uint64_t size, int *ret_fd,
		      struct stat *ret_st);
	void *arg;
};
/* Set (p copied) or clear (p NULL) the placer. Clearing waits for the
 * calls into it in progress; their callbacks are the placer's to make. */
void hyd_store_set_placer(hyd_store *s, const struct hyd_store_placer *p);
/* The placer's landed (above): -ENOENT when there is no placer. */
int hyd_store_landed_fd(hyd_store *s, uint64_t ino, uint64_t size, int *ret_fd,
			struct stat *ret_st);
/* hyd_store_put_async with the frame's verified raw bytes too: a placer
 * that wants them takes them instead of the store (same returns). */
int hyd_store_put_raw_async(hyd_store *s, const chunk_id *id, const void *frame,
			    size_t frame_len, const void *raw, size_t raw_len,
			    hyd_store_put_cb cb, void *arg);
/* The same, waiting (hyd_store_put's returns). */
int hyd_store_put_raw(hyd_store *s, const chunk_id *id, const void *frame,
		      size_t frame_len, const void *raw, size_t raw_len);

/* The meta key backfill sets once the store holds every chunk of a
 * catalog (its value names the catalog and its totals), so a mount of a
 * complete cache skips the census. Dropping any row deletes it. */
#define HYD_STORE_META_COMPLETE "complete"

/* Small key/value meta kept in state.db (e.g. "url", "generation").
 * get: 0 with a NUL-terminated value, -ENOENT, -ERANGE if cap too small. */
int hyd_store_meta_get(hyd_store *s, const char *key, char *buf, size_t cap);
int hyd_store_meta_set(hyd_store *s, const char *key, const char *value);

#endif
