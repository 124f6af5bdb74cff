/*
 * hydrator/sync/hyd_unsafe.c — the catalog's entries whose names no
 * directory can take (empty, "." or "..", holding a '/' or a NUL, longer
 * than CAT_NAME_MAX), so that `ferry sync` names each one instead of
 * dropping it in silence.
 *
 * The reader never hands such a name out (cat_readdir skips it: joining it
 * under a directory could leave DEST), so the writer cannot see them in
 * its walk. One query over the catalog's own file finds them: a full scan
 * of the dirent table in its key order (parent, pos), which on a clean
 * catalog returns nothing and costs a fraction of the walk itself. The
 * writer asks, for each directory it visits, for the ones below it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "hydrator/sync/hyd_sync_priv.h"

/* cat_name_check's rule in SQL: a name that is no BLOB is skipped by the
 * reader too. instr() on two BLOBs compares bytes. */
static const char unsafe_sql[] =
    "SELECT parent, name FROM dirent"
    " WHERE typeof(name) != 'blob' OR length(name) NOT BETWEEN 1 AND 255"
    " OR name = X'2E' OR name = X'2E2E'"
    " OR instr(name, X'2F') > 0 OR instr(name, X'00') > 0"
    " ORDER BY parent, pos";

_Static_assert(CAT_NAME_MAX == 255, "unsafe_sql spells CAT_NAME_MAX");

static int add(struct hyd_sync_unsafe *u, size_t *cap, uint64_t parent,
	       const void *name, size_t len)
{
	struct hyd_sync_unsafe_ent *e;

	if (u->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;

		e = realloc(u->v, nc * sizeof(*e));
		if (!e)
			return -ENOMEM;
		u->v = e;
		*cap = nc;
	}
	e = &u->v[u->n];
	e->parent = parent;
	e->len = len;
	e->name = malloc(len ? len : 1);
	if (!e->name)
		return -ENOMEM;
	if (len)
		memcpy(e->name, name, len);
	u->n++;
	return 0;
}

int hyd_sync__unsafe_scan(const char *catpath, struct hyd_sync_unsafe *ret)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	char *uri = NULL;
	size_t cap = 0;
	int rc;

	memset(ret, 0, sizeof(*ret));
	/* The reader's settings for a file from elsewhere (cat_reader.c). */
	rc = base_sqlite_uri(catpath, "immutable=1", &uri);
	if (rc)
		return rc;
	rc = sqlite3_open_v2(
	    uri, &db,
	    SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL);
	free(uri);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(db, rc, "unsafe names: open");
		goto out;
	}
	sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	rc = base_sqlite_exec(db, "PRAGMA query_only=1;", "unsafe names");
	if (rc)
		goto out;
	rc = sqlite3_prepare_v2(db, unsafe_sql, -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(db, rc, "unsafe names: prepare");
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 parent = sqlite3_column_int64(st, 0);
		const void *name = sqlite3_column_blob(st, 1);
		int len = sqlite3_column_bytes(st, 1);

		rc = add(ret, &cap, parent > 0 ? (uint64_t)parent : 0, name,
			 len > 0 && name ? (size_t)len : 0);
		if (rc)
			goto out;
	}
	rc = rc == SQLITE_DONE ? 0 : base_sqlite_errno(db, rc, "unsafe names");
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	if (rc)
		hyd_sync__unsafe_free(ret);
	return rc;
}

size_t hyd_sync__unsafe_of(const struct hyd_sync_unsafe *u, uint64_t dir,
			   size_t *ret_first)
{
	size_t lo = 0, hi, end;

	if (!u || !u->n)
		return 0;
	/* sorted by parent: the first entry of dir, then its run */
	hi = u->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (u->v[mid].parent < dir)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (end = lo; end < u->n && u->v[end].parent == dir; end++)
		;
	*ret_first = lo;
	return end - lo;
}

void hyd_sync__unsafe_free(struct hyd_sync_unsafe *u)
{
	size_t i;

	for (i = 0; i < u->n; i++)
		free(u->v[i].name);
	free(u->v);
	memset(u, 0, sizeof(*u));
}
