/*
 * catalog/cat_delta.c — the difference between two catalogs of one
 * namespace, and a digest of a catalog's rows that proves a catalog
 * rebuilt from a delta is the one the source published.
 *
 * A delta (format "ferry-delta/1") is a small SQLite file: for each table
 * of the catalog the rows to delete (by primary key) and the rows to put,
 * the manifest of a changed file whole (chunk rows are replaced per ino),
 * the target's meta rows, and the target's digest. Inode numbers stay with
 * their entries across generations (docs/catalog.md), so the rows of what
 * did not change are equal rows and stay out of the delta: its size grows
 * with what changed (plus, for a directory with a name added or removed,
 * that directory's entries after it, whose positions moved).
 *
 * The digest is a SHA-256 over every row of meta, inode, dirent, xattr,
 * chunk and pending, each table in primary-key order, every value typed
 * and length-prefixed: two catalogs with the same rows have the same
 * digest, whatever their SQLite page layout. Applying checks the result
 * against the digest the delta carries, so a delta that does not lead
 * exactly to the published catalog is refused (and the caller fetches the
 * whole catalog instead).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

#define DELTA_FORMAT "ferry-delta/1"
#define COPY_BUF (1u << 20)

/* The catalog's tables, their keys, in digest order. */
static const struct {
	const char *name, *key;
} TABLES[] = {
    {"meta", "key"},	    {"inode", "ino"},	   {"dirent", "parent, pos"},
    {"xattr", "ino, name"}, {"chunk", "ino, off"}, {"pending", "ino"},
};

static int db_open(const char *path, int flags, sqlite3 **ret)
{
	int rc = sqlite3_open_v2(path, ret, flags, NULL);

	if (rc != SQLITE_OK)
		return base_sqlite_errno(*ret, rc, "open");
	sqlite3_busy_timeout(*ret, 5000);
	return 0;
}

static void digest_value(EVP_MD_CTX *md, sqlite3_stmt *st, int col)
{
	uint8_t tag = (uint8_t)sqlite3_column_type(st, col);
	int64_t i;
	double d;
	uint64_t n;

	EVP_DigestUpdate(md, &tag, 1);
	switch (tag) {
	case SQLITE_INTEGER:
		i = sqlite3_column_int64(st, col);
		EVP_DigestUpdate(md, &i, sizeof(i));
		break;
	case SQLITE_FLOAT:
		d = sqlite3_column_double(st, col);
		EVP_DigestUpdate(md, &d, sizeof(d));
		break;
	case SQLITE_TEXT:
	case SQLITE_BLOB:
		n = (uint64_t)sqlite3_column_bytes(st, col);
		EVP_DigestUpdate(md, &n, sizeof(n));
		if (n)
			EVP_DigestUpdate(
			    md,
			    tag == SQLITE_TEXT
				? (const void *)sqlite3_column_text(st, col)
				: sqlite3_column_blob(st, col),
			    n);
		break;
	default: /* NULL */
		break;
	}
}

/* The digest of the open catalog db (tables under schema "main"). */
static int digest_db(sqlite3 *db, char hex[65])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int olen = 0;
	chunk_id sum;
	int r = 0;

	if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(md);
		return -ENOMEM;
	}
	for (size_t t = 0; r == 0 && t < sizeof(TABLES) / sizeof(*TABLES);
	     t++) {
		char sql[128];
		sqlite3_stmt *st = NULL;
		int rc, ncol;

		EVP_DigestUpdate(md, TABLES[t].name,
				 strlen(TABLES[t].name) + 1);
		snprintf(sql, sizeof(sql), "SELECT * FROM main.%s ORDER BY %s",
			 TABLES[t].name, TABLES[t].key);
		rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
		if (rc != SQLITE_OK) {
			r = base_sqlite_errno(db, rc, sql);
			break;
		}
		ncol = sqlite3_column_count(st);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			for (int c = 0; c < ncol; c++)
				digest_value(md, st, c);
		if (rc != SQLITE_DONE)
			r = base_sqlite_errno(db, rc, sql);
		sqlite3_finalize(st);
	}
	if (r == 0 &&
	    (EVP_DigestFinal_ex(md, out, &olen) != 1 || olen != CHUNK_ID_LEN))
		r = -EIO;
	EVP_MD_CTX_free(md);
	if (r < 0)
		return r;
	memcpy(sum.b, out, CHUNK_ID_LEN);
	chunk_id_to_hex(&sum, hex);
	return 0;
}

int cat_digest(const char *path, char hex[65])
{
	sqlite3 *db = NULL;
	int r = db_open(path, SQLITE_OPEN_READONLY, &db);

	if (r == 0)
		r = digest_db(db, hex);
	sqlite3_close(db);
	return r;
}

static int exec(sqlite3 *db, const char *sql)
{
	return base_sqlite_exec(db, sql, "delta");
}

/* The statements that fill a delta from catalogs a (from) and b (to). */
static const char *const BUILD[] = {
    "CREATE TABLE dmeta(key TEXT PRIMARY KEY, value)",
    "CREATE TABLE catmeta AS SELECT * FROM b.meta",
    "CREATE TABLE put_inode AS SELECT * FROM b.inode EXCEPT "
    "SELECT * FROM a.inode",
    "CREATE TABLE del_inode AS SELECT ino FROM a.inode EXCEPT "
    "SELECT ino FROM b.inode",
    "CREATE TABLE put_dirent AS SELECT * FROM b.dirent EXCEPT "
    "SELECT * FROM a.dirent",
    "CREATE TABLE del_dirent AS SELECT parent, pos FROM a.dirent EXCEPT "
    "SELECT parent, pos FROM b.dirent",
    "CREATE TABLE put_xattr AS SELECT * FROM b.xattr EXCEPT "
    "SELECT * FROM a.xattr",
    "CREATE TABLE del_xattr AS SELECT ino, name FROM a.xattr EXCEPT "
    "SELECT ino, name FROM b.xattr",
    /* a file whose manifest differs in any row is replaced whole */
    "CREATE TABLE del_chunk AS SELECT ino FROM (SELECT * FROM b.chunk "
    "EXCEPT SELECT * FROM a.chunk) UNION SELECT ino FROM (SELECT * FROM "
    "a.chunk EXCEPT SELECT * FROM b.chunk)",
    "CREATE TABLE put_chunk AS SELECT * FROM b.chunk WHERE ino IN "
    "(SELECT ino FROM del_chunk)",
    "CREATE TABLE put_pending AS SELECT * FROM b.pending EXCEPT "
    "SELECT * FROM a.pending",
    "CREATE TABLE del_pending AS SELECT ino FROM a.pending EXCEPT "
    "SELECT ino FROM b.pending",
};

static int dmeta_put(sqlite3 *db, const char *key, const char *text,
		     int64_t num)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, "INSERT INTO dmeta VALUES(?1, ?2)", -1, &st,
				NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = text ? sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC)
			  : sqlite3_bind_int64(st, 2, num);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : base_sqlite_errno(db, rc, "dmeta");
}

int cat_delta_build(const char *from_path, const char *to_path,
		    const char *delta_path)
{
	struct cat_meta fm, tm;
	cat_reader *fr = NULL, *tr = NULL;
	sqlite3 *db = NULL;
	char hex[65];
	int r;

	/* Both must be catalogs we would serve, of one namespace's line. */
	r = cat_reader_open(from_path, &fr);
	if (r == 0)
		r = cat_reader_open(to_path, &tr);
	if (r == 0) {
		cat_reader_meta(fr, &fm);
		cat_reader_meta(tr, &tm);
		if (fm.generation >= tm.generation)
			r = -EINVAL;
	}
	cat_reader_close(fr);
	cat_reader_close(tr);
	if (r < 0)
		return r;
	r = cat_digest(to_path, hex);
	if (r < 0)
		return r;
	unlink(delta_path);
	r = db_open(delta_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
		    &db);
	if (r == 0)
		r = exec(db, "PRAGMA journal_mode = OFF");
	if (r == 0)
		r = exec(db, "PRAGMA synchronous = OFF");
	if (r == 0)
		r = base_sqlite_attach(db, from_path, "a");
	if (r == 0)
		r = base_sqlite_attach(db, to_path, "b");
	if (r == 0)
		r = exec(db, "BEGIN");
	for (size_t i = 0; r == 0 && i < sizeof(BUILD) / sizeof(*BUILD); i++)
		r = exec(db, BUILD[i]);
	if (r == 0)
		r = dmeta_put(db, "format", DELTA_FORMAT, 0);
	if (r == 0)
		r = dmeta_put(db, "from_generation", NULL,
			      (int64_t)fm.generation);
	if (r == 0)
		r = dmeta_put(db, "to_generation", NULL,
			      (int64_t)tm.generation);
	if (r == 0)
		r = dmeta_put(db, "to_digest", hex, 0);
	if (r == 0)
		r = exec(db, "COMMIT");
	if (sqlite3_close(db) != SQLITE_OK && r == 0)
		r = -EIO;
	if (r < 0)
		unlink(delta_path);
	return r;
}

/* What applying does, on the copy of the older catalog ("main") with the
 * delta attached as d. */
static const char *const APPLY[] = {
    "DELETE FROM main.inode WHERE ino IN (SELECT ino FROM d.del_inode)",
    "INSERT OR REPLACE INTO main.inode SELECT * FROM d.put_inode",
    "DELETE FROM main.dirent WHERE (parent, pos) IN "
    "(SELECT parent, pos FROM d.del_dirent)",
    /* a name that moved to another position: its old row goes first */
    "DELETE FROM main.dirent WHERE (parent, name) IN "
    "(SELECT parent, name FROM d.put_dirent)",
    "INSERT OR REPLACE INTO main.dirent SELECT * FROM d.put_dirent",
    "DELETE FROM main.xattr WHERE (ino, name) IN "
    "(SELECT ino, name FROM d.del_xattr)",
    "INSERT OR REPLACE INTO main.xattr SELECT * FROM d.put_xattr",
    "DELETE FROM main.chunk WHERE ino IN (SELECT ino FROM d.del_chunk)",
    "INSERT INTO main.chunk SELECT * FROM d.put_chunk",
    "DELETE FROM main.pending WHERE ino IN (SELECT ino FROM d.del_pending)",
    "INSERT OR REPLACE INTO main.pending SELECT * FROM d.put_pending",
    "DELETE FROM main.meta",
    "INSERT INTO main.meta SELECT * FROM d.catmeta",
};

static int copy_file(const char *src, const char *dst)
{
	char *buf = malloc(COPY_BUF);
	int in = -1, out = -1, r = 0;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in >= 0)
		out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (in < 0 || out < 0)
		r = -errno;
	while (r == 0 && (n = read(in, buf, COPY_BUF)) != 0) {
		if (n < 0) {
			r = -errno;
			break;
		}
		r = base_write_all(out, buf, (size_t)n);
	}
	if (out >= 0 && close(out) < 0 && r == 0)
		r = -errno;
	if (in >= 0)
		close(in);
	free(buf);
	if (r < 0)
		unlink(dst);
	return r;
}

/* dmeta's text value of key into out (cap bytes); -EBADMSG when absent. */
static int dmeta_text(sqlite3 *db, const char *key, char *out, size_t cap)
{
	sqlite3_stmt *st = NULL;
	const unsigned char *v;
	int rc, r = -EBADMSG;

	rc = sqlite3_prepare_v2(db, "SELECT value FROM d.dmeta WHERE key = ?1",
				-1, &st, NULL);
	if (rc == SQLITE_OK &&
	    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW &&
	    (v = sqlite3_column_text(st, 0)) && strlen((const char *)v) < cap) {
		snprintf(out, cap, "%s", (const char *)v);
		r = 0;
	}
	sqlite3_finalize(st);
	return r;
}

int cat_delta_apply(const char *from_path, const char *delta_path,
		    const char *out_path, uint64_t *ret_from, uint64_t *ret_to)
{
	return cat_delta_apply_want(from_path, delta_path, out_path, NULL,
				    ret_from, ret_to);
}

int cat_delta_apply_want(const char *from_path, const char *delta_path,
			 const char *out_path, const char *want_signed,
			 uint64_t *ret_from, uint64_t *ret_to)
{
	char fmt[32], want[65], got[65], num[24];
	uint64_t from = 0, to = 0;
	struct cat_meta fm;
	cat_reader *fr = NULL;
	sqlite3 *db = NULL;
	int r;

	r = cat_reader_open(from_path, &fr);
	if (r < 0)
		return r;
	cat_reader_meta(fr, &fm);
	cat_reader_close(fr);
	unlink(out_path);
	r = copy_file(from_path, out_path);
	if (r < 0)
		return r;
	r = db_open(out_path, SQLITE_OPEN_READWRITE, &db);
	if (r == 0)
		r = exec(db, "PRAGMA journal_mode = OFF");
	if (r == 0)
		r = base_sqlite_attach(db, delta_path, "d");
	/* Whatever does not read as our delta is a bad one. */
	if (r == 0 &&
	    (dmeta_text(db, "format", fmt, sizeof(fmt)) < 0 ||
	     strcmp(fmt, DELTA_FORMAT) ||
	     dmeta_text(db, "from_generation", num, sizeof(num)) < 0 ||
	     base_parse_u64(num, 1, INT64_MAX, &from) < 0 ||
	     dmeta_text(db, "to_generation", num, sizeof(num)) < 0 ||
	     base_parse_u64(num, 1, INT64_MAX, &to) < 0 ||
	     dmeta_text(db, "to_digest", want, sizeof(want)) < 0 ||
	     from != fm.generation || to <= from))
		r = -EBADMSG;
	if (r == 0)
		r = exec(db, "BEGIN");
	for (size_t i = 0; r == 0 && i < sizeof(APPLY) / sizeof(*APPLY); i++)
		r = exec(db, APPLY[i]);
	if (r == 0)
		r = exec(db, "COMMIT");
	if (r == 0)
		r = exec(db, "DETACH d");
	if (r == 0)
		r = digest_db(db, got);
	/* The delta's own claim guards against a cut or mixed-up delta;
	 * only a digest from elsewhere (a signed statement) guards against
	 * one made to order. */
	if (r == 0 &&
	    (strcmp(got, want) || (want_signed && strcmp(got, want_signed))))
		r = -EBADMSG;
	if (sqlite3_close(db) != SQLITE_OK && r == 0)
		r = -EIO;
	if (r < 0) {
		unlink(out_path);
		return r == -ENOMEM || r == -ENOSPC ? r : -EBADMSG;
	}
	if (ret_from)
		*ret_from = from;
	if (ret_to)
		*ret_to = to;
	return 0;
}
