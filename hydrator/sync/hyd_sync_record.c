/*
 * hydrator/sync/hyd_sync_record.c — what `ferry sync` knows it wrote, so a
 * rerun does not read unchanged files again.
 *
 * Without it, a file of DEST whose size and mtime match the catalog is
 * read back and hashed chunk by chunk (a rename can reach the disk before
 * the data after a power loss): a rerun over an unchanged tree then costs
 * a read of every byte. The record keeps, per regular file this writer
 * made or checked, its identity in DEST (st_dev, st_ino), size, mtime and
 * ctime, and a digest of the catalog manifest it holds. A file whose stat
 * and manifest digest both still match is taken as it is, unread: any
 * write, truncate, chmod or rename of it since would have moved its ctime.
 *
 * Durability: a run's notes are committed only after the syncfs of DEST
 * succeeded, so every recorded file had its data on disk; until then the
 * record of the run before stays. Each commit replaces the record with the
 * files noted in that run (a file not reached is simply hashed next time),
 * but a --into pass that looked at some files only adds its notes to the
 * record.
 * A record that cannot be opened or read is no error: the files are then
 * hashed as before. The file is CACHEDIR/sync/<SHA-256 of DEST's real
 * path>.db; the cache's lock keeps one writer at a time.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

struct hyd_sync_rec {
	sqlite3 *db;
	sqlite3_stmt *get, *put;
	int in_tx;
};

static int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000ll + ts->tv_nsec;
}

/* A chain of SHA-256s, one per batch of rows: d = H(d || rows), which
 * needs no more memory than one batch for a manifest of any length. */
int hyd_sync__digest_rows(uint8_t d[HYD_SYNC_DIGEST_LEN],
			  const struct cat_chunk *cs, size_t k)
{
	enum { ROW = 8 + 4 + CHUNK_ID_LEN };
	uint8_t buf[CHUNK_ID_LEN + HYD_SYNC_DIGEST_ROWS * ROW];
	chunk_id out;
	int r;

	if (k > HYD_SYNC_DIGEST_ROWS)
		return -EINVAL;
	memcpy(buf, d, CHUNK_ID_LEN);
	for (size_t i = 0; i < k; i++) {
		uint8_t *p = buf + CHUNK_ID_LEN + i * ROW;

		memcpy(p, &cs[i].off, 8);
		memcpy(p + 8, &cs[i].len, 4);
		memcpy(p + 12, cs[i].id.b, CHUNK_ID_LEN);
	}
	r = chunk_id_compute(buf, CHUNK_ID_LEN + k * ROW, &out);
	if (r == 0)
		memcpy(d, out.b, CHUNK_ID_LEN);
	return r;
}

int hyd_sync__manifest_digest(cat_reader *cat, uint64_t ino, uint64_t size,
			      uint8_t out[HYD_SYNC_DIGEST_LEN])
{
	struct cat_chunk cs[HYD_SYNC_DIGEST_ROWS];
	uint64_t off = 0;
	size_t k;
	int r = 0;

	memset(out, 0, CHUNK_ID_LEN);
	while (off < size && r == 0) {
		r = cat_chunks_range(cat, ino, off, size - off, cs,
				     HYD_SYNC_DIGEST_ROWS, &k);
		if (r == 0 && k == 0)
			r = -EBADMSG;
		if (r == 0)
			r = hyd_sync__digest_rows(out, cs, k);
		if (r == 0)
			off = cs[k - 1].off + cs[k - 1].len;
	}
	return r;
}

static int exec(struct hyd_sync_rec *r, const char *sql)
{
	return base_sqlite_exec(r->db, sql, "sync record");
}

/* The record's path for DEST in buf (PATH_MAX + 80 bytes); its
 * directory made when mk. 0 or -errno. */
static int rec_path(const char *cache_dir, const char *dest, int mk, char *buf)
{
	char real[PATH_MAX], dir[PATH_MAX + 8], hex[65];
	chunk_id sum;
	int rc;

	if (!realpath(dest, real))
		return -errno;
	rc = chunk_id_compute(real, strlen(real), &sum);
	if (rc < 0)
		return rc;
	chunk_id_to_hex(&sum, hex);
	snprintf(dir, sizeof(dir), "%s/sync", cache_dir);
	rc = mk ? base_mkdir_p(dir, 0700) : 0;
	if (rc == 0)
		snprintf(buf, PATH_MAX + 80, "%s/%s.db", dir, hex);
	return rc;
}

static int rec_open(const char *cache_dir, const char *dest, int ro,
		    struct hyd_sync_rec **ret)
{
	struct hyd_sync_rec *r;
	char path[PATH_MAX + 80];
	int rc;

	*ret = NULL;
	rc = rec_path(cache_dir, dest, !ro, path);
	if (rc < 0)
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	rc = sqlite3_open_v2(path, &r->db,
			     (ro ? SQLITE_OPEN_READONLY
				 : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
				 SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(r->db, rc, "open the sync record");
		goto fail;
	}
	/* read-only: the lookups only, of a record a writer made */
	if (!ro) {
		rc = exec(r, "PRAGMA journal_mode = WAL");
		rc =
		    rc ? rc
		       : exec(r, "CREATE TABLE IF NOT EXISTS file(dev INTEGER, "
				 "ino INTEGER, size INTEGER, mtime_ns INTEGER, "
				 "ctime_ns INTEGER, digest BLOB, PRIMARY "
				 "KEY(dev, ino)) WITHOUT ROWID");
		rc = rc ? rc
			: exec(r, "CREATE TEMP TABLE next(dev INTEGER, ino "
				  "INTEGER, size INTEGER, mtime_ns INTEGER, "
				  "ctime_ns INTEGER, digest BLOB, PRIMARY "
				  "KEY(dev, ino)) WITHOUT ROWID");
		rc = rc ? rc
			: base_sqlite_prepare(r->db,
					      "INSERT OR REPLACE INTO next "
					      "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
					      &r->put);
		if (rc < 0)
			goto fail;
	}
	rc = base_sqlite_prepare(r->db,
				 "SELECT size, mtime_ns, ctime_ns, digest "
				 "FROM file WHERE dev = ?1 AND ino = ?2",
				 &r->get);
	if (rc < 0)
		goto fail;
	*ret = r;
	return 0;
fail:
	hyd_sync__rec_close(r);
	return rc;
}

int hyd_sync__rec_open(const char *cache_dir, const char *dest,
		       struct hyd_sync_rec **ret)
{
	return rec_open(cache_dir, dest, 0, ret);
}

int hyd_sync__rec_open_ro(const char *cache_dir, const char *dest,
			  struct hyd_sync_rec **ret)
{
	return rec_open(cache_dir, dest, 1, ret);
}

int hyd_sync__rec_has(struct hyd_sync_rec *r, const struct stat *st,
		      const uint8_t digest[32])
{
	int rc, hit = 0;

	if (!r)
		return 0;
	sqlite3_bind_int64(r->get, 1, (sqlite3_int64)st->st_dev);
	sqlite3_bind_int64(r->get, 2, (sqlite3_int64)st->st_ino);
	rc = sqlite3_step(r->get);
	if (rc == SQLITE_ROW)
		hit = sqlite3_column_int64(r->get, 0) == (int64_t)st->st_size &&
		      sqlite3_column_int64(r->get, 1) == ns_of(&st->st_mtim) &&
		      sqlite3_column_int64(r->get, 2) == ns_of(&st->st_ctim) &&
		      sqlite3_column_bytes(r->get, 3) == 32 &&
		      memcmp(sqlite3_column_blob(r->get, 3), digest, 32) == 0;
	sqlite3_reset(r->get);
	return hit;
}

void hyd_sync__rec_note(struct hyd_sync_rec *r, const struct stat *st,
			const uint8_t digest[32])
{
	if (!r)
		return;
	if (!r->in_tx) {
		if (exec(r, "BEGIN") < 0)
			return;
		r->in_tx = 1;
	}
	sqlite3_bind_int64(r->put, 1, (sqlite3_int64)st->st_dev);
	sqlite3_bind_int64(r->put, 2, (sqlite3_int64)st->st_ino);
	sqlite3_bind_int64(r->put, 3, (sqlite3_int64)st->st_size);
	sqlite3_bind_int64(r->put, 4, ns_of(&st->st_mtim));
	sqlite3_bind_int64(r->put, 5, ns_of(&st->st_ctim));
	sqlite3_bind_blob(r->put, 6, digest, 32, SQLITE_TRANSIENT);
	/* a note that fails only costs a hash next time */
	(void)sqlite3_step(r->put);
	sqlite3_reset(r->put);
}

int hyd_sync__rec_commit(struct hyd_sync_rec *r, int merge)
{
	int rc;

	if (!r)
		return 0;
	if (!r->in_tx && exec(r, "BEGIN") == 0)
		r->in_tx = 1;
	rc = merge ? 0 : exec(r, "DELETE FROM file");
	rc =
	    rc ? rc : exec(r, "INSERT OR REPLACE INTO file SELECT * FROM next");
	rc = rc ? rc : exec(r, "COMMIT");
	if (rc == 0) {
		r->in_tx = 0;
		rc = exec(r, "DELETE FROM next");
	}
	return rc;
}

void hyd_sync__rec_close(struct hyd_sync_rec *r)
{
	if (!r)
		return;
	base_sqlite_finalize(&r->get);
	base_sqlite_finalize(&r->put);
	if (r->db && r->in_tx)
		sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(r->db);
	free(r);
}
