/*
 * hydrator/trace/hyd_trace_plan.c — what a replay fetches: each trace's
 * ranges, in its order, by the ino the mount's catalog has for the path
 * now, and only while the file is the one the trace saw (same size, same
 * mtime). A file that changed is skipped whole: the trace's ranges say
 * where the old contents were read, which tells nothing of the new; its
 * reads are served from the catalog as always, never stale.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/trace/hyd_trace.h"

void hyd_trace_plan_free(struct hyd_trace_plan *p)
{
	if (!p)
		return;
	free(p->steps);
	memset(p, 0, sizeof(*p));
}

/* The directory part of the last path resolved and its ino, so the files
 * of one directory cost one lookup each. */
struct dir_memo {
	char dir[PATH_MAX];
	size_t len;
	uint64_t ino;
	int valid;
};

/* ino of path's regular file in r (into *ret), or 0 with the reason
 * counted. Returns 0, or -ENOMEM/-EIO (the plan fails). */
static int resolve(cat_reader *r, const struct hyd_trace_file *f,
		   struct dir_memo *m, struct hyd_trace_plan *p, uint64_t *ret)
{
	const char *path = f->path, *slash = strrchr(path, '/');
	size_t dlen = slash ? (size_t)(slash - path) : 0;
	const char *s, *e;
	struct cat_inode in;
	uint64_t dir = CAT_ROOT_INO;
	int rc;

	*ret = 0;
	if (m->valid && m->len == dlen && memcmp(m->dir, path, dlen) == 0) {
		dir = m->ino;
	} else {
		m->valid = 0;
		for (s = path; slash && s < slash; s = e + 1) {
			e = memchr(s, '/', (size_t)(slash - s));
			if (!e)
				e = slash;
			rc = cat_lookup(r, dir, s, (size_t)(e - s), &in);
			if (rc == -ENOMEM || rc == -EIO)
				return rc;
			if (rc < 0 || in.kind != CAT_DIR) {
				p->missing++;
				return 0;
			}
			dir = in.ino;
		}
		if (dlen < sizeof(m->dir)) {
			memcpy(m->dir, path, dlen);
			m->len = dlen;
			m->ino = dir;
			m->valid = 1;
		}
	}
	s = slash ? slash + 1 : path;
	rc = cat_lookup(r, dir, s, strlen(s), &in);
	if (rc == -ENOMEM || rc == -EIO)
		return rc;
	if (rc < 0 || in.kind != CAT_REG) {
		p->missing++;
		return 0;
	}
	if (in.size != f->size || in.mtime_ns != f->mtime_ns) {
		p->changed++;
		return 0;
	}
	*ret = in.ino;
	return 0;
}

int hyd_trace_plan_make(cat_reader *r, const struct hyd_trace *const *t,
			size_t n, struct hyd_trace_plan *ret)
{
	struct dir_memo *memo = calloc(1, sizeof(*memo));
	uint64_t *ino = NULL;
	size_t i, j, total = 0, at = 0;
	int rc = 0;

	memset(ret, 0, sizeof(*ret));
	if (!memo)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		total += t[i]->nranges;
	ret->steps = malloc((total ? total : 1) * sizeof(*ret->steps));
	if (!ret->steps) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n && rc == 0; i++) {
		const struct hyd_trace *tr = t[i];

		free(ino);
		ino = calloc(tr->nfiles ? tr->nfiles : 1, sizeof(*ino));
		if (!ino) {
			rc = -ENOMEM;
			break;
		}
		memo->valid = 0;
		for (j = 0; j < tr->nfiles && rc == 0; j++)
			rc = resolve(r, &tr->files[j], memo, ret, &ino[j]);
		ret->files += tr->nfiles;
		for (j = 0; j < tr->nranges && rc == 0; j++) {
			const struct hyd_trace_range *g = &tr->ranges[j];
			uint64_t size = tr->files[g->file].size;
			struct hyd_trace_step *st = &ret->steps[at++];

			st->ino = ino[g->file];
			st->off = g->off;
			st->len = g->off < size ? g->len : 0;
			if (st->len > size - g->off)
				st->len = size - g->off;
			if (!st->len)
				st->ino = 0;
			if (st->ino)
				ret->bytes += st->len;
		}
	}
	ret->nsteps = at;
out:
	free(ino);
	free(memo);
	if (rc < 0)
		hyd_trace_plan_free(ret);
	return rc;
}
