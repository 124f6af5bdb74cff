/*
 * catalog/cat_reader_chunks.c — manifests as the reader hands them out:
 * the catalog's own chunk rows, and for a format 2 catalog's pending
 * files, the rows of the manifest overlay the destination keeps beside it
 * (cat_overlay.c writes it; attached here as schema "m").
 *
 * The overlay is written by this machine from manifests that came over
 * the network, so it is as untrusted as the catalog: its rows pass the same
 * checks (length, inside the file, contiguous), and they count only for
 * inos the catalog itself lists as pending.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "catalog/cat_reader_priv.h"

/* The same range query over the overlay's rows. */
#define M_RANGE_SQL                                                            \
	"SELECT off,len,id FROM m.chunk WHERE ino=?1 AND off >="               \
	" (SELECT ifnull(max(off),0) FROM m.chunk WHERE ino=?1 AND off<=?2)"   \
	" AND off<?3 ORDER BY off LIMIT ?4"

/* Distinct ids over the catalog's rows and the overlay's (only files the
 * catalog lists as pending, only complete manifests), holes left out. */
#define M_EACH_SQL                                                             \
	"SELECT c.off,c.len,c.id,c.ino,i.kind,i.size FROM"                     \
	" (SELECT id,min(ino) AS ino,off,len FROM"                             \
	"  (SELECT ino,off,len,id FROM main.chunk UNION ALL"                   \
	"   SELECT k.ino,k.off,k.len,k.id FROM m.chunk k"                      \
	"   JOIN m.file f ON f.ino=k.ino AND f.state=0"                        \
	"   JOIN main.pending p ON p.ino=k.ino)"                               \
	"  WHERE id!=zeroblob(32) GROUP BY id) c"                              \
	" LEFT JOIN main.inode i ON i.ino=c.ino ORDER BY c.ino, c.off"

static void overlay_fini(cat_reader *r)
{
	base_sqlite_finalize(&r->st_m_state);
	base_sqlite_finalize(&r->st_m_range);
	base_sqlite_finalize(&r->st_m_each);
	base_sqlite_finalize(&r->st_m_missing);
}

void cat__chunks_fini(cat_reader *r)
{
	base_sqlite_finalize(&r->st_pending);
	base_sqlite_finalize(&r->st_pending_each);
	overlay_fini(r);
}

/* Decode one chunk row (off, len, id at col..col+2) and check it against
 * the catalog's max chunk size and the file's size. */
static int chunk_from_row(const cat_reader *r, sqlite3_stmt *st, int col,
			  uint64_t size, struct cat_chunk *ret)
{
	int64_t off, len;

	if (cat__col_int(st, col, 0, (int64_t)CAT_SIZE_MAX, &off) ||
	    cat__col_int(st, col + 1, 1, r->meta.params.max, &len) ||
	    sqlite3_column_type(st, col + 2) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, col + 2) != CHUNK_ID_LEN)
		return -EBADMSG;
	if ((uint64_t)off > size || (uint64_t)len > size - (uint64_t)off)
		return -EBADMSG;
	ret->off = (uint64_t)off;
	ret->len = (uint32_t)len;
	memcpy(ret->id.b, sqlite3_column_blob(st, col + 2), CHUNK_ID_LEN);
	return 0;
}

/* Run a range query st (lock held) for [off, end) with end <= size. */
static int range_locked(cat_reader *r, sqlite3_stmt *st, uint64_t ino,
			uint64_t off, uint64_t end, uint64_t size,
			struct cat_chunk *ret, size_t cap, size_t *ret_n)
{
	uint64_t next = 0;
	size_t n = 0;
	int rc = 0;

	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)off);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)end);
	sqlite3_bind_int64(st, 4,
			   cap > INT64_MAX ? INT64_MAX : (sqlite3_int64)cap);
	while (n < cap && (rc = cat__step(r, st, "chunks_range")) == 1) {
		rc = chunk_from_row(r, st, 0, size, &ret[n]);
		if (rc)
			goto out;
		/* The first chunk must cover off and each next one start where
		 * the previous ended: a gap is a broken manifest, and serving
		 * around it would hand out wrong bytes. */
		if (n == 0
			? (ret[0].off > off || ret[0].off + ret[0].len <= off)
			: ret[n].off != next) {
			rc = -EBADMSG;
			goto out;
		}
		next = ret[n].off + ret[n].len;
		n++;
	}
	if (rc < 0)
		goto out;
	rc = 0;
	/* Fewer rows than asked for must mean the range is covered. */
	if (n < cap && (n == 0 || next < end))
		rc = -EBADMSG;
out:
	cat__done(st);
	*ret_n = rc ? 0 : n;
	return rc;
}

/* 1 when the catalog lists ino as pending, 0 when not, -errno. */
static int pending_locked(cat_reader *r, uint64_t ino)
{
	int rc;

	if (!r->st_pending)
		return 0;
	sqlite3_bind_int64(r->st_pending, 1, (sqlite3_int64)ino);
	rc = cat__step(r, r->st_pending, "pending");
	cat__done(r->st_pending);
	return rc;
}

/* The overlay's state for a pending ino: CAT_MANIFEST_LOCAL,
 * CAT_MANIFEST_MISSING, CAT_MANIFEST_CHANGED, or -errno. */
static int overlay_state_locked(cat_reader *r, uint64_t ino)
{
	int64_t v;
	int rc;

	if (!r->overlay)
		return CAT_MANIFEST_MISSING;
	sqlite3_bind_int64(r->st_m_state, 1, (sqlite3_int64)ino);
	rc = cat__step(r, r->st_m_state, "overlay_state");
	if (rc == 1)
		rc = cat__col_int(r->st_m_state, 0, 0, 1, &v)
			 ? -EBADMSG
			 : (v == CAT_OVERLAY_OK ? CAT_MANIFEST_LOCAL
						: CAT_MANIFEST_CHANGED);
	else if (rc == 0)
		rc = CAT_MANIFEST_MISSING;
	cat__done(r->st_m_state);
	return rc;
}

int cat__snap_end(cat_reader *r)
{
	if (!r->db || sqlite3_get_autocommit(r->db))
		return 0;
	(void)sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
	return 1;
}

/* Open a snapshot, or a new one for one too old (lock held). A deferred
 * BEGIN: the read transaction starts with the next query. */
static void snap_enter(cat_reader *r)
{
	uint64_t now;

	if (!r->snap_max || !r->overlay)
		return;
	now = base_now_ns();
	if (now - r->snap_at > r->snap_max)
		cat__snap_end(r);
	if (sqlite3_get_autocommit(r->db) &&
	    sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK)
		r->snap_at = now;
}

void cat_reader_snapshots(cat_reader *r, uint64_t max_age_ns)
{
	if (!r || cat__reader_lock(r))
		return;
	r->snap_max = max_age_ns;
	if (!max_age_ns)
		cat__snap_end(r);
	pthread_mutex_unlock(&r->mu);
}

/* Where ino's manifest is (lock held); in.kind must be CAT_REG. */
static int state_locked(cat_reader *r, uint64_t ino)
{
	int rc = pending_locked(r, ino);

	if (rc <= 0)
		return rc < 0 ? rc : CAT_MANIFEST_CATALOG;
	return overlay_state_locked(r, ino);
}

/* The inode of regular file ino (lock held): 0, -EINVAL (another kind),
 * or getattr's error. */
static int reg_locked(cat_reader *r, uint64_t ino, struct cat_inode *in)
{
	int rc = cat__getattr_locked(r, ino, in, NULL);

	cat__done(r->st_getattr);
	return rc == 0 && in->kind != CAT_REG ? -EINVAL : rc;
}

int cat_manifest_state(cat_reader *r, uint64_t ino)
{
	struct cat_inode in;
	int rc;

	if (!r)
		return -EINVAL;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	snap_enter(r);
	rc = reg_locked(r, ino, &in);
	if (rc == 0)
		rc = state_locked(r, ino);
	/* not there in an older view: ask the present */
	if (rc == CAT_MANIFEST_MISSING && cat__snap_end(r))
		rc = state_locked(r, ino);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_chunks_range(cat_reader *r, uint64_t ino, uint64_t off, uint64_t len,
		     struct cat_chunk *ret, size_t cap, size_t *ret_n)
{
	struct cat_inode in;
	uint64_t end;
	int rc;

	if (!r || !ret || !ret_n || cap == 0)
		return -EINVAL;
	*ret_n = 0;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	snap_enter(r);
	rc = reg_locked(r, ino, &in);
	if (rc)
		goto out;
	/* Past EOF or an empty range: nothing to read, nothing to check. */
	if (len == 0 || off >= in.size)
		goto out;
	end = len > in.size - off ? in.size : off + len;
	rc = pending_locked(r, ino);
	if (rc <= 0) {
		if (rc == 0)
			rc = range_locked(r, r->st_range, ino, off, end,
					  in.size, ret, cap, ret_n);
		goto out;
	}
	/* Pending: the overlay's rows first. A file's rows and its state
	 * row are stored in one transaction, and only a file whose manifest
	 * came whole has rows, so rows mean a local manifest; the state is
	 * asked only when there are none (one query on the overlay per
	 * read instead of two: each is a WAL read transaction). */
again:
	if (r->overlay) {
		rc = range_locked(r, r->st_m_range, ino, off, end, in.size, ret,
				  cap, ret_n);
		if (rc != -EBADMSG)
			goto out;
	}
	rc = overlay_state_locked(r, ino);
	/* not there in an older view: ask the present */
	if (rc == CAT_MANIFEST_MISSING && cat__snap_end(r))
		goto again;
	/* Local now, with no rows a moment ago: the manifest may have been
	 * stored between the two queries (each is its own read transaction),
	 * so the rows are asked for once more, and that answer stands. */
	if (rc == CAT_MANIFEST_LOCAL)
		rc = range_locked(r, r->st_m_range, ino, off, end, in.size, ret,
				  cap, ret_n);
	else if (rc >= 0)
		rc = rc == CAT_MANIFEST_MISSING ? -EAGAIN : -ESTALE;
out:
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_chunks_each(cat_reader *r, cat_chunk_cb cb, void *ctx)
{
	sqlite3_stmt *st;
	struct cat_chunk c;
	int64_t ino, kind, size;
	int rc;

	if (!r || !cb)
		return -EINVAL;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	cat__snap_end(r); /* the whole overlay, as it is now */
	st = r->overlay ? r->st_m_each : r->st_each;
	while ((rc = cat__step(r, st, "chunks_each")) == 1) {
		/* Columns: off, len, id, then the holder's ino, kind, size:
		 * the row is checked against its inode like a range row. */
		if (cat__col_int(st, 3, 1, INT64_MAX, &ino) ||
		    cat__col_int(st, 4, CAT_REG, CAT_REG, &kind) ||
		    cat__col_int(st, 5, 0, (int64_t)CAT_SIZE_MAX, &size) ||
		    chunk_from_row(r, st, 0, (uint64_t)size, &c)) {
			rc = -EBADMSG;
			break;
		}
		rc = cb(ctx, (uint64_t)ino, &c);
		if (rc)
			break;
	}
	cat__done(st);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_pending_missing(cat_reader *r, uint64_t after, uint64_t *ret,
			size_t cap, size_t *ret_n)
{
	sqlite3_stmt *st = NULL;
	int64_t v;
	size_t n = 0;
	int rc;

	if (!r || !ret || !ret_n || cap == 0)
		return -EINVAL;
	*ret_n = 0;
	if (after > INT64_MAX)
		return 0;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	cat__snap_end(r); /* what is missing now, not a moment ago */
	if (!r->st_pending)
		goto out; /* format 1: nothing is pending */
	if (r->overlay) {
		st = r->st_m_missing;
	} else {
		/* No overlay: every pending ino is missing. A one-off
		 * statement; readers that ask often attach an overlay. */
		rc = base_sqlite_prepare(r->db,
					 "SELECT ino FROM main.pending WHERE"
					 " ino>?1 ORDER BY ino LIMIT ?2",
					 &st);
		if (rc)
			goto out;
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)after);
	sqlite3_bind_int64(st, 2,
			   cap > INT64_MAX ? INT64_MAX : (sqlite3_int64)cap);
	while (n < cap && (rc = cat__step(r, st, "pending_missing")) == 1) {
		if (cat__col_int(st, 0, 1, INT64_MAX, &v)) {
			rc = -EBADMSG;
			break;
		}
		ret[n++] = (uint64_t)v;
	}
	if (rc == 0 || rc == 1)
		*ret_n = n;
	rc = rc < 0 ? rc : 0;
	if (r->overlay)
		cat__done(st);
	else
		base_sqlite_finalize(&st);
out:
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_pending_each(cat_reader *r, uint64_t first, uint64_t last,
		     cat_pending_cb cb, void *ctx)
{
	sqlite3_stmt *st;
	int64_t ino, kind, size;
	int rc;

	if (!r || !cb)
		return -EINVAL;
	if (first > last || first > INT64_MAX)
		return 0;
	if (last > INT64_MAX)
		last = INT64_MAX;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	st = r->st_pending_each;
	if (!st)
		goto out; /* format 1: nothing is pending */
	sqlite3_bind_int64(st, 1, (sqlite3_int64)first);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)last);
	while ((rc = cat__step(r, st, "pending_each")) == 1) {
		kind = -1;
		size = 0;
		if (cat__col_int(st, 0, 1, INT64_MAX, &ino) ||
		    (sqlite3_column_type(st, 1) != SQLITE_NULL &&
		     (cat__col_int(st, 1, 0, INT32_MAX, &kind) ||
		      cat__col_int(st, 2, 0, (int64_t)CAT_SIZE_MAX, &size)))) {
			rc = -EBADMSG;
			break;
		}
		rc = cb(ctx, (uint64_t)ino, (int)kind, (uint64_t)size);
		if (rc)
			break;
	}
	rc = rc == 1 ? 0 : rc;
	cat__done(st);
out:
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_reader_attach_overlay(cat_reader *r, const char *path)
{
	static const struct {
		size_t off;
		const char *sql;
	} m_sql[] = {
	    {offsetof(struct cat_reader, st_m_state),
	     "SELECT state FROM m.file WHERE ino=?1"},
	    {offsetof(struct cat_reader, st_m_range), M_RANGE_SQL},
	    {offsetof(struct cat_reader, st_m_each), M_EACH_SQL},
	    {offsetof(struct cat_reader, st_m_missing),
	     "SELECT p.ino FROM main.pending p WHERE p.ino>?1 AND NOT EXISTS"
	     " (SELECT 1 FROM m.file f WHERE f.ino=p.ino)"
	     " ORDER BY p.ino LIMIT ?2"},
	};
	sqlite3_stmt *st = NULL;
	char *uri = NULL;
	int rc;

	if (!r || !path)
		return -EINVAL;
	if (r->version < 2)
		return 0; /* nothing can be pending */
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	if (r->overlay) {
		rc = -EEXIST;
		goto out;
	}
	rc = base_sqlite_uri(path, "mode=ro", &uri);
	if (rc)
		goto out;
	rc = base_sqlite_prepare(r->db, "ATTACH DATABASE ?1 AS m", &st);
	if (rc)
		goto out;
	sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
	rc = cat__step(r, st, "attach_overlay");
	base_sqlite_finalize(&st);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < sizeof(m_sql) / sizeof(m_sql[0]); i++) {
		rc = base_sqlite_prepare(
		    r->db, m_sql[i].sql,
		    (sqlite3_stmt **)((char *)r + m_sql[i].off));
		/* Missing tables or columns: not an overlay. */
		if (rc == -EIO)
			rc = -EBADMSG;
		if (rc)
			break;
	}
	if (rc) {
		overlay_fini(r);
		base_sqlite_exec(r->db, "DETACH DATABASE m", "detach_overlay");
		goto out;
	}
	r->overlay = 1;
out:
	free(uri);
	pthread_mutex_unlock(&r->mu);
	return rc;
}
