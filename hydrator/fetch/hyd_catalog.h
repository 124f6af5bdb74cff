/*
 * hydrator/fetch/hyd_catalog.h — getting the catalog to the
 * destination.
 *
 * GET BASE/HEAD gives the current generation; GET BASE/catalog/GEN gives the
 * zstd-compressed SQLite catalog. It is streamed into
 * CACHEDIR/catalogs/GEN.db.tmp, decompressed on the fly with a size cap,
 * checked with cat_reader_open (and that its generation matches), fsynced
 * and renamed to CACHEDIR/catalogs/GEN.db. Blocking (curl easy): call it
 * before the event loop starts, never from a loop or FUSE callback.
 */
#ifndef FERRY_HYD_CATALOG_H
#define FERRY_HYD_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "hydrator/hydrator.h"

/* Bytes of a HEAD answer taken (a generation and a newline). */
#define HYD_HEAD_MAX 64

/* The body of a HEAD answer (len bytes, untrusted, need not end in NUL)
 * into *ret_gen: decimal digits of a generation 1..2^64-1 without leading
 * zeros, then only newlines, carriage returns, spaces or tabs. 0, or
 * -EPROTO for anything else (a NUL, a sign, a second line, over
 * HYD_HEAD_MAX bytes). */
int hyd_head_parse(const char *buf, size_t len, uint64_t *ret_gen);

/* Cap on a decompressed catalog. */
#define HYD_CATALOG_MAX_BYTES (64ull << 30)

struct hyd_catalog_result {
	uint64_t generation;
	char path[4096]; /* CACHEDIR/catalogs/GEN.db */
	int from_cache;	 /* 1: server unreachable, newest cached catalog used */
	/* requests sent and body bytes received by the call (metrics),
	 * set whatever it returns */
	uint64_t requests, bytes;
	/* the least time from a request sent to its first byte (ns), 0
	 * when no request was answered: the link's round trip before the
	 * fetcher has measured one (hyd_fetch_link_seed) */
	uint64_t rtt_ns;
	/* on -EHOSTUNREACH: 1 when connecting timed out (the server was
	 * never heard from), 0 when it was refused or had no route */
	int connect_timed_out;
};

/* base_url is like "http://127.0.0.1:8700/v1/NAME" (no trailing slash
 * needed); creds (may be NULL, borrowed for the call) go on every
 * request. When the server cannot be reached (connection refused, timeout,
 * DNS) and cache_dir already holds a catalog fetched from the same
 * base_url (recorded in cache_dir/catalogs/url), that newest catalog is
 * used and from_cache is set. A reachable server that answers with an error
 * is never papered over by the cache.
 * On failure returns -errno and writes one human line (no newline) naming
 * the URL and the problem into errbuf, e.g.
 *   "cannot reach http://127.0.0.1:9/v1/x: Couldn't connect to server"
 *   "http://127.0.0.1:8700/v1/nope: namespace not found (HTTP 404)"
 *   "http://127.0.0.1:8700/v1/x/catalog/1: not a valid ferry catalog"
 * -EHOSTUNREACH unreachable without cache, -ENOENT 404, -EBADMSG bad
 * catalog, -EPROTO other HTTP/protocol error, -EIO local I/O.
 * With creds->trust_key: -EKEYREJECTED when the generation is refused
 * (unsigned, another key, changed, another namespace or generation, a
 * rollback below the highest generation seen, a catalog without the
 * signed digest; errbuf says which), nothing installed; a cached catalog
 * stands in for an unreachable server only with its kept statement. */
int hyd_catalog_fetch(const char *base_url, const char *cache_dir,
		      const struct hyd_creds *creds, long connect_timeout_s,
		      struct hyd_catalog_result *ret, char *errbuf,
		      size_t errcap);

/* For a mount that follows its source: when the server's HEAD names a
 * generation newer than have (whose catalog, catalogs/HAVE.db of the same
 * base_url, the cache holds), install catalogs/GEN.db for it — made from
 * HAVE.db and the delta HAVE -> GEN when the server has one, else
 * downloaded whole — checked as hyd_catalog_fetch does, and return 1 with
 * ret set. Older catalogs stay: the mount still reads them. 0 when the
 * server's generation is not newer (ret->generation says which it is).
 * Errors as hyd_catalog_fetch (no cache stands in), and -ESTALE when the
 * cache's catalogs came from another URL. Signed (creds->trust_key): the new
 * generation's statement is checked first (-EKEYREJECTED, nothing
 * installed). stop (may be NULL), read
 * atomically, ends a transfer in progress when it turns non-zero (an
 * error; nothing is installed). Blocking (curl easy): a thread of its
 * own. */
int hyd_catalog_update(const char *base_url, const char *cache_dir,
		       const struct hyd_creds *creds, uint64_t have,
		       long connect_timeout_s, const int *stop,
		       struct hyd_catalog_result *ret, char *errbuf,
		       size_t errcap);

/* Just the current generation (GET BASE/HEAD), within connect_timeout_s
 * to connect and twice that in all. Errors as hyd_catalog_fetch (no
 * cache stands in). */
int hyd_catalog_head(const char *base_url, const struct hyd_creds *creds,
		     long connect_timeout_s, uint64_t *ret_gen, char *errbuf,
		     size_t errcap);

#endif
