/*
 * hydrator/fetch/hyd_manifest_bulk.c — the manifests of a catalog's
 * pending files, fetched in bulk from mount time (hyd_manifest_prefetch).
 *
 * Why: a pending file's manifest fetched on its first read costs a round
 * trip before its chunks can even be asked for; across a WAN that is 20 to
 * 150 ms per file, and a job that opens thousands of files pays it
 * thousands of times. A source that has hashed its files can answer for
 * 1,024 of them in one request (GET BASE/manifests/GEN/SEG), so a few
 * such requests in flight from mount time make the mount learn every
 * manifest in (files / 1,024 / threads) round trips, usually before the
 * job asks.
 *
 * Order: segments in ino order (the catalog's, the scan's depth-first
 * order, which is how jobs walk trees), except that a segment someone
 * asked for (hyd_manifest_want: a directory listed, a file looked up or
 * opened) jumps the line. Each worker takes the next segment that still
 * has a manifest missing (cat_pending_missing) and fetches it with
 * hyd_manifest_segment, which shares one request per segment with any
 * other caller (single flight). A segment the source has not hashed yet
 * (-EAGAIN after the server held the request) means the later ones are not
 * ready either (the source hashes in ino order, a reader's file first):
 * the workers wait a little and start over from the first missing one. A
 * worker ends when nothing is missing; the whole thing ends with the
 * manifest fetcher (hyd_manifest_free) or its cancel.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/fetch/hyd_manifest_bulk_priv.h"

/* Segments asked for, waiting to jump the line (more are dropped: they
 * come in ino order anyway). */
#define WANT_MAX 256u
/* Per segment request: the server may hold it while it hashes. */
#define SEG_DEADLINE_NS (30ull * 1000000000ull)
/* Waits after a segment the source has not hashed, or a failure. */
#define NOT_READY_NS (500ull * 1000000ull)
#define FAIL_WAIT_NS (2000ull * 1000000ull)
#define THREADS_MAX 32u
/* Failed segments (not unready ones) before the prefetch gives up. */
#define FAILS_MAX 16u

struct hyd_mbulk {
	hyd_manifest *m;
	cat_reader *r; /* borrowed */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t next;		 /* segments below are taken (a sweep) */
	uint64_t want[WANT_MAX]; /* ring of segments asked for */
	unsigned want_head, want_n;
	uint64_t *running;   /* the segment each worker holds, or UINT64_MAX */
	uint64_t restart_at; /* base_now_ns: a new sweep from 0 not before */
	int asked_only;	     /* no sweep: the segments asked for alone */
	int stop;
	unsigned nthreads, live;
	pthread_t *th;
	/* progress, under mu */
	uint64_t segments, files;
	unsigned failures;
};

static int held(const struct hyd_mbulk *b, uint64_t seg)
{
	for (unsigned i = 0; i < b->nthreads; i++)
		if (b->running[i] == seg)
			return 1;
	return 0;
}

/* The first segment at or after seg with a manifest missing, or
 * UINT64_MAX when none. The reader's own lock covers the query. */
static uint64_t first_missing(struct hyd_mbulk *b, uint64_t seg)
{
	uint64_t ino;
	size_t n = 0;

	/* inos start at 1: after 0 is the whole catalog */
	if (cat_pending_missing(b->r, seg ? seg * HYD_MANIFEST_SEG_INOS - 1 : 0,
				&ino, 1, &n) < 0 ||
	    !n)
		return UINT64_MAX;
	return ino / HYD_MANIFEST_SEG_INOS;
}

/* Under mu: the segment worker w fetches next, or UINT64_MAX to end.
 * May drop mu while it asks the catalog. */
static uint64_t take(struct hyd_mbulk *b, unsigned w)
{
	uint64_t seg, from, now;

	for (;;) {
		if (b->stop)
			return UINT64_MAX;
		/* One asked for first, if it still misses anything. */
		while (b->want_n) {
			seg = b->want[b->want_head];
			b->want_head = (b->want_head + 1) % WANT_MAX;
			b->want_n--;
			if (held(b, seg))
				continue;
			pthread_mutex_unlock(&b->mu);
			seg = first_missing(b, seg) == seg ? seg : UINT64_MAX;
			pthread_mutex_lock(&b->mu);
			if (seg != UINT64_MAX && !held(b, seg)) {
				b->running[w] = seg;
				return seg;
			}
		}
		if (b->asked_only) {
			/* Woken by hyd_mbulk_want or the stop. */
			pthread_cond_wait(&b->cv, &b->mu);
			continue;
		}
		now = base_now_ns();
		if (b->restart_at > now) {
			base_cond_wait_until(&b->cv, &b->mu, b->restart_at);
			continue;
		}
		from = b->next;
		pthread_mutex_unlock(&b->mu);
		seg = first_missing(b, from);
		pthread_mutex_lock(&b->mu);
		if (seg == UINT64_MAX) {
			if (!from)
				return UINT64_MAX; /* nothing missing at all */
			/* Past the end of a sweep: what failed, was not
			 * ready or is being fetched now is looked at again
			 * from the start, after a wait. */
			b->next = 0;
			b->restart_at = base_now_ns() + NOT_READY_NS;
			continue;
		}
		if (b->next != from)
			continue; /* another worker moved the sweep on */
		b->next = seg + 1;
		if (held(b, seg))
			continue;
		b->running[w] = seg;
		return seg;
	}
}

struct worker_arg {
	struct hyd_mbulk *b;
	unsigned w;
};

static void *worker(void *p)
{
	struct worker_arg *wa = p;
	struct hyd_mbulk *b = wa->b;
	unsigned w = wa->w;
	uint64_t seg, t0;
	size_t files;
	int r;

	base_thread_name("manifests");
	free(wa);
	pthread_mutex_lock(&b->mu);
	while ((seg = take(b, w)) != UINT64_MAX) {
		pthread_mutex_unlock(&b->mu);
		files = 0;
		t0 = base_now_ns();
		r = hyd_manifest_segment(b->m, b->r, seg, t0 + SEG_DEADLINE_NS,
					 &b->stop, &files);
		base_debug("manifest prefetch segment=%" PRIu64 " files=%zu "
			   "ms=%.1f err=%s",
			   seg, files, (double)(base_now_ns() - t0) / 1e6,
			   r < 0 ? base_errname(r) : "0");
		pthread_mutex_lock(&b->mu);
		b->running[w] = UINT64_MAX;
		if (r == 0) {
			b->segments++;
			b->files += files;
			continue;
		}
		if (r == -ECANCELED)
			break;
		/* Not hashed yet, or a failure (logged by the fetcher):
		 * what is missing is asked for again after a wait, from
		 * the first missing segment on. Reads still get theirs, by
		 * file, whatever happens here; a server that keeps
		 * refusing (a superseded generation, a bad signature, a
		 * broken body) ends the prefetch. */
		if (r != -EAGAIN && ++b->failures >= FAILS_MAX) {
			base_warn("manifest prefetch stops after %u failures "
				  "segment=%" PRIu64 " err=%s",
				  FAILS_MAX, seg, base_errname(r));
			__atomic_store_n(&b->stop, 1, __ATOMIC_RELAXED);
			break;
		}
		b->next = 0;
		b->restart_at = base_now_ns() +
				(r == -EAGAIN ? NOT_READY_NS : FAIL_WAIT_NS);
		base_debug("manifest prefetch segment=%" PRIu64 " err=%s", seg,
			   base_errname(r));
	}
	b->live--;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

static int start(hyd_manifest *m, cat_reader *r, unsigned threads,
		 int asked_only, struct hyd_mbulk **ret)
{
	struct hyd_mbulk *b;
	sigset_t all, old;
	unsigned i;
	int e = 0;

	*ret = NULL;
	if (!threads)
		threads = HYD_MANIFEST_PREFETCH_THREADS;
	if (threads > THREADS_MAX)
		threads = THREADS_MAX;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->m = m;
	b->r = r;
	b->asked_only = asked_only;
	b->nthreads = threads;
	b->running = malloc(threads * sizeof(*b->running));
	b->th = calloc(threads, sizeof(*b->th));
	if (!b->running || !b->th || pthread_mutex_init(&b->mu, NULL)) {
		free(b->running);
		free(b->th);
		free(b);
		return -ENOMEM;
	}
	if (base_cond_init(&b->cv) < 0) {
		pthread_mutex_destroy(&b->mu);
		free(b->running);
		free(b->th);
		free(b);
		return -ENOMEM;
	}
	for (i = 0; i < threads; i++)
		b->running[i] = UINT64_MAX;
	/* Signals stay with the main thread (FUSE's handlers). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_mutex_lock(&b->mu);
	for (i = 0; i < threads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));

		if (!wa) {
			e = ENOMEM;
			break;
		}
		wa->b = b;
		wa->w = i;
		e = pthread_create(&b->th[i], NULL, worker, wa);
		if (e) {
			free(wa);
			break;
		}
		b->live++;
	}
	b->nthreads = i; /* the ones that run */
	pthread_mutex_unlock(&b->mu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!i) {
		hyd_mbulk_stop(b);
		return -e;
	}
	*ret = b;
	return 0;
}

int hyd_mbulk_start(hyd_manifest *m, cat_reader *r, unsigned threads,
		    struct hyd_mbulk **ret)
{
	return start(m, r, threads, 0, ret);
}

int hyd_mbulk_start_asked(hyd_manifest *m, cat_reader *r, unsigned threads,
			  struct hyd_mbulk **ret)
{
	return start(m, r, threads, 1, ret);
}

void hyd_mbulk_want(struct hyd_mbulk *b, uint64_t ino)
{
	uint64_t seg = ino / HYD_MANIFEST_SEG_INOS;
	unsigned i;

	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	/* The same segment asked for again and again (a directory's files)
	 * is one entry: look at the latest few. */
	for (i = 0; i < b->want_n && i < 8; i++)
		if (b->want[(b->want_head + b->want_n - 1 - i) % WANT_MAX] ==
		    seg)
			goto out;
	if (b->want_n < WANT_MAX && !held(b, seg) && b->live) {
		b->want[(b->want_head + b->want_n) % WANT_MAX] = seg;
		b->want_n++;
		/* A worker waiting out an unready source looks now: the
		 * server moves an asked-for file to the front. */
		b->restart_at = 0;
		pthread_cond_broadcast(&b->cv);
	}
out:
	pthread_mutex_unlock(&b->mu);
}

void hyd_mbulk_progress(struct hyd_mbulk *b, uint64_t *ret_segments,
			uint64_t *ret_files, int *ret_running)
{
	pthread_mutex_lock(&b->mu);
	*ret_segments = b->segments;
	*ret_files = b->files;
	*ret_running = b->live > 0;
	pthread_mutex_unlock(&b->mu);
}

void hyd_mbulk_stop(struct hyd_mbulk *b)
{
	unsigned i;

	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	for (i = 0; i < b->nthreads; i++)
		pthread_join(b->th[i], NULL);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	free(b->running);
	free(b->th);
	free(b);
}
