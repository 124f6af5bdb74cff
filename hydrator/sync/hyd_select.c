/*
 * hydrator/sync/hyd_select.c — what part of a catalog `ferry sync`
 * transfers when it is given a subtree URL or include/exclude rules: the
 * subtree's directory in the catalog, and the set of regular files the
 * writer will write, so the fetching pass asks only for their chunks.
 *
 * The set is a bitmap by ino, made by one walk of the catalog's
 * directories from the transfer's root with the same rule checks the
 * writer makes (an excluded directory is not entered); it costs one bit
 * per catalog inode and one catalog read per directory.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/sync/hyd_sync_priv.h"

int hyd_sync__resolve(cat_reader *cat, const char *sub, uint64_t *ret_ino)
{
	struct cat_inode in;
	const char *p = sub, *slash;
	uint64_t ino = CAT_ROOT_INO;
	int r;

	while (*p) {
		size_t n;

		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.')) {
			p += n + (slash != NULL);
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		r = cat_lookup(cat, ino, p, n, &in);
		if (r < 0)
			return r;
		if (in.kind != CAT_DIR)
			return -ENOTDIR;
		ino = in.ino;
		p += n + (slash != NULL);
	}
	*ret_ino = ino;
	return 0;
}

int hyd_sync__resolve_file(cat_reader *cat, const char *sub, uint64_t *ret_ino,
			   const char **ret_name)
{
	const char *name = strrchr(sub, '/');
	struct cat_inode in;
	uint64_t dir = CAT_ROOT_INO;
	char *parent;
	int r;

	name = name ? name + 1 : sub;
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	parent = strndup(sub, (size_t)(name - sub));
	if (!parent)
		return -ENOMEM;
	r = hyd_sync__resolve(cat, parent, &dir);
	free(parent);
	if (r == 0)
		r = cat_lookup(cat, dir, name, strlen(name), &in);
	if (r < 0)
		return r;
	if (in.kind == CAT_DIR)
		return 0;
	*ret_ino = in.ino;
	*ret_name = name;
	return 1;
}

static int sel_set(struct hyd_sync_sel *s, uint64_t ino)
{
	if (ino >= s->nbits) {
		uint64_t nb = s->nbits ? s->nbits : 1024;
		uint8_t *b;

		while (nb <= ino)
			nb *= 2;
		b = realloc(s->bits, nb / 8);
		if (!b)
			return -ENOMEM;
		memset(b + s->nbits / 8, 0, (nb - s->nbits) / 8);
		s->bits = b;
		s->nbits = nb;
	}
	s->bits[ino / 8] |= (uint8_t)(1u << (ino % 8));
	return 0;
}

int hyd_sync__sel_one(struct hyd_sync_sel *s, uint64_t ino)
{
	memset(s, 0, sizeof(*s));
	s->active = 1;
	return sel_set(s, ino);
}

int hyd_sync__sel_has(const struct hyd_sync_sel *s, uint64_t ino)
{
	if (!s || !s->active)
		return 1;
	return ino < s->nbits && (s->bits[ino / 8] >> (ino % 8) & 1);
}

void hyd_sync__sel_free(struct hyd_sync_sel *s)
{
	free(s->bits);
	memset(s, 0, sizeof(*s));
}

int hyd_sync__skip_active(const struct hyd_sync_skip *skip)
{
	return skip &&
	       (skip->existing || skip->ignore_existing || skip->update ||
		skip->max_size || skip->min_size || skip->size_only);
}

int hyd_sync__size_same(const struct hyd_sync_skip *skip,
			const struct cat_inode *in, const struct stat *dst)
{
	return skip && skip->size_only && dst && in->kind == CAT_REG &&
	       S_ISREG(dst->st_mode) && (uint64_t)dst->st_size == in->size;
}

int64_t hyd_sync__mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

int hyd_sync__skip(const struct hyd_sync_skip *skip, const struct cat_inode *in,
		   const struct stat *dst)
{
	if (!skip)
		return 0;
	if (skip->existing && !dst)
		return 1;
	if (in->kind == CAT_DIR)
		return 0; /* the rest are about files (rsync's) */
	if (in->kind == CAT_REG &&
	    ((skip->max_size && in->size > skip->max_size) ||
	     (skip->min_size && in->size < skip->min_size)))
		return 1;
	if (skip->ignore_existing && dst)
		return 1;
	/* -u: newer there; a directory there is replaced as without -u */
	if (skip->update && dst && !S_ISDIR(dst->st_mode) &&
	    hyd_sync__mtime_ns(dst) > in->mtime_ns)
		return 1;
	return 0;
}

struct sel_walk {
	cat_reader *cat;
	const hyd_filter *f;
	struct base_path *path;
	unsigned depth;
	struct hyd_sync_sel *s;
	const struct hyd_sync_skip *skip;
	const char *dest;
	hyd_seeder *seeder;
	struct hyd_sync_merge *merge;
};

/* The leave-alone rules by DEST's entry at the walk's path (lstat by
 * name: a symlink on the way only changes what is fetched; the writer
 * decides again from its own directory descriptors). */
static int sel_skip(struct sel_walk *w, const struct cat_inode *in)
{
	char full[PATH_MAX];
	struct stat st;
	int have;

	if (!hyd_sync__skip_active(w->skip))
		return 0;
	if ((size_t)snprintf(full, sizeof(full), "%s/%s", w->dest,
			     w->path->b) >= sizeof(full))
		return 0; /* the writer decides */
	have = lstat(full, &st) == 0;
	/* --size-only's matches are written from nothing fetched either */
	return hyd_sync__skip(w->skip, in, have ? &st : NULL) ||
	       hyd_sync__size_same(w->skip, in, have ? &st : NULL);
}

static int walk(struct sel_walk *w, uint64_t dir);

static int walk_entry(void *arg, const struct hyd_dirent_copy *e)
{
	struct sel_walk *w = arg;
	int r;

	if (hyd_filter_excluded(w->f, w->path->b, e->in.kind == CAT_DIR, 0))
		return 0;
	if (sel_skip(w, &e->in))
		return 0;
	if (e->in.kind == CAT_REG && w->seeder) {
		r = hyd_seeder_file(w->seeder, w->cat, &e->in, w->path->b);
		if (r < 0) {
			/* a seed only saves fetches: the rest is fetched */
			base_log_err(BASE_LOG_WARN, r,
				     "seeding stopped path=\"%s\"", w->path->b);
			w->seeder = NULL;
		} else if (r == HYD_SEED_DEST || r == HYD_SEED_DIR) {
			return 0; /* the writer checks it; nothing fetched */
		}
	}
	if (e->in.kind == CAT_REG)
		return sel_set(w->s, e->in.ino);
	if (e->in.kind != CAT_DIR)
		return 0;
	w->depth++;
	r = walk(w, e->in.ino);
	w->depth--;
	return r;
}

/* The regular files below dir (at w->path) that the rules keep. */
static int walk(struct sel_walk *w, uint64_t dir)
{
	int r;

	if (w->depth >= HYD_SYNC_DEPTH_MAX)
		return 0; /* the writer names it */
	/* its merge files' rules judge its entries */
	if (w->merge) {
		r = hyd_sync__merge_dir(w->merge, dir, w->path->b);
		if (r < 0)
			return r;
	}
	return hyd_sync__dir_each(w->cat, dir, w->path, walk_entry, w);
}

int hyd_sync__select(cat_reader *cat, uint64_t root_ino, const char *root_name,
		     const hyd_filter *f, const struct hyd_sync_skip *skip,
		     const char *dest, hyd_seeder *seeder,
		     struct hyd_sync_merge *merge, struct hyd_sync_sel *ret)
{
	struct base_path path = {0};
	size_t old;
	int r;

	memset(ret, 0, sizeof(*ret));
	ret->active = 1;
	r = base_path_push(&path, "", 0, &old);
	if (r == 0 && root_name)
		r = base_path_push(&path, root_name, strlen(root_name), &old);
	if (r == 0 && !(root_name && hyd_filter_excluded(f, path.b, 1, 0))) {
		struct sel_walk w = {cat,  f,	 &path,	 0,    ret,
				     skip, dest, seeder, merge};

		r = walk(&w, root_ino);
	}
	free(path.b);
	if (r < 0)
		hyd_sync__sel_free(ret);
	return r;
}
