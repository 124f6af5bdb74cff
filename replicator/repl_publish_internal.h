/*
 * replicator/repl_publish_internal.h — state-dir paths and catalog hash
 * helpers shared by the scanner, the source index and the publisher
 * (implemented in repl_publish.c; the durable-write primitives themselves
 * are catalog.h's base_write_all / base_mkdir_p / base_fsync_parent). Any
 * thread; all blocking.
 */
#ifndef FERRY_REPL_PUBLISH_INTERNAL_H
#define FERRY_REPL_PUBLISH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* malloc'd "a/b" (fmt-style): NULL on allocation failure or overflow.
 * The caller frees. */
char *repl__path_fmt(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* Paths of one generation inside a namespace state dir; each malloc'd. */
char *repl__catalog_path(const char *state_dir, uint64_t gen);
char *repl__catalog_zst_path(const char *state_dir, uint64_t gen);
char *repl__srcindex_path(const char *state_dir, uint64_t gen);
/* catalog/FROM-TO.delta.zst (its digest beside it, as a catalog's). */
char *repl__delta_zst_path(const char *state_dir, uint64_t from, uint64_t to);

/* Make the compressed delta from generation from to to (cat_delta_build,
 * then zstd with its SHA-256, as a catalog), unless it is there already.
 * Serialized. 0, -ENOENT (one of the catalogs is gone), -errno. */
int repl_delta_make(const char *state_dir, uint64_t from, uint64_t to);

/* catalog/GEN.db.sig: the signed statement of a generation (catalog.h,
 * cat_stmt); malloc'd. */
char *repl__sig_path(const char *state_dir, uint64_t gen);

/* Sign generation gen of namespace ns (its catalog in state_dir, which
 * gives the parent and the digest) with k, now, into catalog/GEN.db.sig
 * (temp + rename). keep: a statement already there of (ns, gen) by this
 * key stays as it is. Blocking: a scan of the catalog's rows
 * (cat_digest). 0, -EBADMSG (the catalog is not of gen), -errno.
 * repl_sign.c. */
struct cat_sign_key;
int repl_generation_sign(const char *state_dir, const char *ns, uint64_t gen,
			 const struct cat_sign_key *k, int keep);

/* Read the hex SHA-256 kept next to a compressed catalog (zst_path +
 * ".sha256") into ret_hex. Returns 0, -EBADMSG, -errno. */
int repl__catalog_sha_read(const char *zst_path, char ret_hex[65]);

/* Remove every generation older than the keep newest up to head
 * (generations head - keep + 1 .. head stay) from state_dir: the
 * compressed catalogs first, so no client starts on one that is going,
 * then their digests, the catalogs and the source indexes (with SQLite's
 * side files). Only names "GEN.db*" with GEN a decimal below the cut are
 * touched. A crash in the middle leaves files the next call removes; a
 * file a request still has open stays readable until it is closed.
 * *ret_removed (may be NULL) counts the generations whose catalog went.
 * Returns 0 or the first -errno (it goes on past a failure). */
int repl_generations_prune(const char *state_dir, uint64_t head, unsigned keep,
			   uint64_t *ret_removed);

#endif
