/*
 * hydrator/read/hyd_fuse.h — the FUSE low-level filesystem.
 *
 * Catalog inode numbers are FUSE inode numbers (root 1), so every metadata
 * operation is one indexed catalog query, answered from the catalog alone.
 * A generation never changes, and a mount that follows its source switches
 * to the next one in place and tells the kernel what changed (FUSE
 * notifications), so entries, attributes and file data are cacheable by
 * the kernel for as long as it likes.
 *   hyd_fuse_meta.c  lookup, getattr, readdir(plus), readlink, xattrs, statfs
 *   hyd_fuse_read.c  open, read, release, opendir, releasedir
 * The session's userdata is a struct hyd_fs.
 */
#ifndef FERRY_HYD_FUSE_H
#define FERRY_HYD_FUSE_H

#include <pthread.h>
#include <sys/stat.h>

#include <fuse_lowlevel.h>

#include "catalog/catalog.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/trace/hyd_trace.h"

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
/* Directories with a first read seen (fetch_ahead: the second one asks
 * for the rest), direct-mapped */
#define HYD_PUSH_DIRS_LOG2 10

struct hyd_push_slot {
	uint64_t ino; /* 0: empty */
	uint64_t dir, pos;
	int pushed; /* stored into the kernel's cache */
	int read;   /* a read of it came (the reader got there) */
};

/* Threads that read a file lately: a listing one of them asks for gets
 * its small files pushed at once (a walk that reads what it lists);
 * someone who only lists (ls -lR, find) pushes nothing. */
#define HYD_PUSH_READERS 16u
#define HYD_PUSH_READER_NS 2000000000ull

struct hyd_push_job {
	uint64_t dir, after; /* the entries of dir past position after */
	int forward;	     /* first file first (a listing), else last first */
};

/* Generations a mount serves at most (the current one and older kept
 * ones: --keep-generations). */
#define HYD_GENS_MAX 16u

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
	uint64_t pushed;  /* __atomic: files stored into the kernel's cache */
	uint64_t fetched; /* __atomic: files whose chunks a job asked for */
	pthread_t th;
	int started, stop;
	/* Set before the mount serves (--no-backfill): a job's missing
	 * chunks are asked for before its files are pushed, since no
	 * backfill brings them (hyd_fuse_push.c); from a directory's second
	 * first read on (dirs: where one came, under mu). */
	int fetch_ahead;
	uint64_t dirs[1u << HYD_PUSH_DIRS_LOG2];
	/* Under mu: the threads (FUSE's pid of a request is the thread's
	 * id) with a first read of a file, and when. */
	uint32_t reader_tid[HYD_PUSH_READERS];
	uint64_t reader_ns[HYD_PUSH_READERS];
	uint64_t listed; /* __atomic: jobs queued by a listing */
	/* __atomic: listing jobs that came before the kernel knew a file */
	uint64_t unknown;
};

struct hyd_fs {
	/* The generations served (hyd_fuse_gens.c): gens[0] the current
	 * one, which every lookup and listing answers from; the others
	 * older ones still kept, newest first, which answer for inos the
	 * current one no longer has (a file or directory someone opened
	 * before a switch). Each holds one reference. Under gen_mu; a
	 * request pins the one it uses (hyd_fs_gen_for). */
	pthread_mutex_t gen_mu;
	struct hyd_gen *gens[HYD_GENS_MAX];
	size_t ngens;
	/* The inos older kept generations have and the current one lacks,
	 * ascending (cat_diff's "gone", gathered at each switch): only these
	 * are looked for in an older one, so a request about any other ino
	 * costs what it cost before the first switch. Under gen_mu. */
	uint64_t *gone;
	size_t ngone;
	/* The read path's store, fetcher, cache and deadline; its cat and
	 * manifest stay NULL in a mount (each open-file state reads its
	 * own generation's). */
	struct hyd_read_ctx rd;
	/* Told of each open of a regular file, after the reply (backfill
	 * puts its directory first); NULL: nobody listens. Any FUSE thread. */
	void (*on_open)(void *arg, uint64_t ino);
	void *on_open_arg;
	/* The record of first reads (CACHEDIR/trace.rec); NULL: none.
	 * Told of every read answered. */
	hyd_trace_rec *trace;
	const char *mountpoint; /* absolute; borrowed; NULL: not tuned */
	int ra_tuned;		/* __atomic: readahead raised (or tried) */
	/* No-open mode (the kernel offers it): OPEN is answered ENOSYS and
	 * reads find their state in files. Set at FUSE init. */
	int no_open;
	int no_opendir; /* the same for OPENDIR */
	/* the largest read the kernel may ask for (HYD_FUSE_MAX_READ_SPLICE
	 * for a mount whose reads are spliced from DIR); 0: its own */
	unsigned max_read;
	struct hyd_files files;
	struct hyd_push push; /* started: pushing is on */
};

/* The kernel's readahead for this mount, in KiB. FUSE starts every mount
 * at 128 KiB, which makes a sequential reader's requests 128 KiB each with
 * one or two in flight; 4 MiB gives 1 MiB requests (the negotiated
 * max_pages), several at once, so fewer requests carry the same bytes and
 * decoding overlaps more. */
#define HYD_FUSE_READAHEAD_KB 4096u

/* A reply spliced from a file goes through a pipe that must hold all of
 * it, header and a page or two of slack included (libfuse's rule); an
 * unprivileged pipe holds at most 1 MiB (/proc/sys/fs/pipe-max-size), so
 * the reads of an --into mount stop 16 KiB short of the 1 MiB the kernel
 * would ask for. Set as the mount's max_read and at FUSE init. */
#define HYD_FUSE_MAX_READ_SPLICE (1024u * 1024u - 16384u)

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

/* hyd_fuse_gens.c. init (taking the caller's reference of first) before
 * the session starts, fini after it ended. */
void hyd_fs_gens_init(struct hyd_fs *fs, struct hyd_gen *first);
void hyd_fs_gens_fini(struct hyd_fs *fs);
/* hyd_fs_gen, the current generation: hyd_read.h (the FUSE-free face). */
/* The generation that answers for ino, pinned: the current one when it
 * has ino (or when no older kept one has it), else the newest older one
 * that does. With ret_in, *ret_r is the cat_getattr of ino in the one
 * returned (with ret_in NULL, ret_r may be NULL too). Any thread. */
struct hyd_gen *hyd_fs_gen_for(struct hyd_fs *fs, uint64_t ino,
			       struct cat_inode *ret_in, int *ret_r);
/* Make g current (the mount takes the caller's reference); the one it
 * replaces and the older ones stay while at most keep (1..HYD_GENS_MAX)
 * are kept, the rest are dropped (their files go with their last
 * reference). gone (ascending, n of them) are the inos the replaced
 * generation has and g lacks. The open-file table is emptied, so new
 * reads pin the generations they find. Any thread. Returns how many were
 * dropped, or -ENOMEM (nothing changed). */
long hyd_fs_gens_switch(struct hyd_fs *fs, struct hyd_gen *g, size_t keep,
			const uint64_t *gone, size_t n);

/* Cancel the manifest fetchers of the generations kept (the process is
 * stopping: reads waiting on a manifest end at once). Any thread. */
void hyd_fs_gens_cancel(struct hyd_fs *fs);

/* hyd_fuse_files.c. init before the session starts, fini after it ends. */
void hyd_files_init(struct hyd_files *t);
void hyd_files_fini(struct hyd_files *t);
/* Drop every state from the table (readers still holding one keep it). */
void hyd_files_clear(struct hyd_files *t);
/* ino's open-file state with a reference for the caller (drop it with
 * hyd_read_open_unref), made from the generation of fs that answers for
 * ino (hyd_fs_gen_for) when the table has none (*ret_new = 1 then).
 * -EISDIR or -EINVAL for an inode that is not a regular file, else the
 * catalog's error or -ENOMEM. Any FUSE thread. */
int hyd_files_get(struct hyd_files *t, struct hyd_fs *fs, uint64_t ino,
		  struct hyd_read_open **ret, int *ret_new);

/* hyd_fuse_push.c. Start the pushing thread (after the session is made,
 * before its loop runs); stop it after the loop ended. fetch_ahead: the
 * mount has no backfill, so a job's missing chunks are asked for first.
 * 0 or -errno (then nothing is pushed and note/first_read do nothing). */
int hyd_push_start(struct hyd_push *p, struct hyd_fs *fs,
		   struct fuse_session *se, int fetch_ahead);
void hyd_push_stop(struct hyd_push *p);
/* READDIRPLUS handed out regular file ino at position pos of dir. */
void hyd_push_note(struct hyd_push *p, uint64_t ino, uint64_t dir,
		   uint64_t pos);
/* The first read of ino since its state was made, by thread tid: queue
 * the files after it, when it was noted. Any FUSE thread; never blocks
 * on I/O. */
void hyd_push_first_read(struct hyd_push *p, uint64_t ino, uint32_t tid);
/* READDIRPLUS of dir from position after was answered to thread tid:
 * when tid read a file lately, queue the entries listed, first
 * file first (after the reply: the kernel knows their inodes then). */
void hyd_push_listed(struct hyd_push *p, uint64_t dir, uint64_t after,
		     uint32_t tid);

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
