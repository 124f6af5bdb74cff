/*
 * replicator/source/repl_hasher.c — the background hasher (repl_hasher.h):
 * workers that take pending files (a reader's request first, then ino
 * order), read, cut and hash each through the scanner's read windows, and
 * record it in the source index.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_hasher.h"
#include "replicator/source/repl_scan_priv.h"
#include "replicator/source/repl_srcindex.h"

/* Pending files loaded from the index at a time. */
#define BATCH 256u
/* Requests remembered at once; more only wait their turn in ino order. */
#define PRIO_QUEUE_MAX 256u
#define THREADS_MAX 64u
/* Reads of one file before it counts as changed. */
#define TRIES 3

struct worker {
	struct repl_hasher *h;
	pthread_t tid;
	int started;
	uint64_t busy; /* ino being hashed, 0 when none (under mu) */
	int urgent;    /* a client waits for it (under mu) */
	pid_t os_tid;  /* for ioprio_set; set before the first take */
	struct repl_file_reader fr;
};

struct repl_hasher {
	struct repl_hasher_opts o;
	char *name, *dir, *spill;
	pthread_mutex_t mu; /* everything below, and the index connection */
	repl_srcindex_hw *w;
	struct repl_scan_shared sh;
	atomic_int cancel;
	/* the queue: requests first, then the index's todo in ino order */
	uint64_t prio[PRIO_QUEUE_MAX];
	size_t prio_head, prio_n;
	uint64_t batch[BATCH]; /* inos of the todo list, in order */
	size_t bi, bn;
	uint64_t cursor; /* the last ino loaded into batch */
	int drained;	 /* the todo list has nothing after cursor */
	struct repl_hasher_stats st;
	unsigned running; /* workers not yet ended */
	unsigned n_workers;
	struct worker *workers;
};

static void job_free(struct repl_src_job *j)
{
	free(j->path);
	j->path = NULL;
}

static int busy(const struct repl_hasher *h, uint64_t ino)
{
	for (unsigned i = 0; i < h->n_workers; i++)
		if (h->workers[i].busy == ino)
			return 1;
	return 0;
}

/* Take ino for wk (lock held) if it is still to do and no other worker
 * has it: 1 with *j filled, 0 to skip it, -errno. */
static int take_ino(struct repl_hasher *h, struct worker *wk, uint64_t ino,
		    struct repl_src_job *j)
{
	int r;

	if (busy(h, ino))
		return 0;
	r = repl_srcindex_hw_todo_one(h->w, ino, j);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	wk->busy = ino;
	return 1;
}

/* The next file for wk (lock held): 1 with *j filled, 0 when nothing is
 * left, -errno. Requests first, then the todo list in ino order; each ino
 * is looked up again when taken, since a request may have done it. */
static int take(struct repl_hasher *h, struct worker *wk,
		struct repl_src_job *j)
{
	int r;

	while (h->prio_n) {
		uint64_t ino = h->prio[h->prio_head];

		h->prio_head = (h->prio_head + 1) % PRIO_QUEUE_MAX;
		h->prio_n--;
		r = take_ino(h, wk, ino, j);
		wk->urgent = r > 0;
		if (r != 0)
			return r;
	}
	wk->urgent = 0;
	for (;;) {
		uint64_t ino;

		if (h->bi == h->bn) {
			if (h->drained)
				return 0;
			h->bi = h->bn = 0;
			r = repl_srcindex_hw_todo(h->w, h->cursor, h->batch,
						  BATCH, &h->bn);
			if (r < 0)
				return r;
			if (h->bn < BATCH)
				h->drained = 1;
			if (h->bn == 0)
				return 0;
			h->cursor = h->batch[h->bn - 1];
		}
		ino = h->batch[h->bi++];
		r = take_ino(h, wk, ino, j);
		if (r != 0)
			return r;
	}
}

static int64_t ns_of(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* Is the open file what the walk saw? */
static int same_as_walk(const struct stat *st, const struct repl_src_todo *t)
{
	return S_ISREG(st->st_mode) && (uint64_t)st->st_dev == t->dev &&
	       (uint64_t)st->st_ino == t->sino &&
	       (uint64_t)st->st_size == t->size &&
	       ns_of(&st->st_mtim) == t->mtime_ns &&
	       ns_of(&st->st_ctim) == t->ctime_ns;
}

static int rows_cb(void *ctx, int (*put)(void *, const struct cat_chunk *),
		   void *put_ctx)
{
	return repl_manifest_each(ctx, (repl_manifest_cb)put, put_ctx);
}

/* Read and hash one file into m. 0 (m is its manifest), 1 (not what the
 * walk saw, or changed while read, or unreadable: *why says how),
 * -ECANCELED, -ENOMEM. A read error is tried again (TRIES in all); a
 * change is not: once written, the file can never again match the inode
 * the namespace published (ctime moves on every write). */
static int hash_file(struct repl_hasher *h, struct worker *wk,
		     const struct repl_src_job *j, struct repl_manifest *m,
		     const char **why, int *err)
{
	struct stat a, b;
	uint64_t total, nread;
	int fd, r;

	*why = NULL;
	*err = 0;
	for (int t = 0; t < TRIES; t++) {
		fd = repl_open_beneath(h->o.dirfd, j->path);
		if (fd < 0) {
			*err = errno;
			*why = "cannot open it";
			return 1;
		}
		if (fstat(fd, &a) < 0 || !same_as_walk(&a, &j->t)) {
			close(fd);
			*err = 0;
			*why = t ? "changed while being read"
				 : "changed since the walk";
			return 1;
		}
		if (h->o.opened)
			h->o.opened(h->o.opened_ctx, j->path);
		total = nread = 0;
		r = repl_file_chunk(&wk->fr, fd, j->t.size, m, &total, &nread);
		pthread_mutex_lock(&h->mu);
		h->st.bytes_read += nread;
		pthread_mutex_unlock(&h->mu);
		if (r == -ECANCELED || r == -ENOMEM) {
			close(fd);
			return r;
		}
		if (r < 0) {
			close(fd);
			*err = -r;
			*why = "cannot read it";
			continue;
		}
		r = fstat(fd, &b);
		close(fd);
		/* Identity before and after: a write during the read moves
		 * mtime or ctime (or the size). */
		if (r == 0 && total == j->t.size && same_as_walk(&b, &j->t))
			return 0;
		*why = "changed while being hashed";
		return 1;
	}
	return 1; /* read errors every time: *why and *err say which */
}

static void warn_changed(struct repl_hasher *h, const struct repl_src_job *j,
			 const char *why, int err)
{
	if (err)
		base_log_err(BASE_LOG_WARN, err,
			     "no manifest for a file, reads of it will fail "
			     "ns=%s path=\"%s/%s\" why=\"%s\"",
			     h->name, h->dir, j->path, why);
	else
		base_warn("no manifest for a file, reads of it will fail "
			  "ns=%s path=\"%s/%s\" why=\"%s\"",
			  h->name, h->dir, j->path, why);
}

/* Background hashing yields the disk: a hashing thread reads in the
 * idle I/O class, so the server's own reads (chunks it is asked for, the
 * catalog) and whatever else the source machine runs come first; measured,
 * an 8 GiB tree browsed in 0.78-1.2 s with the hasher in the default class
 * and 0.60 s in idle, as fast as a 0.25 GiB one. A file a client waits for
 * is read in the best-effort class, set on whichever thread has it
 * (ioprio_set names a thread by its tid). Failing to set either is
 * harmless. */
#define IOPRIO_CLASS_BE 2
#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_CLASS_SHIFT 13
#define IOPRIO_WHO_PROCESS 1

static void io_class(pid_t tid, int urgent)
{
	int v = urgent ? IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT | 4
		       : IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT;

	(void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, v);
}

/* The test hook's wait before a file (FERRY_HASH_DELAY_MS), in steps that
 * look at cancel, so a stop never waits the hook out. Returns 0, or
 * -ECANCELED when the hasher is stopping. */
static int hook_delay(struct repl_hasher *h)
{
	unsigned left = h->o.delay_ms;

	while (left) {
		unsigned step = left < 50 ? left : 50;
		struct timespec ts = {.tv_nsec = (long)step * 1000000};

		if (atomic_load(&h->cancel))
			return -ECANCELED;
		nanosleep(&ts, NULL);
		left -= step;
	}
	return atomic_load(&h->cancel) ? -ECANCELED : 0;
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct repl_hasher *h = wk->h;
	struct repl_manifest m;
	struct repl_src_job j;
	const char *why;
	uint64_t unique;
	int r, err;

	wk->os_tid = (pid_t)syscall(SYS_gettid);
	repl_manifest_init(&m, h->spill);
	for (;;) {
		if (atomic_load(&h->cancel))
			break;
		pthread_mutex_lock(&h->mu);
		r = take(h, wk, &j);
		if (r < 0 && !h->st.err)
			h->st.err = r;
		if (r > 0)
			io_class(wk->os_tid, wk->urgent);
		pthread_mutex_unlock(&h->mu);
		if (r < 0)
			base_log_err(BASE_LOG_ERROR, r, "hashing stopped ns=%s",
				     h->name);
		if (r <= 0)
			break;
		if (h->o.delay_ms && hook_delay(h) < 0) {
			pthread_mutex_lock(&h->mu);
			wk->busy = 0;
			pthread_mutex_unlock(&h->mu);
			job_free(&j);
			break;
		}
		r = hash_file(h, wk, &j, &m, &why, &err);
		if (r < 0) {
			pthread_mutex_lock(&h->mu);
			wk->busy = 0;
			if (r != -ECANCELED && !h->st.err)
				h->st.err = r;
			pthread_mutex_unlock(&h->mu);
			job_free(&j);
			break;
		}
		if (r == 1)
			warn_changed(h, &j, why, err);
		pthread_mutex_lock(&h->mu);
		r = repl_srcindex_hw_done(h->w, j.ino, j.t.size,
					  r ? REPL_HASH_CHANGED : REPL_HASH_OK,
					  r ? NULL : rows_cb, &m, &unique);
		wk->busy = 0;
		if (r == 0) {
			h->st.files_done++;
			h->st.bytes_done += j.t.size;
			h->st.changed += why ? 1 : 0;
			h->st.unique += unique;
		} else if (r != -ENOENT && !h->st.err) {
			h->st.err = r;
		}
		pthread_mutex_unlock(&h->mu);
		job_free(&j);
		repl_manifest_reset(&m);
		if (r < 0 && r != -ENOENT) {
			base_log_err(BASE_LOG_ERROR, r,
				     "cannot record a manifest, hashing "
				     "stopped ns=%s",
				     h->name);
			break;
		}
		if (h->o.progress)
			h->o.progress(h->o.ctx);
	}
	repl_manifest_fini(&m);
	pthread_mutex_lock(&h->mu);
	if (--h->running == 0)
		h->st.ended_ns = base_now_ns();
	pthread_mutex_unlock(&h->mu);
	if (h->o.progress)
		h->o.progress(h->o.ctx);
	return NULL;
}

static void hasher_free(struct repl_hasher *h)
{
	for (unsigned i = 0; h->workers && i < h->n_workers; i++)
		repl_file_reader_fini(&h->workers[i].fr);
	repl_srcindex_hw_close(h->w);
	pthread_mutex_destroy(&h->sh.hook_lock);
	pthread_mutex_destroy(&h->mu);
	free(h->workers);
	free(h->name);
	free(h->dir);
	free(h->spill);
	free(h);
}

int repl_hasher_start(const struct repl_hasher_opts *o,
		      struct repl_hasher **ret)
{
	struct repl_hash_counts c;
	struct repl_hasher *h;
	unsigned n;
	int r;

	*ret = NULL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->o = *o;
	pthread_mutex_init(&h->mu, NULL);
	pthread_mutex_init(&h->sh.hook_lock, NULL);
	atomic_init(&h->cancel, 0);
	h->name = strdup(o->name);
	h->dir = strdup(o->dir);
	h->spill = strdup(o->spill_dir);
	if (!h->name || !h->dir || !h->spill) {
		r = -ENOMEM;
		goto fail;
	}
	h->o.name = h->name;
	h->o.dir = h->dir;
	h->sh.p = o->params;
	h->sh.cancel = &h->cancel;
	h->sh.spill_dir = h->spill;
	r = repl_srcindex_hw_open(o->srcindex_path, &h->w);
	if (r < 0)
		goto fail;
	r = repl_srcindex_hw_counts(h->w, &c);
	if (r < 0)
		goto fail;
	h->st.files_total = c.todo_files + c.done_files;
	h->st.bytes_total = c.todo_bytes + c.done_bytes;
	h->st.files_done = c.done_files;
	h->st.bytes_done = c.done_bytes;
	h->st.changed = c.changed;
	h->st.started_ns = base_now_ns();
	n = o->threads < 1	       ? 1
	    : o->threads > THREADS_MAX ? THREADS_MAX
				       : o->threads;
	if (c.todo_files < n)
		n = (unsigned)c.todo_files;
	h->workers = calloc(n ? n : 1, sizeof(*h->workers));
	if (!h->workers) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < n; i++) {
		h->workers[i].h = h;
		r = repl_file_reader_init(&h->workers[i].fr, &h->sh);
		if (r < 0)
			goto fail;
		h->n_workers++;
	}
	if (n == 0)
		h->st.ended_ns = h->st.started_ns;
	h->running = n;
	for (unsigned i = 0; i < n; i++) {
		r = -pthread_create(&h->workers[i].tid, NULL, worker_main,
				    &h->workers[i]);
		if (r < 0) {
			/* the ones started stop at once; the rest never ran */
			atomic_store(&h->cancel, 1);
			pthread_mutex_lock(&h->mu);
			h->running -= n - i;
			pthread_mutex_unlock(&h->mu);
			for (unsigned k = 0; k < i; k++)
				pthread_join(h->workers[k].tid, NULL);
			goto fail;
		}
		h->workers[i].started = 1;
	}
	*ret = h;
	return 0;
fail:
	hasher_free(h);
	return r;
}

void repl_hasher_prioritize(struct repl_hasher *h, uint64_t ino)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	/* Being hashed in the background already: from now on at the
	 * priority of a file someone waits for. */
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct worker *w = &h->workers[i];

		if (w->busy == ino) {
			if (!w->urgent) {
				w->urgent = 1;
				io_class(w->os_tid, 1);
			}
			goto out;
		}
	}
	/* Already asked for and not taken yet: once is enough. */
	for (size_t i = 0; i < h->prio_n; i++)
		if (h->prio[(h->prio_head + i) % PRIO_QUEUE_MAX] == ino)
			goto out;
	if (h->prio_n == PRIO_QUEUE_MAX) {
		/* the oldest request gives way to the newest */
		h->prio_head = (h->prio_head + 1) % PRIO_QUEUE_MAX;
		h->prio_n--;
	}
	h->prio[(h->prio_head + h->prio_n) % PRIO_QUEUE_MAX] = ino;
	h->prio_n++;
out:
	pthread_mutex_unlock(&h->mu);
}

void repl_hasher_stats(struct repl_hasher *h, struct repl_hasher_stats *ret)
{
	pthread_mutex_lock(&h->mu);
	*ret = h->st;
	pthread_mutex_unlock(&h->mu);
}

int repl_hasher_finished(struct repl_hasher *h)
{
	int done;

	pthread_mutex_lock(&h->mu);
	done = h->running == 0;
	pthread_mutex_unlock(&h->mu);
	return done;
}

void repl_hasher_stop(struct repl_hasher *h)
{
	if (!h)
		return;
	atomic_store(&h->cancel, 1);
	for (unsigned i = 0; i < h->n_workers; i++)
		if (h->workers[i].started)
			pthread_join(h->workers[i].tid, NULL);
	hasher_free(h);
}
