/*
 * hydrator/sync/hyd_verify.c — `ferry verify`: re-hash a cache's store, or
 * check a materialized tree against its catalog.
 *
 * Cache: state.db is opened read-only, without the store's lock, and every
 * indexed frame is read back from its volume, decoded and hashed here. So it
 * works while a hydrator (or a sync) runs on the cache: WAL readers do not
 * block the writer, and indexed frames are immutable. It only reports;
 * nothing is dropped or repaired. The next read of a corrupt chunk through
 * the store (the mount, or `ferry sync`) drops its row and fetches it again.
 * A cache the store has not opened since volumes were called packs
 * (packs/NNNNNNNN.pack, a `pack` column; the store's open moves it, and
 * this takes no lock to do so) is read as it is, half-moved ones too.
 *
 * Tree: a walk of the catalog from the root, each entry looked up in DEST
 * with fstatat(AT_SYMLINK_NOFOLLOW) relative to directory fds opened with
 * O_NOFOLLOW: type, permission bits, size, mtime, symlink target, device
 * numbers, user.* xattrs, hard-link groups, and regular file content hashed
 * per manifest chunk (for a catalog with pending files, the manifests of
 * its overlay beside it, CACHEDIR/catalogs/GEN.overlay.db: a pending file
 * whose manifest is not there cannot be checked and is reported). Owners
 * are not compared (a sync as non-root or with
 * --no-owners cannot set them); extra entries in DEST are not reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "hydrator/sync/hyd_sync_priv.h"

#define HYD_VOL_MAX 99999999u

/* ---- the store ---- */

struct vcache {
	const char *dir;
	const char *sub; /* "volumes", or "packs" (a cache not moved yet) */
	const char *ext; /* of the file open as cur_fd: ".vol" or ".pack" */
	int vols_fd;
	uint32_t cur_vol;
	int cur_fd;
	uint8_t *frame, *raw;
	frame_coder *coder;
	uint64_t bad;
};

static void cache_bad(struct vcache *v, const uint8_t *id, int64_t vol,
		      int64_t off, const char *why)
{
	char hex[CHUNK_ID_HEX_LEN + 1] = "?";
	chunk_id cid;

	if (id) {
		memcpy(cid.b, id, CHUNK_ID_LEN);
		chunk_id_to_hex(&cid, hex);
	}
	base_error("%s chunk=%s vol=%s/%08" PRId64 "%s off=%" PRId64 " dir=%s",
		   why, hex, v->sub, vol, v->ext, off, v->dir);
	v->bad++;
}

/* Check one index row's frame. */
static void cache_row(struct vcache *v, sqlite3_stmt *st)
{
	const uint8_t *id = sqlite3_column_blob(st, 0);
	int64_t vol = sqlite3_column_int64(st, 1);
	int64_t off = sqlite3_column_int64(st, 2);
	int64_t flen = sqlite3_column_int64(st, 3);
	int64_t rlen = sqlite3_column_int64(st, 4);
	struct frame_info fi;
	char name[32];
	size_t got = 0, raw_len = 0;
	chunk_id cid;

	if (!id || sqlite3_column_bytes(st, 0) != CHUNK_ID_LEN || vol <= 0 ||
	    vol > HYD_VOL_MAX || off < 0 || flen < FRAME_HDR_LEN ||
	    (uint64_t)flen > frame_bound(CHUNK_MAX_LIMIT) || rlen <= 0 ||
	    rlen > CHUNK_MAX_LIMIT) {
		cache_bad(v,
			  id && sqlite3_column_bytes(st, 0) == CHUNK_ID_LEN
			      ? id
			      : NULL,
			  vol, off, "bad index row");
		return;
	}
	memcpy(cid.b, id, CHUNK_ID_LEN);
	if ((uint32_t)vol != v->cur_vol) {
		if (v->cur_fd >= 0)
			close(v->cur_fd);
		v->ext = ".vol";
		snprintf(name, sizeof(name), "%08u.vol", (unsigned)vol);
		v->cur_fd = openat(v->vols_fd, name, O_RDONLY | O_CLOEXEC);
		/* In packs/, a file the store has not renamed yet. */
		if (v->cur_fd < 0 && errno == ENOENT &&
		    !strcmp(v->sub, "packs")) {
			snprintf(name, sizeof(name), "%08u.pack",
				 (unsigned)vol);
			v->cur_fd =
			    openat(v->vols_fd, name, O_RDONLY | O_CLOEXEC);
			if (v->cur_fd >= 0)
				v->ext = ".pack";
		}
		v->cur_vol = (uint32_t)vol;
	}
	if (v->cur_fd < 0) {
		cache_bad(v, id, vol, off, "volume file missing");
		return;
	}
	if (base_pread_full(v->cur_fd, v->frame, (size_t)flen, (uint64_t)off,
			    &got) < 0 ||
	    got != (size_t)flen) {
		cache_bad(v, id, vol, off, "frame cut short");
		return;
	}
	if (frame_header_parse(v->frame, got, CHUNK_MAX_LIMIT, &fi) < 0 ||
	    fi.frame_len != (size_t)flen || fi.raw_len != (uint64_t)rlen) {
		cache_bad(v, id, vol, off, "bad frame header");
		return;
	}
	if (frame_decode(v->coder, v->frame, got, CHUNK_MAX_LIMIT, v->raw,
			 CHUNK_MAX_LIMIT, &raw_len) < 0 ||
	    raw_len != (size_t)rlen) {
		cache_bad(v, id, vol, off, "frame does not decode");
		return;
	}
	if (chunk_id_verify(&cid, v->raw, raw_len) != 0)
		cache_bad(v, id, vol, off, "SHA-256 mismatch");
}

int hyd_verify_cache(const char *cache_dir, uint64_t *ret_checked)
{
	struct vcache v = {.dir = cache_dir,
			   .sub = "volumes",
			   .ext = ".vol",
			   .vols_fd = -1,
			   .cur_fd = -1};
	int64_t schema = 0;
	char path[4096];
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	uint64_t checked = 0;
	struct stat sb;
	int rc, r = 0;

	if (ret_checked)
		*ret_checked = 0;
	if (snprintf(path, sizeof(path), "%s/state.db", cache_dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	if (stat(path, &sb) < 0) {
		r = -errno;
		base_log_err(BASE_LOG_ERROR, r, "no chunk store dir=%s",
			     cache_dir);
		return r;
	}
	/* Read-only, no lock: see the top of the file. */
	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(db, 5000);
		rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st,
					NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			schema = sqlite3_column_int64(st, 0);
			rc = SQLITE_OK;
		}
		sqlite3_finalize(st);
		st = NULL;
	}
	/* Schema 4 renamed the column pack to vol (hyd_store.c). */
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(
		    db,
		    schema >= 4 ? "SELECT id, vol, off, frame_len, raw_len "
				  "FROM chunk ORDER BY vol, off"
				: "SELECT id, pack, off, frame_len, raw_len "
				  "FROM chunk ORDER BY pack, off",
		    -1, &st, NULL);
	if (rc != SQLITE_OK) {
		r = base_sqlite_errno(db, rc, "verify open");
		base_log_err(BASE_LOG_ERROR, r, "cannot read state.db dir=%s",
			     cache_dir);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/volumes", cache_dir);
	v.vols_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (v.vols_fd < 0 && errno == ENOENT) {
		v.sub = "packs";
		snprintf(path, sizeof(path), "%s/packs", cache_dir);
		v.vols_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	v.frame = malloc(frame_bound(CHUNK_MAX_LIMIT));
	v.raw = malloc(CHUNK_MAX_LIMIT);
	v.coder = frame_coder_new();
	if (!v.frame || !v.raw || !v.coder) {
		r = -ENOMEM;
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		cache_row(&v, st);
		checked++;
	}
	if (rc != SQLITE_DONE) {
		r = base_sqlite_errno(db, rc, "verify step");
		base_log_err(BASE_LOG_ERROR, r, "cannot read state.db dir=%s",
			     cache_dir);
		goto out;
	}
	r = v.bad > INT32_MAX ? INT32_MAX : (int)v.bad;
out:
	if (ret_checked)
		*ret_checked = checked;
	sqlite3_finalize(st);
	sqlite3_close(db);
	if (v.cur_fd >= 0)
		close(v.cur_fd);
	if (v.vols_fd >= 0)
		close(v.vols_fd);
	frame_coder_free(v.coder);
	free(v.frame);
	free(v.raw);
	return r;
}

/* ---- a tree ---- */

struct vtree {
	cat_reader *cat;
	const char *dest;
	struct base_path path;
	struct hyd_inomap links;
	uint8_t *buf;
	uint32_t max_raw;
	uint64_t bad, checked;
	struct hyd_zero_ids zero;
};

static void tree_bad(struct vtree *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void tree_bad(struct vtree *v, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	base_error("%s path=\"%s%s%s\"", what, v->dest, v->path.len ? "/" : "",
		   v->path.len ? v->path.b : "");
	v->bad++;
}

static int tree_xattr_cb(void *arg, const char *xname, int same, int missing)
{
	struct vtree *v = arg;

	if (strncmp(xname, "user.", 5) || same)
		return 0;
	tree_bad(v, missing ? "xattr %s missing" : "xattr %s differs", xname);
	return 0;
}

/* user.* xattrs of the catalog present with equal values. */
static void tree_xattrs(struct vtree *v, int dirfd, const char *name,
			uint64_t ino)
{
	if (hyd_sync__xattrs_cmp(v->cat, ino, dirfd, name, tree_xattr_cb, v) <
	    0)
		tree_bad(v, "out of memory checking xattrs");
}

static void tree_reg(struct vtree *v, int dirfd, const struct cat_inode *in,
		     const char *name, const struct stat *st)
{
	struct hyd_inomap_ent *le;
	int fd, r;

	if ((uint64_t)st->st_size != in->size) {
		tree_bad(v, "size %lld, catalog %" PRIu64,
			 (long long)st->st_size, in->size);
		return;
	}
	if (in->nlink > 1) {
		le = hyd_inomap_find(&v->links, in->ino);
		if (le) {
			if (le->a != st->st_dev || le->b != st->st_ino)
				tree_bad(v, "not hard-linked with the other "
					    "names of its inode");
			return; /* content checked at the first name */
		}
		le = hyd_inomap_add(&v->links, in->ino);
		if (le) {
			le->a = st->st_dev;
			le->b = st->st_ino;
		}
	}
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		tree_bad(v, "cannot open: %s", strerror(errno));
		return;
	}
	r = hyd_sync__file_matches(v->cat, in->ino, in->size, fd, v->buf,
				   v->max_raw, &v->zero);
	close(fd);
	if (r == 0)
		tree_bad(v, "content differs from the catalog");
	else if (r == -EAGAIN)
		tree_bad(v, "cannot check content: its manifest is not local "
			    "(a pending file: ferry sync fetches it)");
	else if (r == -ESTALE)
		tree_bad(v, "cannot check content: no manifest in this "
			    "generation (the source changed)");
	else if (r < 0)
		tree_bad(v, "cannot check content: %s", strerror(-r));
}

static void tree_dir(struct vtree *v, int fd, const struct cat_inode *dir,
		     unsigned depth);

/* One catalog entry against what DEST has under dirfd. name NULL: the
 * directory fd itself (DEST's root). */
static void tree_entry(struct vtree *v, int dirfd, const char *name,
		       const struct cat_inode *in, unsigned depth)
{
	char want[CAT_TARGET_MAX + 1], have[CAT_TARGET_MAX + 2];
	size_t wlen = 0;
	struct stat st;
	ssize_t n;
	int cfd;

	v->checked++;
	if (name ? fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0
		 : fstat(dirfd, &st) < 0) {
		tree_bad(v, "%s",
			 errno == ENOENT ? "missing" : strerror(errno));
		return;
	}
	if ((st.st_mode & S_IFMT) != (in->mode & S_IFMT)) {
		tree_bad(v, "type 0%o, catalog 0%o", st.st_mode & S_IFMT,
			 in->mode & S_IFMT);
		return;
	}
	if (in->kind != CAT_LNK && (st.st_mode & 07777) != (in->mode & 07777))
		tree_bad(v, "mode 0%o, catalog 0%o", st.st_mode & 07777,
			 in->mode & 07777);
	if (hyd_sync__mtime_ns(&st) != in->mtime_ns)
		tree_bad(v, "mtime %" PRId64 " ns, catalog %" PRId64 " ns",
			 hyd_sync__mtime_ns(&st), in->mtime_ns);
	switch (in->kind) {
	case CAT_REG:
		tree_reg(v, dirfd, in, name, &st);
		break;
	case CAT_LNK:
		if (cat_readlink(v->cat, in->ino, want, CAT_TARGET_MAX, &wlen) <
		    0) {
			tree_bad(v, "bad symlink in the catalog");
			break;
		}
		n = readlinkat(dirfd, name, have, sizeof(have));
		if (n < 0 || (size_t)n != wlen || memcmp(have, want, wlen))
			tree_bad(v, "symlink target differs");
		return; /* no user.* xattrs on symlinks */
	case CAT_CHR:
	case CAT_BLK:
		if (st.st_rdev != (dev_t)in->rdev)
			tree_bad(v, "device number differs");
		break;
	case CAT_DIR:
		if (depth + 1 >= HYD_SYNC_DEPTH_MAX) {
			tree_bad(v, "directory nested too deep");
			return;
		}
		cfd = name ? openat(dirfd, name,
				    O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					O_CLOEXEC)
			   : dup(dirfd);
		if (cfd < 0) {
			tree_bad(v, "cannot open: %s", strerror(errno));
			return;
		}
		tree_xattrs(v, cfd, NULL, in->ino);
		tree_dir(v, cfd, in, depth + 1);
		close(cfd);
		return;
	default:
		break;
	}
	tree_xattrs(v, dirfd, name, in->ino);
}

struct tree_walk {
	struct vtree *v;
	int fd;
	unsigned depth;
};

static int tree_dir_entry(void *arg, const struct hyd_dirent_copy *e)
{
	struct tree_walk *t = arg;

	tree_entry(t->v, t->fd, e->name, &e->in, t->depth);
	return 0;
}

static void tree_dir(struct vtree *v, int fd, const struct cat_inode *dir,
		     unsigned depth)
{
	struct tree_walk t = {v, fd, depth};
	int r =
	    hyd_sync__dir_each(v->cat, dir->ino, &v->path, tree_dir_entry, &t);

	if (r == -ENOMEM)
		tree_bad(v, "out of memory");
	else if (r < 0)
		tree_bad(v, "cannot read the directory from the catalog: %s",
			 strerror(-r));
}

/* The manifest overlay beside the catalog, when there is one (read
 * only). 0 or -errno (logged). */
static int attach_overlay(cat_reader *cat, const char *catalog_path)
{
	char path[4096] = "";
	int r;

	r = hyd_cache_overlay_path(catalog_path, path, sizeof(path));
	if (r == -EINVAL)
		return 0; /* not named GEN.db: no overlay beside it */
	if (r == 0 && access(path, F_OK) != 0)
		return 0; /* none fetched yet: pending files are reported */
	if (r == 0)
		r = cat_reader_attach_overlay(cat, path);
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot read the manifest overlay path=%s", path);
	return r;
}

int hyd_verify_tree(const char *dest, const char *catalog_path,
		    uint64_t *ret_checked)
{
	struct vtree v;
	struct cat_meta meta;
	struct cat_inode root;
	char why[256] = "";
	int fd = -1, r;

	memset(&v, 0, sizeof(v));
	v.dest = dest;
	if (ret_checked)
		*ret_checked = 0;
	/* the tree rule too (cat_check_tree), unless the cache's marker
	 * says the file passed it */
	r = cat_reader_open_checked(catalog_path, 0, &v.cat, why, sizeof(why));
	if (r < 0) {
		if (r == -EBADMSG && why[0])
			base_error(
			    "not a valid ferry catalog path=%s why=\"%s\"",
			    catalog_path, why);
		else if (r == -EBADMSG)
			base_error("not a valid ferry catalog path=%s",
				   catalog_path);
		else
			base_log_err(BASE_LOG_ERROR, r,
				     "cannot open the catalog path=%s",
				     catalog_path);
		return r;
	}
	cat_reader_meta(v.cat, &meta);
	v.max_raw = meta.params.max;
	r = meta.pending ? attach_overlay(v.cat, catalog_path) : 0;
	if (r < 0)
		goto out;
	r = cat_getattr(v.cat, CAT_ROOT_INO, &root);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "the catalog has no root path=%s", catalog_path);
		goto out;
	}
	fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		base_log_err(BASE_LOG_ERROR, r, "cannot open the tree dest=%s",
			     dest);
		goto out;
	}
	v.buf = malloc(v.max_raw);
	if (!v.buf) {
		r = -ENOMEM;
		goto out;
	}
	tree_entry(&v, fd, NULL, &root, 0);
	r = v.bad > INT32_MAX ? INT32_MAX : (int)v.bad;
	if (ret_checked)
		*ret_checked = v.checked;
out:
	if (fd >= 0)
		close(fd);
	cat_reader_close(v.cat);
	hyd_inomap_fini(&v.links);
	free(v.path.b);
	free(v.buf);
	return r;
}
