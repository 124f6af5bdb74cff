/*
 * hydrator/read/hyd_read_landed.c — reads of a file --into has landed in
 * DIR come from that file: no chunk lookups, no checksum per chunk, and
 * (hyd_fuse_read.c) no copy through the daemon's memory. The placer
 * vouches for the file once per open state (hydrator/sync/
 * hyd_place_serve.c: the sync record holds it, synced and unchanged,
 * with this content); every read checks that its ctime and size have not
 * moved since, which any write, truncate or chmod would do.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/read/hyd_read.h"

int hyd_read_open_landed(const struct hyd_read_ctx *rc,
			 struct hyd_read_open *of)
{
	struct stat st;
	uint64_t now;
	int fd = -1;

	if (!rc->store)
		return -1;
	pthread_mutex_lock(&of->mu);
	if (of->landed_fd < 0 && !of->landed_gone) {
		now = base_now_ns();
		if (!of->landed_asked ||
		    now - of->landed_asked >= HYD_READ_LANDED_ASK_NS) {
			of->landed_asked = now;
			/* the ctime the record vouched for, not a later
			 * one */
			if (hyd_store_landed_fd(rc->store, of->ino, of->size,
						&fd, &st) == 0) {
				of->landed_fd = fd;
				of->landed_ctime = st.st_ctim;
			}
		}
	}
	fd = of->landed_gone ? -1 : of->landed_fd;
	pthread_mutex_unlock(&of->mu);
	if (fd < 0)
		return -1;
	if (hyd_read_landed_same(fd, of->size, &of->landed_ctime))
		return fd;
	pthread_mutex_lock(&of->mu);
	of->landed_gone = 1;
	pthread_mutex_unlock(&of->mu);
	return -1;
}

int hyd_read_landed_same(int fd, uint64_t size, const struct timespec *ctime)
{
	struct stat st;

	return fstat(fd, &st) == 0 && (uint64_t)st.st_size == size &&
	       st.st_ctim.tv_sec == ctime->tv_sec &&
	       st.st_ctim.tv_nsec == ctime->tv_nsec;
}
