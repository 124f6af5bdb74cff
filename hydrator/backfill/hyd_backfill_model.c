/*
 * hydrator/backfill/hyd_backfill_model.c — a model file a job opened:
 * its header at once, then its tensors in the order of their offsets.
 *
 * When a job opens a regular file of HYD_BF_MODEL_MIN bytes or more, the
 * scheduler reads the file's first bytes (from the store, fetching the
 * chunks that hold them at once: the loader is reading them too, so this
 * joins its read) and asks hyd_model_parse whether they are a
 * safetensors or GGUF header, reading more while the parser says the
 * header goes on (up to HYD_MODEL_HEAD_MAX). A model file's tensors are
 * then asked for range by range in offset order, at HYD_PRIO_NEAR with the
 * doubled window of what follows a job: a loader that walks the tensors
 * (by mmap or by reads) finds them arriving ahead of it, at the full
 * window instead of a window grown from its own reads. Any other file is
 * left to the read path's readahead and to the directory's turn in the
 * backfill order. Runs with --no-backfill too (the files a job opens are
 * the only ones fetched ahead then).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/backfill/hyd_backfill_priv.h"

#define HEAD_FIRST (64u << 10)
#define STEP_CHUNKS 256u
#define WAIT_NS (30ull * 1000000000ull)

/* Bytes [0, want) of ino (size bytes) into buf, each chunk fetched if
 * missing and waited for; scratch holds bf->cfg.max_raw bytes (a stored
 * chunk is decoded there). 0, 1 (not available: a manifest not local, a
 * chunk that failed), -ECANCELED. */
static int read_head(hyd_backfill *bf, uint64_t ino, uint64_t want,
		     uint8_t *buf, uint8_t *scratch)
{
	struct cat_chunk cs[STEP_CHUNKS];
	struct hyd_flight *fl;
	uint64_t off = 0;
	size_t n, i, got, cut;
	int r, fetched = 0;

	while (off < want) {
		r = cat_chunks_range(bf->cfg.cat, ino, off, want - off, cs,
				     STEP_CHUNKS, &n);
		if (r == -EAGAIN && !fetched) {
			fetched = 1;
			r = hyd_bf__file_manifest(bf, ino);
			if (r == 0)
				continue;
			return r < 0 ? r : 1;
		}
		if (r < 0 || n == 0)
			return 1;
		for (i = 0; i < n; i++) {
			uint64_t s = cs[i].off, e = s + cs[i].len;

			if (hyd_bf__stopped(bf))
				return -ECANCELED;
			if (chunk_id_is_hole(&cs[i].id)) {
				memset(buf + s, 0,
				       (size_t)((e < want ? e : want) - s));
				continue;
			}
			cut = (size_t)((e < want ? e : want) - s);
			if (hyd_store_has(bf->cfg.store, &cs[i].id) != 1) {
				/* Fetched now (joining the loader's own read
				 * of it, most likely): its verified bytes. */
				r = hyd_fetch_submit(
				    bf->cfg.fetch, &cs[i].id, cs[i].len,
				    HYD_PRIO_READAHEAD, base_now_ns() + WAIT_NS,
				    &fl);
				if (r < 0)
					return 1;
				r = hyd_fetch_wait(bf->cfg.fetch, fl,
						   base_now_ns() + WAIT_NS);
				if (r == 0 && fl->raw &&
				    fl->raw_len == cs[i].len)
					memcpy(buf + s, fl->raw, cut);
				else if (r == 0)
					r = -EIO;
				hyd_fetch_release(bf->cfg.fetch, fl);
				if (r < 0)
					return 1;
				continue;
			}
			r = hyd_store_get(bf->cfg.store, &cs[i].id, scratch,
					  bf->cfg.max_raw, &got);
			if (r < 0 || got != cs[i].len)
				return 1;
			memcpy(buf + s, scratch, cut);
		}
		off = cs[n - 1].off + cs[n - 1].len;
	}
	return 0;
}

/* Was ino looked at lately? Then not again (a loader opens a shard more
 * than once); else it is now. */
static int seen(hyd_backfill *bf, uint64_t ino)
{
	unsigned i;

	for (i = 0; i < MODEL_SEEN; i++)
		if (bf->model_seen[i] == ino)
			return 1;
	bf->model_seen[bf->model_seen_at++ % MODEL_SEEN] = ino;
	return 0;
}

/* The model header of ino (size bytes) into *m: 1, or 0 when it has
 * none (or it could not be read), -ECANCELED. */
static int model_of(hyd_backfill *bf, uint64_t ino, uint64_t size,
		    struct hyd_model *m)
{
	uint64_t want = HEAD_FIRST;
	uint8_t *buf = NULL, *nb, *scratch = malloc(bf->cfg.max_raw);
	int r;

	if (!scratch)
		return 0;
	for (;;) {
		if (want > size)
			want = size;
		nb = realloc(buf, (size_t)want);
		if (!nb) {
			r = 1;
			break;
		}
		buf = nb;
		r = read_head(bf, ino, want, buf, scratch);
		if (r != 0)
			break;
		r = hyd_model_parse(buf, (size_t)want, size, m);
		if (r != -EAGAIN || m->need <= want)
			break;
		want = m->need;
	}
	free(buf);
	free(scratch);
	if (r == -ECANCELED)
		return r;
	if (r == -EBADMSG)
		base_debug("model prefetch: a header that does not parse "
			   "ino=%" PRIu64,
			   ino);
	return r == 0 ? 1 : 0;
}

int hyd_bf__model(hyd_backfill *bf, uint64_t ino)
{
	struct hyd_model m;
	struct cat_inode in;
	uint64_t asked = 0, size, wait_seg;
	int r, in_opened = bf->in_opened, failed_set;
	size_t i;

	if (cat_getattr(bf->cfg.cat, ino, &in) < 0 || in.kind != CAT_REG ||
	    in.size < HYD_BF_MODEL_MIN || seen(bf, ino))
		return 0;
	size = in.size;
	/* The file a job opened gets its manifest whatever the pass found
	 * of its segment (the request moves it to the front of the source's
	 * hashing); the pass's own view is kept. */
	wait_seg = bf->waiting_seg;
	failed_set = bf->seg_failed_set;
	bf->waiting_seg = UINT64_MAX;
	bf->seg_failed_set = 0;
	r = model_of(bf, ino, size, &m);
	bf->waiting_seg = wait_seg;
	bf->seg_failed_set = failed_set;
	if (r < 0)
		return r;
	if (r == 0)
		return 0;
	bf->in_opened = 1; /* HYD_PRIO_NEAR, the doubled window */
	r = 0;
	for (i = 0; i < m.n && r == 0; i++) {
		r = hyd_bf__ask_range(bf, ino, m.ranges[i].off,
				      m.ranges[i].len);
		asked += m.ranges[i].len;
	}
	bf->in_opened = in_opened;
	base_info("model prefetch kind=%s ino=%" PRIu64 " header=%" PRIu64
		  " tensors=%zu bytes=%" PRIu64,
		  m.kind == HYD_MODEL_GGUF ? "gguf" : "safetensors", ino,
		  m.header, m.n, asked);
	hyd_model_free(&m);
	return r < 0 ? r : 1;
}
