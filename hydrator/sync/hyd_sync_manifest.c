/*
 * hydrator/sync/hyd_sync_manifest.c — the manifest thread of `ferry sync`
 * (hyd_sync_priv.h): the pending manifests of a format 2 catalog, made
 * local segment by segment in ino order while the fetching pass streams
 * the chunks of the manifests already there, so a sync consumes manifests
 * as the source publishes them instead of waiting for all.
 *
 * The source hashes in ino order and answers a segment once all of it is
 * hashed, so asking for the lowest missing segment first is asking for
 * the next one it will finish. A segment still hashing (503 until a try's
 * deadline: -EAGAIN) is asked again at once — the server holds each
 * request up to its ?wait=, so this does not spin — with an info line
 * every WAIT_LOG_NS saying what the sync waits for. Any other failure
 * skips the segment; its files are the writer's to name.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define WAIT_LOG_NS 30000000000ull

struct hyd_sync_mq {
	hyd_manifest *man;
	cat_reader *cat;
	uint64_t timeout_ns;
	pthread_t th;
	int started;
	int stop; /* __atomic; ends a fetch in progress */

	pthread_mutex_t mu; /* the queue and done */
	pthread_cond_t cond;
	uint64_t *v; /* inos whose manifest became local, v[head..n) */
	size_t head, n, cap;
	int done;

	uint64_t answered, failed; /* __atomic */
	uint64_t changed;	   /* __atomic: of answered, no manifest */
};

static int push(struct hyd_sync_mq *q, const uint64_t *inos, size_t k)
{
	uint64_t *nv;
	size_t cap;

	if (k == 0)
		return 0;
	pthread_mutex_lock(&q->mu);
	/* Taken entries go first, so the array only grows with what is
	 * waiting. */
	if (q->head) {
		memmove(q->v, q->v + q->head, (q->n - q->head) * sizeof(*q->v));
		q->n -= q->head;
		q->head = 0;
	}
	if (q->cap - q->n < k) {
		cap = q->cap ? q->cap : 1024;
		while (cap - q->n < k)
			cap *= 2;
		nv = realloc(q->v, cap * sizeof(*nv));
		if (!nv) {
			pthread_mutex_unlock(&q->mu);
			return -ENOMEM;
		}
		q->v = nv;
		q->cap = cap;
	}
	memcpy(q->v + q->n, inos, k * sizeof(*inos));
	q->n += k;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

/* The missing pending inos of segment seg, into v (room for a segment). */
static int seg_missing(struct hyd_sync_mq *q, uint64_t seg, uint64_t *v,
		       size_t *ret_n)
{
	uint64_t first = seg * HYD_MANIFEST_SEG_INOS;
	size_t n = 0, k;
	int r;

	r = cat_pending_missing(q->cat, first ? first - 1 : 0, v,
				HYD_MANIFEST_SEG_INOS, &n);
	if (r < 0)
		return r;
	for (k = 0; k < n && v[k] < first + HYD_MANIFEST_SEG_INOS; k++)
		;
	*ret_n = k;
	return 0;
}

/* Fetch segment seg, as long as the server says it is still hashing. */
static int seg_fetch(struct hyd_sync_mq *q, uint64_t seg)
{
	uint64_t next_log = base_now_ns() + WAIT_LOG_NS;
	int r;

	for (;;) {
		r = hyd_manifest_segment(q->man, q->cat, seg,
					 base_now_ns() + q->timeout_ns,
					 &q->stop, NULL);
		if (r != -EAGAIN)
			return r;
		if (base_now_ns() >= next_log) {
			next_log = base_now_ns() + WAIT_LOG_NS;
			base_info("waiting for the source to hash files "
				  "segment=%" PRIu64 " inos=%" PRIu64
				  "-%" PRIu64,
				  seg, seg * HYD_MANIFEST_SEG_INOS,
				  seg * HYD_MANIFEST_SEG_INOS +
				      HYD_MANIFEST_SEG_INOS - 1);
		}
	}
}

static void *mq_main(void *arg)
{
	struct hyd_sync_mq *q = arg;
	uint64_t *miss, *got, after = 0, ino, seg;
	size_t n, k, ngot;
	int r = 0, st;

	base_thread_name("manifests");
	miss = malloc(HYD_MANIFEST_SEG_INOS * sizeof(*miss));
	got = malloc(HYD_MANIFEST_SEG_INOS * sizeof(*got));
	if (!miss || !got)
		r = -ENOMEM;
	while (r == 0 && !__atomic_load_n(&q->stop, __ATOMIC_RELAXED)) {
		r = cat_pending_missing(q->cat, after, &ino, 1, &n);
		if (r < 0 || n == 0)
			break;
		seg = ino / HYD_MANIFEST_SEG_INOS;
		r = seg_missing(q, seg, miss, &n);
		if (r < 0)
			break;
		r = seg_fetch(q, seg);
		if (r == -ECANCELED)
			break;
		if (r < 0)
			__atomic_add_fetch(&q->failed, 1, __ATOMIC_RELAXED);
		/* Even a segment that failed half-way may have stored some:
		 * hand on every file that has its manifest now. */
		for (k = 0, ngot = 0; k < n; k++) {
			st = cat_manifest_state(q->cat, miss[k]);
			if (st == CAT_MANIFEST_LOCAL)
				got[ngot++] = miss[k];
			if (st == CAT_MANIFEST_LOCAL ||
			    st == CAT_MANIFEST_CHANGED)
				__atomic_add_fetch(&q->answered, 1,
						   __ATOMIC_RELAXED);
			if (st == CAT_MANIFEST_CHANGED)
				__atomic_add_fetch(&q->changed, 1,
						   __ATOMIC_RELAXED);
		}
		r = push(q, got, ngot);
		after = (seg + 1) * HYD_MANIFEST_SEG_INOS - 1;
	}
	if (r < 0 && r != -ECANCELED)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot go on fetching manifests");
	free(miss);
	free(got);
	pthread_mutex_lock(&q->mu);
	q->done = 1;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int hyd_sync__mq_start(struct hyd_manifest *man, cat_reader *cat,
		       uint64_t timeout_ns, struct hyd_sync_mq **ret)
{
	struct hyd_sync_mq *q;
	sigset_t all, old;
	int r;

	*ret = NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->man = man;
	q->cat = cat;
	q->timeout_ns = timeout_ns;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cond, NULL);
	/* Signals stay with the thread that runs the sync. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&q->th, NULL, mq_main, q);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		pthread_cond_destroy(&q->cond);
		pthread_mutex_destroy(&q->mu);
		free(q);
		return r;
	}
	q->started = 1;
	*ret = q;
	return 0;
}

size_t hyd_sync__mq_pop(struct hyd_sync_mq *q, uint64_t *v, size_t cap,
			int wait)
{
	size_t k;

	pthread_mutex_lock(&q->mu);
	while (wait && q->head == q->n && !q->done)
		pthread_cond_wait(&q->cond, &q->mu);
	k = q->n - q->head < cap ? q->n - q->head : cap;
	if (k) {
		memcpy(v, q->v + q->head, k * sizeof(*v));
		q->head += k;
	}
	pthread_mutex_unlock(&q->mu);
	return k;
}

uint64_t hyd_sync__mq_answered(struct hyd_sync_mq *q)
{
	return q ? __atomic_load_n(&q->answered, __ATOMIC_RELAXED) : 0;
}

uint64_t hyd_sync__mq_changed(struct hyd_sync_mq *q)
{
	return q ? __atomic_load_n(&q->changed, __ATOMIC_RELAXED) : 0;
}

uint64_t hyd_sync__mq_failed(struct hyd_sync_mq *q)
{
	return q ? __atomic_load_n(&q->failed, __ATOMIC_RELAXED) : 0;
}

void hyd_sync__mq_stop(struct hyd_sync_mq *q)
{
	if (q)
		__atomic_store_n(&q->stop, 1, __ATOMIC_RELAXED);
}

void hyd_sync__mq_free(struct hyd_sync_mq *q)
{
	if (!q)
		return;
	hyd_sync__mq_stop(q);
	if (q->started)
		pthread_join(q->th, NULL);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->mu);
	free(q->v);
	free(q);
}
