/*
 * catalog/httpd/httpd_req.c — the request API every server answers
 * through: references, head, body, done, abort, whole answers and error
 * answers. What is common to any transport is here (the status kept for
 * the log and the counters, HEAD's empty body, error bodies, counting);
 * the bytes on the wire are the transport's (httpd_priv.h, struct
 * httpd_tx), so these calls mean the same over HTTP/1.1 now and over an
 * HTTP/2 stream later.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/httpd/httpd_priv.h"

void httpd_req_ref(struct httpd_req *req)
{
	req->x.refs++;
}

void httpd_req_unref(struct httpd_req *req)
{
	const struct httpd_server *s = req->x.srv;

	if (--req->x.refs > 0)
		return;
	if (s->o.req_free)
		s->o.req_free(req);
	free(req->body);
	free(req->x.head);
	httpd_tenant_req_free(req);
	/* the transport may go with it: nothing of it after this */
	req->x.tx->release(req);
	free(req);
}

int httpd_req_head(struct httpd_req *req, int status, const char *ctype,
		   int64_t length, const char *extra)
{
	if (req->dead || req->done)
		return -ECANCELED;
	req->status = status;
	return req->x.tx->head(req, status, ctype, length, extra);
}

int httpd_req_send(struct httpd_req *req, const void *pre, size_t pre_len,
		   const void *data, size_t data_len, httpd_write_cb cb,
		   void *arg)
{
	if (req->dead || req->done)
		return -ECANCELED;
	return req->x.tx->send(req, pre, pre_len, data, data_len, cb, arg);
}

void httpd_req_done(struct httpd_req *req)
{
	if (req->done || req->dead)
		return;
	req->x.tx->done(req);
}

void httpd_req_abort(struct httpd_req *req)
{
	const struct httpd_server *s = req->x.srv;

	if (req->dead)
		return;
	if (s->o.hooks.aborted)
		s->o.hooks.aborted(req);
	req->x.tx->abort(req);
}

void httpd_req_respond(struct httpd_req *req, int status, const char *ctype,
		       const char *extra, const void *body, size_t len)
{
	if (httpd_req_head(req, status, ctype, (int64_t)len, extra) < 0)
		return;
	/* small bodies: copied with the head, one write */
	if (len && !req->head_only &&
	    httpd_req_send(req, body, len, NULL, 0, NULL, NULL) < 0)
		return;
	httpd_req_done(req);
}

void httpd_req_error(struct httpd_req *req, int status, const char *code,
		     const char *extra, const char *fmt, ...)
{
	const struct httpd_server *s = req->x.srv;
	/* A detail byte grows to at most 6 in a JSON body (a control
	 * character as \u00XX), so body[] holds a whole detail[]. */
	char detail[512], body[6 * sizeof(detail) + 128];
	const char *ctype = "text/plain; charset=utf-8";
	va_list ap;
	int n;

	if (req->dead || req->done)
		return;
	if (s->o.hooks.error)
		s->o.hooks.error(req, code);
	va_start(ap, fmt);
	n = vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (n < 0)
		detail[0] = '\0';
	if (s->o.error_body) {
		n = s->o.error_body(req, code, detail, body, sizeof(body),
				    &ctype);
	} else {
		n = snprintf(body, sizeof(body), "%s\n", detail);
		if (n >= (int)sizeof(body))
			n = (int)sizeof(body) - 1;
	}
	/* no body: the status line alone still says it */
	httpd_req_respond(req, status, ctype, extra, body,
			  n < 0 ? 0 : (size_t)n);
}

int httpd_req_peer_loopback(const struct httpd_req *req)
{
	const struct httpd_peer *p = req->x.tx->peer((struct httpd_req *)req);

	return httpd_addr_loopback(p->addr, p->addr_len);
}

int httpd_req_peer_same_host(struct httpd_req *req)
{
	struct httpd_peer *p = req->x.tx->peer(req);

	if (p->same_host < 0)
		p->same_host = httpd_addr_same_host(
		    p->addr, p->addr_len,
		    p->local_ok ? (const struct sockaddr *)&p->local : NULL);
	return p->same_host;
}

size_t httpd_req_unsent(const struct httpd_req *req)
{
	return req->x.tx->unsent(req);
}
