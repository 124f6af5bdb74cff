/*
 * hydrator/hyd_read_internal.h — serving file bytes: the read path and its
 * small cache of decoded chunks.
 *
 * The read path (hyd_read.c) turns [off, off+len) of a regular file into
 * bytes: chunk manifest from the catalog, each chunk from the decoded-chunk
 * cache, else the store, else the fetcher (all missing chunks of a request
 * are submitted first, then waited for, so they travel in parallel). Every
 * byte it returns has passed chunk_id_verify. Nothing here knows FUSE.
 */
#ifndef FERRY_HYD_READ_INTERNAL_H
#define FERRY_HYD_READ_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "hydrator/hyd_fetch_internal.h"
#include "hydrator/hyd_store_internal.h"

/* ---- decoded-chunk cache (hyd_read_cache.c); any thread ---- */

/* An LRU of whole verified chunks, so consecutive 128 KiB reads inside one
 * 256 KiB chunk decode and hash it once. One mutex; copies happen under it. */
typedef struct hyd_read_cache hyd_read_cache;

#define HYD_READ_CACHE_SLOTS 32u

/* slots == 0 gives a cache that never holds anything. Returns 0 / -ENOMEM. */
int hyd_read_cache_new(size_t slots, hyd_read_cache **ret);
void hyd_read_cache_free(hyd_read_cache *c); /* NULL is a no-op */

/* Copy raw[off, off+len) of chunk id into out when cached: 1 hit, 0 miss
 * (also when the cached chunk is shorter than off+len). */
int hyd_read_cache_copy(hyd_read_cache *c, const chunk_id *id, size_t off,
			size_t len, void *out);

/* Remember a chunk (copied). Only bytes that passed chunk_id_verify may be
 * put here: the cache serves them without a second check. */
void hyd_read_cache_put(hyd_read_cache *c, const chunk_id *id,
			const void *raw, size_t len);

/* ---- the read path (hyd_read.c) ---- */

struct hyd_read_ctx {
	cat_reader *cat;       /* borrowed */
	hyd_store *store;      /* borrowed */
	hyd_fetch *fetch;      /* borrowed */
	hyd_read_cache *cache; /* borrowed; may be NULL */
	uint32_t max_raw;      /* the catalog's max chunk size */
	uint64_t timeout_ns;   /* per-read deadline for fetches */
};

/* Read up to len bytes at off of regular file ino of size file_size into
 * out (room for len bytes). Reads at or past the end give *ret_len == 0.
 * Blocks until the chunks are there: a FUSE worker thread, never the loop.
 * Returns 0 with *ret_len set, or -EIO when the bytes cannot be served
 * verified (manifest that does not cover the file, a fetch that failed or
 * ran out of time, a bad catalog row), -ENOMEM. Failures are logged here,
 * once, with the file and the chunk. */
int hyd_read_file(const struct hyd_read_ctx *rc, uint64_t ino,
		  uint64_t file_size, uint64_t off, size_t len, uint8_t *out,
		  size_t *ret_len);

#endif
