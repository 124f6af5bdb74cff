/*
 * replicator/serve/repl_http.c — HTTP/1.1 connections: accept, read, parse with
 * http_parser, queue requests, write responses in order, keep-alive and
 * pipelining, and bounded everything (URL, headers, body, queue depth,
 * connections in all and per client address, time to send a request
 * head, time idle).
 *
 * Parsing never calls into routes: callbacks only fill the request being
 * parsed and queue it; routes run from conn_kick after http_parser_execute
 * returns, so a route that answers (or closes the connection) synchronously
 * never re-enters the parser.
 *
 * Fairness: what a connection waits for decides what may end it. One the
 * server is answering (a request queued, a write in flight) is never
 * closed for room; one waiting for its client (no request yet, a head
 * still coming, idle between requests) may be: its wait began at
 * since_ms, and a sweep every REPL_SWEEP_MS closes it when that wait
 * passes the header or idle timeout. When the connection cap is reached
 * (or accept runs out of file descriptors) the connection that has waited
 * longest for its client, at least REPL_EVICT_GRACE_MS, makes room for
 * the next one, so idle or trickling connections, however many, cannot
 * keep a client that asks out. The grace lets every connection accepted
 * have its request read before it can be pushed out: without it a flood
 * of connects (the kernel's backlog holds hundreds) would push out
 * everything accepted in the same loop turn, a real client's too. When
 * no connection is eligible, accepting pauses (libuv keeps the one it
 * took and stops polling the listener; the kernel's backlog holds the
 * rest) until the sweep finds room. The per-address cap keeps one
 * address from holding everything.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_metrics_priv.h"
#include "replicator/serve/repl_serve_priv.h"
#include "replicator/serve/repl_tls_priv.h"

#define READ_BUF 65536u
#define REPL_SWEEP_MS 250u
#define REPL_EVICT_GRACE_MS 500u
#define REPL_LIMIT_LOG_MS 10000u

struct repl_conn {
	uv_tcp_t tcp;
	struct repl_server *srv;
	struct repl_conn *prev, *next;
	http_parser parser;
	struct repl_req *cur; /* being parsed */
	struct repl_req *head, *tail;
	size_t queued;
	int refs; /* the handle + every live request */
	int closing, shutting, reading;
	int eof;     /* peer finished sending */
	int no_more; /* no further requests will be taken */
	int paused;  /* parser paused: queue full */
	int kicking;
	int fail_status;
	const char *fail_detail;
	size_t hdr_bytes;
	/* just enough of the current header to see "Expect: 100-continue" */
	char field[16], value[16];
	size_t field_len, value_len;
	int in_value, expect_continue, in_auth;
	/* what it waits for (conn_wait) began at this loop time: accept, a
	 * request's first byte, the last answer queued or write done */
	uint64_t since_ms;
	uint64_t answered;	 /* requests answered */
	unsigned writes;	 /* writes in flight */
	uint8_t addr[16];	 /* the client's address (IPv4-mapped: IPv4) */
	unsigned addr_len;	 /* 4, 16, or 0 when unknown */
	int same_host;		 /* the client is on this host (repl_peer.c) */
	struct repl_adapt adapt; /* batch codec by backlog (repl_adapt.c) */
	uv_shutdown_t shut;
	struct repl_tls_conn *tls; /* NULL: plain HTTP */
	int tls_pumping;	   /* in tls_pump */
	size_t pend_off, pend_len; /* unparsed bytes in rbuf */
	char rbuf[READ_BUF];
};

struct repl_wr {
	uv_write_t w;
	struct repl_req *req;
	repl_write_cb cb;
	void *arg;
	char *cipher; /* TLS: the records written */
	char bytes[]; /* plain: copied pre and post */
};

/* TLS records no request waits for: handshake, alerts, close_notify. */
struct tls_wr {
	uv_write_t w;
	char *cipher;
};

static void conn_close(struct repl_conn *c);
static void conn_kick(struct repl_conn *c);
static void parse_pending(struct repl_conn *c);
static void read_start(struct repl_conn *c);
static void tls_pump(struct repl_conn *c);
static int tls_flush(struct repl_conn *c);

static void conn_unref(struct repl_conn *c)
{
	if (--c->refs == 0) {
		repl_tls_conn_free(c->tls);
		free(c);
	}
}

static void on_close(uv_handle_t *h)
{
	conn_unref(h->data);
}

void repl_req_ref(struct repl_req *req)
{
	req->refs++;
}

void repl_req_unref(struct repl_req *req)
{
	struct repl_conn *c = req->conn;

	if (--req->refs > 0)
		return;
	if (req->on_free)
		req->on_free(req);
	repl_ns_unref(req->ns);
	free(req->body);
	explicit_bzero(req->auth, sizeof(req->auth));
	free(req);
	conn_unref(c);
}

static struct repl_req *req_new(struct repl_conn *c)
{
	struct repl_req *req = calloc(1, sizeof(*req));

	if (!req)
		return NULL;
	req->conn = c;
	req->srv = c->srv;
	req->refs = 1; /* the parser's, then the queue's */
	c->refs++;
	return req;
}

/* 1 while the connection takes more bytes to parse. */
static int conn_takes_more(const struct repl_conn *c)
{
	return !c->closing && !c->shutting && !c->eof && !c->no_more &&
	       !c->paused && c->pend_len == 0;
}

static void update_reading(struct repl_conn *c)
{
	int want = conn_takes_more(c);

	/* TLS may hold plaintext already: that first, then the socket */
	if (want && c->tls && !c->tls_pumping) {
		tls_pump(c);
		return;
	}
	if (want == c->reading)
		return;
	c->reading = want;
	if (!want) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		return;
	}
	read_start(c);
}

static void on_shutdown(uv_shutdown_t *s, int status)
{
	(void)status;
	conn_close(s->data);
}

/* Close once everything queued has been written. */
static void conn_finish(struct repl_conn *c)
{
	if (c->closing || c->shutting)
		return;
	c->shutting = 1;
	update_reading(c);
	if (c->tls) {
		repl_tls_conn_shutdown(c->tls);
		if (tls_flush(c) < 0) {
			conn_close(c);
			return;
		}
	}
	c->shut.data = c;
	if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
		conn_close(c);
}

static void conn_close(struct repl_conn *c)
{
	struct repl_req *r, *n;

	if (c->closing)
		return;
	c->closing = 1;
	if (c->reading)
		uv_read_stop((uv_stream_t *)&c->tcp);
	c->reading = 0;
	if (c->prev)
		c->prev->next = c->next;
	else
		c->srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->srv->n_conns--;
	if (c->cur) {
		c->cur->dead = 1;
		repl_req_unref(c->cur);
		c->cur = NULL;
	}
	for (r = c->head; r; r = n) {
		n = r->next;
		r->dead = 1;
		repl_req_unref(r);
	}
	c->head = c->tail = NULL;
	c->queued = 0;
	/* Pending writes get their callbacks (UV_ECANCELED) before on_close. */
	uv_close((uv_handle_t *)&c->tcp, on_close);
}

void repl_http_close_all(struct repl_server *srv)
{
	while (srv->conns)
		conn_close(srv->conns);
	if (srv->sweep_ready && !uv_is_closing((uv_handle_t *)&srv->sweep))
		uv_close((uv_handle_t *)&srv->sweep, NULL);
}

static void enqueue(struct repl_conn *c, struct repl_req *req)
{
	if (c->tail)
		c->tail->next = req;
	else
		c->head = req;
	c->tail = req;
	c->queued++;
}

/* Dispatch the head request if it has not started; a route that answers
 * synchronously calls repl_http_done, which comes back here through the
 * loop rather than by recursion. */
static void conn_kick(struct repl_conn *c)
{
	if (c->kicking)
		return;
	c->kicking = 1;
	while (!c->closing && c->head && !c->head->started) {
		c->head->started = 1;
		repl_routes_dispatch(c->head);
	}
	c->kicking = 0;
	/* Nothing left to answer and nothing more coming (a half-sent
	 * request after EOF will never complete either). */
	if (!c->closing && !c->head && (c->eof || c->no_more))
		conn_finish(c);
}

static const char CONTINUE[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void on_continue_written(uv_write_t *w, int status)
{
	(void)status;
	free(w);
}

static void send_continue(struct repl_conn *c)
{
	uv_write_t *w;
	uv_buf_t b = uv_buf_init((char *)CONTINUE, sizeof(CONTINUE) - 1);

	if (c->tls) {
		/* Encrypted now; a failed flush leaves the records for the
		 * next one (closing here would pull the request out from
		 * under the parser, which called us). */
		if (repl_tls_conn_write(c->tls, CONTINUE,
					sizeof(CONTINUE) - 1) == 0)
			(void)tls_flush(c);
		return;
	}
	w = malloc(sizeof(*w));
	if (!w)
		return; /* the client sends the body after its timeout anyway */
	if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_continue_written) < 0)
		free(w);
}

/* -- http_parser callbacks: fill c->cur, never dispatch -- */

static int fail(struct repl_conn *c, int status, const char *detail)
{
	c->fail_status = status;
	c->fail_detail = detail;
	/* Any non-zero stops the parser with an HPE_CB_* error, except that
	 * on_headers_complete reads 1 as "no body" and 2 as "upgrade". */
	return -1;
}

static int cb_message_begin(http_parser *p)
{
	struct repl_conn *c = p->data;

	c->cur = req_new(c);
	if (!c->cur)
		return fail(c, 500, "out of memory");
	c->hdr_bytes = 0;
	c->field_len = c->value_len = 0;
	c->in_value = c->expect_continue = c->in_auth = 0;
	c->since_ms = uv_now(&c->srv->loop);
	return 0;
}

static int cb_url(http_parser *p, const char *at, size_t len)
{
	struct repl_conn *c = p->data;
	struct repl_req *req = c->cur;

	if (req->url_len + len > REPL_URL_MAX)
		return fail(c, 414, "URL longer than 4096 bytes");
	memcpy(req->url + req->url_len, at, len);
	req->url_len += len;
	req->url[req->url_len] = '\0';
	return 0;
}

static void check_expect(struct repl_conn *c)
{
	if (c->field_len == 6 && !strncasecmp(c->field, "expect", 6) &&
	    c->value_len == 12 && !strncasecmp(c->value, "100-continue", 12))
		c->expect_continue = 1;
}

static int cb_header_field(http_parser *p, const char *at, size_t len)
{
	struct repl_conn *c = p->data;

	c->hdr_bytes += len;
	if (c->hdr_bytes > REPL_HEADERS_MAX)
		return fail(c, 431, "headers larger than 16384 bytes");
	if (c->in_value) {
		check_expect(c);
		c->in_value = c->in_auth = 0;
		c->field_len = c->value_len = 0;
	}
	if (c->field_len + len <= sizeof(c->field))
		memcpy(c->field + c->field_len, at, len);
	c->field_len += len;
	return 0;
}

static int cb_header_value(http_parser *p, const char *at, size_t len)
{
	struct repl_conn *c = p->data;

	c->hdr_bytes += len;
	if (c->hdr_bytes > REPL_HEADERS_MAX)
		return fail(c, 431, "headers larger than 16384 bytes");
	if (!c->in_value) {
		/* the field is whole: an Authorization value is kept for the
		 * tokens check (the last one; several make it fail) */
		c->in_auth = c->field_len == 13 &&
			     !strncasecmp(c->field, "authorization", 13);
		if (c->in_auth) {
			c->cur->auth_n++;
			c->cur->auth_len = 0;
			c->cur->auth_over = 0;
		}
	}
	c->in_value = 1;
	if (c->in_auth) {
		struct repl_req *req = c->cur;

		if (req->auth_len + len > REPL_AUTH_MAX) {
			req->auth_over = 1;
		} else {
			memcpy(req->auth + req->auth_len, at, len);
			req->auth_len += len;
			req->auth[req->auth_len] = '\0';
		}
	}
	if (c->value_len + len <= sizeof(c->value))
		memcpy(c->value + c->value_len, at, len);
	c->value_len += len;
	return 0;
}

static int cb_headers_complete(http_parser *p)
{
	struct repl_conn *c = p->data;
	struct repl_req *req = c->cur;

	if (c->in_value)
		check_expect(c);
	req->method = (enum http_method)p->method;
	req->head_parsed = 1;
	req->head_ns = uv_hrtime();
	req->head_only = p->method == HTTP_HEAD;
	req->http_minor = p->http_major > 1 ? 1 : p->http_minor;
	if (p->method == HTTP_CONNECT)
		return fail(c, 405, "CONNECT is not supported");
	/* content_length is ULLONG_MAX when there is no Content-Length */
	if (p->content_length != UINT64_MAX &&
	    p->content_length > REPL_BODY_MAX)
		return fail(c, 413, "body larger than 1024 chunk ids");
	if (c->expect_continue && !c->head)
		send_continue(c);
	return 0;
}

static int cb_body(http_parser *p, const char *at, size_t len)
{
	struct repl_conn *c = p->data;
	struct repl_req *req = c->cur;

	if (req->body_len + len > REPL_BODY_MAX)
		return fail(c, 413, "body larger than 1024 chunk ids");
	if (!req->body) {
		req->body = malloc(REPL_BODY_MAX);
		if (!req->body)
			return fail(c, 500, "out of memory");
	}
	memcpy(req->body + req->body_len, at, len);
	req->body_len += len;
	return 0;
}

static int cb_message_complete(http_parser *p)
{
	struct repl_conn *c = p->data;
	struct repl_req *req = c->cur;

	req->keep_alive = http_should_keep_alive(p) && !p->upgrade;
	c->cur = NULL;
	enqueue(c, req);
	if (!req->keep_alive) {
		/* Nothing after a closing request is answered. */
		c->no_more = 1;
		http_parser_pause(p, 1);
	} else if (c->queued >= REPL_PIPELINE_MAX) {
		c->paused = 1;
		http_parser_pause(p, 1);
	}
	return 0;
}

static const http_parser_settings SETTINGS = {
    .on_message_begin = cb_message_begin,
    .on_url = cb_url,
    .on_header_field = cb_header_field,
    .on_header_value = cb_header_value,
    .on_headers_complete = cb_headers_complete,
    .on_body = cb_body,
    .on_message_complete = cb_message_complete,
};

/* The parser failed: answer with an error and take nothing more. */
static void parse_failed(struct repl_conn *c)
{
	struct repl_req *req = c->cur;
	enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);

	c->cur = NULL;
	if (!req)
		req = req_new(c);
	if (!req) {
		conn_close(c);
		return;
	}
	if (!req->head_ns)
		req->head_ns = uv_hrtime();
	req->fail_status = c->fail_status ? c->fail_status : 400;
	req->fail_detail =
	    c->fail_detail ? c->fail_detail : http_errno_description(e);
	req->keep_alive = 0;
	if (!req->http_minor)
		req->http_minor = 1;
	c->no_more = 1;
	c->pend_len = 0;
	enqueue(c, req);
}

static void parse_pending(struct repl_conn *c)
{
	while (c->pend_len > 0 && !c->closing && !c->no_more && !c->paused) {
		size_t n = http_parser_execute(
		    &c->parser, &SETTINGS, c->rbuf + c->pend_off, c->pend_len);
		enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);

		if (n > c->pend_len)
			n = c->pend_len;
		c->pend_off += n;
		c->pend_len -= n;
		if (e == HPE_PAUSED)
			break;
		if (e != HPE_OK) {
			parse_failed(c);
			break;
		}
		if (n == 0)
			break;
	}
	if (c->no_more)
		c->pend_len = 0;
	conn_kick(c);
	update_reading(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct repl_conn *c = h->data;

	(void)hint;
	/* Reading only runs while no unparsed bytes are left in rbuf. */
	*buf = uv_buf_init(c->rbuf, READ_BUF);
}

/* The peer sent all it will: answer what was asked, then close. */
static void conn_on_eof(struct repl_conn *c)
{
	if (!c->head) {
		conn_close(c);
		return;
	}
	c->eof = 1; /* half-close */
	update_reading(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct repl_conn *c = s->data;

	(void)buf;
	if (nread == 0)
		return;
	if (nread < 0) {
		if (nread != UV_EOF)
			conn_close(c);
		else
			conn_on_eof(c);
		return;
	}
	if (c->tls) {
		/* ciphertext: into TLS, plaintext back into rbuf */
		if (repl_tls_conn_feed(c->tls, c->rbuf, (size_t)nread) < 0)
			conn_close(c);
		else
			tls_pump(c);
		return;
	}
	c->pend_off = 0;
	c->pend_len = (size_t)nread;
	parse_pending(c);
}

static void read_start(struct repl_conn *c)
{
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		conn_close(c);
}

/* -- connection limits -- */

enum conn_wait {
	WAIT_SERVER, /* a request is being answered: no timeout, never evicted
		      */
	WAIT_HEAD,   /* the first request, or a request's head, is coming */
	WAIT_IDLE,   /* answered; the next request has not begun */
	WAIT_READER, /* writes in flight: the client must read them */
};

static enum conn_wait conn_wait(const struct repl_conn *c)
{
	if (c->writes)
		return WAIT_READER;
	if (c->head)
		return WAIT_SERVER;
	if (c->cur || !c->answered)
		return WAIT_HEAD;
	return WAIT_IDLE;
}

static void conn_addr_init(struct repl_conn *c)
{
	struct sockaddr_storage ss;
	int len = (int)sizeof(ss);

	c->addr_len = 0;
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		memcpy(c->addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
		c->addr_len = 4;
	} else if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a =
		    &((struct sockaddr_in6 *)&ss)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			memcpy(c->addr, a->s6_addr + 12, 4);
			c->addr_len = 4;
		} else {
			memcpy(c->addr, a->s6_addr, 16);
			c->addr_len = 16;
		}
	}
	len = (int)sizeof(ss);
	if (uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &len) < 0)
		len = 0;
	c->same_host = repl_peer_same_host(
	    c->addr, c->addr_len, len ? (const struct sockaddr *)&ss : NULL);
	repl_adapt_init(&c->adapt);
}

static const char *conn_addr_str(const struct repl_conn *c, char *buf,
				 size_t cap)
{
	if (!c->addr_len || !inet_ntop(c->addr_len == 4 ? AF_INET : AF_INET6,
				       c->addr, buf, (socklen_t)cap))
		snprintf(buf, cap, "unknown");
	return buf;
}

/* Open connections from c's address (c itself not counted). */
static size_t conns_of_addr(const struct repl_server *srv,
			    const struct repl_conn *c)
{
	const struct repl_conn *o;
	size_t n = 0;

	if (!c->addr_len)
		return 0;
	for (o = srv->conns; o; o = o->next)
		n += o != c && o->addr_len == c->addr_len &&
		     !memcmp(o->addr, c->addr, c->addr_len);
	return n;
}

/* The connection that has waited longest for its client, at least
 * REPL_EVICT_GRACE_MS, or NULL when there is none (every one is being
 * answered or began its wait just now). Among equal waits the one
 * accepted first (the list is newest first). A linear walk: it runs only
 * at the cap. */
static struct repl_conn *conn_oldest_waiting(struct repl_server *srv)
{
	uint64_t now = uv_now(&srv->loop);
	struct repl_conn *o, *best = NULL;
	enum conn_wait w;

	for (o = srv->conns; o; o = o->next) {
		w = conn_wait(o);
		if (o->closing || (w != WAIT_HEAD && w != WAIT_IDLE) ||
		    now - o->since_ms < REPL_EVICT_GRACE_MS)
			continue;
		if (!best || o->since_ms <= best->since_ms)
			best = o;
	}
	return best;
}

/* One warning per kind and REPL_LIMIT_LOG_MS: a flood of refusals must
 * not become a flood of log lines. */
static void limit_log(struct repl_server *srv, struct repl_limit_log *l,
		      enum repl_limit_kind kind, const char *what,
		      const char *why, const struct repl_conn *c)
{
	uint64_t now = uv_now(&srv->loop);
	char addr[INET6_ADDRSTRLEN + 1];

	srv->metrics.conns_limited[kind]++;
	l->n++;
	if (l->last_ms && now - l->last_ms < REPL_LIMIT_LOG_MS)
		return;
	base_warn("%s why=\"%s\" addr=%s count=%" PRIu64 " conns=%zu", what,
		  why, c ? conn_addr_str(c, addr, sizeof(addr)) : "-", l->n,
		  srv->n_conns);
	l->last_ms = now ? now : 1;
	l->n = 0;
}

/* Make room by closing the connection that waited longest for its client.
 * 0, or -EBUSY when every connection is being answered. */
static int conn_evict(struct repl_server *srv, const char *why)
{
	struct repl_conn *v = conn_oldest_waiting(srv);
	char addr[INET6_ADDRSTRLEN + 1];

	if (!v)
		return -EBUSY;
	limit_log(srv, &srv->log_evict, REPL_LIM_EVICTED,
		  "connection closed to make room", why, v);
	base_debug("connection closed to make room addr=%s waited_ms=%" PRIu64,
		   conn_addr_str(v, addr, sizeof(addr)),
		   uv_now(&srv->loop) - v->since_ms);
	conn_close(v);
	return 0;
}

static void on_sweep(uv_timer_t *t)
{
	struct repl_server *srv = t->data;
	uint64_t now = uv_now(&srv->loop), limit;
	struct repl_conn *c, *n;
	char addr[INET6_ADDRSTRLEN + 1];
	const char *why;
	enum repl_limit_kind kind;

	for (c = srv->conns; c; c = n) {
		n = c->next; /* closing c unlinks c alone */
		switch (conn_wait(c)) {
		case WAIT_SERVER:
			continue;
		case WAIT_HEAD:
			limit = srv->limits.header_ms;
			why = "header timeout";
			kind = REPL_LIM_HEADER;
			break;
		case WAIT_IDLE:
			limit = srv->limits.idle_ms;
			why = "idle timeout";
			kind = REPL_LIM_IDLE;
			break;
		default:
			limit = srv->limits.idle_ms;
			why = "answer not read";
			kind = REPL_LIM_UNREAD;
			break;
		}
		if (now - c->since_ms < limit)
			continue;
		base_debug("connection closed why=\"%s\" addr=%s", why,
			   conn_addr_str(c, addr, sizeof(addr)));
		srv->metrics.conns_limited[kind]++;
		conn_close(c);
	}
	/* accepting paused at the cap: go on once there is room */
	if (srv->accept_paused && !srv->stopping &&
	    (srv->n_conns < srv->limits.max_conns ||
	     conn_oldest_waiting(srv))) {
		srv->accept_paused = 0;
		repl_http_on_connection((uv_stream_t *)&srv->listener, 0);
	}
	if (!srv->conns && !srv->accept_paused) {
		uv_timer_stop(t);
		srv->sweep_on = 0;
	}
}

void repl_http_init(struct repl_server *srv)
{
	uv_timer_init(&srv->loop, &srv->sweep);
	srv->sweep.data = srv;
	srv->sweep_ready = 1;
}

void repl_http_on_connection(uv_stream_t *server, int status)
{
	struct repl_server *srv = server->data;
	struct repl_conn *c;

	if (status == UV_EMFILE || status == UV_ENFILE) {
		/* libuv has refused what was waiting (its reserve-fd trick);
		 * give the next client a descriptor */
		limit_log(srv, &srv->log_full, REPL_LIM_NO_FDS,
			  "connections refused", "out of file descriptors",
			  NULL);
		conn_evict(srv, "out of file descriptors");
		return;
	}
	if (status < 0)
		return;
	if (!srv->stopping && srv->n_conns >= srv->limits.max_conns &&
	    !conn_oldest_waiting(srv)) {
		/* not accepted: libuv holds it and stops polling the listener
		 * until the sweep calls here again */
		srv->accept_paused = 1;
		limit_log(srv, &srv->log_full, REPL_LIM_CAP_WAIT,
			  "connections wait",
			  "connection cap, none idle long enough", NULL);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->srv = srv;
	c->refs = 1;
	uv_tcp_init(&srv->loop, &c->tcp);
	c->tcp.data = c;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 || srv->stopping)
		goto refuse;
	conn_addr_init(c);
	if (srv->limits.per_addr &&
	    conns_of_addr(srv, c) >= srv->limits.per_addr) {
		limit_log(srv, &srv->log_addr, REPL_LIM_PER_ADDR,
			  "connections refused", "per-address cap", c);
		goto refuse;
	}
	/* a connection to close was found above, before the accept */
	if (srv->n_conns >= srv->limits.max_conns &&
	    conn_evict(srv, "connection cap") < 0)
		goto refuse;
	uv_tcp_nodelay(&c->tcp, 1);
	if (srv->tls) {
		/* the context of now: a reload later does not change it */
		c->tls = repl_tls_conn_new(srv->tls);
		if (!c->tls) {
			uv_close((uv_handle_t *)&c->tcp, on_close);
			return;
		}
	}
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	srv->metrics.conns_accepted++;
	c->since_ms = uv_now(&srv->loop);
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	srv->n_conns++;
	if (!srv->sweep_on && srv->sweep_ready) {
		srv->sweep_on = 1;
		uv_timer_start(&srv->sweep, on_sweep, REPL_SWEEP_MS,
			       REPL_SWEEP_MS);
	}
	update_reading(c);
	return;
refuse:
	uv_close((uv_handle_t *)&c->tcp, on_close);
}

/* -- TLS: the same connection, with records in between -- */

/* Decrypt what the peer sent into rbuf and parse it, for as long as the
 * connection takes more (what a socket read does for plain HTTP, from
 * TLS's buffer), then send what TLS has to say (the handshake, an alert)
 * and read the socket while more is taken. */
static void tls_pump(struct repl_conn *c)
{
	ssize_t n = 0;

	c->tls_pumping = 1;
	while (conn_takes_more(c)) {
		n = repl_tls_conn_read(c->tls, c->rbuf, READ_BUF);
		if (n <= 0)
			break;
		c->pend_off = 0;
		c->pend_len = (size_t)n;
		parse_pending(c);
	}
	if (!c->closing && n == -ENOPROTOOPT) {
		/* Plain HTTP on the https port: answered in the clear (an
		 * error of ours, nothing served) so the client learns why,
		 * then closed. */
		repl_tls_conn_free(c->tls);
		c->tls = NULL;
		c->fail_status = 400;
		c->fail_detail =
		    "this server speaks https: use an https:// URL";
		parse_failed(c);
		conn_kick(c);
	}
	if (!c->closing && c->tls && tls_flush(c) < 0)
		conn_close(c);
	if (!c->closing && n == -ESHUTDOWN) {
		conn_on_eof(c);
	} else if (!c->closing && c->tls && n < 0) {
		/* A refused handshake or a bad record: the alert is on its
		 * way; nothing more is read or answered. */
		base_debug("tls failed why=\"%s\"", repl_tls_conn_why(c->tls));
		c->no_more = 1;
		if (c->head)
			conn_close(c);
		else
			conn_finish(c);
	}
	if (!c->closing)
		update_reading(c); /* the socket's turn */
	c->tls_pumping = 0;
}

static void on_tls_written(uv_write_t *w, int status)
{
	struct tls_wr *t = (struct tls_wr *)w;

	/* a failure shows in the connection's next read or write too */
	(void)status;
	free(t->cipher);
	free(t);
}

/* Send the records TLS made that no request waits for. Returns 0, or -1
 * when they could not be sent (the caller closes the connection). */
static int tls_flush(struct repl_conn *c)
{
	struct tls_wr *t;
	char *p;
	size_t n;
	uv_buf_t b;

	if (repl_tls_conn_take(c->tls, &p, &n) < 0)
		return -1;
	if (n == 0)
		return 0;
	t = malloc(sizeof(*t));
	if (!t) {
		free(p);
		return -1;
	}
	t->cipher = p;
	b = uv_buf_init(p, (unsigned)n);
	if (uv_write(&t->w, (uv_stream_t *)&c->tcp, &b, 1, on_tls_written) <
	    0) {
		free(p);
		free(t);
		return -1;
	}
	return 0;
}

/* -- writing -- */

static void on_written(uv_write_t *w, int status)
{
	struct repl_wr *wr = (struct repl_wr *)w;
	struct repl_req *req = wr->req;

	/* progress: the client reads (the idle timeout counts from here) */
	req->conn->writes--;
	req->conn->since_ms = uv_now(&req->srv->loop);
	if (wr->cb)
		wr->cb(req, wr->arg, status);
	if (status < 0 && !req->conn->closing)
		conn_close(req->conn);
	repl_req_unref(req);
	free(wr->cipher);
	free(wr);
}

/* repl_http_send on a TLS connection: every byte goes out as records, in
 * the order sent; cb still waits until they are written (the callers'
 * flow control), though data is encrypted (copied) at once. */
static int tls_send(struct repl_req *req, const void *pre, size_t pre_len,
		    const void *data, size_t data_len, const void *post,
		    size_t post_len, repl_write_cb cb, void *arg)
{
	struct repl_conn *c = req->conn;
	struct repl_wr *wr = calloc(1, sizeof(*wr));
	uv_buf_t b;
	size_t n = 0;

	if (!wr ||
	    repl_tls_conn_reserve(c->tls, pre_len + data_len + post_len) < 0 ||
	    (pre_len && repl_tls_conn_write(c->tls, pre, pre_len) < 0) ||
	    (data_len && repl_tls_conn_write(c->tls, data, data_len) < 0) ||
	    (post_len && repl_tls_conn_write(c->tls, post, post_len) < 0) ||
	    repl_tls_conn_take(c->tls, &wr->cipher, &n) < 0)
		goto fail;
	wr->req = req;
	wr->cb = cb;
	wr->arg = arg;
	b = uv_buf_init(wr->cipher, (unsigned)n);
	if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0)
		goto fail;
	repl_req_ref(req);
	return 0;
fail:
	if (wr)
		free(wr->cipher);
	free(wr);
	conn_close(c);
	return -ECANCELED;
}

int repl_http_send(struct repl_req *req, const void *pre, size_t pre_len,
		   const void *data, size_t data_len, const void *post,
		   size_t post_len, repl_write_cb cb, void *arg)
{
	struct repl_conn *c = req->conn;
	struct repl_wr *wr;
	uv_buf_t bufs[3];
	unsigned n = 0;

	if (c->closing || req->dead)
		return -ECANCELED;
	req->srv->metrics.response_bytes += pre_len + data_len + post_len;
	if (!req->counted)
		repl_metrics_first_byte(req);
	if (c->tls)
		return tls_send(req, pre, pre_len, data, data_len, post,
				post_len, cb, arg);
	wr = malloc(sizeof(*wr) + pre_len + post_len);
	if (!wr) {
		conn_close(c);
		return -ECANCELED;
	}
	wr->req = req;
	wr->cb = cb;
	wr->arg = arg;
	wr->cipher = NULL;
	if (pre_len) {
		memcpy(wr->bytes, pre, pre_len);
		bufs[n++] = uv_buf_init(wr->bytes, (unsigned)pre_len);
	}
	if (data_len)
		bufs[n++] = uv_buf_init((char *)data, (unsigned)data_len);
	if (post_len) {
		memcpy(wr->bytes + pre_len, post, post_len);
		bufs[n++] =
		    uv_buf_init(wr->bytes + pre_len, (unsigned)post_len);
	}
	if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, bufs, n, on_written) < 0) {
		free(wr);
		conn_close(c);
		return -ECANCELED;
	}
	if (c->writes++ == 0)
		c->since_ms = uv_now(&req->srv->loop);
	repl_req_ref(req);
	return 0;
}

static const char *status_text(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 304:
		return "Not Modified";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 409:
		return "Conflict";
	case 413:
		return "Payload Too Large";
	case 414:
		return "URI Too Long";
	case 431:
		return "Request Header Fields Too Large";
	case 503:
		return "Service Unavailable";
	default:
		return status >= 500 ? "Internal Server Error" : "Error";
	}
}

int repl_http_head(struct repl_req *req, int status, const char *ctype,
		   int64_t content_length, const char *extra, char *buf,
		   size_t cap)
{
	char date[64], len_line[64];
	struct tm tm;
	time_t now = time(NULL);
	const char *conn_line = "";
	int n;

	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (content_length >= 0) {
		snprintf(len_line, sizeof(len_line),
			 "Content-Length: %" PRId64 "\r\n", content_length);
	} else if (req->http_minor >= 1) {
		req->chunked = 1;
		snprintf(len_line, sizeof(len_line),
			 "Transfer-Encoding: chunked\r\n");
	} else {
		req->keep_alive = 0; /* HTTP/1.0: the close ends the body */
		len_line[0] = '\0';
	}
	if (!req->keep_alive)
		conn_line = "Connection: close\r\n";
	else if (req->http_minor == 0)
		conn_line = "Connection: keep-alive\r\n";
	req->status = status;
	n = snprintf(buf, cap,
		     "HTTP/1.1 %d %s\r\n"
		     "Server: ferry-replicator/" FERRY_VERSION "\r\n"
		     "Date: %s\r\n"
		     "Content-Type: %s\r\n"
		     "%s%s%s\r\n",
		     status, status_text(status), date, ctype, len_line,
		     extra ? extra : "", conn_line);
	if (n < 0 || (size_t)n >= cap)
		return -ENOBUFS;
	return n;
}

void repl_http_respond(struct repl_req *req, int status, const char *ctype,
		       const char *extra, const void *body, size_t len)
{
	char head[1024];
	int n = repl_http_head(req, status, ctype, (int64_t)len, extra, head,
			       sizeof(head));

	if (n < 0) {
		repl_http_abort(req);
		return;
	}
	if (req->head_only)
		len = 0;
	/* small bodies: copied with the head, one write */
	if (repl_http_send(req, head, (size_t)n, NULL, 0, body, len, NULL,
			   NULL) < 0)
		return;
	repl_http_done(req);
}

/* The body of an error answer: {"error":code,"detail":detail} and a
 * newline, through jansson. Returns its length, or -ENOMEM / -ENOBUFS. */
static int error_body(const char *code, const char *detail, char *buf,
		      size_t cap)
{
	json_t *o = json_object();
	int n = -ENOMEM;

	if (!o)
		return n;
	/* code is one of ours, ASCII; detail may hold a client's URL bytes
	 * or a file name: base_json_bytes keeps valid UTF-8 and shows every
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

void repl_http_error(struct repl_req *req, int status, const char *code,
		     const char *extra, const char *fmt, ...)
{
	/* A detail byte grows to at most 6 in the body (a control character
	 * as \u00XX), so body[] always holds a whole detail[]. */
	char detail[512], body[6 * sizeof(detail) + 128];
	va_list ap;
	int n;

	repl_metrics_error_code(req->srv, code);
	va_start(ap, fmt);
	n = vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (n < 0)
		detail[0] = '\0';
	n = error_body(code, detail, body, sizeof(body));
	if (n < 0)
		n = error_body(code, "", body, sizeof(body));
	if (n < 0) {
		/* out of memory: the status line alone still says it */
		repl_http_respond(req, status, "application/json", extra, NULL,
				  0);
		return;
	}
	repl_http_respond(req, status, "application/json", extra, body,
			  (size_t)n);
}

void repl_http_done(struct repl_req *req)
{
	struct repl_conn *c = req->conn;
	int keep;

	if (req->done || req->dead)
		return;
	req->done = 1;
	/* the access log: one debug line per answered request (-v) */
	base_debug("request method=%s url=%.*s status=%d",
		   req->head_parsed ? http_method_str(req->method) : "-",
		   (int)req->url_len, req->url, req->status);
	/* the answered request is always the head */
	c->head = req->next;
	if (!c->head)
		c->tail = NULL;
	c->queued--;
	c->answered++;
	c->since_ms = uv_now(&req->srv->loop);
	req->next = NULL;
	keep = req->keep_alive;
	repl_req_unref(req);
	if (!keep) {
		c->no_more = 1;
		conn_finish(c);
		return;
	}
	if (c->paused && c->queued < REPL_PIPELINE_MAX) {
		c->paused = 0;
		http_parser_pause(&c->parser, 0);
		parse_pending(c);
		return;
	}
	conn_kick(c);
}

void repl_http_abort(struct repl_req *req)
{
	if (!req->dead) {
		req->srv->metrics.errors[REPL_ERR_ABORTED]++;
		conn_close(req->conn);
	}
}

int repl_http_peer_same_host(const struct repl_req *req)
{
	return req->conn->same_host;
}

int repl_http_adapt_lz4(const struct repl_req *req)
{
	return req->conn->adapt.lz4;
}

void repl_http_adapt_note(struct repl_req *req)
{
	struct repl_conn *c = req->conn;
	size_t unsent =
	    uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
	uv_os_fd_t fd;
	int n;

	/* The socket's bytes not yet sent (TCP: SIOCOUTQNSD); a socket
	 * that cannot tell counts its libuv queue only. */
	if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 &&
	    ioctl(fd, SIOCOUTQNSD, &n) == 0 && n > 0)
		unsent += (size_t)n;
	repl_adapt_note(&c->adapt, unsent);
}

int repl_http_peer_loopback(const struct repl_req *req)
{
	/* conn_addr_init stores an IPv4-mapped address as IPv4 */
	return repl_peer_loopback(req->conn->addr, req->conn->addr_len);
}
