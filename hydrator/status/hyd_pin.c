/*
 * hydrator/status/hyd_pin.c — `ferry pin`'s side of the control socket:
 * "pin PATH" to the hydrator running on a cache, which records it in
 * CACHEDIR/pins and has backfill fetch it (hyd_main_cache.c). A pin
 * needs the running mount: only it knows the tree and bounds the store.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "hydrator/status/hyd_control.h"

#define PIN_ASK_TIMEOUT_MS 10000u
#define PIN_LINE_MAX 8192u

int hyd_pin(const char *cache_dir, const char *path, char *err, size_t cap)
{
	char req[4200], line[PIN_LINE_MAX];
	json_t *o, *e;
	size_t len;
	int r;

	if (strchr(path, '\n') ||
	    snprintf(req, sizeof(req), "pin %s\n", path) >= (int)sizeof(req)) {
		snprintf(err, cap, "not a path ferry can pin: %.200s", path);
		return -EINVAL;
	}
	r = hyd__control_ask(cache_dir, req, PIN_ASK_TIMEOUT_MS, line,
			     sizeof(line), &len);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		snprintf(err, cap,
			 "no hydrator runs on %.300s: pins are for a running "
			 "mount (ferry-hydrator --pin at its start)",
			 cache_dir);
		return r;
	}
	if (r < 0) {
		snprintf(err, cap, "the hydrator did not answer: %s",
			 strerror(-r));
		return r;
	}
	o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	e = o ? json_object_get(o, "error") : NULL;
	if (!o || (!e && !json_is_string(json_object_get(o, "pinned")))) {
		json_decref(o);
		snprintf(err, cap, "the hydrator's answer makes no sense");
		return -EPROTO;
	}
	if (e) {
		snprintf(err, cap, "%.400s",
			 json_is_string(e) ? json_string_value(e) : "refused");
		json_decref(o);
		return -EPERM;
	}
	json_decref(o);
	return 0;
}
