/*
 * hydrator/follow/hyd_follow.c — the thread that keeps a mount on the
 * source's newest generation (see hyd_follow.h).
 *
 * Order of one switch, and why:
 *   1. the catalog goes into the cache first (durable, checked), so a
 *      crash from here on mounts N+1 next time, whole;
 *   2. it is opened, with its overlay and manifest fetcher, and the
 *      differences with the served one are read off (cat_diff) before
 *      anything changes, so the time between the switch and the kernel
 *      hearing of it is only the notifications;
 *   3. the pointer moves (hyd_fs_gens_switch): from here lookups and
 *      listings answer N+1, inos only N had are answered by N;
 *   4. the kernel is told: each changed name's dentry (positive or
 *      negative) is invalidated, each directory whose listing changed
 *      loses its cached listing, each inode whose row moved its
 *      attributes. A lookup that raced the switch and answered from N is
 *      safe: the kernel holds the directory's lock for a lookup, and an
 *      entry invalidation takes it, so it waits for that lookup's reply
 *      and then drops what it installed; attributes carry a version that
 *      the invalidation moves past an answer in flight;
 *   5. backfill takes the new catalog and fetches what the store lacks;
 *   6. generations past the kept ones leave (their files with their last
 *      reader) and the store drops what no catalog names.
 * With --trust-key, step 1 takes a generation only with its signed
 * statement checked (hyd_catalog_update: -EKEYREJECTED, nothing
 * installed): a refused one is logged as an error and never switched to.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "hydrator/fetch/hyd_open.h"
#include "hydrator/follow/hyd_follow.h"

#define GC_WAIT_DEFAULT_MS 600000u
/* Between two warnings of the same failure to reach the server. */
#define WARN_EVERY_NS (300ull * 1000000000ull)

struct gc_job {
	int want, done, rc;
	struct hyd_gc_result res;
};

struct hyd_follow {
	struct hyd_follow_config cfg;
	char *base_url, *cache_dir;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, poke;
	uint64_t gen;	     /* served now (under mu) */
	int64_t switched_ns; /* since when (under mu) */
	uint64_t refused;    /* a generation not switched to for good */
	struct gc_job gc;    /* under mu */
	uint64_t gc_seq;     /* collections asked for, and run */
	/* the follower thread's own */
	struct hyd_gen *bf_gen; /* the generation backfill reads (a ref):
				 * its manifest fetcher is backfill's */
	cat_reader *bf_cat;	/* backfill's reader of it (owned) */
	uint64_t warned_ns;
	char last_err[1024];
	unsigned delay_ms; /* test hook: FERRY_TEST_SWITCH_DELAY_MS */
	pthread_t th;
	int started;
};

/* One change to tell the kernel; names copied out of cat_diff. */
struct inval {
	enum cat_diff_kind kind;
	uint64_t ino;
	char *name; /* CAT_DIFF_NAME */
	size_t name_len;
};

struct inval_list {
	struct inval *v;
	size_t n, cap;
	size_t names, dirs, inodes;
	uint64_t *gone; /* inos only the old catalog has, ascending */
	size_t ngone, capgone;
};

static int inval_add(void *ctx, const struct cat_diff_item *it)
{
	struct inval_list *l = ctx;
	struct inval *nv;

	if (it->kind == CAT_DIFF_GONE) {
		if (l->ngone == l->capgone) {
			size_t cap = l->capgone ? l->capgone * 2 : 256;
			uint64_t *ng = realloc(l->gone, cap * sizeof(*ng));

			if (!ng)
				return -ENOMEM;
			l->gone = ng;
			l->capgone = cap;
		}
		l->gone[l->ngone++] = it->ino;
		return 0;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;

		nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	nv = &l->v[l->n];
	memset(nv, 0, sizeof(*nv));
	nv->kind = it->kind;
	nv->ino = it->ino;
	if (it->kind == CAT_DIFF_NAME) {
		nv->name = malloc(it->name_len + 1);
		if (!nv->name)
			return -ENOMEM;
		memcpy(nv->name, it->name, it->name_len);
		nv->name[it->name_len] = '\0';
		nv->name_len = it->name_len;
		l->names++;
	} else if (it->kind == CAT_DIFF_DIR) {
		l->dirs++;
	} else {
		l->inodes++;
	}
	l->n++;
	return 0;
}

static void inval_free(struct inval_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
	free(l->gone);
	memset(l, 0, sizeof(*l));
}

/* Tell the kernel. -ENOENT is the common answer (it never looked the
 * name or inode up) and means there is nothing to forget. */
static void inval_send(struct hyd_follow *f, const struct inval_list *l)
{
	struct fuse_session *se = f->cfg.se;
	int r;

	if (!se)
		return;
	for (size_t i = 0; i < l->n; i++) {
		const struct inval *v = &l->v[i];

		switch (v->kind) {
		case CAT_DIFF_GONE:
			continue; /* kept apart, never here */
		case CAT_DIFF_NAME:
			r = fuse_lowlevel_notify_inval_entry(
			    se, v->ino, v->name, v->name_len);
			break;
		case CAT_DIFF_DIR:
		case CAT_DIFF_DATA:
			/* Attributes and cached pages: a directory's pages
			 * are its cached listing. */
			r = fuse_lowlevel_notify_inval_inode(se, v->ino, 0, 0);
			break;
		default:
			r = fuse_lowlevel_notify_inval_inode(se, v->ino, -1, 0);
			break;
		}
		if (r < 0 && r != -ENOENT)
			base_log_err(BASE_LOG_DEBUG, r,
				     "kernel cache invalidation failed "
				     "ino=%" PRIu64,
				     v->ino);
	}
}

/* A failure to check or fetch, logged once per kind (and again after
 * WARN_EVERY_NS), so a source that is down does not fill the log. */
static void warn_once(struct hyd_follow *f, const char *what)
{
	uint64_t now = base_now_ns();

	if (!strcmp(what, f->last_err) && now - f->warned_ns < WARN_EVERY_NS)
		return;
	snprintf(f->last_err, sizeof(f->last_err), "%s", what);
	f->warned_ns = now;
	base_warn("cannot follow the source: %s", what);
}

/* Open catalog catpath as a generation: the reader, the overlay and the
 * manifest fetcher when files are pending, and backfill's own reader. */
static int gen_open(struct hyd_follow *f, const char *catpath,
		    struct hyd_gen **ret_g, cat_reader **ret_bf)
{
	struct hyd_open op;
	hyd_manifest *man = NULL;
	int r;

	*ret_g = NULL;
	*ret_bf = NULL;
	memset(&op, 0, sizeof(op));
	snprintf(op.base, sizeof(op.base), "%s", f->base_url);
	snprintf(op.cache, sizeof(op.cache), "%s", f->cache_dir);
	snprintf(op.catpath, sizeof(op.catpath), "%s", catpath);
	/* op.store stays NULL: the store's bound is the mount's. */
	r = hyd_open_local(&op);
	if (r == 0 && op.ov) {
		struct hyd_manifest_config mc = {
		    .base_url = f->base_url,
		    .ov = op.ov,
		    .connect_timeout_ms = f->cfg.connect_timeout_s * 1000,
		    .creds = f->cfg.creds,
		    .counts = f->cfg.counts,
		};

		r = hyd_manifest_new(&mc, &man);
	}
	if (r == 0 && f->cfg.bf)
		r = hyd_open_reader(&op, ret_bf);
	if (r == 0)
		r = hyd_gen_new(op.cat, op.ov, man, op.catpath, op.ovpath,
				ret_g);
	if (r < 0) {
		cat_reader_close(*ret_bf);
		*ret_bf = NULL;
		hyd_manifest_free(man);
		hyd_open_close(&op);
		return r;
	}
	return 0;
}

/* Can the mount go from cur to the catalog in g in place? Numbers must
 * mean the same entries: the same chunk parameters, and a line of
 * generations that did not start over (a replicator whose state was
 * wiped numbers from 1 again). */
static const char *why_not(const struct hyd_gen *cur, const struct hyd_gen *g)
{
	if (memcmp(&cur->meta.params, &g->meta.params,
		   sizeof(cur->meta.params)) != 0)
		return "its chunk parameters differ";
	if (g->meta.next_ino && cur->meta.next_ino &&
	    g->meta.next_ino < cur->meta.next_ino)
		return "its inode numbering started over";
	if (g->generation <= cur->generation)
		return "it is not newer";
	return NULL;
}

static void record_switch(struct hyd_follow *f, uint64_t gen, int64_t at_ns)
{
	char buf[32];

	pthread_mutex_lock(&f->mu);
	f->gen = gen;
	f->switched_ns = at_ns;
	pthread_mutex_unlock(&f->mu);
	snprintf(buf, sizeof(buf), "%" PRId64, at_ns);
	/* For `ferry status` of an idle cache; only status reads it. */
	(void)hyd_store_meta_set(f->cfg.store, "switched_at", buf);
}

static void run_gc(struct hyd_follow *f, struct hyd_gc_result *res, int *ret_rc)
{
	int r = hyd_store_gc(f->cfg.store, res);

	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "cannot collect the store's unused chunks");
	else
		base_info("store collected catalogs=%" PRIu64
			  " chunks_dropped=%" PRIu64 " bytes_freed=%" PRIu64
			  " chunks_kept=%" PRIu64 " seconds=%.3f",
			  res->catalogs, res->dropped, res->dropped_bytes,
			  res->kept, res->elapsed_s);
	if (ret_rc)
		*ret_rc = r;
}

/* Check HEAD; switch when there is a newer generation. */
static void follow_once(struct hyd_follow *f)
{
	struct hyd_catalog_result res = {0};
	struct inval_list l = {0};
	struct hyd_gen *cur, *g = NULL;
	cat_reader *bf_cat = NULL, *old_bf = NULL;
	uint64_t t_in, t0;
	const char *why;
	char err[1024];
	long dropped;
	int r;

	cur = hyd_fs_gen(f->cfg.fs);
	t_in = base_now_ns();
	r = hyd_catalog_update(f->base_url, f->cache_dir, f->cfg.creds,
			       cur->generation, f->cfg.connect_timeout_s,
			       &f->stop, &res, err, sizeof(err));
	HYD_MOUNT_COUNT(f->cfg.counts, catalog_requests, res.requests);
	HYD_MOUNT_COUNT(f->cfg.counts, catalog_bytes, res.bytes);
	if (r < 0 && __atomic_load_n(&f->stop, __ATOMIC_RELAXED))
		goto out; /* stopping: the transfer was cut on purpose */
	if (r == -EKEYREJECTED) {
		/* --trust-key refused the new generation before anything of
		 * it was installed: said once per refusal, as an error; the
		 * mount goes on serving what it serves */
		if (strcmp(err, f->last_err) != 0) {
			snprintf(f->last_err, sizeof(f->last_err), "%s", err);
			f->warned_ns = base_now_ns();
			base_error(
			    "not switching generations: %s (still serving "
			    "generation %" PRIu64 ")",
			    err, cur->generation);
		}
		goto out;
	}
	if (r < 0) {
		warn_once(f, err[0] ? err : strerror(-r));
		goto out;
	}
	f->last_err[0] = '\0';
	if (r == 0 || res.generation == f->refused) {
		if (r == 0 && res.generation < cur->generation &&
		    res.generation != f->refused) {
			f->refused = res.generation;
			base_error("the source now serves generation %" PRIu64
				   ", older than the %" PRIu64
				   " this mount serves: not following it "
				   "(remount to serve it)",
				   res.generation, cur->generation);
		}
		goto out;
	}
	t0 = base_now_ns();
	r = gen_open(f, res.path, &g, &bf_cat);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot open the new catalog generation=%" PRIu64
			     " path=%s",
			     res.generation, res.path);
		goto out;
	}
	why = why_not(cur, g);
	if (why) {
		f->refused = g->generation;
		base_error("not switching to generation %" PRIu64
			   ": %s (remount to serve it)",
			   g->generation, why);
		goto out;
	}
	r = cat_diff(cur->catpath, g->catpath, inval_add, &l);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot compare generations from=%" PRIu64
			     " to=%" PRIu64,
			     cur->generation, g->generation);
		goto out;
	}
	/* Test hook: a window between the new catalog in the cache and the
	 * switch, for a kill -9 "in the middle of a switch". */
	if (f->delay_ms) {
		base_info("switching generation from=%" PRIu64 " to=%" PRIu64
			  " (after a test delay of %u ms)",
			  cur->generation, g->generation, f->delay_ms);
		nanosleep(
		    &(struct timespec){f->delay_ms / 1000,
				       (long)(f->delay_ms % 1000) * 1000000L},
		    NULL);
	}
	/* The switch: from here on lookups answer the new one. */
	hyd_gen_ref(g); /* for backfill, below */
	dropped =
	    hyd_fs_gens_switch(f->cfg.fs, g, f->cfg.keep, l.gone, l.ngone);
	if (dropped < 0) {
		hyd_gen_unref(g);
		base_log_err(BASE_LOG_ERROR, (int)dropped,
			     "cannot switch to generation %" PRIu64,
			     g->generation);
		goto out;
	}
	inval_send(f, &l);
	record_switch(f, g->generation, base_wall_ns());
	HYD_MOUNT_COUNT(f->cfg.counts, switches, 1);
	if (f->cfg.counts)
		__atomic_store_n(&f->cfg.counts->generation, g->generation,
				 __ATOMIC_RELAXED);
	/* install_ms: HEAD and the catalog (delta: copy, apply, digest);
	 * ms: open, compare, switch, tell the kernel. */
	base_info("switched generation from=%" PRIu64 " to=%" PRIu64
		  " names=%zu dirs=%zu inodes=%zu gone=%zu dropped=%ld "
		  "install_ms=%.1f ms=%.1f",
		  cur->generation, g->generation, l.names, l.dirs, l.inodes,
		  l.ngone, dropped, (double)(t0 - t_in) / 1e6,
		  (double)(base_now_ns() - t0) / 1e6);
	/* The new generation's pending manifests in bulk, as at mount
	 * (without backfill only the segments asked for: nothing else in
	 * the background then). */
	if (f->cfg.bf && g->manifest &&
	    (f->cfg.prefetch
		 ? hyd_manifest_prefetch(g->manifest, g->cat, 0)
		 : hyd_manifest_prefetch_asked(g->manifest, g->cat,
					       HYD_MANIFEST_ASKED_THREADS)) < 0)
		base_warn("no manifest prefetch for generation %" PRIu64
			  ": manifests come file by file",
			  g->generation);
	if (f->cfg.bf && bf_cat) {
		r = hyd_backfill_switch(f->cfg.bf, bf_cat, g->manifest,
					&old_bf);
		if (r == 0) {
			/* old_bf is f->bf_cat, which backfill let go of */
			cat_reader_close(old_bf);
			f->bf_cat = bf_cat;
			bf_cat = NULL;
			hyd_gen_unref(f->bf_gen);
			f->bf_gen = g;
		} else {
			hyd_gen_unref(g);
		}
	} else {
		hyd_gen_unref(g);
	}
	g = NULL; /* the mount's now */
	if (dropped)
		run_gc(f, &(struct hyd_gc_result){0}, NULL);
out:
	inval_free(&l);
	cat_reader_close(bf_cat);
	hyd_gen_unref(g);
	hyd_gen_unref(cur);
}

static int wait_next(struct hyd_follow *f, uint64_t until_ns)
{
	int go;

	pthread_mutex_lock(&f->mu);
	while (!f->stop && !f->poke && !f->gc.want &&
	       (!until_ns || base_now_ns() < until_ns)) {
		if (until_ns) {
			base_cond_wait_until(&f->cv, &f->mu, until_ns);
		} else {
			pthread_cond_wait(&f->cv, &f->mu);
		}
	}
	go = !f->stop;
	pthread_mutex_unlock(&f->mu);
	return go;
}

static void *follow_main(void *arg)
{
	struct hyd_follow *f = arg;
	uint64_t period = (uint64_t)f->cfg.poll_s * 1000000000ull, next;
	struct hyd_gc_result res;
	int poke, gc, rc;

	base_thread_name("follow");
	next = period ? base_now_ns() + period : 0;
	while (wait_next(f, next)) {
		pthread_mutex_lock(&f->mu);
		poke = f->poke;
		gc = f->gc.want;
		f->poke = 0;
		pthread_mutex_unlock(&f->mu);
		if (gc) {
			memset(&res, 0, sizeof(res));
			run_gc(f, &res, &rc);
			pthread_mutex_lock(&f->mu);
			f->gc.want = 0;
			f->gc.done = 1;
			f->gc.rc = rc;
			f->gc.res = res;
			pthread_cond_broadcast(&f->cv);
			pthread_mutex_unlock(&f->mu);
		}
		if (poke || (period && base_now_ns() >= next)) {
			follow_once(f);
			next = period ? base_now_ns() + period : 0;
		}
	}
	return NULL;
}

int hyd_follow_new(const struct hyd_follow_config *cfg, hyd_follow **ret)
{
	struct hyd_follow *f;
	struct hyd_gen *g;

	*ret = NULL;
	if (!cfg->base_url || !cfg->cache_dir || !cfg->store || !cfg->fs)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->cfg = *cfg;
	if (!f->cfg.keep)
		f->cfg.keep = 1;
	f->base_url = strdup(cfg->base_url);
	f->cache_dir = strdup(cfg->cache_dir);
	if (!f->base_url || !f->cache_dir || base_cond_init(&f->cv) < 0) {
		free(f->base_url);
		free(f->cache_dir);
		free(f);
		return -ENOMEM;
	}
	pthread_mutex_init(&f->mu, NULL);
	f->bf_cat = cfg->bf_cat;
	{
		const char *e = getenv("FERRY_TEST_SWITCH_DELAY_MS");
		uint64_t v;

		if (e && base_parse_u64(e, 0, 600000, &v) == 0)
			f->delay_ms = (unsigned)v;
	}
	g = hyd_fs_gen(cfg->fs);
	/* backfill reads the current generation's manifest fetcher */
	f->bf_gen = g;
	record_switch(f, g->generation,
		      cfg->started_ns ? cfg->started_ns : base_wall_ns());
	*ret = f;
	return 0;
}

int hyd_follow_start(hyd_follow *f)
{
	sigset_t all, old;
	int r;

	if (f->started)
		return -EALREADY;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&f->th, NULL, follow_main, f);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0)
		f->started = 1;
	return r;
}

void hyd_follow_stop(hyd_follow *f)
{
	if (!f || !f->started)
		return;
	pthread_mutex_lock(&f->mu);
	/* Atomic too: a catalog transfer in progress polls it. */
	__atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->th, NULL);
	f->started = 0;
}

void hyd_follow_free(hyd_follow *f)
{
	if (!f)
		return;
	hyd_follow_stop(f);
	cat_reader_close(f->bf_cat);
	hyd_gen_unref(f->bf_gen);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f->base_url);
	free(f->cache_dir);
	free(f);
}

void hyd_follow_poke(hyd_follow *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->mu);
	f->poke = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

void hyd_follow_info(hyd_follow *f, uint64_t *ret_gen, int64_t *ret_switched_ns)
{
	pthread_mutex_lock(&f->mu);
	*ret_gen = f->gen;
	*ret_switched_ns = f->switched_ns;
	pthread_mutex_unlock(&f->mu);
}

int hyd_follow_gc(hyd_follow *f, unsigned timeout_ms, struct hyd_gc_result *ret)
{
	uint64_t until =
	    base_now_ns() +
	    (uint64_t)(timeout_ms ? timeout_ms : GC_WAIT_DEFAULT_MS) *
		1000000ull;
	int r;

	memset(ret, 0, sizeof(*ret));
	pthread_mutex_lock(&f->mu);
	if (!f->started || f->stop) {
		pthread_mutex_unlock(&f->mu);
		return -ECANCELED;
	}
	/* One at a time: a second asker waits for the first to be done. */
	while (f->gc.want && !f->stop && base_now_ns() < until)
		base_cond_wait_until(&f->cv, &f->mu, until);
	f->gc.want = 1;
	f->gc.done = 0;
	pthread_cond_broadcast(&f->cv);
	while (!f->gc.done && !f->stop && base_now_ns() < until)
		base_cond_wait_until(&f->cv, &f->mu, until);
	if (f->gc.done) {
		r = f->gc.rc;
		*ret = f->gc.res;
		f->gc.done = 0;
	} else {
		r = f->stop ? -ECANCELED : -ETIMEDOUT;
	}
	pthread_mutex_unlock(&f->mu);
	return r;
}
