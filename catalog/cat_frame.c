/*
 * catalog/cat_frame.c — chunk frames: how a chunk travels and rests.
 *
 * A frame is a 16-byte little-endian header and a payload that is the raw
 * chunk, an LZ4 block, a zstd frame, or a zstd frame of the chunk's bytes
 * regrouped into byte planes (layout in catalog.h). Encoding picks a codec
 * by policy and falls back to raw whenever compression does not pay.
 * Decoding treats every byte as hostile: the header is checked field by
 * field, raw_len is capped by the caller's max chunk size before any buffer
 * is touched, and a payload must decode to exactly raw_len bytes or the
 * frame is -EBADMSG. No partial result is ever reported as data.
 *
 * Because a codec that does not shrink is dropped for raw, stored_len never
 * exceeds raw_len in a frame we write. frame_bound() is therefore the tight
 * FRAME_HDR_LEN + raw_len, and frame_header_parse rejects any stored_len
 * above raw_len: buffers sized for a raw chunk hold every valid frame.
 *
 * Why byte planes (measured on the shared small dataset, docs/formats.md):
 * fp16/bf16 weights interleave a near-uniform mantissa byte with a skewed
 * sign/exponent byte, and zstd's one Huffman table per block sees their
 * mixture. Regrouped, the uniform plane goes out as a raw block and the
 * skewed one is Huffman-coded on its own: 0.867 -> 0.777 of the raw size
 * on the checkpoint chunks, at about the same CPU cost.
 */
#include <errno.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <lz4.h>
#include <zstd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

/* AUTO probe: PROBE_PIECES pieces of PROBE_PIECE bytes spread over the
 * chunk. A piece starts at a multiple of 4 and is a multiple of 4 long, so
 * every sampled byte keeps its position modulo 2 and 4. A chunk shorter
 * than PROBE_LEN is not probed: few binary chunks are, and fewer samples
 * would make the per-plane estimates too noisy to compare. */
#define PROBE_PIECES 4u
#define PROBE_PIECE 1024u
#define PROBE_LEN (PROBE_PIECES * PROBE_PIECE)
/* A layout of planes must need at most this share of the bits the best
 * smaller stride needs. On random bytes the corrected estimates stay
 * within 1% of each other; the benchmark's fp16 words need 89%. */
#define PROBE_GAIN 0.95
/* zstd level of FRAME_POLICY_AUTO. Level 3 saves 1.3% more on the text
 * chunks of the small dataset (0.2% of all bytes) for ~20% more CPU on
 * them, and nothing on weights: see docs/formats.md. */
#define AUTO_LEVEL 1

struct frame_coder {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	uint8_t *planes;   /* byte-plane scratch, planes_cap bytes */
	size_t planes_cap; /* <= CHUNK_MAX_LIMIT */
	double *xlogx;	   /* [c] = c * log2(c), c = 0..PROBE_LEN */
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
	free(c->planes);
	free(c->xlogx);
	free(c);
}

/* Room for n bytes of planes. n <= CHUNK_MAX_LIMIT (checked by callers),
 * so an untrusted header never sizes this beyond the format's limit. */
static int planes_reserve(frame_coder *c, size_t n)
{
	uint8_t *p;

	if (n <= c->planes_cap)
		return 0;
	p = realloc(c->planes, n);
	if (!p)
		return -ENOMEM;
	c->planes = p;
	c->planes_cap = n;
	return 0;
}

size_t frame_bound(size_t raw_len)
{
	if (raw_len > SIZE_MAX - FRAME_HDR_LEN)
		return SIZE_MAX;
	return FRAME_HDR_LEN + raw_len;
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

/* Regroup in[0..n) into stride planes (layout in catalog.h). A constant
 * stride lets the compiler unroll each case. */
static void planes_split(const uint8_t *in, size_t n, unsigned stride,
			 uint8_t *out)
{
	size_t m = n / stride, i;

	if (stride == 2) {
		for (i = 0; i < m; i++) {
			out[i] = in[2 * i];
			out[m + i] = in[2 * i + 1];
		}
	} else {
		for (i = 0; i < m; i++) {
			out[i] = in[4 * i];
			out[m + i] = in[4 * i + 1];
			out[2 * m + i] = in[4 * i + 2];
			out[3 * m + i] = in[4 * i + 3];
		}
	}
	memcpy(out + stride * m, in + stride * m, n - stride * m);
}

/* The inverse of planes_split. Reads run on every warm read of weights,
 * so the interleave goes 16 bytes of each plane at a time where SSE2 is
 * there (every x86-64): a byte loop was as costly as zstd itself. */
static void planes_join(const uint8_t *in, size_t n, unsigned stride,
			uint8_t *out)
{
	size_t m = n / stride, i = 0;

#ifdef __SSE2__
	if (stride == 2) {
		for (; i + 16 <= m; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(in + i));
			__m128i b =
			    _mm_loadu_si128((const __m128i *)(in + m + i));

			_mm_storeu_si128((__m128i *)(out + 2 * i),
					 _mm_unpacklo_epi8(a, b));
			_mm_storeu_si128((__m128i *)(out + 2 * i + 16),
					 _mm_unpackhi_epi8(a, b));
		}
	} else {
		for (; i + 16 <= m; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(in + i));
			__m128i b =
			    _mm_loadu_si128((const __m128i *)(in + m + i));
			__m128i c =
			    _mm_loadu_si128((const __m128i *)(in + 2 * m + i));
			__m128i d =
			    _mm_loadu_si128((const __m128i *)(in + 3 * m + i));
			__m128i ab0 = _mm_unpacklo_epi8(a, b);
			__m128i ab1 = _mm_unpackhi_epi8(a, b);
			__m128i cd0 = _mm_unpacklo_epi8(c, d);
			__m128i cd1 = _mm_unpackhi_epi8(c, d);
			uint8_t *o = out + 4 * i;

			_mm_storeu_si128((__m128i *)o,
					 _mm_unpacklo_epi16(ab0, cd0));
			_mm_storeu_si128((__m128i *)(o + 16),
					 _mm_unpackhi_epi16(ab0, cd0));
			_mm_storeu_si128((__m128i *)(o + 32),
					 _mm_unpacklo_epi16(ab1, cd1));
			_mm_storeu_si128((__m128i *)(o + 48),
					 _mm_unpackhi_epi16(ab1, cd1));
		}
	}
#endif
	if (stride == 2) {
		for (; i < m; i++) {
			out[2 * i] = in[i];
			out[2 * i + 1] = in[m + i];
		}
	} else {
		for (; i < m; i++) {
			out[4 * i] = in[i];
			out[4 * i + 1] = in[m + i];
			out[4 * i + 2] = in[2 * m + i];
			out[4 * i + 3] = in[3 * m + i];
		}
	}
	memcpy(out + stride * m, in + stride * m, n - stride * m);
}

/*
 * Bits an ideal order-0 coder needs for the bytes counted in h (total n):
 * n*log2(n) - sum c*log2(c), plus the Miller-Madow term (K-1)/(2 ln 2) for
 * K used symbols. Without that term a plane of 1024 samples would look
 * ~2% more compressible than the 4096 it came from, on random data too.
 */
static double order0_bits(const double *xlogx, const uint32_t *h, uint32_t n)
{
	double sum = 0;
	unsigned used = 0;

	for (unsigned b = 0; b < 256; b++) {
		sum += xlogx[h[b]];
		used += h[b] != 0;
	}
	return xlogx[n] - sum + (used ? used - 1 : 0) / (2.0 * M_LN2);
}

/*
 * The byte-plane stride for AUTO: 1 (plain zstd), 2 or 4. A layout is
 * taken when its order-0 estimate is at least 5% below the best smaller
 * stride's, so text (whose planes look alike) and random bytes stay plain.
 * Costs one pass over 4 KiB and 7 x 256 table lookups (a few us); the
 * table is made on the coder's first probe.
 */
static int probe_stride(frame_coder *c, const uint8_t *raw, size_t n,
			unsigned *ret)
{
	uint32_t h4[4][256], h2[2][256], h1[256];
	double e1, e2, e4, best;
	unsigned k, b;

	*ret = 1;
	if (n < PROBE_LEN)
		return 0;
	if (!c->xlogx) {
		c->xlogx = malloc((PROBE_LEN + 1) * sizeof(*c->xlogx));
		if (!c->xlogx)
			return -ENOMEM;
		c->xlogx[0] = 0;
		for (k = 1; k <= PROBE_LEN; k++)
			c->xlogx[k] = k * log2(k);
	}
	memset(h4, 0, sizeof(h4));
	for (k = 0; k < PROBE_PIECES; k++) {
		/* (n - PIECE) * k / (PIECES - 1) <= n - PIECE: in bounds. */
		size_t off =
		    ((n - PROBE_PIECE) * k / (PROBE_PIECES - 1)) & ~(size_t)3;
		const uint8_t *p = raw + off;

		for (size_t i = 0; i < PROBE_PIECE; i += 4) {
			h4[0][p[i]]++;
			h4[1][p[i + 1]]++;
			h4[2][p[i + 2]]++;
			h4[3][p[i + 3]]++;
		}
	}
	for (b = 0; b < 256; b++) {
		h2[0][b] = h4[0][b] + h4[2][b];
		h2[1][b] = h4[1][b] + h4[3][b];
		h1[b] = h2[0][b] + h2[1][b];
	}
	e1 = order0_bits(c->xlogx, h1, PROBE_LEN);
	e2 = order0_bits(c->xlogx, h2[0], PROBE_LEN / 2) +
	     order0_bits(c->xlogx, h2[1], PROBE_LEN / 2);
	e4 = 0;
	for (k = 0; k < 4; k++)
		e4 += order0_bits(c->xlogx, h4[k], PROBE_LEN / 4);
	best = e1;
	if (e2 < best * PROBE_GAIN) {
		*ret = 2;
		best = e2;
	}
	if (e4 < best * PROBE_GAIN)
		*ret = 4;
	return 0;
}

/*
 * Compress with zstd into dst[0..cap). cap is already the largest payload
 * worth keeping, so -ENOBUFS means "not worth it", not a failure.
 */
static int encode_zstd(frame_coder *c, int level, const void *raw,
		       size_t raw_len, void *dst, size_t cap, size_t *ret_len)
{
	size_t z;
	int r;

	/* The one-shot call ignores sticky parameters and writes the content
	 * size into the zstd frame header, which the decoder checks. */
	z = ZSTD_compressCCtx(c->cctx, dst, cap, raw, raw_len, level);
	r = base_zstd_errno(z, 0);
	if (r == 0)
		*ret_len = z;
	return r;
}

/*
 * zstd over byte planes into dst[0..cap), -ENOBUFS when it does not fit.
 * One zstd frame, but a flush after each plane ends the block there:
 * zstd keeps one Huffman table per block, and a block that straddled a
 * uniform and a skewed plane would code their mixture (measured: 0.869
 * instead of 0.777 on fp16 chunks). The pledged size puts the content
 * size in the frame header, as the one-shot call does.
 */
static int encode_zstd_planes(frame_coder *c, unsigned stride, int level,
			      const uint8_t *raw, size_t raw_len, void *dst,
			      size_t cap, size_t *ret_len)
{
	ZSTD_outBuffer ob = {dst, cap, 0};
	size_t m = raw_len / stride, z;
	int r;

	r = planes_reserve(c, raw_len);
	if (r < 0)
		return r;
	planes_split(raw, raw_len, stride, c->planes);
	/* A stream a previous call abandoned (output full) starts over. */
	z = ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_and_parameters);
	if (!ZSTD_isError(z))
		z = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel,
					   level);
	if (!ZSTD_isError(z))
		z = ZSTD_CCtx_setPledgedSrcSize(c->cctx, raw_len);
	if (ZSTD_isError(z))
		return base_zstd_errno(z, 0);
	for (unsigned p = 0; p < stride; p++) {
		bool last = p + 1 == stride;
		/* The last plane carries the raw_len % stride tail. */
		ZSTD_inBuffer ib = {c->planes + p * m,
				    last ? raw_len - p * m : m, 0};

		do {
			z = ZSTD_compressStream2(c->cctx, &ob, &ib,
						 last ? ZSTD_e_end
						      : ZSTD_e_flush);
			if (ZSTD_isError(z))
				return base_zstd_errno(z, 0);
			/* More to write and no room left: over cap. */
			if (z != 0 && ob.pos == ob.size)
				return -ENOBUFS;
		} while (z != 0);
	}
	*ret_len = ob.pos;
	return 0;
}

/* The plane stride an explicit zstd policy forces (1: plain zstd). */
static unsigned policy_stride(enum frame_policy policy)
{
	if (policy == FRAME_POLICY_ZSTD_SHUF2)
		return 2;
	if (policy == FRAME_POLICY_ZSTD_SHUF4)
		return 4;
	return 1;
}

static uint8_t stride_codec(unsigned stride)
{
	if (stride == 2)
		return FRAME_ZSTD_SHUF2;
	if (stride == 4)
		return FRAME_ZSTD_SHUF4;
	return FRAME_ZSTD;
}

/* zstd, plain (stride 1) or over planes, into payload[0..cap). Sets
 * *ret_codec only on success. -ENOBUFS: does not shrink enough. */
static int encode_zstd_any(frame_coder *c, unsigned stride, int level,
			   const void *raw, size_t raw_len, uint8_t *payload,
			   size_t cap, uint8_t *ret_codec, size_t *ret_len)
{
	int r;

	if (stride == 1)
		r = encode_zstd(c, level, raw, raw_len, payload, cap, ret_len);
	else
		r = encode_zstd_planes(c, stride, level, raw, raw_len, payload,
				       cap, ret_len);
	if (r == 0)
		*ret_codec = stride_codec(stride);
	return r;
}

int frame_encode(frame_coder *coder, enum frame_policy policy, int level,
		 const void *raw, size_t raw_len, void *out, size_t out_cap,
		 size_t *ret_len)
{
	frame_coder *tmp = NULL;
	uint8_t *o = out;
	uint8_t *payload;
	size_t need, cap, clen = 0;
	uint8_t codec = FRAME_RAW;
	unsigned stride;
	int r = 0;

	if (!raw || !out || !ret_len || raw_len == 0 ||
	    raw_len > CHUNK_MAX_LIMIT)
		return -EINVAL;
	switch (policy) {
	case FRAME_POLICY_ZSTD:
	case FRAME_POLICY_ZSTD_SHUF2:
	case FRAME_POLICY_ZSTD_SHUF4:
		if (level == 0)
			level = 1;
		if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
			return -EINVAL;
		break;
	case FRAME_POLICY_AUTO:
		level = AUTO_LEVEL;
		break;
	case FRAME_POLICY_LZ4:
	case FRAME_POLICY_RAW:
		break;
	default:
		return -EINVAL;
	}
	if (out_cap < frame_bound(raw_len))
		return -ENOBUFS;
	if (!coder) {
		tmp = coder = frame_coder_new();
		if (!coder)
			return -ENOMEM;
	}
	payload = o + FRAME_HDR_LEN;

	/* A compressed payload must save at least `need` bytes: 1 (it must
	 * shrink) for explicit codecs, raw_len/32 under AUTO, where a small
	 * saving is not worth a decompression on every read. Capping the
	 * codec's output at raw_len - need lets it give up early. */
	need = 1;
	if (policy == FRAME_POLICY_AUTO && raw_len / 32 > need)
		need = raw_len / 32;
	cap = raw_len > need ? raw_len - need : 0;

	if (cap > 0 && policy == FRAME_POLICY_AUTO) {
		r = probe_stride(coder, raw, raw_len, &stride);
		if (r < 0)
			goto out;
		/* No second try with plain zstd when planes do not pay: the
		 * probe saw >= 5% less entropy in planes, and a match plain
		 * zstd would find at an odd distance is still there across
		 * planes. */
		r = encode_zstd_any(coder, stride, level, raw, raw_len, payload,
				    cap, &codec, &clen);
		if (r < 0 && r != -ENOBUFS)
			goto out;
	} else if (cap > 0 && policy != FRAME_POLICY_LZ4 &&
		   policy != FRAME_POLICY_RAW) {
		r = encode_zstd_any(coder, policy_stride(policy), level, raw,
				    raw_len, payload, cap, &codec, &clen);
		if (r < 0 && r != -ENOBUFS)
			goto out;
	} else if (cap > 0 && policy == FRAME_POLICY_LZ4) {
		/* raw_len <= CHUNK_MAX_LIMIT, so the int casts are exact.
		 * 0 means it did not fit in cap (or failed): raw. */
		int n = LZ4_compress_default(raw, (char *)payload, (int)raw_len,
					     (int)cap);
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
	frame_coder_free(tmp);
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
	if (codec != FRAME_RAW && codec != FRAME_LZ4 && codec != FRAME_ZSTD &&
	    codec != FRAME_ZSTD_SHUF2 && codec != FRAME_ZSTD_SHUF4)
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

static int decode_zstd(frame_coder *c, const void *src, size_t src_len,
		       void *out, size_t raw_len)
{
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
	/* Capacity is raw_len, not out_cap: a payload that wants to grow
	 * past raw_len fails inside zstd instead of writing further. */
	z = ZSTD_decompressDCtx(c->dctx, out, raw_len, src, src_len);
	r = base_zstd_errno(z, 1);
	if (r == 0 && z != raw_len)
		r = -EBADMSG;
	return r;
}

/* The planes come back whole (exactly raw_len bytes, the same checks as
 * FRAME_ZSTD) before a byte of out is written. */
static int decode_zstd_planes(frame_coder *c, unsigned stride, const void *src,
			      size_t src_len, void *out, size_t raw_len)
{
	int r = planes_reserve(c, raw_len);

	if (r == 0)
		r = decode_zstd(c, src, src_len, c->planes, raw_len);
	if (r == 0)
		planes_join(c->planes, raw_len, stride, out);
	return r;
}

int frame_decode(frame_coder *coder, const void *frame, size_t frame_len,
		 uint32_t max_raw, void *out, size_t out_cap,
		 size_t *ret_raw_len)
{
	frame_coder *tmp = NULL;
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
	if (!coder && fi.codec != FRAME_RAW && fi.codec != FRAME_LZ4) {
		tmp = coder = frame_coder_new();
		if (!coder) {
			r = -ENOMEM;
			goto out;
		}
	}

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
		r = decode_zstd(coder, payload, fi.stored_len, out, fi.raw_len);
		break;
	case FRAME_ZSTD_SHUF2:
		r = decode_zstd_planes(coder, 2, payload, fi.stored_len, out,
				       fi.raw_len);
		break;
	case FRAME_ZSTD_SHUF4:
		r = decode_zstd_planes(coder, 4, payload, fi.stored_len, out,
				       fi.raw_len);
		break;
	default:
		r = -EBADMSG; /* the parser let through an unknown codec */
		break;
	}
	if (r == 0)
		*ret_raw_len = fi.raw_len;
out:
	frame_coder_free(tmp);
	return r;
}
