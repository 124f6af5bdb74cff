/*
 * hydrator/store/hyd_store_gc.c — dropping the chunks no catalog in the
 * cache names any more, and giving their space back.
 *
 * Mark: the chunk ids of every catalog file in CACHEDIR/catalogs (its
 * chunk rows, and the manifests its overlay holds) go into a temp table,
 * read through a connection of its own (WAL: the store's puts go on).
 * Sweep: the index rows whose id is not there are removed in batches on
 * the store's own connection, each batch in one transaction that also
 * records their frames in gc_free; after it commits the frames are punched
 * out of their volumes (fallocate PUNCH_HOLE: the offsets of the other
 * frames stay, the blocks go back to the file system), then their gc_free
 * rows go. A crash after the commit leaves gc_free rows that the next open
 * punches before anything is appended (hyd_store__gc_recover), so a
 * region is never punched after something new was written there. A volume
 * older than the one being appended to that keeps no chunk at all is
 * removed. The complete mark stays: a dropped chunk is in no catalog.
 *
 * Cost: one pass over the catalogs' chunk rows and one over the store's
 * index, as a census; it runs when a generation leaves the cache, and on
 * `ferry gc`.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "hydrator/store/hyd_store_priv.h"

#define GC_BATCH 1024u

/* The catalog files (and their overlays) of the cache, by path. */
struct gc_files {
	char (*path)[4200];
	size_t n, cap;
};

static int files_add(struct gc_files *fl, const char *dir, const char *name)
{
	if (fl->n == fl->cap) {
		size_t cap = fl->cap ? fl->cap * 2 : 8;
		char(*nv)[4200] = realloc(fl->path, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		fl->path = nv;
		fl->cap = cap;
	}
	if (snprintf(fl->path[fl->n], sizeof(fl->path[0]), "%s/%s", dir,
		     name) >= (int)sizeof(fl->path[0]))
		return -ENAMETOOLONG;
	fl->n++;
	return 0;
}

/* 1 for "GEN.overlay.db". */
static int is_overlay(const char *name)
{
	size_t d = strspn(name, "0123456789");

	return d > 0 && name[0] != '0' && !strcmp(name + d, ".overlay.db");
}

static int files_list(const hyd_store *s, struct gc_files *fl)
{
	char dir[4096];
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (snprintf(dir, sizeof(dir), "%s/catalogs", s->dir) >=
	    (int)sizeof(dir))
		return -ENAMETOOLONG;
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while (r == 0 && (de = readdir(d)) != NULL)
		if (hyd_cache_catalog_gen(de->d_name) || is_overlay(de->d_name))
			r = files_add(fl, dir, de->d_name);
	closedir(d);
	return r;
}

/* INSERT the ids of one catalog or overlay into temp.live. A file that
 * went away since the listing (a generation whose last reader just let
 * go) names nothing anyone reads: skipped. */
static int mark_one(sqlite3 *db, const char *path)
{
	sqlite3_stmt *st = NULL;
	int rc, r;

	if (access(path, F_OK) < 0)
		return errno == ENOENT ? 0 : -errno;
	rc = sqlite3_prepare_v2(db, "ATTACH ?1 AS c", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return base_sqlite_errno(db, rc, "gc attach");
	/* Both a catalog and an overlay have chunk(ino, off, len, id). */
	r = base_sqlite_exec(db,
			     "INSERT OR IGNORE INTO temp.live SELECT id FROM "
			     "c.chunk",
			     "gc mark");
	if (base_sqlite_exec(db, "DETACH c", "gc detach") < 0 && r == 0)
		r = -EIO;
	/* A file in catalogs/ that is no catalog: nothing can be known to
	 * be dead. */
	return r == -EIO || r == -EINVAL ? -EBADMSG : r;
}

int hyd_store__sweep(hyd_store *s, struct hyd_gc_row *v, size_t n,
		     int drop_complete, size_t *ret_gone, uint64_t *ret_bytes)
{
	sqlite3_stmt *ins = NULL;
	size_t gone = 0;
	uint64_t bytes = 0;
	int rc;

	pthread_mutex_lock(&s->mu);
	hyd_store__read_end_locked(s);
	rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(
		    s->db, "INSERT OR IGNORE INTO gc_free VALUES(?1, ?2, ?3)",
		    -1, &ins, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_stmt *st = s->st_drop;

		/* An eviction leaves a chunk a get is reading now. */
		if (drop_complete && hyd_store__busy_has_locked(s, &v[i].id)) {
			v[i].frame_len = 0;
			continue;
		}
		sqlite3_bind_blob(st, 1, v[i].id.b, CHUNK_ID_LEN,
				  SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, v[i].vol);
		sqlite3_bind_int64(st, 3, (int64_t)v[i].off);
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		if (rc != SQLITE_OK || sqlite3_changes(s->db) != 1) {
			/* gone already (a corrupt frame's drop): not ours */
			v[i].frame_len = 0;
			continue;
		}
		sqlite3_bind_int64(ins, 1, v[i].vol);
		sqlite3_bind_int64(ins, 2, (int64_t)v[i].off);
		sqlite3_bind_int64(
		    ins, 3, v[i].punch_len ? v[i].punch_len : v[i].frame_len);
		rc =
		    sqlite3_step(ins) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(ins);
		gone++;
		bytes += v[i].frame_len;
	}
	sqlite3_finalize(ins);
	/* Chunks a catalog still names: no longer complete. */
	if (rc == SQLITE_OK && drop_complete && gone)
		rc = sqlite3_exec(
		    s->db,
		    "DELETE FROM meta WHERE key = '" HYD_STORE_META_COMPLETE
		    "'",
		    NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		int r = base_sqlite_errno(s->db, rc, "gc sweep");

		if (!sqlite3_get_autocommit(s->db))
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		pthread_mutex_unlock(&s->mu);
		return r;
	}
	for (size_t i = 0; i < n; i++)
		if (v[i].frame_len) {
			s->st.chunks--;
			s->st.raw_bytes -= v[i].raw_len;
			s->st.stored_bytes -= v[i].frame_len;
			s->st.held_bytes -= HYD_HELD(v[i].frame_len);
		}
	pthread_mutex_unlock(&s->mu);
	*ret_gone = gone;
	*ret_bytes = bytes;
	return 0;
}

/* Punch [off, off+len) out of volume vol; a file system that cannot punch
 * keeps the bytes (dead, never read again). */
static void punch(hyd_store *s, uint32_t vol, uint64_t off, uint64_t len)
{
	char name[32];
	int fd;

	if (hyd_store__vol_name(vol, name, sizeof(name)) < 0)
		return;
	fd = openat(s->vols_fd, name, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) < 0 &&
	    errno != EOPNOTSUPP)
		base_log_err(BASE_LOG_DEBUG, -errno,
			     "cannot punch a dead frame out dir=%s vol=%u",
			     s->dir, vol);
	close(fd);
}

static int row_cmp(const void *a, const void *b)
{
	const struct hyd_gc_row *x = a, *y = b;

	if (x->vol != y->vol)
		return x->vol < y->vol ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Forget the gc_free rows of v[0..n), punched now: only those (an
 * eviction and a collection may sweep at once; another's rows wait for
 * its own punch). Takes mu. */
static int forget_punched(hyd_store *s, const struct hyd_gc_row *v, size_t n)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->mu);
	hyd_store__read_end_locked(s);
	rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(
		    s->db, "DELETE FROM gc_free WHERE vol = ?1 AND off = ?2",
		    -1, &st, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_int64(st, 1, v[i].vol);
		sqlite3_bind_int64(st, 2, (int64_t)v[i].off);
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		int r = base_sqlite_errno(s->db, rc, "gc_free");

		if (!sqlite3_get_autocommit(s->db))
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		pthread_mutex_unlock(&s->mu);
		return r;
	}
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* Punch every frame gc_free lists, then forget them. Under nothing; the
 * rows are read and deleted under mu. */
int hyd_store__punch_free(hyd_store *s)
{
	sqlite3_stmt *st = NULL;
	struct hyd_gc_row *v = NULL;
	size_t n = 0, cap = 0;
	int rc, r = 0;

	pthread_mutex_lock(&s->mu);
	hyd_store__read_end_locked(s);
	rc = sqlite3_prepare_v2(s->db, "SELECT vol, off, len FROM gc_free", -1,
				&st, NULL);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			struct hyd_gc_row *nv;

			cap = cap ? cap * 2 : 256;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[n].vol = (uint32_t)sqlite3_column_int64(st, 0);
		v[n].off = (uint64_t)sqlite3_column_int64(st, 1);
		v[n].frame_len = (uint32_t)sqlite3_column_int64(st, 2);
		n++;
		rc = SQLITE_OK;
	}
	if (r == 0 && rc != SQLITE_DONE && rc != SQLITE_OK)
		r = base_sqlite_errno(s->db, rc, "gc_free");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->mu);
	/* Frames side by side go in one punch: a file system frees only
	 * whole blocks, and a frame rarely starts or ends on one. */
	if (r == 0 && n)
		qsort(v, n, sizeof(*v), row_cmp);
	for (size_t i = 0; r == 0 && i < n;) {
		uint64_t end = v[i].off + v[i].frame_len;
		size_t j = i + 1;

		while (j < n && v[j].vol == v[i].vol && v[j].off <= end) {
			if (v[j].off + v[j].frame_len > end)
				end = v[j].off + v[j].frame_len;
			j++;
		}
		if (v[i].vol > 0 && v[i].vol <= HYD_VOL_MAX)
			punch(s, v[i].vol, v[i].off, end - v[i].off);
		i = j;
	}
	if (r == 0 && n)
		r = forget_punched(s, v, n);
	free(v);
	return r;
}

int hyd_store__gc_recover(hyd_store *s)
{
	return hyd_store__punch_free(s);
}

void hyd_store__vols_drop_empty(hyd_store *s, const uint32_t *vols, size_t n)
{
	uint32_t cur;
	char name[32];
	int64_t one;

	pthread_mutex_lock(&s->wmu);
	cur = s->cur_vol;
	pthread_mutex_unlock(&s->wmu);
	for (size_t k = 0; k < n; k++) {
		uint32_t p = vols[k];
		sqlite3_stmt *st = NULL;
		int rc;

		if (p == 0 || p >= cur)
			continue;
		pthread_mutex_lock(&s->mu);
		hyd_store__read_end_locked(s);
		rc = sqlite3_prepare_v2(s->db,
					"SELECT 1 FROM chunk WHERE vol = ?1 "
					"LIMIT 1",
					-1, &st, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_bind_int64(st, 1, p);
		rc = rc == SQLITE_OK ? sqlite3_step(st) : rc;
		one = rc == SQLITE_ROW;
		sqlite3_finalize(st);
		if (rc == SQLITE_DONE && !one &&
		    hyd_store__vol_name(p, name, sizeof(name)) == 0) {
			for (size_t i = 0; i < HYD_FD_CACHE; i++)
				if (s->fds[i].fd >= 0 && s->fds[i].vol == p &&
				    s->fds[i].refs == 0) {
					close(s->fds[i].fd);
					s->fds[i].fd = -1;
				}
			if (unlinkat(s->vols_fd, name, 0) == 0 && s->st.vols)
				s->st.vols--;
		}
		pthread_mutex_unlock(&s->mu);
	}
}

/* The volumes a collection touched (a bitmap up to hi): those left empty
 * go. */
static void remove_empty_vols(hyd_store *s, const uint8_t *touched, uint32_t hi)
{
	for (uint32_t p = 1; p <= hi; p++)
		if (touched[p / 8] >> (p % 8) & 1)
			hyd_store__vols_drop_empty(s, &p, 1);
}

/* Mark into a connection of its own, then sweep through the store's. */
static int gc_run(hyd_store *s, sqlite3 *db, const struct gc_files *fl,
		  struct hyd_gc_result *ret)
{
	sqlite3_stmt *st = NULL;
	struct hyd_gc_row *v = NULL;
	uint8_t *touched = NULL;
	uint32_t hi = 0;
	size_t n = 0, gone = 0;
	uint64_t bytes = 0;
	int64_t cnt = 0;
	int rc, r;

	r = base_sqlite_exec(db,
			     "CREATE TEMP TABLE live(id BLOB PRIMARY KEY) "
			     "WITHOUT ROWID",
			     "gc");
	for (size_t i = 0; r == 0 && i < fl->n; i++) {
		r = mark_one(db, fl->path[i]);
		if (r == 0)
			ret->catalogs++;
	}
	if (r < 0)
		return r;
	rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM temp.live", -1, &st,
				NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		cnt = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	ret->live = (uint64_t)cnt;
	v = malloc(GC_BATCH * sizeof(*v));
	touched = calloc(HYD_VOL_MAX / 8 + 1, 1);
	if (!v || !touched) {
		free(v);
		free(touched);
		return -ENOMEM;
	}
	rc = sqlite3_prepare_v2(db,
				"SELECT id, vol, off, frame_len, raw_len "
				"FROM main.chunk WHERE id NOT IN "
				"(SELECT id FROM temp.live)",
				-1, &st, NULL);
	while (r == 0 && rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			int64_t vol = sqlite3_column_int64(st, 1);

			rc = SQLITE_OK;
			if (sqlite3_column_bytes(st, 0) != CHUNK_ID_LEN ||
			    vol <= 0 || vol > HYD_VOL_MAX)
				continue; /* not a row we wrote */
			memcpy(v[n].id.b, sqlite3_column_blob(st, 0),
			       CHUNK_ID_LEN);
			v[n].vol = (uint32_t)vol;
			v[n].off = (uint64_t)sqlite3_column_int64(st, 2);
			v[n].frame_len = (uint32_t)sqlite3_column_int64(st, 3);
			v[n].raw_len = (uint32_t)sqlite3_column_int64(st, 4);
			v[n].punch_len = 0;
			touched[vol / 8] |= (uint8_t)(1u << (vol % 8));
			if ((uint32_t)vol > hi)
				hi = (uint32_t)vol;
			if (++n < GC_BATCH)
				continue;
		} else if (rc != SQLITE_DONE) {
			r = base_sqlite_errno(db, rc, "gc scan");
			break;
		}
		if (n) {
			r = hyd_store__sweep(s, v, n, 0, &gone, &bytes);
			if (r == 0) {
				ret->dropped += gone;
				ret->dropped_bytes += bytes;
				r = hyd_store__punch_free(s);
			}
			n = 0;
		}
		if (rc == SQLITE_DONE)
			break;
	}
	sqlite3_finalize(st);
	if (r == 0)
		remove_empty_vols(s, touched, hi);
	free(v);
	free(touched);
	return r;
}

int hyd_store_gc(hyd_store *s, struct hyd_gc_result *ret)
{
	struct gc_files fl = {0};
	uint64_t t0 = base_now_ns();
	char path[4096];
	sqlite3 *db = NULL;
	int rc, r;

	memset(ret, 0, sizeof(*ret));
	r = files_list(s, &fl);
	if (r == 0 && snprintf(path, sizeof(path), "%s/state.db", s->dir) >=
			  (int)sizeof(path))
		r = -ENAMETOOLONG;
	if (r == 0) {
		rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
		r = rc == SQLITE_OK ? 0 : base_sqlite_errno(db, rc, "gc open");
	}
	if (r == 0) {
		sqlite3_busy_timeout(db, 5000);
		/* The mark can be large (32 bytes an id): a temp file, not
		 * the heap. */
		r = base_sqlite_exec(db, "PRAGMA temp_store = FILE", "gc");
	}
	/* One read transaction for the sweep's scan: a snapshot. Rows that
	 * come after it are new puts, alive. */
	if (r == 0)
		r = gc_run(s, db, &fl, ret);
	sqlite3_close(db);
	free(fl.path);
	pthread_mutex_lock(&s->mu);
	ret->kept = s->st.chunks;
	pthread_mutex_unlock(&s->mu);
	ret->elapsed_s = (double)(base_now_ns() - t0) / 1e9;
	return r;
}
