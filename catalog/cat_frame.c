/*
 * catalog/cat_frame.c — chunk frames: how a chunk travels and rests.
 *
 * A frame is a 16-byte little-endian header and a payload that is the raw
 * chunk, an LZ4 block or a zstd frame (layout in catalog.h). Encoding picks
 * a codec by policy and falls back to raw whenever compression does not pay.
 * Decoding treats every byte as hostile: the header is checked field by
 * field, raw_len is capped by the caller's max chunk size before any buffer
 * is touched, and a payload must decode to exactly raw_len bytes or the
 * frame is -EBADMSG. No partial result is ever reported as data.
 *
 * Because a codec that does not shrink is dropped for raw, stored_len never
 * exceeds raw_len in a frame we write. frame_bound() is therefore the tight
 * FRAME_HDR_LEN + raw_len, and frame_header_parse rejects any stored_len
 * above raw_len: buffers sized for a raw chunk hold every valid frame.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <lz4.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "catalog/catalog.h"

struct frame_coder {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
};

frame_coder *frame_coder_new(void)
{
	frame_coder *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	if (!c->cctx || !c->dctx) {
		frame_coder_free(c);
		return NULL;
	}
	return c;
}

void frame_coder_free(frame_coder *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeDCtx(c->dctx);
	free(c);
}

size_t frame_bound(size_t raw_len)
{
	if (raw_len > SIZE_MAX - FRAME_HDR_LEN)
		return SIZE_MAX;
	return FRAME_HDR_LEN + raw_len;
}

/*
 * The one place zstd result codes become -errno. Nothing is logged: the
 * caller knows which chunk it was and logs there.
 *   - allocation failure is -ENOMEM either way;
 *   - while encoding, "destination too small" is -ENOBUFS, which the
 *     encoder reads as "does not shrink enough" (it caps the output), and
 *     anything else is a library failure, -EIO;
 *   - while decoding, every other error means the payload is bad: -EBADMSG.
 */
static int zstd_errno(size_t code, bool decoding)
{
	switch (ZSTD_getErrorCode(code)) {
	case ZSTD_error_no_error:
		return 0;
	case ZSTD_error_memory_allocation:
		return -ENOMEM;
	case ZSTD_error_dstSize_tooSmall:
		return decoding ? -EBADMSG : -ENOBUFS;
	default:
		return decoding ? -EBADMSG : -EIO;
	}
}

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void header_write(uint8_t *out, uint8_t codec, uint32_t raw_len,
			 uint32_t stored_len)
{
	memcpy(out, FRAME_MAGIC, 4);
	out[4] = codec;
	out[5] = 0; /* flags */
	put_le16(out + 6, 0);
	put_le32(out + 8, raw_len);
	put_le32(out + 12, stored_len);
}

/*
 * Compress with zstd into dst[0..cap). cap is already the largest payload
 * worth keeping, so -ENOBUFS means "not worth it", not a failure.
 */
static int encode_zstd(frame_coder *coder, int level, const void *raw,
		       size_t raw_len, void *dst, size_t cap,
		       size_t *ret_len)
{
	ZSTD_CCtx *tmp = NULL;
	ZSTD_CCtx *cctx;
	size_t z;
	int r;

	if (coder) {
		cctx = coder->cctx;
	} else {
		tmp = ZSTD_createCCtx();
		if (!tmp)
			return -ENOMEM;
		cctx = tmp;
	}
	/* The one-shot call ignores sticky parameters and writes the content
	 * size into the zstd frame header, which the decoder checks. */
	z = ZSTD_compressCCtx(cctx, dst, cap, raw, raw_len, level);
	r = zstd_errno(z, false);
	if (r == 0)
		*ret_len = z;
	ZSTD_freeCCtx(tmp);
	return r;
}

int frame_encode(frame_coder *coder, enum frame_policy policy, int level,
		 const void *raw, size_t raw_len, void *out, size_t out_cap,
		 size_t *ret_len)
{
	uint8_t *o = out;
	uint8_t *payload;
	size_t need, cap, clen = 0;
	uint8_t codec = FRAME_RAW;
	int r = 0;

	if (!raw || !out || !ret_len || raw_len == 0 ||
	    raw_len > CHUNK_MAX_LIMIT)
		return -EINVAL;
	if (policy == FRAME_POLICY_ZSTD) {
		if (level == 0)
			level = 1;
		if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
			return -EINVAL;
	} else if (policy == FRAME_POLICY_AUTO) {
		level = 1;
	} else if (policy != FRAME_POLICY_LZ4 && policy != FRAME_POLICY_RAW) {
		return -EINVAL;
	}
	if (out_cap < frame_bound(raw_len))
		return -ENOBUFS;
	payload = o + FRAME_HDR_LEN;

	/* A compressed payload must save at least `need` bytes: 1 (it must
	 * shrink) for explicit codecs, raw_len/32 under AUTO, where a small
	 * saving is not worth a decompression on every read. Capping the
	 * codec's output at raw_len - need lets it give up early. */
	need = 1;
	if (policy == FRAME_POLICY_AUTO && raw_len / 32 > need)
		need = raw_len / 32;
	cap = raw_len > need ? raw_len - need : 0;

	if (cap > 0 && (policy == FRAME_POLICY_AUTO ||
			policy == FRAME_POLICY_ZSTD)) {
		r = encode_zstd(coder, level, raw, raw_len, payload, cap,
				&clen);
		if (r == 0)
			codec = FRAME_ZSTD;
		else if (r != -ENOBUFS)
			goto out;
	} else if (cap > 0 && policy == FRAME_POLICY_LZ4) {
		/* raw_len <= CHUNK_MAX_LIMIT, so the int casts are exact.
		 * 0 means it did not fit in cap (or failed): raw. */
		int n = LZ4_compress_default(raw, (char *)payload,
					     (int)raw_len, (int)cap);
		if (n > 0) {
			codec = FRAME_LZ4;
			clen = (size_t)n;
		}
	}
	r = 0;
	if (codec == FRAME_RAW) {
		memcpy(payload, raw, raw_len);
		clen = raw_len;
	}
	header_write(o, codec, (uint32_t)raw_len, (uint32_t)clen);
	*ret_len = FRAME_HDR_LEN + clen;
out:
	return r;
}

int frame_header_parse(const void *buf, size_t len, uint32_t max_raw,
		       struct frame_info *ret)
{
	const uint8_t *p = buf;
	uint32_t raw_len, stored_len;
	uint8_t codec;

	if (!buf || !ret || len < FRAME_HDR_LEN)
		return -EBADMSG;
	/* Whatever the caller believes, no buffer is ever sized beyond the
	 * format's hard limit from a header. */
	if (max_raw > CHUNK_MAX_LIMIT)
		max_raw = CHUNK_MAX_LIMIT;
	if (memcmp(p, FRAME_MAGIC, 4) != 0)
		return -EBADMSG;
	codec = p[4];
	if (codec != FRAME_RAW && codec != FRAME_LZ4 && codec != FRAME_ZSTD)
		return -EBADMSG;
	if (p[5] != 0 || get_le16(p + 6) != 0)
		return -EBADMSG;
	raw_len = get_le32(p + 8);
	stored_len = get_le32(p + 12);
	if (raw_len == 0 || raw_len > max_raw)
		return -EBADMSG;
	/* frame_bound(raw_len) - FRAME_HDR_LEN == raw_len; an empty payload
	 * cannot decode to raw_len >= 1 bytes under any codec. */
	if (stored_len == 0 || stored_len > raw_len)
		return -EBADMSG;
	if (codec == FRAME_RAW && stored_len != raw_len)
		return -EBADMSG;
	ret->codec = codec;
	ret->raw_len = raw_len;
	ret->stored_len = stored_len;
	ret->frame_len = FRAME_HDR_LEN + (size_t)stored_len;
	return 0;
}

static int decode_zstd(frame_coder *coder, const void *src, size_t src_len,
		       void *out, size_t raw_len)
{
	ZSTD_DCtx *tmp = NULL;
	ZSTD_DCtx *dctx;
	unsigned long long content;
	size_t z;
	int r;

	/* A zstd frame that declares its size must declare raw_len; checking
	 * first rejects a lie before any decompression work. frame_encode
	 * writes one zstd frame per payload, so a payload that starts with a
	 * shorter frame (several concatenated) is refused here too. */
	content = ZSTD_getFrameContentSize(src, src_len);
	if (content == ZSTD_CONTENTSIZE_ERROR)
		return -EBADMSG;
	if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != raw_len)
		return -EBADMSG;
	if (coder) {
		dctx = coder->dctx;
	} else {
		tmp = ZSTD_createDCtx();
		if (!tmp)
			return -ENOMEM;
		dctx = tmp;
	}
	/* Capacity is raw_len, not out_cap: a payload that wants to grow
	 * past raw_len fails inside zstd instead of writing further. */
	z = ZSTD_decompressDCtx(dctx, out, raw_len, src, src_len);
	r = zstd_errno(z, true);
	if (r == 0 && z != raw_len)
		r = -EBADMSG;
	ZSTD_freeDCtx(tmp);
	return r;
}

int frame_decode(frame_coder *coder, const void *frame, size_t frame_len,
		 uint32_t max_raw, void *out, size_t out_cap,
		 size_t *ret_raw_len)
{
	const uint8_t *payload;
	struct frame_info fi;
	int r, n;

	if (!out || !ret_raw_len)
		return -EINVAL;
	r = frame_header_parse(frame, frame_len, max_raw, &fi);
	if (r < 0)
		goto out;
	/* Exactly one frame: a short buffer is truncated, a long one carries
	 * bytes nobody accounted for. */
	if (frame_len != fi.frame_len) {
		r = -EBADMSG;
		goto out;
	}
	if (out_cap < fi.raw_len) {
		r = -ENOBUFS;
		goto out;
	}
	payload = (const uint8_t *)frame + FRAME_HDR_LEN;

	switch (fi.codec) {
	case FRAME_RAW:
		/* stored_len == raw_len was checked by the parser. */
		memcpy(out, payload, fi.raw_len);
		break;
	case FRAME_LZ4:
		/* Both lengths are <= CHUNK_MAX_LIMIT, so they fit an int.
		 * LZ4_decompress_safe never writes past raw_len and returns
		 * a negative value for malformed input. */
		n = LZ4_decompress_safe((const char *)payload, out,
					(int)fi.stored_len, (int)fi.raw_len);
		if (n < 0 || (uint32_t)n != fi.raw_len)
			r = -EBADMSG;
		break;
	case FRAME_ZSTD:
		r = decode_zstd(coder, payload, fi.stored_len, out,
				fi.raw_len);
		break;
	default:
		r = -EBADMSG; /* the parser let through an unknown codec */
		break;
	}
	if (r == 0)
		*ret_raw_len = fi.raw_len;
out:
	return r;
}
