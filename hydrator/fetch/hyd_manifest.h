/*
 * hydrator/fetch/hyd_manifest.h — manifests of pending files
 * (catalog format 2), fetched after the catalog.
 *
 * A format 2 catalog may list regular files as pending: their chunk
 * lists come later from the replicator (docs/protocol.md, "Manifests"):
 *   GET BASE/manifest/GEN/INO?wait=S   one file; moves it to the front of
 *                                      the source's hashing queue
 *   GET BASE/manifests/GEN/SEG?wait=S  the pending files with ino in
 *                                      [SEG*1024, SEG*1024+1023]
 * Not hashed yet is 503 (the server held the request up to S seconds);
 * 404 not a pending file; 410 a superseded generation. A body is checked
 * whole against the catalog and stored in the manifest overlay by
 * cat_overlay_put_wire, or not at all; readers with the overlay attached
 * see it at once (cat_chunks_range).
 *
 * Blocking calls (curl easy handles, kept in a small pool so connections
 * stay alive between requests) for FUSE worker threads, the backfill
 * scheduler and `ferry sync`'s threads — never an event loop. One request
 * per file or segment at a time in the process: concurrent callers of the
 * same one wait for it (single flight), each within its own deadline.
 *
 * Errors (-errno): -EAGAIN still not hashed at the deadline (503 to the
 * end), -ETIMEDOUT other transient failures (no connection, reset, 5xx)
 * lasted past it, -ENOENT 404, -ESTALE 410 (the generation was superseded:
 * remount to follow), -EBADMSG a body that fails its checks (nothing is
 * stored), -EPROTO another answer, -ECANCELED cancelled or stopped,
 * -ENOMEM, -EIO (the overlay could not be written), -EKEYREJECTED an
 * answer without a signature by creds' trust key (--trust-key; nothing is
 * stored, not retried).
 */
#ifndef FERRY_HYD_MANIFEST_H
#define FERRY_HYD_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "hydrator/hydrator.h"

struct hyd_mount_counts; /* hyd_fetch.h */

/* Inos per segment of GET BASE/manifests/GEN/SEG. */
#define HYD_MANIFEST_SEG_INOS 1024u
/* ?wait= of each request unless configured: seconds the server may hold
 * it for hashing (the protocol allows 0..30). */
#define HYD_MANIFEST_WAIT_S 10u
/* Chunks a segment record carries inline; a bigger manifest comes as a
 * CAT_MWIRE_ALONE marker and is fetched on its own. */
#define HYD_MANIFEST_INLINE_MAX 4096u

typedef struct hyd_manifest hyd_manifest;

struct hyd_manifest_config {
	const char *base_url;	 /* "http://host:port/v1/NAME" (copied) */
	cat_overlay *ov;	 /* where manifests go; borrowed until
				  * hyd_manifest_free */
	long connect_timeout_ms; /* 0: 5000 */
	unsigned wait_s;	 /* ?wait= per request; 0: HYD_MANIFEST_WAIT_S,
				  * at most 30 */
	const struct hyd_creds *creds; /* borrowed until free; NULL: none */
	/* requests and bytes are also added here (metrics); borrowed until
	 * free; NULL: not */
	struct hyd_mount_counts *counts;
};

/* Counters (relaxed atomics: a snapshot). */
struct hyd_manifest_stats {
	uint64_t requests;  /* GETs sent */
	uint64_t not_ready; /* of them, answered 503 */
	uint64_t files;	    /* overlay rows written (manifests and
			     * source-changed markers) */
	uint64_t bytes;	    /* body bytes of 200 answers */
	uint64_t failures;  /* calls that ended in an error other than
			     * -ECANCELED */
};

/* A fetcher; no request yet. curl_global_init must have been called
 * (hyd_fetch_global_init). Returns 0, -EINVAL, -ENOMEM. */
int hyd_manifest_new(const struct hyd_manifest_config *cfg, hyd_manifest **ret);

/* Free. No call may be running. NULL is a no-op. */
void hyd_manifest_free(hyd_manifest *m);

/* From now on every call (running ones within about a second) ends with
 * -ECANCELED. Any thread; for a process that is going away. */
void hyd_manifest_cancel(hyd_manifest *m);

void hyd_manifest_stats(hyd_manifest *m, struct hyd_manifest_stats *ret);

/*
 * Make the manifest of regular file ino local, through the per-file
 * endpoint. r is a reader of the catalog the overlay belongs to, with the
 * overlay attached (it checks the body; the caller must not hold it: not
 * from inside one of its callbacks). Requests are retried until
 * deadline_ns (base_now_ns clock): 503 after its Retry-After, transient
 * failures with a capped backoff. At least one request is sent unless the
 * overlay already answers for ino, whatever the deadline. stop (may be
 * NULL) is a flag, read atomically, that ends the call like
 * hyd_manifest_cancel.
 * Returns 0 when the overlay holds ino's answer: its manifest, or the
 * marker that its source changed before it was hashed (cat_chunks_range
 * then says -ESTALE); also 0 when ino is not pending at all. Otherwise
 * the -errno of the header. The call that sent the requests logs one line
 * for a failure (-ECANCELED none, -EAGAIN at debug level); callers that
 * waited for it do not.
 */
int hyd_manifest_file(hyd_manifest *m, cat_reader *r, uint64_t ino,
		      uint64_t deadline_ns, const int *stop);

/*
 * Make every pending manifest of segment seg (inos [seg * 1024,
 * seg * 1024 + 1023]) local: GET BASE/manifests/GEN/SEG unless none is
 * missing or its answer was stored already, then each file still missing (a
 * CAT_MWIRE_ALONE record, or one the answer left out) with hyd_manifest_file,
 * in ino order, within the same deadline. *ret_files (may be NULL) counts the
 * overlay rows this call wrote. Returns as hyd_manifest_file.
 */
int hyd_manifest_segment(hyd_manifest *m, cat_reader *r, uint64_t seg,
			 uint64_t deadline_ns, const int *stop,
			 size_t *ret_files);

/*
 * What one file needs of its segment: ino's manifest local. The
 * segment's answer (shared with any other caller; not asked for again
 * once stored), then ino alone when the answer left it out; not the
 * other files the answer left out
 * (hyd_manifest_segment fetches those too: a caller that needs a 5 KB
 * file waited for a 2 GiB file's chunk list that came in the same
 * segment, 0.3 s at 50 ms). Returns as hyd_manifest_segment; 0 at once
 * when ino's manifest is local or ino is not pending.
 */
int hyd_manifest_segment_for(hyd_manifest *m, cat_reader *r, uint64_t ino,
			     uint64_t deadline_ns, const int *stop,
			     size_t *ret_files);

/* Requests the bulk prefetch keeps in flight unless told otherwise. */
#define HYD_MANIFEST_PREFETCH_THREADS 8u
/* And the one of the segments asked for (--no-backfill). */
#define HYD_MANIFEST_ASKED_THREADS 4u

/*
 * From now on, fetch every manifest r's overlay lacks in the background,
 * a segment (1,024 inos) per request, threads requests at a time (0: the
 * default), in ino order but those hyd_manifest_want named first; it
 * ends when none is missing, at hyd_manifest_cancel or at
 * hyd_manifest_free (which stops it first). Reads need not wait for it:
 * a file whose manifest is not local yet is still fetched alone. r is
 * borrowed until hyd_manifest_free. A second call is a no-op. Returns 0,
 * -ENOMEM, -errno of pthread_create.
 */
int hyd_manifest_prefetch(hyd_manifest *m, cat_reader *r, unsigned threads);

/*
 * hyd_manifest_prefetch for a mount that fetches nothing in the
 * background (--no-backfill): only the segments hyd_manifest_want names
 * (a directory listed, a file looked up or opened), each in one request
 * for its 1,024 inos, so a job that walks a directory pays one round trip
 * for its files' manifests instead of one per file; it runs until
 * hyd_manifest_cancel or hyd_manifest_free. A second call (of either) is a
 * no-op. Returns as hyd_manifest_prefetch.
 */
int hyd_manifest_prefetch_asked(hyd_manifest *m, cat_reader *r,
				unsigned threads);

/* ino's segment goes next in the prefetch (a directory is being listed,
 * a file looked up or opened). Cheap; any thread; a no-op without a
 * prefetch or once it ended. */
void hyd_manifest_want(hyd_manifest *m, uint64_t ino);

/* The prefetch's progress: segments and files it made local, and whether
 * it still runs (all 0 without one). */
void hyd_manifest_prefetch_progress(hyd_manifest *m, uint64_t *ret_segments,
				    uint64_t *ret_files, int *ret_running);

#endif
