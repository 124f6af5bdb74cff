/*
 * tools/ferry_cache.c — which cache directory a path names: a ferry
 * mount (or any path inside one) names the cache it records in the mount
 * table's source field (HYD_FSNAME_PREFIX and the absolute directory), a
 * directory holding state.db or catalogs/ is one. For ferry status and
 * ferry trace.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

/* A cache directory holds state.db or catalogs/. */
static int is_cache_dir(const char *dir)
{
	char p[PATH_MAX + 16];
	struct stat sb;

	if (snprintf(p, sizeof(p), "%s/state.db", dir) < (int)sizeof(p) &&
	    stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
		return 1;
	return snprintf(p, sizeof(p), "%s/catalogs", dir) < (int)sizeof(p) &&
	       stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The mount holding a file of device dev: the last mountinfo line with
 * that major:minor (a later mount sits on top of an earlier one). */
struct mount_find {
	dev_t dev;
	int found;
	char point[PATH_MAX];
	char fstype[64];
	char source[PATH_MAX + sizeof(HYD_FSNAME_PREFIX)];
};

static int mount_find_one(void *ctx, const struct base_mount *m)
{
	struct mount_find *f = ctx;

	if (makedev(m->major, m->minor) != f->dev)
		return 0;
	f->found = 1;
	snprintf(f->point, sizeof(f->point), "%s", m->point);
	snprintf(f->fstype, sizeof(f->fstype), "%s", m->fstype);
	/* Too long to be a cache path of ours: recorded as none. */
	if (snprintf(f->source, sizeof(f->source), "%s", m->source) >=
	    (int)sizeof(f->source))
		f->source[0] = '\0';
	return 0;
}

/* The cache directory a ferry mount records as its source: HYD_FSNAME_PREFIX
 * and an absolute path (base_mountinfo_each undid the kernel's escapes).
 * 0, or -ENOENT when the source is not one. */
static int mount_cache(const struct mount_find *f, char *cache, size_t cap)
{
	size_t plen = strlen(HYD_FSNAME_PREFIX);
	const char *dir = f->source + plen;

	if (strncmp(f->source, HYD_FSNAME_PREFIX, plen) != 0 || dir[0] != '/' ||
	    strlen(dir) >= cap)
		return -ENOENT;
	memcpy(cache, dir, strlen(dir) + 1);
	return 0;
}

/* The one line for a path that stat or statvfs cannot look at: ENOTCONN
 * is a FUSE mount whose daemon is gone. */
static void path_error(const char *path, int err)
{
	if (err == ENOTCONN)
		base_error("a FUSE mount whose daemon is gone (unmount it with "
			   "fusermount3 -u) path=\"%s\"",
			   path);
	else
		base_log_err(BASE_LOG_ERROR, err, "cannot look at path=\"%s\"",
			     path);
}

/* The cache directory that path names or serves into cache. 0, or 1 after
 * one line on stderr saying why not. */
int ferry_find_cache(const char *path, char *cache, size_t cap)
{
	struct mount_find *f = NULL;
	char real[PATH_MAX];
	struct statvfs vfs;
	char *text = NULL;
	struct stat sb;
	int r, rc = 1;

	if (stat(path, &sb) < 0) {
		path_error(path, errno);
		return 1;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		base_error("out of memory");
		return 1;
	}
	f->dev = sb.st_dev;
	r = base_mountinfo_read(&text);
	if (r == 0)
		r = base_mountinfo_each(text, mount_find_one, f);
	if (r < 0)
		base_log_err(BASE_LOG_DEBUG, r, "no mount table");
	if (f->found && !strcmp(f->fstype, "fuse.ferry")) {
		/* stat may be answered from attributes the kernel cached
		 * while the daemon lived; statfs always asks it. */
		if (statvfs(path, &vfs) < 0) {
			path_error(path, errno);
			goto out;
		}
		if (mount_cache(f, cache, cap) == 0 && is_cache_dir(cache)) {
			rc = 0;
			goto out;
		}
		base_error("a ferry mount, but the cache directory it records "
			   "cannot be read (try ferry status CACHEDIR) "
			   "path=\"%s\" source=\"%s\"",
			   f->point, f->source);
		goto out;
	}
	if (S_ISDIR(sb.st_mode) && realpath(path, real) && is_cache_dir(real) &&
	    strlen(real) < cap) {
		memcpy(cache, real, strlen(real) + 1);
		rc = 0;
		goto out;
	}
	base_error("neither a ferry mount nor a ferry cache directory "
		   "path=\"%s\"",
		   path);
out:
	free(text);
	free(f);
	return rc;
}
