/*
 * hydrator/store/hyd_store_evict.c — the store under a bound: least
 * recently used chunks evicted, pins, and a capacity tier below.
 *
 * Order. chunk.used holds an access number (used_clock, one more for each
 * put and each get that hits); the index chunk_used makes "the N least
 * recently used" a walk of N index entries, so an eviction costs what it
 * evicts, not the store's size. A get only notes its id and number in
 * memory (no write on the read path); the notes are written in the next
 * group's transaction, before an eviction picks, at close, and at once
 * when HYD_TOUCH_MAX are waiting. A crash loses only notes: eviction's
 * order, never a chunk.
 *
 * Eviction. After a group of puts commits (on the syncer, so the store
 * exceeds the bound by at most the puts in flight) and when a bound is
 * set: while held_bytes (frames rounded up to a block, as they lie on
 * disk: under a bound each starts on one) and the groups in flight are
 * over bound - bound/32, a batch of the least
 * recently used unpinned rows is taken; with a capacity tier each frame is
 * read, checked by the XXH3-64 its row keeps, and put there (durable
 * before the rows here go); then the rows go the way a collection's do
 * (hyd_store__sweep: rows, the complete mark and the free record in one
 * transaction; holes punched after it commits; a crash between is
 * finished at the next open, before anything is appended). A chunk a get
 * is reading (busy: marked under mu between its lookup and the end of its
 * read) is skipped by the sweep, so no read ever meets a punched frame.
 *
 * Pins. pin(id) rows name chunks never evicted: a stored chunk's used
 * becomes HYD_USED_PIN, and a put of a pinned id gets it as it lands (the
 * insert looks at pin).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/store/hyd_store_priv.h"

#define EVICT_BATCH 256u

int hyd_store__evict_init(hyd_store *s)
{
	sqlite3_stmt *st = NULL;
	int rc;

	s->touch = malloc(HYD_TOUCH_MAX * sizeof(*s->touch));
	if (!s->touch)
		return -ENOMEM;
	rc = sqlite3_prepare_v2(
	    s->db, "SELECT COALESCE(MAX(used), 0) FROM chunk WHERE used < ?1",
	    -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(st, 1, HYD_USED_PIN);
	if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		s->used_clock = sqlite3_column_int64(st, 0) + 1;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : base_sqlite_errno(s->db, rc, "store used");
}

/* Write the notes in a transaction of their own. Under mu. */
static int touch_flush_locked(hyd_store *s)
{
	int r;

	if (!s->n_touch)
		return 0;
	hyd_store__read_end_locked(s);
	r = base_sqlite_exec(s->db, "BEGIN IMMEDIATE", "store touch");
	if (r < 0)
		return r;
	r = hyd_store__touch_apply_locked(s);
	if (r == 0)
		r = base_sqlite_exec(s->db, "COMMIT", "store touch");
	if (r < 0 && !sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	return r;
}

void hyd_store__evict_fini(hyd_store *s)
{
	if (s->db && s->touch) {
		pthread_mutex_lock(&s->mu);
		(void)touch_flush_locked(s);
		pthread_mutex_unlock(&s->mu);
	}
	free(s->touch);
	s->touch = NULL;
}

int64_t hyd_store__next_used_locked(hyd_store *s)
{
	return s->used_clock++;
}

int hyd_store__touch_apply_locked(hyd_store *s)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if (!s->n_touch)
		return 0;
	rc = sqlite3_prepare_v2(s->db,
				"UPDATE chunk SET used = ?2 WHERE id = ?1"
				" AND used < ?3",
				-1, &st, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < s->n_touch; i++) {
		sqlite3_bind_blob(st, 1, s->touch[i].id.b, CHUNK_ID_LEN,
				  SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, s->touch[i].used);
		sqlite3_bind_int64(st, 3, HYD_USED_PIN);
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	s->n_touch = 0;
	return rc == SQLITE_OK ? 0
			       : base_sqlite_errno(s->db, rc, "store touch");
}

void hyd_store__touch_locked(hyd_store *s, const chunk_id *id)
{
	s->st.hits++;
	/* Without a bound nothing is evicted: no order to keep. */
	if (!s->bound || !s->touch)
		return;
	if (s->n_touch == HYD_TOUCH_MAX)
		(void)touch_flush_locked(s);
	s->touch[s->n_touch].id = *id;
	s->touch[s->n_touch].used = s->used_clock++;
	s->n_touch++;
}

void hyd_store__busy_locked(hyd_store *s, const chunk_id *id, int on)
{
	struct hyd_busy *free_slot = NULL;

	if (!s->bound)
		return;
	for (size_t i = 0; i < HYD_BUSY_MAX; i++) {
		struct hyd_busy *b = &s->busy[i];

		if (b->n && !memcmp(b->id.b, id->b, CHUNK_ID_LEN)) {
			if (on)
				b->n++;
			else
				b->n--;
			return;
		}
		if (!b->n && !free_slot)
			free_slot = b;
	}
	/* More reads at once than slots: that one goes unmarked, and a
	 * sweep racing it costs a fetch (its frame reads as corrupt). */
	if (on && free_slot) {
		free_slot->id = *id;
		free_slot->n = 1;
	}
}

int hyd_store__busy_has_locked(const hyd_store *s, const chunk_id *id)
{
	for (size_t i = 0; i < HYD_BUSY_MAX; i++)
		if (s->busy[i].n &&
		    !memcmp(s->busy[i].id.b, id->b, CHUNK_ID_LEN))
			return 1;
	return 0;
}

/* Read the frame at loc into buf (room for loc->frame_len) and check it
 * against the row's XXH3-64. 0, -ENOTSUP (a row from before checksums:
 * not copied), -EBADMSG, -errno. Takes mu for the fd. */
static int frame_copy(hyd_store *s, const struct hyd_loc *loc, uint8_t *buf)
{
	size_t got = 0;
	int slot = -1, fd = -1, r;

	if (!loc->has_xxh)
		return -ENOTSUP;
	pthread_mutex_lock(&s->mu);
	r = hyd_store__fd_acquire_locked(s, loc->vol, &slot, &fd);
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		return r;
	r = base_pread_full(fd, buf, loc->frame_len, loc->off, &got);
	pthread_mutex_lock(&s->mu);
	hyd_store__fd_release_locked(s, slot, fd);
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		return r;
	if (got != loc->frame_len || loc->frame_len < FRAME_HDR_LEN ||
	    hyd_store__frame_sum(buf, buf + FRAME_HDR_LEN,
				 loc->frame_len - FRAME_HDR_LEN) != loc->xxh)
		return -EBADMSG;
	return 0;
}

/* Copy id's frame from `from` into `to`, waiting for it to be durable
 * there. 0, 1 (there already), -ENOENT, -errno. */
static int copy_chunk(hyd_store *from, hyd_store *to, const chunk_id *id)
{
	struct hyd_loc loc;
	uint8_t *buf;
	int r;

	pthread_mutex_lock(&from->mu);
	r = hyd_store__find_locked(from, id, &loc);
	pthread_mutex_unlock(&from->mu);
	if (r <= 0)
		return r == 0 ? -ENOENT : r;
	buf = malloc(loc.frame_len);
	if (!buf)
		return -ENOMEM;
	r = frame_copy(from, &loc, buf);
	if (r == 0)
		r = hyd_store_put(to, id, buf, loc.frame_len);
	free(buf);
	return r;
}

int hyd_store__lower_has(hyd_store *s, const chunk_id *id)
{
	return s->lower ? hyd_store_has(s->lower, id) : 0;
}

static void promoted(void *arg, int rc)
{
	(void)arg;
	(void)rc;
}

int hyd_store__lower_get(hyd_store *s, const chunk_id *id, void *out,
			 size_t cap, size_t *ret_len)
{
	struct hyd_loc loc;
	uint8_t *buf;
	int r;

	r = s->lower ? hyd_store_get(s->lower, id, out, cap, ret_len) : -ENOENT;
	if (r == -ENOENT) {
		pthread_mutex_lock(&s->mu);
		s->st.misses++;
		pthread_mutex_unlock(&s->mu);
	}
	if (r < 0)
		return r;
	/* A hit below: the frame comes back up (what was read is verified
	 * already; a copy that fails only means the next get asks below
	 * again). */
	pthread_mutex_lock(&s->lower->mu);
	r = hyd_store__find_locked(s->lower, id, &loc);
	pthread_mutex_unlock(&s->lower->mu);
	buf = r > 0 ? malloc(loc.frame_len) : NULL;
	if (buf && frame_copy(s->lower, &loc, buf) == 0 &&
	    hyd_store__put_async_nowait(s, id, buf, loc.frame_len, promoted,
					NULL) >= 0) {
		pthread_mutex_lock(&s->mu);
		s->st.promoted++;
		s->st.hits++;
		pthread_mutex_unlock(&s->mu);
	}
	free(buf);
	return 0;
}

/* Frames of a batch put into the capacity tier, all durable there before
 * this returns. */
struct demote_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned left;
	uint64_t kept;
};

static void demoted(void *arg, int rc)
{
	struct demote_wait *w = arg;

	pthread_mutex_lock(&w->mu);
	if (rc >= 0)
		w->kept++;
	w->left--;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static uint64_t demote(hyd_store *s, const struct hyd_gc_row *v,
		       const uint64_t *xxh, size_t n)
{
	struct demote_wait w = {.left = 0, .kept = 0};
	uint32_t max = 0;
	uint8_t *buf;

	for (size_t i = 0; i < n; i++)
		if (v[i].frame_len > max)
			max = v[i].frame_len;
	buf = malloc(max ? max : 1);
	if (!buf)
		return 0;
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	for (size_t i = 0; i < n; i++) {
		struct hyd_loc loc = {.vol = v[i].vol,
				      .off = v[i].off,
				      .frame_len = v[i].frame_len,
				      .raw_len = v[i].raw_len,
				      .has_xxh = 1,
				      .xxh = xxh[i]};
		int r = frame_copy(s, &loc, buf);

		if (r == 0) {
			pthread_mutex_lock(&w.mu);
			w.left++;
			pthread_mutex_unlock(&w.mu);
			r = hyd_store_put_async(s->lower, &v[i].id, buf,
						v[i].frame_len, demoted, &w);
			if (r != 0) {
				pthread_mutex_lock(&w.mu);
				w.left--;
				w.kept += r == 1;
				pthread_mutex_unlock(&w.mu);
			}
		}
	}
	pthread_mutex_lock(&w.mu);
	while (w.left)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	pthread_mutex_destroy(&w.mu);
	pthread_cond_destroy(&w.cv);
	free(buf);
	return w.kept;
}

/* A frame that does not end on a block leaves its last block allocated
 * when punched: taken too when no indexed frame starts in it (frames put
 * under the bound start on a block, so one appended later starts past
 * it; a frame from before the bound may start there, and keeps it).
 * Under mu. */
static void block_tails_locked(hyd_store *s, struct hyd_gc_row *v, size_t n)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(
		s->db,
		"SELECT 1 FROM chunk WHERE vol = ?1 AND off >= ?2"
		" AND off < ?3 LIMIT 1",
		-1, &st, NULL) != SQLITE_OK)
		return;
	for (size_t i = 0; i < n; i++) {
		uint64_t end = v[i].off + v[i].frame_len;
		uint64_t aend =
		    (end + HYD_BLOCK - 1) & ~(uint64_t)(HYD_BLOCK - 1);

		if (aend == end || aend - v[i].off > UINT32_MAX)
			continue;
		sqlite3_bind_int64(st, 1, v[i].vol);
		sqlite3_bind_int64(st, 2, (int64_t)end);
		sqlite3_bind_int64(st, 3, (int64_t)aend);
		if (sqlite3_step(st) == SQLITE_DONE)
			v[i].punch_len = (uint32_t)(aend - v[i].off);
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
}

/* The least recently used unpinned rows, up to EVICT_BATCH and `need`
 * frame bytes, into v (xxh beside; 0 with no checksum). Under mu. */
static size_t pick_locked(hyd_store *s, uint64_t need, struct hyd_gc_row *v,
			  uint64_t *xxh)
{
	sqlite3_stmt *st = NULL;
	uint64_t bytes = 0;
	size_t n = 0;
	int rc;

	(void)touch_flush_locked(s);
	rc = sqlite3_prepare_v2(s->db,
				"SELECT id, vol, off, frame_len, raw_len, xxh"
				" FROM chunk WHERE used < ?1 ORDER BY used"
				" LIMIT ?2",
				-1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, HYD_USED_PIN);
		sqlite3_bind_int64(st, 2, EVICT_BATCH + HYD_BUSY_MAX);
	}
	while (rc == SQLITE_OK && n < EVICT_BATCH && bytes < need &&
	       sqlite3_step(st) == SQLITE_ROW) {
		int64_t vol = sqlite3_column_int64(st, 1);

		if (sqlite3_column_bytes(st, 0) != CHUNK_ID_LEN || vol <= 0 ||
		    vol > HYD_VOL_MAX)
			continue; /* not a row we wrote */
		memcpy(v[n].id.b, sqlite3_column_blob(st, 0), CHUNK_ID_LEN);
		if (hyd_store__busy_has_locked(s, &v[n].id))
			continue;
		v[n].vol = (uint32_t)vol;
		v[n].off = (uint64_t)sqlite3_column_int64(st, 2);
		v[n].frame_len = (uint32_t)sqlite3_column_int64(st, 3);
		v[n].raw_len = (uint32_t)sqlite3_column_int64(st, 4);
		v[n].punch_len = 0;
		xxh[n] = (uint64_t)sqlite3_column_int64(st, 5);
		bytes += HYD_HELD(v[n].frame_len);
		n++;
	}
	sqlite3_finalize(st);
	block_tails_locked(s, v, n);
	return n;
}

/* What the store holds on disk: indexed frames and those appended for
 * the groups on their way (their room is made before they land). */
static uint64_t stored_now(hyd_store *s)
{
	uint64_t pending, stored;

	pthread_mutex_lock(&s->wmu);
	pending = hyd_store__pending_locked(s);
	pthread_mutex_unlock(&s->wmu);
	pthread_mutex_lock(&s->mu);
	stored = s->st.held_bytes;
	pthread_mutex_unlock(&s->mu);
	return stored + pending;
}

void hyd_store__evict(hyd_store *s)
{
	struct hyd_gc_row v[EVICT_BATCH];
	uint64_t xxh[EVICT_BATCH], kept = 0, stored, low, bytes;
	uint32_t vols[EVICT_BATCH];
	size_t n, gone, nv;

	if (!s->bound)
		return;
	pthread_mutex_lock(&s->emu);
	stored = stored_now(s);
	low = s->bound - s->bound / 32;
	if (stored <= s->bound) {
		pthread_mutex_unlock(&s->emu);
		return;
	}
	while (stored > low) {
		pthread_mutex_lock(&s->mu);
		hyd_store__read_end_locked(s);
		n = pick_locked(s, stored - low, v, xxh);
		pthread_mutex_unlock(&s->mu);
		if (n == 0) {
			if (!s->evict_warned)
				base_warn("cache bound reached with nothing "
					  "left to evict (pinned, or being "
					  "read) dir=%s bound=%" PRIu64
					  " stored=%" PRIu64,
					  s->dir, s->bound, stored);
			s->evict_warned = 1;
			break;
		}
		if (s->lower)
			kept = demote(s, v, xxh, n);
		if (hyd_store__sweep(s, v, n, 1, &gone, &bytes) < 0 ||
		    hyd_store__punch_free(s) < 0)
			break;
		nv = 0;
		for (size_t i = 0; i < n; i++) {
			size_t k;

			if (!v[i].frame_len)
				continue;
			for (k = 0; k < nv && vols[k] != v[i].vol; k++)
				;
			if (k == nv)
				vols[nv++] = v[i].vol;
		}
		hyd_store__vols_drop_empty(s, vols, nv);
		pthread_mutex_lock(&s->mu);
		s->st.evicted += gone;
		s->st.evicted_bytes += bytes;
		s->st.demoted += kept < gone ? kept : gone;
		pthread_mutex_unlock(&s->mu);
		stored = stored_now(s);
		if (gone == 0)
			break; /* every pick busy or gone: next time */
	}
	pthread_mutex_unlock(&s->emu);
}

int hyd_store_set_bound(hyd_store *s, uint64_t bound, hyd_store *lower)
{
	uint64_t stored;

	if (!s || lower == s)
		return -EINVAL;
	s->bound = bound;
	s->lower = lower;
	pthread_mutex_lock(&s->mu);
	s->st.bound = bound;
	stored = s->st.held_bytes;
	pthread_mutex_unlock(&s->mu);
	if (bound && stored > bound)
		hyd_store__evict(s);
	return 0;
}

int hyd_store_pin(hyd_store *s, const chunk_id *ids, size_t n)
{
	sqlite3_stmt *ins = NULL, *up = NULL;
	chunk_id *below = NULL;
	size_t nb = 0;
	int rc, r;

	if (!s || (n && !ids))
		return -EINVAL;
	if (s->lower && n) {
		below = malloc(n * sizeof(*below));
		if (!below)
			return -ENOMEM;
	}
	pthread_mutex_lock(&s->mu);
	hyd_store__read_end_locked(s);
	rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(
		    s->db, "INSERT OR IGNORE INTO pin(id) VALUES(?1)", -1, &ins,
		    NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(
		    s->db, "UPDATE chunk SET used = ?2 WHERE id = ?1", -1, &up,
		    NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_blob(ins, 1, ids[i].b, CHUNK_ID_LEN,
				  SQLITE_STATIC);
		rc =
		    sqlite3_step(ins) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(ins);
		if (rc != SQLITE_OK)
			break;
		sqlite3_bind_blob(up, 1, ids[i].b, CHUNK_ID_LEN, SQLITE_STATIC);
		sqlite3_bind_int64(up, 2, HYD_USED_PIN);
		rc = sqlite3_step(up) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
		sqlite3_reset(up);
		if (rc == SQLITE_OK && below && sqlite3_changes(s->db) == 0)
			below[nb++] = ids[i];
	}
	sqlite3_finalize(ins);
	sqlite3_finalize(up);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	r = rc == SQLITE_OK ? 0 : base_sqlite_errno(s->db, rc, "store pin");
	if (r < 0 && !sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	s->pinned_at_ns = 0; /* count again */
	pthread_mutex_unlock(&s->mu);
	/* Pinned chunks the capacity tier holds come up (pinned as they
	 * land). */
	for (size_t i = 0; r == 0 && i < nb; i++) {
		int c = copy_chunk(s->lower, s, &below[i]);

		if (c < 0 && c != -ENOENT && c != -ENOTSUP && c != -EBADMSG)
			r = c;
	}
	free(below);
	return r;
}

void hyd_store__pinned_count_locked(hyd_store *s)
{
	sqlite3_stmt *st = NULL;
	uint64_t now = base_now_ns();

	if (!s->bound ||
	    (s->pinned_at_ns && now - s->pinned_at_ns < 1000000000ull))
		return;
	s->pinned_at_ns = now;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT count(*), total(frame_len) FROM chunk"
			       " WHERE used >= ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, HYD_USED_PIN);
		if (sqlite3_step(st) == SQLITE_ROW) {
			s->st.pinned_chunks =
			    (uint64_t)sqlite3_column_int64(st, 0);
			s->st.pinned_bytes =
			    (uint64_t)sqlite3_column_double(st, 1);
		}
	}
	sqlite3_finalize(st);
}
