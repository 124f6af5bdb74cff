/*
 * catalog/httpd/httpd_server.c — the engine's server: the listener, accept
 * within the limits, the sweep of connections past their timeouts, room
 * made at the cap, and the server's own life.
 *
 * Fairness: what a connection waits for decides what may end it. One the
 * server is answering (a request being worked on) is never closed for
 * room; one waiting for its client (no request yet, a head still coming,
 * idle between requests, an answer it does not read, bytes its tenant
 * holds) may be: its wait began at since_ms, and a sweep every
 * HTTPD_SWEEP_MS closes it when that wait passes the header or idle
 * timeout. When the connection cap is reached (or accept runs out of
 * file descriptors) a connection that has waited for its client at least
 * HTTPD_STALL_MS makes room for the next one: of the tenant holding most
 * connections, the one that waited longest. So connections that sit
 * there or do not read, however many, cannot keep a client that asks
 * out, and a tenant with many connections loses them before one with a
 * few. The grace lets every connection accepted have its request read
 * before it can be pushed out: without it a flood of connects (the
 * kernel's backlog holds hundreds) would push out everything accepted in
 * the same loop turn, a real client's too. When no connection is
 * eligible, accepting pauses (libuv keeps the one it took and stops
 * polling the listener; the kernel's backlog holds the rest) until the
 * sweep finds room. The per-address cap keeps one address from holding
 * everything; the bytes of answers are held to each tenant's share
 * (httpd_tenant.c).
 *
 * Life: the server is reference counted (its owner, the listener and the
 * two timers until their close callbacks, each connection until it is
 * freed, which is after its last request), so whoever closes it only
 * runs the loop until everything let go.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/httpd/httpd_priv.h"

#define HTTPD_SWEEP_MS 250u
#define HTTPD_LIMIT_LOG_MS 10000u

void httpd_server_unref(struct httpd_server *s)
{
	if (--s->refs == 0) {
		httpd_tenants_fini(s);
		free(s);
	}
}

static void on_handle_closed(uv_handle_t *h)
{
	httpd_server_unref(h->data);
}

/* The connection to close for room: one waiting for its client (for
 * its next request, its head, or to read what it was sent) for at least
 * HTTPD_STALL_MS, of the tenant holding most connections, the one that
 * waited longest; among equal waits the one accepted first (the list is
 * newest first). NULL when there is none (every one is being answered or
 * began its wait just now). A linear walk: it runs only at the cap. */
static struct httpd_conn *oldest_waiting(struct httpd_server *s)
{
	uint64_t now = uv_now(s->loop);
	struct httpd_conn *o, *best = NULL;

	for (o = s->conns; o; o = o->next) {
		if (o->closing || httpd_conn_wait(o) == HTTPD_WAIT_SERVER ||
		    now - o->since_ms < HTTPD_STALL_MS)
			continue;
		if (!best || o->tenant->conns > best->tenant->conns ||
		    (o->tenant->conns == best->tenant->conns &&
		     o->since_ms <= best->since_ms))
			best = o;
	}
	return best;
}

/* One warning per kind and HTTPD_LIMIT_LOG_MS: a flood of refusals must
 * not become a flood of log lines. */
void httpd_server_limit(struct httpd_server *s, enum httpd_limit kind,
			const char *what, const char *why,
			const struct httpd_conn *c)
{
	uint64_t now = uv_now(s->loop);
	struct httpd_limit_log *l =
	    kind == HTTPD_LIM_PER_ADDR ? &s->log_addr
	    : kind == HTTPD_LIM_EVICTED || kind == HTTPD_LIM_RECLAIMED
		? &s->log_evict
		: &s->log_full;
	char addr[64];

	if (s->o.hooks.limited)
		s->o.hooks.limited(s->o.ctx, kind);
	l->n++;
	if (l->last_ms && now - l->last_ms < HTTPD_LIMIT_LOG_MS)
		return;
	base_warn("%s why=\"%s\" addr=%s count=%" PRIu64 " conns=%zu%s%s", what,
		  why, c ? httpd_peer_str(&c->peer, addr, sizeof(addr)) : "-",
		  l->n, s->n_conns, s->o.tag ? " server=" : "",
		  s->o.tag ? s->o.tag : "");
	l->last_ms = now ? now : 1;
	l->n = 0;
}

int httpd_server_evict(struct httpd_server *s, const char *why)
{
	struct httpd_conn *v = oldest_waiting(s);
	char addr[64];

	if (!v)
		return -EBUSY;
	httpd_server_limit(s, HTTPD_LIM_EVICTED,
			   "connection closed to make room", why, v);
	base_debug("connection closed to make room addr=%s waited_ms=%" PRIu64,
		   httpd_peer_str(&v->peer, addr, sizeof(addr)),
		   uv_now(s->loop) - v->since_ms);
	httpd_conn_reset(v);
	return 0;
}

static void on_connection(uv_stream_t *ls, int status);

static void on_sweep(uv_timer_t *t)
{
	struct httpd_server *s = t->data;
	uint64_t now = uv_now(s->loop), limit;
	struct httpd_conn *c, *n;
	char addr[64];
	const char *why;
	enum httpd_limit kind;

	for (c = s->conns; c; c = n) {
		n = c->next; /* closing c unlinks c alone */
		switch (httpd_conn_wait(c)) {
		case HTTPD_WAIT_SERVER:
			continue;
		case HTTPD_WAIT_HEAD:
			limit = s->lim.header_ms;
			why = "header timeout";
			kind = HTTPD_LIM_HEADER;
			break;
		case HTTPD_WAIT_IDLE:
			limit = s->lim.idle_ms;
			why = "idle timeout";
			kind = HTTPD_LIM_IDLE;
			break;
		default:
			limit = s->lim.idle_ms;
			why = "answer not read";
			kind = HTTPD_LIM_UNREAD;
			break;
		}
		if (now - c->since_ms < limit)
			continue;
		base_debug("connection closed why=\"%s\" addr=%s", why,
			   httpd_peer_str(&c->peer, addr, sizeof(addr)));
		if (s->o.hooks.limited)
			s->o.hooks.limited(s->o.ctx, kind);
		httpd_conn_reset(c);
	}
	httpd_tenant_reclaim(s, 1);
	httpd_tenant_trim(s);
	/* accepting paused at the cap: go on once there is room */
	if (s->accept_paused && !s->closing &&
	    (s->n_conns < s->lim.max_conns || oldest_waiting(s))) {
		s->accept_paused = 0;
		on_connection(&s->listener.s, 0);
	}
	if (!s->conns && !s->accept_paused) {
		uv_timer_stop(t);
		s->sweep_on = 0;
	}
}

void httpd_server_sweep_on(struct httpd_server *s)
{
	if (s->sweep_on || s->closing)
		return;
	s->sweep_on = 1;
	uv_timer_start(&s->sweep, on_sweep, HTTPD_SWEEP_MS, HTTPD_SWEEP_MS);
}

static void on_connection(uv_stream_t *ls, int status)
{
	struct httpd_server *s = ls->data;

	if (status == UV_EMFILE || status == UV_ENFILE) {
		/* libuv has refused what was waiting (its reserve-fd trick);
		 * give the next client a descriptor */
		httpd_server_limit(s, HTTPD_LIM_NO_FDS, "connections refused",
				   "out of file descriptors", NULL);
		httpd_server_evict(s, "out of file descriptors");
		return;
	}
	if (status < 0 || s->closing)
		return;
	if (s->n_conns >= s->lim.max_conns && !oldest_waiting(s)) {
		/* not accepted: libuv holds it and stops polling the listener
		 * until the sweep calls here again */
		s->accept_paused = 1;
		httpd_server_limit(s, HTTPD_LIM_CAP_WAIT, "connections wait",
				   "connection cap, none idle long enough",
				   NULL);
		httpd_server_sweep_on(s);
		return;
	}
	httpd_conn_accept(s);
}

int httpd_server_new(const struct httpd_server_opts *o,
		     struct httpd_server **ret)
{
	struct httpd_server *s;

	*ret = NULL;
	if (!o->loop || !o->limits || !o->dispatch ||
	    o->req_size < sizeof(struct httpd_req))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (httpd_tenants_init(s) < 0) {
		free(s);
		return -ENOMEM;
	}
	s->loop = o->loop;
	s->o = *o;
	s->lim = *o->limits;
	s->o.limits = &s->lim;
	if (s->lim.pipeline < 1)
		s->lim.pipeline = 1;
	if (s->lim.max_conns < 1)
		s->lim.max_conns = 1;
	uv_timer_init(s->loop, &s->sweep);
	s->sweep.data = s;
	uv_timer_init(s->loop, &s->resume);
	s->resume.data = s;
	/* the owner's, the listener's, the timers' */
	s->refs = 4;
	*ret = s;
	return 0;
}

int httpd_server_listen(struct httpd_server *s, const struct sockaddr *sa,
			int backlog)
{
	int r;

	if (s->listening)
		return -EALREADY;
	uv_tcp_init(s->loop, &s->listener.tcp);
	s->listener.h.data = s;
	s->listening = 1;
	r = uv_tcp_bind(&s->listener.tcp, sa, 0);
	if (r == 0)
		r = uv_listen(&s->listener.s, backlog, on_connection);
	return r;
}

int httpd_server_listen_unix(struct httpd_server *s, const char *path,
			     int backlog)
{
	int r;

	if (s->listening)
		return -EALREADY;
	if (!path || path[0] != '/' || strlen(path) >= sizeof(s->unix_path))
		return -EINVAL;
	uv_pipe_init(s->loop, &s->listener.pipe, 0);
	s->listener.h.data = s;
	s->listening = 1;
	s->unix_sock = 1;
	/* bind fails with EADDRINUSE on anything already at path: a stale
	 * socket is never taken over, nor another's file */
	r = uv_pipe_bind(&s->listener.pipe, path);
	if (r < 0)
		return r;
	memcpy(s->unix_path, path, strlen(path) + 1);
	/* Made under the umask; from here on only this user may connect
	 * (before the first accept: nothing is accepted until uv_listen). */
	if (chmod(path, 0600) < 0)
		return -errno;
	return uv_listen(&s->listener.s, backlog, on_connection);
}

int httpd_server_bound(const struct httpd_server *s,
		       struct sockaddr_storage *ret)
{
	int len = (int)sizeof(*ret);

	memset(ret, 0, sizeof(*ret));
	if (!s->listening || s->unix_sock)
		return -ENOTSUP;
	return uv_tcp_getsockname(&s->listener.tcp, (struct sockaddr *)ret,
				  &len);
}

size_t httpd_server_conns(const struct httpd_server *s)
{
	return s ? s->n_conns : 0;
}

size_t httpd_server_inflight(const struct httpd_server *s)
{
	return s ? s->inflight : 0;
}

void httpd_server_close(struct httpd_server *s)
{
	if (!s || s->closing)
		return;
	s->closing = 1;
	s->accept_paused = 0;
	while (s->conns)
		httpd_conn_close(s->conns);
	if (s->unix_path[0])
		(void)unlink(s->unix_path);
	if (s->listening)
		uv_close(&s->listener.h, on_handle_closed);
	else
		httpd_server_unref(s); /* the listener's reference */
	uv_close((uv_handle_t *)&s->sweep, on_handle_closed);
	uv_close((uv_handle_t *)&s->resume, on_handle_closed);
	httpd_server_unref(s);
}
