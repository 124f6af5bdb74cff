/*
 * hydrator/s3/hyd_s3_list.c — ListObjects(V2): the candidate keys of a
 * prefix, gathered from the catalog, and the paging over them.
 *
 * A catalog lists a directory in its own order, S3 in byte order of the
 * whole key, so a listing gathers the candidates of the deepest directory
 * the prefix names (its entries alone with a '/' delimiter, else its whole
 * subtree), sorts them, and pages. Paging is stateless: the continuation
 * token is the last key or CommonPrefix returned, so a page is found
 * again after a restart or a generation switch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/s3/hyd_s3.h"

#define LIST_DEPTH_MAX 256

void hyd_s3_ents_fini(struct hyd_s3_ents *e)
{
	size_t i;

	for (i = 0; i < e->n; i++)
		free(e->v[i].key);
	free(e->v);
	memset(e, 0, sizeof(*e));
}

int hyd_s3_ents_add(struct hyd_s3_ents *e, const char *key, size_t klen,
		    const struct cat_inode *in, int dir)
{
	struct hyd_s3_ent *x;

	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 64;
		struct hyd_s3_ent *v = realloc(e->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		e->v = v;
		e->cap = cap;
	}
	x = &e->v[e->n];
	x->key = malloc(klen + 1);
	if (!x->key)
		return -ENOMEM;
	memcpy(x->key, key, klen);
	x->key[klen] = '\0';
	x->size = in ? in->size : 0;
	x->mtime_ns = in ? in->mtime_ns : 0;
	x->ino = in ? in->ino : 0;
	x->dir = dir;
	e->n++;
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	const struct hyd_s3_ent *x = a, *y = b;

	return strcmp(x->key, y->key);
}

void hyd_s3_ents_sort(struct hyd_s3_ents *e)
{
	if (e->n > 1)
		qsort(e->v, e->n, sizeof(e->v[0]), ent_cmp);
}

struct walk {
	cat_reader *cat;
	struct hyd_s3_ents *e;
	const char *prefix; /* whole keys must start with it */
	size_t plen;
	int slash_delim;
	int depth;
	char path[4096]; /* the directory's key prefix ("" or "a/b/") */
	size_t len;
};

/* One directory's entries, gathered first: the reader's callbacks must
 * not call back into it, so the walk goes down after cat_readdir. */
struct dir_ent {
	char *name;
	size_t nlen;
	struct cat_inode in;
};
struct dir_list {
	struct dir_ent *v;
	size_t n, cap;
	int err;
};

static int gather_cb(void *ctx, const void *name, size_t nlen,
		     const struct cat_inode *in, uint64_t pos)
{
	struct dir_list *l = ctx;
	struct dir_ent *x;

	(void)pos;
	if (in->kind != CAT_REG && in->kind != CAT_DIR)
		return 0; /* symlinks and the rest are no objects */
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct dir_ent *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			goto nomem;
		l->v = v;
		l->cap = cap;
	}
	x = &l->v[l->n];
	x->name = malloc(nlen);
	if (!x->name)
		goto nomem;
	memcpy(x->name, name, nlen);
	x->nlen = nlen;
	x->in = *in;
	l->n++;
	return 0;
nomem:
	l->err = -ENOMEM;
	return 1;
}

static void dir_list_fini(struct dir_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
}

static int walk_dir(struct walk *w, uint64_t dir);

/* Entry x of the directory at w->path. */
static int walk_ent(struct walk *w, const struct dir_ent *x)
{
	size_t len = w->len, cmp;
	int r = 0;

	if (len + x->nlen + 2 > sizeof(w->path))
		return 0; /* no S3 key is that long; skip */
	memcpy(w->path + len, x->name, x->nlen);
	w->len = len + x->nlen;
	/* the key so far must agree with the prefix where both have bytes */
	cmp = w->len < w->plen ? w->len : w->plen;
	if (memcmp(w->path, w->prefix, cmp) != 0)
		goto out;
	if (x->in.kind == CAT_REG) {
		if (w->len >= w->plen)
			r = hyd_s3_ents_add(w->e, w->path, w->len, &x->in, 0);
	} else {
		w->path[w->len++] = '/';
		if (w->slash_delim && w->len > w->plen)
			r = hyd_s3_ents_add(w->e, w->path, w->len, &x->in, 1);
		else
			r = walk_dir(w, x->in.ino);
	}
out:
	w->len = len;
	return r;
}

static int walk_dir(struct walk *w, uint64_t dir)
{
	struct dir_list l = {0};
	size_t i;
	int r;

	if (w->depth >= LIST_DEPTH_MAX)
		return -ELOOP;
	r = cat_readdir(w->cat, dir, 0, gather_cb, &l);
	if (l.err)
		r = l.err;
	w->depth++;
	for (i = 0; r >= 0 && i < l.n; i++)
		r = walk_ent(w, &l.v[i]);
	w->depth--;
	dir_list_fini(&l);
	return r < 0 ? r : 0;
}

int hyd_s3_list_collect(cat_reader *cat, const char *prefix, int slash_delim,
			struct hyd_s3_ents *e)
{
	struct walk w = {
	    .cat = cat, .e = e, .prefix = prefix, .slash_delim = slash_delim};
	const char *p = prefix, *slash;
	uint64_t dir = 1;

	w.plen = strlen(prefix);
	/* down the directories the prefix names whole */
	while ((slash = strchr(p, '/')) != NULL) {
		struct cat_inode in;
		int r;

		if (slash == p)
			return 0; /* "//" or a leading '/': no such key */
		r = cat_lookup(cat, dir, p, (size_t)(slash - p), &in);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return r;
		if (in.kind != CAT_DIR)
			return 0;
		dir = in.ino;
		p = slash + 1;
	}
	w.len = (size_t)(p - prefix);
	if (w.len + 2 > sizeof(w.path))
		return 0;
	memcpy(w.path, prefix, w.len);
	return walk_dir(&w, dir);
}

/* The first index of e whose key is > marker (binary search). */
static size_t first_after(const struct hyd_s3_ents *e, const char *marker)
{
	size_t lo = 0, hi = e->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(e->v[mid].key, marker) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The length of key's CommonPrefix, or 0 when it is listed as itself. */
static size_t rollup(const struct hyd_s3_ent *x, size_t plen, const char *delim)
{
	const char *d;

	if (!delim || !*delim)
		return 0;
	d = strstr(x->key + plen, delim);
	if (!d)
		return 0;
	return (size_t)(d - x->key) + strlen(delim);
}

/* key[0..rl) <= marker, bytewise. */
static int prefix_le(const char *key, size_t rl, const char *marker,
		     size_t mlen)
{
	int c = memcmp(key, marker, rl < mlen ? rl : mlen);

	return c < 0 || (c == 0 && rl <= mlen);
}

void hyd_s3_list_page(const struct hyd_s3_ents *e, const char *prefix,
		      const char *delim, const char *marker, size_t max_keys,
		      struct hyd_s3_item *out, size_t *ret_n,
		      int *ret_truncated)
{
	size_t plen = strlen(prefix), mlen = marker ? strlen(marker) : 0;
	size_t i = mlen ? first_after(e, marker) : first_after(e, prefix);
	size_t n = 0;

	/* first_after(prefix) skips the key equal to the prefix itself:
	 * step back to it */
	if (!mlen && i > 0 && strcmp(e->v[i - 1].key, prefix) == 0)
		i--;
	*ret_truncated = 0;
	for (; i < e->n; i++) {
		const struct hyd_s3_ent *x = &e->v[i];
		size_t rl;

		if (strncmp(x->key, prefix, plen) != 0) {
			if (strcmp(x->key, prefix) > 0)
				break; /* sorted: no later key matches */
			continue;
		}
		rl = rollup(x, plen, delim);
		if (x->dir && rl == 0)
			continue; /* a directory is only ever a prefix */
		/* a CommonPrefix already returned (or the marker itself) */
		if (rl && mlen && prefix_le(x->key, rl, marker, mlen))
			continue;
		if (rl && n > 0 && out[n - 1].plen == rl &&
		    memcmp(e->v[out[n - 1].ent].key, x->key, rl) == 0)
			continue; /* the same CommonPrefix as the last item */
		if (n == max_keys) {
			*ret_truncated = 1;
			break;
		}
		out[n].ent = i;
		out[n].plen = rl;
		n++;
	}
	*ret_n = n;
}
