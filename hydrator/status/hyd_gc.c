/*
 * hydrator/status/hyd_gc.c — `ferry gc CACHEDIR`: drop the chunks no kept
 * catalog names.
 *
 * A cache is used by at most one process (its lock). When that is a
 * mount, the mount collects: it is asked over its control socket ("gc")
 * and runs the collection on the thread that switches generations, so a
 * collection never races a switch (hyd_follow_gc). When nobody holds the
 * cache, the collection runs here, under the cache's lock
 * (hyd_store_gc). A cache held by a process that does not answer (a
 * `ferry sync` at work) is left alone.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "hydrator/status/hyd_control.h"
#include "hydrator/store/hyd_store.h"

/* How long a client waits for the mount's collection: a scan of the
 * store's index and of the catalogs' chunk rows. */
#define GC_ASK_TIMEOUT_MS (3600u * 1000u)
#define GC_LINE_MAX 4096u

static json_int_t as_int(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (json_int_t)v;
}

int hyd__gc_json(const struct hyd_gc_result *r, char *buf, size_t cap)
{
	json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:f}", "catalogs",
			      as_int(r->catalogs), "live", as_int(r->live),
			      "dropped", as_int(r->dropped), "dropped_bytes",
			      as_int(r->dropped_bytes), "kept", as_int(r->kept),
			      "elapsed_s",
			      isfinite(r->elapsed_s) && r->elapsed_s > 0
				  ? round(r->elapsed_s * 1000.0) / 1000.0
				  : 0.0);
	int n = o ? base_json_line(o, buf, cap) : -ENOMEM;

	json_decref(o);
	return n;
}

/* One counter of o into *ret: a non-negative integer, else -EBADMSG. */
static int get_count(json_t *o, const char *key, uint64_t *ret)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EBADMSG;
	*ret = (uint64_t)json_integer_value(v);
	return 0;
}

int hyd__gc_parse(const char *buf, size_t len, struct hyd_gc_result *ret)
{
	struct hyd_gc_result r;
	json_t *o, *v;
	int rc;

	memset(&r, 0, sizeof(r));
	o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		return -EBADMSG;
	}
	rc = get_count(o, "catalogs", &r.catalogs);
	if (rc == 0)
		rc = get_count(o, "live", &r.live);
	if (rc == 0)
		rc = get_count(o, "dropped", &r.dropped);
	if (rc == 0)
		rc = get_count(o, "dropped_bytes", &r.dropped_bytes);
	if (rc == 0)
		rc = get_count(o, "kept", &r.kept);
	v = json_object_get(o, "elapsed_s");
	if (rc == 0 && !json_is_number(v))
		rc = -EBADMSG;
	if (rc == 0)
		r.elapsed_s = json_number_value(v);
	json_decref(o);
	if (rc == 0)
		*ret = r;
	return rc;
}

/* The server's error text of a reply line, or "" (not an error line). */
static void error_text(const char *line, size_t len, char *out, size_t cap)
{
	json_t *o = json_loadb(line, len, 0, NULL);
	const char *e = json_string_value(json_object_get(o, "error"));

	snprintf(out, cap, "%s", e ? e : "");
	json_decref(o);
}

/* Ask the mount. 0 done, 1 nobody answers (collect here), -errno. */
static int gc_online(const char *cache_dir, struct hyd_gc_result *ret)
{
	char *line = malloc(GC_LINE_MAX + 1), err[256];
	size_t len = 0;
	int r;

	if (!line)
		return -ENOMEM;
	r = hyd__control_ask(cache_dir, "gc\n", GC_ASK_TIMEOUT_MS, line,
			     GC_LINE_MAX + 1, &len);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		free(line);
		return 1;
	}
	if (r == 0) {
		r = hyd__gc_parse(line, len, ret);
		if (r < 0) {
			error_text(line, len, err, sizeof(err));
			if (err[0])
				base_error("the hydrator on the cache says: %s "
					   "dir=%s",
					   err, cache_dir);
			else
				base_error("garbled answer from the hydrator "
					   "on the cache dir=%s",
					   cache_dir);
			r = -EPROTO;
		}
	} else {
		base_log_err(BASE_LOG_ERROR, r,
			     "no answer from the hydrator on the cache dir=%s",
			     cache_dir);
	}
	free(line);
	if (r == 0)
		ret->by_daemon = 1;
	return r;
}

int hyd_gc(const char *cache_dir, struct hyd_gc_result *ret)
{
	char probe[4200];
	hyd_store *s = NULL;
	struct stat st;
	int r;

	if (!cache_dir || !ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	r = gc_online(cache_dir, ret);
	if (r <= 0)
		return r;
	/* The store's open would make one: an idle cache has state.db. */
	if (snprintf(probe, sizeof(probe), "%s/state.db", cache_dir) >=
		(int)sizeof(probe) ||
	    stat(probe, &st) < 0) {
		base_error("not a cache directory (no state.db) dir=%s",
			   cache_dir);
		return -ENOENT;
	}
	r = hyd_store_open(cache_dir, 0, &s);
	if (r == -EBUSY) {
		base_error("the cache is in use by a process that does not "
			   "collect (a ferry sync?); try again when it is done "
			   "dir=%s",
			   cache_dir);
		return r;
	}
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot open the cache's store dir=%s", cache_dir);
		return r;
	}
	r = hyd_store_gc(s, ret); /* by_daemon stays 0 */
	hyd_store_close(s);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "garbage collection failed dir=%s", cache_dir);
		return r;
	}
	return 0;
}
