/*
 * hydrator/backfill/hyd_backfill_pins.c — pinned paths, and the walk's
 * room under a cache bound (--cache-max).
 *
 * Pins. Patterns come from --pin and from CACHEDIR/pins (one per line,
 * appended by `ferry pin`). A pattern is a shell glob (fnmatch with
 * FNM_PATHNAME: `*` stays inside one component) matched against each
 * entry's path from the tree's root, without a leading '/'; an entry that
 * matches pins itself and, for a directory, everything under it. The
 * tree is walked from the root, directory by directory (a cost per entry,
 * once for each generation and each new pin); the regular files pinned
 * then have their chunks pinned in the store (hyd_store_pin: never
 * evicted, those not yet stored pinned as they land) and asked for, ahead
 * of the traces and the walk.
 *
 * Room. Under a bound the walk is "keep the working set": it fetches only
 * while the store and the flights outstanding hold less than
 * HYD_BF_FILL_PCT % of the bound, then stops for good (for this
 * generation): it never evicts to make room, so it cannot push out what
 * jobs read; reads fetch the rest, and eviction makes their room.
 */
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "hydrator/backfill/hyd_backfill_priv.h"

#define PIN_STEP 256u
#define PIN_LINE_MAX 4096u

/* The patterns of this pass: --pin's, then the pins file's lines. */
struct pin_pats {
	char **v;
	size_t n, cap;
};

static int pats_add(struct pin_pats *p, const char *s, size_t len)
{
	while (len && s[0] == '/') {
		s++;
		len--;
	}
	while (len && (s[len - 1] == '/' || s[len - 1] == '\n'))
		len--;
	if (!len)
		return 0;
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 8;
		char **nv = realloc(p->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		p->v = nv;
		p->cap = cap;
	}
	p->v[p->n] = strndup(s, len);
	if (!p->v[p->n])
		return -ENOMEM;
	p->n++;
	return 0;
}

static void pats_free(struct pin_pats *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
	memset(p, 0, sizeof(*p));
}

static int pats_load(const hyd_backfill *bf, struct pin_pats *p)
{
	char line[PIN_LINE_MAX];
	FILE *f;
	int r = 0;

	for (size_t i = 0; r == 0 && i < bf->cfg.npins; i++)
		r = pats_add(p, bf->cfg.pins[i], strlen(bf->cfg.pins[i]));
	if (r < 0 || !bf->cfg.pins_file)
		return r;
	f = fopen(bf->cfg.pins_file, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while (r == 0 && fgets(line, sizeof(line), f))
		if (line[0] != '#')
			r = pats_add(p, line, strlen(line));
	fclose(f);
	return r;
}

static int pats_match(const struct pin_pats *p, const char *path)
{
	for (size_t i = 0; i < p->n; i++)
		if (fnmatch(p->v[i], path, FNM_PATHNAME) == 0)
			return 1;
	return 0;
}

/* A directory still to read: its ino, its path, and whether a pattern
 * matched it or a directory above it. */
struct pin_dir {
	uint64_t ino;
	char *path;
	int pinned;
};

struct pin_file {
	uint64_t ino, size;
};

struct pin_walk {
	const struct pin_pats *pats;
	struct pin_dir *dirs;
	size_t ndirs, capdirs;
	const struct pin_dir *at; /* the directory being read */
	struct pin_file *files;	  /* pinned regular files */
	size_t nfiles, capfiles;
	uint64_t bytes;
	int err;
};

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *nv;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : 64;
	nv = realloc(*v, c * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = c;
	return 0;
}

static int on_entry(void *ctx, const void *name, size_t name_len,
		    const struct cat_inode *in, uint64_t pos)
{
	struct pin_walk *w = ctx;
	const char *dir = w->at->path;
	size_t dl = strlen(dir);
	char *path;
	int pinned;

	(void)pos;
	path = malloc(dl + name_len + 2);
	if (!path) {
		w->err = -ENOMEM;
		return 1;
	}
	if (dl) {
		memcpy(path, dir, dl);
		path[dl++] = '/';
	}
	memcpy(path + dl, name, name_len);
	path[dl + name_len] = '\0';
	pinned = w->at->pinned || pats_match(w->pats, path);
	if (in->kind == CAT_DIR) {
		if (grow((void **)&w->dirs, &w->capdirs, w->ndirs,
			 sizeof(*w->dirs)) < 0) {
			free(path);
			w->err = -ENOMEM;
			return 1;
		}
		w->dirs[w->ndirs++] = (struct pin_dir){
		    .ino = in->ino, .path = path, .pinned = pinned};
		return 0;
	}
	free(path);
	if (!pinned || in->kind != CAT_REG || in->size == 0)
		return 0;
	if (grow((void **)&w->files, &w->capfiles, w->nfiles,
		 sizeof(*w->files)) < 0) {
		w->err = -ENOMEM;
		return 1;
	}
	w->files[w->nfiles++] = (struct pin_file){in->ino, in->size};
	w->bytes += in->size;
	return 0;
}

/* The pinned regular files of the catalog, by a walk from the root. */
static int walk(hyd_backfill *bf, struct pin_walk *w)
{
	int r = 0;

	if (grow((void **)&w->dirs, &w->capdirs, 0, sizeof(*w->dirs)) < 0)
		return -ENOMEM;
	w->dirs[0] = (struct pin_dir){
	    .ino = CAT_ROOT_INO, .path = strdup(""), .pinned = 0};
	if (!w->dirs[0].path)
		return -ENOMEM;
	w->ndirs = 1;
	while (w->ndirs && r == 0) {
		struct pin_dir d = w->dirs[--w->ndirs];

		if (hyd_bf__stopped(bf))
			r = -ECANCELED;
		w->at = &d;
		if (r == 0)
			r = cat_readdir(bf->cfg.cat, d.ino, 0, on_entry, w);
		if (r > 0)
			r = w->err;
		free(d.path);
	}
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	w->dirs = NULL;
	return r;
}

/* Pin every chunk of ino, then ask for those not stored. */
static int pin_file(hyd_backfill *bf, uint64_t ino, uint64_t size)
{
	struct cat_chunk cs[PIN_STEP];
	chunk_id ids[PIN_STEP];
	uint64_t off = 0;
	size_t n, k;
	int r, fetched = 0;

	while (off < size) {
		r = cat_chunks_range(bf->cfg.cat, ino, off, size - off, cs,
				     PIN_STEP, &n);
		if (r == -EAGAIN && !fetched) {
			fetched = 1;
			r = hyd_bf__file_manifest(bf, ino);
			if (r == 0)
				continue;
			return r < 0 ? r : 0; /* not hashed yet: next pass */
		}
		if (r < 0 || n == 0)
			return r == -ECANCELED ? r : 0;
		for (k = 0; k < n; k++)
			ids[k] = cs[k].id;
		r = hyd_store_pin(bf->cfg.store, ids, n);
		if (r < 0)
			return r;
		for (k = 0; k < n; k++) {
			if (chunk_id_is_hole(&cs[k].id))
				continue;
			r = hyd_bf__submit_chunk(bf, &cs[k], 0);
			if (r < 0)
				return r;
		}
		off = cs[n - 1].off + cs[n - 1].len;
	}
	return 0;
}

int hyd_bf__pins(hyd_backfill *bf)
{
	struct pin_pats pats = {0};
	struct pin_walk w = {0};
	uint64_t t0 = base_now_ns();
	int r;

	pthread_mutex_lock(&bf->lock);
	bf->pins_dirty = 0;
	pthread_mutex_unlock(&bf->lock);
	bf->waiting_seg = UINT64_MAX;
	bf->seg_failed_set = 0;
	r = pats_load(bf, &pats);
	if (r < 0) {
		base_log_err(BASE_LOG_WARN, r, "pins: cannot read file=%s",
			     bf->cfg.pins_file ? bf->cfg.pins_file : "-");
		pats_free(&pats);
		return 0;
	}
	if (!pats.n) {
		pats_free(&pats);
		return 0;
	}
	w.pats = &pats;
	r = walk(bf, &w);
	if (r == 0) {
		pthread_mutex_lock(&bf->lock);
		bf->pin_files = w.nfiles;
		bf->pin_bytes = w.bytes;
		pthread_mutex_unlock(&bf->lock);
	}
	bf->in_opened = 1; /* the doubled window, at HYD_PRIO_NEAR */
	bf->pinning = 1;
	for (size_t i = 0; r == 0 && i < w.nfiles; i++) {
		r = pin_file(bf, w.files[i].ino, w.files[i].size);
		if ((i & 63) == 0)
			hyd_bf__tick(bf);
	}
	bf->in_opened = 0;
	bf->pinning = 0;
	if (r == 0)
		hyd_bf__drain(bf);
	if (r < 0 && r != -ECANCELED)
		base_log_err(BASE_LOG_WARN, r,
			     "pins: not every pinned file was asked for; the "
			     "next pass tries again");
	else if (r == 0)
		base_info("pins done patterns=%zu files=%zu bytes=%" PRIu64
			  " seconds=%.2f",
			  pats.n, w.nfiles, w.bytes,
			  (double)(base_now_ns() - t0) / 1e9);
	free(w.files);
	pats_free(&pats);
	return r == -ECANCELED ? r : 0;
}

int hyd_bf__room(hyd_backfill *bf)
{
	struct hyd_store_stats st;
	uint64_t out, fill;

	if (!bf->cfg.bound)
		return 1;
	if (hyd_store_stats(bf->cfg.store, &st) < 0)
		return 1;
	/* Anything evicted since the walk began: the store is full of
	 * what was read or pinned, and the walk would only push it out. */
	if (!bf->evicted_at_walk)
		bf->evicted_at_walk = st.evicted + 1;
	if (st.evicted + 1 > bf->evicted_at_walk)
		return 0;
	pthread_mutex_lock(&bf->lock);
	out = bf->outstanding_bytes;
	pthread_mutex_unlock(&bf->lock);
	fill = bf->cfg.bound / 100 * HYD_BF_FILL_PCT;
	/* landed and not yet indexed counts too */
	return st.held_bytes + st.pending_bytes + out < fill;
}

void hyd_backfill_pins_changed(hyd_backfill *bf)
{
	if (!bf)
		return;
	pthread_mutex_lock(&bf->lock);
	bf->pins_dirty = 1;
	pthread_cond_broadcast(&bf->cond);
	pthread_mutex_unlock(&bf->lock);
}
