/*
 * replicator/source/repl_hasher.h — the background hasher of one
 * generation: after a deferred scan has published the namespace, it reads,
 * cuts and hashes the files the walk left pending (the source index's
 * todo), in ino order (the walk's order), and records each manifest in the
 * source index as soon as it is done, where the manifest endpoints serve it.
 * A file asked for by a reader jumps the queue (repl_hasher_prioritize).
 *
 * A file is hashed only if it is still what the walk saw (source identity,
 * size, mtime, ctime); one that is not, or that changes while being read
 * (compared before and after), is recorded as changed: no manifest in
 * this generation, a warning naming its path, and reads of it fail on the
 * destination rather than mix bytes. A read error is tried three times.
 *
 * Threads: `threads` workers, each with its own read windows; one SQLite
 * connection, under the hasher's lock. The calls below are for any thread.
 */
#ifndef FERRY_REPL_HASHER_H
#define FERRY_REPL_HASHER_H

#include <stdint.h>

#include "catalog/catalog.h"

struct repl_hasher;

struct repl_hasher_opts {
	const char *name;	   /* namespace, for the log */
	const char *dir;	   /* the source as given, for the log */
	int dirfd;		   /* the source: files open beneath it */
	const char *srcindex_path; /* of the generation to finish */
	const char *spill_dir;	   /* where a long manifest may spill */
	chunk_params params;	   /* the catalog's */
	unsigned threads;	   /* workers, >= 1 */
	/* Called after each file is recorded, and once when the last one
	 * is (on a worker thread; must not block). May be NULL. */
	void (*progress)(void *ctx);
	void *ctx;
	/* Test hooks: sleep this long before each file (0: none); call
	 * opened (may be NULL; on a worker, with opened_ctx) once a file is
	 * open and found to be what the walk saw, before it is read. */
	unsigned delay_ms;
	void (*opened)(void *opened_ctx, const char *path);
	void *opened_ctx;
};

struct repl_hasher_stats {
	uint64_t files_total, bytes_total; /* pending files of the generation */
	uint64_t files_done, bytes_done;   /* recorded (either state) */
	uint64_t changed;		   /* recorded as changed */
	uint64_t bytes_read;		   /* read by this run (all tries) */
	uint64_t unique;		   /* chunk ids new to the index */
	uint64_t started_ns, ended_ns;	   /* monotonic; ended 0 = running */
	int err;			   /* what stopped it early, or 0 */
};

/* Count what is to do and start the workers (none when nothing is to do:
 * the hasher is finished at once). Returns 0, -ENOENT / -EBADMSG (no
 * format 3 source index), -ENOMEM, -errno of pthread_create. */
int repl_hasher_start(const struct repl_hasher_opts *o,
		      struct repl_hasher **ret);

/* Hash file ino next, if it is still to do. */
void repl_hasher_prioritize(struct repl_hasher *h, uint64_t ino);

void repl_hasher_stats(struct repl_hasher *h, struct repl_hasher_stats *ret);

/* 1 when every worker has ended (all done, or stopped by an error). */
int repl_hasher_finished(struct repl_hasher *h);

/* Stop soon (the file being read is given up, not recorded), join and
 * free. NULL is a no-op. */
void repl_hasher_stop(struct repl_hasher *h);

#endif
