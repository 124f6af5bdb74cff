/*
 * hydrator/sync/hyd_mat_left.c — the files a landing pass left for later,
 * by directory, so that the next pass of the same generation looks at
 * those and not at the whole tree (hyd_into.c). Each directory is kept
 * once with its path; its files form a list of names in the order the
 * pass met them. Bounded: past HYD_MAT_LEFT_MAX files or
 * HYD_MAT_LEFT_BYTES of paths and names the list is marked overflowed,
 * stops growing, and the next pass walks the tree.
 */
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define NONE ((size_t)-1)

/* len bytes of s and a NUL into the arena; its offset, or NONE. */
static size_t keep(struct hyd_mat_left *l, const char *s, size_t len)
{
	size_t at = l->blen;

	if (l->blen + len + 1 > HYD_MAT_LEFT_BYTES ||
	    base_grow((void **)&l->bytes, &l->bcap, l->blen + len + 1, 1) < 0)
		return NONE;
	memcpy(l->bytes + at, s, len);
	l->bytes[at + len] = '\0';
	l->blen += len + 1;
	return at;
}

void hyd_mat_left_add(struct hyd_mat_left *l, size_t *dir_slot,
		      uint64_t dir_ino, const char *dir_path,
		      size_t dir_path_len, const char *name, size_t len,
		      uint64_t ino)
{
	struct hyd_mat_left_dir *d;
	struct hyd_mat_left_file *f;
	size_t at;

	if (l->overflow)
		return;
	if (l->nfiles >= HYD_MAT_LEFT_MAX ||
	    base_grow((void **)&l->files, &l->fcap, l->nfiles + 1,
		      sizeof(*l->files)) < 0)
		goto full;
	if (*dir_slot == NONE || *dir_slot >= l->ndirs) {
		if (base_grow((void **)&l->dirs, &l->dcap, l->ndirs + 1,
			      sizeof(*l->dirs)) < 0)
			goto full;
		at = keep(l, dir_path, dir_path_len);
		if (at == NONE)
			goto full;
		d = &l->dirs[l->ndirs];
		d->ino = dir_ino;
		d->path = at;
		d->first = d->last = NONE;
		*dir_slot = l->ndirs++;
	}
	at = keep(l, name, len);
	if (at == NONE)
		goto full;
	d = &l->dirs[*dir_slot];
	f = &l->files[l->nfiles];
	f->ino = ino;
	f->name = at;
	f->len = len;
	f->next = NONE;
	if (d->last == NONE)
		d->first = l->nfiles;
	else
		l->files[d->last].next = l->nfiles;
	d->last = l->nfiles++;
	return;
full:
	l->overflow = 1;
}

const char *hyd_mat_left_path(const struct hyd_mat_left *l, size_t dir)
{
	return dir < l->ndirs ? l->bytes + l->dirs[dir].path : NULL;
}

size_t hyd_mat_left_first(const struct hyd_mat_left *l, size_t dir)
{
	return dir < l->ndirs ? l->dirs[dir].first : NONE;
}

size_t hyd_mat_left_next(const struct hyd_mat_left *l, size_t file)
{
	return file < l->nfiles ? l->files[file].next : NONE;
}

const char *hyd_mat_left_name(const struct hyd_mat_left *l, size_t file,
			      size_t *ret_len)
{
	if (file >= l->nfiles)
		return NULL;
	*ret_len = l->files[file].len;
	return l->bytes + l->files[file].name;
}

void hyd_mat_left_clear(struct hyd_mat_left *l)
{
	l->ndirs = 0;
	l->nfiles = 0;
	l->blen = 0;
	l->overflow = 0;
}

void hyd_mat_left_free(struct hyd_mat_left *l)
{
	free(l->dirs);
	free(l->files);
	free(l->bytes);
	memset(l, 0, sizeof(*l));
}

static int cmp_ino(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

size_t hyd_mat_whole_sort(uint64_t *v, size_t n)
{
	size_t i, k = 0;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_ino);
	for (i = 1; i < n; i++)
		if (v[i] != v[k])
			v[++k] = v[i];
	return k + 1;
}

int hyd_mat_whole_has(const uint64_t *v, size_t n, uint64_t ino)
{
	return n && bsearch(&ino, v, n, sizeof(*v), cmp_ino) != NULL;
}
