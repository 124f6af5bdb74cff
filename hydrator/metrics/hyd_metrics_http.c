/*
 * hydrator/metrics/hyd_metrics_http.c — the tiny HTTP server behind
 * ferry-hydrator --metrics-listen: a libuv loop on a thread of its own,
 * http_parser for the requests, GET|HEAD /metrics answered with
 * hyd_metrics_render's text, everything else 404 or 405.
 *
 * Bounded: one request per connection (the answer says Connection: close
 * and the connection ends after it), a request head of at most
 * METRICS_HEAD_MAX bytes, METRICS_CONN_MS for a connection's whole life,
 * at most METRICS_CONNS_MAX connections (more are closed at accept). A
 * scrape is rare and small; nothing here is worth more than that.
 *
 * Stopping: hyd_metrics_stop wakes the loop with an async handle, whose
 * callback closes every handle; uv_run then returns and the thread is
 * joined.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <http_parser.h>
#include <uv.h>

#include "catalog/base/base.h"
#include "hydrator/metrics/hyd_metrics.h"

#define METRICS_HEAD_MAX 8192u
#define METRICS_URL_MAX 1024u
#define METRICS_CONN_MS 10000u
#define METRICS_CONNS_MAX 16u
#define METRICS_BACKLOG 16

struct mconn;

struct hyd_metrics {
	uv_loop_t loop;
	uv_tcp_t listener;
	uv_async_t wake;
	pthread_t th;
	int started;
	struct hyd_metrics_src src;
	struct mconn *conns;
	size_t n_conns;
	char listen[128];
};

struct mconn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t w;
	struct hyd_metrics *m;
	struct mconn *prev, *next;
	http_parser parser;
	char url[METRICS_URL_MAX + 1];
	size_t url_len;
	size_t head_bytes;
	int fail;     /* an answer's status decided while parsing */
	int answered; /* the answer is on its way: read no more */
	int closing;
	int open_handles; /* tcp and timer: freed when both closed */
	char *out;
	char rbuf[4096];
};

static void conn_on_closed(uv_handle_t *h)
{
	struct mconn *c = h->data;

	if (--c->open_handles == 0) {
		free(c->out);
		free(c);
	}
}

static void conn_close(struct mconn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	if (c->prev)
		c->prev->next = c->next;
	else
		c->m->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->m->n_conns--;
	uv_close((uv_handle_t *)&c->timer, conn_on_closed);
	uv_close((uv_handle_t *)&c->tcp, conn_on_closed);
}

static void on_written(uv_write_t *w, int status)
{
	(void)status;
	conn_close(w->data);
}

static const char *reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 414:
		return "URI Too Long";
	case 431:
		return "Request Header Fields Too Large";
	default:
		return "Internal Server Error";
	}
}

/* Queue the answer (head and body copied into one buffer), then close. */
static void answer(struct mconn *c, int status, const char *ctype,
		   const char *extra, const char *body, size_t len,
		   int head_only)
{
	char head[512];
	uv_buf_t b;
	int n;

	c->answered = 1;
	uv_read_stop((uv_stream_t *)&c->tcp);
	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
		     status, reason(status), ctype, len, extra);
	if (n < 0 || (size_t)n >= sizeof(head))
		goto fail;
	if (head_only)
		len = 0;
	c->out = malloc((size_t)n + len);
	if (!c->out)
		goto fail;
	memcpy(c->out, head, (size_t)n);
	if (len)
		memcpy(c->out + n, body, len);
	b = uv_buf_init(c->out, (unsigned)((size_t)n + len));
	c->w.data = c;
	if (uv_write(&c->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) == 0)
		return;
fail:
	conn_close(c);
}

static void answer_text(struct mconn *c, int status, const char *extra,
			const char *text)
{
	answer(c, status, "text/plain; charset=utf-8", extra, text,
	       strlen(text), 0);
}

/* The request is whole: route it. */
static void dispatch(struct mconn *c)
{
	struct http_parser_url u;
	enum http_method meth = (enum http_method)c->parser.method;
	struct base_prom p;
	const char *path;
	size_t plen;

	if (c->fail) {
		answer_text(c, c->fail, "", "bad request\n");
		return;
	}
	http_parser_url_init(&u);
	if (http_parser_parse_url(c->url, c->url_len, 0, &u) != 0 ||
	    !(u.field_set & (1u << UF_PATH))) {
		answer_text(c, 400, "", "malformed URL\n");
		return;
	}
	path = c->url + u.field_data[UF_PATH].off;
	plen = u.field_data[UF_PATH].len;
	if (plen != 8 || memcmp(path, "/metrics", 8) != 0) {
		answer_text(c, 404, "", "only /metrics is here\n");
		return;
	}
	if (meth != HTTP_GET && meth != HTTP_HEAD) {
		answer_text(c, 405, "Allow: GET, HEAD\r\n",
			    "GET or HEAD only\n");
		return;
	}
	base_prom_init(&p);
	hyd_metrics_render(&c->m->src, &p);
	if (p.out.err) {
		base_prom_fini(&p);
		answer_text(c, 500, "", "cannot build the metrics\n");
		return;
	}
	answer(c, 200, BASE_PROM_CTYPE, "Cache-Control: no-cache\r\n",
	       p.out.buf, p.out.len, meth == HTTP_HEAD);
	base_prom_fini(&p);
}

/* -- http_parser callbacks: fill the connection, never answer -- */

static int cb_url(http_parser *hp, const char *at, size_t len)
{
	struct mconn *c = hp->data;

	if (c->url_len + len > METRICS_URL_MAX) {
		c->fail = 414;
		return -1;
	}
	memcpy(c->url + c->url_len, at, len);
	c->url_len += len;
	c->url[c->url_len] = '\0';
	return 0;
}

static int cb_header(http_parser *hp, const char *at, size_t len)
{
	struct mconn *c = hp->data;

	(void)at;
	c->head_bytes += len;
	if (c->head_bytes > METRICS_HEAD_MAX) {
		c->fail = 431;
		return -1;
	}
	return 0;
}

static int cb_headers_complete(http_parser *hp)
{
	(void)hp;
	return 1; /* no body is read, whatever the request says */
}

static int cb_message_complete(http_parser *hp)
{
	struct mconn *c = hp->data;

	c->answered = 1; /* dispatched after http_parser_execute returns */
	http_parser_pause(hp, 1);
	return 0;
}

static const http_parser_settings SETTINGS = {
    .on_url = cb_url,
    .on_header_field = cb_header,
    .on_header_value = cb_header,
    .on_headers_complete = cb_headers_complete,
    .on_message_complete = cb_message_complete,
};

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct mconn *c = h->data;

	(void)hint;
	*buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct mconn *c = s->data;
	enum http_errno e;

	if (nread == 0 || c->closing)
		return;
	if (nread < 0) {
		conn_close(c);
		return;
	}
	if (c->answered)
		return;
	http_parser_execute(&c->parser, &SETTINGS, buf->base, (size_t)nread);
	e = HTTP_PARSER_ERRNO(&c->parser);
	if (c->answered) {
		c->answered = 0; /* answer() sets it again */
		dispatch(c);
		return;
	}
	if (e != HPE_OK) {
		if (!c->fail)
			c->fail = 400;
		dispatch(c);
	}
}

static void on_timeout(uv_timer_t *t)
{
	conn_close(t->data);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct hyd_metrics *m = server->data;
	struct mconn *c;

	if (status < 0)
		return;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->m = m;
	uv_tcp_init(&m->loop, &c->tcp);
	uv_timer_init(&m->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->open_handles = 2;
	c->next = m->conns;
	if (m->conns)
		m->conns->prev = c;
	m->conns = c;
	m->n_conns++;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 ||
	    m->n_conns > METRICS_CONNS_MAX) {
		conn_close(c);
		return;
	}
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	uv_timer_start(&c->timer, on_timeout, METRICS_CONN_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		conn_close(c);
}

static void on_wake(uv_async_t *a)
{
	struct hyd_metrics *m = a->data;

	while (m->conns)
		conn_close(m->conns);
	uv_close((uv_handle_t *)&m->listener, NULL);
	uv_close((uv_handle_t *)&m->wake, NULL);
}

static void *metrics_thread(void *p)
{
	struct hyd_metrics *m = p;

	uv_run(&m->loop, UV_RUN_DEFAULT);
	return NULL;
}

int hyd_metrics_listen_split(const char *s, char *host, size_t cap,
			     uint16_t *ret_port)
{
	const char *colon, *h = s;
	size_t hl;
	uint64_t port;

	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end || end[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || memchr(s, ':', (size_t)(colon - s)))
			return -EINVAL;
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= cap ||
	    base_parse_u64(colon + 1, 1, 65535, &port) < 0)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*ret_port = (uint16_t)port;
	return 0;
}

/* Resolve host:port and bind m->listener there. 0 or -errno. */
static int metrics_bind(struct hyd_metrics *m, const char *host, uint16_t port)
{
	struct addrinfo hints, *res = NULL;
	char ps[8];
	int r;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
	snprintf(ps, sizeof(ps), "%u", (unsigned)port);
	r = getaddrinfo(host, ps, &hints, &res);
	if (r != 0)
		return -EADDRNOTAVAIL;
	r = uv_tcp_bind(&m->listener, res->ai_addr, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&m->listener, METRICS_BACKLOG,
			      on_connection);
	freeaddrinfo(res);
	return r;
}

int hyd_metrics_start(const char *listen, const struct hyd_metrics_src *src,
		      hyd_metrics **ret)
{
	char host[256];
	uint16_t port;
	sigset_t all, old;
	hyd_metrics *m;
	int r;

	*ret = NULL;
	if (hyd_metrics_listen_split(listen, host, sizeof(host), &port) < 0) {
		base_error("--metrics-listen wants HOST:PORT, not '%s'",
			   listen);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->src = *src;
	snprintf(m->listen, sizeof(m->listen), "%s", listen);
	r = uv_loop_init(&m->loop);
	if (r < 0) {
		free(m);
		return r;
	}
	uv_tcp_init(&m->loop, &m->listener);
	m->listener.data = m;
	uv_async_init(&m->loop, &m->wake, on_wake);
	m->wake.data = m;
	r = metrics_bind(m, host, port);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot serve metrics listen=%s", listen);
		goto fail;
	}
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
	base_info("serving metrics url=http://%s/metrics", listen);
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
