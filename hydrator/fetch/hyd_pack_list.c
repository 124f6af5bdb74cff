/*
 * hydrator/fetch/hyd_pack_list.c — pack objects on the hydrator's side: the
 * URL and whole chunk list of one pack (catalog.h, cat_pack), worked out
 * from the mount's catalog and its manifests exactly as the replicator
 * works them out, so the answer parses entry by entry against the list.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/fetch/hyd_fetch.h"

void hyd_pack_obj_ref(struct hyd_pack_obj *o)
{
	__atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
}

void hyd_pack_obj_unref(struct hyd_pack_obj *o)
{
	if (!o || __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL))
		return;
	free(o->url);
	free(o->ids);
	free(o->lens);
	free(o);
}

/* The reader's rows, but a file whose source changed before it was
 * hashed (-ESTALE: no manifest in this generation) has none, as the
 * replicator lists it. */
static int rows(void *ctx, uint64_t ino, uint64_t size, uint64_t lo,
		uint64_t hi, struct cat_pack_list *out)
{
	int r = cat_pack_rows_reader(ctx, ino, size, lo, hi, out);

	return r == -ESTALE ? 0 : r;
}

int hyd_pack_obj_make(const char *base_url, uint64_t gen, cat_reader *cat,
		      const struct cat_pack *p, uint64_t part,
		      struct hyd_pack_obj **ret)
{
	struct cat_pack_list l = {0};
	struct hyd_pack_obj *o;
	size_t ulen;
	int r;

	*ret = NULL;
	r = cat_pack_ids(cat, p, part, rows, cat, &l);
	if (r < 0) {
		cat_pack_list_fini(&l);
		return r;
	}
	o = calloc(1, sizeof(*o));
	ulen = strlen(base_url) + 80;
	if (o)
		o->url = malloc(ulen);
	if (!o || !o->url) {
		cat_pack_list_fini(&l);
		free(o);
		return -ENOMEM;
	}
	snprintf(o->url, ulen, "%s/pack/%" PRIu64 "/%" PRIu64 "/%" PRIu64,
		 base_url, gen, p->first, part);
	o->refs = 1;
	o->n = l.n;
	o->ids = l.ids;
	o->lens = l.lens;
	*ret = o;
	return 0;
}
