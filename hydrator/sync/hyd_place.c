/*
 * hydrator/sync/hyd_place.c — --into's placement: the chunks a mount
 * fetches land as plain bytes in DIR, not in the store.
 *
 * A catalog number names one content in every generation (docs/catalog.md),
 * so a file's bytes are kept by its number: DIR/.ferry-into/INO, the part,
 * made at the file's size (what is never written stays a hole). Each
 * verified chunk the fetcher receives is written at every offset where a
 * registered generation has it (a chunk that repeats in the tree is fetched
 * once and written from memory to each place), and the put is answered at
 * once: the round's chunks are answered for from memory (has, get) until
 * the flusher thread has made the round's data durable (one syncfs of
 * DIR's file system) and then committed the rows that record its ranges.
 * A recorded range always rests on disk; a crash between the two loses
 * only the record, and the chunk is fetched again. A range row keeps the
 * XXH3-64 of its bytes, and every read checks it (as the store checks its
 * frames): a range that no longer matches (someone wrote into DIR) is
 * forgotten and fetched again, never served.
 *
 * The landing renames whole parts into their paths (hyd_place_land.c),
 * and the record follows each file to its path; the rows of numbers no
 * catalog of the cache names are pruned when a generation lands
 * (hyd_place_gen.c). CACHEDIR/into.db (SQLite, WAL):
 *   want(ino, off, len, id)  the chunks of the registered generations
 *   part(ino, size, path, digest)  path NULL: the part; else
 *                            DIR-relative, and digest its manifest's as
 *                            the sync record notes it (reads are served
 *                            from the file, hyd_place_serve.c)
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
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_place_priv.h"

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
    " size INTEGER NOT NULL, path BLOB, digest BLOB);"
    "CREATE TABLE IF NOT EXISTS placed(ino INTEGER NOT NULL,"
    " off INTEGER NOT NULL, len INTEGER NOT NULL, xxh INTEGER NOT NULL,"
    " PRIMARY KEY(ino, off)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS gen(gen INTEGER PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS unknown(ino INTEGER PRIMARY KEY);";

int hyd_place__db_err(hyd_place *p, int rc, const char *what)
{
	base_error("--into: %s: %s (CACHEDIR/" HYD_PLACE_DB ")", what,
		   sqlite3_errmsg(p->db));
	return base_sqlite_errno(p->db, rc, what);
}

void hyd_place__land_tx_end(hyd_place *p)
{
	if (!p->land_n)
		return;
	p->land_n = 0;
	if (sqlite3_exec(p->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		/* the rows are lost, not the files: a landed file without
		 * its path is found matching by the next pass */
		base_warn("--into: the landing's rows not committed: %s",
			  sqlite3_errmsg(p->db));
		(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	}
}

int hyd_place__exec(hyd_place *p, const char *sql)
{
	int r;

	hyd_place__land_tx_end(p);
	r = base_sqlite_exec(p->db, sql, "into.db");

	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "--into: %s (CACHEDIR/" HYD_PLACE_DB ")",
			     sqlite3_errmsg(p->db));
	return r;
}

void hyd_place__part_name(uint64_t ino, char *buf, size_t cap)
{
	snprintf(buf, cap, HYD_PLACE_PARTS "/%" PRIu64, ino);
}

/* Open (rw: make) the part at DIR-relative name. */
static int open_part(hyd_place *p, const char *name, int rw)
{
	return openat(
	    p->dirfd, name,
	    (rw ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* The slot of ino's fd, opened when needed; refs taken. rw: for
 * placing (only a part, made at its size when missing). -ENOENT: none
 * (or, rw, the file is landed already), -errno. Under mu. */
int hyd_place__fd_get(hyd_place *p, uint64_t ino, int rw, int *ret_slot)
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
		hyd_place__part_name(ino, name, sizeof(name));
		fd = open_part(p, name, rw);
		/* the parts' directory is made with the first part (and
		 * again after a prune removed it) */
		if (fd < 0 && errno == ENOENT && rw) {
			if (mkdirat(p->dirfd, HYD_PLACE_PARTS, 0700) < 0 &&
			    errno != EEXIST) {
				sqlite3_reset(p->st_part);
				return -errno;
			}
			fd = open_part(p, name, rw);
		}
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
void hyd_place__fd_drop(hyd_place *p, uint64_t ino)
{
	for (int i = 0; i < NFD; i++)
		if (p->fds[i].fd >= 0 && p->fds[i].ino == ino &&
		    !p->fds[i].refs) {
			close(p->fds[i].fd);
			p->fds[i].fd = -1;
		}
}

static struct whint *hint_at(hyd_place *p, uint64_t ino)
{
	_Static_assert(NHINT == 1u << 12, "hint_at takes 12 bits");
	return &p->hint[(ino * 0x9e3779b97f4a7c15ull) >> 52];
}

void hyd_place__hints_clear(hyd_place *p)
{
	memset(p->hint, 0, sizeof(p->hint));
}

/* Forget ino's ranges (its file is gone or was written over). Under mu. */
void hyd_place__forget(hyd_place *p, uint64_t ino, int64_t off)
{
	struct whint *h = hint_at(p, ino);

	if (h->ino == ino)
		h->used = 0;
	sqlite3_bind_int64(p->st_forget, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(p->st_forget, 2, off);
	if (sqlite3_step(p->st_forget) != SQLITE_DONE)
		base_warn("--into: cannot forget a placed range: %s",
			  sqlite3_errmsg(p->db));
	sqlite3_reset(p->st_forget);
	p->st.forgotten++;
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
	int zero = hyd_sync__all_zero(raw, len), wanted = 0, slot, r = 0,
	    wr = 0;
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
			r = base_grow((void **)&big, &cap, n + 1, sizeof(*big));
			if (r < 0)
				break;
			if (at == &one)
				big[0] = one;
			at = big;
		}
		r = hyd_place__fd_get(p, ino, 1, &slot);
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
	    hyd_place__import_locked(p, 0) == 1) {
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
		if (wr < 0 || base_grow((void **)&p->pend, &p->cpend,
					p->npend + 1, sizeof(*p->pend)) < 0)
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
		if (r >= 0 && base_grow((void **)&p->cbs, &p->ccb, p->ncb + 1,
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

static void note_whole(hyd_place *p, const struct pend *v, size_t n);

int hyd_place__record(hyd_place *p, const struct pend *v, size_t n)
{
	sqlite3_stmt *s = p->st_ins;
	size_t i;
	int rc;

	hyd_place__land_tx_end(p);
	rc = sqlite3_exec(p->db, "BEGIN", NULL, NULL, NULL);

	for (i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_int64(s, 1, (sqlite3_int64)v[i].ino);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)v[i].off);
		sqlite3_bind_int64(s, 3, v[i].len);
		sqlite3_bind_int64(s, 4, (sqlite3_int64)v[i].xxh);
		rc = sqlite3_step(s);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
		sqlite3_reset(s);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(p->db, "COMMIT", NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		note_whole(p, v, n);
		return 0;
	}
	(void)sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
	return hyd_place__db_err(p, rc, "cannot record placed ranges");
}

int hyd_place__look(hyd_place *p, uint64_t ino, struct hyd_place_look *ret)
{
	sqlite3_stmt *s = p->st_missing;
	struct whint *h = hint_at(p, ino);
	uint64_t from = h->used && h->ino == ino ? h->off : 0;
	int rc;

	memset(ret, 0, sizeof(*ret));
	sqlite3_bind_int64(s, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)from);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		ret->lacks = sqlite3_column_type(s, 0) != SQLITE_NULL;
		ret->missing =
		    ret->lacks ? (uint64_t)sqlite3_column_int64(s, 0) : 0;
		ret->wants = sqlite3_column_int(s, 1);
		ret->landed = sqlite3_column_int(s, 2);
		ret->whole = ret->wants && !ret->lacks && !ret->landed;
	}
	sqlite3_reset(s);
	if (rc != SQLITE_ROW)
		return -EIO;
	if (ret->wants && ret->lacks && !ret->landed)
		*h = (struct whint){ino, ret->missing, 1};
	else if (h->ino == ino)
		h->used = 0;
	return 0;
}

/* The files among v's that are whole now (every range they want
 * recorded, not landed yet) are told to the landing. A file missed here
 * (no memory) is found by the landing's next look at every file left. */
static void note_whole(hyd_place *p, const struct pend *v, size_t n)
{
	struct hyd_place_look lk;
	uint64_t last = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i && v[i].ino == last)
			continue;
		last = v[i].ino;
		if (hyd_place__look(p, last, &lk) == 0 && lk.whole &&
		    base_grow((void **)&p->whole, &p->cwhole, p->nwhole + 1,
			      sizeof(*p->whole)) == 0)
			p->whole[p->nwhole++] = last;
	}
}

size_t hyd_place_take_whole(hyd_place *p, uint64_t **ret)
{
	size_t n;

	pthread_mutex_lock(&p->mu);
	*ret = p->whole;
	n = p->nwhole;
	p->whole = NULL;
	p->nwhole = p->cwhole = 0;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* The flusher: the parts' data durable, then their ranges recorded, then
 * the puts told. */
static void *flusher(void *arg)
{
	hyd_place *p = arg;
	struct pend *pend;
	struct pcb *cbs;
	size_t npend, ncb, j;
	struct idset t;
	int r;

	base_thread_name("place");
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->npend && !p->ncb && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->npend && !p->ncb)
			break;
		/* A round gathers for ROUND_NS: each syncfs is a journal
		 * commit and starts the writeback of all that is dirty, so
		 * rounds of a few chunks each (a sync as soon as the last
		 * ended) cost the landing more than its writes. Nothing
		 * waits on a round meanwhile (its puts were answered, has
		 * and get find its chunks in memory) unless a put could not
		 * be answered (its set is full), a settle or a stop waits. */
		while (!p->stop && !p->ncb && !p->settling &&
		       base_now_ns() < p->round_at + ROUND_NS)
			base_cond_wait_until(&p->cv, &p->mu,
					     p->round_at + ROUND_NS);
		p->round_at = base_now_ns();
		p->in_round = 1;
		t = p->flushing;
		p->flushing = p->cur;
		p->cur = t;
		pend = p->pend;
		npend = p->npend;
		cbs = p->cbs;
		ncb = p->ncb;
		p->fl_pend = pend;
		p->fl_npend = npend;
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
		if (r == 0)
			r = hyd_place__record(p, pend, npend);
		p->st.flushes++;
		p->in_round = 0;
		p->fl_pend = NULL;
		p->fl_npend = 0;
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
	r = hyd_place__fd_get(p, ino, 0, &slot);
	if (r < 0) {
		/* its file is gone (or not a file): the record goes, the
		 * chunk is fetched; out of fds: only fetched */
		if (r == -ENOENT || r == -ENOTDIR || r == -EINVAL ||
		    r == -ELOOP)
			hyd_place__forget(p, ino, -1);
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
		hyd_place__forget(p, ino, (int64_t)off);
		hyd_place__fd_drop(p, ino);
	}
	pthread_mutex_unlock(&p->mu);
	if (r < 0)
		return r == -EBADMSG ? r : -EIO;
	*ret_len = len;
	return 0;
}

void hyd_place__rounds_wait(hyd_place *p)
{
	uint64_t until = p->st.flushes + (uint64_t)p->in_round +
			 (uint64_t)(p->npend || p->ncb);

	p->settling++;
	pthread_cond_broadcast(&p->cv);
	while (p->st.flushes < until && !p->stop)
		pthread_cond_wait(&p->cv, &p->mu);
	p->settling--;
}

void hyd_place_settle(hyd_place *p)
{
	pthread_mutex_lock(&p->mu);
	p->settling++;
	pthread_cond_broadcast(&p->cv);
	while ((p->npend || p->ncb || p->cur.n || p->flushing.n) && !p->stop)
		pthread_cond_wait(&p->cv, &p->mu);
	p->settling--;
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

static int landed_cb(void *arg, uint64_t ino, uint64_t size, int *ret_fd,
		     struct stat *ret_st)
{
	return hyd_place_landed_fd(arg, ino, size, ret_fd, ret_st);
}

void hyd_place_hook(hyd_place *p, struct hyd_store_placer *ret)
{
	ret->place = place_cb;
	ret->has = has_cb;
	ret->get = get_cb;
	ret->landed = landed_cb;
	ret->arg = p;
}

/* The record's statements, prepared once at open. */
static const struct {
	const char *sql;
	size_t at; /* offsetof the field in struct hyd_place */
} stmts[] = {
    {"SELECT w.ino, w.off, w.len, EXISTS(SELECT 1 FROM placed p WHERE "
     "p.ino = w.ino AND p.off = w.off) FROM want w WHERE w.id = ?",
     offsetof(struct hyd_place, st_want)},
    {"SELECT p.ino, p.off, p.len, p.xxh FROM want w JOIN placed p ON "
     "p.ino = w.ino AND p.off = w.off WHERE w.id = ? LIMIT 1",
     offsetof(struct hyd_place, st_find)},
    {"INSERT OR REPLACE INTO placed VALUES(?,?,?,?)",
     offsetof(struct hyd_place, st_ins)},
    {"SELECT size, path FROM part WHERE ino = ?",
     offsetof(struct hyd_place, st_part)},
    {"DELETE FROM placed WHERE ino = ?1 AND (?2 < 0 OR off = ?2)",
     offsetof(struct hyd_place, st_forget)},
    {"UPDATE part SET path = ? WHERE ino = ? AND path IS NULL",
     offsetof(struct hyd_place, st_setpath)},
    {"SELECT off, len, xxh FROM placed WHERE ino = ? AND off >= ? ORDER BY "
     "off LIMIT 1",
     offsetof(struct hyd_place, st_ranges)},
    {"UPDATE part SET path = ?2, digest = ?3 WHERE ino = ?1",
     offsetof(struct hyd_place, st_setdigest)},
    {"SELECT size, path, digest FROM part WHERE ino = ?",
     offsetof(struct hyd_place, st_landed)},
    {"SELECT (SELECT w.off FROM want w WHERE w.ino = ?1 AND w.off >= ?2 "
     "AND NOT EXISTS(SELECT 1 FROM placed p WHERE p.ino = w.ino AND "
     "p.off = w.off) ORDER BY w.off LIMIT 1), EXISTS(SELECT 1 FROM want "
     "WHERE ino = ?1), (SELECT path IS NOT NULL FROM part WHERE ino = ?1)",
     offsetof(struct hyd_place, st_missing)},
    {"SELECT count(*) FROM want w WHERE w.ino = ?1 AND w.off >= ?2 AND NOT "
     "EXISTS(SELECT 1 FROM placed p WHERE p.ino = w.ino AND p.off = "
     "w.off)",
     offsetof(struct hyd_place, st_nmissing)},
    {"SELECT w.off, w.len, w.id FROM want w WHERE w.ino = ?1 AND w.off >= "
     "?2 AND NOT EXISTS(SELECT 1 FROM placed p WHERE p.ino = w.ino AND "
     "p.off = w.off) ORDER BY w.off LIMIT ?3",
     offsetof(struct hyd_place, st_unrecorded)},
};

/* A record made before part had its digest column gets it (its files
 * are then not served from DIR until landed again). */
static int schema_up(hyd_place *p)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(p->db, "SELECT digest FROM part LIMIT 0",
				    -1, &st, NULL);

	sqlite3_finalize(st);
	return rc == SQLITE_OK
		   ? 0
		   : hyd_place__exec(p,
				     "ALTER TABLE part ADD COLUMN digest BLOB");
}

static sqlite3_stmt **stmt_at(hyd_place *p, size_t i)
{
	return (sqlite3_stmt **)((char *)p + stmts[i].at);
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
	snprintf(p->cache_dir, sizeof(p->cache_dir), "%s", cache_dir);
	pthread_mutex_init(&p->rec_mu, NULL);
	if (getenv("FERRY_PLACE_RECORD_DELAY_MS"))
		p->record_delay_ms = (unsigned)strtoul(
		    getenv("FERRY_PLACE_RECORD_DELAY_MS"), NULL, 10);
	for (i = 0; i < NFD; i++)
		p->fds[i].fd = -1;
	p->cur.v = calloc(IDSET_CAP, sizeof(*p->cur.v));
	p->flushing.v = calloc(IDSET_CAP, sizeof(*p->flushing.v));
	pthread_mutex_init(&p->mu, NULL);
	r = base_cond_init(&p->cv);
	if (r == 0 && (!p->cur.v || !p->flushing.v))
		r = -ENOMEM;
	p->dirfd = r < 0 ? (errno = -r, -1)
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
		r = hyd_place__db_err(p, rc, "cannot open");
		hyd_place_close(p);
		return r;
	}
	sqlite3_busy_timeout(p->db, BUSY_MS);
	r = hyd_place__exec(p, schema);
	r = r ? r : schema_up(p);
	for (i = 0; r == 0 && i < (int)(sizeof(stmts) / sizeof(*stmts)); i++) {
		r = base_sqlite_prepare(p->db, stmts[i].sql,
					stmt_at(p, (size_t)i));
		if (r < 0)
			hyd_place__db_err(p, SQLITE_ERROR, "cannot prepare");
	}
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
	pthread_mutex_lock(&p->mu);
	hyd_place__land_tx_end(p);
	pthread_mutex_unlock(&p->mu);
	for (i = 0; i < (int)(sizeof(stmts) / sizeof(*stmts)); i++)
		base_sqlite_finalize(stmt_at(p, (size_t)i));
	if (p->db)
		sqlite3_close(p->db);
	for (i = 0; i < NFD; i++)
		if (p->fds[i].fd >= 0)
			close(p->fds[i].fd);
	if (p->dirfd >= 0)
		close(p->dirfd);
	hyd_sync__rec_close(p->rec);
	pthread_mutex_destroy(&p->rec_mu);
	free(p->pend);
	free(p->whole);
	free(p->cbs);
	free(p->cur.v);
	free(p->flushing.v);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}
