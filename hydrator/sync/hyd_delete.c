/*
 * hydrator/sync/hyd_delete.c — `ferry sync --delete`: remove from a DEST
 * directory what the catalog's directory does not have, as rsync's
 * --delete does. The writer calls it for each directory after the whole
 * tree is written (rsync's --delete-after), so one failed entry anywhere
 * can still stop every deletion (hyd_materialize.c, delete_pass).
 *
 * Safety: every removal is relative to an open directory fd, one level at
 * a time, with O_NOFOLLOW|O_DIRECTORY for directories, so a symlink in
 * DEST is removed as a link and never followed. A directory goes only
 * once everything in it went: an entry the filter protects keeps its
 * directory (one warning, as rsync's "cannot delete non-empty
 * directory"). The writer's own temp names (HYD_SYNC_TMP_PREFIX) are not
 * touched here; the writer removes stale ones itself.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define NAMES_MIN 16

/* The names of the directory fd, but "." and "..": malloc'd strings in a
 * malloc'd array (*ret_n of them). */
static int list_names(int fd, char ***ret, size_t *ret_n)
{
	struct dirent *de;
	char **v = NULL;
	size_t n = 0, cap = 0;
	DIR *d;
	int dfd = dup(fd), r = 0;

	*ret = NULL;
	*ret_n = 0;
	if (dfd < 0)
		return -errno;
	d = fdopendir(dfd);
	if (!d) {
		r = -errno;
		close(dfd);
		return r;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : NAMES_MIN;
			char **nv = realloc(v, nc * sizeof(*v));

			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
			cap = nc;
		}
		v[n] = strdup(de->d_name);
		if (!v[n]) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (r < 0) {
		while (n)
			free(v[--n]);
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);

	if (!p)
		return NULL;
	if (a) {
		memcpy(p, dir, a);
		p[a++] = '/';
	}
	memcpy(p + a, name, b + 1);
	return p;
}

/* Remove name (at rel) from dirfd, a directory with everything in it.
 * self: hand the entry itself to hyd_item_emit (its contents always go
 * there; rsync does not name a directory it removes to make way).
 * Returns 1 when it went (or would), 0 when something in it is
 * protected, -errno. */
static int remove_entry(struct hyd_mat *m, int dirfd, const char *name,
			const char *rel, uint64_t *count, int self)
{
	struct stat st;
	char **names = NULL;
	size_t n = 0;
	uint64_t backups;
	int fd, r, kept = 0;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 1 : -errno;
	if (!S_ISDIR(st.st_mode)) {
		hyd_item_emit(m, "*deleting", rel, 0, NULL, NULL);
		/* --backup: renamed instead */
		r = hyd_sync__backup(m, dirfd, name, rel);
		if (r < 0)
			return r;
		if (r == 0 && !m->dry_run && unlinkat(dirfd, name, 0) < 0 &&
		    errno != ENOENT)
			return -errno;
		(*count)++;
		return 1;
	}
	backups = m->backups;
	fd = openat(dirfd, name,
		    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = list_names(fd, &names, &n);
	for (size_t i = 0; r == 0 && i < n; i++) {
		char *sub = join(rel, names[i]);
		struct stat cs;
		int c;

		if (!sub) {
			r = -ENOMEM;
			break;
		}
		c = fstatat(fd, names[i], &cs, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(cs.st_mode);
		/* perishable rules do not keep a directory that goes */
		if (hyd_filter_excluded(m->filter, sub, c, 2)) {
			kept = 1;
		} else {
			c = remove_entry(m, fd, names[i], sub, count, 1);
			if (c < 0)
				r = c;
			else if (c == 0)
				kept = 1;
		}
		free(sub);
	}
	free_names(names, n);
	close(fd);
	if (r < 0)
		return r;
	/* --backup without --backup-dir left NAME~ files in it */
	if (m->backup && !m->backup->dir && m->backups != backups)
		kept = 1;
	if (kept) {
		base_warn("cannot delete non-empty directory: %s/%s (it holds "
			  "protected entries or backups)",
			  m->dest, rel);
		return 0;
	}
	if (self)
		hyd_item_emit(m, "*deleting", rel, 1, NULL, NULL);
	if (!m->dry_run && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 &&
	    errno != ENOENT)
		return -errno;
	(*count)++;
	return 1;
}

uint64_t hyd_sync__delete_extra(struct hyd_mat *m, int fd, uint64_t dir_ino,
				const char *path)
{
	struct cat_inode in;
	char **names = NULL;
	uint64_t count = 0;
	size_t n = 0;
	int r;

	r = list_names(fd, &names, &n);
	if (r < 0) {
		base_log_err(BASE_LOG_WARN, r,
			     "cannot list a directory to delete from "
			     "path=\"%s/%s\"",
			     m->dest, path);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		const char *name = names[i];
		struct stat st;
		char *rel;
		int is_dir;

		if (!strncmp(name, HYD_SYNC_TMP_PREFIX,
			     sizeof(HYD_SYNC_TMP_PREFIX) - 1))
			continue;
		rel = join(path, name);
		if (!rel)
			break;
		/* In the catalog and transferred: the walk updates it (no
		 * stat needed: most names are this). */
		if (cat_lookup(m->cat, dir_ino, name, strlen(name), &in) == 0 &&
		    !hyd_filter_excluded(m->filter, rel, in.kind == CAT_DIR,
					 0)) {
			free(rel);
			continue;
		}
		is_dir = fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			 S_ISDIR(st.st_mode);
		if (!hyd_filter_excluded(m->filter, rel, is_dir, 1)) {
			r = remove_entry(m, fd, name, rel, &count, 1);
			if (r < 0)
				base_log_err(BASE_LOG_WARN, r,
					     "cannot delete path=\"%s/%s\"",
					     m->dest, rel);
		}
		free(rel);
	}
	free_names(names, n);
	return count;
}

int hyd_sync__make_way(struct hyd_mat *m, int dirfd, const char *name,
		       const char *rel)
{
	struct stat st;
	uint64_t count = 0;
	int r;

	if (!m->delete_extra || dirfd < 0 ||
	    fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISDIR(st.st_mode))
		return 0;
	if (hyd_filter_excluded(m->filter, rel, 1, 1))
		return 0; /* protected: the write reports it in the way */
	r = remove_entry(m, dirfd, name, rel, &count, 0);
	m->res->deleted += count;
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "cannot delete the directory in the way "
			     "path=\"%s/%s\"",
			     m->dest, rel);
	return r;
}
