/*
 * hydrator/hyd_main_priv.h — what ferry-hydrator's main (hyd_main.c)
 * shares with the rest of its room: the glue of --into
 * (hyd_main_into.c), which lands the mount's generations in DIR.
 */
#ifndef FERRY_HYD_MAIN_PRIV_H
#define FERRY_HYD_MAIN_PRIV_H

#include <stdint.h>

#include "hydrator/backfill/hyd_backfill.h"
#include "hydrator/hydrator.h"
#include "hydrator/read/hyd_read.h"

struct hyd_main_into {
	struct hyd_fs *fs; /* the mount's generations */
	hyd_backfill *bf;  /* the mount's backfill */
	hyd_into *into;	   /* NULL: no --into */
};

/* Set up --into DIR (absolute) for the mount: what cfg lacks (the
 * generation and backfill hooks) comes from mi. 0 or -errno (logged). */
int hyd_main_into_new(struct hyd_main_into *mi, struct hyd_into_config *cfg);
/* Start landing (after any fork); 0 or -errno (logged). */
int hyd_main_into_start(struct hyd_main_into *mi);
/* Stop and free; mi->into is NULL afterwards. */
void hyd_main_into_free(struct hyd_main_into *mi);
/* The status fields of --into (none when not given). */
void hyd_main_into_status(struct hyd_main_into *mi, struct hyd_status *st);

/* --cache-max, --cold-dir, --cold-max, --pin (hyd_main_cache.c). */
#define HYD_PINS_MAX 64
struct hyd_main_cache {
	uint64_t max, cold_max; /* 0: none */
	char *cold_dir;		/* absolute; NULL: no capacity tier */
	const char *pins[HYD_PINS_MAX];
	size_t npins;
	char pins_file[4200]; /* CACHEDIR/pins: what ferry pin adds */
	hyd_store *store;     /* the mount's, borrowed */
	hyd_store *cold;      /* the capacity tier's, owned */
	hyd_backfill *bf;
	const struct hyd_read_counts *rcounts;
};
/* Check the options (0, or -1 logged) and, given cache_dir (may be
 * NULL), name the pins file. */
int hyd_main_cache_opts(struct hyd_main_cache *mc, const char *cache_dir);
/* After any fork, before the first put: open the capacity tier and
 * bound the store. 0 or -1 (logged). */
int hyd_main_cache_start(struct hyd_main_cache *mc, hyd_store *store);
/* After the store is closed: the capacity tier too. */
void hyd_main_cache_close(struct hyd_main_cache *mc);
void hyd_main_cache_status(struct hyd_main_cache *mc, struct hyd_status *st);
/* The control socket's "pin PATH". */
int hyd_main_cache_pin(void *arg, const char *path, char *err, size_t cap);

/* After `ferry finish` (CACHEDIR/HYD_INTO_FINISHED), once the mount is
 * gone: the store's files are removed (DIR holds every byte, checked);
 * catalogs, logs and the landing's record stay. Nothing without it. */
void hyd_main_into_drop_store(const char *cache);

#endif
