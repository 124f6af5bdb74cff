/*
 * hydrator/sync/hyd_into_check.c — `ferry finish`'s check of an --into
 * DIR against the generation it is to hold: the tree writer's dry run
 * with --delete (hyd_materialize.c), which names every entry it would
 * create, change or delete. Files the landing wrote are known by the
 * record of what was written (hyd_sync_record.c: size, times, inode and
 * the manifest's digest), so the check is a stat per entry, not a read;
 * a file the record does not know is compared by its bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define SNAP_NS 1000000000ull /* see cat_reader_snapshots */
#define SAY_EVERY_NS (10ull * 1000000000ull)

struct diffs {
	uint64_t n;
	const char *dir;
	uint64_t bytes_total, t0, said;
};

/* How far the check is, every SAY_EVERY_NS: on an estate of millions of
 * files it takes minutes (a stat and a few catalog lookups a file). */
static void tick(void *arg, uint64_t files, uint64_t bytes)
{
	struct diffs *d = arg;
	uint64_t now = base_now_ns();

	if (now - d->said < SAY_EVERY_NS)
		return;
	d->said = now;
	base_info("checking dir=%s: %" PRIu64 " files, %.1f%% of %" PRIu64
		  " bytes, %.0f s",
		  d->dir, files,
		  d->bytes_total
		      ? 100.0 * (double)bytes / (double)d->bytes_total
		      : 100.0,
		  d->bytes_total, (double)(now - d->t0) / 1e9);
}

static void item(void *arg, const char *code, const char *path,
		 const char *extra, const struct hyd_item_attrs *attrs)
{
	struct diffs *d = arg;

	(void)attrs;
	d->n++;
	base_warn("--into DIR differs: %s %s%s", code, path, extra);
}

int hyd_into_check(const char *cache_dir, const char *dir, uint64_t *ret_diffs)
{
	char catpath[4096], ovpath[4096];
	struct hyd_sync_unsafe unsafe = {0};
	struct hyd_sync_result res;
	struct cat_meta meta;
	struct diffs d = {.dir = dir, .t0 = base_now_ns()};
	struct hyd_mat m;
	cat_reader *cat = NULL;
	hyd_filter *keep = hyd_place_filter();
	int r;

	if (!keep)
		return -ENOMEM;
	r = hyd_cache_catalog_newest(cache_dir, catpath, sizeof(catpath), NULL);
	if (r == 0)
		r = cat_reader_open(catpath, &cat);
	if (r == 0 &&
	    hyd_cache_overlay_path(catpath, ovpath, sizeof(ovpath)) == 0 &&
	    access(ovpath, F_OK) == 0)
		r = cat_reader_attach_overlay(cat, ovpath);
	if (r == 0)
		r = hyd_sync__unsafe_scan(catpath, &unsafe);
	if (r < 0) {
		cat_reader_close(cat);
		hyd_filter_free(keep);
		return r;
	}
	cat_reader_meta(cat, &meta);
	cat_reader_snapshots(cat, SNAP_NS);
	d.bytes_total = meta.bytes;
	d.said = d.t0;
	memset(&res, 0, sizeof(res));
	memset(&m, 0, sizeof(m));
	m.cat = cat;
	m.max_raw = meta.params.max;
	m.dest = dir;
	m.owners = geteuid() == 0;
	m.res = &res;
	m.pending = meta.pending;
	m.delete_extra = 1;
	m.filter = keep; /* the landing's files being filled */
	m.dry_run = 1;
	m.left_out = meta.left_out;
	m.root_ino = CAT_ROOT_INO;
	m.cache_dir = cache_dir;
	m.unsafe = &unsafe;
	m.item = item;
	m.item_arg = &d;
	m.tick = tick;
	m.tick_arg = &d;
	r = hyd_sync__materialize(&m);
	hyd_sync__unsafe_free(&unsafe);
	cat_reader_close(cat);
	hyd_filter_free(keep);
	if (r < 0)
		return r;
	*ret_diffs = d.n + res.failed;
	base_info("checked dir=%s files=%" PRIu64 " dirs=%" PRIu64
		  " symlinks=%" PRIu64 " differences=%" PRIu64 " secs=%.1f",
		  dir, res.files, res.dirs, res.symlinks, *ret_diffs,
		  (double)(base_now_ns() - d.t0) / 1e9);
	return 0;
}
