/*
 * catalog/httpd/httpd_tenant.c — who a connection works for, and the
 * bytes its answers hold.
 *
 * A tenant is a client address (an IPv6 address's /64: one host's, to a
 * provider) until the server names it from a request (the replicator: the
 * token). Each tenant counts its open connections (at the cap the
 * connection to close is taken from the tenant holding most:
 * httpd_server.c) and the bytes its requests reserved.
 *
 * The bytes: what a server holds in memory for answers (frames read
 * ahead, a read buffer, a request's body) is reserved against
 * limits.inflight_max before it is made and released when it goes. A
 * tenant's share is inflight_max over the tenants that hold or wait for
 * bytes; a reservation is granted while the pool has room and the tenant
 * stays within its share (a tenant holding nothing always gets one, if
 * the pool has room). Otherwise the request waits, and its connection
 * counts as waiting for its client: it is its own tenant's bytes, or a
 * tenant that does not read, that hold it up. Waiters are resumed in
 * the order they came, when bytes are released.
 *
 * Bytes held by a client that does not read are not given back by
 * waiting: when another tenant waits, a connection that has not moved
 * for HTTPD_STALL_MS and whose tenant holds more than its share is
 * closed (with a reset: its answer is lost either way, and the kernel
 * frees its queue at once), until its tenant is back within its share.
 * So a tenant that opens thousands of connections and reads none of
 * them holds at most the pool for as long as no one else asks, and a
 * tenant that asks gets its share within about half a second.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/httpd/httpd_priv.h"

#define HTTPD_TENANT_BUCKETS 1024u
#define HTTPD_RECLAIM_EVERY_MS 20u
#define HTTPD_TRIM_EVERY_MS 1000u

/* FNV-1a, 64 bits, over a tag byte then p[0..n). */
static uint64_t tenant_key(char tag, const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	size_t i;

	h = (h ^ (uint8_t)tag) * 0x100000001b3ull;
	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

uint64_t httpd_tenant_addr_key(const struct httpd_peer *p)
{
	/* IPv6: the /64 */
	return tenant_key('a', p->addr, p->addr_len == 16 ? 8 : p->addr_len);
}

int httpd_tenants_init(struct httpd_server *s)
{
	s->tenants = calloc(HTTPD_TENANT_BUCKETS, sizeof(*s->tenants));
	return s->tenants ? 0 : -ENOMEM;
}

void httpd_tenants_fini(struct httpd_server *s)
{
	/* every tenant went with its last connection and request */
	free(s->tenants);
	s->tenants = NULL;
}

struct httpd_tenant *httpd_tenant_get(struct httpd_server *s, uint64_t key)
{
	struct httpd_tenant **b = &s->tenants[key % HTTPD_TENANT_BUCKETS], *t;

	for (t = *b; t; t = t->next)
		if (t->key == key) {
			t->refs++;
			return t;
		}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->key = key;
	t->refs = 1;
	t->next = *b;
	*b = t;
	return t;
}

void httpd_tenant_put(struct httpd_server *s, struct httpd_tenant *t)
{
	struct httpd_tenant **p;

	if (!t || --t->refs > 0)
		return;
	for (p = &s->tenants[t->key % HTTPD_TENANT_BUCKETS]; *p;
	     p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			break;
		}
	free(t);
}

static int active(const struct httpd_tenant *t)
{
	return t->bytes > 0 || t->waiting > 0;
}

/* Call around a change of t's bytes or waiting: before (was = -1) it
 * returns whether t was active; after, with that, it keeps the count. */
static int track(struct httpd_server *s, const struct httpd_tenant *t, int was)
{
	int now = active(t);

	if (was < 0)
		return now;
	if (now && !was)
		s->tenants_active++;
	else if (!now && was)
		s->tenants_active--;
	return now;
}

/* t's share of the pool: inflight_max over the active tenants, t
 * counted. */
static size_t share(const struct httpd_server *s, const struct httpd_tenant *t)
{
	size_t n = s->tenants_active + (active(t) ? 0 : 1);

	return s->lim.inflight_max / (n ? n : 1);
}

static int fits(const struct httpd_server *s, const struct httpd_tenant *t,
		size_t n)
{
	if (!s->lim.inflight_max)
		return 1;
	/* the pool: full, unless it holds nothing (one oversized ask must
	 * not wait for ever) */
	if (s->inflight && s->inflight + n > s->lim.inflight_max)
		return 0;
	return t->bytes == 0 || t->bytes + n <= share(s, t);
}

int httpd_tenant_over(const struct httpd_server *s,
		      const struct httpd_tenant *t)
{
	if (!s->lim.inflight_max)
		return 0;
	return s->inflight >= s->lim.inflight_max ||
	       (t->bytes > 0 && t->bytes >= share(s, t));
}

static void take(struct httpd_req *req, struct httpd_tenant *t, size_t n)
{
	struct httpd_server *s = req->x.srv;
	struct httpd_conn *c = req->x.conn;
	int was;

	if (!req->x.tenant) {
		req->x.tenant = t;
		t->refs++;
	}
	t = req->x.tenant;
	was = track(s, t, -1);
	t->bytes += n;
	if (c->closing)
		t->going += n;
	track(s, t, was);
	req->x.bytes += n;
	c->bytes += n;
	s->inflight += n;
}

static void resume_arm(struct httpd_server *s)
{
	if (s->wait_head && !s->resume_armed && !s->closing) {
		s->resume_armed = 1;
		uv_timer_start(&s->resume, httpd_tenant_resume, 0, 0);
	}
}

void httpd_req_release(struct httpd_req *req, size_t n)
{
	struct httpd_server *s = req->x.srv;
	struct httpd_conn *c = req->x.conn;
	struct httpd_tenant *t = req->x.tenant;
	int was;

	if (!t)
		return;
	if (n > req->x.bytes)
		n = req->x.bytes;
	if (!n)
		return;
	was = track(s, t, -1);
	t->bytes -= n;
	if (c->closing)
		t->going -= n < t->going ? n : t->going;
	track(s, t, was);
	req->x.bytes -= n;
	c->bytes -= n;
	s->inflight -= n;
	s->released += n;
	resume_arm(s);
}

void httpd_tenant_trim(struct httpd_server *s)
{
	uint64_t now = uv_now(s->loop);

	/* Answers' bytes are made on worker threads (their own malloc
	 * arenas) and freed here; with thousands of connections coming and
	 * going the freed pages stay with the process. Half the pool freed
	 * since the last time: give them back (a walk of the free lists, at
	 * most once a second). Measured: 4,200 connections that do not
	 * read, 250-300 MB -> 140-165 MB. */
	if (!s->lim.inflight_max || s->released < s->lim.inflight_max / 2 ||
	    now - s->trim_ms < HTTPD_TRIM_EVERY_MS)
		return;
	s->released = 0;
	s->trim_ms = now;
	malloc_trim(0);
}

static void waiter_unlink(struct httpd_req *req)
{
	struct httpd_server *s = req->x.srv;
	struct httpd_tenant *t = req->x.wtenant;
	int was = track(s, t, -1);

	if (req->x.wprev)
		req->x.wprev->x.wnext = req->x.wnext;
	else
		s->wait_head = req->x.wnext;
	if (req->x.wnext)
		req->x.wnext->x.wprev = req->x.wprev;
	else
		s->wait_tail = req->x.wprev;
	req->x.wnext = req->x.wprev = NULL;
	req->x.waiting = 0;
	t->waiting--;
	track(s, t, was);
	if (!t->waiting)
		s->tenants_waiting--;
	req->x.conn->budget_waits--;
	req->x.wtenant = NULL;
	httpd_tenant_put(s, t);
}

int httpd_req_reserve(struct httpd_req *req, size_t n, httpd_resume_cb cb,
		      void *arg)
{
	struct httpd_server *s = req->x.srv;
	struct httpd_conn *c = req->x.conn;
	struct httpd_tenant *t = req->x.tenant ? req->x.tenant : c->tenant;
	int was;

	if (req->dead || c->closing)
		return -ECANCELED;
	if (req->x.waiting)
		return -EBUSY;
	/* a charge (no cb) is taken as it is; a waiter already queued goes
	 * first unless this tenant is within its share */
	if (!cb || fits(s, t, n)) {
		take(req, t, n);
		return 0;
	}
	was = track(s, t, -1);
	if (!t->waiting)
		s->tenants_waiting++;
	t->waiting++;
	track(s, t, was);
	t->refs++;
	req->x.wtenant = t;
	req->x.waiting = 1;
	req->x.wneed = n;
	req->x.wcb = cb;
	req->x.warg = arg;
	req->x.wprev = s->wait_tail;
	req->x.wnext = NULL;
	if (s->wait_tail)
		s->wait_tail->x.wnext = req;
	else
		s->wait_head = req;
	s->wait_tail = req;
	if (c->budget_waits++ == 0 && !c->writes)
		c->since_ms = uv_now(s->loop);
	httpd_req_ref(req);
	httpd_tenant_reclaim(s, 0);
	return -EAGAIN;
}

void httpd_tenant_resume(uv_timer_t *tm)
{
	struct httpd_server *s = tm->data;
	uint64_t pass = ++s->resume_pass;
	struct httpd_req *r;
	httpd_resume_cb cb;
	void *arg;

	s->resume_armed = 0;
	/* From the head each time: a callback may close connections and so
	 * unlink any waiter. Each waiter is looked at once per pass. */
again:
	for (r = s->wait_head; r; r = r->x.wnext) {
		if (r->x.wpass == pass)
			continue;
		r->x.wpass = pass;
		if (!fits(s, r->x.wtenant, r->x.wneed))
			continue;
		cb = r->x.wcb;
		arg = r->x.warg;
		take(r, r->x.wtenant, r->x.wneed);
		waiter_unlink(r);
		if (!r->x.conn->writes && !r->x.conn->budget_waits)
			r->x.conn->since_ms = uv_now(s->loop);
		if (!r->dead)
			cb(r, arg);
		httpd_req_unref(r);
		goto again;
	}
}

void httpd_tenant_conn_closed(struct httpd_conn *c)
{
	struct httpd_server *s = c->srv;
	struct httpd_req *r, *n;

	c->tenant->conns--;
	c->tenant->going += c->bytes;
	/* its waiters wait no more (a request waits while its body's room
	 * is reserved, c->cur, or while it is answered: in the queue) */
	if (c->cur && c->cur->x.waiting) {
		waiter_unlink(c->cur);
		httpd_req_unref(c->cur);
	}
	for (r = c->head; r; r = n) {
		n = r->x.next;
		if (r->x.waiting) {
			waiter_unlink(r);
			httpd_req_unref(r);
		}
	}
	(void)s;
}

void httpd_tenant_req_free(struct httpd_req *req)
{
	httpd_req_release(req, req->x.bytes);
	httpd_tenant_put(req->x.srv, req->x.tenant);
	req->x.tenant = NULL;
}

void httpd_req_set_tenant(struct httpd_req *req, const void *id, size_t len)
{
	struct httpd_conn *c = req->x.conn;
	struct httpd_server *s = req->x.srv;
	uint64_t key = tenant_key('t', id, len);
	struct httpd_tenant *t;

	if (req->dead || c->closing || c->tenant->key == key)
		return;
	t = httpd_tenant_get(s, key);
	if (!t)
		return; /* stays with its address */
	c->tenant->conns--;
	httpd_tenant_put(s, c->tenant);
	c->tenant = t;
	t->conns++;
	/* what the request holds already (its body) is the new tenant's:
	 * one client is one tenant, not its address and its token */
	if (req->x.tenant && req->x.tenant != t) {
		size_t n = req->x.bytes;

		httpd_req_release(req, n);
		httpd_tenant_put(s, req->x.tenant);
		req->x.tenant = NULL;
		take(req, t, n);
	}
}

uint64_t httpd_req_tenant(const struct httpd_req *req)
{
	return req->x.conn->tenant->key;
}

void httpd_tenant_reclaim(struct httpd_server *s, int sweep)
{
	uint64_t now = uv_now(s->loop);
	struct httpd_conn *c, *n;
	struct httpd_tenant *t;

	if (!s->wait_head || !s->lim.inflight_max || s->closing)
		return;
	if (!sweep && now - s->reclaim_ms < HTTPD_RECLAIM_EVERY_MS)
		return;
	s->reclaim_ms = now;
	for (c = s->conns; c; c = n) {
		n = c->next; /* closing c unlinks c alone */
		t = c->tenant;
		if (!c->bytes || httpd_conn_wait(c) != HTTPD_WAIT_READER ||
		    now - c->since_ms < HTTPD_STALL_MS)
			continue;
		/* only for another tenant's sake */
		if (s->tenants_waiting <= (t->waiting ? 1u : 0u))
			continue;
		if (t->bytes - (t->going < t->bytes ? t->going : t->bytes) <=
		    share(s, t))
			continue;
		httpd_server_limit(s, HTTPD_LIM_RECLAIMED,
				   "connection closed to free memory",
				   "stalled, its tenant over its share", c);
		httpd_conn_reset(c);
	}
}
