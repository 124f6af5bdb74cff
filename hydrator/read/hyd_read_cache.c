/*
 * hydrator/read/hyd_read_cache.c — a small LRU of decoded, verified chunks.
 *
 * The kernel reads in 128 KiB requests, several at once, while chunks
 * straddle request boundaries, so without this a sequential read would
 * pread, decode and SHA-256 many chunks twice. It also holds what the read
 * path decodes ahead of a sequential reader. A load runs once per id: a
 * slot is LOADING while one thread fills it outside the lock, and anyone
 * else wanting that id waits for the outcome instead of decoding it too.
 * Readers pin a slot (a reference) and use its bytes outside the lock, so
 * readers on both cores never queue behind each other; a pinned slot is
 * never evicted or reused. A linear
 * scan over a few dozen slots (on an 8-byte key) costs less than the
 * hashing it saves; the page cache does the long-term caching.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/read/hyd_read.h"

enum slot_state {
	SLOT_EMPTY = 0,
	SLOT_LOADING, /* one loader fills raw; waiters sleep on c->loaded */
	SLOT_READY,   /* raw[0, len) is verified and immutable */
};

struct cache_slot {
	chunk_id id;
	uint64_t key; /* the id's first 8 bytes: a cheap first compare */
	uint8_t *raw;
	size_t len, cap;
	enum slot_state state;
	unsigned refs; /* copies in progress + the loader; never evicted */
	int ahead;     /* loaded by a prefetch and not read since */
	uint64_t used; /* LRU stamp */
};

struct hyd_read_cache {
	pthread_mutex_t lock;
	pthread_cond_t loaded; /* broadcast when any load ends */
	size_t n;
	size_t bytes; /* sum of cap over all slots */
	uint64_t clock;
	struct cache_slot *slots;
};

int hyd_read_cache_new(size_t slots, hyd_read_cache **ret)
{
	hyd_read_cache *c;

	*ret = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->slots = calloc(slots ? slots : 1, sizeof(*c->slots));
	if (!c->slots) {
		free(c);
		return -ENOMEM;
	}
	c->n = slots;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->loaded, NULL);
	*ret = c;
	return 0;
}

void hyd_read_cache_free(hyd_read_cache *c)
{
	size_t i;

	if (!c)
		return;
	for (i = 0; i < c->n; i++)
		free(c->slots[i].raw);
	pthread_cond_destroy(&c->loaded);
	pthread_mutex_destroy(&c->lock);
	free(c->slots);
	free(c);
}

static uint64_t id_key(const chunk_id *id)
{
	uint64_t k;

	memcpy(&k, id->b, sizeof(k));
	return k;
}

static struct cache_slot *cache_find(hyd_read_cache *c, const chunk_id *id,
				     uint64_t key)
{
	size_t i;

	for (i = 0; i < c->n; i++) {
		struct cache_slot *s = &c->slots[i];

		if (s->state != SLOT_EMPTY && s->key == key &&
		    !memcmp(s->id.b, id->b, CHUNK_ID_LEN))
			return s;
	}
	return NULL;
}

/* Take a slot for id with room for len bytes, LOADING with one reference
 * (the caller's), or NULL when every slot is in use or memory is short.
 * Evicts the least recently used unreferenced slot, and more of them while
 * the cache holds more than HYD_READ_CACHE_BYTES. A prefetch (ahead) never
 * evicts another prefetch's chunk nobody has read yet: with more streams
 * than the cache holds, decode-ahead stops instead of throwing away its
 * own work. Under the lock. */
static struct cache_slot *slot_claim(hyd_read_cache *c, const chunk_id *id,
				     uint64_t key, size_t len, int ahead)
{
	struct cache_slot *s, *victim = NULL;
	size_t i;

	for (i = 0; i < c->n; i++) {
		s = &c->slots[i];
		if (s->refs || s->state == SLOT_LOADING || (ahead && s->ahead))
			continue;
		if (!victim || s->state == SLOT_EMPTY ||
		    (victim->state != SLOT_EMPTY && s->used < victim->used))
			victim = s;
		if (s->state == SLOT_EMPTY && s->cap >= len)
			break;
	}
	if (!victim)
		return NULL;
	victim->state = SLOT_EMPTY;
	if (victim->cap < len) {
		/* realloc would copy bytes nobody wants any more. */
		c->bytes -= victim->cap;
		free(victim->raw);
		victim->cap = 0;
		victim->raw = malloc(len);
		if (!victim->raw)
			return NULL;
		victim->cap = len;
		c->bytes += len;
	}
	/* Over budget: drop the buffers of other idle slots, oldest first. */
	while (c->bytes > HYD_READ_CACHE_BYTES) {
		struct cache_slot *old = NULL;

		for (i = 0; i < c->n; i++) {
			s = &c->slots[i];
			if (s == victim || s->refs || !s->cap ||
			    s->state == SLOT_LOADING || (ahead && s->ahead))
				continue;
			if (!old || s->used < old->used)
				old = s;
		}
		if (!old)
			break;
		c->bytes -= old->cap;
		free(old->raw);
		memset(old, 0, sizeof(*old));
	}
	victim->id = *id;
	victim->key = key;
	victim->len = 0;
	victim->state = SLOT_LOADING;
	victim->ahead = ahead;
	victim->refs = 1;
	victim->used = ++c->clock;
	return victim;
}

/* End a load: READY on success, else the slot is emptied. Wakes every
 * waiter. Under the lock; drops the loader's reference. */
static void slot_loaded(hyd_read_cache *c, struct cache_slot *s, int r,
			size_t len)
{
	s->refs--;
	if (r == 0) {
		s->len = len;
		s->state = SLOT_READY;
	} else {
		s->state = SLOT_EMPTY;
		s->ahead = 0;
	}
	pthread_cond_broadcast(&c->loaded);
}

/* Load a claimed slot and end its load. The slot is ours alone while
 * LOADING, so it is filled without the lock. pin: keep a reference past
 * the loader's on success. Returns 0 or load's error (-ERANGE for a chunk
 * of another length). */
static int slot_fill(hyd_read_cache *c, struct cache_slot *s,
		     const chunk_id *id, uint32_t raw_len,
		     hyd_read_cache_load_fn load, void *arg, int pin)
{
	size_t got = 0;
	int r;

	r = load(arg, id, s->raw, raw_len, &got);
	if (r == 0 && got != raw_len)
		r = -ERANGE;
	pthread_mutex_lock(&c->lock);
	if (r == 0 && pin)
		s->refs++;
	slot_loaded(c, s, r, got);
	pthread_mutex_unlock(&c->lock);
	return r;
}

int hyd_read_cache_pin(hyd_read_cache *c, const chunk_id *id, uint32_t raw_len,
		       hyd_read_cache_load_fn load, void *arg,
		       const uint8_t **ret_raw, void **ret_pin)
{
	struct cache_slot *s;
	uint64_t key = id_key(id);
	int r;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		s = cache_find(c, id, key);
		if (!s || s->state != SLOT_LOADING)
			break;
		/* Someone is decoding it right now: share their work. */
		pthread_cond_wait(&c->loaded, &c->lock);
	}
	if (s) {
		/* A length other than the manifest's is that row's problem;
		 * the cached bytes are still right for their id. */
		r = s->len == raw_len ? 0 : -ERANGE;
		if (r == 0) {
			s->refs++;
			s->used = ++c->clock;
			s->ahead = 0;
		}
		pthread_mutex_unlock(&c->lock);
		goto out;
	}
	s = slot_claim(c, id, key, raw_len, 0);
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return -EBUSY;
	r = slot_fill(c, s, id, raw_len, load, arg, 1);
out:
	if (r == 0) {
		*ret_raw = s->raw;
		*ret_pin = s;
	}
	return r;
}

void hyd_read_cache_unpin(hyd_read_cache *c, void *pin)
{
	struct cache_slot *s = pin;

	pthread_mutex_lock(&c->lock);
	s->refs--;
	pthread_mutex_unlock(&c->lock);
}

int hyd_read_cache_prefetch(hyd_read_cache *c, const chunk_id *id,
			    uint32_t raw_len, hyd_read_cache_load_fn load,
			    void *arg)
{
	struct cache_slot *s;
	uint64_t key = id_key(id);
	int r;

	pthread_mutex_lock(&c->lock);
	s = cache_find(c, id, key);
	if (s) {
		/* Cached or being loaded already. */
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	s = slot_claim(c, id, key, raw_len, 1);
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return -EBUSY;
	r = slot_fill(c, s, id, raw_len, load, arg, 0);
	return r < 0 ? r : 1;
}

void hyd_read_cache_put(hyd_read_cache *c, const chunk_id *id, const void *raw,
			size_t len)
{
	struct cache_slot *s;
	uint64_t key = id_key(id);

	pthread_mutex_lock(&c->lock);
	if (!c->n || cache_find(c, id, key) || len > UINT32_MAX) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	s = slot_claim(c, id, key, len, 0);
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return; /* not caching is always correct */
	memcpy(s->raw, raw, len);
	pthread_mutex_lock(&c->lock);
	slot_loaded(c, s, 0, len);
	pthread_mutex_unlock(&c->lock);
}
