/*
 * catalog/cat_check.c — the tree rule: a catalog's entries must form one
 * tree of directories rooted at CAT_ROOT_INO, checked whole before
 * anything walks the catalog (docs/catalog.md, "The tree rule").
 *
 * Why whole and up front: every consumer walks from the root (the mount
 * as it is browsed, `ferry sync` and `ferry verify` all of it, the S3
 * listing by prefix). A catalog whose root lists `a -> 1` and `b -> 1`
 * is a graph: each such level doubles the paths, so a 908-byte file made
 * sync create 245,935 directories before its depth limit of 256 could
 * matter (2^256 branches). The row checks of cat_reader.c see one row
 * at a time and cannot tell; only the table as a whole can.
 *
 * The rule, over the dirent and inode tables (D = directory inodes):
 *   R1 every dirent's parent is a directory inode (an integer key);
 *   R2 every dirent names an inode that exists;
 *   R3 exactly D - 1 entries name directories;
 *   R4 every directory is reached from the root, following the entries
 *      that name directories.
 * Why these four are the tree: by R4 each directory but the root is
 * reached through an entry naming it, so the D - 1 of them have at least
 * one name each; R3 leaves no name over, so each has exactly one and the
 * root none. D directories joined by D - 1 entries, all reached from
 * the root, are a tree: no cycle, no second parent (a directory hard
 * link, an entry back to an ancestor or to the root), no orphan. R1 and
 * R2 put every other entry under a directory of it, naming something.
 * Neither count alone is enough: root -> a, root -> b, a -> c, b -> c
 * with an orphan directory d has D - 1 entries naming directories (c
 * twice, d never), and two directories naming each other where the root
 * does not reach them each have exactly one name; R4 refuses both.
 *
 * R4 is a walk breadth first with UNION: a directory is queued once
 * however many entries name it, so the walk ends on any graph (a cycle
 * included) after expanding each directory once, and a hostile catalog
 * cannot make it revisit a big directory once per name (which UNION ALL
 * with a row limit would: names x entries, quadratic). Its comparisons
 * are the reader's: an entry is followed when its parent equals a
 * directory's integer ino, and a child is known by the inode row's own
 * key (i.ino), as cat_readdir does; so whatever the reader could be made
 * to walk, this walks too (a hostile text '5' in dirent.ino is inode 5
 * for both).
 *
 * Cost, with E entries: R1 one scan of dirent's key (the covering index)
 * and an inode seek per distinct parent; D one scan of inode; R2 and R3
 * one scan of dirent with an inode seek per entry; R4 a seek per
 * directory and an inode seek per entry under it. O(E log E) in all:
 * 0.3 s of CPU per million entries with 1% directories, 0.6 s with 10%
 * (docs/catalog.md). Memory does not grow with the catalog: the walk's
 * queue (directories of about one level, breadth first) and its set of
 * directories seen are SQLite temporary b-trees, kept within its page
 * cache and spilled to temporary files. Still too much to pay on every
 * open of a 100M-entry catalog (a mount opens several readers, the
 * replicator one per pack request), so the reader does not run it by
 * itself: the hydrator runs it where a catalog enters its cache and
 * remembers the verdict beside the file (cat_check_remember). Naming
 * what is wrong takes more scans; only a refused catalog pays for them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/cat_reader_priv.h"
#include "catalog/catalog.h"

/* R1: dirent's key starts with parent, so DISTINCT parent is a walk of
 * an index, with one inode seek per directory that has entries. */
static const char sql_parents[] =
    "SELECT p.parent FROM (SELECT DISTINCT parent FROM dirent) p"
    " LEFT JOIN inode i ON i.ino=p.parent"
    " WHERE typeof(p.parent)!='integer' OR i.kind IS NOT 2 LIMIT 1";

static const char sql_dirs[] = "SELECT count(*) FROM inode WHERE kind=2";

/* R2 and R3: every entry, joined to its inode (LEFT: a missing one is
 * NULL). */
static const char sql_counts[] =
    "SELECT count(*) FILTER (WHERE i.kind=2),"
    " count(*) FILTER (WHERE i.ino IS NULL)"
    " FROM dirent d LEFT JOIN inode i ON i.ino=d.ino";

/* R4: UNION, so a directory is queued and expanded once (see above). */
#define WALK                                                                   \
	"WITH RECURSIVE w(ino) AS (SELECT 1 UNION"                             \
	" SELECT i.ino FROM w JOIN dirent d ON d.parent=w.ino"                 \
	" JOIN inode i ON i.ino=d.ino WHERE i.kind=2)"
static const char sql_walk[] = WALK " SELECT count(*) FROM w";

/* Only for a refused catalog, to name what is wrong (full scans). */
static const char sql_dangling[] =
    "SELECT d.parent, d.ino FROM dirent d WHERE NOT EXISTS"
    " (SELECT 1 FROM inode i WHERE i.ino=d.ino) LIMIT 1";
/* Grouped by i.ino, the inode row's own key, as the walk knows it. */
static const char sql_names[] =
    "SELECT i.ino, count(*), min(d.parent), max(d.parent)"
    " FROM dirent d JOIN inode i ON i.ino=d.ino WHERE i.kind=2"
    " GROUP BY i.ino HAVING i.ino=1 OR count(*)>1 LIMIT 1";
/* A directory the walk does not reach, and an entry naming it. */
static const char sql_missed[] =
    WALK " SELECT i.ino, (SELECT d.parent FROM dirent d WHERE d.ino=i.ino"
	 " LIMIT 1) FROM inode i WHERE i.kind=2 AND i.ino NOT IN w LIMIT 1";

__attribute__((format(printf, 3, 4))) static int refuse(char *why, size_t cap,
							const char *fmt, ...)
{
	va_list ap;

	if (why && cap) {
		va_start(ap, fmt);
		vsnprintf(why, cap, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

/* Prepare sql and step once: 1 (a row, *ret_st holds it), 0 (none),
 * -errno. A failure to prepare is a catalog whose tables are not ours
 * (a column missing): -EBADMSG. */
static int query(cat_reader *r, const char *sql, sqlite3_stmt **ret_st)
{
	int rc;

	rc = sqlite3_prepare_v2(r->db, sql, -1, ret_st, NULL);
	if (rc != SQLITE_OK) {
		rc = base_sqlite_errno(r->db, rc, "tree check prepare");
		return rc == -EIO ? -EBADMSG : rc;
	}
	return cat__step(r, *ret_st, "tree check");
}

/* A count of one row and column. */
static int one_int(cat_reader *r, const char *sql, int64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int rc = query(r, sql, &st);

	if (rc == 1)
		rc = cat__col_int(st, 0, 1, INT64_MAX - 1, ret);
	else if (rc == 0)
		rc = -EBADMSG;
	sqlite3_finalize(st);
	return rc;
}

/* A column as a number for a message (what a hostile non-integer is
 * shown as does not matter: the catalog is refused either way). */
static long long num(sqlite3_stmt *st, int col)
{
	return (long long)sqlite3_column_int64(st, col);
}

static int check_parents(cat_reader *r, char *why, size_t cap)
{
	sqlite3_stmt *st = NULL;
	int rc = query(r, sql_parents, &st);

	if (rc == 1)
		rc = refuse(why, cap,
			    "inode %lld holds entries but is not a directory "
			    "(or does not exist)",
			    num(st, 0));
	sqlite3_finalize(st);
	return rc;
}

/* The counts or the walk disagreed: say why, the first fault found of
 * an entry naming nothing, a directory named twice or the root named, a
 * directory not reached. 0 when none is found (the caller then says it
 * in numbers). */
static int name_fault(cat_reader *r, char *why, size_t cap)
{
	sqlite3_stmt *st = NULL;
	int rc = query(r, sql_dangling, &st);

	if (rc == 1)
		rc = refuse(why, cap,
			    "an entry in directory %lld names inode %lld, "
			    "which does not exist",
			    num(st, 0), num(st, 1));
	sqlite3_finalize(st);
	st = NULL;
	if (rc != 0)
		return rc;
	rc = query(r, sql_names, &st);
	if (rc == 1 && num(st, 0) == CAT_ROOT_INO)
		rc = refuse(why, cap,
			    "the root directory (inode 1) is named by an "
			    "entry in directory %lld: a cycle",
			    num(st, 2));
	else if (rc == 1 && num(st, 2) == num(st, 3))
		rc = refuse(why, cap,
			    "directory inode %lld is named by %lld entries "
			    "in directory %lld: a directory hard link",
			    num(st, 0), num(st, 1), num(st, 2));
	else if (rc == 1)
		rc = refuse(why, cap,
			    "directory inode %lld is named by %lld entries "
			    "(in directories %lld and %lld): a directory "
			    "hard link, or an entry back to an ancestor",
			    num(st, 0), num(st, 1), num(st, 2), num(st, 3));
	sqlite3_finalize(st);
	st = NULL;
	if (rc != 0)
		return rc;
	rc = query(r, sql_missed, &st);
	if (rc == 1 && sqlite3_column_type(st, 1) == SQLITE_NULL)
		rc = refuse(why, cap,
			    "directory inode %lld is named by no entry: "
			    "not reachable from the root",
			    num(st, 0));
	else if (rc == 1)
		rc = refuse(why, cap,
			    "directory inode %lld (named in directory %lld) "
			    "is not reachable from the root: a cycle",
			    num(st, 0), num(st, 1));
	sqlite3_finalize(st);
	return rc;
}

static int check_counts(cat_reader *r, char *why, size_t cap)
{
	int64_t dirs = 0, named = 0, dangling = 0, reached = 0;
	sqlite3_stmt *st = NULL;
	int rc;

	/* The root is a directory (cat_reader_open checked): dirs >= 1. */
	rc = one_int(r, sql_dirs, &dirs);
	if (rc < 0)
		return rc;
	rc = query(r, sql_counts, &st);
	if (rc == 1 && (cat__col_int(st, 0, 0, INT64_MAX, &named) ||
			cat__col_int(st, 1, 0, INT64_MAX, &dangling)))
		rc = -EBADMSG;
	else if (rc == 0)
		rc = -EBADMSG;
	sqlite3_finalize(st);
	if (rc < 0)
		return rc;
	/* R4 only when R2 and R3 hold: a refused catalog skips the walk. */
	if (dangling == 0 && named == dirs - 1) {
		rc = one_int(r, sql_walk, &reached);
		if (rc < 0)
			return rc;
		if (reached == dirs)
			return 0;
	}
	rc = name_fault(r, why, cap);
	if (rc == 0)
		rc = refuse(why, cap,
			    "the directories do not form a tree (%lld "
			    "directories, %lld entries naming them, %lld "
			    "reached from the root)",
			    (long long)dirs, (long long)named,
			    (long long)reached);
	return rc;
}

int cat_check_tree(cat_reader *r, char *why, size_t cap)
{
	int rc;

	if (why && cap)
		why[0] = '\0';
	if (!r)
		return -EINVAL;
	rc = cat__reader_lock(r);
	if (rc)
		return rc;
	rc = check_parents(r, why, cap);
	if (rc == 0)
		rc = check_counts(r, why, cap);
	pthread_mutex_unlock(&r->mu);
	/* Every refusal says why: SQLite finding a damaged page on the way
	 * is -EBADMSG too, with nothing said yet. */
	if (rc == -EBADMSG && why && cap && !why[0])
		snprintf(why, cap,
			 "its entries or inodes cannot be read "
			 "(a damaged or foreign table)");
	else if (rc < 0 && why && cap && !why[0])
		snprintf(why, cap, "the tree check could not run: %s",
			 strerror(-rc));
	return rc;
}

/* ---- the verdict, remembered beside the file ---- */

/* The marker's text for the file at path as it is now: its identity
 * and every time the kernel keeps of it. A catalog replaced or changed
 * in any way (a new file renamed over it, a write, even a chmod) gets
 * another line, so a stale marker vouches for nothing. */
static int marker_line(const char *path, char *buf, size_t cap)
{
	struct stat sb;
	int n;

	if (stat(path, &sb) < 0)
		return -errno;
	if (!S_ISREG(sb.st_mode))
		return -EBADMSG;
	n = snprintf(buf, cap,
		     "ferry-tree-ok/1 dev=%ju ino=%ju size=%jd mtime=%jd.%09ld "
		     "ctime=%jd.%09ld\n",
		     (uintmax_t)sb.st_dev, (uintmax_t)sb.st_ino,
		     (intmax_t)sb.st_size, (intmax_t)sb.st_mtim.tv_sec,
		     (long)sb.st_mtim.tv_nsec, (intmax_t)sb.st_ctim.tv_sec,
		     (long)sb.st_ctim.tv_nsec);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static char *marker_path(const char *path)
{
	return base_path_fmt("%s%s", path, CAT_CHECK_MARK_SUFFIX);
}

int cat_check_remembered(const char *path)
{
	char want[256], got[256];
	char *mp;
	size_t n = 0;
	int r;

	if (!path || marker_line(path, want, sizeof(want)) < 0)
		return 0;
	mp = marker_path(path);
	if (!mp)
		return 0;
	r = base_file_read_small(mp, got, sizeof(got), &n);
	free(mp);
	return r == 0 && !strcmp(got, want);
}

int cat_check_remember(const char *path)
{
	char line[256];
	char *mp;
	int r;

	if (!path)
		return -EINVAL;
	r = marker_line(path, line, sizeof(line));
	if (r < 0)
		return r;
	mp = marker_path(path);
	if (!mp)
		return -ENOMEM;
	r = base_file_write_atomic(mp, line, strlen(line), 0600);
	free(mp);
	return r;
}

int cat_reader_open_checked(const char *path, int remember, cat_reader **ret_r,
			    char *why, size_t cap)
{
	int r;

	if (why && cap)
		why[0] = '\0';
	r = cat_reader_open(path, ret_r);
	if (r < 0 || cat_check_remembered(path))
		return r;
	r = cat_check_tree(*ret_r, why, cap);
	if (r < 0) {
		cat_reader_close(*ret_r);
		*ret_r = NULL;
		return r;
	}
	/* Best effort: a cache that cannot be written is checked again at
	 * its next open, which costs time, never safety. */
	if (remember)
		(void)cat_check_remember(path);
	return 0;
}
