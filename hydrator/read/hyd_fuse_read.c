/*
 * hydrator/read/hyd_fuse_read.c — the data half of the FUSE filesystem: open,
 * read, release, opendir, releasedir.
 *
 * read() runs on a FUSE worker thread and blocks in the read path
 * (hyd_read.c) until every chunk it needs is verified; many workers block in
 * parallel, which is what lets a sequential reader and the kernel's
 * readahead keep several fetches on the wire. After replying, the same
 * worker asks for network readahead and decodes the next stored chunks
 * into the read cache, so that work overlaps the reader's copying instead
 * of sitting in front of its next request. The first request raises the
 * mount's kernel readahead (HYD_FUSE_READAHEAD_KB). Each open file carries a
 * struct hyd_read_open in fh (its size, a window of its manifest and the
 * generation it was opened in). A regular file's ino names one content in
 * every generation, so open sets keep_cache: the page cache stays valid
 * across opens and across switches. Where the kernel can open by itself
 * (no-open mode, hyd_fuse_files.c), OPEN is answered ENOSYS once and reads come
 * with no fh: their state is then the inode's, from the open-file table.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/read/hyd_fuse.h"

/* Segments one reply may carry: writev takes at most UIO_MAXIOV (1024)
 * vectors, and libfuse adds one for the reply header. */
#define HYD_FUSE_IOV_MAX 1000u

struct dev_find {
	const char *point;
	char *dev;
	size_t cap;
	int found;
};

static int dev_find_cb(void *ctx, const struct base_mount *m)
{
	struct dev_find *d = ctx;
	int n;

	/* A later line is mounted over an earlier one: the last match wins. */
	if (strcmp(m->point, d->point) != 0 || strncmp(m->fstype, "fuse", 4))
		return 0;
	n = snprintf(d->dev, d->cap, "%u:%u", m->major, m->minor);
	d->found = n > 0 && (size_t)n < d->cap;
	return 0;
}

/* The device ("MAJ:MIN") of the topmost FUSE mount on mnt, which is also
 * the name of its backing device info in /sys/class/bdi. 0 or -errno. */
static int mount_dev(const char *mnt, char *dev, size_t cap)
{
	struct dev_find d = {.point = mnt, .dev = dev, .cap = cap};
	char *mi;
	int r;

	r = base_mountinfo_read(&mi);
	if (r < 0)
		return r;
	r = base_mountinfo_each(mi, dev_find_cb, &d);
	free(mi);
	if (r < 0)
		return r;
	return d.found ? 0 : -ENOENT;
}

void hyd_fuse_tune_readahead(struct hyd_fs *fs)
{
	char dev[32], path[96], cur[32];
	unsigned long kb;
	ssize_t n;
	int fd, r;

	/* Checked before the exchange: lookups run on every core. */
	if (!fs->mountpoint ||
	    __atomic_load_n(&fs->ra_tuned, __ATOMIC_RELAXED) ||
	    __atomic_exchange_n(&fs->ra_tuned, 1, __ATOMIC_RELAXED))
		return;
	r = mount_dev(fs->mountpoint, dev, sizeof(dev));
	if (r == 0) {
		snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb",
			 dev);
		fd = open(path, O_RDWR | O_CLOEXEC);
		r = fd < 0 ? -errno : 0;
	}
	if (r == 0) {
		n = pread(fd, cur, sizeof(cur) - 1, 0);
		cur[n > 0 ? n : 0] = '\0';
		kb = strtoul(cur, NULL, 10);
		if (kb < HYD_FUSE_READAHEAD_KB) {
			n = snprintf(cur, sizeof(cur), "%u\n",
				     HYD_FUSE_READAHEAD_KB);
			if (pwrite(fd, cur, (size_t)n, 0) != n)
				r = -errno;
		}
		close(fd);
	}
	/* Without root the default stays: slower, not wrong. */
	if (r < 0)
		base_log_err(BASE_LOG_DEBUG, r,
			     "cannot raise the kernel readahead mountpoint=%s",
			     fs->mountpoint);
}

void hyd_fuse_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct hyd_fs *fs = fuse_req_userdata(req);
	struct hyd_read_open *of;
	struct cat_inode in;
	struct hyd_gen *g;
	int r;

	hyd_fuse_tune_readahead(fs);
	if (fs->no_open) {
		/* The kernel opens by itself from now on (hyd_fuse_files.c);
		 * this open too succeeds. A read-only mount: the VFS has
		 * already refused anything but reading. */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	/* The generation that has ino: the state keeps it, so this open
	 * reads the same bytes whatever switches come after. */
	g = hyd_fs_gen_for(fs, ino, &in, &r);
	if (r == 0 && in.kind == CAT_DIR)
		r = -EISDIR;
	else if (r == 0 &&
		 ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)))
		r = -EROFS;
	else if (r == 0 && in.kind != CAT_REG)
		r = -EINVAL;
	/* The size and a manifest window ride in fh, so read() need not
	 * ask the catalog again for every request. */
	if (r == 0)
		r = hyd_read_open_new(g, ino, in.size, &of);
	hyd_gen_unref(g);
	if (r == -ENOMEM) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (r < 0) {
		if (r != -EISDIR && r != -EROFS && r != -EINVAL)
			hyd_fuse_log("open", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)of;
	fi->keep_cache = 1;
	fi->noflush = 1; /* nothing to flush on a read-only file */
	if (fuse_reply_open(req, fi) != 0) {
		/* The opener is gone (interrupted): no release will come. */
		hyd_read_open_unref(of);
		return;
	}
	if (fs->on_open)
		fs->on_open(fs->on_open_arg, ino);
}

/* Reply with rv's segments: one writev straight from where the verified
 * bytes rest. More segments than writev takes (tiny chunks) are gathered
 * into one buffer first. Returns 0 or -ENOMEM (nothing sent then). */
static int reply_iov(fuse_req_t req, const struct hyd_read_iov *rv)
{
	uint8_t *buf;
	size_t i, at = 0;

	if (rv->n <= HYD_FUSE_IOV_MAX) {
		fuse_reply_iov(req, rv->iov, (int)rv->n);
		return 0;
	}
	buf = malloc(rv->len);
	if (!buf)
		return -ENOMEM;
	for (i = 0; i < rv->n; i++) {
		memcpy(buf + at, rv->iov[i].iov_base, rv->iov[i].iov_len);
		at += rv->iov[i].iov_len;
	}
	fuse_reply_buf(req, (const char *)buf, at);
	free(buf);
	return 0;
}

/* Reply with n bytes at off of a landed file (hyd_read_open_landed):
 * libfuse splices them from fd into the device (FUSE_CAP_SPLICE_WRITE,
 * op_init), so they are not copied through this process; under two
 * pages, or where splice fails, it reads them into memory and writes.
 * 0, or -errno (the reply is then sent or dropped by libfuse). */
static int reply_landed(fuse_req_t req, int fd, off_t off, size_t n)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);

	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = fd;
	bv.buf[0].pos = off;
	return fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

/* Count a read that got past its state lookup (metrics): answered with
 * n bytes (r 0) or an error, and how long it took. */
static void read_count(struct hyd_read_counts *c, int r, size_t n, uint64_t t0)
{
	if (!c)
		return;
	if (r < 0) {
		__atomic_add_fetch(&c->read_errors, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_add_fetch(&c->reads, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->read_bytes, n, __ATOMIC_RELAXED);
	base_hist_observe_ns(&c->latency, base_now_ns() - t0);
}

void hyd_fuse_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	struct hyd_fs *fs = fuse_req_userdata(req);
	struct hyd_read_open *of = (struct hyd_read_open *)(uintptr_t)fi->fh;
	struct hyd_read_iov rv;
	uint64_t t0 = base_now_ns();
	int r, opened = 0, fd;
	size_t n;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* A job reads: its lookups are not someone browsing. */
	if (fs->rd.fetch)
		hyd_fetch_note_read(fs->rd.fetch);
	if (of) {
		hyd_read_open_ref(of);
	} else {
		/* No-open mode: the state is the inode's. */
		r = hyd_files_get(&fs->files, fs, ino, &of, &opened);
		if (r == -ENOENT) {
			/* A file opened in a generation no longer kept. */
			fuse_reply_err(req, ESTALE);
			return;
		}
		if (r < 0) {
			hyd_fuse_log("read", ino, r);
			fuse_reply_err(req, hyd_fuse_errno(r));
			return;
		}
		/* A first read of a small file: its directory's next files
		 * go into the kernel's cache meanwhile. */
		if (opened)
			hyd_push_first_read(&fs->push, ino,
					    (uint32_t)fuse_req_ctx(req)->pid);
		/* What an open tells backfill (the files around it go
		 * next), in no-open mode told by the first read that found
		 * no state for the inode: before this read waits for its
		 * chunks, so the directory's next files are on their way
		 * while it does. */
		if (opened && fs->on_open)
			fs->on_open(fs->on_open_arg, ino);
	}
	if ((uint64_t)off >= of->size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		hyd_read_open_unref(of);
		return;
	}
	/* --into: a landed file is read from DIR */
	fd = hyd_read_open_landed(&fs->rd, of);
	if (fd >= 0) {
		n = size < of->size - (uint64_t)off
			? size
			: (size_t)(of->size - (uint64_t)off);
		r = reply_landed(req, fd, off, n);
		read_count(fs->rd.counts, r, r == 0 ? n : 0, t0);
		if (r == 0 && fs->rd.counts)
			__atomic_add_fetch(&fs->rd.counts->dir_read_bytes, n,
					   __ATOMIC_RELAXED);
		if (r == 0)
			hyd_trace_rec_read(fs->trace, ino, (uint64_t)off, n);
		hyd_read_open_unref(of);
		return;
	}
	/* hyd_read_open_iov logs its own failures, with the chunk. */
	r = hyd_read_open_iov(&fs->rd, of, (uint64_t)off, size, &rv);
	if (r == 0)
		r = reply_iov(req, &rv);
	if (r < 0)
		fuse_reply_err(req, hyd_fuse_errno(r));
	n = rv.len;
	hyd_read_iov_release(&fs->rd, &rv);
	read_count(fs->rd.counts, r, r == 0 ? n : 0, t0);
	if (r == 0)
		hyd_trace_rec_read(fs->trace, ino, (uint64_t)off, n);
	/* After the reply, so it costs this read nothing: a sequential
	 * reader gets its next chunks decoded (stored) or asked for. */
	if (r == 0)
		hyd_read_ahead(&fs->rd, of, (uint64_t)off, n);
	hyd_read_open_unref(of);
}

void hyd_fuse_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	/* The kernel sends release after the last read's reply, but that
	 * read may still be decoding ahead: it holds its own reference. */
	hyd_read_open_unref((struct hyd_read_open *)(uintptr_t)fi->fh);
	fi->fh = 0;
	fuse_reply_err(req, 0);
}

void hyd_fuse_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct hyd_fs *fs = fuse_req_userdata(req);
	struct cat_inode in;
	int r;

	hyd_fuse_tune_readahead(fs);
	if (fs->no_opendir) {
		/* As for files: the kernel's own default is keep_cache and
		 * cache_dir, what is set below. */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	hyd_gen_unref(hyd_fs_gen_for(fs, ino, &in, &r));
	if (r < 0) {
		hyd_fuse_log("opendir", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
		return;
	}
	if (in.kind != CAT_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* The kernel may keep the listing it got, for the whole mount. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

void hyd_fuse_releasedir(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}
