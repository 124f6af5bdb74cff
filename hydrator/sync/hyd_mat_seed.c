/*
 * hydrator/sync/hyd_mat_seed.c — the writer's side of --link-dest,
 * --copy-dest and --compare-dest, for a regular file DEST does not hold:
 * the first DIR in order whose DIR/PATH has the catalog's size and mtime
 * (rsync's quick check; the fetching side fetched nothing for such a
 * file, hyd_seed.c) decides, and its content is checked against the
 * manifest whatever the kind:
 *
 *   --compare-dest  checked whole, then nothing is written (rsync's: the
 *                   file is not transferred) when its attributes match
 *                   too (as for --link-dest), else copied; copied too
 *                   when the file has other names in the tree (their
 *                   links need a first name in DEST).
 *   --link-dest     checked whole, then a hard link to DIR/PATH when its
 *                   mode, owners (when set here) and the catalog's xattrs
 *                   match too, as rsync links only files "identical in
 *                   all preserved attributes"; else, or when the link
 *                   fails (another filesystem, too many links), copied.
 *   --copy-dest     copied: the writer reads DIR/PATH before the store
 *                   and verifies each chunk as it copies. A --seed DIR's
 *                   file is copied the same way (its chunks were not
 *                   stored: one read, one hash, no compression).
 *
 * A chunk of a copy that does not verify (the file changed since) is
 * taken from the store or fetched; a whole check that fails tries the
 * next DIR, then the file is written as usual.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hydrator/sync/hyd_mat_priv.h"

static int differ_cb(void *arg, const char *xname, int same, int missing)
{
	int *differ = arg;

	(void)xname;
	(void)missing;
	if (!same)
		*differ = 1;
	return !same;
}

/* Has fd's file (st) in's attributes, so a link to it (or leaving it
 * to --compare-dest) gives what writing would? */
static int same_attrs(struct walk *w, const struct cat_inode *in, int fd,
		      const struct stat *st)
{
	int owners = w->m->owners < 0 ? w->root : w->m->owners > 0;
	int differ = 0;

	if ((st->st_mode & 07777) != (in->mode & 07777))
		return 0;
	if (owners && (st->st_uid != in->uid || st->st_gid != in->gid))
		return 0;
	if (hyd_sync__xattrs_cmp(w->m->cat, in->ino, fd, NULL, differ_cb,
				 &differ) < 0)
		return 0;
	return !differ;
}

/* fd holds in's content (manifest checked chunk by chunk)? */
static int whole(struct walk *w, const struct cat_inode *in, int fd)
{
	hyd_mat__let_go(w); /* buf is scratch for the check */
	return hyd_sync__file_matches(w->m->cat, in->ino, in->size, fd, w->buf,
				      w->m->max_raw, &w->zero) == 1;
}

enum hyd_mat_seed hyd_mat__seed_plan(struct walk *w,
				     const struct hyd_dirent_copy *e,
				     char *path, size_t cap, int *ret_fd)
{
	const struct hyd_seed_dir *d;
	struct stat st;
	size_t i;
	int fd;

	*ret_fd = -1;
	if (!w->m->seeds || w->m->dry_run)
		return HYD_MAT_SEED_NONE;
	for (i = 0; i < w->m->nseeds; i++) {
		d = &w->m->seeds[i];
		if ((size_t)snprintf(path, cap, "%s/%s", d->path, w->path.b) >=
		    cap)
			continue;
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (uint64_t)st.st_size != e->in.size ||
		    hyd_sync__mtime_ns(&st) != e->in.mtime_ns) {
			close(fd);
			continue;
		}
		if (d->how == HYD_SEED_COPY || d->how == HYD_SEED_CHUNKS) {
			*ret_fd = fd;
			return HYD_MAT_SEED_COPY;
		}
		if (!whole(w, &e->in, fd)) {
			close(fd);
			continue;
		}
		*ret_fd = fd;
		if (!same_attrs(w, &e->in, fd, &st))
			return HYD_MAT_SEED_COPY;
		if (d->how == HYD_SEED_LINK)
			return HYD_MAT_SEED_LINK;
		if (e->in.nlink > 1)
			return HYD_MAT_SEED_COPY;
		close(fd);
		*ret_fd = -1;
		return HYD_MAT_SEED_COMPARED;
	}
	return HYD_MAT_SEED_NONE;
}
