/*
 * replicator/repl_srcindex_internal.h — the source index: where the bytes of
 * each chunk id can be read back from DIR.
 *
 * One SQLite file per generation (STATE/source/GEN.db), written once by the
 * scanner and then only read, by the chunk workers and by the next scan:
 *   meta(key TEXT PRIMARY KEY, value)      format='ferry-srcindex/2',
 *                                          generation
 *   file(ino INTEGER PRIMARY KEY, path BLOB NOT NULL)
 *         -- path: raw bytes relative to DIR, components joined by '/'
 *   chunk(id BLOB PRIMARY KEY, ino, off, len) WITHOUT ROWID
 *         -- one row per distinct id: the first (ino, off, len) seen
 *   ident(dev, sino, ino, PRIMARY KEY(dev, sino)) WITHOUT ROWID
 *         -- the source file (st_dev, st_ino) behind each regular file's
 *            catalog ino: the next scan finds an unchanged file's
 *            manifest through it (repl_scan_prev.c)
 * The catalog already holds every (ino, off) -> id; this is the reverse map,
 * kept apart so the catalog that ships stays free of source paths.
 * Format 1 (no ident table) is still served; it only offers no reuse.
 */
#ifndef FERRY_REPL_SRCINDEX_INTERNAL_H
#define FERRY_REPL_SRCINDEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"

#define REPL_SRCINDEX_FORMAT "ferry-srcindex/2"
#define REPL_SRCINDEX_FORMAT_1 "ferry-srcindex/1"

/* -- writer: the scanning thread only -- */
typedef struct repl_srcindex_writer repl_srcindex_writer;

/* Start a new index that appears at path on commit (built in "path.tmp",
 * replaced if stale, inside one transaction). Returns 0, -EIO, -ENOMEM. */
int repl_srcindex_create(const char *path, uint64_t generation,
			 repl_srcindex_writer **ret_w);

/* Record the relative path of a regular file's catalog inode, and the
 * source file's identity (st_dev, st_ino). */
int repl_srcindex_add_file(repl_srcindex_writer *w, uint64_t ino,
			   const void *path, size_t path_len, uint64_t dev,
			   uint64_t sino);

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

/* The catalog ino of the regular file whose source identity was (dev,
 * sino) in this generation. 0, -ENOENT (none, or a format 1 index), -EIO. */
int repl_srcindex_ident(repl_srcindex *r, uint64_t dev, uint64_t sino,
			uint64_t *ret_ino);

/* Close; NULL is a no-op. */
void repl_srcindex_close(repl_srcindex *r);

#endif
