/*
 * replicator/serve/repl_server.c — the replicator's life: listen first, then
 * scan the namespaces one after the other on a worker (each turns READY when
 * its generation is published; repl_rescan.c), serve until SIGINT/SIGTERM,
 * then close everything and free it.
 *
 * Listening before scanning lets clients and health checks see the server
 * at once (503 while scanning) and makes a port clash fail fast, before
 * minutes of scanning.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "catalog/httpd/httpd.h"
#include "replicator/serve/repl_auth.h"
#include "replicator/source/repl_hasher.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/serve/repl_serve_priv.h"

static void on_signal(uv_signal_t *s, int signum)
{
	char why[32];

	snprintf(why, sizeof(why), "signal=SIG%s", sigabbrev_np(signum));
	repl_server_stop(s->data, why);
}

void repl_server_stop(struct repl_server *srv, const char *why)
{
	if (srv->stopping)
		return;
	srv->stopping = 1;
	atomic_store(&srv->cancel, 1);
	base_info("shutting down %s", why);
	repl_session_close(srv);
	for (size_t i = 0; i < srv->n_ns; i++) {
		atomic_store(&srv->ns[i]->cancel, 1);
		repl_hash_stop(srv->ns[i]);
		/* the loop ends when its last handle closes */
		repl_ns_close_async(srv->ns[i]);
	}
	uv_close((uv_handle_t *)&srv->sig_int, NULL);
	uv_close((uv_handle_t *)&srv->sig_term, NULL);
	repl_rescan_close(srv);
	repl_pool_sweep_close(srv);
	/* the listener and every connection; it frees itself as the loop
	 * lets its handles go */
	httpd_server_close(srv->http);
	srv->http = NULL;
}

/* --tls-cert/--tls-key: loaded before listening, so a bad file fails the
 * start; one line says what is served. */
static int tls_init(struct repl_server *srv, const struct repl_server_opts *o)
{
	struct httpd_tls_opts to = {
	    .cert = o->tls_cert,
	    .key = o->tls_key,
	    .client_ca = o->tls_client_ca,
	};
	char why[512], desc[384];
	int r;

	if (!o->tls_cert)
		return 0;
	r = httpd_tls_new(&to, &srv->tls, why, sizeof(why));
	if (r < 0) {
		base_error("cannot set up TLS: %s", why);
		return r;
	}
	if (httpd_tls_describe(srv->tls, desc, sizeof(desc)))
		base_warn("tls certificate outside its validity period cert=%s "
			  "%s",
			  o->tls_cert, desc);
	else
		base_info("tls on cert=%s %s client_certificates=%s",
			  o->tls_cert, desc,
			  o->tls_client_ca ? "required" : "no");
	return 0;
}

void repl_server_tls_reload(struct repl_server *srv)
{
	char why[512], desc[384];

	if (!srv->tls)
		return;
	if (httpd_tls_reload(srv->tls, why, sizeof(why)) < 0) {
		base_error("tls reload failed, the certificate in use stays: "
			   "%s",
			   why);
		return;
	}
	if (httpd_tls_describe(srv->tls, desc, sizeof(desc)))
		base_warn("tls certificate reloaded, outside its validity "
			  "period %s",
			  desc);
	else
		base_info("tls certificate reloaded %s", desc);
}

#define IMMUTABLE_PUBLIC                                                       \
	"Cache-Control: public, max-age=31536000, immutable\r\n"
#define IMMUTABLE_PRIVATE                                                      \
	"Cache-Control: private, max-age=31536000, immutable\r\n"
/* File descriptors kept for everything but connections (scans, hashers,
 * SQLite, chunk reads); each connection may hold two (its socket, a
 * catalog it streams). */
#define FD_RESERVE 256u

int repl_server_tokens_load(struct repl_server *srv, int reload)
{
	struct repl_tokens *t = NULL;
	char err[256];
	size_t i, j;
	int r;

	r = repl_tokens_load(srv->tokens_path, &t, err, sizeof(err));
	if (r < 0) {
		if (reload)
			base_error("tokens file not reloaded, the previous "
				   "tokens stay path=\"%s\" why=\"%s\"",
				   srv->tokens_path, err);
		else
			base_error("cannot use the tokens file path=\"%s\" "
				   "why=\"%s\"",
				   srv->tokens_path, err);
		return r;
	}
	for (i = 0; i < srv->n_ns; i++)
		if (!repl_tokens_of(t, srv->ns[i]->name,
				    strlen(srv->ns[i]->name)))
			base_warn("no token opens this namespace, every "
				  "request to it is refused ns=%s",
				  srv->ns[i]->name);
	for (i = 0; i < repl_tokens_count(t); i++) {
		const char *name = repl_tokens_ns(t, i);

		for (j = 0; j < i; j++)
			if (!strcmp(repl_tokens_ns(t, j), name))
				break;
		if (j == i && !repl_server_ns(srv, name, strlen(name)))
			base_warn("the tokens file names a namespace not "
				  "served ns=%s path=\"%s\"",
				  name, srv->tokens_path);
	}
	if (reload)
		base_info("tokens reloaded path=\"%s\" tokens=%zu",
			  srv->tokens_path, repl_tokens_count(t));
	repl_tokens_free(srv->tokens);
	srv->tokens = t;
	return 0;
}

/* The connection limits: the defaults (HTTPD_LIMITS_REPLICATOR) and the
 * options, the cap fitted to the open files limit (which main raised to
 * its hard limit). */
static void limits_init(struct repl_server *srv,
			const struct repl_server_opts *o)
{
	struct httpd_limits *l = &srv->limits;
	struct rlimit rl;

	*l = HTTPD_LIMITS_REPLICATOR;
	if (o->header_timeout_s)
		l->header_ms = 1000ull * o->header_timeout_s;
	if (o->idle_timeout_s)
		l->idle_ms = 1000ull * o->idle_timeout_s;
	if (o->max_conns)
		l->max_conns = o->max_conns;
	if (o->per_addr)
		l->per_addr = o->per_addr < 0 ? 0 : (size_t)o->per_addr;
	if (o->inflight_mib)
		l->inflight_max = o->inflight_mib << 20;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY) {
		size_t fit = rl.rlim_cur > 2 * FD_RESERVE
				 ? (size_t)(rl.rlim_cur - FD_RESERVE) / 2
				 : 16;

		if (l->max_conns > fit) {
			base_info("connection cap lowered to fit the open "
				  "files limit max_conns=%zu nofile=%llu",
				  fit, (unsigned long long)rl.rlim_cur);
			l->max_conns = fit;
		}
	}
}

/* What a reload needs: the state dir, the --namespaces path and the
 * arguments' namespaces (the first n_args), which every reload keeps. */
static int ns_args_init(struct repl_server *srv,
			const struct repl_server_opts *o)
{
	char err[256];
	size_t i;

	srv->state_dir = strdup(o->state_dir);
	if (!srv->state_dir)
		goto nomem;
	if (o->ns_file) {
		srv->ns_file = strdup(o->ns_file);
		if (!srv->ns_file)
			goto nomem;
	}
	for (i = 0; i < o->n_args; i++) {
		char *a = base_path_fmt("%s=%s", o->ns_names[i], o->ns_dirs[i]);
		int r = a ? repl_ns_list_add_arg(&srv->ns_args, a, strlen(a),
						 err, sizeof(err))
			  : -ENOMEM;

		free(a);
		if (r < 0) {
			base_error("bad namespace argument: %s", err);
			return r;
		}
	}
	return 0;
nomem:
	base_error("out of memory");
	return -ENOMEM;
}

/* --sign-key: the private key every generation is signed with. */
static int load_sign_key(struct repl_server *srv, const char *path)
{
	char id[65];
	int r;

	r = cat_sign_key_load(path, &srv->sign_key);
	if (r == 0)
		r = cat_sign_key_id(srv->sign_key.pub, id);
	if (r == -EBADMSG)
		base_error("--sign-key: not an Ed25519 private key (PEM, as "
			   "ferry keygen's sign.key) path=%s",
			   path);
	else if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "--sign-key: cannot read the key path=%s", path);
	if (r < 0)
		return r;
	srv->signing = 1;
	base_info("signing generations key=%s path=%s", id, path);
	return 0;
}

int repl_server_init(struct repl_server *srv, const struct repl_server_opts *o)
{
	struct sockaddr_storage sa;
	const char *unix_path;
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
	srv->rescan_interval_s = o->rescan_interval_s;
	srv->keep_gens = o->keep_gens ? o->keep_gens : REPL_KEEP_GENS_DEFAULT;
	snprintf(srv->listen_str, sizeof(srv->listen_str), "%s", o->listen);
	limits_init(srv, o);
	srv->immutable = o->tokens_path ? IMMUTABLE_PRIVATE : IMMUTABLE_PUBLIC;
	repl_metrics_init(&srv->metrics, o->metrics, o->tokens_path != NULL);
	if (o->tokens_path && srv->metrics.access == REPL_METRICS_OPEN)
		base_warn(
		    "--metrics open with --tokens: anyone who can connect "
		    "reads every namespace's name and counters at "
		    "/metrics");
	if (o->sign_key) {
		r = load_sign_key(srv, o->sign_key);
		if (r < 0)
			return r;
	}
	r = uv_loop_init(&srv->loop);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot start the event loop");
		return -EIO;
	}
	srv->loop.data = srv;
	if (repl_jobs_init(&srv->jobs, &srv->loop) < 0) {
		base_error("out of memory");
		return -ENOMEM;
	}
	r = ns_args_init(srv, o);
	if (r < 0)
		return r;
	for (i = 0; i < o->n_ns; i++) {
		r = repl_ns_add(srv, o->ns_names[i], o->ns_dirs[i]);
		if (r < 0)
			return r;
	}
	repl_ns_nofile_check(srv);
	if (o->tokens_path) {
		srv->tokens_path = strdup(o->tokens_path);
		if (!srv->tokens_path) {
			base_error("out of memory");
			return -ENOMEM;
		}
		r = repl_server_tokens_load(srv, 0);
		if (r < 0)
			return r;
	}
	unix_path =
	    strncmp(o->listen, REPL_LISTEN_UNIX, strlen(REPL_LISTEN_UNIX)) == 0
		? o->listen + strlen(REPL_LISTEN_UNIX)
		: NULL;
	r = unix_path ? 0 : httpd_listen_resolve(o->listen, &sa);
	if (r < 0) {
		base_error("cannot listen address=%s why=\"%s\"", o->listen,
			   r == -EINVAL ? "expected HOST:PORT"
					: "unknown host");
		return r;
	}
	r = tls_init(srv, o);
	if (r < 0)
		return r;
	r = repl_http_start(
	    srv, unix_path ? NULL : (const struct sockaddr *)&sa, unix_path);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot listen address=%s",
			     o->listen);
		return -EADDRINUSE;
	}
	/* port 0 asked for any: say which one it is */
	if (!unix_path && httpd_server_bound(srv->http, &sa) == 0)
		(void)httpd_listen_name(o->listen, (const struct sockaddr *)&sa,
					srv->listen_str,
					sizeof(srv->listen_str));
	if (!unix_path && !srv->tls &&
	    !httpd_sockaddr_loopback((const struct sockaddr *)&sa))
		base_warn("serving plain HTTP on a non-loopback address "
			  "address=%s: anyone on the path reads every byte "
			  "(give --tls-cert and --tls-key)",
			  srv->listen_str);
	uv_signal_init(&srv->loop, &srv->sig_int);
	uv_signal_init(&srv->loop, &srv->sig_term);
	srv->sig_int.data = srv->sig_term.data = srv;
	uv_signal_start(&srv->sig_int, on_signal, SIGINT);
	uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
	repl_rescan_init(srv);
	repl_pool_sweep_init(srv);
	srv->session = o->session;
	srv->serve_last = o->serve_last;
	srv->rehash = o->rehash;
	if (srv->session)
		return repl_session_start(srv);
	return 0;
}

int repl_server_run(struct repl_server *srv)
{
	base_debug("listening address=%s", srv->listen_str);
	if (srv->serve_last)
		repl_serve_last(srv);
	repl_scan_want(srv, 1, 0);
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
	for (i = 0; i < srv->n_ns; i++) {
		atomic_store(&srv->ns[i]->cancel, 1);
		repl_hash_stop(srv->ns[i]);
	}
	if (srv->loop.data) {
		atomic_store(&srv->cancel, 1);
		srv->stopping = 1;
		/* before the walk below: its handles close with their own
		 * callbacks, which free it */
		httpd_server_close(srv->http);
		srv->http = NULL;
		for (i = 0; i < srv->n_ns; i++)
			repl_ns_close_async(srv->ns[i]);
		uv_walk(&srv->loop, close_walk, NULL);
		uv_run(&srv->loop, UV_RUN_DEFAULT);
		uv_loop_close(&srv->loop);
	}
	/* the loop is drained: requests, scans and async handles have
	 * dropped theirs, so the list's reference is the last one */
	for (i = 0; i < srv->n_ns; i++)
		repl_ns_unref(srv->ns[i]);
	repl_jobs_fini(&srv->jobs);
	free(srv->ns);
	free(srv->state_dir);
	free(srv->ns_file);
	repl_ns_list_fini(&srv->ns_args);
	httpd_tls_free(srv->tls);
	repl_tokens_free(srv->tokens);
	free(srv->tokens_path);
	cat_sign_key_wipe(&srv->sign_key);
	memset(srv, 0, sizeof(*srv));
}

int repl_server_new(const struct repl_server_opts *o, struct repl_server **ret)
{
	struct repl_server *srv;
	int r;

	*ret = NULL;
	srv = calloc(1, sizeof(*srv));
	if (!srv) {
		base_error("cannot start the server: out of memory");
		return -ENOMEM;
	}
	r = repl_server_init(srv, o);
	if (r < 0) {
		repl_server_fini(srv);
		free(srv);
		return r;
	}
	*ret = srv;
	return 0;
}

void repl_server_free(struct repl_server *srv)
{
	if (!srv)
		return;
	repl_server_fini(srv);
	free(srv);
}
