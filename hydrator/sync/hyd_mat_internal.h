/*
 * hydrator/sync/hyd_mat_internal.h — what the tree writer's files share
 * (hyd_materialize.c walks the catalog and writes entries and metadata;
 * hyd_mat_content.c puts verified chunk bytes into regular files). Private
 * to hydrator/sync.
 */
#ifndef FERRY_HYD_MAT_INTERNAL_H
#define FERRY_HYD_MAT_INTERNAL_H

#include <stdint.h>

#include "hydrator/sync/hyd_sync_internal.h"

/* One walk of the catalog into DEST. */
struct walk {
	struct hyd_mat *m;
	int rootfd;
	struct hyd_pathbuf path; /* relative to DEST, "" at the root */
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
	uint64_t files_done, bytes_done, last_tick;
	int root; /* euid == 0 */
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

/* Fill the fresh (empty) file fd with ino's verified bytes. All-zero
 * chunks are left as holes; the final ftruncate gives the file its size.
 * 0, or -errno with *why set. */
int hyd_mat__copy_chunks(struct walk *w, int fd, uint64_t ino, uint64_t size,
			 const char **why);

#endif
