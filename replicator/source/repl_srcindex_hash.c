/*
 * replicator/source/repl_srcindex_hash.c — the hasher's connection to a source
 * index: which pending files are still to do, and recording a finished
 * one (its manifest, the locations of its new chunk ids, its state) in one
 * transaction, so a kill at any moment leaves each file either to do or
 * done, and nothing done is ever hashed again.
 *
 * WAL with synchronous=NORMAL: a commit is a write to the log, no fsync;
 * a power cut may lose the last files hashed (they are hashed again), a
 * process crash loses nothing committed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_srcindex.h"

struct repl_srcindex_hw {
	sqlite3 *db;
	sqlite3_stmt *st_todo, *st_todo_one, *st_del, *st_hashed, *st_man,
	    *st_chunk, *st_counts_todo, *st_counts_done;
};

void repl_srcindex_hw_close(repl_srcindex_hw *w)
{
	if (!w)
		return;
	base_sqlite_finalize(&w->st_todo);
	base_sqlite_finalize(&w->st_todo_one);
	base_sqlite_finalize(&w->st_del);
	base_sqlite_finalize(&w->st_hashed);
	base_sqlite_finalize(&w->st_man);
	base_sqlite_finalize(&w->st_chunk);
	base_sqlite_finalize(&w->st_counts_todo);
	base_sqlite_finalize(&w->st_counts_done);
	sqlite3_close(w->db);
	free(w);
}

int repl_srcindex_hw_open(const char *path, repl_srcindex_hw **ret)
{
	static const struct {
		size_t off;
		const char *sql;
	} q[] = {
	    {offsetof(struct repl_srcindex_hw, st_todo),
	     "SELECT ino FROM todo WHERE ino>?1 ORDER BY ino LIMIT ?2"},
	    {offsetof(struct repl_srcindex_hw, st_todo_one),
	     "SELECT t.ino, t.dev, t.sino, t.size, t.mtime_ns, t.ctime_ns,"
	     " f.path FROM todo t JOIN file f ON f.ino=t.ino WHERE t.ino=?1"},
	    {offsetof(struct repl_srcindex_hw, st_del),
	     "DELETE FROM todo WHERE ino=?1"},
	    {offsetof(struct repl_srcindex_hw, st_hashed),
	     "INSERT INTO hashed(ino, size, state) VALUES (?1, ?2, ?3)"},
	    {offsetof(struct repl_srcindex_hw, st_man),
	     "INSERT INTO manifest(ino, off, len, id) VALUES (?1, ?2, ?3, ?4)"},
	    {offsetof(struct repl_srcindex_hw, st_chunk),
	     "INSERT OR IGNORE INTO chunk(id, ino, off, len)"
	     " VALUES (?1, ?2, ?3, ?4)"},
	    {offsetof(struct repl_srcindex_hw, st_counts_todo),
	     "SELECT count(*), ifnull(sum(size),0) FROM todo"},
	    {offsetof(struct repl_srcindex_hw, st_counts_done),
	     "SELECT count(*), ifnull(sum(size),0), ifnull(sum(state),0)"
	     " FROM hashed"},
	};
	repl_srcindex_hw *w;
	sqlite3_stmt *st = NULL;
	int rc, e;

	*ret = NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	rc = sqlite3_open_v2(path, &w->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		e = rc == SQLITE_CANTOPEN
			? -ENOENT
			: base_sqlite_errno(w->db, rc, "open");
		goto fail;
	}
	sqlite3_busy_timeout(w->db, 5000);
	e = base_sqlite_exec(w->db,
			     "PRAGMA journal_mode=WAL;"
			     "PRAGMA synchronous=NORMAL;",
			     "hasher pragmas");
	if (e < 0)
		goto fail;
	e = base_sqlite_prepare(
	    w->db, "SELECT value FROM meta WHERE key='format'", &st);
	if (e < 0)
		goto fail;
	rc = sqlite3_step(st);
	e = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT &&
		    !strcmp((const char *)sqlite3_column_text(st, 0),
			    REPL_SRCINDEX_FORMAT)
		? 0
		: -EBADMSG;
	base_sqlite_finalize(&st);
	if (e < 0)
		goto fail;
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		e = base_sqlite_prepare(
		    w->db, q[i].sql, (sqlite3_stmt **)((char *)w + q[i].off));
		if (e < 0)
			goto fail;
	}
	*ret = w;
	return 0;
fail:
	repl_srcindex_hw_close(w);
	return e;
}

/* One job from a todo row (columns as in st_todo_one). */
static int job_of(sqlite3_stmt *st, struct repl_src_job *j)
{
	const void *p = sqlite3_column_blob(st, 6);
	int n = sqlite3_column_bytes(st, 6);

	memset(j, 0, sizeof(*j));
	j->ino = (uint64_t)sqlite3_column_int64(st, 0);
	j->t.dev = (uint64_t)sqlite3_column_int64(st, 1);
	j->t.sino = (uint64_t)sqlite3_column_int64(st, 2);
	j->t.size = (uint64_t)sqlite3_column_int64(st, 3);
	j->t.mtime_ns = sqlite3_column_int64(st, 4);
	j->t.ctime_ns = sqlite3_column_int64(st, 5);
	/* our own file, still bounded; "" is the root, never a file */
	if (j->ino < 1 || n < 1 || n > 1 << 20 || !p ||
	    memchr(p, '\0', (size_t)n))
		return -EBADMSG;
	j->path = malloc((size_t)n + 1);
	if (!j->path)
		return -ENOMEM;
	memcpy(j->path, p, (size_t)n);
	j->path[n] = '\0';
	return 0;
}

int repl_srcindex_hw_todo(repl_srcindex_hw *w, uint64_t after, uint64_t *ret,
			  size_t cap, size_t *ret_n)
{
	size_t n = 0;
	int rc = SQLITE_DONE, e = 0;

	*ret_n = 0;
	sqlite3_bind_int64(
	    w->st_todo, 1,
	    (sqlite3_int64)(after > INT64_MAX ? INT64_MAX : after));
	sqlite3_bind_int64(w->st_todo, 2, (sqlite3_int64)cap);
	while (n < cap && (rc = sqlite3_step(w->st_todo)) == SQLITE_ROW) {
		sqlite3_int64 ino = sqlite3_column_int64(w->st_todo, 0);

		if (ino < 1) {
			e = -EBADMSG;
			break;
		}
		ret[n++] = (uint64_t)ino;
	}
	if (e == 0 && n < cap && rc != SQLITE_DONE)
		e = base_sqlite_errno(w->db, rc, "todo");
	sqlite3_reset(w->st_todo);
	if (e < 0)
		return e;
	*ret_n = n;
	return 0;
}

int repl_srcindex_hw_todo_one(repl_srcindex_hw *w, uint64_t ino,
			      struct repl_src_job *ret)
{
	int rc, e;

	if (ino < 1 || ino > INT64_MAX)
		return -ENOENT;
	sqlite3_bind_int64(w->st_todo_one, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(w->st_todo_one);
	if (rc == SQLITE_ROW)
		e = job_of(w->st_todo_one, ret);
	else if (rc == SQLITE_DONE)
		e = -ENOENT;
	else
		e = base_sqlite_errno(w->db, rc, "todo one");
	sqlite3_reset(w->st_todo_one);
	return e;
}

int repl_srcindex_hw_counts(repl_srcindex_hw *w, struct repl_hash_counts *ret)
{
	int rc;

	memset(ret, 0, sizeof(*ret));
	rc = sqlite3_step(w->st_counts_todo);
	if (rc == SQLITE_ROW) {
		ret->todo_files =
		    (uint64_t)sqlite3_column_int64(w->st_counts_todo, 0);
		ret->todo_bytes =
		    (uint64_t)sqlite3_column_int64(w->st_counts_todo, 1);
	}
	sqlite3_reset(w->st_counts_todo);
	if (rc != SQLITE_ROW)
		return base_sqlite_errno(w->db, rc, "counts");
	rc = sqlite3_step(w->st_counts_done);
	if (rc == SQLITE_ROW) {
		ret->done_files =
		    (uint64_t)sqlite3_column_int64(w->st_counts_done, 0);
		ret->done_bytes =
		    (uint64_t)sqlite3_column_int64(w->st_counts_done, 1);
		ret->changed =
		    (uint64_t)sqlite3_column_int64(w->st_counts_done, 2);
	}
	sqlite3_reset(w->st_counts_done);
	return rc == SQLITE_ROW ? 0 : base_sqlite_errno(w->db, rc, "counts");
}

struct done_ctx {
	repl_srcindex_hw *w;
	uint64_t ino, unique;
};

static int step_done(repl_srcindex_hw *w, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : base_sqlite_errno(w->db, rc, what);
}

static int put_row(void *ctx, const struct cat_chunk *c)
{
	struct done_ctx *d = ctx;
	repl_srcindex_hw *w = d->w;
	int e;

	sqlite3_bind_int64(w->st_man, 1, (sqlite3_int64)d->ino);
	sqlite3_bind_int64(w->st_man, 2, (sqlite3_int64)c->off);
	sqlite3_bind_int64(w->st_man, 3, c->len);
	sqlite3_bind_blob(w->st_man, 4, c->id.b, CHUNK_ID_LEN, SQLITE_STATIC);
	e = step_done(w, w->st_man, "manifest row");
	if (e < 0 || chunk_id_is_hole(&c->id))
		return e; /* a hole is read from nowhere */
	sqlite3_bind_blob(w->st_chunk, 1, c->id.b, CHUNK_ID_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(w->st_chunk, 2, (sqlite3_int64)d->ino);
	sqlite3_bind_int64(w->st_chunk, 3, (sqlite3_int64)c->off);
	sqlite3_bind_int64(w->st_chunk, 4, c->len);
	e = step_done(w, w->st_chunk, "chunk row");
	if (e == 0)
		d->unique += (uint64_t)sqlite3_changes(w->db);
	return e;
}

int repl_srcindex_hw_done(repl_srcindex_hw *w, uint64_t ino, uint64_t size,
			  int state, repl_src_rows_fn rows, void *ctx,
			  uint64_t *ret_unique)
{
	struct done_ctx d = {.w = w, .ino = ino};
	int e, e2;

	*ret_unique = 0;
	e = base_sqlite_exec(w->db, "BEGIN IMMEDIATE", "done begin");
	if (e < 0)
		return e;
	sqlite3_bind_int64(w->st_del, 1, (sqlite3_int64)ino);
	e = step_done(w, w->st_del, "todo delete");
	/* Another hasher (a restart racing a stop) did it first. */
	if (e == 0 && sqlite3_changes(w->db) == 0)
		e = -ENOENT;
	if (e == 0) {
		sqlite3_bind_int64(w->st_hashed, 1, (sqlite3_int64)ino);
		sqlite3_bind_int64(w->st_hashed, 2, (sqlite3_int64)size);
		sqlite3_bind_int(w->st_hashed, 3, state);
		e = step_done(w, w->st_hashed, "hashed");
	}
	if (e == 0 && state == REPL_HASH_OK && rows)
		e = rows(ctx, put_row, &d);
	e2 = base_sqlite_exec(w->db, e ? "ROLLBACK" : "COMMIT", "done commit");
	if (e == 0)
		e = e2;
	if (e == 0)
		*ret_unique = d.unique;
	return e;
}
