/*
 * replicator/source/repl_scan_priv.h — the pieces of the scanner below the
 * walk: a file's chunk manifest (bounded memory, spills to an unlinked
 * temp file), reading, chunking and hashing one regular file
 * (repl_scan_file.c), and the pool of threads that does that work for the
 * walk (repl_scan_pool.c).
 *
 * Threads: the walk (repl_scan.c) runs on one thread, the "walker", which
 * alone writes the catalog and the source index, in walk order. A regular
 * file is a job (struct repl_file_job): the walker hands jobs for the files
 * ahead of it to the pool and takes their results in walk order, so the
 * catalog never depends on which thread finished first. A big file's
 * windows are hashed by whichever threads are free (struct repl_window).
 */
#ifndef FERRY_REPL_SCAN_PRIV_H
#define FERRY_REPL_SCAN_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "catalog/catalog.h"
#include "replicator/source/repl_source.h"

/* Manifest entries kept in memory before spilling (48 bytes each). */
#define REPL_MANIFEST_MEM 16384u
/* Read window for file data; at least 2 * max chunk size. */
#define REPL_READ_WINDOW (4u * 1024u * 1024u)
/* Windows per reader: one is cut while the other is being hashed. */
#define REPL_WINDOWS 2u
/* Bytes of chunks per hash task; a window with less than two tasks' worth
 * is hashed by the thread that cut it. */
#define REPL_HASH_TASK (1024u * 1024u)
/* Chunks one window may hold; a window that reaches it ends early. */
#define REPL_WINDOW_CHUNKS 4096u
/* Hash tasks of one window (REPL_READ_WINDOW / REPL_HASH_TASK + 1). */
#define REPL_WINDOW_TASKS 8u

/* -- manifests: one per file job -- */

struct repl_manifest {
	struct cat_chunk *v; /* grows up to REPL_MANIFEST_MEM entries */
	size_t n, cap;
	int spill_fd;	       /* -1 until first needed */
	uint64_t spilled;      /* entries in the spill file */
	const char *spill_dir; /* borrowed: where the spill file goes */
};

/* Empty manifest; nothing is allocated until the first add. spill_dir is
 * borrowed and must outlive m. */
void repl_manifest_init(struct repl_manifest *m, const char *spill_dir);
void repl_manifest_fini(struct repl_manifest *m);
void repl_manifest_reset(struct repl_manifest *m);
int repl_manifest_add(struct repl_manifest *m, const struct cat_chunk *c);

/* Call cb for every entry in order; stops at (and returns) a negative cb
 * result. */
typedef int (*repl_manifest_cb)(void *ctx, const struct cat_chunk *c);
int repl_manifest_each(struct repl_manifest *m, repl_manifest_cb cb, void *ctx);

/* -- the previous generation (repl_scan_prev.c) -- */

struct repl_prev;

/* Open the previous generation's catalog and source index for reuse.
 * -ESTALE when its chunk parameters are not params (nothing can be
 * reused), -ENOENT, -EBADMSG, -EIO. */
int repl_prev_open(const char *catalog_path, const char *srcindex_path,
		   const chunk_params *params, struct repl_prev **ret);
void repl_prev_close(struct repl_prev *p);

/* When the previous generation holds a regular file of st's identity
 * (st_dev, st_ino) with st's size, mtime and ctime, put its manifest into
 * m (reset first) and return 1; 0 when not (m empty; read the file), or
 * -ENOMEM / -EIO. *ret_prev_ino is that file's ino there whenever it
 * holds a regular file of this identity with st's size, mtime and ctime,
 * its manifest reusable or not (0: none, or changed: a changed file gets
 * a new number). p may be NULL (0). Any thread. */
int repl_prev_manifest(struct repl_prev *p, const struct stat *st,
		       struct repl_manifest *m, uint64_t *ret_prev_ino);

/* The ino the previous generation gave the entry of st's identity, when
 * it was of the same kind (CAT_*): 1 with *ret set, 0 when none, -errno.
 * p may be NULL (0). Any thread. */
int repl_prev_ino(struct repl_prev *p, const struct stat *st, int kind,
		  uint64_t *ret);

/* The previous generation's next_ino (cat_next_ino); 0 when none. */
uint64_t repl_prev_next_ino(struct repl_prev *p);

/* -- what every scanning thread shares (read-only during the scan) -- */

struct repl_scan_pool;

struct repl_scan_shared {
	chunk_params p;
	const atomic_int *cancel;      /* may be NULL */
	repl_scan_hook_fn before_read; /* may be NULL */
	void *ctx;		       /* for before_read */
	pthread_mutex_t hook_lock;     /* before_read runs one at a time */
	const char *spill_dir;
	struct repl_scan_pool *pool; /* NULL: everything on the walker */
	/* The previous generation's catalog and source index, NULL: none.
	 * Every reader opens its own handles on them (repl_file_reader.prev),
	 * so lookups on several threads never wait for each other. */
	const char *prev_catalog_path, *prev_srcindex_path;
	struct repl_prev *prev; /* the walker's reader's (may be NULL) */
	int defer;		/* repl_scan_opts.defer */
};

/* -- windows and hash tasks -- */

struct repl_window;

/* Hash chunks [lo, hi) of w; queued on the pool. */
struct repl_hash_task {
	struct repl_hash_task *next;
	struct repl_window *w;
	size_t lo, hi;
};

/* One window of a file: bytes buf[0..) are the file from offset base on;
 * c[0..n) the chunks cut in it (off is a file offset), whose ids are
 * filled by hash tasks. pending and err are guarded by the pool lock. */
struct repl_window {
	uint8_t *buf;
	uint64_t base;
	struct cat_chunk *c;
	size_t n;
	int posted;	  /* owner only: tasks were queued */
	unsigned pending; /* hash tasks not finished */
	int err;	  /* first hashing failure */
	struct repl_hash_task t[REPL_WINDOW_TASKS];
};

/* Hash the chunks of one task; the id of chunk k goes to w->c[k].id.
 * Returns 0 or -EIO. Any thread. */
int repl_hash_task_run(const struct repl_hash_task *t);

/* One reader of file data, owned by one thread: its windows are reused
 * across files. */
struct repl_file_reader {
	struct repl_scan_shared *sh;
	struct repl_prev *prev; /* its own, NULL: no reuse */
	size_t cap;		/* bytes per window buffer */
	struct repl_window w[REPL_WINDOWS];
};

int repl_file_reader_init(struct repl_file_reader *fr,
			  struct repl_scan_shared *sh);
void repl_file_reader_fini(struct repl_file_reader *fr);

/* Read fd to EOF, or to size bytes, the size fstat gave, chunking into m
 * (reset first). A file whose blocks cover less than its size is mapped
 * with SEEK_DATA/SEEK_HOLE first: only its data is read and chunked, its
 * holes become hole rows (catalog.h, chunk_id_is_hole). *ret_total is
 * how far the manifest covers the file (size unless it shrank), *ret_read
 * the bytes read. Windows may be hashed on other pool threads; all of
 * them are finished before this returns. Returns 0, -ECANCELED, -errno of
 * read or lseek, -EIO (hashing failed), -ENOMEM. */
int repl_file_chunk(struct repl_file_reader *fr, int fd, uint64_t size,
		    struct repl_manifest *m, uint64_t *ret_total,
		    uint64_t *ret_read);

/* Extended attributes of one inode, collected before its row is written
 * (repl_xattrs.c). */
struct repl_xattr {
	char *name; /* NUL-terminated */
	void *value;
	size_t value_len;
};

struct repl_xattrs {
	struct repl_xattr *v;
	size_t n, cap;
};

void repl_xattrs_clear(struct repl_xattrs *x);

/* Collect all readable xattrs: through fd when fd >= 0, else through
 * path with the l* calls (symlinks are not followed). ENOTSUP, EPERM and
 * EACCES mean "none"; a name that vanishes between list and get is
 * skipped; values above CAT_XATTR_VALUE_MAX are skipped.
 * Returns 0, -ENOENT (the inode vanished), -ENOMEM, -errno. */
int repl_xattrs_collect(struct repl_xattrs *x, int fd, const char *path);

/* The same for the entry name of directory dfd, without opening it and
 * without following a symlink (repl_xattrs.c). Any thread. */
int repl_xattrs_collect_at(struct repl_xattrs *x, int dfd, const char *name);

/* Tests only: 1 makes repl_xattrs_collect_at take the /proc path it uses
 * where the kernel has no listxattrat; 0 lets it try the syscall again. */
void repl_xattrs_use_proc(int on);

/* -- file jobs -- */

enum repl_job_state {
	REPL_JOB_IDLE = 0, /* not handed to the pool */
	REPL_JOB_QUEUED,
	REPL_JOB_RUNNING,
	REPL_JOB_DONE,
};

/* Everything the walker needs to write one regular file, found on
 * whatever thread ran the job. dfd and name are borrowed from the walker,
 * which keeps them valid until the job is done. */
struct repl_file_job {
	struct repl_file_job *next; /* pool queue */
	enum repl_job_state state;  /* pool lock */
	int submitted;		    /* walker only: handed to the pool */
	int dfd;
	const char *name;
	/* results */
	int rc;		      /* -ECANCELED or -ENOMEM: the scan must stop */
	int reused;	      /* the manifest came from the previous
			       * generation: no byte was read */
	uint64_t prev_ino;    /* its ino in the previous generation, 0 */
	int pending;	      /* deferred: not read, hashed later */
	int not_reg;	      /* 1: st says it is no regular file (any
			       * more); the walker takes it from there */
	uint64_t read_bytes;  /* file bytes read (all attempts) */
	int left_out;	      /* 1: report warn_err/warn_why, write nothing */
	int warn_err;	      /* positive errno or 0 */
	const char *warn_why; /* static text or NULL */
	struct stat st;	      /* after the read */
	int64_t looked_ns;    /* wall clock just before the first stat */
	struct repl_manifest m;
	struct repl_xattrs xa;
};

/* Set up j for (dfd, name); its manifest spills under sh->spill_dir. */
void repl_file_job_init(struct repl_file_job *j,
			const struct repl_scan_shared *sh, int dfd,
			const char *name);
/* Free the results; j must not be queued or running. */
void repl_file_job_fini(struct repl_file_job *j);

/* Stat the entry (no symlink followed): when it is not a regular file,
 * set not_reg and st and stop. When the previous generation holds it
 * unchanged (repl_prev_manifest) take its manifest from there; else, when
 * the scan defers hashing, mark it pending; in both cases, and for an
 * empty file, nothing is opened (xattrs by name). Else open, read, chunk
 * and hash it, re-reading once if it changed underneath, and collect its
 * xattrs. Fills j's results. Runs on any thread with that thread's
 * reader. */
void repl_file_job_run(struct repl_file_job *j, struct repl_file_reader *fr);

/* -- the pool (repl_scan_pool.c) -- */

/* Start workers threads (0 is allowed: then every job and hash task runs
 * on the thread that waits for it). Returns 0, -ENOMEM, -errno of
 * pthread_create (threads already started are stopped). sh must outlive
 * the pool; sh->pool is not set here. */
int repl_scan_pool_new(struct repl_scan_shared *sh, unsigned workers,
		       struct repl_scan_pool **ret_pool);

/* Stop and join the workers. No job may be queued or running. NULL is a
 * no-op. */
void repl_scan_pool_free(struct repl_scan_pool *pool);

/* Number of worker threads (not counting the walker). */
unsigned repl_scan_pool_workers(const struct repl_scan_pool *pool);

/* Queue j (state IDLE -> QUEUED). Walker only. */
void repl_scan_pool_submit(struct repl_scan_pool *pool,
			   struct repl_file_job *j);

/* Walker only: return when j is DONE. A job still queued is run right
 * here with fr; while j runs elsewhere, the walker hashes queued windows
 * or runs other queued jobs rather than sleep. An IDLE job is run here. */
void repl_scan_pool_wait_job(struct repl_scan_pool *pool,
			     struct repl_file_job *j,
			     struct repl_file_reader *fr);

/* Walker only: make sure j is neither queued nor running (a queued job is
 * taken back, a running one waited for); then j may be freed. */
void repl_scan_pool_cancel_job(struct repl_scan_pool *pool,
			       struct repl_file_job *j);

/* Queue w's n tasks t[0..n) and set w->pending = n. Any thread. */
void repl_scan_pool_post_hash(struct repl_scan_pool *pool,
			      struct repl_window *w, size_t n);

/* Return when every hash task of w has finished, running queued hash
 * tasks (w's or others') meanwhile. Any thread. Returns w->err. */
int repl_scan_pool_wait_window(struct repl_scan_pool *pool,
			       struct repl_window *w);

#endif
