/*
 * replicator/repl_scan_file.c — what the scanner does inside one inode:
 * chunk a regular file's bytes into a manifest, and collect xattrs.
 *
 * The manifest is built completely before anything is written to the
 * catalog, because a file that changes while it is read must be re-read or
 * left out, and the catalog writer cannot take rows back. Past
 * REPL_MANIFEST_MEM entries it spills to an unlinked temp file, so a
 * terabyte file costs the same memory as a small one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "replicator/repl_scan_internal.h"

int repl_manifest_init(struct repl_manifest *m, const char *spill_dir)
{
	memset(m, 0, sizeof(*m));
	m->spill_fd = -1;
	m->v = malloc(REPL_MANIFEST_MEM * sizeof(*m->v));
	m->spill_dir = strdup(spill_dir);
	if (!m->v || !m->spill_dir) {
		repl_manifest_fini(m);
		return -ENOMEM;
	}
	return 0;
}

void repl_manifest_fini(struct repl_manifest *m)
{
	free(m->v);
	free(m->spill_dir);
	if (m->spill_fd >= 0)
		close(m->spill_fd);
	memset(m, 0, sizeof(*m));
	m->spill_fd = -1;
}

void repl_manifest_reset(struct repl_manifest *m)
{
	m->n = 0;
	if (m->spilled) {
		/* Keep the file for the next big one; only its bytes go. */
		if (ftruncate(m->spill_fd, 0) < 0 ||
		    lseek(m->spill_fd, 0, SEEK_SET) < 0) {
			close(m->spill_fd);
			m->spill_fd = -1;
		}
		m->spilled = 0;
	}
}

static int spill(struct repl_manifest *m)
{
	size_t len = m->n * sizeof(*m->v), done = 0;

	if (m->spill_fd < 0) {
		size_t n = strlen(m->spill_dir) + 32;
		char *tmpl = malloc(n);

		if (!tmpl)
			return -ENOMEM;
		snprintf(tmpl, n, "%s/.manifest-XXXXXX", m->spill_dir);
		m->spill_fd = mkostemp(tmpl, O_CLOEXEC);
		if (m->spill_fd < 0) {
			int e = -errno;

			free(tmpl);
			return e;
		}
		/* Anonymous from now on: nothing to clean up after a crash. */
		unlink(tmpl);
		free(tmpl);
	}
	while (done < len) {
		ssize_t w = write(m->spill_fd, (char *)m->v + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	m->spilled += m->n;
	m->n = 0;
	return 0;
}

int repl_manifest_add(struct repl_manifest *m, uint64_t off, uint32_t len,
		      const chunk_id *id)
{
	int r;

	if (m->n == REPL_MANIFEST_MEM) {
		r = spill(m);
		if (r < 0)
			return r;
	}
	m->v[m->n].off = off;
	m->v[m->n].len = len;
	m->v[m->n].id = *id;
	m->n++;
	return 0;
}

int repl_manifest_each(struct repl_manifest *m, repl_manifest_cb cb,
		       void *ctx)
{
	uint64_t left = m->spilled;
	size_t i;
	int r;

	if (left) {
		/* The in-memory tail is after the spilled head; read the head
		 * back through a small buffer so memory stays bounded. */
		struct cat_chunk buf[256];
		off_t pos = 0;

		while (left) {
			size_t want = left < 256 ? (size_t)left : 256;
			ssize_t got = pread(m->spill_fd, buf,
					    want * sizeof(buf[0]), pos);

			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				return -errno;
			if ((size_t)got != want * sizeof(buf[0]))
				return -EIO;
			for (i = 0; i < want; i++) {
				r = cb(ctx, &buf[i]);
				if (r < 0)
					return r;
			}
			pos += got;
			left -= want;
		}
	}
	for (i = 0; i < m->n; i++) {
		r = cb(ctx, &m->v[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

int repl_file_reader_init(struct repl_file_reader *fr, const chunk_params *p,
			  const atomic_int *cancel)
{
	fr->p = *p;
	fr->cancel = cancel;
	fr->cap = REPL_READ_WINDOW;
	if (fr->cap < 2 * (size_t)p->max)
		fr->cap = 2 * (size_t)p->max;
	fr->buf = malloc(fr->cap);
	return fr->buf ? 0 : -ENOMEM;
}

void repl_file_reader_fini(struct repl_file_reader *fr)
{
	free(fr->buf);
	fr->buf = NULL;
}

int repl_file_chunk(struct repl_file_reader *fr, int fd,
		    struct repl_manifest *m, uint64_t *ret_total)
{
	uint64_t base = 0; /* file offset of buf[0] */
	size_t have = 0, pos;
	int eof = 0, r;

	repl_manifest_reset(m);
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	while (!eof || have > 0) {
		/* Fill the window: the chunker must see min(remaining, max)
		 * bytes at every cut, so only stop short at EOF. */
		while (!eof && have < fr->cap) {
			ssize_t n = read(fd, fr->buf + have, fr->cap - have);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			if (n == 0)
				eof = 1;
			have += (size_t)n;
		}
		if (fr->cancel && atomic_load(fr->cancel))
			return -ECANCELED;
		pos = 0;
		while (have - pos >= fr->p.max || (eof && pos < have)) {
			size_t len = have - pos;
			size_t c;
			chunk_id id;

			if (len > fr->p.max)
				len = fr->p.max;
			c = chunker_next(&fr->p, fr->buf + pos, len);
			if (c == 0 || c > len)
				return -EIO; /* chunker contract broken */
			r = chunk_id_compute(fr->buf + pos, c, &id);
			if (r < 0)
				return r;
			r = repl_manifest_add(m, base + pos, (uint32_t)c, &id);
			if (r < 0)
				return r;
			pos += c;
		}
		/* Carry the unchunked tail (< max bytes) to the front. */
		memmove(fr->buf, fr->buf + pos, have - pos);
		base += pos;
		have -= pos;
	}
	*ret_total = base;
	return 0;
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

static ssize_t xlist(int fd, const char *path, char *buf, size_t cap)
{
	return fd >= 0 ? flistxattr(fd, buf, cap) : llistxattr(path, buf, cap);
}

static ssize_t xget(int fd, const char *path, const char *name, void *buf,
		    size_t cap)
{
	return fd >= 0 ? fgetxattr(fd, name, buf, cap)
		       : lgetxattr(path, name, buf, cap);
}

/* "none" for our purposes: the filesystem or the kernel says no xattrs
 * here, which is not a reason to leave the inode out. */
static int xattr_none(int e)
{
	return e == ENOTSUP || e == EPERM || e == EACCES;
}

static int add_one(struct repl_xattrs *x, int fd, const char *path,
		   const char *name)
{
	struct repl_xattr a = { 0 };
	int tries;

	for (tries = 0; tries < 4; tries++) {
		ssize_t n = xget(fd, path, name, NULL, 0);

		if (n < 0)
			return errno == ENODATA || xattr_none(errno) ? 0
								     : -errno;
		if ((size_t)n > CAT_XATTR_VALUE_MAX)
			return 0;
		free(a.value);
		a.value = malloc(n ? (size_t)n : 1);
		if (!a.value)
			return -ENOMEM;
		n = xget(fd, path, name, a.value, (size_t)n);
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

int repl_xattrs_collect(struct repl_xattrs *x, int fd, const char *path)
{
	char *list = NULL;
	ssize_t n = 0;
	size_t i;
	int tries, r = 0;

	repl_xattrs_clear(x);
	for (tries = 0; tries < 4; tries++) {
		n = xlist(fd, path, NULL, 0);
		if (n < 0) {
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
		n = xlist(fd, path, list, (size_t)n);
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
			r = add_one(x, fd, path, name);
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
