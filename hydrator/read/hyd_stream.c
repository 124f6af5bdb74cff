/*
 * hydrator/read/hyd_stream.c — the readahead window of one sequential
 * reader (hyd_stream_priv.h): grows while the stream goes on, up to the
 * link's bandwidth-delay product; a jump starts over.
 *
 * What continues a stream: the kernel reads ahead of a reader by itself
 * (up to the mount's read_ahead_kb, and a mapping's fault-around), with
 * requests in parallel that arrive out of order, some ahead of the
 * furthest one answered and some behind it; so anything within
 * HYD_STREAM_SLACK (or the window, when larger) either way of the
 * stream's furthest end continues it. A read farther away is a jump.
 *
 * Why it grows: a fixed window of W bytes on a link with round trip R
 * moves at most W / R, whatever the link's rate (1 MiB at 50 ms is about
 * 20 MB/s). Why it starts small: most reads are of small files or at
 * random places, where bytes asked for ahead are bytes wasted on the
 * link. Doubling each half window read reaches a window of 2^k MiB after
 * reading about 2^k MiB, which on a link that delivers a window per round
 * trip is k/2 round trips.
 */
#include "hydrator/read/hyd_stream_priv.h"

/* Without a measured link: a 1 Gbit/s link at 100 ms holds 12.5 MB. */
#define HYD_STREAM_CAP_UNKNOWN (32ull << 20)

void hyd_stream_init(struct hyd_stream *s)
{
	s->hi = 0;
	s->ahead_end = 0;
	s->window = HYD_STREAM_INIT;
	s->grown_at = 0;
	s->decode_end = 0;
	s->started = 0;
}

int hyd_stream_note(struct hyd_stream *s, uint64_t off, uint64_t end,
		    uint64_t size, uint64_t cap, struct hyd_stream_ahead *ret)
{
	uint64_t a, b, da, db, slack;

	if (cap < HYD_STREAM_INIT)
		cap = HYD_STREAM_INIT;
	if (end <= off)
		return 0;
	slack = s->window > HYD_STREAM_SLACK ? s->window : HYD_STREAM_SLACK;
	/* A file's first read continues its stream only from the start;
	 * anywhere else it starts one there. */
	if ((!s->started && off != 0) || off > s->hi + slack ||
	    off + slack < s->hi) {
		s->started = 1;
		/* A jump: a new stream starts here; it asks ahead from its
		 * next read on, once it shows it goes on. */
		s->hi = end;
		s->ahead_end = end;
		s->decode_end = end;
		s->window = HYD_STREAM_INIT;
		s->grown_at = end;
		return 0;
	}
	s->started = 1;
	if (end > s->hi)
		s->hi = end;
	/* A cap that fell (the link got slower, the disk fuller) takes
	 * effect at once; a rise only through growth. */
	if (s->window > cap)
		s->window = cap;
	if (s->hi - s->grown_at >= s->window / 2 && s->window < cap) {
		s->window *= 2;
		if (s->window > cap)
			s->window = cap;
		s->grown_at = s->hi;
	}
	a = s->ahead_end > s->hi ? s->ahead_end : s->hi;
	b = s->hi + s->window;
	if (b > size)
		b = size;
	if (a >= b)
		a = b = 0;
	else
		s->ahead_end = b;
	da = s->decode_end > s->hi ? s->decode_end : s->hi;
	db = s->hi + HYD_STREAM_DECODE;
	if (db > size)
		db = size;
	if (da >= db)
		da = db = 0;
	else
		s->decode_end = db;
	ret->a = a;
	ret->b = b;
	ret->da = da;
	ret->db = db;
	return a < b || da < db;
}

uint64_t hyd_stream_cap(uint64_t rate, uint64_t rtt_ns, uint64_t room)
{
	uint64_t cap;

	if (!rate || !rtt_ns)
		cap = HYD_STREAM_CAP_UNKNOWN;
	else if (rate > HYD_STREAM_MAX / 4 * 1000000000ull / rtt_ns)
		cap = HYD_STREAM_MAX; /* 4 * rate * rtt would pass it */
	else
		cap = 4 * rate * rtt_ns / 1000000000ull;
	if (room != UINT64_MAX && cap > room / 4)
		cap = room / 4;
	if (cap > HYD_STREAM_MAX)
		cap = HYD_STREAM_MAX;
	if (cap < HYD_STREAM_INIT)
		cap = HYD_STREAM_INIT;
	return cap;
}
