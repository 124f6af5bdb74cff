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
 * Bounded by entries and by raw bytes. Both sides go in the same order
 * (inode, then offset): each entry carries the position of the chunk's
 * first use, and each take tells the hand-off where the writer is. An
 * entry behind the writer will never be taken (the writer read it from
 * the store: it got there first) and goes at once. When the hand-off is
 * full of entries the writer has yet to reach, the fetching pass waits
 * for it to take one, up to wait_ns (50 ms): on a link faster than the
 * writer (loopback), fetching more would only drop what the writer then
 * decodes again from the store; measured on loopback, the writer took
 * 9,600 of 36,809 chunks from memory without the wait. A wait that runs
 * out means the writer is busy with something else (directories, a
 * manifest, a slow disk) or does not follow this order: the oldest entry
 * goes then, and no put waits again until the writer next takes an entry
 * (a writer that has stopped taking costs one wait, not one per chunk).
 * The hand-off is only ever a shortcut; the store stays the record.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define SLOTS 8192u    /* entries; a power of two */
#define BUCKETS 16384u /* hash heads; a power of two */
#define NONE UINT32_MAX
#define RELEASE_BATCH 16u

struct pos {
	uint64_t ino, off; /* ino 0: no place in the order */
};

struct hyd_sync_handoff {
	pthread_mutex_t lock;
	pthread_cond_t added; /* a put (the writer waits for one) */
	pthread_cond_t room;  /* a take or a stale entry gone */
	hyd_fetch *fetch;
	uint64_t cap_bytes, bytes;
	uint64_t wait_ns;    /* a full put waits this long for a take */
	uint64_t head, tail; /* slots [head, tail) in put order; holes NULL */
	struct hyd_flight *slot[SLOTS];
	struct pos at[SLOTS]; /* each slot's first use */
	uint32_t next[SLOTS]; /* hash chain, by slot */
	uint32_t bucket[BUCKETS];
	struct pos writer; /* where the writer's last take was */
	int idle; /* a put's wait ran out; no waiting until the next hit */
	int closed;
	struct hyd_sync_handoff_stats st;
};

static uint32_t bucket_of(const chunk_id *id)
{
	uint32_t v;

	memcpy(&v, id->b, sizeof(v)); /* SHA-256: any 4 bytes are uniform */
	return v & (BUCKETS - 1);
}

static int pos_before(const struct pos *a, const struct pos *b)
{
	return a->ino < b->ino || (a->ino == b->ino && a->off < b->off);
}

int hyd_sync__handoff_new(hyd_fetch *f, uint64_t cap_bytes, uint64_t wait_ns,
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
	if (base_cond_init(&h->room) < 0) {
		pthread_cond_destroy(&h->added);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return -ENOMEM;
	}
	h->fetch = f;
	h->cap_bytes = cap_bytes;
	h->wait_ns = wait_ns;
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

/* Flights to release once the lock is let go (the fetcher's table lock
 * is taken then). */
struct gone {
	struct hyd_flight *v[RELEASE_BATCH];
	size_t n;
};

static void release_all(struct hyd_sync_handoff *h, struct gone *g)
{
	for (size_t k = 0; k < g->n; k++)
		hyd_fetch_release(h->fetch, g->v[k]);
	g->n = 0;
}

/* Entries at the head the writer has gone past, into g while it has
 * room. Lock held. 1 when any went. */
static int drop_stale_locked(struct hyd_sync_handoff *h, struct gone *g)
{
	int any = 0;

	while (h->head < h->tail && g->n < RELEASE_BATCH) {
		uint32_t i = (uint32_t)(h->head & (SLOTS - 1));

		if (!h->at[i].ino || !pos_before(&h->at[i], &h->writer))
			break;
		g->v[g->n++] = unlink_locked(h, i);
		h->st.stale++;
		any = 1;
	}
	return any;
}

/* Room for len (lock held; let go of while releasing a full g): stale
 * entries go first; then, if may_wait and the writer follows, one wait
 * of up to wait_ns for it to take one; then the oldest go (the writer
 * reads them from the store if it still needs them). */
static void make_room_locked(struct hyd_sync_handoff *h, struct gone *g,
			     uint32_t len, int may_wait)
{
	uint64_t t = 0;

	while (!h->closed && full_locked(h, len)) {
		if (g->n == RELEASE_BATCH) {
			pthread_mutex_unlock(&h->lock);
			release_all(h, g);
			pthread_mutex_lock(&h->lock);
			continue;
		}
		if (drop_stale_locked(h, g))
			continue;
		if (may_wait && !h->idle && h->wait_ns) {
			if (!t) {
				t = base_now_ns() + h->wait_ns;
				h->st.waited++;
			}
			if (base_cond_wait_until(&h->room, &h->lock, t) !=
			    ETIMEDOUT)
				continue;
			h->idle = 1;
			h->st.timeouts++;
			may_wait = 0;
			continue;
		}
		g->v[g->n++] =
		    unlink_locked(h, (uint32_t)(h->head & (SLOTS - 1)));
		h->st.dropped++;
	}
}

void hyd_sync__handoff_put(struct hyd_sync_handoff *h, struct hyd_flight *fl,
			   uint64_t ino, uint64_t off)
{
	struct gone g = {.n = 0};
	uint32_t i;

	pthread_mutex_lock(&h->lock);
	/* An entry with no place in the order (ino 0) never waits. */
	make_room_locked(h, &g, fl->raw_len, ino != 0);
	if (h->closed) {
		pthread_mutex_unlock(&h->lock);
		release_all(h, &g);
		hyd_fetch_release(h->fetch, fl);
		return;
	}
	i = (uint32_t)(h->tail++ & (SLOTS - 1));
	h->slot[i] = fl;
	h->at[i] = (struct pos){ino, off};
	h->next[i] = h->bucket[bucket_of(&fl->id)];
	h->bucket[bucket_of(&fl->id)] = i;
	h->bytes += fl->raw_len;
	h->st.put++;
	pthread_cond_broadcast(&h->added);
	pthread_mutex_unlock(&h->lock);
	release_all(h, &g);
}

struct hyd_flight *hyd_sync__handoff_take(struct hyd_sync_handoff *h,
					  const chunk_id *id, uint64_t ino,
					  uint64_t off)
{
	struct hyd_flight *fl = NULL;
	struct gone g = {.n = 0};
	uint32_t i;

	pthread_mutex_lock(&h->lock);
	h->writer = (struct pos){ino, off};
	for (i = h->bucket[bucket_of(id)]; i != NONE; i = h->next[i])
		if (!memcmp(&h->slot[i]->id, id, sizeof(*id)))
			break;
	if (i != NONE) {
		fl = unlink_locked(h, i);
		h->st.taken++;
		h->idle = 0; /* it follows: puts may wait for it again */
	}
	if (drop_stale_locked(h, &g) || fl)
		pthread_cond_signal(&h->room);
	pthread_mutex_unlock(&h->lock);
	release_all(h, &g);
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
	pthread_cond_broadcast(&h->room);
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
	pthread_cond_destroy(&h->room);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
