/*
 * catalog/httpd/httpd_conn.c — one HTTP/1.1 connection of the engine:
 * read (through TLS when the server has it), feed the reader, queue the
 * requests, dispatch them one at a time in order, write their answers,
 * keep-alive and pipelining; and the HTTP/1.1 transport under those
 * requests (struct httpd_tx: heads as text, chunked bodies, the last
 * chunk).
 *
 * The reader never calls a server: it stops at each event and this file
 * acts on it; the server's dispatch runs from conn_kick once the bytes in
 * hand are parsed as far as the queue allows, so a dispatch that answers
 * (or closes the connection) at once never re-enters the reader.
 *
 * A head waits in its request until the first body bytes or the end of
 * the answer, and goes out in the same write: a small answer is one
 * write, one segment on the wire.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "catalog/httpd/httpd_priv.h"
#include "catalog/httpd/httpd_tls_priv.h"

/* A write of a request: head, chunk prefix and pre copied into bytes,
 * then the caller's data, then the chunk's end. */
struct h1_wr {
	uv_write_t w;
	struct httpd_req *req;
	httpd_write_cb cb;
	void *arg;
	char *cipher;	/* TLS: the records written */
	size_t charged; /* their bytes, reserved on the request */
	char bytes[];
};

/* TLS records no request waits for: handshake, alerts, close_notify. */
struct tls_wr {
	uv_write_t w;
	char *cipher;
};

static const char CONTINUE[] = "HTTP/1.1 100 Continue\r\n\r\n";
static const char CHUNK_EOL[] = "\r\n";

static void conn_kick(struct httpd_conn *c);
static int body_ready(struct httpd_conn *c, struct httpd_req *req);
static void body_granted(struct httpd_req *req, void *arg);

/* The read buffer, made when a read comes and let go once its bytes are
 * parsed: thousands of connections waiting hold none. A small one while
 * the tenant holds its share: a request's head is read, its body stays
 * in the socket until there is room for it. NULL: no memory. */
static char *rbuf_get(struct httpd_conn *c)
{
	if (!c->rbuf) {
		c->rbuf_cap = httpd_tenant_over(c->srv, c->tenant)
				  ? HTTPD_READ_SMALL
				  : HTTPD_READ_BUF;
		c->rbuf = malloc(c->rbuf_cap);
	}
	return c->rbuf;
}

static void rbuf_drop(struct httpd_conn *c)
{
	if (c->pend_len == 0) {
		free(c->rbuf);
		c->rbuf = NULL;
	}
}
static void parse_pending(struct httpd_conn *c);
static void read_start(struct httpd_conn *c);
static void tls_pump(struct httpd_conn *c);
static int tls_flush(struct httpd_conn *c);

static void conn_unref(struct httpd_conn *c)
{
	struct httpd_server *s = c->srv;

	if (--c->refs > 0)
		return;
	httpd_tls_conn_free(c->tls);
	httpd_reader_fini(&c->rd);
	httpd_tenant_put(s, c->tenant);
	free(c->rbuf);
	free(c);
	httpd_server_unref(s);
}

static void on_close(uv_handle_t *h)
{
	conn_unref(h->data);
}

static struct httpd_req *req_new(struct httpd_conn *c, size_t url_len)
{
	struct httpd_server *s = c->srv;
	/* the server's struct, then the URL */
	size_t size = (s->o.req_size + 15) & ~(size_t)15;
	struct httpd_req *req = calloc(1, size + url_len + 1);

	if (!req)
		return NULL;
	req->url = (char *)req + size;
	req->ctx = s->o.ctx;
	req->conn_data = c->data;
	req->x.srv = s;
	req->x.conn = c;
	req->x.tx = &HTTPD_TX_H1;
	req->x.refs = 1; /* the reader's, then the queue's */
	req->x.http_minor = 1;
	c->refs++;
	return req;
}

enum httpd_wait httpd_conn_wait(const struct httpd_conn *c)
{
	if (c->writes || c->budget_waits)
		return HTTPD_WAIT_READER;
	if (c->head)
		return HTTPD_WAIT_SERVER;
	if (c->cur || httpd_reader_busy(&c->rd) || !c->answered)
		return HTTPD_WAIT_HEAD;
	return HTTPD_WAIT_IDLE;
}

/* 1 when a request is in hand and the tenant holds its share of bytes:
 * further requests wait in the socket (they would only add their bodies
 * to what a client that does not read holds). */
static int held_back(const struct httpd_conn *c)
{
	return c->head && httpd_tenant_over(c->srv, c->tenant);
}

/* 1 while the connection takes more bytes to parse. */
static int conn_takes_more(const struct httpd_conn *c)
{
	return !c->closing && !c->shutting && !c->eof && !c->no_more &&
	       !c->paused && !c->body_wait && c->pend_len == 0 && !held_back(c);
}

static void update_reading(struct httpd_conn *c)
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

static void on_shutdown(uv_shutdown_t *sh, int status)
{
	(void)status;
	httpd_conn_close(sh->data);
}

/* Close once everything queued has been written. */
static void conn_finish(struct httpd_conn *c)
{
	if (c->closing || c->shutting)
		return;
	c->shutting = 1;
	update_reading(c);
	if (c->tls) {
		httpd_tls_conn_shutdown(c->tls);
		if (tls_flush(c) < 0) {
			httpd_conn_close(c);
			return;
		}
	}
	c->shut.data = c;
	if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
		httpd_conn_close(c);
}

void httpd_conn_close(struct httpd_conn *c)
{
	struct httpd_req *r, *n;

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
	c->prev = c->next = NULL;
	c->srv->n_conns--;
	httpd_tenant_conn_closed(c);
	if (c->cur) {
		c->cur->dead = 1;
		httpd_req_unref(c->cur);
		c->cur = NULL;
	}
	for (r = c->head; r; r = n) {
		n = r->x.next;
		r->dead = 1;
		httpd_req_unref(r);
	}
	c->head = c->tail = NULL;
	c->queued = 0;
	/* Pending writes get their callbacks (UV_ECANCELED) before on_close. */
	if (c->reset && c->writes && !c->shutting && !c->srv->unix_sock &&
	    uv_tcp_close_reset(&c->tcp.tcp, on_close) == 0)
		return;
	uv_close((uv_handle_t *)&c->tcp, on_close);
}

void httpd_conn_reset(struct httpd_conn *c)
{
	c->reset = 1;
	httpd_conn_close(c);
}

static void enqueue(struct httpd_conn *c, struct httpd_req *req)
{
	if (c->tail)
		c->tail->x.next = req;
	else
		c->head = req;
	c->tail = req;
	c->queued++;
	c->taken++;
}

/* Dispatch the head request if it has not started; a server that answers
 * at once calls done, which comes back here through the loop rather than
 * by recursion. */
static void conn_kick(struct httpd_conn *c)
{
	if (c->kicking)
		return;
	c->kicking = 1;
	while (!c->closing && c->head && !c->head->x.started) {
		c->head->x.started = 1;
		c->srv->o.dispatch(c->head);
	}
	c->kicking = 0;
	/* Nothing left to answer and nothing more coming (a half-sent
	 * request after EOF will never complete either). */
	if (!c->closing && !c->head && (c->eof || c->no_more))
		conn_finish(c);
}

static void on_continue_written(uv_write_t *w, int status)
{
	(void)status;
	free(w);
}

static void send_continue(struct httpd_conn *c)
{
	uv_write_t *w;
	uv_buf_t b = uv_buf_init((char *)CONTINUE, sizeof(CONTINUE) - 1);

	if (c->tls) {
		/* Encrypted now; a failed flush leaves the records for the
		 * next one (closing here would pull the request out from
		 * under the parse loop). */
		if (httpd_tls_conn_write(c->tls, CONTINUE,
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

/* The request was refused (by the reader, or before it: plain HTTP on
 * the TLS port): queue it to be answered with status, take nothing
 * more. */
static void parse_failed(struct httpd_conn *c, int status, const char *detail)
{
	struct httpd_req *req = c->cur;

	c->cur = NULL;
	if (!req)
		req = req_new(c, 0);
	if (!req) {
		httpd_conn_close(c);
		return;
	}
	if (!req->head_ns)
		req->head_ns = uv_hrtime();
	req->fail_status = status;
	req->fail_detail = detail;
	req->x.keep_alive = 0;
	c->no_more = 1;
	c->pend_len = 0;
	enqueue(c, req);
}

/* The head is whole: the request is made from it, and told to the
 * server header by header. -1 when it could not be (the connection is
 * then failing). */
static int on_head(struct httpd_conn *c)
{
	const struct httpd_server *s = c->srv;
	struct httpd_msg m;
	struct httpd_req *req;
	size_t i;

	httpd_reader_msg(&c->rd, &m);
	req = req_new(c, m.url_len);
	if (!req) {
		parse_failed(c, 500, "out of memory");
		return -1;
	}
	memcpy(req->url, m.url, m.url_len);
	req->url_len = m.url_len;
	req->method = m.method;
	req->method_name = m.method_name;
	req->head_only = m.method == HTTPD_HEAD;
	req->head_ns = uv_hrtime();
	req->x.http_minor = m.http_minor;
	c->cur = req;
	if (s->o.header)
		for (i = 0; i < m.nfields; i++) {
			char *n, *v;
			size_t nl, vl;

			httpd_reader_field(&c->rd, i, &n, &nl, &v, &vl);
			s->o.header(req, n, nl, v, vl);
		}
	c->want_continue = m.expect_continue;
	/* a body of a said length (the reader held it to body_max) gets
	 * its room at once, up to a size worth asking for: its bytes are
	 * reserved first (the tenant's share: a client's, or an address's
	 * until a request names it), and until they are the rest waits in
	 * the socket */
	if (m.length != UINT64_MAX && m.length > 0 && m.length <= (1u << 20)) {
		req->x.body_cap = (size_t)m.length;
		switch (httpd_req_reserve(req, req->x.body_cap, body_granted,
					  NULL)) {
		case 0:
			break;
		case -EAGAIN:
			c->body_wait = 1;
			return 0;
		default:
			return -1;
		}
	}
	return body_ready(c, req);
}

/* The body's room is reserved: allocate it and tell a client waiting
 * to send it, unless answers are queued ahead (then it sends after its
 * own timeout). 0, or -1 failing. */
static int body_ready(struct httpd_conn *c, struct httpd_req *req)
{
	if (req->x.body_cap) {
		req->body = malloc(req->x.body_cap);
		if (!req->body) {
			parse_failed(c, 500, "out of memory");
			return -1;
		}
	}
	if (c->want_continue && !c->head)
		send_continue(c);
	c->want_continue = 0;
	return 0;
}

static void body_granted(struct httpd_req *req, void *arg)
{
	struct httpd_conn *c = req->x.conn;

	(void)arg;
	c->body_wait = 0;
	if (body_ready(c, req) == 0)
		parse_pending(c);
	else
		conn_kick(c); /* the 500 queued */
}

static int on_body(struct httpd_conn *c)
{
	struct httpd_req *req = c->cur;
	const char *at;
	size_t len, want;

	httpd_reader_body(&c->rd, &at, &len);
	/* the reader holds the body to body_max; a chunked one (no length
	 * said) grows by doubling */
	want = req->body_len + len;
	if (want > req->x.body_cap) {
		size_t cap = 2 * want < 4096 ? 4096 : 2 * want;
		uint8_t *b = realloc(req->body, cap);

		if (!b) {
			parse_failed(c, 500, "out of memory");
			return -1;
		}
		/* counted as it grows (the reader holds it to body_max) */
		(void)httpd_req_reserve(req, cap - req->x.body_cap, NULL, NULL);
		req->body = b;
		req->x.body_cap = cap;
	}
	memcpy(req->body + req->body_len, at, len);
	req->body_len = want;
	return 0;
}

static void on_end(struct httpd_conn *c)
{
	struct httpd_req *req = c->cur;
	unsigned per_conn = c->srv->lim.per_conn;

	c->cur = NULL;
	req->x.keep_alive = httpd_reader_keep_alive(&c->rd) &&
			    (!per_conn || c->taken + 1 < per_conn);
	enqueue(c, req);
	if (!req->x.keep_alive)
		c->no_more = 1; /* nothing after a closing request is read */
	else if (c->queued >= c->srv->lim.pipeline)
		c->paused = 1;
}

static void parse_pending(struct httpd_conn *c)
{
	while (c->pend_len > 0 && !c->closing && !c->no_more && !c->paused &&
	       !c->body_wait && !held_back(c)) {
		int was_busy = httpd_reader_busy(&c->rd);
		const char *detail;
		enum httpd_rd ev;
		size_t n;

		ev = httpd_reader_feed(&c->rd, c->rbuf + c->pend_off,
				       c->pend_len, &n);
		c->pend_off += n;
		c->pend_len -= n;
		/* a request's first byte: the header timeout counts from
		 * here (CRLFs between requests are not a request) */
		if (!was_busy &&
		    (httpd_reader_busy(&c->rd) || ev != HTTPD_RD_MORE))
			c->since_ms = uv_now(c->srv->loop);
		if (ev == HTTPD_RD_HEAD) {
			if (on_head(c) < 0)
				break;
		} else if (ev == HTTPD_RD_BODY) {
			if (on_body(c) < 0)
				break;
		} else if (ev == HTTPD_RD_END) {
			on_end(c);
		} else if (ev == HTTPD_RD_FAIL) {
			int st = httpd_reader_fail(&c->rd, &detail);

			parse_failed(c, st, detail);
			break;
		} else if (n == 0) {
			break;
		}
	}
	if (c->no_more)
		c->pend_len = 0;
	rbuf_drop(c);
	conn_kick(c);
	if (!c->closing)
		update_reading(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct httpd_conn *c = h->data;
	/* Reading only runs while no unparsed bytes are left in rbuf;
	 * none: libuv says UV_ENOBUFS, and the connection closes */
	char *b = rbuf_get(c);

	(void)hint;
	*buf = uv_buf_init(b, b ? (unsigned)c->rbuf_cap : 0);
}

/* The peer sent all it will: answer what was asked, then close. */
static void conn_on_eof(struct httpd_conn *c)
{
	if (!c->head) {
		httpd_conn_close(c);
		return;
	}
	c->eof = 1; /* half-close */
	update_reading(c);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct httpd_conn *c = st->data;

	(void)buf;
	if (nread <= 0)
		rbuf_drop(c);
	if (nread == 0)
		return;
	if (nread < 0) {
		if (nread != UV_EOF)
			httpd_conn_close(c);
		else
			conn_on_eof(c);
		return;
	}
	if (c->tls) {
		/* ciphertext: into TLS, plaintext back into rbuf */
		if (httpd_tls_conn_feed(c->tls, c->rbuf, (size_t)nread) < 0)
			httpd_conn_close(c);
		else
			tls_pump(c);
		return;
	}
	c->pend_off = 0;
	c->pend_len = (size_t)nread;
	parse_pending(c);
}

static void read_start(struct httpd_conn *c)
{
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		httpd_conn_close(c);
}

static void peer_init(struct httpd_conn *c)
{
	struct sockaddr_storage ss;
	struct httpd_peer *p = &c->peer;
	int len = (int)sizeof(ss);

	p->addr_len = 0;
	p->same_host = -1;
	p->local_ok = 0;
	if (c->srv->unix_sock) {
		/* A Unix socket's peer has no address; it is the end of an
		 * ssh channel (ferry's ssh transport), whose client is on
		 * another host: answers are framed as for a remote one. */
		p->same_host = 0;
		return;
	}
	if (uv_tcp_getpeername(&c->tcp.tcp, (struct sockaddr *)&ss, &len) ==
	    0) {
		if (ss.ss_family == AF_INET) {
			memcpy(p->addr, &((struct sockaddr_in *)&ss)->sin_addr,
			       4);
			p->addr_len = 4;
		} else if (ss.ss_family == AF_INET6) {
			const struct in6_addr *a =
			    &((struct sockaddr_in6 *)&ss)->sin6_addr;

			if (IN6_IS_ADDR_V4MAPPED(a)) {
				memcpy(p->addr, a->s6_addr + 12, 4);
				p->addr_len = 4;
			} else {
				memcpy(p->addr, a->s6_addr, 16);
				p->addr_len = 16;
			}
		}
	}
	len = (int)sizeof(p->local);
	p->local_ok = uv_tcp_getsockname(
			  &c->tcp.tcp, (struct sockaddr *)&p->local, &len) == 0;
}

/* Open connections from c's address (c itself not counted). */
static size_t conns_of_addr(const struct httpd_server *s,
			    const struct httpd_conn *c)
{
	const struct httpd_conn *o;
	size_t n = 0;

	if (!c->peer.addr_len)
		return 0;
	for (o = s->conns; o; o = o->next)
		n += o != c && o->peer.addr_len == c->peer.addr_len &&
		     !memcmp(o->peer.addr, c->peer.addr, c->peer.addr_len);
	return n;
}

void httpd_conn_accept(struct httpd_server *s)
{
	/* the server's bytes after the connection, aligned */
	size_t size = (sizeof(struct httpd_conn) + 15) & ~(size_t)15;
	struct httpd_conn *c = calloc(1, size + s->o.conn_size);

	if (!c)
		return;
	c->srv = s;
	c->refs = 1;
	s->refs++;
	c->data = s->o.conn_size ? (char *)c + size : NULL;
	httpd_reader_init(&c->rd, &s->lim);
	if (s->unix_sock)
		uv_pipe_init(s->loop, &c->tcp.pipe, 0);
	else
		uv_tcp_init(s->loop, &c->tcp.tcp);
	c->tcp.h.data = c;
	if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) < 0)
		goto refuse;
	peer_init(c);
	if (s->lim.per_addr && conns_of_addr(s, c) >= s->lim.per_addr) {
		httpd_server_limit(s, HTTPD_LIM_PER_ADDR, "connections refused",
				   "per-address cap", c);
		goto refuse;
	}
	/* a connection to close was found before the accept */
	if (s->n_conns >= s->lim.max_conns &&
	    httpd_server_evict(s, "connection cap") < 0)
		goto refuse;
	c->tenant = httpd_tenant_get(s, httpd_tenant_addr_key(&c->peer));
	if (!c->tenant)
		goto refuse;
	c->tenant->conns++;
	if (!s->unix_sock)
		uv_tcp_nodelay(&c->tcp.tcp, 1);
	if (s->o.tls) {
		/* the context of now: a reload later does not change it */
		c->tls = httpd_tls_conn_new(s->o.tls);
		if (!c->tls)
			goto refuse;
	}
	if (s->o.hooks.accepted)
		s->o.hooks.accepted(s->o.ctx);
	c->since_ms = uv_now(s->loop);
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->n_conns++;
	httpd_server_sweep_on(s);
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
static void tls_pump(struct httpd_conn *c)
{
	ssize_t n = 0;

	c->tls_pumping = 1;
	while (conn_takes_more(c)) {
		if (!rbuf_get(c)) {
			httpd_conn_close(c);
			break;
		}
		n = httpd_tls_conn_read(c->tls, c->rbuf, c->rbuf_cap);
		if (n <= 0) {
			rbuf_drop(c);
			break;
		}
		c->pend_off = 0;
		c->pend_len = (size_t)n;
		parse_pending(c);
	}
	if (!c->closing && n == -ENOPROTOOPT) {
		/* Plain HTTP on the https port: answered in the clear (an
		 * error of ours, nothing served) so the client learns why,
		 * then closed. */
		httpd_tls_conn_free(c->tls);
		c->tls = NULL;
		parse_failed(c, 400,
			     "this server speaks https: use an https:// URL");
		conn_kick(c);
	}
	if (!c->closing && c->tls && tls_flush(c) < 0)
		httpd_conn_close(c);
	if (!c->closing && n == -ESHUTDOWN) {
		conn_on_eof(c);
	} else if (!c->closing && c->tls && n < 0) {
		/* A refused handshake or a bad record: the alert is on its
		 * way; nothing more is read or answered. */
		base_debug("tls failed why=\"%s\"", httpd_tls_conn_why(c->tls));
		c->no_more = 1;
		if (c->head)
			httpd_conn_close(c);
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
static int tls_flush(struct httpd_conn *c)
{
	struct tls_wr *t;
	char *p;
	size_t n;
	uv_buf_t b;

	if (httpd_tls_conn_take(c->tls, &p, &n) < 0)
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

/* -- the HTTP/1.1 transport: writing a request's answer -- */

static void on_written(uv_write_t *w, int status)
{
	struct h1_wr *wr = (struct h1_wr *)w;
	struct httpd_req *req = wr->req;
	struct httpd_conn *c = req->x.conn;

	/* progress: the client reads (the idle timeout counts from here) */
	c->writes--;
	c->since_ms = uv_now(c->srv->loop);
	httpd_req_release(req, wr->charged);
	if (wr->cb)
		wr->cb(req, wr->arg, status);
	if (status < 0 && !c->closing)
		httpd_conn_close(c);
	httpd_req_unref(req);
	free(wr->cipher);
	free(wr);
}

/* One write of req: the pending head, a chunk's prefix and pre (all
 * copied), data (borrowed until cb), a chunk's end. Every byte is
 * counted and the first one timed. 0 or -ECANCELED (the connection is
 * then closed, cb not called). */
static int h1_write(struct httpd_req *req, const void *pre, size_t pre_len,
		    const void *data, size_t data_len, int chunk,
		    httpd_write_cb cb, void *arg)
{
	struct httpd_conn *c = req->x.conn;
	const struct httpd_hooks *hk = &c->srv->o.hooks;
	char prefix[HTTPD_CHUNK_PREFIX_MAX];
	size_t plen =
	    chunk ? httpd_chunk_prefix(pre_len + data_len, prefix) : 0;
	size_t post = chunk ? sizeof(CHUNK_EOL) - 1 : 0;
	size_t copied = req->x.head_len + plen + pre_len;
	size_t total = copied + data_len + post;
	struct h1_wr *wr;
	uv_buf_t bufs[3];
	unsigned n = 0;
	size_t got = 0;

	if (c->closing || req->dead)
		return -ECANCELED;
	wr = malloc(sizeof(*wr) + copied + post);
	if (!wr) {
		httpd_conn_close(c);
		return -ECANCELED;
	}
	wr->req = req;
	wr->cb = cb;
	wr->arg = arg;
	wr->cipher = NULL;
	wr->charged = 0;
	if (req->x.head_len)
		memcpy(wr->bytes, req->x.head, req->x.head_len);
	memcpy(wr->bytes + req->x.head_len, prefix, plen);
	if (pre_len)
		memcpy(wr->bytes + req->x.head_len + plen, pre, pre_len);
	memcpy(wr->bytes + copied, CHUNK_EOL, post);
	free(req->x.head);
	req->x.head = NULL;
	req->x.head_len = 0;
	if (hk->bytes)
		hk->bytes(c->srv->o.ctx, total);
	if (!req->x.counted) {
		req->x.counted = 1;
		if (hk->first_byte)
			hk->first_byte(req);
	}
	if (c->tls) {
		/* every byte goes out as records, in the order sent; cb
		 * still waits until they are written (the senders' flow
		 * control), though data is encrypted (copied) at once */
		if (httpd_tls_conn_reserve(c->tls, total) < 0 ||
		    (copied &&
		     httpd_tls_conn_write(c->tls, wr->bytes, copied) < 0) ||
		    (data_len &&
		     httpd_tls_conn_write(c->tls, data, data_len) < 0) ||
		    (post && httpd_tls_conn_write(c->tls, wr->bytes + copied,
						  post) < 0) ||
		    httpd_tls_conn_take(c->tls, &wr->cipher, &got) < 0)
			goto fail;
		bufs[n++] = uv_buf_init(wr->cipher, (unsigned)got);
		/* a copy of what the server holds: its bytes count too */
		if (httpd_req_reserve(req, got, NULL, NULL) == 0)
			wr->charged = got;
	} else {
		if (copied || (!data_len && !post))
			bufs[n++] = uv_buf_init(wr->bytes, (unsigned)copied);
		if (data_len)
			bufs[n++] =
			    uv_buf_init((char *)data, (unsigned)data_len);
		if (post)
			bufs[n++] =
			    uv_buf_init(wr->bytes + copied, (unsigned)post);
	}
	/* nothing at all (a HEAD's body dropped) is still one empty write,
	 * so cb comes after what was sent before, as for any other */
	if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, bufs, n, on_written) < 0)
		goto fail;
	if (c->writes++ == 0)
		c->since_ms = uv_now(c->srv->loop);
	httpd_req_ref(req);
	return 0;
fail:
	free(wr->cipher);
	free(wr);
	httpd_conn_close(c);
	return -ECANCELED;
}

static int h1_head(struct httpd_req *req, int status, const char *ctype,
		   int64_t length, const char *extra)
{
	struct httpd_head h = {
	    .status = status,
	    .server = req->x.srv->o.server,
	    .ctype = ctype,
	    .length = length,
	    .extra = extra,
	    .http_minor = req->x.http_minor,
	    .keep_alive = req->x.keep_alive,
	};
	char buf[2048];
	int n = httpd_head_format(&h, buf, sizeof(buf));

	if (n < 0 || req->x.head) {
		httpd_req_abort(req);
		return -ECANCELED;
	}
	req->x.head = malloc((size_t)n);
	if (!req->x.head) {
		httpd_req_abort(req);
		return -ECANCELED;
	}
	memcpy(req->x.head, buf, (size_t)n);
	req->x.head_len = (size_t)n;
	req->x.keep_alive = h.keep_alive;
	req->x.chunked = h.chunked;
	return 0;
}

static int h1_send(struct httpd_req *req, const void *pre, size_t pre_len,
		   const void *data, size_t data_len, httpd_write_cb cb,
		   void *arg)
{
	if (req->head_only)
		pre_len = data_len = 0;
	return h1_write(req, pre, pre_len, data, data_len,
			req->x.chunked && pre_len + data_len > 0, cb, arg);
}

static void h1_done(struct httpd_req *req)
{
	struct httpd_conn *c = req->x.conn;
	int keep;

	/* the rest of the answer: its head, or the last chunk */
	if (req->x.chunked && !req->head_only) {
		if (h1_write(req, HTTPD_CHUNK_END, sizeof(HTTPD_CHUNK_END) - 1,
			     NULL, 0, 0, NULL, NULL) < 0)
			return;
	} else if (req->x.head &&
		   h1_write(req, NULL, 0, NULL, 0, 0, NULL, NULL) < 0) {
		return;
	}
	req->done = 1;
	/* the access log: one debug line per answered request (-v) */
	base_debug("request method=%s url=%.*s status=%d",
		   req->method_name ? req->method_name : "-", (int)req->url_len,
		   req->url, req->status);
	/* the answered request is always the head */
	c->head = req->x.next;
	if (!c->head)
		c->tail = NULL;
	c->queued--;
	c->answered++;
	c->since_ms = uv_now(c->srv->loop);
	req->x.next = NULL;
	keep = req->x.keep_alive;
	httpd_req_unref(req);
	if (!keep) {
		c->no_more = 1;
		conn_finish(c);
		return;
	}
	if (c->paused && c->queued < c->srv->lim.pipeline)
		c->paused = 0;
	/* requests read already, held back or paused: parse them now */
	if (!c->paused && c->pend_len) {
		parse_pending(c);
		return;
	}
	conn_kick(c);
	if (!c->closing)
		update_reading(c);
}

static void h1_abort(struct httpd_req *req)
{
	httpd_conn_close(req->x.conn);
}

static void h1_release(struct httpd_req *req)
{
	conn_unref(req->x.conn);
}

static struct httpd_peer *h1_peer(struct httpd_req *req)
{
	return &req->x.conn->peer;
}

static size_t h1_unsent(const struct httpd_req *req)
{
	const struct httpd_conn *c = req->x.conn;
	size_t unsent =
	    uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
	uv_os_fd_t fd;
	int n;

	/* The socket's bytes not yet sent (TCP: SIOCOUTQNSD); a socket
	 * that cannot tell counts its libuv queue only. */
	if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 &&
	    ioctl(fd, SIOCOUTQNSD, &n) == 0 && n > 0)
		unsent += (size_t)n;
	return unsent;
}

const struct httpd_tx HTTPD_TX_H1 = {
    .head = h1_head,
    .send = h1_send,
    .done = h1_done,
    .abort = h1_abort,
    .release = h1_release,
    .peer = h1_peer,
    .unsent = h1_unsent,
};
