/*
 * hydrator/store/hyd_store_place.c — the store's door to a placer: a
 * mount's --into writes chunks as plain bytes into the files of its
 * directory (hydrator/sync/hyd_place.c) instead of into volumes, and the
 * store answers for them through it. The store knows nothing of where
 * they go; it only asks.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "hydrator/store/hyd_store_priv.h"

void hyd_store_set_placer(hyd_store *s, const struct hyd_store_placer *p)
{
	pthread_rwlock_wrlock(&s->place_lk);
	if (p)
		s->placer = *p;
	else
		memset(&s->placer, 0, sizeof(s->placer));
	s->has_placer = p != NULL;
	pthread_rwlock_unlock(&s->place_lk);
}

int hyd_store__placed_has(hyd_store *s, const chunk_id *id)
{
	int r = 0;

	pthread_rwlock_rdlock(&s->place_lk);
	if (s->has_placer)
		r = s->placer.has(s->placer.arg, id);
	pthread_rwlock_unlock(&s->place_lk);
	return r;
}

int hyd_store__placed_get(hyd_store *s, const chunk_id *id, void *out,
			  size_t cap, size_t *ret_len)
{
	int r = -ENOENT;

	pthread_rwlock_rdlock(&s->place_lk);
	if (s->has_placer)
		r = s->placer.get(s->placer.arg, id, out, cap, ret_len);
	pthread_rwlock_unlock(&s->place_lk);
	return r;
}

int hyd_store_landed_fd(hyd_store *s, uint64_t ino, uint64_t size, int *ret_fd,
			struct stat *ret_st)
{
	int r = -ENOENT;

	*ret_fd = -1;
	if (!s)
		return r;
	pthread_rwlock_rdlock(&s->place_lk);
	if (s->has_placer && s->placer.landed)
		r = s->placer.landed(s->placer.arg, ino, size, ret_fd, ret_st);
	pthread_rwlock_unlock(&s->place_lk);
	return r;
}

/* Offer raw to the placer (when one is set and the store lacks id): the
 * placer's answer (1: cb follows; 2: placed, no cb), or 0 when the store
 * is to keep the frame. */
static int offer(hyd_store *s, const chunk_id *id, const void *raw,
		 size_t raw_len, hyd_store_put_cb cb, void *arg)
{
	int r = 0;

	pthread_rwlock_rdlock(&s->place_lk);
	if (s->has_placer) {
		pthread_mutex_lock(&s->mu);
		r = hyd_store__find_locked(s, id, NULL);
		pthread_mutex_unlock(&s->mu);
		if (r == 0)
			r = s->placer.place(s->placer.arg, id, raw, raw_len, cb,
					    arg);
		else if (r > 0)
			r = 2; /* in the store already */
	}
	pthread_rwlock_unlock(&s->place_lk);
	return r == 1 || r == 2 ? r : 0;
}

struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, rc;
};

static void wake(void *arg, int rc)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->mu);
	w->done = 1;
	w->rc = rc;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

int hyd_store_put_raw(hyd_store *s, const chunk_id *id, const void *frame,
		      size_t frame_len, const void *raw, size_t raw_len)
{
	struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			   0, 0};
	int r;

	if (!s || !id || (!raw && raw_len))
		return -EINVAL;
	r = offer(s, id, raw, raw_len, wake, &w);
	if (r == 2)
		return 1;
	if (r == 0) /* not wanted, or the placement failed */
		return hyd_store_put(s, id, frame, frame_len);
	pthread_mutex_lock(&w.mu);
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	return w.rc;
}

int hyd_store_put_raw_async(hyd_store *s, const chunk_id *id, const void *frame,
			    size_t frame_len, const void *raw, size_t raw_len,
			    hyd_store_put_cb cb, void *arg)
{
	int r;

	if (!s || !id || !cb || (!raw && raw_len))
		return -EINVAL;
	r = offer(s, id, raw, raw_len, cb, arg);
	if (r)
		return r == 1 ? 0 : 1;
	/* not wanted, or the placement failed: the store keeps it */
	return hyd_store_put_async(s, id, frame, frame_len, cb, arg);
}
