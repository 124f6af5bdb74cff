/*
 * hydrator/sync/hyd_sync_merge.c — the source's per-directory merge files
 * (rsync's dir-merge rules: -F's ".rsync-filter", -C's ".cvsignore"),
 * read for `ferry sync` as its select walk enters each directory.
 *
 * A merge file is a small regular file of the source's catalog: its
 * bytes come as every file's do, chunk by chunk from the store or the
 * fetcher (each verified by its SHA-256), after its manifest when it is
 * pending. A file that cannot be read stops the run: a rule missing
 * would transfer or delete what the user meant to keep out.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define RANGE_ROWS 16

/* Make ino's chunk rows readable. 0 or -errno with *why. */
static int manifest(struct hyd_sync_merge *mg, uint64_t ino, const char **why)
{
	int st, r;

	if (!mg->pending)
		return 0;
	st = cat_manifest_state(mg->cat, ino);
	if (st == CAT_MANIFEST_MISSING && mg->manifest) {
		r = hyd_manifest_file(mg->manifest, mg->cat, ino,
				      base_now_ns() + mg->timeout_ns, NULL);
		if (r < 0) {
			*why = "cannot fetch its manifest";
			return r;
		}
		st = cat_manifest_state(mg->cat, ino);
	}
	if (st < 0) {
		*why = "cannot read where its manifest is";
		return st;
	}
	if (st == CAT_MANIFEST_CHANGED) {
		*why = "the source changed before its manifest was made";
		return -ESTALE;
	}
	if (st == CAT_MANIFEST_MISSING) {
		*why = "its manifest is not local and the server cannot be "
		       "reached";
		return -EAGAIN;
	}
	return 0;
}

/* One chunk's verified bytes into out (c->len of room). */
static int chunk(struct hyd_sync_merge *mg, const struct cat_chunk *c,
		 uint8_t *out, uint8_t *buf, const char **why)
{
	size_t got = 0;
	int r;

	if (chunk_id_is_hole(&c->id)) {
		memset(out, 0, c->len);
		return 0;
	}
	r = hyd_store_get(mg->store, &c->id, buf, mg->max_raw, &got);
	if (r == 0 && got == c->len) {
		memcpy(out, buf, c->len);
		return 0;
	}
	if (r == 0 || (r != -ENOENT && r != -EBADMSG)) {
		*why = "cannot read a chunk from the store";
		return r == 0 ? -EBADMSG : r;
	}
	if (!mg->fetch) {
		*why = "a chunk is not stored and the server cannot be reached";
		return -EAGAIN;
	}
	r = hyd_sync__fetch_chunk(mg->fetch, c, mg->timeout_ns, out);
	if (r < 0)
		*why = "cannot fetch a chunk";
	return r < 0 ? r : 0;
}

/* The whole of regular file in (size bytes) into *ret. */
static int read_all(struct hyd_sync_merge *mg, const struct cat_inode *in,
		    char **ret, const char **why)
{
	struct cat_chunk cs[RANGE_ROWS];
	uint8_t *buf = NULL;
	char *text = malloc(in->size + 1);
	uint64_t off = 0;
	size_t n, i;
	int r;

	r = text ? manifest(mg, in->ino, why) : -ENOMEM;
	if (r == 0 && in->size) {
		buf = malloc(mg->max_raw);
		if (!buf)
			r = -ENOMEM;
	}
	while (r == 0 && off < in->size) {
		r = cat_chunks_range(mg->cat, in->ino, off, in->size - off, cs,
				     RANGE_ROWS, &n);
		if (r == 0 && n == 0)
			r = -EBADMSG;
		for (i = 0; r == 0 && i < n; i++) {
			if (cs[i].off != off || cs[i].len > in->size - off ||
			    cs[i].len > mg->max_raw) {
				r = -EBADMSG;
				break;
			}
			r = chunk(mg, &cs[i], (uint8_t *)text + off, buf, why);
			off += cs[i].len;
		}
		if (r == -EBADMSG && !(*why)[0])
			*why = "its manifest does not cover it";
	}
	free(buf);
	if (r < 0) {
		if (r == -ENOMEM)
			*why = "out of memory";
		free(text);
		return r;
	}
	text[in->size] = '\0';
	*ret = text;
	return 0;
}

int hyd_sync__merge_dir(struct hyd_sync_merge *mg, uint64_t dir,
			const char *path)
{
	size_t n = hyd_filter_merges(mg->f);

	for (size_t i = 0; i < n; i++) {
		const char *name = hyd_filter_merge_name(mg->f, i), *why = "";
		struct cat_inode in;
		char *text = NULL;
		int r;

		r = cat_lookup(mg->cat, dir, name, strlen(name), &in);
		if (r == -ENOENT || (r == 0 && in.kind != CAT_REG))
			continue;
		if (r == 0 && in.size > HYD_SYNC_MERGE_MAX) {
			why = "larger than a merge file may be (1 MiB)";
			r = -EFBIG;
		}
		if (r == 0)
			r = read_all(mg, &in, &text, &why);
		if (r == 0) {
			r = hyd_filter_merge_load(mg->f, i, path, text,
						  (size_t)in.size, &why);
			free(text);
		}
		if (r < 0) {
			base_log_err(
			    BASE_LOG_ERROR, r,
			    "per-directory merge file: %s path=\"%s%s%s\"",
			    why[0] ? why : "cannot read it", path,
			    path[0] ? "/" : "", name);
			return r;
		}
		mg->files++;
		mg->bytes += in.size;
	}
	return 0;
}
