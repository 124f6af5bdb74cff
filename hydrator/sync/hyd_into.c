/*
 * hydrator/sync/hyd_into.c — `ferry-hydrator --into DIR`: the mount's
 * generation written into DIR as the plain tree, while the mount serves
 * and backfill fetches, so the mount ends as the copy.
 *
 * One thread lands generations: for the mount's current one it runs `ferry
 * sync`'s tree writer (hyd_materialize.c) from the mount's own store into
 * DIR, with --delete's meaning (DIR becomes that generation: what it lacks
 * goes, a changed file is written beside and renamed in, so a reader
 * holding the old one keeps its bytes). Each file's bytes come verified
 * from the store. While backfill runs, a file whose chunks are not all
 * stored yet is left for the next pass (nothing of it written), so the
 * writer trails backfill in whatever order backfill fetches; a hard-linked
 * file is never left: its chunks are waited for (want() moves its
 * directory to the front of backfill's order). The first pass walks the
 * tree; the next ones look only at the files the last one left
 * (hyd_mat_left.c, bounded: past the bound the tree again), and of those
 * only at the ones the placer found whole since, but at all of them every
 * LOOK_ALL_NS and once backfill is done, when the writer fetches what is
 * still missing itself. A pass follows the last at once when that one
 * wrote a good share of what it looked at, else after a pause. A pass ends
 * with a syncfs of DIR; when one left nothing out, the generation is
 * recorded as landed (CACHEDIR/into.state, written atomically), and a
 * newer generation starts the next pass. A crash leaves files of the last
 * pass whose record was not committed: the next pass checks them by
 * content, chunk by chunk, and rewrites what does not match.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define RETRY_NS (5ull * 1000000000ull)
#define POLL_NS 200000000L
/* between passes that found nothing new stored */
#define DEFER_PAUSE_NS 500000000ull
#define SNAP_NS 100000000ull /* see cat_reader_snapshots */
/* A pass looks at every file left at least this often (else only at
 * those the placer found whole since the last pass) */
#define LOOK_ALL_NS 5000000000ull
/* The landing yields to the mount's readers: while one read in the last
 * YIELD_WINDOW_NS (or someone browses) it waits, in steps, for at most
 * YIELD_MAX_NS in a row, and then works at least WORK_MIN_NS. */
#define YIELD_WINDOW_NS 50000000ull
#define YIELD_STEP_NS 20000000ull
#define YIELD_MAX_NS 2000000000ull
#define WORK_MIN_NS 250000000ull

struct hyd_into {
	struct hyd_into_config c;
	char dir[4096];
	char cache[4096];
	pthread_t th;
	int started;
	int stop; /* __atomic */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hyd_into_stats st; /* under mu */
	hyd_place *place;	  /* NULL: chunks land in the store only */
	uint64_t work_until;	  /* base_now_ns: no yielding before */
	uint64_t yielded_ns;	  /* time spent yielding (the log says) */
	hyd_filter *keep;	  /* --delete spares the placer's parts */
};

static void set_state(hyd_into *in, enum hyd_into_state s, uint64_t gen,
		      const struct hyd_sync_result *res, const char *err)
{
	pthread_mutex_lock(&in->mu);
	in->st.state = s;
	if (s == HYD_INTO_LANDED)
		in->st.landed = gen;
	else
		in->st.landing = gen;
	if (res) {
		in->st.files = res->files;
		in->st.failed = res->failed;
	}
	if (err)
		snprintf(in->st.last_error, sizeof(in->st.last_error), "%s",
			 err);
	pthread_cond_broadcast(&in->cv);
	pthread_mutex_unlock(&in->mu);
}

/* CACHEDIR/into.state: "dir=DIR\ngeneration=N\n", N the generation DIR
 * holds whole (0: none yet). */
static int state_write(hyd_into *in, uint64_t gen)
{
	char path[4200], text[4200];
	int n;

	snprintf(path, sizeof(path), "%s/" HYD_INTO_STATE, in->cache);
	n = snprintf(text, sizeof(text), "dir=%s\ngeneration=%" PRIu64 "\n",
		     in->dir, gen);
	if (n < 0 || (size_t)n >= sizeof(text))
		return -ENAMETOOLONG;
	return base_file_write_atomic(path, text, (size_t)n, 0644);
}

static int stopping(hyd_into *in)
{
	return __atomic_load_n(&in->stop, __ATOMIC_RELAXED);
}

/* Sleep ns, or less when told to stop. */
static void pause_ns(hyd_into *in, uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec += (long)(ns % 1000000000ull);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&in->mu);
	if (!stopping(in))
		pthread_cond_timedwait(&in->cv, &in->mu, &ts);
	pthread_mutex_unlock(&in->mu);
}

/* Before each entry the landing writes: jobs reading the mount go first
 * (the landing's renames, metadata and record share the cores, the disk
 * and the placer's lock with their reads), but it is never held off for
 * good. */
static void land_pace(void *arg)
{
	hyd_into *in = arg;
	uint64_t t0 = base_now_ns(), now = t0;

	if (!in->c.fetch || t0 < in->work_until)
		return;
	while (!stopping(in) && now - t0 < YIELD_MAX_NS &&
	       hyd_fetch_serving(in->c.fetch, YIELD_WINDOW_NS)) {
		pause_ns(in, YIELD_STEP_NS);
		now = base_now_ns();
	}
	in->yielded_ns += now - t0;
	if (now - t0 >= YIELD_MAX_NS)
		in->work_until = now + WORK_MIN_NS;
}

/* One pass of generation g into DIR: the tree, or with only the files
 * the last pass left; those this one leaves go to left (cleared first).
 * 0 when every entry landed. */
static int land(hyd_into *in, const struct hyd_into_gen *g,
		const struct hyd_mat_left *only, const uint64_t *whole,
		size_t nwhole, struct hyd_mat_left *left,
		struct hyd_sync_result *res, uint64_t *ret_deferred,
		uint64_t *ret_visited)
{
	struct hyd_sync_unsafe unsafe = {0};
	struct cat_meta meta;
	struct hyd_mat m;
	cat_reader *cat = NULL;
	int r;

	memset(res, 0, sizeof(*res));
	r = cat_reader_open(g->catpath, &cat);
	if (r == 0 && g->ovpath && g->ovpath[0])
		r = cat_reader_attach_overlay(cat, g->ovpath);
	if (r == 0)
		r = hyd_sync__unsafe_scan(g->catpath, &unsafe);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "--into: cannot read the catalog path=%s",
			     g->catpath);
		cat_reader_close(cat);
		return r;
	}
	/* the walk asks about every file: one overlay read transaction
	 * per SNAP_NS, not per query */
	cat_reader_snapshots(cat, SNAP_NS);
	cat_reader_meta(cat, &meta);
	memset(&m, 0, sizeof(m));
	m.cat = cat;
	m.store = in->c.store;
	m.max_raw = meta.params.max;
	m.dest = in->dir;
	m.owners = in->c.owners;
	m.res = res;
	m.fetch = in->c.fetch;
	m.manifest = g->manifest;
	m.pending = meta.pending;
	m.timeout_ns = in->c.timeout_ns;
	m.left_out = meta.left_out;
	m.root_ino = CAT_ROOT_INO;
	m.cache_dir = in->cache;
	m.unsafe = &unsafe;
	m.filling = in->c.filling;
	m.want = in->c.want;
	m.fill_arg = in->c.arg;
	m.pace = land_pace;
	m.pace_arg = in;
	m.stop = &in->stop;
	m.defer = 1;
	hyd_mat_left_clear(left);
	m.left_in = left;
	m.only = only;
	m.whole = whole;
	m.nwhole = nwhole;
	m.delete_extra = !only;
	m.filter = in->keep;
	m.place = in->place;
	if (in->place &&
	    hyd_place_gen(in->place, g->generation, g->catpath, g->ovpath) < 0)
		m.place = NULL; /* written from the store, as without it */
	r = hyd_sync__materialize(&m);
	*ret_deferred = m.deferred;
	*ret_visited += m.visited;
	hyd_sync__unsafe_free(&unsafe);
	cat_reader_close(cat);
	if (r == 0 && hyd_mat__stopped(&m))
		r = -ECANCELED;
	if (r == 0 && res->failed)
		r = -EIO;
	return r;
}

/* `ferry finish` found DIR differs from the generation it holds (someone
 * wrote there): CACHEDIR/HYD_INTO_RELAND asks for one more pass. */
static int reland_asked(hyd_into *in)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/" HYD_INTO_RELAND, in->cache);
	return access(p, F_OK) == 0;
}

static void reland_done(hyd_into *in)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/" HYD_INTO_RELAND, in->cache);
	(void)unlink(p);
}

/* The placer, hooked to the store: chunks fetched from now on land in
 * DIR's files. Without it (its record cannot be opened) the landing
 * writes DIR from the store. */
static void place_start(hyd_into *in)
{
	struct hyd_store_placer hook;
	int r;

	in->keep = hyd_place_filter();
	r = in->keep ? hyd_place_open(in->dir, in->cache, &in->place) : -ENOMEM;
	if (r < 0) {
		base_log_err(BASE_LOG_WARN, r,
			     "--into: chunks are stored, then copied (no "
			     "placement) dir=%s",
			     in->dir);
		return;
	}
	hyd_place_hook(in->place, &hook);
	hyd_store_set_placer(in->c.store, &hook);
}

/* For a pass of the files left (listed): the numbers the placer found
 * whole since the last pass, sorted, in *ret (free() it), or NULL to look
 * at every file left: at least every LOOK_ALL_NS (a file whose chunks came
 * from the store, or before its chunk list was known, is never found whole
 * by the placer), once backfill is done, and without a placer. *all_at:
 * when every file was last looked at. */
static size_t pick_whole(hyd_into *in, int listed, uint64_t now,
			 uint64_t *all_at, uint64_t **ret)
{
	uint64_t *v = NULL;
	size_t n = 0;

	*ret = NULL;
	if (in->place)
		n = hyd_place_take_whole(in->place, &v);
	if (!listed || !in->place || now - *all_at >= LOOK_ALL_NS ||
	    !in->c.filling || !in->c.filling(in->c.arg)) {
		free(v);
		*all_at = now;
		return 0;
	}
	/* none whole: an empty list still means "only these" */
	if (!v)
		v = malloc(sizeof(*v));
	if (!v) {
		*all_at = now;
		return 0;
	}
	*ret = v;
	return hyd_mat_whole_sort(v, n);
}

static void *into_main(void *arg)
{
	hyd_into *in = arg;
	struct hyd_sync_result res;
	struct hyd_place_stats ps;
	struct hyd_into_gen g;
	/* left[cur]: the files the last pass left, which the next pass
	 * looks at instead of the tree while listed is set */
	struct hyd_mat_left left[2];
	uint64_t landed, t0 = 0, pass_gen = 0, deferred = 0, visited = 0;
	uint64_t tree_files = 0, pass_t0, pass_ns, pass_seen, all_at = 0;
	uint64_t *whole = NULL;
	size_t nwhole;
	unsigned passes = 0, cur = 0;
	int listed = 0;
	char err[256];
	int r;

	memset(left, 0, sizeof(left));
	base_thread_name("land");
	pthread_mutex_lock(&in->mu);
	landed = in->st.landed;
	pthread_mutex_unlock(&in->mu);
	/* DIR is this cache's before anything is written into it: a mount
	 * killed in its first pass is let back in to finish it. */
	r = state_write(in, landed);
	if (r < 0) {
		snprintf(err, sizeof(err), "cannot write CACHEDIR/%s: %s",
			 HYD_INTO_STATE, strerror(-r));
		set_state(in, HYD_INTO_LANDING, 0, NULL, err);
		base_error("--into: %s", err);
		return NULL;
	}
	/* Each pass walks the tree until one leaves files for later: then
	 * the next looks only at those (the cost of a pass grows with what
	 * is still missing, not with the tree), and so on while it leaves
	 * some; an error, a new generation or a list that grew past its
	 * bound (hyd_mat_left.c) walks the tree again. */
	while (!stopping(in)) {
		memset(&g, 0, sizeof(g));
		if (in->c.current(in->c.arg, &g) < 0) {
			pause_ns(in, POLL_NS);
			continue;
		}
		if (g.generation == landed && !reland_asked(in)) {
			in->c.release(in->c.arg, &g);
			pause_ns(in, POLL_NS);
			continue;
		}
		set_state(in, HYD_INTO_LANDING, g.generation, NULL, NULL);
		/* a new generation, or the same again (ferry finish asked) */
		if (g.generation != pass_gen || g.generation == landed) {
			pass_gen = g.generation;
			t0 = base_now_ns();
			passes = 0;
			visited = 0;
			listed = 0;
			landed = g.generation == landed ? 0 : landed;
			base_info("--into: landing generation=%" PRIu64
				  " dir=%s",
				  g.generation, in->dir);
		}
		pass_t0 = base_now_ns();
		pass_seen = visited;
		nwhole = pick_whole(in, listed, pass_t0, &all_at, &whole);
		r = land(in, &g, listed ? &left[cur] : NULL, whole, nwhole,
			 &left[cur ^ 1u], &res, &deferred, &visited);
		free(whole);
		whole = NULL;
		pass_ns = base_now_ns() - pass_t0;
		pass_seen = visited - pass_seen;
		in->c.release(in->c.arg, &g);
		passes++;
		/* a listed pass counts only what it visited: the tree's
		 * files are the last walk's */
		if (listed)
			res.files = tree_files;
		else
			tree_files = res.files;
		cur ^= 1u;
		listed = r == 0 && deferred && left[cur].nfiles &&
			 !left[cur].overflow;
		if (r == -ECANCELED)
			break;
		/* Files backfill has not stored whole: the next pass, at once
		 * when this one wrote an eighth of what it looked at (it
		 * trails backfill), else after a pause at least as long as
		 * it took: looking again at files still missing then takes
		 * at most about half of the landing's time, however many
		 * they are, and a file is landed a pause after it is whole. */
		if (r == 0 && deferred) {
			base_debug("--into: pass %u of generation %" PRIu64
				   " wrote %" PRIu64 " files, %" PRIu64
				   " wait for backfill in %zu directories%s"
				   " visited=%" PRIu64,
				   passes, g.generation, res.files_written,
				   deferred, left[cur].ndirs,
				   left[cur].overflow ? " (and more)" : "",
				   visited);
			if (!res.files_written ||
			    res.files_written * 8u < pass_seen)
				pause_ns(in, pass_ns > DEFER_PAUSE_NS
						 ? pass_ns
						 : DEFER_PAUSE_NS);
			continue;
		}
		if (r == 0)
			r = state_write(in, g.generation);
		if (r == 0) {
			reland_done(in);
			/* the numbers no kept catalog names go, as the
			 * store's collection drops their chunks */
			if (in->place)
				(void)hyd_place_prune(in->place, in->cache);
			landed = g.generation;
			set_state(in, HYD_INTO_LANDED, landed, &res, "");
			memset(&ps, 0, sizeof(ps));
			if (in->place)
				hyd_place_stats(in->place, &ps);
			base_info("--into: landed generation=%" PRIu64
				  " dir=%s files=%" PRIu64 " passes=%u"
				  " visited=%" PRIu64
				  " secs=%.1f placed_bytes=%" PRIu64
				  " adopted=%" PRIu64 " found=%" PRIu64
				  " yielded_secs=%.1f",
				  landed, in->dir, res.files, passes, visited,
				  (double)(base_now_ns() - t0) / 1e9, ps.bytes,
				  ps.adopted, ps.found,
				  (double)in->yielded_ns / 1e9);
			in->yielded_ns = 0;
			continue;
		}
		snprintf(err, sizeof(err),
			 "generation %" PRIu64 ": %" PRIu64
			 " entries failed (%s); retrying",
			 g.generation, res.failed,
			 r == -EIO ? "named in the log" : strerror(-r));
		set_state(in, HYD_INTO_LANDING, g.generation, &res, err);
		base_warn("--into: %s", err);
		pause_ns(in, RETRY_NS);
	}
	hyd_mat_left_free(&left[0]);
	hyd_mat_left_free(&left[1]);
	return NULL;
}

/* The generation CACHEDIR/into.state says DIR holds, when it names dir;
 * 0 otherwise. */
static uint64_t state_read(const char *cache, const char *dir)
{
	char had[4096];
	uint64_t gen = 0;

	if (hyd_into_state_read(cache, had, sizeof(had), &gen) < 0 ||
	    strcmp(had, dir))
		return 0;
	return gen;
}

int hyd_into_new(const struct hyd_into_config *c, hyd_into **ret)
{
	hyd_into *in;

	if (!c->dir || c->dir[0] != '/' || !c->cache_dir || !c->current ||
	    !c->release || !c->store)
		return -EINVAL;
	in = calloc(1, sizeof(*in));
	if (!in)
		return -ENOMEM;
	in->c = *c;
	if ((size_t)snprintf(in->dir, sizeof(in->dir), "%s", c->dir) >=
		sizeof(in->dir) ||
	    (size_t)snprintf(in->cache, sizeof(in->cache), "%s",
			     c->cache_dir) >= sizeof(in->cache)) {
		free(in);
		return -ENAMETOOLONG;
	}
	in->c.dir = in->dir;
	in->c.cache_dir = in->cache;
	pthread_mutex_init(&in->mu, NULL);
	pthread_cond_init(&in->cv, NULL);
	in->st.landed = state_read(in->cache, in->dir);
	in->st.state = in->st.landed ? HYD_INTO_LANDED : HYD_INTO_LANDING;
	*ret = in;
	return 0;
}

int hyd_into_start(hyd_into *in)
{
	int r;

	place_start(in);
	r = -pthread_create(&in->th, NULL, into_main, in);

	in->started = r == 0;
	return r;
}

void hyd_into_stats(hyd_into *in, struct hyd_into_stats *ret)
{
	pthread_mutex_lock(&in->mu);
	*ret = in->st;
	pthread_mutex_unlock(&in->mu);
}

void hyd_into_free(hyd_into *in)
{
	if (!in)
		return;
	pthread_mutex_lock(&in->mu);
	__atomic_store_n(&in->stop, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&in->cv);
	pthread_mutex_unlock(&in->mu);
	if (in->started)
		pthread_join(in->th, NULL);
	/* puts from now on go to the store; what the placer holds is
	 * recorded and its puts told */
	if (in->place)
		hyd_store_set_placer(in->c.store, NULL);
	hyd_place_close(in->place);
	hyd_filter_free(in->keep);
	pthread_mutex_destroy(&in->mu);
	pthread_cond_destroy(&in->cv);
	free(in);
}
