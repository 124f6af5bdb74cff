/*
 * hydrator/fetch/hyd_manifest_bulk_priv.h — the bulk prefetch of a
 * catalog's pending manifests (hyd_manifest_bulk.c), as the manifest
 * fetcher (hyd_manifest.c) owns it: hyd_manifest_prefetch starts one,
 * hyd_manifest_want forwards to it, hyd_manifest_free stops it.
 */
#ifndef FERRY_HYD_MANIFEST_BULK_PRIV_H
#define FERRY_HYD_MANIFEST_BULK_PRIV_H

#include <stdint.h>

#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_manifest.h"

struct hyd_mbulk;

/* Start threads workers fetching r's missing manifests through m (0:
 * HYD_MANIFEST_PREFETCH_THREADS). r is borrowed until hyd_mbulk_stop.
 * 0, -ENOMEM, -errno of pthread_create. */
int hyd_mbulk_start(hyd_manifest *m, cat_reader *r, unsigned threads,
		    struct hyd_mbulk **ret);
/* The same, fetching only the segments hyd_mbulk_want names (no sweep);
 * the workers then end only at hyd_mbulk_stop. */
int hyd_mbulk_start_asked(hyd_manifest *m, cat_reader *r, unsigned threads,
			  struct hyd_mbulk **ret);
/* ino's segment next (NULL b: no-op). Any thread. */
void hyd_mbulk_want(struct hyd_mbulk *b, uint64_t ino);
void hyd_mbulk_progress(struct hyd_mbulk *b, uint64_t *ret_segments,
			uint64_t *ret_files, int *ret_running);
/* Stop the workers (a running request ends within about a second), join
 * them, free. NULL is a no-op. */
void hyd_mbulk_stop(struct hyd_mbulk *b);

#endif
