/*
 * replicator/source/repl_beneath.c — open a source file by the relative path
 * the source index keeps, never leaving the source directory and never
 * following a symlink on the way (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS, or one O_NOFOLLOW component at a time where openat2
 * is missing). Used by the chunk workers and the hasher.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "replicator/source/repl_scan_priv.h"

/* Fallback when openat2 is missing: one O_NOFOLLOW component at a time.
 * Our own index never holds "", "." or "..", but the walk refuses them. */
static int open_walk(int dirfd, const char *path)
{
	const char *p = path;
	int cur = dirfd, fd = -1;

	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		char comp[CAT_NAME_MAX + 1];

		if (cat_name_check(p, len) < 0) {
			errno = EINVAL;
			fd = -1;
			break;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		if (!slash) {
			fd = openat(cur, comp,
				    O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
					O_NONBLOCK | O_NOCTTY);
			break;
		}
		fd = openat(cur, comp,
			    O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cur != dirfd) {
			int e = errno;

			close(cur);
			errno = e;
		}
		if (fd < 0)
			return -1;
		cur = fd;
		fd = -1;
		p = slash + 1;
	}
	if (cur != dirfd) {
		int e = errno;

		close(cur);
		errno = e;
	}
	return fd;
}

int repl_open_beneath(int dirfd, const char *path)
{
	struct open_how how = {
	    .flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
	    .resolve =
		RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	/* ENAMETOOLONG: openat2 takes at most PATH_MAX; the walk does not. */
	if (fd < 0 &&
	    (errno == ENOSYS || errno == E2BIG || errno == ENAMETOOLONG))
		return open_walk(dirfd, path);
	return (int)fd;
}
