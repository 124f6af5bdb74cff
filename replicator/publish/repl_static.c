/*
 * replicator/publish/repl_static.c — the static published store
 * (ferry-replicator --publish NS=OUTDIR): one generation of a namespace's
 * state written as plain files under the paths of its URLs, so that a web
 * server or an S3 bucket holding OUTDIR is a whole source for a hydrator:
 *
 *   OUTDIR/HEAD                 "GEN\n", replaced last
 *   OUTDIR/catalog/GEN          the zstd-compressed catalog
 *   OUTDIR/delta/FROM/GEN       from the generation OUTDIR held before
 *   OUTDIR/signature/GEN        the signed statement (when there is one)
 *   OUTDIR/chunk/ID             one frame per distinct chunk
 *
 * Only chunk objects OUTDIR lacks are read from the source, framed and
 * written, so a publish after a change costs the walk plus the changed
 * data. Crash safety: a chunk object is written in OUTDIR/.ferry-tmp,
 * made durable by one syncfs per group of files, and only then renamed
 * into chunk/, so a name under chunk/ is always a whole frame; the
 * catalog, delta and signature appear the same way, HEAD after all of
 * them. A crash leaves only temp files, which the next publish removes.
 * One publish at a time per OUTDIR (a lock file in .ferry-tmp). After
 * HEAD, generations beyond the newest few go (repl_static_prune.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/publish/repl_publish.h"

#define TMP_DIR ".ferry-tmp"
#define LOCK_NAME "lock"
#define QUEUE_CAP 4096u
/* A worker makes its written objects durable and visible in groups. */
#define GROUP_FILES 512u
#define GROUP_BYTES (64u << 20)
/* ... and at least this often, so a killed publish loses little. */
#define GROUP_NS 1000000000ull
#define COPY_BUF (1u << 20)

struct pub {
	const char *src_dir;
	int srcfd, tmpfd, chunkfd;
	uint64_t gen;
	enum frame_policy policy;
	char *srcindex_path;
	pthread_mutex_t mu;
	pthread_cond_t can_put, can_take;
	chunk_id q[QUEUE_CAP];
	size_t qhead, qn;
	int eof; /* no more ids will come */
	int err; /* the first failure; everyone stops */
	char why[256];
	uint64_t written, written_bytes, raw_bytes, kept;
	unsigned delay_ms; /* test hook: a pause after each object */
};

struct group {
	char (*names)[CHUNK_ID_HEX_LEN + 1];
	size_t n;
	uint64_t bytes;
	uint64_t t0; /* when its first file was written */
};

static void fail(struct pub *p, int err, const char *fmt, ...)
    BASE_PRINTF(3, 4);
static void fail(struct pub *p, int err, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&p->mu);
	if (!p->err) {
		p->err = err;
		va_start(ap, fmt);
		vsnprintf(p->why, sizeof(p->why), fmt, ap);
		va_end(ap);
	}
	pthread_cond_broadcast(&p->can_put);
	pthread_cond_broadcast(&p->can_take);
	pthread_mutex_unlock(&p->mu);
}

/* Durable first, then visible: one syncfs for the group's temp files,
 * then each renamed into chunk/. */
static int group_flush(struct pub *p, struct group *g)
{
	size_t i;

	if (!g->n)
		return 0;
	if (syncfs(p->tmpfd) < 0)
		return -errno;
	for (i = 0; i < g->n; i++)
		if (renameat(p->tmpfd, g->names[i], p->chunkfd, g->names[i]) <
		    0)
			return -errno;
	g->n = 0;
	g->bytes = 0;
	return 0;
}

static int write_tmp(int dirfd, const char *name, const void *buf, size_t len)
{
	int fd, r;

	fd =
	    openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = base_write_all(fd, buf, len);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

/* One id: kept when chunk/ID exists, else read, checked, framed and
 * written into the group. */
static int one_chunk(struct pub *p, struct repl_worker *w, struct group *g,
		     const chunk_id *id)
{
	struct repl_chunk_res res;
	char *name = g->names[g->n];
	struct stat st;
	int r;

	chunk_id_to_hex(id, name);
	if (fstatat(p->chunkfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		__atomic_add_fetch(&p->kept, 1, __ATOMIC_RELAXED);
		return 0;
	}
	if (errno != ENOENT)
		return -errno;
	r = repl_chunk_frame(w, p->srcfd, p->policy, id, &res);
	if (r < 0) {
		fail(p, r,
		     r == -EBADMSG ? "the source changed since its scan: "
				     "%.*s (chunk %.16s); publish again"
				   : "cannot read %.*s (chunk %.16s)",
		     res.path ? 512 : 1, res.path ? res.path : "?", name);
		repl_chunk_res_fini(&res);
		return r;
	}
	r = write_tmp(p->tmpfd, name, res.frame, res.frame_len);
	if (r == 0) {
		__atomic_add_fetch(&p->written, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->written_bytes, res.frame_len,
				   __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->raw_bytes, res.raw_len,
				   __ATOMIC_RELAXED);
		if (g->n++ == 0)
			g->t0 = base_now_ns();
		g->bytes += res.frame_len;
	}
	repl_chunk_res_fini(&res);
	if (r < 0)
		return r;
	if (p->delay_ms)
		usleep(p->delay_ms * 1000u);
	if (g->n == GROUP_FILES || g->bytes >= GROUP_BYTES ||
	    base_now_ns() - g->t0 >= GROUP_NS)
		return group_flush(p, g);
	return 0;
}

static void *worker_main(void *arg)
{
	struct pub *p = arg;
	struct repl_worker *w = NULL;
	struct group g = {0};
	chunk_id id;
	int r;

	g.names = malloc(GROUP_FILES * sizeof(*g.names));
	r = g.names ? repl_chunk_worker_open(p->srcindex_path, p->gen, &w)
		    : -ENOMEM;
	if (r < 0) {
		fail(p, r, "cannot open the source index");
		goto out;
	}
	/* What is published is written once and served by any web server
	 * or cache for as long as it stays: every chunk is hashed. */
	w->rehash = 1;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->qn && !p->eof && !p->err)
			pthread_cond_wait(&p->can_take, &p->mu);
		if (p->err || !p->qn) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		id = p->q[p->qhead];
		p->qhead = (p->qhead + 1) % QUEUE_CAP;
		p->qn--;
		pthread_cond_signal(&p->can_put);
		pthread_mutex_unlock(&p->mu);
		r = one_chunk(p, w, &g, &id);
		if (r < 0) {
			fail(p, r, "cannot write a chunk object");
			break;
		}
	}
	r = group_flush(p, &g);
	if (r < 0)
		fail(p, r, "cannot make chunk objects durable");
out:
	repl_chunk_workers_free(w);
	free(g.names);
	return NULL;
}

/* cat_chunks_each callback: queue each distinct id but holes. */
static int put_id(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	struct pub *p = ctx;
	int r;

	(void)ino;
	if (chunk_id_is_hole(&c->id))
		return 0;
	pthread_mutex_lock(&p->mu);
	while (p->qn == QUEUE_CAP && !p->err)
		pthread_cond_wait(&p->can_put, &p->mu);
	r = p->err;
	if (!r) {
		p->q[(p->qhead + p->qn) % QUEUE_CAP] = c->id;
		p->qn++;
		pthread_cond_signal(&p->can_take);
	}
	pthread_mutex_unlock(&p->mu);
	return r ? -ECANCELED : 0;
}

/* Empty .ferry-tmp of what a crashed publish left (the lock stays). */
static int tmp_clean(int tmpfd)
{
	struct dirent *de;
	DIR *d;
	int fd = dup(tmpfd), r = 0;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, LOCK_NAME))
			continue;
		if (unlinkat(tmpfd, de->d_name, 0) < 0 && errno != ENOENT) {
			r = -errno;
			break;
		}
	}
	closedir(d);
	return r;
}

/* 1 when the files at a and b hold the same bytes, 0 when not, -errno. */
static int same_bytes(const char *a, int bdir, const char *bname)
{
	uint8_t *x = malloc(COPY_BUF), *y = malloc(COPY_BUF);
	size_t gx, gy;
	uint64_t off = 0;
	int fa = -1, fb = -1, r;

	if (!x || !y) {
		r = -ENOMEM;
		goto out;
	}
	fa = open(a, O_RDONLY | O_CLOEXEC);
	fb = openat(bdir, bname, O_RDONLY | O_CLOEXEC);
	if (fa < 0 || fb < 0) {
		r = -errno;
		goto out;
	}
	for (;;) {
		r = base_pread_full(fa, x, COPY_BUF, off, &gx);
		if (r == 0)
			r = base_pread_full(fb, y, COPY_BUF, off, &gy);
		if (r < 0)
			goto out;
		if (gx != gy || memcmp(x, y, gx)) {
			r = 0;
			goto out;
		}
		if (gx < COPY_BUF) {
			r = 1;
			goto out;
		}
		off += gx;
	}
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	free(x);
	free(y);
	return r;
}

/* Copy the file src to dir/name through .ferry-tmp (fsync, rename, fsync
 * of dir). An existing dir/name must hold the same bytes: it is kept
 * (1), else -EEXIST (another store's generation of that number). */
static int copy_in(struct pub *p, const char *src, int dirfd, const char *name)
{
	uint8_t *buf = NULL;
	size_t got;
	uint64_t off = 0;
	int in = -1, out = -1, r;

	if (faccessat(dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		r = same_bytes(src, dirfd, name);
		return r < 0 ? r : r ? 1 : -EEXIST;
	}
	buf = malloc(COPY_BUF);
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (!buf || in < 0) {
		r = buf ? -errno : -ENOMEM;
		goto out;
	}
	out = openat(p->tmpfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		     0644);
	if (out < 0) {
		r = -errno;
		goto out;
	}
	do {
		r = base_pread_full(in, buf, COPY_BUF, off, &got);
		if (r == 0)
			r = base_write_all(out, buf, got);
		off += got;
	} while (r == 0 && got == COPY_BUF);
	if (r == 0 && fsync(out) < 0)
		r = -errno;
	if (r == 0 && renameat(p->tmpfd, name, dirfd, name) < 0)
		r = -errno;
	if (r == 0 && fsync(dirfd) < 0)
		r = -errno;
out:
	if (out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	free(buf);
	return r;
}

/* mkdir -p out/sub and open it. */
static int sub_open(const char *out, const char *sub, int *ret_fd)
{
	char *path = base_path_fmt("%s/%s", out, sub);
	int r;

	if (!path)
		return -ENOMEM;
	r = base_mkdir_p(path, 0755);
	if (r == 0) {
		*ret_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = *ret_fd < 0 ? -errno : 0;
	}
	free(path);
	return r;
}

/* Every chunk object of the catalog, on threads workers. */
static int write_chunks(struct pub *p, const char *cat_path, unsigned threads,
			char *err, size_t errcap)
{
	pthread_t tids[64];
	cat_reader *cat = NULL;
	unsigned i, started = 0;
	int r;

	r = cat_reader_open(cat_path, &cat);
	if (r < 0) {
		snprintf(err, errcap, "cannot open the catalog %s: %s",
			 cat_path, base_errname(r));
		return r;
	}
	for (i = 0; i < threads && i < 64; i++) {
		if (pthread_create(&tids[i], NULL, worker_main, p))
			break;
		started++;
	}
	r = started ? cat_chunks_each(cat, put_id, p) : -EAGAIN;
	pthread_mutex_lock(&p->mu);
	p->eof = 1;
	if (r < 0 && r != -ECANCELED && !p->err) {
		p->err = r;
		snprintf(p->why, sizeof(p->why),
			 "cannot list the catalog's "
			 "chunks");
	}
	pthread_cond_broadcast(&p->can_take);
	pthread_mutex_unlock(&p->mu);
	for (i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	cat_reader_close(cat);
	if (p->err) {
		snprintf(err, errcap, "%s: %s", p->why, base_errname(p->err));
		return p->err;
	}
	/* The renames themselves, durable. */
	if (fsync(p->chunkfd) < 0) {
		r = -errno;
		snprintf(err, errcap, "cannot fsync chunk/: %s",
			 base_errname(r));
		return r;
	}
	return 0;
}

/* The generation OUTDIR's HEAD names: 0 when there is none. */
static int out_head(const char *out, uint64_t *ret)
{
	int r = repl_head_read(out, ret);

	if (r == -ENOENT) {
		*ret = 0;
		return 0;
	}
	return r;
}

/* Copy the file src into OUTDIR/sub/name (copy_in; sub made as needed):
 * 0 or 1 (kept), -errno. src is freed. */
static int copy_to(struct pub *p, const char *out, const char *sub, char *src,
		   const char *name)
{
	int fd = -1, r;

	r = src ? sub_open(out, sub, &fd) : -ENOMEM;
	if (r == 0)
		r = copy_in(p, src, fd, name);
	if (fd >= 0)
		close(fd);
	free(src);
	return r;
}

/* catalog/GEN, delta/PREV/GEN and signature/GEN into OUTDIR. */
static int write_meta(struct pub *p, const char *state_dir, const char *out,
		      uint64_t prev, struct repl_static_stats *st, char *err,
		      size_t errcap)
{
	char name[32], sub[64];
	char *src;
	int r;

	snprintf(name, sizeof(name), "%" PRIu64, p->gen);
	r = copy_to(p, out, "catalog", repl_catalog_zst_path(state_dir, p->gen),
		    name);
	if (r == -EEXIST) {
		snprintf(err, errcap,
			 "%s/catalog/%s holds another catalog of generation "
			 "%s: OUTDIR was published from another state dir",
			 out, name, name);
		return r;
	}
	if (r < 0) {
		snprintf(err, errcap, "cannot write %s/catalog/%s: %s", out,
			 name, base_errname(r));
		return r;
	}
	if (prev && prev < p->gen) {
		r = repl_delta_make(state_dir, prev, p->gen);
		if (r == 0) {
			snprintf(sub, sizeof(sub), "delta/%" PRIu64, prev);
			r = copy_to(
			    p, out, sub,
			    repl_delta_zst_path(state_dir, prev, p->gen), name);
			st->delta = r >= 0;
		}
		/* -ENOENT: the state dir no longer keeps prev; clients take
		 * the whole catalog. */
		if (r < 0 && r != -ENOENT) {
			snprintf(err, errcap,
				 "cannot write the delta %" PRIu64 " -> %s: %s",
				 prev, name, base_errname(r));
			return r;
		}
	}
	src = repl_sig_path(state_dir, p->gen);
	if (!src)
		return -ENOMEM;
	if (access(src, F_OK) != 0) {
		free(src);
		return 0; /* not signed */
	}
	r = copy_to(p, out, "signature", src, name);
	st->signed_ = r >= 0 || r == -EEXIST;
	if (r == -EEXIST)
		r = 0; /* another statement of the same catalog: a re-sign */
	if (r < 0)
		snprintf(err, errcap, "cannot write %s/signature/%s: %s", out,
			 name, base_errname(r));
	return r < 0 ? r : 0;
}

int repl_static_publish(const struct repl_static_opts *o,
			struct repl_static_stats *st, char *err, size_t errcap)
{
	struct pub p = {0};
	uint64_t t0 = base_now_ns(), prev = 0;
	char *cat_path = NULL;
	int lockfd = -1, r;

	memset(st, 0, sizeof(*st));
	st->generation = o->gen;
	p.srcfd = p.tmpfd = p.chunkfd = -1;
	p.gen = o->gen;
	p.policy = (enum frame_policy)o->policy;
	p.src_dir = o->src_dir;
	/* A test hook, not an option: slows the writing down to kill it. */
	if (getenv("FERRY_TEST_PUBLISH_DELAY_MS"))
		p.delay_ms = (unsigned)strtoul(
		    getenv("FERRY_TEST_PUBLISH_DELAY_MS"), NULL, 10);
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.can_put, NULL);
	pthread_cond_init(&p.can_take, NULL);
	r = base_mkdir_p(o->out_dir, 0755);
	if (r < 0) {
		snprintf(err, errcap, "cannot make %s: %s", o->out_dir,
			 base_errname(r));
		goto out;
	}
	r = sub_open(o->out_dir, TMP_DIR, &p.tmpfd);
	if (r == 0) {
		lockfd = openat(p.tmpfd, LOCK_NAME,
				O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		r = lockfd < 0 ? -errno : 0;
	}
	if (r == 0 && flock(lockfd, LOCK_EX | LOCK_NB) < 0)
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
	if (r < 0) {
		snprintf(err, errcap,
			 r == -EBUSY ? "another publish into %s is running"
				     : "cannot lock %s/" TMP_DIR,
			 o->out_dir);
		goto out;
	}
	r = tmp_clean(p.tmpfd);
	if (r == 0)
		r = out_head(o->out_dir, &prev);
	if (r < 0) {
		snprintf(err, errcap, "cannot read %s/HEAD: %s", o->out_dir,
			 base_errname(r));
		goto out;
	}
	st->previous = prev;
	if (prev > o->gen) {
		r = -ESTALE;
		snprintf(err, errcap,
			 "%s holds generation %" PRIu64 ", newer than the "
			 "state dir's %" PRIu64
			 ": publish from the state dir that made it",
			 o->out_dir, prev, o->gen);
		goto out;
	}
	p.srcfd = open(o->src_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p.srcfd < 0) {
		r = -errno;
		snprintf(err, errcap, "cannot open %s: %s", o->src_dir,
			 base_errname(r));
		goto out;
	}
	r = sub_open(o->out_dir, "chunk", &p.chunkfd);
	if (r < 0) {
		snprintf(err, errcap, "cannot make %s/chunk: %s", o->out_dir,
			 base_errname(r));
		goto out;
	}
	cat_path = repl_catalog_path(o->state_dir, o->gen);
	p.srcindex_path = repl_srcindex_path(o->state_dir, o->gen);
	if (!cat_path || !p.srcindex_path) {
		r = -ENOMEM;
		snprintf(err, errcap, "out of memory");
		goto out;
	}
	r = write_chunks(&p, cat_path, o->threads ? o->threads : 1, err,
			 errcap);
	st->chunks = p.written + p.kept;
	st->written = p.written;
	st->written_bytes = p.written_bytes;
	st->raw_bytes = p.raw_bytes;
	if (r < 0)
		goto out;
	r = write_meta(&p, o->state_dir, o->out_dir, prev, st, err, errcap);
	if (r < 0)
		goto out;
	/* Last: HEAD names a generation whose every file is in place. */
	r = repl_head_write(o->out_dir, o->gen);
	if (r < 0) {
		snprintf(err, errcap, "cannot write %s/HEAD: %s", o->out_dir,
			 base_errname(r));
		goto out;
	}
	/* The publish is done; what older generations alone name goes. A
	 * failure here leaves a whole store (and the next publish tries
	 * again): a warning, not the publish's failure. */
	{
		struct repl_static_prune_stats ps;
		char why[512];

		if (repl_static_prune(o->out_dir, p.tmpfd, p.chunkfd, o->gen,
				      o->keep ? o->keep : 3, &ps, why,
				      sizeof(why)) < 0)
			base_warn("published, but cannot drop older "
				  "generations out=\"%s\" why=\"%s\"",
				  o->out_dir, why);
		st->pruned_gens = ps.generations;
		st->pruned_objects = ps.objects;
		st->pruned_bytes = ps.bytes;
	}
out:
	st->seconds = (double)(base_now_ns() - t0) / 1e9;
	free(cat_path);
	free(p.srcindex_path);
	if (p.chunkfd >= 0)
		close(p.chunkfd);
	if (p.srcfd >= 0)
		close(p.srcfd);
	if (p.tmpfd >= 0)
		close(p.tmpfd);
	if (lockfd >= 0)
		close(lockfd); /* and the lock with it */
	pthread_cond_destroy(&p.can_put);
	pthread_cond_destroy(&p.can_take);
	pthread_mutex_destroy(&p.mu);
	return r;
}
