/*
 * replicator/source/repl_srcindex.h — the source index: where the bytes of
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
 *   todo(ino INTEGER PRIMARY KEY, dev, sino, size, mtime_ns, ctime_ns)
 *         -- pending files (the catalog's pending table) not hashed yet,
 *            with what the walk saw of them
 *   hashed(ino INTEGER PRIMARY KEY, size, state)
 *         -- pending files the hasher finished: state REPL_HASH_OK (the
 *            manifest is below) or REPL_HASH_CHANGED (the file was not
 *            what the walk saw: no manifest in this generation)
 *   manifest(ino, off, len, id BLOB, PRIMARY KEY(ino, off)) WITHOUT ROWID
 *         -- the manifests of hashed files, published after the catalog
 * The catalog holds every (ino, off) -> id it was written with; chunk is
 * the reverse map, kept apart so the catalog that ships stays free of
 * source paths. The file is in WAL mode once committed: the hasher writes
 * todo -> hashed + manifest + chunk rows in one transaction per file.
 * Format 1 (no ident table) and 2 (no deferred manifests) are still
 * served; 1 offers no reuse.
 */
#ifndef FERRY_REPL_SRCINDEX_H
#define FERRY_REPL_SRCINDEX_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "catalog/catalog.h"

#define REPL_SRCINDEX_FORMAT "ferry-srcindex/3"
#define REPL_SRCINDEX_FORMAT_2 "ferry-srcindex/2"
#define REPL_SRCINDEX_FORMAT_1 "ferry-srcindex/1"

/* hashed.state */
#define REPL_HASH_OK 0
#define REPL_HASH_CHANGED 1

/* What the walk saw of a regular file (its identity): the hasher hashes
 * a pending file only if it is still exactly that, and a chunk read again
 * from a file still exactly that needs no second hash. */
struct repl_src_todo {
	uint64_t dev, sino, size;
	int64_t mtime_ns, ctime_ns;
};

/* -- writer: the scanning thread only -- */
typedef struct repl_srcindex_writer repl_srcindex_writer;

/* Start a new index that appears at path on commit (built in "path.tmp",
 * replaced if stale, inside one transaction). Returns 0, -EIO, -ENOMEM. */
int repl_srcindex_create(const char *path, uint64_t generation,
			 repl_srcindex_writer **ret_w);

/* Record the relative path of a regular file's catalog inode, and what
 * the walk saw of the source file (seen), looking at it first at wall
 * clock time looked_ns. Its (st_dev, st_ino) name the catalog inode for
 * the next walk; the whole of it is kept for the chunk workers only when
 * the file had settled, its ctime older than looked_ns by the writer's
 * settle time (repl_srcindex_set_settle): a write within the same clock
 * tick as the one the walk saw could leave ctime where it was. */
int repl_srcindex_add_file(repl_srcindex_writer *w, uint64_t ino,
			   const void *path, size_t path_len,
			   const struct repl_src_todo *seen, int64_t looked_ns);

/* How long before the walk's look a file's ctime must lie for its identity
 * to vouch for its bytes (REPL_SETTLE_NS unless set; tests set 0). */
#define REPL_SETTLE_NS 2000000000ll
void repl_srcindex_set_settle(repl_srcindex_writer *w, int64_t ns);

/* The source identity of a catalog entry that is not a regular file (a
 * directory, symlink or special file), so the next generation gives the
 * same entry the same ino (repl_prev_ino). */
int repl_srcindex_add_ident(repl_srcindex_writer *w, uint64_t ino, uint64_t dev,
			    uint64_t sino);

/* Record regular file ino as pending: its manifest is hashed later. */
int repl_srcindex_add_todo(repl_srcindex_writer *w, uint64_t ino,
			   const struct repl_src_todo *t);

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

struct repl_srcindex {
	sqlite3 *db;
	int version; /* 1, 2 or 3 (REPL_SRCINDEX_FORMAT*) */
	sqlite3_stmt *st_lookup;
	int lookup_seen;	/* st_lookup also gives what the walk saw */
	sqlite3_stmt *st_known; /* repl_srcindex_known, prepared on first use */
	sqlite3_stmt *st_ident; /* NULL: format 1, no identities */
	/* manifests (repl_srcindex_manifest.c), prepared on first use */
	sqlite3_stmt *st_m_hashed, *st_m_todo, *st_m_rows, *st_m_count,
	    *st_m_todo_range, *st_m_hashed_range;
	char *path_buf;
	size_t path_cap;
	struct cat_chunk *rows; /* the last manifest read */
	size_t rows_cap;
};

struct repl_src_loc {
	uint64_t ino;
	uint64_t off;
	uint32_t len;
	char *path; /* NUL-terminated relative path; owned by the handle,
		     * valid until the next call on it */
	size_t path_len;
	/* What the walk saw of the file, when it had settled (an index
	 * written before it was kept: never) */
	int has_seen;
	struct repl_src_todo seen;
};

/* Open read-only and check the format. Returns 0, -ENOENT, -EBADMSG, -EIO. */
int repl_srcindex_open(const char *path, repl_srcindex **ret_r);

/* Look id up. Returns 0 with *ret filled, -ENOENT (unknown id), -EBADMSG
 * (a row out of bounds), -EIO. */
int repl_srcindex_lookup(repl_srcindex *r, const chunk_id *id,
			 struct repl_src_loc *ret);

/* Are all of ids[0..n) known? 0 when they are, 1 with *ret_bad the first
 * that is not, -EIO. One read transaction for all (a batch's check costs
 * one lock, not one per id). */
int repl_srcindex_known(repl_srcindex *r, const chunk_id *ids, size_t n,
			size_t *ret_bad);

/* The catalog ino of the regular file whose source identity was (dev,
 * sino) in this generation. 0, -ENOENT (none, or a format 1 index), -EIO. */
int repl_srcindex_ident(repl_srcindex *r, uint64_t dev, uint64_t sino,
			uint64_t *ret_ino);

/* Close; NULL is a no-op. */
void repl_srcindex_close(repl_srcindex *r);

/* -- deferred manifests, read side (repl_srcindex_manifest.c) -- */

/* A hashed file's manifest; chunks are owned by the handle, valid until the
 * next call on it. */
struct repl_src_manifest {
	uint64_t size;
	int state; /* REPL_HASH_OK or REPL_HASH_CHANGED (then n is 0) */
	const struct cat_chunk *v;
	size_t n;
};

/* The manifest of pending file ino. Returns 0, -EAGAIN (not hashed yet),
 * -ENOENT (not a pending file here, or a format 1/2 index), -EBADMSG,
 * -ENOMEM, -EIO. */
int repl_srcindex_manifest(repl_srcindex *r, uint64_t ino,
			   struct repl_src_manifest *ret);

/* The wire body (catalog.h, cat_mwire_*) of one file's manifest, or of
 * every pending file in [first, last] when all of them are hashed (files
 * of more than REPL_SEGMENT_INLINE chunks are marked "fetch on its own").
 * Returns 0, -EAGAIN (something in range is not hashed yet), -ENOENT
 * (per file: not pending), -ENOMEM, -EIO. */
#define REPL_SEGMENT_INLINE 4096u
int repl_srcindex_file_body(repl_srcindex *r, uint64_t gen, uint64_t ino,
			    struct cat_buf *b);
int repl_srcindex_segment_body(repl_srcindex *r, uint64_t gen, uint64_t first,
			       uint64_t last, struct cat_buf *b);

/* Finalize the manifest statements (at close). */
void repl__srcindex_manifest_fini(repl_srcindex *r);

/* -- deferred manifests, the hasher's side (repl_srcindex_hash.c) -- */
typedef struct repl_srcindex_hw repl_srcindex_hw;

/* A pending file to hash: what the walk saw and where it is. */
struct repl_src_job {
	uint64_t ino;
	struct repl_src_todo t;
	char *path; /* malloc'd, NUL-terminated, relative to the source */
};

/* Open the index for the hasher (read-write, WAL). Returns 0, -ENOENT,
 * -EBADMSG (not format 3), -EIO, -ENOMEM. */
int repl_srcindex_hw_open(const char *path, repl_srcindex_hw **ret);
void repl_srcindex_hw_close(repl_srcindex_hw *w);

/* The inos of up to cap pending files with ino > after, ascending. */
int repl_srcindex_hw_todo(repl_srcindex_hw *w, uint64_t after, uint64_t *ret,
			  size_t cap, size_t *ret_n);

/* Pending file ino, if it is still to do: 0, -ENOENT (done or not
 * pending), -EIO. */
int repl_srcindex_hw_todo_one(repl_srcindex_hw *w, uint64_t ino,
			      struct repl_src_job *ret);

/* Files and bytes still to do, and done so far (of each state). */
struct repl_hash_counts {
	uint64_t todo_files, todo_bytes;
	uint64_t done_files, done_bytes, changed;
};
int repl_srcindex_hw_counts(repl_srcindex_hw *w, struct repl_hash_counts *ret);

/* Chunk rows of one finished file, handed to repl_srcindex_hw_done. */
typedef int (*repl_src_rows_fn)(void *ctx,
				int (*put)(void *put_ctx,
					   const struct cat_chunk *c),
				void *put_ctx);

/* Record file ino as hashed with state, its manifest (rows, called once
 * when state is REPL_HASH_OK; NULL otherwise) and the location of every
 * chunk id that is new here, and drop its todo row, in one transaction.
 * *ret_unique counts the new ids. Returns 0, -ENOENT (not to do any more:
 * nothing written), -EIO, or rows' error. */
int repl_srcindex_hw_done(repl_srcindex_hw *w, uint64_t ino, uint64_t size,
			  int state, repl_src_rows_fn rows, void *ctx,
			  uint64_t *ret_unique);

#endif
