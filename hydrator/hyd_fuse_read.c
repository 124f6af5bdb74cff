/*
 * hydrator/hyd_fuse_read.c — the data half of the FUSE filesystem: open,
 * read, release, opendir, releasedir.
 *
 * read() runs on a FUSE worker thread and blocks in the read path
 * (hyd_read.c) until every chunk it needs is verified; many workers block in
 * parallel, which is what lets a sequential reader and the kernel's
 * readahead keep several fetches on the wire. A generation is immutable, so
 * open sets keep_cache: the page cache stays valid across opens.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "hydrator/hyd_backfill_internal.h"
#include "hydrator/hyd_fuse_internal.h"

void hyd_fuse_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct hyd_fs *fs = fuse_req_userdata(req);
	struct cat_inode in;
	int r;

	r = cat_getattr(fs->cat, ino, &in);
	if(r < 0) {
		hyd_fuse_log("open", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
		return;
	}
	if(in.kind == CAT_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if(in.kind != CAT_REG) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* The size rides in fh so read() need not ask the catalog again. */
	fi->fh = in.size;
	fi->keep_cache = 1;
	fi->noflush = 1; /* nothing to flush on a read-only file */
	fuse_reply_open(req, fi);
	/* Its directory goes to the front of the backfill order. */
	hyd_backfill_note_open(fs->bf, ino);
}

void hyd_fuse_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	struct hyd_fs *fs = fuse_req_userdata(req);
	uint8_t *buf;
	size_t n = 0;
	int r;

	if(off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if((uint64_t)off >= fi->fh || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	buf = malloc(size);
	if(!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* hyd_read_file logs its own failures, with the chunk. */
	r = hyd_read_file(&fs->rd, ino, fi->fh, (uint64_t)off, size, buf, &n);
	if(r < 0)
		fuse_reply_err(req, hyd_fuse_errno(r));
	else
		fuse_reply_buf(req, (const char *)buf, n);
	free(buf);
	/* After the reply, so it costs this read nothing: a sequential
	 * reader gets its next chunks asked for (readahead). */
	if(r == 0)
		hyd_backfill_note_read(fs->bf, ino, (uint64_t)off, n, fi->fh);
}

void hyd_fuse_release(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

void hyd_fuse_opendir(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi)
{
	struct hyd_fs *fs = fuse_req_userdata(req);
	struct cat_inode in;
	int r;

	r = cat_getattr(fs->cat, ino, &in);
	if(r < 0) {
		hyd_fuse_log("opendir", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
		return;
	}
	if(in.kind != CAT_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if((fi->flags & O_ACCMODE) != O_RDONLY) {
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
