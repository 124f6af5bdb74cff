/*
 * replicator/serve/repl_http.c — the replicator on the shared engine
 * (catalog/httpd/): what it gives the engine and what it takes back.
 * Given: the limits of ferry-replicator(1) (srv->limits), TLS, the Server
 * name, the Authorization header kept for the tokens check, the protocol's
 * JSON error body, and the counters of GET /metrics (accepted, limited by
 * reason, requests and time to first byte, bytes, errors by code, cut
 * answers). Taken: requests, handed to the routes in order.
 *
 * Per connection the replicator keeps one thing, the batch codec's
 * backlog average (repl_adapt.c), in the engine's per-connection bytes.
 */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_metrics_priv.h"
#include "replicator/serve/repl_serve_priv.h"

/* What the replicator keeps per connection. */
struct repl_conn_data {
	int ready;
	struct repl_adapt adapt;
};

static void on_dispatch(struct httpd_req *h)
{
	struct repl_req *req = repl_req_of(h);

	req->srv = h->ctx;
	repl_routes_dispatch(req);
}

/* Authorization values are kept for the tokens check: the last one (cut
 * at REPL_AUTH_MAX, with auth_over set), and how many came (several make
 * it fail). */
static void on_header(struct httpd_req *h, const char *name, size_t nlen,
		      const char *value, size_t vlen)
{
	struct repl_req *req = repl_req_of(h);

	if (nlen != 13 || memcmp(name, "authorization", 13) != 0)
		return;
	req->auth_n++;
	req->auth_over = vlen > REPL_AUTH_MAX;
	req->auth_len = req->auth_over ? 0 : vlen;
	memcpy(req->auth, value, req->auth_len);
	req->auth[req->auth_len] = '\0';
}

static void on_req_free(struct httpd_req *h)
{
	struct repl_req *req = repl_req_of(h);

	if (req->on_free)
		req->on_free(req);
	repl_ns_unref(req->ns);
	explicit_bzero(req->auth, sizeof(req->auth));
}

/* {"error":code,"detail":detail} and a newline, through jansson. Its
 * length, or -ENOMEM / -ENOBUFS. */
static int json_error(const char *code, const char *detail, char *buf,
		      size_t cap)
{
	json_t *o = json_object();
	int n = -ENOMEM;

	if (!o)
		return n;
	/* code is one of ours, ASCII; detail may hold a client's URL bytes
	 * or a file name: base_json_str keeps valid UTF-8 and shows every
	 * other byte as \xNN, so the body is valid JSON whatever they were */
	if (json_object_set_new(o, "error", json_string(code)) < 0 ||
	    json_object_set_new(o, "detail", base_json_str(detail)) < 0)
		goto out;
	n = base_json_line(o, buf, cap - 1);
	if (n < 0)
		goto out;
	buf[n++] = '\n';
	buf[n] = '\0';
out:
	json_decref(o);
	return n;
}

static int error_body(struct httpd_req *h, const char *code, const char *detail,
		      char *buf, size_t cap, const char **ret_ctype)
{
	int n = json_error(code, detail, buf, cap);

	(void)h;
	*ret_ctype = "application/json";
	return n < 0 ? json_error(code, "", buf, cap) : n;
}

/* -- counting (repl_metrics.c) -- */

static void count_accepted(void *ctx)
{
	struct repl_server *srv = ctx;

	srv->metrics.conns_accepted++;
}

static void count_limited(void *ctx, enum httpd_limit why)
{
	struct repl_server *srv = ctx;

	srv->metrics.conns_limited[why]++;
}

static void count_first_byte(struct httpd_req *h)
{
	repl_metrics_first_byte(repl_req_of(h));
}

static void count_bytes(void *ctx, size_t n)
{
	struct repl_server *srv = ctx;

	srv->metrics.response_bytes += n;
}

static void count_error(struct httpd_req *h, const char *code)
{
	repl_metrics_error_code(h->ctx, code);
}

static void count_aborted(struct httpd_req *h)
{
	struct repl_server *srv = h->ctx;

	srv->metrics.errors[REPL_ERR_ABORTED]++;
}

int repl_http_start(struct repl_server *srv, const struct sockaddr *sa,
		    const char *unix_path)
{
	struct httpd_server_opts o = {
	    .loop = &srv->loop,
	    .limits = &srv->limits,
	    .server = HTTPD_SERVER_REPLICATOR,
	    .tls = srv->tls,
	    .req_size = sizeof(struct repl_req),
	    .conn_size = sizeof(struct repl_conn_data),
	    .ctx = srv,
	    .dispatch = on_dispatch,
	    .header = on_header,
	    .req_free = on_req_free,
	    .error_body = error_body,
	    .hooks =
		{
		    .accepted = count_accepted,
		    .limited = count_limited,
		    .first_byte = count_first_byte,
		    .bytes = count_bytes,
		    .error = count_error,
		    .aborted = count_aborted,
		},
	};
	int r = httpd_server_new(&o, &srv->http);

	if (r < 0)
		return r;
	if (!sa)
		return httpd_server_listen_unix(srv->http, unix_path, 511);
	return httpd_server_listen(srv->http, sa, 511);
}

static struct repl_adapt *conn_adapt(struct repl_req *req)
{
	struct repl_conn_data *d = req->h.conn_data;

	if (!d->ready) {
		repl_adapt_init(&d->adapt);
		d->ready = 1;
	}
	return &d->adapt;
}

int repl_http_adapt_lz4(struct repl_req *req)
{
	return conn_adapt(req)->lz4;
}

static void queue_now(struct repl_req *req)
{
	httpd_req_ref(&req->h);
	if (repl_req_work(req, req->work, req->work_cb, req->after_cb) < 0) {
		httpd_req_unref(&req->h);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"cannot queue work");
	}
}

static void room_granted(struct httpd_req *h, void *arg)
{
	(void)arg;
	queue_now(repl_req_of(h));
}

void repl_req_queue(struct repl_req *req, size_t room, uv_work_t *w,
		    uv_work_cb work, uv_after_work_cb after)
{
	req->work = w;
	req->work_cb = work;
	req->after_cb = after;
	/* -EAGAIN: room_granted queues it; else the connection is gone */
	if (httpd_req_reserve(&req->h, room, room_granted, NULL) == 0)
		queue_now(req);
}

void repl_http_adapt_note(struct repl_req *req)
{
	repl_adapt_note(conn_adapt(req), httpd_req_unsent(&req->h));
}
