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

#include "hydrator/sync/hyd_sync_internal.h"

#define BATCH 128u

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

/* The regular files below dir (whose path is path) that the rules keep. */
static int walk(cat_reader *cat, const hyd_filter *f, uint64_t dir,
		struct hyd_pathbuf *path, unsigned depth,
		struct hyd_sync_sel *s)
{
	struct hyd_dirbatch b = {.cap = BATCH};
	uint64_t pos = 0;
	size_t i, old;
	int r;

	if (depth >= HYD_SYNC_DEPTH_MAX)
		return 0; /* the writer names it */
	b.e = malloc(BATCH * sizeof(*b.e));
	if (!b.e)
		return -ENOMEM;
	for (;;) {
		b.n = 0;
		b.last_pos = pos;
		r = cat_readdir(cat, dir, pos, hyd_sync__batch_cb, &b);
		if (r < 0)
			break;
		for (i = 0; i < b.n; i++) {
			const struct hyd_dirent_copy *e = &b.e[i];
			int r2;

			if (hyd_sync__path_push(path, e->name, e->len, &old)) {
				r = -ENOMEM;
				break;
			}
			r2 = 0;
			if (!hyd_filter_excluded(f, path->b,
						 e->in.kind == CAT_DIR, 0)) {
				if (e->in.kind == CAT_DIR)
					r2 = walk(cat, f, e->in.ino, path,
						  depth + 1, s);
				else if (e->in.kind == CAT_REG)
					r2 = sel_set(s, e->in.ino);
			}
			hyd_sync__path_pop(path, old);
			if (r2 < 0) {
				r = r2;
				break;
			}
		}
		if (r <= 0)
			break;
		pos = b.last_pos;
	}
	free(b.e);
	return r < 0 ? r : 0;
}

int hyd_sync__select(cat_reader *cat, uint64_t root_ino, const char *root_name,
		     const hyd_filter *f, struct hyd_sync_sel *ret)
{
	struct hyd_pathbuf path = {0};
	size_t old;
	int r;

	memset(ret, 0, sizeof(*ret));
	ret->active = 1;
	r = hyd_sync__path_push(&path, "", 0, &old);
	if (r == 0 && root_name)
		r = hyd_sync__path_push(&path, root_name, strlen(root_name),
					&old);
	if (r == 0 && !(root_name && hyd_filter_excluded(f, path.b, 1, 0)))
		r = walk(cat, f, root_ino, &path, 0, ret);
	free(path.b);
	if (r < 0)
		hyd_sync__sel_free(ret);
	return r;
}
