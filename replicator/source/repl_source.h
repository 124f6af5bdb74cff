/*
 * replicator/source/repl_source.h — the source room's face: what the
 * publish and serve rooms (and ferry-replicator) use of the source tree
 * and a namespace's state directory.
 *   - repl_scan: walk a directory into a catalog and a source index that
 *     maps every chunk id back to the file bytes that hold it (the walk
 *     itself, its file jobs and threads are repl_scan_priv.h's);
 *   - the state directory's layout (repl_state.c) and HEAD;
 *   - a chunk read again from the source, checked against its id and
 *     framed (repl_reread.c), beneath the source directory only
 *     (repl_beneath.c).
 * The source index is repl_srcindex.h, the background hasher
 * repl_hasher.h.
 *
 * State layout of one namespace (STATE = STATEDIR/NAME):
 *   STATE/HEAD                     current generation, decimal text + "\n"
 *   STATE/catalog/GEN.db           the catalog (catalog.h schema)
 *   STATE/catalog/GEN.db.zst       the same, zstd-compressed (what is served)
 *   STATE/catalog/GEN.db.zst.sha256  hex SHA-256 of GEN.db.zst + "\n"
 *   STATE/catalog/GEN.db.sig       its signed statement (--sign-key)
 *   STATE/source/GEN.db            source index (repl_srcindex schema)
 * HEAD is written last (temp + rename), so a crash mid-build never points
 * it at a half-written generation.
 *
 * Conventions as in catalog.h: 0 on success, -errno on failure. Every
 * call here blocks and may run on any thread, unless it says otherwise;
 * run it on a worker, never in an event-loop callback.
 */
#ifndef FERRY_REPL_SOURCE_H
#define FERRY_REPL_SOURCE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "replicator/source/repl_srcindex.h"

/* Called for an entry that is left out of a scan. rel/rel_len are the raw
 * path bytes relative to the scanned directory (empty for the root), err a
 * positive errno, why a short reason when strerror(err) would mislead
 * (e.g. "changed while being read"), else NULL. Runs on the scanning
 * thread. */
typedef void (*repl_scan_warn_fn)(void *ctx, const char *rel, size_t rel_len,
				  int err, const char *why);

/* Test hook: called just before a regular file is opened for reading, with
 * the directory fd and the entry's name. A non-zero return is ignored.
 * May run on any scanning thread, never two calls at once. */
typedef int (*repl_scan_hook_fn)(void *ctx, int dirfd, const char *name);

struct repl_scan_opts {
	uint64_t generation;	    /* >= 1 */
	uint64_t parent_generation; /* 0 when none */
	const chunk_params *params; /* NULL: chunk_params_default */
	/* Where the source index goes (written as PATH.tmp, renamed on
	 * success); NULL for none. */
	const char *srcindex_path;
	/* The previous generation's catalog and source index: a regular file
	 * they hold unchanged (same source identity, size, mtime and ctime;
	 * docs/catalog.md) takes its manifest from there and is not read.
	 * NULL, missing, or cut with other chunk parameters: every file is
	 * read. */
	const char *prev_catalog_path;
	const char *prev_srcindex_path;
	/* When set to non-zero (any thread), the scan stops soon with
	 * -ECANCELED. May be NULL. */
	const atomic_int *cancel;
	/* 1: the walk reads no file data. A regular file whose manifest
	 * cannot be reused goes into the catalog as pending and into the
	 * source index's todo; the hasher (repl_hasher_*) reads it after the
	 * catalog is published. 0: every file is read and hashed here. */
	int defer;
	repl_scan_warn_fn warn;	       /* NULL: silent */
	repl_scan_hook_fn before_read; /* NULL: none (tests only) */
	void *ctx;		       /* passed to warn and before_read */
	/* repl_generation_build only: sign each generation it publishes,
	 * and HEAD's when the tree is unchanged and HEAD has no statement by
	 * this key (catalog.h, cat_stmt; STATE/catalog/GEN.db.sig, written
	 * before HEAD). NULL: no signature. ns_name is the namespace the
	 * statements name. */
	const struct cat_sign_key *sign_key;
	const char *ns_name;
	/* Threads that read, chunk and hash files (the calling thread is
	 * one of them); 0: one per online CPU; at most 64 are used. The
	 * catalog does not depend on it. Each holds 2 read windows
	 * (2 x 4 MiB with the default chunk sizes). */
	unsigned threads;
};

struct repl_scan_stats {
	uint64_t files;		/* regular files (inodes, not links) */
	uint64_t dirs;		/* directories, root included */
	uint64_t others;	/* symlinks, fifos, devices, sockets */
	uint64_t bytes;		/* sum of regular file sizes */
	uint64_t chunks;	/* manifest entries */
	uint64_t unique;	/* distinct chunk ids (0 without a srcindex) */
	uint64_t left_out;	/* entries reported through warn */
	uint64_t reused;	/* regular files whose manifest was reused */
	uint64_t bytes_reused;	/* their sizes */
	uint64_t bytes_read;	/* file bytes read and hashed (all tries) */
	uint64_t pending;	/* regular files left to the hasher (defer) */
	uint64_t bytes_pending; /* their sizes */
	chunk_params params;	/* the parameters used */
};

/* Walk dir (never following symlinks below it) into a new catalog at
 * catalog_path (cat_writer: temp + rename), and into the source index at
 * o->srcindex_path. Entries that vanish or cannot be read are reported
 * through o->warn and left out; the scan goes on. Memory stays bounded:
 * file data is read through a fixed window; a file's chunk manifest that
 * outgrows memory spills to an unlinked temp file.
 * Returns 0, -ECANCELED, -ENOENT/-ENOTDIR/-EACCES (dir itself), -EIO
 * (catalog or index write failed), -ENOMEM. On failure nothing is left at
 * catalog_path or srcindex_path. */
int repl_scan(const char *dir, const char *catalog_path,
	      const struct repl_scan_opts *o, struct repl_scan_stats *ret);

/* The log line of an entry a scan left out (the server's scans and
 * --publish both log with it): the path as dir/rel (rel cut at 4 KiB), why, or
 * err's text. */
void repl_scan_warn_log(const char *ns, const char *dir, const char *rel,
			size_t rel_len, int err, const char *why);

/* -- the state directory (repl_state.c) -- */

/* Paths of one generation inside a namespace state dir; each malloc'd
 * (the caller frees), NULL when out of memory. */
char *repl_catalog_path(const char *state_dir, uint64_t gen);
char *repl_catalog_zst_path(const char *state_dir, uint64_t gen);
char *repl_srcindex_path(const char *state_dir, uint64_t gen);
/* catalog/FROM-TO.delta.zst (its digest beside it, as a catalog's). */
char *repl_delta_zst_path(const char *state_dir, uint64_t from, uint64_t to);
/* catalog/GEN.db.sig: the signed statement of a generation (catalog.h,
 * cat_stmt). */
char *repl_sig_path(const char *state_dir, uint64_t gen);

/* Read state_dir/HEAD into *ret_gen: 0 when there is none yet.
 * Returns 0, -EBADMSG (not a decimal generation), -errno. */
int repl_head_read(const char *state_dir, uint64_t *ret_gen);

/* Write state_dir/HEAD durably (temp O_EXCL, fsync, rename, fsync dir). */
int repl_head_write(const char *state_dir, uint64_t gen);

/* -- chunks read again from the source (repl_reread.c) -- */

/* Open (read-only, non-blocking) the file at path, relative to dirfd,
 * staying beneath dirfd and following no symlink (repl_beneath.c). -1 with
 * errno set on failure. */
int repl_open_beneath(int dirfd, const char *path);

/* What one worker thread needs to serve a chunk. Pooled per namespace:
 * a context is used by one thread at a time, so its SQLite connection and
 * frame coder are never shared concurrently. */
struct repl_worker {
	struct repl_worker *next;
	repl_srcindex *idx; /* opened on first use */
	uint64_t gen;	    /* the generation idx is of */
	frame_coder *coder;
	uint8_t *raw;
	size_t raw_cap;
	int rehash; /* hash every chunk, whatever its file's identity says */
};

/* Result of serving one chunk on a worker. */
struct repl_chunk_res {
	int err;	/* 0, -ENOENT unknown id, -EBADMSG source changed,
			 * other -errno */
	uint8_t *frame; /* malloc'd; caller frees (repl_chunk_res_fini) */
	size_t frame_len;
	uint32_t raw_len;
	char *path; /* malloc'd relative path, for the 409 detail/log */
	int hashed; /* its SHA-256 was computed again: the file was not
		     * (or not known to be) what the walk saw */
};

/* A chunk reading context of its own (not from a namespace's pool) on
 * the source index at srcindex_path, of generation gen; freed with
 * repl_chunk_workers_free. 0, -ENOMEM, the index's -errno. */
int repl_chunk_worker_open(const char *srcindex_path, uint64_t gen,
			   struct repl_worker **ret);

/* repl_chunk_load's work on a context the caller holds: id's bytes read
 * beneath dirfd, checked, framed into res (res->err is the return). */
int repl_chunk_frame(struct repl_worker *w, int dirfd, enum frame_policy policy,
		     const chunk_id *id, struct repl_chunk_res *res);

void repl_chunk_res_fini(struct repl_chunk_res *res);

/* Free one context (NULL: no-op), or a list linked by next. */
void repl_chunk_worker_free(struct repl_worker *w);
void repl_chunk_workers_free(struct repl_worker *list);

#endif
