/*
 * catalog/cat_pack.c — packs: the cacheable objects of a generation.
 *
 * A pack is a fixed set of chunks that both sides work out from the
 * catalog alone, so its URL (GET /v1/NS/pack/GEN/INO/K) names the same
 * bytes for every hydrator and an HTTP cache can keep one copy for all:
 *
 *   - a regular file of CAT_PACK_SPAN bytes or more is cut into parts:
 *     part K holds the file's chunks that start in [K x SPAN, (K+1) x
 *     SPAN); it is named (ino, K);
 *   - smaller files (size > 0) are grouped: within one segment of
 *     CAT_PACK_SEG_INOS inos, in ino order, a group takes files until
 *     their sizes add up to SPAN or more (a big file ends the group
 *     before it); the group is named (its first ino, 0).
 *
 * Only sizes decide the shape, so a pack is known before any manifest
 * is; its chunk list (cat_pack_ids) needs the manifests of its files. In
 * the list an id comes once (its first place) and holes not at all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "catalog/cat_reader_priv.h"

#define FILES_SQL                                                              \
	"SELECT ino,size FROM inode WHERE ino BETWEEN ?1 AND ?2 AND kind=?3"   \
	" AND size>0 ORDER BY ino"

/* Whether the group [first, prev] is the one asked for. */
static int is_it(uint64_t want_first, uint64_t ino, uint64_t first,
		 uint64_t prev)
{
	return want_first ? first == want_first : ino >= first && ino <= prev;
}

/* Walk the data files of ino's segment in ino order and stop at the pack
 * that holds ino (want_first 0) or that is named want_first (ino then
 * unused). 0 with *ret set, -ENOENT, -errno. Lock held. */
static int walk_locked(cat_reader *r, uint64_t ino, uint64_t want_first,
		       struct cat_pack *ret)
{
	uint64_t key = want_first ? want_first : ino;
	uint64_t seg = key / CAT_PACK_SEG_INOS, first = 0, sum = 0, prev = 0;
	sqlite3_stmt *st = NULL;
	int64_t v_ino, v_size;
	int rc, open = 0;

	rc = base_sqlite_prepare(r->db, FILES_SQL, &st);
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)(seg * CAT_PACK_SEG_INOS));
	sqlite3_bind_int64(
	    st, 2,
	    (sqlite3_int64)(seg * CAT_PACK_SEG_INOS + CAT_PACK_SEG_INOS - 1));
	sqlite3_bind_int(st, 3, CAT_REG);
	memset(ret, 0, sizeof(*ret));
	rc = -ENOENT;
	for (;;) {
		int s = cat__step(r, st, "pack_files");

		if (s <= 0) {
			if (s < 0)
				rc = s;
			break;
		}
		if (cat__col_int(st, 0, 1, INT64_MAX, &v_ino) ||
		    cat__col_int(st, 1, 1, (int64_t)CAT_SIZE_MAX, &v_size)) {
			rc = -EBADMSG;
			break;
		}
		if ((uint64_t)v_size >= CAT_PACK_SPAN) {
			/* A big file: the open group ended before it. */
			if (open && is_it(want_first, ino, first, prev))
				goto group;
			open = 0;
			if ((uint64_t)v_ino == key) {
				ret->first = ret->last = (uint64_t)v_ino;
				ret->size = (uint64_t)v_size;
				ret->parts =
				    ((uint64_t)v_size + CAT_PACK_SPAN - 1) /
				    CAT_PACK_SPAN;
				ret->big = 1;
				rc = 0;
				break;
			}
			continue;
		}
		if (!open) {
			open = 1;
			first = (uint64_t)v_ino;
			sum = 0;
		}
		prev = (uint64_t)v_ino;
		sum += (uint64_t)v_size;
		if (sum < CAT_PACK_SPAN)
			continue;
		open = 0;
		if (is_it(want_first, ino, first, prev))
			goto group;
	}
	/* The segment ended with a group open. */
	if (rc == -ENOENT && open && is_it(want_first, ino, first, prev))
		goto group;
	base_sqlite_finalize(&st);
	return rc;
group:
	ret->first = first;
	ret->last = prev;
	ret->size = sum;
	ret->parts = 1;
	ret->big = 0;
	base_sqlite_finalize(&st);
	return 0;
}

int cat_pack_find(cat_reader *r, uint64_t ino, struct cat_pack *ret)
{
	struct cat_inode in;
	int rc;

	if (!r || !ret || ino == 0)
		return -EINVAL;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	rc = cat__getattr_locked(r, ino, &in, NULL);
	cat__done(r->st_getattr);
	if (rc == 0 && (in.kind != CAT_REG || in.size == 0))
		rc = -ENOENT;
	if (rc == 0)
		rc = walk_locked(r, ino, 0, ret);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_pack_named(cat_reader *r, uint64_t first, uint64_t part,
		   struct cat_pack *ret)
{
	int rc;

	if (!r || !ret || first == 0 || first > INT64_MAX)
		return -ENOENT;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	rc = walk_locked(r, 0, first, ret);
	pthread_mutex_unlock(&r->mu);
	if (rc == 0 && part >= ret->parts)
		rc = -ENOENT;
	return rc;
}

void cat_pack_list_fini(struct cat_pack_list *l)
{
	free(l->ids);
	free(l->lens);
	memset(l, 0, sizeof(*l));
}

int cat_pack_list_add(struct cat_pack_list *l, const struct cat_chunk *c)
{
	size_t cap;
	chunk_id *ids;
	uint32_t *lens;

	if (chunk_id_is_hole(&c->id))
		return 0;
	if (l->n == l->cap) {
		cap = l->cap ? l->cap * 2 : 64;
		if (cap > CAT_PACK_MAX_IDS)
			return -E2BIG;
		ids = realloc(l->ids, cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		l->ids = ids;
		lens = realloc(l->lens, cap * sizeof(*lens));
		if (!lens)
			return -ENOMEM;
		l->lens = lens;
		l->cap = cap;
	}
	l->ids[l->n] = c->id;
	l->lens[l->n] = c->len;
	l->n++;
	return 0;
}

static int cmp_idx(const void *a, const void *b, void *arg)
{
	const chunk_id *ids = arg;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	int c = memcmp(ids[x].b, ids[y].b, CHUNK_ID_LEN);

	return c ? c : (x > y) - (x < y);
}

/* Keep each id's first place only, the order otherwise as it was. */
static int dedup(struct cat_pack_list *l)
{
	size_t *idx, i, n = 0;
	uint8_t *drop;

	if (l->n < 2)
		return 0;
	idx = malloc(l->n * sizeof(*idx));
	drop = calloc(l->n, 1);
	if (!idx || !drop) {
		free(idx);
		free(drop);
		return -ENOMEM;
	}
	for (i = 0; i < l->n; i++)
		idx[i] = i;
	qsort_r(idx, l->n, sizeof(*idx), cmp_idx, l->ids);
	for (i = 1; i < l->n; i++)
		if (!memcmp(l->ids[idx[i]].b, l->ids[idx[i - 1]].b,
			    CHUNK_ID_LEN))
			drop[idx[i]] = 1; /* a later place of the same id */
	for (i = 0; i < l->n; i++) {
		if (drop[i])
			continue;
		l->ids[n] = l->ids[i];
		l->lens[n] = l->lens[i];
		n++;
	}
	l->n = n;
	free(idx);
	free(drop);
	return 0;
}

int cat_pack_ids(cat_reader *r, const struct cat_pack *p, uint64_t part,
		 cat_pack_rows_fn rows, void *ctx, struct cat_pack_list *out)
{
	struct cat_inode in;
	uint64_t ino, lo, hi;
	int rc = 0;

	out->n = 0;
	if (part >= p->parts)
		return -ENOENT;
	for (ino = p->first; ino <= p->last && rc == 0; ino++) {
		if (!p->big) {
			rc = cat_getattr(r, ino, &in);
			if (rc == -ENOENT) {
				rc = 0;
				continue;
			}
			if (rc < 0)
				break;
			if (in.kind != CAT_REG || in.size == 0)
				continue;
			lo = 0;
			hi = in.size;
		} else {
			lo = part * CAT_PACK_SPAN;
			hi = lo + CAT_PACK_SPAN;
			if (hi > p->size)
				hi = p->size;
		}
		rc = rows(ctx, ino, p->big ? p->size : in.size, lo, hi, out);
	}
	return rc < 0 ? rc : dedup(out);
}

int cat_pack_rows_reader(void *ctx, uint64_t ino, uint64_t size, uint64_t lo,
			 uint64_t hi, struct cat_pack_list *out)
{
	struct cat_chunk cs[64];
	uint64_t off = lo;
	size_t n, i;
	int rc;

	(void)size;
	while (off < hi) {
		rc = cat_chunks_range(ctx, ino, off, hi - off, cs, 64, &n);
		if (rc < 0)
			return rc;
		if (n == 0)
			return -EBADMSG;
		for (i = 0; i < n; i++) {
			if (cs[i].off < lo || cs[i].off >= hi)
				continue; /* starts in the part before */
			rc = cat_pack_list_add(out, &cs[i]);
			if (rc < 0)
				return rc;
		}
		off = cs[n - 1].off + cs[n - 1].len;
	}
	return 0;
}
