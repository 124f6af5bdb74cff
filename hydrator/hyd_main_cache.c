/*
 * hydrator/hyd_main_cache.c — the glue of a bounded cache for
 * ferry-hydrator: --cache-max bounds the store (hydrator/store:
 * hyd_store_set_bound), --cold-dir and --cold-max give it a capacity tier
 * (a store of its own in another directory, with its own bound and lock),
 * --pin and `ferry pin` name paths whose files are fetched in full and
 * never evicted (hydrator/backfill: hyd_backfill_pins.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hyd_main_priv.h"

int hyd_main_cache_opts(struct hyd_main_cache *mc, const char *cache_dir)
{
	if ((mc->cold_dir || mc->cold_max) && !mc->max) {
		base_error("--cold-dir and --cold-max are a tier below "
			   "--cache-max: give --cache-max too");
		return -1;
	}
	if (mc->cold_dir && !mc->cold_max) {
		base_error("--cold-dir wants its own bound: --cold-max SIZE");
		return -1;
	}
	if (mc->cold_max && !mc->cold_dir) {
		base_error("--cold-max bounds --cold-dir DIR: give it too");
		return -1;
	}
	if (cache_dir &&
	    snprintf(mc->pins_file, sizeof(mc->pins_file), "%s/pins",
		     cache_dir) >= (int)sizeof(mc->pins_file)) {
		base_error("cache directory path too long dir=%s", cache_dir);
		return -1;
	}
	return 0;
}

int hyd_main_cache_start(struct hyd_main_cache *mc, hyd_store *store)
{
	int r;

	mc->store = store;
	if (!mc->max)
		return 0;
	if (mc->cold_dir) {
		r = hyd_store_open(mc->cold_dir, CHUNK_MAX_LIMIT, &mc->cold);
		if (r == 0)
			r = hyd_store_set_bound(mc->cold, mc->cold_max, NULL);
		if (r < 0) {
			base_log_err(BASE_LOG_ERROR, r,
				     "--cold-dir: cannot open the capacity "
				     "tier dir=%s%s",
				     mc->cold_dir,
				     r == -EBUSY ? " (another process uses it)"
						 : "");
			return -1;
		}
	}
	r = hyd_store_set_bound(store, mc->max, mc->cold);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot bound the cache");
		return -1;
	}
	base_info("cache bound=%" PRIu64 " cold_dir=%s cold_bound=%" PRIu64,
		  mc->max, mc->cold_dir ? mc->cold_dir : "-", mc->cold_max);
	return 0;
}

void hyd_main_cache_close(struct hyd_main_cache *mc)
{
	hyd_store_close(mc->cold);
	mc->cold = NULL;
	free(mc->cold_dir);
	mc->cold_dir = NULL;
}

void hyd_main_cache_status(struct hyd_main_cache *mc, struct hyd_status *st)
{
	struct hyd_backfill_stats bs;
	struct hyd_store_stats ss;

	if (mc->bf) {
		hyd_backfill_stats(mc->bf, &bs);
		st->pin_files = bs.pin_files;
		st->pin_bytes = bs.pin_bytes;
		st->cache_full = (uint64_t)bs.full;
	}
	if (!mc->max || !mc->store)
		return;
	st->cache_max = mc->max;
	if (hyd_store_stats(mc->store, &ss) == 0) {
		st->cache_pinned = ss.pinned_bytes;
		st->cache_evicted = ss.evicted_bytes;
	}
	if (mc->rcounts) {
		st->cache_hits =
		    __atomic_load_n(&mc->rcounts->chunk_hits, __ATOMIC_RELAXED);
		st->cache_misses = __atomic_load_n(&mc->rcounts->chunk_misses,
						   __ATOMIC_RELAXED);
	}
	if (mc->cold && hyd_store_stats(mc->cold, &ss) == 0) {
		st->cold_max = mc->cold_max;
		st->cold_bytes = ss.stored_bytes;
	}
}

/* path as a pattern that matches only itself: glob characters escaped. */
static int literal(const char *path, char *out, size_t cap)
{
	size_t n = 0;

	for (; *path; path++) {
		if (n + 3 > cap)
			return -ENAMETOOLONG;
		if (strchr("*?[]\\", *path))
			out[n++] = '\\';
		out[n++] = *path;
	}
	out[n++] = '\n';
	out[n] = '\0';
	return (int)n;
}

int hyd_main_cache_pin(void *arg, const char *path, char *err, size_t cap)
{
	struct hyd_main_cache *mc = arg;
	char line[4200];
	int fd, n, r;

	while (*path == '/')
		path++;
	if (!*path || strchr(path, '\n') || !strcmp(path, "..") ||
	    !strncmp(path, "../", 3) || strstr(path, "/../")) {
		snprintf(err, cap, "not a path inside the tree: %.200s", path);
		return -EINVAL;
	}
	n = literal(path, line, sizeof(line));
	if (n < 0) {
		snprintf(err, cap, "path too long");
		return n;
	}
	fd = open(mc->pins_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
		  0600);
	if (fd < 0) {
		r = -errno;
		snprintf(err, cap, "cannot write %s: %s", mc->pins_file,
			 strerror(-r));
		return r;
	}
	r = base_write_all(fd, line, (size_t)n);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r < 0) {
		snprintf(err, cap, "cannot write %s: %s", mc->pins_file,
			 strerror(-r));
		return r;
	}
	base_info("pinned path=%s", path);
	hyd_backfill_pins_changed(mc->bf);
	return 0;
}
