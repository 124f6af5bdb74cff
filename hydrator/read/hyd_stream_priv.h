/*
 * hydrator/read/hyd_stream_priv.h — one sequential reader's readahead
 * window (hyd_stream.c): where the stream is, how far ahead of it chunks
 * have been asked for, and how far ahead they should be.
 *
 * The window starts at HYD_STREAM_INIT and doubles each time the reader
 * has gone through half of it, up to a cap the caller gives on each read:
 * the link's bandwidth-delay product (hyd_stream_cap), so a stream keeps
 * as many bytes on the wire as the link holds and no more. A read that
 * does not continue the stream (a jump) starts a new one at the initial
 * window. Kernel requests of one reader run in parallel and arrive out of
 * order, some ahead of the furthest end the stream reached (the kernel's
 * own readahead), some behind, and mmap faults of one mapping come as
 * reads of the same open file: a read that starts within HYD_STREAM_SLACK
 * (or the window, when larger) of the stream's furthest end, either way,
 * continues it.
 *
 * Pure arithmetic, no lock of its own: the caller holds the open file's.
 */
#ifndef FERRY_HYD_STREAM_PRIV_H
#define FERRY_HYD_STREAM_PRIV_H

#include <stdint.h>

#include "hydrator/read/hyd_read.h" /* struct hyd_stream */

/* The first window of a stream, and the least cap. */
#define HYD_STREAM_INIT (1ull << 20)
/* How far from the stream's furthest end a read may start and still
 * continue it (the kernel's own readahead runs up to a few MiB ahead). */
#define HYD_STREAM_SLACK (8ull << 20)
/* The most any window grows to, however fast and far the link. */
#define HYD_STREAM_MAX (256ull << 20)
/* Chunks decoded ahead into the cache (the rest of the window is only
 * fetched into the store): what the next few kernel requests copy. */
#define HYD_STREAM_DECODE (1ull << 20)

/* A new stream at offset 0 (a file just opened). */
void hyd_stream_init(struct hyd_stream *s);

/* What a read of the stream leaves to do ahead of it. */
struct hyd_stream_ahead {
	uint64_t a, b;	 /* bytes newly to ask for (a == b: none) */
	uint64_t da, db; /* of those or earlier ones, to decode into memory
			  * (the first HYD_STREAM_DECODE past hi) */
};

/* A read of [off, end) of a file of size bytes was answered; cap bounds
 * the window (HYD_STREAM_INIT..HYD_STREAM_MAX; see hyd_stream_cap).
 * Returns 1 with *ret filled when there is something to do ahead of the
 * stream ([a, b) never before hi nor past size, each byte given once;
 * [da, db) likewise), or 0 when there is nothing: a jump (the new stream
 * starts there), or the window is already asked for and decoded. */
int hyd_stream_note(struct hyd_stream *s, uint64_t off, uint64_t end,
		    uint64_t size, uint64_t cap, struct hyd_stream_ahead *ret);

/* The cap of a window on a link of rate bytes/s and rtt_ns round trip
 * (0 when not measured yet: then the largest window a 1 Gbit/s link
 * with 100 ms wants), within room bytes of free space (UINT64_MAX: no
 * bound): four times the bandwidth-delay product as measured, clamped to
 * [HYD_STREAM_INIT, HYD_STREAM_MAX] and to a quarter of room. Twice it
 * keeps the reader from draining the window while the next bytes
 * travel; twice more lets a window that is what limits the rate (the
 * rate measured is the rate the windows allowed) grow past it, so the
 * window finds a fast link's product within a few round trips. */
uint64_t hyd_stream_cap(uint64_t rate, uint64_t rtt_ns, uint64_t room);

#endif
