/*
 * replicator/serve/repl_chunk_pool.c — a namespace's pool of chunk reading
 * contexts (source/repl_reread.c), and the work the routes run on it on a
 * worker thread: one chunk framed, a batch's ids checked, a manifests body
 * built.
 *
 * The pool grows to the number of threads that ever worked on the
 * namespace at once; every context in it is of the served generation. The
 * loop thread only moves pointers under pool_lock (a switch, the idle
 * sweep, shutdown).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/publish/repl_publish.h"
#include "replicator/source/repl_source.h"
#include "replicator/source/repl_srcindex.h"
#include "replicator/serve/repl_serve_priv.h"

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
	repl_chunk_worker_free(w); /* of a generation no longer served */
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
		repl_chunk_worker_free(old);
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

void repl_chunk_pool_free(struct repl_ns *ns)
{
	struct repl_worker *w = ns->pool, *n;

	for (; w; w = n) {
		n = w->next;
		repl_chunk_worker_free(w);
	}
	ns->pool = NULL;
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
	w->rehash = ns->srv->rehash;
	repl_chunk_frame(w, ns->dirfd, policy, id, res);
	worker_put(ns, w);
}

int repl_chunk_check(struct repl_ns *ns, const chunk_id *ids, size_t n,
		     size_t *ret_bad)
{
	struct repl_worker *w = NULL;
	int r;

	r = worker_get(ns, &w);
	if (r < 0)
		return r;
	r = repl_srcindex_known(w->idx, ids, n, ret_bad);
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
		path = repl_srcindex_path(ns->state_dir, gen);
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
