/*
 * hydrator/read/hyd_fuse_push.c — the next small files of a directory,
 * into the kernel's page cache before they are asked for.
 *
 * A reader that walks a tree of small files (tar, rsync, a data loader)
 * reads one file after another in readdir order, each with one READ
 * round trip in which the daemon looks the file up, reads its frames and
 * replies; the reader waits through every one of them. Once the kernel's
 * page cache holds a file, its open and read cost the daemon nothing (no
 * OPEN in no-open mode, keep_cache). So when the first read of a small
 * file comes, a thread of its own reads the files that follow it in its
 * directory from the store and stores them into the kernel's cache with
 * FUSE_NOTIFY_STORE (fuse_lowlevel_notify_store), on the other core,
 * while the reader is still busy with the first.
 *
 * Which files follow which: READDIRPLUS hands out every entry with its
 * attributes (the kernel then knows the inode, which a store needs), and
 * notes here each small regular file's directory and position, in a
 * direct-mapped table by inode. A first read of a noted file queues one
 * job: the entries after it in the same directory, up to HYD_PUSH_FILES
 * files or HYD_PUSH_BYTES bytes, pushed last first: the reader comes
 * forward from the first, and where the two meet (a file the reader got
 * to) the rest is read already, so each file is read once and the
 * directory takes half the time. A file read is passed over, not taken
 * for the end of the job: a random reader (a data loader) has read files
 * here and there, and the job goes on past them (it once stopped at the
 * first, pushing 350-540 files of a 3,000-file epoch). A listing asked
 * for by a thread that read a file in the last HYD_PUSH_READER_NS (a
 * walk that reads what it lists) queues a job for the entries it listed
 * at once, first file first, ahead of that reader (a file whose inode
 * the kernel has not made yet from the listing's reply is tried again
 * within microseconds, see UNKNOWN_STEP_NS); a listing by anyone
 * else (ls -lR, find) pushes nothing. A file pushed once is not pushed
 * again (a reader in a random order starts jobs whose ranges overlap).
 * Only chunks already in the store are used (a file with one missing is
 * skipped: pushing never fetches), and each chunk is checked as any
 * store read is. A file read before its push came is simply read twice
 * into the same cache; the bytes are the generation's, which never
 * change. A reader that does not read the directory's files costs at
 * most one job of wasted work per first read or listing.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/read/hyd_fuse.h"

/* A listing's job that meets a file the kernel does not know yet (the
 * lister has not parsed the listing's reply) tries it again after
 * UNKNOWN_STEP_NS, doubling up to UNKNOWN_STEP_MAX_NS, for at most
 * UNKNOWN_WAIT_NS in all per job: the lister parses the reply as soon as
 * it runs and reads its first file right after. The job used to push
 * the rest and then sleep 20 ms before one more try of all: the walker
 * was long past the directory by then, and the jobs queued behind it
 * waited too (an import-like walk of 2,000 files at 50 ms got 966-1,247
 * of them pushed, 1,724-1,863 with this). A file the kernel forgot
 * stays unknown: once the budget is spent the job passes over it. */
#define UNKNOWN_STEP_NS 50000L
#define UNKNOWN_STEP_MAX_NS 1000000L
#define UNKNOWN_WAIT_NS 20000000L

static size_t slot_of(uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >>
			(64 - HYD_PUSH_SLOTS_LOG2));
}

void hyd_push_note(struct hyd_push *p, uint64_t ino, uint64_t dir, uint64_t pos)
{
	struct hyd_push_slot *s;

	if (!p->started)
		return;
	s = &p->slot[slot_of(ino)];
	pthread_mutex_lock(&p->mu);
	if (s->ino != ino || s->dir != dir || s->pos != pos)
		*s = (struct hyd_push_slot){ino, dir, pos, 0, 0};
	pthread_mutex_unlock(&p->mu);
}

/* Does a job queued or running take care of what follows s? The running
 * one when s lies before its last entry; a queued one of the same
 * directory that starts before s (if it ends short of s, the next read
 * past its end asks again). Under mu. */
static int covered_locked(const struct hyd_push *p,
			  const struct hyd_push_slot *s)
{
	if (p->run_dir == s->dir && p->run_after <= s->pos &&
	    s->pos < p->run_end)
		return 1;
	for (size_t i = 0; i < p->qn; i++) {
		const struct hyd_push_job *j =
		    &p->q[(p->qh + i) % HYD_PUSH_QUEUE];

		if (j->dir == s->dir && j->after <= s->pos)
			return 1;
	}
	return 0;
}

/* Without fetching, always; when the job fetches, from the second
 * first read in dir on (the first one is noted). Under mu. */
static int second_read_locked(struct hyd_push *p, uint64_t dir)
{
	uint64_t *d;

	if (!p->fetch_ahead)
		return 1;
	d = &p->dirs[(size_t)((dir * 0x9e3779b97f4a7c15ull) >>
			      (64 - HYD_PUSH_DIRS_LOG2))];
	if (*d == dir)
		return 1;
	*d = dir;
	return 0;
}

/* Note thread tid as a reader now (the oldest entry gives way). Under
 * mu. */
static void reader_note_locked(struct hyd_push *p, uint32_t tid, uint64_t now)
{
	size_t i, old = 0;

	for (i = 0; i < HYD_PUSH_READERS; i++) {
		if (p->reader_tid[i] == tid) {
			p->reader_ns[i] = now;
			return;
		}
		if (p->reader_ns[i] < p->reader_ns[old])
			old = i;
	}
	p->reader_tid[old] = tid;
	p->reader_ns[old] = now;
}

static int reader_recent_locked(const struct hyd_push *p, uint32_t tid,
				uint64_t now)
{
	for (size_t i = 0; i < HYD_PUSH_READERS; i++)
		if (p->reader_tid[i] == tid && p->reader_ns[i] &&
		    now - p->reader_ns[i] < HYD_PUSH_READER_NS)
			return 1;
	return 0;
}

void hyd_push_first_read(struct hyd_push *p, uint64_t ino, uint32_t tid)
{
	struct hyd_push_slot *s;

	if (!p->started)
		return;
	s = &p->slot[slot_of(ino)];
	pthread_mutex_lock(&p->mu);
	reader_note_locked(p, tid, base_now_ns());
	if (s->ino == ino)
		s->read = 1;
	/* Noted, not pushed already (then its job covered what follows),
	 * not covered by a job queued or running, and room in the queue;
	 * when the job fetches (--no-backfill), not the directory's first
	 * read: a job that reads one file of a directory gets that file
	 * alone, one that reads a second gets the rest asked for. */
	if (s->ino == ino && !s->pushed && !covered_locked(p, s) &&
	    p->qn < HYD_PUSH_QUEUE && second_read_locked(p, s->dir)) {
		p->q[(p->qh + p->qn) % HYD_PUSH_QUEUE] =
		    (struct hyd_push_job){s->dir, s->pos, 0};
		p->qn++;
		pthread_cond_signal(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
}

void hyd_push_listed(struct hyd_push *p, uint64_t dir, uint64_t after,
		     uint32_t tid)
{
	struct hyd_push_slot probe = {0, dir, after, 0, 0};

	/* Without backfill a job fetches: that waits for a second read. */
	if (!p->started || p->fetch_ahead)
		return;
	pthread_mutex_lock(&p->mu);
	if (reader_recent_locked(p, tid, base_now_ns()) &&
	    !covered_locked(p, &probe) && p->qn < HYD_PUSH_QUEUE) {
		p->q[(p->qh + p->qn) % HYD_PUSH_QUEUE] =
		    (struct hyd_push_job){dir, after, 1};
		p->qn++;
		__atomic_add_fetch(&p->listed, 1, __ATOMIC_RELAXED);
		pthread_cond_signal(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
}

/* One directory entry to push, copied out of cat_readdir. */
struct push_ent {
	uint64_t ino, size, pos;
};

struct collect {
	struct push_ent v[HYD_PUSH_FILES];
	size_t n;
	uint64_t bytes, last_pos;
};

static int collect_cb(void *ctx, const void *name, size_t name_len,
		      const struct cat_inode *in, uint64_t pos)
{
	struct collect *c = ctx;

	(void)name;
	(void)name_len;
	c->last_pos = pos;
	if (in->kind != CAT_REG || in->size == 0 ||
	    in->size > HYD_PUSH_FILE_MAX)
		return 0;
	if (c->bytes + in->size > HYD_PUSH_BYTES)
		return 1;
	c->v[c->n++] = (struct push_ent){in->ino, in->size, pos};
	c->bytes += in->size;
	return c->n == HYD_PUSH_FILES;
}

/* The file's bytes from the store into buf (size bytes). 0, or -errno
 * (-ENOENT: a chunk is not stored; the file is skipped). */
static int file_read(struct hyd_push *p, cat_reader *cat, uint64_t ino,
		     uint64_t size, uint8_t *buf)
{
	struct cat_chunk cs[16];
	uint64_t off = 0;
	size_t n, got;
	int r;

	while (off < size) {
		r = cat_chunks_range(cat, ino, off, size - off, cs, 16, &n);
		if (r < 0)
			return r;
		if (n == 0)
			return -EBADMSG;
		for (size_t i = 0; i < n; i++) {
			if (cs[i].off != off || cs[i].len > size - off)
				return -EBADMSG;
			if (chunk_id_is_hole(&cs[i].id)) {
				memset(buf + off, 0, cs[i].len);
			} else {
				r = hyd_store_get(p->fs->rd.store, &cs[i].id,
						  buf + off, size - off, &got);
				if (r < 0)
					return r;
				if (got != cs[i].len)
					return -EBADMSG;
			}
			off += cs[i].len;
		}
	}
	return 0;
}

/* Push one file, unless the reader has been there already or an earlier
 * job pushed it: a reader in a random order (a data loader's epoch)
 * starts jobs all over a directory, whose ranges overlap, and has read
 * files here and there within each. 1 when the kernel did not know the
 * inode (yet), else 0. */
static int push_one(struct hyd_push *p, cat_reader *cat,
		    const struct push_ent *e, uint8_t *buf)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(e->size);
	struct hyd_push_slot *s = &p->slot[slot_of(e->ino)];
	struct stat st;
	int passed, r, fd = -1;

	pthread_mutex_lock(&p->mu);
	passed = s->ino == e->ino && (s->read || s->pushed);
	pthread_mutex_unlock(&p->mu);
	if (passed)
		return 0;
	/* --into: a file landed in DIR is read from there, as its reads are
	 * (hyd_read_landed.c), if its ctime and size have not moved from
	 * what the placer vouched for by the end of the read: a write into
	 * DIR's file meanwhile would have moved them, and its bytes are not
	 * pushed */
	if (hyd_store_landed_fd(p->fs->rd.store, e->ino, e->size, &fd, &st) ==
	    0) {
		size_t got = 0;
		int same = base_pread_full(fd, buf, e->size, 0, &got) == 0 &&
			   got == e->size &&
			   hyd_read_landed_same(fd, e->size, &st.st_ctim);

		close(fd);
		if (!same)
			return 0;
	} else if (file_read(p, cat, e->ino, e->size, buf) != 0) {
		return 0;
	}
	bv.buf[0].mem = buf;
	/* -ENOENT: the kernel does not know the inode: forgotten, or (a
	 * listing's job) not made yet from the listing's reply. Written, not
	 * spliced: libfuse prints a line on stderr for every splice the
	 * kernel refuses, and here that refusal is no error (the file is
	 * read when it is asked for). A file here is at most
	 * HYD_PUSH_FILE_MAX; the kernel copies it into the page cache
	 * either way. */
	r = fuse_lowlevel_notify_store(p->se, e->ino, 0, &bv,
				       FUSE_BUF_NO_SPLICE);
	if (r != 0)
		return r == -ENOENT;
	__atomic_fetch_add(&p->pushed, 1, __ATOMIC_RELAXED);
	/* The job's reads of it stay in the kernel now: the record of first
	 * reads takes the push for them. */
	hyd_trace_rec_pushed(p->fs->trace, e->ino, e->size);
	pthread_mutex_lock(&p->mu);
	if (s->ino == e->ino)
		s->pushed = 1;
	pthread_mutex_unlock(&p->mu);
	return 0;
}

/* The flights of one job's fetch ahead. */
struct ahead {
	struct hyd_flight **fl;
	size_t n, cap;
};

/* Ask for chunk c unless stored; keep its flight to wait for. */
static void ahead_ask(struct hyd_push *p, struct ahead *a,
		      const struct cat_chunk *c, uint64_t deadline)
{
	struct hyd_flight *fl = NULL, **nv;

	if (a->n == a->cap) {
		nv = realloc(a->fl, (a->cap ? a->cap * 2 : 64) * sizeof(*nv));
		if (!nv)
			return;
		a->fl = nv;
		a->cap = a->cap ? a->cap * 2 : 64;
	}
	if (hyd_fetch_submit_checked(p->fs->rd.fetch, &c->id, c->len,
				     HYD_PRIO_NEAR, deadline, 0, &fl) >= 0 &&
	    fl)
		a->fl[a->n++] = fl;
}

/* A file's chunks asked for; 1 when any was missing. A pending file whose
 * manifest is not local gets its segment's (one request for 1,024 inos,
 * shared with the manifest prefetch). */
static int ahead_file(struct hyd_push *p, struct hyd_gen *g, struct ahead *a,
		      const struct push_ent *e, uint64_t deadline)
{
	struct cat_chunk cs[16];
	uint64_t off = 0;
	size_t n, before = a->n;
	int r, fetched = 0;

	while (off < e->size) {
		r = cat_chunks_range(g->cat, e->ino, off, e->size - off, cs, 16,
				     &n);
		if (r == -EAGAIN && g->manifest && !fetched) {
			fetched = 1;
			if (hyd_manifest_segment_for(g->manifest, g->cat,
						     e->ino, deadline, &p->stop,
						     NULL) == 0)
				continue;
		}
		if (r < 0 || n == 0)
			break; /* the read says why, if it comes */
		for (size_t i = 0; i < n; i++)
			if (!chunk_id_is_hole(&cs[i].id))
				ahead_ask(p, a, &cs[i], deadline);
		off = cs[n - 1].off + cs[n - 1].len;
	}
	return a->n > before;
}

/* --no-backfill: nothing brings a directory's files but reads, so before
 * pushing them the job asks for the missing chunks of all of them at once
 * (HYD_PRIO_NEAR: the fetcher sends them in batches, in the lane reads do
 * not use) and waits for them, up to the read deadline: the job's reader,
 * meanwhile on the files after its first, joins the same flights. What
 * cannot come by then is left to the reads. */
static void fetch_ahead(struct hyd_push *p, struct hyd_gen *g,
			const struct collect *c)
{
	uint64_t deadline = base_now_ns() + p->fs->rd.timeout_ns;
	struct ahead a = {0};
	uint64_t files = 0;

	for (size_t i = 0;
	     i < c->n && !__atomic_load_n(&p->stop, __ATOMIC_RELAXED); i++)
		files += (uint64_t)ahead_file(p, g, &a, &c->v[i], deadline);
	__atomic_add_fetch(&p->fetched, files, __ATOMIC_RELAXED);
	for (size_t i = 0; i < a.n; i++) {
		if (!__atomic_load_n(&p->stop, __ATOMIC_RELAXED))
			(void)hyd_fetch_wait(p->fs->rd.fetch, a.fl[i],
					     deadline);
		hyd_fetch_release(p->fs->rd.fetch, a.fl[i]);
	}
	free(a.fl);
}

/* The files of one job, in its order. A listing's job (forward) can
 * start before the kernel has made the inodes from the listing's reply:
 * a file it does not know is tried again a moment later, within the
 * job's budget (UNKNOWN_WAIT_NS). */
static void push_job(struct hyd_push *p, cat_reader *cat,
		     const struct collect *c, int forward, uint8_t *buf)
{
	uint64_t waited = 0, step = UNKNOWN_STEP_NS;
	size_t i = 0;

	while (i < c->n && !__atomic_load_n(&p->stop, __ATOMIC_RELAXED)) {
		if (push_one(p, cat, &c->v[forward ? i : c->n - 1 - i], buf) !=
			1 ||
		    !forward) {
			i++;
			continue;
		}
		if (waited == 0)
			__atomic_add_fetch(&p->unknown, 1, __ATOMIC_RELAXED);
		if (waited >= UNKNOWN_WAIT_NS) {
			i++; /* forgotten, or never coming: the next */
			continue;
		}
		nanosleep(&(struct timespec){0, (long)step}, NULL);
		waited += step;
		step = step * 2 < UNKNOWN_STEP_MAX_NS ? step * 2
						      : UNKNOWN_STEP_MAX_NS;
	}
}

static void *push_main(void *arg)
{
	struct hyd_push *p = arg;
	struct collect *c = malloc(sizeof(*c));
	uint8_t *buf = malloc(HYD_PUSH_FILE_MAX);
	struct hyd_push_job j;
	struct hyd_gen *g;

	base_thread_name("push");
	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		if (!p->qn) {
			pthread_cond_wait(&p->cv, &p->mu);
			continue;
		}
		j = p->q[p->qh];
		p->qh = (p->qh + 1) % HYD_PUSH_QUEUE;
		p->qn--;
		if (!c || !buf)
			continue;
		p->run_dir = j.dir;
		p->run_after = j.after;
		p->run_end = UINT64_MAX; /* until the entries are known */
		pthread_mutex_unlock(&p->mu);
		c->n = 0;
		c->bytes = 0;
		c->last_pos = j.after;
		/* The job's listing and files from one generation: the
		 * current one (an ino names the same bytes in every one). */
		g = hyd_fs_gen(p->fs);
		(void)cat_readdir(g->cat, j.dir, j.after, collect_cb, c);
		pthread_mutex_lock(&p->mu);
		p->run_end = c->last_pos;
		pthread_mutex_unlock(&p->mu);
		if (p->fetch_ahead)
			fetch_ahead(p, g, c);
		/* After a first read, last file first: the reader goes
		 * forward from the first, and where the two meet the rest
		 * is read already (a random reader's, only here and there).
		 * After a listing, first file first, ahead of the reader; a
		 * file it got to first is passed over. */
		push_job(p, g->cat, c, j.forward, buf);
		hyd_gen_unref(g);
		pthread_mutex_lock(&p->mu);
		p->run_dir = 0;
		p->run_end = 0;
	}
	pthread_mutex_unlock(&p->mu);
	free(c);
	free(buf);
	return NULL;
}

int hyd_push_start(struct hyd_push *p, struct hyd_fs *fs,
		   struct fuse_session *se, int fetch_ahead)
{
	sigset_t all, old;
	int r;

	memset(p, 0, sizeof(*p));
	p->fs = fs;
	p->se = se;
	p->fetch_ahead = fetch_ahead;
	p->slot = calloc((size_t)1 << HYD_PUSH_SLOTS_LOG2, sizeof(*p->slot));
	if (!p->slot)
		return -ENOMEM;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	/* Signals are for the FUSE main thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&p->th, NULL, push_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p->slot);
		p->slot = NULL;
		return r;
	}
	p->started = 1;
	return 0;
}

void hyd_push_stop(struct hyd_push *p)
{
	if (!p->started)
		return;
	pthread_mutex_lock(&p->mu);
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->th, NULL);
	base_info("pushed small files into the page cache files=%" PRIu64
		  " fetched_ahead=%" PRIu64 " listings=%" PRIu64
		  " listings_early=%" PRIu64,
		  __atomic_load_n(&p->pushed, __ATOMIC_RELAXED),
		  __atomic_load_n(&p->fetched, __ATOMIC_RELAXED),
		  __atomic_load_n(&p->listed, __ATOMIC_RELAXED),
		  __atomic_load_n(&p->unknown, __ATOMIC_RELAXED));
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->slot);
	p->slot = NULL;
	p->started = 0;
}
