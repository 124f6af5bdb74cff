/*
 * hydrator/sync/hyd_place_gen.c — --into's record per generation: the
 * chunk rows of each generation's catalog (once), those of manifests the
 * mount learns later (from the overlay), the numbers no catalog names
 * any more forgotten with their parts, and what `ferry finish` drops.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_place_priv.h"

/* ATTACH path AS name (said once when it fails). Under mu. */
static int attach(hyd_place *p, const char *path, const char *name)
{
	int r;

	hyd_place__land_tx_end(p);
	r = base_sqlite_attach(p->db, path, name);

	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r, "--into: cannot read path=%s",
			     path);
	return r;
}

/* The manifests the mount learned since the last look (the overlay's
 * rows of files still unknown here). 1 when any came, 0, -errno. Under
 * mu. */
int hyd_place__import_locked(hyd_place *p, int force)
{
	uint64_t now = base_now_ns();
	int r, n;

	if (!force && now - p->last_import < IMPORT_NS)
		return 0;
	p->last_import = now;
	/* the overlay is made with the first manifest the mount learns */
	if (!p->ov_attached && p->ov_path[0] && access(p->ov_path, F_OK) == 0)
		p->ov_attached = attach(p, p->ov_path, "ov") == 0;
	if (!p->ov_attached)
		return 0;
	r = hyd_place__exec(
	    p, "BEGIN;"
	       "CREATE TEMP TABLE IF NOT EXISTS learned(ino INTEGER "
	       "PRIMARY KEY);"
	       "DELETE FROM temp.learned;"
	       "INSERT INTO temp.learned SELECT u.ino FROM unknown u"
	       " JOIN ov.file f ON f.ino = u.ino;"
	       "INSERT OR IGNORE INTO want SELECT c.ino, c.off, c.len,"
	       " c.id FROM temp.learned l JOIN ov.chunk c ON c.ino = l.ino"
	       " WHERE c.id != zeroblob(32);");
	n = r == 0 ? sqlite3_changes(p->db) : 0;
	if (r == 0)
		r = hyd_place__exec(
		    p, "DELETE FROM unknown WHERE ino IN (SELECT ino FROM "
		       "temp.learned);"
		       "COMMIT;");
	if (r < 0)
		(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	return r < 0 ? r : n > 0;
}

/* Register gen's chunk rows (once). Under mu. */
static int gen_rows(hyd_place *p, uint64_t gen, const char *catpath)
{
	sqlite3_stmt *st = NULL;
	int r, rc, have = 0;

	rc = sqlite3_prepare_v2(p->db, "SELECT 1 FROM gen WHERE gen=?", -1, &st,
				NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)gen);
		have = sqlite3_step(st) == SQLITE_ROW;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (have)
		return 0;
	r = attach(p, catpath, "c");
	if (r < 0)
		return r;
	r = hyd_place__exec(
	    p, "BEGIN;"
	       "INSERT OR IGNORE INTO want SELECT ino, off, len, id"
	       " FROM c.chunk WHERE id != zeroblob(32);"
	       "INSERT OR IGNORE INTO part(ino, size)"
	       " SELECT ino, size FROM c.inode WHERE kind = 1"
	       " AND size > 0;"
	       "INSERT OR IGNORE INTO unknown SELECT ino FROM c.pending;");
	if (r == 0) {
		rc = sqlite3_prepare_v2(p->db, "INSERT INTO gen VALUES(?)", -1,
					&st, NULL);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, (sqlite3_int64)gen);
			rc = sqlite3_step(st);
		}
		sqlite3_finalize(st);
		r = rc == SQLITE_DONE
			? hyd_place__exec(p, "COMMIT")
			: hyd_place__db_err(p, rc, "cannot register");
	}
	if (r < 0)
		(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	(void)sqlite3_exec(p->db, "DETACH c", NULL, NULL, NULL);
	return r;
}

int hyd_place_gen(hyd_place *p, uint64_t gen, const char *catpath,
		  const char *ovpath)
{
	int r;

	pthread_mutex_lock(&p->mu);
	hyd_place__land_tx_end(p); /* the last pass's rows, and DETACH */
	hyd_place__hints_clear(p);
	r = gen_rows(p, gen, catpath);
	if (r == 0 && gen != p->ov_gen) {
		if (p->ov_attached)
			(void)sqlite3_exec(p->db, "DETACH ov", NULL, NULL,
					   NULL);
		p->ov_attached = 0;
		p->ov_gen = gen;
		snprintf(p->ov_path, sizeof(p->ov_path), "%s",
			 ovpath ? ovpath : "");
	}
	if (r == 0)
		r = hyd_place__import_locked(p, 1) < 0 ? -EIO : 0;
	pthread_mutex_unlock(&p->mu);
	return r;
}

/* Parts no row names as one (made, then a crash before their rows; or
 * landed files whose part stayed): removed. Under mu. */
static void orphans(hyd_place *p)
{
	struct dirent *e;
	DIR *d;
	int fd = openat(p->dirfd, HYD_PLACE_PARTS,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d))) {
		char *end;
		uint64_t ino;
		int rc, keep = 0;

		if (e->d_name[0] == '.')
			continue;
		errno = 0;
		ino = strtoull(e->d_name, &end, 10);
		if (!errno && !*end) {
			sqlite3_bind_int64(p->st_part, 1, (sqlite3_int64)ino);
			rc = sqlite3_step(p->st_part);
			keep =
			    rc == SQLITE_ROW &&
			    sqlite3_column_type(p->st_part, 1) == SQLITE_NULL;
			sqlite3_reset(p->st_part);
		}
		if (!keep) {
			hyd_place__fd_drop(p, ino);
			(void)unlinkat(dirfd(d), e->d_name, 0);
		}
	}
	closedir(d);
}

/* Forget the numbers no catalog of cache_dir names: a number kept is
 * marked from each catalog in turn, the rest go (rows, and parts not
 * landed). */
int hyd_place_prune(hyd_place *p, const char *cache_dir)
{
	char dir[4200], path[4500], name[64];
	sqlite3_stmt *st = NULL;
	struct dirent *e;
	struct stat sb;
	int r, n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/catalogs", cache_dir);
	d = opendir(dir);
	if (!d)
		return -errno;
	pthread_mutex_lock(&p->mu);
	r = hyd_place__exec(p, "CREATE TEMP TABLE IF NOT EXISTS kept(ino "
			       "INTEGER PRIMARY KEY); DELETE FROM temp.kept;");
	while (r == 0 && (e = readdir(d))) {
		if (!hyd_cache_catalog_gen(e->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n++;
		r = attach(p, path, "k");
		if (r == 0) {
			r = hyd_place__exec(p,
					    "INSERT OR IGNORE INTO temp.kept "
					    "SELECT ino FROM k.inode WHERE ino "
					    "IN (SELECT ino FROM part)");
			(void)sqlite3_exec(p->db, "DETACH k", NULL, NULL, NULL);
		}
	}
	closedir(d);
	if (r == 0 && !n)
		r = -ENOENT; /* no catalog: nothing is known to be gone */
	if (r == 0)
		r = base_sqlite_prepare(
		    p->db,
		    "SELECT ino FROM part WHERE path IS NULL "
		    "AND ino NOT IN (SELECT ino FROM "
		    "temp.kept)",
		    &st);
	while (r == 0 && sqlite3_step(st) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(st, 0);

		hyd_place__fd_drop(p, ino);
		hyd_place__part_name(ino, name, sizeof(name));
		(void)unlinkat(p->dirfd, name, 0);
		p->st.pruned++;
	}
	base_sqlite_finalize(&st);
	if (r == 0)
		r = hyd_place__exec(
		    p, "BEGIN;"
		       "DELETE FROM want WHERE ino NOT IN temp.kept;"
		       "DELETE FROM placed WHERE ino NOT IN temp.kept;"
		       "DELETE FROM unknown WHERE ino NOT IN temp.kept;"
		       "DELETE FROM part WHERE ino NOT IN temp.kept;"
		       "COMMIT;");
	hyd_place__hints_clear(p);
	if (r < 0)
		(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	if (r == 0)
		orphans(p);
	/* nothing left in it: DIR shows no trace of the landing (its
	 * times as the landing set them) */
	if (fstat(p->dirfd, &sb) == 0 &&
	    unlinkat(p->dirfd, HYD_PLACE_PARTS, AT_REMOVEDIR) == 0)
		(void)futimens(p->dirfd,
			       (struct timespec[2]){sb.st_atim, sb.st_mtim});
	pthread_mutex_unlock(&p->mu);
	return r;
}

int hyd_place_drop(const char *cache_dir, const char *dir)
{
	char path[4400];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "%s/" HYD_PLACE_PARTS, dir);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		char f[4700];

		if (e->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
		(void)unlink(f);
	}
	if (d)
		closedir(d);
	(void)rmdir(path);
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_DB, cache_dir);
	(void)unlink(path);
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_DB "-wal", cache_dir);
	(void)unlink(path);
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_DB "-shm", cache_dir);
	(void)unlink(path);
	return 0;
}

hyd_filter *hyd_place_filter(void)
{
	hyd_filter *f = hyd_filter_new();
	const char *why = NULL;

	if (f && hyd_filter_rule(f, "P /" HYD_PLACE_PARTS, &why) < 0) {
		hyd_filter_free(f);
		f = NULL;
	}
	return f;
}
