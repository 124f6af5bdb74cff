/*
 * replicator/replicator.h — the source side of ferry, as a library.
 *
 * This is the one public header of replicator/. It offers what tools/ (and
 * the ferry-replicator program) may call:
 *   - repl_scan: walk a directory into a catalog (and a source index that
 *     maps every chunk id back to the file bytes that hold it),
 *   - repl_generation_build: one whole generation in a namespace state
 *     directory (scan, compressed catalog + its SHA-256, HEAD),
 *   - small helpers for that state layout (HEAD, names),
 *   - bearer tokens for --tokens (repl_token_new: `ferry token new`).
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
 * Conventions as in catalog.h: 0 on success, -errno on failure. Nothing here
 * is tied to a thread: each call is blocking and runs on the caller's
 * thread; run it on a worker, never in an event-loop callback.
 */
#ifndef FERRY_REPLICATOR_H
#define FERRY_REPLICATOR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"

#define REPL_VERSION "0.1.0"

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

/* Result of one generation build. */
struct repl_generation {
	uint64_t generation; /* the one HEAD names afterwards */
	int unchanged;	     /* 1: the tree was the same as HEAD's, which
			      * stays; nothing new was published */
	struct repl_scan_stats stats;
	char sha256[65]; /* hex of GEN.db.zst */
	uint64_t zst_bytes;
	double seconds; /* wall time of the whole build */
};

/* Build the next generation of a namespace: read state_dir/HEAD (none: 0),
 * scan dir as HEAD+1 (o->generation, o->parent_generation and the paths
 * of o are set here), reusing the manifests of files HEAD's generation
 * holds unchanged. When the new catalog's rows are those of HEAD's
 * (cat_meta.tree_sha256), it is removed and HEAD stays (ret->unchanged,
 * ret->generation = HEAD); else the catalog is compressed and HEAD is
 * written last. Creates state_dir and its subfolders (0755) as needed.
 * Returns 0 or -errno as repl_scan, plus -EIO for a failed publish. */
int repl_generation_build(const char *state_dir, const char *dir,
			  const struct repl_scan_opts *o,
			  struct repl_generation *ret);

/* Read state_dir/HEAD into *ret_gen: 0 when there is none yet.
 * Returns 0, -EBADMSG (not a decimal generation), -errno. */
int repl_head_read(const char *state_dir, uint64_t *ret_gen);

/* Write state_dir/HEAD durably (temp O_EXCL, fsync, rename, fsync dir). */
int repl_head_write(const char *state_dir, uint64_t gen);

/* Compress the file at src into dst with zstd (streaming, level 3), via
 * "dst.tmp", fsync, rename, fsync of the directory; the hex SHA-256 of the
 * compressed bytes goes into ret_hex and into "dst.sha256" (same dance).
 * *ret_bytes is the compressed size. Returns 0, -EIO, -errno. */
int repl_catalog_compress(const char *src, const char *dst, char ret_hex[65],
			  uint64_t *ret_bytes);

/* -- bearer tokens (ferry-replicator --tokens, `ferry token new`) -- */

/* A token is REPL_TOKEN_BYTES random bytes written as base64url without
 * padding (43 characters of [A-Za-z0-9_-]); the replicator's tokens file
 * holds only its SHA-256, "NAME HEX" per line (ferry-replicator(1)). */
#define REPL_TOKEN_BYTES 32u
#define REPL_TOKEN_TEXT_MAX 64u

/* A fresh token from OpenSSL's RAND_bytes into ret_token (cap >=
 * REPL_TOKEN_TEXT_MAX + 1, NUL-ended) and the lowercase hex SHA-256 of its
 * text into ret_hex. Returns 0, -ENOBUFS (cap), -EIO (no randomness). */
int repl_token_new(char *ret_token, size_t cap, char ret_hex[65]);

/* The lowercase hex SHA-256 of token[0..len), as a tokens file line wants
 * it. Returns 0 or -EIO. */
int repl_token_hash_hex(const char *token, size_t len, char ret_hex[65]);

#endif /* FERRY_REPLICATOR_H */
