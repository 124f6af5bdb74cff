/*
 * tests/unit/test_frame.c — chunk frames and chunk ids: round trips under
 * every policy, the codec each policy picks (AUTO's byte-plane probe
 * included), the byte-plane layout against a reference written here, and
 * rejection (-EBADMSG) of every malformed, truncated, oversized or
 * corrupted frame.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zstd.h>

#include "catalog/catalog.h"
#include "tsupport.h"

#define MAX_RAW CHUNK_MAX_DEFAULT

/* Text-like bytes: words from a small vocabulary, spaces and newlines. */
static uint8_t *text_bytes(size_t n, uint64_t seed)
{
	static const char *const words[] = {
	    "the",    "chunk", "frame",	  "catalog", "ferry", "hydrator",
	    "mount",  "zstd",  "replica", "of",	     "and",   "tensor",
	    "weight", "layer", "0.125",	  "-3.5e-2", "{",     "}",
	};
	const size_t nwords = sizeof(words) / sizeof(*words);
	uint8_t *b = malloc(n ? n : 1);
	size_t i = 0;

	assert_non_null(b);
	while (i < n) {
		uint64_t r = tsup_splitmix64(&seed);
		const char *w = words[r % nwords];

		for (size_t k = 0; w[k] && i < n; k++)
			b[i++] = (uint8_t)w[k];
		if (i < n)
			b[i++] = (r >> 32) % 9 == 0 ? '\n' : ' ';
	}
	return b;
}

/* fp16-like words as the benchmark generator makes them: a uniform low
 * byte, and a high byte of sign | skewed 5-bit exponent | 2 mantissa bits
 * (22/32 of exponents 13, 7/32 12, 2/32 11, 1/32 14). */
static uint8_t *fp16_bytes(size_t n, uint64_t seed)
{
	static const uint8_t exps[4] = {13, 12, 11, 14};
	uint8_t *b = malloc(n ? n : 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		uint64_t r = tsup_splitmix64(&seed);
		unsigned slot = (unsigned)(r >> 8) % 32;
		unsigned e = exps[slot < 22   ? 0
				  : slot < 29 ? 1
				  : slot < 31 ? 2
					      : 3];

		if (i % 2 == 0)
			b[i] = (uint8_t)r;
		else
			b[i] = (uint8_t)((r >> 20 & 1) << 7 | e << 2 |
					 (r >> 21 & 3));
	}
	return b;
}

/* fp32-like words: 16 uniform low mantissa bits, a near-uniform byte (low
 * exponent bit and 7 mantissa bits), and sign | 7 high exponent bits from
 * a few values. Only 4 planes separate the skewed byte. */
static uint8_t *fp32_bytes(size_t n, uint64_t seed)
{
	uint8_t *b = malloc(n ? n : 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i += 4) {
		uint64_t r = tsup_splitmix64(&seed);
		uint32_t e =
		    118 + (uint32_t)(r >> 40) % 6 / 2 + ((r >> 50) % 8 == 0);
		uint32_t w = (uint32_t)(r >> 63) << 31 | e << 23 |
			     (uint32_t)(r & 0x7fffff);

		for (size_t k = 0; k < 4 && i + k < n; k++)
			b[i + k] = (uint8_t)(w >> (8 * k));
	}
	return b;
}

/* The byte-plane layout of catalog.h, written out independently of the
 * codec: plane p holds raw[p], raw[p+S], ...; the raw_len % S tail last. */
static void ref_planes(const uint8_t *raw, size_t n, size_t stride,
		       uint8_t *out)
{
	size_t m = n / stride, o = 0;

	for (size_t p = 0; p < stride; p++)
		for (size_t i = 0; i < m; i++)
			out[o++] = raw[i * stride + p];
	for (size_t i = m * stride; i < n; i++)
		out[o++] = raw[i];
	assert_int_equal(o, n);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* Encode, check the codec (unless want_codec < 0) and the header, decode,
 * compare. Returns the frame (caller frees) and its length. */
static uint8_t *encode_check(frame_coder *c, enum frame_policy pol, int level,
			     const uint8_t *raw, size_t n, int want_codec,
			     size_t *ret_len)
{
	size_t cap = frame_bound(n), flen = 0, got = 0;
	uint8_t *frame = malloc(cap);
	uint8_t *out = malloc(n);
	struct frame_info fi;

	assert_non_null(frame);
	assert_non_null(out);
	assert_int_equal(frame_encode(c, pol, level, raw, n, frame, cap, &flen),
			 0);
	assert_true(flen >= FRAME_HDR_LEN && flen <= cap);
	assert_int_equal(frame_header_parse(frame, flen, MAX_RAW, &fi), 0);
	if (want_codec >= 0)
		assert_int_equal(fi.codec, want_codec);
	assert_int_equal(fi.raw_len, n);
	assert_int_equal(fi.frame_len, flen);
	assert_int_equal(fi.stored_len + FRAME_HDR_LEN, flen);
	if (fi.codec != FRAME_RAW)
		assert_true(fi.stored_len < n);
	assert_int_equal(frame_decode(c, frame, flen, MAX_RAW, out, n, &got),
			 0);
	assert_int_equal(got, n);
	assert_memory_equal(out, raw, n);
	free(out);
	*ret_len = flen;
	return frame;
}

static void roundtrip(frame_coder *c, enum frame_policy pol, int level,
		      const uint8_t *raw, size_t n, int want_codec)
{
	size_t flen;

	free(encode_check(c, pol, level, raw, n, want_codec, &flen));
}

static void test_roundtrip(void **state)
{
	static const size_t sizes[] = {4096, 65536, MAX_RAW};
	frame_coder *c = frame_coder_new();

	(void)state;
	assert_non_null(c);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(*sizes); k++) {
		size_t n = sizes[k];
		uint8_t *txt = text_bytes(n, k + 1);
		uint8_t *rnd = tsup_random_bytes(n, k + 100);
		uint8_t *f16 = fp16_bytes(n, k + 200);
		uint8_t *f32 = fp32_bytes(n, k + 300);

		/* With a coder and with a temporary context. */
		for (int pass = 0; pass < 2; pass++) {
			frame_coder *cc = pass ? NULL : c;

			roundtrip(cc, FRAME_POLICY_RAW, 0, txt, n, FRAME_RAW);
			roundtrip(cc, FRAME_POLICY_LZ4, 0, txt, n, FRAME_LZ4);
			roundtrip(cc, FRAME_POLICY_ZSTD, 0, txt, n, FRAME_ZSTD);
			roundtrip(cc, FRAME_POLICY_ZSTD, 19, txt, n,
				  FRAME_ZSTD);
			roundtrip(cc, FRAME_POLICY_ZSTD, -5, txt, n,
				  FRAME_ZSTD);
			roundtrip(cc, FRAME_POLICY_AUTO, 0, txt, n, FRAME_ZSTD);
			roundtrip(cc, FRAME_POLICY_ZSTD_SHUF2, 0, txt, n,
				  FRAME_ZSTD_SHUF2);
			roundtrip(cc, FRAME_POLICY_ZSTD_SHUF4, 3, txt, n,
				  FRAME_ZSTD_SHUF4);
			roundtrip(cc, FRAME_POLICY_AUTO, 0, f16, n,
				  FRAME_ZSTD_SHUF2);
			roundtrip(cc, FRAME_POLICY_AUTO, 0, f32, n,
				  FRAME_ZSTD_SHUF4);

			/* Random bytes never shrink: raw every time. */
			roundtrip(cc, FRAME_POLICY_RAW, 0, rnd, n, FRAME_RAW);
			roundtrip(cc, FRAME_POLICY_LZ4, 0, rnd, n, FRAME_RAW);
			roundtrip(cc, FRAME_POLICY_ZSTD, 3, rnd, n, FRAME_RAW);
			roundtrip(cc, FRAME_POLICY_AUTO, 0, rnd, n, FRAME_RAW);
			roundtrip(cc, FRAME_POLICY_ZSTD_SHUF2, 0, rnd, n,
				  FRAME_RAW);
			roundtrip(cc, FRAME_POLICY_ZSTD_SHUF4, 0, rnd, n,
				  FRAME_RAW);
		}
		free(txt);
		free(rnd);
		free(f16);
		free(f32);
	}
	frame_coder_free(c);
	frame_coder_free(NULL);
}

static void test_tiny(void **state)
{
	const uint8_t one = 'x';
	uint8_t *txt = text_bytes(40, 9);

	(void)state;
	/* One byte cannot shrink: raw under every policy. */
	roundtrip(NULL, FRAME_POLICY_AUTO, 0, &one, 1, FRAME_RAW);
	roundtrip(NULL, FRAME_POLICY_ZSTD, 1, &one, 1, FRAME_RAW);
	roundtrip(NULL, FRAME_POLICY_LZ4, 0, &one, 1, FRAME_RAW);
	roundtrip(NULL, FRAME_POLICY_RAW, 0, &one, 1, FRAME_RAW);
	roundtrip(NULL, FRAME_POLICY_ZSTD_SHUF2, 0, &one, 1, FRAME_RAW);
	roundtrip(NULL, FRAME_POLICY_ZSTD_SHUF4, 0, &one, 1, FRAME_RAW);
	/* 40 bytes of text: lz4 may shrink them, zstd's frame overhead may
	 * not; whatever each picks must round-trip. */
	for (int pol = FRAME_POLICY_AUTO; pol <= FRAME_POLICY_ZSTD_SHUF4; pol++)
		for (size_t n = 1; n <= 40; n++)
			roundtrip(NULL, (enum frame_policy)pol, 0, txt, n, -1);
	free(txt);
}

/* AUTO wants a saving of raw_len/32; an explicit codec takes any gain. */
static void test_auto_threshold(void **state)
{
	const size_t n = 65536;
	uint8_t *raw = tsup_random_bytes(n, 77);

	(void)state;
	/* 1.5 KiB of zeros saves about that much: under 2 KiB (= n/32), yet
	 * above zstd's own minimum gain per block (n/64 + 2). */
	memset(raw, 0, 1536);
	roundtrip(NULL, FRAME_POLICY_AUTO, 0, raw, n, FRAME_RAW);
	roundtrip(NULL, FRAME_POLICY_ZSTD, 1, raw, n, FRAME_ZSTD);
	/* 8 KiB of zeros saves well over n/32. */
	memset(raw, 0, 8192);
	roundtrip(NULL, FRAME_POLICY_AUTO, 0, raw, n, FRAME_ZSTD);
	free(raw);
}

/* Frame length of raw[0..n) under a policy (the frame round-trips). */
static size_t frame_len_of(enum frame_policy pol, const uint8_t *raw, size_t n,
			   int want_codec)
{
	size_t flen;

	free(encode_check(NULL, pol, 0, raw, n, want_codec, &flen));
	return flen;
}

/*
 * AUTO's probe: fp16-like words go to 2 planes, fp32-like to 4, text and
 * random bytes stay plain zstd / raw, at any length and alignment of the
 * words (a chunk may start mid-word). The planes must pay: on fp16 they
 * beat plain zstd by the margin measured on the benchmark (0.867 -> 0.777).
 */
static void test_auto_planes(void **state)
{
	static const size_t sizes[] = {4096,  4097,  4098,	 4099,
				       65536, 65539, MAX_RAW - 1};
	frame_coder *c = frame_coder_new();

	(void)state;
	assert_non_null(c);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(*sizes); k++) {
		size_t n = sizes[k];
		uint8_t *f16 = fp16_bytes(n + 3, k + 1);
		uint8_t *f32 = fp32_bytes(n + 3, k + 2);
		uint8_t *txt = text_bytes(n, k + 3);

		for (size_t shift = 0; shift < 4; shift++) {
			roundtrip(c, FRAME_POLICY_AUTO, 0, f16 + shift, n,
				  FRAME_ZSTD_SHUF2);
			roundtrip(c, FRAME_POLICY_AUTO, 0, f32 + shift, n,
				  FRAME_ZSTD_SHUF4);
		}
		roundtrip(c, FRAME_POLICY_AUTO, 0, txt, n, FRAME_ZSTD);
		free(f16);
		free(f32);
		free(txt);
	}
	{
		const size_t n = 65536;
		uint8_t *f16 = fp16_bytes(n, 9);
		uint8_t *f32 = fp32_bytes(n, 10);
		size_t plain16 =
		    frame_len_of(FRAME_POLICY_ZSTD, f16, n, FRAME_ZSTD);
		size_t auto16 =
		    frame_len_of(FRAME_POLICY_AUTO, f16, n, FRAME_ZSTD_SHUF2);
		size_t two32 = frame_len_of(FRAME_POLICY_ZSTD_SHUF2, f32, n,
					    FRAME_ZSTD_SHUF2);
		size_t auto32 =
		    frame_len_of(FRAME_POLICY_AUTO, f32, n, FRAME_ZSTD_SHUF4);

		print_message("fp16 64 KiB: zstd %zu, 2 planes %zu; fp32: "
			      "2 planes %zu, 4 planes %zu\n",
			      plain16, auto16, two32, auto32);
		assert_true(auto16 * 100 < plain16 * 92);
		assert_true(auto32 < two32);
		free(f16);
		free(f32);
	}
	/* Under 4 KiB there is no probe: plain zstd (or raw). */
	{
		uint8_t *f16 = fp16_bytes(4095, 11);

		roundtrip(c, FRAME_POLICY_AUTO, 0, f16, 4095, FRAME_ZSTD);
		free(f16);
	}
	frame_coder_free(c);
}

/*
 * The byte-plane payload is one zstd frame of exactly the layout catalog.h
 * gives (checked against ref_planes, tails of 0..3 bytes), both ways: what
 * the encoder writes, and a frame built here from that layout.
 */
static void test_planes_layout(void **state)
{
	static const size_t strides[] = {2, 4};
	static const uint8_t codecs[] = {FRAME_ZSTD_SHUF2, FRAME_ZSTD_SHUF4};
	static const enum frame_policy pols[] = {FRAME_POLICY_ZSTD_SHUF2,
						 FRAME_POLICY_ZSTD_SHUF4};

	(void)state;
	for (size_t k = 0; k < 2; k++) {
		for (size_t n = 5000; n < 5004; n++) {
			uint8_t *raw = fp16_bytes(n, n);
			uint8_t *planes = malloc(n);
			uint8_t *back = malloc(n);
			size_t cap = ZSTD_compressBound(n), flen, got = 0, z;
			uint8_t *f = encode_check(NULL, pols[k], 0, raw, n,
						  codecs[k], &flen);
			uint8_t *g = malloc(FRAME_HDR_LEN + cap);

			assert_non_null(planes);
			assert_non_null(back);
			assert_non_null(g);
			ref_planes(raw, n, strides[k], planes);
			/* Encoder output, decoded by plain zstd. */
			z = ZSTD_decompress(back, n, f + FRAME_HDR_LEN,
					    flen - FRAME_HDR_LEN);
			assert_false(ZSTD_isError(z));
			assert_int_equal(z, n);
			assert_memory_equal(back, planes, n);
			/* A frame made from the reference layout. */
			z = ZSTD_compress(g + FRAME_HDR_LEN, cap, planes, n, 5);
			assert_false(ZSTD_isError(z));
			assert_true(z < n);
			memcpy(g, "FRC1", 4);
			g[4] = codecs[k];
			g[5] = g[6] = g[7] = 0;
			put_le32(g + 8, (uint32_t)n);
			put_le32(g + 12, (uint32_t)z);
			memset(back, 0, n);
			assert_int_equal(frame_decode(NULL, g,
						      FRAME_HDR_LEN + z,
						      MAX_RAW, back, n, &got),
					 0);
			assert_int_equal(got, n);
			assert_memory_equal(back, raw, n);
			free(g);
			free(f);
			free(back);
			free(planes);
			free(raw);
		}
	}
}

static void test_encode_args(void **state)
{
	uint8_t raw[100] = {0};
	uint8_t out[FRAME_HDR_LEN + 100];
	size_t len = 0;

	(void)state;
	assert_int_equal(frame_bound(100), sizeof(out));
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 0, raw, 0, out,
				      sizeof(out), &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 0, raw,
				      CHUNK_MAX_LIMIT + 1, out, sizeof(out),
				      &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, (enum frame_policy)9, 0, raw, 100,
				      out, sizeof(out), &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, (enum frame_policy)6, 0, raw, 100,
				      out, sizeof(out), &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_ZSTD, 1000, raw, 100,
				      out, sizeof(out), &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_ZSTD_SHUF2, 1000, raw,
				      100, out, sizeof(out), &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_ZSTD_SHUF4, -1000000,
				      raw, 100, out, sizeof(out), &len),
			 -EINVAL);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 0, raw, 100, out,
				      sizeof(out) - 1, &len),
			 -ENOBUFS);
	assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 0, NULL, 100,
				      out, sizeof(out), &len),
			 -EINVAL);
}

/* Expect decode of f[0..len) to be rejected as a bad frame. */
static void expect_bad(const uint8_t *f, size_t len)
{
	uint8_t *out = malloc(MAX_RAW);
	uint8_t *copy = malloc(len ? len : 1);
	size_t got = 12345;

	assert_non_null(out);
	assert_non_null(copy);
	/* A heap copy of exactly len bytes lets ASan catch any over-read. */
	memcpy(copy, f, len);
	assert_int_equal(
	    frame_decode(NULL, copy, len, MAX_RAW, out, MAX_RAW, &got),
	    -EBADMSG);
	assert_int_equal(got, 12345);
	free(copy);
	free(out);
}

static void test_truncated(void **state)
{
	uint8_t *txt = text_bytes(600, 3);
	static const enum frame_policy pols[] = {
	    FRAME_POLICY_RAW, FRAME_POLICY_LZ4, FRAME_POLICY_ZSTD,
	    FRAME_POLICY_ZSTD_SHUF2, FRAME_POLICY_ZSTD_SHUF4};
	static const int codecs[] = {FRAME_RAW, FRAME_LZ4, FRAME_ZSTD,
				     FRAME_ZSTD_SHUF2, FRAME_ZSTD_SHUF4};
	struct frame_info fi;

	(void)state;
	for (size_t k = 0; k < sizeof(pols) / sizeof(*pols); k++) {
		size_t flen;
		uint8_t *f =
		    encode_check(NULL, pols[k], 0, txt, 600, codecs[k], &flen);
		uint8_t *longer = malloc(flen + 1);

		for (size_t cut = 0; cut < flen; cut++) {
			expect_bad(f, cut);
			/* The header alone parses (the payload is not
			 * required); less than a header does not. */
			assert_int_equal(
			    frame_header_parse(f, cut, MAX_RAW, &fi),
			    cut < FRAME_HDR_LEN ? -EBADMSG : 0);
		}
		/* One trailing byte too many is not this frame either. */
		assert_non_null(longer);
		memcpy(longer, f, flen);
		longer[flen] = 0;
		expect_bad(longer, flen + 1);
		/* ...but a stream may carry more after the header. */
		assert_int_equal(
		    frame_header_parse(longer, flen + 1, MAX_RAW, &fi), 0);
		assert_int_equal(fi.frame_len, flen);
		free(longer);
		free(f);
	}
	free(txt);
}

/* A hand-built header over a payload of `stored` bytes of value 'a'. */
static uint8_t *make_frame(uint8_t codec, uint32_t raw_len, uint32_t stored_len,
			   size_t payload_len, size_t *ret_len)
{
	uint8_t *f = malloc(FRAME_HDR_LEN + payload_len);

	assert_non_null(f);
	memcpy(f, "FRC1", 4);
	f[4] = codec;
	f[5] = 0;
	f[6] = 0;
	f[7] = 0;
	put_le32(f + 8, raw_len);
	put_le32(f + 12, stored_len);
	memset(f + FRAME_HDR_LEN, 'a', payload_len);
	*ret_len = FRAME_HDR_LEN + payload_len;
	return f;
}

static void test_header_fields(void **state)
{
	struct frame_info fi;
	uint8_t out[64];
	size_t len, got;
	uint8_t *f;

	(void)state;
	/* Sanity: the hand-built raw frame is valid. */
	f = make_frame(FRAME_RAW, 50, 50, 50, &len);
	assert_int_equal(
	    frame_decode(NULL, f, len, MAX_RAW, out, sizeof(out), &got), 0);
	assert_int_equal(got, 50);
	/* out_cap below raw_len is the caller's problem: -ENOBUFS. */
	assert_int_equal(frame_decode(NULL, f, len, MAX_RAW, out, 49, &got),
			 -ENOBUFS);
	/* raw_len above the caller's max. */
	assert_int_equal(frame_header_parse(f, len, 49, &fi), -EBADMSG);
	assert_int_equal(frame_decode(NULL, f, len, 49, out, sizeof(out), &got),
			 -EBADMSG);

	/* Bad magic, one byte at a time. */
	for (int k = 0; k < 4; k++) {
		f[k] ^= 0x20;
		expect_bad(f, len);
		f[k] ^= 0x20;
	}
	/* Unknown codecs: the header parser refuses them already. */
	for (int codec = FRAME_ZSTD_SHUF4 + 1; codec <= 0xff; codec++) {
		f[4] = (uint8_t)codec;
		expect_bad(f, len);
		assert_int_equal(frame_header_parse(f, len, MAX_RAW, &fi),
				 -EBADMSG);
	}
	f[4] = FRAME_RAW;
	/* Flags and reserved must be zero, every bit of them. */
	for (int byte = 5; byte < 8; byte++) {
		for (int bit = 0; bit < 8; bit++) {
			f[byte] = (uint8_t)(1u << bit);
			expect_bad(f, len);
			assert_int_equal(
			    frame_header_parse(f, len, MAX_RAW, &fi), -EBADMSG);
			f[byte] = 0;
		}
	}
	free(f);

	/* raw_len 0, raw_len over the default max and over the hard limit
	 * (with a caller max that is itself too large). */
	f = make_frame(FRAME_LZ4, 0, 10, 10, &len);
	expect_bad(f, len);
	free(f);
	f = make_frame(FRAME_ZSTD, MAX_RAW + 1, 10, 10, &len);
	expect_bad(f, len);
	free(f);
	f = make_frame(FRAME_ZSTD, CHUNK_MAX_LIMIT + 1, 10, 10, &len);
	assert_int_equal(frame_header_parse(f, len, UINT32_MAX, &fi), -EBADMSG);
	free(f);
	f = make_frame(FRAME_ZSTD, 0xffffffffu, 10, 10, &len);
	expect_bad(f, len);
	free(f);

	/* stored_len larger than the buffer, and absurdly large. */
	f = make_frame(FRAME_LZ4, 1000, 500, 100, &len);
	expect_bad(f, len);
	free(f);
	f = make_frame(FRAME_ZSTD, 1000, 0xffffffffu, 100, &len);
	expect_bad(f, len);
	free(f);
	/* stored_len larger than raw_len: a codec that grew the chunk. */
	f = make_frame(FRAME_ZSTD, 100, 101, 101, &len);
	expect_bad(f, len);
	free(f);
	/* Empty payload. */
	f = make_frame(FRAME_LZ4, 100, 0, 0, &len);
	expect_bad(f, len);
	free(f);

	/* Raw frames must have stored_len == raw_len, both ways. */
	f = make_frame(FRAME_RAW, 50, 49, 49, &len);
	expect_bad(f, len);
	free(f);
	f = make_frame(FRAME_RAW, 49, 50, 50, &len);
	expect_bad(f, len);
	free(f);

	/* Too short for a header, and NULL. */
	assert_int_equal(frame_header_parse("FRC1", 4, MAX_RAW, &fi), -EBADMSG);
	assert_int_equal(frame_header_parse(NULL, 100, MAX_RAW, &fi), -EBADMSG);
}

/*
 * Corrupt each bit of a compressed frame in turn. A decoder may miss a
 * flip inside the payload (lz4 has no checksum), but it must then still
 * return exactly raw_len bytes, and the chunk id check catches the damage.
 * It must never return another length.
 */
static void flip_bits(enum frame_policy pol, int codec)
{
	const size_t n = 3000;
	uint8_t *txt = text_bytes(n, 11);
	uint8_t *out = malloc(MAX_RAW);
	size_t flen, rejected = 0, caught_by_hash = 0;
	frame_coder *c = frame_coder_new();
	uint8_t *f = encode_check(c, pol, 0, txt, n, codec, &flen);
	chunk_id id;

	assert_non_null(out);
	assert_non_null(c);
	assert_int_equal(chunk_id_compute(txt, n, &id), 0);
	for (size_t bit = 0; bit < flen * 8; bit++) {
		size_t got = 0;
		int r;

		f[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		/* out has room for any raw_len a flipped header may claim,
		 * so every failure is about the frame, not the buffer. */
		r = frame_decode(c, f, flen, MAX_RAW, out, MAX_RAW, &got);
		if (r == 0) {
			assert_int_equal(got, n);
			if (memcmp(out, txt, n) == 0) {
				assert_int_equal(chunk_id_verify(&id, out, n),
						 0);
			} else {
				assert_int_equal(chunk_id_verify(&id, out, n),
						 -EBADMSG);
				caught_by_hash++;
			}
		} else {
			assert_int_equal(r, -EBADMSG);
			rejected++;
		}
		f[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	print_message(
	    "codec %d: %zu bits, %zu rejected by decode, %zu by hash\n", codec,
	    flen * 8, rejected, caught_by_hash);
	/* Every header bit is checked, so at least those are rejected. */
	assert_true(rejected >= FRAME_HDR_LEN * 8 - 8);
	/* The coder still works after all those errors. */
	{
		size_t got = 0;

		assert_int_equal(
		    frame_decode(c, f, flen, MAX_RAW, out, n, &got), 0);
		assert_memory_equal(out, txt, n);
	}
	frame_coder_free(c);
	free(f);
	free(out);
	free(txt);
}

static void test_bitflip_lz4(void **state)
{
	(void)state;
	flip_bits(FRAME_POLICY_LZ4, FRAME_LZ4);
}

static void test_bitflip_zstd(void **state)
{
	(void)state;
	flip_bits(FRAME_POLICY_ZSTD, FRAME_ZSTD);
}

static void test_bitflip_planes(void **state)
{
	(void)state;
	flip_bits(FRAME_POLICY_ZSTD_SHUF2, FRAME_ZSTD_SHUF2);
	flip_bits(FRAME_POLICY_ZSTD_SHUF4, FRAME_ZSTD_SHUF4);
}

/* A valid frame whose header claims one byte more or less than the payload
 * decodes to. */
static void check_len_lies(enum frame_policy pol, int codec)
{
	uint8_t *txt = text_bytes(2000, 21);
	size_t flen;
	uint8_t *f = encode_check(NULL, pol, 0, txt, 1000, codec, &flen);

	put_le32(f + 8, 999);
	expect_bad(f, flen);
	put_le32(f + 8, 1001);
	expect_bad(f, flen);
	put_le32(f + 8, 2000);
	expect_bad(f, flen);
	free(f);
	free(txt);
}

static void test_len_mismatch(void **state)
{
	(void)state;
	check_len_lies(FRAME_POLICY_LZ4, FRAME_LZ4);
	check_len_lies(FRAME_POLICY_ZSTD, FRAME_ZSTD);
	check_len_lies(FRAME_POLICY_ZSTD_SHUF2, FRAME_ZSTD_SHUF2);
	check_len_lies(FRAME_POLICY_ZSTD_SHUF4, FRAME_ZSTD_SHUF4);
}

/*
 * The same for a zstd payload that does not declare its content size, so
 * only the decoded length can give the lie away.
 */
static void check_no_content_size(uint8_t codec, size_t stride)
{
	const size_t n = 1000;
	uint8_t *txt = text_bytes(n, 31);
	size_t cap = ZSTD_compressBound(n);
	uint8_t *f = malloc(FRAME_HDR_LEN + cap);
	uint8_t *out = malloc(n + 1);
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	struct frame_info fi;
	size_t z, got = 0;

	uint8_t *planes = malloc(n);

	assert_non_null(f);
	assert_non_null(out);
	assert_non_null(cctx);
	assert_non_null(planes);
	if (stride > 1)
		ref_planes(txt, n, stride, planes);
	else
		memcpy(planes, txt, n);
	assert_false(ZSTD_isError(
	    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
	z = ZSTD_compress2(cctx, f + FRAME_HDR_LEN, cap, planes, n);
	assert_false(ZSTD_isError(z));
	assert_true(z < n);
	assert_int_equal(ZSTD_getFrameContentSize(f + FRAME_HDR_LEN, z),
			 ZSTD_CONTENTSIZE_UNKNOWN);
	memcpy(f, "FRC1", 4);
	f[4] = codec;
	f[5] = f[6] = f[7] = 0;
	put_le32(f + 12, (uint32_t)z);

	put_le32(f + 8, (uint32_t)n); /* the truth decodes */
	assert_int_equal(frame_header_parse(f, FRAME_HDR_LEN + z, MAX_RAW, &fi),
			 0);
	assert_int_equal(
	    frame_decode(NULL, f, FRAME_HDR_LEN + z, MAX_RAW, out, n + 1, &got),
	    0);
	assert_int_equal(got, n);
	assert_memory_equal(out, txt, n);
	put_le32(f + 8, (uint32_t)n - 1); /* decodes to more than claimed */
	expect_bad(f, FRAME_HDR_LEN + z);
	put_le32(f + 8, (uint32_t)n + 1); /* decodes to fewer */
	expect_bad(f, FRAME_HDR_LEN + z);

	/* Garbage after the zstd frame inside the payload. */
	put_le32(f + 8, (uint32_t)n);
	put_le32(f + 12, (uint32_t)z + 1);
	f[FRAME_HDR_LEN + z] = 0x5a;
	expect_bad(f, FRAME_HDR_LEN + z + 1);

	ZSTD_freeCCtx(cctx);
	free(planes);
	free(out);
	free(f);
	free(txt);
}

static void test_zstd_no_content_size(void **state)
{
	(void)state;
	check_no_content_size(FRAME_ZSTD, 1);
	check_no_content_size(FRAME_ZSTD_SHUF2, 2);
	check_no_content_size(FRAME_ZSTD_SHUF4, 4);
}

static void test_chunk_id(void **state)
{
	static const char abc_hex[] =
	    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	static const char empty_hex[] =
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
	char hex[CHUNK_ID_HEX_LEN + 1];
	char upper[CHUNK_ID_HEX_LEN + 1];
	chunk_id id, parsed;

	(void)state;
	assert_int_equal(chunk_id_compute("abc", 3, &id), 0);
	chunk_id_to_hex(&id, hex);
	assert_string_equal(hex, abc_hex);
	assert_int_equal(chunk_id_verify(&id, "abc", 3), 0);
	assert_int_equal(chunk_id_verify(&id, "abd", 3), -EBADMSG);
	assert_int_equal(chunk_id_verify(&id, "ab", 2), -EBADMSG);

	assert_int_equal(chunk_id_compute(NULL, 0, &id), 0);
	chunk_id_to_hex(&id, hex);
	assert_string_equal(hex, empty_hex);

	/* Hex round trip, either case. */
	assert_int_equal(chunk_id_from_hex(abc_hex, CHUNK_ID_HEX_LEN, &parsed),
			 0);
	chunk_id_to_hex(&parsed, hex);
	assert_string_equal(hex, abc_hex);
	for (size_t i = 0; i < CHUNK_ID_HEX_LEN; i++)
		upper[i] = (abc_hex[i] >= 'a' && abc_hex[i] <= 'f')
			       ? (char)(abc_hex[i] - 'a' + 'A')
			       : abc_hex[i];
	upper[CHUNK_ID_HEX_LEN] = '\0';
	assert_int_equal(chunk_id_from_hex(upper, CHUNK_ID_HEX_LEN, &id), 0);
	assert_memory_equal(id.b, parsed.b, CHUNK_ID_LEN);

	/* Wrong lengths and bad characters leave *ret_id alone. */
	memset(&id, 0x77, sizeof(id));
	assert_int_equal(chunk_id_from_hex(abc_hex, 63, &id), -EINVAL);
	assert_int_equal(chunk_id_from_hex(abc_hex, 0, &id), -EINVAL);
	assert_int_equal(chunk_id_from_hex(NULL, CHUNK_ID_HEX_LEN, &id),
			 -EINVAL);
	memcpy(upper, abc_hex, sizeof(upper));
	upper[63] = 'g';
	assert_int_equal(chunk_id_from_hex(upper, CHUNK_ID_HEX_LEN, &id),
			 -EINVAL);
	upper[63] = '\0';
	assert_int_equal(chunk_id_from_hex(upper, CHUNK_ID_HEX_LEN, &id),
			 -EINVAL);
	upper[63] = 'd';
	upper[0] = ' ';
	assert_int_equal(chunk_id_from_hex(upper, CHUNK_ID_HEX_LEN, &id),
			 -EINVAL);
	for (size_t i = 0; i < CHUNK_ID_LEN; i++)
		assert_int_equal(id.b[i], 0x77);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_tiny),
	    cmocka_unit_test(test_auto_threshold),
	    cmocka_unit_test(test_auto_planes),
	    cmocka_unit_test(test_planes_layout),
	    cmocka_unit_test(test_encode_args),
	    cmocka_unit_test(test_truncated),
	    cmocka_unit_test(test_header_fields),
	    cmocka_unit_test(test_bitflip_lz4),
	    cmocka_unit_test(test_bitflip_zstd),
	    cmocka_unit_test(test_bitflip_planes),
	    cmocka_unit_test(test_len_mismatch),
	    cmocka_unit_test(test_zstd_no_content_size),
	    cmocka_unit_test(test_chunk_id),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
