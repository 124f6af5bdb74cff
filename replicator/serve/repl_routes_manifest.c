/*
 * replicator/serve/repl_routes_manifest.c — GET /v1/NS/manifest/GEN/INO and
 * GET /v1/NS/manifests/GEN/SEG (docs/protocol.md, "Manifests").
 *
 * The body is built on a worker from the generation's source index (and,
 * with --sign-key, signed there: the Ferry-Signature header). When
 * it is not ready (the file, or a file of the segment, is not hashed yet)
 * a single-file request moves that file to the front of the hasher's
 * queue, and the request waits, for at most the ?wait=S it asked for: it
 * joins the namespace's waiters, each progress of the hasher (the
 * namespace's async) sends every waiter to look again, and a timer answers
 * 503 when the wait is over. Everything here runs on the loop thread,
 * except man_work.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_serve_priv.h"

#define NOT_READY "Retry-After: 1\r\nCache-Control: no-store\r\n"
/* Inos per segment (docs/protocol.md). */
#define SEGMENT_INOS 1024u
#define WAIT_MAX_S 30u
/* Bytes reserved before a body is made (httpd_req_reserve). */
#define MAN_ROOM (64u * 1024u)

struct man_wait {
	struct man_wait *next; /* ns->waiters */
	uv_work_t w;
	uv_timer_t timer;
	int timer_init;	 /* timer was initialized: close before free */
	int listed;	 /* on ns->waiters */
	int in_work;	 /* man_work queued or running */
	int expired;	 /* the wait is over: answer what is there */
	int prioritized; /* the hasher was asked once */
	int rechecked;	 /* looked again after the hasher ended */
	struct repl_req *req;
	struct repl_ns *ns;
	uint64_t served, gen, first, last;
	int segment;
	uint64_t deadline_ns;
	int rc;
	struct cat_buf body;
	/* --sign-key: the answer's signature (Ferry-Signature), made with
	 * the body on the worker; "" when unsigned */
	char sig[CAT_SIGN_SIG_HEX_LEN + 1];
};

static void unlist(struct man_wait *m)
{
	struct man_wait **pp;

	if (!m->listed)
		return;
	for (pp = &m->ns->waiters; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	m->listed = 0;
	m->next = NULL;
}

static void timer_closed(uv_handle_t *h)
{
	struct man_wait *m = h->data;

	cat_buf_fini(&m->body);
	free(m);
}

/* on_free of the request: the job goes with it. */
static void man_free(struct repl_req *req)
{
	struct man_wait *m = req->route;

	unlist(m);
	if (m->timer_init) {
		uv_close((uv_handle_t *)&m->timer, timer_closed);
		return;
	}
	cat_buf_fini(&m->body);
	free(m);
}

static void man_work(uv_work_t *w)
{
	struct man_wait *m = w->data;

	struct repl_server *srv = m->ns->srv;

	m->rc = repl_manifest_body(m->ns, m->served, m->gen, m->segment,
				   m->first, m->last, &m->body);
	m->sig[0] = '\0';
	/* Signed over what was asked (namespace, generation, ino range) and
	 * the body's SHA-256: a cache in between cannot change one byte of
	 * it, nor answer with another file's manifest, unseen. */
	if (m->rc == 0 && srv->signing)
		m->rc = cat_sign_manifests(&srv->sign_key, m->ns->name, m->gen,
					   m->first, m->last, m->body.p,
					   m->body.n, m->sig);
}

static void man_done(uv_work_t *w, int status);

static void man_queue(struct man_wait *m)
{
	/* Each look is against the generation served now: after a rescan
	 * switched, a wait for an older one ends as superseded (410). */
	m->served = m->ns->generation;
	m->in_work = 1;
	m->w.data = m;
	if (repl_req_work(m->req, &m->w, man_work, man_done) < 0) {
		m->in_work = 0;
		httpd_req_error(&m->req->h, 500, "internal", NULL,
				"cannot queue work");
		httpd_req_unref(&m->req->h);
	}
}

static void on_timer(uv_timer_t *t)
{
	struct man_wait *m = t->data;

	m->expired = 1;
	/* Waiting: answer now. Looking: man_done answers. */
	if (m->listed) {
		unlist(m);
		man_queue(m);
	}
}

/* The room was granted: look. */
static void man_room(struct httpd_req *h, void *arg)
{
	httpd_req_ref(h); /* man_done's */
	man_queue(arg);
}

static void send_body(struct man_wait *m)
{
	struct repl_req *req = m->req;
	char extra[512];

	if (m->body.n > MAN_ROOM)
		(void)httpd_req_reserve(&req->h, m->body.n - MAN_ROOM, NULL,
					NULL);
	snprintf(extra, sizeof(extra),
		 "ETag: \"%s-%" PRIu64 "-%" PRIu64 "\"\r\n%s%s%s%s",
		 m->segment ? "s" : "m", m->gen,
		 m->segment ? m->first / SEGMENT_INOS : m->first,
		 req->srv->immutable, m->sig[0] ? "Ferry-Signature: " : "",
		 m->sig, m->sig[0] ? "\r\n" : "");
	/* the body stays with the job until the request is freed */
	if (httpd_req_head(&req->h, 200, "application/x-ferry-manifests",
			   (int64_t)m->body.n, extra) < 0 ||
	    httpd_req_send(&req->h, NULL, 0, m->body.p,
			   req->h.head_only ? 0 : m->body.n, NULL, NULL) < 0)
		return;
	if (!req->h.head_only)
		m->ns->stats.manifests_served++;
	httpd_req_done(&req->h);
}

/* Wait for the hasher: 1 when m waits (keeps its reference), 0 when the
 * wait is over. */
static int wait_more(struct man_wait *m)
{
	struct repl_ns *ns = m->ns;

	if (!m->segment && !m->prioritized && ns->hasher) {
		repl_hasher_prioritize(ns->hasher, m->first);
		m->prioritized = 1;
	}
	if (!ns->hasher) {
		/* ended between the look and now: one more look */
		if (m->rechecked)
			return 0;
		m->rechecked = 1;
		man_queue(m);
		return 1;
	}
	if (m->expired || base_now_ns() >= m->deadline_ns)
		return 0;
	if (!m->timer_init) {
		uv_timer_init(&m->req->srv->loop, &m->timer);
		m->timer.data = m;
		m->timer_init = 1;
		uv_timer_start(&m->timer, on_timer,
			       (m->deadline_ns - base_now_ns()) / 1000000 + 1,
			       0);
	}
	m->next = ns->waiters;
	ns->waiters = m;
	m->listed = 1;
	return 1;
}

static void man_done(uv_work_t *w, int status)
{
	struct man_wait *m = w->data;
	struct repl_req *req = m->req;

	m->in_work = 0;
	if (req->h.dead || status < 0)
		goto out;
	if (m->rc == 0) {
		send_body(m);
	} else if (m->rc == -ENOENT && m->segment) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"no generation %" PRIu64 " of namespace '%s'",
				m->gen, m->ns->name);
	} else if (m->rc == -ENOENT) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"no pending file %" PRIu64
				" in generation %" PRIu64 " of namespace '%s'",
				m->first, m->gen, m->ns->name);
	} else if (m->rc == -EAGAIN && m->gen != m->served) {
		httpd_req_error(&req->h, 410, "superseded", NULL,
				"generation %" PRIu64
				" is no longer hashed; HEAD is %" PRIu64,
				m->gen, m->served);
	} else if (m->rc == -EAGAIN) {
		if (wait_more(m))
			return;
		httpd_req_error(&req->h, 503, "hashing", NOT_READY,
				"%s %" PRIu64 " is still being hashed",
				m->segment ? "segment" : "file",
				m->segment ? m->first / SEGMENT_INOS
					   : m->first);
	} else {
		base_log_err(
		    BASE_LOG_ERROR, m->rc,
		    "cannot serve a manifest ns=%s generation=%" PRIu64,
		    m->ns->name, m->gen);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"reading a manifest: %s", strerror(-m->rc));
	}
out:
	httpd_req_unref(&req->h);
}

/* "?...wait=S..." of the URL: seconds, 0 when absent. -EINVAL when
 * malformed or above the limit. */
static int wait_of(const struct repl_req *req, uint64_t *ret)
{
	const char *v;
	size_t n;
	char num[16];

	*ret = 0;
	if (!httpd_url_param(req->h.url, req->h.url_len, "wait", &v, &n))
		return 0;
	if (n == 0)
		return 0; /* "wait=": as if absent */
	if (n >= sizeof(num))
		return -EINVAL;
	memcpy(num, v, n);
	num[n] = '\0';
	return base_parse_u64(num, 0, WAIT_MAX_S, ret);
}

/* "GEN/N" into two numbers. */
static int two_numbers(const char *arg, size_t len, uint64_t *a, uint64_t *b)
{
	const char *slash = memchr(arg, '/', len);
	char x[24], y[24];
	size_t xl, yl;

	if (!slash)
		return -EINVAL;
	xl = (size_t)(slash - arg);
	yl = len - xl - 1;
	if (xl == 0 || yl == 0 || xl >= sizeof(x) || yl >= sizeof(y))
		return -EINVAL;
	memcpy(x, arg, xl);
	x[xl] = '\0';
	memcpy(y, slash + 1, yl);
	y[yl] = '\0';
	if (base_parse_u64(x, 1, INT64_MAX, a) < 0 ||
	    base_parse_u64(y, 0, INT64_MAX, b) < 0)
		return -EINVAL;
	return 0;
}

void repl_route_manifest(struct repl_req *req, struct repl_ns *ns,
			 const char *arg, size_t len, int segment)
{
	struct man_wait *m;
	uint64_t gen, n, wait;

	if (two_numbers(arg, len, &gen, &n) < 0 ||
	    (segment ? n > (uint64_t)INT64_MAX / SEGMENT_INOS : n < 1)) {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				segment ? "expected manifests/GEN/SEG"
					: "expected manifest/GEN/INO");
		return;
	}
	if (wait_of(req, &wait) < 0) {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				"wait is 0 to %u seconds", WAIT_MAX_S);
		return;
	}
	if (gen > ns->generation) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"no generation %" PRIu64 " of namespace '%s'",
				gen, ns->name);
		return;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return;
	}
	m->req = req;
	m->ns = ns;
	m->served = ns->generation;
	m->gen = gen;
	m->segment = segment;
	m->first = segment ? n * SEGMENT_INOS : n;
	m->last = segment ? m->first + SEGMENT_INOS - 1 : n;
	m->deadline_ns = base_now_ns() + wait * 1000000000ull;
	req->route = m;
	req->on_free = man_free;
	/* some room first: a client that does not read holds no more than
	 * its share; a larger body is counted when it is made */
	if (httpd_req_reserve(&req->h, MAN_ROOM, man_room, m) == 0)
		man_room(&req->h, m);
}

void repl_manifest_wake(struct repl_ns *ns)
{
	struct man_wait *list = ns->waiters, *m;

	ns->waiters = NULL;
	while ((m = list)) {
		list = m->next;
		m->listed = 0;
		m->next = NULL;
		if (m->req->h.dead) {
			httpd_req_unref(&m->req->h);
			continue;
		}
		man_queue(m);
	}
}

void repl_manifest_waiters_close(struct repl_ns *ns)
{
	struct man_wait *m;

	while ((m = ns->waiters)) {
		ns->waiters = m->next;
		m->listed = 0;
		m->next = NULL;
		if (m->timer_init)
			uv_timer_stop(&m->timer);
		httpd_req_unref(&m->req->h);
	}
}
