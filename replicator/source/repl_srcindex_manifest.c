/*
 * replicator/source/repl_srcindex_manifest.c — deferred manifests as the routes
 * and the next scan read them from a source index: one hashed file's
 * chunks, and the wire bodies of docs/protocol.md ("Manifests") for one
 * file or a segment of inos.
 *
 * The hasher writes the same file through its own connection (WAL), so a
 * statement here sees a consistent snapshot: a file is either still in
 * todo or wholly in hashed + manifest, never half.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_srcindex.h"

void repl__srcindex_manifest_fini(repl_srcindex *r)
{
	base_sqlite_finalize(&r->st_m_hashed);
	base_sqlite_finalize(&r->st_m_todo);
	base_sqlite_finalize(&r->st_m_rows);
	base_sqlite_finalize(&r->st_m_count);
	base_sqlite_finalize(&r->st_m_todo_range);
	base_sqlite_finalize(&r->st_m_hashed_range);
}

static int prepare(repl_srcindex *r)
{
	static const struct {
		size_t off;
		const char *sql;
	} q[] = {
	    {offsetof(struct repl_srcindex, st_m_hashed),
	     "SELECT size, state FROM hashed WHERE ino=?1"},
	    {offsetof(struct repl_srcindex, st_m_todo),
	     "SELECT 1 FROM todo WHERE ino=?1"},
	    {offsetof(struct repl_srcindex, st_m_rows),
	     "SELECT off, len, id FROM manifest WHERE ino=?1 ORDER BY off"},
	    {offsetof(struct repl_srcindex, st_m_count),
	     "SELECT count(*) FROM manifest WHERE ino=?1"},
	    {offsetof(struct repl_srcindex, st_m_todo_range),
	     "SELECT 1 FROM todo WHERE ino BETWEEN ?1 AND ?2 LIMIT 1"},
	    {offsetof(struct repl_srcindex, st_m_hashed_range),
	     "SELECT ino, size, state FROM hashed WHERE ino BETWEEN ?1 AND ?2"
	     " ORDER BY ino"},
	};
	int e;

	if (r->version < 3)
		return -ENOENT;
	if (r->st_m_hashed)
		return 0;
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		e = base_sqlite_prepare(
		    r->db, q[i].sql, (sqlite3_stmt **)((char *)r + q[i].off));
		if (e < 0) {
			repl__srcindex_manifest_fini(r);
			return e;
		}
	}
	return 0;
}

/* Step st once: 1 row, 0 done, -errno. */
static int step1(repl_srcindex *r, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return base_sqlite_errno(r->db, rc, what);
}

/* The chunk rows of ino into r->rows (our own file, but still checked:
 * contiguous from 0, covering size). */
static int load_rows(repl_srcindex *r, uint64_t ino, uint64_t size,
		     size_t *ret_n)
{
	sqlite3_stmt *st = r->st_m_rows;
	uint64_t next = 0;
	size_t n = 0;
	int e;

	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	while ((e = step1(r, st, "manifest rows")) == 1) {
		sqlite3_int64 off = sqlite3_column_int64(st, 0);
		sqlite3_int64 len = sqlite3_column_int64(st, 1);

		if ((uint64_t)off != next || len < 1 ||
		    len > (sqlite3_int64)CHUNK_MAX_LIMIT ||
		    sqlite3_column_bytes(st, 2) != CHUNK_ID_LEN) {
			e = -EBADMSG;
			break;
		}
		if (n == r->rows_cap) {
			size_t nc = r->rows_cap ? 2 * r->rows_cap : 64;
			struct cat_chunk *nv =
			    realloc(r->rows, nc * sizeof(*nv));

			if (!nv) {
				e = -ENOMEM;
				break;
			}
			r->rows = nv;
			r->rows_cap = nc;
		}
		r->rows[n].off = (uint64_t)off;
		r->rows[n].len = (uint32_t)len;
		memcpy(r->rows[n].id.b, sqlite3_column_blob(st, 2),
		       CHUNK_ID_LEN);
		next += (uint64_t)len;
		n++;
	}
	sqlite3_reset(st);
	if (e < 0)
		return e;
	if (next != size)
		return -EBADMSG;
	*ret_n = n;
	return 0;
}

/* The hashed row of ino: 0 with size and state, 1 when there is none,
 * -errno. */
static int hashed_row(repl_srcindex *r, uint64_t ino, uint64_t *ret_size,
		      int *ret_state)
{
	int e;

	sqlite3_bind_int64(r->st_m_hashed, 1, (sqlite3_int64)ino);
	e = step1(r, r->st_m_hashed, "hashed");
	if (e == 1) {
		sqlite3_int64 size = sqlite3_column_int64(r->st_m_hashed, 0);
		int state = sqlite3_column_int(r->st_m_hashed, 1);

		e = size < 0 || (state != REPL_HASH_OK &&
				 state != REPL_HASH_CHANGED)
			? -EBADMSG
			: 0;
		*ret_size = (uint64_t)size;
		*ret_state = state;
	} else if (e == 0)
		e = 1; /* no row */
	sqlite3_reset(r->st_m_hashed);
	return e;
}

int repl_srcindex_manifest(repl_srcindex *r, uint64_t ino,
			   struct repl_src_manifest *ret)
{
	int e;

	memset(ret, 0, sizeof(*ret));
	if (ino < 1 || ino > INT64_MAX)
		return -ENOENT;
	e = prepare(r);
	if (e < 0)
		return e;
	e = hashed_row(r, ino, &ret->size, &ret->state);
	if (e == 1) {
		/* not hashed: still to do, or not pending at all */
		sqlite3_bind_int64(r->st_m_todo, 1, (sqlite3_int64)ino);
		e = step1(r, r->st_m_todo, "todo");
		sqlite3_reset(r->st_m_todo);
		return e < 0 ? e : e == 1 ? -EAGAIN : -ENOENT;
	}
	if (e < 0 || ret->state != REPL_HASH_OK)
		return e;
	e = load_rows(r, ino, ret->size, &ret->n);
	ret->v = r->rows;
	return e;
}

/* Add ino's record to b; in a segment (inline_max > 0) a long manifest is
 * marked "fetch on its own" without reading its rows. */
static int add_record(repl_srcindex *r, struct cat_buf *b, uint64_t ino,
		      uint64_t size, int state, size_t inline_max)
{
	size_t n = 0;
	int e;

	if (state == REPL_HASH_CHANGED)
		return cat_mwire_add(b, ino, size, CAT_MWIRE_CHANGED, NULL);
	if (inline_max) {
		sqlite3_int64 cnt = 0;

		sqlite3_bind_int64(r->st_m_count, 1, (sqlite3_int64)ino);
		e = step1(r, r->st_m_count, "manifest count");
		if (e == 1)
			cnt = sqlite3_column_int64(r->st_m_count, 0);
		sqlite3_reset(r->st_m_count);
		if (e < 0)
			return e;
		if (cnt > (sqlite3_int64)inline_max)
			return cat_mwire_add(b, ino, size, CAT_MWIRE_ALONE,
					     NULL);
	}
	e = load_rows(r, ino, size, &n);
	if (e < 0)
		return e;
	if (n > CAT_MWIRE_COUNT_MAX)
		return -EOVERFLOW;
	return cat_mwire_add(b, ino, size, (uint32_t)n, r->rows);
}

int repl_srcindex_file_body(repl_srcindex *r, uint64_t gen, uint64_t ino,
			    struct cat_buf *b)
{
	struct repl_src_manifest m;
	int e;

	e = repl_srcindex_manifest(r, ino, &m);
	if (e < 0)
		return e;
	e = cat_mwire_begin(b, gen, ino, ino);
	if (e < 0)
		return e;
	if (m.state == REPL_HASH_CHANGED)
		return cat_mwire_add(b, ino, m.size, CAT_MWIRE_CHANGED, NULL);
	if (m.n > CAT_MWIRE_COUNT_MAX)
		return -EOVERFLOW;
	return cat_mwire_add(b, ino, m.size, (uint32_t)m.n, m.v);
}

int repl_srcindex_segment_body(repl_srcindex *r, uint64_t gen, uint64_t first,
			       uint64_t last, struct cat_buf *b)
{
	sqlite3_stmt *st;
	int e;

	e = prepare(r);
	if (e < 0)
		return e;
	if (last > INT64_MAX)
		last = INT64_MAX;
	/* One read transaction: the range is checked and read as of one
	 * moment, whatever the hasher commits meanwhile. */
	e = base_sqlite_exec(r->db, "BEGIN", "segment begin");
	if (e < 0)
		return e;
	st = r->st_m_todo_range;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)first);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)last);
	e = step1(r, st, "todo range");
	sqlite3_reset(st);
	if (e != 0) {
		e = e < 0 ? e : -EAGAIN;
		goto out;
	}
	e = cat_mwire_begin(b, gen, first, last);
	if (e < 0)
		goto out;
	st = r->st_m_hashed_range;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)first);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)last);
	while ((e = step1(r, st, "hashed range")) == 1) {
		sqlite3_int64 ino = sqlite3_column_int64(st, 0);
		sqlite3_int64 size = sqlite3_column_int64(st, 1);
		int state = sqlite3_column_int(st, 2);

		if (size < 0 ||
		    (state != REPL_HASH_OK && state != REPL_HASH_CHANGED)) {
			e = -EBADMSG;
			break;
		}
		e = add_record(r, b, (uint64_t)ino, (uint64_t)size, state,
			       REPL_SEGMENT_INLINE);
		if (e < 0)
			break;
	}
	sqlite3_reset(st);
out:
	base_sqlite_exec(r->db, "COMMIT", "segment end");
	return e < 0 ? e : 0;
}
