/*
 * replicator/source/repl_scan.c — walk a directory into a catalog and a source
 * index.
 *
 * The walk is depth-first and post-order: a directory's entries are listed
 * and sorted by name bytes, each child is handled (recursing into
 * subdirectories), and only then are the directory's dirents written, as
 * the one consecutive run the catalog writer wants, and only for the
 * children that made it. Everything is opened relative to the parent's fd
 * with O_NOFOLLOW, so a symlink swapped in mid-scan is never followed.
 *
 * Inode numbers are handed out as inodes succeed (root = CAT_ROOT_INO).
 * Hard links (non-directories with st_nlink > 1) are keyed by
 * (st_dev, st_ino); their inode rows are written at the end, when the
 * number of dirents inside the tree (the catalog nlink) is known.
 *
 * Threads: this walk runs on one thread and is the only writer. As soon
 * as a directory is listed, jobs for the regular files in it (by readdir's
 * d_type) go to a pool (repl_scan_pool.c), up to a lookahead limit: a job
 * stats its entry and collects its xattrs (and, when the file is not
 * deferred or reused, reads, chunks and hashes it), so the walker itself
 * makes no per-file syscall; when the walk reaches a file it takes that
 * file's result, or runs the job itself if no thread has started it. Inode
 * numbers, rows and warnings therefore come out in walk order whatever the
 * thread timing: a catalog is the same with 1 thread or 16.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_source.h"
#include "replicator/source/repl_scan_priv.h"
#include "replicator/source/repl_srcindex.h"

struct link_ent {
	dev_t dev;
	ino_t ino;
	int used;
	uint32_t count; /* dirents seen so far */
	struct cat_inode in;
	char *target; /* symlinks can be hard-linked too */
	size_t target_len;
};

struct link_map {
	struct link_ent *v;
	size_t cap, n;
};

/* Jobs in flight per scanning thread: enough to keep the pool busy on
 * small files while the walker writes rows (16 left a 1M-entry walk's
 * second core idle a third of the time; 64 made it 15% faster, 256 no
 * faster still); each holds at most one manifest (bounded) until the
 * walk takes it. */
#define LOOKAHEAD_PER_THREAD 64u
#define SCAN_THREADS_MAX 64u

struct scan {
	const struct repl_scan_opts *o;
	struct repl_scan_stats *st;
	cat_writer *cw;
	repl_srcindex_writer *sw;
	uint64_t next_ino;
	/* Stable numbers: an entry the previous generation had (same source
	 * identity and kind) keeps its ino; a new one gets next_ino, which
	 * starts above every ino an older generation used. reused marks the
	 * older inos taken, one bit each below prev_next, so two entries of
	 * one identity (a bind mount) never get the same number. */
	uint64_t prev_next;
	uint8_t *reused;
	uint64_t cur_ino; /* inode whose manifest is being flushed */
	struct link_map links;
	struct base_path path; /* relative path of the current entry */
	struct repl_scan_shared sh;
	int hook_lock_ready;
	struct repl_file_reader fr;  /* the walker's own */
	struct repl_scan_pool *pool; /* NULL with one thread */
	size_t inflight, lookahead;  /* jobs handed to the pool */
	struct repl_xattrs xa;
};

/* The ino of a new entry: prev (its number in the previous generation,
 * 0 when none) if free, else the next new number. */
static uint64_t take_ino(struct scan *s, uint64_t prev)
{
	if (prev > CAT_ROOT_INO && prev < s->prev_next && s->reused &&
	    !(s->reused[prev / 8] >> (prev % 8) & 1)) {
		s->reused[prev / 8] |= (uint8_t)(1u << (prev % 8));
		return prev;
	}
	return s->next_ino++;
}

/* Record the source identity of a catalog entry that is not a regular
 * file, for the next generation's numbers. */
static int ident_of(struct scan *s, uint64_t ino, const struct stat *st)
{
	if (!s->sw)
		return 0;
	return repl_srcindex_add_ident(s->sw, ino, (uint64_t)st->st_dev,
				       (uint64_t)st->st_ino);
}

/* take_ino for a directory, symlink or special file of kind. */
static int other_ino(struct scan *s, const struct stat *st, int kind,
		     uint64_t *ret)
{
	uint64_t prev = 0;
	int r = repl_prev_ino(s->sh.prev, st, kind, &prev);

	if (r < 0)
		return r;
	*ret = take_ino(s, prev);
	return ident_of(s, *ret, st);
}

static size_t link_hash(dev_t dev, ino_t ino, size_t cap)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev;

	h ^= h >> 29;
	return (size_t)(h & (cap - 1));
}

static struct link_ent *link_find(struct link_map *lm, dev_t dev, ino_t ino)
{
	size_t i;

	if (!lm->cap)
		return NULL;
	for (i = link_hash(dev, ino, lm->cap);; i = (i + 1) & (lm->cap - 1)) {
		if (!lm->v[i].used)
			return NULL;
		if (lm->v[i].dev == dev && lm->v[i].ino == ino)
			return &lm->v[i];
	}
}

/* Insert (dev, ino); the entry must not exist. Open addressing, load <= 1/2. */
static struct link_ent *link_insert(struct link_map *lm, dev_t dev, ino_t ino)
{
	size_t i;

	if (2 * (lm->n + 1) > lm->cap) {
		size_t nc = lm->cap ? 2 * lm->cap : 64, j;
		struct link_ent *nv = calloc(nc, sizeof(*nv));

		if (!nv)
			return NULL;
		for (j = 0; j < lm->cap; j++) {
			if (!lm->v[j].used)
				continue;
			for (i = link_hash(lm->v[j].dev, lm->v[j].ino, nc);
			     nv[i].used; i = (i + 1) & (nc - 1))
				;
			nv[i] = lm->v[j];
		}
		free(lm->v);
		lm->v = nv;
		lm->cap = nc;
	}
	for (i = link_hash(dev, ino, lm->cap); lm->v[i].used;
	     i = (i + 1) & (lm->cap - 1))
		;
	lm->v[i].used = 1;
	lm->v[i].dev = dev;
	lm->v[i].ino = ino;
	lm->n++;
	return &lm->v[i];
}

static void link_free(struct link_map *lm)
{
	size_t i;

	for (i = 0; i < lm->cap; i++)
		free(lm->v[i].target);
	free(lm->v);
	memset(lm, 0, sizeof(*lm));
}

static void warn(struct scan *s, int err, const char *why)
{
	s->st->left_out++;
	if (s->o->warn)
		s->o->warn(s->o->ctx, s->path.b ? s->path.b : "", s->path.len,
			   err, why);
}

static int cancelled(const struct scan *s)
{
	return s->o->cancel && atomic_load(s->o->cancel);
}

static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static void inode_from_stat(struct cat_inode *in, uint64_t ino,
			    const struct stat *st)
{
	memset(in, 0, sizeof(*in));
	in->ino = ino;
	in->kind = (enum cat_kind)cat_kind_of_mode(st->st_mode);
	in->mode = st->st_mode;
	in->uid = st->st_uid;
	in->gid = st->st_gid;
	in->size = S_ISREG(st->st_mode) ? (uint64_t)st->st_size : 0;
	in->nlink = 1;
	in->mtime_ns = ts_ns(&st->st_mtim);
	in->ctime_ns = ts_ns(&st->st_ctim);
	if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
		in->rdev = st->st_rdev;
	/* what du shows at the source; a sparse file takes less than its
	 * size, and its holes stay holes at the destination */
	in->blocks = st->st_blocks > 0 ? (uint64_t)st->st_blocks : 0;
}

static int write_xattrs(struct scan *s, uint64_t ino, struct repl_xattrs *xa)
{
	size_t i;
	int r;

	for (i = 0; i < xa->n; i++) {
		r = cat_writer_add_xattr(s->cw, ino, xa->v[i].name,
					 strlen(xa->v[i].name), xa->v[i].value,
					 xa->v[i].value_len);
		if (r < 0)
			return r;
	}
	repl_xattrs_clear(xa);
	return 0;
}

/* Write a non-directory inode now, or park it in the link map when other
 * names may point at it (nlink is only known at the end). */
static int finish_inode(struct scan *s, const struct stat *st,
			const struct cat_inode *in, const char *target,
			size_t tlen)
{
	struct link_ent *le;

	if (st->st_nlink <= 1)
		return cat_writer_add_inode(s->cw, in, target, tlen);
	le = link_insert(&s->links, st->st_dev, st->st_ino);
	if (!le)
		return -ENOMEM;
	le->in = *in;
	le->count = 1;
	if (tlen) {
		le->target = malloc(tlen);
		if (!le->target)
			return -ENOMEM;
		memcpy(le->target, target, tlen);
		le->target_len = tlen;
	}
	return 0;
}

static int flush_chunk(void *ctx, const struct cat_chunk *c)
{
	struct scan *s = ctx;
	int r;

	r = cat_writer_add_chunk(s->cw, s->cur_ino, c->off, c->len, &c->id);
	if (r < 0)
		return r;
	s->st->chunks++;
	/* a hole is read from nowhere */
	if (s->sw && !chunk_id_is_hole(&c->id)) {
		r = repl_srcindex_add_chunk(s->sw, &c->id, s->cur_ino, c->off,
					    c->len);
		if (r < 0)
			return r;
		s->st->unique += (uint64_t)r;
	}
	return 0;
}

/* A regular file whose job is done: write its inode, xattrs, manifest and
 * source path. *ret_ino stays 0 when it was left out. Negative only for
 * errors that end the scan. */
static int scan_reg(struct scan *s, struct repl_file_job *j, uint64_t *ret_ino)
{
	struct cat_inode in;
	int r;

	if (j->rc < 0)
		return j->rc;
	if (j->left_out) {
		warn(s, j->warn_err, j->warn_why);
		return 0;
	}
	s->cur_ino = take_ino(s, j->prev_ino);
	inode_from_stat(&in, s->cur_ino, &j->st);
	r = write_xattrs(s, s->cur_ino, &j->xa);
	if (r < 0)
		return r;
	if (j->pending)
		r = cat_writer_add_pending(s->cw, s->cur_ino);
	else
		r = repl_manifest_each(&j->m, flush_chunk, s);
	if (r < 0)
		return r;
	if (s->sw) {
		struct repl_src_todo t = {
		    .dev = (uint64_t)j->st.st_dev,
		    .sino = (uint64_t)j->st.st_ino,
		    .size = (uint64_t)j->st.st_size,
		    .mtime_ns = ts_ns(&j->st.st_mtim),
		    .ctime_ns = ts_ns(&j->st.st_ctim),
		};

		r = repl_srcindex_add_file(s->sw, s->cur_ino, s->path.b,
					   s->path.len, &t, j->looked_ns);
		if (r == 0 && j->pending)
			r = repl_srcindex_add_todo(s->sw, s->cur_ino, &t);
		if (r < 0)
			return r;
	}
	r = finish_inode(s, &j->st, &in, NULL, 0);
	if (r < 0)
		return r;
	s->st->files++;
	s->st->bytes += (uint64_t)j->st.st_size;
	s->st->bytes_read += j->read_bytes;
	if (j->reused) {
		s->st->reused++;
		s->st->bytes_reused += (uint64_t)j->st.st_size;
	}
	if (j->pending) {
		s->st->pending++;
		s->st->bytes_pending += (uint64_t)j->st.st_size;
	}
	*ret_ino = s->cur_ino;
	return 0;
}

/* Symlinks, fifos, devices, sockets: nothing is opened (opening a fifo
 * would block); xattrs are read by name, the entry itself and not what a
 * symlink points at. */
static int scan_other(struct scan *s, int dfd, const char *name,
		      const struct stat *st, uint64_t *ret_ino)
{
	char target[CAT_TARGET_MAX + 1];
	struct cat_inode in;
	size_t tlen = 0;
	uint64_t ino;
	int r;

	if (S_ISLNK(st->st_mode)) {
		ssize_t n = readlinkat(dfd, name, target, sizeof(target));

		if (n < 0) {
			warn(s, errno, NULL);
			return 0;
		}
		if ((size_t)n > CAT_TARGET_MAX) {
			warn(s, ENAMETOOLONG, NULL);
			return 0;
		}
		tlen = (size_t)n;
	}
	r = repl_xattrs_collect_at(&s->xa, dfd, name);
	if (r == -ENOMEM)
		return r;
	r = other_ino(s, st, cat_kind_of_mode(st->st_mode), &ino);
	if (r < 0)
		return r;
	inode_from_stat(&in, ino, st);
	in.size = tlen;
	r = write_xattrs(s, ino, &s->xa);
	if (r < 0)
		return r;
	r = finish_inode(s, st, &in, tlen ? target : NULL, tlen);
	if (r < 0)
		return r;
	s->st->others++;
	*ret_ino = ino;
	return 0;
}

static int scan_dir(struct scan *s, int dfd, uint64_t dir_ino,
		    uint32_t *ret_subdirs);

static int scan_subdir(struct scan *s, int dfd, const char *name,
		       uint64_t *ret_ino)
{
	struct cat_inode in;
	struct stat st;
	uint32_t subdirs = 0;
	uint64_t ino;
	int fd, r;

	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		warn(s, errno, NULL);
		return 0;
	}
	if (fstat(fd, &st) < 0) {
		warn(s, errno, NULL);
		r = 0;
		goto out;
	}
	r = repl_xattrs_collect(&s->xa, fd, NULL);
	if (r == -ENOMEM)
		goto out;
	r = other_ino(s, &st, CAT_DIR, &ino);
	if (r < 0)
		goto out;
	r = write_xattrs(s, ino, &s->xa);
	if (r < 0)
		goto out;
	r = scan_dir(s, fd, ino, &subdirs);
	if (r < 0)
		goto out;
	inode_from_stat(&in, ino, &st);
	in.nlink = 2 + subdirs;
	r = cat_writer_add_inode(s->cw, &in, NULL, 0);
	if (r < 0)
		goto out;
	s->st->dirs++;
	*ret_ino = ino;
out:
	close(fd);
	return r;
}

/* A hard link to an inode already written: count the name. */
static int link_seen(struct scan *s, const struct stat *st, uint64_t *ret_ino)
{
	struct link_ent *le;

	if (S_ISDIR(st->st_mode) || st->st_nlink <= 1)
		return 0;
	le = link_find(&s->links, st->st_dev, st->st_ino);
	if (!le)
		return 0;
	le->count++;
	*ret_ino = le->in.ino;
	return 1;
}

/* One entry of a directory, of readdir type type (a hint). A regular
 * file is stat'ed by its job (run here when no thread has started it, or
 * when there is none); anything else, or what the job found not to be a
 * regular file, by type. 0 with *ret_ino set (kept) or 0 (left out,
 * reported); negative only when the scan must stop. */
static int scan_entry(struct scan *s, int dfd, const char *name,
		      unsigned char type, struct repl_file_job *j,
		      uint64_t *ret_ino, int *ret_is_dir)
{
	struct repl_file_job local;
	size_t len = strlen(name), old;
	struct stat st;
	int r;

	*ret_ino = 0;
	*ret_is_dir = 0;
	r = base_path_push(&s->path, name, len, &old);
	if (r < 0)
		return r;
	if (cat_name_check(name, len) < 0) {
		warn(s, EINVAL, "name not allowed in a catalog");
		goto out;
	}
	if (j || type == DT_REG) {
		if (!j) {
			repl_file_job_init(&local, &s->sh, dfd, name);
			j = &local;
		}
		repl_scan_pool_wait_job(s->pool, j, &s->fr);
		if (!j->not_reg) {
			if (j->rc == 0 && !j->left_out &&
			    link_seen(s, &j->st, ret_ino))
				goto done;
			r = scan_reg(s, j, ret_ino);
			goto done;
		}
		st = j->st;
	} else if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		warn(s, errno, NULL);
		goto out;
	}
	if (link_seen(s, &st, ret_ino))
		goto done;
	switch (st.st_mode & S_IFMT) {
	case S_IFDIR:
		r = scan_subdir(s, dfd, name, ret_ino);
		*ret_is_dir = *ret_ino != 0;
		break;
	case S_IFREG:
		/* readdir said otherwise; a job reads it after all */
		repl_file_job_init(&local, &s->sh, dfd, name);
		j = &local;
		repl_file_job_run(j, &s->fr);
		if (j->not_reg)
			warn(s, 0, "replaced while being scanned");
		else
			r = scan_reg(s, j, ret_ino);
		break;
	case S_IFLNK:
	case S_IFIFO:
	case S_IFCHR:
	case S_IFBLK:
	case S_IFSOCK:
		r = scan_other(s, dfd, name, &st, ret_ino);
		break;
	default:
		warn(s, 0, "unknown file type");
		break;
	}
done:
	if (j == &local)
		repl_file_job_fini(&local);
out:
	base_path_pop(&s->path, old);
	return r;
}

/* A directory listing: names in one arena, each preceded by its d_type
 * byte, so sorting the offsets keeps each type with its name. */
struct name_list {
	char *arena;
	size_t alen, acap;
	size_t *off;
	size_t n, cap;
};

static int names_add(struct name_list *nl, const char *name, unsigned char type)
{
	size_t len = strlen(name) + 1;

	if (nl->alen + 1 + len > nl->acap) {
		size_t nc = nl->acap ? nl->acap : 4096;
		char *na;

		while (nc < nl->alen + 1 + len)
			nc *= 2;
		na = realloc(nl->arena, nc);
		if (!na)
			return -ENOMEM;
		nl->arena = na;
		nl->acap = nc;
	}
	if (nl->n == nl->cap) {
		size_t nc = nl->cap ? 2 * nl->cap : 64;
		size_t *no = realloc(nl->off, nc * sizeof(*no));

		if (!no)
			return -ENOMEM;
		nl->off = no;
		nl->cap = nc;
	}
	nl->arena[nl->alen++] = (char)type;
	memcpy(nl->arena + nl->alen, name, len);
	nl->off[nl->n++] = nl->alen;
	nl->alen += len;
	return 0;
}

static const char *name_at(const struct name_list *nl, size_t i)
{
	return nl->arena + nl->off[i];
}

static unsigned char type_at(const struct name_list *nl, size_t i)
{
	return (unsigned char)nl->arena[nl->off[i] - 1];
}

/* strcmp compares as unsigned char, i.e. memcmp order over name bytes
 * (names hold no NUL), which is the order both sites rely on. */
static int names_cmp(const void *a, const void *b, void *arena)
{
	return strcmp((const char *)arena + *(const size_t *)a,
		      (const char *)arena + *(const size_t *)b);
}

/* List dfd into nl. A listing error keeps what was read and is reported. */
static int list_dir(struct scan *s, int dfd, struct name_list *nl)
{
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	fd = dup(dfd); /* closedir closes it; dfd stays ours */
	if (fd < 0)
		return errno == EMFILE || errno == ENFILE ? -errno : -EIO;
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				warn(s, errno, "listing stopped early");
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		r = names_add(nl, de->d_name, de->d_type);
		if (r < 0)
			break;
	}
	closedir(d);
	if (r == 0 && nl->n > 1)
		qsort_r(nl->off, nl->n, sizeof(nl->off[0]), names_cmp,
			nl->arena);
	return r;
}

/* Hand jobs for the regular files of nl from max(*next, at) on to the
 * pool, while the lookahead allows, but never past a subdirectory: the
 * walk descends there first, and jobs waiting behind it would only hold
 * the lookahead the subdirectory's own files need. The type is readdir's
 * d_type (an fstatat when the filesystem does not say); only a hint, since
 * scan_entry decides with its own fstatat, and a file without a job is
 * read when the walk reaches it. */
static int jobs_top_up(struct scan *s, int dfd, const struct name_list *nl,
		       struct repl_file_job **jobs, size_t *next, size_t at)
{
	if (*next < at)
		*next = at;
	while (s->pool && s->inflight < s->lookahead && *next < nl->n) {
		const char *name = name_at(nl, *next);
		unsigned char type = type_at(nl, *next);
		struct repl_file_job *j;
		struct stat st;

		if (type == DT_UNKNOWN) {
			if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				type = DT_UNKNOWN; /* scan_entry reports it */
			else if (S_ISDIR(st.st_mode))
				type = DT_DIR;
			else
				type = S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
		}
		if (type == DT_DIR)
			break;
		(*next)++;
		if (type != DT_REG || cat_name_check(name, strlen(name)) < 0)
			continue;
		j = malloc(sizeof(*j));
		if (!j)
			return -ENOMEM;
		repl_file_job_init(j, &s->sh, dfd, name);
		repl_scan_pool_submit(s->pool, j);
		jobs[*next - 1] = j;
		s->inflight++;
	}
	return 0;
}

/* Take a job back (or wait for it to stop) and free it. */
static void job_drop(struct scan *s, struct repl_file_job **jp)
{
	if (!*jp)
		return;
	repl_scan_pool_cancel_job(s->pool, *jp);
	repl_file_job_fini(*jp);
	free(*jp);
	*jp = NULL;
	s->inflight--;
}

static int scan_dir(struct scan *s, int dfd, uint64_t dir_ino,
		    uint32_t *ret_subdirs)
{
	struct name_list nl = {0};
	struct repl_file_job **jobs = NULL;
	uint64_t *inos = NULL;
	uint32_t subdirs = 0;
	size_t i, next = 0;
	int r, is_dir;

	r = list_dir(s, dfd, &nl);
	if (r < 0)
		goto out;
	inos = calloc(nl.n ? nl.n : 1, sizeof(*inos));
	jobs = calloc(nl.n ? nl.n : 1, sizeof(*jobs));
	if (!inos || !jobs) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < nl.n; i++) {
		if (cancelled(s)) {
			r = -ECANCELED;
			goto out;
		}
		r = jobs_top_up(s, dfd, &nl, jobs, &next, i);
		if (r < 0)
			goto out;
		r = scan_entry(s, dfd, name_at(&nl, i), type_at(&nl, i),
			       jobs[i], &inos[i], &is_dir);
		/* Used, or not wanted after all (a hard link already seen,
		 * no longer a regular file, an error). */
		job_drop(s, &jobs[i]);
		if (r < 0)
			goto out;
		subdirs += (uint32_t)is_dir;
	}
	/* All children are done: this directory's dirents go in one run. */
	for (i = 0; i < nl.n; i++) {
		const char *name = name_at(&nl, i);

		if (!inos[i])
			continue;
		r = cat_writer_add_dirent(s->cw, dir_ino, name, strlen(name),
					  inos[i]);
		if (r < 0)
			goto out;
	}
	*ret_subdirs = subdirs;
out:
	/* On the way out early, no job may outlive dfd and the names. */
	for (i = 0; jobs && i < nl.n; i++)
		job_drop(s, &jobs[i]);
	free(jobs);
	free(inos);
	free(nl.arena);
	free(nl.off);
	return r;
}

static int flush_links(struct scan *s)
{
	size_t i;
	int r;

	for (i = 0; i < s->links.cap; i++) {
		struct link_ent *le = &s->links.v[i];

		if (!le->used)
			continue;
		le->in.nlink = le->count;
		r = cat_writer_add_inode(s->cw, &le->in, le->target,
					 le->target_len);
		if (r < 0)
			return r;
	}
	return 0;
}

static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

/* Set up the writers and the root, then walk. */
static int scan_root(struct scan *s, const char *dir, int rootfd)
{
	struct cat_inode in;
	struct stat st;
	uint32_t subdirs = 0;
	int r;

	if (fstat(rootfd, &st) < 0)
		return -errno;
	r = repl_xattrs_collect(&s->xa, rootfd, NULL);
	if (r == -ENOMEM)
		return r;
	s->prev_next = repl_prev_next_ino(s->sh.prev);
	s->next_ino =
	    s->prev_next > CAT_ROOT_INO ? s->prev_next : CAT_ROOT_INO + 1;
	if (s->prev_next > CAT_ROOT_INO) {
		s->reused = calloc(s->prev_next / 8 + 1, 1);
		if (!s->reused)
			return -ENOMEM;
	}
	r = write_xattrs(s, CAT_ROOT_INO, &s->xa);
	if (r < 0)
		return r;
	(void)dir;
	r = scan_dir(s, rootfd, CAT_ROOT_INO, &subdirs);
	if (r < 0)
		return r;
	inode_from_stat(&in, CAT_ROOT_INO, &st);
	in.nlink = 2 + subdirs;
	r = cat_writer_add_inode(s->cw, &in, NULL, 0);
	if (r < 0)
		return r;
	s->st->dirs++;
	return flush_links(s);
}

/* Scanning threads for o: o->threads, or one per online CPU. */
static unsigned scan_threads(const struct repl_scan_opts *o)
{
	long n = o->threads;

	if (n == 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1)
		n = 1;
	return n > (long)SCAN_THREADS_MAX ? SCAN_THREADS_MAX : (unsigned)n;
}

/* The walker's reader and, with more than one thread, the pool. */
static int scan_threads_start(struct scan *s, const chunk_params *p,
			      const char *spill)
{
	unsigned n = scan_threads(s->o);
	int r;

	s->sh.p = *p;
	s->sh.cancel = s->o->cancel;
	s->sh.before_read = s->o->before_read;
	s->sh.ctx = s->o->ctx;
	s->sh.spill_dir = spill;
	/* Deferring needs somewhere to put the todo list. */
	s->sh.defer = s->o->defer && s->o->srcindex_path;
	r = -pthread_mutex_init(&s->sh.hook_lock, NULL);
	if (r < 0)
		return r;
	s->hook_lock_ready = 1;
	r = repl_file_reader_init(&s->fr, &s->sh);
	if (r < 0 || n == 1)
		return r;
	/* The walker is the n-th thread: it runs jobs while it waits. */
	r = repl_scan_pool_new(&s->sh, n - 1, &s->pool);
	if (r < 0)
		return r;
	s->sh.pool = s->pool;
	s->lookahead = (size_t)n * LOOKAHEAD_PER_THREAD;
	return 0;
}

int repl_scan(const char *dir, const char *catalog_path,
	      const struct repl_scan_opts *o, struct repl_scan_stats *ret)
{
	struct scan s = {0};
	struct cat_meta meta = {0};
	char *spill = NULL;
	int rootfd = -1, r;

	memset(ret, 0, sizeof(*ret));
	s.o = o;
	s.st = ret;
	if (o->params)
		ret->params = *o->params;
	else
		chunk_params_default(&ret->params);
	if (chunk_params_check(&ret->params) < 0 || o->generation < 1)
		return -EINVAL;
	rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	spill = dir_of(catalog_path);
	if (!spill) {
		r = -ENOMEM;
		goto out;
	}
	s.sh.prev_catalog_path = o->prev_catalog_path;
	s.sh.prev_srcindex_path = o->prev_srcindex_path;
	r = scan_threads_start(&s, &ret->params, spill);
	if (r < 0)
		goto out;
	s.sh.prev = s.fr.prev; /* the walker's numbers (other_ino) */
	meta.generation = o->generation;
	meta.parent_generation = o->parent_generation;
	meta.created_ns = base_wall_ns();
	meta.params = ret->params;
	r = cat_writer_open(catalog_path, &meta, &s.cw);
	if (r < 0)
		goto out;
	if (o->srcindex_path) {
		r = repl_srcindex_create(o->srcindex_path, o->generation,
					 &s.sw);
		if (r < 0)
			goto out;
	}
	r = scan_root(&s, dir, rootfd);
	if (r < 0)
		goto out;
	if (s.sw) {
		r = repl_srcindex_commit(s.sw);
		s.sw = NULL;
		if (r < 0)
			goto out;
	}
	cat_writer_set_left_out(s.cw, s.st->left_out);
	cat_writer_set_next_ino(s.cw, s.next_ino);
	r = cat_writer_commit(s.cw);
	s.cw = NULL;
	if (r < 0 && o->srcindex_path)
		unlink(o->srcindex_path); /* never one without the other */
out:
	/* scan_dir leaves no job behind, so the workers are idle here. */
	repl_scan_pool_free(s.pool);
	repl_srcindex_abort(s.sw);
	cat_writer_abort(s.cw);
	repl_file_reader_fini(&s.fr);
	if (s.hook_lock_ready)
		pthread_mutex_destroy(&s.sh.hook_lock);
	repl_xattrs_clear(&s.xa);
	link_free(&s.links);
	free(s.reused);
	free(s.path.b);
	free(spill);
	if (rootfd >= 0)
		close(rootfd);
	return r;
}

void repl_scan_warn_log(const char *ns, const char *dir, const char *rel,
			size_t rel_len, int err, const char *why)
{
	int len = rel_len > 4096 ? 4096 : (int)rel_len;

	if (why)
		base_warn("left out of the scan ns=%s path=\"%s%s%.*s\" "
			  "why=\"%s\"",
			  ns, dir, len ? "/" : "", len, rel, why);
	else
		base_log_err(BASE_LOG_WARN, err,
			     "left out of the scan ns=%s path=\"%s%s%.*s\"", ns,
			     dir, len ? "/" : "", len, rel);
}
