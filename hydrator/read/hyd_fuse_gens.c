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
 * kept generation has it, it is gone (ENOENT, and reads EIO). With one
 * generation (no switch yet) nothing is asked twice.
 *
 * Each request pins the generation it uses (a reference) for its whole
 * length, so a switch never frees a catalog under a request; the switch
 * itself only moves pointers under gen_mu.
 */
#include <errno.h>
#include <string.h>

#include "hydrator/read/hyd_fuse_internal.h"

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
	pthread_mutex_destroy(&fs->gen_mu);
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
	n = fs->ngens;
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

size_t hyd_fs_gens_switch(struct hyd_fs *fs, struct hyd_gen *g, size_t keep)
{
	struct hyd_gen *drop[HYD_GENS_MAX + 1];
	size_t nd = 0, i;

	if (keep < 1)
		keep = 1;
	if (keep > HYD_GENS_MAX)
		keep = HYD_GENS_MAX;
	pthread_mutex_lock(&fs->gen_mu);
	/* The last one falls off when the list is full. */
	if (fs->ngens == HYD_GENS_MAX)
		drop[nd++] = fs->gens[--fs->ngens];
	memmove(fs->gens + 1, fs->gens, fs->ngens * sizeof(fs->gens[0]));
	fs->gens[0] = g;
	fs->ngens++;
	while (fs->ngens > keep)
		drop[nd++] = fs->gens[--fs->ngens];
	pthread_mutex_unlock(&fs->gen_mu);
	/* States made from older generations pin them; new reads find their
	 * generation again (the same one for an ino both have). */
	hyd_files_clear(&fs->files);
	for (i = 0; i < nd; i++) {
		hyd_gen_drop(drop[i]);
		hyd_gen_unref(drop[i]);
	}
	return nd;
}

void hyd_fs_gens_cancel(struct hyd_fs *fs)
{
	pthread_mutex_lock(&fs->gen_mu);
	for (size_t i = 0; i < fs->ngens; i++)
		hyd_manifest_cancel(fs->gens[i]->manifest);
	pthread_mutex_unlock(&fs->gen_mu);
}
