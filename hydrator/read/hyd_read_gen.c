/*
 * hydrator/read/hyd_read_gen.c — one generation of the catalog a mount
 * serves, reference counted (see struct hyd_gen).
 *
 * The mount's switch to a newer generation only moves pointers; what the
 * older one owns lives on until its last reader lets go, and its files
 * leave the cache then, not before: the store's garbage collection keeps
 * every chunk a catalog file in the cache names, so a generation someone
 * still reads keeps its chunks by keeping its file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/read/hyd_read.h"

int hyd_gen_new(cat_reader *cat, cat_overlay *ov, hyd_manifest *manifest,
		const char *catpath, const char *ovpath, struct hyd_gen **ret)
{
	struct hyd_gen *g;

	*ret = NULL;
	if (strlen(catpath) >= sizeof(g->catpath) ||
	    (ovpath && strlen(ovpath) >= sizeof(g->ovpath)))
		return -ENAMETOOLONG;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	cat_reader_meta(cat, &g->meta);
	g->generation = g->meta.generation;
	g->cat = cat;
	g->ov = ov;
	g->manifest = manifest;
	memcpy(g->catpath, catpath, strlen(catpath) + 1);
	if (ovpath)
		memcpy(g->ovpath, ovpath, strlen(ovpath) + 1);
	g->refs = 1;
	*ret = g;
	return 0;
}

void hyd_gen_ref(struct hyd_gen *g)
{
	__atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
}

void hyd_gen_drop(struct hyd_gen *g)
{
	__atomic_store_n(&g->dropped, 1, __ATOMIC_RELEASE);
}

/* The SQLite files of a database at path: itself, its WAL and shm. */
static void unlink_db(const char *path)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	char p[4200];

	for (size_t i = 0; i < sizeof(sfx) / sizeof(*sfx); i++)
		if (snprintf(p, sizeof(p), "%s%s", path, sfx[i]) <
		    (int)sizeof(p))
			unlink(p);
}

void hyd_gen_unref(struct hyd_gen *g)
{
	if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* The fetcher writes into the overlay and reads the catalog: it
	 * goes first. Nobody calls it any more (no reference is left). */
	hyd_manifest_free(g->manifest);
	cat_reader_close(g->cat);
	cat_overlay_close(g->ov);
	if (__atomic_load_n(&g->dropped, __ATOMIC_ACQUIRE)) {
		/* The overlay first: a crash in between leaves a catalog
		 * without its overlay, which the next start removes as an
		 * older catalog anyway. */
		if (g->ovpath[0])
			unlink_db(g->ovpath);
		unlink_db(g->catpath);
		base_debug("generation %llu removed from the cache path=%s",
			   (unsigned long long)g->generation, g->catpath);
	}
	free(g);
}
