/*
 * replicator/publish/repl_pack.c — the chunk list of a pack (catalog.h,
 * cat_pack) as the replicator knows it: the shape and the rows of hashed files
 * from generation GEN's catalog, the rows of files hashed after publishing
 * (pending in the catalog) from GEN's source index; of those, the chunks
 * the source index places in this pack (the first file it found each
 * in). On a worker thread;
 * each call opens both (SQLite opens are cheap next to reading a pack's
 * megabytes from the source).
 */
#include <errno.h>
#include <stdlib.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/source/repl_srcindex.h"

struct rows_ctx {
	cat_reader *cat;
	repl_srcindex *idx; /* opened on the first pending file */
	const char *state_dir;
	uint64_t gen;
};

/* Open the generation's source index on first use. */
static int index_of(struct rows_ctx *c)
{
	char *path;
	int r;

	if (c->idx)
		return 0;
	path = repl_srcindex_path(c->state_dir, c->gen);
	if (!path)
		return -ENOMEM;
	r = repl_srcindex_open(path, &c->idx);
	free(path);
	return r;
}

static int rows(void *arg, uint64_t ino, uint64_t size, uint64_t lo,
		uint64_t hi, struct cat_pack_list *out)
{
	struct rows_ctx *c = arg;
	struct repl_src_manifest m;
	size_t i;
	int r;

	r = cat_pack_rows_reader(c->cat, ino, size, lo, hi, out);
	if (r != -EAGAIN)
		return r;
	/* Pending in the catalog: hashed since, or not yet. */
	r = index_of(c);
	if (r == 0)
		r = repl_srcindex_manifest(c->idx, ino, &m);
	if (r < 0)
		return r; /* -EAGAIN: still to hash */
	if (m.state != REPL_HASH_OK)
		return 0; /* changed before it was hashed: no chunks here */
	for (i = 0; i < m.n; i++) {
		if (m.v[i].off < lo || m.v[i].off >= hi)
			continue;
		r = cat_pack_list_add(out, &m.v[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Whether the source index's place of a chunk (the first file it was
 * found in) is inside part `part` of pack p. */
static int placed_in(const struct cat_pack *p, uint64_t part,
		     const struct repl_src_loc *loc)
{
	if (!p->big)
		return loc->ino >= p->first && loc->ino <= p->last;
	return loc->ino == p->first && loc->off / CAT_PACK_SPAN == part;
}

/* Keep the chunks whose place is this pack: a chunk many files share
 * (checkpoint versions, copies) is in one pack only, so behind a cache
 * it crosses the WAN once. An id the index does not know stays (the
 * answer is then a 404, as for a batch). */
static int keep_own(struct rows_ctx *c, const struct cat_pack *p, uint64_t part,
		    struct cat_pack_list *l)
{
	struct repl_src_loc loc;
	size_t i, n = 0;
	int r;

	r = index_of(c);
	if (r < 0)
		return r;
	for (i = 0; i < l->n; i++) {
		r = repl_srcindex_lookup(c->idx, &l->ids[i], &loc);
		if (r < 0 && r != -ENOENT)
			return r;
		if (r == 0 && !placed_in(p, part, &loc))
			continue;
		l->ids[n] = l->ids[i];
		l->lens[n] = l->lens[i];
		n++;
	}
	l->n = n;
	return 0;
}

int repl_pack_list(const char *state_dir, uint64_t gen, uint64_t first,
		   uint64_t part, struct cat_pack_list *out)
{
	struct rows_ctx c = {.state_dir = state_dir, .gen = gen};
	struct cat_pack p;
	char *path = repl_catalog_path(state_dir, gen);
	int r;

	if (!path)
		return -ENOMEM;
	r = cat_reader_open(path, &c.cat);
	free(path);
	if (r < 0)
		return r == -EBADMSG ? r : -ENOENT;
	r = cat_pack_named(c.cat, first, part, &p);
	if (r == 0)
		r = cat_pack_ids(c.cat, &p, part, rows, &c, out);
	if (r == 0)
		r = keep_own(&c, &p, part, out);
	repl_srcindex_close(c.idx);
	cat_reader_close(c.cat);
	return r;
}
