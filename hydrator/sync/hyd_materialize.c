/*
 * hydrator/sync/hyd_materialize.c — write a catalog's tree as a plain directory
 * (the second half of `ferry sync`, after the store is hydrated).
 *
 * Safety: every entry is created with *at() calls relative to a directory
 * fd opened with O_DIRECTORY|O_NOFOLLOW, one level at a time, so neither a
 * symlink from the catalog nor one planted in DEST is ever followed out of
 * DEST; names are single components (the reader filters them, and they
 * are checked again here; one it filters out is named on stderr and
 * counted failed, never dropped in silence: hyd_unsafe.c). File bytes
 * come only from hyd_store_get (or a fetch flight), both of which verify
 * SHA-256 before handing bytes out.
 *
 * Pending files (catalog format 2): a file is written, or checked, only
 * once its manifest is local and checked (hyd_mat_content.c): while
 * hydration runs, the writer waits for the manifest thread to bring it;
 * after, it asks for it itself (the per-file endpoint, within the
 * timeout). A file whose source changed before it was hashed has no
 * manifest in this generation and fails, named; what DEST holds there is
 * left alone.
 *
 * Resume: a regular file already in DEST with the catalog's size and mtime
 * is left alone (its mode, owner and xattrs are set where they differ) when the
 * record of an earlier run (hyd_sync_record.c) says this writer put it
 * there with this manifest and its ctime has not moved since; else it is
 * hashed chunk by chunk against the manifest, and left alone when every
 * id matches. So a second run rewrites nothing and reads no unchanged
 * file again. New content goes to ".ferry-tmp.NAME.XXXXXX"
 * in the same directory, gets its metadata, then is renamed over NAME;
 * leftovers of a crash are removed when the directory is next visited.
 * Durability: nothing is fsynced per file (4,000 fsyncs cost seconds);
 * one syncfs of DEST's filesystem at the end makes the whole tree
 * durable. A power loss before it can leave a renamed file whose data
 * never reached the disk, with the right size and mtime: the next run's
 * check hashes such a file against the manifest and rewrites it. Entries in
 * DEST that the catalog lacks are left alone (like rsync without --delete); a
 * non-directory where the catalog has a directory is replaced.
 *
 * Order: a directory's own mode, owner, xattrs and times are set after all
 * of its entries (post-order: deepest first), so writing into it does not
 * disturb its mtime and a read-only mode does not block the writer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/sync/hyd_mat_priv.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define BATCH 128u	     /* catalog entries read per readdir call */
#define TICK_NS 200000000ull /* progress at most 5 times a second */
#define TMP_NAME_KEEP 200u   /* bytes of NAME kept in a temp name */
#define TMP_TRIES 16

/* One directory's walk (hyd_sync__dir_each): the DEST fd and depth. */
struct dir_walk {
	struct walk *w;
	int fd;
	unsigned depth;
};

/* ---- small helpers ---- */

/* One line naming the entry at the current path (the logger shows bytes
 * that are not UTF-8 as \\xNN); the entry is counted as failed. err may be
 * 0 (the why says it all). */
static void report(struct walk *w, const char *why, int err)
{
	/* ESTALE's text ("stale file handle") would mislead: the why says
	 * the source changed. */
	base_log_err(BASE_LOG_ERROR, err == -ESTALE ? 0 : err,
		     "%s path=\"%s%s%s\"", why, w->m->dest,
		     w->path.len ? "/" : "", w->path.len ? w->path.b : "");
	w->m->res->failed++;
	if (err == -ESTALE) /* the source changed under it (rsync's 24) */
		w->m->res->vanished++;
	/* DEST is full or read-only: the run failed as a whole (rsync's 11) */
	if ((err == -ENOSPC || err == -EDQUOT || err == -EROFS) &&
	    !w->m->res->dest_err)
		w->m->res->dest_err = err;
}

/* The item of the entry at the current path, when it says a change. */
static void item(struct walk *w, const char *code, int is_dir,
		 const char *extra, const struct cat_inode *in)
{
	if (w->m->item && hyd_item_changed(code))
		hyd_item_emit(w->m, code, w->path.b, is_dir, extra, in);
}

static void tick(struct walk *w, int force)
{
	uint64_t now;

	if (!w->m->tick)
		return;
	now = base_now_ns();
	if (!force && now - w->last_tick < TICK_NS)
		return;
	w->last_tick = now;
	w->m->tick(w->m->tick_arg, w->files_done, w->bytes_done);
}

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts;

	ts.tv_sec = ns / 1000000000ll;
	ts.tv_nsec = ns % 1000000000ll;
	if (ts.tv_nsec < 0) { /* times before 1970 */
		ts.tv_sec--;
		ts.tv_nsec += 1000000000l;
	}
	return ts;
}

/* ---- ino map (hard links) ---- */

static size_t inomap_slot(uint64_t ino, size_t cap)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

struct hyd_inomap_ent *hyd_inomap_find(struct hyd_inomap *m, uint64_t ino)
{
	size_t i;

	if (!m->cap || !ino)
		return NULL;
	for (i = inomap_slot(ino, m->cap); m->v[i].ino;
	     i = (i + 1) & (m->cap - 1))
		if (m->v[i].ino == ino)
			return &m->v[i];
	return NULL;
}

struct hyd_inomap_ent *hyd_inomap_add(struct hyd_inomap *m, uint64_t ino)
{
	struct hyd_inomap_ent *nv;
	size_t i, j, cap;

	/* Keep the load under one half: probes stay short. */
	if ((m->n + 1) * 2 > m->cap) {
		cap = m->cap ? m->cap * 2 : 64;
		nv = calloc(cap, sizeof(*nv));
		if (!nv)
			return NULL;
		for (i = 0; i < m->cap; i++) {
			if (!m->v[i].ino)
				continue;
			for (j = inomap_slot(m->v[i].ino, cap); nv[j].ino;
			     j = (j + 1) & (cap - 1))
				;
			nv[j] = m->v[i];
		}
		free(m->v);
		m->v = nv;
		m->cap = cap;
	}
	for (i = inomap_slot(ino, m->cap); m->v[i].ino;
	     i = (i + 1) & (m->cap - 1))
		;
	memset(&m->v[i], 0, sizeof(m->v[i]));
	m->v[i].ino = ino;
	m->n++;
	return &m->v[i];
}

void hyd_inomap_fini(struct hyd_inomap *m)
{
	size_t i;

	for (i = 0; i < m->cap; i++)
		free(m->v[i].rel);
	free(m->v);
	memset(m, 0, sizeof(*m));
}

/* ---- metadata ---- */

/* Set every catalog xattr of ino with set(). Names outside user.* that the
 * kernel refuses (no privilege, unsupported) are skipped: "others when
 * permitted". */
static int xattrs_apply(struct walk *w, uint64_t ino,
			int (*set)(void *arg, const char *name, const void *val,
				   size_t len),
			void *arg, const char **why)
{
	char *names = NULL, *val = NULL, *p;
	size_t nlen = 0, vlen;
	int r;

	r = cat_listxattr(w->m->cat, ino, NULL, 0, &nlen);
	if (r < 0 || nlen == 0)
		goto out;
	names = malloc(nlen);
	val = malloc(CAT_XATTR_VALUE_MAX);
	if (!names || !val) {
		r = -ENOMEM;
		goto out;
	}
	r = cat_listxattr(w->m->cat, ino, names, nlen, &nlen);
	if (r < 0)
		goto out;
	for (p = names; p < names + nlen; p += strlen(p) + 1) {
		r = cat_getxattr(w->m->cat, ino, p, strlen(p), val,
				 CAT_XATTR_VALUE_MAX, &vlen);
		if (r < 0)
			goto out;
		r = set(arg, p, val, vlen);
		if (r < 0 && strncmp(p, "user.", 5) &&
		    (r == -EPERM || r == -ENOTSUP || r == -EACCES)) {
			base_log_err(BASE_LOG_DEBUG, r,
				     "skipping an xattr we may not set name=%s",
				     p);
			r = 0;
		}
		if (r < 0)
			goto out;
	}
out:
	if (r < 0)
		*why = "cannot set xattrs";
	free(names);
	free(val);
	return r;
}

/* Where xattrs_apply sets them: an open fd, or a path (not followed). A
 * value the entry already has is left alone; set counts the others. */
struct xset {
	int fd;
	const char *path;
	unsigned set;
};

static int xset_cb(void *arg, const char *name, const void *val, size_t len)
{
	struct xset *x = arg;
	uint8_t *have = malloc(len + 1);
	ssize_t n;
	int same;

	if (!have)
		return -ENOMEM;
	n = x->path ? lgetxattr(x->path, name, have, len + 1)
		    : fgetxattr(x->fd, name, have, len + 1);
	same = n >= 0 && (size_t)n == len && memcmp(have, val, len) == 0;
	free(have);
	if (same)
		return 0;
	x->set++;
	if (x->path)
		return lsetxattr(x->path, name, val, len, 0) < 0 ? -errno : 0;
	return fsetxattr(x->fd, name, val, len, 0) < 0 ? -errno : 0;
}

static int mtime_is(const struct stat *st, int64_t mtime_ns)
{
	struct timespec t = ns_to_ts(mtime_ns);

	return st->st_mtim.tv_sec == t.tv_sec &&
	       st->st_mtim.tv_nsec == t.tv_nsec;
}

/* Owner, mode, xattrs, then times (last: the others change ctime only, but
 * writing xattrs on some filesystems touches mtime). chown before chmod:
 * chown clears set-id bits. Only what differs is set, as rsync does, so
 * an entry that already matches keeps its ctime (a rerun touches
 * nothing). */
static int meta_fd(struct walk *w, int fd, const struct cat_inode *in,
		   const char **why)
{
	struct xset x = {.fd = fd};
	struct timespec ts[2];
	struct stat st;
	int r, chowned = 0;

	if (fstat(fd, &st) < 0) {
		*why = "stat failed";
		return -errno;
	}
	if (w->m->owners && (st.st_uid != in->uid || st.st_gid != in->gid)) {
		if (fchown(fd, in->uid, in->gid) < 0) {
			*why = "cannot set the owner";
			return -errno;
		}
		chowned = 1;
	}
	if ((st.st_mode & 07777) != (in->mode & 07777) || chowned) {
		if (fchmod(fd, in->mode & 07777) < 0) {
			*why = "cannot set the mode";
			return -errno;
		}
	}
	r = xattrs_apply(w, in->ino, xset_cb, &x, why);
	if (r < 0)
		return r;
	if ((!x.set && mtime_is(&st, in->mtime_ns)) ||
	    (in->kind == CAT_DIR && w->m->omit_dir_times))
		return 0;
	ts[0].tv_sec = 0;
	ts[0].tv_nsec = UTIME_OMIT;
	ts[1] = ns_to_ts(in->mtime_ns);
	if (futimens(fd, ts) < 0) {
		*why = "cannot set the mtime";
		return -errno;
	}
	return 0;
}

/* The same for an entry that cannot be opened (symlink, fifo, device). */
static int meta_at(struct walk *w, int dirfd, const char *name,
		   const struct cat_inode *in, const char **why)
{
	char proc[64 + CAT_NAME_MAX];
	struct xset x = {.fd = -1, .path = proc};
	struct timespec ts[2];
	struct stat st;
	int r, chowned = 0;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		*why = "stat failed";
		return -errno;
	}
	if (w->m->owners && (st.st_uid != in->uid || st.st_gid != in->gid)) {
		if (fchownat(dirfd, name, in->uid, in->gid,
			     AT_SYMLINK_NOFOLLOW) < 0) {
			*why = "cannot set the owner";
			return -errno;
		}
		chowned = 1;
	}
	/* glibc does AT_SYMLINK_NOFOLLOW through an O_PATH fd: never follows.
	 */
	if (in->kind != CAT_LNK &&
	    ((st.st_mode & 07777) != (in->mode & 07777) || chowned) &&
	    fchmodat(dirfd, name, in->mode & 07777, AT_SYMLINK_NOFOLLOW) < 0) {
		*why = "cannot set the mode";
		return -errno;
	}
	/* l*xattr does not follow the last component; the rest of the path
	 * is the magic link to our own directory fd. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", dirfd, name);
	r = xattrs_apply(w, in->ino, xset_cb, &x, why);
	if (r < 0)
		return r;
	if (!x.set && mtime_is(&st, in->mtime_ns))
		return 0;
	ts[0].tv_sec = 0;
	ts[0].tv_nsec = UTIME_OMIT;
	ts[1] = ns_to_ts(in->mtime_ns);
	if (utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0) {
		*why = "cannot set the mtime";
		return -errno;
	}
	return 0;
}

/* ---- temp names ---- */

static void tmp_name(char *buf, size_t cap, const char *name, size_t len)
{
	static const char abc[] = "abcdefghijklmnopqrstuvwxyz"
				  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	uint8_t rnd[6];
	char sfx[7];
	size_t i;

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		uint64_t t = base_now_ns() ^ ((uint64_t)getpid() << 32);

		memcpy(rnd, &t, sizeof(rnd));
	}
	for (i = 0; i < 6; i++)
		sfx[i] = abc[rnd[i] % (sizeof(abc) - 1)];
	sfx[6] = '\0';
	/* NAME is cut so the temp name stays one legal component. */
	snprintf(buf, cap, HYD_SYNC_TMP_PREFIX "%.*s.%s",
		 (int)(len < TMP_NAME_KEEP ? len : TMP_NAME_KEEP), name, sfx);
}

/* Remove temp files a crashed run left in this directory — only names
 * with our prefix that the catalog does not itself hold. */
static void clean_temps(struct walk *w, int dirfd, uint64_t dir_ino)
{
	struct cat_inode in;
	struct dirent *de;
	DIR *d;
	int fd;

	fd = dup(dirfd);
	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, HYD_SYNC_TMP_PREFIX,
			    sizeof(HYD_SYNC_TMP_PREFIX) - 1) ||
		    de->d_type == DT_DIR)
			continue;
		if (cat_lookup(w->m->cat, dir_ino, de->d_name,
			       strlen(de->d_name), &in) == 0)
			continue;
		if (unlinkat(dirfd, de->d_name, 0) == 0)
			base_debug("removed a stale temp file name=%s",
				   de->d_name);
	}
	closedir(d);
}

/* Put the temp entry tmp in place of name. */
static int install(struct walk *w, int dirfd, const char *tmp, const char *name,
		   const char **why)
{
	int r = hyd_sync__backup(w->m, dirfd, name, w->path.b);

	if (r < 0) {
		*why = "cannot make the backup (--backup)";
		return r;
	}
	if (renameat(dirfd, tmp, dirfd, name) == 0)
		return 0;
	*why = errno == EISDIR || errno == ENOTEMPTY
		   ? "a directory is in the way"
		   : "cannot rename into place";
	return -errno;
}

/* ---- entries ---- */

/* --link-dest: e's name becomes a hard link to path (a file a -dest DIR
 * holds whole, with e's attributes): 0, or -errno with nothing left. */
static int link_seed(struct walk *w, int dirfd, const struct hyd_dirent_copy *e,
		     const char *path)
{
	char tmp[CAT_NAME_MAX + 1];
	const char *why = "";
	int i, r = -EEXIST;

	for (i = 0; i < TMP_TRIES && r == -EEXIST; i++) {
		tmp_name(tmp, sizeof(tmp), e->name, e->len);
		/* flags 0: a symlink at path is never followed */
		r = linkat(AT_FDCWD, path, dirfd, tmp, 0) < 0 ? -errno : 0;
	}
	if (r < 0)
		return r;
	r = install(w, dirfd, tmp, e->name, &why);
	if (r < 0)
		unlinkat(dirfd, tmp, 0);
	return r;
}

/* --into: ino's part, whole, renamed to a temp name beside its path (tmp)
 * and opened (*ret_fd) for its metadata. 1, or 2 when the record's digest
 * could not be made (the file is not recorded); 0 when not whole (the
 * file is written as always). */
static int adopt(struct walk *w, int dirfd, const struct hyd_dirent_copy *e,
		 char *tmp, size_t cap, uint8_t *dg, int *ret_fd,
		 uint64_t *ret_from)
{
	int r;

	*ret_from = 0;
	if (!w->m->place || !e->in.size)
		return 0;
	tmp_name(tmp, cap, e->name, e->len);
	r = hyd_place_adopt(w->m->place, e->in.ino, w->m->max_raw, dirfd, tmp,
			    ret_from);
	if (r <= 0)
		return 0;
	*ret_fd = openat(dirfd, tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (*ret_fd < 0) {
		/* its record then points nowhere: fetched again */
		(void)unlinkat(dirfd, tmp, 0);
		return 0;
	}
	if (w->m->rec &&
	    hyd_sync__manifest_digest(w->m->cat, e->in.ino, e->in.size, dg) < 0)
		return 2;
	return 1;
}

/* A regular file. Returns 1 when (re)written, 0 when left, -errno.
 * dirfd < 0: its directory is not in DEST (a dry run). */
/* e is left for a later pass: counted, and listed for it. */
static void leave(struct walk *w, const struct hyd_dirent_copy *e)
{
	w->m->deferred++;
	if (w->m->left_in)
		hyd_mat_left_add(w->m->left_in, &w->left_dir, w->left_ino,
				 w->path.b, w->left_path_len, e->name, e->len,
				 e->in.ino);
}

static int sync_reg(struct walk *w, int dirfd, const struct hyd_dirent_copy *e)
{
	char tmp[CAT_NAME_MAX + 1], code[HYD_ITEM_LEN];
	const char *why = "";
	struct stat st;
	uint8_t dg[HYD_SYNC_DIGEST_LEN];
	int fd = -1, r, i, have, quick = 0, same = 0, matches = 0;
	int digest_ok = 0, src = -1, adopted, by_record = 0, mstate = -1;
	int lacks = -1; /* not asked yet */
	uint64_t from = 0;
	char seed[PATH_MAX];
	enum hyd_mat_seed plan;

	/* a file --into will wait for (not one it leaves for later) */
	if (w->m->want && e->in.size && (!w->m->defer || e->in.nlink > 1))
		w->m->want(w->m->fill_arg, e->in.ino);
	/* --into while backfill runs: a file whose manifest backfill has not
	 * brought yet waits for a later pass, with no request of its own
	 * (one round trip per file, beside the jobs' reads) */
	if (w->m->defer && e->in.nlink < 2 && e->in.size && w->m->pending &&
	    hyd_mat__waiting(w->m) && !w->m->dry_run) {
		mstate = cat_manifest_state(w->m->cat, e->in.ino);
		if (mstate == CAT_MANIFEST_MISSING) {
			leave(w, e);
			return 0;
		}
	}
	/* the look just made says the manifest is readable: not again */
	r = mstate == CAT_MANIFEST_LOCAL || mstate == CAT_MANIFEST_CATALOG
		? 0
		: hyd_mat__manifest_ready(w, &e->in, &why);
	/* A dry run fetches no manifest: without one, the quick check
	 * (size and time, as rsync's) decides. */
	have = r == 0;
	if (r < 0 && !(w->m->dry_run && r == -EAGAIN)) {
		/* ESTALE's text ("stale file handle") would mislead: the
		 * why says it all. */
		report(w, why, r == -ESTALE ? 0 : r);
		if (r == -ESTALE)
			w->m->res->vanished++;
		return r;
	}
	if (dirfd >= 0 &&
	    fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(st.st_mode)) {
		same = 1;
		quick = (uint64_t)st.st_size == e->in.size &&
			hyd_sync__mtime_ns(&st) == e->in.mtime_ns;
	}
	if (same && hyd_sync__size_same(w->m->skip, &e->in, &st)) {
		/* --size-only: DEST's content is taken as is */
		matches = 1;
		fd = openat(dirfd, e->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			matches = 0;
	} else if (quick && !have) {
		matches = 1;
	} else if (quick) {
		/* no record (none kept, or a dry run into nothing): no
		 * digest to compare or note */
		digest_ok =
		    w->m->rec && hyd_sync__manifest_digest(w->m->cat, e->in.ino,
							   e->in.size, dg) == 0;
		/* recorded as written and unchanged since: no need to read */
		matches = digest_ok && hyd_sync__rec_has(w->m->rec, &st, dg);
		by_record = matches;
		fd = openat(dirfd, e->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && !matches) {
			hyd_mat__let_go(w); /* buf is scratch for the check */
			matches = hyd_sync__file_matches(
				      w->m->cat, e->in.ino, e->in.size, fd,
				      w->buf, w->m->max_raw, &w->zero) == 1;
		}
		if (fd < 0)
			matches = 0;
	}
	if (matches) {
		if (w->m->item) {
			hyd_item_attrs(w->m, dirfd, e->name, &st, &e->in, '.',
				       0, code);
			item(w, code, 0, NULL, &e->in);
		}
		r = w->m->dry_run ? 0 : meta_fd(w, fd, &e->in, &why);
		if (r == 0 && digest_ok && fd >= 0 && fstat(fd, &st) == 0)
			hyd_sync__rec_note(w->m->rec, &st, dg);
		/* --into: what was placed of it is read here from now on
		 * (told when written; a file the record vouches for was) */
		if (r == 0 && w->m->place && !w->m->dry_run && !by_record)
			hyd_place_landed_file(w->m->place, e->in.ino, w->path.b,
					      0, digest_ok ? dg : NULL);
		if (fd >= 0)
			close(fd);
		if (r < 0)
			report(w, why, r);
		return r < 0 ? r : 0;
	}
	if (fd >= 0)
		close(fd);
	plan = hyd_mat__seed_plan(w, e, seed, sizeof(seed), &src);
	if (plan == HYD_MAT_SEED_COMPARED) {
		w->m->res->files_compared++;
		return 0;
	}
	if (!same)
		hyd_sync__make_way(w->m, dirfd, e->name, w->path.b);
	/* rsync names no file it links or copies from a -dest DIR */
	if (w->m->item && plan == HYD_MAT_SEED_NONE) {
		if (same)
			hyd_item_attrs(w->m, dirfd, e->name, &st, &e->in, '>',
				       quick, code);
		else
			hyd_item_new(code, '>', CAT_REG);
		item(w, code, 0, NULL, &e->in);
	}
	if (w->m->dry_run) {
		w->m->res->files_written++;
		w->m->res->bytes_written += e->in.size;
		return 1;
	}
	/* --into: the bytes placed as they came are renamed in whole (the
	 * record says so in one count: no look at the store per chunk) */
	adopted = plan == HYD_MAT_SEED_NONE
		      ? adopt(w, dirfd, e, tmp, sizeof(tmp), dg, &fd, &from)
		      : 0;
	/* a big part that lacks only what the store holds is filled */
	if (!adopted && plan == HYD_MAT_SEED_NONE && w->m->place &&
	    e->in.size >= HYD_MAT_FILL_MIN) {
		lacks = hyd_mat__lacks(w, &e->in, from);
		if (!lacks && hyd_mat__fill_part(w, &e->in, from) == 1)
			adopted = adopt(w, dirfd, e, tmp, sizeof(tmp), dg, &fd,
					&from);
	}
	/* --into while backfill runs: a later pass writes it whole (what
	 * the placer recorded, up to from, is there: not looked at) */
	if (!adopted && w->m->defer && e->in.nlink < 2 &&
	    hyd_mat__waiting(w->m) &&
	    (lacks >= 0 ? lacks : hyd_mat__lacks(w, &e->in, from))) {
		leave(w, e);
		if (src >= 0)
			close(src);
		return 0;
	}
	if (plan == HYD_MAT_SEED_LINK) {
		r = link_seed(w, dirfd, e, seed);
		if (r == 0) {
			close(src);
			w->m->res->files_linked++;
			return 1;
		}
		plan = HYD_MAT_SEED_COPY; /* another filesystem, say */
	}
	for (i = 0; !adopted && i < TMP_TRIES; i++) {
		tmp_name(tmp, sizeof(tmp), e->name, e->len);
		fd = openat(
		    dirfd, tmp,
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0) {
		r = -errno;
		if (src >= 0)
			close(src);
		report(w, "cannot create a temp file", r);
		return r;
	}
	/* The record's digest from the rows the copy reads anyway. */
	w->src_fd = src;
	r = adopted ? 0
		    : hyd_mat__copy_chunks(w, fd, e->in.ino, e->in.size,
					   w->m->rec ? dg : NULL, &why);
	w->src_fd = -1;
	if (src >= 0) {
		close(src);
		if (r == 0)
			w->m->res->files_copied++;
	}
	if (r == 0)
		r = meta_fd(w, fd, &e->in, &why);
	close(fd);
	if (r == 0)
		r = install(w, dirfd, tmp, e->name, &why);
	if (r < 0) {
		unlinkat(dirfd, tmp, 0);
		report(w, why, r);
		return r;
	}
	/* its stat after the rename, which moved its ctime */
	if (w->m->rec && adopted != 2 &&
	    fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		hyd_sync__rec_note(w->m->rec, &st, dg);
	if (w->m->place)
		hyd_place_landed_file(w->m->place, e->in.ino, w->path.b,
				      adopted > 0,
				      w->m->rec && adopted != 2 ? dg : NULL);
	w->m->res->files_written++;
	w->m->res->bytes_written += e->in.size;
	return 1;
}

/* A new entry made as tmp goes in place of name: made is 0 when tmp was
 * made (else its -errno, and why_made says what failed). Returns 0, or
 * -errno after one line naming the entry (tmp is removed). */
static int put_in_place(struct walk *w, int dirfd, const char *tmp,
			const char *name, int made, const char *why_made)
{
	const char *why = why_made;
	int r = made;

	if (r == 0)
		r = install(w, dirfd, tmp, name, &why);
	if (r < 0) {
		if (r != -EEXIST)
			unlinkat(dirfd, tmp, 0);
		report(w, why, r);
	}
	return r;
}

/* The tail symlinks and special files share: put what was made in place
 * (changed: something had to be made; see put_in_place), then set its
 * metadata. Returns changed, or -errno after one line naming the entry. */
static int finish_entry(struct walk *w, int dirfd, const char *tmp,
			const struct hyd_dirent_copy *e, int changed, int made,
			const char *why_made)
{
	const char *why = why_made;
	int r;

	if (w->m->dry_run)
		return changed;
	if (changed) {
		r = put_in_place(w, dirfd, tmp, e->name, made, why_made);
		if (r < 0)
			return r;
	}
	r = meta_at(w, dirfd, e->name, &e->in, &why);
	if (r < 0) {
		report(w, why, r);
		return r;
	}
	return changed;
}

/* The item of a symlink or special file: new when DEST has nothing of
 * its type there, else its attributes (content: target or device number
 * differs). */
static void item_leaf(struct walk *w, int dirfd,
		      const struct hyd_dirent_copy *e, int exists,
		      const struct stat *st, int changed, const char *extra)
{
	char code[HYD_ITEM_LEN];

	if (!w->m->item)
		return;
	if (!exists)
		hyd_item_new(code, 'c', e->in.kind);
	else
		hyd_item_attrs(w->m, dirfd, e->name, st, &e->in,
			       changed ? 'c' : '.', changed, code);
	item(w, code, 0, extra, &e->in);
}

static int sync_symlink(struct walk *w, int dirfd,
			const struct hyd_dirent_copy *e)
{
	char target[CAT_TARGET_MAX + 1], cur[CAT_TARGET_MAX + 2];
	char tmp[CAT_NAME_MAX + 1] = "", *extra;
	struct stat st = {0};
	size_t tlen = 0;
	ssize_t n = -1;
	int r, i, changed = 0, exists = 0;

	r = cat_readlink(w->m->cat, e->in.ino, target, CAT_TARGET_MAX, &tlen);
	if (r == 0 && (tlen == 0 || memchr(target, '\0', tlen)))
		r = -EBADMSG;
	if (r < 0) {
		report(w, "bad symlink target in the catalog", r);
		return r;
	}
	target[tlen] = '\0';
	if (dirfd >= 0) {
		n = readlinkat(dirfd, e->name, cur, sizeof(cur));
		exists = n >= 0 &&
			 fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	}
	if (n < 0 || (size_t)n != tlen || memcmp(cur, target, tlen))
		changed = 1;
	if (!exists)
		hyd_sync__make_way(w->m, dirfd, e->name, w->path.b);
	if (w->m->item) {
		extra = malloc(tlen + 5);
		if (extra) {
			snprintf(extra, tlen + 5, " -> %s", target);
			item_leaf(w, dirfd, e, exists, &st, changed, extra);
			free(extra);
		}
	}
	if (changed && !w->m->dry_run) {
		for (i = 0; i < TMP_TRIES; i++) {
			tmp_name(tmp, sizeof(tmp), e->name, e->len);
			r = symlinkat(target, dirfd, tmp) < 0 ? -errno : 0;
			if (r != -EEXIST)
				break;
		}
	}
	return finish_entry(w, dirfd, tmp, e, changed, r,
			    "cannot create the symlink");
}

/* fifo, socket, character or block device. */
static int sync_special(struct walk *w, int dirfd,
			const struct hyd_dirent_copy *e)
{
	char tmp[CAT_NAME_MAX + 1] = "";
	mode_t type = e->in.mode & S_IFMT;
	dev_t rdev = e->in.kind == CAT_CHR || e->in.kind == CAT_BLK
			 ? (dev_t)e->in.rdev
			 : 0;
	struct stat st = {0};
	int r = 0, i, changed = 0, exists;

	exists = dirfd >= 0 &&
		 fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		 (st.st_mode & S_IFMT) == type;
	if (!exists || (rdev && st.st_rdev != rdev))
		changed = 1;
	if (!exists)
		hyd_sync__make_way(w->m, dirfd, e->name, w->path.b);
	item_leaf(w, dirfd, e, exists, &st, changed, NULL);
	if (changed && !w->m->dry_run) {
		for (i = 0; i < TMP_TRIES; i++) {
			tmp_name(tmp, sizeof(tmp), e->name, e->len);
			r = mknodat(dirfd, tmp, type | 0600, rdev) < 0 ? -errno
								       : 0;
			if (r != -EEXIST)
				break;
		}
	}
	return finish_entry(w, dirfd, tmp, e, changed, r,
			    rdev && r == -EPERM
				? "cannot create a device node (needs root or "
				  "CAP_MKNOD)"
				: "cannot create the node");
}

/* Open the directory holding rel (a DEST-relative path we created),
 * component by component without following symlinks; *ret_base points at
 * the last component inside rel. */
static int open_parent(struct walk *w, const char *rel, const char **ret_base)
{
	char comp[CAT_NAME_MAX + 1];
	const char *p = rel, *slash;
	int fd, nfd;

	fd = dup(w->rootfd);
	if (fd < 0)
		return -errno;
	while ((slash = strchr(p, '/'))) {
		size_t n = (size_t)(slash - p);

		if (n == 0 || n > CAT_NAME_MAX) {
			close(fd);
			return -EINVAL;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		nfd = openat(fd, comp,
			     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (nfd < 0)
			return -errno;
		fd = nfd;
		p = slash + 1;
	}
	*ret_base = p;
	return fd;
}

/* A later name of a hard-linked inode whose first name is at rel: link it
 * there unless it already is (written: the first name was written this
 * run, so a dry run's existing link would be made again). Returns 1 when
 * linked, 0 when it was, -errno. */
static int sync_hardlink(struct walk *w, int dirfd,
			 const struct hyd_dirent_copy *e, const char *rel,
			 int written)
{
	char tmp[CAT_NAME_MAX + 1];
	const char *base = NULL, *why = "cannot create the hard link";
	char code[HYD_ITEM_LEN], *extra;
	struct stat a, b;
	int pfd = -1, r = 0, i, have_b, linked = 0;

	if (dirfd >= 0)
		pfd = open_parent(w, rel, &base);
	if (pfd < 0 && !w->m->dry_run) {
		report(w, "cannot reach the first name of its hard link", pfd);
		return pfd;
	}
	have_b =
	    dirfd >= 0 && fstatat(dirfd, e->name, &b, AT_SYMLINK_NOFOLLOW) == 0;
	if (pfd >= 0 && have_b &&
	    fstatat(pfd, base, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		linked = 1;
	if (linked && !(w->m->dry_run && written)) {
		close(pfd);
		return 0;
	}
	if (w->m->item) {
		/* rsync: an existing name is compared with the inode; a dry
		 * run does not name the first one */
		if (have_b && (b.st_mode & S_IFMT) == (e->in.mode & S_IFMT))
			hyd_item_attrs(w->m, dirfd, e->name, &b, &e->in, 'h', 0,
				       code);
		else
			hyd_item_new(code, 'h', e->in.kind);
		extra = malloc(strlen(rel) + 5);
		if (extra) {
			snprintf(extra, strlen(rel) + 5, " => %s", rel);
			hyd_item_emit(w->m, code, w->path.b, 0,
				      w->m->dry_run && linked ? NULL : extra,
				      &e->in);
			free(extra);
		}
	}
	if (w->m->dry_run) {
		if (pfd >= 0)
			close(pfd);
		return 1;
	}
	for (i = 0; i < TMP_TRIES; i++) {
		tmp_name(tmp, sizeof(tmp), e->name, e->len);
		/* flags 0: linkat never follows a symlink at the old name. */
		r = linkat(pfd, base, dirfd, tmp, 0) < 0 ? -errno : 0;
		if (r != -EEXIST)
			break;
	}
	close(pfd);
	r = put_in_place(w, dirfd, tmp, e->name, r, why);
	return r < 0 ? r : 1;
}

/* A non-directory entry, hard links included. */
static int sync_leaf(struct walk *w, int dirfd, const struct hyd_dirent_copy *e)
{
	struct hyd_inomap_ent *le = NULL;
	int r;

	if (e->in.nlink > 1) {
		le = hyd_inomap_find(&w->links, e->in.ino);
		if (le && le->rel)
			return sync_hardlink(w, dirfd, e, le->rel, le->written);
	}
	switch (e->in.kind) {
	case CAT_REG:
		r = sync_reg(w, dirfd, e);
		w->bytes_done += e->in.size;
		break;
	case CAT_LNK:
		r = sync_symlink(w, dirfd, e);
		break;
	default:
		r = sync_special(w, dirfd, e);
		break;
	}
	/* Remember where the first name went; only a success is a target. */
	if (r >= 0 && e->in.nlink > 1 && !le) {
		le = hyd_inomap_add(&w->links, e->in.ino);
		if (le) {
			le->rel = strdup(w->path.b);
			le->written = r == 1;
		}
		if (!le || !le->rel) {
			report(w, "out of memory", -ENOMEM);
			return -ENOMEM;
		}
	}
	return r;
}

/* Open (creating, or replacing a non-directory) the directory name. */
static int open_dir_child(int dirfd, const char *name)
{
	const int fl = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd;

	fd = openat(dirfd, name, fl);
	if (fd >= 0)
		return fd;
	/* ELOOP/ENOTDIR: a symlink or file sits where the catalog has a
	 * directory; it goes, so nothing is ever written through it. */
	if (errno == ELOOP || errno == ENOTDIR) {
		if (unlinkat(dirfd, name, 0) < 0)
			return -errno;
	} else if (errno != ENOENT) {
		return -errno;
	}
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(dirfd, name, fl);
	return fd < 0 ? -errno : fd;
}

/* The directory entry e of dirfd, itemized, opened (created unless a
 * dry run); -ENOENT: a dry run's directory not in DEST. */
static int dir_child(struct walk *w, int dirfd, const struct hyd_dirent_copy *e)
{
	char code[HYD_ITEM_LEN];
	struct stat st;
	int exists, fd;

	exists = dirfd >= 0 &&
		 fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		 S_ISDIR(st.st_mode);
	if (w->m->item) {
		if (exists)
			hyd_item_attrs(w->m, dirfd, e->name, &st, &e->in, '.',
				       0, code);
		else
			hyd_item_new(code, 'c', CAT_DIR);
		item(w, code, 1, NULL, &e->in);
	}
	if (!w->m->dry_run)
		return open_dir_child(dirfd, e->name);
	if (!exists)
		return -ENOENT;
	fd = openat(dirfd, e->name,
		    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int hyd_sync__batch_cb(void *ctx, const void *name, size_t len,
		       const struct cat_inode *in, uint64_t pos)
{
	struct hyd_dirbatch *b = ctx;
	struct hyd_dirent_copy *e = &b->e[b->n];

	b->last_pos = pos; /* the resume point, even for a skipped name */
	/* The reader checks names already; a second look costs nothing. */
	if (cat_name_check(name, len) == 0) {
		e->in = *in;
		e->pos = pos;
		e->len = len;
		memcpy(e->name, name, len);
		e->name[len] = '\0';
		b->n++;
	}
	return b->n == b->cap ? 1 : 0;
}

int hyd_sync__dir_each(cat_reader *cat, uint64_t dir, struct base_path *path,
		       hyd_dir_each_fn fn, void *arg)
{
	struct hyd_dirbatch b = {.cap = BATCH};
	uint64_t pos = 0;
	size_t i, old;
	int r, err = 0;

	b.e = malloc(BATCH * sizeof(*b.e));
	if (!b.e)
		return -ENOMEM;
	for (;;) {
		b.n = 0;
		b.last_pos = pos;
		r = cat_readdir(cat, dir, pos, hyd_sync__batch_cb, &b);
		if (r < 0)
			break;
		for (i = 0; i < b.n; i++) {
			int c;

			if (base_path_push(path, b.e[i].name, b.e[i].len,
					   &old)) {
				err = -ENOMEM;
				continue;
			}
			c = fn(arg, &b.e[i]);
			base_path_pop(path, old);
			if (c < 0) {
				r = c;
				goto out;
			}
		}
		if (r == 0)
			break;
		pos = b.last_pos;
	}
out:
	free(b.e);
	return r < 0 ? r : err;
}

static void sync_dir(struct walk *w, int fd, const struct cat_inode *dir,
		     unsigned depth);

/* One entry of the tree in the totals (written, checked or left). */
static void count_entry(struct walk *w, enum cat_kind kind)
{
	switch (kind) {
	case CAT_DIR:
		w->m->res->dirs++;
		break;
	case CAT_REG:
		w->m->res->files++;
		w->files_done++;
		break;
	case CAT_LNK:
		w->m->res->symlinks++;
		break;
	default:
		w->m->res->specials++;
		break;
	}
}

static int sync_entry(struct walk *w, int dirfd,
		      const struct hyd_dirent_copy *e, unsigned depth)
{
	int cfd;

	if (w->m->pace)
		w->m->pace(w->m->pace_arg);
	count_entry(w, e->in.kind);
	switch (e->in.kind) {
	case CAT_DIR:
		if (depth + 1 >= HYD_SYNC_DEPTH_MAX) {
			report(w, "directory nested too deep", -ELOOP);
			return -ELOOP;
		}
		cfd = dir_child(w, dirfd, e);
		if (cfd < 0 && cfd != -ENOENT) {
			report(w, "cannot create the directory", cfd);
			return cfd;
		}
		sync_dir(w, cfd, &e->in, depth + 1);
		if (cfd >= 0)
			close(cfd);
		return 0;
	default:
		return sync_leaf(w, dirfd, e);
	}
}

/* --delete below the DEST directory fd (catalog directory dir, at the
 * current path): what the catalog lacks goes, then the catalog's
 * subdirectories in turn. A directory something was deleted from gets its
 * metadata (its time) again. */
static void delete_dir(struct walk *w, int fd, const struct cat_inode *dir,
		       unsigned depth);

static int delete_dir_entry(void *arg, const struct hyd_dirent_copy *e)
{
	struct dir_walk *d = arg;
	struct walk *w = d->w;
	int cfd;

	if (e->in.kind != CAT_DIR ||
	    hyd_filter_excluded(w->m->filter, w->path.b, 1, 0))
		return 0;
	cfd = openat(d->fd, e->name,
		     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (cfd >= 0) {
		delete_dir(w, cfd, &e->in, d->depth + 1);
		close(cfd);
	}
	return 0;
}

static void delete_dir(struct walk *w, int fd, const struct cat_inode *dir,
		       unsigned depth)
{
	struct dir_walk d = {w, fd, depth};
	const char *why = "";
	uint64_t n;
	int r;

	n = hyd_sync__delete_extra(w->m, fd, dir->ino, w->path.b);
	w->m->res->deleted += n;
	r = n && !w->m->dry_run ? meta_fd(w, fd, dir, &why) : 0;
	if (r < 0)
		report(w, why, r);
	if (depth + 1 < HYD_SYNC_DEPTH_MAX)
		hyd_sync__dir_each(w->m->cat, dir->ino, &w->path,
				   delete_dir_entry, &d);
}

/* --delete, after the whole tree is written (rsync's --delete-after), by
 * rsync's rule: nothing is deleted once an entry failed, or when the
 * scan left entries out (the catalog is not the whole source), unless
 * --ignore-errors. */
static void delete_pass(struct walk *w, const struct cat_inode *root)
{
	struct hyd_mat *m = w->m;
	size_t old;
	int fd;

	if (!m->delete_extra || w->rootfd < 0 || hyd_mat__stopped(m))
		return;
	if ((m->res->failed || m->left_out) && !m->ignore_errors) {
		base_error("IO error encountered -- skipping file deletion "
			   "(%s; --ignore-errors deletes anyway)",
			   m->left_out ? "the source's scan left entries out"
				       : "an entry failed");
		m->res->deletions_skipped = 1;
		return;
	}
	w->path.len = 0;
	w->path.b[0] = '\0';
	if (!m->root_name) {
		delete_dir(w, w->rootfd, root, 0);
		return;
	}
	if (base_path_push(&w->path, m->root_name, strlen(m->root_name), &old))
		return;
	fd = hyd_filter_excluded(m->filter, w->path.b, 1, 0)
		 ? -1
		 : openat(w->rootfd, m->root_name,
			  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		delete_dir(w, fd, root, 0);
		close(fd);
	}
	base_path_pop(&w->path, old);
}

/* Everything below the open directory fd, then the directory's own
 * metadata. Failures are reported and counted; the walk goes on. fd < 0:
 * a dry run's directory that DEST lacks (everything below is new). */
/* rsync's leave-alone rules (--existing, --ignore-existing, -u,
 * --max-size, --min-size) say e stays as DEST has it (or absent):
 * counted in the tree's totals, nothing itemized, nothing changed. */
static int left_alone(struct walk *w, int dirfd,
		      const struct hyd_dirent_copy *e)
{
	struct stat st;
	int have;

	if (!hyd_sync__skip_active(w->m->skip))
		return 0;
	have = dirfd >= 0 &&
	       fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (!hyd_sync__skip(w->m->skip, &e->in, have ? &st : NULL))
		return 0;
	count_entry(w, e->in.kind);
	if (e->in.kind == CAT_REG)
		w->bytes_done += e->in.size;
	return 1;
}

static int sync_dir_entry(void *arg, const struct hyd_dirent_copy *e)
{
	struct dir_walk *d = arg;
	struct walk *w = d->w;
	struct hyd_dirent_copy mapped; /* one per level: sync_dir recurses */

	if (hyd_mat__stopped(w->m))
		return -ECANCELED;
	/* a pass of the files left: only what a pass may leave */
	if (w->m->only && (e->in.kind != CAT_REG || e->in.nlink > 1))
		return 0;
	w->m->visited++;
	/* --chmod, --chown, ...: every check and write sees DEST's values */
	if (w->m->attrmap) {
		mapped = *e;
		hyd_attrmap_apply(w->m->attrmap, &mapped.in);
		e = &mapped;
	}

	if (!hyd_filter_excluded(w->m->filter, w->path.b, e->in.kind == CAT_DIR,
				 0) &&
	    !left_alone(w, d->fd, e))
		sync_entry(w, d->fd, e, d->depth);
	tick(w, 0);
	return 0;
}

/* The catalog's entries of directory dir (at the current path) whose
 * names no directory can take: the reader skips them, so each is named
 * here, one line with its directory and its bytes as the logger shows
 * bytes (\\xNN), and counted as an entry that could not be reproduced. */
static void report_unsafe(struct walk *w, uint64_t dir)
{
	char esc[4 * CAT_NAME_MAX + 8];
	size_t first = 0, n, i, need;

	n = hyd_sync__unsafe_of(w->m->unsafe, dir, &first);
	for (i = first; i < first + n; i++) {
		const struct hyd_sync_unsafe_ent *u = &w->m->unsafe->v[i];

		need = base_text_escape(esc, sizeof(esc) - 3, u->name, u->len);
		if (need >= sizeof(esc) - 3)
			memcpy(esc + strlen(esc), "...", 4);
		base_error("a name in the catalog is not a single path "
			   "component: not written path=\"%s%s%s\" "
			   "name=\"%s\"",
			   w->m->dest, w->path.len ? "/" : "",
			   w->path.len ? w->path.b : "", esc);
		w->m->res->failed++;
	}
}

/* Not root: a directory left read-only by an earlier run must take new
 * entries; its final mode is set after them. 1 when its mode changed. */
static int dir_writable(struct walk *w, int fd)
{
	struct stat st;

	return !w->root && fstat(fd, &st) == 0 && (st.st_mode & 0300) != 0300 &&
	       fchmod(fd, (st.st_mode & 07777) | 0700) == 0;
}

static void sync_dir(struct walk *w, int fd, const struct cat_inode *dir,
		     unsigned depth)
{
	struct dir_walk d = {w, fd, depth};
	const char *why = "";
	uint64_t outer_ino = w->left_ino;
	size_t outer_len = w->left_path_len, outer_dir = w->left_dir;
	int r, dry = w->m->dry_run;

	if (fd >= 0 && !dry)
		dir_writable(w, fd);
	if (fd >= 0 && !dry)
		clean_temps(w, fd, dir->ino);
	report_unsafe(w, dir->ino);
	w->left_ino = dir->ino;
	w->left_path_len = w->path.len;
	w->left_dir = HYD_MAT_LEFT_END;
	r = hyd_sync__dir_each(w->m->cat, dir->ino, &w->path, sync_dir_entry,
			       &d);
	w->left_ino = outer_ino;
	w->left_path_len = outer_len;
	w->left_dir = outer_dir;
	if (r == -ECANCELED)
		return; /* told to stop */
	if (r < 0)
		report(w,
		       r == -ENOMEM ? "out of memory"
				    : "cannot read the directory from the "
				      "catalog",
		       r);
	if (fd < 0 || dry)
		return;
	r = meta_fd(w, fd, dir, &why);
	if (r < 0)
		report(w, why, r);
}

/* The transfer's root: DEST itself (its item is "./"), or with root_name
 * the directory DEST/root_name, as an entry of DEST. */
static void sync_root(struct walk *w, const struct cat_inode *root)
{
	struct hyd_dirent_copy *e;
	char code[HYD_ITEM_LEN];
	struct stat st;
	size_t len, old;

	if (!w->m->root_name) {
		if (w->m->item) {
			if (w->rootfd >= 0 && fstat(w->rootfd, &st) == 0)
				hyd_item_attrs(w->m, -1, "", &st, root, '.', 0,
					       code);
			else
				hyd_item_new(code, 'c', CAT_DIR);
			item(w, code, 1, NULL, root);
		}
		w->m->res->dirs++;
		sync_dir(w, w->rootfd, root, 0);
		return;
	}
	len = strlen(w->m->root_name);
	e = calloc(1, sizeof(*e));
	if (!e || len > CAT_NAME_MAX ||
	    base_path_push(&w->path, w->m->root_name, len, &old)) {
		free(e);
		report(w, "out of memory", -ENOMEM);
		return;
	}
	e->in = *root;
	e->len = len;
	memcpy(e->name, w->m->root_name, len + 1);
	if (!hyd_filter_excluded(w->m->filter, w->path.b, 1, 0))
		sync_entry(w, w->rootfd, e, 0);
	base_path_pop(&w->path, old);
	free(e);
}

/* The directory at rel (relative to DEST, "" for DEST), opened with
 * no symlink followed; -errno. */
static int open_rel_dir(struct walk *w, const char *rel)
{
	const char *base;
	int pfd, fd;

	if (!rel[0]) {
		fd = dup(w->rootfd);
		return fd < 0 ? -errno : fd;
	}
	pfd = open_parent(w, rel, &base);
	if (pfd < 0)
		return pfd;
	fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		fd = -errno;
	close(pfd);
	return fd;
}

/* Is file f of the listed ones to be looked at this pass (with
 * m->whole: the placer found it whole)? */
static int to_look_at(const struct walk *w, size_t f)
{
	return !w->m->whole || hyd_mat_whole_has(w->m->whole, w->m->nwhole,
						 w->m->only->files[f].ino);
}

/* Listed file f of directory i (at rel, rel_len bytes) left again as it
 * is, unlooked at. */
static void carry(struct walk *w, size_t i, const char *rel, size_t rel_len,
		  size_t f)
{
	const struct hyd_mat_left *l = w->m->only;
	const char *name;
	size_t len;

	w->m->deferred++;
	name = hyd_mat_left_name(l, f, &len);
	if (w->m->left_in)
		hyd_mat_left_add(w->m->left_in, &w->left_dir, l->dirs[i].ino,
				 rel, rel_len, name, len, l->files[f].ino);
}

/* The files of listed directory i of m->only to look at this pass,
 * looked up by name and written if they can be now; then, when one was
 * written (or its mode opened for it), the directory's metadata again
 * (the renames moved its times).
 * The others are left again; a directory with none to look at is not
 * opened. */
static void visit_dir(struct walk *w, size_t i, struct hyd_dirent_copy *e)
{
	const struct hyd_mat_left *l = w->m->only;
	const char *rel = hyd_mat_left_path(l, i), *name, *why = "";
	struct cat_inode dir;
	struct dir_walk d = {w, -1, 0};
	uint64_t wrote = w->m->res->files_written;
	size_t f, len, old, rel_len = strlen(rel);
	int r, opened;

	w->left_dir = HYD_MAT_LEFT_END;
	for (f = hyd_mat_left_first(l, i);
	     f != HYD_MAT_LEFT_END && !to_look_at(w, f);
	     f = hyd_mat_left_next(l, f))
		;
	if (f == HYD_MAT_LEFT_END) {
		for (f = hyd_mat_left_first(l, i); f != HYD_MAT_LEFT_END;
		     f = hyd_mat_left_next(l, f))
			carry(w, i, rel, rel_len, f);
		return;
	}
	w->path.len = 0;
	w->path.b[0] = '\0';
	r = cat_getattr(w->m->cat, l->dirs[i].ino, &dir);
	if (r == 0 && dir.kind != CAT_DIR)
		r = -ENOTDIR;
	if (r == 0 && rel[0] && base_path_push(&w->path, rel, rel_len, &old))
		r = -ENOMEM;
	d.fd = r < 0 ? r : open_rel_dir(w, rel);
	if (d.fd < 0) {
		report(w, "cannot open the directory again", d.fd);
		return;
	}
	hyd_attrmap_apply(w->m->attrmap, &dir);
	opened = dir_writable(w, d.fd);
	w->left_ino = dir.ino;
	w->left_path_len = w->path.len;
	for (f = hyd_mat_left_first(l, i);
	     f != HYD_MAT_LEFT_END && !hyd_mat__stopped(w->m);
	     f = hyd_mat_left_next(l, f)) {
		if (!to_look_at(w, f)) {
			carry(w, i, rel, rel_len, f);
			continue;
		}
		name = hyd_mat_left_name(l, f, &len);
		if (base_path_push(&w->path, name, len, &old)) {
			report(w, "out of memory", -ENOMEM);
			continue;
		}
		/* The generation's catalog named it one pass ago: a lookup
		 * that fails now is a failed entry (the next pass walks the
		 * tree), never one quietly taken as landed. */
		r = len > CAT_NAME_MAX
			? -ENAMETOOLONG
			: cat_lookup(w->m->cat, dir.ino, name, len, &e->in);
		if (r < 0) {
			report(w, "cannot find the file in the catalog again",
			       r);
		} else {
			memcpy(e->name, name, len + 1);
			e->len = len;
			e->pos = 0;
			sync_dir_entry(&d, e);
		}
		base_path_pop(&w->path, old);
	}
	r = opened || w->m->res->files_written != wrote
		? meta_fd(w, d.fd, &dir, &why)
		: 0;
	if (r < 0)
		report(w, why, r);
	close(d.fd);
}

/* A pass of m->only: the files the last pass left, directory by
 * directory. */
static void visit_left(struct walk *w)
{
	struct hyd_dirent_copy *e = malloc(sizeof(*e));
	size_t i;

	if (!e) {
		report(w, "out of memory", -ENOMEM);
		return;
	}
	for (i = 0; i < w->m->only->ndirs && !hyd_mat__stopped(w->m); i++)
		visit_dir(w, i, e);
	free(e);
	w->path.len = 0;
	w->path.b[0] = '\0';
}

int hyd_sync__materialize(struct hyd_mat *m)
{
	struct walk w;
	struct cat_inode root;
	int r, err;

	memset(&w, 0, sizeof(w));
	w.m = m;
	w.rootfd = -1;
	w.src_fd = -1;
	w.left_dir = HYD_MAT_LEFT_END;
	w.root = geteuid() == 0;
	r = cat_getattr(m->cat, m->root_ino ? m->root_ino : CAT_ROOT_INO,
			&root);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot read the catalog's root");
		return r;
	}
	hyd_attrmap_apply(m->attrmap, &root);
	/* A dry run makes nothing: a DEST that is not there is all new.
	 * DEST holding a subtree by name is a plain container (the umask's
	 * mode, as rsync makes it); else the catalog's root mode follows. */
	m->res->dest_created =
	    access(m->dest, F_OK) < 0 && (errno == ENOENT || errno == ENOTDIR);
	r = m->dry_run ? 0 : base_mkdir_p(m->dest, m->root_name ? 0777 : 0700);
	if (r == 0) {
		w.rootfd = open(m->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (w.rootfd < 0 && !(m->dry_run && errno == ENOENT))
			r = -errno;
	}
	w.buf = malloc(m->max_raw ? m->max_raw : 1);
	if (r == 0 && (!w.buf || base_path_push(&w.path, "", 0, &(size_t){0})))
		r = -ENOMEM;
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot open the destination dest=%s", m->dest);
		goto out;
	}
	w.path.len = 0;
	if (w.rootfd >= 0 && !m->dry_run)
		hyd_mat__behind_start(&w.behind);
	if (w.rootfd >= 0 && m->cache_dir) {
		r = hyd_sync__rec_open(m->cache_dir, m->dest, &m->rec);
		if (r < 0)
			base_log_err(BASE_LOG_DEBUG, r,
				     "no record of what was written: every "
				     "file is checked dest=%s",
				     m->dest);
		r = 0;
	}
	if (m->only) {
		visit_left(&w);
	} else {
		sync_root(&w, &root);
		delete_pass(&w, &root);
	}
	/* One flush for the whole tree instead of an fsync per file. */
	if (w.rootfd >= 0 && !m->dry_run && syncfs(w.rootfd) < 0)
		r = -errno;
	err = hyd_mat__behind_fini(&w.behind);
	if (r == 0)
		r = err;
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot flush the destination to disk dest=%s",
			     m->dest);
	/* Recorded only once the data is on disk. */
	if (r == 0 && !m->dry_run &&
	    hyd_sync__rec_commit(m->rec, m->only != NULL) < 0)
		base_warn("cannot keep the record of what was written: the "
			  "next run checks every file again dest=%s",
			  m->dest);
	hyd_sync__rec_close(m->rec);
	m->rec = NULL;
	tick(&w, 1);
out:
	if (w.rootfd >= 0)
		close(w.rootfd);
	hyd_mat__let_go(&w);
	hyd_inomap_fini(&w.links);
	free(w.path.b);
	free(w.buf);
	return r;
}
