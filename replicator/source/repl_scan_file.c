/*
 * replicator/source/repl_scan_file.c — what the scanner does inside one inode:
 * stat a regular file and, unless its manifest is reused or deferred,
 * read, chunk and hash its bytes into a manifest (a file job, run on any
 * scanning thread).
 *
 * The manifest is built completely before anything is written to the
 * catalog, because a file that changes while it is read must be re-read or
 * left out, and the catalog writer cannot take rows back. It grows as
 * needed and past REPL_MANIFEST_MEM entries spills to an unlinked temp
 * file, so a terabyte file costs the same memory as a small one.
 *
 * A file is read through one window at a time. The thread that runs the
 * job reads and cuts (FastCDC is serial within a file); hashing a window
 * (the bigger half of the work) becomes hash tasks any free pool thread
 * takes, while the job reads and cuts the next window into the other
 * buffer. So one big file keeps two cores busy: one reading, cutting and
 * hashing, the other hashing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_scan_priv.h"

void repl_manifest_init(struct repl_manifest *m, const char *spill_dir)
{
	memset(m, 0, sizeof(*m));
	m->spill_fd = -1;
	m->spill_dir = spill_dir;
}

void repl_manifest_fini(struct repl_manifest *m)
{
	free(m->v);
	if (m->spill_fd >= 0)
		close(m->spill_fd);
	memset(m, 0, sizeof(*m));
	m->spill_fd = -1;
}

void repl_manifest_reset(struct repl_manifest *m)
{
	m->n = 0;
	if (m->spilled) {
		/* Keep the file for the next big one; only its bytes go. */
		if (ftruncate(m->spill_fd, 0) < 0 ||
		    lseek(m->spill_fd, 0, SEEK_SET) < 0) {
			close(m->spill_fd);
			m->spill_fd = -1;
		}
		m->spilled = 0;
	}
}

static int spill(struct repl_manifest *m)
{
	size_t len = m->n * sizeof(*m->v), done = 0;

	if (m->spill_fd < 0) {
		size_t n = strlen(m->spill_dir) + 32;
		char *tmpl = malloc(n);

		if (!tmpl)
			return -ENOMEM;
		snprintf(tmpl, n, "%s/.manifest-XXXXXX", m->spill_dir);
		m->spill_fd = mkostemp(tmpl, O_CLOEXEC);
		if (m->spill_fd < 0) {
			int e = -errno;

			free(tmpl);
			return e;
		}
		/* Anonymous from now on: nothing to clean up after a crash. */
		unlink(tmpl);
		free(tmpl);
	}
	while (done < len) {
		ssize_t w = write(m->spill_fd, (char *)m->v + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	m->spilled += m->n;
	m->n = 0;
	return 0;
}

int repl_manifest_add(struct repl_manifest *m, const struct cat_chunk *c)
{
	int r;

	if (m->n == m->cap) {
		if (m->cap == REPL_MANIFEST_MEM) {
			r = spill(m);
			if (r < 0)
				return r;
		} else {
			/* Most files have a few chunks: start small. */
			size_t nc = m->cap ? 4 * m->cap : 8;
			struct cat_chunk *nv;

			if (nc > REPL_MANIFEST_MEM)
				nc = REPL_MANIFEST_MEM;
			nv = realloc(m->v, nc * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			m->v = nv;
			m->cap = nc;
		}
	}
	m->v[m->n++] = *c;
	return 0;
}

int repl_manifest_each(struct repl_manifest *m, repl_manifest_cb cb, void *ctx)
{
	uint64_t left = m->spilled;
	size_t i;
	int r;

	if (left) {
		/* The in-memory tail is after the spilled head; read the head
		 * back through a small buffer so memory stays bounded. */
		struct cat_chunk buf[256];
		off_t pos = 0;

		while (left) {
			size_t want = left < 256 ? (size_t)left : 256;
			ssize_t got =
			    pread(m->spill_fd, buf, want * sizeof(buf[0]), pos);

			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				return -errno;
			if ((size_t)got != want * sizeof(buf[0]))
				return -EIO;
			for (i = 0; i < want; i++) {
				r = cb(ctx, &buf[i]);
				if (r < 0)
					return r;
			}
			pos += got;
			left -= want;
		}
	}
	for (i = 0; i < m->n; i++) {
		r = cb(ctx, &m->v[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

int repl_file_reader_init(struct repl_file_reader *fr,
			  struct repl_scan_shared *sh)
{
	size_t k;

	memset(fr, 0, sizeof(*fr));
	fr->sh = sh;
	/* Reuse is an optimization: a previous generation this reader
	 * cannot open (an older index format, other chunk parameters) only
	 * means its files are read. */
	if (sh->prev_catalog_path && sh->prev_srcindex_path &&
	    repl_prev_open(sh->prev_catalog_path, sh->prev_srcindex_path,
			   &sh->p, &fr->prev) < 0)
		fr->prev = NULL;
	fr->cap = REPL_READ_WINDOW;
	if (fr->cap < 2 * (size_t)sh->p.max)
		fr->cap = 2 * (size_t)sh->p.max;
	for (k = 0; k < REPL_WINDOWS; k++) {
		fr->w[k].buf = malloc(fr->cap);
		fr->w[k].c = malloc(REPL_WINDOW_CHUNKS * sizeof(*fr->w[k].c));
		if (!fr->w[k].buf || !fr->w[k].c) {
			repl_file_reader_fini(fr);
			return -ENOMEM;
		}
	}
	return 0;
}

void repl_file_reader_fini(struct repl_file_reader *fr)
{
	size_t k;

	repl_prev_close(fr->prev);
	fr->prev = NULL;
	for (k = 0; k < REPL_WINDOWS; k++) {
		free(fr->w[k].buf);
		free(fr->w[k].c);
		fr->w[k].buf = NULL;
		fr->w[k].c = NULL;
	}
}

int repl_hash_task_run(const struct repl_hash_task *t)
{
	const struct repl_window *w = t->w;
	size_t k;
	int r;

	for (k = t->lo; k < t->hi; k++) {
		struct cat_chunk *c = &w->c[k];

		r = chunk_id_compute(w->buf + (c->off - w->base), c->len,
				     &c->id);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Hash the chunks of w: as tasks for the pool when there is enough for
 * two and a pool thread to share them, else right here. */
static int window_hash(struct repl_file_reader *fr, struct repl_window *w,
		       size_t bytes)
{
	struct repl_scan_pool *pool = fr->sh->pool;
	size_t k, nt = 0, acc = 0;

	if (!pool || bytes < 2 * (size_t)REPL_HASH_TASK) {
		struct repl_hash_task t = {.w = w, .lo = 0, .hi = w->n};

		return repl_hash_task_run(&t);
	}
	for (k = 0; k < w->n; k++) {
		if (acc == 0)
			w->t[nt].lo = k;
		acc += w->c[k].len;
		/* the last task takes whatever is left */
		if ((acc >= REPL_HASH_TASK && nt + 1 < REPL_WINDOW_TASKS) ||
		    k + 1 == w->n) {
			w->t[nt].w = w;
			w->t[nt].hi = k + 1;
			nt++;
			acc = 0;
		}
	}
	w->posted = 1;
	repl_scan_pool_post_hash(pool, w, nt);
	return 0;
}

/* Wait for w's hashing (helping), then append its chunks to m in order.
 * Returns 0, -EIO (hashing failed), -ENOMEM/-errno (spill). */
static int window_finish(struct repl_file_reader *fr, struct repl_window *w,
			 struct repl_manifest *m, int keep)
{
	size_t k;
	int r = 0;

	if (w->posted)
		r = repl_scan_pool_wait_window(fr->sh->pool, w);
	w->posted = 0;
	for (k = 0; r == 0 && keep && k < w->n; k++)
		r = repl_manifest_add(m, &w->c[k]);
	w->n = 0;
	return r;
}

/* Fill buf[have..cap) from fd; stop early at EOF, which is also assumed
 * once `size` bytes (what fstat said) are in: the caller compares the
 * total with a second fstat, so a file that grew is read again anyway. */
static int window_fill(int fd, uint8_t *buf, size_t cap, size_t *have,
		       uint64_t done, uint64_t size, int *eof)
{
	while (!*eof && *have < cap) {
		uint64_t at = done + *have;
		size_t want = cap - *have, got;
		int r;

		if (at < size && size - at < want)
			want = (size_t)(size - at);
		r = base_pread_full(fd, buf + *have, want, at, &got);
		if (r < 0)
			return r;
		*have += got;
		/* short: the real end; whole up to size: fstat's end */
		if (got < want || at + got == size)
			*eof = 1;
	}
	return 0;
}

/* Read [start, end) of fd (or to EOF before end), cutting and hashing
 * it into m after what m holds; *ret_end is where the data ended. */
static int chunk_region(struct repl_file_reader *fr, int fd, uint64_t start,
			uint64_t end, struct repl_manifest *m,
			uint64_t *ret_end)
{
	const chunk_params *p = &fr->sh->p;
	const atomic_int *cancel = fr->sh->cancel;
	struct repl_window *prev = NULL;
	uint64_t base = start; /* file offset of the current window's buf[0] */
	uint64_t size = end;
	size_t carry = 0, k = 0, i;
	int eof = start >= end, r = 0;

	if (eof) {
		*ret_end = start;
		return 0;
	}
	for (;; k++) {
		struct repl_window *w = &fr->w[k % REPL_WINDOWS];
		size_t have, pos = 0, bytes;

		/* The buffer's last use (REPL_WINDOWS windows ago) must be
		 * hashed and in the manifest before its bytes go. Windows
		 * finish in file order, so the manifest stays in order. */
		r = window_finish(fr, w, m, 1);
		if (r < 0)
			goto out;
		/* Carry the previous window's uncut tail to the front. */
		if (carry)
			memcpy(w->buf, prev->buf + (base - prev->base), carry);
		have = carry;
		w->base = base;
		r = window_fill(fd, w->buf, fr->cap, &have, base, size, &eof);
		if (r < 0)
			goto out;
		if (cancel && atomic_load(cancel)) {
			r = -ECANCELED;
			goto out;
		}
		/* The chunker must see min(remaining, max) bytes at every
		 * cut, so only cut short of max at EOF. */
		while ((have - pos >= p->max || (eof && pos < have)) &&
		       w->n < REPL_WINDOW_CHUNKS) {
			size_t len = have - pos < p->max ? have - pos : p->max;
			size_t c = chunker_next(p, w->buf + pos, len);

			if (c == 0 || c > len) {
				r = -EIO; /* chunker contract broken */
				goto out;
			}
			w->c[w->n].off = base + pos;
			w->c[w->n].len = (uint32_t)c;
			w->n++;
			pos += c;
		}
		bytes = pos;
		r = window_hash(fr, w, bytes);
		if (r < 0)
			goto out;
		base += pos;
		carry = have - pos;
		prev = w;
		if (eof && carry == 0)
			break;
	}
	/* The oldest window first: k + 1, ..., k. */
	for (i = 1; i <= REPL_WINDOWS; i++) {
		r = window_finish(fr, &fr->w[(k + i) % REPL_WINDOWS], m, 1);
		if (r < 0)
			goto out;
	}
	*ret_end = base;
	return 0;
out:
	/* Tasks may still read our buffers: wait for all, keep nothing. */
	for (i = 0; i < REPL_WINDOWS; i++)
		window_finish(fr, &fr->w[i], m, 0);
	return r;
}

/* Hole rows for [off, end): the hole id, at most max bytes each. */
static int add_hole(struct repl_manifest *m, uint64_t off, uint64_t end,
		    uint32_t max)
{
	struct cat_chunk c = {0};
	int r;

	while (off < end) {
		c.off = off;
		c.len = end - off < max ? (uint32_t)(end - off) : max;
		r = repl_manifest_add(m, &c);
		if (r < 0)
			return r;
		off += c.len;
	}
	return 0;
}

/* A file whose blocks cover less than its size may have holes: map its
 * data with SEEK_DATA/SEEK_HOLE, chunk only the data, and record the
 * holes as hole rows. Anything the file system cannot map is data. */
static int chunk_sparse(struct repl_file_reader *fr, int fd, uint64_t size,
			struct repl_manifest *m, uint64_t *ret_total,
			uint64_t *ret_read)
{
	uint64_t off = 0, got, total = 0;
	off_t d, h;
	int r;

	while (off < size) {
		d = lseek(fd, (off_t)off, SEEK_DATA);
		if (d < 0 && errno == ENXIO)
			d = (off_t)size; /* a hole to the end */
		else if (d < 0)
			return -errno;
		if ((uint64_t)d > size)
			d = (off_t)size;
		r = add_hole(m, off, (uint64_t)d, fr->sh->p.max);
		if (r < 0)
			break;
		off = (uint64_t)d;
		if (off >= size)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return -errno;
		if ((uint64_t)h > size || h <= d)
			h = (off_t)size;
		r = chunk_region(fr, fd, (uint64_t)d, (uint64_t)h, m, &got);
		if (r < 0)
			return r;
		total += got - (uint64_t)d;
		if (got < (uint64_t)h) {
			off = got; /* shrank: the caller sees it */
			break;
		}
		off = (uint64_t)h;
	}
	*ret_total = off;
	*ret_read = total;
	return r < 0 ? r : 0;
}

int repl_file_chunk(struct repl_file_reader *fr, int fd, uint64_t size,
		    struct repl_manifest *m, uint64_t *ret_total,
		    uint64_t *ret_read)
{
	struct stat st;
	int r;

	repl_manifest_reset(m);
	*ret_total = *ret_read = 0;
	/* st_blocks counts 512-byte units whatever the block size */
	if (size > 0 && fstat(fd, &st) == 0 &&
	    (uint64_t)st.st_blocks * 512 < size)
		return chunk_sparse(fr, fd, size, m, ret_total, ret_read);
	r = chunk_region(fr, fd, 0, size, m, ret_total);
	*ret_read = *ret_total;
	return r;
}

void repl_file_job_init(struct repl_file_job *j,
			const struct repl_scan_shared *sh, int dfd,
			const char *name)
{
	memset(j, 0, sizeof(*j));
	j->dfd = dfd;
	j->name = name;
	repl_manifest_init(&j->m, sh->spill_dir);
}

void repl_file_job_fini(struct repl_file_job *j)
{
	repl_manifest_fini(&j->m);
	repl_xattrs_clear(&j->xa);
}

static int open_file(int dfd, const char *name)
{
	int fl = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, fd;

	/* O_NOATIME keeps the scan from dirtying every inode; the kernel
	 * refuses it for files we do not own unless we are root. */
	fd = openat(dfd, name, fl | O_NOATIME);
	if (fd < 0 && errno == EPERM)
		fd = openat(dfd, name, fl);
	return fd;
}

static int64_t mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int64_t ctime_ns(const struct stat *st)
{
	return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

static void left_out(struct repl_file_job *j, int err, const char *why)
{
	j->left_out = 1;
	j->warn_err = err;
	j->warn_why = why;
}

/* Without reading it: the previous generation's manifest, or pending, or
 * (empty) no manifest at all. 1 when one of those, with j->st = *a and
 * xattrs collected without opening the file; 0 when it must be read. */
static int job_unread(struct repl_file_job *j, struct repl_file_reader *fr,
		      const struct stat *a)
{
	int r;

	/* A lookup that fails only costs the read. */
	r = repl_prev_manifest(fr->prev, a, &j->m, &j->prev_ino);
	if (r == -ENOMEM) {
		j->rc = r;
		return 1;
	}
	if (r == 1)
		j->reused = 1;
	else if (fr->sh->defer && a->st_size > 0)
		j->pending = 1; /* the hasher reads it after the catalog */
	else if (a->st_size > 0)
		return 0;
	j->st = *a;
	/* xattrs we cannot read do not cost the file */
	if (repl_xattrs_collect_at(&j->xa, j->dfd, j->name) == -ENOMEM)
		j->rc = -ENOMEM;
	return 1;
}

void repl_file_job_run(struct repl_file_job *j, struct repl_file_reader *fr)
{
	struct stat a;
	uint64_t total = 0, nread = 0;
	int attempt, fd = -1, r;

	if (fr->sh->before_read) {
		/* A test hook: it may run on any scanning thread, so calls
		 * are serialized for it. */
		pthread_mutex_lock(&fr->sh->hook_lock);
		fr->sh->before_read(fr->sh->ctx, j->dfd, j->name);
		pthread_mutex_unlock(&fr->sh->hook_lock);
	}
	/* The walk's stat of this entry: the walker takes it from here. */
	j->looked_ns = base_wall_ns();
	if (fstatat(j->dfd, j->name, &a, AT_SYMLINK_NOFOLLOW) < 0) {
		left_out(j, errno, NULL);
		return;
	}
	if (!S_ISREG(a.st_mode)) {
		j->not_reg = 1;
		j->st = a;
		return;
	}
	if ((uint64_t)a.st_size > CAT_SIZE_MAX) {
		left_out(j, EFBIG, NULL);
		return;
	}
	if (job_unread(j, fr, &a))
		return;
	for (attempt = 0; attempt < 2; attempt++) {
		fd = open_file(j->dfd, j->name);
		if (fd < 0) {
			left_out(j, errno, NULL);
			return;
		}
		if (fstat(fd, &a) < 0) {
			left_out(j, errno, NULL);
			goto out;
		}
		if (!S_ISREG(a.st_mode)) {
			left_out(j, 0, "replaced while being scanned");
			goto out;
		}
		if ((uint64_t)a.st_size > CAT_SIZE_MAX) {
			left_out(j, EFBIG, NULL);
			goto out;
		}
		r = repl_file_chunk(fr, fd, (uint64_t)a.st_size, &j->m, &total,
				    &nread);
		j->read_bytes += nread;
		if (r == -ECANCELED || r == -ENOMEM) {
			j->rc = r;
			goto out;
		}
		if (r < 0) {
			left_out(j, -r, NULL);
			goto out;
		}
		if (fstat(fd, &j->st) < 0) {
			left_out(j, errno, NULL);
			goto out;
		}
		/* ctime too: the identity recorded (j->st) vouches for these
		 * bytes when a chunk is read again (repl_reread.c). */
		if (total == (uint64_t)j->st.st_size &&
		    a.st_size == j->st.st_size &&
		    mtime_ns(&a) == mtime_ns(&j->st) &&
		    ctime_ns(&a) == ctime_ns(&j->st))
			break;
		close(fd);
		fd = -1;
	}
	if (attempt == 2) {
		left_out(j, 0, "changed while being read");
		return;
	}
	/* xattrs we cannot read do not cost the file */
	r = repl_xattrs_collect(&j->xa, fd, NULL);
	if (r == -ENOMEM)
		j->rc = r;
out:
	if (fd >= 0)
		close(fd);
}
