/*
 * hydrator/read/hyd_read.c — the read path: file range -> verified bytes.
 *
 * For [off, off+len) clipped at the file size, the catalog's manifest gives
 * the covering chunks (in batches, resumable by offset; an open file keeps
 * a window of rows, so a sequential reader asks the catalog once per window
 * rather than once per kernel request). Each chunk comes from the
 * decoded-chunk cache, else from the store (which decodes and verifies;
 * the cache makes that happen once per chunk even when two requests want
 * it at once), else from the fetcher. All missing chunks of a batch are
 * submitted before any is waited for, so they are fetched in parallel.
 *
 * The answer is a list of segments pointing at the verified bytes where
 * they already are (a pinned cache slot, a flight's buffer), so FUSE can
 * write them to the kernel with one writev and no assembling copy.
 *
 * Readahead is owned here (hyd_read_ahead): after a read that continues
 * the open file's stream is answered, the chunks just past it that are
 * stored are decoded into the cache, so the next requests only copy and
 * the decoding for one request overlaps the kernel's handling of another
 * on the other core; the ones of the whole window (hyd_stream.c: it grows
 * with the stream up to the link's bandwidth-delay product) that are not
 * stored are asked for at readahead priority, which the fetcher sends in
 * batches. A miss looks in the store once: the flight stamp taken before
 * the look tells the submit whether to look again.
 *
 * A pending file of a format 2 catalog has its manifest in the overlay
 * once fetched; until then the catalog says -EAGAIN, and the read asks
 * for that file's manifest alone (hyd_manifest_file: the first byte waits
 * for this file's hashing only, and every reader of the file shares the
 * one request), then asks the catalog again. The read's deadline covers
 * the manifest and the chunks together.
 *
 * Whatever cannot be served verified is -EIO: a manifest with a gap, a
 * chunk whose length disagrees with the catalog, a failed fetch, a
 * manifest that could not be fetched, or none because the source changed
 * before it was hashed (-ESTALE). Wrong bytes are never an option.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/read/hyd_stream_priv.h"

#define HYD_READ_BATCH 256u
/* Waiters give the fetcher this long past the deadline to report its own
 * verdict (which carries the better error) before giving up themselves. */
#define HYD_READ_WAIT_SLACK_NS 2000000000ull
/* Manifest rows a decode-ahead step takes at a time. */
#define HYD_AHEAD_ROWS 16u

enum hold_kind {
	HOLD_NONE = 0,
	HOLD_PIN,    /* a pinned cache slot */
	HOLD_FLIGHT, /* a flight reference (its raw buffer) */
	HOLD_BUF,    /* a buffer of our own */
};

/* What keeps one segment's bytes alive until hyd_read_iov_release. */
struct hyd_read_hold {
	enum hold_kind kind;
	void *p;
};

struct read_slot {
	struct cat_chunk c;
	size_t src_off; /* first byte wanted inside the chunk */
	size_t n;	/* bytes wanted */
	size_t seg;	/* its segment in the answer */
	struct hyd_flight *fl;
};

/* The one line of a read that cannot be served: the read path knows the
 * file, the range and the chunk, so it logs here and its callers do not. */
static void log_fail(uint64_t ino, uint64_t off, size_t len, const chunk_id *id,
		     int err, const char *why)
{
	char hex[CHUNK_ID_HEX_LEN + 1] = "-";

	if (id)
		chunk_id_to_hex(id, hex);
	base_error("read failed ino=%" PRIu64 " off=%" PRIu64 " len=%zu "
		   "chunk=%s errno=%s why=\"%s\"",
		   ino, off, len, hex, base_errname(err), why);
}

void hyd_read_iov_release(const struct hyd_read_ctx *rc,
			  struct hyd_read_iov *rv)
{
	size_t i;

	for (i = 0; i < rv->n; i++) {
		struct hyd_read_hold *h = &rv->hold[i];

		switch (h->kind) {
		case HOLD_PIN:
			hyd_read_cache_unpin(rc->cache, h->p);
			break;
		case HOLD_FLIGHT:
			hyd_fetch_release(rc->fetch, h->p);
			break;
		case HOLD_BUF:
			free(h->p);
			break;
		case HOLD_NONE:
			break;
		}
	}
	free(rv->iov);
	free(rv->hold);
	memset(rv, 0, sizeof(*rv));
}

/* Room for k more segments, empty until filled. 0 or -ENOMEM. */
static int iov_grow(struct hyd_read_iov *rv, size_t k)
{
	struct hyd_read_hold *h;
	struct iovec *v;
	size_t cap = rv->cap ? rv->cap : 16;

	while (cap < rv->n + k)
		cap *= 2;
	if (cap != rv->cap) {
		v = realloc(rv->iov, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		rv->iov = v;
		h = realloc(rv->hold, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		rv->hold = h;
		rv->cap = cap;
	}
	memset(rv->iov + rv->n, 0, k * sizeof(*rv->iov));
	memset(rv->hold + rv->n, 0, k * sizeof(*rv->hold));
	rv->n += k;
	return 0;
}

static void seg_set(struct hyd_read_iov *rv, const struct read_slot *s,
		    const uint8_t *raw, enum hold_kind kind, void *p)
{
	rv->iov[s->seg].iov_base = (void *)(raw + s->src_off);
	rv->iov[s->seg].iov_len = s->n;
	rv->hold[s->seg].kind = kind;
	rv->hold[s->seg].p = p;
}

/* Lay the batch out over [cur, end) and check it covers it without gaps;
 * slot i gets segment seg0 + i. Returns how many slots are used, or
 * -EBADMSG. */
static int plan_batch(const struct cat_chunk *cs, size_t n, uint64_t cur,
		      uint64_t end, size_t seg0, struct read_slot *slots)
{
	uint64_t expect = cur, a, b;
	size_t i, used = 0;

	for (i = 0; i < n && expect < end; i++) {
		const struct cat_chunk *c = &cs[i];

		/* The first chunk must contain cur; every later one must
		 * start where the previous ended. */
		if (i == 0 ? !(c->off <= cur && cur - c->off < c->len)
			   : c->off != expect)
			return -EBADMSG;
		a = i == 0 ? cur : c->off;
		b = c->off + c->len < end ? c->off + c->len : end;
		slots[used].c = *c;
		slots[used].src_off = (size_t)(a - c->off);
		slots[used].n = (size_t)(b - a);
		slots[used].seg = seg0 + used;
		slots[used].fl = NULL;
		used++;
		expect = c->off + c->len;
	}
	return (int)used;
}

/* The cache's loader: verified bytes from the store. A stored chunk of
 * another length than the manifest row is -ERANGE, told apart from a
 * corrupt frame (-EBADMSG, which a fetch can replace). */
static int load_from_store(void *arg, const chunk_id *id, uint8_t *buf,
			   size_t cap, size_t *ret_len)
{
	const struct hyd_read_ctx *rc = arg;
	int r;

	if (!rc->store)
		return -ENOENT;
	r = hyd_store_get(rc->store, id, buf, cap, ret_len);
	if (r == -ENOBUFS || (r == 0 && *ret_len != cap))
		r = -ERANGE;
	return r;
}

/* Read latency buckets, seconds: a decoded cache hit is tens of
 * microseconds, a fetch across a WAN up to the read's --timeout. */
static const double READ_BOUNDS[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,    0.5,    1,	    2.5,    5,	   10,	 30};

void hyd_read_counts_init(struct hyd_read_counts *c)
{
	memset(c, 0, sizeof(*c));
	(void)base_hist_init(&c->latency, READ_BOUNDS,
			     sizeof(READ_BOUNDS) / sizeof(READ_BOUNDS[0]));
}

/* What a hole reads as: never written, so the kernel's zero pages. */
static uint8_t hole_zeros[CHUNK_MAX_LIMIT];

/* One chunk from the cache (pinned) or the store. 0 with its segment set,
 * or the loader's error. */
static int slot_from_store(const struct hyd_read_ctx *rc,
			   const struct read_slot *s, struct hyd_read_iov *rv)
{
	const uint8_t *raw;
	uint8_t *buf;
	size_t got = 0;
	void *pin;
	int r = -EBUSY;

	if (rc->cache) {
		r = hyd_read_cache_pin(rc->cache, &s->c.id, s->c.len,
				       load_from_store, (void *)rc, &raw, &pin);
		if (r == 0)
			seg_set(rv, s, raw, HOLD_PIN, pin);
	}
	if (r != -EBUSY)
		return r;
	/* No cache, or every slot pinned: a buffer of our own. */
	buf = malloc(s->c.len);
	if (!buf)
		return -ENOMEM;
	r = load_from_store((void *)rc, &s->c.id, buf, s->c.len, &got);
	if (r < 0) {
		free(buf);
		return r;
	}
	seg_set(rv, s, buf, HOLD_BUF, buf);
	return 0;
}

/* Phase 1 for one chunk: cache, then store, else a fetch is submitted.
 * The store is asked once: the stamp taken before tells the submit
 * whether a flight can have stored the chunk since (hyd_fetch_stamp).
 * Returns 0 (served or submitted) or -errno with *why set. */
static int slot_start(const struct hyd_read_ctx *rc, struct read_slot *s,
		      struct hyd_read_iov *rv, uint64_t deadline,
		      const char **why)
{
	uint32_t stamp;
	int r;

	if (s->c.len > rc->max_raw) {
		*why = "chunk longer than the catalog's max";
		return -EBADMSG;
	}
	/* A hole at the source: zeros, from nowhere. */
	if (chunk_id_is_hole(&s->c.id)) {
		seg_set(rv, s, hole_zeros, HOLD_NONE, NULL);
		return 0;
	}
	stamp = rc->fetch ? hyd_fetch_stamp(rc->fetch, &s->c.id) : 0;
	r = slot_from_store(rc, s, rv);
	if (r == 0) {
		if (rc->counts)
			__atomic_add_fetch(&rc->counts->chunk_hits, 1,
					   __ATOMIC_RELAXED);
		return 0;
	}
	if (r == -ERANGE) {
		*why = "stored chunk length differs from catalog";
		return -EBADMSG;
	}
	/* -EBADMSG: the store found its copy corrupt and forgot it. */
	if (r != -ENOENT && r != -EBADMSG) {
		*why = "chunk store read failed";
		return r;
	}
	if (!rc->fetch) {
		*why = "chunk not stored, and no fetcher";
		return -ENOENT;
	}
	if (rc->counts)
		__atomic_add_fetch(&rc->counts->chunk_misses, 1,
				   __ATOMIC_RELAXED);
	/* A flight that ended since the stamp may have stored the chunk
	 * after our miss: only then does the join look in the store again,
	 * so one chunk is never fetched twice. */
	r = hyd_fetch_submit_after(rc->fetch, &s->c.id, s->c.len,
				   HYD_PRIO_DEMAND, deadline, 0, stamp, &s->fl);
	if (r == 2 && slot_from_store(rc, s, rv) == 0)
		return 0;
	/* Stored, but found corrupt when read just now: fetch it. */
	if (r == 2)
		r = hyd_fetch_submit(rc->fetch, &s->c.id, s->c.len,
				     HYD_PRIO_DEMAND, deadline, &s->fl);
	if (r < 0) {
		*why = "cannot submit fetch";
		return r;
	}
	return 0;
}

/* Phase 2 for one chunk with a flight: wait; the segment then points at
 * the flight's bytes and holds its reference. */
static int slot_finish(const struct hyd_read_ctx *rc, struct read_slot *s,
		       struct hyd_read_iov *rv, uint64_t deadline,
		       const char **why)
{
	int r;

	/* The fetcher ends a flight by its deadline, and its verdict (the
	 * better error) is worth a little wait past ours; but a flight that
	 * someone joined with a later deadline (backfill: none) goes on past
	 * ours, and this read gives up at its own --timeout, as promised. */
	r = hyd_fetch_wait_demand(rc->fetch, &s->fl, deadline);
	if (r == -ETIMEDOUT && hyd_fetch_deadline(rc->fetch, s->fl) <= deadline)
		r = hyd_fetch_wait(rc->fetch, s->fl,
				   deadline + HYD_READ_WAIT_SLACK_NS);
	if (r < 0) {
		*why = "fetch failed";
		return r;
	}
	/* Two manifest rows naming one id with different lengths: the
	 * flight decoded to the first; this row cannot be served. */
	if (s->fl->raw_len != s->c.len) {
		*why = "chunk length differs between manifest rows";
		return -EBADMSG;
	}
	if (rc->cache)
		hyd_read_cache_put(rc->cache, &s->c.id, s->fl->raw,
				   s->fl->raw_len);
	seg_set(rv, s, s->fl->raw, HOLD_FLIGHT, s->fl);
	s->fl = NULL;
	return 0;
}

/* Index of the window row holding byte off, or win_n. Under of->mu. */
static size_t window_find(const struct hyd_read_open *of, uint64_t off)
{
	size_t lo = 0, hi = of->win_n, mid;

	if (!of->win_n || off < of->win[0].off)
		return of->win_n;
	/* Rows are contiguous and sorted: the last one starting <= off. */
	while (hi - lo > 1) {
		mid = lo + (hi - lo) / 2;
		if (of->win[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return off - of->win[lo].off < of->win[lo].len ? lo : of->win_n;
}

/* Manifest rows overlapping [cur, end), at most cap, into cs: from the
 * open file's window (refilled from the catalog when it does not hold
 * cur), or straight from the catalog when there is no open file. */
static int rows_once(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
		     uint64_t ino, uint64_t cur, uint64_t end,
		     struct cat_chunk *cs, size_t cap, size_t *ret_n)
{
	cat_reader *cat = of && of->gen ? of->gen->cat : rc->cat;
	size_t i, n = 0;
	int r = 0;

	if (!of)
		return cat_chunks_range(cat, ino, cur, end - cur, cs, cap,
					ret_n);
	pthread_mutex_lock(&of->mu);
	i = window_find(of, cur);
	if (i == of->win_n) {
		if (!of->win)
			of->win = malloc(HYD_READ_WINDOW * sizeof(*of->win));
		if (!of->win) {
			r = -ENOMEM;
			goto out;
		}
		/* As many rows from cur on as the window holds (the catalog
		 * stops at HYD_READ_WINDOW rows or the end of the file). */
		r = cat_chunks_range(cat, ino, cur, of->size - cur, of->win,
				     HYD_READ_WINDOW, &of->win_n);
		if (r < 0) {
			of->win_n = 0;
			goto out;
		}
		i = window_find(of, cur);
	}
	for (; i < of->win_n && n < cap && of->win[i].off < end; i++)
		cs[n++] = of->win[i];
out:
	pthread_mutex_unlock(&of->mu);
	*ret_n = n;
	return r;
}

/* rows_once, and for a pending file whose manifest is not local yet
 * (-EAGAIN), that manifest fetched by deadline and the rows asked for
 * again. The fetch runs without of->mu: other readers of the file wait in
 * the fetcher's single flight, each with its own deadline. *ret_why says
 * what failed. */
static int manifest_rows(const struct hyd_read_ctx *rc,
			 struct hyd_read_open *of, uint64_t ino, uint64_t cur,
			 uint64_t end, struct cat_chunk *cs, size_t cap,
			 size_t *ret_n, uint64_t deadline, const char **ret_why)
{
	cat_reader *cat = of && of->gen ? of->gen->cat : rc->cat;
	hyd_manifest *man = of && of->gen ? of->gen->manifest : rc->manifest;
	int r;

	*ret_why = "bad chunk manifest";
	r = rows_once(rc, of, ino, cur, end, cs, cap, ret_n);
	if (r == -EAGAIN && man) {
		/* Its neighbours' come next in the prefetch; this one's
		 * alone now, as the first byte needs it. */
		hyd_manifest_want(man, ino);
		r = hyd_manifest_file(man, cat, ino, deadline, NULL);
		if (r < 0) {
			*ret_why =
			    r == -EAGAIN   ? "manifest not made by the source "
					     "before the deadline"
			    : r == -ESTALE ? "generation superseded before its "
					     "manifest came"
			    : r == -EBADMSG
				? "manifest from the server fails its "
				  "checks"
				: "cannot fetch the manifest";
			return r;
		}
		r = rows_once(rc, of, ino, cur, end, cs, cap, ret_n);
	}
	if (r == -EAGAIN)
		*ret_why = man ? "manifest still not local after its fetch"
			       : "manifest not local, and no manifest fetcher";
	else if (r == -ESTALE)
		*ret_why = "the source changed before its manifest was made: "
			   "no manifest in this generation";
	return r;
}

static int read_range(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
		      uint64_t ino, uint64_t file_size, uint64_t off,
		      size_t len, struct hyd_read_iov *rv)
{
	struct cat_chunk *cs = NULL;
	struct read_slot *slots = NULL;
	const char *why = "";
	const chunk_id *bad = NULL;
	uint64_t end, cur, deadline;
	size_t n = 0, i, used = 0;
	int r = 0;

	memset(rv, 0, sizeof(*rv));
	if (off >= file_size || len == 0)
		return 0;
	end = off + (len < file_size - off ? len : file_size - off);
	cs = malloc(HYD_READ_BATCH * sizeof(*cs));
	slots = calloc(HYD_READ_BATCH, sizeof(*slots));
	if (!cs || !slots) {
		r = -ENOMEM;
		why = "out of memory";
		goto out;
	}
	deadline = base_now_ns() + rc->timeout_ns;
	for (cur = off; cur < end;) {
		r = manifest_rows(rc, of, ino, cur, end, cs, HYD_READ_BATCH, &n,
				  deadline, &why);
		if (r < 0)
			goto out;
		r = n ? plan_batch(cs, n, cur, end, rv->n, slots) : 0;
		if (r <= 0) {
			why = "manifest does not cover the file";
			r = -EBADMSG;
			goto out;
		}
		used = (size_t)r;
		r = iov_grow(rv, used);
		if (r < 0) {
			why = "out of memory";
			used = 0;
			goto out;
		}
		/* Submit everything missing before waiting for anything. */
		for (i = 0; i < used; i++) {
			r = slot_start(rc, &slots[i], rv, deadline, &why);
			if (r < 0) {
				bad = &slots[i].c.id;
				goto out;
			}
		}
		for (i = 0; i < used; i++) {
			if (!slots[i].fl)
				continue;
			r = slot_finish(rc, &slots[i], rv, deadline, &why);
			if (r < 0) {
				bad = &slots[i].c.id;
				goto out;
			}
		}
		cur = slots[used - 1].c.off + slots[used - 1].c.len;
		used = 0;
	}
	rv->len = (size_t)(end - off);
out:
	/* Flights of a failed batch that never reached a segment. */
	for (i = 0; i < used; i++)
		if (slots[i].fl)
			hyd_fetch_release(rc->fetch, slots[i].fl);
	if (r < 0) {
		log_fail(ino, off, len, bad, r, why);
		r = r == -ENOMEM ? -ENOMEM : -EIO;
		hyd_read_iov_release(rc, rv);
	}
	free(slots);
	free(cs);
	return r;
}

int hyd_read_file(const struct hyd_read_ctx *rc, uint64_t ino,
		  uint64_t file_size, uint64_t off, size_t len, uint8_t *out,
		  size_t *ret_len)
{
	struct hyd_read_iov rv;
	size_t i, at = 0;
	int r;

	*ret_len = 0;
	r = read_range(rc, NULL, ino, file_size, off, len, &rv);
	if (r < 0)
		return r;
	for (i = 0; i < rv.n; i++) {
		memcpy(out + at, rv.iov[i].iov_base, rv.iov[i].iov_len);
		at += rv.iov[i].iov_len;
	}
	*ret_len = rv.len;
	hyd_read_iov_release(rc, &rv);
	return 0;
}

int hyd_read_open_iov(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
		      uint64_t off, size_t len, struct hyd_read_iov *rv)
{
	return read_range(rc, of, of->ino, of->size, off, len, rv);
}

int hyd_read_open_new(struct hyd_gen *gen, uint64_t ino, uint64_t size,
		      struct hyd_read_open **ret)
{
	struct hyd_read_open *of;

	*ret = NULL;
	of = calloc(1, sizeof(*of));
	if (!of)
		return -ENOMEM;
	of->ino = ino;
	of->size = size;
	of->refs = 1;
	of->gen = gen;
	if (gen)
		hyd_gen_ref(gen);
	hyd_stream_init(&of->st);
	of->landed_fd = -1;
	pthread_mutex_init(&of->mu, NULL);
	*ret = of;
	return 0;
}

void hyd_read_open_ref(struct hyd_read_open *of)
{
	__atomic_add_fetch(&of->refs, 1, __ATOMIC_RELAXED);
}

void hyd_read_open_unref(struct hyd_read_open *of)
{
	if (!of || __atomic_sub_fetch(&of->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	pthread_mutex_destroy(&of->mu);
	if (of->landed_fd >= 0)
		close(of->landed_fd);
	free(of->win);
	hyd_gen_unref(of->gen);
	free(of);
}

/* The window's cap now: twice what the link holds in flight, as the
 * fetcher measures it, within a quarter of the cache's free space. */
static uint64_t ahead_cap(const struct hyd_read_ctx *rc)
{
	uint64_t rate = 0, rtt = 0, room = UINT64_MAX;
	struct statvfs sv;

	if (rc->fetch)
		hyd_fetch_link(rc->fetch, &rate, &rtt);
	if (rc->store && statvfs(hyd_store_dir(rc->store), &sv) == 0)
		room = (uint64_t)sv.f_bavail * sv.f_frsize;
	return hyd_stream_cap(rate, rtt, room);
}

/* One chunk just ahead of a stream: decoded into the cache when stored,
 * else asked for at readahead priority. The store is asked once either
 * way (the cache's load is that look; with no cache slot free,
 * hyd_store_has is). 0 to go on, -errno to end the run. */
static int ahead_one(const struct hyd_read_ctx *rc, const struct cat_chunk *c,
		     int decode, uint64_t *deadline)
{
	struct hyd_flight *fl;
	uint32_t stamp;
	int r;

	if (c->len == 0 || c->len > rc->max_raw)
		return -EBADMSG;
	if (chunk_id_is_hole(&c->id))
		return 0; /* nothing to get ahead of */
	stamp = rc->fetch ? hyd_fetch_stamp(rc->fetch, &c->id) : 0;
	r = decode && rc->cache
		? hyd_read_cache_prefetch(rc->cache, &c->id, c->len,
					  load_from_store, (void *)rc)
		: -EBUSY;
	if (r == -EBUSY && rc->store) {
		r = hyd_store_has(rc->store, &c->id);
		r = r == 1 ? 0 : r == 0 ? -ENOENT : r;
	}
	/* Decoded now, cached or being loaded already, or stored. */
	if (r >= 0)
		return 0;
	/* -EBADMSG: the store found its copy corrupt and forgot it. */
	if ((r != -ENOENT && r != -EBADMSG) || !rc->fetch)
		return r;
	if (!*deadline)
		*deadline = base_now_ns() + rc->timeout_ns;
	r = hyd_fetch_submit_after(rc->fetch, &c->id, c->len,
				   HYD_PRIO_READAHEAD, *deadline, 0, stamp,
				   &fl);
	if (r < 0)
		return r;
	/* Nobody waits for it: the flight stores it, the read decodes it. */
	hyd_fetch_release(rc->fetch, fl);
	return 0;
}

/* Every chunk overlapping [a, b) ahead of the stream (decode: into the
 * cache too). The rows come from the catalog directly, not the open
 * file's window, which the reader's own reads keep where they are; a
 * manifest not local yet is the next read's to fetch. */
static void ahead_range(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
			uint64_t a, uint64_t b, int decode, uint64_t *deadline)
{
	cat_reader *cat = of->gen ? of->gen->cat : rc->cat;
	struct cat_chunk cs[HYD_AHEAD_ROWS];
	size_t n = 0, i;

	while (a < b) {
		if (decode) {
			const char *why;

			/* The read before this one made the manifest local;
			 * should it not be, the fetch gets the read's own
			 * timeout. */
			if (!*deadline)
				*deadline = base_now_ns() + rc->timeout_ns;
			if (manifest_rows(rc, of, of->ino, a, b, cs,
					  HYD_AHEAD_ROWS, &n, *deadline,
					  &why) < 0)
				return;
		} else if (cat_chunks_range(cat, of->ino, a, b - a, cs,
					    HYD_AHEAD_ROWS, &n) < 0) {
			return;
		}
		if (!n)
			return;
		/* The first row may start before a: decoded already, or
		 * wanted by a read in progress; both are skipped cheaply. */
		for (i = 0; i < n; i++)
			if (ahead_one(rc, &cs[i], decode, deadline) < 0)
				return;
		a = cs[n - 1].off + cs[n - 1].len;
	}
}

void hyd_read_ahead(const struct hyd_read_ctx *rc, struct hyd_read_open *of,
		    uint64_t off, size_t len)
{
	struct hyd_stream_ahead h;
	uint64_t deadline = 0, cap;
	int go;

	if (!len || off >= of->size)
		return;
	cap = ahead_cap(rc);
	/* This is the one stream detector of the hydrator (hyd_stream.c). */
	pthread_mutex_lock(&of->mu);
	go = hyd_stream_note(&of->st, off, off + len, of->size, cap, &h);
	pthread_mutex_unlock(&of->mu);
	if (!go)
		return;
	/* What the next reads copy first, then the rest of the window: the
	 * chunks the store lacks go on the wire, in batches. */
	if (h.da < h.db)
		ahead_range(rc, of, h.da, h.db, 1, &deadline);
	if (h.a < h.b) {
		if (h.da < h.db && h.a < h.db)
			h.a = h.db; /* done just above */
		if (h.a < h.b)
			ahead_range(rc, of, h.a, h.b, 0, &deadline);
	}
}
