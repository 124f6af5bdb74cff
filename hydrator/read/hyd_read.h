/*
 * hydrator/read/hyd_read.h — serving file bytes: the read path and its
 * small cache of decoded chunks.
 *
 * The read path (hyd_read.c) turns [off, off+len) of a regular file into
 * bytes: chunk manifest from the catalog (for a pending file of a format 2
 * catalog, from the manifest overlay, fetched first through the per-file
 * endpoint when it is not local yet), each chunk from the decoded-chunk
 * cache, else the store, else the fetcher (all missing chunks of a request
 * are submitted first, then waited for, so they travel in parallel). Every
 * byte it returns has passed chunk_id_verify. Nothing here knows FUSE.
 */
#ifndef FERRY_HYD_READ_H
#define FERRY_HYD_READ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/store/hyd_store.h"

/* ---- decoded-chunk cache (hyd_read_cache.c); any thread ---- */

/* An LRU of whole verified chunks, so consecutive 128 KiB reads inside one
 * chunk decode and hash it once, and so chunks decoded ahead of a
 * sequential reader wait for it. One mutex; bytes are used outside it,
 * under a pin. */
typedef struct hyd_read_cache hyd_read_cache;
struct hyd_read_hold;

/* Slots: the chunks pinned by the kernel requests in flight (up to a dozen
 * of up to 1 MiB, 16 chunks each at 64 KiB average) plus the decode-ahead
 * windows of a few sequential readers. A request that finds every slot
 * pinned still completes, through buffers of its own. */
#define HYD_READ_CACHE_SLOTS 256u
/* Chunk buffer bytes kept (a catalog may allow 8 MiB chunks); only pinned
 * chunks may push the cache past this. */
#define HYD_READ_CACHE_BYTES (32u << 20)

/* slots == 0 gives a cache that never holds anything. Returns 0 / -ENOMEM. */
int hyd_read_cache_new(size_t slots, hyd_read_cache **ret);
void hyd_read_cache_free(hyd_read_cache *c); /* NULL is a no-op */

/* Fill buf (room for cap bytes) with the verified raw bytes of chunk id and
 * set *ret_len; 0 or -errno (-ENOENT: not available this way). */
typedef int (*hyd_read_cache_load_fn)(void *arg, const chunk_id *id,
				      uint8_t *buf, size_t cap,
				      size_t *ret_len);

/* Pin chunk id, whose raw length is raw_len: *ret_raw points at its
 * verified bytes until hyd_read_cache_unpin(c, *ret_pin). On a miss,
 * load(arg, ...) fills a cache slot; one load per id runs at a time and
 * concurrent readers of that id wait for it (a failed load is retried by
 * each waiter). Blocks: FUSE worker threads only. Returns 0, load's error,
 * -ERANGE (the chunk is not raw_len bytes long), -EBUSY (every slot is
 * pinned or loading: nothing was loaded; use a buffer of your own). */
int hyd_read_cache_pin(hyd_read_cache *c, const chunk_id *id, uint32_t raw_len,
		       hyd_read_cache_load_fn load, void *arg,
		       const uint8_t **ret_raw, void **ret_pin);
void hyd_read_cache_unpin(hyd_read_cache *c, void *pin);

/* Load chunk id into the cache unless it is cached or being loaded.
 * Returns 1 when loaded here, 0 when it was cached or being loaded
 * already, -EBUSY when no slot is free without evicting another
 * prefetched chunk not read yet (nothing was loaded), or load's error. */
int hyd_read_cache_prefetch(hyd_read_cache *c, const chunk_id *id,
			    uint32_t raw_len, hyd_read_cache_load_fn load,
			    void *arg);

/* Remember a chunk (copied). Only bytes that passed chunk_id_verify may be
 * put here: the cache serves them without a second check. */
void hyd_read_cache_put(hyd_read_cache *c, const chunk_id *id, const void *raw,
			size_t len);

/* ---- generations (hyd_read_gen.c); any thread ---- */

/* One generation of the catalog a mount serves: the reader that answers
 * FUSE and reads, and for a catalog with pending files the manifest
 * overlay and the fetcher that fills it. A mount that follows its source
 * switches to a new one in place and keeps a few older ones, so that a
 * file opened before a switch goes on reading the bytes it was opened with
 * (a regular file's ino names one content: docs/catalog.md). Reference
 * counted: the mount holds one while the generation is current or kept,
 * an open-file state one, a request that uses it one while it runs. The
 * last reference frees the fetcher, the reader and the overlay, and when
 * the generation was dropped (hyd_gen_drop) removes its files (catalog and
 * overlay) from the cache: a catalog file is there exactly as long as
 * something may still read it, which is what the store's garbage
 * collection keeps chunks for. */
struct hyd_gen {
	uint64_t generation;
	struct cat_meta meta;
	cat_reader *cat;	/* owned */
	cat_overlay *ov;	/* owned; NULL when nothing is pending */
	hyd_manifest *manifest; /* owned; NULL when nothing is pending */
	char catpath[4096];	/* CACHEDIR/catalogs/GEN.db */
	char ovpath[4096];	/* its overlay; "" when none */
	unsigned refs;		/* __atomic */
	int dropped;		/* __atomic: remove the files at the end */
};

/* A generation owning cat, ov and manifest (any of the last two may be
 * NULL), with one reference for the caller; meta and generation are read
 * from cat. On failure (-ENOMEM, -ENAMETOOLONG) nothing is taken: the
 * caller still owns what it passed. */
int hyd_gen_new(cat_reader *cat, cat_overlay *ov, hyd_manifest *manifest,
		const char *catpath, const char *ovpath, struct hyd_gen **ret);
void hyd_gen_ref(struct hyd_gen *g);
/* Drop a reference; the last frees (and removes the files of a dropped
 * generation). NULL is a no-op. */
void hyd_gen_unref(struct hyd_gen *g);
/* The generation is no longer kept: its files go with its last
 * reference. */
void hyd_gen_drop(struct hyd_gen *g);

/* ---- the read path (hyd_read.c) ---- */

/* What the read path counts, for metrics (hydrator/metrics/): relaxed
 * atomics and a lock-free histogram, so any FUSE thread counts without a
 * lock. Chunks are counted by demand reads (hyd_read_open_iov,
 * hyd_read_file), not by readahead; holes are neither hit nor miss. */
struct hyd_read_counts {
	uint64_t chunk_hits;	  /* found decoded in the cache, or stored */
	uint64_t chunk_misses;	  /* not stored: a fetch was joined or made */
	uint64_t reads;		  /* FUSE reads answered with bytes */
	uint64_t read_bytes;	  /* the bytes of those answers */
	uint64_t read_errors;	  /* FUSE reads answered with an error */
	uint64_t dir_read_bytes;  /* of read_bytes: from a file landed in
				   * --into's DIR (hyd_read_open_landed) */
	struct base_hist latency; /* FUSE read: request in -> reply out */
};

/* Zero c and set its histogram's buckets (100 us .. 30 s). */
void hyd_read_counts_init(struct hyd_read_counts *c);

struct hyd_read_ctx {
	cat_reader *cat;       /* borrowed */
	hyd_store *store;      /* borrowed */
	hyd_fetch *fetch;      /* borrowed */
	hyd_read_cache *cache; /* borrowed; may be NULL */
	/* borrowed; may be NULL (nothing pending, or offline): a pending
	 * file whose manifest is not local then reads EIO */
	hyd_manifest *manifest;
	uint32_t max_raw;    /* the catalog's max chunk size */
	uint64_t timeout_ns; /* per-read deadline for fetches, manifests
			      * included */
	struct hyd_read_counts *counts; /* borrowed; NULL: not counted */
};

/* One sequential reader's readahead (hyd_stream.c, hyd_stream_priv.h):
 * the window it keeps asked for ahead of it grows with the stream, up to
 * the link's bandwidth-delay product. */
struct hyd_stream {
	uint64_t hi;	     /* the furthest end of a read in the stream */
	uint64_t ahead_end;  /* chunks up to here were asked for */
	uint64_t decode_end; /* and up to here decoded into memory */
	uint64_t window;     /* bytes to keep asked for past hi */
	uint64_t grown_at;   /* hi when the window last doubled */
	int started;	     /* a read was noted */
};
/* Manifest rows an open file keeps (about 8 MiB of file at 64 KiB). */
#define HYD_READ_WINDOW 128u

/* What the read path keeps per open file: a window of its chunk manifest,
 * so a read does not query the catalog again for rows it already has, and
 * its stream for readahead. Guarded by its own mutex; reads of
 * one open file may run on several FUSE threads at once. */
struct hyd_read_open {
	uint64_t ino, size;
	/* The generation the state was made from: its catalog and manifest
	 * fetcher serve this file's manifest (a reference; NULL: the read
	 * context's own cat and manifest). */
	struct hyd_gen *gen;
	unsigned refs; /* __atomic: the open itself + reads still running */
	pthread_mutex_t mu;
	struct cat_chunk *win; /* NULL until the first read */
	size_t win_n;	       /* rows in win: contiguous, in offset order */
	struct hyd_stream st;  /* the readahead of its sequential reader */
	/* --into: the file landed in DIR that reads come from
	 * (hyd_read_open_landed) */
	int landed_fd;		      /* -1: none (yet) */
	int landed_gone;	      /* changed since: never again */
	uint64_t landed_asked;	      /* base_now_ns of the last ask */
	struct timespec landed_ctime; /* its ctime when vouched for */
};

/* A new open-file state for regular file ino of size bytes in generation
 * gen (it takes a reference of its own; NULL: the read context's
 * catalog), holding one reference (the open's). Returns 0 or -ENOMEM.
 * Any thread. */
int hyd_read_open_new(struct hyd_gen *gen, uint64_t ino, uint64_t size,
		      struct hyd_read_open **ret);
/* Take one more reference: a read takes one for as long as it runs,
 * including work done after its reply, since FUSE may process the file's
 * release as soon as the last reply is out. */
void hyd_read_open_ref(struct hyd_read_open *of);
/* Drop a reference; the last one frees. NULL is a no-op. */
void hyd_read_open_unref(struct hyd_read_open *of);

/* --into: an fd of of's file as landed in DIR (the store's placer
 * vouches for it; hyd_store_landed_fd), to serve its reads from with no
 * chunk lookup; -1 when there is none (not landed yet: asked again at
 * most every HYD_READ_LANDED_ASK_NS), or when the file's ctime or size
 * moved since it was vouched for (written into, truncated, chmod'ed:
 * the reads go through the chunks from then on, each checked). The fd
 * stays of's until its last reference goes. Any thread. */
#define HYD_READ_LANDED_ASK_NS 1000000000ull
int hyd_read_open_landed(const struct hyd_read_ctx *rc,
			 struct hyd_read_open *of);
/* 1 when fd's file still has the size and ctime the placer vouched for
 * (any write, truncate or chmod since moved its ctime), else 0. */
int hyd_read_landed_same(int fd, uint64_t size, const struct timespec *ctime);

/* Read up to len bytes at off of regular file ino of size file_size into
 * out (room for len bytes). Reads at or past the end give *ret_len == 0.
 * Blocks until the chunks are there: a FUSE worker thread, never the loop.
 * A pending file's manifest is fetched first when it is not local (that
 * file's alone: the per-file endpoint), within the same deadline as the
 * chunks. Returns 0 with *ret_len set, or -EIO when the bytes cannot be
 * served verified (manifest that does not cover the file, a manifest that
 * could not be fetched or that the source never made because the file
 * changed, a fetch that failed or ran out of time, a bad catalog row),
 * -ENOMEM. Failures are logged here, once, with the file and the chunk. */
int hyd_read_file(const struct hyd_read_ctx *rc, uint64_t ino,
		  uint64_t file_size, uint64_t off, size_t len, uint8_t *out,
		  size_t *ret_len);

/* The answer to one read: segments in file order pointing at verified
 * bytes where they rest (pinned cache slots, fetched chunks, or buffers of
 * its own), valid until hyd_read_iov_release. */
struct hyd_read_iov {
	struct iovec *iov;
	struct hyd_read_hold *hold; /* what keeps iov[i]'s bytes alive */
	size_t n, cap;
	size_t len; /* sum of the segments' lengths */
};

/* hyd_read_file for an open file, without the copy: on success *rv holds
 * the bytes (rv->len of them; 0 at or past the end), which the caller
 * hands to writev/fuse_reply_iov and then gives back with
 * hyd_read_iov_release. The manifest comes from (and is kept in) of's
 * window. Errors as hyd_read_file; *rv is empty then. */
int hyd_read_open_iov(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
		      uint64_t off, size_t len, struct hyd_read_iov *rv);

/* Unpin and free what rv holds; rv is empty afterwards. */
void hyd_read_iov_release(const struct hyd_read_ctx *rc,
			  struct hyd_read_iov *rv);

/* Readahead, owned here alone. After a read of [off, off+len) of of was
 * answered: when it continues the open file's sequential stream (one
 * detector, hyd_stream.c; kernel requests that finish out of order and
 * the page faults of a mapping still count), the stored chunks of the
 * next HYD_STREAM_DECODE bytes not claimed yet are decoded and verified
 * into the cache, so the reads that follow only copy, and every chunk of
 * the stream's window (growing with the stream up to twice the link's
 * bandwidth-delay product, hyd_fetch_link) that the store lacks is asked
 * for at HYD_PRIO_READAHEAD (deadline rc->timeout_ns from its send), so
 * it is on the wire before the reader gets there. The store is asked once
 * per chunk. Costs the caller the decode time: call it after replying. */
void hyd_read_ahead(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
		    uint64_t off, size_t len);

/* ---- the mount's tree, without FUSE (hyd_fuse_gens.c,
 * hyd_fuse_files.c); any thread ---- */

/* The filesystem a mount serves: its generations, its table of open-file
 * states and its read context. hyd_fuse.h has its insides, for the FUSE
 * operations; another view of the same tree (the S3 server) reaches it
 * through these calls alone, so it reads what the mount reads, shares
 * its open-file states and needs no FUSE header. */
struct hyd_fs;

/* The current generation, pinned (hyd_gen_unref when done). */
struct hyd_gen *hyd_fs_gen(struct hyd_fs *fs);

/* The mount's read context: store, fetcher, decoded-chunk cache,
 * deadline, counters (its cat and manifest are NULL: each open-file
 * state reads its own generation's). */
const struct hyd_read_ctx *hyd_fs_read_ctx(const struct hyd_fs *fs);

/* Regular file ino's open-file state in the mount's table, with a
 * reference for the caller (hyd_read_open_unref), made from the
 * generation that answers for ino when the table has none (*ret_new = 1
 * then). -EISDIR or -EINVAL for an inode that is not a regular file,
 * else the catalog's error or -ENOMEM. */
int hyd_fs_file_get(struct hyd_fs *fs, uint64_t ino, struct hyd_read_open **ret,
		    int *ret_new);

#endif
