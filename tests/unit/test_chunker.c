/*
 * tests/unit/test_chunker.c — FastCDC chunker: bounds, determinism, the
 * golden cut points that pin the format, and resistance to shifting edits
 * (the property content-defined chunking exists for).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog/catalog.h"
#include "tsupport.h"

/* n pseudo-random bytes (n a multiple of 8), little-endian words. */
static uint8_t *random_bytes(size_t n, uint64_t seed)
{
	uint8_t *b = malloc(n);

	assert_non_null(b);
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = tsup_splitmix64(&seed);

		for (int k = 0; k < 8; k++)
			b[i + k] = (uint8_t)(v >> (8 * k));
	}
	return b;
}

struct chunk_list {
	size_t n, cap;
	size_t *off, *len;
	chunk_id *id;
};

static void list_free(struct chunk_list *l)
{
	free(l->off);
	free(l->len);
	free(l->id);
	memset(l, 0, sizeof(*l));
}

static void list_push(struct chunk_list *l, size_t off, size_t len,
		      const uint8_t *data)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->off = realloc(l->off, l->cap * sizeof(*l->off));
		l->len = realloc(l->len, l->cap * sizeof(*l->len));
		l->id = realloc(l->id, l->cap * sizeof(*l->id));
		assert_non_null(l->off);
		assert_non_null(l->len);
		assert_non_null(l->id);
	}
	l->off[l->n] = off;
	l->len[l->n] = len;
	assert_int_equal(chunk_id_compute(data + off, len, &l->id[l->n]), 0);
	l->n++;
}

/* Chunk a whole "file" the way the scanner does. */
static void chunk_all(const chunk_params *p, const uint8_t *data, size_t n,
		      struct chunk_list *ret)
{
	size_t off = 0;

	memset(ret, 0, sizeof(*ret));
	while (off < n) {
		size_t left = n - off;
		size_t c =
		    chunker_next(p, data + off, left < p->max ? left : p->max);

		assert_true(c >= 1);
		assert_true(c <= left && c <= p->max);
		list_push(ret, off, c, data);
		off += c;
	}
}

/* Fixed-size chunking, the strawman the stability test must beat. */
static void chunk_fixed(size_t size, const uint8_t *data, size_t n,
			struct chunk_list *ret)
{
	memset(ret, 0, sizeof(*ret));
	for (size_t off = 0; off < n; off += size)
		list_push(ret, off, n - off < size ? n - off : size, data);
}

static int list_has(const struct chunk_list *l, const chunk_id *id)
{
	for (size_t i = 0; i < l->n; i++)
		if (memcmp(l->id[i].b, id->b, CHUNK_ID_LEN) == 0)
			return 1;
	return 0;
}

/* Share of a's chunks that start at or after `from` and appear in b. */
static double survivors(const struct chunk_list *a, const struct chunk_list *b,
			size_t from)
{
	size_t total = 0, kept = 0;

	for (size_t i = 0; i < a->n; i++) {
		if (a->off[i] < from)
			continue;
		total++;
		kept += (size_t)list_has(b, &a->id[i]);
	}
	assert_true(total > 0);
	return (double)kept / (double)total;
}

static void test_params(void **state)
{
	chunk_params p;

	(void)state;
	chunk_params_default(&p);
	assert_int_equal(p.min, CHUNK_MIN_DEFAULT);
	assert_int_equal(p.avg, CHUNK_AVG_DEFAULT);
	assert_int_equal(p.max, CHUNK_MAX_DEFAULT);
	assert_int_equal(chunk_params_check(&p), 0);

	assert_int_equal(chunk_params_check(NULL), -EINVAL);
	p = (chunk_params){64, 128, 129};
	assert_int_equal(chunk_params_check(&p), 0);
	p = (chunk_params){63, 128, 256}; /* min too small */
	assert_int_equal(chunk_params_check(&p), -EINVAL);
	p = (chunk_params){128, 128, 256}; /* min == avg */
	assert_int_equal(chunk_params_check(&p), -EINVAL);
	p = (chunk_params){64, 256, 256}; /* avg == max */
	assert_int_equal(chunk_params_check(&p), -EINVAL);
	p = (chunk_params){64, 192, 256}; /* avg not a power of two */
	assert_int_equal(chunk_params_check(&p), -EINVAL);
	p = (chunk_params){1024, 4096, CHUNK_MAX_LIMIT + 1};
	assert_int_equal(chunk_params_check(&p), -EINVAL);
	p = (chunk_params){1024, 4u << 20, CHUNK_MAX_LIMIT};
	assert_int_equal(chunk_params_check(&p), 0);
	p = (chunk_params){0, 0, 0};
	assert_int_equal(chunk_params_check(&p), -EINVAL);
}

/* Bounds and mean size on random data, for the defaults and a small set
 * that exercises many cuts (and odd lengths at the tail). */
static void check_bounds(const chunk_params *p, size_t n, uint64_t seed)
{
	uint8_t *data = random_bytes(n, seed);
	struct chunk_list l;
	double mean;

	/* An odd total length so the last chunk is a short tail. */
	n -= 5;
	chunk_all(p, data, n, &l);
	assert_true(l.n > 10);
	for (size_t i = 0; i + 1 < l.n; i++) {
		assert_true(l.len[i] >= p->min);
		assert_true(l.len[i] <= p->max);
	}
	assert_true(l.len[l.n - 1] >= 1 && l.len[l.n - 1] <= p->max);
	assert_int_equal(l.off[l.n - 1] + l.len[l.n - 1], n);
	mean = (double)n / (double)l.n;
	assert_true(mean >= 0.5 * p->avg);
	assert_true(mean <= 2.0 * p->avg);
	list_free(&l);
	free(data);
}

static void test_bounds_default(void **state)
{
	chunk_params p;

	(void)state;
	chunk_params_default(&p);
	check_bounds(&p, 16u << 20, 1);
}

static void test_bounds_small(void **state)
{
	chunk_params p = {64, 256, 1024};

	(void)state;
	check_bounds(&p, 1u << 20, 2);
	p = (chunk_params){1000, 2048, 3000};
	check_bounds(&p, 1u << 20, 3);
}

/*
 * Golden cut points: the chunker is part of the catalog format, so any
 * change to the algorithm or the gear table must fail here. Input is the
 * splitmix64 stream from seed 42, 8 little-endian bytes per output.
 */
static void test_golden(void **state)
{
	static const size_t want_default[] = {
	    86140,  61595,  111066, 67347, 79091, 70098,
	    100915, 103455, 78751,  72289, 79663, 45667,
	};
	static const size_t want_small[] = {
	    249, 293, 275, 257, 422, 389, 213, 379,
	    331, 291, 313, 310, 172, 174, 407, 229,
	};
	size_t n = 2u << 20, off = 0;
	uint8_t *data = random_bytes(n, 42);
	chunk_params p;

	(void)state;
	chunk_params_default(&p);
	for (size_t i = 0; i < sizeof(want_default) / sizeof(*want_default);
	     i++) {
		size_t c = chunker_next(&p, data + off, p.max);

		assert_int_equal(c, want_default[i]);
		off += c;
	}
	p = (chunk_params){64, 256, 1024};
	off = 0;
	for (size_t i = 0; i < sizeof(want_small) / sizeof(*want_small); i++) {
		size_t c = chunker_next(&p, data + off, p.max);

		assert_int_equal(c, want_small[i]);
		off += c;
	}
	free(data);
}

static void test_deterministic(void **state)
{
	size_t n = 4u << 20;
	uint8_t *data = random_bytes(n, 7);
	uint8_t *copy = malloc(n);
	struct chunk_list a, b;
	chunk_params p;

	(void)state;
	assert_non_null(copy);
	memcpy(copy, data, n);
	chunk_params_default(&p);
	chunk_all(&p, data, n, &a);
	/* Another buffer (other alignment, other address) and another run
	 * must cut at the same places. */
	chunk_all(&p, copy, n, &b);
	assert_int_equal(a.n, b.n);
	for (size_t i = 0; i < a.n; i++) {
		assert_int_equal(a.off[i], b.off[i]);
		assert_int_equal(a.len[i], b.len[i]);
		assert_memory_equal(a.id[i].b, b.id[i].b, CHUNK_ID_LEN);
	}
	/* A cut depends only on the bytes of its chunk, so chunking from a
	 * boundary in the middle gives the same tail. */
	{
		size_t mid = a.n / 2;
		size_t c = chunker_next(&p, copy + a.off[mid],
					n - a.off[mid] < p.max ? n - a.off[mid]
							       : p.max);
		assert_int_equal(c, a.len[mid]);
	}
	list_free(&a);
	list_free(&b);
	free(copy);
	free(data);
}

/*
 * Insert 100 bytes at offset 1000 of an 8 MiB file. Content-defined cuts
 * resynchronise after the edit, so nearly every later chunk keeps its id.
 * The same measure under fixed-size chunking is near zero (everything
 * shifts), which shows the threshold actually tests something.
 */
static void test_stability_insert(void **state)
{
	const size_t n = 8u << 20, at = 1000, ins = 100;
	uint8_t *data = random_bytes(n, 99);
	uint8_t *edited = malloc(n + ins);
	struct chunk_list a, b, fa, fb;
	chunk_params p;
	double kept, kept_fixed;

	(void)state;
	assert_non_null(edited);
	memcpy(edited, data, at);
	for (size_t i = 0; i < ins; i++)
		edited[at + i] = (uint8_t)(0xA5 ^ i);
	memcpy(edited + at + ins, data + at, n - at);

	chunk_params_default(&p);
	chunk_all(&p, data, n, &a);
	chunk_all(&p, edited, n + ins, &b);
	/* The chunk that holds the edit changed... */
	assert_memory_not_equal(a.id[0].b, b.id[0].b, CHUNK_ID_LEN);
	/* ...and the chunks after it survived. */
	kept = survivors(&a, &b, at);
	print_message("cdc: %zu chunks, %.1f%% kept after the edit\n", a.n,
		      100.0 * kept);
	assert_true(kept >= 0.90);

	chunk_fixed(p.avg, data, n, &fa);
	chunk_fixed(p.avg, edited, n + ins, &fb);
	assert_memory_not_equal(fa.id[0].b, fb.id[0].b, CHUNK_ID_LEN);
	kept_fixed = survivors(&fa, &fb, at);
	print_message("fixed: %zu chunks, %.1f%% kept after the edit\n", fa.n,
		      100.0 * kept_fixed);
	assert_true(kept_fixed < 0.90);

	list_free(&a);
	list_free(&b);
	list_free(&fa);
	list_free(&fb);
	free(edited);
	free(data);
}

/* Deleting bytes must resynchronise just as well. */
static void test_stability_delete(void **state)
{
	const size_t n = 8u << 20, at = 300000, del = 37;
	uint8_t *data = random_bytes(n, 123);
	uint8_t *edited = malloc(n);
	struct chunk_list a, b;
	chunk_params p;

	(void)state;
	assert_non_null(edited);
	memcpy(edited, data, at);
	memcpy(edited + at, data + at + del, n - at - del);
	chunk_params_default(&p);
	chunk_all(&p, data, n, &a);
	chunk_all(&p, edited, n - del, &b);
	assert_true(survivors(&a, &b, at) >= 0.90);
	list_free(&a);
	list_free(&b);
	free(edited);
	free(data);
}

static void test_small_and_edge(void **state)
{
	uint8_t *data = random_bytes(1u << 20, 5);
	chunk_params p;

	(void)state;
	chunk_params_default(&p);
	assert_int_equal(chunker_next(&p, data, 0), 0);
	assert_int_equal(chunker_next(&p, data, 1), 1);
	/* Smaller than (or exactly) min: one chunk, the whole file. */
	assert_int_equal(chunker_next(&p, data, p.min - 1), p.min - 1);
	assert_int_equal(chunker_next(&p, data, p.min), p.min);
	/* Slightly more than min: a cut is possible but never before min. */
	{
		size_t c = chunker_next(&p, data, p.min + 100);

		assert_true(c > p.min && c <= p.min + 100);
	}
	/* A caller passing more than max still gets at most max. */
	assert_true(chunker_next(&p, data, 1u << 20) <= p.max);
	free(data);
}

static void test_zeros(void **state)
{
	const size_t n = 3 * CHUNK_MAX_DEFAULT + 12345;
	uint8_t *zero = calloc(1, n);
	struct chunk_list l;
	chunk_params p;

	(void)state;
	assert_non_null(zero);
	chunk_params_default(&p);
	chunk_all(&p, zero, n, &l);
	/* A constant run never matches a mask: every cut is the forced one,
	 * and all the full chunks are one id (dedup of sparse regions). */
	assert_int_equal(l.n, 4);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(l.len[i], p.max);
		assert_memory_equal(l.id[i].b, l.id[0].b, CHUNK_ID_LEN);
	}
	assert_int_equal(l.len[3], 12345);
	list_free(&l);
	free(zero);
}

/*
 * The chunker finds its cuts with interleaved lanes (see cat_chunker.c);
 * this is the definition it must match cut for cut: the plain byte loop
 * over a gear table rebuilt here from its documented recipe (splitmix64
 * seeded with "ferrygea"), so the table is pinned too.
 */
struct ref_chunker {
	uint64_t gear[256];
};

static void ref_init(struct ref_chunker *rc)
{
	uint64_t st = UINT64_C(0x6665727279676561);

	for (int i = 0; i < 256; i++)
		rc->gear[i] = tsup_splitmix64(&st);
}

static size_t ref_next(const struct ref_chunker *rc, const chunk_params *p,
		       const uint8_t *buf, size_t len)
{
	unsigned bits = (unsigned)__builtin_ctz(p->avg);
	uint64_t hard = ~UINT64_C(0) << (64 - (bits + 2));
	uint64_t easy = ~UINT64_C(0) << (64 - (bits - 2));
	uint64_t h = 0;

	if (len == 0)
		return 0;
	if (len <= p->min)
		return len;
	if (len > p->max)
		len = p->max;
	for (size_t i = p->min; i < len; i++) {
		h = (h << 1) + rc->gear[buf[i]];
		if (!(h & (i < p->avg ? hard : easy)))
			return i + 1;
	}
	return len;
}

/* Inputs of different texture: uniform bytes, a 16-letter alphabet (so
 * hashes repeat more), and long runs broken by random bytes (so some
 * stretches never match and others match at once). */
static uint8_t *textured_bytes(size_t n, uint64_t seed, int kind)
{
	uint8_t *b = random_bytes(n, seed);
	size_t i;

	if (kind == 1) {
		for (i = 0; i < n; i++)
			b[i] = (uint8_t)('a' + (b[i] & 15));
	} else if (kind == 2) {
		uint8_t run = 0;

		for (i = 0; i < n; i++) {
			if (b[i] < 3)
				run = b[(i * 7) % n];
			else if (b[i] < 40)
				continue; /* keep the random byte */
			b[i] = run;
		}
	}
	return b;
}

/* Every cut of a whole "file", and of calls at odd offsets with odd
 * lengths (tails shorter than max), equals the reference. */
static void check_against_ref(const struct ref_chunker *rc,
			      const chunk_params *p, const uint8_t *data,
			      size_t n, uint64_t seed, size_t *ret_cuts)
{
	size_t off = 0, cuts = 0;

	while (off < n) {
		size_t left = n - off;
		size_t len = left < p->max ? left : p->max;
		size_t want = ref_next(rc, p, data + off, len);

		assert_int_equal(chunker_next(p, data + off, len), want);
		off += want;
		cuts++;
	}
	for (int k = 0; k < 300; k++) {
		size_t at = (size_t)(tsup_splitmix64(&seed) % n);
		size_t len = (size_t)(tsup_splitmix64(&seed) % (p->max + 1));

		if (len > n - at)
			len = n - at;
		assert_int_equal(chunker_next(p, data + at, len),
				 ref_next(rc, p, data + at, len));
	}
	*ret_cuts = cuts;
}

static void test_matches_reference(void **state)
{
	/* From rare matches over long stretches (whole lanes without a cut)
	 * to a match every ~32 bytes (several lanes matching in the same
	 * step, so the first one in position order must win). */
	static const chunk_params sets[] = {
	    {CHUNK_MIN_DEFAULT, CHUNK_AVG_DEFAULT, CHUNK_MAX_DEFAULT},
	    {64, 128, 65536},
	    {64, 256, 1024},
	    {1000, 2048, 3000},
	    {100, 4096, 65536},
	    {333, 16384, 100000},
	    {4096, 1u << 20, 4u << 20},
	};
	const size_t n = 3u << 20;
	struct ref_chunker rc;

	(void)state;
	ref_init(&rc);
	for (int kind = 0; kind < 3; kind++) {
		uint8_t *data = textured_bytes(n, 1000 + (uint64_t)kind, kind);

		for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++) {
			size_t cuts;

			assert_int_equal(chunk_params_check(&sets[s]), 0);
			check_against_ref(&rc, &sets[s], data, n, 77 + s,
					  &cuts);
			/* the inputs must make content cuts, or this test
			 * would only check the forced ones */
			if (kind == 0)
				assert_true(cuts > n / sets[s].max + 1);
		}
		free(data);
	}
}

/* A cut found in one lane must lose to an earlier one in another: place
 * a matching window by hand. With {64, 128, max} a match anywhere past
 * 128 needs only the top 5 hash bits zero; search a long stretch of one
 * repeated byte (which never matches) with a random region dropped in at
 * every offset of a stripe. */
static void test_lane_boundaries(void **state)
{
	const chunk_params p = {64, 128, 65536};
	const size_t n = 65536;
	uint8_t *data = malloc(n), *noise = random_bytes(4096, 5);
	struct ref_chunker rc;
	size_t c0 = 0;

	(void)state;
	assert_non_null(data);
	ref_init(&rc);
	memset(data, 0, n);
	assert_int_equal(chunker_next(&p, data, n), n); /* zeros never cut */
	for (size_t at = 128; at < 9000; at += 37) {
		size_t want, got;

		memset(data, 0, n);
		memcpy(data + at, noise + (at % 2048), 40);
		want = ref_next(&rc, &p, data, n);
		got = chunker_next(&p, data, n);
		assert_int_equal(got, want);
		c0 += want < n;
	}
	/* most placements produce a content cut, so lanes were exercised */
	assert_true(c0 > 100);
	free(noise);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_params),
	    cmocka_unit_test(test_bounds_default),
	    cmocka_unit_test(test_bounds_small),
	    cmocka_unit_test(test_golden),
	    cmocka_unit_test(test_deterministic),
	    cmocka_unit_test(test_stability_insert),
	    cmocka_unit_test(test_stability_delete),
	    cmocka_unit_test(test_small_and_edge),
	    cmocka_unit_test(test_zeros),
	    cmocka_unit_test(test_matches_reference),
	    cmocka_unit_test(test_lane_boundaries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
