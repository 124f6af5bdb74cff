/*
 * tests/unit/test_hyd_batch.c — the batch answer parser (hyd_batch_parse.c),
 * the
 * --bwlimit rate syntax and the token bucket (hyd_bwlimit.c). All pure:
 * no server, no clock.
 *
 * Parser: a good stream of mixed codecs fed whole, split at every byte
 * boundary (two pieces) and one byte at a time; a wrong id, a truncated
 * body, a raw_len other than the catalog's, an oversized header, trailing
 * garbage, and garbage from the first byte; frames delivered before an
 * error stand.
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
#include "hydrator/fetch/hyd_batch_parse_priv.h"
#include "hydrator/fetch/hyd_bwlimit.h"

#define N 5

struct stream {
	chunk_id ids[N];
	uint32_t lens[N];
	uint8_t *raw[N];
	uint8_t *body;
	size_t body_len;
	size_t frame_off[N]; /* where each entry (id) starts in body */
};

struct got {
	size_t n;
	size_t idx[N + 1];
	int refuse_at; /* callback returns -EIO for this idx, -1 never */
	const struct stream *s;
	int bad;
	int decode;
};

static void stream_make(struct stream *s, uint64_t seed)
{
	static const enum frame_policy pol[N] = {
	    FRAME_POLICY_RAW,  FRAME_POLICY_AUTO, FRAME_POLICY_LZ4,
	    FRAME_POLICY_ZSTD, FRAME_POLICY_AUTO,
	};
	static const uint32_t lens[N] = {1, 3000, 20000, 4096, 9000};
	size_t cap = 0, i, j, flen;
	uint8_t *frame;

	memset(s, 0, sizeof(*s));
	for (i = 0; i < N; i++)
		cap += CHUNK_ID_LEN + frame_bound(lens[i]);
	s->body = malloc(cap);
	assert_non_null(s->body);
	for (i = 0; i < N; i++) {
		s->lens[i] = lens[i];
		s->raw[i] = malloc(lens[i]);
		assert_non_null(s->raw[i]);
		/* Half compressible, half noise. */
		for (j = 0; j < lens[i]; j++) {
			seed = seed * 6364136223846793005ull +
			       1442695040888963407ull;
			s->raw[i][j] =
			    j % 2 ? (uint8_t)(seed >> 56) : (uint8_t)j;
		}
		assert_int_equal(
		    chunk_id_compute(s->raw[i], lens[i], &s->ids[i]), 0);
		s->frame_off[i] = s->body_len;
		memcpy(s->body + s->body_len, s->ids[i].b, CHUNK_ID_LEN);
		s->body_len += CHUNK_ID_LEN;
		frame = s->body + s->body_len;
		assert_int_equal(frame_encode(NULL, pol[i], 3, s->raw[i],
					      lens[i], frame,
					      frame_bound(lens[i]), &flen),
				 0);
		s->body_len += flen;
	}
}

static void stream_free(struct stream *s)
{
	for (size_t i = 0; i < N; i++)
		free(s->raw[i]);
	free(s->body);
}

static int on_frame(void *ctx, size_t idx, uint8_t *frame, size_t len)
{
	struct got *g = ctx;
	const struct stream *s = g->s;
	size_t at = s->frame_off[idx] + CHUNK_ID_LEN;
	size_t end = idx + 1 < N ? s->frame_off[idx + 1] : s->body_len;
	uint8_t *out;
	size_t n = 0;

	if (idx != g->n)
		g->bad = 1;
	/* Each frame handed out is exactly the one that was sent... */
	if (len != end - at || memcmp(frame, s->body + at, len))
		g->bad = 1;
	/* ...and (checked once, it is slow) decodes to its chunk. */
	if (g->decode) {
		out = malloc(s->lens[idx]);
		assert_non_null(out);
		if (frame_decode(NULL, frame, len, s->lens[idx], out,
				 s->lens[idx], &n) != 0 ||
		    n != s->lens[idx] || memcmp(out, s->raw[idx], n))
			g->bad = 1;
		free(out);
	}
	free(frame);
	if ((int)idx == g->refuse_at)
		return -EIO;
	g->idx[g->n++] = idx;
	return 0;
}

static void got_init(struct got *g, const struct stream *s)
{
	memset(g, 0, sizeof(*g));
	g->refuse_at = -1;
	g->s = s;
}

static void test_good_whole(void **state)
{
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;

	(void)state;
	stream_make(&s, 1);
	got_init(&g, &s);
	g.decode = 1;
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g), 0);
	assert_int_equal(hyd_batch_parser_finish(&p), 0);
	assert_int_equal(g.n, N);
	assert_false(g.bad);
	hyd_batch_parser_fini(&p);
	stream_free(&s);
}

static void test_split_everywhere(void **state)
{
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;
	size_t cut, i;

	(void)state;
	stream_make(&s, 2);
	for (cut = 0; cut <= s.body_len; cut++) {
		got_init(&g, &s);
		hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
		assert_int_equal(
		    hyd_batch_parser_feed(&p, s.body, cut, on_frame, &g), 0);
		assert_int_equal(hyd_batch_parser_feed(&p, s.body + cut,
						       s.body_len - cut,
						       on_frame, &g),
				 0);
		assert_int_equal(hyd_batch_parser_finish(&p), 0);
		assert_int_equal(g.n, N);
		assert_false(g.bad);
		hyd_batch_parser_fini(&p);
	}
	/* One byte at a time. */
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	for (i = 0; i < s.body_len; i++)
		assert_int_equal(
		    hyd_batch_parser_feed(&p, s.body + i, 1, on_frame, &g), 0);
	assert_int_equal(hyd_batch_parser_finish(&p), 0);
	assert_int_equal(g.n, N);
	assert_false(g.bad);
	hyd_batch_parser_fini(&p);
	stream_free(&s);
}

static void test_wrong_id(void **state)
{
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;

	(void)state;
	stream_make(&s, 3);
	/* The third entry names a different chunk. */
	s.body[s.frame_off[2] + 7] ^= 0x40;
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g),
	    -EBADMSG);
	/* What came before stands. */
	assert_int_equal(g.n, 2);
	assert_int_equal(hyd_batch_parser_delivered(&p), 2);
	assert_false(g.bad);
	/* Sticky: nothing more is delivered. */
	assert_int_equal(hyd_batch_parser_feed(&p, s.body, 10, on_frame, &g),
			 -EBADMSG);
	assert_int_equal(hyd_batch_parser_finish(&p), -EBADMSG);
	assert_int_equal(g.n, 2);
	hyd_batch_parser_fini(&p);
	/* Ids in another order than asked are as wrong. */
	stream_free(&s);
	stream_make(&s, 3);
	{
		chunk_id t = s.ids[0];

		s.ids[0] = s.ids[1];
		s.ids[1] = t;
	}
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g),
	    -EBADMSG);
	assert_int_equal(g.n, 0);
	hyd_batch_parser_fini(&p);
	stream_free(&s);
}

static void test_truncated(void **state)
{
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;
	size_t cut, want, i;

	(void)state;
	stream_make(&s, 4);
	for (cut = 0; cut < s.body_len; cut += 97) {
		got_init(&g, &s);
		hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
		assert_int_equal(
		    hyd_batch_parser_feed(&p, s.body, cut, on_frame, &g), 0);
		assert_int_equal(hyd_batch_parser_finish(&p), -EPIPE);
		/* Exactly the entries wholly inside the cut arrived. */
		for (want = 0, i = 0; i < N; i++) {
			size_t end =
			    i + 1 < N ? s.frame_off[i + 1] : s.body_len;

			if (end <= cut)
				want++;
		}
		assert_int_equal(g.n, want);
		assert_false(g.bad);
		hyd_batch_parser_fini(&p); /* frees the partial frame */
	}
	stream_free(&s);
}

static void test_bad_header(void **state)
{
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;
	uint8_t *h;
	uint32_t v;

	(void)state;
	stream_make(&s, 5);
	/* Entry 1 claims a raw_len above the catalog's max. */
	h = s.body + s.frame_off[1] + CHUNK_ID_LEN;
	v = CHUNK_MAX_DEFAULT + 1;
	memcpy(h + 8, &v, 4); /* little-endian host */
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g),
	    -EBADMSG);
	assert_int_equal(g.n, 1);
	hyd_batch_parser_fini(&p);
	stream_free(&s);

	/* A valid header whose raw_len is not the catalog's for that id. */
	stream_make(&s, 5);
	s.lens[3] += 1;
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g),
	    -EBADMSG);
	assert_int_equal(g.n, 3);
	hyd_batch_parser_fini(&p);
	stream_free(&s);

	/* A bad magic. */
	stream_make(&s, 5);
	s.body[s.frame_off[0] + CHUNK_ID_LEN] = 'X';
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g),
	    -EBADMSG);
	assert_int_equal(g.n, 0);
	hyd_batch_parser_fini(&p);
	stream_free(&s);
}

static void test_trailing_and_garbage(void **state)
{
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;
	uint8_t junk[200];

	(void)state;
	stream_make(&s, 6);
	/* Bytes after the last frame. */
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g), 0);
	assert_int_equal(hyd_batch_parser_feed(&p, "x", 1, on_frame, &g),
			 -EBADMSG);
	assert_int_equal(g.n, N);
	hyd_batch_parser_fini(&p);
	/* Garbage from the start (an HTML error page, say). */
	memset(junk, '<', sizeof(junk));
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, junk, sizeof(junk), on_frame, &g),
	    -EBADMSG);
	assert_int_equal(g.n, 0);
	hyd_batch_parser_fini(&p);
	/* The callback's refusal stops the parse. */
	got_init(&g, &s);
	g.refuse_at = 1;
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(
	    hyd_batch_parser_feed(&p, s.body, s.body_len, on_frame, &g), -EIO);
	assert_int_equal(g.n, 1);
	hyd_batch_parser_fini(&p);
	/* An empty request expects nothing. */
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, 0, CHUNK_MAX_DEFAULT);
	assert_int_equal(hyd_batch_parser_finish(&p), 0);
	assert_int_equal(hyd_batch_parser_feed(&p, s.body, 1, on_frame, &g),
			 -EBADMSG);
	hyd_batch_parser_fini(&p);
	stream_free(&s);
}

/* The body of the entries of s named in keep[0..k), in that order. */
static size_t pick_entries(const struct stream *s, const size_t *keep, size_t k,
			   uint8_t *out)
{
	size_t i, at, end, n = 0;

	for (i = 0; i < k; i++) {
		at = s->frame_off[keep[i]];
		end = keep[i] + 1 < N ? s->frame_off[keep[i] + 1] : s->body_len;
		memcpy(out + n, s->body + at, end - at);
		n += end - at;
	}
	return n;
}

static int on_pack_frame(void *ctx, size_t idx, uint8_t *frame, size_t len)
{
	struct got *g = ctx;

	(void)len;
	free(frame);
	g->idx[g->n++] = idx;
	return 0;
}

/* A pack's answer may leave entries out, never reorder them or name an
 * id off its list; a cut inside an entry is a truncation, one between
 * entries a whole answer. A batch may leave nothing out. */
static void test_pack_subsequence(void **state)
{
	static const size_t some[] = {0, 2, 4}, swapped[] = {2, 0};
	struct hyd_batch_parser p;
	struct stream s;
	struct got g;
	uint8_t *body;
	size_t n;

	(void)state;
	stream_make(&s, 7);
	body = malloc(s.body_len);
	assert_non_null(body);
	n = pick_entries(&s, some, 3, body);
	got_init(&g, &s);
	hyd_batch_parser_init_pack(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(hyd_batch_parser_feed(&p, body, n, on_pack_frame, &g),
			 0);
	assert_int_equal(hyd_batch_parser_finish(&p), 0);
	assert_int_equal(g.n, 3);
	assert_int_equal(g.idx[0], 0);
	assert_int_equal(g.idx[1], 2);
	assert_int_equal(g.idx[2], 4);
	assert_int_equal(hyd_batch_parser_delivered(&p), 3);
	hyd_batch_parser_fini(&p);
	/* ends between entries: whole; inside one: truncated */
	got_init(&g, &s);
	hyd_batch_parser_init_pack(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(hyd_batch_parser_feed(&p, body,
					       s.frame_off[1] - s.frame_off[0],
					       on_pack_frame, &g),
			 0);
	assert_int_equal(hyd_batch_parser_finish(&p), 0);
	assert_int_equal(hyd_batch_parser_feed(&p, body + s.frame_off[1], 40,
					       on_pack_frame, &g),
			 0);
	assert_int_equal(hyd_batch_parser_finish(&p), -EPIPE);
	hyd_batch_parser_fini(&p);
	/* the same body as a batch answer: the second entry is wrong */
	got_init(&g, &s);
	hyd_batch_parser_init(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(hyd_batch_parser_feed(&p, body, n, on_pack_frame, &g),
			 -EBADMSG);
	assert_int_equal(g.n, 1);
	hyd_batch_parser_fini(&p);
	/* out of order */
	n = pick_entries(&s, swapped, 2, body);
	got_init(&g, &s);
	hyd_batch_parser_init_pack(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(hyd_batch_parser_feed(&p, body, n, on_pack_frame, &g),
			 -EBADMSG);
	assert_int_equal(g.n, 1);
	hyd_batch_parser_fini(&p);
	/* an id off the list */
	n = pick_entries(&s, some, 3, body);
	body[s.frame_off[1] + 3] ^= 1; /* entry 2 starts where 1 did */
	got_init(&g, &s);
	hyd_batch_parser_init_pack(&p, s.ids, s.lens, N, CHUNK_MAX_DEFAULT);
	assert_int_equal(hyd_batch_parser_feed(&p, body, n, on_pack_frame, &g),
			 -EBADMSG);
	assert_int_equal(g.n, 1);
	hyd_batch_parser_fini(&p);
	free(body);
	stream_free(&s);
}

static void test_rate_parse(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
	    {"0", 0},
	    {"1024", 1024},
	    {"50M", 50ull << 20},
	    {"50m", 50ull << 20},
	    {"1G", 1ull << 30},
	    {"1.5M", 3ull << 19},
	    {"64K", 65536},
	    {"64KiB", 65536},
	    {"64kb", 64000},
	    {"2MB", 2000000},
	    {"1T", 1ull << 40},
	    {"4096b", 4096},
	};
	static const char *const bad[] = {
	    "",
	    "M",
	    "-5M",
	    "5X",
	    "5 M",
	    " 5M",
	    "5M ",
	    "1e6",
	    "0x100",
	    "inf",
	    "nan",
	    "1.2.3",
	    ".",
	    "5MM",
	    "100",
	    "1023",
	    "99999999999999999999T",
	};
	char err[256];
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		assert_int_equal(
		    hyd_rate_parse(good[i].s, &v, err, sizeof(err)), 0);
		assert_int_equal(v, good[i].v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(hyd_rate_parse(bad[i], &v, err, sizeof(err)),
				 -EINVAL);
		assert_true(strlen(err) > 10); /* says what is wrong */
	}
	assert_int_equal(hyd_rate_parse(NULL, &v, err, sizeof(err)), -EINVAL);
}

/* Simulate receivers pulling 16 KiB writes for 10 s against the bucket:
 * the average stays within 1% of the rate. */
static void test_bucket(void **state)
{
	struct hyd_bucket b;
	uint64_t now = 1000000000ull, end, got = 0, rate = 3u << 20;
	double avg;

	(void)state;
	hyd_bucket_init(&b, rate, now);
	assert_false(hyd_bucket_ready(&b)); /* starts empty: no burst */
	assert_true(hyd_bucket_wait_ns(&b) > 0);
	end = now + 10000000000ull;
	while (now < end) {
		hyd_bucket_refill(&b, now);
		if (hyd_bucket_ready(&b)) {
			hyd_bucket_take(&b, 16384);
			got += 16384;
			continue;
		}
		now += hyd_bucket_wait_ns(&b);
	}
	avg = (double)got / 10.0;
	assert_true(avg <= (double)rate * 1.01 + 16384);
	assert_true(avg >= (double)rate * 0.99);
	/* Idle time does not bank more than the burst. */
	hyd_bucket_refill(&b, now + 60000000000ull);
	assert_true(b.tokens <= b.burst);
	assert_true(b.burst < (double)rate); /* well under a second */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_whole),
	    cmocka_unit_test(test_split_everywhere),
	    cmocka_unit_test(test_wrong_id),
	    cmocka_unit_test(test_truncated),
	    cmocka_unit_test(test_bad_header),
	    cmocka_unit_test(test_trailing_and_garbage),
	    cmocka_unit_test(test_pack_subsequence),
	    cmocka_unit_test(test_rate_parse),
	    cmocka_unit_test(test_bucket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
