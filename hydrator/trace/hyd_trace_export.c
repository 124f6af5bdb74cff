/*
 * hydrator/trace/hyd_trace_export.c — a mount's record (trace.rec, by
 * ino) made a trace (by path): `ferry trace export`.
 *
 * The record's inos are named with the cache's newest catalog: one walk
 * of the tree from the root that stops once every ino read has a path
 * (the catalog has no index from ino to name; the walk costs
 * O(entries) once, at export, never on the mount). A generation keeps
 * the ino of an entry it keeps, so reads of older generations of the
 * same mount are named too; an ino the newest catalog has no regular
 * file for (removed since) is dropped. Then each file's ranges are
 * merged where they touch, the merged range taking the place and time
 * of its earliest read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/trace/hyd_trace.h"

#define REC_MAX (1ull << 30)

struct rec {
	uint64_t ino, off, len;
	uint32_t t_ms;
	uint32_t seq; /* place in the record */
	uint32_t file;
};

/* ---- the record's lines ---- */

static int read_all(const char *path, char **ret, size_t *ret_len)
{
	char *buf = NULL, *nb;
	size_t len = 0, cap = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		if (len + 1 >= cap) {
			cap = cap ? cap * 2 : 65536;
			if (cap > REC_MAX) {
				r = -EFBIG;
				break;
			}
			nb = realloc(buf, cap);
			if (!nb) {
				r = -ENOMEM;
				break;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		len += (size_t)n;
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* The "r" lines (and "p" lines unless reads_only) of the record in buf
 * (NUL-terminated), in order. A last line without its newline (a crash
 * while it was written) is left out. */
static int parse_rec(char *buf, size_t len, int reads_only, struct rec **ret,
		     size_t *ret_n, char *why, size_t cap)
{
	struct rec *v = NULL, *nv;
	size_t n = 0, vcap = 0, line = 0;
	char *p = buf, *nl;
	unsigned long long ms, ino, off, l;
	int k;

	(void)len;
	while ((nl = strchr(p, '\n')) != NULL) {
		*nl = '\0';
		line++;
		if (line == 1 && strcmp(p, HYD_TRACE_REC_MAGIC) != 0) {
			snprintf(why, cap,
				 "not a trace record (\"%s\" "
				 "expected on line 1)",
				 HYD_TRACE_REC_MAGIC);
			free(v);
			return -EBADMSG;
		}
		if ((p[0] == 'r' || (p[0] == 'p' && !reads_only)) &&
		    p[1] == ' ') {
			if (sscanf(p + 2, "%llu %llu %llu %llu%n", &ms, &ino,
				   &off, &l, &k) != 4 ||
			    p[2 + k] != '\0' || l == 0 || ms > UINT32_MAX ||
			    off > INT64_MAX || l > INT64_MAX - off) {
				snprintf(why, cap,
					 "record line %zu: a bad read", line);
				free(v);
				return -EBADMSG;
			}
			if (n >= HYD_TRACE_MAX_RANGES)
				break;
			if (n == vcap) {
				vcap = vcap ? vcap * 2 : 1024;
				nv = realloc(v, vcap * sizeof(*v));
				if (!nv) {
					free(v);
					return -ENOMEM;
				}
				v = nv;
			}
			v[n] = (struct rec){.ino = ino,
					    .off = off,
					    .len = l,
					    .t_ms = (uint32_t)ms,
					    .seq = (uint32_t)n};
			n++;
		}
		p = nl + 1;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* ---- naming the inos: one walk of the tree ---- */

struct want {
	uint64_t ino;
	uint32_t file; /* index into the trace's files + 1; 0: not found */
};

struct walk {
	cat_reader *cat;
	struct want *w; /* sorted by ino, unique */
	size_t nw, named;
	struct hyd_trace *t;
	char path[PATH_MAX];
	size_t plen;
};

static int want_cmp(const void *a, const void *b)
{
	const struct want *x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static struct want *want_find(struct walk *k, uint64_t ino)
{
	struct want key = {.ino = ino};

	return bsearch(&key, k->w, k->nw, sizeof(key), want_cmp);
}

static int walk_dir(struct walk *k, uint64_t dir, unsigned depth);

struct dir_ctx {
	struct walk *k;
	uint64_t *dirs;
	size_t ndirs, capdirs;
	char *names; /* the subdirectories' names, NUL after each */
	size_t nnames, capnames;
};

static int name_file(struct walk *k, const void *name, size_t nlen,
		     const struct cat_inode *in)
{
	struct hyd_trace *t = k->t;
	struct hyd_trace_file *f, *nv;
	struct want *w = want_find(k, in->ino);

	if (!w || w->file)
		return 0;
	if (k->plen + nlen + 2 > sizeof(k->path))
		return 0;
	if (t->nfiles == t->capfiles) {
		t->capfiles = t->capfiles ? t->capfiles * 2 : 64;
		nv = realloc(t->files, t->capfiles * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		t->files = nv;
	}
	f = &t->files[t->nfiles];
	f->path = malloc(k->plen + nlen + 2);
	if (!f->path)
		return -ENOMEM;
	memcpy(f->path, k->path, k->plen);
	memcpy(f->path + k->plen, name, nlen);
	f->path[k->plen + nlen] = '\0';
	f->size = in->size;
	f->mtime_ns = in->mtime_ns;
	w->file = (uint32_t)++t->nfiles;
	k->named++;
	return 0;
}

static int on_entry(void *arg, const void *name, size_t nlen,
		    const struct cat_inode *in, uint64_t pos)
{
	struct dir_ctx *d = arg;
	void *nv;
	int r;

	(void)pos;
	if (in->kind == CAT_REG) {
		r = name_file(d->k, name, nlen, in);
		return r < 0 ? r : 0;
	}
	if (in->kind != CAT_DIR)
		return 0;
	/* Subdirectories after this one's listing (the reader takes no
	 * call back into it from a callback). */
	if (d->ndirs == d->capdirs) {
		d->capdirs = d->capdirs ? d->capdirs * 2 : 16;
		nv = realloc(d->dirs, d->capdirs * sizeof(*d->dirs));
		if (!nv)
			return -ENOMEM;
		d->dirs = nv;
	}
	if (d->nnames + nlen + 1 > d->capnames) {
		d->capnames = (d->capnames + nlen + 1) * 2;
		nv = realloc(d->names, d->capnames);
		if (!nv)
			return -ENOMEM;
		d->names = nv;
	}
	d->dirs[d->ndirs++] = in->ino;
	memcpy(d->names + d->nnames, name, nlen);
	d->names[d->nnames + nlen] = '\0';
	d->nnames += nlen + 1;
	return 0;
}

static int walk_dir(struct walk *k, uint64_t dir, unsigned depth)
{
	struct dir_ctx d = {.k = k};
	size_t i, at = 0, nlen, plen = k->plen;
	int r;

	if (depth > PATH_MAX / 2)
		return -ELOOP;
	r = cat_readdir(k->cat, dir, 0, on_entry, &d);
	for (i = 0; r == 0 && i < d.ndirs && k->named < k->nw; i++) {
		nlen = strlen(d.names + at);
		if (plen + nlen + 2 <= sizeof(k->path)) {
			memcpy(k->path + plen, d.names + at, nlen);
			k->path[plen + nlen] = '/';
			k->plen = plen + nlen + 1;
			r = walk_dir(k, d.dirs[i], depth + 1);
			k->plen = plen;
		}
		at += nlen + 1;
	}
	free(d.dirs);
	free(d.names);
	return r;
}

/* ---- merging ---- */

static int by_file_off(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_seq(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* v[0..n) with files set: merged per file, then back in record order. */
static int merge(struct hyd_trace *t, struct rec *v, size_t n)
{
	size_t i, m = 0;
	uint64_t size, end;

	qsort(v, n, sizeof(*v), by_file_off);
	for (i = 0; i < n; i++) {
		size = t->files[v[i].file].size;
		if (v[i].off >= size)
			continue;
		if (v[i].len > size - v[i].off)
			v[i].len = size - v[i].off;
		if (m && v[m - 1].file == v[i].file &&
		    v[i].off <= v[m - 1].off + v[m - 1].len) {
			struct rec *p = &v[m - 1];

			end = v[i].off + v[i].len;
			if (end > p->off + p->len)
				p->len = end - p->off;
			if (v[i].seq < p->seq) {
				p->seq = v[i].seq;
				p->t_ms = v[i].t_ms;
			}
			continue;
		}
		v[m++] = v[i];
	}
	qsort(v, m, sizeof(*v), by_seq);
	t->ranges = malloc((m ? m : 1) * sizeof(*t->ranges));
	if (!t->ranges)
		return -ENOMEM;
	t->capranges = m ? m : 1;
	for (i = 0; i < m; i++)
		t->ranges[i] = (struct hyd_trace_range){.file = v[i].file,
							.t_ms = v[i].t_ms,
							.off = v[i].off,
							.len = v[i].len};
	t->nranges = m;
	return 0;
}

int hyd_trace_export(const char *cache_dir, int flags, struct hyd_trace *ret,
		     char *why, size_t cap)
{
	char path[PATH_MAX], catpath[PATH_MAX];
	struct walk k = {0};
	struct rec *v = NULL;
	struct cat_meta meta;
	size_t n = 0, i, len, u;
	char *buf = NULL;
	int r;

	memset(ret, 0, sizeof(*ret));
	if (cap)
		why[0] = '\0';
	r = snprintf(path, sizeof(path), "%s/%s", cache_dir,
		     (flags & HYD_TRACE_PREVIOUS) ? HYD_TRACE_PREV_NAME
						  : HYD_TRACE_REC_NAME);
	if (r < 0 || (size_t)r >= sizeof(path))
		return -ENAMETOOLONG;
	r = read_all(path, &buf, &len);
	if (r < 0) {
		snprintf(why, cap, "%s: %s", path, strerror(-r));
		return r;
	}
	r = parse_rec(buf, len, flags & HYD_TRACE_READS_ONLY, &v, &n, why, cap);
	free(buf);
	if (r < 0)
		return r;
	r = hyd_cache_catalog_newest(cache_dir, catpath, sizeof(catpath), NULL);
	if (r == 0)
		r = cat_reader_open(catpath, &k.cat);
	if (r < 0) {
		snprintf(why, cap, "the cache's catalog: %s", strerror(-r));
		free(v);
		return r;
	}
	cat_reader_meta(k.cat, &meta);
	ret->generation = meta.generation;
	/* The inos read, once each. */
	k.w = malloc((n ? n : 1) * sizeof(*k.w));
	if (!k.w) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++)
		k.w[i] = (struct want){.ino = v[i].ino};
	qsort(k.w, n, sizeof(*k.w), want_cmp);
	for (i = 0, u = 0; i < n; i++)
		if (u == 0 || k.w[u - 1].ino != k.w[i].ino)
			k.w[u++] = k.w[i];
	k.nw = u;
	k.t = ret;
	if (k.nw)
		r = walk_dir(&k, CAT_ROOT_INO, 0);
	if (r < 0) {
		snprintf(why, cap, "walking the catalog: %s", strerror(-r));
		goto out;
	}
	/* Reads of inos named, with their file. */
	for (i = 0, u = 0; i < n; i++) {
		struct want *w = want_find(&k, v[i].ino);

		if (w && w->file) {
			v[u] = v[i];
			v[u++].file = w->file - 1;
		}
	}
	r = merge(ret, v, u);
out:
	if (r < 0)
		hyd_trace_free(ret);
	cat_reader_close(k.cat);
	free(k.w);
	free(v);
	return r;
}
