/*
 * hydrator/store/hyd_store.c — the destination chunk store: volumes plus an
 * index.
 *
 * Frames rest in CACHEDIR/volumes/NNNNNNNN.vol, appended and never rewritten;
 * CACHEDIR/state.db (SQLite, WAL) maps a chunk id to where its frame lies.
 * Every frame is written and fdatasync()ed before its row commits
 * (hyd_store_put.c, which does it for groups of concurrent puts at once),
 * so a crash leaves at most an unindexed tail, which open truncates.
 *
 * Locking (hyd_store_priv.h): `wmu` for appends and groups, `mu` for
 * SQLite, the read-fd cache, the reader pool and the counters. A get holds
 * mu only around its index lookup, never during pread or decode, so
 * readers are neither stalled behind a group's fdatasync nor behind each
 * other's I/O.
 *
 * A cache from before volumes had packs (CACHEDIR/packs/NNNNNNNN.pack and
 * a `pack` column): open moves it over in place, index then files
 * (store_migrate, store_files_migrate), crash-safe at every step.
 *
 * Test hook: FERRY_VOLUME_ROLL_BYTES (a decimal byte count, read at open;
 * FERRY_PACK_ROLL_BYTES, its former name, when it is not set) overrides
 * HYD_VOL_ROLL_BYTES so tests can roll volumes after a few frames.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "catalog/base/base.h"
#include "hydrator/store/hyd_store_priv.h"

#define HYD_STORE_SCHEMA 5 /* PRAGMA user_version of a current state.db */
#define HYD_READER_KEEP (1u << 20) /* larger frame buffers are not kept */
#define HYD_META_VALUE_MAX 65536

int hyd_store__vol_name(uint32_t vol, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%08u.vol", vol);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The number of a file named NNNNNNNN then ext (exactly 8 digits), 0 if
 * the name is anything else (number 0 is never used). */
static uint32_t name_num(const char *name, const char *ext)
{
	uint32_t v = 0;
	size_t i;

	if (strlen(name) != 8 + strlen(ext) || strcmp(name + 8, ext) != 0)
		return 0;
	for (i = 0; i < 8; i++) {
		if (name[i] < '0' || name[i] > '9')
			return 0;
		v = v * 10 + (uint32_t)(name[i] - '0');
	}
	return v;
}

/* Volume number from a file name "NNNNNNNN.vol", 0 if it is no volume. */
static uint32_t vol_parse(const char *name)
{
	return name_num(name, ".vol");
}

/* Take dir/lock exclusively and write our pid into it, so whoever finds it
 * held can say which process is using the store. flock belongs to the open
 * file description: it dies with the process, never goes stale. */
static int store_lock(hyd_store *s)
{
	char path[4096];
	int n;

	n = snprintf(path, sizeof(path), "%s/lock", s->dir);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->lock_fd < 0)
		return -errno;
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return hyd_store_claim(s);
}

int hyd_store_claim(hyd_store *s)
{
	char pid[32];
	int n;

	/* The flock belongs to the open file description, which a forked
	 * child shares: only the pid written here needs to change. */
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(s->lock_fd, 0) < 0)
		return -errno;
	return base_pwrite_all(s->lock_fd, pid, (size_t)n, 0);
}

/* Schema migrations, one step per revision; index i takes user_version i
 * to i + 1. Never edit a released step: add one. */
static const char *const hyd_store_migrations[HYD_STORE_SCHEMA] = {
    /* 0 -> 1 */
    "CREATE TABLE chunk("
    "  id BLOB PRIMARY KEY,"
    "  pack INTEGER NOT NULL,"
    "  off INTEGER NOT NULL,"
    "  frame_len INTEGER NOT NULL,"
    "  raw_len INTEGER NOT NULL,"
    "  codec INTEGER NOT NULL) WITHOUT ROWID;"
    /* By volume (called "pack" until schema 4): finds a volume's indexed
     * end at open, and lets fsck and a future compactor walk one volume's
     * frames in order. */
    "CREATE INDEX chunk_pack ON chunk(pack, off);"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    /* 1 -> 2: XXH3-64 of each frame as written, so a read checks that
     * the bytes are still the ones verified (SHA-256) when they came in
     * without paying SHA-256 again; NULL in older rows. */
    "ALTER TABLE chunk ADD COLUMN xxh INTEGER;",
    /* 2 -> 3: frames whose rows garbage collection removed and whose
     * space it has not given back yet (hyd_store_gc.c). */
    "CREATE TABLE IF NOT EXISTS gc_free(pack INTEGER NOT NULL,"
    " off INTEGER NOT NULL,"
    " len INTEGER NOT NULL, PRIMARY KEY(pack, off)) WITHOUT ROWID;",
    /* 3 -> 4: the store's files are volumes now ("pack" is the
     * protocol's word for what --cacheable fetches): the column that
     * names a frame's file is renamed in both tables. Only the schema's
     * text changes, no row is rewritten. The index keeps its name
     * chunk_pack (its column follows the rename): a new name would mean
     * building it again, over a second per million chunks at the first
     * open. The files are renamed after this step commits
     * (store_files_migrate). */
    ("ALTER TABLE chunk RENAME COLUMN pack TO vol;"
     "ALTER TABLE gc_free RENAME COLUMN pack TO vol;"),
    /* 4 -> 5: the bound (hyd_store_evict.c). used: the access number
     * of a chunk's last put or get, least first for eviction (0 in rows
     * from before: the oldest); pin: ids pinned, whether stored yet or
     * not, so a put of one is pinned as it lands. Adding a column with a
     * default rewrites no row; the index is built once, here. */
    ("ALTER TABLE chunk ADD COLUMN used INTEGER NOT NULL DEFAULT 0;"
     "CREATE INDEX chunk_used ON chunk(used);"
     "CREATE TABLE pin(id BLOB PRIMARY KEY) WITHOUT ROWID;"),
};

/* One integer from a one-off query; arg, if not NULL, is bound to ?1. */
static int db_int(hyd_store *s, const char *sql, const int64_t *arg,
		  int64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK && arg)
		rc = sqlite3_bind_int64(st, 1, *arg);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*ret = sqlite3_column_int64(st, 0);
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : base_sqlite_errno(s->db, rc, sql);
}

static int store_migrate(hyd_store *s)
{
	int64_t v = 0;
	char sql[64];
	int rc, r;

	r = db_int(s, "PRAGMA user_version", NULL, &v);
	if (r < 0)
		return r;
	/* A newer ferry wrote it: its rows may mean what we cannot know. */
	if (v > HYD_STORE_SCHEMA)
		return -EPROTO;
	if (v == HYD_STORE_SCHEMA)
		return 0;
	/* Each step durable when it commits (not only in order, as NORMAL
	 * makes it): the files are renamed after step 3 -> 4, and from then
	 * on an older ferry must find a state.db it refuses. */
	rc = sqlite3_exec(s->db, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return base_sqlite_errno(s->db, rc, "migration");
	for (; v < HYD_STORE_SCHEMA; v++) {
		/* Each step and its version bump commit together, so a crash
		 * mid-migration reruns the whole step. */
		rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(s->db, hyd_store_migrations[v], NULL,
					  NULL, NULL);
		/* PRAGMA takes no bound parameters; v is our own counter. */
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld",
			 (long long)(v + 1));
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			r = base_sqlite_errno(s->db, rc, "migration");
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
			return r;
		}
	}
	rc = sqlite3_exec(s->db, "PRAGMA synchronous = NORMAL", NULL, NULL,
			  NULL);
	return rc == SQLITE_OK ? 0 : base_sqlite_errno(s->db, rc, "migration");
}

static int store_db_open(hyd_store *s)
{
	static const char *const pragmas[] = {
	    /* WAL: gets read while a put commits; NORMAL: a commit is not
	     * fsynced, so power loss may drop the last rows, which only
	     * means refetching chunks whose frames are already durable. */
	    "PRAGMA journal_mode = WAL",
	    "PRAGMA synchronous = NORMAL",
	    "PRAGMA foreign_keys = OFF",
	};
	struct {
		sqlite3_stmt **st;
		const char *sql;
	} stmts[] = {
	    {&s->st_find, "SELECT vol, off, frame_len, raw_len, codec, xxh"
			  " FROM chunk WHERE id = ?1"},
	    {&s->st_insert,
	     "INSERT INTO chunk(id, vol, off, frame_len, raw_len, codec,"
	     " xxh, used) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7,"
	     " CASE WHEN EXISTS(SELECT 1 FROM pin WHERE id = ?1)"
	     " THEN ?9 ELSE ?8 END)"},
	    {&s->st_drop, "DELETE FROM chunk WHERE id = ?1 AND vol = ?2"
			  " AND off = ?3"},
	    {&s->st_meta_get, "SELECT value FROM meta WHERE key = ?1"},
	    {&s->st_meta_set, "INSERT INTO meta(key, value) VALUES(?1, ?2)"
			      " ON CONFLICT(key) DO UPDATE"
			      " SET value = excluded.value"},
	};
	char path[4096];
	int64_t v;
	size_t i;
	int n, rc, r;

	n = snprintf(path, sizeof(path), "%s/state.db", s->dir);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	/* NOMUTEX: every use is already under s->mu. */
	rc = sqlite3_open_v2(path, &s->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				 SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK)
		return base_sqlite_errno(s->db, rc, "open");
	sqlite3_busy_timeout(s->db, 5000);
	for (i = 0; i < sizeof(pragmas) / sizeof(pragmas[0]); i++) {
		rc = sqlite3_exec(s->db, pragmas[i], NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			return base_sqlite_errno(s->db, rc, pragmas[i]);
	}
	r = store_migrate(s);
	if (r < 0)
		return r;
	for (i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		rc = sqlite3_prepare_v3(s->db, stmts[i].sql, -1,
					SQLITE_PREPARE_PERSISTENT, stmts[i].st,
					NULL);
		if (rc != SQLITE_OK)
			return base_sqlite_errno(s->db, rc, stmts[i].sql);
	}
	/* Counters are kept up to date by put and drop; one scan at open is
	 * cheaper than an aggregate on every stats call. */
	r = db_int(s, "SELECT COUNT(*) FROM chunk", NULL, &v);
	if (r == 0) {
		s->st.chunks = (uint64_t)v;
		r = db_int(s, "SELECT COALESCE(SUM(raw_len), 0) FROM chunk",
			   NULL, &v);
	}
	if (r == 0) {
		s->st.raw_bytes = (uint64_t)v;
		r = db_int(s, "SELECT COALESCE(SUM(frame_len), 0) FROM chunk",
			   NULL, &v);
	}
	if (r == 0)
		s->st.stored_bytes = (uint64_t)v;
	if (r == 0)
		r = db_int(s,
			   "SELECT COALESCE(SUM((frame_len + 4095) / 4096), 0)"
			   " FROM chunk",
			   NULL, &v);
	if (r == 0)
		s->st.held_bytes = (uint64_t)v * HYD_BLOCK;
	return r;
}

/* Largest volume number among the files in volumes/ (0 if none), and how many
 * volume files there are. */
static int vols_scan(hyd_store *s, uint32_t *ret_hi, uint64_t *ret_n)
{
	struct dirent *de;
	DIR *d;
	int fd;

	*ret_hi = 0;
	*ret_n = 0;
	fd = dup(s->vols_fd);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d)) != NULL) {
		uint32_t p = vol_parse(de->d_name);

		if (p == 0)
			continue;
		(*ret_n)++;
		if (p > *ret_hi)
			*ret_hi = p;
	}
	closedir(d);
	return 0;
}

/*
 * Crash recovery: make the newest volume end where its last indexed frame
 * ends. Why this is safe, and why the newest volume is the only one to check:
 *  - A row commits only after its frame is fdatasync()ed, so every row
 *    points at durable, whole bytes; bytes past the furthest indexed end
 *    belong to no row (a put that died between write and commit, or a row
 *    lost with power under synchronous=NORMAL) and may go.
 *  - Frames are appended only to the newest volume; a volume is never written
 *    again once a newer one exists. An older volume can hold dead bytes
 *    (above, or a row dropped as corrupt) but they are never appended to,
 *    never read, and never confused with a frame, so leaving them is safe.
 *  - The current volume is max(newest file, newest indexed volume), and the
 * next frame goes at max(file size, indexed end): a new frame never overlaps an
 * indexed one even if files were damaged behind our back.
 *  - Nobody else writes: we hold the lock, and nothing was written yet.
 */
static int store_recover(hyd_store *s)
{
	char name[32];
	uint32_t hi_file;
	uint64_t n_files, size = 0;
	int64_t hi_idx = 0, end_idx = 0, vol;
	struct stat sb;
	int r;

	r = vols_scan(s, &hi_file, &n_files);
	if (r < 0)
		return r;
	s->st.vols = n_files;
	r = db_int(s, "SELECT COALESCE(MAX(vol), 0) FROM chunk", NULL, &hi_idx);
	if (r < 0)
		return r;
	if (hi_idx < 0 || hi_idx > HYD_VOL_MAX)
		return -EIO;
	s->cur_vol = hi_file > (uint32_t)hi_idx ? hi_file : (uint32_t)hi_idx;
	if (s->cur_vol == 0)
		return 0;
	vol = s->cur_vol;
	r = db_int(s,
		   "SELECT COALESCE(MAX(off + frame_len), 0) FROM chunk"
		   " WHERE vol = ?1",
		   &vol, &end_idx);
	if (r < 0)
		return r;
	if (s->cur_vol == hi_file) {
		r = hyd_store__vol_name(s->cur_vol, name, sizeof(name));
		if (r < 0)
			return r;
		s->cur_fd = openat(s->vols_fd, name, O_WRONLY | O_CLOEXEC);
		if (s->cur_fd < 0 || fstat(s->cur_fd, &sb) < 0)
			return -errno;
		size = (uint64_t)sb.st_size;
		if (size > (uint64_t)end_idx) {
			/* A crash between a frame's write and its index row:
			 * bytes nothing points at. */
			base_warn(
			    "dropping unindexed volume tail dir=%s vol=%u "
			    "bytes=%llu",
			    s->dir, s->cur_vol,
			    (unsigned long long)(size - (uint64_t)end_idx));
			if (ftruncate(s->cur_fd, (off_t)end_idx) < 0 ||
			    fsync(s->cur_fd) < 0)
				return -errno;
			size = (uint64_t)end_idx;
		}
	}
	s->cur_end = size > (uint64_t)end_idx ? size : (uint64_t)end_idx;
	return 0;
}

/* renameat2(RENAME_NOREPLACE), or where the file system cannot (EINVAL):
 * a check, then rename (we hold the store's lock). 0 or -errno; -EEXIST
 * when `to` exists. */
static int rename_noreplace(int dfd, const char *from, const char *to)
{
	struct stat sb;

	if (renameat2(dfd, from, dfd, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	if (fstatat(dfd, to, &sb, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	if (errno != ENOENT)
		return -errno;
	return renameat(dfd, from, dfd, to) == 0 ? 0 : -errno;
}

/* One pass over packs/: rename each NNNNNNNN.pack to NNNNNNNN.vol. Counts
 * the renames in *ret_n. */
static int packs_rename_pass(hyd_store *s, int pfd, unsigned *ret_n)
{
	char name[32];
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	fd = dup(pfd);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while (r == 0 && (de = readdir(d)) != NULL) {
		uint32_t n = name_num(de->d_name, ".pack");

		if (n == 0)
			continue;
		r = hyd_store__vol_name(n, name, sizeof(name));
		if (r == 0)
			r = rename_noreplace(pfd, de->d_name, name);
		if (r == -EEXIST)
			base_error("the store holds volume %u under two "
				   "names, packs/%s and packs/%s: move the one "
				   "that is not this cache's out dir=%s",
				   n, de->d_name, name, s->dir);
		if (r == 0)
			(*ret_n)++;
	}
	closedir(d);
	return r;
}

/*
 * The store's files were called packs until schema 4: CACHEDIR/packs/
 * NNNNNNNN.pack. A cache made then is moved to CACHEDIR/volumes/
 * NNNNNNNN.vol here, at open, holding the lock, after store_migrate:
 *   1. every packs/N.pack is renamed packs/N.vol;
 *   2. packs/ is fsynced: the new names are durable;
 *   3. packs/ is renamed volumes/;
 *   4. CACHEDIR is fsynced.
 * A crash anywhere leaves a state the next open finishes:
 *  - before or during 1: packs/ holds N.pack and N.vol files (a rename
 *    is atomic: each file has one of its names); the next open renames
 *    what is left, whichever names a power loss brought back;
 *  - between 2 and 4: packs/ holds N.vol files only (or, after 3,
 *    volumes/ does, unless power loss undid the directory rename): the
 *    next open renames the directory, or finds nothing to do.
 * Nothing else reads packs/ meanwhile (vols_fd is opened afterwards), so
 * which name a file has then does not matter.
 * The index goes first (schema 3 -> 4, made durable by store_migrate):
 * a crash between the two steps leaves a schema 4 index over packs/,
 * which this finishes; the reverse order would leave, for a while, an
 * index that an older ferry accepts over files it cannot find (it would
 * drop their rows as lost). Downgrading is not supported, but this way an
 * older ferry refuses the cache (schema) instead of emptying it.
 * packs/ and volumes/ never both exist by this code's doing. When they do
 * (a copy, a restore, a hand), the store refuses to guess which one the
 * index means, with one exception: an empty packs/, which an older ferry
 * makes before it refuses a newer state.db, is removed.
 */
static int store_files_migrate(hyd_store *s, int dfd)
{
	unsigned total = 0, n;
	struct stat sb;
	int pfd, r;

	if (fstatat(dfd, "packs", &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstatat(dfd, "volumes", &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		if (unlinkat(dfd, "packs", AT_REMOVEDIR) == 0)
			return fsync(dfd) == 0 ? 0 : -errno;
		if (errno != ENOTEMPTY && errno != EEXIST)
			return -errno;
		base_error("the cache holds both packs/ (the store's volumes "
			   "under their former name) and volumes/: refusing "
			   "to guess which one its index means; move the one "
			   "that is not this cache's out dir=%s",
			   s->dir);
		return -EEXIST;
	} else if (errno != ENOENT) {
		return -errno;
	}
	pfd = openat(dfd, "packs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	/* Until a pass renames nothing: renaming entries while a readdir
	 * walks the directory may make it skip some. */
	do {
		n = 0;
		r = packs_rename_pass(s, pfd, &n);
		total += n;
	} while (r == 0 && n > 0);
	if (r == 0 && fsync(pfd) < 0)
		r = -errno;
	close(pfd);
	if (r == 0)
		r = rename_noreplace(dfd, "packs", "volumes");
	if (r == 0 && fsync(dfd) < 0)
		r = -errno;
	if (r == 0)
		base_info("store files renamed packs/NNNNNNNN.pack -> "
			  "volumes/NNNNNNNN.vol dir=%s files=%u",
			  s->dir, total);
	return r;
}

/* Create volumes/ and catalogs/ (making a new one durable) and keep an fd
 * on volumes/. */
static int store_subdirs(hyd_store *s, int dfd)
{
	static const char *const sub[] = {"volumes", "catalogs"};
	size_t i;
	int made = 0;

	for (i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
		if (mkdirat(dfd, sub[i], 0700) == 0)
			made = 1;
		else if (errno != EEXIST)
			return -errno;
	}
	if (made && fsync(dfd) < 0)
		return -errno;
	s->vols_fd = openat(dfd, "volumes", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return s->vols_fd < 0 ? -errno : 0;
}

static uint64_t roll_bytes_from_env(void)
{
	/* The former name too, so scripts written for it keep working. */
	const char *name = "FERRY_VOLUME_ROLL_BYTES";
	const char *e = getenv(name);
	uint64_t v;

	if (!e || !*e) {
		name = "FERRY_PACK_ROLL_BYTES";
		e = getenv(name);
	}
	if (!e || !*e)
		return HYD_VOL_ROLL_BYTES;
	if (base_parse_u64(e, 1, HYD_VOL_ROLL_BYTES * 16, &v) < 0) {
		base_warn("ignoring %s=%s", name, e);
		return HYD_VOL_ROLL_BYTES;
	}
	return v;
}

int hyd_store_open(const char *dir, uint32_t max_raw, hyd_store **ret_s)
{
	hyd_store *s = NULL;
	size_t i;
	int dfd, r;

	if (!dir || !*dir || !ret_s)
		return -EINVAL;
	*ret_s = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->lock_fd = s->vols_fd = s->cur_fd = -1;
	for (i = 0; i < HYD_FD_CACHE; i++)
		s->fds[i].fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->emu, NULL);
	pthread_rwlock_init(&s->place_lk, NULL);
	pthread_mutex_init(&s->wmu, NULL);
	r = hyd_store__put_init(s);
	if (r < 0) {
		hyd_store_close(s);
		return r;
	}
	hyd_store_set_max_raw(s, max_raw);
	s->roll_bytes = roll_bytes_from_env();
	s->dir = strdup(dir);
	if (!s->dir) {
		r = -ENOMEM;
		goto out;
	}
	r = base_mkdir_p(dir, 0700);
	if (r == 0)
		r = store_lock(s);
	if (r < 0)
		goto out;
	/* Only now, holding the lock, touch anything else in the dir: the
	 * index (migrated first), then the files (a cache from before
	 * volumes moves to them: store_files_migrate). */
	r = store_db_open(s);
	if (r < 0)
		goto out;
	dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		r = -errno;
		goto out;
	}
	r = store_files_migrate(s, dfd);
	if (r == 0)
		r = store_subdirs(s, dfd);
	close(dfd);
	if (r == 0)
		r = store_recover(s);
	/* A collection a crash cut short: its frames go before anything is
	 * appended. */
	if (r == 0)
		r = hyd_store__gc_recover(s);
	if (r == 0)
		r = hyd_store__evict_init(s);
out:
	if (r < 0) {
		hyd_store_close(s);
		return r;
	}
	*ret_s = s;
	return 0;
}

void hyd_store_close(hyd_store *s)
{
	size_t i;

	if (!s)
		return;
	if (s->gcv_ready)
		hyd_store__put_stop(s);
	hyd_store__evict_fini(s);
	if (s->db)
		hyd_store__read_end_locked(s);
	sqlite3_finalize(s->st_find);
	sqlite3_finalize(s->st_insert);
	sqlite3_finalize(s->st_drop);
	sqlite3_finalize(s->st_meta_get);
	sqlite3_finalize(s->st_meta_set);
	if (s->db)
		sqlite3_close(s->db);
	for (i = 0; i < HYD_FD_CACHE; i++)
		if (s->fds[i].fd >= 0)
			close(s->fds[i].fd);
	for (i = 0; i < s->n_readers; i++) {
		frame_coder_free(s->readers[i]->coder);
		free(s->readers[i]->buf);
		free(s->readers[i]);
	}
	hyd_store__put_fini(s);
	if (s->vols_fd >= 0)
		close(s->vols_fd);
	/* Closing the last fd on the lock file releases the flock. */
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->emu);
	pthread_mutex_destroy(&s->wmu);
	pthread_rwlock_destroy(&s->place_lk);
	free(s->dir);
	free(s);
}

const char *hyd_store_dir(const hyd_store *s)
{
	return s->dir;
}

void hyd_store_set_max_raw(hyd_store *s, uint32_t max_raw)
{
	/* 0 (catalog not known yet) and anything larger mean the hard limit
	 * every catalog is held to. */
	if (max_raw == 0 || max_raw > CHUNK_MAX_LIMIT)
		max_raw = CHUNK_MAX_LIMIT;
	__atomic_store_n(&s->max_raw, max_raw, __ATOMIC_RELAXED);
}

/* Open the read session if none is. In WAL mode every statement outside a
 * transaction begins and ends a read transaction of its own: two to four
 * fcntl locks on the shared-memory file and an fstat, about half the cost
 * of a lookup. If BEGIN fails the lookup runs on its own, as before. */
static void read_begin_locked(hyd_store *s)
{
	if (s->in_read || !sqlite3_get_autocommit(s->db))
		return;
	s->in_read =
	    sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
}

void hyd_store__read_end_locked(hyd_store *s)
{
	if (!s->in_read)
		return;
	s->in_read = 0;
	/* A read transaction has nothing to lose: if COMMIT fails, ROLLBACK
	 * ends it. */
	if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Look id up. 1 with *ret filled (if ret), 0 when absent, -errno. */
int hyd_store__find_locked(hyd_store *s, const chunk_id *id,
			   struct hyd_loc *ret)
{
	sqlite3_stmt *st = s->st_find;
	int rc, r;

	read_begin_locked(s);
	sqlite3_bind_blob(st, 1, id->b, CHUNK_ID_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		int64_t vol = sqlite3_column_int64(st, 0);
		int64_t off = sqlite3_column_int64(st, 1);
		int64_t flen = sqlite3_column_int64(st, 2);
		int64_t rlen = sqlite3_column_int64(st, 3);
		int64_t codec = sqlite3_column_int64(st, 4);

		r = 1;
		/* Rows are ours, but a damaged state.db must not turn into a
		 * huge allocation or a negative offset. */
		if (vol <= 0 || vol > HYD_VOL_MAX || off < 0 ||
		    flen < FRAME_HDR_LEN || flen > UINT32_MAX || rlen <= 0 ||
		    rlen > UINT32_MAX || codec < 0 || codec > UINT8_MAX)
			r = -EIO;
		else if (ret) {
			ret->vol = (uint32_t)vol;
			ret->off = (uint64_t)off;
			ret->frame_len = (uint32_t)flen;
			ret->raw_len = (uint32_t)rlen;
			ret->codec = (uint8_t)codec;
			ret->has_xxh =
			    sqlite3_column_type(st, 5) == SQLITE_INTEGER;
			ret->xxh = ret->has_xxh
				       ? (uint64_t)sqlite3_column_int64(st, 5)
				       : 0;
		}
	} else if (rc == SQLITE_DONE) {
		r = 0;
	} else {
		r = base_sqlite_errno(s->db, rc, "chunk lookup");
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return r;
}

int hyd_store_has(hyd_store *s, const chunk_id *id)
{
	int r;

	if (!s || !id)
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	r = hyd_store__find_locked(s, id, NULL);
	pthread_mutex_unlock(&s->mu);
	if (r == 0)
		r = hyd_store__placed_has(s, id);
	return r == 0 ? hyd_store__lower_has(s, id) : r;
}

/* A read fd on volume vol, from the cache when possible. *ret_slot is -1 when
 * the fd is not cached (every slot busy): release closes it then. */
int hyd_store__fd_acquire_locked(hyd_store *s, uint32_t vol, int *ret_slot,
				 int *ret_fd)
{
	struct hyd_vol_fd *victim = NULL;
	char name[32];
	size_t i;
	int fd, r;

	for (i = 0; i < HYD_FD_CACHE; i++) {
		struct hyd_vol_fd *f = &s->fds[i];

		if (f->fd >= 0 && f->vol == vol) {
			f->refs++;
			f->used = ++s->fd_clock;
			*ret_slot = (int)i;
			*ret_fd = f->fd;
			return 0;
		}
		if (f->refs == 0 &&
		    (!victim || f->fd < 0 ||
		     (victim->fd >= 0 && f->used < victim->used)))
			victim = f;
	}
	r = hyd_store__vol_name(vol, name, sizeof(name));
	if (r < 0)
		return r;
	fd = openat(s->vols_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	*ret_slot = -1;
	if (!victim)
		return 0;
	if (victim->fd >= 0)
		close(victim->fd);
	victim->vol = vol;
	victim->fd = fd;
	victim->refs = 1;
	victim->used = ++s->fd_clock;
	*ret_slot = (int)(victim - s->fds);
	return 0;
}

void hyd_store__fd_release_locked(hyd_store *s, int slot, int fd)
{
	if (slot >= 0)
		s->fds[slot].refs--;
	else if (fd >= 0)
		close(fd);
}

/* A reader for one get, from the pool or new; NULL only when out of
 * memory. */
static struct hyd_store_reader *reader_take_locked(hyd_store *s)
{
	struct hyd_store_reader *rd;

	if (s->n_readers > 0)
		return s->readers[--s->n_readers];
	rd = calloc(1, sizeof(*rd));
	if (rd)
		rd->coder = frame_coder_new();
	return rd;
}

static void reader_put_locked(hyd_store *s, struct hyd_store_reader *rd)
{
	if (!rd)
		return;
	/* A frame of a catalog with huge chunks is not worth keeping. */
	if (rd->cap > HYD_READER_KEEP) {
		free(rd->buf);
		rd->buf = NULL;
		rd->cap = 0;
	}
	if (s->n_readers < HYD_READER_POOL) {
		s->readers[s->n_readers++] = rd;
		return;
	}
	frame_coder_free(rd->coder);
	free(rd->buf);
	free(rd);
}

/* Remove the row of a corrupt frame, if it is still the one we read (a
 * concurrent drop and re-put may have replaced it). Logs once per row. */
static void drop_locked(hyd_store *s, const chunk_id *id,
			const struct hyd_loc *loc)
{
	sqlite3_stmt *st = s->st_drop;
	char hex[CHUNK_ID_HEX_LEN + 1];
	int rc, changed = 0;

	/* The row and the complete mark (no longer complete for any
	 * catalog: the next mount counts) go in one transaction, so no crash
	 * leaves a mark over a missing chunk. */
	hyd_store__read_end_locked(s);
	rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_blob(st, 1, id->b, CHUNK_ID_LEN, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, loc->vol);
		sqlite3_bind_int64(st, 3, (int64_t)loc->off);
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		changed = sqlite3_changes(s->db) == 1;
	}
	if (rc == SQLITE_OK && changed)
		rc = sqlite3_exec(
		    s->db,
		    "DELETE FROM meta WHERE key = '" HYD_STORE_META_COMPLETE
		    "'",
		    NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		base_log_err(BASE_LOG_WARN,
			     base_sqlite_errno(s->db, rc, "drop corrupt chunk"),
			     "cannot drop a corrupt chunk's row dir=%s",
			     s->dir);
		if (!sqlite3_get_autocommit(s->db))
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		return;
	}
	if (!changed)
		return;
	s->st.chunks--;
	s->st.raw_bytes -= loc->raw_len;
	s->st.stored_bytes -= loc->frame_len;
	s->st.held_bytes -= HYD_HELD(loc->frame_len);
	chunk_id_to_hex(id, hex);
	base_warn("corrupt frame dropped from the store chunk=%s vol=%u "
		  "off=%llu dir=%s",
		  hex, loc->vol, (unsigned long long)loc->off, s->dir);
}

/* The checksum a row keeps of its frame: XXH3-64 of the payload seeded
 * with XXH3-64 of the header, so the two parts need not be contiguous. */
uint64_t hyd_store__frame_sum(const uint8_t *hdr, const void *payload,
			      size_t len)
{
	return XXH3_64bits_withSeed(payload, len,
				    XXH3_64bits(hdr, FRAME_HDR_LEN));
}

/* Read a raw frame: its header and payload in one preadv, the payload
 * straight into out, which is what frame_decode would copy it to. Bytes
 * read, short only at end of file, or -errno. */
static ssize_t raw_frame_pread(int fd, uint8_t *hdr, void *out, size_t len,
			       uint64_t off)
{
	struct iovec iov[2] = {{hdr, FRAME_HDR_LEN}, {out, len}};
	size_t got, more;
	ssize_t n;
	int r;

	do
		n = preadv(fd, iov, 2, (off_t)off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n == FRAME_HDR_LEN + len)
		return n;
	/* Short: finish piece by piece, which also tells EOF from a
	 * signal. */
	r = base_pread_full(fd, hdr, FRAME_HDR_LEN, off, &got);
	if (r < 0 || got != FRAME_HDR_LEN)
		return r < 0 ? r : (ssize_t)got;
	r = base_pread_full(fd, out, len, off + FRAME_HDR_LEN, &more);
	return r < 0 ? r : (ssize_t)(got + more);
}

/* pread one frame and turn it into verified raw bytes (out has room for
 * loc->raw_len, checked by the caller). -EBADMSG for anything wrong with
 * what rests on disk. Every frame was decoded and its SHA-256 checked
 * before it was put; a row with a checksum (schema 2) then only needs the
 * frame bytes to be those same bytes: XXH3-64 over them (~30 GB/s) stands
 * in for SHA-256 over the decoded chunk (~1-2 GB/s), and decoding the same
 * bytes gives the same, verified chunk. Rows without one (written by an
 * older build) are checked by SHA-256. `ferry verify CACHE` re-hashes
 * everything with SHA-256 either way. */
static int frame_read(const struct hyd_loc *loc, int fd,
		      struct hyd_store_reader *rd, uint32_t max_raw,
		      const chunk_id *id, void *out, size_t *ret_len)
{
	uint8_t hdr[FRAME_HDR_LEN];
	struct frame_info fi;
	size_t raw_len = 0, got;
	ssize_t n;
	int r;

	if (loc->frame_len > frame_bound(max_raw))
		return -EBADMSG;
	if (loc->codec == FRAME_RAW &&
	    loc->frame_len == FRAME_HDR_LEN + (uint64_t)loc->raw_len) {
		n = raw_frame_pread(fd, hdr, out, loc->raw_len, loc->off);
		if (n < 0)
			return (int)n;
		/* A frame cut short: the volume lost bytes the index promised.
		 */
		if ((size_t)n < loc->frame_len)
			return -EBADMSG;
		/* The same checks frame_decode makes of a raw frame. */
		r = frame_header_parse(hdr, FRAME_HDR_LEN, max_raw, &fi);
		if (r == 0 &&
		    (fi.codec != FRAME_RAW || fi.frame_len != loc->frame_len ||
		     fi.raw_len != loc->raw_len))
			r = -EBADMSG;
		if (r < 0)
			return r;
		raw_len = fi.raw_len;
		if (loc->has_xxh) {
			if (hyd_store__frame_sum(hdr, out, raw_len) != loc->xxh)
				return -EBADMSG;
			*ret_len = raw_len;
			return 0;
		}
	} else {
		if (rd->cap < loc->frame_len) {
			free(rd->buf);
			rd->cap = 0;
			rd->buf = malloc(loc->frame_len);
			if (!rd->buf)
				return -ENOMEM;
			rd->cap = loc->frame_len;
		}
		r = base_pread_full(fd, rd->buf, loc->frame_len, loc->off,
				    &got);
		if (r < 0)
			return r;
		if (got < loc->frame_len)
			return -EBADMSG;
		r = frame_header_parse(rd->buf, loc->frame_len, max_raw, &fi);
		if (r == 0 && (fi.frame_len != loc->frame_len ||
			       fi.raw_len != loc->raw_len))
			r = -EBADMSG;
		if (r < 0)
			return r;
		if (loc->has_xxh &&
		    hyd_store__frame_sum(rd->buf, rd->buf + FRAME_HDR_LEN,
					 loc->frame_len - FRAME_HDR_LEN) !=
			loc->xxh)
			return -EBADMSG;
		r = frame_decode(rd->coder, rd->buf, loc->frame_len, max_raw,
				 out, loc->raw_len, &raw_len);
		if (r == 0 && raw_len != loc->raw_len)
			r = -EBADMSG;
		if (r < 0)
			return r;
		if (loc->has_xxh) {
			*ret_len = raw_len;
			return 0;
		}
	}
	r = chunk_id_verify(id, out, raw_len);
	if (r == 0)
		*ret_len = raw_len;
	return r;
}

int hyd_store_get(hyd_store *s, const chunk_id *id, void *out, size_t cap,
		  size_t *ret_len)
{
	struct hyd_store_reader *rd = NULL;
	struct hyd_loc loc;
	int slot = -1, fd = -1, found = 0, r;

	if (!s || !id || (!out && cap) || !ret_len)
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	r = hyd_store__find_locked(s, id, &loc);
	if (r == 0) {
		pthread_mutex_unlock(&s->mu);
		r = hyd_store__placed_get(s, id, out, cap, ret_len);
		return r == -ENOENT
			   ? hyd_store__lower_get(s, id, out, cap, ret_len)
			   : r;
	} else if (r > 0 && loc.raw_len > cap) {
		r = -ENOBUFS;
	} else if (r > 0) {
		rd = reader_take_locked(s);
		r = rd ? hyd_store__fd_acquire_locked(s, loc.vol, &slot, &fd)
		       : -ENOMEM;
		/* The index names a volume that is gone: the frame is lost. */
		if (r == -ENOENT)
			r = -EBADMSG;
		found = 1;
		/* eviction leaves this frame alone until it is read */
		hyd_store__touch_locked(s, id);
		hyd_store__busy_locked(s, id, 1);
	}
	pthread_mutex_unlock(&s->mu);
	/* -EBADMSG from the lookup itself is a damaged state.db (SQLite
	 * CORRUPT): reported as it is, but there is no row to drop. */
	if (r < 0 && (r != -EBADMSG || !found)) {
		if (rd) {
			pthread_mutex_lock(&s->mu);
			if (found)
				hyd_store__busy_locked(s, id, 0);
			reader_put_locked(s, rd);
			pthread_mutex_unlock(&s->mu);
		}
		return r;
	}

	/* The frame is immutable once indexed, so reading it needs no lock. */
	if (r == 0)
		r = frame_read(&loc, fd, rd,
			       __atomic_load_n(&s->max_raw, __ATOMIC_RELAXED),
			       id, out, ret_len);

	pthread_mutex_lock(&s->mu);
	hyd_store__fd_release_locked(s, slot, fd);
	hyd_store__busy_locked(s, id, 0);
	reader_put_locked(s, rd);
	if (r == -EBADMSG)
		drop_locked(s, id, &loc);
	pthread_mutex_unlock(&s->mu);
	return r;
}

int hyd_store_stats(hyd_store *s, struct hyd_store_stats *ret)
{
	uint64_t pending;

	if (!s || !ret)
		return -EINVAL;
	pthread_mutex_lock(&s->wmu);
	pending = hyd_store__pending_locked(s);
	pthread_mutex_unlock(&s->wmu);
	pthread_mutex_lock(&s->mu);
	hyd_store__pinned_count_locked(s);
	*ret = s->st;
	ret->pending_bytes = pending;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int hyd_store_meta_get(hyd_store *s, const char *key, char *buf, size_t cap)
{
	sqlite3_stmt *st;
	int rc, r;

	if (!s || !key || (!buf && cap))
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	st = s->st_meta_get;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *v = sqlite3_column_text(st, 0);
		size_t n = (size_t)sqlite3_column_bytes(st, 0);

		if (!v && n == 0)
			v = (const unsigned char *)"";
		if (!v) {
			r = -ENOMEM;
		} else if (n + 1 > cap) {
			r = -ERANGE;
		} else {
			memcpy(buf, v, n);
			buf[n] = '\0';
			r = 0;
		}
	} else if (rc == SQLITE_DONE) {
		r = -ENOENT;
	} else {
		r = base_sqlite_errno(s->db, rc, "meta get");
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	pthread_mutex_unlock(&s->mu);
	return r;
}

int hyd_store_meta_set(hyd_store *s, const char *key, const char *value)
{
	sqlite3_stmt *st;
	int rc, r = 0;

	if (!s || !key || !value || strlen(value) > HYD_META_VALUE_MAX)
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	hyd_store__read_end_locked(s);
	st = s->st_meta_set;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		r = base_sqlite_errno(s->db, rc, "meta set");
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	pthread_mutex_unlock(&s->mu);
	return r;
}
