/*
 * replicator/serve/repl_adapt.c — lz4 or zstd for a batch frame, by how fast
 * its connection drains.
 *
 * Under --codec auto a batch (POST chunks) for a client across a link is
 * framed with zstd, whose frames are about a sixth smaller than lz4's on
 * the trees we measure, but which makes only about 1 GB/s a core. On a
 * link faster than that (10 Gbit/s and up) the replicator's compression,
 * not the link, sets the pace. Which of the two waits shows at the
 * socket: when a frame is handed to the connection and bytes written
 * before are still in the socket or in libuv's queue, the link (or the
 * client) is behind, and zstd's saving is free; when nothing is left to
 * send, the link waits for us, and lz4's speed is worth more than its
 * bytes. Each frame made takes the connection's current choice, which
 * follows an average of what the frames handed over saw (with some
 * hysteresis), so one empty moment does not flip it. The first frame of
 * each batch is not counted: the socket drained while the client was
 * between requests, which says nothing of the link. A connection starts
 * at zstd, as a client across a slow link wants from the first frame.
 */
#include "replicator/serve/repl_http_priv.h"

/* Unsent bytes below this count as none: a frame's own tail in flight. */
#define ADAPT_UNSENT_MIN 16384u
/* The average moves 1/ADAPT_WEIGHT of the way to each observation. */
#define ADAPT_WEIGHT 8
/* lz4 below LOW, zstd again above HIGH (of REPL_ADAPT_ONE). */
#define ADAPT_LOW (REPL_ADAPT_ONE / 4)
#define ADAPT_HIGH (REPL_ADAPT_ONE / 2)

void repl_adapt_init(struct repl_adapt *a)
{
	a->backlog = REPL_ADAPT_ONE;
	a->lz4 = 0;
}

void repl_adapt_note(struct repl_adapt *a, size_t unsent)
{
	int want = unsent >= ADAPT_UNSENT_MIN ? REPL_ADAPT_ONE : 0;

	a->backlog += (want - a->backlog) / ADAPT_WEIGHT;
	if (a->lz4 && a->backlog > ADAPT_HIGH)
		a->lz4 = 0;
	else if (!a->lz4 && a->backlog < ADAPT_LOW)
		a->lz4 = 1;
}
