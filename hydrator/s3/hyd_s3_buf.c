/*
 * hydrator/s3/hyd_s3_buf.c — the growable buffer the S3 server builds its
 * XML bodies and SigV4 canonical requests in. An allocation failure is
 * sticky (b->err), so a builder appends freely and checks once.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/s3/hyd_s3_internal.h"

void hyd_s3_buf_fini(struct hyd_s3_buf *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}

/* Room for n more bytes and the NUL. */
static int buf_room(struct hyd_s3_buf *b, size_t n)
{
	size_t want = b->len + n + 1, cap = b->cap ? b->cap : 256;
	char *p;

	if (b->err)
		return b->err;
	if (want <= b->cap)
		return 0;
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

void hyd_s3_buf_add(struct hyd_s3_buf *b, const void *p, size_t n)
{
	if (buf_room(b, n) < 0)
		return;
	memcpy(b->buf + b->len, p, n);
	b->len += n;
	b->buf[b->len] = '\0';
}

void hyd_s3_buf_str(struct hyd_s3_buf *b, const char *s)
{
	hyd_s3_buf_add(b, s, strlen(s));
}

void hyd_s3_buf_printf(struct hyd_s3_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = -EINVAL;
		return;
	}
	if (buf_room(b, (size_t)n) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}
