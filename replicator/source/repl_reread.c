/*
 * replicator/source/repl_reread.c — a chunk read again from the source,
 * on any thread: source index lookup, open beneath DIR without following
 * any symlink, pread of exactly the recorded bytes, hash check, frame
 * encoding. The bytes are never handed out unless their SHA-256 matches
 * the id: a file changed since the scan is -EBADMSG (the server answers
 * 409; a publish stops). The hash is computed again unless the file is,
 * before and after the read, exactly what the walk saw when it hashed
 * those bytes (device, inode, size, mtime and ctime, which every write
 * moves), and had settled then (repl_srcindex_add_file): the same check
 * by which a new walk reuses a file's manifest without reading it. Every
 * hydrator hashes what it receives in any case.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_source.h"
#include "replicator/source/repl_srcindex.h"

void repl_chunk_worker_free(struct repl_worker *w)
{
	if (!w)
		return;
	repl_srcindex_close(w->idx);
	frame_coder_free(w->coder);
	free(w->raw);
	free(w);
}

int repl_chunk_worker_open(const char *srcindex_path, uint64_t gen,
			   struct repl_worker **ret)
{
	struct repl_worker *w;
	int r;

	*ret = NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->gen = gen;
	w->coder = frame_coder_new();
	r = w->coder ? repl_srcindex_open(srcindex_path, &w->idx) : -ENOMEM;
	if (r < 0) {
		repl_chunk_worker_free(w);
		return r;
	}
	*ret = w;
	return 0;
}

void repl_chunk_workers_free(struct repl_worker *w)
{
	struct repl_worker *n;

	for (; w; w = n) {
		n = w->next;
		repl_chunk_worker_free(w);
	}
}

void repl_chunk_res_fini(struct repl_chunk_res *res)
{
	free(res->frame);
	free(res->path);
	memset(res, 0, sizeof(*res));
}

/* An open or read failure that means "the source is not what we scanned". */
static int changed_errno(int e)
{
	return e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV ||
	       e == EINVAL || e == ENXIO;
}

static int64_t ns_of(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* Is st the file the walk saw? */
static int as_seen(const struct stat *st, const struct repl_src_loc *loc)
{
	const struct repl_src_todo *t = &loc->seen;

	return loc->has_seen && (uint64_t)st->st_dev == t->dev &&
	       (uint64_t)st->st_ino == t->sino &&
	       (uint64_t)st->st_size == t->size &&
	       ns_of(&st->st_mtim) == t->mtime_ns &&
	       ns_of(&st->st_ctim) == t->ctime_ns;
}

/* The chunk's bytes into w->raw; *ret_seen: the file was what the walk
 * saw all through the read. */
static int read_exact(struct repl_worker *w, int dirfd,
		      const struct repl_src_loc *loc, int *ret_seen)
{
	struct stat st;
	size_t got = 0;
	int fd, r = 0;

	if (loc->len > w->raw_cap) {
		uint8_t *n = realloc(w->raw, loc->len);

		if (!n)
			return -ENOMEM;
		w->raw = n;
		w->raw_cap = loc->len;
	}
	fd = repl_open_beneath(dirfd, loc->path);
	if (fd < 0)
		return changed_errno(errno) ? -EBADMSG : -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EBADMSG;
		goto out;
	}
	*ret_seen = as_seen(&st, loc);
	r = base_pread_full(fd, w->raw, loc->len, loc->off, &got);
	if (r == 0 && got < loc->len)
		r = -EBADMSG; /* short: the file shrank */
	if (r == 0 && *ret_seen)
		*ret_seen = fstat(fd, &st) == 0 && as_seen(&st, loc);
out:
	close(fd);
	return r;
}

int repl_chunk_frame(struct repl_worker *w, int dirfd, enum frame_policy policy,
		     const chunk_id *id, struct repl_chunk_res *res)
{
	struct repl_src_loc loc;
	size_t cap;
	int r, seen = 0;

	memset(res, 0, sizeof(*res));
	r = repl_srcindex_lookup(w->idx, id, &loc);
	if (r < 0)
		goto out;
	res->path = strndup(loc.path, loc.path_len);
	if (!res->path) {
		r = -ENOMEM;
		goto out;
	}
	r = read_exact(w, dirfd, &loc, &seen);
	if (r < 0)
		goto out;
	if (!seen || w->rehash) {
		res->hashed = 1;
		r = chunk_id_verify(id, w->raw, loc.len);
		if (r < 0)
			goto out;
	}
	cap = frame_bound(loc.len);
	res->frame = malloc(cap);
	if (!res->frame) {
		r = -ENOMEM;
		goto out;
	}
	r = frame_encode(w->coder, policy, 0, w->raw, loc.len, res->frame, cap,
			 &res->frame_len);
	if (r < 0) {
		/* a frame error is ours, not the source's: never 409 */
		r = r == -EBADMSG ? -EIO : r;
		goto out;
	}
	res->raw_len = loc.len;
out:
	if (r < 0) {
		free(res->frame);
		res->frame = NULL;
		res->frame_len = 0;
	}
	res->err = r;
	return r;
}
