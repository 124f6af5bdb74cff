/*
 * hydrator/fetch/hyd_bwlimit.c — the --bwlimit rate syntax and a token bucket.
 *
 * The bucket is refilled from the monotonic clock on demand (no timer of
 * its own); a receive is allowed while the balance is positive and always
 * charged in full, so the balance can dip below zero by one curl write and
 * the next receive waits until it is paid back. Over any window longer
 * than the burst this holds the average at the rate.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hydrator/fetch/hyd_bwlimit.h"

#define BURST_MIN 16384.0
#define BURST_SECONDS 0.05

struct unit {
	const char *name;
	double mult;
};

int hyd_rate_parse(const char *s, uint64_t *ret_bps, char *err, size_t errcap)
{
	static const struct unit units[] = {
	    {"", 1.0},
	    {"b", 1.0},
	    {"k", 1024.0},
	    {"kib", 1024.0},
	    {"kb", 1000.0},
	    {"m", 1048576.0},
	    {"mib", 1048576.0},
	    {"mb", 1e6},
	    {"g", 1073741824.0},
	    {"gib", 1073741824.0},
	    {"gb", 1e9},
	    {"t", 1099511627776.0},
	    {"tib", 1099511627776.0},
	    {"tb", 1e12},
	};
	const char *p = s;
	char *end;
	double v;
	size_t i;

	if (err && errcap)
		err[0] = '\0';
	/* strtod alone would take "inf", "nan", hex and leading spaces. */
	if (!s || !((*p >= '0' && *p <= '9') || *p == '.'))
		goto bad;
	for (p = s; (*p >= '0' && *p <= '9') || *p == '.'; p++)
		;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end != p || !isfinite(v) || v < 0)
		goto bad;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcasecmp(p, units[i].name)) {
			v *= units[i].mult;
			break;
		}
	}
	if (i == sizeof(units) / sizeof(units[0]))
		goto bad;
	if (v >= 18446744073709551615.0)
		goto bad;
	if (v != 0 && v < HYD_BWLIMIT_MIN) {
		if (err && errcap)
			snprintf(err, errcap,
				 "rate '%s' is below the smallest cap of %u "
				 "bytes/s (use 0 for no limit)",
				 s, HYD_BWLIMIT_MIN);
		return -EINVAL;
	}
	*ret_bps = (uint64_t)v;
	return 0;
bad:
	if (err && errcap)
		snprintf(err, errcap,
			 "bad rate '%s': want bytes/s as a number with an "
			 "optional K, M, G or T suffix (1024-based), e.g. 50M",
			 s ? s : "");
	return -EINVAL;
}

void hyd_bucket_init(struct hyd_bucket *b, uint64_t rate, uint64_t now_ns)
{
	b->rate = rate ? (double)rate : 1.0;
	b->burst = b->rate * BURST_SECONDS;
	if (b->burst < BURST_MIN)
		b->burst = BURST_MIN;
	b->tokens = 0;
	b->last_ns = now_ns;
}

void hyd_bucket_refill(struct hyd_bucket *b, uint64_t now_ns)
{
	if (now_ns <= b->last_ns)
		return;
	b->tokens += b->rate * (double)(now_ns - b->last_ns) / 1e9;
	if (b->tokens > b->burst)
		b->tokens = b->burst;
	b->last_ns = now_ns;
}

int hyd_bucket_ready(const struct hyd_bucket *b)
{
	return b->tokens > 0;
}

void hyd_bucket_take(struct hyd_bucket *b, size_t n)
{
	b->tokens -= (double)n;
}

uint64_t hyd_bucket_wait_ns(const struct hyd_bucket *b)
{
	if (b->tokens > 0)
		return 0;
	/* +1 byte: ready means strictly positive. */
	return (uint64_t)((1.0 - b->tokens) / b->rate * 1e9) + 1;
}
