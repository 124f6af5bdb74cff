/*
 * hydrator/hyd_read.c — the read path: file range -> verified bytes.
 *
 * For [off, off+len) clipped at the file size, the catalog's manifest gives
 * the covering chunks (in batches, resumable by offset). Each chunk comes
 * from the decoded-chunk cache, else from the store (which decodes and
 * verifies), else from the fetcher. All missing chunks of a batch are
 * submitted before any is waited for, so they are fetched in parallel.
 * Whatever cannot be served verified is -EIO: a manifest with a gap, a
 * chunk whose length disagrees with the catalog, a failed fetch. Wrong
 * bytes are never an option.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/hyd_read_internal.h"

#define HYD_READ_BATCH 256u
/* Waiters give the fetcher this long past the deadline to report its own
 * verdict (which carries the better error) before giving up themselves. */
#define HYD_READ_WAIT_SLACK_NS 2000000000ull

struct read_slot {
	struct cat_chunk c;
	size_t src_off; /* first byte wanted inside the chunk */
	size_t n;       /* bytes wanted */
	size_t dst_off; /* where they go in out */
	struct hyd_flight *fl;
};

static const char *err_name(int err)
{
	const char *s = strerrorname_np(err < 0 ? -err : err);

	return s ? s : "EUNKNOWN";
}

static void log_fail(uint64_t ino, uint64_t off, size_t len,
		     const chunk_id *id, int err, const char *why)
{
	char hex[CHUNK_ID_HEX_LEN + 1] = "-";

	if(id)
		chunk_id_to_hex(id, hex);
	fprintf(stderr,
		"ferry-hydrator: read failed ino=%" PRIu64 " off=%" PRIu64
		" len=%zu chunk=%s err=%s why=\"%s\"\n",
		ino, off, len, hex, err_name(err), why);
}

/* Lay the batch out over [cur, end) and check it covers it without gaps.
 * Returns how many slots are used, or -EBADMSG. */
static int plan_batch(const struct cat_chunk *cs, size_t n, uint64_t off,
		      uint64_t cur, uint64_t end, struct read_slot *slots)
{
	uint64_t expect = cur, a, b;
	size_t i, used = 0;

	for(i = 0; i < n && expect < end; i++) {
		const struct cat_chunk *c = &cs[i];

		/* The first chunk must contain cur; every later one must
		 * start where the previous ended. */
		if(i == 0 ? !(c->off <= cur && cur - c->off < c->len)
			  : c->off != expect)
			return -EBADMSG;
		a = i == 0 ? cur : c->off;
		b = c->off + c->len < end ? c->off + c->len : end;
		slots[used].c = *c;
		slots[used].src_off = (size_t)(a - c->off);
		slots[used].n = (size_t)(b - a);
		slots[used].dst_off = (size_t)(a - off);
		slots[used].fl = NULL;
		used++;
		expect = c->off + c->len;
	}
	return (int)used;
}

static void release_slots(const struct hyd_read_ctx *rc,
			  struct read_slot *slots, size_t n)
{
	size_t i;

	for(i = 0; i < n; i++) {
		hyd_fetch_release(rc->fetch, slots[i].fl);
		slots[i].fl = NULL;
	}
}

/* Phase 1 for one chunk: cache, then store, else a fetch is submitted.
 * Returns 0 (served or submitted) or -errno with *why set. */
static int slot_start(const struct hyd_read_ctx *rc, struct read_slot *s,
		      uint8_t *out, uint8_t **scratch, uint64_t deadline,
		      const char **why)
{
	size_t got = 0;
	int r;

	if(rc->cache && hyd_read_cache_copy(rc->cache, &s->c.id, s->src_off,
					    s->n, out + s->dst_off))
		return 0;
	if(s->c.len > rc->max_raw) {
		*why = "chunk longer than the catalog's max";
		return -EBADMSG;
	}
	r = -ENOENT;
	if(rc->store) {
		if(!*scratch) {
			*scratch = malloc(rc->max_raw);
			if(!*scratch) {
				*why = "out of memory";
				return -ENOMEM;
			}
		}
		r = hyd_store_get(rc->store, &s->c.id, *scratch, rc->max_raw,
				  &got);
	}
	if(r == 0) {
		if(got != s->c.len) {
			*why = "stored chunk length differs from catalog";
			return -EBADMSG;
		}
		memcpy(out + s->dst_off, *scratch + s->src_off, s->n);
		if(rc->cache)
			hyd_read_cache_put(rc->cache, &s->c.id, *scratch, got);
		return 0;
	}
	/* -EBADMSG: the store found its copy corrupt and forgot it. */
	if(r != -ENOENT && r != -EBADMSG) {
		*why = "chunk store read failed";
		return r;
	}
	r = hyd_fetch_submit(rc->fetch, &s->c.id, s->c.len, HYD_PRIO_DEMAND,
			     deadline, &s->fl);
	if(r < 0) {
		*why = "cannot submit fetch";
		return r;
	}
	/* A new flight: an earlier one may have left the table between our
	 * store miss and the join, its chunk stored by then. Look again, so
	 * one chunk is not fetched twice. */
	if(r == 1 && rc->store && hyd_fetch_unsubmit(rc->fetch, s->fl) == 1) {
		hyd_fetch_release(rc->fetch, s->fl);
		s->fl = NULL;
		if(hyd_store_get(rc->store, &s->c.id, *scratch, rc->max_raw,
				 &got) == 0 && got == s->c.len) {
			memcpy(out + s->dst_off, *scratch + s->src_off, s->n);
			return 0;
		}
		r = hyd_fetch_submit(rc->fetch, &s->c.id, s->c.len,
				     HYD_PRIO_DEMAND, deadline, &s->fl);
		if(r < 0) {
			*why = "cannot submit fetch";
			return r;
		}
	}
	return 0;
}

/* Phase 2 for one chunk with a flight: wait, then copy. */
static int slot_finish(const struct hyd_read_ctx *rc, struct read_slot *s,
		       uint8_t *out, uint64_t deadline, const char **why)
{
	int r;

	r = hyd_fetch_wait(rc->fetch, s->fl, deadline + HYD_READ_WAIT_SLACK_NS);
	if(r < 0) {
		*why = "fetch failed";
		return r;
	}
	/* Two manifest rows naming one id with different lengths: the
	 * flight decoded to the first; this row cannot be served. */
	if(s->fl->raw_len != s->c.len) {
		*why = "chunk length differs between manifest rows";
		return -EBADMSG;
	}
	memcpy(out + s->dst_off, s->fl->raw + s->src_off, s->n);
	if(rc->cache)
		hyd_read_cache_put(rc->cache, &s->c.id, s->fl->raw,
				   s->fl->raw_len);
	hyd_fetch_release(rc->fetch, s->fl);
	s->fl = NULL;
	return 0;
}

int hyd_read_file(const struct hyd_read_ctx *rc, uint64_t ino,
		  uint64_t file_size, uint64_t off, size_t len, uint8_t *out,
		  size_t *ret_len)
{
	struct cat_chunk *cs = NULL;
	struct read_slot *slots = NULL;
	uint8_t *scratch = NULL;
	const char *why = "";
	const chunk_id *bad = NULL;
	uint64_t end, cur, deadline;
	size_t n = 0, i, used = 0;
	int r = 0;

	*ret_len = 0;
	if(off >= file_size || len == 0)
		return 0;
	end = off + (len < file_size - off ? len : file_size - off);
	cs = malloc(HYD_READ_BATCH * sizeof(*cs));
	slots = calloc(HYD_READ_BATCH, sizeof(*slots));
	if(!cs || !slots) {
		r = -ENOMEM;
		why = "out of memory";
		goto out;
	}
	deadline = hyd_now_ns() + rc->timeout_ns;
	for(cur = off; cur < end;) {
		r = cat_chunks_range(rc->cat, ino, cur, end - cur, cs,
				     HYD_READ_BATCH, &n);
		if(r < 0) {
			why = "bad chunk manifest";
			goto out;
		}
		r = n ? plan_batch(cs, n, off, cur, end, slots) : 0;
		if(r <= 0) {
			why = "manifest does not cover the file";
			r = -EBADMSG;
			goto out;
		}
		used = (size_t)r;
		r = 0;
		/* Submit everything missing before waiting for anything. */
		for(i = 0; i < used; i++) {
			r = slot_start(rc, &slots[i], out, &scratch, deadline,
				       &why);
			if(r < 0) {
				bad = &slots[i].c.id;
				goto out;
			}
		}
		for(i = 0; i < used; i++) {
			if(!slots[i].fl)
				continue;
			r = slot_finish(rc, &slots[i], out, deadline, &why);
			if(r < 0) {
				bad = &slots[i].c.id;
				goto out;
			}
		}
		cur = slots[used - 1].c.off + slots[used - 1].c.len;
		used = 0;
	}
	*ret_len = (size_t)(end - off);
out:
	if(r < 0) {
		log_fail(ino, off, len, bad, r, why);
		r = r == -ENOMEM ? -ENOMEM : -EIO;
	}
	if(slots)
		release_slots(rc, slots, used);
	free(scratch);
	free(slots);
	free(cs);
	return r;
}
