/*
 * hydrator/trace/hyd_trace_rec.c — the mount's record of first reads:
 * CACHEDIR/trace.rec, lines appended as the job reads.
 *
 *   ferry-trace-record 1
 *   start UNIX_MS            when the mount began (t = 0)
 *   g GEN                    the generation mounted
 *   r T_MS INO OFF LEN       a read (or reads that followed on)
 *   p T_MS INO 0 LEN         a whole file the mount pushed into the
 *                            kernel's cache after a read in its directory
 *                            (its own reads never reach the mount)
 *   cut                      the bound was reached; nothing after
 *
 * Reads are kept in memory a little while (at most PEND_MAX of them, at
 * most FLUSH_NS), so a file's reads that follow on from one another,
 * however the job's threads interleave them, become one line. Only an
 * append of what is buffered touches the disk: a crash loses at most the
 * last second (a thread of the recorder's own writes what waited that
 * long when no read comes to do it). No fsync: a trace is advice, not
 * data.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/trace/hyd_trace.h"

#define PEND_MAX 2048u
#define SLOTS 1024u /* a power of two */
#define FLUSH_NS 1000000000ull

struct pend {
	uint64_t ino, off, end;
	uint32_t t_ms;
	char kind; /* 'r' or 'p' */
};

/* The pending read of an ino, if any: slot[hash].idx + 1, 0: none. */
struct slot {
	uint64_t ino;
	uint32_t idx1;
};

struct hyd_trace_rec {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t th;
	int th_started, stopping;
	int fd;
	int err;  /* a write failed: the record stops (logged once) */
	int full; /* the bound was reached */
	uint64_t start_ns, flushed_ns;
	unsigned max, kept; /* lines written or pending */
	struct pend pend[PEND_MAX];
	unsigned npend;
	struct slot slot[SLOTS];
	char buf[PEND_MAX * 96 + 64];
};

static unsigned hash_ino(uint64_t ino)
{
	ino *= 0x9e3779b97f4a7c15ull;
	return (unsigned)(ino >> 40) & (SLOTS - 1);
}

/* Append s[0..n) to the file; lock held. */
static void put(hyd_trace_rec *t, const char *s, size_t n)
{
	int r;

	if (t->err || !n)
		return;
	r = base_write_all(t->fd, s, n);
	if (r < 0) {
		t->err = r;
		base_log_err(BASE_LOG_WARN, r,
			     "the trace record stops: cannot write it");
	}
}

/* Write the pending reads; lock held. */
static void flush_locked(hyd_trace_rec *t)
{
	size_t at = 0;
	unsigned i;
	int n;

	for (i = 0; i < t->npend; i++) {
		const struct pend *p = &t->pend[i];

		n = snprintf(t->buf + at, sizeof(t->buf) - at,
			     "%c %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64
			     "\n",
			     p->kind, p->t_ms, p->ino, p->off, p->end - p->off);
		if (n > 0)
			at += (size_t)n;
	}
	put(t, t->buf, at);
	t->npend = 0;
	memset(t->slot, 0, sizeof(t->slot));
	t->flushed_ns = base_now_ns();
}

/* Does the existing record at path name any read? A push counts as one
 * (export takes it for the reads it saved), and may come first: the
 * read that queued the push is written after its reply. */
static int has_reads(const char *path)
{
	char buf[4096];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strstr(buf, "\nr ") != NULL || strstr(buf, "\np ") != NULL;
}

/* Writes what has waited FLUSH_NS when no read came to do it. */
static void *flusher(void *arg)
{
	hyd_trace_rec *t = arg;

	base_thread_name("trace");
	pthread_mutex_lock(&t->lock);
	while (!t->stopping) {
		base_cond_wait_until(&t->cond, &t->lock,
				     base_now_ns() + FLUSH_NS);
		if (t->npend && base_now_ns() - t->flushed_ns >= FLUSH_NS)
			flush_locked(t);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

int hyd_trace_rec_open(const char *cache_dir, uint64_t gen,
		       unsigned max_records, hyd_trace_rec **ret)
{
	char path[PATH_MAX], prev[PATH_MAX], head[128];
	struct timespec now;
	hyd_trace_rec *t;
	int n, r;

	*ret = NULL;
	n = snprintf(path, sizeof(path), "%s/%s", cache_dir,
		     HYD_TRACE_REC_NAME);
	if (n < 0 || (size_t)n >= sizeof(path) ||
	    snprintf(prev, sizeof(prev), "%s/%s", cache_dir,
		     HYD_TRACE_PREV_NAME) >= (int)sizeof(prev))
		return -ENAMETOOLONG;
	/* The last mount's record is kept one mount more, unless it holds
	 * no read (a mount nobody used does not push out a rehearsal's). */
	if (has_reads(path) && rename(path, prev) < 0)
		return -errno;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	base_cond_init(&t->cond);
	t->max = max_records ? max_records : HYD_TRACE_MAX_RANGES;
	t->start_ns = t->flushed_ns = base_now_ns();
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
		     0600);
	if (t->fd < 0) {
		r = -errno;
		pthread_cond_destroy(&t->cond);
		pthread_mutex_destroy(&t->lock);
		free(t);
		return r;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	n = snprintf(head, sizeof(head), "%s\nstart %lld\ng %" PRIu64 "\n",
		     HYD_TRACE_REC_MAGIC,
		     (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, gen);
	put(t, head, (size_t)n);
	r = t->err;
	if (r == 0) {
		r = -pthread_create(&t->th, NULL, flusher, t);
		t->th_started = r == 0;
	}
	if (r < 0) {
		hyd_trace_rec_close(t);
		return r;
	}
	*ret = t;
	return 0;
}

static void add(hyd_trace_rec *t, char kind, uint64_t ino, uint64_t off,
		uint64_t len)
{
	uint64_t now, end = off + len;
	struct slot *s;
	struct pend *p;

	if (!t || !len)
		return;
	now = base_now_ns();
	pthread_mutex_lock(&t->lock);
	if (t->full || t->err)
		goto out;
	s = &t->slot[hash_ino(ino)];
	if (s->idx1 && s->ino == ino && t->pend[s->idx1 - 1].kind == kind) {
		p = &t->pend[s->idx1 - 1];
		/* Touching or overlapping the file's last read: the same
		 * stretch of the file. */
		if (off <= p->end && end >= p->off) {
			if (off < p->off)
				p->off = off;
			if (end > p->end)
				p->end = end;
			goto out;
		}
	}
	if (t->npend == PEND_MAX || now - t->flushed_ns >= FLUSH_NS)
		flush_locked(t);
	if (t->kept >= t->max) {
		/* The lines kept go out before "cut": nothing follows it. */
		flush_locked(t);
		t->full = 1;
		put(t, "cut\n", 4);
		base_info("trace record full: later reads are not recorded "
			  "reads=%u",
			  t->kept);
		goto out;
	}
	p = &t->pend[t->npend++];
	p->kind = kind;
	p->ino = ino;
	p->off = off;
	p->end = end;
	p->t_ms = (uint32_t)((now - t->start_ns) / 1000000ull);
	s->ino = ino;
	s->idx1 = t->npend;
	t->kept++;
out:
	pthread_mutex_unlock(&t->lock);
}

void hyd_trace_rec_read(hyd_trace_rec *t, uint64_t ino, uint64_t off,
			uint64_t len)
{
	add(t, 'r', ino, off, len);
}

void hyd_trace_rec_pushed(hyd_trace_rec *t, uint64_t ino, uint64_t len)
{
	add(t, 'p', ino, 0, len);
}

int hyd_trace_rec_flush(hyd_trace_rec *t)
{
	int r;

	if (!t)
		return 0;
	pthread_mutex_lock(&t->lock);
	flush_locked(t);
	r = t->err;
	pthread_mutex_unlock(&t->lock);
	return r;
}

void hyd_trace_rec_close(hyd_trace_rec *t)
{
	if (!t)
		return;
	if (t->th_started) {
		pthread_mutex_lock(&t->lock);
		t->stopping = 1;
		pthread_cond_broadcast(&t->cond);
		pthread_mutex_unlock(&t->lock);
		pthread_join(t->th, NULL);
	}
	hyd_trace_rec_flush(t);
	if (t->fd >= 0)
		close(t->fd);
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	free(t);
}
