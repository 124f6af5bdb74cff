/*
 * catalog/httpd/httpd_reader.c — the request reader: http_parser, held to
 * one set of limits (struct httpd_limits), for every ferry server. A URL
 * past url_max is 414, a head past head_max bytes or fields_max lines
 * 431, a body past body_max 413, CONNECT 405, anything http_parser
 * refuses 400.
 *
 * The reader is fed and stops: http_parser's callbacks only record what
 * they saw and pause it, and feed returns what it stopped at with the
 * bytes it took. Its owner then acts (queues the request, sends
 * 100 Continue, answers) and feeds the rest when it wants more: the
 * engine when its queue has room, the S3 thread after its answer. So a
 * callback never reaches into a server, and a server never re-enters the
 * parser.
 *
 * The head is kept whole (URL, names lower-cased, values) in one arena
 * per connection that grows from a small start to what the limits allow
 * and shrinks back after a large head, so an idle connection holds a
 * kilobyte, not the worst case.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "catalog/httpd/httpd_priv.h"

#define ARENA_START 1024u

static int fail(struct httpd_reader *r, int status, const char *fmt, ...)
    BASE_PRINTF(3, 4);

static int fail(struct httpd_reader *r, int status, const char *fmt, ...)
{
	va_list ap;

	r->fail = status;
	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
	va_end(ap);
	/* non-zero stops the parser (HPE_CB_*), except that
	 * on_headers_complete reads 1 and 2 as "no body" and "upgrade" */
	return -1;
}

/* Room for n more bytes in the arena. */
static int arena_room(struct httpd_reader *r, size_t n)
{
	size_t cap = r->acap ? r->acap : ARENA_START;
	char *a;

	if (r->acap - r->alen >= n)
		return 0;
	while (cap - r->alen < n)
		cap *= 2;
	a = realloc(r->arena, cap);
	if (!a)
		return fail(r, 500, "out of memory");
	r->arena = a;
	r->acap = cap;
	return 0;
}

/* End the piece being written (its NUL) and start one of kind k. */
static int piece_start(struct httpd_reader *r, int k)
{
	if (r->piece && (arena_room(r, 1) < 0))
		return -1;
	if (r->piece)
		r->arena[r->alen++] = '\0';
	r->piece = k;
	if (k == 2) {
		if (r->lim.fields_max && r->nf == r->lim.fields_max)
			return fail(r, 431, "more than %zu header lines",
				    r->lim.fields_max);
		if (r->nf == r->fcap) {
			size_t cap = r->fcap ? r->fcap * 2 : 16;
			struct httpd_field *f = realloc(r->f, cap * sizeof(*f));

			if (!f)
				return fail(r, 500, "out of memory");
			r->f = f;
			r->fcap = cap;
		}
		r->f[r->nf].name = r->alen;
		r->f[r->nf].nlen = 0;
		r->f[r->nf].value = r->alen; /* a value that never came */
		r->f[r->nf].vlen = 0;
		r->nf++;
	} else if (k == 3) {
		r->f[r->nf - 1].value = r->alen;
	}
	return 0;
}

static int piece_add(struct httpd_reader *r, const char *at, size_t len,
		     int lower)
{
	size_t i;

	if (arena_room(r, len + 1) < 0)
		return -1;
	for (i = 0; i < len; i++) {
		char ch = at[i];

		if (lower && ch >= 'A' && ch <= 'Z')
			ch = (char)(ch - 'A' + 'a');
		r->arena[r->alen + i] = ch;
	}
	r->alen += len;
	return 0;
}

static int cb_begin(http_parser *p)
{
	struct httpd_reader *r = p->data;

	/* a large head made the arena large: give it back */
	if (r->acap > 4 * ARENA_START) {
		free(r->arena);
		r->arena = NULL;
		r->acap = 0;
	}
	r->alen = r->nf = r->url_len = r->head_bytes = 0;
	r->piece = 0;
	r->busy = 1;
	r->expect_continue = r->keep_alive = 0;
	r->body_seen = 0;
	return 0;
}

static int cb_url(http_parser *p, const char *at, size_t len)
{
	struct httpd_reader *r = p->data;

	if (r->url_len + len > r->lim.url_max)
		return fail(r, 414, "URL longer than %zu bytes",
			    r->lim.url_max);
	if (r->piece != 1 && piece_start(r, 1) < 0)
		return -1;
	r->url_len += len;
	return piece_add(r, at, len, 0);
}

static int head_bytes(struct httpd_reader *r, size_t len)
{
	r->head_bytes += len;
	if (r->head_bytes > r->lim.head_max)
		return fail(r, 431, "headers larger than %zu bytes",
			    r->lim.head_max);
	return 0;
}

static int cb_field(http_parser *p, const char *at, size_t len)
{
	struct httpd_reader *r = p->data;

	if (head_bytes(r, len) < 0)
		return -1;
	if (r->piece != 2 && piece_start(r, 2) < 0)
		return -1;
	r->f[r->nf - 1].nlen += len;
	return piece_add(r, at, len, 1);
}

static int cb_value(http_parser *p, const char *at, size_t len)
{
	struct httpd_reader *r = p->data;

	if (head_bytes(r, len) < 0)
		return -1;
	if (r->piece != 3 && piece_start(r, 3) < 0)
		return -1;
	r->f[r->nf - 1].vlen += len;
	return piece_add(r, at, len, 0);
}

static int cb_headers_complete(http_parser *p)
{
	struct httpd_reader *r = p->data;
	const char *e;

	/* end the last piece (or make the URL "", never seen) */
	if (arena_room(r, 1) < 0)
		return -1;
	r->arena[r->alen++] = '\0';
	r->piece = 0;
	if (p->method == HTTP_CONNECT)
		return fail(r, 405, "CONNECT is not supported");
	/* content_length is ULLONG_MAX when there is no Content-Length */
	if (p->content_length != UINT64_MAX &&
	    p->content_length > r->lim.body_max)
		return fail(r, 413, "body larger than %" PRIu64 " bytes",
			    r->lim.body_max);
	e = httpd_reader_get(r, "expect");
	r->expect_continue = e && !strcasecmp(e, "100-continue");
	r->ev = HTTPD_RD_HEAD;
	http_parser_pause(p, 1);
	return 0;
}

static int cb_body(http_parser *p, const char *at, size_t len)
{
	struct httpd_reader *r = p->data;

	r->body_seen += len;
	if (r->body_seen > r->lim.body_max)
		return fail(r, 413, "body larger than %" PRIu64 " bytes",
			    r->lim.body_max);
	r->body_at = at;
	r->body_len = len;
	r->ev = HTTPD_RD_BODY;
	http_parser_pause(p, 1);
	return 0;
}

static int cb_complete(http_parser *p)
{
	struct httpd_reader *r = p->data;

	/* an upgrade (or CONNECT) hands the connection to another
	 * protocol: not ours, so nothing after it is read */
	r->keep_alive = http_should_keep_alive(p) && !p->upgrade;
	r->busy = 0;
	r->ev = HTTPD_RD_END;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings SETTINGS = {
    .on_message_begin = cb_begin,
    .on_url = cb_url,
    .on_header_field = cb_field,
    .on_header_value = cb_value,
    .on_headers_complete = cb_headers_complete,
    .on_body = cb_body,
    .on_message_complete = cb_complete,
};

void httpd_reader_init(struct httpd_reader *r, const struct httpd_limits *lim)
{
	memset(r, 0, sizeof(*r));
	r->lim = *lim;
	http_parser_init(&r->p, HTTP_REQUEST);
	r->p.data = r;
}

void httpd_reader_fini(struct httpd_reader *r)
{
	free(r->arena);
	free(r->f);
	r->arena = NULL;
	r->f = NULL;
}

int httpd_reader_new(const struct httpd_limits *lim, struct httpd_reader **ret)
{
	*ret = malloc(sizeof(**ret));
	if (!*ret)
		return -ENOMEM;
	httpd_reader_init(*ret, lim);
	return 0;
}

void httpd_reader_free(struct httpd_reader *r)
{
	if (!r)
		return;
	httpd_reader_fini(r);
	free(r);
}

enum httpd_rd httpd_reader_feed(struct httpd_reader *r, const char *p,
				size_t len, size_t *ret_used)
{
	enum http_errno e;
	size_t n;

	*ret_used = 0;
	if (r->fail)
		return HTTPD_RD_FAIL;
	/* a zero length tells http_parser the stream ended */
	if (len == 0)
		return HTTPD_RD_MORE;
	if (HTTP_PARSER_ERRNO(&r->p) == HPE_PAUSED)
		http_parser_pause(&r->p, 0);
	r->ev = HTTPD_RD_MORE;
	n = http_parser_execute(&r->p, &SETTINGS, p, len);
	/* a pause in some callbacks counts the byte after them */
	*ret_used = n > len ? len : n;
	e = HTTP_PARSER_ERRNO(&r->p);
	if (e == HPE_PAUSED)
		return (enum httpd_rd)r->ev;
	if (e != HPE_OK) {
		if (!r->fail) {
			r->fail = 400;
			snprintf(r->detail, sizeof(r->detail), "%s",
				 http_errno_description(e));
		}
		return HTTPD_RD_FAIL;
	}
	if (*ret_used < len) {
		/* http_parser stops early only after an upgrade, whose bytes
		 * are another protocol's */
		r->fail = 400;
		snprintf(r->detail, sizeof(r->detail),
			 "bytes after a protocol upgrade");
		return HTTPD_RD_FAIL;
	}
	return HTTPD_RD_MORE;
}

int httpd_reader_busy(const struct httpd_reader *r)
{
	return r->busy;
}

static enum httpd_method method_of(unsigned m)
{
	switch (m) {
	case HTTP_GET:
		return HTTPD_GET;
	case HTTP_HEAD:
		return HTTPD_HEAD;
	case HTTP_POST:
		return HTTPD_POST;
	case HTTP_PUT:
		return HTTPD_PUT;
	case HTTP_DELETE:
		return HTTPD_DELETE;
	case HTTP_OPTIONS:
		return HTTPD_OPTIONS;
	case HTTP_PATCH:
		return HTTPD_PATCH;
	case HTTP_CONNECT:
		return HTTPD_CONNECT;
	default:
		return HTTPD_OTHER;
	}
}

void httpd_reader_msg(struct httpd_reader *r, struct httpd_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->method = method_of(r->p.method);
	m->method_name = http_method_str((enum http_method)r->p.method);
	m->url = r->arena ? r->arena : (char *)"";
	m->url_len = r->url_len;
	m->http_minor = r->p.http_major > 1 ? 1 : r->p.http_minor;
	m->expect_continue = r->expect_continue;
	m->length = r->p.content_length;
	m->nfields = r->nf;
}

void httpd_reader_field(struct httpd_reader *r, size_t i, char **name,
			size_t *nlen, char **value, size_t *vlen)
{
	const struct httpd_field *f = &r->f[i];

	*name = r->arena + f->name;
	*nlen = f->nlen;
	*value = r->arena + f->value;
	*vlen = f->vlen;
	if (f->vlen == 0 && f->value == f->name)
		*value = r->arena + f->name + f->nlen; /* its NUL */
}

const char *httpd_reader_get(const struct httpd_reader *r, const char *lname)
{
	size_t i, n = strlen(lname);

	for (i = 0; i < r->nf; i++) {
		const struct httpd_field *f = &r->f[i];

		if (f->nlen == n && !memcmp(r->arena + f->name, lname, n))
			return f->value == f->name ? "" : r->arena + f->value;
	}
	return NULL;
}

void httpd_reader_body(const struct httpd_reader *r, const char **at,
		       size_t *len)
{
	*at = r->body_at;
	*len = r->body_len;
}

int httpd_reader_keep_alive(const struct httpd_reader *r)
{
	return r->keep_alive;
}

int httpd_reader_fail(const struct httpd_reader *r, const char **detail)
{
	if (detail)
		*detail = r->detail;
	return r->fail;
}

int httpd_url_path(const char *url, size_t len, const char **ret_path,
		   size_t *ret_len)
{
	struct http_parser_url u;

	http_parser_url_init(&u);
	if (http_parser_parse_url(url, len, 0, &u) != 0 ||
	    !(u.field_set & (1u << UF_PATH)))
		return -EINVAL;
	*ret_path = url + u.field_data[UF_PATH].off;
	*ret_len = u.field_data[UF_PATH].len;
	return 0;
}

int httpd_url_param(const char *url, size_t len, const char *name,
		    const char **ret_val, size_t *ret_len)
{
	const char *q = memchr(url, '?', len), *end = url + len;
	size_t nl = strlen(name);

	while (q && q < end) {
		const char *p = q + 1;
		const char *amp = memchr(p, '&', (size_t)(end - p));

		if (!amp)
			amp = end;
		if ((size_t)(amp - p) > nl && !memcmp(p, name, nl) &&
		    p[nl] == '=') {
			*ret_val = p + nl + 1;
			*ret_len = (size_t)(amp - p) - nl - 1;
			return 1;
		}
		q = amp < end ? amp : NULL;
	}
	return 0;
}
