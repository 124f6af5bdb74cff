/*
 * hydrator/read/hyd_fuse_gens.c — the generations a mount serves, and
 * which one answers a request.
 *
 * Lookups and listings answer from the current generation. A request
 * about an ino the current one does not have comes from the kernel's
 * memory of an older one: a file or directory opened (or a cwd entered)
 * before a switch. Such an ino is answered from the newest older kept
 * generation that has it, so an open file goes on reading the bytes it
 * was opened with (an ino names one content: docs/catalog.md); once no
 * kept generation has it, it is gone (ENOENT, and reads ESTALE). The inos
 * the current generation lost are known (cat_diff at each switch), so only
 * a request about one of them looks further: any other costs one catalog
 * query, as with a single generation.
 *
 * Each request pins the generation it uses (a reference) for its whole
 * length, so a switch never frees a catalog under a request; the switch
 * itself only moves pointers under gen_mu.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/read/hyd_fuse.h"

void hyd_fs_gens_init(struct hyd_fs *fs, struct hyd_gen *first)
{
	pthread_mutex_init(&fs->gen_mu, NULL);
	memset(fs->gens, 0, sizeof(fs->gens));
	fs->gens[0] = first;
	fs->ngens = first ? 1 : 0;
}

void hyd_fs_gens_fini(struct hyd_fs *fs)
{
	for (size_t i = 0; i < fs->ngens; i++)
		hyd_gen_unref(fs->gens[i]);
	fs->ngens = 0;
	free(fs->gone);
	fs->gone = NULL;
	fs->ngone = 0;
	pthread_mutex_destroy(&fs->gen_mu);
}

/* Is ino in the sorted set v[0..n)? */
static int in_set(const uint64_t *v, size_t n, uint64_t ino)
{
	size_t lo = 0, hi = n, m;

	while (lo < hi) {
		m = lo + (hi - lo) / 2;
		if (v[m] < ino)
			lo = m + 1;
		else
			hi = m;
	}
	return lo < n && v[lo] == ino;
}

struct hyd_gen *hyd_fs_gen(struct hyd_fs *fs)
{
	struct hyd_gen *g;

	pthread_mutex_lock(&fs->gen_mu);
	g = fs->gens[0];
	hyd_gen_ref(g);
	pthread_mutex_unlock(&fs->gen_mu);
	return g;
}

struct hyd_gen *hyd_fs_gen_for(struct hyd_fs *fs, uint64_t ino,
			       struct cat_inode *ret_in, int *ret_r)
{
	struct hyd_gen *v[HYD_GENS_MAX] = {0}, *found = NULL;
	struct cat_inode in;
	size_t n, i;
	int r = 0, r0 = 0;

	pthread_mutex_lock(&fs->gen_mu);
	/* Only an ino the current generation lost is looked for further. */
	n = in_set(fs->gone, fs->ngone, ino) ? fs->ngens : 1;
	for (i = 0; i < n; i++) {
		v[i] = fs->gens[i];
		hyd_gen_ref(v[i]);
	}
	pthread_mutex_unlock(&fs->gen_mu);
	if (n == 1 && !ret_in)
		return v[0];
	/* The current one first; an older one only for an ino it lacks. */
	for (i = 0; i < n && !found; i++) {
		r = cat_getattr(v[i]->cat, ino, ret_in ? ret_in : &in);
		if (i == 0)
			r0 = r;
		if (r != -ENOENT)
			found = v[i];
	}
	if (!found) { /* no one has it: the current one's answer stands */
		found = v[0];
		r = r0;
	}
	for (i = 0; i < n; i++)
		if (v[i] != found)
			hyd_gen_unref(v[i]);
	if (ret_r)
		*ret_r = r;
	return found;
}

/* The sorted union of a and b (both ascending), or NULL when out of
 * memory (and *ret_n untouched). */
static uint64_t *set_union(const uint64_t *a, size_t na, const uint64_t *b,
			   size_t nb, size_t *ret_n)
{
	uint64_t *v = malloc((na + nb ? na + nb : 1) * sizeof(*v));
	size_t i = 0, j = 0, n = 0;

	if (!v)
		return NULL;
	while (i < na || j < nb) {
		uint64_t x = j == nb || (i < na && a[i] <= b[j]) ? a[i] : b[j];

		if (i < na && a[i] == x)
			i++;
		if (j < nb && b[j] == x)
			j++;
		v[n++] = x;
	}
	*ret_n = n;
	return v;
}

long hyd_fs_gens_switch(struct hyd_fs *fs, struct hyd_gen *g, size_t keep,
			const uint64_t *gone, size_t ngone)
{
	struct hyd_gen *drop[HYD_GENS_MAX + 1];
	uint64_t *set = NULL, *old;
	size_t nd = 0, i, nset = 0;

	if (keep < 1)
		keep = 1;
	if (keep > HYD_GENS_MAX)
		keep = HYD_GENS_MAX;
	/* With only the current one kept nobody answers for lost inos. An
	 * ino of a generation dropped later stays in the set: a request
	 * about it only looks in vain, as before. */
	if (keep > 1) {
		pthread_mutex_lock(&fs->gen_mu);
		set = set_union(fs->gone, fs->ngone, gone, ngone, &nset);
		pthread_mutex_unlock(&fs->gen_mu);
		if (!set)
			return -ENOMEM;
	}
	pthread_mutex_lock(&fs->gen_mu);
	old = fs->gone;
	fs->gone = set;
	fs->ngone = nset;
	/* The last one falls off when the list is full. */
	if (fs->ngens == HYD_GENS_MAX)
		drop[nd++] = fs->gens[--fs->ngens];
	memmove(fs->gens + 1, fs->gens, fs->ngens * sizeof(fs->gens[0]));
	fs->gens[0] = g;
	fs->ngens++;
	while (fs->ngens > keep)
		drop[nd++] = fs->gens[--fs->ngens];
	pthread_mutex_unlock(&fs->gen_mu);
	free(old);
	/* States made from older generations pin them; new reads find their
	 * generation again (the same one for an ino both have). */
	hyd_files_clear(&fs->files);
	for (i = 0; i < nd; i++) {
		hyd_gen_drop(drop[i]);
		hyd_gen_unref(drop[i]);
	}
	return (long)nd;
}

void hyd_fs_gens_cancel(struct hyd_fs *fs)
{
	pthread_mutex_lock(&fs->gen_mu);
	for (size_t i = 0; i < fs->ngens; i++)
		hyd_manifest_cancel(fs->gens[i]->manifest);
	pthread_mutex_unlock(&fs->gen_mu);
}
