/*
 * hydrator/sync/hyd_place_serve.c — a landed file read straight from DIR.
 *
 * Once the landing has put a file at its path, the mount can serve its
 * reads from that file with no chunk lookups and no copy through memory
 * (the FUSE reply is spliced from it, hydrator/read/hyd_fuse_read.c).
 * What vouches for its bytes is what vouches for them to `ferry finish`
 * and a rerun of the landing: the sync record (hyd_sync_record.c), which
 * notes a file's identity (st_dev, st_ino), size, mtime and ctime and
 * its manifest's digest only after a syncfs of DIR made its data
 * durable. The placer keeps, per catalog number, the path the file
 * landed at and that digest; the file found at the path is served when
 * the record holds it, unchanged, with the same digest. Anything else
 * (not landed yet, recorded before the digest was kept, written into,
 * chmod'ed or replaced since: every one of those moves the ctime) is
 * -ENOENT, and the read goes through the chunks, each checked.
 *
 * The path only finds the file: any file that passes is one the landing
 * wrote and synced with this content, wherever the path led.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_place_priv.h"

/* a record that cannot be opened is tried again no sooner than this */
#define REC_RETRY_NS 1000000000ull

/* ino's landed path (DIR-relative, into rel) and digest. 0, -ENOENT. */
static int landed_row(hyd_place *p, uint64_t ino, uint64_t size, char *rel,
		      size_t cap, uint8_t dg[HYD_SYNC_DIGEST_LEN])
{
	const void *path, *d;
	int n, r = -ENOENT;

	pthread_mutex_lock(&p->mu);
	sqlite3_bind_int64(p->st_landed, 1, (sqlite3_int64)ino);
	if (sqlite3_step(p->st_landed) == SQLITE_ROW &&
	    (uint64_t)sqlite3_column_int64(p->st_landed, 0) == size) {
		path = sqlite3_column_blob(p->st_landed, 1);
		n = sqlite3_column_bytes(p->st_landed, 1);
		d = sqlite3_column_blob(p->st_landed, 2);
		/* stored with its NUL */
		if (path && n > 1 && (size_t)n <= cap &&
		    memchr(path, '\0', (size_t)n) ==
			(const char *)path + n - 1 &&
		    d &&
		    sqlite3_column_bytes(p->st_landed, 2) ==
			HYD_SYNC_DIGEST_LEN) {
			memcpy(rel, path, (size_t)n);
			memcpy(dg, d, HYD_SYNC_DIGEST_LEN);
			r = 0;
		}
	}
	sqlite3_reset(p->st_landed);
	pthread_mutex_unlock(&p->mu);
	return r;
}

/* 1 when the sync record holds st with digest dg, else 0. */
static int vouched(hyd_place *p, const struct stat *st,
		   const uint8_t dg[HYD_SYNC_DIGEST_LEN])
{
	uint64_t now = base_now_ns();
	int hit = 0;

	pthread_mutex_lock(&p->rec_mu);
	/* the landing makes it with its first pass */
	if (!p->rec && (!p->rec_tried || now - p->rec_tried >= REC_RETRY_NS) &&
	    hyd_sync__rec_open_ro(p->cache_dir, p->dir, &p->rec) < 0)
		p->rec_tried = now;
	if (p->rec)
		hit = hyd_sync__rec_has(p->rec, st, dg);
	pthread_mutex_unlock(&p->rec_mu);
	return hit;
}

int hyd_place_landed_fd(hyd_place *p, uint64_t ino, uint64_t size, int *ret_fd,
			struct stat *ret_st)
{
	char rel[PATH_MAX];
	uint8_t dg[HYD_SYNC_DIGEST_LEN];
	struct stat st;
	int fd, r;

	*ret_fd = -1;
	r = landed_row(p, ino, size, rel, sizeof(rel), dg);
	if (r < 0)
		return r;
	/* O_NONBLOCK: a fifo put there must not hold a reader up */
	fd = openat(p->dirfd, rel,
		    O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOMEM || errno == EMFILE || errno == ENFILE
			   ? -errno
			   : -ENOENT;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != size || !vouched(p, &st, dg)) {
		close(fd);
		return -ENOENT;
	}
	*ret_fd = fd;
	*ret_st = st;
	return 0;
}
