/*
 * hydrator/sync/hyd_place.c — --into's placement: the chunks a mount
 * fetches land as plain bytes in DIR, not in the store.
 *
 * A catalog number names one content in every generation (docs/catalog.md),
 * so a file's bytes are kept by its number: DIR/.ferry-into/INO, the part,
 * made at the file's size (what is never written stays a hole). Each
 * verified chunk the fetcher receives is written at every offset where a
 * registered generation has it (a chunk that repeats in the tree is fetched
 * once and written from memory to each place). The parts' data is
 * made durable (a syncfs of DIR's file system) before the rows that
 * record its ranges commit (one flusher thread, for every placement
 * waiting at once), so a recorded range always
 * rests on disk; a crash between the two loses only the record, and the
 * chunk is fetched again. A range row keeps the XXH3-64 of its bytes, and
 * every read checks it (as the store checks its frames): a range that no
 * longer matches (someone wrote into DIR) is forgotten and fetched again,
 * never served.
 *
 * The landing renames a part whose ranges are all recorded into its path
 * (hyd_place_adopt), after reading it back against the record; from then
 * on the part's rows point at that path (hyd_place_landed_file, also for a
 * file the landing wrote itself from the store), so reads of landed bytes
 * come from DIR's own files with no decode. The numbers no catalog in the
 * cache names any more are forgotten when a generation lands (their parts
 * removed). CACHEDIR/into.db (SQLite, WAL):
 *   want(ino, off, len, id)  the chunks of the registered generations
 *   part(ino, size, path)    path NULL: the part; else DIR-relative
 *   placed(ino, off, len, xxh)  ranges on disk and checked
 *   gen(gen)                 the generations registered
 *   unknown(ino)             files whose manifest the catalog lacks: their
 *                            rows come from its overlay as the mount
 *                            learns them (looked for at most every
 *                            IMPORT_NS, when a chunk is wanted nowhere)
 * Its size grows with the tree's chunk rows, once (not per generation).
 *
 * Test hook: FERRY_PLACE_RECORD_DELAY_MS holds the flusher between a
 * round's sync and its record (a crash there is the case to test).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define NFD 64		/* part fds kept open */
#define MAX_PLACES 4096 /* places one chunk is written to at most */
#define BUSY_MS 60000
#define IMPORT_NS 200000000ull

struct pfd {
	uint64_t ino;
	int fd; /* -1: empty */
	int rw;
	unsigned refs;
	uint64_t used;
};

struct pend {
	uint64_t ino, off, xxh;
	uint32_t len;
};

/* The chunks of a flush round: written, not recorded yet. Their puts are
 * answered at once (the fetcher goes on while the disk catches up), and
 * has/get find them here until their rows commit. Open addressing; the
 * hole id (never placed) marks a free slot. */
#define IDSET_CAP (1u << 14)
struct idslot {
	chunk_id id;
	uint64_t ino, off, xxh;
	uint32_t len;
};
struct idset {
	struct idslot *v; /* IDSET_CAP */
	uint32_t n;
};

static struct idslot *idset_find(const struct idset *s, const chunk_id *id,
				 int *found)
{
	uint32_t h;

	memcpy(&h, id, sizeof(h));
	for (uint32_t i = 0; i < IDSET_CAP; i++) {
		struct idslot *e = &s->v[(h + i) & (IDSET_CAP - 1)];

		if (chunk_id_is_hole(&e->id) ||
		    !memcmp(&e->id, id, sizeof(*id))) {
			*found = !chunk_id_is_hole(&e->id);
			return e;
		}
	}
	*found = 0;
	return NULL;
}

/* 0 when id is in s (added now or before), -ENOSPC when s is half full. */
static int idset_add(struct idset *s, const struct idslot *add)
{
	struct idslot *e;
	int found;

	if (s->n >= IDSET_CAP / 2)
		return -ENOSPC;
	e = idset_find(s, &add->id, &found);
	if (!e)
		return -ENOSPC;
	if (!found) {
		*e = *add;
		s->n++;
	}
	return 0;
}

static void idset_clear(struct idset *s)
{
	if (s->n)
		memset(s->v, 0, IDSET_CAP * sizeof(*s->v));
	s->n = 0;
}

struct pcb {
	hyd_store_put_cb cb;
	void *arg;
};

struct hyd_place {
	char dir[4096];
	int dirfd;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sqlite3 *db;
	sqlite3_stmt *st_want, *st_find, *st_ins, *st_part, *st_forget,
	    *st_count, *st_setpath, *st_ranges;
	struct pfd fds[NFD];
	uint64_t clock;
	struct pend *pend;
	size_t npend, cpend;
	struct pcb *cbs;
	size_t ncb, ccb;
	int stop, started;
	int ov_attached;    /* the current generation's overlay, as ov */
	uint64_t ov_gen;    /* its generation */
	char ov_path[4096]; /* "": none */
	/* test hook FERRY_PLACE_RECORD_DELAY_MS: the flusher waits this
	 * long between the data's sync and its record */
	unsigned record_delay_ms;
	unsigned warned;
	int recheck;	      /* ranges recorded by an earlier run: read back */
	uint64_t last_import; /* base_now_ns */
	pthread_t th;
	struct hyd_place_stats st;
	struct idset cur, flushing; /* this round's chunks, and the last's */
};

/* Only this hydrator (holding the cache's lock) opens the record: with
 * the exclusive locking mode a lookup takes no file lock. Its own file
 * only: the catalogs and the overlay it attaches are the mount's too. */
static const char schema[] =
    "PRAGMA main.locking_mode=EXCLUSIVE;"
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS want(ino INTEGER NOT NULL,"
    " off INTEGER NOT NULL, len INTEGER NOT NULL, id BLOB NOT NULL,"
    " PRIMARY KEY(ino, off)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS want_id ON want(id);"
    "CREATE TABLE IF NOT EXISTS part(ino INTEGER PRIMARY KEY,"
    " size INTEGER NOT NULL, path BLOB);"
    "CREATE TABLE IF NOT EXISTS placed(ino INTEGER NOT NULL,"
    " off INTEGER NOT NULL, len INTEGER NOT NULL, xxh INTEGER NOT NULL,"
    " PRIMARY KEY(ino, off)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS gen(gen INTEGER PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS unknown(ino INTEGER PRIMARY KEY);";

static int db_err(hyd_place *p, int rc, const char *what)
{
	base_error("--into: %s: %s (CACHEDIR/" HYD_PLACE_DB ")", what,
		   sqlite3_errmsg(p->db));
	return rc == SQLITE_FULL ? -ENOSPC : -EIO;
}

static int prep(hyd_place *p, const char *sql, sqlite3_stmt **st)
{
	int rc = sqlite3_prepare_v3(p->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
				    st, NULL);

	return rc == SQLITE_OK ? 0 : db_err(p, rc, "cannot prepare");
}

static int exec(hyd_place *p, const char *sql)
{
	int rc = sqlite3_exec(p->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : db_err(p, rc, sql);
}

static void part_name(uint64_t ino, char *buf, size_t cap)
{
	snprintf(buf, cap, HYD_PLACE_PARTS "/%" PRIu64, ino);
}

/* The slot of ino's fd, opened when needed; refs taken. rw: for
 * placing (only a part, made at its size when missing). -ENOENT: none
 * (or, rw, the file is landed already), -errno. Under mu. */
static int fd_get(hyd_place *p, uint64_t ino, int rw, int *ret_slot)
{
	char name[64];
	const char *path = NULL;
	struct stat sb;
	int i, victim = -1, fd, r;
	uint64_t size = 0;

	for (i = 0; i < NFD; i++) {
		struct pfd *f = &p->fds[i];

		if (f->fd >= 0 && f->ino == ino && (f->rw || !rw)) {
			f->refs++;
			f->used = ++p->clock;
			*ret_slot = i;
			return 0;
		}
		if (f->refs == 0 &&
		    (victim < 0 || f->fd < 0 ||
		     (p->fds[victim].fd >= 0 && f->used < p->fds[victim].used)))
			victim = i;
	}
	if (victim < 0)
		return -EMFILE;
	sqlite3_bind_int64(p->st_part, 1, (sqlite3_int64)ino);
	r = sqlite3_step(p->st_part);
	if (r == SQLITE_ROW) {
		size = (uint64_t)sqlite3_column_int64(p->st_part, 0);
		path = (const char *)sqlite3_column_blob(p->st_part, 1);
	}
	if (r != SQLITE_ROW) {
		sqlite3_reset(p->st_part);
		return r == SQLITE_DONE ? -ENOENT : -EIO;
	}
	if (path && rw) {
		sqlite3_reset(p->st_part);
		return -ENOENT;
	}
	if (path) {
		fd = openat(p->dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	} else {
		part_name(ino, name, sizeof(name));
		if (rw && mkdirat(p->dirfd, HYD_PLACE_PARTS, 0700) < 0 &&
		    errno != EEXIST) {
			sqlite3_reset(p->st_part);
			return -errno;
		}
		fd = openat(p->dirfd, name,
			    (rw ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW |
				O_CLOEXEC,
			    0600);
	}
	sqlite3_reset(p->st_part);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	if (rw && (uint64_t)sb.st_size != size &&
	    ftruncate(fd, (off_t)size) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (p->fds[victim].fd >= 0)
		close(p->fds[victim].fd);
	p->fds[victim] = (struct pfd){ino, fd, rw, 1, ++p->clock};
	*ret_slot = victim;
	return 0;
}

/* Close ino's fds not in use (its file moved or went). Under mu. */
static void fd_drop(hyd_place *p, uint64_t ino)
{
	for (int i = 0; i < NFD; i++)
		if (p->fds[i].fd >= 0 && p->fds[i].ino == ino &&
		    !p->fds[i].refs) {
			close(p->fds[i].fd);
			p->fds[i].fd = -1;
		}
}

/* Forget ino's ranges (its file is gone or was written over). Under mu. */
static void forget(hyd_place *p, uint64_t ino, int64_t off)
{
	sqlite3_bind_int64(p->st_forget, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(p->st_forget, 2, off);
	if (sqlite3_step(p->st_forget) != SQLITE_DONE)
		base_warn("--into: cannot forget a placed range: %s",
			  sqlite3_errmsg(p->db));
	sqlite3_reset(p->st_forget);
	p->st.forgotten++;
}

static int all_zero(const uint8_t *b, size_t n)
{
	return n == 0 || (b[0] == 0 && memcmp(b, b + 1, n - 1) == 0);
}

static int grow(void **v, size_t *cap, size_t need, size_t sz)
{
	void *nv;
	size_t nc;

	if (need <= *cap)
		return 0;
	nc = *cap ? *cap * 2 : 64;
	while (nc < need)
		nc *= 2;
	nv = realloc(*v, nc * sz);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = nc;
	return 0;
}

/* ATTACH path AS name. 0 or -errno. Under mu. */
static int attach(hyd_place *p, const char *path, const char *name)
{
	char sql[64];
	sqlite3_stmt *st = NULL;
	int rc;

	snprintf(sql, sizeof(sql), "ATTACH ? AS %s", name);
	rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : db_err(p, rc, "cannot read a catalog");
}

/* The manifests the mount learned since the last look (the overlay's
 * rows of files still unknown here). 1 when any came, 0, -errno. Under
 * mu. */
static int import_locked(hyd_place *p, int force)
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
	r = exec(p, "BEGIN;"
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
		r = exec(p, "DELETE FROM unknown WHERE ino IN (SELECT ino FROM "
			    "temp.learned);"
			    "COMMIT;");
	if (r < 0)
		(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	return r < 0 ? r : n > 0;
}

/* id's slot when it was placed and awaits its record. Under mu. */
static const struct idslot *pending_find(hyd_place *p, const chunk_id *id)
{
	const struct idslot *e;
	int found;

	e = idset_find(&p->cur, id, &found);
	if (found)
		return e;
	e = idset_find(&p->flushing, id, &found);
	return found ? e : NULL;
}

struct spot {
	uint64_t ino, off;
	int slot;
};

int hyd_place_place(hyd_place *p, const chunk_id *id, const void *raw,
		    size_t len, hyd_store_put_cb cb, void *cb_arg)
{
	uint64_t xxh = XXH3_64bits(raw, len);
	int zero = all_zero(raw, len), wanted = 0, slot, r = 0, wr = 0;
	int done_all = 1, retried = 0;
	struct spot one, *at = &one, *big = NULL;
	size_t n = 0, cap = 1, placed = 0, i;
	struct idslot first;

	pthread_mutex_lock(&p->mu);
	if (p->stop) {
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	if (pending_find(p, id)) {
		pthread_mutex_unlock(&p->mu);
		return 2;
	}
	/* where it goes, with an fd for each place (held) */
again:
	sqlite3_bind_blob(p->st_want, 1, id, sizeof(*id), SQLITE_STATIC);
	while (n < MAX_PLACES && (r = sqlite3_step(p->st_want)) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(p->st_want, 0);
		uint64_t off = (uint64_t)sqlite3_column_int64(p->st_want, 1);
		uint64_t wlen = (uint64_t)sqlite3_column_int64(p->st_want, 2);
		int done = sqlite3_column_int(p->st_want, 3);

		wanted++;
		if (!done)
			done_all = 0;
		if (done || wlen != len)
			continue;
		if (n == cap) {
			r = grow((void **)&big, &cap, n + 1, sizeof(*big));
			if (r < 0)
				break;
			if (at == &one)
				big[0] = one;
			at = big;
		}
		r = fd_get(p, ino, 1, &slot);
		if (r == -ENOENT)
			continue; /* landed already: nothing more goes in */
		if (r < 0)
			break;
		at[n++] = (struct spot){ino, off, slot};
	}
	sqlite3_reset(p->st_want);
	sqlite3_clear_bindings(p->st_want);
	/* wanted nowhere: perhaps its file's manifest is new */
	if (!wanted && r == SQLITE_DONE && !retried &&
	    import_locked(p, 0) == 1) {
		retried = 1;
		goto again;
	}
	if (r > 0 && r != SQLITE_DONE)
		r = -EIO;
	pthread_mutex_unlock(&p->mu);
	/* the writes, without the lock: has() and get() go on meanwhile */
	for (i = 0; i < n && wr == 0; i++)
		if (!zero)
			wr = base_pwrite_all(p->fds[at[i].slot].fd, raw, len,
					     (off_t)at[i].off);
	pthread_mutex_lock(&p->mu);
	for (i = 0; i < n; i++) {
		p->fds[at[i].slot].refs--;
		if (wr < 0 || grow((void **)&p->pend, &p->cpend, p->npend + 1,
				   sizeof(*p->pend)) < 0)
			continue;
		p->pend[p->npend++] =
		    (struct pend){at[i].ino, at[i].off, xxh, (uint32_t)len};
		if (!placed)
			first = (struct idslot){*id, at[i].ino, at[i].off, xxh,
						(uint32_t)len};
		placed++;
	}
	free(big);
	if (r >= 0 && wr < 0)
		r = wr;
	if (r < 0 && !p->warned++)
		base_log_err(BASE_LOG_WARN, r,
			     "--into: cannot place a chunk (the store keeps "
			     "it, and others like it; said once) dir=%s",
			     p->dir);
	if (placed) {
		pthread_cond_broadcast(&p->cv);
		p->st.chunks++;
		p->st.bytes += (uint64_t)placed * len;
		/* answered now: found by has/get until its rows commit */
		if (r >= 0 && idset_add(&p->cur, &first) == 0) {
			pthread_mutex_unlock(&p->mu);
			return 2;
		}
		if (r >= 0 && grow((void **)&p->cbs, &p->ccb, p->ncb + 1,
				   sizeof(*p->cbs)) == 0) {
			p->cbs[p->ncb++] = (struct pcb){cb, cb_arg};
			pthread_mutex_unlock(&p->mu);
			return 1;
		}
	}
	pthread_mutex_unlock(&p->mu);
	/* every place has it already: 2; else (none wants it, or a place
	 * or the callback failed) the store keeps it too */
	return r >= 0 && wanted && !placed && done_all ? 2 : 0;
}

/* The flusher: the parts' data durable, then their ranges recorded, then
 * the puts told. */
static void *flusher(void *arg)
{
	hyd_place *p = arg;
	struct pend *pend;
	struct pcb *cbs;
	size_t npend, ncb, i, j;
	struct idset t;
	int r, rc;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->npend && !p->ncb && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->npend && !p->ncb)
			break;
		t = p->flushing;
		p->flushing = p->cur;
		p->cur = t;
		pend = p->pend;
		npend = p->npend;
		cbs = p->cbs;
		ncb = p->ncb;
		p->pend = NULL;
		p->npend = p->cpend = 0;
		p->cbs = NULL;
		p->ncb = p->ccb = 0;
		pthread_mutex_unlock(&p->mu);
		/* One syncfs for every part the round wrote (thousands of
		 * small files would cost a journal commit each with
		 * fdatasync), closed ones too. */
		r = npend && syncfs(p->dirfd) < 0 ? -errno : 0;
		if (r == 0 && p->record_delay_ms)
			usleep(p->record_delay_ms * 1000u);
		pthread_mutex_lock(&p->mu);
		if (r == 0) {
			rc = sqlite3_exec(p->db, "BEGIN", NULL, NULL, NULL);
			for (i = 0; rc == SQLITE_OK && i < npend; i++) {
				sqlite3_stmt *s = p->st_ins;

				sqlite3_bind_int64(s, 1,
						   (sqlite3_int64)pend[i].ino);
				sqlite3_bind_int64(s, 2,
						   (sqlite3_int64)pend[i].off);
				sqlite3_bind_int64(s, 3, pend[i].len);
				sqlite3_bind_int64(s, 4,
						   (sqlite3_int64)pend[i].xxh);
				rc = sqlite3_step(s);
				rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
				sqlite3_reset(s);
			}
			if (rc == SQLITE_OK)
				rc = sqlite3_exec(p->db, "COMMIT", NULL, NULL,
						  NULL);
			if (rc != SQLITE_OK) {
				r = db_err(p, rc,
					   "cannot record placed ranges");
				sqlite3_exec(p->db, "ROLLBACK", NULL, NULL,
					     NULL);
			}
		}
		p->st.flushes++;
		idset_clear(&p->flushing);
		pthread_cond_broadcast(&p->cv); /* for hyd_place_settle */
		pthread_mutex_unlock(&p->mu);
		if (r < 0)
			base_log_err(BASE_LOG_WARN, r,
				     "--into: placed ranges not recorded "
				     "(fetched again) dir=%s",
				     p->dir);
		for (j = 0; j < ncb; j++)
			cbs[j].cb(cbs[j].arg, r);
		free(pend);
		free(cbs);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int hyd_place_has(hyd_place *p, const chunk_id *id)
{
	int r;

	pthread_mutex_lock(&p->mu);
	if (pending_find(p, id)) {
		pthread_mutex_unlock(&p->mu);
		return 1;
	}
	sqlite3_bind_blob(p->st_find, 1, id, sizeof(*id), SQLITE_STATIC);
	r = sqlite3_step(p->st_find);
	sqlite3_reset(p->st_find);
	pthread_mutex_unlock(&p->mu);
	return r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0 : -EIO;
}

int hyd_place_get(hyd_place *p, const chunk_id *id, void *out, size_t cap,
		  size_t *ret_len)
{
	const struct idslot *pe;
	uint64_t ino, off, xxh;
	size_t len, got = 0;
	int slot = -1, r;

	pthread_mutex_lock(&p->mu);
	pe = pending_find(p, id);
	if (pe) {
		ino = pe->ino;
		off = pe->off;
		len = pe->len;
		xxh = pe->xxh;
		goto found;
	}
	sqlite3_bind_blob(p->st_find, 1, id, sizeof(*id), SQLITE_STATIC);
	r = sqlite3_step(p->st_find);
	if (r != SQLITE_ROW) {
		sqlite3_reset(p->st_find);
		pthread_mutex_unlock(&p->mu);
		return r == SQLITE_DONE ? -ENOENT : -EIO;
	}
	ino = (uint64_t)sqlite3_column_int64(p->st_find, 0);
	off = (uint64_t)sqlite3_column_int64(p->st_find, 1);
	len = (size_t)sqlite3_column_int64(p->st_find, 2);
	xxh = (uint64_t)sqlite3_column_int64(p->st_find, 3);
	sqlite3_reset(p->st_find);
found:
	if (len > cap) {
		pthread_mutex_unlock(&p->mu);
		return -ENOBUFS;
	}
	r = fd_get(p, ino, 0, &slot);
	if (r < 0) {
		/* its file is gone (or not a file): the record goes, the
		 * chunk is fetched; out of fds: only fetched */
		if (r == -ENOENT || r == -ENOTDIR || r == -EINVAL ||
		    r == -ELOOP)
			forget(p, ino, -1);
		pthread_mutex_unlock(&p->mu);
		return -ENOENT;
	}
	pthread_mutex_unlock(&p->mu);
	r = base_pread_full(p->fds[slot].fd, out, len, (off_t)off, &got);
	if (r == 0 && (got != len || XXH3_64bits(out, len) != xxh))
		r = -EBADMSG;
	pthread_mutex_lock(&p->mu);
	p->fds[slot].refs--;
	if (r == 0) {
		p->st.reads++;
	} else {
		base_warn("--into: placed bytes of file ino=%" PRIu64
			  " off=%" PRIu64 " in dir=%s no longer match what was "
			  "written: fetched again",
			  ino, off, p->dir);
		forget(p, ino, (int64_t)off);
		fd_drop(p, ino);
	}
	pthread_mutex_unlock(&p->mu);
	if (r < 0)
		return r == -EBADMSG ? r : -EIO;
	*ret_len = len;
	return 0;
}

/* Read every recorded range of fd back against its sum. 0, or -EBADMSG
 * (that range forgotten). */
static int check_ranges(hyd_place *p, uint64_t ino, int fd, uint32_t max_raw)
{
	uint8_t *buf = malloc(max_raw ? max_raw : 1);
	uint64_t off = 0, xxh;
	size_t len, got;
	int r = 0, step;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		sqlite3_bind_int64(p->st_ranges, 1, (sqlite3_int64)ino);
		sqlite3_bind_int64(p->st_ranges, 2, (sqlite3_int64)off);
		step = sqlite3_step(p->st_ranges);
		if (step == SQLITE_ROW) {
			off = (uint64_t)sqlite3_column_int64(p->st_ranges, 0);
			len = (size_t)sqlite3_column_int64(p->st_ranges, 1);
			xxh = (uint64_t)sqlite3_column_int64(p->st_ranges, 2);
		}
		sqlite3_reset(p->st_ranges);
		pthread_mutex_unlock(&p->mu);
		if (step != SQLITE_ROW) {
			r = step == SQLITE_DONE ? 0 : -EIO;
			break;
		}
		if (len > max_raw) {
			r = -EBADMSG;
			break;
		}
		got = 0;
		r = base_pread_full(fd, buf, len, (off_t)off, &got);
		if (r == 0 && (got != len || XXH3_64bits(buf, len) != xxh))
			r = -EBADMSG;
		if (r < 0) {
			pthread_mutex_lock(&p->mu);
			forget(p, ino, (int64_t)off);
			pthread_mutex_unlock(&p->mu);
			break;
		}
		off += len;
	}
	free(buf);
	return r;
}

int hyd_place_adopt(hyd_place *p, uint64_t ino, uint32_t max_raw, int dirfd,
		    const char *tmp)
{
	char name[64];
	int64_t nwant = 0, nplaced = 0;
	int slot, r, landed = 0;

	pthread_mutex_lock(&p->mu);
	sqlite3_bind_int64(p->st_count, 1, (sqlite3_int64)ino);
	if (sqlite3_step(p->st_count) == SQLITE_ROW) {
		nwant = sqlite3_column_int64(p->st_count, 0);
		nplaced = sqlite3_column_int64(p->st_count, 1);
		landed = sqlite3_column_int(p->st_count, 2);
	}
	sqlite3_reset(p->st_count);
	if (nwant == 0 || nplaced < nwant || landed) {
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	r = fd_get(p, ino, 1, &slot);
	pthread_mutex_unlock(&p->mu);
	if (r < 0)
		return r == -ENOENT ? 0 : r;
	/* Parts this run wrote hold what it verified and recorded; parts
	 * from before (a crash, a restart) are read back first. */
	r = p->recheck ? check_ranges(p, ino, p->fds[slot].fd, max_raw) : 0;
	pthread_mutex_lock(&p->mu);
	p->fds[slot].refs--;
	pthread_mutex_unlock(&p->mu);
	if (r < 0)
		return r == -EBADMSG ? 0 : r;
	part_name(ino, name, sizeof(name));
	if (renameat(p->dirfd, name, dirfd, tmp) < 0)
		return errno == ENOENT ? 0 : -errno;
	pthread_mutex_lock(&p->mu);
	p->st.adopted++;
	pthread_mutex_unlock(&p->mu);
	return 1;
}

struct miss {
	uint64_t off;
	uint32_t len;
	chunk_id id;
};

/* The ranges of ino not placed yet, read from its landed file, checked
 * against their ids and recorded: DIR holds them (the landing wrote the
 * file from the store, or found it there), so nothing fetches them
 * again. Cheap when all are placed (one count). Under mu (dropped while
 * reading). */
static void fill_missing(hyd_place *p, uint64_t ino)
{
	struct miss *v = NULL;
	size_t n = 0, cap = 0, i;
	sqlite3_stmt *st = NULL;
	uint8_t *buf = NULL;
	uint32_t bufcap = 0;
	int slot, r, rc;

	sqlite3_bind_int64(p->st_count, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(p->st_count);
	r = rc == SQLITE_ROW && sqlite3_column_int64(p->st_count, 0) >
				    sqlite3_column_int64(p->st_count, 1);
	sqlite3_reset(p->st_count);
	if (!r)
		return;
	rc = sqlite3_prepare_v2(p->db,
				"SELECT off, len, id FROM want w WHERE ino = ? "
				"AND NOT EXISTS (SELECT 1 FROM placed p WHERE "
				"p.ino = w.ino AND p.off = w.off)",
				-1, &st, NULL);
	if (rc == SQLITE_OK)
		sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		if (sqlite3_column_bytes(st, 2) != (int)sizeof(chunk_id) ||
		    grow((void **)&v, &cap, n + 1, sizeof(*v)) < 0)
			break;
		v[n].off = (uint64_t)sqlite3_column_int64(st, 0);
		v[n].len = (uint32_t)sqlite3_column_int64(st, 1);
		memcpy(&v[n].id, sqlite3_column_blob(st, 2), sizeof(chunk_id));
		if (v[n].len > bufcap)
			bufcap = v[n].len;
		n++;
	}
	sqlite3_finalize(st);
	if (!n || fd_get(p, ino, 0, &slot) < 0) {
		free(v);
		return;
	}
	pthread_mutex_unlock(&p->mu);
	buf = malloc(bufcap ? bufcap : 1);
	for (i = 0; buf && i < n; i++) {
		size_t got = 0;

		v[i].len = base_pread_full(p->fds[slot].fd, buf, v[i].len,
					   (off_t)v[i].off, &got) == 0 &&
				   got == v[i].len &&
				   chunk_id_verify(&v[i].id, buf, got) == 0
			       ? v[i].len
			       : 0;
		/* the sum rides in the id's room, which is done with */
		if (v[i].len)
			memcpy(&v[i].id, &(uint64_t){XXH3_64bits(buf, got)},
			       sizeof(uint64_t));
	}
	free(buf);
	pthread_mutex_lock(&p->mu);
	p->fds[slot].refs--;
	if (sqlite3_exec(p->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK) {
		for (i = 0; i < n; i++) {
			uint64_t xxh;

			if (!v[i].len)
				continue;
			memcpy(&xxh, &v[i].id, sizeof(xxh));
			sqlite3_bind_int64(p->st_ins, 1, (sqlite3_int64)ino);
			sqlite3_bind_int64(p->st_ins, 2,
					   (sqlite3_int64)v[i].off);
			sqlite3_bind_int64(p->st_ins, 3, v[i].len);
			sqlite3_bind_int64(p->st_ins, 4, (sqlite3_int64)xxh);
			(void)sqlite3_step(p->st_ins);
			sqlite3_reset(p->st_ins);
			p->st.found++;
		}
		if (sqlite3_exec(p->db, "COMMIT", NULL, NULL, NULL) !=
		    SQLITE_OK)
			(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	}
	free(v);
}

void hyd_place_landed_file(hyd_place *p, uint64_t ino, const char *relpath)
{
	int moved;
	char name[64];
	int rc;

	pthread_mutex_lock(&p->mu);
	/* every pass meets every landed file: a read when nothing moved */
	sqlite3_bind_int64(p->st_part, 1, (sqlite3_int64)ino);
	rc = sqlite3_step(p->st_part);
	moved = rc == SQLITE_ROW &&
		sqlite3_column_type(p->st_part, 1) == SQLITE_NULL;
	sqlite3_reset(p->st_part);
	if (rc != SQLITE_ROW) {
		pthread_mutex_unlock(&p->mu);
		return;
	}
	if (!moved) {
		fill_missing(p, ino);
		pthread_mutex_unlock(&p->mu);
		return;
	}
	sqlite3_bind_blob(p->st_setpath, 1, relpath, (int)strlen(relpath) + 1,
			  SQLITE_STATIC);
	sqlite3_bind_int64(p->st_setpath, 2, (sqlite3_int64)ino);
	rc = sqlite3_step(p->st_setpath);
	sqlite3_reset(p->st_setpath);
	sqlite3_clear_bindings(p->st_setpath);
	/* a part the landing did not take (it wrote the file itself): its
	 * ranges are the written file's now */
	if (rc == SQLITE_DONE && sqlite3_changes(p->db)) {
		fd_drop(p, ino);
		part_name(ino, name, sizeof(name));
		(void)unlinkat(p->dirfd, name, 0);
	}
	fill_missing(p, ino);
	pthread_mutex_unlock(&p->mu);
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
	r = exec(p, "BEGIN;"
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
		r = rc == SQLITE_DONE ? exec(p, "COMMIT")
				      : db_err(p, rc, "cannot register");
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
		r = import_locked(p, 1) < 0 ? -EIO : 0;
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
			fd_drop(p, ino);
			(void)unlinkat(dirfd(d), e->d_name, 0);
		}
	}
	closedir(d);
}

/* The numbers of a generation (catalog catpath): the parts of numbers no
 * longer named by keep's catalogs go (files and rows). */
int hyd_place_prune(hyd_place *p, const char *const *catpaths, size_t n)
{
	char sql[4096], name[64];
	sqlite3_stmt *st = NULL;
	struct stat sb;
	size_t i, len = 0;
	int r = 0, rc;

	if (!n || n > 8)
		return 0;
	pthread_mutex_lock(&p->mu);
	for (i = 0; i < n && r == 0; i++) {
		snprintf(sql, sizeof(sql), "ATTACH ? AS k%zu", i);
		rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
		if (rc == SQLITE_OK) {
			sqlite3_bind_text(st, 1, catpaths[i], -1,
					  SQLITE_STATIC);
			rc = sqlite3_step(st);
			rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
		}
		sqlite3_finalize(st);
		st = NULL;
		if (rc != SQLITE_OK) {
			r = db_err(p, rc, "cannot read a catalog");
			n = i;
		}
	}
	len = (size_t)snprintf(sql, sizeof(sql),
			       "CREATE TEMP TABLE gone AS SELECT ino, path "
			       "FROM part WHERE 1");
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(sql + len, sizeof(sql) - len,
					" AND ino NOT IN (SELECT ino FROM "
					"k%zu.inode)",
					i);
	if (r == 0)
		r = exec(p, sql);
	if (r == 0)
		rc = sqlite3_prepare_v2(p->db,
					"SELECT ino FROM temp.gone WHERE path "
					"IS NULL",
					-1, &st, NULL);
	while (r == 0 && rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(st, 0);

		fd_drop(p, ino);
		part_name(ino, name, sizeof(name));
		(void)unlinkat(p->dirfd, name, 0);
		p->st.pruned++;
	}
	sqlite3_finalize(st);
	if (r == 0)
		r = exec(p, "BEGIN;"
			    "DELETE FROM want WHERE ino IN (SELECT ino FROM "
			    "temp.gone);"
			    "DELETE FROM placed WHERE ino IN (SELECT ino FROM "
			    "temp.gone);"
			    "DELETE FROM part WHERE ino IN (SELECT ino FROM "
			    "temp.gone);"
			    "COMMIT;");
	if (r < 0)
		(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	(void)sqlite3_exec(p->db, "DROP TABLE IF EXISTS temp.gone", NULL, NULL,
			   NULL);
	for (i = 0; i < n; i++) {
		snprintf(sql, sizeof(sql), "DETACH k%zu", i);
		(void)sqlite3_exec(p->db, sql, NULL, NULL, NULL);
	}
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

void hyd_place_settle(hyd_place *p)
{
	pthread_mutex_lock(&p->mu);
	while ((p->npend || p->ncb || p->cur.n || p->flushing.n) && !p->stop)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void hyd_place_stats(hyd_place *p, struct hyd_place_stats *ret)
{
	pthread_mutex_lock(&p->mu);
	*ret = p->st;
	pthread_mutex_unlock(&p->mu);
}

static int place_cb(void *arg, const chunk_id *id, const void *raw, size_t len,
		    hyd_store_put_cb cb, void *cb_arg)
{
	return hyd_place_place(arg, id, raw, len, cb, cb_arg);
}

static int has_cb(void *arg, const chunk_id *id)
{
	return hyd_place_has(arg, id);
}

static int get_cb(void *arg, const chunk_id *id, void *out, size_t cap,
		  size_t *ret_len)
{
	return hyd_place_get(arg, id, out, cap, ret_len);
}

void hyd_place_hook(hyd_place *p, struct hyd_store_placer *ret)
{
	ret->place = place_cb;
	ret->has = has_cb;
	ret->get = get_cb;
	ret->arg = p;
}

int hyd_place_open(const char *dir, const char *cache_dir, hyd_place **ret)
{
	char path[4200];
	hyd_place *p;
	int r, rc, i;

	*ret = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	snprintf(p->dir, sizeof(p->dir), "%s", dir);
	if (getenv("FERRY_PLACE_RECORD_DELAY_MS"))
		p->record_delay_ms = (unsigned)strtoul(
		    getenv("FERRY_PLACE_RECORD_DELAY_MS"), NULL, 10);
	for (i = 0; i < NFD; i++)
		p->fds[i].fd = -1;
	p->cur.v = calloc(IDSET_CAP, sizeof(*p->cur.v));
	p->flushing.v = calloc(IDSET_CAP, sizeof(*p->flushing.v));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->dirfd = !p->cur.v || !p->flushing.v
		       ? (errno = ENOMEM, -1)
		       : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dirfd < 0) {
		r = -errno;
		hyd_place_close(p);
		return r;
	}
	snprintf(path, sizeof(path), "%s/" HYD_PLACE_DB, cache_dir);
	rc = sqlite3_open_v2(path, &p->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				 SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		r = db_err(p, rc, "cannot open");
		hyd_place_close(p);
		return r;
	}
	sqlite3_busy_timeout(p->db, BUSY_MS);
	r = exec(p, schema);
	if (r == 0)
		r = prep(p,
			 "SELECT w.ino, w.off, w.len, EXISTS(SELECT 1 FROM "
			 "placed p WHERE p.ino = w.ino AND p.off = w.off) "
			 "FROM want w WHERE w.id = ?",
			 &p->st_want);
	if (r == 0)
		r = prep(p,
			 "SELECT p.ino, p.off, p.len, p.xxh FROM want w "
			 "JOIN placed p ON p.ino = w.ino AND p.off = w.off "
			 "WHERE w.id = ? LIMIT 1",
			 &p->st_find);
	if (r == 0)
		r = prep(p, "INSERT OR REPLACE INTO placed VALUES(?,?,?,?)",
			 &p->st_ins);
	if (r == 0)
		r = prep(p, "SELECT size, path FROM part WHERE ino = ?",
			 &p->st_part);
	if (r == 0)
		r = prep(p,
			 "DELETE FROM placed WHERE ino = ?1 AND (?2 < 0 OR "
			 "off = ?2)",
			 &p->st_forget);
	if (r == 0)
		r = prep(p,
			 "SELECT (SELECT count(*) FROM want WHERE ino = ?1),"
			 " (SELECT count(*) FROM placed WHERE ino = ?1),"
			 " (SELECT path IS NOT NULL FROM part WHERE ino = ?1)",
			 &p->st_count);
	if (r == 0)
		r = prep(p,
			 "UPDATE part SET path = ? WHERE ino = ? AND path IS "
			 "NULL",
			 &p->st_setpath);
	if (r == 0)
		r = prep(p,
			 "SELECT off, len, xxh FROM placed WHERE ino = ? AND "
			 "off >= ? ORDER BY off LIMIT 1",
			 &p->st_ranges);
	if (r == 0) {
		sqlite3_stmt *st = NULL;

		if (sqlite3_prepare_v2(p->db, "SELECT 1 FROM placed LIMIT 1",
				       -1, &st, NULL) == SQLITE_OK)
			p->recheck = sqlite3_step(st) != SQLITE_DONE;
		sqlite3_finalize(st);
		r = -pthread_create(&p->th, NULL, flusher, p);
		p->started = r == 0;
	}
	if (r < 0) {
		hyd_place_close(p);
		return r;
	}
	*ret = p;
	return 0;
}

void hyd_place_close(hyd_place *p)
{
	int i;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	/* the flusher records and answers what waits, then ends */
	if (p->started)
		pthread_join(p->th, NULL);
	sqlite3_finalize(p->st_want);
	sqlite3_finalize(p->st_find);
	sqlite3_finalize(p->st_ins);
	sqlite3_finalize(p->st_part);
	sqlite3_finalize(p->st_forget);
	sqlite3_finalize(p->st_count);
	sqlite3_finalize(p->st_setpath);
	sqlite3_finalize(p->st_ranges);
	if (p->db)
		sqlite3_close(p->db);
	for (i = 0; i < NFD; i++)
		if (p->fds[i].fd >= 0)
			close(p->fds[i].fd);
	if (p->dirfd >= 0)
		close(p->dirfd);
	free(p->pend);
	free(p->cbs);
	free(p->cur.v);
	free(p->flushing.v);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
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
