/*
 * hydrator/sync/hyd_backup.c — rsync's --backup, --backup-dir, --suffix:
 * a non-directory DEST has that the sync replaces or --delete removes is
 * renamed first, to NAME + SUFFIX beside it, or to BACKUP_DIR/PATH +
 * SUFFIX (its directories made as needed). Directories are never backed
 * up themselves: their files are, one by one, as they go. A rename only:
 * BACKUP_DIR must be on DEST's filesystem (a backup that cannot be made
 * fails the entry, which is then left as it was).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hydrator/sync/hyd_sync_priv.h"

int hyd_sync__backup(struct hyd_mat *m, int dirfd, const char *name,
		     const char *rel)
{
	const struct hyd_sync_backup *b = m->backup;
	char path[PATH_MAX], *slash;
	struct stat st;
	int r;

	if (!b || m->dry_run)
		return 0;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode))
		return 0;
	if (!b->dir) {
		if ((size_t)snprintf(path, sizeof(path), "%s%s", name,
				     b->suffix) > CAT_NAME_MAX)
			return -ENAMETOOLONG;
		r = renameat(dirfd, name, dirfd, path) < 0 ? -errno : 0;
	} else {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s%s", b->dir, rel,
				     b->suffix) >= sizeof(path))
			return -ENAMETOOLONG;
		slash = strrchr(path, '/');
		*slash = '\0';
		r = base_mkdir_p(path, 0777);
		*slash = '/';
		if (r == 0)
			r = renameat(dirfd, name, AT_FDCWD, path) < 0 ? -errno
								      : 0;
	}
	if (r < 0)
		return r;
	m->backups++;
	return 1;
}
