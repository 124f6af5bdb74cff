/*
 * hydrator/sync/hyd_mat_dirs.c — the directories a landing pass left
 * files in, so that the next pass of the same generation visits those
 * and not the whole tree (hyd_into.c). Bounded: past HYD_MAT_DIRS_MAX
 * directories or HYD_MAT_DIRS_BYTES of paths the list is marked
 * overflowed and the next pass walks the tree.
 */
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

void hyd_mat_dirs_add(struct hyd_mat_dirs *d, uint64_t ino, const char *relpath)
{
	size_t len = strlen(relpath) + 1;

	if (d->overflow)
		return;
	if (d->n >= HYD_MAT_DIRS_MAX || d->plen + len > HYD_MAT_DIRS_BYTES ||
	    base_grow((void **)&d->v, &d->cap, d->n + 1, sizeof(*d->v)) < 0 ||
	    base_grow((void **)&d->paths, &d->pcap, d->plen + len, 1) < 0) {
		d->overflow = 1;
		return;
	}
	memcpy(d->paths + d->plen, relpath, len);
	d->v[d->n].ino = ino;
	d->v[d->n].path = d->plen;
	d->plen += len;
	d->n++;
}

const char *hyd_mat_dirs_path(const struct hyd_mat_dirs *d, size_t i)
{
	return i < d->n ? d->paths + d->v[i].path : NULL;
}

void hyd_mat_dirs_clear(struct hyd_mat_dirs *d)
{
	d->n = 0;
	d->plen = 0;
	d->overflow = 0;
}

void hyd_mat_dirs_free(struct hyd_mat_dirs *d)
{
	free(d->v);
	free(d->paths);
	memset(d, 0, sizeof(*d));
}
