/*
 * replicator/source/repl_xattrs.c — collect one inode's extended attributes for
 * the scanner, through an open fd, a path, or (dirfd, name).
 *
 * The (dirfd, name) form is what the walk uses for inodes it does not
 * otherwise open: Linux 6.13's listxattrat/getxattrat with
 * AT_SYMLINK_NOFOLLOW, two syscalls cheaper per inode than open, flistxattr
 * and close. Older kernels (ENOSYS) and sandboxes that refuse the calls
 * (EPERM) get the same answer through /proc/self/fd/DIRFD/NAME with the
 * l* calls, which resolve the directory fd and stop at the entry itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "replicator/source/repl_scan_priv.h"

/* The generic syscall table numbers them alike on every architecture
 * since 5.x's unification; glibc 2.36 has neither wrapper nor number. */
#ifndef SYS_listxattrat
#define SYS_listxattrat 465
#endif
#ifndef SYS_getxattrat
#define SYS_getxattrat 464
#endif

/* getxattrat's argument block (linux/xattr.h, XATTR_ARGS_SIZE_VER0). */
struct at_xattr_args {
	uint64_t value;
	uint32_t size;
	uint32_t flags;
};

/* 1 once the *at calls were refused: every later inode takes /proc. */
static atomic_int at_missing;

/* Where one inode's xattrs are read from: fd, else path, else (dfd, name). */
struct xsrc {
	int fd;
	const char *path;
	int dfd;
	const char *name;
};

static int at_refused(int e)
{
	return e == ENOSYS || e == EPERM;
}

static ssize_t xlist(const struct xsrc *s, char *buf, size_t cap)
{
	long n;

	if (s->fd >= 0)
		return flistxattr(s->fd, buf, cap);
	if (s->path)
		return llistxattr(s->path, buf, cap);
	n = syscall(SYS_listxattrat, s->dfd, s->name, AT_SYMLINK_NOFOLLOW, buf,
		    cap);
	return (ssize_t)n;
}

static ssize_t xget(const struct xsrc *s, const char *name, void *buf,
		    size_t cap)
{
	struct at_xattr_args a = {
	    .value = (uint64_t)(uintptr_t)buf,
	    .size = (uint32_t)cap,
	};

	if (s->fd >= 0)
		return fgetxattr(s->fd, name, buf, cap);
	if (s->path)
		return lgetxattr(s->path, name, buf, cap);
	if (cap > UINT32_MAX) {
		errno = ERANGE;
		return -1;
	}
	return (ssize_t)syscall(SYS_getxattrat, s->dfd, s->name,
				AT_SYMLINK_NOFOLLOW, name, &a, sizeof(a));
}

void repl_xattrs_clear(struct repl_xattrs *x)
{
	size_t i;

	for (i = 0; i < x->n; i++) {
		free(x->v[i].name);
		free(x->v[i].value);
	}
	free(x->v);
	memset(x, 0, sizeof(*x));
}

/* "none" for our purposes: the filesystem or the kernel says no xattrs
 * here, which is not a reason to leave the inode out. */
static int xattr_none(int e)
{
	return e == ENOTSUP || e == EPERM || e == EACCES;
}

static int add_one(struct repl_xattrs *x, const struct xsrc *s,
		   const char *name)
{
	struct repl_xattr a = {0};
	int tries;

	for (tries = 0; tries < 4; tries++) {
		ssize_t n = xget(s, name, NULL, 0);

		if (n < 0)
			return errno == ENODATA || xattr_none(errno) ? 0
								     : -errno;
		if ((size_t)n > CAT_XATTR_VALUE_MAX)
			return 0;
		free(a.value);
		a.value = malloc(n ? (size_t)n : 1);
		if (!a.value)
			return -ENOMEM;
		n = xget(s, name, a.value, (size_t)n);
		if (n < 0 && errno == ERANGE)
			continue; /* grew in between: ask again */
		if (n < 0) {
			int e = errno;

			free(a.value);
			return e == ENODATA || xattr_none(e) ? 0 : -e;
		}
		a.value_len = (size_t)n;
		break;
	}
	if (tries == 4) {
		free(a.value);
		return 0;
	}
	if (x->n == x->cap) {
		size_t nc = x->cap ? 2 * x->cap : 4;
		struct repl_xattr *nv = realloc(x->v, nc * sizeof(*nv));

		if (!nv) {
			free(a.value);
			return -ENOMEM;
		}
		x->v = nv;
		x->cap = nc;
	}
	a.name = strdup(name);
	if (!a.name) {
		free(a.value);
		return -ENOMEM;
	}
	x->v[x->n++] = a;
	return 0;
}

/* The list, then each name's value. *refused is set when the first call
 * was a *at call the kernel does not offer (nothing collected). */
static int collect(struct repl_xattrs *x, const struct xsrc *s, int *refused)
{
	char *list = NULL;
	ssize_t n = 0;
	size_t i;
	int tries, r = 0;

	repl_xattrs_clear(x);
	for (tries = 0; tries < 4; tries++) {
		n = xlist(s, NULL, 0);
		if (n < 0) {
			if (tries == 0 && s->fd < 0 && !s->path &&
			    at_refused(errno)) {
				*refused = 1;
				goto out;
			}
			r = xattr_none(errno) ? 0 : -errno;
			goto out;
		}
		if (n == 0)
			goto out;
		free(list);
		list = malloc((size_t)n);
		if (!list) {
			r = -ENOMEM;
			goto out;
		}
		n = xlist(s, list, (size_t)n);
		if (n >= 0)
			break;
		if (errno != ERANGE) {
			r = xattr_none(errno) ? 0 : -errno;
			goto out;
		}
	}
	if (n < 0)
		goto out; /* kept growing; give up on xattrs, keep the inode */
	for (i = 0; i < (size_t)n;) {
		const char *name = list + i;
		size_t len = strnlen(name, (size_t)n - i);

		if (i + len >= (size_t)n)
			break; /* unterminated: the kernel never does this */
		if (cat_xattr_name_check(name, len) == 0) {
			r = add_one(x, s, name);
			if (r < 0)
				goto out;
		}
		i += len + 1;
	}
out:
	free(list);
	if (r < 0)
		repl_xattrs_clear(x);
	return r;
}

int repl_xattrs_collect(struct repl_xattrs *x, int fd, const char *path)
{
	struct xsrc s = {.fd = fd, .path = fd >= 0 ? NULL : path, .dfd = -1};
	int refused = 0;

	return collect(x, &s, &refused);
}

int repl_xattrs_collect_at(struct repl_xattrs *x, int dfd, const char *name)
{
	char proc[64 + CAT_NAME_MAX];
	struct xsrc s = {.fd = -1, .dfd = dfd, .name = name};
	int refused = 0, r;

	if (!atomic_load_explicit(&at_missing, memory_order_relaxed)) {
		r = collect(x, &s, &refused);
		if (!refused)
			return r;
		atomic_store_explicit(&at_missing, 1, memory_order_relaxed);
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", dfd, name);
	return repl_xattrs_collect(x, -1, proc);
}

void repl_xattrs_use_proc(int on)
{
	atomic_store(&at_missing, on);
}
