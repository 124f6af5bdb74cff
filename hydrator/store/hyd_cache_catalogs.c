/*
 * hydrator/store/hyd_cache_catalogs.c — the catalogs a cache directory keeps:
 * CACHEDIR/catalogs/GEN.db, one per generation fetched, named by its
 * decimal number, and beside a catalog with pending files its manifest
 * overlay GEN.overlay.db. The catalog download writes them, the mount and sync
 * open the newest when the server cannot be reached, `ferry status` and
 * `ferry verify` read it; all of them find it here.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "hydrator/store/hyd_store.h"

uint64_t hyd_cache_catalog_gen(const char *name)
{
	char digits[24];
	size_t len = strlen(name);
	uint64_t v;

	/* 1..20 digits, no sign, no leading zero (we never write one). */
	if (len < 4 || len > 23 || strcmp(name + len - 3, ".db") != 0 ||
	    name[0] == '0')
		return 0;
	memcpy(digits, name, len - 3);
	digits[len - 3] = '\0';
	if (base_parse_u64(digits, 1, UINT64_MAX, &v) < 0)
		return 0;
	return v;
}

int hyd_cache_overlay_path(const char *catpath, char *buf, size_t cap)
{
	size_t len = strlen(catpath);
	int n;

	if (len < 4 || strcmp(catpath + len - 3, ".db") != 0)
		return -EINVAL;
	n = snprintf(buf, cap, "%.*s.overlay.db", (int)(len - 3), catpath);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int hyd_cache_catalog_newest(const char *cache_dir, char *path, size_t cap,
			     uint64_t *ret_gen)
{
	char dir[4200];
	struct dirent *de;
	uint64_t best = 0, g;
	DIR *d;
	int n;

	if (ret_gen)
		*ret_gen = 0;
	n = snprintf(dir, sizeof(dir), "%s/catalogs", cache_dir);
	if (n < 0 || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		g = hyd_cache_catalog_gen(de->d_name);
		if (g > best)
			best = g;
	}
	closedir(d);
	if (best == 0)
		return -ENOENT;
	if (path) {
		n = snprintf(path, cap, "%s/%" PRIu64 ".db", dir, best);
		if (n < 0 || (size_t)n >= cap)
			return -ENAMETOOLONG;
	}
	if (ret_gen)
		*ret_gen = best;
	return 0;
}
