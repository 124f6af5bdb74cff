/*
 * catalog/base/base_file.c — the file-system discipline both sites follow:
 * whole writes and reads (retrying short ones and EINTR), small files read
 * whole or replaced durably (temp file, fsync, rename, fsync of the
 * directory), directories created along a path. One copy, so the
 * replicator's publish, the hydrator's store and its catalog download
 * cannot drift apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"

int base_write_all(int fd, const void *buf, size_t len)
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

int base_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
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

char *base_path_fmt(const char *fmt, ...)
{
	va_list ap;
	char *p;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	p = malloc((size_t)n + 1);
	if (!p)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return p;
}

int base_path_push(struct base_path *p, const char *name, size_t len,
		   size_t *ret_old)
{
	size_t need = p->len + 1 + len + 1;
	char *nb;

	*ret_old = p->len;
	if (need > p->cap) {
		size_t cap = p->cap ? p->cap : 256;

		while (cap < need)
			cap *= 2;
		nb = realloc(p->b, cap);
		if (!nb)
			return -ENOMEM;
		p->b = nb;
		p->cap = cap;
	}
	if (p->len)
		p->b[p->len++] = '/';
	memcpy(p->b + p->len, name, len);
	p->len += len;
	p->b[p->len] = '\0';
	return 0;
}

void base_path_pop(struct base_path *p, size_t old)
{
	p->len = old;
	if (p->b)
		p->b[old] = '\0';
}

int base_mkdir_p(const char *path, mode_t mode)
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

int base_fsync_path(const char *path)
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

int base_fsync_parent(const char *path)
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
	r = base_fsync_path(dir);
	free(dir);
	return r;
}

int base_pread_full(int fd, void *buf, size_t len, uint64_t off,
		    size_t *ret_got)
{
	uint8_t *p = buf;
	size_t got = 0;

	*ret_got = 0;
	while (got < len) {
		ssize_t n = pread(fd, p + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*ret_got = got;
	return 0;
}

int base_file_read_small(const char *path, char *buf, size_t cap,
			 size_t *ret_len)
{
	size_t have = 0;
	int fd, r = 0;

	if (ret_len)
		*ret_len = 0;
	if (cap < 2)
		return -EINVAL;
	buf[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = read(fd, buf + have, cap - 1 - have);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		have += (size_t)n;
		/* Filling the room means it may not have been all of it:
		 * anything that large is not one of our small files. */
		if (have == cap - 1) {
			r = -EFBIG;
			break;
		}
	}
	close(fd);
	if (r < 0) {
		buf[0] = '\0';
		return r;
	}
	buf[have] = '\0';
	if (ret_len)
		*ret_len = have;
	return 0;
}

/* "path.tmp" (a stale one removed, then O_EXCL) with mode (less the
 * umask, unless exact), data written and fsynced, closed; its name in
 * *ret_tmp (the caller frees it), none left on failure. */
static int write_tmp(const char *path, const void *data, size_t len,
		     mode_t mode, int exact, char **ret_tmp)
{
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 5);
	int fd = -1, r;

	if (!tmp)
		return -ENOMEM;
	memcpy(tmp, path, plen);
	memcpy(tmp + plen, ".tmp", 5);
	if (unlink(tmp) < 0 && errno != ENOENT) {
		free(tmp);
		return -errno;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0) {
		r = -errno;
		free(tmp);
		return r;
	}
	r = exact && fchmod(fd, mode) < 0 ? -errno : 0;
	if (r == 0)
		r = base_write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		free(tmp);
		return r;
	}
	*ret_tmp = tmp;
	return 0;
}

/* write_tmp, then put it at path: rename (replacing; mode less the
 * umask) or link (never replacing: -EEXIST; mode exactly); the directory
 * fsynced. */
static int write_into_place(const char *path, const void *data, size_t len,
			    mode_t mode, int replace)
{
	char *tmp = NULL;
	int r = write_tmp(path, data, len, mode, !replace, &tmp);

	if (r < 0)
		return r;
	if (replace)
		r = rename(tmp, path) < 0 ? -errno : 0;
	else
		r = link(tmp, path) < 0 ? -errno : 0;
	if (r == 0)
		r = base_fsync_parent(path);
	if (r < 0 || !replace)
		unlink(tmp);
	free(tmp);
	return r;
}

int base_file_write_atomic(const char *path, const void *data, size_t len,
			   mode_t mode)
{
	return write_into_place(path, data, len, mode, 1);
}

int base_file_write_new(const char *path, const void *data, size_t len,
			mode_t mode)
{
	return write_into_place(path, data, len, mode, 0);
}
