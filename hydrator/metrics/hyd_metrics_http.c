/*
 * hydrator/metrics/hyd_metrics_http.c — the server behind ferry-hydrator
 * --metrics-listen: the shared HTTP engine (catalog/httpd/) on a libuv
 * loop and thread of its own, GET|HEAD /metrics answered with
 * hyd_metrics_render's text, everything else 404 or 405.
 *
 * Bounded by HTTPD_LIMITS_METRICS: one request per connection (the
 * answer says Connection: close), a small head, ten seconds for a
 * connection to ask and to read its answer, a handful of connections. A
 * scrape is rare and small; nothing here is worth more than that.
 *
 * Stopping: hyd_metrics_stop wakes the loop with an async handle, whose
 * callback closes the engine and itself; uv_run returns once every
 * handle is closed and the thread is joined.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "catalog/base/base.h"
#include "catalog/httpd/httpd.h"
#include "hydrator/metrics/hyd_metrics.h"

#define METRICS_BACKLOG 16

struct hyd_metrics {
	uv_loop_t loop;
	uv_async_t wake;
	pthread_t th;
	int started;
	struct httpd_server *http;
	struct hyd_metrics_src src;
};

/* The request is whole: route it. */
static void dispatch(struct httpd_req *req)
{
	struct hyd_metrics *m = req->ctx;
	struct base_prom p;
	const char *path;
	size_t plen;

	if (req->fail_status) {
		httpd_req_error(req, req->fail_status, "bad_request", "",
				"bad request");
		return;
	}
	if (httpd_url_path(req->url, req->url_len, &path, &plen) < 0) {
		httpd_req_error(req, 400, "bad_request", "", "malformed URL");
		return;
	}
	if (plen != 8 || memcmp(path, "/metrics", 8) != 0) {
		httpd_req_error(req, 404, "not_found", "",
				"only /metrics is here");
		return;
	}
	if (req->method != HTTPD_GET && req->method != HTTPD_HEAD) {
		httpd_req_error(req, 405, "method_not_allowed",
				"Allow: GET, HEAD\r\n", "GET or HEAD only");
		return;
	}
	base_prom_init(&p);
	hyd_metrics_render(&m->src, &p);
	if (p.out.err) {
		base_prom_fini(&p);
		httpd_req_error(req, 500, "internal", "",
				"cannot build the metrics");
		return;
	}
	httpd_req_respond(req, 200, BASE_PROM_CTYPE,
			  "Cache-Control: no-cache\r\n", p.out.buf, p.out.len);
	base_prom_fini(&p);
}

static void on_wake(uv_async_t *a)
{
	struct hyd_metrics *m = a->data;

	httpd_server_close(m->http);
	m->http = NULL;
	uv_close((uv_handle_t *)&m->wake, NULL);
}

static void *metrics_thread(void *p)
{
	struct hyd_metrics *m = p;

	uv_run(&m->loop, UV_RUN_DEFAULT);
	return NULL;
}

/* The engine on m's loop, listening on listen. 0 or -errno (logged). */
static int metrics_listen(struct hyd_metrics *m, const char *listen, char *name,
			  size_t cap)
{
	struct httpd_server_opts o = {
	    .loop = &m->loop,
	    .limits = &HTTPD_LIMITS_METRICS,
	    .server = HTTPD_SERVER_HYDRATOR,
	    .tag = "metrics",
	    .req_size = sizeof(struct httpd_req),
	    .ctx = m,
	    .dispatch = dispatch,
	};
	struct sockaddr_storage sa;
	int r;

	r = httpd_listen_resolve(listen, &sa);
	if (r == 0)
		r = httpd_server_new(&o, &m->http);
	if (r == 0)
		r = httpd_server_listen(m->http, (const struct sockaddr *)&sa,
					METRICS_BACKLOG);
	if (r == 0)
		r = httpd_server_bound(m->http, &sa);
	if (r == 0)
		r = httpd_listen_name(listen, (const struct sockaddr *)&sa,
				      name, cap);
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot serve metrics listen=%s", listen);
	return r;
}

int hyd_metrics_start(const char *listen, const struct hyd_metrics_src *src,
		      hyd_metrics **ret)
{
	char host[HTTPD_HOST_MAX], name[HTTPD_HOST_MAX + 16];
	uint16_t port;
	sigset_t all, old;
	hyd_metrics *m;
	int r;

	*ret = NULL;
	if (httpd_listen_split(listen, host, sizeof(host), &port) < 0) {
		base_error("--metrics-listen wants HOST:PORT, not '%s'",
			   listen);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->src = *src;
	r = uv_loop_init(&m->loop);
	if (r < 0) {
		free(m);
		return r;
	}
	uv_async_init(&m->loop, &m->wake, on_wake);
	m->wake.data = m;
	r = metrics_listen(m, listen, name, sizeof(name));
	if (r < 0)
		goto fail;
	/* signals stay with the main thread (FUSE's handlers) */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&m->th, NULL, metrics_thread, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot start the metrics thread");
		goto fail;
	}
	m->started = 1;
	base_info("serving metrics url=http://%s/metrics", name);
	*ret = m;
	return 0;
fail:
	on_wake(&m->wake);
	uv_run(&m->loop, UV_RUN_DEFAULT);
	uv_loop_close(&m->loop);
	free(m);
	return r;
}

void hyd_metrics_set_control(hyd_metrics *m, hyd_control *ctl)
{
	if (m)
		__atomic_store_n(&m->src.ctl, ctl, __ATOMIC_RELEASE);
}

void hyd_metrics_stop(hyd_metrics *m)
{
	if (!m)
		return;
	if (m->started) {
		uv_async_send(&m->wake);
		pthread_join(m->th, NULL);
	}
	uv_loop_close(&m->loop);
	free(m);
}
