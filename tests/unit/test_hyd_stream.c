/*
 * tests/unit/test_hyd_stream.c — a sequential reader's readahead window
 * (hydrator/read/hyd_stream.c): it grows while the stream goes on and
 * stops at the cap, a jump starts over at the initial window, reads that
 * finish out of order still count as the stream, nothing is asked for
 * twice or past the end of the file, and the cap follows the link.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hydrator/read/hyd_stream_priv.h"

#define MIB (1ull << 20)
#define REQ (128ull << 10) /* a kernel read */

/* Read [0, upto) in kernel-sized requests; the bytes asked for ahead are
 * checked to be contiguous and never asked for twice. Returns the
 * window. */
static uint64_t read_seq(struct hyd_stream *s, uint64_t from, uint64_t upto,
			 uint64_t size, uint64_t cap, uint64_t *asked_end)
{
	struct hyd_stream_ahead h;
	uint64_t off;

	for (off = from; off < upto; off += REQ) {
		if (hyd_stream_note(s, off, off + REQ, size, cap, &h) &&
		    h.a < h.b) {
			assert_true(h.b <= size);
			assert_true(h.a >= off + REQ); /* ahead, not behind */
			if (*asked_end)
				assert_int_equal(h.a, *asked_end);
			*asked_end = h.b;
			/* decoding stays within a step of the reader */
			if (h.da < h.db)
				assert_true(h.db <= s->hi + HYD_STREAM_DECODE);
		}
	}
	return s->window;
}

static void test_grows_to_cap(void **state)
{
	struct hyd_stream s;
	uint64_t cap = 16 * MIB, asked = 0, w, last = 0;
	uint64_t off;

	(void)state;
	hyd_stream_init(&s);
	assert_int_equal(s.window, HYD_STREAM_INIT);
	/* It grows step by step, never past the cap. */
	for (off = 0; off < 64 * MIB; off += 4 * MIB) {
		w = read_seq(&s, off, off + 4 * MIB, 1ull << 40, cap, &asked);
		assert_true(w >= last);
		assert_true(w <= cap);
		last = w;
	}
	assert_int_equal(s.window, cap);
	/* And keeps the window asked for ahead of the reader. */
	assert_int_equal(asked, 64 * MIB + cap);
	/* A smaller cap takes effect at once. */
	read_seq(&s, 64 * MIB, 64 * MIB + REQ, 1ull << 40, 4 * MIB, &asked);
	assert_int_equal(s.window, 4 * MIB);
}

static void test_growth_needs_reading(void **state)
{
	struct hyd_stream s;
	uint64_t asked = 0;

	(void)state;
	hyd_stream_init(&s);
	/* Reading less than half the first window does not grow it. */
	read_seq(&s, 0, HYD_STREAM_INIT / 2 - REQ, 1ull << 40, 64 * MIB,
		 &asked);
	assert_int_equal(s.window, HYD_STREAM_INIT);
	read_seq(&s, HYD_STREAM_INIT / 2 - REQ, HYD_STREAM_INIT, 1ull << 40,
		 64 * MIB, &asked);
	assert_true(s.window > HYD_STREAM_INIT);
}

static void test_jump_resets(void **state)
{
	struct hyd_stream s;
	struct hyd_stream_ahead h;
	uint64_t asked = 0;

	(void)state;
	hyd_stream_init(&s);
	read_seq(&s, 0, 32 * MIB, 1ull << 40, 64 * MIB, &asked);
	assert_true(s.window > 4 * MIB);
	/* Far ahead: a new stream, nothing asked for yet. */
	assert_int_equal(hyd_stream_note(&s, 512 * MIB, 512 * MIB + REQ,
					 1ull << 40, 64 * MIB, &h),
			 0);
	assert_int_equal(s.window, HYD_STREAM_INIT);
	/* Its next read continues it and asks for the initial window, and
	 * decodes the first of it. */
	assert_int_equal(hyd_stream_note(&s, 512 * MIB + REQ,
					 512 * MIB + 2 * REQ, 1ull << 40,
					 64 * MIB, &h),
			 1);
	assert_int_equal(h.a, 512 * MIB + 2 * REQ);
	assert_int_equal(h.b, 512 * MIB + 2 * REQ + HYD_STREAM_INIT);
	assert_int_equal(h.da, 512 * MIB + 2 * REQ);
	assert_int_equal(h.db, 512 * MIB + 2 * REQ + HYD_STREAM_DECODE);
	/* Back to the start of the file: a jump too. */
	assert_int_equal(hyd_stream_note(&s, 0, REQ, 1ull << 40, 64 * MIB, &h),
			 0);
	assert_int_equal(s.window, HYD_STREAM_INIT);
}

static void test_out_of_order(void **state)
{
	struct hyd_stream s;
	struct hyd_stream_ahead h;
	uint64_t asked = 0;

	(void)state;
	hyd_stream_init(&s);
	read_seq(&s, 0, 8 * MIB, 1ull << 40, 64 * MIB, &asked);
	/* Requests of one reader finish out of order: one that ends behind
	 * the furthest read is still the stream and asks for nothing new. */
	assert_int_equal(hyd_stream_note(&s, 8 * MIB - 3 * REQ,
					 8 * MIB - 2 * REQ, 1ull << 40,
					 64 * MIB, &h),
			 0);
	assert_true(s.window > HYD_STREAM_INIT);
	assert_int_equal(s.hi, 8 * MIB);
}

/* The kernel's own readahead sends reads ahead of the furthest one
 * answered, out of order: they continue the stream (and move it on),
 * they do not start a new one. */
static void test_kernel_readahead(void **state)
{
	struct hyd_stream s;
	struct hyd_stream_ahead h;
	uint64_t asked = 0, w;

	(void)state;
	hyd_stream_init(&s);
	read_seq(&s, 0, 8 * MIB, 1ull << 40, 64 * MIB, &asked);
	w = s.window;
	assert_true(w > HYD_STREAM_INIT);
	/* 5 MiB ahead of the stream's end, then the gap behind it. */
	hyd_stream_note(&s, 13 * MIB, 14 * MIB, 1ull << 40, 64 * MIB, &h);
	assert_int_equal(s.hi, 14 * MIB);
	assert_true(s.window >= w);
	hyd_stream_note(&s, 8 * MIB, 9 * MIB, 1ull << 40, 64 * MIB, &h);
	assert_int_equal(s.hi, 14 * MIB);
	assert_true(s.window >= w);
	/* Past the slack: a jump. */
	assert_int_equal(
	    hyd_stream_note(&s, 14 * MIB + HYD_STREAM_SLACK + s.window + MIB,
			    15 * MIB + HYD_STREAM_SLACK + s.window + MIB,
			    1ull << 40, 64 * MIB, &h),
	    0);
	assert_int_equal(s.window, HYD_STREAM_INIT);
}

static void test_end_of_file(void **state)
{
	struct hyd_stream s;
	struct hyd_stream_ahead h;
	uint64_t asked = 0, size = 3 * MIB + 7;

	(void)state;
	hyd_stream_init(&s);
	read_seq(&s, 0, size, size, 64 * MIB, &asked);
	assert_int_equal(asked, size);
	/* At the end, nothing more. */
	assert_int_equal(
	    hyd_stream_note(&s, size - 7, size, size, 64 * MIB, &h), 0);
}

static void test_cap(void **state)
{
	(void)state;
	/* 1 Gbit/s at 50 ms: 6.25 MB in flight, four times that as the
	 * cap. */
	assert_int_equal(hyd_stream_cap(125000000ull, 50000000ull, UINT64_MAX),
			 25000000ull);
	/* 10 Gbit/s at 50 ms wants 250 MB; at 100 ms more than the most. */
	assert_int_equal(hyd_stream_cap(1250000000ull, 50000000ull, UINT64_MAX),
			 250000000ull);
	assert_int_equal(
	    hyd_stream_cap(1250000000ull, 100000000ull, UINT64_MAX),
	    HYD_STREAM_MAX);
	assert_int_equal(
	    hyd_stream_cap(12500000000ull, 150000000ull, UINT64_MAX),
	    HYD_STREAM_MAX);
	/* Loopback: tiny product, the least window. */
	assert_int_equal(hyd_stream_cap(2000000000ull, 100000ull, UINT64_MAX),
			 HYD_STREAM_INIT);
	/* Not measured yet: a middle value within the bounds. */
	assert_true(hyd_stream_cap(0, 0, UINT64_MAX) > HYD_STREAM_INIT);
	assert_true(hyd_stream_cap(0, 0, UINT64_MAX) < HYD_STREAM_MAX);
	/* A disk nearly full bounds it. */
	assert_int_equal(hyd_stream_cap(125000000ull, 50000000ull, 8 * MIB),
			 2 * MIB);
	assert_int_equal(hyd_stream_cap(125000000ull, 50000000ull, 40 * MIB),
			 10 * MIB);
	assert_int_equal(hyd_stream_cap(125000000ull, 50000000ull, MIB),
			 HYD_STREAM_INIT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_grows_to_cap),
	    cmocka_unit_test(test_growth_needs_reading),
	    cmocka_unit_test(test_jump_resets),
	    cmocka_unit_test(test_out_of_order),
	    cmocka_unit_test(test_kernel_readahead),
	    cmocka_unit_test(test_end_of_file),
	    cmocka_unit_test(test_cap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
