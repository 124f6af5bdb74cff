/*
 * hydrator/s3/hyd_s3_list_cache.c — the last few listings, kept so that a
 * client paging through a large directory (ListObjectsV2, 1,000 keys a
 * page) reads and sorts its catalog rows once instead of once a page.
 *
 * A generation never changes, so a listing of (generation, prefix,
 * slash_delim) is valid for as long as it is kept; after a switch the new
 * generation's listings simply miss. Two requests that miss at once may
 * both make the listing; the one kept is the last put, which is harmless.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/s3/hyd_s3.h"

void hyd_s3_list_cache_init(struct hyd_s3_list_cache *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
}

static void listing_free(struct hyd_s3_listing *l)
{
	hyd_s3_ents_fini(&l->e);
	free(l->prefix);
	free(l);
}

void hyd_s3_list_cache_fini(struct hyd_s3_list_cache *c)
{
	size_t i;

	for (i = 0; i < HYD_S3_LISTINGS; i++)
		if (c->slot[i])
			listing_free(c->slot[i]);
	pthread_mutex_destroy(&c->mu);
}

void hyd_s3_listing_unref(struct hyd_s3_list_cache *c, struct hyd_s3_listing *l)
{
	int last;

	if (!l)
		return;
	pthread_mutex_lock(&c->mu);
	last = --l->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (last)
		listing_free(l);
}

/* Keep l in the least recently used slot (under c->mu). */
static void cache_put(struct hyd_s3_list_cache *c, struct hyd_s3_listing *l)
{
	struct hyd_s3_listing *old;
	size_t i, v = 0;

	for (i = 0; i < HYD_S3_LISTINGS; i++) {
		if (!c->slot[i]) {
			v = i;
			break;
		}
		if (c->slot[i]->used < c->slot[v]->used)
			v = i;
	}
	old = c->slot[v];
	l->refs++;
	c->slot[v] = l;
	if (old && --old->refs == 0)
		listing_free(old); /* nobody reads it: free under the lock */
}

int hyd_s3_list_get(struct hyd_s3_list_cache *c, const struct hyd_gen *g,
		    const char *prefix, int slash_delim,
		    struct hyd_s3_listing **ret)
{
	struct hyd_s3_listing *l;
	size_t i;
	int r;

	*ret = NULL;
	pthread_mutex_lock(&c->mu);
	for (i = 0; i < HYD_S3_LISTINGS; i++) {
		l = c->slot[i];
		if (l && l->generation == g->generation &&
		    l->slash_delim == slash_delim &&
		    strcmp(l->prefix, prefix) == 0) {
			l->refs++;
			l->used = ++c->clock;
			pthread_mutex_unlock(&c->mu);
			*ret = l;
			return 0;
		}
	}
	pthread_mutex_unlock(&c->mu);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->prefix = strdup(prefix);
	if (!l->prefix) {
		free(l);
		return -ENOMEM;
	}
	l->generation = g->generation;
	l->slash_delim = slash_delim;
	l->refs = 1;
	r = hyd_s3_list_collect(g->cat, prefix, slash_delim, &l->e);
	if (r < 0) {
		listing_free(l);
		return r;
	}
	hyd_s3_ents_sort(&l->e);
	if (l->e.n <= HYD_S3_LISTING_KEEP_MAX) {
		pthread_mutex_lock(&c->mu);
		l->used = ++c->clock;
		cache_put(c, l);
		pthread_mutex_unlock(&c->mu);
	}
	*ret = l;
	return 0;
}
