/*
 * hydrator/sync/hyd_mat_behind.c — the tree writer drops behind itself:
 * what it wrote is sent to the disk as it goes, and the page-cache pages
 * of bytes written a little while ago are given back once they are on
 * disk.
 *
 * Why: `ferry sync` writes a whole tree once and does not read it again;
 * it ends with a syncfs of DEST anyway, so starting the writeback early
 * costs nothing that run would not pay. Pages given back are the ones
 * the next writes land in, so a sync of 100 TB neither fills the
 * destination's memory with bytes nobody reads nor takes fresh memory for
 * every byte: on this project's test VM a write into memory the guest has
 * not touched recently costs about 2 us a page (2 GB in 4-5 s, against
 * 0.4 s into pages just freed; docs/performance.md, "`ferry sync` drops
 * behind itself").
 *
 * Each range written (a whole small file, or about HYD_BEHIND_STEP bytes
 * of a large one, cut at HYD_BEHIND_ALIGN: only whole folios drop) gets
 * sync_file_range(WRITE), which starts its writeback without waiting, and
 * is queued with a dup of its fd; once more than HYD_BEHIND_LAG bytes (or
 * HYD_BEHIND_FDS ranges) wait behind it, the oldest is waited for and
 * dropped (POSIX_FADV_DONTNEED), and its fd closed. An error of the
 * writeback is kept and reported by the final flush.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_mat_priv.h"

#define HYD_BEHIND_FDS 256u /* ranges (each a dup'd fd) queued at most */

void hyd_mat__behind_start(struct hyd_behind *b)
{
	const char *e = getenv("FERRY_DROP_BEHIND");

	if (e && !strcmp(e, "0"))
		return;
	b->q = calloc(HYD_BEHIND_FDS, sizeof(*b->q));
	if (!b->q)
		base_log_err(BASE_LOG_DEBUG, -ENOMEM,
			     "the writer keeps what it wrote in memory");
}

/* sync_file_range failed with errno: a writeback error is kept for the
 * final flush to report; anything else means DEST's file system does not
 * take it (it is not a page-cache one), and dropping behind stops. */
static void failed(struct hyd_behind *b)
{
	if (errno == EIO || errno == ENOSPC || errno == EDQUOT) {
		if (!b->err)
			b->err = -errno;
	} else {
		b->stopped = 1;
	}
}

/* Wait for the oldest range's writeback, drop its pages, close its fd. */
static void drop_oldest(struct hyd_behind *b)
{
	struct hyd_behind_range *e = &b->q[b->head];
	off_t len = e->eof ? 0 : (off_t)e->len; /* 0: to the end */

	if (sync_file_range(e->fd, (off_t)e->off, len,
			    SYNC_FILE_RANGE_WAIT_BEFORE |
				SYNC_FILE_RANGE_WRITE |
				SYNC_FILE_RANGE_WAIT_AFTER) < 0) {
		failed(b);
	} else {
		posix_fadvise(e->fd, (off_t)e->off, len, POSIX_FADV_DONTNEED);
	}
	close(e->fd);
	b->bytes -= e->len;
	b->head = (b->head + 1) % HYD_BEHIND_FDS;
	b->n--;
}

void hyd_mat__behind_written(struct hyd_behind *b, int fd, uint64_t off,
			     uint64_t len, int eof)
{
	struct hyd_behind_range *e;
	int dfd;

	if (!b->q || b->stopped || len == 0)
		return;
	if (sync_file_range(fd, (off_t)off, eof ? 0 : (off_t)len,
			    SYNC_FILE_RANGE_WRITE) < 0) {
		failed(b);
		return;
	}
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return; /* out of fds: left to the final flush */
	if (b->n == HYD_BEHIND_FDS)
		drop_oldest(b);
	e = &b->q[(b->head + b->n) % HYD_BEHIND_FDS];
	*e = (struct hyd_behind_range){dfd, off, len, eof};
	b->n++;
	b->bytes += len;
	while (b->n > 1 && b->bytes > HYD_BEHIND_LAG)
		drop_oldest(b);
}

int hyd_mat__behind_fini(struct hyd_behind *b)
{
	int r;

	if (!b->q)
		return 0;
	while (b->n)
		drop_oldest(b);
	free(b->q);
	b->q = NULL;
	r = b->err;
	b->err = 0;
	return r;
}
