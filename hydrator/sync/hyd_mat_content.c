/*
 * hydrator/sync/hyd_mat_content.c — the bytes of `ferry sync`'s regular
 * files: whether a file's manifest is local (waiting for or fetching it),
 * whether a file already in DEST matches its manifest (hashed chunk by
 * chunk, holes skipped), and filling a fresh file with verified chunks
 * (the store first, the fetcher for what it lacks; zero chunks left as
 * holes).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/sync/hyd_mat_priv.h"

/* manifest rows per cat_chunks_range call: the digest's batches */
#define RANGE_BATCH HYD_SYNC_DIGEST_ROWS
#define FILL_BATCH 1024u /* ranges handed to the placer at a time */
#define WAIT_SLACK_NS 2000000000ull
#define WAIT_POLL_NS 2000000L /* a chunk the fetching pass has not stored */
#define MANIFEST_POLL_NS 10000000L /* a manifest the manifest thread lacks */

/* Is ino's manifest local (its chunk rows readable)? Waits for it while
 * hydration runs, then fetches it when a manifest fetcher is there.
 * 0, or -errno with *why set (-ESTALE: the source changed, no manifest
 * in this generation). */
int hyd_mat__manifest_ready(struct walk *w, const struct cat_inode *in,
			    const char **why)
{
	int st, r, fetched = 0;

	/* Nothing to read, or a catalog with every manifest in it: one
	 * catalog query less per file. */
	if (in->size == 0 || !w->m->pending)
		return 0;
	for (;;) {
		st = cat_manifest_state(w->m->cat, in->ino);
		if (st < 0) {
			*why = "cannot read where its manifest is";
			return st;
		}
		if (st == CAT_MANIFEST_CATALOG || st == CAT_MANIFEST_LOCAL)
			return 0;
		if (st == CAT_MANIFEST_CHANGED) {
			*why = "the source changed before its manifest was "
			       "made: no manifest in this generation";
			return -ESTALE;
		}
		if (__atomic_load_n(&w->m->hydrating, __ATOMIC_ACQUIRE)) {
			nanosleep(&(struct timespec){0, MANIFEST_POLL_NS},
				  NULL);
			continue;
		}
		if (fetched || !w->m->manifest) {
			*why = "its manifest is not local and could not be "
			       "fetched";
			return -EAGAIN;
		}
		r = hyd_manifest_file(w->m->manifest, w->m->cat, in->ino,
				      base_now_ns() + w->m->timeout_ns, NULL);
		if (r < 0) {
			*why = "cannot fetch its manifest";
			return r;
		}
		fetched = 1;
	}
}

int hyd_sync__all_zero(const uint8_t *b, size_t n)
{
	return n == 0 || (b[0] == 0 && memcmp(b, b + 1, n - 1) == 0);
}

/* 0 when buf (len bytes, all zero) is the chunk id. */
static int zero_verify(struct hyd_zero_ids *z, const chunk_id *id,
		       const uint8_t *buf, uint32_t len)
{
	unsigned i;
	int r;

	for (i = 0; i < HYD_ZERO_IDS; i++)
		if (z->len[i] == len)
			return memcmp(&z->id[i], id, sizeof(*id)) ? -EBADMSG
								  : 0;
	i = z->next++ % HYD_ZERO_IDS;
	r = chunk_id_compute(buf, len, &z->id[i]);
	if (r < 0)
		return r;
	z->len[i] = len;
	return memcmp(&z->id[i], id, sizeof(*id)) ? -EBADMSG : 0;
}

int hyd_sync__file_matches(cat_reader *cat, uint64_t ino, uint64_t size, int fd,
			   uint8_t *buf, uint32_t max_raw,
			   struct hyd_zero_ids *zero)
{
	struct cat_chunk cs[RANGE_BATCH];
	uint64_t off = 0, data_at = 0; /* no data in [off, data_at) */
	size_t n = 0, i, got = 0;
	off_t d;
	int r;

	while (off < size) {
		r = cat_chunks_range(cat, ino, off, size - off, cs, RANGE_BATCH,
				     &n);
		if (r < 0)
			return r;
		if (n == 0)
			return 0; /* manifest stops short: cannot match */
		for (i = 0; i < n; i++) {
			if (cs[i].off != off || cs[i].len > max_raw)
				return -EBADMSG;
			/* Holes read as zeros: skip reading them at all. */
			if (zero && off >= data_at) {
				d = lseek(fd, (off_t)off, SEEK_DATA);
				data_at = d >= 0	   ? (uint64_t)d
					  : errno == ENXIO ? size
							   : off;
			}
			if (chunk_id_is_hole(&cs[i].id)) {
				/* the source's hole: zeros here, as a hole or
				 * as written zeros */
				if (!zero || off + cs[i].len > data_at) {
					r = base_pread_full(fd, buf, cs[i].len,
							    off, &got);
					if (r < 0)
						return r;
					if (got != cs[i].len ||
					    !hyd_sync__all_zero(buf, got))
						return 0;
				}
				off += cs[i].len;
				continue;
			}
			if (zero && off + cs[i].len <= data_at) {
				memset(buf, 0, cs[i].len);
				got = cs[i].len;
			} else {
				r = base_pread_full(fd, buf, cs[i].len, off,
						    &got);
				if (r < 0)
					return r;
			}
			if (got != cs[i].len)
				return 0;
			/* A zero run (a hole, often) costs a memcmp. */
			if (zero && hyd_sync__all_zero(buf, got))
				r = zero_verify(zero, &cs[i].id, buf,
						cs[i].len);
			else
				r = chunk_id_verify(&cs[i].id, buf, got);
			if (r != 0)
				return 0;
			off += cs[i].len;
		}
	}
	return 1;
}

int hyd_sync__dead_cmp(const void *a, const void *b)
{
	return memcmp(&((const struct hyd_sync_dead *)a)->id,
		      &((const struct hyd_sync_dead *)b)->id, sizeof(chunk_id));
}

void hyd_mat__let_go(struct walk *w)
{
	w->buf_valid = 0;
	if (w->held)
		hyd_sync__handoff_release(w->m->handoff, w->held);
	w->held = NULL;
}

/* c's bytes (a chunk of ino) from the fetching pass's hand-off, held
 * (w->data points at them): 1, 0 when it does not hold them, -EBADMSG
 * with why set. */
static int handed(struct walk *w, uint64_t ino, const struct cat_chunk *c,
		  const char **why)
{
	struct hyd_flight *fl;

	if (!w->m->handoff)
		return 0;
	fl = hyd_sync__handoff_take(w->m->handoff, &c->id, ino, c->off);
	if (!fl)
		return 0;
	if (fl->raw_len != c->len) {
		hyd_sync__handoff_release(w->m->handoff, fl);
		*why = "fetched chunk length differs from the catalog";
		return -EBADMSG;
	}
	w->held = fl;
	w->data = fl->raw;
	w->buf_valid = 1;
	w->buf_id = c->id;
	return 1;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int hyd_sync__fetch_chunk(struct hyd_fetch *f, const struct cat_chunk *c,
			  uint64_t timeout_ns, uint8_t *out)
{
	struct hyd_flight *fl = NULL;
	uint64_t deadline = base_now_ns() + timeout_ns;
	int r;

	r = hyd_fetch_submit(f, &c->id, c->len, HYD_PRIO_DEMAND, deadline, &fl);
	if (r >= 0)
		r = hyd_fetch_wait(f, fl, deadline + WAIT_SLACK_NS);
	if (r >= 0 && fl->raw_len != c->len)
		r = -EBADMSG;
	if (r >= 0)
		memcpy(out, fl->raw, c->len);
	hyd_fetch_release(f, fl);
	return r < 0 ? r : 0;
}

int hyd_mat__waiting(const struct hyd_mat *m)
{
	return __atomic_load_n(&m->hydrating, __ATOMIC_ACQUIRE) ||
	       (m->filling && m->filling(m->fill_arg));
}

int hyd_mat__stopped(const struct hyd_mat *m)
{
	return m->stop && __atomic_load_n(m->stop, __ATOMIC_RELAXED);
}

int hyd_mat__lacks(struct walk *w, const struct cat_inode *in, uint64_t from)
{
	struct cat_chunk cs[RANGE_BATCH];
	uint64_t off = from < in->size ? from : 0;
	size_t n, k;

	while (off < in->size) {
		if (cat_chunks_range(w->m->cat, in->ino, off, in->size - off,
				     cs, RANGE_BATCH, &n) < 0 ||
		    n == 0)
			return 1; /* the writer will say what is wrong */
		for (k = 0; k < n; k++)
			if (!chunk_id_is_hole(&cs[k].id) &&
			    hyd_store_has(w->m->store, &cs[k].id) != 1)
				return 1;
		off = cs[n - 1].off + cs[n - 1].len;
	}
	return 0;
}

/* Verified bytes of one chunk at w->data: the fetching pass's hand-off,
 * else into w->buf from the store; when the store lacks the chunk or
 * found its copy corrupt (and dropped it), the fetcher. */
static int chunk_get(struct walk *w, uint64_t ino, const struct cat_chunk *c,
		     const char **why)
{
	const struct hyd_sync_dead *dead;
	struct hyd_sync_dead key;
	size_t got = 0;
	int r;

	if (w->buf_valid && !memcmp(&w->buf_id, &c->id, sizeof(c->id)))
		return 0;
	hyd_mat__let_go(w);
	w->data = w->buf;
	/* A -dest DIR's copy (hyd_mat_seed.c), verified again here: it may
	 * have changed since it was checked. */
	if (w->src_fd >= 0 &&
	    base_pread_full(w->src_fd, w->buf, c->len, c->off, &got) == 0 &&
	    got == c->len && chunk_id_verify(&c->id, w->buf, got) == 0)
		goto ok;
	/* Just fetched and verified: the bytes are still in memory. */
	r = handed(w, ino, c, why);
	if (r != 0)
		return r < 0 ? r : 0;
	r = hyd_store_get(w->m->store, &c->id, w->buf, w->m->max_raw, &got);
	/* The fetching pass is still running: it will store the chunk (it
	 * goes in the same order as this walk, so usually soon) and hand it
	 * over. A frame found corrupt was dropped and is fetched below once
	 * it is done. */
	while ((r == -ENOENT || r == -EBADMSG) && hyd_mat__waiting(w->m) &&
	       !hyd_mat__stopped(w->m)) {
		if (w->m->handoff)
			hyd_sync__handoff_wait(w->m->handoff, WAIT_POLL_NS);
		else
			nanosleep(&(struct timespec){0, WAIT_POLL_NS}, NULL);
		r = handed(w, ino, c, why);
		if (r != 0)
			return r < 0 ? r : 0;
		r = hyd_store_get(w->m->store, &c->id, w->buf, w->m->max_raw,
				  &got);
	}
	if (r == 0 && got != c->len) {
		*why = "stored chunk length differs from the catalog";
		return -EBADMSG;
	}
	if (r == 0)
		goto ok;
	key.id = c->id;
	dead = w->m->ndead ? bsearch(&key, w->m->dead, w->m->ndead, sizeof(key),
				     hyd_sync__dead_cmp)
			   : NULL;
	/* The server refused a chunk of this file, or this chunk, because
	 * the source changed since the scan (409): the file is lost for this
	 * generation, and asking again would only hear the same. */
	if (r == -ENOENT &&
	    ((dead && dead->err == -ESTALE) ||
	     (w->m->nstale && bsearch(&ino, w->m->stale, w->m->nstale,
				      sizeof(ino), u64_cmp)))) {
		*why = "the source file changed since the scan (the server "
		       "refuses its chunks): not written";
		return -ESTALE;
	}
	if (r == -ENOENT && dead) {
		*why = "a chunk could not be fetched";
		return dead->err;
	}
	if ((r != -ENOENT && r != -EBADMSG) || !w->m->fetch) {
		*why = r == -ENOENT ? "a chunk is not in the store (its fetch "
				      "failed)"
				    : "cannot read a chunk from the store";
		return r;
	}
	r = hyd_sync__fetch_chunk(w->m->fetch, c, w->m->timeout_ns, w->buf);
	if (r < 0) {
		*why = "cannot fetch a chunk";
		return r;
	}
ok:
	w->buf_valid = 1;
	w->buf_id = c->id;
	return 0;
}

/* The placer answers for a filled range when its round is recorded:
 * nothing waits on that here (the adoption waits for the round). */
static void filled(void *arg, int rc)
{
	(void)arg;
	(void)rc;
}

int hyd_mat__fill_part(struct walk *w, const struct cat_inode *in,
		       uint64_t from)
{
	struct cat_chunk *cs = NULL;
	const char *why = "";
	size_t n = 0, i;
	int r = 1;

	/* in batches: a file's ranges can be millions */
	do {
		if (hyd_place_unrecorded(w->m->place, in->ino, from, FILL_BATCH,
					 &cs, &n) < 0)
			r = 0;
		for (i = 0; i < n && r == 1; i++)
			if (chunk_get(w, in->ino, &cs[i], &why) < 0 ||
			    hyd_place_place(w->m->place, &cs[i].id, w->data,
					    cs[i].len, filled, NULL) <= 0)
				r = 0;
		if (n)
			from = cs[n - 1].off + 1;
		free(cs);
		cs = NULL;
	} while (r == 1 && n == FILL_BATCH);
	return r;
}

/* Fill the fresh (empty) file fd with ino's bytes. All-zero chunks are
 * left as holes; the final ftruncate gives the file its size. */
int hyd_mat__copy_chunks(struct walk *w, int fd, uint64_t ino, uint64_t size,
			 uint8_t *dg, const char **why)
{
	struct cat_chunk cs[RANGE_BATCH];
	uint64_t off = 0, sent = 0; /* [0, sent) handed to hyd_behind */
	size_t n, i;
	int r;

	if (dg)
		memset(dg, 0, HYD_SYNC_DIGEST_LEN);
	while (off < size) {
		if (off - sent >= HYD_BEHIND_STEP) {
			uint64_t end = off & ~(uint64_t)(HYD_BEHIND_ALIGN - 1);

			hyd_mat__behind_written(&w->behind, fd, sent,
						end - sent, 0);
			sent = end;
		}
		r = cat_chunks_range(w->m->cat, ino, off, size - off, cs,
				     RANGE_BATCH, &n);
		if (r == 0 && n == 0)
			r = -EBADMSG;
		if (r < 0) {
			*why = "bad chunk manifest in the catalog";
			return r;
		}
		r = dg ? hyd_sync__digest_rows(dg, cs, n) : 0;
		if (r < 0) {
			*why = "cannot hash the chunk manifest";
			return r;
		}
		for (i = 0; i < n; i++) {
			if (cs[i].off != off || cs[i].len > w->m->max_raw) {
				*why = "bad chunk manifest in the catalog";
				return -EBADMSG;
			}
			/* A hole at the source stays a hole here. */
			if (chunk_id_is_hole(&cs[i].id)) {
				off += cs[i].len;
				continue;
			}
			r = chunk_get(w, ino, &cs[i], why);
			if (r < 0)
				return r;
			if (!hyd_sync__all_zero(w->data, cs[i].len)) {
				r = base_pwrite_all(fd, w->data, cs[i].len,
						    off);
				if (r < 0) {
					*why = "write failed";
					return r;
				}
			}
			off += cs[i].len;
		}
	}
	if (ftruncate(fd, (off_t)size) < 0) {
		*why = "cannot set the file size";
		return -errno;
	}
	hyd_mat__behind_written(&w->behind, fd, sent, size - sent, 1);
	return 0;
}
