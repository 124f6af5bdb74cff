/*
 * hydrator/fetch/hyd_open.h — opening a cache directory for one
 * URL: the start-up the mount (hyd_main.c) and `ferry sync` (sync/) share.
 *
 * In order: the URL is checked and split into base and namespace name; the
 * cache directory is the one given or the URL's default, created 0700 and
 * made absolute; the chunk store is opened (its lock); the catalog is
 * fetched (or, with the server unreachable, the newest cached one of the
 * same URL is used) and opened; when it lists pending files (format 2),
 * their manifest overlay CACHEDIR/catalogs/GEN.overlay.db is created or
 * opened beside it and attached to the reader. Each step logs one line naming
 * what failed and returns -errno, so a caller only stops. Blocking; before any
 * thread or event loop starts.
 */
#ifndef FERRY_HYD_OPEN_H
#define FERRY_HYD_OPEN_H

#include <limits.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"
#include "hydrator/store/hyd_store.h"

struct hyd_open {
	char base[HYD_URL_MAX + 1];	 /* normalized base URL */
	char name[BASE_NS_NAME_MAX + 1]; /* namespace name */
	char cache[PATH_MAX];		 /* absolute cache directory */
	char catpath[PATH_MAX];		 /* CACHEDIR/catalogs/GEN.db */
	hyd_store *store;		 /* owned; hyd_open_close closes */
	cat_reader *cat;		 /* owned; hyd_open_close closes */
	struct cat_meta meta;		 /* of cat */
	/* Only when meta.pending > 0 (else "" and NULL): the manifest
	 * overlay beside the catalog, its writer (owned; hyd_open_close
	 * closes), attached to cat and to every hyd_open_reader. */
	char ovpath[PATH_MAX];
	cat_overlay *ov;
	int from_cache; /* the server was unreachable: cached catalog */
	/* hyd_open_catalog's transfers: requests, body bytes (metrics) */
	uint64_t cat_requests, cat_bytes;
	/* and the least round trip they saw (ns; 0: none answered) */
	uint64_t cat_rtt_ns;
	const struct hyd_creds *creds; /* set by the caller before
					* hyd_open_catalog; borrowed; NULL:
					* none */
};

/* Check url (hyd_url_parse) into o->base and o->name. -EINVAL (logged:
 * a usage error), -errno. o must start zeroed. */
int hyd_open_url(struct hyd_open *o, const char *url);

/* The cache directory: given (may be NULL: the default of o->base) is
 * created with missing parents (0700) and its absolute path kept in
 * o->cache. 0 or -errno (logged). */
int hyd_open_cache_dir(struct hyd_open *o, const char *given);

/* Open the chunk store in o->cache. -EBUSY (logged with the holder's pid
 * when it recorded one), -errno (logged). */
int hyd_open_store(struct hyd_open *o);

/* Fetch the catalog (hyd_catalog_fetch, connect timeout in seconds), open
 * it, read its meta and bound the store's frames by its max chunk size.
 * A cached catalog used for an unreachable server is logged as a warning.
 * 0 or -errno (logged): -EHOSTUNREACH for a server refused or with no
 * route, -ETIMEDOUT when connecting to it timed out (no cache stood in). */
int hyd_open_catalog(struct hyd_open *o, long connect_timeout_s);

/* Open the catalog at o->catpath (already fetched) into o->cat with its
 * meta, and when it has pending files the overlay (o->ovpath, o->ov,
 * created when missing) attached to it. hyd_open_catalog ends with this;
 * a daemon calls it again after fork (SQLite connections must not cross
 * one). 0 or -errno (logged). */
int hyd_open_local(struct hyd_open *o);

/* Another reader of o's catalog (for a thread of its own), with the
 * overlay attached when there is one. 0 or -errno (not logged: the
 * caller says what the reader was for). The caller closes *ret. */
int hyd_open_reader(const struct hyd_open *o, cat_reader **ret);

/* Close the catalog, the overlay and the store; o keeps its names. */
void hyd_open_close(struct hyd_open *o);

#endif
