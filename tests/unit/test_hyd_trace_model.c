/*
 * tests/unit/test_hyd_trace_model.c — the model header parser
 * (hydrator/trace/hyd_trace_model.c, hyd_model_parse), on headers built
 * here byte by byte: a safetensors header gives its length and its
 * tensors' exact ranges by offset (zero-length ones dropped), a short
 * read asks for exactly the header, and every lie (a length past the
 * file, bad JSON, duplicate keys, odd data_offsets, overlapping tensors,
 * too many of them, a header over HYD_MODEL_HEAD_MAX) is refused; a GGUF
 * v2/v3 header with every value type, nested arrays and general.alignment
 * gives the aligned data start and each tensor running to the next one's
 * offset, a cut header converges to the same answer through -EAGAIN, and
 * other versions, unknown types, deep arrays, too many dimensions, bad
 * alignments, long strings and offsets past the file are refused;
 * anything else is -ENOTSUP, and hyd_model_free is safe to repeat.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hydrator/trace/hyd_trace.h"
#include "tsupport.h"

/* GGUF value types (gguf.h, enum gguf_type). */
enum {
	T_U8 = 0,
	T_I8,
	T_U16,
	T_I16,
	T_U32,
	T_I32,
	T_F32,
	T_BOOL,
	T_STRING,
	T_ARRAY,
	T_U64,
	T_I64,
	T_F64,
};

/* A growing byte buffer the inputs are built in. */
struct tbuf {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct tbuf *b, const void *p, size_t n)
{
	if (n > b->cap - b->len) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap - b->len < n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		assert_non_null(b->p);
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

/* The low n bytes of v, little-endian. */
static void put_le(struct tbuf *b, uint64_t v, size_t n)
{
	uint8_t x[8];
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	put(b, x, n);
}

static void put_u32(struct tbuf *b, uint32_t v)
{
	put_le(b, v, 4);
}

static void put_u64(struct tbuf *b, uint64_t v)
{
	put_le(b, v, 8);
}

/* n zero bytes (padding, tensor data). */
static void put_zeros(struct tbuf *b, size_t n)
{
	static const uint8_t z[256];

	while (n) {
		size_t k = n < sizeof(z) ? n : sizeof(z);

		put(b, z, k);
		n -= k;
	}
}

/* A GGUF string: u64 length, bytes. */
static void put_str(struct tbuf *b, const char *s)
{
	put_u64(b, strlen(s));
	put(b, s, strlen(s));
}

static void tbuf_free(struct tbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* A safetensors header: N = strlen(json), then the JSON. */
static void st_head(struct tbuf *b, const char *json)
{
	put_u64(b, strlen(json));
	put(b, json, strlen(json));
}

/* The GGUF preamble. */
static void gguf_head(struct tbuf *b, uint32_t version, uint64_t nt,
		      uint64_t nkv)
{
	put(b, "GGUF", 4);
	put_u32(b, version);
	put_u64(b, nt);
	put_u64(b, nkv);
}

/* A key and its type; the caller puts the value. */
static void kv(struct tbuf *b, const char *key, uint32_t type)
{
	put_str(b, key);
	put_u32(b, type);
}

/* A tensor info: name, nd dimensions (2, 3, ...), type F32, offset. */
static void tensor(struct tbuf *b, const char *name, uint32_t nd, uint64_t off)
{
	uint32_t i;

	put_str(b, name);
	put_u32(b, nd);
	for (i = 0; i < nd; i++)
		put_u64(b, i + 2);
	put_u32(b, 0);
	put_u64(b, off);
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* hyd_model_parse must refuse h[0..len) of a size-byte file with want,
 * leaving *ret empty (need set only for -EAGAIN, returned). */
static size_t refused(const void *h, size_t len, uint64_t size, int want)
{
	struct hyd_model m;
	int r;

	memset(&m, 0xa5, sizeof(m));
	r = hyd_model_parse(h, len, size, &m);
	if (r != want)
		fail_msg("hyd_model_parse(len %zu, size %llu) = %d, want %d",
			 len, (unsigned long long)size, r, want);
	assert_int_equal(m.kind, HYD_MODEL_NONE);
	assert_int_equal(m.header, 0);
	assert_null(m.ranges);
	assert_int_equal(m.n, 0);
	assert_int_equal(m.cap, 0);
	if (want == -EAGAIN)
		assert_true(m.need > len && m.need <= HYD_MODEL_HEAD_MAX);
	else
		assert_int_equal(m.need, 0);
	return m.need;
}

/* The whole of b as the file (size = its length) must be refused. */
static void refused_whole(const struct tbuf *b, int want)
{
	refused(b->p, b->len, b->len, want);
}

/* The ranges of m are want[0..n). */
static void assert_ranges(const struct hyd_model *m,
			  const struct hyd_model_range *want, size_t n)
{
	size_t i;

	assert_int_equal(m->n, n);
	assert_non_null(m->ranges);
	for (i = 0; i < n; i++) {
		if (m->ranges[i].off != want[i].off ||
		    m->ranges[i].len != want[i].len)
			fail_msg("range %zu is (%llu, %llu), want (%llu, %llu)",
				 i, (unsigned long long)m->ranges[i].off,
				 (unsigned long long)m->ranges[i].len,
				 (unsigned long long)want[i].off,
				 (unsigned long long)want[i].len);
	}
}

static void assert_same(const struct hyd_model *a, const struct hyd_model *b)
{
	assert_int_equal(a->kind, b->kind);
	assert_int_equal(a->header, b->header);
	assert_ranges(a, b->ranges, b->n);
}

/* ---- safetensors ---- */

/* A safetensors file (header then data_len bytes) must be refused. */
static void st_refused(const char *json, uint64_t data_len, int want)
{
	struct tbuf b = {0};

	st_head(&b, json);
	refused(b.p, b.len, b.len + data_len, want);
	tbuf_free(&b);
}

static const char ST_JSON[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
    "\"c\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[16,40]},"
    "\"empty\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

/* Tensors out of name and offset order come back by offset, each exactly
 * its data_offsets after the header; the empty one is left out. Whole
 * file, header only, padded header, a buffer longer than the file. */
static void test_st_valid(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m, m2;
	uint64_t h = 8 + strlen(ST_JSON), size = h + 40;
	const struct hyd_model_range want[] = {
	    {h, 8}, {h + 8, 8}, {h + 16, 24}};

	(void)state;
	st_head(&b, ST_JSON);
	put_zeros(&b, 40);
	assert_int_equal(b.len, size);
	assert_int_equal(hyd_model_parse(b.p, b.len, size, &m), 0);
	assert_int_equal(m.kind, HYD_MODEL_SAFETENSORS);
	assert_int_equal(m.header, h);
	assert_ranges(&m, want, 3);

	/* The header alone is enough; more than the file is cut to it. */
	assert_int_equal(hyd_model_parse(b.p, (size_t)h, size, &m2), 0);
	assert_same(&m2, &m);
	hyd_model_free(&m2);
	put_zeros(&b, 100);
	assert_int_equal(hyd_model_parse(b.p, b.len, size, &m2), 0);
	assert_same(&m2, &m);
	hyd_model_free(&m2);
	hyd_model_free(&m);
	tbuf_free(&b);

	/* Padding (writers pad N to a multiple of 8 with spaces), an empty
	 * header, only metadata, a tensor ending at the file's end. */
	{
		struct tbuf p = {0};
		const char *json = "{\"x\":{\"data_offsets\":[0,5]}}   ";

		st_head(&p, json);
		assert_int_equal(hyd_model_parse(p.p, p.len, p.len + 5, &m), 0);
		assert_int_equal(m.header, p.len);
		assert_int_equal(m.n, 1);
		assert_int_equal(m.ranges[0].off, p.len);
		assert_int_equal(m.ranges[0].len, 5);
		hyd_model_free(&m);
		tbuf_free(&p);

		st_head(&p, "{}");
		assert_int_equal(hyd_model_parse(p.p, p.len, 10, &m), 0);
		assert_int_equal(m.kind, HYD_MODEL_SAFETENSORS);
		assert_int_equal(m.header, 10);
		assert_int_equal(m.n, 0);
		hyd_model_free(&m);
		tbuf_free(&p);

		st_head(&p, "{\"__metadata__\":{\"a\":\"b\"}}");
		assert_int_equal(hyd_model_parse(p.p, p.len, p.len + 100, &m),
				 0);
		assert_int_equal(m.n, 0);
		hyd_model_free(&m);
		tbuf_free(&p);
	}
}

/* Fewer than 8 + N bytes: -EAGAIN asking for exactly 8 + N (with or
 * without the '{' seen yet), and then it parses. */
static void test_st_short(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;
	uint64_t h = 8 + strlen(ST_JSON);
	size_t len;

	(void)state;
	st_head(&b, ST_JSON);
	put_zeros(&b, 40);
	for (len = 8; len < h; len += len < 12 ? 1 : 17)
		assert_int_equal(refused(b.p, len, b.len, -EAGAIN), h);
	assert_int_equal(refused(b.p, (size_t)h - 1, b.len, -EAGAIN), h);
	assert_int_equal(hyd_model_parse(b.p, (size_t)h, b.len, &m), 0);
	assert_int_equal(m.n, 3);
	hyd_model_free(&m);
	tbuf_free(&b);
}

/* Not safetensors: N past the file, N < 2, the JSON not an object. */
static void test_st_not(void **state)
{
	struct tbuf b = {0};
	uint8_t h[16];

	(void)state;
	st_head(&b, "{\"a\":{\"data_offsets\":[0,4]}}");
	/* N > size - 8: the header does not fit in the file */
	refused(b.p, b.len, b.len - 1, -ENOTSUP);
	refused(b.p, 8, 8 + 3, -ENOTSUP);
	tbuf_free(&b);

	memset(h, 0, sizeof(h));
	refused(h, 16, 1000, -ENOTSUP); /* N = 0 */
	h[0] = 1;
	h[8] = '{';
	refused(h, 16, 1000, -ENOTSUP); /* N = 1 */
	/* N beyond safetensors' own 100 MiB limit */
	memset(h, 0, sizeof(h));
	h[3] = 0x06; /* 0x06000000 = 96 MiB: fine so far */
	h[8] = '{';
	refused(h, 16, 1ull << 40, -EBADMSG); /* but over HEAD_MAX */
	h[3] = 0x07;			      /* 112 MiB */
	refused(h, 16, 1ull << 40, -ENOTSUP);

	st_refused("[1,2,3]", 0, -ENOTSUP);
	st_refused(" {}", 0, -ENOTSUP);
	st_refused("\"{}\"", 0, -ENOTSUP);
	st_refused("xy", 0, -ENOTSUP);
}

/* Claims to be safetensors but the JSON or its offsets are wrong. */
static void test_st_bad(void **state)
{
	(void)state;
	/* not JSON, or more than one value */
	st_refused("{\"a\":", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,1]}", 10, -EBADMSG);
	st_refused("{} {}", 10, -EBADMSG);
	st_refused("{}x", 10, -EBADMSG);
	st_refused("{'a':1}", 10, -EBADMSG);
	/* duplicate keys, tensors or metadata */
	st_refused("{\"a\":{\"data_offsets\":[0,1]},"
		   "\"a\":{\"data_offsets\":[1,2]}}",
		   10, -EBADMSG);
	st_refused("{\"__metadata__\":{},\"__metadata__\":{}}", 10, -EBADMSG);
	/* a tensor that is not an object, without data_offsets */
	st_refused("{\"a\":[0,1]}", 10, -EBADMSG);
	st_refused("{\"a\":{\"dtype\":\"F32\"}}", 10, -EBADMSG);
	st_refused("{\"a\":null}", 10, -EBADMSG);
	/* data_offsets not two integers */
	st_refused("{\"a\":{\"data_offsets\":[]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[1]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,1,2]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,1.0]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[\"0\",1]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,true]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":{\"0\":1}}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,18446744073709551615]}}", 10,
		   -EBADMSG);
	/* negative, begin after end */
	st_refused("{\"a\":{\"data_offsets\":[-1,1]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[-4,-2]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,-1]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[5,4]}}", 10, -EBADMSG);
	/* one byte past the file's end (10 bytes of data) */
	st_refused("{\"a\":{\"data_offsets\":[0,11]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[11,11]}}", 10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,10]},"
		   "\"b\":{\"data_offsets\":[10,11]}}",
		   10, -EBADMSG);
	/* tensors that share bytes (safetensors' rule: they do not) */
	st_refused("{\"a\":{\"data_offsets\":[0,6]},"
		   "\"b\":{\"data_offsets\":[5,10]}}",
		   10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[2,4]},"
		   "\"b\":{\"data_offsets\":[2,4]}}",
		   10, -EBADMSG);
	st_refused("{\"a\":{\"data_offsets\":[0,10]},"
		   "\"b\":{\"data_offsets\":[3,4]}}",
		   10, -EBADMSG);
}

/* A header longer than HYD_MODEL_HEAD_MAX is not read: -EBADMSG rather
 * than -EAGAIN; one that ends exactly there is asked for. */
static void test_st_head_max(void **state)
{
	struct tbuf b = {0};

	(void)state;
	put_u64(&b, HYD_MODEL_HEAD_MAX - 8);
	put(&b, "{\"a\":", 5);
	assert_int_equal(refused(b.p, b.len, 1ull << 32, -EAGAIN),
			 HYD_MODEL_HEAD_MAX);
	tbuf_free(&b);
	put_u64(&b, HYD_MODEL_HEAD_MAX - 7);
	put(&b, "{\"a\":", 5);
	refused(b.p, b.len, 1ull << 32, -EBADMSG);
	refused(b.p, 8, 1ull << 32, -EBADMSG);
	tbuf_free(&b);
}

/* The JSON of n one-byte tensors "0", "1", ... at offsets 0, 1, ...;
 * *ret is its safetensors header. */
static void st_many(struct tbuf *ret, size_t n)
{
	struct tbuf j = {0};
	char item[64];
	size_t i;
	int k;

	put(&j, "{", 1);
	for (i = 0; i < n; i++) {
		k = snprintf(item, sizeof(item),
			     "%s\"%zx\":{\"data_offsets\":[%zu,%zu]}",
			     i ? "," : "", i, i, i + 1);
		put(&j, item, (size_t)k);
	}
	put(&j, "}", 1);
	put_u64(ret, j.len);
	put(ret, j.p, j.len);
	tbuf_free(&j);
}

/* HYD_MODEL_TENSORS_MAX tensors are taken, one more is -EBADMSG. */
static void test_st_tensors_max(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;
	size_t n = HYD_MODEL_TENSORS_MAX;

	(void)state;
	st_many(&b, n);
	assert_true(b.len <= HYD_MODEL_HEAD_MAX);
	assert_int_equal(hyd_model_parse(b.p, b.len, b.len + n, &m), 0);
	assert_int_equal(m.n, n);
	assert_int_equal(m.ranges[n - 1].off, b.len + n - 1);
	assert_int_equal(m.ranges[n - 1].len, 1);
	hyd_model_free(&m);
	tbuf_free(&b);

	st_many(&b, n + 1);
	assert_true(b.len <= HYD_MODEL_HEAD_MAX);
	refused(b.p, b.len, b.len + n + 1, -EBADMSG);
	tbuf_free(&b);
}

/* ---- GGUF ---- */

/* A v3 header: every scalar type, a string, arrays of u32, of strings
 * and of arrays of u8, general.alignment = 64 (u32) last among them;
 * tensors out of order, two at the same offset. *ret_end is where the
 * tensor infos end. */
static void gguf_sample(struct tbuf *b, uint32_t version, size_t *ret_end)
{
	float f = 1.5f;
	double d = -2.25;
	uint32_t fb;
	uint64_t db;

	memcpy(&fb, &f, 4);
	memcpy(&db, &d, 8);
	gguf_head(b, version, 4, 15);
	kv(b, "general.architecture", T_STRING);
	put_str(b, "llama-with-a-long-name");
	kv(b, "x.u8", T_U8);
	put_le(b, 7, 1);
	kv(b, "x.i8", T_I8);
	put_le(b, 0xff, 1);
	kv(b, "x.u16", T_U16);
	put_le(b, 513, 2);
	kv(b, "x.i16", T_I16);
	put_le(b, 0xfffe, 2);
	kv(b, "x.i32", T_I32);
	put_u32(b, (uint32_t)-5);
	kv(b, "x.f32", T_F32);
	put_u32(b, fb);
	kv(b, "x.bool", T_BOOL);
	put_le(b, 1, 1);
	kv(b, "x.u64", T_U64);
	put_u64(b, UINT64_MAX);
	kv(b, "x.i64", T_I64);
	put_u64(b, (uint64_t)-3);
	kv(b, "x.f64", T_F64);
	put_u64(b, db);
	kv(b, "x.arr_u32", T_ARRAY);
	put_u32(b, T_U32);
	put_u64(b, 3);
	put_u32(b, 1);
	put_u32(b, 2);
	put_u32(b, 3);
	kv(b, "tokenizer.ggml.tokens", T_ARRAY);
	put_u32(b, T_STRING);
	put_u64(b, 3);
	put_str(b, "a");
	put_str(b, "bc");
	put_str(b, "");
	kv(b, "x.nested", T_ARRAY); /* [[1, 2, 3], []] of u8 */
	put_u32(b, T_ARRAY);
	put_u64(b, 2);
	put_u32(b, T_U8);
	put_u64(b, 3);
	put_le(b, 0x030201, 3);
	put_u32(b, T_U8);
	put_u64(b, 0);
	kv(b, "general.alignment", T_U32);
	put_u32(b, 64);
	tensor(b, "t.high", 2, 128);
	tensor(b, "t.low", 1, 0);
	tensor(b, "t.mid", 8, 64);
	tensor(b, "t.twin", 0, 64);
	*ret_end = b->len;
}

/* The ranges the sample's tensors give in a file of size bytes whose
 * data starts at h. */
static void sample_want(struct hyd_model_range *want, uint64_t h, uint64_t size)
{
	want[0].off = h;
	want[0].len = 64;
	want[1].off = h + 64;
	want[1].len = 64;
	want[2].off = h + 128;
	want[2].len = size - h - 128;
}

static void test_gguf_valid(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m, m2;
	struct hyd_model_range want[3];
	uint32_t version;
	size_t end;
	uint64_t h, size;

	(void)state;
	for (version = 2; version <= 3; version++) {
		gguf_sample(&b, version, &end);
		h = align_up(end, 64);
		assert_true(h != end && h != align_up(end, 32));
		size = h + 1000;
		sample_want(want, h, size);

		/* The infos alone are enough. */
		assert_int_equal(hyd_model_parse(b.p, b.len, size, &m), 0);
		assert_int_equal(m.kind, HYD_MODEL_GGUF);
		assert_int_equal(m.header, h);
		assert_ranges(&m, want, 3);

		/* The whole file: the same. */
		put_zeros(&b, (size_t)(size - end));
		assert_int_equal(hyd_model_parse(b.p, b.len, size, &m2), 0);
		assert_same(&m2, &m);
		hyd_model_free(&m2);
		hyd_model_free(&m);
		tbuf_free(&b);
	}
}

/* No general.alignment (or one that is not a u32): 32. No tensors. */
static void test_gguf_default_align(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;
	uint64_t h, size;
	int with_u64;

	(void)state;
	for (with_u64 = 0; with_u64 <= 1; with_u64++) {
		gguf_head(&b, 3, 2, 1 + with_u64);
		kv(&b, "general.name", T_STRING);
		put_str(&b, "tiny-model-of-twenty-eight-b");
		if (with_u64) {
			kv(&b, "general.alignment", T_U64);
			put_u64(&b, 64);
		}
		tensor(&b, "b", 1, 32);
		tensor(&b, "a", 2, 0);
		h = align_up(b.len, 32);
		assert_true(h != b.len && h != align_up(b.len, 64));
		size = h + 100;
		assert_int_equal(hyd_model_parse(b.p, b.len, size, &m), 0);
		assert_int_equal(m.kind, HYD_MODEL_GGUF);
		assert_int_equal(m.header, h);
		assert_int_equal(m.n, 2);
		assert_int_equal(m.ranges[0].off, h);
		assert_int_equal(m.ranges[0].len, 32);
		assert_int_equal(m.ranges[1].off, h + 32);
		assert_int_equal(m.ranges[1].len, 68);
		hyd_model_free(&m);
		tbuf_free(&b);
	}

	/* No tensors, no key/values: the header is the 24 bytes, aligned;
	 * a tensor at the very end of the file has no bytes and goes. */
	gguf_head(&b, 3, 0, 0);
	assert_int_equal(hyd_model_parse(b.p, b.len, 32, &m), 0);
	assert_int_equal(m.header, 32);
	assert_int_equal(m.n, 0);
	hyd_model_free(&m);
	tbuf_free(&b);
	gguf_head(&b, 3, 2, 0);
	tensor(&b, "end", 1, 32);
	tensor(&b, "a", 1, 0);
	h = align_up(b.len, 32);
	assert_int_equal(hyd_model_parse(b.p, b.len, h + 32, &m), 0);
	assert_int_equal(m.n, 1);
	assert_int_equal(m.ranges[0].off, h);
	assert_int_equal(m.ranges[0].len, 32);
	hyd_model_free(&m);
	tbuf_free(&b);
}

/* Versions other than 2 and 3 are not ours. */
static void test_gguf_version(void **state)
{
	static const uint32_t bad[] = {0, 1, 4, 0x03000000, UINT32_MAX};
	struct tbuf b = {0};
	size_t end, i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		gguf_sample(&b, bad[i], &end);
		put_zeros(&b, 4096);
		refused_whole(&b, -ENOTSUP);
		tbuf_free(&b);
	}
}

/* A zero value of a known type t (an empty string, an empty array of
 * u8). */
static void put_value(struct tbuf *b, uint32_t t)
{
	static const uint8_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 0, 8, 8, 8};

	if (t == T_ARRAY) {
		put_u32(b, T_U8);
		put_u64(b, 0);
	} else {
		put_zeros(b, t < sizeof(sz) ? sz[t] : 8);
	}
}

/* One key/value of type type (when it is T_ARRAY: an array of one
 * element of type elem), then one tensor; the whole is a file. */
static void gguf_one_kv(struct tbuf *b, uint32_t type, uint32_t elem)
{
	gguf_head(b, 3, 1, 1);
	kv(b, "k", type);
	if (type == T_ARRAY) {
		put_u32(b, elem);
		put_u64(b, 1);
		put_value(b, elem);
	} else {
		put_value(b, type);
	}
	tensor(b, "t", 1, 0);
	put_zeros(b, 256);
}

/* Unknown value types, in a key/value or as an array's element type. */
static void test_gguf_bad_type(void **state)
{
	static const uint32_t bad[] = {13, 14, 255, 0x80000000u, UINT32_MAX};
	struct tbuf b = {0};
	struct hyd_model m;
	size_t i;

	(void)state;
	/* Known types parse. */
	for (i = 0; i <= T_F64; i++) {
		gguf_one_kv(&b, (uint32_t)i, T_U8);
		assert_int_equal(hyd_model_parse(b.p, b.len, b.len, &m), 0);
		hyd_model_free(&m);
		tbuf_free(&b);
		if (i == T_ARRAY)
			continue;
		gguf_one_kv(&b, T_ARRAY, (uint32_t)i);
		assert_int_equal(hyd_model_parse(b.p, b.len, b.len, &m), 0);
		hyd_model_free(&m);
		tbuf_free(&b);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		gguf_one_kv(&b, bad[i], 0);
		refused_whole(&b, -EBADMSG);
		tbuf_free(&b);
		gguf_one_kv(&b, T_ARRAY, bad[i]);
		refused_whole(&b, -EBADMSG);
		tbuf_free(&b);
	}
}

/* Arrays nest GGUF_ARRAY_DEPTH (2) deep: arrays of arrays, no more. */
static void test_gguf_depth(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;
	int deep;

	(void)state;
	for (deep = 0; deep <= 1; deep++) {
		gguf_head(&b, 3, 1, 1);
		kv(&b, "k", T_ARRAY);
		put_u32(&b, T_ARRAY);
		put_u64(&b, 1);
		if (deep) { /* [[[5]]] */
			put_u32(&b, T_ARRAY);
			put_u64(&b, 1);
		}
		put_u32(&b, T_U8);
		put_u64(&b, 1);
		put_le(&b, 5, 1);
		tensor(&b, "t", 1, 0);
		put_zeros(&b, 256);
		if (deep) {
			refused_whole(&b, -EBADMSG);
		} else {
			assert_int_equal(hyd_model_parse(b.p, b.len, b.len, &m),
					 0);
			assert_int_equal(m.n, 1);
			hyd_model_free(&m);
		}
		tbuf_free(&b);
	}
}

/* At most 8 dimensions. */
static void test_gguf_dims(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;

	(void)state;
	gguf_head(&b, 3, 1, 0);
	tensor(&b, "t", 8, 0);
	put_zeros(&b, 256);
	assert_int_equal(hyd_model_parse(b.p, b.len, b.len, &m), 0);
	hyd_model_free(&m);
	tbuf_free(&b);
	gguf_head(&b, 3, 2, 0);
	tensor(&b, "a", 1, 0);
	tensor(&b, "t", 9, 32);
	put_zeros(&b, 256);
	refused_whole(&b, -EBADMSG);
	tbuf_free(&b);
	gguf_head(&b, 3, 1, 0);
	tensor(&b, "t", 0, 0);
	memset(b.p + b.len - 16, 0xff, 4); /* n_dims = 2^32 - 1 */
	put_zeros(&b, 256);
	refused_whole(&b, -EBADMSG);
	tbuf_free(&b);
}

/* A tensor offset past the file; the data start past it. */
static void test_gguf_offset_past(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;
	uint64_t h;

	(void)state;
	gguf_head(&b, 3, 2, 0);
	tensor(&b, "a", 1, 0);
	tensor(&b, "b", 1, 33);
	h = align_up(b.len, 32);
	/* Not the first tensor: one range is already taken when it is
	 * found, and must not be returned. */
	refused(b.p, b.len, h + 32, -EBADMSG);
	assert_int_equal(hyd_model_parse(b.p, b.len, h + 33, &m), 0);
	assert_int_equal(m.n, 1);
	assert_int_equal(m.ranges[0].len, 33);
	hyd_model_free(&m);
	refused(b.p, b.len, h - 1, -EBADMSG);
	tbuf_free(&b);

	gguf_head(&b, 3, 1, 0);
	tensor(&b, "a", 1, UINT64_MAX);
	put_zeros(&b, 256);
	refused_whole(&b, -EBADMSG);
	tbuf_free(&b);
}

/* general.alignment: a power of two from 1 to 65536. */
static void test_gguf_alignment(void **state)
{
	static const uint32_t bad[] = {0,	 3,	      48,
				       1u << 17, 0x80000000u, UINT32_MAX};
	static const uint32_t good[] = {1, 2, 8, 4096, 65536};
	struct tbuf b = {0};
	struct hyd_model m;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		gguf_head(&b, 3, 1, 1);
		kv(&b, "general.alignment", T_U32);
		put_u32(&b, good[i]);
		tensor(&b, "t", 1, 0);
		assert_int_equal(hyd_model_parse(b.p, b.len, 1 << 17, &m), 0);
		assert_int_equal(m.header, align_up(b.len, good[i]));
		assert_int_equal(m.n, 1);
		assert_int_equal(m.ranges[0].len, (1 << 17) - m.header);
		hyd_model_free(&m);
		tbuf_free(&b);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		gguf_head(&b, 3, 1, 1);
		kv(&b, "general.alignment", T_U32);
		put_u32(&b, bad[i]);
		tensor(&b, "t", 1, 0);
		refused(b.p, b.len, 1 << 20, -EBADMSG);
		tbuf_free(&b);
	}
}

/* A header cut anywhere asks for more (-EAGAIN, need > len) until it
 * parses, to the same answer as the whole; a file that ends inside its
 * header is -EBADMSG. */
static void test_gguf_cut(void **state)
{
	static const size_t starts[] = {4, 5, 7, 8, 23, 24, 25, 100, 1000};
	struct tbuf b = {0};
	struct hyd_model whole, m;
	char name[32];
	size_t end, i, cur, steps;
	uint64_t size;
	int r;

	(void)state;
	gguf_head(&b, 3, 40, 2);
	kv(&b, "tokenizer.ggml.tokens", T_ARRAY);
	put_u32(&b, T_STRING);
	put_u64(&b, 300);
	for (i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "token-%zu", i);
		put_str(&b, name);
	}
	kv(&b, "general.alignment", T_U32);
	put_u32(&b, 256);
	for (i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "blk.%zu.weight", i);
		tensor(&b, name, 2, (39 - i) * 512);
	}
	end = b.len;
	size = align_up(end, 256) + 40 * 512;
	put_zeros(&b, (size_t)(size - end));
	assert_int_equal(hyd_model_parse(b.p, b.len, size, &whole), 0);
	assert_int_equal(whole.n, 40);
	assert_int_equal(whole.header, align_up(end, 256));

	for (i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		cur = starts[i];
		steps = 0;
		for (;;) {
			memset(&m, 0, sizeof(m));
			r = hyd_model_parse(b.p, cur, size, &m);
			if (r != -EAGAIN)
				break;
			assert_null(m.ranges);
			assert_true(m.need > cur && m.need <= size);
			cur = m.need;
			assert_true(++steps < 64);
		}
		assert_int_equal(r, 0);
		assert_true(cur >= end);
		assert_same(&m, &whole);
		hyd_model_free(&m);
	}
	/* Every cut point of the infos: -EAGAIN, or the answer when it is
	 * past their end; the file ending there: -EBADMSG. */
	for (cur = 4; cur < end; cur += 7) {
		refused(b.p, cur, size, -EAGAIN);
		refused(b.p, cur, cur, -EBADMSG);
	}
	hyd_model_free(&whole);
	tbuf_free(&b);
}

/* A string over 64 KiB: a key, a value, one in an array, a tensor's
 * name; 64 KiB exactly is fine. */
static void test_gguf_long_string(void **state)
{
	struct tbuf b = {0};
	struct hyd_model m;
	int where;

	(void)state;
	for (where = 0; where < 4; where++) {
		gguf_head(&b, 3, 1, 1);
		switch (where) {
		case 0: /* the key */
			put_u64(&b, 65537);
			break;
		case 1: /* a string value */
			kv(&b, "k", T_STRING);
			put_u64(&b, 65537);
			break;
		case 2: /* the second string of an array */
			kv(&b, "k", T_ARRAY);
			put_u32(&b, T_STRING);
			put_u64(&b, 2);
			put_str(&b, "ok");
			put_u64(&b, 65537);
			break;
		default: /* the tensor's name */
			kv(&b, "k", T_STRING);
			put_str(&b, "v");
			put_u64(&b, 65537);
			break;
		}
		put_zeros(&b, 70000);
		refused_whole(&b, -EBADMSG);
		tbuf_free(&b);
	}

	gguf_head(&b, 3, 1, 1);
	put_u64(&b, 65536);
	put_zeros(&b, 65536);
	put_u32(&b, T_U8);
	put_le(&b, 1, 1);
	put_u64(&b, 65536);
	put_zeros(&b, 65536);
	put_u32(&b, 1);
	put_u64(&b, 10);
	put_u32(&b, 0);
	put_u64(&b, 0);
	put_zeros(&b, 256);
	assert_int_equal(hyd_model_parse(b.p, b.len, b.len, &m), 0);
	assert_int_equal(m.n, 1);
	hyd_model_free(&m);
	tbuf_free(&b);
}

/* Counts over the limits: tensors over HYD_MODEL_TENSORS_MAX, key/values
 * over 2^20. */
static void test_gguf_counts(void **state)
{
	struct tbuf b = {0};

	(void)state;
	gguf_head(&b, 3, HYD_MODEL_TENSORS_MAX + 1ull, 0);
	put_zeros(&b, 4096);
	refused_whole(&b, -EBADMSG);
	tbuf_free(&b);
	gguf_head(&b, 3, 0, (1u << 20) + 1ull);
	put_zeros(&b, 4096);
	refused_whole(&b, -EBADMSG);
	tbuf_free(&b);
	gguf_head(&b, 3, UINT64_MAX, UINT64_MAX);
	put_zeros(&b, 4096);
	refused_whole(&b, -EBADMSG);
	tbuf_free(&b);
}

/* ---- neither ---- */

/* Random bytes and inputs under 8 bytes are not a model (except "GGUF"
 * and a little more, which asks for more). */
static void test_neither(void **state)
{
	uint8_t *r, z[8] = {0x10, 0, 0, 0, 0, 0, 0, 0};
	uint64_t seed;
	size_t len;

	(void)state;
	for (seed = 1; seed <= 32; seed++) {
		r = tsup_random_bytes(4096, seed);
		assert_true(memcmp(r, "GGUF", 4) != 0);
		refused(r, 4096, 4096, -ENOTSUP);
		refused(r, 4096, 1ull << 30, -ENOTSUP);
		free(r);
	}
	for (len = 0; len < 8; len++) {
		refused(z, len, 1000, -ENOTSUP);
		refused("{\"a\":1}", len, 1000, -ENOTSUP);
	}
	refused("GGU", 3, 1000, -ENOTSUP);
	for (len = 4; len < 8; len++)
		refused("GGUF\3\0\0\0", len, 1000, -EAGAIN);
	refused("GGUF\3\0\0\0", 8, 8, -EBADMSG); /* the file ends there */
	refused("", 0, 0, -ENOTSUP);
}

/* hyd_model_free on NULL, a zeroed struct, twice after a parse. */
static void test_model_free(void **state)
{
	struct hyd_model m;
	struct tbuf b = {0};

	(void)state;
	hyd_model_free(NULL);
	memset(&m, 0, sizeof(m));
	hyd_model_free(&m);
	hyd_model_free(&m);
	st_head(&b, ST_JSON);
	assert_int_equal(hyd_model_parse(b.p, b.len, b.len + 40, &m), 0);
	hyd_model_free(&m);
	assert_null(m.ranges);
	assert_int_equal(m.n, 0);
	hyd_model_free(&m);
	tbuf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_st_valid),
	    cmocka_unit_test(test_st_short),
	    cmocka_unit_test(test_st_not),
	    cmocka_unit_test(test_st_bad),
	    cmocka_unit_test(test_st_head_max),
	    cmocka_unit_test(test_st_tensors_max),
	    cmocka_unit_test(test_gguf_valid),
	    cmocka_unit_test(test_gguf_default_align),
	    cmocka_unit_test(test_gguf_version),
	    cmocka_unit_test(test_gguf_bad_type),
	    cmocka_unit_test(test_gguf_depth),
	    cmocka_unit_test(test_gguf_dims),
	    cmocka_unit_test(test_gguf_offset_past),
	    cmocka_unit_test(test_gguf_alignment),
	    cmocka_unit_test(test_gguf_cut),
	    cmocka_unit_test(test_gguf_long_string),
	    cmocka_unit_test(test_gguf_counts),
	    cmocka_unit_test(test_neither),
	    cmocka_unit_test(test_model_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
