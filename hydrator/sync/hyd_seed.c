/*
 * hydrator/sync/hyd_seed.c — local data as a seed: chunks of files already
 * on this machine are verified and stored instead of fetched.
 *
 * For one regular file of the catalog the candidates are, in order,
 * the part a mount with `--into DEST` was filling for it
 * (DEST/.ferry-into/INO: its verified ranges sit at the file's own
 * offsets, the rest is holes), DEST's own file at the same path (rsync's
 * basis file; `ferry sync` only) and DIR/PATH for each seed directory.
 *
 *   by size and mtime  DEST's file, or a --link-dest, --copy-dest or
 *           --compare-dest DIR's (for a sync a --seed DIR's too, copied
 *           as --copy-dest copies), with the catalog's size and mtime
 *           (rsync's quick check): nothing of it is fetched or read here.
 *           The writer checks it against the manifest as it keeps,
 *           links, copies or leaves it (hyd_mat_seed.c), and fetches
 *           what does not match.
 *   chunks  otherwise, only when the store lacks most of the file's
 *           chunks (a rerun's cache that holds a changed file's old chunks
 *           lacks only its new content, which no seed has): first at the
 *           manifest's own offsets (a file that did
 *           not change, or changed in place), then, for what is still
 *           missing, by cutting the candidate as the source cuts
 *           (FastCDC with the catalog's parameters) so bytes that moved
 *           after an insertion are found too. Each chunk that hashes to a
 *           wanted id is compressed and stored (async puts, group commit).
 *
 * A file whose manifest the source has not published yet (namespace
 * first: it is still hashing) and that has a candidate is kept by path
 * until its manifest comes (hyd_seeder_again); the mount's walk
 * (hyd_seeder_tree) waits for such files itself. A candidate that is
 * missing, not a regular file or unreadable is skipped: a seed only
 * ever saves fetches, it never fails a run. Nothing read from a seed is
 * stored unless its SHA-256 is the catalog's. What it costs: an lstat
 * per candidate per file, a read of a candidate only for a file the
 * store does not hold whole (a rerun after everything is stored reads
 * nothing), and, while manifests are pending, the path of each pending
 * file with a candidate in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hydrator/sync/hyd_sync_priv.h"

#define ROWS 64u
/* Aligned reads that miss in a row before a candidate of another size is
 * taken as shifted (the cutting pass then finds what moved). */
#define MISS_STREAK 8u
/* Wanted ids a cutting pass looks for, at most (32 MiB of ids). */
#define WANT_MAX (1u << 20)
/* The mount's walk: how often files waiting for a manifest are tried. */
#define LATER_POLL_NS 500000000L

/* A file seeded once its manifest comes: its path at arena + off. */
struct later {
	uint64_t ino;
	size_t off;
};

/* Open addressing set of wanted chunk ids (0: empty slot; a hole id is
 * never wanted, and no real chunk hashes to zeros). */
struct idset {
	chunk_id *v;
	size_t cap, n;
};

struct hyd_seeder {
	hyd_store *store;
	chunk_params p;
	const char *dest; /* DEST (its files seed their path), or NULL */
	int parts;	  /* DEST/.ferry-into is there (looked once) */
	const struct hyd_seed_dir *dirs;
	size_t ndirs;
	frame_coder *coder;
	uint8_t *raw;	/* one chunk */
	uint8_t *frame; /* its frame */
	size_t frame_cap;
	uint8_t *win; /* the cutting pass's window: 2 * max */
	struct idset want;
	struct later *later;
	size_t nlater, caplater;
	int later_sorted;
	char *arena;
	size_t arena_len, arena_cap;
	struct hyd_seed_stats st;
	/* async puts in flight */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t inflight;
	int put_err;
};

/* ---- the wanted set ---- */

static size_t id_slot(const chunk_id *id, size_t cap)
{
	uint64_t h;

	memcpy(&h, id->b, sizeof(h)); /* SHA-256 bits are uniform */
	return (size_t)h & (cap - 1);
}

static int id_empty(const chunk_id *id)
{
	return chunk_id_is_hole(id);
}

static int idset_add(struct idset *s, const chunk_id *id)
{
	size_t i;

	if ((s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024, j;
		chunk_id *v = calloc(cap, sizeof(*v));

		if (!v)
			return -ENOMEM;
		for (j = 0; j < s->cap; j++) {
			if (id_empty(&s->v[j]))
				continue;
			i = id_slot(&s->v[j], cap);
			while (!id_empty(&v[i]))
				i = (i + 1) & (cap - 1);
			v[i] = s->v[j];
		}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	i = id_slot(id, s->cap);
	while (!id_empty(&s->v[i])) {
		if (!memcmp(&s->v[i], id, sizeof(*id)))
			return 0;
		i = (i + 1) & (s->cap - 1);
	}
	s->v[i] = *id;
	s->n++;
	return 0;
}

/* Remove id when present (backward-shift deletion): 1, else 0. */
static int idset_take(struct idset *s, const chunk_id *id)
{
	size_t i, j, k;

	if (!s->n)
		return 0;
	i = id_slot(id, s->cap);
	while (memcmp(&s->v[i], id, sizeof(*id))) {
		if (id_empty(&s->v[i]))
			return 0;
		i = (i + 1) & (s->cap - 1);
	}
	j = i;
	for (;;) {
		j = (j + 1) & (s->cap - 1);
		if (id_empty(&s->v[j]))
			break;
		k = id_slot(&s->v[j], s->cap);
		/* v[j] may move to i when its home k is not in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		s->v[i] = s->v[j];
		i = j;
	}
	memset(&s->v[i], 0, sizeof(s->v[i]));
	s->n--;
	return 1;
}

static void idset_clear(struct idset *s)
{
	if (s->n)
		memset(s->v, 0, s->cap * sizeof(*s->v));
	s->n = 0;
}

/* ---- storing ---- */

static void put_done(void *arg, int rc)
{
	hyd_seeder *sd = arg;

	pthread_mutex_lock(&sd->lock);
	if (rc < 0) {
		sd->st.put_failed++;
		if (!sd->put_err)
			sd->put_err = rc;
	}
	sd->inflight--;
	pthread_cond_broadcast(&sd->cond);
	pthread_mutex_unlock(&sd->lock);
}

/* Verified bytes of id: compressed and stored. */
static int put(hyd_seeder *sd, const chunk_id *id, const uint8_t *raw,
	       size_t len)
{
	size_t flen;
	int r;

	r = frame_encode(sd->coder, FRAME_POLICY_AUTO, 0, raw, len, sd->frame,
			 sd->frame_cap, &flen);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sd->lock);
	sd->inflight++;
	pthread_mutex_unlock(&sd->lock);
	r = hyd_store_put_async(sd->store, id, sd->frame, flen, put_done, sd);
	if (r != 0) {
		pthread_mutex_lock(&sd->lock);
		sd->inflight--;
		pthread_mutex_unlock(&sd->lock);
	}
	if (r < 0)
		return r;
	if (r == 0) {
		sd->st.chunks_seeded++;
		sd->st.bytes_seeded += len;
	}
	return 0;
}

int hyd_seeder_finish(hyd_seeder *sd)
{
	int r;

	pthread_mutex_lock(&sd->lock);
	while (sd->inflight)
		pthread_cond_wait(&sd->cond, &sd->lock);
	r = sd->put_err;
	pthread_mutex_unlock(&sd->lock);
	return r;
}

/* ---- one candidate ---- */

/* Does fd hold data (not only a hole) within [off, off + len)? */
static int has_data(int fd, uint64_t off, uint32_t len)
{
	off_t d = lseek(fd, (off_t)off, SEEK_DATA);

	/* a file system without SEEK_DATA says "all data" */
	if (d < 0)
		return errno != ENXIO;
	return (uint64_t)d < off + len;
}

/* The chunks of ino the store lacks (holes never), at the manifest's
 * offsets in fd (size cand_size); what misses goes into sd->want. sparse:
 * fd is a part, whose ranges never written are holes: those are not read
 * (nor hashed). */
static int aligned(hyd_seeder *sd, cat_reader *cat, const struct cat_inode *in,
		   int fd, uint64_t cand_size, int sparse)
{
	struct cat_chunk cs[ROWS];
	uint64_t off = 0;
	unsigned streak = 0;
	size_t n, i, got;
	int r;

	idset_clear(&sd->want);
	while (off < in->size) {
		r = cat_chunks_range(cat, in->ino, off, in->size - off, cs,
				     ROWS, &n);
		if (r < 0)
			return r;
		if (n == 0)
			return -EAGAIN;
		for (i = 0; i < n; i++) {
			const struct cat_chunk *c = &cs[i];
			int ok = 0;

			off = c->off + c->len;
			if (c->len > sd->p.max)
				return -EBADMSG;
			if (chunk_id_is_hole(&c->id))
				continue;
			r = hyd_store_has(sd->store, &c->id);
			if (r < 0)
				return r;
			if (r == 1)
				continue;
			if (c->off + c->len <= cand_size &&
			    !(streak >= MISS_STREAK && cand_size != in->size) &&
			    (!sparse || has_data(fd, c->off, c->len))) {
				r = base_pread_full(fd, sd->raw, c->len, c->off,
						    &got);
				if (r == 0 && got == c->len) {
					sd->st.bytes_read += got;
					ok = chunk_id_verify(&c->id, sd->raw,
							     got) == 0;
				}
			}
			if (ok) {
				streak = 0;
				r = put(sd, &c->id, sd->raw, c->len);
				if (r < 0)
					return r;
				continue;
			}
			streak++;
			if (sd->want.n < WANT_MAX) {
				r = idset_add(&sd->want, &c->id);
				if (r < 0)
					return r;
			}
		}
	}
	return 0;
}

/* Cut fd as the source cuts and store every piece that is wanted. */
static int cut(hyd_seeder *sd, int fd)
{
	size_t cap = 2 * (size_t)sd->p.max, have = 0, pos = 0, got, len;
	uint64_t at = 0; /* file offset of win[have] */
	int eof = 0;
	chunk_id id;
	int r;

	while (sd->want.n) {
		if (have - pos < sd->p.max && !eof) {
			memmove(sd->win, sd->win + pos, have - pos);
			have -= pos;
			pos = 0;
			r = base_pread_full(fd, sd->win + have, cap - have, at,
					    &got);
			if (r < 0)
				return 0; /* unreadable: what was found stays */
			eof = got < cap - have;
			sd->st.bytes_read += got;
			at += got;
			have += got;
		}
		if (pos == have)
			break;
		/* the chunker's len: min(bytes left in the file, max) */
		len = have - pos < sd->p.max ? have - pos : sd->p.max;
		len = chunker_next(&sd->p, sd->win + pos, len);
		if (len == 0)
			break;
		r = chunk_id_compute(sd->win + pos, len, &id);
		if (r < 0)
			return r;
		if (idset_take(&sd->want, &id)) {
			r = put(sd, &id, sd->win + pos, len);
			if (r < 0)
				return r;
		}
		pos += len;
	}
	return 0;
}

static int join(char *buf, size_t cap, const char *dir, const char *rel)
{
	return (size_t)snprintf(buf, cap, "%s/%s", dir, rel) < cap
		   ? 0
		   : -ENAMETOOLONG;
}

static int quick_same(const struct stat *st, const struct cat_inode *in)
{
	return (uint64_t)st->st_size == in->size &&
	       hyd_sync__mtime_ns(st) == in->mtime_ns;
}

static int open_reg(const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* Chunks from the candidate at path: 1 when the store now holds every
 * chunk of the file, 0 when some are still missing, -errno for a store
 * or catalog failure (-EAGAIN: no manifest). part: path is the part a
 * mount with --into left (part_path), read only at the file's own
 * offsets (a part is never shifted: no cutting pass) and only where it
 * holds data. Its name is the number the mount's generation gave the
 * file: one of another generation may hold another file's bytes, which
 * no SHA-256 of this file matches. */
static int from(hyd_seeder *sd, cat_reader *cat, const struct cat_inode *in,
		const char *path, int part)
{
	struct stat st;
	int fd, r;

	fd = open_reg(path, &st);
	if (fd < 0)
		return 0;
	sd->st.files_read++;
	r = aligned(sd, cat, in, fd, (uint64_t)st.st_size, part);
	if (r == 0 && sd->want.n && !part)
		r = cut(sd, fd);
	close(fd);
	if (r < 0)
		return r;
	return sd->want.n == 0;
}

/* DEST/.ferry-into/INO for in: the part a mount with --into DEST left. */
static int part_path(hyd_seeder *sd, const struct cat_inode *in, char *buf,
		     size_t cap)
{
	int n;

	if (!sd->parts)
		return -ENOENT;
	n = snprintf(buf, cap, "%s/" HYD_PLACE_PARTS "/%" PRIu64, sd->dest,
		     in->ino);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Is a seed worth reading for in: does the store lack most of its chunks
 * (more than half; holes aside)? 1, 0, -errno (-EAGAIN: no manifest yet).
 * When the cache holds most of a file (a rerun after a change), what it
 * lacks is the new content, which no older copy has: reading one would
 * hash the old file twice for nothing. */
static int lacks(hyd_seeder *sd, cat_reader *cat, const struct cat_inode *in)
{
	struct cat_chunk cs[ROWS];
	uint64_t off = 0, total = 0, missing = 0;
	size_t n, i;
	int r;

	while (off < in->size) {
		r = cat_chunks_range(cat, in->ino, off, in->size - off, cs,
				     ROWS, &n);
		if (r < 0)
			return r;
		if (n == 0)
			return -EAGAIN;
		for (i = 0; i < n; i++) {
			off = cs[i].off + cs[i].len;
			if (chunk_id_is_hole(&cs[i].id))
				continue;
			r = hyd_store_has(sd->store, &cs[i].id);
			if (r < 0)
				return r;
			total++;
			missing += r == 0;
		}
	}
	return missing * 2 > total;
}

/* ---- one file ---- */

static int later_add(hyd_seeder *sd, uint64_t ino, const char *rel)
{
	size_t n = strlen(rel) + 1;

	if (sd->nlater == sd->caplater) {
		size_t cap = sd->caplater ? sd->caplater * 2 : 256;
		struct later *v = realloc(sd->later, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		sd->later = v;
		sd->caplater = cap;
	}
	if (sd->arena_len + n > sd->arena_cap) {
		size_t cap = sd->arena_cap ? sd->arena_cap : 4096;
		char *a;

		while (cap < sd->arena_len + n)
			cap *= 2;
		a = realloc(sd->arena, cap);
		if (!a)
			return -ENOMEM;
		sd->arena = a;
		sd->arena_cap = cap;
	}
	memcpy(sd->arena + sd->arena_len, rel, n);
	if (sd->nlater && sd->later[sd->nlater - 1].ino > ino)
		sd->later_sorted = 0;
	sd->later[sd->nlater++] = (struct later){ino, sd->arena_len};
	sd->arena_len += n;
	return 0;
}

/* DEST's file or a seed DIR's at rel: is any a regular file? And, with
 * in, does one (DEST's or a -dest DIR's) have in's size and mtime:
 * HYD_SEED_DEST or HYD_SEED_DIR then. */
static int look(hyd_seeder *sd, const struct cat_inode *in, const char *rel,
		int *ret_any)
{
	char path[PATH_MAX];
	struct stat st;
	size_t i;

	*ret_any = part_path(sd, in, path, sizeof(path)) == 0 &&
		   lstat(path, &st) == 0 && S_ISREG(st.st_mode);
	if (sd->dest && join(path, sizeof(path), sd->dest, rel) == 0 &&
	    lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		*ret_any = 1;
		if (quick_same(&st, in))
			return HYD_SEED_DEST;
	}
	for (i = 0; i < sd->ndirs; i++) {
		if (join(path, sizeof(path), sd->dirs[i].path, rel) < 0 ||
		    lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		*ret_any = 1;
		/* a sync's writer copies such a file (verified) straight from
		 * DIR: cheaper than storing its chunks to read them back; the
		 * mount (no dest) stores them */
		if ((sd->dirs[i].how != HYD_SEED_CHUNKS || sd->dest) &&
		    quick_same(&st, in))
			return HYD_SEED_DIR;
	}
	return HYD_SEED_FETCH;
}

/* hyd_seeder_file; keep: remember a pending file's path. */
static int seed_file(hyd_seeder *sd, cat_reader *cat,
		     const struct cat_inode *in, const char *rel, int keep)
{
	char path[PATH_MAX];
	size_t i;
	int r, any;

	if (in->kind != CAT_REG || in->size == 0)
		return HYD_SEED_FETCH;
	r = look(sd, in, rel, &any);
	if (r != HYD_SEED_FETCH || !any)
		return r;
	r = lacks(sd, cat, in);
	if (r == -EAGAIN) {
		if (!keep)
			return HYD_SEED_FETCH;
		r = later_add(sd, in->ino, rel);
		return r < 0 ? r : HYD_SEED_LATER;
	}
	if (r <= 0)
		return r == -ESTALE ? HYD_SEED_FETCH : r;
	if (part_path(sd, in, path, sizeof(path)) == 0) {
		r = from(sd, cat, in, path, 1);
		if (r != 0)
			goto out;
	}
	if (sd->dest && join(path, sizeof(path), sd->dest, rel) == 0) {
		r = from(sd, cat, in, path, 0);
		if (r != 0)
			goto out;
	}
	for (i = 0; i < sd->ndirs; i++) {
		if (join(path, sizeof(path), sd->dirs[i].path, rel) < 0)
			continue;
		r = from(sd, cat, in, path, 0);
		if (r != 0)
			break;
	}
out:
	if (r == -EAGAIN || r == -ESTALE)
		r = 0;
	return r < 0 ? r : HYD_SEED_FETCH;
}

int hyd_seeder_file(hyd_seeder *sd, cat_reader *cat, const struct cat_inode *in,
		    const char *rel)
{
	return seed_file(sd, cat, in, rel, 1);
}

static int later_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct later *)a)->ino;
	uint64_t y = ((const struct later *)b)->ino;

	return x < y ? -1 : x > y;
}

int hyd_seeder_again(hyd_seeder *sd, cat_reader *cat,
		     const struct cat_inode *in)
{
	struct later key = {in->ino, 0}, *l;

	if (!sd->nlater)
		return HYD_SEED_FETCH;
	if (!sd->later_sorted) {
		qsort(sd->later, sd->nlater, sizeof(*sd->later), later_cmp);
		sd->later_sorted = 1;
	}
	l = bsearch(&key, sd->later, sd->nlater, sizeof(key), later_cmp);
	return l ? seed_file(sd, cat, in, sd->arena + l->off, 0)
		 : HYD_SEED_FETCH;
}

/* ---- the mount's walk ---- */

struct tree_walk {
	hyd_seeder *sd;
	cat_reader *cat;
	struct base_path *path;
	unsigned depth;
	const int *stop;
};

static int tree_dir(struct tree_walk *t, uint64_t dir);

static int tree_entry(void *arg, const struct hyd_dirent_copy *e)
{
	struct tree_walk *t = arg;
	int r;

	if (t->stop && __atomic_load_n(t->stop, __ATOMIC_ACQUIRE))
		return -ECANCELED;
	if (e->in.kind == CAT_REG) {
		r = hyd_seeder_file(t->sd, t->cat, &e->in, t->path->b);
		return r < 0 ? r : 0;
	}
	if (e->in.kind != CAT_DIR || t->depth >= HYD_SYNC_DEPTH_MAX)
		return 0;
	t->depth++;
	r = tree_dir(t, e->in.ino);
	t->depth--;
	return r;
}

static int tree_dir(struct tree_walk *t, uint64_t dir)
{
	return hyd_sync__dir_each(t->cat, dir, t->path, tree_entry, t);
}

/* The files kept for their manifests, again every LATER_POLL_NS until
 * each has one (or the source said it changed), or stop. */
static int tree_later(hyd_seeder *sd, cat_reader *cat, const int *stop)
{
	struct cat_inode in;
	size_t i, left;
	int r;

	for (;;) {
		left = 0;
		for (i = 0; i < sd->nlater; i++) {
			struct later *l = &sd->later[i];

			if (!l->ino)
				continue;
			if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE))
				return 0;
			r = cat_getattr(cat, l->ino, &in);
			if (r == 0)
				r = lacks(sd, cat, &in);
			if (r == -EAGAIN) {
				left++;
				continue;
			}
			if (r > 0)
				r = seed_file(sd, cat, &in, sd->arena + l->off,
					      0);
			if (r < 0 && r != -ESTALE && r != -ENOENT)
				return r;
			l->ino = 0;
		}
		if (!left)
			return 0;
		nanosleep(&(struct timespec){0, LATER_POLL_NS}, NULL);
	}
}

int hyd_seeder_tree(hyd_seeder *sd, cat_reader *cat, const int *stop)
{
	struct base_path path = {0};
	struct tree_walk t = {sd, cat, &path, 0, stop};
	size_t old;
	int r;

	r = base_path_push(&path, "", 0, &old);
	if (r == 0)
		r = tree_dir(&t, CAT_ROOT_INO);
	free(path.b);
	if (r == 0)
		r = tree_later(sd, cat, stop);
	return r == -ECANCELED ? 0 : r;
}

/* ---- life ---- */

int hyd_seeder_new(hyd_store *store, const chunk_params *p, const char *dest,
		   const struct hyd_seed_dir *dirs, size_t ndirs,
		   hyd_seeder **ret)
{
	hyd_seeder *sd;

	*ret = NULL;
	if (!store || chunk_params_check(p) < 0)
		return -EINVAL;
	sd = calloc(1, sizeof(*sd));
	if (!sd)
		return -ENOMEM;
	sd->store = store;
	sd->p = *p;
	sd->dest = dest;
	/* a mount's parts: one look here, not an lstat per file */
	if (dest) {
		char path[PATH_MAX];
		struct stat st;

		sd->parts =
		    join(path, sizeof(path), dest, HYD_PLACE_PARTS) == 0 &&
		    lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
	}
	sd->dirs = dirs;
	sd->ndirs = ndirs;
	sd->later_sorted = 1;
	sd->frame_cap = frame_bound(p->max);
	sd->coder = frame_coder_new();
	sd->raw = malloc(p->max);
	sd->frame = malloc(sd->frame_cap);
	sd->win = malloc(2 * (size_t)p->max);
	if (!sd->coder || !sd->raw || !sd->frame || !sd->win ||
	    base_cond_init(&sd->cond) < 0) {
		frame_coder_free(sd->coder);
		free(sd->raw);
		free(sd->frame);
		free(sd->win);
		free(sd);
		return -ENOMEM;
	}
	pthread_mutex_init(&sd->lock, NULL);
	*ret = sd;
	return 0;
}

void hyd_seeder_stats(const hyd_seeder *sd, struct hyd_seed_stats *ret)
{
	hyd_seeder *m = (hyd_seeder *)sd;

	pthread_mutex_lock(&m->lock);
	*ret = sd->st;
	pthread_mutex_unlock(&m->lock);
}

void hyd_seeder_free(hyd_seeder *sd)
{
	if (!sd)
		return;
	hyd_seeder_finish(sd);
	pthread_cond_destroy(&sd->cond);
	pthread_mutex_destroy(&sd->lock);
	frame_coder_free(sd->coder);
	free(sd->raw);
	free(sd->frame);
	free(sd->win);
	free(sd->want.v);
	free(sd->later);
	free(sd->arena);
	free(sd);
}
