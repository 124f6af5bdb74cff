/*
 * hydrator/sync/hyd_sync_handoff.c — verified chunks handed from
 * `ferry sync`'s fetching pass to its writer in memory.
 *
 * Without it every chunk was decoded and hashed twice: once as it came
 * off the wire (verify, then store) and again when the writer read it
 * back from the store to write the file. The fetching pass now gives the
 * writer the flight it just reaped (the verified raw bytes the fetcher
 * kept); the writer takes it by id, writes straight from its bytes and
 * lets go once it moves on to another chunk. A chunk the
 * hand-off no longer holds is read from the store as before, so the
 * hand-off is only ever a shortcut: the store stays the record.
 *
 * Bounded by entries and by raw bytes: a full hand-off drops its oldest
 * entries. The fetching side never waits for the writer (measured: a
 * fetcher that waited for room while the writer was busy left a 1 Gbit/s
 * link idle whenever the writer fell behind, and the sync took 0.2-0.7 s
 * longer); both go in inode order, so the writer mostly takes what was
 * put in before it is dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch_internal.h"
#include "hydrator/sync/hyd_sync_internal.h"

#define SLOTS 8192u    /* entries; a power of two */
#define BUCKETS 16384u /* hash heads; a power of two */
#define NONE UINT32_MAX

struct hyd_sync_handoff {
	pthread_mutex_t lock;
	pthread_cond_t added;
	hyd_fetch *fetch;
	uint64_t cap_bytes, bytes;
	uint64_t head, tail; /* slots [head, tail) in put order; holes NULL */
	struct hyd_flight *slot[SLOTS];
	uint32_t next[SLOTS]; /* hash chain, by slot */
	uint32_t bucket[BUCKETS];
	int closed;
	struct hyd_sync_handoff_stats st;
};

static uint32_t bucket_of(const chunk_id *id)
{
	uint32_t v;

	memcpy(&v, id->b, sizeof(v)); /* SHA-256: any 4 bytes are uniform */
	return v & (BUCKETS - 1);
}

int hyd_sync__handoff_new(hyd_fetch *f, uint64_t cap_bytes,
			  struct hyd_sync_handoff **ret)
{
	struct hyd_sync_handoff *h = calloc(1, sizeof(*h));

	*ret = NULL;
	if (!h)
		return -ENOMEM;
	if (pthread_mutex_init(&h->lock, NULL)) {
		free(h);
		return -ENOMEM;
	}
	if (base_cond_init(&h->added) < 0) {
		pthread_mutex_destroy(&h->lock);
		free(h);
		return -ENOMEM;
	}
	h->fetch = f;
	h->cap_bytes = cap_bytes;
	memset(h->bucket, 0xff, sizeof(h->bucket));
	*ret = h;
	return 0;
}

/* Unlink slot i from its hash chain and empty it; its flight is the
 * caller's. Called with the lock held. */
static struct hyd_flight *unlink_locked(struct hyd_sync_handoff *h, uint32_t i)
{
	struct hyd_flight *fl = h->slot[i];
	uint32_t *p = &h->bucket[bucket_of(&fl->id)];

	while (*p != i)
		p = &h->next[*p];
	*p = h->next[i];
	h->slot[i] = NULL;
	h->bytes -= fl->raw_len;
	/* The head moves past the holes takes leave. */
	while (h->head < h->tail && !h->slot[h->head & (SLOTS - 1)])
		h->head++;
	return fl;
}

static int full_locked(const struct hyd_sync_handoff *h, uint32_t len)
{
	return h->tail - h->head == SLOTS ||
	       (h->bytes && h->bytes + len > h->cap_bytes);
}

/* Release flights outside the lock (the fetcher's table lock is taken). */
static void release_all(struct hyd_sync_handoff *h, struct hyd_flight **v,
			size_t n)
{
	for (size_t k = 0; k < n; k++)
		hyd_fetch_release(h->fetch, v[k]);
}

void hyd_sync__handoff_put(struct hyd_sync_handoff *h, struct hyd_flight *fl)
{
	struct hyd_flight *dropped[16];
	size_t nd = 0;
	uint32_t i;

	pthread_mutex_lock(&h->lock);
	/* Full: the oldest go (the writer reads them from the store if it
	 * still needs them). */
	while (!h->closed && full_locked(h, fl->raw_len)) {
		if (nd == 16) {
			pthread_mutex_unlock(&h->lock);
			release_all(h, dropped, nd);
			nd = 0;
			pthread_mutex_lock(&h->lock);
			continue;
		}
		dropped[nd++] =
		    unlink_locked(h, (uint32_t)(h->head & (SLOTS - 1)));
		h->st.dropped++;
	}
	if (h->closed) {
		pthread_mutex_unlock(&h->lock);
		release_all(h, dropped, nd);
		hyd_fetch_release(h->fetch, fl);
		return;
	}
	i = (uint32_t)(h->tail++ & (SLOTS - 1));
	h->slot[i] = fl;
	h->next[i] = h->bucket[bucket_of(&fl->id)];
	h->bucket[bucket_of(&fl->id)] = i;
	h->bytes += fl->raw_len;
	h->st.put++;
	pthread_cond_broadcast(&h->added);
	pthread_mutex_unlock(&h->lock);
	release_all(h, dropped, nd);
}

struct hyd_flight *hyd_sync__handoff_take(struct hyd_sync_handoff *h,
					  const chunk_id *id)
{
	struct hyd_flight *fl = NULL;
	uint32_t i;

	pthread_mutex_lock(&h->lock);
	for (i = h->bucket[bucket_of(id)]; i != NONE; i = h->next[i])
		if (!memcmp(&h->slot[i]->id, id, sizeof(*id)))
			break;
	if (i != NONE) {
		fl = unlink_locked(h, i);
		h->st.taken++;
	}
	pthread_mutex_unlock(&h->lock);
	return fl;
}

void hyd_sync__handoff_release(struct hyd_sync_handoff *h,
			       struct hyd_flight *fl)
{
	hyd_fetch_release(h->fetch, fl);
}

void hyd_sync__handoff_wait(struct hyd_sync_handoff *h, long ns)
{
	uint64_t t = base_now_ns() + (uint64_t)ns;

	pthread_mutex_lock(&h->lock);
	if (!h->closed)
		base_cond_wait_until(&h->added, &h->lock, t);
	pthread_mutex_unlock(&h->lock);
}

void hyd_sync__handoff_close(struct hyd_sync_handoff *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->closed = 1;
	pthread_cond_broadcast(&h->added);
	pthread_mutex_unlock(&h->lock);
}

void hyd_sync__handoff_stats(struct hyd_sync_handoff *h,
			     struct hyd_sync_handoff_stats *ret)
{
	pthread_mutex_lock(&h->lock);
	*ret = h->st;
	pthread_mutex_unlock(&h->lock);
}

void hyd_sync__handoff_free(struct hyd_sync_handoff *h)
{
	if (!h)
		return;
	while (h->head < h->tail) {
		uint32_t i = (uint32_t)(h->head & (SLOTS - 1));

		if (h->slot[i])
			hyd_fetch_release(h->fetch, unlink_locked(h, i));
		else
			h->head++;
	}
	pthread_cond_destroy(&h->added);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
