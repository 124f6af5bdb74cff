/*
 * catalog/cat_diff.c — what a mount must tell the kernel when it switches
 * from one generation's catalog to the next in place.
 *
 * Inode numbers stay with their entries and a regular file's number names
 * one content (docs/catalog.md), so the difference a mount needs is small
 * and is read off the two catalogs by their rows alone:
 *   names    (parent, name) pairs added, removed, or naming another ino:
 *            the kernel's dentry (or negative dentry) for each is stale;
 *   dirs     the parents of those: their cached listings are stale;
 *   inodes   inos in both catalogs whose inode row or xattrs differ: their
 *            cached attributes are stale, and for a regular file whose
 *            size or mtime moved under the same number (a catalog that
 *            breaks the rule above) its cached pages too;
 *   gone     inos only the old catalog has: what the kernel may still
 *            hold open, and the mount answers from the older generation.
 * Entries whose position in a directory moved because a name before them
 * came or went are not names that changed: the kernel keeps dentries by
 * name, and the directory's listing is dropped as a whole anyway.
 *
 * One SQLite connection of its own, both catalogs attached read-only, the
 * differences kept in an in-memory temp table; EXCEPT scans both
 * catalogs' inode and dirent tables (and xattr), so the cost grows with
 * the entries, and the callbacks with what changed. Chunk rows are not
 * compared: a manifest that changed with its file changed its number.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

/* The names whose entry differs, and then the steps that read them. */
static const char *const DIFF_SETUP[] = {
    "PRAGMA temp_store = MEMORY",
    "CREATE TEMP TABLE names AS"
    " SELECT parent, name FROM (SELECT parent, name, ino FROM a.dirent"
    "  EXCEPT SELECT parent, name, ino FROM b.dirent)"
    " UNION"
    " SELECT parent, name FROM (SELECT parent, name, ino FROM b.dirent"
    "  EXCEPT SELECT parent, name, ino FROM a.dirent)",
};

#define SQL_NAMES "SELECT parent, name FROM temp.names ORDER BY parent, name"
#define SQL_DIRS "SELECT DISTINCT parent FROM temp.names ORDER BY parent"
/* Rows of b's inode table that differ from a's row of the same ino, with
 * a's size and mtime beside b's. */
#define SQL_INODES                                                             \
	"SELECT n.ino, n.kind, n.size, n.mtime_ns, o.size, o.mtime_ns"         \
	" FROM (SELECT * FROM b.inode EXCEPT SELECT * FROM a.inode) n"         \
	" JOIN a.inode o ON o.ino = n.ino ORDER BY n.ino"
/* Inos in both whose xattrs differ (and whose row does not). */
/* Inos of a that b lacks, ascending. */
#define SQL_GONE                                                               \
	"SELECT ino FROM a.inode EXCEPT SELECT ino FROM b.inode ORDER BY 1"
#define SQL_XATTRS                                                             \
	"SELECT DISTINCT ino FROM ("                                           \
	" SELECT ino FROM (SELECT * FROM a.xattr EXCEPT SELECT * FROM "        \
	"b.xattr)"                                                             \
	" UNION ALL"                                                           \
	" SELECT ino FROM (SELECT * FROM b.xattr EXCEPT SELECT * FROM "        \
	"a.xattr)"                                                             \
	") x WHERE ino IN (SELECT ino FROM a.inode)"                           \
	" AND ino IN (SELECT ino FROM b.inode)"                                \
	" AND ino NOT IN (SELECT ino FROM (SELECT * FROM b.inode"              \
	"  EXCEPT SELECT * FROM a.inode)) ORDER BY ino"

/* Run sql and call each_row(st) for every row; stops at a non-zero
 * return of each_row, which is returned. */
static int each(sqlite3 *db, const char *sql,
		int (*each_row)(sqlite3_stmt *st, void *arg), void *arg)
{
	sqlite3_stmt *st = NULL;
	int rc, r = 0;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return base_sqlite_errno(db, rc, "diff");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		r = each_row(st, arg);
		if (r)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = base_sqlite_errno(db, rc, "diff");
	sqlite3_finalize(st);
	return r;
}

struct diff_ctx {
	cat_diff_cb cb;
	void *ctx;
	enum cat_diff_kind kind; /* of the rows row_ino reports */
};

static int row_name(sqlite3_stmt *st, void *arg)
{
	struct diff_ctx *d = arg;
	struct cat_diff_item it = {.kind = CAT_DIFF_NAME};
	int64_t parent = sqlite3_column_int64(st, 0);

	it.name = sqlite3_column_blob(st, 1);
	it.name_len = (size_t)sqlite3_column_bytes(st, 1);
	/* A name the catalogs' readers would refuse names nothing the
	 * kernel can hold. */
	if (parent < 1 || cat_name_check(it.name, it.name_len) < 0)
		return 0;
	it.ino = (uint64_t)parent;
	return d->cb(d->ctx, &it);
}

/* A row whose first column is an inode number that changed as d->kind
 * says (a directory's entries, an inode gone, its xattrs). */
static int row_ino(sqlite3_stmt *st, void *arg)
{
	struct diff_ctx *d = arg;
	struct cat_diff_item it = {.kind = d->kind};
	int64_t ino = sqlite3_column_int64(st, 0);

	if (ino < 1)
		return 0;
	it.ino = (uint64_t)ino;
	return d->cb(d->ctx, &it);
}

static int row_inode(sqlite3_stmt *st, void *arg)
{
	struct diff_ctx *d = arg;
	struct cat_diff_item it = {.kind = CAT_DIFF_ATTR};
	int64_t ino = sqlite3_column_int64(st, 0);

	if (ino < 1)
		return 0;
	it.ino = (uint64_t)ino;
	if (sqlite3_column_int(st, 1) == CAT_REG &&
	    (sqlite3_column_int64(st, 2) != sqlite3_column_int64(st, 4) ||
	     sqlite3_column_int64(st, 3) != sqlite3_column_int64(st, 5)))
		it.kind = CAT_DIFF_DATA;
	return d->cb(d->ctx, &it);
}

int cat_diff(const char *old_path, const char *new_path, cat_diff_cb cb,
	     void *ctx)
{
	struct diff_ctx d = {.cb = cb, .ctx = ctx};
	sqlite3 *db = NULL;
	int rc, r;

	/* Both must read as catalogs: anything else has no rows to trust. */
	for (int i = 0; i < 2; i++) {
		cat_reader *cr = NULL;

		r = cat_reader_open(i ? new_path : old_path, &cr);
		cat_reader_close(cr);
		if (r < 0)
			return r;
	}
	rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL);
	if (rc != SQLITE_OK) {
		r = base_sqlite_errno(db, rc, "diff open");
		sqlite3_close(db);
		return r;
	}
	r = base_sqlite_attach(db, old_path, "a");
	if (r == 0)
		r = base_sqlite_attach(db, new_path, "b");
	for (size_t i = 0;
	     r == 0 && i < sizeof(DIFF_SETUP) / sizeof(*DIFF_SETUP); i++)
		r = base_sqlite_exec(db, DIFF_SETUP[i], "diff");
	if (r == 0)
		r = each(db, SQL_NAMES, row_name, &d);
	d.kind = CAT_DIFF_DIR;
	if (r == 0)
		r = each(db, SQL_DIRS, row_ino, &d);
	if (r == 0)
		r = each(db, SQL_INODES, row_inode, &d);
	d.kind = CAT_DIFF_ATTR;
	if (r == 0)
		r = each(db, SQL_XATTRS, row_ino, &d);
	d.kind = CAT_DIFF_GONE;
	if (r == 0)
		r = each(db, SQL_GONE, row_ino, &d);
	sqlite3_close(db);
	return r;
}
