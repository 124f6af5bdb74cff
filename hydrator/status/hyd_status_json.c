/*
 * hydrator/status/hyd_status_json.c — the status line as JSON, both ways.
 *
 * hyd_status_json / hyd__status_parse are both ends of the one-line reply
 * on CACHEDIR/control.sock (hyd_control.c serves it; hyd_status_query asks
 * and falls back to the cache). Both go through jansson and one table,
 * status_fields, which gives the keys, their order and their types. The
 * parser takes untrusted bytes: their length is bounded before jansson
 * sees them, duplicate keys are refused, every known field is type- and
 * range-checked, unknown keys are ignored.
 *
 * Strings (url, last_error) go through base_json_bytes: valid UTF-8 passes
 * unchanged and round-trips exactly; a byte that is not part of valid UTF-8
 * (or a NUL) becomes the four characters \xNN, as in a log line, so the
 * output is always valid JSON. Counters are JSON integers, which jansson keeps
 * in an int64: a count above INT64_MAX, which no cache reaches, is written as
 * INT64_MAX. rate_now, rate_avg, elapsed_s, link_rtt_ms and link_rate are reals
 * rounded to 3 decimals; jansson writes numbers without the locale's decimal
 * point.
 *
 * `ferry status --json` prints the same line with the source's hashing
 * added (hyd_status_json_source): the replicator's state word goes through
 * base_json_bytes too, it comes off the network.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "hydrator/status/hyd_control.h"

#define STATUS_DOUBLE_MAX 9.0e15 /* reals are clamped to this */

enum field_type {
	F_STATE,  /* enum hyd_state by name; the one required key */
	F_STR,	  /* char[size]: display text */
	F_U64,	  /* uint64_t counter, 0..INT64_MAX on the wire */
	F_PID,	  /* long, 0..INT_MAX */
	F_I64,	  /* int64_t */
	F_REAL,	  /* double, 3 decimals on the wire */
	F_SAVING, /* uint64_t at off minus the one at off2, signed: written,
		   * and on input only checked to be an integer */
	F_TIME,	  /* int64_t seconds since the epoch, as a UTC
		   * "YYYY-MM-DDTHH:MM:SSZ"; 0 is null */
};

struct status_field {
	const char *key;
	enum field_type type;
	size_t off, size, off2;
};

#define SF(k, t)                                                               \
	{                                                                      \
#k, t, offsetof(struct hyd_status, k),                         \
		    sizeof(((struct hyd_status *)0)->k), 0                     \
	}
#define SF_SAVING(k, a, b)                                                     \
	{                                                                      \
#k, F_SAVING, offsetof(struct hyd_status, a), 0,               \
		    offsetof(struct hyd_status, b)                             \
	}

/* The keys in the order they are written (hydrator.h lists them). */
static const struct status_field status_fields[] = {
    SF(state, F_STATE),
    SF(url, F_STR),
    SF(last_error, F_STR),
    SF(pid, F_PID),
    SF(generation, F_U64),
    SF(switched_at, F_TIME),
    SF(files_total, F_U64),
    SF(files_hydrated, F_U64),
    SF(bytes_total, F_U64),
    SF(bytes_hydrated, F_U64),
    SF(chunks_total, F_U64),
    SF(chunks_stored, F_U64),
    SF(unique_bytes_total, F_U64),
    SF(unique_bytes_stored, F_U64),
    SF(manifests_total, F_U64),
    SF(manifests_local, F_U64),
    SF(manifests_changed, F_U64),
    SF(rest_bytes, F_U64),
    SF(wire_bytes, F_U64),
    SF_SAVING(dedup_savings_bytes, bytes_total, unique_bytes_total),
    SF_SAVING(compression_savings_bytes, unique_bytes_stored, rest_bytes),
    SF(mismatches, F_U64),
    SF(retries, F_U64),
    SF(failures, F_U64),
    SF(rate_now, F_REAL),
    SF(rate_avg, F_REAL),
    SF(eta_s, F_I64),
    SF(elapsed_s, F_REAL),
    SF(link_rtt_ms, F_REAL),
    SF(link_rate, F_REAL),
    SF(prefetch, F_STR),
    SF(prefetch_files, F_U64),
    SF(prefetch_skipped, F_U64),
    SF(prefetch_ranges, F_U64),
    SF(prefetch_ranges_done, F_U64),
    SF(prefetch_bytes, F_U64),
    SF(prefetch_bytes_done, F_U64),
    SF(into, F_STR),
    SF(into_dir, F_STR),
    SF(into_generation, F_U64),
    SF(into_landing, F_U64),
    SF(into_failed, F_U64),
    SF(cache_max, F_U64),
    SF(cache_pinned, F_U64),
    SF(cache_evicted, F_U64),
    SF(cache_hits, F_U64),
    SF(cache_misses, F_U64),
    SF(cold_max, F_U64),
    SF(cold_bytes, F_U64),
    SF(cache_full, F_U64),
    SF(pin_files, F_U64),
    SF(pin_bytes, F_U64),
};
#define STATUS_FIELDS (sizeof(status_fields) / sizeof(status_fields[0]))

static uint64_t u64_at(const struct hyd_status *st, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)st + off, sizeof(v));
	return v;
}

/* A counter in jansson's integer range. */
static json_int_t count_int(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (json_int_t)v;
}

/* A real for the wire: finite and non-negative (NaN, infinities and
 * negatives are 0, which jansson could not write or we never mean), at
 * most STATUS_DOUBLE_MAX, rounded to 3 decimals. */
static double real_3(double v)
{
	if (!isfinite(v) || v < 0)
		return 0;
	if (v > STATUS_DOUBLE_MAX)
		v = STATUS_DOUBLE_MAX;
	return round(v * 1000.0) / 1000.0;
}

/* Seconds since the epoch as "YYYY-MM-DDTHH:MM:SSZ", 0 as null. */
static json_t *time_value(int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;
	char buf[32];

	if (t <= 0 || !gmtime_r(&tt, &tm) ||
	    !strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm))
		return json_null();
	return json_string(buf);
}

/* The seconds of such a string: 0 with *ret set, -EBADMSG. */
static int time_parse(const char *s, int64_t *ret)
{
	struct tm tm;
	const char *end;

	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (!end || *end)
		return -EBADMSG;
	*ret = (int64_t)timegm(&tm);
	return *ret > 0 ? 0 : -EBADMSG;
}

/* The JSON value of one field of st (a new reference; NULL when out of
 * memory). */
static json_t *field_value(const struct hyd_status *st,
			   const struct status_field *f)
{
	const char *p = (const char *)st + f->off;
	uint64_t a, b;
	int64_t i64;
	double d;
	long l;

	switch (f->type) {
	case F_STATE:
		return json_string(hyd_state_name(st->state));
	case F_STR:
		/* A field that is not NUL-terminated ends at its size. */
		return base_json_bytes(p, strnlen(p, f->size));
	case F_U64:
		return json_integer(count_int(u64_at(st, f->off)));
	case F_PID:
		memcpy(&l, p, sizeof(l));
		return json_integer(l);
	case F_I64:
		memcpy(&i64, p, sizeof(i64));
		return json_integer(i64);
	case F_REAL:
		memcpy(&d, p, sizeof(d));
		return json_real(real_3(d));
	case F_SAVING:
		a = u64_at(st, f->off);
		b = u64_at(st, f->off2);
		return json_integer(a >= b ? count_int(a - b)
					   : -count_int(b - a));
	case F_TIME:
		memcpy(&i64, p, sizeof(i64));
		return time_value(i64);
	}
	return NULL;
}

/* The status as a JSON object (a new reference), or NULL when out of
 * memory. */
static json_t *status_object(const struct hyd_status *st)
{
	json_t *o = json_object();
	size_t i;

	if (!o)
		return NULL;
	for (i = 0; i < STATUS_FIELDS; i++) {
		/* Takes the value's reference, also when it fails (and a
		 * NULL value fails). */
		if (json_object_set_new(o, status_fields[i].key,
					field_value(st, &status_fields[i])) <
		    0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

/* The line of o into buf, o released; "" on failure. */
static int object_line(json_t *o, char *buf, size_t cap)
{
	int r = o ? base_json_line(o, buf, cap) : -ENOMEM;

	json_decref(o);
	if (r < 0 && cap > 0)
		buf[0] = '\0';
	return r;
}

int hyd_status_json(const struct hyd_status *st, char *buf, size_t cap)
{
	return object_line(status_object(st), buf, cap);
}

/* The source's hashing as an object (a new reference; NULL on ENOMEM). */
static json_t *source_object(const struct hyd_source_hashing *h)
{
	/* The state is the replicator's word: bytes, not trusted text. */
	json_t *state =
	    base_json_bytes(h->state, strnlen(h->state, sizeof(h->state)));

	if (!state)
		return NULL;
	return json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "state",
			 state, "files", count_int(h->files), "files_done",
			 count_int(h->files_done), "bytes", count_int(h->bytes),
			 "bytes_done", count_int(h->bytes_done), "changed",
			 count_int(h->changed), "rate", real_3(h->rate),
			 "eta_s", real_3(h->eta_s));
}

int hyd_status_json_source(const struct hyd_status *st,
			   const struct hyd_source_hashing *src, char *buf,
			   size_t cap)
{
	json_t *o = status_object(st);
	json_t *v;

	if (o) {
		v = src ? source_object(src) : json_null();
		if (json_object_set_new(o, "source_hashing", v) < 0) {
			json_decref(o);
			o = NULL;
		}
	}
	return object_line(o, buf, cap);
}

/* The UTF-8 string s[0..len) into dst[0..cap), cut at a character boundary
 * when it does not fit. */
static void copy_cut(char *dst, size_t cap, const char *s, size_t len)
{
	if (len >= cap) {
		len = cap - 1;
		/* jansson checked s is valid UTF-8: the byte after the cut is
		 * a continuation byte only when the cut splits a character. */
		while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80)
			len--;
	}
	memcpy(dst, s, len);
	dst[len] = '\0';
}

/* The value v of field f into s, or -EBADMSG when it has the wrong type
 * or is out of range. */
static int field_parse(const json_t *v, const struct status_field *f,
		       struct hyd_status *s)
{
	json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
	char *p = (char *)s + f->off;
	int64_t i64 = n;
	uint64_t u64 = (uint64_t)n;
	long l = (long)n;
	double d;
	int i;

	switch (f->type) {
	case F_STATE:
		for (i = HYD_STATE_BROWSING;
		     json_is_string(v) && i <= HYD_STATE_STOPPED; i++)
			if (!strcmp(json_string_value(v),
				    hyd_state_name((enum hyd_state)i))) {
				s->state = (enum hyd_state)i;
				return 0;
			}
		return -EBADMSG;
	case F_STR:
		/* Display text: longer than the field is cut, not refused
		 * (an escaped byte grows fourfold on the way back). */
		if (!json_is_string(v))
			return -EBADMSG;
		copy_cut(p, f->size, json_string_value(v),
			 json_string_length(v));
		return 0;
	case F_U64:
		if (!json_is_integer(v) || n < 0)
			return -EBADMSG;
		memcpy(p, &u64, sizeof(u64));
		return 0;
	case F_PID:
		if (!json_is_integer(v) || n < 0 || n > INT_MAX)
			return -EBADMSG;
		memcpy(p, &l, sizeof(l));
		return 0;
	case F_I64:
		if (!json_is_integer(v))
			return -EBADMSG;
		memcpy(p, &i64, sizeof(i64));
		return 0;
	case F_REAL:
		/* An integer is a number too ("rate_now":0). */
		if (!json_is_number(v))
			return -EBADMSG;
		d = json_number_value(v);
		memcpy(p, &d, sizeof(d));
		return 0;
	case F_SAVING:
		return json_is_integer(v) ? 0 : -EBADMSG;
	case F_TIME:
		if (json_is_null(v))
			i64 = 0;
		else if (!json_is_string(v) ||
			 time_parse(json_string_value(v), &i64) < 0)
			return -EBADMSG;
		memcpy(p, &i64, sizeof(i64));
		return 0;
	}
	return -EBADMSG;
}

int hyd__status_parse(const char *buf, size_t len, struct hyd_status *ret)
{
	json_t *root = NULL, *v;
	struct hyd_status s;
	json_error_t jerr;
	size_t i;
	int r = -EBADMSG;

	/* Bounded before jansson sees it: a line is never longer. */
	if (!buf || !ret || len > HYD_STATUS_LINE_MAX)
		return -EBADMSG;
	memset(&s, 0, sizeof(s));
	s.eta_s = -1;
	/* Strict: one value and nothing after it but whitespace; strings
	 * valid UTF-8 without \u0000; integers within int64. */
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(root) || !json_object_get(root, "state"))
		goto out;
	for (i = 0; i < STATUS_FIELDS; i++) {
		v = json_object_get(root, status_fields[i].key);
		if (v && field_parse(v, &status_fields[i], &s) < 0)
			goto out;
	}
	*ret = s;
	r = 0;
out:
	json_decref(root);
	return r;
}
