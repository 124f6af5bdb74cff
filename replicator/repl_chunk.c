/*
 * replicator/repl_chunk.c — serving one chunk, on a worker thread: source
 * index lookup, open beneath DIR without following any symlink, pread of
 * exactly the recorded bytes, hash check, frame encoding.
 *
 * Nothing here runs on the loop thread, except repl_chunk_pool_free at
 * shutdown and the pool's switch and idle take (which only move
 * pointers under pool_lock). The bytes are never handed out unless their
 * SHA-256 matches the id: a file changed since the scan is -EBADMSG (the route
 * answers 409).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replicator/repl_publish_internal.h"
#include "replicator/repl_scan_internal.h"
#include "replicator/repl_server_internal.h"

static void worker_free(struct repl_worker *w)
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
		worker_free(w);
		return r;
	}
	*ret = w;
	return 0;
}

/* Take a context from the pool, or make one: the pool grows to the number
 * of threads that ever worked on this namespace at once. Every context in
 * the pool is of the served generation (ns->pool_gen): a rescan's switch
 * empties it, and a context of an older one is freed when it comes back. */
static int worker_get(struct repl_ns *ns, struct repl_worker **ret)
{
	struct repl_worker *w;
	char *path;
	uint64_t gen;
	int r;

	uv_mutex_lock(&ns->pool_lock);
	w = ns->pool;
	if (w)
		ns->pool = w->next;
	gen = ns->pool_gen;
	path = w ? NULL : strdup(ns->srcindex_path);
	uv_mutex_unlock(&ns->pool_lock);
	if (w) {
		*ret = w;
		return 0;
	}
	if (!path)
		return -ENOMEM;
	r = repl_chunk_worker_open(path, gen, ret);
	free(path);
	return r;
}

static void worker_put(struct repl_ns *ns, struct repl_worker *w)
{
	uint64_t now = base_now_ns();

	uv_mutex_lock(&ns->pool_lock);
	ns->pool_put_ns = now;
	if (w->gen == ns->pool_gen) {
		w->next = ns->pool;
		ns->pool = w;
		w = NULL;
	}
	uv_mutex_unlock(&ns->pool_lock);
	worker_free(w); /* of a generation no longer served */
}

void repl_chunk_pool_switch(struct repl_ns *ns, uint64_t gen, char *path)
{
	struct repl_worker *old, *n;
	char *old_path;

	uv_mutex_lock(&ns->pool_lock);
	old = ns->pool;
	old_path = ns->srcindex_path;
	ns->pool = NULL;
	ns->pool_gen = gen;
	ns->srcindex_path = path;
	uv_mutex_unlock(&ns->pool_lock);
	for (; old; old = n) {
		n = old->next;
		worker_free(old);
	}
	free(old_path);
}

struct repl_worker *repl_chunk_pool_take_idle(struct repl_ns *ns,
					      uint64_t now_ns, uint64_t idle_ns)
{
	struct repl_worker *w = NULL;

	uv_mutex_lock(&ns->pool_lock);
	if (ns->pool && now_ns - ns->pool_put_ns >= idle_ns) {
		w = ns->pool;
		ns->pool = NULL;
	}
	uv_mutex_unlock(&ns->pool_lock);
	return w;
}

void repl_chunk_workers_free(struct repl_worker *w)
{
	struct repl_worker *n;

	for (; w; w = n) {
		n = w->next;
		worker_free(w);
	}
}

void repl_chunk_pool_free(struct repl_ns *ns)
{
	struct repl_worker *w = ns->pool, *n;

	for (; w; w = n) {
		n = w->next;
		worker_free(w);
	}
	ns->pool = NULL;
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

static int read_exact(struct repl_worker *w, int dirfd,
		      const struct repl_src_loc *loc)
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
	r = base_pread_full(fd, w->raw, loc->len, loc->off, &got);
	if (r == 0 && got < loc->len)
		r = -EBADMSG; /* short: the file shrank */
out:
	close(fd);
	return r;
}

int repl_chunk_frame(struct repl_worker *w, int dirfd, enum frame_policy policy,
		     const chunk_id *id, struct repl_chunk_res *res)
{
	struct repl_src_loc loc;
	size_t cap;
	int r;

	memset(res, 0, sizeof(*res));
	r = repl_srcindex_lookup(w->idx, id, &loc);
	if (r < 0)
		goto out;
	res->path = strndup(loc.path, loc.path_len);
	if (!res->path) {
		r = -ENOMEM;
		goto out;
	}
	r = read_exact(w, dirfd, &loc);
	if (r < 0)
		goto out;
	r = chunk_id_verify(id, w->raw, loc.len);
	if (r < 0)
		goto out;
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

void repl_chunk_load(struct repl_ns *ns, enum frame_policy policy,
		     const chunk_id *id, struct repl_chunk_res *res)
{
	struct repl_worker *w = NULL;
	int r;

	memset(res, 0, sizeof(*res));
	r = worker_get(ns, &w);
	if (r < 0) {
		res->err = r;
		return;
	}
	repl_chunk_frame(w, ns->dirfd, policy, id, res);
	worker_put(ns, w);
}

int repl_chunk_check(struct repl_ns *ns, const chunk_id *ids, size_t n,
		     size_t *ret_bad)
{
	struct repl_worker *w = NULL;
	struct repl_src_loc loc;
	size_t i;
	int r;

	r = worker_get(ns, &w);
	if (r < 0)
		return r;
	for (i = 0; i < n; i++) {
		r = repl_srcindex_lookup(w->idx, &ids[i], &loc);
		if (r == -ENOENT) {
			*ret_bad = i;
			r = 1;
			break;
		}
		if (r < 0)
			break;
	}
	worker_put(ns, w);
	return r;
}

int repl_manifest_body(struct repl_ns *ns, uint64_t served, uint64_t gen,
		       int segment, uint64_t first, uint64_t last,
		       struct cat_buf *out)
{
	struct repl_worker *w = NULL;
	repl_srcindex *idx = NULL;
	char *path = NULL;
	int r;

	if (gen == served) {
		r = worker_get(ns, &w);
		if (r < 0)
			return r;
		if (w->gen != gen) { /* a rescan switched since */
			worker_put(ns, w);
			w = NULL;
		}
	}
	if (w) {
		idx = w->idx;
	} else {
		/* An older generation: what its hasher finished is still
		 * served; nothing hashes it any more. */
		path = repl__srcindex_path(ns->state_dir, gen);
		if (!path)
			return -ENOMEM;
		r = repl_srcindex_open(path, &idx);
		free(path);
		if (r < 0)
			return r == -EBADMSG ? r : -ENOENT;
	}
	r = segment ? repl_srcindex_segment_body(idx, gen, first, last, out)
		    : repl_srcindex_file_body(idx, gen, first, out);
	if (w)
		worker_put(ns, w);
	else
		repl_srcindex_close(idx);
	return r;
}
