/*
 * hydrator/fetch/hyd_bwlimit.h — --bwlimit: the rate syntax and the
 * token bucket the fetcher's loop uses to cap the wire rate.
 *
 * Pure code (no curl, no libuv, no clock of its own: callers pass
 * CLOCK_MONOTONIC nanoseconds), so the arithmetic is unit-tested alone.
 * A bucket is used by one thread (the fetch loop).
 */
#ifndef FERRY_HYD_BWLIMIT_H
#define FERRY_HYD_BWLIMIT_H

#include <stddef.h>
#include <stdint.h>

/* Smallest cap we accept: below it a single chunk takes minutes and every
 * stall timeout would misfire. */
#define HYD_BWLIMIT_MIN 1024u

/* Parse a rate as rsync's --bwlimit writes it, in bytes per second:
 * a number (decimals allowed: "1.5M") with an optional suffix K, M, G or T
 * (1024-based, also spelled KiB, MiB...; KB, MB... are 1000-based), case
 * ignored. A plain number is bytes/s (rsync would read KiB/s; ferry's unit
 * is the byte). "0" means no limit. Anything else — garbage, a negative or
 * overflowing value, a rate between 0 and HYD_BWLIMIT_MIN — is -EINVAL with
 * one human line in err. */
int hyd_rate_parse(const char *s, uint64_t *ret_bps, char *err, size_t errcap);

struct hyd_bucket {
	double rate;   /* bytes per second, > 0 */
	double burst;  /* most tokens that can pile up */
	double tokens; /* may go negative: a write is never split */
	uint64_t last_ns;
};

/* A bucket for rate bytes/s, starting empty at now_ns. The burst is a
 * twentieth of a second of traffic (at least 16 KiB, one curl write). */
void hyd_bucket_init(struct hyd_bucket *b, uint64_t rate, uint64_t now_ns);

/* Add the tokens earned since the last refill, up to the burst. */
void hyd_bucket_refill(struct hyd_bucket *b, uint64_t now_ns);

/* 1 when a transfer may receive now (tokens > 0). */
int hyd_bucket_ready(const struct hyd_bucket *b);

/* Account n received bytes (the balance may go below zero). */
void hyd_bucket_take(struct hyd_bucket *b, size_t n);

/* Nanoseconds until the bucket is ready again (0 when it is). */
uint64_t hyd_bucket_wait_ns(const struct hyd_bucket *b);

#endif
