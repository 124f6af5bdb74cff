/*
 * catalog/cat_durable.c — the file-system discipline both sites follow to
 * make writes survive a crash: whole writes (retrying short writes and
 * EINTR), directories created along a path, and fsync of a directory after
 * a rename into it. One copy, so the replicator's publish, the hydrator's
 * store and its catalog download cannot drift apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/catalog.h"

int cat_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int cat_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int cat_mkdir_p(const char *path, mode_t mode)
{
	char *p = strdup(path);
	struct stat sb;
	size_t i, len;
	int r = 0;

	if (!p)
		return -ENOMEM;
	len = strlen(p);
	if (len == 0) {
		r = -EINVAL;
		goto out;
	}
	/* Create each prefix in turn; EEXIST is fine as long as the final
	 * thing is a directory (checked below). */
	for (i = 1; i <= len; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST) {
			r = -errno;
			goto out;
		}
		if (i < len)
			p[i] = '/';
	}
	if (stat(path, &sb) < 0)
		r = -errno;
	else if (!S_ISDIR(sb.st_mode))
		r = -ENOTDIR;
out:
	free(p);
	return r;
}

int cat_fsync_path(const char *path)
{
	/* O_RDONLY opens directories as well as files; fsync works on it. */
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

int cat_fsync_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int r;

	if (!slash)
		dir = strdup(".");
	else if (slash == path)
		dir = strdup("/");
	else
		dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return -ENOMEM;
	r = cat_fsync_path(dir);
	free(dir);
	return r;
}
