/*
 * replicator/repl_srcindex_internal.h — the source index: where the bytes of
 * each chunk id can be read back from DIR.
 *
 * One SQLite file per generation (STATE/source/GEN.db), written once by the
 * scanner and then only read by the chunk workers:
 *   meta(key TEXT PRIMARY KEY, value)      format='ferry-srcindex/1',
 *                                          generation
 *   file(ino INTEGER PRIMARY KEY, path BLOB NOT NULL)
 *         -- path: raw bytes relative to DIR, components joined by '/'
 *   chunk(id BLOB PRIMARY KEY, ino, off, len) WITHOUT ROWID
 *         -- one row per distinct id: the first (ino, off, len) seen
 * The catalog already holds every (ino, off) -> id; this is the reverse map,
 * kept apart so the catalog that ships stays free of source paths.
 */
#ifndef FERRY_REPL_SRCINDEX_INTERNAL_H
#define FERRY_REPL_SRCINDEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"

#define REPL_SRCINDEX_FORMAT "ferry-srcindex/1"

/* -- writer: the scanning thread only -- */
typedef struct repl_srcindex_writer repl_srcindex_writer;

/* Start a new index that appears at path on commit (built in "path.tmp",
 * replaced if stale, inside one transaction). Returns 0, -EIO, -ENOMEM. */
int repl_srcindex_create(const char *path, uint64_t generation,
			 repl_srcindex_writer **ret_w);

/* Record the relative path of a regular file's catalog inode. */
int repl_srcindex_add_file(repl_srcindex_writer *w, uint64_t ino,
			   const void *path, size_t path_len);

/* Record where a chunk can be read. Returns 1 when the id is new, 0 when it
 * was already known (the first location is kept), -EIO. */
int repl_srcindex_add_chunk(repl_srcindex_writer *w, const chunk_id *id,
			    uint64_t ino, uint64_t off, uint32_t len);

/* Commit, fsync, rename into place, fsync the directory; frees w always.
 * Returns 0 or -errno (the temp file is removed on failure). */
int repl_srcindex_commit(repl_srcindex_writer *w);

/* Drop everything, remove the temp file, free w. NULL is a no-op. */
void repl_srcindex_abort(repl_srcindex_writer *w);

/* -- reader: one thread at a time per handle (chunk workers keep a pool) -- */
typedef struct repl_srcindex repl_srcindex;

struct repl_src_loc {
	uint64_t ino;
	uint64_t off;
	uint32_t len;
	char *path; /* NUL-terminated relative path; owned by the handle,
		     * valid until the next call on it */
	size_t path_len;
};

/* Open read-only and check the format. Returns 0, -ENOENT, -EBADMSG, -EIO. */
int repl_srcindex_open(const char *path, repl_srcindex **ret_r);

/* Look id up. Returns 0 with *ret filled, -ENOENT (unknown id), -EBADMSG
 * (a row out of bounds), -EIO. */
int repl_srcindex_lookup(repl_srcindex *r, const chunk_id *id,
			 struct repl_src_loc *ret);

/* Close; NULL is a no-op. */
void repl_srcindex_close(repl_srcindex *r);

#endif
