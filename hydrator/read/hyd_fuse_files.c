/*
 * hydrator/read/hyd_fuse_files.c — open-file state by inode, for a kernel
 * that opens without asking.
 *
 * A generation is immutable and the mount read-only, so OPEN and RELEASE
 * carry nothing the daemon needs: the first open is answered ENOSYS and
 * the kernel then opens every regular file itself (FUSE's no-open mode,
 * with keep_cache as its default) and never sends RELEASE. For a tree of
 * small files that halves the round trips of a first read (OPEN, READ,
 * RELEASE become READ) and, once the page cache holds a file, its next
 * open and read cost the daemon nothing at all.
 *
 * Reads then arrive with fh 0, so the state an open used to carry (the
 * file's size, its manifest window, its read-ahead stream) lives here,
 * keyed by inode: a set-associative table of HYD_FILES_SLOTS slots, each
 * inode hashed to a set of HYD_FILES_WAYS ways, least recently used way
 * evicted. The table holds one reference per slot; a read takes its own,
 * so an evicted state lives on until its last read ends. Every reader of
 * an inode shares one state: the stream detector then sees their requests
 * together, which costs read-ahead, never correctness. Views of the tree
 * without FUSE (S3) take their states from the same table
 * (hyd_fs_file_get, in hyd_read.h).
 */
#include <errno.h>
#include <string.h>

#include "hydrator/read/hyd_fuse.h"

static size_t set_of(uint64_t ino)
{
	/* Fibonacci hashing: consecutive inodes land in different sets. */
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >>
			(64 - HYD_FILES_SETS_LOG2)) *
	       HYD_FILES_WAYS;
}

void hyd_files_init(struct hyd_files *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
}

void hyd_files_fini(struct hyd_files *t)
{
	for (size_t i = 0; i < HYD_FILES_SLOTS; i++) {
		hyd_read_open_unref(t->slot[i].of);
		t->slot[i].of = NULL;
	}
	pthread_mutex_destroy(&t->mu);
}

void hyd_files_clear(struct hyd_files *t)
{
	struct hyd_read_open *drop[HYD_FILES_WAYS];
	size_t n;

	/* A set at a time, the states freed outside the lock: their last
	 * reference may free a generation, which closes SQLite handles. */
	for (size_t base = 0; base < HYD_FILES_SLOTS; base += HYD_FILES_WAYS) {
		n = 0;
		pthread_mutex_lock(&t->mu);
		for (size_t w = 0; w < HYD_FILES_WAYS; w++) {
			if (t->slot[base + w].of)
				drop[n++] = t->slot[base + w].of;
			t->slot[base + w].of = NULL;
		}
		pthread_mutex_unlock(&t->mu);
		for (size_t i = 0; i < n; i++)
			hyd_read_open_unref(drop[i]);
	}
}

/* ino's state with a reference for the caller, or NULL. Under mu. */
static struct hyd_read_open *find_locked(struct hyd_files *t, uint64_t ino)
{
	size_t base = set_of(ino);

	for (size_t w = 0; w < HYD_FILES_WAYS; w++) {
		struct hyd_files_slot *s = &t->slot[base + w];

		if (s->of && s->of->ino == ino) {
			s->used = ++t->clock;
			hyd_read_open_ref(s->of);
			return s->of;
		}
	}
	return NULL;
}

/* Put of in ino's set (the table takes a reference), evicting the least
 * recently used way. Under mu. */
static void insert_locked(struct hyd_files *t, struct hyd_read_open *of)
{
	size_t base = set_of(of->ino);
	struct hyd_files_slot *victim = &t->slot[base];

	for (size_t w = 0; w < HYD_FILES_WAYS; w++) {
		struct hyd_files_slot *s = &t->slot[base + w];

		if (!s->of) {
			victim = s;
			break;
		}
		if (s->used < victim->used)
			victim = s;
	}
	hyd_read_open_unref(victim->of);
	hyd_read_open_ref(of);
	victim->of = of;
	victim->used = ++t->clock;
}

int hyd_files_get(struct hyd_files *t, struct hyd_fs *fs, uint64_t ino,
		  struct hyd_read_open **ret, int *ret_new)
{
	struct hyd_read_open *of, *other;
	struct hyd_gen *g;
	struct cat_inode in;
	int r;

	*ret = NULL;
	*ret_new = 0;
	pthread_mutex_lock(&t->mu);
	of = find_locked(t, ino);
	pthread_mutex_unlock(&t->mu);
	if (of) {
		*ret = of;
		return 0;
	}
	/* Outside the lock: the catalog is the slow part. The state keeps
	 * the generation it was made from (a reference of its own). */
	g = hyd_fs_gen_for(fs, ino, &in, &r);
	if (r == 0 && in.kind != CAT_REG)
		r = in.kind == CAT_DIR ? -EISDIR : -EINVAL;
	if (r == 0)
		r = hyd_read_open_new(g, ino, in.size, &of);
	hyd_gen_unref(g);
	if (r < 0)
		return r;
	pthread_mutex_lock(&t->mu);
	/* Another reader of the same inode may have been quicker. */
	other = find_locked(t, ino);
	if (!other)
		insert_locked(t, of);
	pthread_mutex_unlock(&t->mu);
	if (other) {
		hyd_read_open_unref(of);
		*ret = other;
		return 0;
	}
	*ret = of; /* the reference hyd_read_open_new gave us */
	*ret_new = 1;
	return 0;
}

int hyd_fs_file_get(struct hyd_fs *fs, uint64_t ino, struct hyd_read_open **ret,
		    int *ret_new)
{
	return hyd_files_get(&fs->files, fs, ino, ret, ret_new);
}

const struct hyd_read_ctx *hyd_fs_read_ctx(const struct hyd_fs *fs)
{
	return &fs->rd;
}
