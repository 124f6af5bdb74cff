/*
 * hydrator/fetch/hyd_batch_parse_priv.h — the streaming parser of a batch
 * answer.
 *
 * POST BASE/chunks with n ids (docs/protocol.md) answers 200 and then, for
 * each id in request order, the 32 raw id bytes followed by that chunk's
 * frame (catalog.h frame format). The body arrives in pieces of any size;
 * this parser takes them as they come and hands out each whole frame as
 * soon as its last byte is in. It knows nothing of curl or threads, so it
 * is unit-tested at every split point and fuzzed (tests/fuzz/fuzz_batch.c).
 *
 * Everything in the body is untrusted: the id must be the next one
 * expected, the header must pass frame_header_parse with max_raw, and its
 * raw_len must be the catalog's length of that chunk. Memory is bounded by
 * one frame (<= frame_bound(max_raw)) at a time.
 */
#ifndef FERRY_HYD_BATCH_PARSE_PRIV_H
#define FERRY_HYD_BATCH_PARSE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"

#define HYD_BATCH_MAX_IDS 1024u /* the protocol's bound per request */

/* Called once per whole frame, in order. idx is the frame's position in
 * the request (0-based). frame is malloc()ed and now belongs to the
 * callback, whatever it returns. A negative return stops the parser and is
 * returned by hyd_batch_parser_feed. */
typedef int (*hyd_batch_frame_fn)(void *ctx, size_t idx, uint8_t *frame,
				  size_t frame_len);

struct hyd_batch_parser {
	const chunk_id *ids;	  /* expected, in request order (borrowed) */
	const uint32_t *raw_lens; /* catalog raw length of each (borrowed) */
	size_t n;		  /* how many ids */
	size_t next;		  /* ids passed (delivered or skipped) */
	size_t delivered;	  /* frames delivered */
	int subseq;		  /* a pack: entries may be left out */
	uint32_t max_raw;
	int err; /* 0, or the -errno that stopped parsing */
	uint8_t head[CHUNK_ID_LEN + FRAME_HDR_LEN];
	size_t head_have;
	uint8_t *frame; /* the frame being filled (header + payload) */
	size_t frame_len, frame_have;
};

/* Start parsing an answer to a request for ids[0..n) whose raw lengths
 * are raw_lens[0..n) (both borrowed until fini). n <= HYD_BATCH_MAX_IDS. */
void hyd_batch_parser_init(struct hyd_batch_parser *p, const chunk_id *ids,
			   const uint32_t *raw_lens, size_t n,
			   uint32_t max_raw);

/* The same for a pack's answer (GET BASE/pack/...): ids[0..n) is the
 * pack's whole list as this side works it out, n <= CAT_PACK_MAX_IDS, and
 * the answer may leave entries out (a chunk the server sends in another
 * pack): each entry's id must be one of the list after the last one
 * delivered, with that one's length. */
void hyd_batch_parser_init_pack(struct hyd_batch_parser *p, const chunk_id *ids,
				const uint32_t *raw_lens, size_t n,
				uint32_t max_raw);

/* Free the partial frame, if any. Idempotent. */
void hyd_batch_parser_fini(struct hyd_batch_parser *p);

/* Consume buf[0..len), calling cb for each frame completed by it.
 * Returns 0, or -EBADMSG (an id that is not the next expected one, a bad
 * frame header, a raw_len other than the catalog's, bytes after the last
 * frame), -ENOMEM, or cb's negative return. After an error every later
 * call returns the same error and delivers nothing. */
int hyd_batch_parser_feed(struct hyd_batch_parser *p, const void *buf,
			  size_t len, hyd_batch_frame_fn cb, void *ctx);

/* At the end of the body: 0 when all n frames were delivered (a pack:
 * when no entry was left half read), the stored error, or -EPIPE for a
 * body that stopped early (truncated). */
int hyd_batch_parser_finish(const struct hyd_batch_parser *p);

/* Frames delivered so far (of a batch: ids[0..delivered) are done). */
static inline size_t
hyd_batch_parser_delivered(const struct hyd_batch_parser *p)
{
	return p->delivered;
}

#endif
