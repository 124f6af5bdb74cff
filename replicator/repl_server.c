/*
 * replicator/repl_server.c — the replicator's life: listen first, then scan
 * the namespaces one after the other on a worker (each turns READY when
 * its generation is published), serve until SIGINT/SIGTERM, then close
 * everything and free it.
 *
 * Listening before scanning lets clients and health checks see the server
 * at once (503 while scanning) and makes a port clash fail fast, before
 * minutes of scanning.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "replicator/repl_hasher_internal.h"
#include "replicator/repl_http_internal.h"
#include "replicator/repl_publish_internal.h"
#include "replicator/repl_server_internal.h"

struct repl_ns *repl_server_ns(struct repl_server *srv, const char *name,
			       size_t len)
{
	size_t i;

	for (i = 0; i < srv->n_ns; i++)
		if (strlen(srv->ns[i].name) == len &&
		    memcmp(srv->ns[i].name, name, len) == 0)
			return &srv->ns[i];
	return NULL;
}

/* Scan warnings, on a scanning thread: one line each. rel is raw bytes;
 * the logger shows whatever is not valid UTF-8 as \xNN, so a hostile file
 * name cannot break the line. */
static void scan_warn(void *ctx, const char *rel, size_t rel_len, int err,
		      const char *why)
{
	struct repl_ns *ns = ctx;
	int len = rel_len > 4096 ? 4096 : (int)rel_len;

	if (why)
		base_warn("left out of the scan ns=%s path=\"%s%s%.*s\" "
			  "why=\"%s\"",
			  ns->name, ns->dir, len ? "/" : "", len, rel, why);
	else
		base_log_err(BASE_LOG_WARN, err,
			     "left out of the scan ns=%s path=\"%s%s%.*s\"",
			     ns->name, ns->dir, len ? "/" : "", len, rel);
}

static void scan_work(uv_work_t *w)
{
	struct repl_ns *ns = w->data;
	struct repl_scan_opts o = {
	    .cancel = &ns->srv->cancel,
	    .defer = !ns->srv->hash_first,
	    .warn = scan_warn,
	    .ctx = ns,
	    .threads = ns->srv->scan_threads,
	};

	ns->scan_rc =
	    repl_generation_build(ns->state_dir, ns->dir, &o, &ns->gen);
}

static void scan_next(struct repl_server *srv);

/* A hasher worker recorded a file (any thread). */
static void hash_progress(void *ctx)
{
	struct repl_ns *ns = ctx;

	uv_async_send(&ns->hash_async);
}

static void hash_log_end(struct repl_ns *ns)
{
	const struct repl_hasher_stats *h = &ns->hash;
	double secs = (double)(h->ended_ns - h->started_ns) / 1e9;

	if (h->err || h->files_total == 0)
		return; /* it said why it stopped; or there was nothing */
	base_info("namespace hashed ns=%s generation=%" PRIu64 " files=%" PRIu64
		  " bytes=%" PRIu64 " changed=%" PRIu64 " bytes_read=%" PRIu64
		  " unique=%" PRIu64 " seconds=%.1f",
		  ns->name, ns->generation, h->files_done, h->bytes_done,
		  h->changed, h->bytes_read, h->unique, secs);
}

/* Loop thread: the hasher made progress or ended. */
static void on_hash_async(uv_async_t *a)
{
	struct repl_ns *ns = a->data;

	if (ns->hasher && repl_hasher_finished(ns->hasher)) {
		repl_hasher_stats(ns->hasher, &ns->hash);
		ns->hash_known = 1;
		repl_hasher_stop(ns->hasher); /* its threads have ended */
		ns->hasher = NULL;
		hash_log_end(ns);
	}
	repl_manifest_wake(ns);
}

/* Start hashing what the served generation left pending. */
static void hash_start(struct repl_ns *ns)
{
	struct repl_server *srv = ns->srv;
	struct repl_hasher_opts ho = {
	    .name = ns->name,
	    .dir = ns->dir,
	    .dirfd = ns->dirfd,
	    .srcindex_path = ns->srcindex_path,
	    .params = ns->gen.stats.params,
	    .threads = srv->scan_threads,
	    .progress = hash_progress,
	    .ctx = ns,
	    .delay_ms = srv->hash_delay_ms,
	    .opened = srv->hash_opened,
	    .opened_ctx = srv->hash_opened_ctx,
	};
	char *spill = repl__path_fmt("%s/source", ns->state_dir);
	int r;

	if (!spill) {
		base_error("out of memory ns=%s", ns->name);
		return;
	}
	if (ho.threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		ho.threads = n < 1 ? 1 : (unsigned)n;
	}
	ho.spill_dir = spill;
	r = repl_hasher_start(&ho, &ns->hasher);
	free(spill);
	/* an index of an older format has nothing deferred */
	if (r == -EBADMSG || r == -ENOENT)
		return;
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot start hashing ns=%s generation=%" PRIu64,
			     ns->name, ns->generation);
		return;
	}
	if (repl_hasher_finished(ns->hasher))
		on_hash_async(&ns->hash_async);
}

/* Stop the hasher and let go of waiting requests (shutdown). */
static void hash_stop(struct repl_ns *ns)
{
	repl_hasher_stop(ns->hasher);
	ns->hasher = NULL;
	repl_manifest_waiters_close(ns);
}

static void scan_done(uv_work_t *w, int status)
{
	struct repl_ns *ns = w->data;
	struct repl_server *srv = ns->srv;
	const struct repl_scan_stats *st = &ns->gen.stats;
	int rc = status < 0 ? status : ns->scan_rc;

	if (rc == -ECANCELED || srv->stopping) {
		ns->state = REPL_NS_FAILED;
		return;
	}
	if (rc < 0) {
		ns->state = REPL_NS_FAILED;
		base_log_err(BASE_LOG_ERROR, rc,
			     "scan failed ns=%s path=\"%s\"", ns->name,
			     ns->dir);
		scan_next(srv);
		return;
	}
	ns->srcindex_path =
	    repl__srcindex_path(ns->state_dir, ns->gen.generation);
	if (!ns->srcindex_path) {
		ns->state = REPL_NS_FAILED;
		base_error("out of memory ns=%s", ns->name);
		scan_next(srv);
		return;
	}
	ns->generation = ns->gen.generation;
	ns->state = REPL_NS_READY;
	/* tests and scripts wait for one " ready" per namespace */
	base_info("namespace ready ns=%s generation=%" PRIu64 " files=%" PRIu64
		  " dirs=%" PRIu64 " bytes=%" PRIu64 " chunks=%" PRIu64
		  " unique=%" PRIu64 " reused=%" PRIu64 " bytes_read=%" PRIu64
		  " pending=%" PRIu64 " bytes_pending=%" PRIu64
		  " unchanged=%d seconds=%.1f",
		  ns->name, ns->generation, st->files, st->dirs, st->bytes,
		  st->chunks, st->unique, st->reused, st->bytes_read,
		  st->pending, st->bytes_pending, ns->gen.unchanged,
		  ns->gen.seconds);
	hash_start(ns);
	scan_next(srv);
}

static void scan_next(struct repl_server *srv)
{
	struct repl_ns *ns;

	if (srv->stopping || srv->scan_next >= srv->n_ns)
		return;
	ns = &srv->ns[srv->scan_next++];
	ns->scan_work.data = ns;
	if (uv_queue_work(&srv->loop, &ns->scan_work, scan_work, scan_done) <
	    0) {
		ns->state = REPL_NS_FAILED;
		scan_next(srv);
	}
}

static void on_signal(uv_signal_t *s, int signum)
{
	struct repl_server *srv = s->data;

	if (srv->stopping)
		return;
	srv->stopping = 1;
	atomic_store(&srv->cancel, 1);
	base_info("shutting down signal=SIG%s", sigabbrev_np(signum));
	for (size_t i = 0; i < srv->n_ns; i++) {
		hash_stop(&srv->ns[i]);
		/* the loop ends when its last handle closes */
		if (srv->ns[i].hash_async_ready)
			uv_close((uv_handle_t *)&srv->ns[i].hash_async, NULL);
		srv->ns[i].hash_async_ready = 0;
	}
	uv_close((uv_handle_t *)&srv->listener, NULL);
	uv_close((uv_handle_t *)&srv->sig_int, NULL);
	uv_close((uv_handle_t *)&srv->sig_term, NULL);
	repl_http_close_all(srv);
}

/* HOST:PORT or [V6]:PORT into a sockaddr (numeric or resolvable host). */
static int parse_listen(const char *s, struct sockaddr_storage *ret)
{
	char host[256];
	const char *colon = strrchr(s, ':');
	struct addrinfo hints = {0}, *ai = NULL;
	uint64_t port;
	size_t hl;

	if (!colon || colon == s)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (s[0] == '[') {
		if (hl < 3 || s[hl - 1] != ']')
			return -EINVAL;
		s++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (base_parse_u64(colon + 1, 0, 65535, &port) < 0)
		return -EINVAL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(host, NULL, &hints, &ai) != 0 || !ai)
		return -EADDRNOTAVAIL;
	memset(ret, 0, sizeof(*ret));
	memcpy(ret, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (ret->ss_family == AF_INET)
		((struct sockaddr_in *)ret)->sin_port = htons((uint16_t)port);
	else if (ret->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ret)->sin6_port = htons((uint16_t)port);
	else
		return -EINVAL;
	return 0;
}

static int ns_init(struct repl_server *srv, struct repl_ns *ns,
		   const char *name, const char *dir, const char *state_dir)
{
	snprintf(ns->name, sizeof(ns->name), "%s", name);
	ns->srv = srv;
	ns->dirfd = -1;
	uv_mutex_init(&ns->pool_lock);
	ns->dir = strdup(dir);
	ns->state_dir = repl__path_fmt("%s/%s", state_dir, name);
	if (!ns->dir || !ns->state_dir) {
		base_error("out of memory");
		return -ENOMEM;
	}
	if (uv_async_init(&srv->loop, &ns->hash_async, on_hash_async) < 0) {
		base_error("cannot start the event loop");
		return -EIO;
	}
	ns->hash_async.data = ns;
	ns->hash_async_ready = 1;
	ns->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ns->dirfd < 0) {
		int e = errno;

		base_log_err(BASE_LOG_ERROR, e,
			     "cannot open the source directory ns=%s "
			     "path=\"%s\"",
			     name, dir);
		return -e;
	}
	return 0;
}

int repl_server_init(struct repl_server *srv, const struct repl_server_opts *o)
{
	struct sockaddr_storage sa;
	size_t i;
	int r;

	memset(srv, 0, sizeof(*srv));
	atomic_init(&srv->cancel, 0);
	srv->policy = o->policy;
	srv->scan_threads = o->scan_threads;
	srv->hash_first = o->hash_first;
	srv->hash_delay_ms = o->hash_delay_ms;
	srv->hash_opened = o->hash_opened;
	srv->hash_opened_ctx = o->hash_opened_ctx;
	snprintf(srv->listen_str, sizeof(srv->listen_str), "%s", o->listen);
	r = uv_loop_init(&srv->loop);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot start the event loop");
		return -EIO;
	}
	srv->loop.data = srv;
	srv->ns = calloc(o->n_ns, sizeof(*srv->ns));
	if (!srv->ns) {
		base_error("out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < o->n_ns; i++) {
		srv->n_ns++;
		r = ns_init(srv, &srv->ns[i], o->ns_names[i], o->ns_dirs[i],
			    o->state_dir);
		if (r < 0)
			return r;
	}
	r = parse_listen(o->listen, &sa);
	if (r < 0) {
		base_error("cannot listen address=%s why=\"%s\"", o->listen,
			   r == -EINVAL ? "expected HOST:PORT"
					: "unknown host");
		return r;
	}
	uv_tcp_init(&srv->loop, &srv->listener);
	srv->listener.data = srv;
	r = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&sa, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&srv->listener, 511,
			      repl_http_on_connection);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot listen address=%s",
			     o->listen);
		return -EADDRINUSE;
	}
	uv_signal_init(&srv->loop, &srv->sig_int);
	uv_signal_init(&srv->loop, &srv->sig_term);
	srv->sig_int.data = srv->sig_term.data = srv;
	uv_signal_start(&srv->sig_int, on_signal, SIGINT);
	uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
	return 0;
}

int repl_server_run(struct repl_server *srv)
{
	base_debug("listening address=%s", srv->listen_str);
	scan_next(srv);
	uv_run(&srv->loop, UV_RUN_DEFAULT);
	return 0;
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void repl_server_fini(struct repl_server *srv)
{
	size_t i;

	/* After a failed init, or to be sure: close whatever is still open
	 * and let the callbacks run, so uv_loop_close succeeds. */
	/* No hasher thread may signal an async that is closing. */
	for (i = 0; i < srv->n_ns; i++)
		hash_stop(&srv->ns[i]);
	if (srv->loop.data) {
		atomic_store(&srv->cancel, 1);
		srv->stopping = 1;
		repl_http_close_all(srv);
		uv_walk(&srv->loop, close_walk, NULL);
		uv_run(&srv->loop, UV_RUN_DEFAULT);
		uv_loop_close(&srv->loop);
	}
	for (i = 0; i < srv->n_ns; i++) {
		struct repl_ns *ns = &srv->ns[i];

		repl_chunk_pool_free(ns);
		uv_mutex_destroy(&ns->pool_lock);
		if (ns->dirfd >= 0)
			close(ns->dirfd);
		free(ns->dir);
		free(ns->state_dir);
		free(ns->srcindex_path);
	}
	free(srv->ns);
	memset(srv, 0, sizeof(*srv));
}
