/*
 * hydrator/sync/hyd_mat_priv.h — what the tree writer's files share
 * (hyd_materialize.c walks the catalog and writes entries and metadata;
 * hyd_mat_content.c puts verified chunk bytes into regular files). Private
 * to hydrator/sync.
 */
#ifndef FERRY_HYD_MAT_PRIV_H
#define FERRY_HYD_MAT_PRIV_H

#include <stdint.h>

#include "hydrator/sync/hyd_sync_priv.h"

/* ---- dropping behind the writer (hyd_mat_behind.c) ---- */

/* Bytes of one file sent to the disk together (about), in whole blocks
 * of HYD_BEHIND_ALIGN: the page cache holds large folios (up to 2 MiB
 * here), and fadvise drops only the whole ones inside its range. */
#define HYD_BEHIND_STEP (8u << 20)
#define HYD_BEHIND_ALIGN (2u << 20)
/* Bytes written and not yet dropped, at most (about). */
#define HYD_BEHIND_LAG (64u << 20)

struct hyd_behind_range {
	int fd; /* a dup, closed when dropped */
	uint64_t off, len;
	int eof; /* the range runs to the end of the file */
};

struct hyd_behind {
	struct hyd_behind_range *q; /* a ring; NULL: off */
	size_t head, n;
	uint64_t bytes;
	int err;     /* the first writeback error, -errno */
	int stopped; /* DEST does not take sync_file_range */
};

/* Start dropping behind (b zeroed before), HYD_BEHIND_LAG behind; left
 * off when FERRY_DROP_BEHIND is "0" (for measuring) or without memory. */
void hyd_mat__behind_start(struct hyd_behind *b);
/* [off, off + len) of fd was written (with eof set: and it is the rest
 * of the file; off a multiple of HYD_BEHIND_ALIGN but for the file's first
 * range): start its writeback, and drop the pages of what was written
 * more than HYD_BEHIND_LAG bytes ago. */
void hyd_mat__behind_written(struct hyd_behind *b, int fd, uint64_t off,
			     uint64_t len, int eof);
/* Drop everything left (after the final flush: nothing to wait for) and
 * stop. 0, or the first writeback error seen. Off: 0. */
int hyd_mat__behind_fini(struct hyd_behind *b);

/* One walk of the catalog into DEST. */
struct walk {
	struct hyd_mat *m;
	int rootfd;
	struct base_path path; /* relative to DEST, "" at the root */
	struct hyd_inomap links;
	uint8_t *buf; /* max_raw bytes */
	/* data holds the verified bytes of buf_id (a run of one id, e.g. a
	 * sparse file's zero chunks, is read from the store once): buf, or
	 * the raw bytes of held, a flight taken from the hand-off and kept
	 * until the next chunk (hyd_mat__let_go). */
	int buf_valid;
	chunk_id buf_id;
	const uint8_t *data;
	struct hyd_flight *held;
	struct hyd_zero_ids zero;
	struct hyd_behind behind;
	/* A -dest DIR's copy of the file being written (hyd_mat_seed.c):
	 * chunks are read from it, verified, before the store; -1: none. */
	int src_fd;
	uint64_t files_done, bytes_done, last_tick;
	int root; /* euid == 0 */
	/* The directory whose entries are being walked: its number, the
	 * length of its path (a prefix of path) and its slot in
	 * m->left_in once a file of it was left (else HYD_MAT_LEFT_END) */
	uint64_t left_ino;
	size_t left_path_len, left_dir;
};

/* Is in's manifest local (its chunk rows readable)? Waits for it while
 * hydration runs, then fetches it when a manifest fetcher is there.
 * 0, or -errno with *why set (-ESTALE: the source changed, no manifest
 * in this generation). */
int hyd_mat__manifest_ready(struct walk *w, const struct cat_inode *in,
			    const char **why);

/* Give back the flight the walk holds (buf_valid cleared). Before buf is
 * used as scratch, and when the walk ends. */
void hyd_mat__let_go(struct walk *w);
/* 1 when the store lacks a chunk of regular file in at or after from
 * (or its rows cannot be read), else 0: it can be written without a
 * fetch or a wait. from: where --into's placer first lacks a range (what
 * is before it is in DIR), else 0. */
int hyd_mat__lacks(struct walk *w, const struct cat_inode *in, uint64_t from);

/* --into: the ranges ino's part lacks from from on, whose chunks the
 * store or other parts hold (hyd_mat__lacks said 0), written into it
 * through the placer as if they had just come (they came before the
 * placer knew the file's manifest, say), so the part is adopted instead
 * of the file copied whole. For files of HYD_MAT_FILL_MIN bytes or more
 * (below, a copy costs less than the round the adoption then waits
 * for). 1 when every range went to the placer, else 0 (copy it). */
#define HYD_MAT_FILL_MIN (8u << 20)
int hyd_mat__fill_part(struct walk *w, const struct cat_inode *in,
		       uint64_t from);

/* Fill the fresh (empty) file fd with ino's verified bytes. All-zero
 * chunks are left as holes; the final ftruncate gives the file its size.
 * dg (HYD_SYNC_DIGEST_LEN bytes, or NULL) gets the manifest's digest, as
 * hyd_sync__manifest_digest gives it, from the rows the copy reads.
 * 0, or -errno with *why set. */
int hyd_mat__copy_chunks(struct walk *w, int fd, uint64_t ino, uint64_t size,
			 uint8_t *dg, const char **why);

/* ---- a file a -dest DIR holds whole (hyd_mat_seed.c) ---- */

enum hyd_mat_seed {
	HYD_MAT_SEED_NONE = 0, /* write it as usual */
	HYD_MAT_SEED_COMPARED, /* --compare-dest: write nothing */
	HYD_MAT_SEED_LINK,     /* hard link path (*ret_fd is its file) */
	HYD_MAT_SEED_COPY,     /* copy from *ret_fd, path's file */
};
/* What to do with e (a regular file, at w->path) after DEST's own file
 * did not match: path gets DIR/PATH of the DIR that decided; *ret_fd
 * (LINK, COPY) is open on it, the caller's to close. */
enum hyd_mat_seed hyd_mat__seed_plan(struct walk *w,
				     const struct hyd_dirent_copy *e,
				     char *path, size_t cap, int *ret_fd);

#endif
