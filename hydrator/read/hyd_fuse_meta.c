/*
 * hydrator/read/hyd_fuse_meta.c — the metadata half of the FUSE filesystem:
 * lookup, getattr, readdir and readdirplus, readlink, getxattr, listxattr,
 * statfs, and the operations table.
 *
 * Everything here is answered from the catalog alone (statfs also asks
 * the cache directory's file system for its free space); no operation in
 * this file ever fetches file data, so `ls -lR`, `find` and `stat` work the
 * moment the catalog is in. Replies carry long timeouts: a generation is
 * immutable, and a switch to the next tells the kernel what changed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "catalog/base/base.h"
#include "hydrator/read/hyd_fuse.h"

/* d_ino for ".." when the parent is not known (the catalog has no parent
 * pointers); the same value libfuse's high-level API uses. */
#define HYD_UNKNOWN_INO 0xffffffffu
#define HYD_STATFS_FRSIZE 4096u
#define HYD_BROWSE_HOLD_MS 100u

static struct hyd_fs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* req_fs for a metadata request: someone is browsing, so backfill holds
 * still for a moment (see hyd_fetch_hold_background). */
static struct hyd_fs *browse_fs(fuse_req_t req)
{
	struct hyd_fs *fs = fuse_req_userdata(req);

	if (fs->rd.fetch)
		hyd_fetch_hold_background(fs->rd.fetch, HYD_BROWSE_HOLD_MS);
	return fs;
}

int hyd_fuse_errno(int err)
{
	switch (err < 0 ? -err : err) {
	case ENOENT:
	case ENODATA:
	case ERANGE:
	case ENOMEM:
	case EROFS:
	case EISDIR:
	case ENOTDIR:
	case ENAMETOOLONG:
		return err < 0 ? -err : err;
	case EINVAL:
		return EINVAL;
	default: /* EBADMSG (a bad catalog row), EIO and the unexpected */
		return EIO;
	}
}

void hyd_fuse_log(const char *op, uint64_t ino, int err)
{
	int e = err < 0 ? -err : err;

	/* Misses are normal traffic, not news. */
	if (e == ENOENT || e == ENODATA || e == ERANGE)
		return;
	base_log_err(BASE_LOG_ERROR, err,
		     "request failed op=%s ino=%" PRIu64 " errno=%s", op, ino,
		     base_errname(err));
}

static void ns_to_ts(int64_t ns, struct timespec *ts)
{
	int64_t sec = ns / 1000000000, rem = ns % 1000000000;

	if (rem < 0) { /* floor, so times before 1970 stay ordered */
		sec--;
		rem += 1000000000;
	}
	ts->tv_sec = (time_t)sec;
	ts->tv_nsec = (long)rem;
}

void hyd_fuse_stat(const struct cat_inode *in, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = (ino_t)in->ino;
	st->st_mode = (mode_t)in->mode;
	st->st_nlink = (nlink_t)in->nlink;
	st->st_uid = (uid_t)in->uid;
	st->st_gid = (gid_t)in->gid;
	st->st_size = (off_t)in->size;
	st->st_rdev = (dev_t)in->rdev;
	st->st_blksize = HYD_FUSE_BLKSIZE;
	/* the source's own count: a sparse file's holes are not blocks */
	st->st_blocks = (blkcnt_t)in->blocks;
	ns_to_ts(in->mtime_ns, &st->st_mtim);
	st->st_atim = st->st_mtim;
	ns_to_ts(in->ctime_ns, &st->st_ctim);
}

static void fill_entry(const struct hyd_fs *fs, const struct cat_inode *in,
		       struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = in->ino;
	/* (ino, generation) must never name two different files over the
	 * life of the filesystem: the replicator never gives a number to
	 * another entry (or another content) later, so the pair is unique
	 * with a constant. It must stay the same for an ino across
	 * generations: the kernel marks an inode bad (EIO to whoever holds
	 * it open) when a lookup returns it with another generation. */
	(void)fs;
	e->generation = 1;
	hyd_fuse_stat(in, &e->attr);
	e->attr_timeout = HYD_FUSE_TIMEOUT_S;
	e->entry_timeout = HYD_FUSE_TIMEOUT_S;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct hyd_fs *fs = userdata;

	/* OPEN and OPENDIR carry nothing we need (hyd_fuse_files.c): the
	 * kernel opens by itself, with keep_cache (and cache_dir), and sends
	 * no RELEASE. */
	if (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) {
		conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
		fs->no_open = 1;
	}
	if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) {
		conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
		fs->no_opendir = 1;
	}
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/* A landed file's reads are spliced from it (hyd_fuse_read.c);
	 * replies from memory are written as before. */
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	if (fs->max_read)
		conn->max_read = fs->max_read;
	/* Nothing changes under us, so the kernel need not drop the page
	 * cache when it sees an mtime (it never changes anyway). */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct hyd_fs *fs = browse_fs(req);
	struct fuse_entry_param e;
	struct cat_inode in;
	struct hyd_gen *g;
	size_t len = strlen(name);
	int r;

	hyd_fuse_tune_readahead(fs);
	if (len > CAT_NAME_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	g = hyd_fs_gen_for(fs, parent, NULL, NULL);
	r = cat_lookup(g->cat, parent, name, len, &in);
	if (r == -ENOENT || r == -EINVAL) {
		/* A negative entry the kernel may cache until a switch says
		 * otherwise: ino 0 with an entry timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = HYD_FUSE_TIMEOUT_S;
		fuse_reply_entry(req, &e);
	} else if (r < 0) {
		hyd_fuse_log("lookup", parent, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
	} else {
		fill_entry(fs, &in, &e);
		fuse_reply_entry(req, &e);
		/* A file looked up is about to be opened: its chunk list
		 * goes next in the manifest prefetch. */
		if (in.kind == CAT_REG && g->manifest)
			hyd_manifest_want(g->manifest, in.ino);
	}
	hyd_gen_unref(g);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct hyd_fs *fs = browse_fs(req);
	struct cat_inode in;
	struct stat st;
	int r;

	(void)fi;
	hyd_fuse_tune_readahead(fs);
	hyd_gen_unref(hyd_fs_gen_for(fs, ino, &in, &r));
	if (r < 0) {
		hyd_fuse_log("getattr", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
		return;
	}
	hyd_fuse_stat(&in, &st);
	fuse_reply_attr(req, &st, HYD_FUSE_TIMEOUT_S);
}

struct readdir_ctx {
	fuse_req_t req;
	struct hyd_fs *fs;
	char *buf;
	size_t size, used;
	int plus;
	pid_t pid; /* the asking thread's */
	uint64_t dir;
	hyd_manifest *manifest; /* the listing generation's, or NULL */
	char name[CAT_NAME_MAX + 1];
};

/* Add one entry whose next-offset is off; 1 when the buffer is full. */
static int readdir_add(struct readdir_ctx *c, const char *name,
		       const struct cat_inode *in, off_t off)
{
	struct fuse_entry_param e;
	size_t left = c->size - c->used, n;

	if (c->plus) {
		fill_entry(c->fs, in, &e);
		n = fuse_add_direntry_plus(c->req, c->buf + c->used, left, name,
					   &e, off);
	} else {
		memset(&e.attr, 0, sizeof(e.attr));
		e.attr.st_ino = (ino_t)in->ino;
		e.attr.st_mode = (mode_t)in->mode;
		n = fuse_add_direntry(c->req, c->buf + c->used, left, name,
				      &e.attr, off);
	}
	/* fuse_add_direntry* report the size needed without writing when it
	 * does not fit: stop there; the kernel comes back with off. */
	if (n > left)
		return 1;
	c->used += n;
	return 0;
}

static int readdir_cb(void *ctx, const void *name, size_t name_len,
		      const struct cat_inode *in, uint64_t pos)
{
	struct readdir_ctx *c = ctx;

	if (name_len > CAT_NAME_MAX)
		return 0; /* the reader checks names; be safe anyway */
	memcpy(c->name, name, name_len);
	c->name[name_len] = '\0';
	/* Offsets 1 and 2 are "." and ".."; entry pos n is offset n + 2, so
	 * a continued readdir resumes right after the last entry returned. */
	if (readdir_add(c, c->name, in, (off_t)(pos + 2)))
		return 1;
	if (c->plus && in->kind == CAT_REG && in->size > 0 &&
	    in->size <= HYD_PUSH_FILE_MAX)
		hyd_push_note(&c->fs->push, in->ino, c->dir, pos);
	/* A directory being listed: its files' chunk lists next. */
	if (c->manifest && in->kind == CAT_REG)
		hyd_manifest_want(c->manifest, in->ino);
	return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       int plus)
{
	struct readdir_ctx c;
	struct cat_inode self, dot;
	struct hyd_gen *g;
	int r;

	memset(&c, 0, sizeof(c));
	c.req = req;
	c.pid = fuse_req_ctx(req)->pid; /* req is gone after the reply */
	c.fs = browse_fs(req);
	c.plus = plus;
	c.dir = ino;
	c.size = size;
	c.buf = malloc(size ? size : 1);
	if (!c.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	g = hyd_fs_gen_for(c.fs, ino, &self, &r);
	if (r < 0)
		goto out;
	if (self.kind != CAT_DIR) {
		r = -ENOTDIR;
		goto out;
	}
	c.manifest = g->manifest;
	if (off < 1 && readdir_add(&c, ".", &self, 1))
		goto reply;
	if (off < 2) {
		dot = self;
		dot.ino = ino == CAT_ROOT_INO ? CAT_ROOT_INO : HYD_UNKNOWN_INO;
		if (readdir_add(&c, "..", &dot, 2))
			goto reply;
	}
	r = cat_readdir(g->cat, ino, off > 2 ? (uint64_t)off - 2 : 0,
			readdir_cb, &c);
	if (r < 0)
		goto out;
reply:
	r = 0;
	fuse_reply_buf(req, c.buf, c.used);
	if (plus && c.used)
		hyd_push_listed(&c.fs->push, ino,
				off > 2 ? (uint64_t)off - 2 : 0,
				(uint32_t)c.pid);
out:
	if (r < 0) {
		hyd_fuse_log(plus ? "readdirplus" : "readdir", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
	}
	hyd_gen_unref(g);
	free(c.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 1);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct hyd_fs *fs = browse_fs(req);
	char buf[CAT_TARGET_MAX + 1];
	struct hyd_gen *g = hyd_fs_gen_for(fs, ino, NULL, NULL);
	size_t len = 0;
	int r;

	r = cat_readlink(g->cat, ino, buf, CAT_TARGET_MAX, &len);
	hyd_gen_unref(g);
	if (r < 0) {
		hyd_fuse_log("readlink", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
		return;
	}
	buf[len] = '\0';
	fuse_reply_readlink(req, buf);
}

/* getxattr and listxattr share their size==0 / ERANGE dance. */
static void reply_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct hyd_fs *fs = browse_fs(req);
	size_t cap = size, len = 0;
	struct hyd_gen *g;
	char *buf = NULL;
	int r;

	/* The kernel never asks for more than XATTR_SIZE_MAX (64 KiB). */
	if (cap > CAT_XATTR_VALUE_MAX)
		cap = CAT_XATTR_VALUE_MAX;
	if (cap) {
		buf = malloc(cap);
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
	}
	g = hyd_fs_gen_for(fs, ino, NULL, NULL);
	if (name)
		r = cat_getxattr(g->cat, ino, name, strlen(name), buf, cap,
				 &len);
	else
		r = cat_listxattr(g->cat, ino, buf, cap, &len);
	hyd_gen_unref(g);
	if (r < 0) {
		hyd_fuse_log(name ? "getxattr" : "listxattr", ino, r);
		fuse_reply_err(req, hyd_fuse_errno(r));
	} else if (size == 0) {
		fuse_reply_xattr(req, len);
	} else {
		fuse_reply_buf(req, buf, len);
	}
	free(buf);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	if (strlen(name) > CAT_XATTR_NAME_MAX) {
		fuse_reply_err(req, ERANGE);
		return;
	}
	reply_xattr(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	reply_xattr(req, ino, NULL, size);
}

/* statfs (df): used is the tree's size (its files' bytes, its inodes);
 * available is what the cache directory's file system can still take,
 * the only space that reading the mount consumes (chunks are stored
 * there), in the mount's block size. Size is the sum of both, so df's
 * Use% is the tree against the room left for it: a read-only mount no
 * longer reads 100% full (which set off disk-full alerts), and an alert
 * that does fire means the cache's file system is filling up. A cache
 * directory that cannot be asked reports nothing available. */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct hyd_fs *fs = req_fs(req);
	struct hyd_gen *g = hyd_fs_gen(fs);
	struct statvfs st, cache;
	uint64_t used, files, avail = 0, favail = 0;

	(void)ino;
	used = (g->meta.bytes + HYD_STATFS_FRSIZE - 1) / HYD_STATFS_FRSIZE;
	files = g->meta.inodes;
	hyd_gen_unref(g);
	if (fs->rd.store && statvfs(hyd_store_dir(fs->rd.store), &cache) == 0 &&
	    cache.f_frsize > 0) {
		/* f_bavail * f_frsize bytes, in HYD_STATFS_FRSIZE units,
		 * without the product overflowing */
		avail = (uint64_t)cache.f_bavail / HYD_STATFS_FRSIZE *
			    cache.f_frsize +
			(uint64_t)cache.f_bavail % HYD_STATFS_FRSIZE *
			    cache.f_frsize / HYD_STATFS_FRSIZE;
		favail = (uint64_t)cache.f_favail;
	}
	memset(&st, 0, sizeof(st));
	st.f_bsize = HYD_FUSE_BLKSIZE;
	st.f_frsize = HYD_STATFS_FRSIZE;
	st.f_blocks = (fsblkcnt_t)(used + avail);
	st.f_bfree = (fsblkcnt_t)avail;
	st.f_bavail = (fsblkcnt_t)avail;
	st.f_files = (fsfilcnt_t)(files + favail);
	st.f_ffree = (fsfilcnt_t)favail;
	st.f_favail = (fsfilcnt_t)favail;
	st.f_namemax = CAT_NAME_MAX;
	fuse_reply_statfs(req, &st);
}

void hyd_fuse_ops_fill(struct fuse_lowlevel_ops *ops)
{
	memset(ops, 0, sizeof(*ops));
	ops->init = op_init;
	ops->lookup = op_lookup;
	ops->getattr = op_getattr;
	ops->readdir = op_readdir;
	ops->readdirplus = op_readdirplus;
	ops->readlink = op_readlink;
	ops->getxattr = op_getxattr;
	ops->listxattr = op_listxattr;
	ops->statfs = op_statfs;
	ops->open = hyd_fuse_open;
	ops->read = hyd_fuse_read;
	ops->release = hyd_fuse_release;
	ops->opendir = hyd_fuse_opendir;
	ops->releasedir = hyd_fuse_releasedir;
}
