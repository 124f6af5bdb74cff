/*
 * hydrator/fetch/hyd_open.c — the start-up the mount and `ferry sync`
 * share: URL, cache directory, chunk store, catalog (see
 * hyd_open.h). Every failure is logged here, once, in the words
 * a user needs, because this is the one place that knows both what was
 * being opened and why it failed.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "hydrator/fetch/hyd_open.h"

int hyd_open_url(struct hyd_open *o, const char *url)
{
	char err[512];
	int r;

	r = hyd_url_parse(url, o->base, sizeof(o->base), o->name,
			  sizeof(o->name), err, sizeof(err));
	if (r < 0)
		base_error("%s", err);
	return r < 0 ? -EINVAL : 0;
}

int hyd_open_cache_dir(struct hyd_open *o, const char *given)
{
	char path[PATH_MAX];
	int r;

	if (given) {
		if (strlen(given) >= sizeof(path)) {
			base_error("cache directory name too long");
			return -ENAMETOOLONG;
		}
		memcpy(path, given, strlen(given) + 1);
	} else {
		r = hyd_cache_dir_default(o->base, o->name, path, sizeof(path));
		if (r < 0) {
			base_log_err(BASE_LOG_ERROR, r,
				     "no default cache directory: set HOME or "
				     "XDG_CACHE_HOME, or pass -c DIR");
			return r;
		}
	}
	/* base_mkdir_p says -ENOTDIR when path exists as something else. */
	r = base_mkdir_p(path, 0700);
	/* Absolute: a daemon chdirs to / and the store opens new volumes by
	 * path for as long as it runs. */
	if (r == 0 && !realpath(path, o->cache))
		r = -errno;
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot create the cache directory path=%s", path);
	return r;
}

/* The pid a store's holder wrote into CACHEDIR/lock, or 0. */
static long lock_holder(const char *cache)
{
	char path[PATH_MAX + 8], buf[32];
	long pid = 0;

	if (snprintf(path, sizeof(path), "%s/lock", cache) >=
		(int)sizeof(path) ||
	    base_file_read_small(path, buf, sizeof(buf), NULL) < 0)
		return 0;
	buf[strcspn(buf, " \n")] = '\0';
	return base_parse_long(buf, 1, LONG_MAX, &pid) == 0 ? pid : 0;
}

int hyd_open_store(struct hyd_open *o)
{
	long pid;
	int r;

	r = hyd_store_open(o->cache, CHUNK_MAX_LIMIT, &o->store);
	if (r == -EBUSY) {
		pid = lock_holder(o->cache);
		if (pid)
			base_error(
			    "cache directory is in use by another ferry "
			    "process path=%s pid=%ld (unmount it, or pass "
			    "another -c DIR)",
			    o->cache, pid);
		else
			base_error(
			    "cache directory is in use by another ferry "
			    "process path=%s (unmount it, or pass another "
			    "-c DIR)",
			    o->cache);
	} else if (r == -EPROTO) {
		base_error("cache directory was written by a newer ferry "
			   "(state.db schema) path=%s",
			   o->cache);
	} else if (r == -EBADMSG) {
		base_error("cache directory has a damaged state.db path=%s",
			   o->cache);
	} else if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot open the cache directory path=%s",
			     o->cache);
	}
	return r;
}

int hyd_open_catalog(struct hyd_open *o, long connect_timeout_s)
{
	struct hyd_catalog_result res;
	char err[1024];
	int r;

	memset(&res, 0, sizeof(res));
	err[0] = '\0';
	r = hyd_catalog_fetch(o->base, o->cache, o->creds, connect_timeout_s,
			      &res, err, sizeof(err));
	o->cat_requests += res.requests;
	o->cat_bytes += res.bytes;
	o->cat_rtt_ns = res.rtt_ns;
	if (r < 0) {
		if (err[0])
			base_error("%s", err);
		else
			base_log_err(BASE_LOG_ERROR, r,
				     "cannot fetch the catalog url=%s",
				     o->base);
		return r == -EHOSTUNREACH && res.connect_timed_out ? -ETIMEDOUT
								   : r;
	}
	o->from_cache = res.from_cache;
	if (res.from_cache)
		base_warn("server unreachable: serving the cached catalog "
			  "url=%s generation=%" PRIu64,
			  o->base, res.generation);
	if (strlen(res.path) >= sizeof(o->catpath)) {
		base_error("catalog path too long path=%s", res.path);
		return -ENAMETOOLONG;
	}
	memcpy(o->catpath, res.path, strlen(res.path) + 1);
	return hyd_open_local(o);
}

/* The overlay of a catalog with pending files: created on first use, so
 * every reader can attach it (attaching needs the file to exist). */
static int open_overlay(struct hyd_open *o)
{
	int r;

	r = hyd_cache_overlay_path(o->catpath, o->ovpath, sizeof(o->ovpath));
	if (r == 0)
		r = cat_overlay_open(o->ovpath, &o->ov);
	if (r == 0)
		r = cat_reader_attach_overlay(o->cat, o->ovpath);
	if (r == -EBADMSG)
		base_error("not a ferry manifest overlay (remove it and it is "
			   "fetched again) path=%s",
			   o->ovpath);
	else if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot open the manifest overlay path=%s",
			     o->ovpath);
	return r;
}

int hyd_open_local(struct hyd_open *o)
{
	char why[256];
	int r;

	/* The tree rule (cat_check_tree) for every consumer of the cache:
	 * a catalog the download installed passed it and is marked, so
	 * this costs a stat; one put there otherwise (an older ferry, by
	 * hand) is checked once here and marked. */
	r = cat_reader_open_checked(o->catpath, 1, &o->cat, why, sizeof(why));
	if (r == -EBADMSG && why[0])
		base_error("not a valid ferry catalog: %s path=%s", why,
			   o->catpath);
	else if (r == -EBADMSG)
		base_error("not a valid ferry catalog path=%s", o->catpath);
	else if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot open the catalog path=%s", o->catpath);
	if (r < 0)
		return r;
	cat_reader_meta(o->cat, &o->meta);
	if (o->store)
		hyd_store_set_max_raw(o->store, o->meta.params.max);
	o->ovpath[0] = '\0';
	if (o->meta.pending > 0)
		return open_overlay(o);
	return 0;
}

int hyd_open_reader(const struct hyd_open *o, cat_reader **ret)
{
	int r;

	r = cat_reader_open(o->catpath, ret);
	if (r == 0 && o->ovpath[0]) {
		r = cat_reader_attach_overlay(*ret, o->ovpath);
		if (r < 0) {
			cat_reader_close(*ret);
			*ret = NULL;
		}
	}
	return r;
}

void hyd_open_close(struct hyd_open *o)
{
	cat_reader_close(o->cat);
	o->cat = NULL;
	cat_overlay_close(o->ov);
	o->ov = NULL;
	hyd_store_close(o->store);
	o->store = NULL;
}
