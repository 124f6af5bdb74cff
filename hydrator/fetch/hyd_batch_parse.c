/*
 * hydrator/fetch/hyd_batch_parse.c — streaming parser of a POST BASE/chunks
 * answer: (id, frame) pairs in request order, in pieces of any size.
 *
 * Two phases per entry: the fixed 48-byte head (id + frame header) is
 * gathered in a small array, checked, and only then is a buffer of exactly
 * the frame's length allocated for the payload. A hostile server can thus
 * make us allocate at most one frame_bound(raw_len) at a time, and only
 * for an id we asked for, with the length the catalog gave.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/fetch/hyd_batch_parse_priv.h"

#define HEAD_LEN (CHUNK_ID_LEN + FRAME_HDR_LEN)

void hyd_batch_parser_init(struct hyd_batch_parser *p, const chunk_id *ids,
			   const uint32_t *raw_lens, size_t n, uint32_t max_raw)
{
	memset(p, 0, sizeof(*p));
	p->ids = ids;
	p->raw_lens = raw_lens;
	p->n = n;
	p->max_raw = max_raw;
	if (n > HYD_BATCH_MAX_IDS)
		p->err = -EINVAL;
}

void hyd_batch_parser_init_pack(struct hyd_batch_parser *p, const chunk_id *ids,
				const uint32_t *raw_lens, size_t n,
				uint32_t max_raw)
{
	memset(p, 0, sizeof(*p));
	p->ids = ids;
	p->raw_lens = raw_lens;
	p->n = n;
	p->max_raw = max_raw;
	p->subseq = 1;
	if (n > CAT_PACK_MAX_IDS)
		p->err = -EINVAL;
}

void hyd_batch_parser_fini(struct hyd_batch_parser *p)
{
	free(p->frame);
	p->frame = NULL;
	p->frame_len = p->frame_have = 0;
}

/* The head is complete: check it and set up the frame buffer. */
static int head_done(struct hyd_batch_parser *p)
{
	struct frame_info fi;
	uint32_t max = p->max_raw;

	if (memcmp(p->head, p->ids[p->next].b, CHUNK_ID_LEN)) {
		size_t k = p->next + 1;

		/* A pack may leave entries out, never reorder them. */
		while (p->subseq && k < p->n &&
		       memcmp(p->head, p->ids[k].b, CHUNK_ID_LEN))
			k++;
		if (!p->subseq || k == p->n)
			return -EBADMSG;
		p->next = k;
	}
	/* The catalog's length is a tighter bound than max_raw. */
	if (p->raw_lens && p->raw_lens[p->next] < max)
		max = p->raw_lens[p->next];
	if (frame_header_parse(p->head + CHUNK_ID_LEN, FRAME_HDR_LEN, max,
			       &fi) < 0)
		return -EBADMSG;
	if (p->raw_lens && fi.raw_len != p->raw_lens[p->next])
		return -EBADMSG;
	p->frame = malloc(fi.frame_len);
	if (!p->frame)
		return -ENOMEM;
	memcpy(p->frame, p->head + CHUNK_ID_LEN, FRAME_HDR_LEN);
	p->frame_len = fi.frame_len;
	p->frame_have = FRAME_HDR_LEN;
	return 0;
}

int hyd_batch_parser_feed(struct hyd_batch_parser *p, const void *buf,
			  size_t len, hyd_batch_frame_fn cb, void *ctx)
{
	const uint8_t *in = buf;
	uint8_t *frame;
	size_t take, idx;
	int r;

	while (len > 0 && p->err == 0) {
		if (p->next >= p->n) {
			p->err = -EBADMSG; /* bytes after the last frame */
			break;
		}
		if (!p->frame) {
			take = HEAD_LEN - p->head_have;
			if (take > len)
				take = len;
			memcpy(p->head + p->head_have, in, take);
			p->head_have += take;
			in += take;
			len -= take;
			if (p->head_have < HEAD_LEN)
				break;
			r = head_done(p);
			if (r < 0) {
				p->err = r;
				break;
			}
		} else {
			take = p->frame_len - p->frame_have;
			if (take > len)
				take = len;
			memcpy(p->frame + p->frame_have, in, take);
			p->frame_have += take;
			in += take;
			len -= take;
		}
		if (p->frame && p->frame_have == p->frame_len) {
			frame = p->frame;
			idx = p->next++;
			p->delivered++;
			p->frame = NULL;
			p->head_have = 0;
			/* The frame is the callback's from here, even when
			 * it refuses it. */
			r = cb(ctx, idx, frame, p->frame_len);
			p->frame_len = p->frame_have = 0;
			if (r < 0)
				p->err = r;
		}
	}
	return p->err;
}

int hyd_batch_parser_finish(const struct hyd_batch_parser *p)
{
	if (p->err)
		return p->err;
	if (p->subseq)
		return p->head_have == 0 && !p->frame ? 0 : -EPIPE;
	return p->next == p->n ? 0 : -EPIPE;
}
