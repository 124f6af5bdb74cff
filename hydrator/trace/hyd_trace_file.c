/*
 * hydrator/trace/hyd_trace_file.c — the trace file format (docs/formats.md,
 * "Traces"): parse (untrusted input, every field bounded), load, write.
 *
 *   ferry-trace 1
 *   generation G
 *   f ID SIZE MTIME_NS PATH      a file, ids 0, 1, 2... in order
 *   r T_MS ID OFF LEN            a range of file ID first read at T_MS
 *   end
 *
 * PATH is the last field: bytes 0x00-0x20, '%' and 0x7f are written %XX,
 * every other byte as itself. '#' lines and empty lines are comments.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"

#define LOAD_MAX (1ull << 30) /* bytes of a trace file */

void hyd_trace_free(struct hyd_trace *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->nfiles; i++)
		free(t->files[i].path);
	free(t->files);
	free(t->ranges);
	memset(t, 0, sizeof(*t));
}

static int bad(char *why, size_t cap, size_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int bad(char *why, size_t cap, size_t line, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cap)
		snprintf(why, cap, "line %zu: %s", line, msg);
	return -EBADMSG;
}

/* The next space-separated field of [*p, end): its bounds, *p after it
 * and one space. 0, or -1 when there is none. */
static int field(const char **p, const char *end, const char **ret_s,
		 size_t *ret_n)
{
	const char *s = *p, *e;

	if (s >= end || *s == ' ')
		return -1;
	e = memchr(s, ' ', (size_t)(end - s));
	if (e && e + 1 == end)
		return -1; /* a space ends the line: no field after it */
	if (!e)
		e = end;
	*ret_s = s;
	*ret_n = (size_t)(e - s);
	*p = e < end ? e + 1 : e;
	return 0;
}

/* A decimal of 1..20 digits, no sign, no leading zero, within [0, hi]. */
static int num(const char **p, const char *end, uint64_t hi, uint64_t *ret)
{
	char buf[24];
	const char *s;
	size_t n;

	if (field(p, end, &s, &n) < 0 || n == 0 || n > 20 ||
	    (n > 1 && s[0] == '0') || memchr(s, '\0', n))
		return -1; /* strtoull would stop at a NUL: "1\0junk" */
	memcpy(buf, s, n);
	buf[n] = '\0';
	return base_parse_u64(buf, 0, hi, ret) < 0 ? -1 : 0;
}

/* Decode PATH (the rest of the line) into a new string and check it: a
 * relative path of components that pass cat_name_check. */
static int path_decode(const char *s, size_t n, char **ret)
{
	char *out = malloc(n + 1);
	size_t i, o = 0, comp = 0;
	int hi, lo;

	if (!out)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= 0x20 || c == 0x7f)
			goto bad;
		if (c == '%') {
			if (i + 2 >= n)
				goto bad;
			hi = base_hex_digit(s[i + 1]);
			lo = base_hex_digit(s[i + 2]);
			if (hi < 0 || lo < 0)
				goto bad;
			c = (unsigned char)(hi * 16 + lo);
			i += 2;
		}
		out[o++] = (char)c;
	}
	out[o] = '\0';
	if (o == 0 || o > PATH_MAX - 1 || out[0] == '/')
		goto bad;
	for (i = 0; i <= o; i++) {
		if (i < o && out[i] != '/')
			continue;
		if (cat_name_check(out + comp, i - comp) != 0)
			goto bad;
		comp = i + 1;
	}
	*ret = out;
	return 0;
bad:
	free(out);
	return -EBADMSG;
}

static int parse_file(struct hyd_trace *t, const char *p, const char *end,
		      size_t line, char *why, size_t cap)
{
	struct hyd_trace_file *f;
	uint64_t id, size, mt;
	char *path;
	int r, neg;

	if (num(&p, end, UINT64_MAX, &id) < 0 || id != t->nfiles)
		return bad(why, cap, line, "a file's id must be %zu",
			   t->nfiles);
	if (t->nfiles >= HYD_TRACE_MAX_FILES)
		return bad(why, cap, line, "more than %u files",
			   HYD_TRACE_MAX_FILES);
	neg = -1;
	if (num(&p, end, INT64_MAX, &size) == 0) {
		neg = p + 1 < end && p[0] == '-' && p[1] != '0';
		p += neg;
	}
	if (neg < 0 || num(&p, end, INT64_MAX, &mt) < 0)
		return bad(why, cap, line,
			   "a file's size and mtime are "
			   "decimal numbers");
	r = path_decode(p, (size_t)(end - p), &path);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return bad(why, cap, line,
			   "not a relative path of valid names (%%XX for "
			   "bytes up to space, '%%' and 0x7f)");
	if (base_grow((void **)&t->files, &t->capfiles, t->nfiles + 1,
		      sizeof(*t->files)) < 0) {
		free(path);
		return -ENOMEM;
	}
	f = &t->files[t->nfiles++];
	f->path = path;
	f->size = size;
	f->mtime_ns = neg ? -(int64_t)mt : (int64_t)mt;
	return 0;
}

static int parse_range(struct hyd_trace *t, const char *p, const char *end,
		       size_t line, char *why, size_t cap)
{
	struct hyd_trace_range *g;
	uint64_t ms, id, off, len;

	if (t->nranges >= HYD_TRACE_MAX_RANGES)
		return bad(why, cap, line, "more than %u ranges",
			   HYD_TRACE_MAX_RANGES);
	if (num(&p, end, UINT32_MAX, &ms) < 0 ||
	    num(&p, end, UINT32_MAX, &id) < 0 ||
	    num(&p, end, INT64_MAX, &off) < 0 ||
	    num(&p, end, INT64_MAX, &len) < 0 || p != end)
		return bad(why, cap, line, "a range is: r T_MS ID OFF LEN");
	if (id >= t->nfiles)
		return bad(why, cap, line,
			   "a range of file %" PRIu64 " before its f line", id);
	if (len == 0 || off > t->files[id].size ||
	    len > t->files[id].size - off)
		return bad(why, cap, line,
			   "a range not within its file "
			   "(of %" PRIu64 " bytes)",
			   t->files[id].size);
	if (base_grow((void **)&t->ranges, &t->capranges, t->nranges + 1,
		      sizeof(*t->ranges)) < 0)
		return -ENOMEM;
	g = &t->ranges[t->nranges++];
	g->t_ms = (uint32_t)ms;
	g->file = (uint32_t)id;
	g->off = off;
	g->len = len;
	return 0;
}

int hyd_trace_parse(const char *buf, size_t len, struct hyd_trace *ret,
		    char *why, size_t cap)
{
	const char *p = buf, *end = buf + len, *nl, *e;
	size_t line = 0;
	int r = 0, ended = 0, have_gen = 0;
	uint64_t gen;

	memset(ret, 0, sizeof(*ret));
	if (cap)
		why[0] = '\0';
	while (p < end && r == 0) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			r = bad(why, cap, line + 1, "no newline at the end");
			break;
		}
		e = nl;
		line++;
		if ((size_t)(e - p) > HYD_TRACE_LINE_MAX) {
			r = bad(why, cap, line, "longer than %u bytes",
				HYD_TRACE_LINE_MAX);
		} else if (ended) {
			r = bad(why, cap, line, "text after \"end\"");
		} else if (line == 1) {
			if ((size_t)(e - p) != strlen(HYD_TRACE_MAGIC) ||
			    memcmp(p, HYD_TRACE_MAGIC, (size_t)(e - p)) != 0)
				r = bad(why, cap, line,
					"not a ferry trace (\"%s\" expected)",
					HYD_TRACE_MAGIC);
		} else if (e == p || *p == '#') {
			/* a comment */
		} else if (e - p >= 2 && p[0] == 'f' && p[1] == ' ') {
			r = have_gen ? parse_file(ret, p + 2, e, line, why, cap)
				     : bad(why, cap, line,
					   "a file before \"generation\"");
		} else if (e - p >= 2 && p[0] == 'r' && p[1] == ' ') {
			r = parse_range(ret, p + 2, e, line, why, cap);
		} else if (e - p > 11 && memcmp(p, "generation ", 11) == 0) {
			const char *q = p + 11;

			if (have_gen || num(&q, e, UINT64_MAX, &gen) < 0 ||
			    q != e || gen == 0)
				r = bad(why, cap, line,
					"one \"generation N\" line, N >= 1");
			ret->generation = gen;
			have_gen = 1;
		} else if (e - p == 3 && memcmp(p, "end", 3) == 0) {
			ended = 1;
		} else {
			r = bad(why, cap, line, "unknown line");
		}
		p = nl + 1;
	}
	if (r == 0 && line == 0)
		r = bad(why, cap, 1, "empty");
	if (r == 0 && !ended)
		r = bad(why, cap, line, "cut short: no \"end\" line");
	if (r == 0 && !have_gen)
		r = bad(why, cap, line, "no \"generation\" line");
	if (r < 0)
		hyd_trace_free(ret);
	return r;
}

int hyd_trace_load(const char *path, struct hyd_trace *ret, char *why,
		   size_t cap)
{
	char *buf = NULL, *nb;
	size_t len = 0, bcap = 0;
	ssize_t n;
	int fd, r;

	memset(ret, 0, sizeof(*ret));
	fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(why, cap, "cannot open: %s", strerror(-r));
		return r;
	}
	for (;;) {
		if (len == bcap) {
			bcap = bcap ? bcap * 2 : 65536;
			if (bcap > LOAD_MAX) {
				r = -EFBIG;
				snprintf(why, cap, "larger than %llu bytes",
					 (unsigned long long)LOAD_MAX);
				goto out;
			}
			nb = realloc(buf, bcap);
			if (!nb) {
				r = -ENOMEM;
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, bcap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			snprintf(why, cap, "cannot read: %s", strerror(-r));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	r = hyd_trace_parse(buf ? buf : "", len, ret, why, cap);
out:
	if (fd != 0)
		close(fd);
	free(buf);
	return r;
}

/* PATH as written: see the header. */
static size_t path_encode(const char *s, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c <= 0x20 || c == '%' || c == 0x7f) {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		} else {
			out[o++] = (char)c;
		}
	}
	return o;
}

/* Buffered writes to fd. */
struct out {
	int fd, err;
	size_t n;
	char buf[65536];
};

static void out_flush(struct out *o)
{
	int r;

	if (o->n && !o->err) {
		r = base_write_all(o->fd, o->buf, o->n);
		if (r < 0)
			o->err = r;
	}
	o->n = 0;
}

static void out_line(struct out *o, const char *head, size_t hn,
		     const char *path)
{
	size_t need = hn + (path ? strlen(path) * 3 : 0) + 1;

	if (o->n + need > sizeof(o->buf))
		out_flush(o);
	memcpy(o->buf + o->n, head, hn);
	o->n += hn;
	if (path)
		o->n += path_encode(path, o->buf + o->n);
	o->buf[o->n++] = '\n';
}

int hyd_trace_write(int fd, const struct hyd_trace *t)
{
	struct out *o = malloc(sizeof(*o));
	const struct hyd_trace_file *f;
	const struct hyd_trace_range *g;
	char head[128];
	uint32_t *id, next = 0;
	size_t i;
	int n, r;

	/* Files are numbered anew in the order of their first range (the
	 * order the format asks for); a file no range names is left out. */
	id = calloc(t->nfiles ? t->nfiles : 1, sizeof(*id));
	if (!o || !id) {
		free(o);
		free(id);
		return -ENOMEM;
	}
	o->fd = fd;
	o->err = 0;
	o->n = 0;
	n = snprintf(head, sizeof(head), "%s\ngeneration %" PRIu64,
		     HYD_TRACE_MAGIC, t->generation ? t->generation : 1);
	out_line(o, head, (size_t)n, NULL);
	for (i = 0; i < t->nranges; i++) {
		g = &t->ranges[i];
		if (!id[g->file]) {
			id[g->file] = ++next;
			f = &t->files[g->file];
			n = snprintf(head, sizeof(head),
				     "f %" PRIu32 " %" PRIu64 " %" PRId64 " ",
				     next - 1, f->size, f->mtime_ns);
			out_line(o, head, (size_t)n, f->path);
		}
		n = snprintf(head, sizeof(head),
			     "r %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64,
			     g->t_ms, id[g->file] - 1, g->off, g->len);
		out_line(o, head, (size_t)n, NULL);
	}
	out_line(o, "end", 3, NULL);
	out_flush(o);
	r = o->err;
	free(o);
	free(id);
	return r;
}
