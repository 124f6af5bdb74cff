/*
 * catalog/cat_writer.c — builds one catalog generation (source side).
 *
 * The catalog is bulk-loaded into "<path>.tmp" inside a single transaction
 * with every durability knob off: until the final rename nobody can see the
 * file, so a crash just leaves a stale temp file that the next open
 * replaces. Durability comes at commit: COMMIT, close, fsync the file,
 * rename it into place, fsync the directory: a crash leaves the old file
 * or the new one, never half of either.
 *
 * Every row is checked here with the same rules the reader applies, so a
 * catalog we publish never fails our own reader.
 *
 * Every namespace row that goes in (inode, dirent, xattr) is also fed, in
 * call order and in a fixed little-endian encoding, to a SHA-256 (meta
 * "tree_sha256"): two catalogs of the same tree have the same digest
 * whatever their generation numbers and times, so the replicator can tell
 * that a rescan found nothing new without comparing databases. Manifests
 * are left out of it: whether a file's manifest is in the catalog or
 * still pending (published later by the replicator) does not change the
 * tree, and the content behind an unchanged inode row is what the quick
 * check (docs/catalog.md) already vouches for.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "catalog/base/base.h"

struct cat_writer {
	sqlite3 *db;
	char *path; /* final name */
	char *tmp;  /* "<path>.tmp" */
	struct cat_meta meta;
	sqlite3_stmt *ins_inode, *ins_dirent, *ins_xattr, *ins_chunk;
	sqlite3_stmt *ins_pending;
	sqlite3_stmt *max_pos;
	/* Directory whose entries are being added and the last pos given. */
	uint64_t dir_parent;
	uint64_t dir_pos;
	/* File whose chunks are being added and where its next chunk starts. */
	uint64_t chunk_ino;
	uint64_t chunk_next;
	uint64_t inodes, bytes, pending;
	EVP_MD_CTX *tree; /* the digest of every row added, in order */
	char tree_hex[65];
	/* First library failure; once set every call and commit fail with it,
	 * because a half-applied bulk load cannot be trusted. */
	int failed;
};

/* Tables first, then the one secondary index, so it is filled while rows
 * arrive instead of sorted in a big pass at the end. */
static const char schema_sql[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE inode(ino INTEGER PRIMARY KEY, kind INTEGER NOT NULL,"
    " mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,"
    " size INTEGER NOT NULL, nlink INTEGER NOT NULL,"
    " mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,"
    " rdev INTEGER NOT NULL, target BLOB, blocks INTEGER NOT NULL);"
    "CREATE TABLE dirent(parent INTEGER NOT NULL, pos INTEGER NOT NULL,"
    " name BLOB NOT NULL, ino INTEGER NOT NULL,"
    " PRIMARY KEY(parent, pos)) WITHOUT ROWID;"
    "CREATE UNIQUE INDEX dirent_name ON dirent(parent, name);"
    "CREATE TABLE xattr(ino INTEGER NOT NULL, name BLOB NOT NULL,"
    " value BLOB NOT NULL, PRIMARY KEY(ino, name)) WITHOUT ROWID;"
    "CREATE TABLE chunk(ino INTEGER NOT NULL, off INTEGER NOT NULL,"
    " len INTEGER NOT NULL, id BLOB NOT NULL,"
    " PRIMARY KEY(ino, off)) WITHOUT ROWID;"
    "CREATE TABLE pending(ino INTEGER PRIMARY KEY);";

/* Step a bound insert to completion, reset it, and map the result. A
 * constraint failure is the caller's duplicate, not a broken load. */
static int step_insert(cat_writer *w, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	int ret = 0;

	if (rc != SQLITE_DONE) {
		if ((rc & 0xff) == SQLITE_CONSTRAINT) {
			ret = -EEXIST;
		} else {
			ret = base_sqlite_errno(w->db, rc, what);
			w->failed = ret;
		}
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return ret;
}

/* SQLite reports bind failures (only NOMEM/RANGE/TOOBIG here) as result
 * codes; turn the first non-OK one into -errno. */
static int bind_check(cat_writer *w, int rc, const char *what)
{
	if (rc == SQLITE_OK)
		return 0;
	w->failed = base_sqlite_errno(w->db, rc, what);
	return w->failed;
}

/* Finalize the statements and close the database; returns the close
 * result (SQLITE_OK when nothing was open). */
static int writer_close_db(cat_writer *w)
{
	int rc = SQLITE_OK;

	base_sqlite_finalize(&w->ins_inode);
	base_sqlite_finalize(&w->ins_dirent);
	base_sqlite_finalize(&w->ins_xattr);
	base_sqlite_finalize(&w->ins_chunk);
	base_sqlite_finalize(&w->ins_pending);
	base_sqlite_finalize(&w->max_pos);
	if (w->db)
		rc = sqlite3_close(w->db);
	w->db = NULL;
	return rc;
}

static void writer_free(cat_writer *w)
{
	EVP_MD_CTX_free(w->tree);
	writer_close_db(w);
	free(w->path);
	free(w->tmp);
	free(w);
}

static int writer_setup_db(cat_writer *w)
{
	char *uri = NULL;
	char pragmas[256];
	int rc, ret;

	ret = base_sqlite_uri(w->tmp, NULL, &uri);
	if (ret)
		goto out;
	rc = sqlite3_open_v2(uri, &w->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
				 SQLITE_OPEN_URI,
			     NULL);
	if (rc != SQLITE_OK) {
		ret = base_sqlite_errno(w->db, rc, "writer_open");
		goto out;
	}
	sqlite3_extended_result_codes(w->db, 1);
	/* The file is private until the rename, so no locking, no fsync and
	 * a journal only in memory: it costs nothing here (every page is new,
	 * and new pages are not journaled) but keeps statement rollback on a
	 * duplicate row well defined. */
	snprintf(pragmas, sizeof(pragmas),
		 "PRAGMA page_size=4096;"
		 "PRAGMA journal_mode=MEMORY;"
		 "PRAGMA synchronous=OFF;"
		 "PRAGMA locking_mode=EXCLUSIVE;"
		 "PRAGMA temp_store=MEMORY;"
		 "PRAGMA cache_size=-65536;"
		 "PRAGMA application_id=%d;"
		 "PRAGMA user_version=%d;",
		 CAT_APP_ID, CAT_USER_VERSION);
	ret = base_sqlite_exec(w->db, pragmas, "writer_pragmas");
	if (ret)
		goto out;
	ret = base_sqlite_exec(w->db, "BEGIN", "writer_begin");
	if (ret)
		goto out;
	ret = base_sqlite_exec(w->db, schema_sql, "writer_schema");
	if (ret)
		goto out;
	ret = base_sqlite_prepare(
	    w->db,
	    "INSERT INTO inode(ino,kind,mode,uid,gid,size,nlink,mtime_ns,"
	    "ctime_ns,rdev,target,blocks) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,"
	    "?10,?11,?12)",
	    &w->ins_inode);
	if (ret)
		goto out;
	ret = base_sqlite_prepare(
	    w->db,
	    "INSERT INTO dirent(parent,pos,name,ino) VALUES(?1,?2,?3,?4)",
	    &w->ins_dirent);
	if (ret)
		goto out;
	ret = base_sqlite_prepare(
	    w->db, "INSERT INTO xattr(ino,name,value) VALUES(?1,?2,?3)",
	    &w->ins_xattr);
	if (ret)
		goto out;
	ret = base_sqlite_prepare(
	    w->db, "INSERT INTO chunk(ino,off,len,id) VALUES(?1,?2,?3,?4)",
	    &w->ins_chunk);
	if (ret)
		goto out;
	ret = base_sqlite_prepare(w->db, "INSERT INTO pending(ino) VALUES(?1)",
				  &w->ins_pending);
	if (ret)
		goto out;
	ret = base_sqlite_prepare(
	    w->db, "SELECT ifnull(max(pos),0) FROM dirent WHERE parent=?1",
	    &w->max_pos);
out:
	free(uri);
	return ret;
}

/* The digest's encoding: a tag byte, then fixed-width little-endian
 * fields, byte strings as a 32-bit length and the bytes. */
struct tree_rec {
	uint8_t b[96]; /* the longest, an inode: 1 + 10 * 8 */
	size_t n;
};

static void rec_u64(struct tree_rec *r, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		r->b[r->n++] = (uint8_t)(v >> (8 * i));
}

static void tree_feed(cat_writer *w, const struct tree_rec *r, const void *a,
		      size_t alen, const void *b, size_t blen)
{
	uint8_t len[4];

	if (w->failed)
		return;
	if (EVP_DigestUpdate(w->tree, r->b, r->n) != 1)
		w->failed = -EIO;
	for (int k = 0; k < 2 && !w->failed; k++) {
		const void *p = k ? b : a;
		size_t n = k ? blen : alen;

		if (!p)
			continue;
		for (int i = 0; i < 4; i++)
			len[i] = (uint8_t)(n >> (8 * i));
		if (EVP_DigestUpdate(w->tree, len, 4) != 1 ||
		    (n && EVP_DigestUpdate(w->tree, p, n) != 1))
			w->failed = -EIO;
	}
}

int cat_writer_open(const char *path, const struct cat_meta *meta,
		    cat_writer **ret_w)
{
	cat_writer *w = NULL;
	size_t plen;
	int fd, ret;

	if (ret_w)
		*ret_w = NULL;
	if (!path || !path[0] || !meta || !ret_w)
		return -EINVAL;
	if (meta->generation < 1 || meta->generation > INT64_MAX ||
	    meta->parent_generation > INT64_MAX ||
	    chunk_params_check(&meta->params))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->meta = *meta;
	plen = strlen(path);
	w->path = strdup(path);
	w->tmp = malloc(plen + sizeof(".tmp"));
	if (!w->path || !w->tmp) {
		ret = -ENOMEM;
		goto fail;
	}
	memcpy(w->tmp, path, plen);
	memcpy(w->tmp + plen, ".tmp", sizeof(".tmp"));

	/* A stale temp file is a previous run that died before its rename;
	 * nothing refers to it. O_EXCL then guarantees this writer owns the
	 * file SQLite opens (an empty file is a valid empty database). */
	if (unlink(w->tmp) && errno != ENOENT) {
		ret = -errno;
		goto fail;
	}
	fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
		goto fail;
	}
	close(fd);
	ret = writer_setup_db(w);
	if (ret) {
		cat_writer_abort(w);
		return ret;
	}
	/* The chunk parameters are part of what a manifest means. */
	w->tree = EVP_MD_CTX_new();
	if (!w->tree || EVP_DigestInit_ex(w->tree, EVP_sha256(), NULL) != 1) {
		cat_writer_abort(w);
		return -EIO;
	}
	{
		struct tree_rec r = {.b = {'P'}, .n = 1};

		rec_u64(&r, meta->params.min);
		rec_u64(&r, meta->params.avg);
		rec_u64(&r, meta->params.max);
		tree_feed(w, &r, NULL, 0, NULL, 0);
	}
	*ret_w = w;
	return 0;
fail:
	writer_free(w);
	return ret;
}

/* The same row rules as the reader's (cat_reader.c inode_from_row). */
static int inode_check(const struct cat_inode *in, const void *target,
		       size_t target_len)
{
	int fmt = cat_kind_ifmt((int)in->kind);

	if (in->ino < 1 || in->ino > INT64_MAX || fmt < 0)
		return -EINVAL;
	if ((in->mode & S_IFMT) != (uint32_t)fmt ||
	    (in->mode & ~(uint32_t)(S_IFMT | 07777)))
		return -EINVAL;
	if (in->size > CAT_SIZE_MAX || in->blocks > CAT_SIZE_MAX / 512 + 1)
		return -EINVAL;
	if (in->kind == CAT_LNK) {
		if (!target || target_len < 1 || target_len > CAT_TARGET_MAX ||
		    memchr(target, '\0', target_len) || in->size != target_len)
			return -EINVAL;
	} else {
		if (target || target_len)
			return -EINVAL;
		if (in->kind != CAT_REG && in->size != 0)
			return -EINVAL;
	}
	return 0;
}

int cat_writer_add_inode(cat_writer *w, const struct cat_inode *in,
			 const void *target, size_t target_len)
{
	sqlite3_stmt *st;
	int ret;

	if (!w || !in)
		return -EINVAL;
	if (w->failed)
		return w->failed;
	ret = inode_check(in, target, target_len);
	if (ret)
		return ret;
	st = w->ins_inode;
	ret = bind_check(w, sqlite3_bind_int64(st, 1, (sqlite3_int64)in->ino),
			 "bind");
	ret =
	    ret ? ret
		: bind_check(w, sqlite3_bind_int(st, 2, (int)in->kind), "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 3, in->mode), "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 4, in->uid), "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 5, in->gid), "bind");
	ret = ret ? ret
		  : bind_check(
			w, sqlite3_bind_int64(st, 6, (sqlite3_int64)in->size),
			"bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 7, in->nlink), "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 8, in->mtime_ns),
			       "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 9, in->ctime_ns),
			       "bind");
	/* rdev is stored as its 64-bit pattern; the reader casts back. */
	ret = ret ? ret
		  : bind_check(
			w, sqlite3_bind_int64(st, 10, (sqlite3_int64)in->rdev),
			"bind");
	if (!ret && in->kind == CAT_LNK)
		ret = bind_check(w,
				 sqlite3_bind_blob(st, 11, target,
						   (int)target_len,
						   SQLITE_STATIC),
				 "bind");
	else if (!ret)
		ret = bind_check(w, sqlite3_bind_null(st, 11), "bind");
	ret =
	    ret ? ret
		: bind_check(
		      w, sqlite3_bind_int64(st, 12, (sqlite3_int64)in->blocks),
		      "bind");
	if (ret) {
		sqlite3_clear_bindings(st);
		return ret;
	}
	ret = step_insert(w, st, "add_inode");
	if (ret)
		return ret;
	{
		struct tree_rec r = {.b = {'I'}, .n = 1};

		rec_u64(&r, in->ino);
		rec_u64(&r, (uint64_t)in->kind);
		rec_u64(&r, in->mode);
		rec_u64(&r, in->uid);
		rec_u64(&r, in->gid);
		rec_u64(&r, in->size);
		rec_u64(&r, in->nlink);
		rec_u64(&r, (uint64_t)in->mtime_ns);
		rec_u64(&r, (uint64_t)in->ctime_ns);
		rec_u64(&r, in->rdev);
		tree_feed(w, &r, in->kind == CAT_LNK ? target : NULL,
			  target_len, NULL, 0);
	}
	w->inodes++;
	/* Saturate: meta stores a signed 64-bit value. */
	if (in->kind == CAT_REG)
		w->bytes = in->size > (uint64_t)INT64_MAX - w->bytes
			       ? (uint64_t)INT64_MAX
			       : w->bytes + in->size;
	return 0;
}

/* The next pos for an entry of parent. Entries normally come in one run
 * per directory; if a caller returns to a directory later we continue its
 * numbering rather than restart it, so pos stays unique and 1..n. */
static int next_pos(cat_writer *w, uint64_t parent, uint64_t *ret_pos)
{
	sqlite3_stmt *st = w->max_pos;
	int rc, ret = 0;

	if (parent == w->dir_parent) {
		*ret_pos = w->dir_pos + 1;
		return 0;
	}
	ret = bind_check(w, sqlite3_bind_int64(st, 1, (sqlite3_int64)parent),
			 "bind");
	if (ret)
		goto out;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		ret = base_sqlite_errno(w->db, rc, "dirent_max_pos");
		w->failed = ret;
		goto out;
	}
	*ret_pos = (uint64_t)sqlite3_column_int64(st, 0) + 1;
out:
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return ret;
}

int cat_writer_add_dirent(cat_writer *w, uint64_t parent, const void *name,
			  size_t name_len, uint64_t ino)
{
	sqlite3_stmt *st;
	uint64_t pos = 0;
	int ret;

	if (!w)
		return -EINVAL;
	if (w->failed)
		return w->failed;
	ret = cat_name_check(name, name_len);
	if (ret)
		return ret;
	/* A dirent naming the root would make a directory cycle. */
	if (parent < 1 || parent > INT64_MAX || ino < 1 || ino > INT64_MAX ||
	    ino == CAT_ROOT_INO)
		return -EINVAL;
	ret = next_pos(w, parent, &pos);
	if (ret)
		return ret;
	st = w->ins_dirent;
	ret = bind_check(w, sqlite3_bind_int64(st, 1, (sqlite3_int64)parent),
			 "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 2, (sqlite3_int64)pos),
			       "bind");
	ret = ret ? ret
		  : bind_check(w,
			       sqlite3_bind_blob(st, 3, name, (int)name_len,
						 SQLITE_STATIC),
			       "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 4, (sqlite3_int64)ino),
			       "bind");
	if (ret) {
		sqlite3_clear_bindings(st);
		return ret;
	}
	/* The UNIQUE index dirent_name turns a duplicate into -EEXIST; pos
	 * is only consumed when the row went in. */
	ret = step_insert(w, st, "add_dirent");
	if (ret)
		return ret;
	{
		struct tree_rec r = {.b = {'D'}, .n = 1};

		rec_u64(&r, parent);
		rec_u64(&r, pos);
		rec_u64(&r, ino);
		tree_feed(w, &r, name, name_len, NULL, 0);
	}
	w->dir_parent = parent;
	w->dir_pos = pos;
	return 0;
}

int cat_writer_add_xattr(cat_writer *w, uint64_t ino, const void *name,
			 size_t name_len, const void *value, size_t value_len)
{
	sqlite3_stmt *st;
	int ret;

	if (!w)
		return -EINVAL;
	if (w->failed)
		return w->failed;
	ret = cat_xattr_name_check(name, name_len);
	if (ret)
		return ret;
	if (ino < 1 || ino > INT64_MAX || value_len > CAT_XATTR_VALUE_MAX ||
	    (!value && value_len))
		return -EINVAL;
	st = w->ins_xattr;
	ret = bind_check(w, sqlite3_bind_int64(st, 1, (sqlite3_int64)ino),
			 "bind");
	ret = ret ? ret
		  : bind_check(w,
			       sqlite3_bind_blob(st, 2, name, (int)name_len,
						 SQLITE_STATIC),
			       "bind");
	/* bind_blob with a NULL pointer stores SQL NULL; an empty value must
	 * be a zero-length blob. */
	if (!ret && value_len == 0)
		ret = bind_check(w, sqlite3_bind_zeroblob(st, 3, 0), "bind");
	else if (!ret)
		ret = bind_check(w,
				 sqlite3_bind_blob(st, 3, value, (int)value_len,
						   SQLITE_STATIC),
				 "bind");
	if (ret) {
		sqlite3_clear_bindings(st);
		return ret;
	}
	ret = step_insert(w, st, "add_xattr");
	if (ret == 0) {
		struct tree_rec r = {.b = {'X'}, .n = 1};

		rec_u64(&r, ino);
		tree_feed(w, &r, name, name_len, value ? value : "", value_len);
	}
	return ret;
}

int cat_writer_add_chunk(cat_writer *w, uint64_t ino, uint64_t off,
			 uint32_t len, const chunk_id *id)
{
	sqlite3_stmt *st;
	int ret;

	if (!w || !id)
		return -EINVAL;
	if (w->failed)
		return w->failed;
	if (ino < 1 || ino > INT64_MAX || len < 1 || len > w->meta.params.max ||
	    off > CAT_SIZE_MAX || len > CAT_SIZE_MAX - off)
		return -EINVAL;
	/* A file's manifest starts at 0 and has no gaps: the reader relies on
	 * contiguity to find the chunk covering any offset. Returning to an
	 * earlier file at 0 hits the primary key instead (-EEXIST). */
	if (ino == w->chunk_ino ? off != w->chunk_next : off != 0)
		return -EINVAL;
	st = w->ins_chunk;
	ret = bind_check(w, sqlite3_bind_int64(st, 1, (sqlite3_int64)ino),
			 "bind");
	ret = ret ? ret
		  : bind_check(w, sqlite3_bind_int64(st, 2, (sqlite3_int64)off),
			       "bind");
	ret = ret ? ret : bind_check(w, sqlite3_bind_int64(st, 3, len), "bind");
	ret = ret ? ret
		  : bind_check(w,
			       sqlite3_bind_blob(st, 4, id->b, CHUNK_ID_LEN,
						 SQLITE_STATIC),
			       "bind");
	if (ret) {
		sqlite3_clear_bindings(st);
		return ret;
	}
	ret = step_insert(w, st, "add_chunk");
	if (ret)
		return ret;
	w->chunk_ino = ino;
	w->chunk_next = off + len;
	return 0;
}

int cat_writer_add_pending(cat_writer *w, uint64_t ino)
{
	int ret;

	if (!w)
		return -EINVAL;
	if (w->failed)
		return w->failed;
	if (ino < 1 || ino > INT64_MAX)
		return -EINVAL;
	ret = bind_check(
	    w, sqlite3_bind_int64(w->ins_pending, 1, (sqlite3_int64)ino),
	    "bind");
	ret = ret ? ret : step_insert(w, w->ins_pending, "add_pending");
	if (ret == 0)
		w->pending++;
	return ret;
}

static int meta_put_int(cat_writer *w, sqlite3_stmt *st, const char *key,
			int64_t v)
{
	int ret;

	ret = bind_check(w, sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC),
			 "bind");
	ret = ret ? ret : bind_check(w, sqlite3_bind_int64(st, 2, v), "bind");
	return ret ? ret : step_insert(w, st, "meta");
}

static int meta_put_text(cat_writer *w, sqlite3_stmt *st, const char *key,
			 const char *v)
{
	int ret;

	ret = bind_check(w, sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC),
			 "bind");
	ret =
	    ret ? ret
		: bind_check(w, sqlite3_bind_text(st, 2, v, -1, SQLITE_STATIC),
			     "bind");
	return ret ? ret : step_insert(w, st, "meta");
}

static int tree_final(cat_writer *w)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_DigestFinal_ex(w->tree, md, &n) != 1 || n != 32)
		return -EIO;
	for (unsigned int i = 0; i < n; i++) {
		w->tree_hex[2 * i] = hex[md[i] >> 4];
		w->tree_hex[2 * i + 1] = hex[md[i] & 15];
	}
	w->tree_hex[64] = '\0';
	return 0;
}

void cat_writer_set_left_out(cat_writer *w, uint64_t n)
{
	w->meta.left_out = n;
}

void cat_writer_set_next_ino(cat_writer *w, uint64_t next)
{
	w->meta.next_ino = next;
}

static int write_meta(cat_writer *w)
{
	const struct cat_meta *m = &w->meta;
	sqlite3_stmt *st = NULL;
	int ret;

	ret = base_sqlite_prepare(
	    w->db, "INSERT INTO meta(key,value) VALUES(?1,?2)", &st);
	if (ret)
		goto out;
	ret = meta_put_text(w, st, "format", CAT_FORMAT);
	ret = ret ? ret
		  : meta_put_int(w, st, "generation", (int64_t)m->generation);
	ret = ret ? ret
		  : meta_put_int(w, st, "parent_generation",
				 (int64_t)m->parent_generation);
	ret = ret ? ret : meta_put_int(w, st, "created_ns", m->created_ns);
	ret = ret ? ret : meta_put_int(w, st, "chunk_min", m->params.min);
	ret = ret ? ret : meta_put_int(w, st, "chunk_avg", m->params.avg);
	ret = ret ? ret : meta_put_int(w, st, "chunk_max", m->params.max);
	ret = ret ? ret : meta_put_text(w, st, "hash", "sha256");
	ret = ret ? ret : meta_put_int(w, st, "inodes", (int64_t)w->inodes);
	ret = ret ? ret : meta_put_int(w, st, "bytes", (int64_t)w->bytes);
	ret = ret ? ret : meta_put_int(w, st, "pending", (int64_t)w->pending);
	ret = ret ? ret : meta_put_text(w, st, "tree_sha256", w->tree_hex);
	ret = ret ? ret : meta_put_int(w, st, "left_out", (int64_t)m->left_out);
out:
	base_sqlite_finalize(&st);
	return ret;
}

/* A catalog nobody can mount is worse than none: the root must be there
 * and be a directory, as the reader requires. */
static int check_root(cat_writer *w)
{
	sqlite3_stmt *st = NULL;
	int rc, ret;

	ret = base_sqlite_prepare(w->db, "SELECT kind FROM inode WHERE ino=1",
				  &st);
	if (ret)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		ret = sqlite3_column_int(st, 0) == CAT_DIR ? 0 : -EINVAL;
	else if (rc == SQLITE_DONE)
		ret = -EINVAL;
	else
		ret = base_sqlite_errno(w->db, rc, "check_root");
out:
	base_sqlite_finalize(&st);
	return ret;
}

/* Every pending ino is a regular file without chunk rows: its manifest
 * comes later, and a catalog that says both would be read two ways. */
static int check_pending(cat_writer *w)
{
	sqlite3_stmt *st = NULL;
	int rc, ret;

	if (w->pending == 0)
		return 0;
	ret = base_sqlite_prepare(
	    w->db,
	    "SELECT 1 FROM pending p LEFT JOIN inode i ON i.ino=p.ino"
	    " WHERE i.kind IS NOT 1 OR EXISTS(SELECT 1 FROM chunk c"
	    " WHERE c.ino=p.ino) LIMIT 1",
	    &st);
	if (ret)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		ret = -EINVAL;
	else if (rc != SQLITE_DONE)
		ret = base_sqlite_errno(w->db, rc, "check_pending");
out:
	base_sqlite_finalize(&st);
	return ret;
}

int cat_writer_commit(cat_writer *w)
{
	int rc, ret;

	if (!w)
		return -EINVAL;
	ret = w->failed;
	if (ret)
		goto fail;
	ret = check_root(w);
	if (ret)
		goto fail;
	ret = check_pending(w);
	if (ret)
		goto fail;
	ret = tree_final(w);
	if (ret)
		goto fail;
	ret = write_meta(w);
	if (ret)
		goto fail;
	ret = base_sqlite_exec(w->db, "COMMIT", "writer_commit");
	if (ret)
		goto fail;
	rc = writer_close_db(w);
	if (rc != SQLITE_OK) {
		ret = base_sqlite_errno(NULL, rc, "writer_close");
		goto fail;
	}
	/* synchronous=OFF wrote without fsync: make the bytes durable before
	 * the name points at them, then make the name durable. */
	ret = base_fsync_path(w->tmp);
	if (ret)
		goto fail;
	if (rename(w->tmp, w->path)) {
		ret = -errno;
		goto fail;
	}
	ret = base_fsync_parent(w->path);
	writer_free(w);
	return ret;
fail:
	cat_writer_abort(w);
	return ret;
}

void cat_writer_abort(cat_writer *w)
{
	if (!w)
		return;
	/* The temp file was never visible under path: dropping it is all the
	 * cleanup a failed or abandoned generation needs. */
	writer_close_db(w);
	unlink(w->tmp);
	writer_free(w);
}
