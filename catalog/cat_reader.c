/*
 * catalog/cat_reader.c — read-only access to one catalog generation
 * (destination side: FUSE lookups, readdir, chunk manifests).
 *
 * The catalog arrives from the network, so the file is untrusted input. The
 * connection is opened read-only, immutable (no locks, no change checks:
 * a published generation never changes) and with SQLite's defensive
 * settings; open checks the file's identity, schema and meta; and every row
 * is checked again before a field of it leaves this file. A bad row is
 * -EBADMSG (or skipped where the header says so), never a crash.
 *
 * One connection, one pthread mutex: every public call runs under it, so
 * callbacks must not re-enter the reader (the error-checking mutex turns
 * that mistake into -EDEADLK instead of a hang).
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "catalog/catalog.h"
#include "catalog/base/base.h"
#include "catalog/cat_reader_priv.h"

/* Largest single value SQLite will hand us. Names, targets and xattr values
 * are all far below; anything bigger is a hostile row (SQLITE_TOOBIG). */
#define READER_LENGTH_LIMIT (1 << 20)

/* blocks last: a format 1 catalog has none, and its statements read the
 * constant -1 in its place (v1_sql). */
#define INODE_COLS                                                             \
	"kind,mode,uid,gid,size,nlink,mtime_ns,ctime_ns,rdev,target,blocks"
#define INODE_COLS_I                                                           \
	"i.ino,i.kind,i.mode,i.uid,i.gid,i.size,i.nlink,i.mtime_ns,"           \
	"i.ctime_ns,i.rdev,i.target,i.blocks"

static const struct {
	size_t off;
	const char *sql;
} stmt_sql[] = {
    {offsetof(struct cat_reader, st_getattr),
     "SELECT " INODE_COLS " FROM inode WHERE ino=?1"},
    /* LEFT JOIN so a dirent whose inode is missing is seen (and refused)
     * instead of silently looking absent. */
    {offsetof(struct cat_reader, st_lookup),
     "SELECT " INODE_COLS_I " FROM dirent d LEFT JOIN inode i"
     " ON i.ino=d.ino WHERE d.parent=?1 AND d.name=?2"},
    {offsetof(struct cat_reader, st_readdir),
     "SELECT d.pos,d.name,d.ino," INODE_COLS_I " FROM dirent d"
     " LEFT JOIN inode i ON i.ino=d.ino"
     " WHERE d.parent=?1 AND d.pos>?2 ORDER BY d.pos"},
    {offsetof(struct cat_reader, st_xattr_get),
     "SELECT value FROM xattr WHERE ino=?1 AND name=?2"},
    {offsetof(struct cat_reader, st_xattr_list),
     "SELECT name FROM xattr WHERE ino=?1 ORDER BY name"},
    /* The chunk covering ?2 is the last one starting at or before it: one
     * seek for it, then a range scan up to ?3, never the whole file. */
    {offsetof(struct cat_reader, st_range),
     "SELECT off,len,id FROM chunk WHERE ino=?1 AND off >="
     " (SELECT ifnull(max(off),0) FROM chunk WHERE ino=?1 AND off<=?2)"
     " AND off<?3 ORDER BY off LIMIT ?4"},
    /* min(ino) makes the bare columns come from one row holding the id.
     * Inode order is the scan's depth-first order: sync fetches in the
     * order its writer walks the tree. Holes are nothing to fetch. */
    {offsetof(struct cat_reader, st_each),
     "SELECT c.off,c.len,c.id,c.ino,i.kind,i.size FROM"
     " (SELECT id,min(ino) AS ino,off,len FROM chunk"
     " WHERE id!=zeroblob(32) GROUP BY id) c"
     " LEFT JOIN inode i ON i.ino=c.ino ORDER BY c.ino, c.off"},
};

/* Integer column within [lo, hi]; a wrong type (text, blob, NULL, real)
 * fails too, so no implicit conversion hides a malformed row. */
int cat__col_int(sqlite3_stmt *st, int col, int64_t lo, int64_t hi,
		 int64_t *ret)
{
	int64_t v;

	if (sqlite3_column_type(st, col) != SQLITE_INTEGER)
		return -EBADMSG;
	v = sqlite3_column_int64(st, col);
	if (v < lo || v > hi)
		return -EBADMSG;
	*ret = v;
	return 0;
}

/* Decode and check one inode from columns col..col+10 (INODE_COLS order).
 * *ret_target (optional) borrows the symlink text, valid until the next
 * step/reset of st. Same rules as the writer's inode_check. */
static int inode_from_row(sqlite3_stmt *st, int col, uint64_t ino,
			  struct cat_inode *ret, const void **ret_target)
{
	int64_t kind, mode, uid, gid, size, nlink, mt, ct, rdev, blocks;
	const void *target = NULL;
	int fmt, tlen;

	if (cat__col_int(st, col + 0, CAT_REG, CAT_SOCK, &kind) ||
	    cat__col_int(st, col + 1, 0, UINT32_MAX, &mode) ||
	    cat__col_int(st, col + 2, 0, UINT32_MAX, &uid) ||
	    cat__col_int(st, col + 3, 0, UINT32_MAX, &gid) ||
	    cat__col_int(st, col + 4, 0, (int64_t)CAT_SIZE_MAX, &size) ||
	    cat__col_int(st, col + 5, 0, UINT32_MAX, &nlink) ||
	    cat__col_int(st, col + 6, INT64_MIN, INT64_MAX, &mt) ||
	    cat__col_int(st, col + 7, INT64_MIN, INT64_MAX, &ct) ||
	    cat__col_int(st, col + 8, INT64_MIN, INT64_MAX, &rdev) ||
	    cat__col_int(st, col + 10, -1, (int64_t)(CAT_SIZE_MAX / 512 + 1),
			 &blocks))
		return -EBADMSG;
	fmt = cat_kind_ifmt((int)kind);
	if ((mode & S_IFMT) != fmt || (mode & ~(int64_t)(S_IFMT | 07777)))
		return -EBADMSG;
	if (kind == CAT_LNK) {
		if (sqlite3_column_type(st, col + 9) != SQLITE_BLOB)
			return -EBADMSG;
		target = sqlite3_column_blob(st, col + 9);
		tlen = sqlite3_column_bytes(st, col + 9);
		if (!target || tlen < 1 || (unsigned)tlen > CAT_TARGET_MAX ||
		    size != tlen || memchr(target, '\0', (size_t)tlen))
			return -EBADMSG;
	} else {
		if (sqlite3_column_type(st, col + 9) != SQLITE_NULL)
			return -EBADMSG;
		if (kind != CAT_REG && size != 0)
			return -EBADMSG;
	}
	memset(ret, 0, sizeof(*ret));
	ret->ino = ino;
	ret->kind = (enum cat_kind)kind;
	ret->mode = (uint32_t)mode;
	ret->uid = (uint32_t)uid;
	ret->gid = (uint32_t)gid;
	ret->size = (uint64_t)size;
	ret->nlink = (uint32_t)nlink;
	ret->mtime_ns = mt;
	ret->ctime_ns = ct;
	ret->rdev = (uint64_t)rdev;
	/* -1: format 1, which does not say; a dense file's count */
	ret->blocks =
	    blocks >= 0 ? (uint64_t)blocks : ((uint64_t)size + 511) / 512;
	if (ret_target)
		*ret_target = target;
	return 0;
}

/* sqlite3_step as 1 (row), 0 (done) or -errno. */
int cat__step(cat_reader *r, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return base_sqlite_errno(r->db, rc, what);
}

void cat__done(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

/* Catalog keys are 1..INT64_MAX; anything else cannot be in it. */
static int key_ok(uint64_t v)
{
	return v >= 1 && v <= INT64_MAX;
}

int cat__reader_lock(cat_reader *r)
{
	int e = pthread_mutex_lock(&r->mu);

	return e ? -e : 0;
}

/* getattr with the reader locked; *ret_target as in inode_from_row, valid
 * until st_getattr is reset (the caller calls cat__done()). */
int cat__getattr_locked(cat_reader *r, uint64_t ino, struct cat_inode *ret,
			const void **ret_target)
{
	sqlite3_stmt *st = r->st_getattr;
	int ret_rc;

	if (!key_ok(ino))
		return -ENOENT;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	ret_rc = cat__step(r, st, "getattr");
	if (ret_rc == 0)
		ret_rc = -ENOENT;
	else if (ret_rc == 1)
		ret_rc = inode_from_row(st, 0, ino, ret, ret_target);
	return ret_rc;
}

int cat_getattr(cat_reader *r, uint64_t ino, struct cat_inode *ret)
{
	int ret_rc;

	if (!r || !ret)
		return -EINVAL;
	ret_rc = cat__reader_lock(r);
	if (ret_rc)
		return ret_rc;
	ret_rc = cat__getattr_locked(r, ino, ret, NULL);
	cat__done(r->st_getattr);
	pthread_mutex_unlock(&r->mu);
	return ret_rc;
}

int cat_lookup(cat_reader *r, uint64_t parent, const void *name,
	       size_t name_len, struct cat_inode *ret)
{
	sqlite3_stmt *st;
	int64_t ino;
	int rc;

	if (!r || !ret)
		return -EINVAL;
	/* A name that fails the check can never be handed out, whatever a
	 * hostile catalog holds under it. */
	rc = cat_name_check(name, name_len);
	if (rc)
		return rc;
	if (!key_ok(parent))
		return -ENOENT;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	st = r->st_lookup;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)parent);
	sqlite3_bind_blob(st, 2, name, (int)name_len, SQLITE_STATIC);
	rc = cat__step(r, st, "lookup");
	if (rc == 0) {
		rc = -ENOENT;
	} else if (rc == 1) {
		/* NULL ino: the dirent points at no inode row. */
		rc = cat__col_int(st, 0, 1, INT64_MAX, &ino);
		if (!rc)
			rc = inode_from_row(st, 1, (uint64_t)ino, ret, NULL);
	}
	cat__done(st);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* Check that dir exists and is a directory (lock held). */
static int check_dir_locked(cat_reader *r, uint64_t dir)
{
	struct cat_inode in;
	int rc = cat__getattr_locked(r, dir, &in, NULL);

	cat__done(r->st_getattr);
	if (rc)
		return rc;
	return in.kind == CAT_DIR ? 0 : -ENOTDIR;
}

int cat_readdir(cat_reader *r, uint64_t dir, uint64_t after_pos,
		cat_dirent_cb cb, void *ctx)
{
	struct cat_inode in;
	sqlite3_stmt *st;
	int64_t pos, ino, prev = 0;
	const void *name;
	int nlen, rc;

	if (!r || !cb)
		return -EINVAL;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	rc = check_dir_locked(r, dir);
	if (rc)
		goto unlock;
	if (after_pos >= INT64_MAX)
		goto unlock; /* no pos can be larger */
	st = r->st_readdir;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)dir);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)after_pos);
	while ((rc = cat__step(r, st, "readdir")) == 1) {
		/* pos must rise strictly, or resuming "after pos" could skip
		 * or repeat entries. */
		if (cat__col_int(st, 0, 1, INT64_MAX, &pos) || pos <= prev) {
			rc = -EBADMSG;
			break;
		}
		prev = pos;
		name = sqlite3_column_blob(st, 1);
		nlen = sqlite3_column_bytes(st, 1);
		/* The header's rule: an unsafe name is skipped, not served. */
		if (sqlite3_column_type(st, 1) != SQLITE_BLOB ||
		    cat_name_check(name, (size_t)nlen))
			continue;
		if (cat__col_int(st, 3, 1, INT64_MAX, &ino) ||
		    inode_from_row(st, 4, (uint64_t)ino, &in, NULL)) {
			rc = -EBADMSG;
			break;
		}
		rc = cb(ctx, name, (size_t)nlen, &in, (uint64_t)pos);
		if (rc)
			break;
	}
	cat__done(st);
unlock:
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_readlink(cat_reader *r, uint64_t ino, void *buf, size_t cap,
		 size_t *ret_len)
{
	struct cat_inode in;
	const void *target = NULL;
	int rc;

	if (!r || !ret_len || (!buf && cap))
		return -EINVAL;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	rc = cat__getattr_locked(r, ino, &in, &target);
	if (rc)
		goto out;
	if (in.kind != CAT_LNK) {
		rc = -EINVAL;
		goto out;
	}
	/* inode_from_row checked size == target length. */
	*ret_len = (size_t)in.size;
	if (cap < in.size) {
		rc = -ERANGE;
		goto out;
	}
	memcpy(buf, target, (size_t)in.size);
out:
	cat__done(r->st_getattr);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_getxattr(cat_reader *r, uint64_t ino, const void *name, size_t name_len,
		 void *buf, size_t cap, size_t *ret_len)
{
	sqlite3_stmt *st;
	const void *v;
	int vlen, rc;

	if (!r || !ret_len || (!buf && cap))
		return -EINVAL;
	rc = cat_xattr_name_check(name, name_len);
	if (rc)
		return rc;
	if (!key_ok(ino))
		return -ENODATA;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	st = r->st_xattr_get;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	sqlite3_bind_blob(st, 2, name, (int)name_len, SQLITE_STATIC);
	rc = cat__step(r, st, "getxattr");
	if (rc <= 0) {
		rc = rc ? rc : -ENODATA;
		goto out;
	}
	rc = 0;
	/* column_blob of a zero-length blob is NULL; the length is what
	 * matters. */
	v = sqlite3_column_blob(st, 0);
	vlen = sqlite3_column_bytes(st, 0);
	if (sqlite3_column_type(st, 0) != SQLITE_BLOB || vlen < 0 ||
	    (unsigned)vlen > CAT_XATTR_VALUE_MAX) {
		rc = -EBADMSG;
		goto out;
	}
	*ret_len = (size_t)vlen;
	if (cap == 0)
		goto out;
	if (cap < (size_t)vlen) {
		rc = -ERANGE;
		goto out;
	}
	if (vlen)
		memcpy(buf, v, (size_t)vlen);
out:
	cat__done(st);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int cat_listxattr(cat_reader *r, uint64_t ino, void *buf, size_t cap,
		  size_t *ret_len)
{
	sqlite3_stmt *st;
	const void *name;
	size_t total = 0;
	int nlen, rc;

	if (!r || !ret_len || (!buf && cap))
		return -EINVAL;
	*ret_len = 0;
	if (!key_ok(ino))
		return 0;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	st = r->st_xattr_list;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
	while ((rc = cat__step(r, st, "listxattr")) == 1) {
		name = sqlite3_column_blob(st, 0);
		nlen = sqlite3_column_bytes(st, 0);
		/* A name with a NUL would corrupt the NUL-separated list;
		 * like readdir, unsafe names are skipped. */
		if (sqlite3_column_type(st, 0) != SQLITE_BLOB ||
		    cat_xattr_name_check(name, (size_t)nlen))
			continue;
		if (cap && total + (size_t)nlen + 1 > cap) {
			rc = -ERANGE;
			break;
		}
		if (cap) {
			memcpy((char *)buf + total, name, (size_t)nlen);
			((char *)buf)[total + (size_t)nlen] = '\0';
		}
		total += (size_t)nlen + 1;
	}
	if (rc == 0)
		*ret_len = total;
	cat__done(st);
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* Read PRAGMA name as one integer. */
static int pragma_int(cat_reader *r, const char *sql, int64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = base_sqlite_prepare(r->db, sql, &st);
	if (rc)
		goto out;
	rc = cat__step(r, st, "open_pragma");
	if (rc == 1)
		rc = cat__col_int(st, 0, INT64_MIN, INT64_MAX, ret);
	else if (rc == 0)
		rc = -EBADMSG;
out:
	base_sqlite_finalize(&st);
	return rc;
}

/* The five tables, and dirent_name as a UNIQUE index on (parent, name):
 * without it a hostile catalog could hold two entries of one name. */
static int check_schema(cat_reader *r)
{
	int64_t v;
	int rc;

	rc = pragma_int(
	    r,
	    "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN"
	    " ('meta','inode','dirent','xattr','chunk','pending')",
	    &v);
	if (rc)
		return rc;
	/* Format 2 adds the pending table; format 1 has none. */
	if (v != (r->version == 1 ? 5 : 6))
		return -EBADMSG;
	rc = pragma_int(r,
			"SELECT count(*) FROM pragma_index_list('dirent')"
			" WHERE name='dirent_name' AND \"unique\"=1",
			&v);
	if (rc)
		return rc;
	if (v != 1)
		return -EBADMSG;
	rc = pragma_int(r,
			"SELECT group_concat(name) = 'parent,name' FROM"
			" (SELECT name FROM pragma_index_info('dirent_name') "
			"ORDER BY seqno)",
			&v);
	if (rc)
		return rc;
	return v == 1 ? 0 : -EBADMSG;
}

/* Unsigned meta value stored as INTEGER within [lo, hi]. */
static int meta_u64(sqlite3_stmt *st, int64_t lo, int64_t hi, uint64_t *ret)
{
	int64_t v;

	if (cat__col_int(st, 1, lo, hi, &v))
		return -EBADMSG;
	*ret = (uint64_t)v;
	return 0;
}

/* Read and check the meta table into r->meta. Every key is required. */
static int read_meta(cat_reader *r)
{
	enum {
		F_FORMAT = 1,
		F_GEN = 2,
		F_PGEN = 4,
		F_CREATED = 8,
		F_MIN = 16,
		F_AVG = 32,
		F_MAX = 64,
		F_HASH = 128,
		F_INODES = 256,
		F_BYTES = 512,
		F_ALL = 1023
	};
	struct cat_meta *m = &r->meta;
	sqlite3_stmt *st = NULL;
	const char *key, *text;
	uint64_t u;
	unsigned seen = 0;
	int rc;

	rc = base_sqlite_prepare(r->db, "SELECT key,value FROM meta", &st);
	if (rc)
		goto out;
	while ((rc = cat__step(r, st, "read_meta")) == 1) {
		if (sqlite3_column_type(st, 0) != SQLITE_TEXT) {
			rc = -EBADMSG;
			goto out;
		}
		key = (const char *)sqlite3_column_text(st, 0);
		rc = -EBADMSG;
		if (!key)
			goto out;
		if (!strcmp(key, "format") || !strcmp(key, "hash")) {
			int is_format = key[0] == 'f';

			text = sqlite3_column_type(st, 1) == SQLITE_TEXT
				   ? (const char *)sqlite3_column_text(st, 1)
				   : NULL;
			if (!text ||
			    strcmp(text, !is_format	   ? "sha256"
					 : r->version == 1 ? CAT_FORMAT_1
							   : CAT_FORMAT))
				goto out;
			seen |= is_format ? F_FORMAT : F_HASH;
		} else if (!strcmp(key, "generation")) {
			if (meta_u64(st, 1, INT64_MAX, &m->generation))
				goto out;
			seen |= F_GEN;
		} else if (!strcmp(key, "parent_generation")) {
			if (meta_u64(st, 0, INT64_MAX, &m->parent_generation))
				goto out;
			seen |= F_PGEN;
		} else if (!strcmp(key, "created_ns")) {
			if (cat__col_int(st, 1, INT64_MIN, INT64_MAX,
					 &m->created_ns))
				goto out;
			seen |= F_CREATED;
		} else if (!strcmp(key, "chunk_min")) {
			if (meta_u64(st, 0, UINT32_MAX, &u))
				goto out;
			m->params.min = (uint32_t)u;
			seen |= F_MIN;
		} else if (!strcmp(key, "chunk_avg")) {
			if (meta_u64(st, 0, UINT32_MAX, &u))
				goto out;
			m->params.avg = (uint32_t)u;
			seen |= F_AVG;
		} else if (!strcmp(key, "chunk_max")) {
			if (meta_u64(st, 0, UINT32_MAX, &u))
				goto out;
			m->params.max = (uint32_t)u;
			seen |= F_MAX;
		} else if (!strcmp(key, "inodes")) {
			if (meta_u64(st, 0, INT64_MAX, &m->inodes))
				goto out;
			seen |= F_INODES;
		} else if (!strcmp(key, "bytes")) {
			if (meta_u64(st, 0, INT64_MAX, &m->bytes))
				goto out;
			seen |= F_BYTES;
		} else if (!strcmp(key, "pending")) {
			if (meta_u64(st, 0, INT64_MAX, &m->pending))
				goto out;
		} else if (!strcmp(key, "left_out")) {
			if (meta_u64(st, 0, INT64_MAX, &m->left_out))
				goto out;
		} else if (!strcmp(key, "next_ino")) {
			if (meta_u64(st, 2, INT64_MAX, &m->next_ino))
				goto out;
		} else if (!strcmp(key, "tree_sha256")) {
			/* Optional (older writers have none), but exact. */
			text = sqlite3_column_type(st, 1) == SQLITE_TEXT
				   ? (const char *)sqlite3_column_text(st, 1)
				   : NULL;
			if (!text || strlen(text) != 64 ||
			    strspn(text, "0123456789abcdef") != 64)
				goto out;
			memcpy(m->tree_sha256, text, 65);
		}
		/* Unknown keys are ignored: room for additions within a
		 * format revision. */
	}
	if (rc < 0)
		goto out;
	rc = seen == F_ALL && !chunk_params_check(&m->params) ? 0 : -EBADMSG;
out:
	base_sqlite_finalize(&st);
	return rc;
}

static void reader_free(cat_reader *r)
{
	cat__snap_end(r);
	for (size_t i = 0; i < sizeof(stmt_sql) / sizeof(stmt_sql[0]); i++)
		base_sqlite_finalize(
		    (sqlite3_stmt **)((char *)r + stmt_sql[i].off));
	cat__chunks_fini(r);
	if (r->db)
		sqlite3_close(r->db);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* Open the connection with the settings meant for untrusted files. */
static int reader_connect(cat_reader *r, const char *path)
{
	char *uri = NULL;
	int rc;

	/* immutable=1: no locking and no change detection, which saves
	 * syscalls on every query; a published catalog never changes. */
	rc = base_sqlite_uri(path, "immutable=1", &uri);
	if (rc)
		goto out;
	rc = sqlite3_open_v2(
	    uri, &r->db,
	    SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(r->db, rc, "reader_open");
		goto out;
	}
	sqlite3_extended_result_codes(r->db, 1);
	/* SQLite's advice for files from elsewhere: defensive mode, no
	 * functions run from the schema, bounded value sizes, cell checks. */
	sqlite3_db_config(r->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	sqlite3_db_config(r->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	sqlite3_limit(r->db, SQLITE_LIMIT_LENGTH, READER_LENGTH_LIMIT);
	rc = base_sqlite_exec(r->db,
			      "PRAGMA query_only=1;"
			      "PRAGMA cell_size_check=ON;"
			      "PRAGMA mmap_size=17179869184;",
			      "reader_pragmas");
out:
	free(uri);
	return rc;
}

/* A statement for a format 1 catalog: its inode table has no blocks
 * column, so ",blocks" and ",i.blocks" read -1. malloc'd, NULL when out
 * of memory. */
static char *v1_sql(const char *sql)
{
	static const char *const cols[] = {",i.blocks", ",blocks"};
	char *out = malloc(strlen(sql) + 1), *o = out;

	if (!out)
		return NULL;
	while (*sql) {
		size_t k;

		for (k = 0; k < 2; k++) {
			size_t n = strlen(cols[k]);

			if (!strncmp(sql, cols[k], n)) {
				memcpy(o, ",-1", 3);
				o += 3;
				sql += n;
				break;
			}
		}
		if (k == 2)
			*o++ = *sql++;
	}
	*o = '\0';
	return out;
}

/* Identity, schema, meta, statements and root, in that order: each step
 * only runs on a file that passed the ones before. */
static int reader_check(cat_reader *r)
{
	struct cat_inode root;
	int64_t v;
	int rc;

	rc = pragma_int(r, "PRAGMA application_id", &v);
	if (rc)
		return rc;
	if (v != CAT_APP_ID)
		return -EBADMSG;
	rc = pragma_int(r, "PRAGMA user_version", &v);
	if (rc)
		return rc;
	/* A later format of ours is not garbage: the caller can say "this
	 * build is too old" (ferry sync's exit 2). */
	if (v > CAT_USER_VERSION)
		return -EPROTONOSUPPORT;
	if (v != 1 && v != CAT_USER_VERSION)
		return -EBADMSG;
	r->version = (int)v;
	rc = check_schema(r);
	if (rc)
		return rc;
	rc = read_meta(r);
	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(stmt_sql) / sizeof(stmt_sql[0]); i++) {
		char *v1 = r->version == 1 ? v1_sql(stmt_sql[i].sql) : NULL;

		if (r->version == 1 && !v1)
			return -ENOMEM;
		rc = base_sqlite_prepare(
		    r->db, v1 ? v1 : stmt_sql[i].sql,
		    (sqlite3_stmt **)((char *)r + stmt_sql[i].off));
		free(v1);
		/* A table without the expected columns fails to prepare
		 * (SQLITE_ERROR, -EIO): that is a foreign file. */
		if (rc == -EIO)
			rc = -EBADMSG;
		if (rc)
			return rc;
	}
	if (r->version >= 2) {
		rc = base_sqlite_prepare(r->db,
					 "SELECT 1 FROM pending WHERE ino=?1",
					 &r->st_pending);
		if (!rc)
			rc = base_sqlite_prepare(
			    r->db,
			    "SELECT p.ino,i.kind,i.size FROM main.pending p"
			    " LEFT JOIN main.inode i ON i.ino=p.ino"
			    " WHERE p.ino BETWEEN ?1 AND ?2 ORDER BY p.ino",
			    &r->st_pending_each);
		if (rc == -EIO)
			rc = -EBADMSG;
		if (rc)
			return rc;
	}
	rc = cat__getattr_locked(r, CAT_ROOT_INO, &root, NULL);
	cat__done(r->st_getattr);
	if (rc == -ENOENT || (!rc && root.kind != CAT_DIR))
		rc = -EBADMSG;
	return rc;
}

int cat_reader_open(const char *path, cat_reader **ret_r)
{
	pthread_mutexattr_t ma;
	cat_reader *r = NULL;
	struct stat sb;
	int rc;

	if (ret_r)
		*ret_r = NULL;
	if (!path || !path[0] || !ret_r)
		return -EINVAL;
	/* Tell "no catalog" from "bad catalog" before SQLite blurs both
	 * into SQLITE_CANTOPEN. */
	if (stat(path, &sb))
		return -errno;
	if (!S_ISREG(sb.st_mode))
		return -EBADMSG;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* ERRORCHECK: a callback re-entering the reader gets -EDEADLK
	 * instead of hanging the thread. */
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
	rc = -pthread_mutex_init(&r->mu, &ma);
	pthread_mutexattr_destroy(&ma);
	if (rc) {
		free(r);
		return rc;
	}
	rc = reader_connect(r, path);
	if (!rc)
		rc = reader_check(r);
	if (rc) {
		reader_free(r);
		return rc;
	}
	*ret_r = r;
	return 0;
}

void cat_reader_close(cat_reader *r)
{
	if (r)
		reader_free(r);
}

void cat_reader_meta(cat_reader *r, struct cat_meta *ret)
{
	/* Set once at open and never written again: no lock needed. */
	*ret = r->meta;
}

int cat_next_ino(cat_reader *r, uint64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int64_t max = 0;
	int rc;

	if (!r || !ret)
		return -EINVAL;
	if (r->meta.next_ino) {
		*ret = r->meta.next_ino;
		return 0;
	}
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	rc = sqlite3_prepare_v2(r->db, "SELECT max(ino) FROM inode", -1, &st,
				NULL);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(r->db, rc, "prepare max(ino)");
	} else {
		rc = cat__step(r, st, "max(ino)");
		if (rc == 1)
			rc = cat__col_int(st, 0, CAT_ROOT_INO, INT64_MAX - 1,
					  &max);
		else if (rc == 0)
			rc = -EBADMSG;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&r->mu);
	if (rc < 0)
		return rc;
	*ret = (uint64_t)max + 1;
	return 0;
}
