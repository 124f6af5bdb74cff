/*
 * hydrator/hyd_main_into.c — ferry-hydrator's --into DIR: the landing
 * thread (hydrator/sync/hyd_into.c) fed with the mount's current
 * generation and told when backfill still fetches it.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hyd_main_priv.h"

static int current(void *arg, struct hyd_into_gen *ret)
{
	struct hyd_main_into *mi = arg;
	struct hyd_gen *g = hyd_fs_gen(mi->fs);

	if (!g)
		return -ENOENT;
	ret->generation = g->generation;
	ret->catpath = g->catpath;
	ret->ovpath = g->ovpath;
	ret->manifest = g->manifest;
	ret->ref = g;
	return 0;
}

static void release(void *arg, struct hyd_into_gen *g)
{
	(void)arg;
	hyd_gen_unref(g->ref);
	g->ref = NULL;
}

/* Backfill is fetching (or about to fetch) what the store lacks. */
static int filling(void *arg)
{
	struct hyd_main_into *mi = arg;
	struct hyd_backfill_stats st;

	hyd_backfill_stats(mi->bf, &st);
	return st.state == HYD_STATE_BACKFILLING ||
	       st.state == HYD_STATE_BROWSING;
}

static void want(void *arg, uint64_t ino)
{
	struct hyd_main_into *mi = arg;

	hyd_backfill_note_open(mi->bf, ino);
}

int hyd_main_into_new(struct hyd_main_into *mi, struct hyd_into_config *cfg)
{
	int r;

	cfg->current = current;
	cfg->release = release;
	cfg->filling = filling;
	cfg->want = want;
	cfg->arg = mi;
	r = hyd_into_new(cfg, &mi->into);
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r, "cannot set up --into dir=%s",
			     cfg->dir);
	return r;
}

int hyd_main_into_start(struct hyd_main_into *mi)
{
	int r;

	if (!mi->into)
		return 0;
	r = hyd_into_start(mi->into);
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r, "cannot start --into");
	return r;
}

void hyd_main_into_free(struct hyd_main_into *mi)
{
	hyd_into_free(mi->into);
	mi->into = NULL;
}

void hyd_main_into_status(struct hyd_main_into *mi, struct hyd_status *st)
{
	struct hyd_into_stats is;

	if (!mi->into)
		return;
	hyd_into_stats(mi->into, &is);
	snprintf(st->into, sizeof(st->into), "%s",
		 is.state == HYD_INTO_LANDED ? "landed" : "landing");
	st->into_generation = is.landed;
	st->into_landing = is.state == HYD_INTO_LANDED ? 0 : is.landing;
	st->into_failed = is.failed;
	if (is.last_error[0] && !st->last_error[0])
		snprintf(st->last_error, sizeof(st->last_error),
			 "--into: %.200s", is.last_error);
}

/* Remove dir/name; its size added to *freed. */
static void drop(const char *dir, const char *name, uint64_t *freed)
{
	char p[4400];
	struct stat sb;

	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, name) >= sizeof(p))
		return;
	if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(p) == 0)
		*freed += (uint64_t)sb.st_blocks * 512;
}

void hyd_main_into_drop_store(const char *cache)
{
	char flag[4200], vols[4200], dir[4096];
	uint64_t freed = 0, gen = 0;
	struct dirent *e;
	DIR *d;

	snprintf(flag, sizeof(flag), "%s/" HYD_INTO_FINISHED, cache);
	if (access(flag, F_OK) < 0)
		return;
	/* the index first: a store without it is empty, whatever volumes
	 * are left (a crash here leaves files a later mount ignores) */
	drop(cache, "state.db", &freed);
	drop(cache, "state.db-wal", &freed);
	drop(cache, "state.db-shm", &freed);
	/* and the record of what was placed in DIR (the parts are gone
	 * once a generation landed whole) */
	if (hyd_into_state_read(cache, dir, sizeof(dir), &gen) == 0)
		hyd_place_drop(cache, dir);
	snprintf(vols, sizeof(vols), "%s/volumes", cache);
	d = opendir(vols);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			drop(vols, e->d_name, &freed);
	if (d)
		closedir(d);
	base_info("finished: the store's chunks are dropped (the --into "
		  "directory holds the tree) freed_bytes=%" PRIu64,
		  freed);
}
