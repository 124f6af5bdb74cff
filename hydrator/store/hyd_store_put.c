/*
 * hydrator/store/hyd_store_put.c — appending frames, with group commit.
 *
 * A put appends its frame to the current volume (under wmu: a pwrite, no
 * sync) and joins the open group. One thread of the store's own, the
 * syncer, makes groups durable: whenever a group is open and none is being
 * synced it takes the open group (later puts start the next one), drops
 * wmu, fdatasync()s every volume fd the group wrote, then inserts all of the
 * group's index rows in one SQLite transaction, and tells the group's
 * puts. So the rule stays what it was for one put: every frame is durable
 * before the row that points at it commits.
 *
 * Two kinds of put. hyd_store_put waits until its row is committed (or
 * failed). hyd_store_put_async returns once its frame is appended, and the
 * syncer calls the put's callback when the group is done: a thread that
 * lands frames goes on with the next one, so a group holds every frame
 * appended during the previous group's sync, however many threads put —
 * at 1 Gbit/s that is tens of frames per fdatasync instead of one per
 * landing thread. A group is bounded by time (it is taken as soon as the
 * syncer is free: its puts wait at most one sync besides their own) and by
 * bytes: an async put that finds the open group at HYD_GROUP_BYTES while
 * another syncs waits for that sync first, so at most about two groups of
 * frames are ever appended and not yet durable. Readers never wait here:
 * the fetcher hands verified bytes to them before it stores.
 *
 * A group gathers: the syncer takes it GATHER_NS after its first put, or
 * once it holds GATHER_BYTES, or at once when a put waits for it (a
 * synchronous put, a close). Taken as soon as the syncer was
 * free, groups at 1 Gbit/s held about ten 64 KiB frames: an fdatasync, a
 * transaction and their wakeups per ten chunks cost the hydrator 66-68%
 * of a core at 120 MB/s; gathered for 8 ms, 39-46% (2026-12-05, backfill
 * at 1 Gbit/s and 50 ms, the lab of docs/performance.md). Asynchronous
 * puts are backfill's, whose flights end a few ms later for it.
 *
 * A crash loses at most the groups not yet committed: their frames are an
 * unindexed tail that open truncates (store_recover). A failed fdatasync
 * or commit fails every put of the group; their bytes stay as dead space,
 * never written over (a row's outcome may be unknown).
 *
 * A volume that rolls over while a group still has frames in it keeps its
 * write fd until that group is durable (s->retired), so the syncer never
 * syncs a closed or reused fd.
 *
 * Test hook: FERRY_STORE_SYNC_DELAY_MS (read at open) sleeps that long
 * before each group's fdatasync, so tests can kill the process while a
 * group is written but not yet durable, and see groups form.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/store/hyd_store_priv.h"

/* One put in a group. */
struct hyd_put_ent {
	chunk_id id;
	struct hyd_loc loc;
	uint8_t codec;
};

/* An async put to tell when its group is done: its own frame's (dup 0),
 * or one that found its id already in this group (dup 1: told 1). */
struct hyd_put_cb {
	hyd_store_put_cb cb;
	void *arg;
	int dup;
};

/* Bits of a group's filter of the ids it holds: with up to about a
 * thousand frames in a group, a put that is not a duplicate (nearly every
 * one: the fetcher flies each chunk once) is told so without comparing
 * its id with each of them. */
#define GROUP_FILTER_BITS 65536u

struct hyd_group {
	uint64_t seq;
	uint64_t opened_ns; /* base_now_ns of its first put */
	struct hyd_put_ent *v;
	size_t n, cap;
	uint64_t filter[GROUP_FILTER_BITS / 64]; /* ids held, by hash */
	uint64_t bytes;				 /* frame bytes appended */
	int *fds; /* volume fds this group wrote, each once */
	size_t n_fds, cap_fds;
	struct hyd_put_cb *cbs;
	size_t n_cbs, cap_cbs;
	unsigned refs; /* the syncer until done, and each waiting put */
	int done;
	int rc;
};

int hyd_store__put_init(hyd_store *s)
{
	const char *e = getenv("FERRY_STORE_SYNC_DELAY_MS");
	uint64_t v;

	if (e && *e && base_parse_u64(e, 0, 60000, &v) == 0)
		s->sync_delay_ms = (unsigned)v;
	if (pthread_cond_init(&s->gcv, NULL) != 0)
		return -ENOMEM;
	if (base_cond_init(&s->scv) != 0) {
		pthread_cond_destroy(&s->gcv);
		return -ENOMEM;
	}
	s->gcv_ready = 1;
	return 0;
}

static void group_free(struct hyd_group *g)
{
	if (!g)
		return;
	free(g->v);
	free(g->fds);
	free(g->cbs);
	free(g);
}

/* Drop one reference to a done group; the last frees it. Under wmu. */
static void group_unref(struct hyd_group *g)
{
	if (--g->refs == 0)
		group_free(g);
}

void hyd_store__put_stop(hyd_store *s)
{
	pthread_mutex_lock(&s->wmu);
	s->stopping = 1;
	pthread_cond_signal(&s->scv);
	pthread_mutex_unlock(&s->wmu);
	if (s->syncer_started)
		pthread_join(s->syncer, NULL);
	s->syncer_started = 0;
}

void hyd_store__put_fini(hyd_store *s)
{
	size_t i;

	/* No put runs any more, and the syncer took every group a put
	 * made; one left open (no syncer ever ran) had no put waiting. */
	group_free(s->open);
	s->open = NULL;
	for (i = 0; i < s->n_retired; i++)
		close(s->retired[i].fd);
	free(s->retired);
	s->retired = NULL;
	s->n_retired = s->cap_retired = 0;
	if (s->cur_fd >= 0)
		close(s->cur_fd);
	s->cur_fd = -1;
	if (s->gcv_ready) {
		pthread_cond_destroy(&s->gcv);
		pthread_cond_destroy(&s->scv);
	}
	s->gcv_ready = 0;
}

/* The group a frame written now belongs to: the open one, or a new one.
 * Under wmu. */
static struct hyd_group *group_open(hyd_store *s)
{
	struct hyd_group *g = s->open;

	if (g)
		return g;
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->seq = ++s->next_seq;
	g->opened_ns = base_now_ns();
	g->refs = 1; /* the syncer's */
	s->open = g;
	return g;
}

static int group_add_cb(struct hyd_group *g, hyd_store_put_cb cb, void *arg,
			int dup)
{
	if (g->n_cbs == g->cap_cbs) {
		size_t nc = g->cap_cbs ? 2 * g->cap_cbs : 16;
		struct hyd_put_cb *nv = realloc(g->cbs, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		g->cbs = nv;
		g->cap_cbs = nc;
	}
	g->cbs[g->n_cbs++] = (struct hyd_put_cb){cb, arg, dup};
	return 0;
}

/* The filter bit of id: its first bytes (a SHA-256 digest is already
 * uniform). */
static uint32_t filter_bit(const chunk_id *id)
{
	uint32_t h;

	memcpy(&h, id->b, sizeof(h));
	return h % GROUP_FILTER_BITS;
}

static int group_add(struct hyd_group *g, const struct hyd_put_ent *e, int fd)
{
	uint32_t b;
	size_t i;

	if (g->n == g->cap) {
		size_t nc = g->cap ? 2 * g->cap : 16;
		struct hyd_put_ent *nv = realloc(g->v, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		g->v = nv;
		g->cap = nc;
	}
	for (i = 0; i < g->n_fds && g->fds[i] != fd; i++)
		;
	if (i == g->n_fds) {
		if (g->n_fds == g->cap_fds) {
			size_t nc = g->cap_fds ? 2 * g->cap_fds : 2;
			int *nf = realloc(g->fds, nc * sizeof(*nf));

			if (!nf)
				return -ENOMEM;
			g->fds = nf;
			g->cap_fds = nc;
		}
		g->fds[g->n_fds++] = fd;
	}
	g->v[g->n++] = *e;
	g->bytes += e->loc.frame_len;
	b = filter_bit(&e->id);
	g->filter[b / 64] |= 1ull << (b % 64);
	return 0;
}

/* The most bytes an open group gathers before async puts wait: under a
 * bound a quarter of it, so what is in flight stays small beside it. */
static uint64_t group_cap(const hyd_store *s)
{
	uint64_t cap = HYD_GROUP_BYTES;

	if (s->bound && s->bound / 4 < cap)
		cap = s->bound / 4;
	return cap;
}

uint64_t hyd_store__pending_locked(const hyd_store *s)
{
	uint64_t n =
	    (s->open ? s->open->n : 0) + (s->leading ? s->leading->n : 0);

	/* as held: each frame rounded up to a block */
	return (s->open ? s->open->bytes : 0) +
	       (s->leading ? s->leading->bytes : 0) + n * (HYD_BLOCK - 1);
}

/* Is id in a group not yet durable? That group, or NULL. Under wmu. */
static struct hyd_group *group_holding(hyd_store *s, const chunk_id *id)
{
	struct hyd_group *gs[2] = {s->leading, s->open};
	uint32_t b = filter_bit(id);

	for (int k = 0; k < 2; k++) {
		if (!gs[k] || !(gs[k]->filter[b / 64] >> (b % 64) & 1))
			continue;
		for (size_t i = 0; i < gs[k]->n; i++)
			if (!memcmp(gs[k]->v[i].id.b, id->b, CHUNK_ID_LEN))
				return gs[k];
	}
	return NULL;
}

/* Keep the write fd of a volume that rolled until the groups that wrote it
 * are durable; close it now when none did. Under wmu. */
static int retire_fd(hyd_store *s, int fd)
{
	uint64_t seq = s->open	    ? s->open->seq
		       : s->leading ? s->leading->seq
				    : 0;

	if (seq == 0) {
		close(fd);
		return 0;
	}
	if (s->n_retired == s->cap_retired) {
		size_t nc = s->cap_retired ? 2 * s->cap_retired : 4;
		struct hyd_retired_fd *nr =
		    realloc(s->retired, nc * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		s->retired = nr;
		s->cap_retired = nc;
	}
	s->retired[s->n_retired].fd = fd;
	s->retired[s->n_retired].seq = seq;
	s->n_retired++;
	return 0;
}

/* Close retired fds whose groups are all durable (seq <= done). */
static void retired_close(hyd_store *s, uint64_t done)
{
	size_t i, k = 0;

	for (i = 0; i < s->n_retired; i++) {
		if (s->retired[i].seq <= done)
			close(s->retired[i].fd);
		else
			s->retired[k++] = s->retired[i];
	}
	s->n_retired = k;
}

/* Make cur_fd the volume the next frame_len bytes go to, rolling to a new
 * volume when the current one would pass the roll size. Under wmu. */
static int vol_prepare(hyd_store *s, size_t frame_len)
{
	char name[32];
	struct stat sb;
	uint32_t vol = s->cur_vol;
	int fd, r;

	if (vol == 0 ||
	    (s->cur_end > 0 && s->cur_end + frame_len > s->roll_bytes))
		vol++;
	else if (s->cur_fd >= 0)
		return 0;
	if (vol > HYD_VOL_MAX)
		return -ENOSPC;
	r = hyd_store__vol_name(vol, name, sizeof(name));
	if (r < 0)
		return r;
	fd = openat(s->vols_fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* The new name must be durable before any row names the volume:
	 * fdatasync of the file does not persist its directory entry. */
	if (fstat(fd, &sb) < 0 || fsync(s->vols_fd) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (vol != s->cur_vol) {
		/* A leftover file of that number is unindexed (it is newer
		 * than any indexed volume): append after its bytes. */
		s->cur_end = (uint64_t)sb.st_size;
		pthread_mutex_lock(&s->mu);
		s->st.vols++;
		pthread_mutex_unlock(&s->mu);
	} else if ((uint64_t)sb.st_size > s->cur_end) {
		s->cur_end = (uint64_t)sb.st_size;
	}
	if (s->cur_fd >= 0) {
		r = retire_fd(s, s->cur_fd);
		if (r < 0) {
			close(fd);
			return r;
		}
	}
	s->cur_fd = fd;
	s->cur_vol = vol;
	return 0;
}

/* The group's rows in one transaction. Under mu. */
static int insert_group_locked(hyd_store *s, const struct hyd_group *g)
{
	sqlite3_stmt *st = s->st_insert;
	uint64_t raw = 0, stored = 0, held = 0;
	int rc, r;

	hyd_store__read_end_locked(s);
	r = base_sqlite_exec(s->db, "BEGIN IMMEDIATE", "group begin");
	if (r < 0)
		return r;
	for (size_t i = 0; i < g->n; i++) {
		const struct hyd_put_ent *e = &g->v[i];

		sqlite3_bind_blob(st, 1, e->id.b, CHUNK_ID_LEN, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, e->loc.vol);
		sqlite3_bind_int64(st, 3, (int64_t)e->loc.off);
		sqlite3_bind_int64(st, 4, e->loc.frame_len);
		sqlite3_bind_int64(st, 5, e->loc.raw_len);
		sqlite3_bind_int64(st, 6, e->codec);
		sqlite3_bind_int64(st, 7, (int64_t)e->loc.xxh);
		sqlite3_bind_int64(st, 8, hyd_store__next_used_locked(s));
		sqlite3_bind_int64(st, 9, HYD_USED_PIN);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		if (rc != SQLITE_DONE) {
			r = base_sqlite_errno(s->db, rc, "chunk insert");
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
			return r;
		}
		raw += e->loc.raw_len;
		stored += e->loc.frame_len;
		held += HYD_HELD(e->loc.frame_len);
	}
	/* The gets noted since ride along (a failure here only costs
	 * eviction its order). */
	(void)hyd_store__touch_apply_locked(s);
	r = base_sqlite_exec(s->db, "COMMIT", "group commit");
	if (r < 0) {
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		return r;
	}
	s->st.chunks += g->n;
	s->st.raw_bytes += raw;
	s->st.stored_bytes += stored;
	s->st.held_bytes += held;
	s->st.groups++;
	return 0;
}

/* Make the open group durable and index it; the syncer only. Under wmu,
 * which is dropped while syncing and committing. */
static struct hyd_group *lead(hyd_store *s)
{
	struct hyd_group *g = s->open;
	int r = 0;

	s->open = NULL;
	s->leading = g;
	pthread_mutex_unlock(&s->wmu);
	if (s->sync_delay_ms) {
		struct timespec ts = {
		    .tv_sec = s->sync_delay_ms / 1000,
		    .tv_nsec = (long)(s->sync_delay_ms % 1000) * 1000000,
		};

		nanosleep(&ts, NULL);
	}
	/* Durable data before the rows that point at it. */
	for (size_t i = 0; i < g->n_fds && r == 0; i++)
		if (fdatasync(g->fds[i]) < 0)
			r = -errno;
	pthread_mutex_lock(&s->mu);
	s->st.syncs += g->n_fds;
	if (r == 0)
		r = insert_group_locked(s, g);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->wmu);
	g->rc = r;
	g->done = 1;
	s->leading = NULL;
	retired_close(s, g->seq);
	pthread_cond_broadcast(&s->gcv);
	return g;
}

/* How long and how much an open group gathers (see the top). */
#define GATHER_NS (8ull * 1000000ull)
#define GATHER_BYTES (8u << 20)

/* Under wmu: wait while the open group gathers. */
static void gather(hyd_store *s)
{
	while (s->open && !s->stopping && !s->waiters &&
	       s->open->bytes < GATHER_BYTES &&
	       base_now_ns() < s->open->opened_ns + GATHER_NS)
		base_cond_wait_until(&s->scv, &s->wmu,
				     s->open->opened_ns + GATHER_NS);
}

/* The syncer: takes each group once it has gathered and the one before is
 * done; on stop, the last open group too, then ends. */
static void *syncer_main(void *arg)
{
	hyd_store *s = arg;
	struct hyd_group *g;

	base_thread_name("store");
	pthread_mutex_lock(&s->wmu);
	for (;;) {
		while (!s->open && !s->stopping)
			pthread_cond_wait(&s->scv, &s->wmu);
		if (!s->open)
			break;
		gather(s);
		g = lead(s);
		/* The callbacks run without the lock (they may take their
		 * own, or put again); nothing else frees g meanwhile. */
		pthread_mutex_unlock(&s->wmu);
		for (size_t i = 0; i < g->n_cbs; i++)
			g->cbs[i].cb(g->cbs[i].arg,
				     g->rc == 0 && g->cbs[i].dup ? 1 : g->rc);
		if (s->bound) {
			/* Puts wait for the eviction as for a sync, so the
			 * store passes its bound by at most one group. */
			pthread_mutex_lock(&s->wmu);
			s->evicting = 1;
			pthread_mutex_unlock(&s->wmu);
			hyd_store__evict(s);
			pthread_mutex_lock(&s->wmu);
			s->evicting = 0;
			pthread_cond_broadcast(&s->gcv);
			pthread_mutex_unlock(&s->wmu);
		}
		pthread_mutex_lock(&s->wmu);
		group_unref(g);
	}
	pthread_mutex_unlock(&s->wmu);
	return NULL;
}

/* Start the syncer on the first put (a store opened before a fork gets
 * its thread in the process that puts). Under wmu. */
static int syncer_ensure(hyd_store *s)
{
	sigset_t all, old;
	int r;

	/* Close has begun: the syncer may have ended already. */
	if (s->stopping)
		return -ESHUTDOWN;
	if (s->syncer_started)
		return 0;
	/* Signals belong to the threads that asked for them. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = pthread_create(&s->syncer, NULL, syncer_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0)
		return -r;
	s->syncer_started = 1;
	return 0;
}

/* Wait until g is done; its result. Under wmu. */
static int group_wait(hyd_store *s, struct hyd_group *g)
{
	int r;

	g->refs++;
	/* Someone waits: the syncer stops gathering. */
	s->waiters++;
	pthread_cond_signal(&s->scv);
	while (!g->done)
		pthread_cond_wait(&s->gcv, &s->wmu);
	s->waiters--;
	r = g->rc;
	group_unref(g);
	return r;
}

/* Append one frame (its id not stored, not on its way) and join the open
 * group, which is returned in *ret_g. Under wmu. */
static int append(hyd_store *s, struct hyd_put_ent *e, const void *frame,
		  size_t frame_len, const struct frame_info *fi,
		  struct hyd_group **ret_g)
{
	struct hyd_group *g;
	int r, fresh;

	r = syncer_ensure(s);
	if (r == 0)
		r = vol_prepare(s, frame_len);
	if (r < 0)
		return r;
	/* Under a bound frames start on a block: an evicted one then gives
	 * all its blocks back (hyd_store_evict.c, pick_locked). */
	if (s->bound)
		s->cur_end =
		    (s->cur_end + HYD_BLOCK - 1) & ~(uint64_t)(HYD_BLOCK - 1);
	e->loc.vol = s->cur_vol;
	e->loc.off = s->cur_end;
	e->loc.frame_len = (uint32_t)frame_len;
	e->loc.raw_len = fi->raw_len;
	r = base_pwrite_all(s->cur_fd, frame, frame_len, e->loc.off);
	if (r < 0)
		return r;
	/* From here the bytes may be on disk: never write over them again,
	 * even if the row fails (its commit outcome could be unknown). */
	s->cur_end += frame_len;
	fresh = !s->open;
	g = group_open(s);
	r = g ? group_add(g, e, s->cur_fd) : -ENOMEM;
	if (r < 0)
		return r;
	/* The syncer hears of a new group and of one that has gathered
	 * enough, not of every put (each would wake it). */
	if (fresh ||
	    (g->bytes >= GATHER_BYTES && g->bytes - frame_len < GATHER_BYTES))
		pthread_cond_signal(&s->scv);
	*ret_g = g;
	return 0;
}

/* What a put checks before it appends: the frame, then (under wmu, so no
 * other put can store id between this check and the append: a chunk lands
 * once) whether id is stored (1) or in a group not yet durable (*ret_g).
 * 0 to append, 1, -errno. Leaves wmu held when it returns >= 0. */
static int put_begin(hyd_store *s, const chunk_id *id, const void *frame,
		     size_t frame_len, struct hyd_put_ent *e,
		     struct frame_info *fi, struct hyd_group **ret_g)
{
	int r;

	if (!s || !id || !frame)
		return -EINVAL;
	r = frame_header_parse(frame, frame_len,
			       __atomic_load_n(&s->max_raw, __ATOMIC_RELAXED),
			       fi);
	if (r < 0 || fi->frame_len != frame_len)
		return -EBADMSG;
	memset(e, 0, sizeof(*e));
	e->id = *id;
	e->codec = fi->codec;
	e->loc.xxh =
	    hyd_store__frame_sum(frame, (const uint8_t *)frame + FRAME_HDR_LEN,
				 frame_len - FRAME_HDR_LEN);
	pthread_mutex_lock(&s->wmu);
	pthread_mutex_lock(&s->mu);
	r = hyd_store__find_locked(s, id, NULL);
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		pthread_mutex_unlock(&s->wmu);
	*ret_g = r == 0 ? group_holding(s, id) : NULL;
	return r;
}

int hyd_store_put(hyd_store *s, const chunk_id *id, const void *frame,
		  size_t frame_len)
{
	struct frame_info fi;
	struct hyd_put_ent e;
	struct hyd_group *g;
	int r;

	r = put_begin(s, id, frame, frame_len, &e, &fi, &g);
	if (r < 0)
		return r;
	if (r == 0 && g) {
		/* On its way to the index: stored if its group commits. */
		r = group_wait(s, g);
		r = r == 0 ? 1 : r;
	} else if (r == 0) {
		r = append(s, &e, frame, frame_len, &fi, &g);
		if (r == 0)
			r = group_wait(s, g);
	}
	pthread_mutex_unlock(&s->wmu);
	return r;
}

static int put_async(hyd_store *s, const chunk_id *id, const void *frame,
		     size_t frame_len, hyd_store_put_cb cb, void *arg,
		     int nowait)
{
	struct frame_info fi;
	struct hyd_put_ent e;
	struct hyd_group *g;
	int r;

	if (!cb)
		return -EINVAL;
	r = put_begin(s, id, frame, frame_len, &e, &fi, &g);
	if (r < 0)
		return r;
	if (r == 0 && g) {
		r = group_add_cb(g, cb, arg, 1);
	} else if (r == 0) {
		/* Bounded bytes not yet durable: a full open group waits
		 * for the sync in progress (the syncer then takes it). */
		while (!nowait && s->open && s->open->bytes >= group_cap(s) &&
		       (s->leading || s->evicting))
			pthread_cond_wait(&s->gcv, &s->wmu);
		if (nowait && s->open && s->open->bytes >= group_cap(s) &&
		    (s->leading || s->evicting)) {
			pthread_mutex_unlock(&s->wmu);
			return -EAGAIN;
		}
		r = append(s, &e, frame, frame_len, &fi, &g);
		/* A callback that cannot be recorded: the frame is appended
		 * and will be indexed, but this put is told it failed. */
		if (r == 0)
			r = group_add_cb(g, cb, arg, 0);
	}
	pthread_mutex_unlock(&s->wmu);
	return r;
}

int hyd_store_put_async(hyd_store *s, const chunk_id *id, const void *frame,
			size_t frame_len, hyd_store_put_cb cb, void *arg)
{
	return put_async(s, id, frame, frame_len, cb, arg, 0);
}

int hyd_store__put_async_nowait(hyd_store *s, const chunk_id *id,
				const void *frame, size_t frame_len,
				hyd_store_put_cb cb, void *arg)
{
	return put_async(s, id, frame, frame_len, cb, arg, 1);
}
