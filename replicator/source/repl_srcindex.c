/*
 * replicator/source/repl_srcindex.c — the source index (chunk id -> file
 * bytes).
 *
 * Written by the scanner in one transaction with journaling off: the file
 * is private until renamed into place, so a crash leaves only a stale
 * ".tmp" that the next build replaces. At commit it turns to WAL mode:
 * afterwards the hasher (repl_srcindex_hash.c) adds the manifests of the
 * files the walk left pending, while chunk workers and manifest requests
 * read through their own query-only connections (one per worker context,
 * never shared between threads at the same time).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_source.h"
#include "replicator/source/repl_srcindex.h"

struct repl_srcindex_writer {
	sqlite3 *db;
	sqlite3_stmt *st_file, *st_chunk, *st_ident, *st_todo;
	int64_t settle_ns;
	char *path, *tmp;
};

static const char SCHEMA[] =
    "PRAGMA journal_mode=OFF;"
    "PRAGMA synchronous=OFF;"
    "PRAGMA cache_size=-65536;"
    "PRAGMA user_version=1;"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value);"
    /* dev .. ctime_ns: what the walk saw of a settled file (else NULL);
     * an index without them (older builds) is served by hashing */
    "CREATE TABLE file(ino INTEGER PRIMARY KEY, path BLOB NOT NULL,"
    " dev INTEGER, sino INTEGER, size INTEGER, mtime_ns INTEGER,"
    " ctime_ns INTEGER);"
    "CREATE TABLE chunk(id BLOB PRIMARY KEY, ino INTEGER NOT NULL,"
    " off INTEGER NOT NULL, len INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE ident(dev INTEGER NOT NULL, sino INTEGER NOT NULL,"
    " ino INTEGER NOT NULL, PRIMARY KEY(dev, sino)) WITHOUT ROWID;"
    "CREATE TABLE todo(ino INTEGER PRIMARY KEY, dev INTEGER NOT NULL,"
    " sino INTEGER NOT NULL, size INTEGER NOT NULL,"
    " mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL);"
    "CREATE TABLE hashed(ino INTEGER PRIMARY KEY, size INTEGER NOT NULL,"
    " state INTEGER NOT NULL);"
    "CREATE TABLE manifest(ino INTEGER NOT NULL, off INTEGER NOT NULL,"
    " len INTEGER NOT NULL, id BLOB NOT NULL,"
    " PRIMARY KEY(ino, off)) WITHOUT ROWID;"
    "BEGIN;";

int repl_srcindex_create(const char *path, uint64_t generation,
			 repl_srcindex_writer **ret_w)
{
	repl_srcindex_writer *w;
	sqlite3_stmt *st = NULL;
	int rc, r;

	*ret_w = NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->settle_ns = REPL_SETTLE_NS;
	w->path = strdup(path);
	w->tmp = base_path_fmt("%s.tmp", path);
	if (!w->path || !w->tmp) {
		r = -ENOMEM;
		goto out;
	}
	if (unlink(w->tmp) < 0 && errno != ENOENT) {
		r = -errno;
		goto out;
	}
	rc = sqlite3_open_v2(w->tmp, &w->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				 SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		r = base_sqlite_errno(w->db, rc, "create");
		goto out;
	}
	r = base_sqlite_exec(w->db, SCHEMA, "schema");
	if (r < 0)
		goto out;
	r = base_sqlite_prepare(w->db,
				"INSERT INTO meta(key, value) VALUES"
				" ('format', ?1), ('generation', ?2)",
				&st);
	if (r < 0)
		goto out;
	sqlite3_bind_text(st, 1, REPL_SRCINDEX_FORMAT, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)generation);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE) {
		r = base_sqlite_errno(w->db, rc, "meta");
		goto out;
	}
	r = base_sqlite_prepare(w->db,
				"INSERT INTO file(ino, path, dev, sino, size,"
				" mtime_ns, ctime_ns) VALUES (?1, ?2, ?3, ?4,"
				" ?5, ?6, ?7)",
				&w->st_file);
	if (r < 0)
		goto out;
	r = base_sqlite_prepare(w->db,
				"INSERT OR IGNORE INTO chunk(id, ino, off, len)"
				" VALUES (?1, ?2, ?3, ?4)",
				&w->st_chunk);
	if (r < 0)
		goto out;
	r = base_sqlite_prepare(w->db,
				"INSERT OR REPLACE INTO ident(dev, sino, ino)"
				" VALUES (?1, ?2, ?3)",
				&w->st_ident);
	if (r < 0)
		goto out;
	r = base_sqlite_prepare(w->db,
				"INSERT INTO todo(ino, dev, sino, size,"
				" mtime_ns, ctime_ns) VALUES (?1, ?2, ?3, ?4,"
				" ?5, ?6)",
				&w->st_todo);
	if (r < 0)
		goto out;
	base_sqlite_finalize(&st);
	*ret_w = w;
	return 0;
out:
	base_sqlite_finalize(&st);
	repl_srcindex_abort(w);
	return r;
}

void repl_srcindex_set_settle(repl_srcindex_writer *w, int64_t ns)
{
	w->settle_ns = ns;
}

int repl_srcindex_add_file(repl_srcindex_writer *w, uint64_t ino,
			   const void *path, size_t path_len,
			   const struct repl_src_todo *seen, int64_t looked_ns)
{
	int rc, i;

	sqlite3_reset(w->st_file);
	sqlite3_bind_int64(w->st_file, 1, (sqlite3_int64)ino);
	/* zero-length blobs bind as NULL when the pointer is NULL */
	sqlite3_bind_blob64(w->st_file, 2, path_len ? path : "", path_len,
			    SQLITE_STATIC);
	/* A file written within the settle time is left without: its
	 * chunks are hashed again whenever they are read. */
	if (seen->ctime_ns < looked_ns - w->settle_ns) {
		sqlite3_bind_int64(w->st_file, 3, (sqlite3_int64)seen->dev);
		sqlite3_bind_int64(w->st_file, 4, (sqlite3_int64)seen->sino);
		sqlite3_bind_int64(w->st_file, 5, (sqlite3_int64)seen->size);
		sqlite3_bind_int64(w->st_file, 6, seen->mtime_ns);
		sqlite3_bind_int64(w->st_file, 7, seen->ctime_ns);
	} else {
		for (i = 3; i <= 7; i++)
			sqlite3_bind_null(w->st_file, i);
	}
	rc = sqlite3_step(w->st_file);
	if (rc != SQLITE_DONE)
		return base_sqlite_errno(w->db, rc, "add file");
	return repl_srcindex_add_ident(w, ino, seen->dev, seen->sino);
}

int repl_srcindex_add_ident(repl_srcindex_writer *w, uint64_t ino, uint64_t dev,
			    uint64_t sino)
{
	int rc;

	/* Device and inode numbers are stored as their 64-bit patterns. */
	sqlite3_reset(w->st_ident);
	sqlite3_bind_int64(w->st_ident, 1, (sqlite3_int64)dev);
	sqlite3_bind_int64(w->st_ident, 2, (sqlite3_int64)sino);
	sqlite3_bind_int64(w->st_ident, 3, (sqlite3_int64)ino);
	rc = sqlite3_step(w->st_ident);
	if (rc != SQLITE_DONE)
		return base_sqlite_errno(w->db, rc, "add ident");
	return 0;
}

int repl_srcindex_add_todo(repl_srcindex_writer *w, uint64_t ino,
			   const struct repl_src_todo *t)
{
	int rc;

	sqlite3_reset(w->st_todo);
	sqlite3_bind_int64(w->st_todo, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(w->st_todo, 2, (sqlite3_int64)t->dev);
	sqlite3_bind_int64(w->st_todo, 3, (sqlite3_int64)t->sino);
	sqlite3_bind_int64(w->st_todo, 4, (sqlite3_int64)t->size);
	sqlite3_bind_int64(w->st_todo, 5, t->mtime_ns);
	sqlite3_bind_int64(w->st_todo, 6, t->ctime_ns);
	rc = sqlite3_step(w->st_todo);
	return rc == SQLITE_DONE ? 0 : base_sqlite_errno(w->db, rc, "add todo");
}

int repl_srcindex_add_chunk(repl_srcindex_writer *w, const chunk_id *id,
			    uint64_t ino, uint64_t off, uint32_t len)
{
	int rc;

	sqlite3_reset(w->st_chunk);
	sqlite3_bind_blob(w->st_chunk, 1, id->b, CHUNK_ID_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(w->st_chunk, 2, (sqlite3_int64)ino);
	sqlite3_bind_int64(w->st_chunk, 3, (sqlite3_int64)off);
	sqlite3_bind_int64(w->st_chunk, 4, len);
	rc = sqlite3_step(w->st_chunk);
	if (rc != SQLITE_DONE)
		return base_sqlite_errno(w->db, rc, "add chunk");
	return sqlite3_changes(w->db) > 0 ? 1 : 0;
}

static void writer_free(repl_srcindex_writer *w)
{
	sqlite3_finalize(w->st_file);
	sqlite3_finalize(w->st_chunk);
	sqlite3_finalize(w->st_ident);
	sqlite3_finalize(w->st_todo);
	sqlite3_close(w->db);
	free(w->path);
	free(w->tmp);
	free(w);
}

int repl_srcindex_commit(repl_srcindex_writer *w)
{
	int rc, r = 0;

	r = base_sqlite_exec(w->db, "COMMIT", "commit");
	if (r < 0)
		goto out;
	/* From here on the hasher writes while others read. */
	r = base_sqlite_exec(w->db, "PRAGMA journal_mode=WAL", "wal");
	if (r < 0)
		goto out;
	base_sqlite_finalize(&w->st_file);
	base_sqlite_finalize(&w->st_chunk);
	base_sqlite_finalize(&w->st_ident);
	base_sqlite_finalize(&w->st_todo);
	rc = sqlite3_close(w->db);
	w->db = NULL;
	if (rc != SQLITE_OK) {
		r = base_sqlite_errno(NULL, rc, "close");
		goto out;
	}
	/* synchronous=OFF above: make the bytes durable before the rename
	 * publishes them. */
	r = base_fsync_path(w->tmp);
	if (r < 0)
		goto out;
	if (rename(w->tmp, w->path) < 0) {
		r = -errno;
		goto out;
	}
	r = base_fsync_parent(w->path);
out:
	if (r < 0)
		unlink(w->tmp);
	writer_free(w);
	return r;
}

void repl_srcindex_abort(repl_srcindex_writer *w)
{
	if (!w)
		return;
	base_sqlite_finalize(&w->st_file);
	base_sqlite_finalize(&w->st_chunk);
	base_sqlite_finalize(&w->st_ident);
	base_sqlite_finalize(&w->st_todo);
	sqlite3_close(w->db);
	w->db = NULL;
	if (w->tmp)
		unlink(w->tmp);
	writer_free(w);
}

/* A chunk's location: what the lookup's two forms share. */
#define LOOKUP_FROM " FROM chunk c JOIN file f ON f.ino = c.ino WHERE c.id = ?1"

int repl_srcindex_open(const char *path, repl_srcindex **ret_r)
{
	repl_srcindex *r;
	sqlite3_stmt *st = NULL;
	const char *fmt;
	int rc, e;

	*ret_r = NULL;
	if (access(path, F_OK) < 0)
		return -errno;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* Read-write but query-only: a WAL file is read through the same
	 * shared memory its writer (the hasher) uses, and a read-only
	 * connection could not open it once the writer has closed. */
	rc = sqlite3_open_v2(path, &r->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		e = base_sqlite_errno(r->db, rc, "open");
		goto out;
	}
	sqlite3_busy_timeout(r->db, 5000);
	e = base_sqlite_exec(r->db, "PRAGMA query_only=1", "query_only");
	if (e < 0)
		goto out;
	e = base_sqlite_prepare(
	    r->db, "SELECT value FROM meta WHERE key = 'format'", &st);
	if (e < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW || sqlite3_column_type(st, 0) != SQLITE_TEXT) {
		e = -EBADMSG;
		goto out;
	}
	/* Format 1 has no identities: chunks can be served, nothing reused.
	 * Format 2 has no deferred manifests. */
	fmt = (const char *)sqlite3_column_text(st, 0);
	if (!strcmp(fmt, REPL_SRCINDEX_FORMAT_1))
		r->version = 1;
	else if (!strcmp(fmt, REPL_SRCINDEX_FORMAT_2))
		r->version = 2;
	else if (!strcmp(fmt, REPL_SRCINDEX_FORMAT))
		r->version = 3;
	else {
		e = -EBADMSG;
		goto out;
	}
	base_sqlite_finalize(&st);
	if (r->version >= 2) {
		e = base_sqlite_prepare(
		    r->db, "SELECT ino FROM ident WHERE dev = ?1 AND sino = ?2",
		    &r->st_ident);
		if (e < 0)
			goto out;
	}
	/* An index from a build that kept no identities has no such
	 * columns: its chunks are always hashed. */
	rc = sqlite3_prepare_v2(
	    r->db,
	    "SELECT c.ino, c.off, c.len, f.path, f.dev,"
	    " f.sino, f.size, f.mtime_ns, f.ctime_ns" LOOKUP_FROM,
	    -1, &r->st_lookup, NULL);
	r->lookup_seen = rc == SQLITE_OK;
	if (rc != SQLITE_OK) {
		sqlite3_finalize(r->st_lookup);
		r->st_lookup = NULL;
		e = base_sqlite_prepare(
		    r->db, "SELECT c.ino, c.off, c.len, f.path" LOOKUP_FROM,
		    &r->st_lookup);
		if (e < 0)
			goto out;
	}
	*ret_r = r;
	return 0;
out:
	base_sqlite_finalize(&st);
	repl_srcindex_close(r);
	return e;
}

int repl_srcindex_lookup(repl_srcindex *r, const chunk_id *id,
			 struct repl_src_loc *ret)
{
	const void *p;
	sqlite3_int64 ino, off, len;
	int rc, e = 0, n;

	sqlite3_reset(r->st_lookup);
	sqlite3_bind_blob(r->st_lookup, 1, id->b, CHUNK_ID_LEN, SQLITE_STATIC);
	rc = sqlite3_step(r->st_lookup);
	if (rc == SQLITE_DONE) {
		e = -ENOENT;
		goto out;
	}
	if (rc != SQLITE_ROW) {
		e = base_sqlite_errno(r->db, rc, "lookup");
		goto out;
	}
	ino = sqlite3_column_int64(r->st_lookup, 0);
	off = sqlite3_column_int64(r->st_lookup, 1);
	len = sqlite3_column_int64(r->st_lookup, 2);
	p = sqlite3_column_blob(r->st_lookup, 3);
	n = sqlite3_column_bytes(r->st_lookup, 3);
	/* Our own file, but still bounded: the sizes below size buffers. */
	if (ino < 1 || off < 0 || len < 1 ||
	    len > (sqlite3_int64)CHUNK_MAX_LIMIT || n < 1 || n > 1 << 20 ||
	    !p) {
		e = -EBADMSG;
		goto out;
	}
	if ((size_t)n + 1 > r->path_cap) {
		char *np = realloc(r->path_buf, (size_t)n + 1);

		if (!np) {
			e = -ENOMEM;
			goto out;
		}
		r->path_buf = np;
		r->path_cap = (size_t)n + 1;
	}
	memcpy(r->path_buf, p, (size_t)n);
	r->path_buf[n] = '\0';
	if (memchr(r->path_buf, '\0', (size_t)n)) {
		e = -EBADMSG;
		goto out;
	}
	ret->ino = (uint64_t)ino;
	ret->off = (uint64_t)off;
	ret->len = (uint32_t)len;
	ret->path = r->path_buf;
	ret->path_len = (size_t)n;
	ret->has_seen = r->lookup_seen &&
			sqlite3_column_type(r->st_lookup, 8) == SQLITE_INTEGER;
	if (ret->has_seen) {
		ret->seen.dev = (uint64_t)sqlite3_column_int64(r->st_lookup, 4);
		ret->seen.sino =
		    (uint64_t)sqlite3_column_int64(r->st_lookup, 5);
		ret->seen.size =
		    (uint64_t)sqlite3_column_int64(r->st_lookup, 6);
		ret->seen.mtime_ns = sqlite3_column_int64(r->st_lookup, 7);
		ret->seen.ctime_ns = sqlite3_column_int64(r->st_lookup, 8);
	}
out:
	sqlite3_reset(r->st_lookup);
	return e;
}

int repl_srcindex_known(repl_srcindex *r, const chunk_id *ids, size_t n,
			size_t *ret_bad)
{
	size_t i;
	int rc, e;

	if (!r->st_known) {
		e = base_sqlite_prepare(
		    r->db, "SELECT 1 FROM chunk WHERE id = ?1", &r->st_known);
		if (e < 0)
			return e;
	}
	e = base_sqlite_exec(r->db, "BEGIN", "begin");
	if (e < 0)
		return e;
	for (i = 0; i < n && e == 0; i++) {
		sqlite3_bind_blob(r->st_known, 1, ids[i].b, CHUNK_ID_LEN,
				  SQLITE_STATIC);
		rc = sqlite3_step(r->st_known);
		if (rc == SQLITE_DONE) {
			*ret_bad = i;
			e = 1;
		} else if (rc != SQLITE_ROW) {
			e = base_sqlite_errno(r->db, rc, "known");
		}
		sqlite3_reset(r->st_known);
	}
	/* Nothing was written: the end of a read cannot fail for good. */
	(void)base_sqlite_exec(r->db, "COMMIT", "commit");
	return e;
}

int repl_srcindex_ident(repl_srcindex *r, uint64_t dev, uint64_t sino,
			uint64_t *ret_ino)
{
	sqlite3_int64 ino;
	int rc, e = 0;

	if (!r->st_ident)
		return -ENOENT;
	sqlite3_bind_int64(r->st_ident, 1, (sqlite3_int64)dev);
	sqlite3_bind_int64(r->st_ident, 2, (sqlite3_int64)sino);
	rc = sqlite3_step(r->st_ident);
	if (rc == SQLITE_ROW) {
		ino = sqlite3_column_int64(r->st_ident, 0);
		if (ino < 1)
			e = -EBADMSG;
		else
			*ret_ino = (uint64_t)ino;
	} else if (rc == SQLITE_DONE) {
		e = -ENOENT;
	} else {
		e = base_sqlite_errno(r->db, rc, "ident");
	}
	sqlite3_reset(r->st_ident);
	return e;
}

void repl_srcindex_close(repl_srcindex *r)
{
	if (!r)
		return;
	sqlite3_finalize(r->st_ident);
	sqlite3_finalize(r->st_lookup);
	sqlite3_finalize(r->st_known);
	repl__srcindex_manifest_fini(r);
	sqlite3_close(r->db);
	free(r->path_buf);
	free(r->rows);
	free(r);
}
