/*
 * hydrator/sync/hyd_sync.c — `ferry sync` as a library call: hydrate every
 * chunk of a catalog into the store, then write the tree (hyd_materialize.c).
 *
 * Same parts as the mount, no FUSE: URL check, cache directory, the chunk
 * store (its flock keeps a mount and a sync off one cache at a time), the
 * catalog (from the cache when the server is down), the fetcher. The store
 * is the progress record: a chunk already stored is never fetched again,
 * so an interrupted sync resumes where it stopped.
 *
 * Hydration walks the distinct chunks twice: a counting pass (totals and
 * what is stored already, for the percentage and ETA) and a fetching pass
 * that keeps a window of backfill-class flights outstanding. The fetching
 * pass runs on its own thread (with its own catalog connection) while the
 * writer (hyd_materialize.c) writes the tree: both go in inode order, the
 * scan's depth-first order, so the writer follows right behind the
 * fetcher and waits only for chunks not stored yet. Writing thus costs no
 * time of its own on a link slower than the disk. The window is
 * bounded (jobs * 64 flights, at most 1,024, and the raw bytes a quarter
 * of the timeout moves at the rate seen so far, 8-64 MiB) because a
 * flight's deadline runs from its submission: on a slow link, a deep
 * queue would time out chunks that never had a connection. A flight
 * stays in the window until its frame is durable in the store, so at
 * 1 Gbit/s the window must also cover a group's sync. A failed chunk
 * is retried once after the pass; the files that need a chunk still
 * missing are named by the writer, which does not try such a chunk a
 * third time. A chunk the server refuses because the source changed
 * since the scan (409, -ESTALE) is final at once: not retried, the rest
 * of its file is not asked for, and the writer names the file once.
 * After HYD_SYNC_GIVE_UP failures in a row without one success the
 * server is taken as gone and fetching stops (each would wait out its
 * timeout).
 *
 * Pending files (catalog format 2): their manifests are consumed as the
 * source publishes them. A manifest thread (hyd_sync_manifest.c) makes
 * them local segment by segment in ino order while the fetching pass
 * streams the chunks of the manifests already local; the fetching pass
 * takes the files whose manifest arrived between two chunks of its
 * stream (and after it, until the manifest thread is done) and asks for
 * their chunks too. The writer waits, while hydration runs, for a pending
 * file's manifest as it waits for chunks, so no file is materialized
 * before its manifest is local and checked; one still missing after
 * hydration is fetched by the writer itself (per-file endpoint) or the
 * file fails. Totals: the counting pass counts the manifests local at
 * the start; a newly arrived manifest's chunks are counted as they come
 * (each occurrence: a chunk shared with another manifest counts twice),
 * and a recount at the end of hydration makes the final numbers exact.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/fetch/hyd_open.h"
#include "hydrator/sync/hyd_sync_priv.h"
#include "hydrator/trace/hyd_trace.h"

#define JOBS_DEFAULT 8u
#define TIMEOUT_DEFAULT_S 30L
#define CONNECT_TIMEOUT_S 5L
#define WINDOW_PER_JOB 64u
#define WINDOW_MIN 32u
#define WINDOW_MAX 1024u
/* Raw bytes outstanding: what a quarter of the timeout moves at the rate
 * seen so far, within these bounds (WINDOW_BYTES_MIN until 1 s of it). */
#define WINDOW_BYTES_MIN (8ull << 20)
#define WINDOW_BYTES_MAX (64ull << 20)
#define HYD_SYNC_GIVE_UP 64u
#define TICK_NS 200000000ull
#define WAIT_SLACK_NS 2000000000ull
#define SEC_NS 1000000000ull
#define NEW_BATCH 64u /* inos taken from the manifest thread at a time */
/* Raw bytes of verified chunks held for the writer (hyd_sync_handoff.c) */
#define HANDOFF_BYTES (64ull << 20)
#define HANDOFF_WAIT_MS 50u /* a put into a full hand-off, at most */

struct slot {
	struct hyd_flight *fl;
	chunk_id id;
	uint32_t len;
	uint64_t deadline;
	uint64_t ino, off; /* its first use, for the hand-off (ino 0: none) */
};

struct want {
	chunk_id id;
	uint32_t len;
};

struct sync {
	const struct hyd_sync_opts *o;
	struct hyd_sync_result *res;
	struct hyd_open op;    /* URL, cache directory, store, catalog */
	cat_reader *cat_fetch; /* the fetching thread's own connection */
	/* --cacheable: a reader for pack lists (cat_fetch is locked in its
	 * stream), and the pack asked for last, whose chunks are skipped. */
	cat_reader *cat_pack;
	struct hyd_pack_obj *pack;
	struct cat_pack pack_p;
	uint64_t pack_part;
	hyd_fetch *fetch;
	struct hyd_sync_handoff *handoff; /* reaped flights for the writer */
	/* Pending files (only when some manifests are not local yet and the
	 * server answers): the manifest fetcher, the manifest thread with its
	 * own reader, and the fetching thread's reader for files whose
	 * manifest arrived (cat_fetch is busy in its stream). */
	hyd_manifest *manifest;
	struct hyd_sync_mq *mq;
	cat_reader *cat_mq, *cat_new;
	uint64_t manifests_missing; /* at the counting pass */
	/* Files whose manifest arrived and whose chunks the fetching pass
	 * has counted into the totals (__atomic): until every missing one
	 * is counted (or answered "changed"), the totals still grow. */
	uint64_t manifests_counted;
	int fresh; /* manifests arrived during the run: recount at the end */
	uint64_t t0, timeout_ns;
	int retrying; /* second pass over failed chunks */
	int gave_up;

	/* hydration window, a ring */
	struct slot *ring;
	size_t window, head, n;
	uint64_t bytes;		/* raw bytes of the n outstanding */
	uint64_t fetched_bytes; /* raw bytes fetched in this run */
	struct want *failed;
	size_t nfailed, capfailed;
	struct hyd_sync_dead *dead; /* failed again on the retry, or 409 */
	size_t ndead, capdead;
	unsigned fail_streak;
	/* Files a chunk of which the server refused because the source
	 * changed since the scan (409): lost for this generation. The rest
	 * of such a file's chunks is not asked for (the stream goes in ino
	 * order, so stale_max is all it needs to look at), and the writer
	 * names the file once. */
	uint64_t *stale;
	size_t nstale, capstale;
	uint64_t stale_max;

	/* progress: st is written by both threads, under lock */
	pthread_mutex_t lock;
	struct hyd_mat *mat; /* told when the fetching pass ends */
	struct hyd_status st;
	uint64_t last_tick, rate_t, rate_wire, phase_t0;
	uint64_t stored_at_start; /* raw bytes stored before fetching */

	/* a subtree URL or filter rules: what is transferred */
	char *base;    /* the namespace's URL, without the subtree */
	char *sub;     /* the subtree's path, "" for the whole tree */
	int sub_slash; /* it ended in '/': its contents go into DEST */
	uint64_t root_ino;
	const char *root_name;	 /* in sub: DEST/root_name; NULL: into DEST */
	struct hyd_sync_sel sel; /* inactive: every file */
	struct hyd_sync_unsafe unsafe; /* names the reader skips */
	struct hyd_sync_seeds seeds;   /* DEST's files and the seed dirs */
	struct hyd_sync_backup backup; /* --backup, its dir made absolute */
	char *backup_dir;
	struct hyd_sync_opts *om; /* o, writable: a single file's DEST */
	/* a single-file source: DEST's directory, and the file's name in it
	 * (DEST's own when DEST is not a directory: rsync's rule) */
	char *single_dest, *single_name;
};

/* ---- DEST inside a ferry mount ---- */

static int is_ferry_cb(void *ctx, const struct base_mount *m)
{
	const dev_t *dev = ctx;

	return makedev(m->major, m->minor) == *dev &&
	       !strcmp(m->fstype, "fuse.ferry");
}

int hyd_sync__mountinfo_is_ferry(const char *mi, dev_t dev)
{
	return base_mountinfo_each(mi, is_ferry_cb, &dev) == 1;
}

int hyd_sync__dest_check(const char *dest)
{
	char path[PATH_MAX], *slash, *mi;
	struct statfs sf;
	struct stat st;
	int r;

	if (strlen(dest) >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dest, strlen(dest) + 1);
	/* The nearest existing ancestor decides where DEST would be made. */
	while (stat(path, &st) < 0) {
		if (errno != ENOENT)
			return -errno;
		slash = strrchr(path, '/');
		if (!slash) {
			memcpy(path, ".", 2);
			continue;
		}
		if (slash == path)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	if (statfs(path, &sf) < 0)
		return -errno;
	if (sf.f_type != HYD_FUSE_SUPER_MAGIC)
		return 0;
	/* An unreadable table counts as a ferry mount: refusing is safe. */
	r = base_mountinfo_read(&mi) < 0 ||
		    hyd_sync__mountinfo_is_ferry(mi, st.st_dev)
		? -EXDEV
		: 0;
	free(mi);
	return r;
}

/* ---- progress ---- */

static void status_fill(struct sync *s, int final)
{
	struct hyd_fetch_stats fs;
	struct hyd_store_stats ss;
	uint64_t now = base_now_ns(), left;
	double dt, rate_raw;

	memset(&fs, 0, sizeof(fs));
	if (s->fetch)
		hyd_fetch_stats(s->fetch, &fs);
	if (hyd_store_stats(s->op.store, &ss) == 0)
		s->st.rest_bytes = ss.stored_bytes;
	s->st.wire_bytes = fs.wire_bytes;
	/* While hydrating; hydrate_done and the end of run count them. A
	 * manifest counts as local here once its chunks are in the totals
	 * (or it is a "changed" answer, with none): so manifests_local ==
	 * manifests_total says the totals are final (the progress line
	 * shows a percentage only then). */
	if (s->mq && s->st.state == HYD_STATE_BACKFILLING)
		s->st.manifests_local =
		    s->st.manifests_total - s->manifests_missing +
		    hyd_sync__mq_changed(s->mq) +
		    __atomic_load_n(&s->manifests_counted, __ATOMIC_RELAXED);
	s->st.mismatches = fs.mismatches;
	s->st.retries = fs.retries;
	s->st.failures = fs.failures;
	s->st.elapsed_s = (double)(now - s->t0) / 1e9;
	s->st.rate_avg =
	    s->st.elapsed_s > 0 ? (double)fs.wire_bytes / s->st.elapsed_s : 0;
	/* rate_now: wire bytes over the last second or so. */
	dt = (double)(now - s->rate_t) / 1e9;
	if (dt >= 1.0 || final) {
		s->st.rate_now =
		    dt > 0 ? (double)(fs.wire_bytes - s->rate_wire) / dt : 0;
		s->rate_t = now;
		s->rate_wire = fs.wire_bytes;
	}
	/* ETA from the phase's own progress: raw bytes stored while
	 * hydrating, file bytes checked or written after. */
	dt = (double)(now - s->phase_t0) / 1e9;
	s->st.eta_s = -1;
	if (s->st.state == HYD_STATE_BACKFILLING) {
		left = s->st.unique_bytes_total - s->st.unique_bytes_stored;
		rate_raw = dt > 0.5 ? (double)(s->st.unique_bytes_stored -
					       s->stored_at_start) /
					  dt
				    : 0;
		if (rate_raw > 0)
			s->st.eta_s = (int64_t)((double)left / rate_raw);
	} else if (s->st.bytes_total) {
		left = s->st.bytes_total - s->st.bytes_hydrated;
		rate_raw = dt > 0.5 ? (double)s->st.bytes_hydrated / dt : 0;
		if (rate_raw > 0)
			s->st.eta_s = (int64_t)((double)left / rate_raw);
	}
	if (final)
		s->st.eta_s = 0;
}

static void progress(struct sync *s, int force)
{
	uint64_t now;

	if (!s->o->progress)
		return;
	now = base_now_ns();
	pthread_mutex_lock(&s->lock);
	if (force || now - s->last_tick >= TICK_NS) {
		s->last_tick = now;
		status_fill(s, 0);
		s->o->progress(s->o->progress_arg, &s->st);
	}
	pthread_mutex_unlock(&s->lock);
}

static void mat_tick(void *arg, uint64_t files_done, uint64_t bytes_done)
{
	struct sync *s = arg;

	pthread_mutex_lock(&s->lock);
	s->st.files_hydrated = files_done;
	s->st.bytes_hydrated = bytes_done;
	pthread_mutex_unlock(&s->lock);
	progress(s, 0);
}

/* ---- hydration ---- */

static int failed_add(struct sync *s, const chunk_id *id, uint32_t len)
{
	struct want *nf;

	if (s->nfailed == s->capfailed) {
		size_t cap = s->capfailed ? s->capfailed * 2 : 64;

		nf = realloc(s->failed, cap * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		s->failed = nf;
		s->capfailed = cap;
	}
	s->failed[s->nfailed].id = *id;
	s->failed[s->nfailed].len = len;
	s->nfailed++;
	return 0;
}

static int dead_add(struct sync *s, const chunk_id *id, int err)
{
	struct hyd_sync_dead *nd;

	if (s->ndead == s->capdead) {
		size_t cap = s->capdead ? s->capdead * 2 : 64;

		nd = realloc(s->dead, cap * sizeof(*nd));
		if (!nd)
			return -ENOMEM;
		s->dead = nd;
		s->capdead = cap;
	}
	s->dead[s->ndead].id = *id;
	s->dead[s->ndead].err = err;
	s->ndead++;
	return 0;
}

/* File ino lost a chunk to a 409 (the source changed since the scan). */
static void stale_add(struct sync *s, uint64_t ino)
{
	uint64_t *v;

	if (s->nstale && s->stale[s->nstale - 1] == ino)
		return;
	if (s->nstale == s->capstale) {
		size_t cap = s->capstale ? s->capstale * 2 : 16;

		v = realloc(s->stale, cap * sizeof(*v));
		if (!v) {
			base_error("out of memory");
			return;
		}
		s->stale = v;
		s->capstale = cap;
	}
	s->stale[s->nstale++] = ino;
	if (ino > s->stale_max)
		s->stale_max = ino;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void note_failure(struct sync *s, const chunk_id *id, uint32_t len,
			 int err)
{
	char hex[CHUNK_ID_HEX_LEN + 1];

	chunk_id_to_hex(id, hex);
	pthread_mutex_lock(&s->lock);
	snprintf(s->st.last_error, sizeof(s->st.last_error), "chunk %s: %s",
		 hex,
		 err == -ESTALE ? "the source changed since the scan"
				: strerror(-err));
	pthread_mutex_unlock(&s->lock);
	/* 409: the source file changed since the scan. The server answered
	 * (no sign it is gone), and asking again cannot help: final at
	 * once, not retried; the writer names the file, once. */
	if (err == -ESTALE) {
		base_debug("fetch refused: the source changed since the scan "
			   "chunk=%s",
			   hex);
		if (dead_add(s, id, err) < 0)
			base_error("out of memory");
		s->fail_streak = 0;
		return;
	}
	/* The first pass's failures are tried again; say them only at
	 * debug level. The second pass's are final (the writer names the
	 * files that needed them). */
	base_log_err(s->retrying ? BASE_LOG_WARN : BASE_LOG_DEBUG, err,
		     "fetch failed chunk=%s", hex);
	if ((s->retrying ? dead_add(s, id, err) : failed_add(s, id, len)) < 0)
		base_error("out of memory");
	if (++s->fail_streak >= HYD_SYNC_GIVE_UP && !s->gave_up) {
		s->gave_up = 1;
		s->res->gave_up_err = err;
		base_error("chunk fetches failed in a row: giving up fetching "
			   "count=%u last_error=\"%s\"",
			   s->fail_streak, s->st.last_error);
	}
}

/* Wait for the oldest outstanding flight. */
static void reap_one(struct sync *s)
{
	struct slot *sl = &s->ring[s->head];
	int r;

	r = hyd_fetch_wait(s->fetch, sl->fl, sl->deadline + WAIT_SLACK_NS);
	/* Verified bytes in hand: the writer takes them from memory. */
	if (r >= 0 && s->handoff)
		hyd_sync__handoff_put(s->handoff, sl->fl, sl->ino, sl->off);
	else
		hyd_fetch_release(s->fetch, sl->fl);
	sl->fl = NULL;
	if (r < 0) {
		note_failure(s, &sl->id, sl->len, r);
		if (r == -ESTALE && sl->ino)
			stale_add(s, sl->ino);
	} else {
		s->fail_streak = 0;
		s->fetched_bytes += sl->len;
		pthread_mutex_lock(&s->lock);
		s->st.chunks_stored++;
		s->st.unique_bytes_stored += sl->len;
		pthread_mutex_unlock(&s->lock);
	}
	s->head = (s->head + 1) % s->window;
	s->n--;
	s->bytes -= sl->len;
	progress(s, 0);
}

static uint64_t window_bytes(const struct sync *s)
{
	uint64_t el = base_now_ns() - s->phase_t0, w;

	if (el < SEC_NS)
		return WINDOW_BYTES_MIN;
	w = (uint64_t)((double)s->fetched_bytes * 1e9 / (double)el *
		       (double)(s->timeout_ns / SEC_NS) / 4);
	return w < WINDOW_BYTES_MIN   ? WINDOW_BYTES_MIN
	       : w > WINDOW_BYTES_MAX ? WINDOW_BYTES_MAX
				      : w;
}

/* The chunk at offset off of ino (ino 0: a retry, no place in the
 * writer's order) into the window. */
static void want_chunk(struct sync *s, uint64_t ino, uint64_t off,
		       const chunk_id *id, uint32_t len)
{
	struct slot *sl;
	uint32_t stamp;
	int r;

	if (s->gave_up) {
		if (!s->retrying)
			failed_add(s, id, len);
		return;
	}
	/* The caller found the chunk missing; an earlier flight of it (a
	 * chunk two pending files share) may end and store it while the
	 * window drains below, and a plain submit would then fetch it again:
	 * the store is asked once more if a flight of its bucket ended. */
	stamp = hyd_fetch_stamp(s->fetch, id);
	/* What has landed goes to the writer now, before the store's group
	 * commit lets the writer find it there (and decode it again). */
	while (s->n && s->handoff &&
	       hyd_fetch_ready(s->fetch, s->ring[s->head].fl))
		reap_one(s);
	while (s->n == s->window || (s->n && s->bytes + len > window_bytes(s)))
		reap_one(s);
	sl = &s->ring[(s->head + s->n) % s->window];
	sl->id = *id;
	sl->len = len;
	sl->ino = ino;
	sl->off = off;
	sl->deadline = base_now_ns() + s->timeout_ns;
	r = hyd_fetch_submit_after(s->fetch, id, len, HYD_PRIO_BACKFILL,
				   sl->deadline, 0, stamp, &sl->fl);
	if (r == 2) {
		/* Stored meanwhile: counted like a stored occurrence. */
		pthread_mutex_lock(&s->lock);
		s->st.chunks_stored++;
		s->st.unique_bytes_stored += len;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (r < 0) {
		note_failure(s, id, len, r);
		return;
	}
	s->n++;
	s->bytes += len;
}

static void drain(struct sync *s)
{
	while (s->n)
		reap_one(s);
}

/* cb for every chunk to transfer: every distinct one of the catalog, or
 * with a selection each chunk of each selected file (a chunk two of them
 * share comes twice; the store and the fetcher's single flight make the
 * second free). Holes are never handed out. */
static int each_chunk(struct sync *s, cat_reader *cat, cat_chunk_cb cb,
		      void *ctx)
{
	struct cat_chunk cs[64];
	size_t n, i;
	int r = 0;

	if (!s->sel.active)
		return cat_chunks_each(cat, cb, ctx);
	for (uint64_t ino = 1; ino < s->sel.nbits && r == 0; ino++) {
		uint64_t off = 0;

		if (!hyd_sync__sel_has(&s->sel, ino))
			continue;
		do {
			r = cat_chunks_range(cat, ino, off, INT64_MAX - off, cs,
					     64, &n);
			if (r == -EAGAIN || r == -ESTALE) {
				r = 0; /* pending: its manifest comes later */
				break;
			}
			for (i = 0; r == 0 && i < n; i++)
				if (!chunk_id_is_hole(&cs[i].id))
					r = cb(ctx, ino, &cs[i]);
			if (n)
				off = cs[n - 1].off + cs[n - 1].len;
		} while (r == 0 && n == 64);
	}
	return r;
}

/* Distinct chunks of the local manifests and what the store holds. */
struct tally {
	hyd_store *store;
	uint64_t total, bytes, stored, stored_bytes;
};

static int count_cb(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	struct tally *t = ctx;
	int r;

	(void)ino;
	t->total++;
	t->bytes += c->len;
	r = hyd_store_has(t->store, &c->id);
	if (r < 0)
		return r;
	if (r) {
		t->stored++;
		t->stored_bytes += c->len;
	}
	return 0;
}

/* The tally over cat into the status (under the lock: the writer's
 * progress reads it). */
static int count_into(struct sync *s, cat_reader *cat)
{
	struct tally t = {.store = s->op.store};
	int r;

	r = each_chunk(s, cat, count_cb, &t);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->lock);
	s->st.chunks_total = t.total;
	s->st.unique_bytes_total = t.bytes;
	s->st.chunks_stored = t.stored;
	s->st.unique_bytes_stored = t.stored_bytes;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* How many pending manifests cat's overlay lacks. */
static int count_missing(cat_reader *cat, uint64_t *ret)
{
	uint64_t v[1024], after = 0;
	size_t n;
	int r;

	*ret = 0;
	do {
		r = cat_pending_missing(cat, after, v, 1024, &n);
		if (r < 0)
			return r;
		*ret += n;
		if (n)
			after = v[n - 1];
	} while (n == 1024);
	return 0;
}

/* Whether chunk c of ino is in the pack asked for last. */
static int in_last_pack(const struct sync *s, uint64_t ino,
			const struct cat_chunk *c)
{
	const struct cat_pack *p = &s->pack_p;

	if (!s->pack)
		return 0;
	if (p->big)
		return ino == p->first &&
		       c->off / CAT_PACK_SPAN == s->pack_part;
	return ino >= p->first && ino <= p->last;
}

/* Put a flight the caller holds into the window (waiting for room). */
static void slot_put(struct sync *s, struct hyd_flight *fl, const chunk_id *id,
		     uint32_t len)
{
	struct slot *sl;

	while (s->n == s->window)
		reap_one(s);
	sl = &s->ring[(s->head + s->n) % s->window];
	sl->id = *id;
	sl->len = len;
	sl->ino = 0; /* a pack's entries: no one place in the order */
	sl->off = 0;
	sl->deadline = base_now_ns() + s->timeout_ns;
	sl->fl = fl;
	s->n++;
	s->bytes += len;
}

/* --cacheable: ask for the pack holding chunk c of ino, all its missing
 * entries at once, their flights into the window. 0 when done, 1 when
 * the chunk goes on its own (no pack: its manifests are not local yet,
 * say), -errno. */
static int want_pack(struct sync *s, uint64_t ino, const struct cat_chunk *c)
{
	struct hyd_flight **fls = NULL;
	uint8_t *want = NULL, *state = NULL;
	struct hyd_pack_obj *obj = NULL;
	struct cat_pack p;
	uint64_t part;
	size_t i;
	int r;

	if (!s->cat_pack && hyd_open_reader(&s->op, &s->cat_pack) < 0)
		return 1;
	r = cat_pack_find(s->cat_pack, ino, &p);
	if (r < 0)
		return 1;
	part = p.big ? c->off / CAT_PACK_SPAN : 0;
	r = hyd_pack_obj_make(hyd_fetch_base_url(s->fetch),
			      s->op.meta.generation, s->cat_pack, &p, part,
			      &obj);
	if (r < 0)
		return 1;
	hyd_pack_obj_unref(s->pack);
	s->pack = obj;
	s->pack_p = p;
	s->pack_part = part;
	fls = calloc(obj->n ? obj->n : 1, sizeof(*fls));
	want = calloc(obj->n ? obj->n : 1, 1);
	state = calloc(obj->n ? obj->n : 1, 1);
	if (!fls || !want || !state) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < obj->n; i++)
		want[i] = hyd_store_has(s->op.store, &obj->ids[i]) == 0;
	r = hyd_fetch_submit_pack(s->fetch, obj, want, 0, fls, state);
	for (i = 0; i < obj->n; i++)
		if (fls[i])
			slot_put(s, fls[i], &obj->ids[i], obj->lens[i]);
	if (r < 0)
		note_failure(s, &c->id, c->len, r);
	r = 0;
out:
	free(fls);
	free(want);
	free(state);
	return r;
}

/* The chunks of pending file ino, whose manifest just arrived: counted
 * as they come (see the top of the file) and asked for when missing. A
 * manifest that does not read back is the writer's to report. */
static void want_new_file(struct sync *s, uint64_t ino)
{
	struct cat_chunk cs[64];
	struct cat_inode in;
	uint64_t off = 0;
	size_t n, i;
	int r;

	s->fresh = 1;
	if (!hyd_sync__sel_has(&s->sel, ino) ||
	    cat_getattr(s->cat_new, ino, &in) < 0)
		return;
	while (off < in.size) {
		r = cat_chunks_range(s->cat_new, ino, off, in.size - off, cs,
				     64, &n);
		if (r < 0 || n == 0)
			return;
		for (i = 0; i < n; i++) {
			if (cs[i].len > s->op.meta.params.max)
				return;
			if (chunk_id_is_hole(&cs[i].id))
				continue; /* nothing to fetch or store */
			r = hyd_store_has(s->op.store, &cs[i].id);
			pthread_mutex_lock(&s->lock);
			s->st.chunks_total++;
			s->st.unique_bytes_total += cs[i].len;
			if (r == 1) {
				s->st.chunks_stored++;
				s->st.unique_bytes_stored += cs[i].len;
			}
			pthread_mutex_unlock(&s->lock);
			if (r != 0 || in_last_pack(s, ino, &cs[i]))
				continue;
			if (hyd_fetch_packs(s->fetch) && !s->gave_up &&
			    !s->retrying && want_pack(s, ino, &cs[i]) <= 0)
				continue;
			want_chunk(s, ino, cs[i].off, &cs[i].id, cs[i].len);
		}
		off = cs[n - 1].off + cs[n - 1].len;
	}
}

/* Files whose manifest the manifest thread made local: one batch, or
 * with wait set every one until it is done. */
/* Files whose manifest arrived that the select walk kept for this
 * moment (a local candidate, hyd_seed.c): seeded first, and made durable
 * (one group commit for the batch) before their chunks are looked up in
 * the store. skip[i]: DEST or a -dest DIR has v[i] by size and mtime,
 * the writer checks it, nothing of it is fetched. */
static void seed_new(struct sync *s, const uint64_t *v, size_t k, uint8_t *skip)
{
	struct hyd_seed_stats a, b;
	struct cat_inode in;
	size_t i;
	int r;

	memset(skip, 0, k);
	if (!s->seeds.sd)
		return;
	hyd_seeder_stats(s->seeds.sd, &a);
	for (i = 0; i < k; i++) {
		if (!hyd_sync__sel_has(&s->sel, v[i]) ||
		    cat_getattr(s->cat_new, v[i], &in) < 0)
			continue;
		r = hyd_seeder_again(s->seeds.sd, s->cat_new, &in);
		skip[i] = r == HYD_SEED_DEST || r == HYD_SEED_DIR;
	}
	hyd_seeder_stats(s->seeds.sd, &b);
	if (b.chunks_seeded != a.chunks_seeded)
		hyd_seeder_finish(s->seeds.sd);
}

static void take_new(struct sync *s, int wait)
{
	uint64_t v[NEW_BATCH];
	uint8_t skip[NEW_BATCH];
	size_t k, i;

	if (!s->mq)
		return;
	do {
		/* A server taken as gone: no use waiting for manifests. */
		if (s->gave_up)
			hyd_sync__mq_stop(s->mq);
		k = hyd_sync__mq_pop(s->mq, v, NEW_BATCH, wait);
		seed_new(s, v, k, skip);
		for (i = 0; i < k; i++) {
			if (skip[i])
				s->fresh = 1;
			else
				want_new_file(s, v[i]);
			__atomic_add_fetch(&s->manifests_counted, 1,
					   __ATOMIC_RELAXED);
		}
	} while (wait && k);
}

/* The fetching pass; runs inside cat_chunks_each (the reader's lock is
 * held, which is fine: nothing else uses the reader meanwhile). */
static int fetch_cb(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	struct sync *s = ctx;
	int r;

	if (c->len > s->op.meta.params.max)
		return -EBADMSG;
	/* Manifests that arrived meanwhile go in between (another reader:
	 * this callback holds cat_fetch's lock). */
	take_new(s, 0);
	/* A file the server said changed: the rest of it is not asked for. */
	if (s->stale_max && ino == s->stale_max)
		return 0;
	r = hyd_store_has(s->op.store, &c->id);
	if (r < 0)
		return r;
	if (r == 1 || in_last_pack(s, ino, c))
		return 0;
	if (hyd_fetch_packs(s->fetch) && !s->gave_up && !s->retrying) {
		r = want_pack(s, ino, c);
		if (r <= 0)
			return r;
	}
	want_chunk(s, ino, c->off, &c->id, c->len);
	return 0;
}

/* The counting pass: totals and what is stored already. Returns 1 when
 * there is something to fetch, 0 when not, -errno. */
static int hydrate_count(struct sync *s, int offline)
{
	int r;

	r = count_into(s, s->op.cat);
	if (r == 0 && s->op.meta.pending)
		r = count_missing(s->op.cat, &s->manifests_missing);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot read the catalog's chunks path=%s",
			     s->op.catpath);
		return r;
	}
	s->st.manifests_total = s->op.meta.pending;
	s->st.manifests_local = s->op.meta.pending - s->manifests_missing;
	s->stored_at_start = s->st.unique_bytes_stored;
	s->phase_t0 = base_now_ns();
	progress(s, 1);
	if (s->st.chunks_stored == s->st.chunks_total && !s->manifests_missing)
		return 0;
	if (offline) {
		if (s->st.chunks_stored != s->st.chunks_total)
			base_error("chunks are not stored and the server "
				   "cannot be reached chunks=%" PRIu64
				   " url=%s",
				   s->st.chunks_total - s->st.chunks_stored,
				   s->op.base);
		if (s->manifests_missing)
			base_error("manifests of pending files are not local "
				   "and the server cannot be reached "
				   "files=%" PRIu64 " url=%s",
				   s->manifests_missing, s->op.base);
		return 0;
	}
	return 1;
}

/* --prefetch: the chunks of the traces' ranges of files unchanged since,
 * in the traces' order, before the pass in ino order (which then finds
 * them stored). A pending file whose manifest is not local yet is left to
 * that pass. The writer still goes in ino order: what goes first is what
 * moves on the link, so a DEST that a job reads as it fills, or a sync
 * stopped early, has the job's files. */
static void prefetch_traces(struct sync *s)
{
	struct hyd_trace_plan p;
	struct cat_chunk cs[64];
	uint64_t off, end;
	size_t i, k, n;
	int r;

	r = hyd_trace_plan_make(s->cat_fetch, s->o->traces, s->o->ntraces, &p);
	if (r < 0) {
		base_log_err(BASE_LOG_WARN, r,
			     "cannot plan the --prefetch traces; going on "
			     "without them");
		return;
	}
	base_info("prefetch files=%" PRIu64 " gone=%" PRIu64 " changed=%" PRIu64
		  " ranges=%zu bytes=%" PRIu64,
		  p.files, p.missing, p.changed, p.nsteps, p.bytes);
	for (i = 0; i < p.nsteps && !s->gave_up; i++) {
		if (!p.steps[i].ino)
			continue;
		off = p.steps[i].off;
		end = off + p.steps[i].len;
		while (off < end) {
			if (cat_chunks_range(s->cat_fetch, p.steps[i].ino, off,
					     end - off, cs, 64, &n) < 0 ||
			    n == 0)
				break;
			for (k = 0; k < n; k++)
				if (!chunk_id_is_hole(&cs[k].id) &&
				    hyd_store_has(s->op.store, &cs[k].id) == 0)
					want_chunk(s, p.steps[i].ino, cs[k].off,
						   &cs[k].id, cs[k].len);
			off = cs[n - 1].off + cs[n - 1].len;
		}
	}
	hyd_trace_plan_free(&p);
}

/* The fetching pass (its own thread, its own catalog connection), then
 * one more try for what failed. */
static int hydrate_fetch(struct sync *s)
{
	size_t i, n;
	int r;

	s->window = s->o->jobs * WINDOW_PER_JOB;
	if (s->window < WINDOW_MIN)
		s->window = WINDOW_MIN;
	if (s->window > WINDOW_MAX)
		s->window = WINDOW_MAX;
	s->ring = calloc(s->window, sizeof(*s->ring));
	if (!s->ring)
		return -ENOMEM;
	if (s->o->ntraces)
		prefetch_traces(s);
	r = each_chunk(s, s->cat_fetch, fetch_cb, s);
	/* The rest of the manifests, as they come. */
	if (r == 0)
		take_new(s, 1);
	drain(s);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot read the catalog's chunks path=%s",
			     s->op.catpath);
		return r;
	}
	if (s->nfailed && !s->gave_up) {
		/* One more try for each failed chunk: transient trouble that
		 * outlasted the first deadline often has passed by now. */
		s->retrying = 1;
		s->fail_streak = 0;
		n = s->nfailed;
		for (i = 0; i < n; i++)
			if (hyd_store_has(s->op.store, &s->failed[i].id) == 0)
				want_chunk(s, 0, 0, &s->failed[i].id,
					   s->failed[i].len);
		drain(s);
	}
	/* For the writer's bsearch: the retry's failures and the 409s. */
	if (s->ndead)
		qsort(s->dead, s->ndead, sizeof(*s->dead), hyd_sync__dead_cmp);
	if (s->nstale)
		qsort(s->stale, s->nstale, sizeof(*s->stale), u64_cmp);
	/* Counted as they came, manifests that share chunks counted some
	 * twice: the final numbers from one more count. */
	if (s->fresh) {
		r = count_into(s, s->cat_fetch);
		if (r < 0)
			base_log_err(BASE_LOG_WARN, r,
				     "cannot count the catalog's chunks again "
				     "path=%s",
				     s->op.catpath);
	}
	return 0;
}

/* ---- set-up ---- */

static int start_fetch(struct sync *s)
{
	struct hyd_fetch_config fc;
	int r;

	memset(&fc, 0, sizeof(fc));
	fc.base_url = s->op.base;
	fc.store = s->op.store;
	fc.max_raw = s->op.meta.params.max;
	fc.connections = s->o->jobs;
	fc.connect_timeout_ms = CONNECT_TIMEOUT_S * 1000;
	fc.bwlimit = s->o->bwlimit;
	fc.cacheable = s->o->cacheable;
	fc.creds = s->o->creds;
	r = hyd_fetch_new(&fc, &s->fetch);
	if (r == 0)
		r = hyd_fetch_start(s->fetch);
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r, "cannot start the fetcher");
	return r;
}

/* A manifest fetcher of the run's server and overlay. */
static int manifest_new(const struct sync *s, hyd_manifest **ret)
{
	struct hyd_manifest_config mc = {
	    .base_url = s->op.base,
	    .ov = s->op.ov,
	    .connect_timeout_ms = CONNECT_TIMEOUT_S * 1000,
	    .creds = s->o->creds,
	};

	return hyd_manifest_new(&mc, ret);
}

/* The manifest fetcher and thread, for manifests not local yet. */
static int start_manifests(struct sync *s)
{
	int r;

	r = manifest_new(s, &s->manifest);
	if (r == 0)
		r = hyd_open_reader(&s->op, &s->cat_new);
	if (r == 0)
		r = hyd_open_reader(&s->op, &s->cat_mq);
	if (r == 0)
		r = hyd_sync__mq_start(s->manifest, s->cat_mq, s->timeout_ns,
				       &s->mq);
	return r;
}

static void sync_free(struct sync *s)
{
	hyd_sync__handoff_free(s->handoff); /* before the fetcher */
	hyd_sync__mq_free(s->mq);
	hyd_manifest_free(s->manifest);
	cat_reader_close(s->cat_mq);
	cat_reader_close(s->cat_new);
	hyd_fetch_free(s->fetch);
	cat_reader_close(s->cat_fetch);
	cat_reader_close(s->cat_pack);
	hyd_pack_obj_unref(s->pack);
	hyd_open_close(&s->op);
	free(s->ring);
	free(s->failed);
	free(s->dead);
	free(s->stale);
	free(s->base);
	free(s->sub);
	hyd_sync__sel_free(&s->sel);
	hyd_sync__unsafe_free(&s->unsafe);
	hyd_sync__seeds_close(&s->seeds);
	free(s->backup_dir);
	free(s->single_dest);
	free(s->single_name);
}

/* The end of hydration, on whichever thread did it: the state, the
 * writer's phase, and what the writer needs to know about failures. */
static void hydrate_done(struct sync *s)
{
	struct hyd_mat *m = s->mat;
	uint64_t missing = 0;

	/* A manifest still missing leaves the hydration short too. */
	if (s->op.meta.pending && count_missing(s->op.cat, &missing) < 0)
		missing = 1;
	pthread_mutex_lock(&s->lock);
	s->res->unique_bytes = s->st.unique_bytes_total;
	s->st.manifests_local = s->st.manifests_total - missing;
	s->st.state = s->st.chunks_stored == s->st.chunks_total && !missing
			  ? HYD_STATE_COMPLETE
			  : HYD_STATE_STALLED;
	s->phase_t0 = base_now_ns();
	pthread_mutex_unlock(&s->lock);
	m->fetch = s->gave_up ? NULL : s->fetch;
	m->manifest = s->gave_up ? NULL : s->manifest;
	m->dead = s->dead;
	m->ndead = s->ndead;
	m->stale = s->stale;
	m->nstale = s->nstale;
	hyd_sync__handoff_close(s->handoff);
	/* Release: the writer reads the fields above once it sees 0. */
	__atomic_store_n(&m->hydrating, 0, __ATOMIC_RELEASE);
	progress(s, 1);
}

/* HANDOFF_BYTES, or the test hook FERRY_TEST_HANDOFF_BYTES (a small one
 * holds one chunk at a time). */
static uint64_t handoff_bytes(void)
{
	const char *e = getenv("FERRY_TEST_HANDOFF_BYTES");
	uint64_t v;

	if (e && base_parse_u64(e, 1, HANDOFF_BYTES, &v) == 0)
		return v;
	return HANDOFF_BYTES;
}

/* How long a put into a full hand-off waits for the writer:
 * HANDOFF_WAIT_MS, or the test hook FERRY_TEST_HANDOFF_WAIT_MS (0: never;
 * a full hand-off then drops its oldest at once). */
static uint64_t handoff_wait_ns(void)
{
	const char *e = getenv("FERRY_TEST_HANDOFF_WAIT_MS");
	uint64_t v = HANDOFF_WAIT_MS;

	if (e && base_parse_u64(e, 0, 1000, &v) < 0)
		v = HANDOFF_WAIT_MS;
	return v * 1000000u;
}

struct fetch_thread {
	struct sync *s;
	int r;
};

static void *fetch_main(void *arg)
{
	struct fetch_thread *t = arg;

	base_thread_name("fetch");
	t->r = hydrate_fetch(t->s);
	hydrate_done(t->s);
	return NULL;
}

/* URL = BASE[/SUB[/]] with BASE = http[s]://HOST[:PORT]/v1/NAME: base,
 * sub ("/SUB", "" for the root: it starts with '/' so the name the
 * subtree gets in DEST is after its last '/') and sub_slash. */
static int split_url(struct sync *s)
{
	const char *u = s->o->url, *v1 = strstr(u, "/v1/"), *end;
	size_t n;

	end = v1 ? strchr(v1 + 4, '/') : NULL;
	n = end ? (size_t)(end - u) : strlen(u);
	s->base = strndup(u, n);
	s->sub = strdup(end ? end : "");
	if (!s->base || !s->sub)
		return -ENOMEM;
	n = strlen(s->sub);
	while (n > 0 && s->sub[n - 1] == '/') {
		s->sub_slash = 1;
		s->sub[--n] = '\0';
	}
	return 0;
}

/* Seeding is over (or its walk: the files kept for their manifests
 * come later): its chunks made durable, its numbers kept. */
static void seeded(struct sync *s, int final)
{
	struct hyd_seed_stats *st = &s->res->seed;
	int r;

	if (!s->seeds.sd)
		return;
	r = hyd_seeder_finish(s->seeds.sd);
	hyd_seeder_stats(s->seeds.sd, st);
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "seeded chunks could not all be stored (they "
			     "are fetched) failed=%" PRIu64,
			     st->put_failed);
	if (final)
		base_debug("seeded files_read=%" PRIu64 " bytes_read=%" PRIu64
			   " chunks=%" PRIu64 " bytes=%" PRIu64,
			   st->files_read, st->bytes_read, st->chunks_seeded,
			   st->bytes_seeded);
}

/* A URL that names a file (rsync's single-file source): DEST/NAME when
 * DEST is a directory (or ends in '/'), else DEST itself is the file.
 * 1 when it is one (root_ino, root_name, sel and dest set), 0 when the
 * URL names a directory, -errno. */
static int single_file(struct sync *s)
{
	const char *name, *d = s->o->dest;
	size_t n = strlen(d);
	struct stat st;
	char *slash;
	int r;

	r = hyd_sync__resolve_file(s->op.cat, s->sub, &s->root_ino, &name);
	if (r <= 0)
		return r == -ENOTDIR || r == -ENOENT ? 0 : r; /* said below */
	if ((stat(d, &st) == 0 && S_ISDIR(st.st_mode)) || d[n - 1] == '/') {
		s->single_name = strdup(name);
		s->single_dest = strdup(d);
	} else {
		slash = strrchr(d, '/');
		s->single_name = strdup(slash ? slash + 1 : d);
		s->single_dest = slash ? strndup(d, (size_t)(slash - d)) : NULL;
		if (slash && !s->single_dest[0]) {
			free(s->single_dest);
			s->single_dest = strdup("/");
		} else if (!slash) {
			s->single_dest = strdup(".");
		}
	}
	if (!s->single_name || !s->single_dest)
		return -ENOMEM;
	s->root_name = s->single_name;
	s->om->dest = s->single_dest;
	r = hyd_sync__sel_one(&s->sel, s->root_ino);
	return r < 0 ? r : 1;
}

/* The select walk, which loads the per-directory merge files with its
 * own manifest fetcher (the run's starts later). */
static int select_walk(struct sync *s)
{
	struct hyd_sync_merge mg = {
	    .f = s->o->filter,
	    .cat = s->op.cat,
	    .store = s->op.store,
	    .fetch = s->fetch,
	    .pending = s->op.meta.pending != 0,
	    .max_raw = s->op.meta.params.max,
	    .timeout_ns = s->timeout_ns,
	};
	hyd_manifest *man = NULL;
	int r, merging = hyd_filter_merges(s->o->filter) != 0;

	if (merging) {
		hyd_filter_merge_reset(s->o->filter);
		if (mg.pending && s->fetch && manifest_new(s, &man) == 0)
			mg.manifest = man;
	}
	r = hyd_sync__select(s->op.cat, s->root_ino, s->root_name, s->o->filter,
			     &s->o->skip, s->o->dest, s->seeds.sd,
			     merging ? &mg : NULL, &s->sel);
	hyd_manifest_free(man);
	if (merging)
		base_debug("merge files=%" PRIu64 " bytes=%" PRIu64, mg.files,
			   mg.bytes);
	return r;
}

/* The subtree's directory, and the files a subtree or the rules keep. */
static int pick(struct sync *s)
{
	int r;

	s->root_ino = CAT_ROOT_INO;
	if (s->sub[0] && !s->sub_slash && !hyd_filter_has_list(s->o->filter)) {
		r = single_file(s);
		if (r != 0)
			return r < 0 ? r : 0;
	}
	if (s->sub[0]) {
		r = hyd_sync__resolve(s->op.cat, s->sub, &s->root_ino);
		if (r < 0) {
			base_log_err(BASE_LOG_ERROR, r,
				     "the source path is not a directory of "
				     "the catalog path=\"%s\"",
				     s->sub + 1);
			/* the source's side, as a missing one (rsync: 23),
			 * not DEST's (11) */
			return r == -ENOTDIR ? -ENOENT : r;
		}
		/* --files-from: the source is the base of the list's paths */
		if (!s->sub_slash && !hyd_filter_has_list(s->o->filter))
			s->root_name = strrchr(s->sub, '/') + 1;
	}
	/* Entries the reader skips: the writer names them (never dropped in
	 * silence). */
	r = hyd_sync__unsafe_scan(s->op.catpath, &s->unsafe);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot read the catalog's names path=%s",
			     s->op.catpath);
		return r;
	}
	r = hyd_sync__seeds_open(s->o, s->op.store, &s->op.meta.params,
				 &s->seeds);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot set up seeding");
		return r;
	}
	if (!s->sub[0] && !hyd_filter_count(s->o->filter) &&
	    !hyd_sync__skip_active(&s->o->skip) && !s->seeds.sd)
		return 0;
	r = select_walk(s);
	if (r == -EINVAL || r == -EFBIG)
		return -EINVAL; /* a bad merge file: said */
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot walk the catalog path=%s", s->op.catpath);
		return r;
	}
	seeded(s, 0);
	return 0;
}

/* --backup's dir: a relative one is DEST's, as rsync's. */
static int backup_dir(struct sync *s)
{
	size_t n;

	if (!s->o->backup)
		return 0;
	s->backup = *s->o->backup;
	if (!s->backup.dir || s->backup.dir[0] == '/')
		return 0;
	n = strlen(s->o->dest) + strlen(s->backup.dir) + 2;
	s->backup_dir = malloc(n);
	if (!s->backup_dir)
		return -ENOMEM;
	snprintf(s->backup_dir, n, "%s/%s", s->o->dest, s->backup.dir);
	s->backup.dir = s->backup_dir;
	return 0;
}

static int run(struct sync *s)
{
	struct hyd_mat m;
	struct hyd_fetch_stats fs;
	struct hyd_store_stats ss;
	struct fetch_thread ft = {s, 0};
	pthread_t tid;
	uint64_t missing = 0;
	int r, offline = 0, threaded = 0;

	r = hyd_sync__dest_check(s->o->dest);
	if (r == -EXDEV) {
		base_error("destination is inside a ferry mount: refusing to "
			   "write there (sync to a directory outside the "
			   "mount) dest=%s",
			   s->o->dest);
		return r;
	}
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot use the destination "
			     "dest=%s",
			     s->o->dest);
		return r;
	}
	r = split_url(s);
	if (r == 0)
		r = hyd_open_url(&s->op, s->base);
	if (r == 0)
		r = hyd_open_cache_dir(&s->op, s->o->cache_dir);
	if (r == 0)
		r = hyd_open_store(&s->op);
	s->op.creds = s->o->creds;
	if (r == 0)
		r = hyd_open_catalog(&s->op, CONNECT_TIMEOUT_S);
	/* the per-directory merge files are read before the walk (a dry
	 * run's too) */
	if (r == 0 && hyd_filter_merges(s->o->filter) && !s->op.from_cache)
		r = start_fetch(s);
	if (r == 0)
		r = pick(s);
	if (r == 0)
		r = backup_dir(s);
	if (r < 0)
		return r;
	/* A dry run fetches no chunk and no manifest. */
	offline = s->op.from_cache || s->o->dry_run;
	s->st.generation = s->op.meta.generation;
	s->res->generation = s->op.meta.generation;
	s->st.bytes_total = s->op.meta.bytes;
	if (!offline && !s->fetch)
		r = start_fetch(s);
	if (r < 0)
		return r;
	/* status shows the URL; a longer one is cut (the check silences
	 * gcc's truncation warning) */
	if (snprintf(s->st.url, sizeof(s->st.url), "%s", s->op.base) < 0)
		s->st.url[0] = '\0';
	s->st.pid = (long)getpid();
	s->st.state = HYD_STATE_BACKFILLING;
	memset(&m, 0, sizeof(m));
	s->mat = &m;
	m.hydrating = 1; /* hydrate_done sets fetch, dead, stale, ... */
	r = s->o->dry_run ? 0 : hydrate_count(s, offline);
	if (r > 0) {
		r = hyd_open_reader(&s->op, &s->cat_fetch);
		if (r == 0)
			r = hyd_sync__handoff_new(s->fetch, handoff_bytes(),
						  handoff_wait_ns(),
						  &s->handoff);
		m.handoff = s->handoff;
		if (r == 0 && s->manifests_missing)
			r = start_manifests(s);
		if (r == 0) {
			r = -pthread_create(&tid, NULL, fetch_main, &ft);
			threaded = r == 0;
		}
		if (r < 0)
			base_log_err(BASE_LOG_ERROR, r,
				     "cannot start fetching");
	}
	if (r < 0)
		return r;
	if (!threaded)
		hydrate_done(s);

	m.cat = s->op.cat;
	m.pending = s->op.meta.pending;
	m.store = s->op.store;
	m.max_raw = s->op.meta.params.max;
	m.dest = s->o->dest;
	m.owners = s->o->owners < 0 ? geteuid() == 0 : s->o->owners != 0;
	m.res = s->res;
	m.tick = mat_tick;
	m.tick_arg = s;
	m.timeout_ns = s->timeout_ns;
	m.filter = s->o->filter;
	m.skip = &s->o->skip;
	m.delete_extra = s->o->delete_extra;
	m.ignore_errors = s->o->ignore_errors;
	m.dry_run = s->o->dry_run;
	m.left_out = s->op.meta.left_out;
	m.item = s->o->item;
	m.item_arg = s->o->item_arg;
	m.cache_dir = s->op.cache;
	m.root_ino = s->root_ino;
	m.root_name = s->root_name;
	m.unsafe = &s->unsafe;
	m.seeds = s->seeds.dirs;
	m.nseeds = s->seeds.n;
	m.attrmap = hyd_attrmap_active(s->o->attrmap) ? s->o->attrmap : NULL;
	m.backup = s->o->backup ? &s->backup : NULL;
	/* rsync: --backup without --backup-dir forces --omit-dir-times */
	m.omit_dir_times =
	    s->o->omit_dir_times || (s->o->backup && !s->o->backup->dir);
	r = hyd_sync__materialize(&m);
	s->res->backups = m.backups;
	if (threaded) {
		/* The writer may stop early (DEST unusable): the fetching pass
		 * still completes the store, which a rerun then uses. */
		pthread_join(tid, NULL);
		if (ft.r < 0 && r == 0)
			r = ft.r;
	}
	if (s->handoff) {
		struct hyd_sync_handoff_stats hs;

		hyd_sync__handoff_stats(s->handoff, &hs);
		s->res->chunks_handed = hs.taken;
		s->res->chunks_dropped = hs.dropped;
		base_debug("sync hand-off put=%" PRIu64 " taken=%" PRIu64
			   " dropped=%" PRIu64 " stale=%" PRIu64
			   " waited=%" PRIu64 " timeouts=%" PRIu64,
			   hs.put, hs.taken, hs.dropped, hs.stale, hs.waited,
			   hs.timeouts);
		hyd_sync__handoff_free(s->handoff);
		s->handoff = NULL;
		m.handoff = NULL;
	}

	if (s->fetch) {
		/* Joins the loop: every store write it started has landed. */
		hyd_fetch_stop(s->fetch);
		hyd_fetch_stats(s->fetch, &fs);
		s->res->chunks_fetched = fs.chunks;
		s->res->wire_bytes = fs.wire_bytes;
		/* The cache could not keep what was verified: a rerun fetches
		 * those chunks again, so the run is not whole even when DEST
		 * is (exit 11: the cache cannot be written). */
		if (fs.store_errors) {
			int err = fs.last_store_err ? fs.last_store_err : -EIO;

			/* the last put's errno, when the last one failed */
			base_log_err(BASE_LOG_ERROR, fs.last_store_err,
				     "verified chunks could not be stored in "
				     "the cache chunks=%" PRIu64 " dir=%s",
				     fs.store_errors, s->op.cache);
			if (!s->res->dest_err)
				s->res->dest_err = err;
		}
	}
	seeded(s, 1);
	if (hyd_store_stats(s->op.store, &ss) == 0)
		s->res->rest_bytes = ss.stored_bytes;
	s->res->logical_bytes = s->op.meta.bytes;
	s->st.files_total = s->res->files;
	/* The writer may have fetched the last manifests itself. */
	if (s->op.meta.pending && count_missing(s->op.cat, &missing) == 0)
		s->st.manifests_local = s->st.manifests_total - missing;
	status_fill(s, 1);
	s->res->elapsed_s = s->st.elapsed_s;
	if (s->o->progress)
		s->o->progress(s->o->progress_arg, &s->st);
	return r;
}

int hyd_sync(const struct hyd_sync_opts *opts, struct hyd_sync_result *ret)
{
	struct hyd_sync_opts o = *opts;
	struct sync *s;
	int r;

	memset(ret, 0, sizeof(*ret));
	if (!opts->url || !opts->dest)
		return -EINVAL;
	if (!o.jobs)
		o.jobs = JOBS_DEFAULT;
	if (o.timeout_s <= 0)
		o.timeout_s = TIMEOUT_DEFAULT_S;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->o = &o;
	s->om = &o;
	s->res = ret;
	pthread_mutex_init(&s->lock, NULL);
	s->t0 = base_now_ns();
	s->rate_t = s->t0;
	s->timeout_ns = (uint64_t)o.timeout_s * SEC_NS;
	/* Reference-counted by curl; the fetcher and catalog GET need it. */
	if (hyd_fetch_global_init() < 0) {
		base_error("curl_global_init failed");
		free(s);
		return -EIO;
	}
	r = run(s);
	ret->elapsed_s = (double)(base_now_ns() - s->t0) / 1e9;
	sync_free(s);
	pthread_mutex_destroy(&s->lock);
	free(s);
	hyd_fetch_global_cleanup();
	return r;
}

int hyd_sync_head(const char *url, const struct hyd_creds *creds,
		  uint64_t *ret_gen, char *errbuf, size_t errcap)
{
	struct hyd_sync_opts o = {.url = url};
	struct sync s = {.o = &o};
	int r;

	r = split_url(&s);
	if (r == 0)
		r = hyd_catalog_head(s.base, creds, CONNECT_TIMEOUT_S, ret_gen,
				     errbuf, errcap);
	free(s.base);
	free(s.sub);
	return r;
}
