/*
 * hydrator/hyd_read_cache.c — a small LRU of decoded, verified chunks.
 *
 * The kernel reads in 128 KiB requests while chunks reach 256 KiB or more,
 * so without this a sequential read would pread, decode and SHA-256 every
 * chunk twice. A linear scan over a few dozen slots costs less than the
 * hashing it saves; the page cache does the long-term caching.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/hyd_read_internal.h"

struct cache_slot {
	chunk_id id;
	uint8_t *raw;
	size_t len, cap;
	uint64_t used; /* LRU stamp; 0 = empty */
};

struct hyd_read_cache {
	pthread_mutex_t lock;
	size_t n;
	uint64_t clock;
	struct cache_slot *slots;
};

int hyd_read_cache_new(size_t slots, hyd_read_cache **ret)
{
	hyd_read_cache *c;

	*ret = NULL;
	c = calloc(1, sizeof(*c));
	if(!c)
		return -ENOMEM;
	c->slots = calloc(slots ? slots : 1, sizeof(*c->slots));
	if(!c->slots) {
		free(c);
		return -ENOMEM;
	}
	c->n = slots;
	pthread_mutex_init(&c->lock, NULL);
	*ret = c;
	return 0;
}

void hyd_read_cache_free(hyd_read_cache *c)
{
	size_t i;

	if(!c)
		return;
	for(i = 0; i < c->n; i++)
		free(c->slots[i].raw);
	pthread_mutex_destroy(&c->lock);
	free(c->slots);
	free(c);
}

static struct cache_slot *cache_find(hyd_read_cache *c, const chunk_id *id)
{
	size_t i;

	for(i = 0; i < c->n; i++)
		if(c->slots[i].used &&
		   !memcmp(c->slots[i].id.b, id->b, CHUNK_ID_LEN))
			return &c->slots[i];
	return NULL;
}

int hyd_read_cache_copy(hyd_read_cache *c, const chunk_id *id, size_t off,
			size_t len, void *out)
{
	struct cache_slot *s;
	int hit = 0;

	pthread_mutex_lock(&c->lock);
	s = cache_find(c, id);
	if(s && off <= s->len && len <= s->len - off) {
		memcpy(out, s->raw + off, len);
		s->used = ++c->clock;
		hit = 1;
	}
	pthread_mutex_unlock(&c->lock);
	return hit;
}

void hyd_read_cache_put(hyd_read_cache *c, const chunk_id *id,
			const void *raw, size_t len)
{
	struct cache_slot *s, *victim = NULL;
	size_t i;

	pthread_mutex_lock(&c->lock);
	if(!c->n || cache_find(c, id))
		goto out;
	for(i = 0; i < c->n; i++) {
		s = &c->slots[i];
		if(!victim || s->used < victim->used)
			victim = s;
		if(!s->used)
			break;
	}
	if(victim->cap < len) {
		uint8_t *p = realloc(victim->raw, len);

		if(!p) {
			/* Not caching is always correct. */
			free(victim->raw);
			memset(victim, 0, sizeof(*victim));
			goto out;
		}
		victim->raw = p;
		victim->cap = len;
	}
	memcpy(victim->raw, raw, len);
	victim->id = *id;
	victim->len = len;
	victim->used = ++c->clock;
out:
	pthread_mutex_unlock(&c->lock);
}
