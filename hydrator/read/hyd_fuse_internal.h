/*
 * hydrator/read/hyd_fuse_internal.h — the FUSE low-level filesystem.
 *
 * Catalog inode numbers are FUSE inode numbers (root 1), so every metadata
 * operation is one indexed catalog query, answered from the catalog alone.
 * A generation never changes under a mount, so entries, attributes and
 * file data are cacheable by the kernel for as long as it likes.
 *   hyd_fuse_meta.c  lookup, getattr, readdir(plus), readlink, xattrs, statfs
 *   hyd_fuse_read.c  open, read, release, opendir, releasedir
 * The session's userdata is a struct hyd_fs.
 */
#ifndef FERRY_HYD_FUSE_INTERNAL_H
#define FERRY_HYD_FUSE_INTERNAL_H

#include <pthread.h>
#include <sys/stat.h>

#include <fuse_lowlevel.h>

#include "catalog/catalog.h"
#include "hydrator/read/hyd_read_internal.h"

/* Entries and attributes never change within a generation. */
#define HYD_FUSE_TIMEOUT_S 86400.0
#define HYD_FUSE_BLKSIZE 65536

/* Open-file states by inode (hyd_fuse_files.c): 2^9 sets of 8 ways. */
#define HYD_FILES_SETS_LOG2 9
#define HYD_FILES_WAYS 8u
#define HYD_FILES_SLOTS ((size_t)HYD_FILES_WAYS << HYD_FILES_SETS_LOG2)

struct hyd_files_slot {
	struct hyd_read_open *of; /* NULL: empty; else one table reference */
	uint64_t used;		  /* LRU clock */
};

struct hyd_files {
	pthread_mutex_t mu;
	uint64_t clock;
	struct hyd_files_slot slot[HYD_FILES_SLOTS];
};

/* The next small files of a directory pushed into the kernel's page
 * cache (hyd_fuse_push.c). */
#define HYD_PUSH_SLOTS_LOG2 16	     /* inodes noted from READDIRPLUS */
#define HYD_PUSH_QUEUE 64u	     /* jobs waiting */
#define HYD_PUSH_FILES 256u	     /* files one job pushes at most */
#define HYD_PUSH_BYTES (32u << 20)   /* and bytes */
#define HYD_PUSH_FILE_MAX (1u << 20) /* larger files: kernel readahead */

struct hyd_push_slot {
	uint64_t ino; /* 0: empty */
	uint64_t dir, pos;
	int pushed; /* stored into the kernel's cache */
	int read;   /* a read of it came (the reader got there) */
};

struct hyd_push_job {
	uint64_t dir, after; /* the entries of dir past position after */
};

struct hyd_fs;
struct hyd_push {
	struct hyd_fs *fs;
	struct fuse_session *se;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hyd_push_slot *slot; /* 1 << HYD_PUSH_SLOTS_LOG2, by inode */
	struct hyd_push_job q[HYD_PUSH_QUEUE];
	size_t qh, qn;
	uint64_t run_dir, run_after, run_end; /* the job running; dir 0: none */
	uint64_t pushed; /* __atomic: files stored into the kernel's cache */
	pthread_t th;
	int started, stop;
};

struct hyd_fs {
	cat_reader *cat;      /* borrowed */
	struct cat_meta meta; /* copy, read at start-up */
	struct hyd_read_ctx rd;
	/* Told of each open of a regular file, after the reply (backfill
	 * puts its directory first); NULL: nobody listens. Any FUSE thread. */
	void (*on_open)(void *arg, uint64_t ino);
	void *on_open_arg;
	const char *mountpoint; /* absolute; borrowed; NULL: not tuned */
	int ra_tuned;		/* __atomic: readahead raised (or tried) */
	/* No-open mode (the kernel offers it): OPEN is answered ENOSYS and
	 * reads find their state in files. Set at FUSE init. */
	int no_open;
	int no_opendir; /* the same for OPENDIR */
	struct hyd_files files;
	struct hyd_push push; /* started: pushing is on */
};

/* The kernel's readahead for this mount, in KiB. FUSE starts every mount
 * at 128 KiB, which makes a sequential reader's requests 128 KiB each with
 * one or two in flight; 4 MiB gives 1 MiB requests (the negotiated
 * max_pages), several at once, so fewer requests carry the same bytes and
 * decoding overlaps more. */
#define HYD_FUSE_READAHEAD_KB 4096u

/* Fill ops with every operation the filesystem implements. */
void hyd_fuse_ops_fill(struct fuse_lowlevel_ops *ops);

/* A catalog inode as struct stat. */
void hyd_fuse_stat(const struct cat_inode *in, struct stat *st);

/* -errno from catalog/ or the read path -> positive errno for a FUSE
 * reply: a bad catalog row (-EBADMSG) and anything unexpected are EIO. */
int hyd_fuse_errno(int err);

/* Log one failed operation (key=value), unless it is a plain miss. */
void hyd_fuse_log(const char *op, uint64_t ino, int err);

/* Raise the mount's readahead to HYD_FUSE_READAHEAD_KB (never lower it),
 * once per mount; later calls return at once. Call it first thing in
 * every operation that can come before a file's open (lookup, getattr,
 * opendir, open): a file takes its readahead size from the mount when it is
 * opened, and FUSE_INIT's max_readahead would clamp a value set before the
 * first request. Needs root (sysfs); without it the default stays, which
 * only costs speed, so failures are logged in verbose mode alone. */
void hyd_fuse_tune_readahead(struct hyd_fs *fs);

/* hyd_fuse_files.c. init before the session starts, fini after it ends. */
void hyd_files_init(struct hyd_files *t);
void hyd_files_fini(struct hyd_files *t);
/* ino's open-file state with a reference for the caller (drop it with
 * hyd_read_open_unref), made from the catalog when the table has none
 * (*ret_new = 1 then). -EISDIR or -EINVAL for an inode that is not a
 * regular file, else the catalog's error or -ENOMEM. Any FUSE thread. */
int hyd_files_get(struct hyd_files *t, cat_reader *cat, uint64_t ino,
		  struct hyd_read_open **ret, int *ret_new);

/* hyd_fuse_push.c. Start the pushing thread (after the session is made,
 * before its loop runs); stop it after the loop ended. 0 or -errno (then
 * nothing is pushed and note/first_read do nothing). */
int hyd_push_start(struct hyd_push *p, struct hyd_fs *fs,
		   struct fuse_session *se);
void hyd_push_stop(struct hyd_push *p);
/* READDIRPLUS handed out regular file ino at position pos of dir. */
void hyd_push_note(struct hyd_push *p, uint64_t ino, uint64_t dir,
		   uint64_t pos);
/* The first read of ino since its state was made: queue the files after
 * it, when it was noted. Any FUSE thread; never blocks on I/O. */
void hyd_push_first_read(struct hyd_push *p, uint64_t ino);

/* hyd_fuse_read.c */
void hyd_fuse_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hyd_fuse_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi);
void hyd_fuse_release(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi);
void hyd_fuse_opendir(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi);
void hyd_fuse_releasedir(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_file_info *fi);

#endif
