/*
 * catalog/base/base_buf.c — a growable, NUL-terminated byte buffer whose
 * allocation failure is sticky (err), so a builder appends freely and
 * checks once: the body of a /metrics answer (base_prom.c), the S3
 * server's XML bodies and SigV4 canonical requests; and base_grow, the
 * doubling of a plain array.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"

#define BUF_INIT_CAP 256u

void base_buf_fini(struct base_buf *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}

/* Room for n more bytes and the NUL; 0 or -ENOMEM (remembered). */
static int buf_reserve(struct base_buf *b, size_t n)
{
	size_t want, cap;
	char *p;

	if (b->err)
		return b->err;
	want = b->len + n + 1;
	if (want <= b->cap)
		return 0;
	cap = b->cap ? b->cap : BUF_INIT_CAP;
	while (cap < want)
		cap *= 2;
	p = realloc(b->buf, cap);
	if (!p) {
		b->err = -ENOMEM;
		return b->err;
	}
	b->buf = p;
	b->cap = cap;
	return 0;
}

void base_buf_add(struct base_buf *b, const void *p, size_t n)
{
	if (buf_reserve(b, n) < 0)
		return;
	memcpy(b->buf + b->len, p, n);
	b->len += n;
	b->buf[b->len] = '\0';
}

void base_buf_str(struct base_buf *b, const char *s)
{
	base_buf_add(b, s, strlen(s));
}

void base_buf_printf(struct base_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		if (!b->err)
			b->err = -EINVAL;
		return;
	}
	if (buf_reserve(b, (size_t)n) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

int base_grow(void **v, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 64;
	void *nv;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	nv = realloc(*v, c * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = c;
	return 0;
}
