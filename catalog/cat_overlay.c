/*
 * catalog/cat_overlay.c — the destination's manifest overlay: manifests
 * of a catalog's pending files, fetched after the catalog and kept in a
 * SQLite file beside it (schema in catalog.h). This is the parser of the
 * manifests wire format too: a body is checked whole against the catalog
 * before any row of it is stored, so the overlay only ever holds manifests
 * that cover their file exactly.
 *
 * WAL with synchronous=NORMAL: a crash may lose the last puts (they are
 * fetched again), never half of one; the catalog reader reads the file
 * through its own connection while this one writes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

struct cat_overlay {
	pthread_mutex_t mu;
	sqlite3 *db;
	sqlite3_stmt *ins_file, *ins_chunk, *has_file;
};

static const char overlay_schema[] =
    "CREATE TABLE IF NOT EXISTS file(ino INTEGER PRIMARY KEY,"
    " state INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS chunk(ino INTEGER NOT NULL,"
    " off INTEGER NOT NULL, len INTEGER NOT NULL, id BLOB NOT NULL,"
    " PRIMARY KEY(ino, off)) WITHOUT ROWID;";

void cat_overlay_close(cat_overlay *ov)
{
	if (!ov)
		return;
	base_sqlite_finalize(&ov->ins_file);
	base_sqlite_finalize(&ov->ins_chunk);
	base_sqlite_finalize(&ov->has_file);
	if (ov->db)
		sqlite3_close(ov->db);
	pthread_mutex_destroy(&ov->mu);
	free(ov);
}

int cat_overlay_open(const char *path, cat_overlay **ret)
{
	cat_overlay *ov;
	char *uri = NULL;
	int rc;

	*ret = NULL;
	ov = calloc(1, sizeof(*ov));
	if (!ov)
		return -ENOMEM;
	pthread_mutex_init(&ov->mu, NULL);
	rc = base_sqlite_uri(path, NULL, &uri);
	if (rc)
		goto fail;
	rc = sqlite3_open_v2(uri, &ov->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				 SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI,
			     NULL);
	free(uri);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(ov->db, rc, "overlay_open");
		goto fail;
	}
	sqlite3_extended_result_codes(ov->db, 1);
	sqlite3_busy_timeout(ov->db, 5000);
	sqlite3_db_config(ov->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	rc = base_sqlite_exec(ov->db,
			      "PRAGMA journal_mode=WAL;"
			      "PRAGMA synchronous=NORMAL;",
			      "overlay_pragmas");
	if (!rc)
		rc = base_sqlite_exec(ov->db, overlay_schema, "overlay_schema");
	if (!rc)
		rc = base_sqlite_prepare(
		    ov->db, "INSERT INTO file(ino,state) VALUES(?1,?2)",
		    &ov->ins_file);
	if (!rc)
		rc = base_sqlite_prepare(
		    ov->db,
		    "INSERT INTO chunk(ino,off,len,id) VALUES(?1,?2,?3,?4)",
		    &ov->ins_chunk);
	if (!rc)
		rc = base_sqlite_prepare(
		    ov->db, "SELECT 1 FROM file WHERE ino=?1", &ov->has_file);
	/* A table of another shape fails to prepare: not an overlay. */
	if (rc == -EIO)
		rc = -EBADMSG;
	if (rc)
		goto fail;
	*ret = ov;
	return 0;
fail:
	cat_overlay_close(ov);
	return rc;
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* One record of a body, as parsed. */
struct mrec {
	uint64_t ino, size;
	uint32_t count;
	const uint8_t *entries; /* count * CAT_MWIRE_ENTRY bytes */
};

/* Parse the record at *off; checks its own bounds and its manifest's
 * shape against size and the chunk parameters. */
static int rec_parse(const uint8_t *b, size_t len, size_t *off,
		     const chunk_params *p, struct mrec *rec)
{
	uint64_t sum = 0;
	size_t n;

	if (len - *off < CAT_MWIRE_REC)
		return -EBADMSG;
	rec->ino = get_le(b + *off, 8);
	rec->size = get_le(b + *off + 8, 8);
	rec->count = (uint32_t)get_le(b + *off + 16, 4);
	*off += CAT_MWIRE_REC;
	rec->entries = b + *off;
	if (rec->count > CAT_MWIRE_COUNT_MAX)
		return rec->count == CAT_MWIRE_CHANGED ||
			       rec->count == CAT_MWIRE_ALONE
			   ? 0
			   : -EBADMSG;
	n = rec->count;
	if (n > (len - *off) / CAT_MWIRE_ENTRY)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		uint32_t l = (uint32_t)get_le(rec->entries + i * 36, 4);

		if (l < 1 || l > p->max)
			return -EBADMSG;
		sum += l;
	}
	*off += n * CAT_MWIRE_ENTRY;
	/* The chunks cover the file exactly: no gap, nothing past EOF. */
	return sum == rec->size && (n > 0) == (rec->size > 0) ? 0 : -EBADMSG;
}

/* Is ino in the overlay already? 1, 0, -errno. */
static int has_file(cat_overlay *ov, uint64_t ino)
{
	int rc;

	sqlite3_bind_int64(ov->has_file, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(ov->has_file);
	rc = rc == SQLITE_ROW	 ? 1
	     : rc == SQLITE_DONE ? 0
				 : base_sqlite_errno(ov->db, rc, "overlay_has");
	sqlite3_reset(ov->has_file);
	return rc;
}

static int step_reset(cat_overlay *ov, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : base_sqlite_errno(ov->db, rc, what);
}

static int rec_store(cat_overlay *ov, const struct mrec *rec)
{
	uint64_t off = 0;
	int rc;

	sqlite3_bind_int64(ov->ins_file, 1, (sqlite3_int64)rec->ino);
	sqlite3_bind_int(ov->ins_file, 2,
			 rec->count == CAT_MWIRE_CHANGED ? CAT_OVERLAY_CHANGED
							 : CAT_OVERLAY_OK);
	rc = step_reset(ov, ov->ins_file, "overlay_file");
	if (rc || rec->count == CAT_MWIRE_CHANGED)
		return rc;
	for (uint32_t i = 0; i < rec->count && !rc; i++) {
		const uint8_t *e = rec->entries + (size_t)i * CAT_MWIRE_ENTRY;
		uint32_t l = (uint32_t)get_le(e, 4);

		sqlite3_bind_int64(ov->ins_chunk, 1, (sqlite3_int64)rec->ino);
		sqlite3_bind_int64(ov->ins_chunk, 2, (sqlite3_int64)off);
		sqlite3_bind_int64(ov->ins_chunk, 3, l);
		sqlite3_bind_blob(ov->ins_chunk, 4, e + 4, CHUNK_ID_LEN,
				  SQLITE_STATIC);
		rc = step_reset(ov, ov->ins_chunk, "overlay_chunk");
		off += l;
	}
	return rc;
}

/* The body's records, parsed, as the catalog's pending files are merged
 * against them. */
struct recs {
	struct mrec *v;
	uint32_t n, i;
};

/* Parse every record of the body: in [first, last], ascending, nothing
 * after the last one. */
static int body_parse(const uint8_t *b, size_t len, uint64_t first,
		      uint64_t last, uint32_t nrec, const chunk_params *p,
		      struct recs *out)
{
	uint64_t prev = 0;
	size_t off = CAT_MWIRE_HEAD;
	int rc;

	out->n = out->i = 0;
	out->v = NULL;
	/* Each record takes CAT_MWIRE_REC bytes at least and names its own
	 * ino of [first, last]: a count the body or the range cannot hold
	 * is refused before anything is allocated. */
	if (nrec > (len - CAT_MWIRE_HEAD) / CAT_MWIRE_REC ||
	    (last - first < UINT32_MAX && nrec > last - first + 1))
		return -EBADMSG;
	if (nrec) {
		out->v = malloc(nrec * sizeof(*out->v));
		if (!out->v)
			return -ENOMEM;
	}
	for (uint32_t k = 0; k < nrec; k++) {
		struct mrec *rec = &out->v[k];

		rc = rec_parse(b, len, &off, p, rec);
		if (rc)
			return rc;
		if (rec->ino < first || rec->ino > last || rec->ino <= prev)
			return -EBADMSG;
		prev = rec->ino;
	}
	out->n = nrec;
	return off == len ? 0 : -EBADMSG; /* trailing bytes */
}

/* One pending file of the catalog (in ino order) against the next record:
 * a record must name a pending regular file of the catalog's size; a
 * pending file the body leaves out is the server's business. */
static int merge_one(void *ctx, uint64_t ino, int kind, uint64_t size)
{
	struct recs *rs = ctx;
	const struct mrec *rec;

	if (rs->i == rs->n)
		return 1;
	rec = &rs->v[rs->i];
	if (ino < rec->ino)
		return 0;
	if (ino > rec->ino)
		return -EBADMSG; /* not pending: not the overlay's to say */
	if (kind != CAT_REG || size != rec->size)
		return -EBADMSG;
	rs->i++;
	return rs->i == rs->n;
}

/* Store the records the overlay lacks (in a transaction, mu held). */
static int body_store(cat_overlay *ov, const struct recs *rs, size_t *ret_files)
{
	size_t files = 0;
	int rc;

	for (uint32_t k = 0; k < rs->n; k++) {
		if (rs->v[k].count == CAT_MWIRE_ALONE)
			continue;
		rc = has_file(ov, rs->v[k].ino);
		if (rc < 0)
			return rc;
		if (rc == 1)
			continue;
		rc = rec_store(ov, &rs->v[k]);
		if (rc)
			return rc;
		files++;
	}
	*ret_files = files;
	return 0;
}

int cat_overlay_put_wire(cat_overlay *ov, cat_reader *r, uint64_t first,
			 uint64_t last, const void *buf, size_t len,
			 size_t *ret_files)
{
	const uint8_t *b = buf;
	struct cat_meta meta;
	struct recs rs = {0};
	size_t files = 0;
	uint32_t nrec;
	int rc, rc2;

	if (ret_files)
		*ret_files = 0;
	if (!ov || !r || !buf)
		return -EINVAL;
	cat_reader_meta(r, &meta);
	if (len < CAT_MWIRE_HEAD || memcmp(b, CAT_MWIRE_MAGIC, 8) ||
	    get_le(b + 8, 8) != meta.generation || get_le(b + 16, 8) != first ||
	    get_le(b + 24, 8) != last)
		return -EBADMSG;
	nrec = (uint32_t)get_le(b + 32, 4);
	/* First the whole body, then the rows: a body that fails halfway
	 * stores nothing. The catalog is asked once for the range (one
	 * query under its lock, not two per file: the mount's lookups
	 * share that lock). */
	rc = body_parse(b, len, first, last, nrec, &meta.params, &rs);
	if (!rc && rs.n) {
		rc = cat_pending_each(r, rs.v[0].ino, rs.v[rs.n - 1].ino,
				      merge_one, &rs);
		if (!rc && rs.i != rs.n)
			rc = -EBADMSG; /* a record the catalog has no pending
					  file for */
	}
	if (rc)
		goto out;
	pthread_mutex_lock(&ov->mu);
	rc = base_sqlite_exec(ov->db, "BEGIN IMMEDIATE", "overlay_begin");
	if (!rc) {
		rc = body_store(ov, &rs, &files);
		rc2 = base_sqlite_exec(ov->db, rc ? "ROLLBACK" : "COMMIT",
				       "overlay_commit");
		rc = rc ? rc : rc2;
	}
	pthread_mutex_unlock(&ov->mu);
	if (!rc && ret_files)
		*ret_files = files;
out:
	free(rs.v);
	return rc;
}
