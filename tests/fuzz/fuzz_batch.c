/*
 * tests/fuzz/fuzz_batch.c — fuzz the batch answer parser (hydrator/
 * hyd_batch_parse.c) with arbitrary bodies.
 *
 * Input layout (so a fuzzer can reach past the id check):
 *   byte 0          bits 0-2: n - 1, how many ids were asked for (1..8);
 *                   bit 7: a pack's answer (hyd_batch_parser_init_pack:
 *                   entries may be left out, never reordered)
 *   byte 1          piece size - 1 for the split feed (1..256)
 *   n * 32 bytes    the ids asked for, in order
 *   n * 4 bytes     their catalog raw lengths (little-endian)
 *   rest            the body as the server sent it
 * Properties (a violation aborts):
 *   - every delivered frame is exactly the bytes after its id in the
 *     body, in order, with a header that parses with the catalog's
 *     length, and at most n are delivered;
 *   - the body fed whole and fed in pieces give the same frames and the
 *     same verdict (the parser is split-invariant);
 *   - finish is 0 exactly when all n frames arrived without an error (a
 *     pack: when no error came and no entry was left half read);
 *   - a pack's frames are delivered at rising places of the list;
 *   - nothing is delivered after an error.
 * Memory is checked by ASan: every frame is a heap block of its length.
 * Verdict (fuzz_verdict.h): accepted when finish says all n frames came
 * (0); an input too short to hold its ids and lengths is refused.
 *
 * Corpus (tests/fuzz/corpus/batch): written once by a python snippet from
 * the valid frames of corpus/frame (ok_*), ids being SHA-256 of made-up
 * bytes: whole answers of 1..5 entries (ok_*), and the same with one
 * defect (bad_*: wrong id, ids swapped, truncated mid-header and
 * mid-payload, trailing byte, raw_len differing from the catalog's, junk
 * body, n larger than the body). Packs: ok_pack_skip (the middle entry
 * of ok_three left out), ok_pack_none (no entry at all),
 * bad_pack_swapped (two entries in the wrong order), bad_pack_cut
 * (ok_pack_skip cut inside its last entry).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_batch_parse_priv.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXN 8u

struct rec {
	size_t n;
	int pack;
	size_t last;	  /* a pack: the place of the last frame + 1 */
	size_t off[MAXN]; /* where each frame started in the body */
	size_t len[MAXN];
	size_t at[MAXN]; /* the list place of each delivered frame */
	const uint8_t *body;
	size_t fed; /* body bytes fed before the current call */
	const uint8_t *piece;
	size_t piece_len;
	const uint32_t *lens;
	int after_error;
};

static int on_frame(void *ctx, size_t idx, uint8_t *frame, size_t len)
{
	struct rec *r = ctx;
	struct frame_info fi;

	if (r->pack ? idx < r->last : idx != r->n)
		abort();
	if (idx >= MAXN || r->after_error)
		abort();
	r->last = idx + 1;
	r->at[r->n] = idx;
	if (len < FRAME_HDR_LEN ||
	    frame_header_parse(frame, len, r->lens[idx], &fi) != 0 ||
	    fi.frame_len != len || fi.raw_len != r->lens[idx])
		abort();
	r->len[idx] = len;
	r->n++;
	free(frame);
	return 0;
}

static int run(const chunk_id *ids, const uint32_t *lens, size_t n,
	       const uint8_t *body, size_t body_len, size_t piece, int pack,
	       struct rec *r)
{
	struct hyd_batch_parser p;
	size_t at = 0, k;
	int e = 0, fin;

	memset(r, 0, sizeof(*r));
	r->lens = lens;
	r->body = body;
	r->pack = pack;
	if (pack)
		hyd_batch_parser_init_pack(&p, ids, lens, n, CHUNK_MAX_DEFAULT);
	else
		hyd_batch_parser_init(&p, ids, lens, n, CHUNK_MAX_DEFAULT);
	while (at < body_len) {
		k = body_len - at < piece ? body_len - at : piece;
		e = hyd_batch_parser_feed(&p, body + at, k, on_frame, r);
		if (e) {
			if (e != -EBADMSG && e != -ENOMEM)
				abort();
			r->after_error = 1;
			/* Sticky, and silent from now on. */
			if (hyd_batch_parser_feed(&p, body, body_len, on_frame,
						  r) != e)
				abort();
			break;
		}
		at += k;
	}
	fin = hyd_batch_parser_finish(&p);
	if (hyd_batch_parser_delivered(&p) != r->n || r->n > n)
		abort();
	if (!pack && (fin == 0) != (!e && r->n == n))
		abort();
	if (!pack && !e && r->n < n && fin != -EPIPE)
		abort();
	if (pack && e && fin != e)
		abort();
	hyd_batch_parser_fini(&p);
	return fin;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	chunk_id ids[MAXN];
	uint32_t lens[MAXN];
	struct rec whole, split;
	const uint8_t *body;
	size_t n, piece, body_len, i, pos;
	int f1, f2, pack;

	if (size < 2) {
		fuzz_report(0);
		return 0;
	}
	n = (size_t)(data[0] % MAXN) + 1;
	piece = (size_t)data[1] + 1;
	if (size < 2 + n * (CHUNK_ID_LEN + 4)) {
		fuzz_report(0);
		return 0;
	}
	for (i = 0; i < n; i++)
		memcpy(ids[i].b, data + 2 + i * CHUNK_ID_LEN, CHUNK_ID_LEN);
	for (i = 0; i < n; i++) {
		const uint8_t *q = data + 2 + n * CHUNK_ID_LEN + i * 4;

		lens[i] = (uint32_t)q[0] | (uint32_t)q[1] << 8 |
			  (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
	}
	body = data + 2 + n * (CHUNK_ID_LEN + 4);
	body_len = size - 2 - n * (CHUNK_ID_LEN + 4);
	pack = (data[0] & 0x80) != 0;
	f1 = run(ids, lens, n, body, body_len, body_len ? body_len : 1, pack,
		 &whole);
	f2 = run(ids, lens, n, body, body_len, piece, pack, &split);
	if (f1 != f2 || whole.n != split.n)
		abort();
	fuzz_report(f1 == 0);
	/* Delivered frames are the body's bytes after each id, back to
	 * back: entry i starts where entry i-1 ended. */
	for (pos = 0, i = 0; i < whole.n; i++) {
		if (whole.at[i] != split.at[i] ||
		    pos + CHUNK_ID_LEN > body_len ||
		    memcmp(body + pos, ids[whole.at[i]].b, CHUNK_ID_LEN))
			abort();
		pos += CHUNK_ID_LEN + whole.len[i];
		if (pos > body_len || whole.len[i] != split.len[i])
			abort();
	}
	return 0;
}
