/*
 * hydrator/backfill/hyd_backfill_files.c — the table of regular files backfill
 * walks in order: built once per run by a breadth-first walk of the catalog,
 * then sorted two ways: by inode (the walk order of a pass, and lookups from
 * FUSE opens) and by directory (for "near what users opened").
 *
 * The catalog is untrusted: a directory entry naming an ancestor (a
 * cycle) would make the walk endless, so the directories queued may not
 * outnumber the catalog's inodes, and entries overall are capped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/backfill/hyd_backfill.h"

#define PAGE 512u /* directory entries per cat_readdir call */

struct u64vec {
	uint64_t *v;
	size_t n, cap;
};

static int u64_push(struct u64vec *a, uint64_t x)
{
	uint64_t *nv;
	size_t ncap;

	if (a->n == a->cap) {
		ncap = a->cap ? a->cap * 2 : 256;
		nv = realloc(a->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		a->v = nv;
		a->cap = ncap;
	}
	a->v[a->n++] = x;
	return 0;
}

struct walk {
	struct hyd_bf_file *files;
	size_t nfiles, cap;
	struct u64vec queue; /* directories to list */
	uint64_t dir;	     /* the one being listed */
	uint64_t last_pos;
	unsigned in_page;
	uint64_t entries, max_entries;
	int err;
};

static int walk_entry(void *ctx, const void *name, size_t name_len,
		      const struct cat_inode *in, uint64_t pos)
{
	struct walk *w = ctx;
	struct hyd_bf_file *nf;
	size_t ncap;

	(void)name;
	(void)name_len;
	w->last_pos = pos;
	if (++w->entries > w->max_entries) {
		w->err = -EBADMSG;
		return 1;
	}
	if (in->kind == CAT_DIR) {
		if (u64_push(&w->queue, in->ino) < 0) {
			w->err = -ENOMEM;
			return 1;
		}
	} else if (in->kind == CAT_REG) {
		if (w->nfiles == w->cap) {
			ncap = w->cap ? w->cap * 2 : 1024;
			nf = realloc(w->files, ncap * sizeof(*nf));
			if (!nf) {
				w->err = -ENOMEM;
				return 1;
			}
			w->files = nf;
			w->cap = ncap;
		}
		w->files[w->nfiles].ino = in->ino;
		w->files[w->nfiles].parent = w->dir;
		w->files[w->nfiles].size = in->size;
		w->nfiles++;
	}
	return ++w->in_page >= PAGE ? 1 : 0;
}

static int cmp_file_ino(const void *a, const void *b)
{
	const struct hyd_bf_file *x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* qsort has no context argument: sort (key, index) pairs instead. */
struct keyed {
	uint64_t k1, k2;
	uint32_t idx;
};

static int cmp_keyed(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;

	if (x->k1 != y->k1)
		return x->k1 < y->k1 ? -1 : 1;
	if (x->k2 != y->k2)
		return x->k2 < y->k2 ? -1 : 1;
	return 0;
}

static int make_index(const struct hyd_bf_files *t, uint32_t **ret)
{
	struct keyed *k;
	uint32_t *out;
	size_t i;

	k = malloc((t->n ? t->n : 1) * sizeof(*k));
	out = malloc((t->n ? t->n : 1) * sizeof(*out));
	if (!k || !out) {
		free(k);
		free(out);
		return -ENOMEM;
	}
	for (i = 0; i < t->n; i++) {
		k[i].k1 = t->v[i].parent;
		k[i].k2 = t->v[i].size;
		k[i].idx = (uint32_t)i;
	}
	qsort(k, t->n, sizeof(*k), cmp_keyed);
	for (i = 0; i < t->n; i++)
		out[i] = k[i].idx;
	free(k);
	*ret = out;
	return 0;
}

/* List one directory in pages. */
static int walk_dir(cat_reader *cat, struct walk *w, const int *stop)
{
	int r;

	w->last_pos = 0;
	do {
		if (__atomic_load_n(stop, __ATOMIC_RELAXED))
			return -ECANCELED;
		w->in_page = 0;
		r = cat_readdir(cat, w->dir, w->last_pos, walk_entry, w);
		if (w->err)
			return w->err;
		if (r < 0)
			return r;
	} while (r > 0);
	return 0;
}

/* Size classes a quarter of an octave wide: 0 for sizes 0 and 1, then
 * 1 + 4 * floor(log2(size - 1)) + the two bits after the leading one. A
 * class spans a factor of at most 2^(1/4), so across classes the order is
 * smallest first to within 19%: the 40 KB sources of a package tree go
 * before a data set's 48 KB samples (power-of-two classes put them
 * together, and the sources after the samples the catalog lists first). */
#define SIZE_CLASSES (1u + 4u * 64u)

static unsigned size_class(uint64_t size)
{
	uint64_t v;
	unsigned e;

	if (size <= 1)
		return 0;
	v = size - 1;
	e = 63u - (unsigned)__builtin_clzll(v);
	return 1u + 4u * e + (e >= 2 ? (unsigned)(v >> (e - 2)) & 3u : 0u);
}

/* by_size: every file, smaller size classes first, and within a class in
 * ino order: a counting sort, one pass to count and one to place,
 * whatever the number of files. */
static int size_order(struct hyd_bf_files *t)
{
	size_t start[SIZE_CLASSES + 1] = {0}, i;

	t->by_size = malloc((t->n ? t->n : 1) * sizeof(*t->by_size));
	if (!t->by_size)
		return -ENOMEM;
	for (i = 0; i < t->n; i++)
		start[size_class(t->v[i].size) + 1]++;
	for (i = 1; i <= SIZE_CLASSES; i++)
		start[i] += start[i - 1];
	for (i = 0; i < t->n; i++)
		t->by_size[start[size_class(t->v[i].size)]++] = (uint32_t)i;
	return 0;
}

int hyd_bf__files_build(cat_reader *cat, const int *stop,
			struct hyd_bf_files *ret)
{
	struct walk w;
	struct cat_meta meta;
	size_t head = 0, i, j;
	int r;

	memset(ret, 0, sizeof(*ret));
	memset(&w, 0, sizeof(w));
	cat_reader_meta(cat, &meta);
	/* Every inode can have many names (hard links), but not unboundedly
	 * many more entries than inodes in any sane catalog. */
	w.max_entries = meta.inodes * 64 + 65536;
	r = u64_push(&w.queue, CAT_ROOT_INO);
	while (r == 0 && head < w.queue.n) {
		/* More directories queued than the catalog has inodes: a
		 * directory is reachable twice (a cycle). */
		if (w.queue.n > meta.inodes + 1) {
			r = -EBADMSG;
			break;
		}
		w.dir = w.queue.v[head++];
		r = walk_dir(cat, &w, stop);
	}
	ret->dirs = head;
	free(w.queue.v);
	if (r < 0)
		goto out;
	/* One row per inode: hard links keep their first directory. */
	qsort(w.files, w.nfiles, sizeof(*w.files), cmp_file_ino);
	for (i = 0, j = 0; i < w.nfiles; i++)
		if (j == 0 || w.files[j - 1].ino != w.files[i].ino)
			w.files[j++] = w.files[i];
	if (j > UINT32_MAX) {
		r = -E2BIG;
		goto out;
	}
	ret->v = w.files;
	ret->n = j;
	w.files = NULL;
	r = make_index(ret, &ret->by_parent);
	if (r == 0)
		r = size_order(ret);
out:
	free(w.files);
	if (r < 0)
		hyd_bf__files_free(ret);
	return r;
}

void hyd_bf__files_free(struct hyd_bf_files *t)
{
	free(t->v);
	free(t->by_parent);
	free(t->by_size);
	memset(t, 0, sizeof(*t));
}

long hyd_bf__files_find(const struct hyd_bf_files *t, uint64_t ino)
{
	size_t lo = 0, hi = t->n, m;

	while (lo < hi) {
		m = lo + (hi - lo) / 2;
		if (t->v[m].ino < ino)
			lo = m + 1;
		else
			hi = m;
	}
	return lo < t->n && t->v[lo].ino == ino ? (long)lo : -1;
}

void hyd_bf__files_in_dir(const struct hyd_bf_files *t, uint64_t dir,
			  size_t *ret_lo, size_t *ret_hi)
{
	size_t lo = 0, hi = t->n, m, a;

	while (lo < hi) {
		m = lo + (hi - lo) / 2;
		if (t->v[t->by_parent[m]].parent < dir)
			lo = m + 1;
		else
			hi = m;
	}
	a = lo;
	hi = t->n;
	while (lo < hi) {
		m = lo + (hi - lo) / 2;
		if (t->v[t->by_parent[m]].parent <= dir)
			lo = m + 1;
		else
			hi = m;
	}
	*ret_lo = a;
	*ret_hi = lo;
}
