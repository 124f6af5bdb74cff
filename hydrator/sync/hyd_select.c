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

struct sel_walk {
	cat_reader *cat;
	const hyd_filter *f;
	struct base_path *path;
	unsigned depth;
	struct hyd_sync_sel *s;
};

static int walk(struct sel_walk *w, uint64_t dir);

static int walk_entry(void *arg, const struct hyd_dirent_copy *e)
{
	struct sel_walk *w = arg;
	int r;

	if (hyd_filter_excluded(w->f, w->path->b, e->in.kind == CAT_DIR, 0))
		return 0;
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
	if (w->depth >= HYD_SYNC_DEPTH_MAX)
		return 0; /* the writer names it */
	return hyd_sync__dir_each(w->cat, dir, w->path, walk_entry, w);
}

int hyd_sync__select(cat_reader *cat, uint64_t root_ino, const char *root_name,
		     const hyd_filter *f, struct hyd_sync_sel *ret)
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
		struct sel_walk w = {cat, f, &path, 0, ret};

		r = walk(&w, root_ino);
	}
	free(path.b);
	if (r < 0)
		hyd_sync__sel_free(ret);
	return r;
}
