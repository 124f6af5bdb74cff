/*
 * hydrator/sync/hyd_place_land.c — --into's placement meets the landing:
 * a part whose ranges are all recorded is renamed into its path, and a
 * file the landing wrote or found in DIR becomes where its ranges are
 * read (those never placed are read from it, checked, recorded).
 */
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

#define FILL_BATCH 4096u /* ranges read back at a time */

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
			hyd_place__forget(p, ino, (int64_t)off);
			pthread_mutex_unlock(&p->mu);
			break;
		}
		off += len;
	}
	free(buf);
	return r;
}

/* ino's ranges placed and not recorded yet: in the round gathering and
 * the one being recorded. Under mu. */
static int64_t unrecorded(const hyd_place *p, uint64_t ino)
{
	int64_t n = 0;
	size_t i;

	for (i = 0; i < p->npend; i++)
		n += p->pend[i].ino == ino;
	for (i = 0; i < p->fl_npend; i++)
		n += p->fl_pend[i].ino == ino;
	return n;
}

/* ino's ranges from off on that are not recorded. Under mu. */
static int64_t missing_from(hyd_place *p, uint64_t ino, uint64_t off)
{
	int64_t n = INT64_MAX;

	sqlite3_bind_int64(p->st_nmissing, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(p->st_nmissing, 2, (sqlite3_int64)off);
	if (sqlite3_step(p->st_nmissing) == SQLITE_ROW)
		n = sqlite3_column_int64(p->st_nmissing, 0);
	sqlite3_reset(p->st_nmissing);
	return n;
}

int hyd_place_adopt(hyd_place *p, uint64_t ino, uint32_t max_raw, int dirfd,
		    const char *tmp, uint64_t *ret_from)
{
	struct hyd_place_look lk;
	char name[64];
	int64_t pend;
	int slot, r, waited = 0;

	if (ret_from)
		*ret_from = 0;
	pthread_mutex_lock(&p->mu);
again:
	if (hyd_place__look(p, ino, &lk) < 0) {
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	/* The ranges it lacks are placed but not recorded yet (a round
	 * gathers): wait for the rounds under way once, rather than write
	 * the file again. A file that still lacks some goes on at once (the
	 * wait hastens a round: a syncfs). */
	if (lk.wants && !lk.whole && !lk.landed && !waited &&
	    (pend = unrecorded(p, ino)) > 0 &&
	    missing_from(p, ino, lk.missing) <= pend) {
		waited = 1;
		hyd_place__rounds_wait(p);
		goto again;
	}
	if (!lk.whole) {
		/* the ranges before the first one missing are recorded:
		 * the caller's look at the store starts there */
		if (ret_from && lk.wants && !lk.landed)
			*ret_from = lk.missing;
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	r = hyd_place__fd_get(p, ino, 1, &slot);
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
	hyd_place__part_name(ino, name, sizeof(name));
	if (renameat(p->dirfd, name, dirfd, tmp) < 0)
		return errno == ENOENT ? 0 : -errno;
	pthread_mutex_lock(&p->mu);
	p->st.adopted++;
	pthread_mutex_unlock(&p->mu);
	return 1;
}

/* ino's wanted ranges from off from on that are not recorded, the first
 * max of them, in *ret (malloc'd; NULL when none), their count in *ret_n.
 * 0, or -errno. Under mu. */
static int unrecorded_list(hyd_place *p, uint64_t ino, uint64_t from,
			   size_t max, struct cat_chunk **ret, size_t *ret_n)
{
	sqlite3_stmt *st = p->st_unrecorded;
	struct cat_chunk *v = NULL;
	size_t n = 0, cap = 0;
	int rc, r = 0;

	*ret = NULL;
	*ret_n = 0;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)from);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)max);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (sqlite3_column_bytes(st, 2) != (int)sizeof(chunk_id)) {
			r = -EBADMSG;
			break;
		}
		r = base_grow((void **)&v, &cap, n + 1, sizeof(*v));
		if (r < 0)
			break;
		v[n].off = (uint64_t)sqlite3_column_int64(st, 0);
		v[n].len = (uint32_t)sqlite3_column_int64(st, 1);
		memcpy(&v[n].id, sqlite3_column_blob(st, 2), sizeof(chunk_id));
		n++;
	}
	if (r == 0 && rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_reset(st);
	if (r < 0) {
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int hyd_place_unrecorded(hyd_place *p, uint64_t ino, uint64_t from, size_t max,
			 struct cat_chunk **ret, size_t *ret_n)
{
	int r;

	pthread_mutex_lock(&p->mu);
	r = unrecorded_list(p, ino, from, max, ret, ret_n);
	pthread_mutex_unlock(&p->mu);
	return r;
}

/* The ranges of ino not placed yet, read from its landed file, checked
 * against their ids and recorded: DIR holds them (the landing wrote the
 * file from the store, or found it there), so nothing fetches them
 * again. Cheap when all are placed (one look). Under mu (dropped while
 * reading). */
static void fill_missing(hyd_place *p, uint64_t ino)
{
	struct hyd_place_look lk;
	struct cat_chunk *cs = NULL; /* the ranges to read */
	struct pend *v = NULL;	     /* those found */
	size_t n = 0, i, found, vcap = 0;
	uint64_t from;
	uint8_t *buf = NULL;
	size_t bufcap = 0;
	int slot;

	if (hyd_place__look(p, ino, &lk) < 0 || !lk.lacks ||
	    hyd_place__fd_get(p, ino, 0, &slot) < 0)
		return;
	/* in batches: a file's ranges can be millions */
	for (from = lk.missing;;) {
		if (unrecorded_list(p, ino, from, FILL_BATCH, &cs, &n) < 0 ||
		    !n || base_grow((void **)&v, &vcap, n, sizeof(*v)) < 0)
			break;
		pthread_mutex_unlock(&p->mu);
		for (i = 0, found = 0; i < n; i++) {
			size_t got = 0;

			if (cs[i].len > bufcap &&
			    base_grow((void **)&buf, &bufcap, cs[i].len, 1) < 0)
				break;
			if (base_pread_full(p->fds[slot].fd, buf, cs[i].len,
					    (off_t)cs[i].off, &got) < 0 ||
			    got != cs[i].len ||
			    chunk_id_verify(&cs[i].id, buf, got) < 0)
				continue;
			v[found++] = (struct pend){
			    ino, cs[i].off, XXH3_64bits(buf, got), cs[i].len};
		}
		from = cs[n - 1].off + 1;
		free(cs);
		cs = NULL;
		pthread_mutex_lock(&p->mu);
		if (found && hyd_place__record(p, v, found) == 0)
			p->st.found += found;
		if (n < FILL_BATCH)
			break;
	}
	p->fds[slot].refs--;
	free(cs);
	free(buf);
	free(v);
}

/* Open the landing's transaction, or end it and open another when it
 * holds enough: one transaction for many files (a commit per landed
 * file was three WAL writes, and every thousand pages a checkpoint with
 * an fdatasync, all under mu: the placers waited). Under mu. */
static void land_tx(hyd_place *p)
{
	if (p->land_n && (p->land_n >= LAND_TX_FILES ||
			  base_now_ns() - p->land_at > LAND_TX_NS))
		hyd_place__land_tx_end(p);
	if (p->land_n)
		p->land_n++;
	else if (sqlite3_exec(p->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK) {
		p->land_n = 1;
		p->land_at = base_now_ns();
	}
}

/* ino is at relpath with this manifest digest (the read path serves it
 * from there once the sync record vouches for it). Under mu. */
static void note_digest(hyd_place *p, uint64_t ino, const char *relpath,
			const uint8_t *digest)
{
	sqlite3_bind_int64(p->st_setdigest, 1, (sqlite3_int64)ino);
	sqlite3_bind_blob(p->st_setdigest, 2, relpath, (int)strlen(relpath) + 1,
			  SQLITE_STATIC);
	sqlite3_bind_blob(p->st_setdigest, 3, digest, HYD_SYNC_DIGEST_LEN,
			  SQLITE_STATIC);
	/* one that fails only costs reads through the chunks */
	(void)sqlite3_step(p->st_setdigest);
	sqlite3_reset(p->st_setdigest);
	sqlite3_clear_bindings(p->st_setdigest);
}

void hyd_place_landed_file(hyd_place *p, uint64_t ino, const char *relpath,
			   int adopted, const uint8_t *digest)
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
	if (moved || digest)
		land_tx(p);
	if (!moved) {
		if (digest) /* it may have moved in the tree */
			note_digest(p, ino, relpath, digest);
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
		hyd_place__fd_drop(p, ino);
		hyd_place__part_name(ino, name, sizeof(name));
		if (!adopted)
			(void)unlinkat(p->dirfd, name, 0);
	}
	if (digest)
		note_digest(p, ino, relpath, digest);
	fill_missing(p, ino);
	pthread_mutex_unlock(&p->mu);
}
