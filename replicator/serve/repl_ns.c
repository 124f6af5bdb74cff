/*
 * replicator/serve/repl_ns.c — namespaces of a running replicator: made, looked
 * up, removed, and the --namespaces file reread on SIGHUP.
 *
 * Lifetime. srv->ns holds pointers; a namespace is reference counted on
 * the loop thread: one reference while it is in srv->ns, one for each
 * request dispatched to it (repl_req.ns, dropped after the route's
 * on_free, so every worker job and stream of the request is over), one
 * for a queued or running scan job, one for its hash_async handle until
 * the handle's close callback. Removal (loop thread only) takes it out
 * of srv->ns first, so a request dispatched from then on gets the 404 of
 * an unknown name; then cancels its scan (the job still ends through
 * scan_done, which sees `gone`), stops its hasher (joined: no thread
 * touches it after), wakes its waiting manifest requests (they answer as
 * for a hasher that ended), closes the async handle, and drops the list's
 * reference. What is already dispatched keeps a valid namespace to
 * finish with: its source index, dirfd and worker pool go only with the
 * last reference. The state directory is never touched: a name added
 * again later starts from its HEAD (nothing unchanged is read again).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/serve/repl_serve_priv.h"

struct repl_ns *repl_server_ns(struct repl_server *srv, const char *name,
			       size_t len)
{
	size_t i;

	/* a linear walk: ~1 µs per request at 1,000 namespaces
	 * (docs/performance.md, Many namespaces) */
	for (i = 0; i < srv->n_ns; i++)
		if (strlen(srv->ns[i]->name) == len &&
		    memcmp(srv->ns[i]->name, name, len) == 0)
			return srv->ns[i];
	return NULL;
}

void repl_ns_ref(struct repl_ns *ns)
{
	ns->refs++;
}

static void ns_free(struct repl_ns *ns)
{
	repl_hasher_stop(ns->hasher);
	repl_chunk_pool_free(ns);
	uv_mutex_destroy(&ns->pool_lock);
	if (ns->dirfd >= 0)
		close(ns->dirfd);
	free(ns->dir);
	free(ns->state_dir);
	free(ns->srcindex_path);
	free(ns);
}

void repl_ns_unref(struct repl_ns *ns)
{
	if (!ns || --ns->refs > 0)
		return;
	ns_free(ns);
}

static void async_closed(uv_handle_t *h)
{
	repl_ns_unref(h->data);
}

void repl_ns_close_async(struct repl_ns *ns)
{
	if (!ns->hash_async_ready)
		return;
	ns->hash_async_ready = 0;
	uv_close((uv_handle_t *)&ns->hash_async, async_closed);
}

/* A new namespace with the list's reference (and the async's). */
static int ns_new(struct repl_server *srv, const char *name, const char *dir,
		  struct repl_ns **ret)
{
	struct repl_ns *ns = calloc(1, sizeof(*ns));
	int r;

	*ret = NULL;
	if (!ns) {
		base_error("out of memory ns=%s", name);
		return -ENOMEM;
	}
	snprintf(ns->name, sizeof(ns->name), "%s", name);
	ns->srv = srv;
	ns->dirfd = -1;
	ns->refs = 1;
	atomic_init(&ns->cancel, 0);
	uv_mutex_init(&ns->pool_lock);
	ns->dir = strdup(dir);
	ns->state_dir = base_path_fmt("%s/%s", srv->state_dir, name);
	if (!ns->dir || !ns->state_dir) {
		base_error("out of memory ns=%s", name);
		r = -ENOMEM;
		goto fail;
	}
	ns->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ns->dirfd < 0) {
		r = -errno;
		base_log_err(BASE_LOG_ERROR, -r,
			     "cannot open the source directory ns=%s "
			     "path=\"%s\"",
			     name, dir);
		goto fail;
	}
	if (uv_async_init(&srv->loop, &ns->hash_async, repl_ns_on_hash_async) <
	    0) {
		base_error("cannot start the event loop");
		r = -EIO;
		goto fail;
	}
	ns->hash_async.data = ns;
	ns->hash_async_ready = 1;
	ns->refs++;
	*ret = ns;
	return 0;
fail:
	repl_ns_unref(ns);
	return r;
}

int repl_ns_add(struct repl_server *srv, const char *name, const char *dir)
{
	struct repl_ns *ns;
	int r;

	if (srv->n_ns == srv->cap_ns) {
		size_t cap = srv->cap_ns ? 2 * srv->cap_ns : 16;
		struct repl_ns **v = realloc(srv->ns, cap * sizeof(*v));

		if (!v) {
			base_error("out of memory ns=%s", name);
			return -ENOMEM;
		}
		srv->ns = v;
		srv->cap_ns = cap;
	}
	r = ns_new(srv, name, dir, &ns);
	if (r < 0)
		return r;
	srv->ns[srv->n_ns++] = ns;
	return 0;
}

void repl_ns_remove(struct repl_server *srv, size_t i)
{
	struct repl_ns *ns = srv->ns[i];

	memmove(&srv->ns[i], &srv->ns[i + 1],
		(srv->n_ns - i - 1) * sizeof(*srv->ns));
	srv->n_ns--;
	ns->gone = 1;
	ns->scan_wanted = 0;
	atomic_store(&ns->cancel, 1);
	/* joined: no hasher thread signals the async after this */
	repl_hasher_stop(ns->hasher);
	ns->hasher = NULL;
	/* waiting manifest requests look once more and answer (503, as
	 * for a hasher that stopped); each holds ns through its request */
	repl_manifest_wake(ns);
	repl_ns_close_async(ns);
	base_debug("namespace removed ns=%s path=\"%s\"", ns->name, ns->dir);
	repl_ns_unref(ns);
}

/* Descriptors a namespace may hold besides connections: its directory
 * (O_PATH) always, and while it serves chunks a source index per worker
 * context (the file, its WAL and shared memory). */
#define FDS_PER_NS 4u
#define FDS_BASE 256u

void repl_ns_nofile_check(struct repl_server *srv)
{
	struct rlimit rl;
	uint64_t want = FDS_BASE + (uint64_t)FDS_PER_NS * srv->n_ns;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		base_warn("the open files limit is low for this many "
			  "namespaces, scans and chunk reads may fail with "
			  "EMFILE: raise it (ulimit -n, LimitNOFILE=) "
			  "namespaces=%zu nofile=%llu wanted=%llu",
			  srv->n_ns, (unsigned long long)rl.rlim_cur,
			  (unsigned long long)want);
}

/* The set the arguments and the file ask for now, into want (whose dirs
 * were checked). 0, or -errno after one error line. */
static int wanted(struct repl_server *srv, struct repl_ns_list *want)
{
	char err[512];
	int r = 0;

	if (repl_ns_list_copy(want, &srv->ns_args) < 0) {
		snprintf(err, sizeof(err), "out of memory");
		r = -ENOMEM;
	}
	if (r == 0)
		r = repl_ns_list_load(want, srv->ns_file, err, sizeof(err));
	if (r == 0)
		r = repl_ns_list_check_dirs(want, srv->ns_args.n, err,
					    sizeof(err));
	if (r < 0)
		base_error("namespaces file not reloaded, the namespaces "
			   "served stay path=\"%s\" why=\"%s\"",
			   srv->ns_file, err);
	return r;
}

int repl_ns_reload(struct repl_server *srv)
{
	struct repl_ns_list want = {0};
	size_t i, added = 0, removed = 0, kept = 0, failed = 0;
	int r;

	r = wanted(srv, &want);
	if (r < 0)
		goto out;
	/* removals first: a name whose DIR changed is added anew below */
	for (i = 0; i < srv->n_ns;) {
		struct repl_ns *ns = srv->ns[i];
		const struct repl_ns_spec *s =
		    repl_ns_list_find(&want, ns->name, strlen(ns->name));

		if (s && strcmp(s->dir, ns->dir) == 0) {
			i++;
			continue;
		}
		repl_ns_remove(srv, i);
		removed++;
	}
	kept = srv->n_ns;
	for (i = 0; i < want.n; i++) {
		const struct repl_ns_spec *s = &want.v[i];

		if (repl_server_ns(srv, s->name, strlen(s->name)))
			continue;
		if (repl_ns_add(srv, s->name, s->dir) < 0) {
			failed++; /* logged; the file's next reload tries again
				   */
			continue;
		}
		base_debug("namespace added ns=%s path=\"%s\"", s->name,
			   s->dir);
		added++;
	}
	base_info("namespaces reloaded path=\"%s\" added=%zu removed=%zu "
		  "kept=%zu failed=%zu namespaces=%zu",
		  srv->ns_file, added, removed, kept, failed, srv->n_ns);
	if (added)
		repl_ns_nofile_check(srv);
out:
	repl_ns_list_fini(&want);
	return r;
}

/* -- idle worker contexts -- */

struct sweep_job {
	uv_work_t w;
	struct repl_worker *list;
};

static void sweep_work(uv_work_t *w)
{
	struct sweep_job *j = w->data;

	repl_chunk_workers_free(j->list);
	j->list = NULL;
	/* the contexts were made on worker threads, in their malloc
	 * arenas: give the freed pages back (about 200 KB a context) */
	malloc_trim(0);
}

static void sweep_done(uv_work_t *w, int status)
{
	struct sweep_job *j = w->data;

	(void)status;
	repl_chunk_workers_free(j->list); /* cancelled: not run */
	free(j);
}

/* Close the source indexes namespaces idle for REPL_POOL_IDLE_S keep
 * open: with thousands of namespaces, each that ever served a chunk
 * would hold 3 descriptors per thread that read for it. */
static void on_pool_sweep(uv_timer_t *t)
{
	struct repl_server *srv = t->data;
	uint64_t now = base_now_ns();
	struct repl_worker *all = NULL;
	struct sweep_job *j;
	size_t i, n = 0;

	for (i = 0; i < srv->n_ns; i++) {
		struct repl_worker *w = repl_chunk_pool_take_idle(
		    srv->ns[i], now, REPL_POOL_IDLE_S * 1000000000ull);

		while (w) {
			struct repl_worker *next = w->next;

			w->next = all;
			all = w;
			w = next;
			n++;
		}
	}
	if (!all)
		return;
	base_debug("idle worker contexts closed contexts=%zu", n);
	j = calloc(1, sizeof(*j));
	if (j) {
		j->list = all;
		j->w.data = j;
		if (uv_queue_work(&srv->loop, &j->w, sweep_work, sweep_done) ==
		    0)
			return;
		free(j);
	}
	repl_chunk_workers_free(all); /* no worker: here, once */
}

void repl_pool_sweep_init(struct repl_server *srv)
{
	uv_timer_init(&srv->loop, &srv->pool_sweep);
	srv->pool_sweep.data = srv;
	srv->pool_sweep_ready = 1;
	uv_timer_start(&srv->pool_sweep, on_pool_sweep,
		       REPL_POOL_SWEEP_S * 1000ull,
		       REPL_POOL_SWEEP_S * 1000ull);
}

void repl_pool_sweep_close(struct repl_server *srv)
{
	if (!srv->pool_sweep_ready)
		return;
	srv->pool_sweep_ready = 0;
	uv_close((uv_handle_t *)&srv->pool_sweep, NULL);
}
