/*
 * hydrator/status/hyd_status.c — how far a cache is hydrated, and the status
 * line of the control protocol.
 *
 * hyd_status_from_cache answers from files alone: the newest
 * CACHEDIR/catalogs/GEN.db, with CACHEDIR/state.db ATTACHed read-only, so
 * one SQL statement can ask "which catalog chunk ids are not in the store".
 * state.db is WAL: reading it while a hydrator writes neither blocks nor
 * sees a half-written row, and one read transaction gives every number the
 * same snapshot (files_hydrated never disagrees with chunks_stored).
 *
 * hyd_status_json / hyd__status_parse are both ends of the one-line reply
 * on CACHEDIR/control.sock (hyd_control.c serves it; hyd_status_query asks
 * and falls back to the cache). The parser takes untrusted bytes: it knows
 * exactly the flat object the writer emits and bounds everything.
 *
 * Strings in JSON: valid UTF-8 passes through; '"', '\\' and control bytes
 * are escaped; every byte that is not part of valid UTF-8 becomes U+FFFD
 * (written "\ufffd"), so the output is always valid JSON. Numbers are
 * formatted from integers (doubles as fixed point with 3 decimals) so no
 * locale can put a comma in them.
 *
 * Cleanup style in this file: goto out.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/catalog.h"
#include "hydrator/status/hyd_control_internal.h"

#define STATUS_PATH_MAX 4200 /* CACHEDIR plus a file name in it */
#define STATUS_URI_MAX (3 * 4200 + 16)
#define STATUS_QUERY_TIMEOUT_MS 2000
#define STATUS_PID_FILE_MAX 32
#define STATUS_KEY_MAX 64	 /* longest key the parser accepts */
#define STATUS_NUM_MAX 64	 /* longest number token it accepts */
#define STATUS_DOUBLE_MAX 9.0e15 /* doubles are clamped to this */

const char *hyd_state_name(enum hyd_state s)
{
	switch (s) {
	case HYD_STATE_BROWSING:
		return "browsing";
	case HYD_STATE_BACKFILLING:
		return "backfilling";
	case HYD_STATE_COMPLETE:
		return "complete";
	case HYD_STATE_STALLED:
		return "stalled";
	case HYD_STATE_STOPPED:
		return "stopped";
	}
	return "unknown";
}

/* ------------------------------------------------------------------ */
/* From the cache's files                                             */
/* ------------------------------------------------------------------ */

/* Translate an SQLite result code to -errno, logging the native code once. */
static int status_sqlerr(sqlite3 *db, int rc, const char *what,
			 const char *cache_dir)
{
	int err;

	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		err = -ENOMEM;
		break;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		err = -EBUSY;
		break;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		err = -EACCES;
		break;
	case SQLITE_CANTOPEN:
		err = -ENOENT;
		break;
	case SQLITE_NOTADB:
	case SQLITE_CORRUPT:
		err = -EBADMSG;
		break;
	default:
		err = -EIO;
		break;
	}
	fprintf(stderr, "ferry: status: sqlite %s failed dir=%s code=%d: %s\n",
		what, cache_dir, rc,
		db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
	return err;
}

static int path_join(char *buf, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Read a small text file whole into buf (NUL-terminated, trailing
 * whitespace trimmed). -EFBIG when it does not fit in cap - 1 bytes. */
static int read_small(const char *path, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;
	int fd, r = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	for (;;) {
		/* One byte past the room tells "fits" from "too long". */
		char extra;
		void *dst = got < cap - 1 ? buf + got : &extra;
		size_t want = got < cap - 1 ? cap - 1 - got : 1;

		n = read(fd, dst, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		if (dst == &extra) {
			r = -EFBIG;
			goto out;
		}
		got += (size_t)n;
	}
	while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' ||
			   buf[got - 1] == ' ' || buf[got - 1] == '\t'))
		got--;
	buf[got] = '\0';
out:
	close(fd);
	if (r < 0)
		buf[0] = '\0';
	return r;
}

/* 0 when /proc says pid is a zombie or a program not named ferry* (the
 * pid was reused after a crash left the pid file behind); 1 otherwise,
 * including when /proc cannot tell. */
static int proc_is_ferry(long pid)
{
	char path[64], buf[1024], *rp;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return 1;
	/* "PID (COMM) S ...": COMM may hold ')' itself, so the last one. */
	rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || rp[2] == 'Z' || rp[2] == 'X')
		return rp ? 0 : 1;
	return strstr(buf, " (ferry") != NULL && strstr(buf, " (ferry") < rp;
}

/* The pid in CACHEDIR/hydrator.pid if that process exists, else 0. */
static long live_pid(const char *cache_dir)
{
	char path[STATUS_PATH_MAX], buf[STATUS_PID_FILE_MAX];
	char *end;
	long pid;

	if (path_join(path, sizeof(path), cache_dir, "hydrator.pid") < 0 ||
	    read_small(path, buf, sizeof(buf)) < 0)
		return 0;
	errno = 0;
	pid = strtol(buf, &end, 10);
	if (errno || end == buf || *end || pid <= 0 || pid > INT_MAX)
		return 0;
	/* EPERM: it exists but belongs to someone else; still running. */
	if (kill((pid_t)pid, 0) < 0 && errno != EPERM)
		return 0;
	return proc_is_ferry(pid) ? pid : 0;
}

/* "file:" URI of path for ATTACH, read-only. Every byte that could mean
 * something in a URI ('?', '#', '%', ...) is percent-encoded. */
static int ro_uri(const char *path, char *buf, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0, i;
	int n;

	/* "file:///abs": an empty authority, so a path starting with "//"
	 * cannot be taken for a host. */
	n = snprintf(buf, cap, "%s", path[0] == '/' ? "file://" : "file:");
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	o = (size_t)n;
	for (i = 0; path[i]; i++) {
		unsigned char c = (unsigned char)path[i];
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '/' || c == '.' ||
			    c == '_' || c == '-';

		if (o + 4 >= cap)
			return -ENAMETOOLONG;
		if (plain) {
			buf[o++] = (char)c;
		} else {
			buf[o++] = '%';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		}
	}
	n = snprintf(buf + o, cap - o, "?mode=ro");
	return n < 0 || (size_t)n >= cap - o ? -ENAMETOOLONG : 0;
}

/* Run sql (no parameters), which returns one row of n integers. */
static int sql_row(sqlite3 *db, const char *sql, int64_t *cols, int n,
		   const char *cache_dir)
{
	sqlite3_stmt *st = NULL;
	int rc, i;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			for (i = 0; i < n; i++)
				cols[i] = sqlite3_column_int64(st, i);
			rc = SQLITE_OK;
		} else if (rc == SQLITE_DONE) {
			for (i = 0; i < n; i++)
				cols[i] = 0;
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : status_sqlerr(db, rc, sql, cache_dir);
}

/* Attach CACHEDIR/state.db read-only as "st". When there is none yet (or
 * it is so new it has no tables), attach an empty in-memory stand-in with
 * the same tables instead, so the queries need no second spelling. */
static int attach_store(sqlite3 *db, const char *cache_dir)
{
	char path[STATUS_PATH_MAX], uri[STATUS_URI_MAX];
	sqlite3_stmt *st = NULL;
	int64_t tables = 0;
	struct stat sb;
	int rc, r;

	r = path_join(path, sizeof(path), cache_dir, "state.db");
	if (r < 0)
		return r;
	if (stat(path, &sb) == 0) {
		r = ro_uri(path, uri, sizeof(uri));
		if (r < 0)
			return r;
		rc = sqlite3_prepare_v2(db, "ATTACH ?1 AS st", -1, &st, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
		if (rc == SQLITE_OK)
			rc = sqlite3_step(st);
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE)
			return status_sqlerr(db, rc, "attach state.db",
					     cache_dir);
		r = sql_row(db,
			    "SELECT COUNT(*) FROM st.sqlite_master WHERE"
			    " type = 'table' AND name IN ('chunk', 'meta')",
			    &tables, 1, cache_dir);
		if (r < 0 || tables == 2)
			return r;
		rc = sqlite3_exec(db, "DETACH st", NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			return status_sqlerr(db, rc, "detach", cache_dir);
	} else if (errno != ENOENT) {
		return -errno;
	}
	rc = sqlite3_exec(db,
			  "ATTACH 'file:ferry-status-empty?mode=memory' AS st;"
			  "CREATE TABLE st.chunk(id BLOB PRIMARY KEY,"
			  " frame_len INTEGER) WITHOUT ROWID;"
			  "CREATE TABLE st.meta(key TEXT PRIMARY KEY, value);",
			  NULL, NULL, NULL);
	return rc == SQLITE_OK
		   ? 0
		   : status_sqlerr(db, rc, "empty store", cache_dir);
}

/* st.meta "wire_bytes" (a decimal count the fetcher keeps), 0 if absent. */
static int stored_wire_bytes(sqlite3 *db, const char *cache_dir, uint64_t *ret)
{
	sqlite3_stmt *st = NULL;
	const unsigned char *v;
	unsigned long long n;
	char *end;
	int rc;

	*ret = 0;
	rc = sqlite3_prepare_v2(db,
				"SELECT CAST(value AS TEXT) FROM st.meta"
				" WHERE key = 'wire_bytes'",
				-1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			v = sqlite3_column_text(st, 0);
			errno = 0;
			n = v ? strtoull((const char *)v, &end, 10) : 0;
			if (v && !errno && end != (const char *)v && !*end &&
			    v[0] != '-')
				*ret = n;
			rc = SQLITE_DONE;
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE
		   ? 0
		   : status_sqlerr(db, rc, "wire_bytes", cache_dir);
}

/* The counts, all in one read transaction over catalog + store. Indexes
 * used: inode(ino) and the catalog's chunk(ino, off) for "chunks of this
 * file", st.chunk(id) for "is it stored". The catalog's chunk table has no
 * index on id, so distinct ids come from one GROUP BY (a sort). */
static int count_all(sqlite3 *db, const char *cache_dir, struct hyd_status *s)
{
	int64_t c[4];
	int r, rc;

	rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return status_sqlerr(db, rc, "begin", cache_dir);
	r = sql_row(db,
		    "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM main.inode"
		    " WHERE kind = 1",
		    c, 2, cache_dir);
	if (r < 0)
		goto out;
	s->files_total = (uint64_t)c[0];
	s->bytes_total = (uint64_t)c[1];
	/* Hydrated: no chunk of the file is missing (empty files qualify). */
	r = sql_row(
	    db,
	    "SELECT COUNT(*), COALESCE(SUM(i.size), 0) FROM main.inode i"
	    " WHERE i.kind = 1 AND NOT EXISTS ("
	    "  SELECT 1 FROM main.chunk c WHERE c.ino = i.ino"
	    "  AND NOT EXISTS (SELECT 1 FROM st.chunk s"
	    "                  WHERE s.id = c.id))",
	    c, 2, cache_dir);
	if (r < 0)
		goto out;
	s->files_hydrated = (uint64_t)c[0];
	s->bytes_hydrated = (uint64_t)c[1];
	/* A LEFT JOIN on st.chunk's key: one lookup per distinct id (an
	 * EXISTS used twice would be evaluated twice). */
	r = sql_row(
	    db,
	    "SELECT COUNT(*), COALESCE(SUM(g.len), 0), COUNT(s.id),"
	    " COALESCE(SUM(CASE WHEN s.id IS NULL THEN 0 ELSE g.len END),"
	    "          0)"
	    " FROM (SELECT id, MAX(len) AS len FROM main.chunk"
	    "       GROUP BY id) g"
	    " LEFT JOIN st.chunk s ON s.id = g.id",
	    c, 4, cache_dir);
	if (r < 0)
		goto out;
	s->chunks_total = (uint64_t)c[0];
	s->unique_bytes_total = (uint64_t)c[1];
	s->chunks_stored = (uint64_t)c[2];
	s->unique_bytes_stored = (uint64_t)c[3];
	r = sql_row(db, "SELECT COALESCE(SUM(frame_len), 0) FROM st.chunk", c,
		    1, cache_dir);
	if (r < 0)
		goto out;
	s->rest_bytes = (uint64_t)c[0];
	r = stored_wire_bytes(db, cache_dir, &s->wire_bytes);
out:
	/* Read-only: ending the transaction either way only drops the
	 * snapshot. */
	sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	return r;
}

/* The store's url when catalogs/url is missing: meta "url" of state.db. */
static void url_from_store(sqlite3 *db, struct hyd_status *s)
{
	sqlite3_stmt *st = NULL;
	const unsigned char *v;

	if (sqlite3_prepare_v2(db,
			       "SELECT CAST(value AS TEXT) FROM st.meta"
			       " WHERE key = 'url'",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		v = sqlite3_column_text(st, 0);
		if (v && strlen((const char *)v) < sizeof(s->url))
			snprintf(s->url, sizeof(s->url), "%s", (const char *)v);
	}
	sqlite3_finalize(st);
}

int hyd_status_from_cache(const char *cache_dir, struct hyd_status *ret)
{
	char cat_path[STATUS_PATH_MAX], path[STATUS_PATH_MAX];
	char uri[STATUS_URI_MAX];
	struct hyd_status s;
	struct cat_meta meta;
	cat_reader *rd = NULL;
	sqlite3 *db = NULL;
	int r, rc;

	if (!cache_dir || !ret)
		return -EINVAL;
	memset(&s, 0, sizeof(s));
	s.eta_s = -1;
	r = hyd_cache_catalog_newest(cache_dir, cat_path, sizeof(cat_path),
				     NULL);
	if (r < 0)
		return r == -ENOTDIR ? -ENOENT : r;
	/* The reader proves it is a ferry catalog before we trust its rows. */
	r = cat_reader_open(cat_path, &rd);
	if (r < 0)
		goto out;
	cat_reader_meta(rd, &meta);
	s.generation = meta.generation;
	cat_reader_close(rd);

	/* Through a URI too: ATTACH takes URIs only on a connection opened
	 * with SQLITE_OPEN_URI, under which a plain name starting "file:"
	 * would be parsed as one. */
	r = ro_uri(cat_path, uri, sizeof(uri));
	if (r < 0)
		goto out;
	rc = sqlite3_open_v2(
	    uri, &db,
	    SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		r = status_sqlerr(db, rc, "open catalog", cache_dir);
		goto out;
	}
	sqlite3_busy_timeout(db, STATUS_QUERY_TIMEOUT_MS);
	r = attach_store(db, cache_dir);
	if (r == 0)
		r = count_all(db, cache_dir, &s);
	if (r < 0)
		goto out;

	if (path_join(path, sizeof(path), cache_dir, "catalogs/url") < 0 ||
	    read_small(path, s.url, sizeof(s.url)) < 0)
		url_from_store(db, &s);
	s.pid = live_pid(cache_dir);
	if (s.chunks_stored >= s.chunks_total) {
		s.state = HYD_STATE_COMPLETE;
		s.eta_s = 0;
	} else {
		s.state = HYD_STATE_STOPPED;
	}
	*ret = s;
out:
	sqlite3_close(db);
	return r;
}

/* ------------------------------------------------------------------ */
/* JSON out                                                           */
/* ------------------------------------------------------------------ */

/* snprintf-like accumulation: len counts everything, buf keeps what fits
 * (always NUL-terminated when cap > 0). */
struct jout {
	char *buf;
	size_t cap, len;
};

static void jput(struct jout *j, const char *s, size_t n)
{
	size_t room;

	if (j->cap > 0 && j->len < j->cap - 1) {
		room = j->cap - 1 - j->len;
		memcpy(j->buf + j->len, s, n < room ? n : room);
	}
	j->len += n;
}

static void jputs(struct jout *j, const char *s)
{
	jput(j, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 if it is not one
 * (overlong forms, surrogates and code points past U+10FFFF are not). */
static size_t utf8_valid(const unsigned char *s, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

/* A JSON string of s[0..strnlen(s, max)): see the file comment. */
static void jstr(struct jout *j, const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strnlen(s, max), i = 0, k;
	char esc[8];

	jputs(j, "\"");
	while (i < n) {
		unsigned char c = p[i];

		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			jput(j, esc, 2);
			i++;
		} else if (c == '\n') {
			jputs(j, "\\n"), i++;
		} else if (c == '\r') {
			jputs(j, "\\r"), i++;
		} else if (c == '\t') {
			jputs(j, "\\t"), i++;
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			jput(j, esc, 6);
			i++;
		} else if ((k = utf8_valid(p + i, n - i)) > 0) {
			jput(j, s + i, k);
			i += k;
		} else {
			jputs(j, "\\ufffd");
			i++;
		}
	}
	jputs(j, "\"");
}

static void jkey(struct jout *j, const char *key)
{
	jputs(j, j->len > 1 ? ",\"" : "\"");
	jputs(j, key);
	jputs(j, "\":");
}

static void ju64(struct jout *j, const char *key, uint64_t v)
{
	char num[32];

	jkey(j, key);
	snprintf(num, sizeof(num), "%" PRIu64, v);
	jputs(j, num);
}

static void ji64(struct jout *j, const char *key, int64_t v)
{
	char num[32];

	jkey(j, key);
	snprintf(num, sizeof(num), "%" PRId64, v);
	jputs(j, num);
}

/* a - b as a signed JSON number, whichever is larger. */
static void jdiff(struct jout *j, const char *key, uint64_t a, uint64_t b)
{
	char num[32];

	jkey(j, key);
	if (a >= b)
		snprintf(num, sizeof(num), "%" PRIu64, a - b);
	else
		snprintf(num, sizeof(num), "-%" PRIu64, b - a);
	jputs(j, num);
}

/* A non-negative double as fixed point "N.DDD", built from integers so the
 * locale cannot change the decimal point. NaN, infinities and negatives are
 * 0; values are clamped to STATUS_DOUBLE_MAX. */
static void jdbl(struct jout *j, const char *key, double v)
{
	char num[40];
	uint64_t m;

	if (!isfinite(v) || v < 0)
		v = 0;
	if (v > STATUS_DOUBLE_MAX)
		v = STATUS_DOUBLE_MAX;
	m = (uint64_t)(v * 1000.0 + 0.5);
	jkey(j, key);
	snprintf(num, sizeof(num), "%" PRIu64 ".%03u", m / 1000,
		 (unsigned)(m % 1000));
	jputs(j, num);
}

int hyd_status_json(const struct hyd_status *st, char *buf, size_t cap)
{
	struct jout j = {buf, cap, 0};

	jputs(&j, "{");
	jkey(&j, "state");
	jstr(&j, hyd_state_name(st->state), 32);
	jkey(&j, "url");
	jstr(&j, st->url, sizeof(st->url));
	jkey(&j, "last_error");
	jstr(&j, st->last_error, sizeof(st->last_error));
	ji64(&j, "pid", st->pid);
	ju64(&j, "generation", st->generation);
	ju64(&j, "files_total", st->files_total);
	ju64(&j, "files_hydrated", st->files_hydrated);
	ju64(&j, "bytes_total", st->bytes_total);
	ju64(&j, "bytes_hydrated", st->bytes_hydrated);
	ju64(&j, "chunks_total", st->chunks_total);
	ju64(&j, "chunks_stored", st->chunks_stored);
	ju64(&j, "unique_bytes_total", st->unique_bytes_total);
	ju64(&j, "unique_bytes_stored", st->unique_bytes_stored);
	ju64(&j, "rest_bytes", st->rest_bytes);
	ju64(&j, "wire_bytes", st->wire_bytes);
	jdiff(&j, "dedup_savings_bytes", st->bytes_total,
	      st->unique_bytes_total);
	jdiff(&j, "compression_savings_bytes", st->unique_bytes_stored,
	      st->rest_bytes);
	ju64(&j, "mismatches", st->mismatches);
	ju64(&j, "retries", st->retries);
	ju64(&j, "failures", st->failures);
	jdbl(&j, "rate_now", st->rate_now);
	jdbl(&j, "rate_avg", st->rate_avg);
	ji64(&j, "eta_s", st->eta_s);
	jdbl(&j, "elapsed_s", st->elapsed_s);
	jputs(&j, "}");
	if (cap > 0)
		buf[j.len < cap ? j.len : cap - 1] = '\0';
	return j.len > INT_MAX ? INT_MAX : (int)j.len;
}

/* ------------------------------------------------------------------ */
/* JSON in (untrusted)                                                */
/* ------------------------------------------------------------------ */

struct jin {
	const unsigned char *p, *end;
};

static void jin_ws(struct jin *in)
{
	while (in->p < in->end && (*in->p == ' ' || *in->p == '\t' ||
				   *in->p == '\n' || *in->p == '\r'))
		in->p++;
}

static int jin_hex4(struct jin *in, uint32_t *ret)
{
	uint32_t v = 0;
	int i;

	if (in->end - in->p < 4)
		return -EBADMSG;
	for (i = 0; i < 4; i++) {
		unsigned char c = *in->p++;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -EBADMSG;
	}
	*ret = v;
	return 0;
}

/* Where a decoded string goes: buf[0..cap) keeps at most cap - 1 bytes and
 * a NUL; what does not fit is dropped (cut is set). buf == NULL only
 * checks the string. */
struct jsink {
	char *buf;
	size_t cap, len;
	int cut;
};

static void jin_emit(struct jsink *o, const void *b, size_t n)
{
	if (!o->buf)
		return;
	/* Whole characters only: a multi-byte one that does not fit is
	 * dropped, never split. */
	if (o->cut || o->len + n >= o->cap) {
		o->cut = 1;
		return;
	}
	memcpy(o->buf + o->len, b, n);
	o->len += n;
}

/* \uXXXX (the "\u" already taken), a surrogate pair being two of them,
 * as UTF-8 into o. U+0000 and lone surrogates are refused: the result
 * is a C string. */
static int jin_unicode(struct jin *in, struct jsink *o)
{
	unsigned char u[4];
	uint32_t cp, lo;
	size_t n;

	if (jin_hex4(in, &cp) < 0 || cp == 0)
		return -EBADMSG;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return -EBADMSG;
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (in->end - in->p < 2 || in->p[0] != '\\' || in->p[1] != 'u')
			return -EBADMSG;
		in->p += 2;
		if (jin_hex4(in, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
			return -EBADMSG;
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	if (cp < 0x80) {
		u[0] = (unsigned char)cp, n = 1;
	} else if (cp < 0x800) {
		u[0] = (unsigned char)(0xc0 | (cp >> 6));
		u[1] = (unsigned char)(0x80 | (cp & 0x3f)), n = 2;
	} else if (cp < 0x10000) {
		u[0] = (unsigned char)(0xe0 | (cp >> 12));
		u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (unsigned char)(0x80 | (cp & 0x3f)), n = 3;
	} else {
		u[0] = (unsigned char)(0xf0 | (cp >> 18));
		u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (unsigned char)(0x80 | (cp & 0x3f)), n = 4;
	}
	jin_emit(o, u, n);
	return 0;
}

/* A JSON string into o. Raw bytes >= 0x80 are copied as they come (the
 * writer only sends valid UTF-8); after a cut, a sequence left incomplete
 * at the end is dropped so the kept prefix stays valid. */
static int jin_string(struct jin *in, struct jsink *o)
{
	size_t k;
	char c;

	if (in->p >= in->end || *in->p != '"')
		return -EBADMSG;
	in->p++;
	for (;;) {
		if (in->p >= in->end || *in->p < 0x20)
			return -EBADMSG;
		c = (char)*in->p++;
		if (c == '"')
			break;
		if (c == '\\') {
			if (in->p >= in->end)
				return -EBADMSG;
			c = (char)*in->p++;
			switch (c) {
			case '"':
			case '\\':
			case '/':
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u':
				if (jin_unicode(in, o) < 0)
					return -EBADMSG;
				continue;
			default:
				return -EBADMSG;
			}
		}
		jin_emit(o, &c, 1);
	}
	if (!o->buf)
		return 0;
	if (o->cut) {
		/* Back over a trailing lead byte and its continuations if
		 * they do not form a whole character. */
		k = o->len;
		while (k > 0 && k + 4 > o->len &&
		       ((unsigned char)o->buf[k - 1] & 0xc0) == 0x80)
			k--;
		if (k > 0 && (unsigned char)o->buf[k - 1] >= 0xc0 &&
		    utf8_valid((unsigned char *)o->buf + k - 1,
			       o->len - (k - 1)) != o->len - (k - 1))
			o->len = k - 1;
	}
	o->buf[o->len] = '\0';
	return 0;
}

/* One JSON number token (RFC 8259 grammar, at most STATUS_NUM_MAX bytes)
 * into tok; *ret_int is 1 when it has neither fraction nor exponent. */
static int jin_number(struct jin *in, char *tok, size_t cap, int *ret_int)
{
	const unsigned char *s = in->p, *p = in->p;
	size_t n;

	*ret_int = 1;
	if (p < in->end && *p == '-')
		p++;
	if (p >= in->end || *p < '0' || *p > '9')
		return -EBADMSG;
	if (*p == '0')
		p++;
	else
		while (p < in->end && *p >= '0' && *p <= '9')
			p++;
	if (p < in->end && *p == '.') {
		*ret_int = 0;
		if (++p >= in->end || *p < '0' || *p > '9')
			return -EBADMSG;
		while (p < in->end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < in->end && (*p == 'e' || *p == 'E')) {
		*ret_int = 0;
		p++;
		if (p < in->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= in->end || *p < '0' || *p > '9')
			return -EBADMSG;
		while (p < in->end && *p >= '0' && *p <= '9')
			p++;
	}
	n = (size_t)(p - s);
	if (n >= cap)
		return -EBADMSG;
	memcpy(tok, s, n);
	tok[n] = '\0';
	in->p = p;
	return 0;
}

/* Integer token (already grammar-checked) into [lo, hi]. */
static int tok_int(const char *tok, int64_t lo, uint64_t hi, int neg_ok,
		   uint64_t *ret_mag, int *ret_neg)
{
	const char *d = tok;
	uint64_t v = 0;
	int neg = 0;

	if (*d == '-') {
		if (!neg_ok)
			return -EBADMSG;
		neg = 1;
		d++;
	}
	for (; *d; d++) {
		unsigned dig = (unsigned)(*d - '0');

		if (v > (UINT64_MAX - dig) / 10)
			return -EBADMSG;
		v = v * 10 + dig;
	}
	if (neg ? v > (uint64_t)(-(lo + 1)) + 1 : v > hi)
		return -EBADMSG;
	*ret_mag = v;
	*ret_neg = neg && v != 0;
	return 0;
}

/* Number token (grammar-checked) as a double, without strtod (whose
 * decimal point follows the locale). */
static int tok_double(const char *tok, double *ret)
{
	const char *d = tok;
	double m = 0;
	long exp10 = 0, e = 0;
	int neg = 0, eneg = 0;

	if (*d == '-')
		neg = 1, d++;
	for (; *d >= '0' && *d <= '9'; d++)
		m = m * 10 + (*d - '0');
	if (*d == '.')
		for (d++; *d >= '0' && *d <= '9'; d++, exp10--)
			m = m * 10 + (*d - '0');
	if (*d == 'e' || *d == 'E') {
		d++;
		if (*d == '+' || *d == '-')
			eneg = *d++ == '-';
		for (; *d >= '0' && *d <= '9'; d++)
			if (e < 100000)
				e = e * 10 + (*d - '0');
	}
	exp10 += eneg ? -e : e;
	/* Divide by an exact power of ten rather than multiply by an inexact
	 * one: "1234.500" comes back as exactly 1234.5. */
	if (m != 0 && exp10 < 0)
		m /= pow(10.0, (double)-exp10);
	else if (m != 0)
		m *= pow(10.0, (double)exp10);
	if (!isfinite(m))
		return -EBADMSG;
	*ret = neg ? -m : m;
	return 0;
}

enum jtype { J_STATE, J_STR, J_U64, J_I64, J_PID, J_DBL, J_SKIPNUM };

struct jfield {
	const char *key;
	enum jtype type;
	size_t off, size;
};

#define JF(k, t)                                                               \
	{                                                                      \
#k, t, offsetof(struct hyd_status, k),                         \
		    sizeof(((struct hyd_status *)0)->k)                        \
	}

static const struct jfield jfields[] = {
    JF(state, J_STATE),
    JF(url, J_STR),
    JF(last_error, J_STR),
    JF(pid, J_PID),
    JF(generation, J_U64),
    JF(files_total, J_U64),
    JF(files_hydrated, J_U64),
    JF(bytes_total, J_U64),
    JF(bytes_hydrated, J_U64),
    JF(chunks_total, J_U64),
    JF(chunks_stored, J_U64),
    JF(unique_bytes_total, J_U64),
    JF(unique_bytes_stored, J_U64),
    JF(rest_bytes, J_U64),
    JF(wire_bytes, J_U64),
    {"dedup_savings_bytes", J_SKIPNUM, 0, 0},
    {"compression_savings_bytes", J_SKIPNUM, 0, 0},
    JF(mismatches, J_U64),
    JF(retries, J_U64),
    JF(failures, J_U64),
    JF(rate_now, J_DBL),
    JF(rate_avg, J_DBL),
    JF(eta_s, J_I64),
    JF(elapsed_s, J_DBL),
};
#define JFIELDS (sizeof(jfields) / sizeof(jfields[0]))

/* A value we do not know: a scalar only (flat object), skipped. */
static int jin_skip(struct jin *in)
{
	static const char *const words[] = {"true", "false", "null"};
	struct jsink skip = {NULL, 0, 0, 0};
	char tok[STATUS_NUM_MAX];
	size_t i, n;
	int isint;

	if (in->p >= in->end)
		return -EBADMSG;
	if (*in->p == '"')
		return jin_string(in, &skip);
	if (*in->p == '-' || (*in->p >= '0' && *in->p <= '9'))
		return jin_number(in, tok, sizeof(tok), &isint);
	for (i = 0; i < 3; i++) {
		n = strlen(words[i]);
		if ((size_t)(in->end - in->p) >= n &&
		    !memcmp(in->p, words[i], n)) {
			in->p += n;
			return 0;
		}
	}
	return -EBADMSG;
}

/* The value of a known field into s. */
static int jin_field(struct jin *in, const struct jfield *f,
		     struct hyd_status *s)
{
	char tok[STATUS_NUM_MAX], name[32];
	char *dst = (char *)s + f->off;
	struct jsink name_out = {name, sizeof(name), 0, 0};
	struct jsink str_out = {dst, f->size, 0, 0};
	uint64_t mag;
	int isint, neg, r, i;
	int64_t v;
	double d;

	switch (f->type) {
	case J_STATE:
		r = jin_string(in, &name_out);
		if (r < 0 || name_out.cut)
			return -EBADMSG;
		for (i = HYD_STATE_BROWSING; i <= HYD_STATE_STOPPED; i++)
			if (!strcmp(name, hyd_state_name((enum hyd_state)i))) {
				s->state = (enum hyd_state)i;
				return 0;
			}
		return -EBADMSG;
	case J_STR:
		/* Display text: longer than the field is cut, not refused
		 * (every replaced byte grows threefold on the way back). */
		return jin_string(in, &str_out);
	default:
		break;
	}
	r = jin_number(in, tok, sizeof(tok), &isint);
	if (r < 0)
		return r;
	switch (f->type) {
	case J_U64:
		if (!isint)
			return -EBADMSG;
		r = tok_int(tok, 0, UINT64_MAX, 0, &mag, &neg);
		if (r == 0)
			memcpy(dst, &mag, sizeof(mag));
		return r;
	case J_I64:
	case J_PID:
		if (!isint)
			return -EBADMSG;
		r = f->type == J_PID
			? tok_int(tok, 0, INT_MAX, 0, &mag, &neg)
			: tok_int(tok, INT64_MIN, INT64_MAX, 1, &mag, &neg);
		if (r < 0)
			return r;
		/* -(mag - 1) - 1 reaches INT64_MIN without overflow. */
		v = neg ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
		if (f->type == J_PID)
			s->pid = (long)v;
		else
			s->eta_s = v;
		return 0;
	case J_DBL:
		r = tok_double(tok, &d);
		if (r == 0)
			memcpy(dst, &d, sizeof(d));
		return r;
	default: /* J_SKIPNUM: derived on output, checked and dropped */
		return 0;
	}
}

int hyd__status_parse(const char *buf, size_t len, struct hyd_status *ret)
{
	struct jin in = {(const unsigned char *)buf,
			 (const unsigned char *)buf + len};
	char key[STATUS_KEY_MAX];
	struct jsink key_out;
	uint32_t seen = 0;
	struct hyd_status s;
	size_t i;
	int r;

	if (!buf || !ret || len > HYD_STATUS_LINE_MAX)
		return -EBADMSG;
	memset(&s, 0, sizeof(s));
	s.eta_s = -1;
	jin_ws(&in);
	if (in.p >= in.end || *in.p++ != '{')
		return -EBADMSG;
	jin_ws(&in);
	if (in.p < in.end && *in.p == '}')
		return -EBADMSG; /* no "state" */
	for (;;) {
		jin_ws(&in);
		key_out = (struct jsink){key, sizeof(key), 0, 0};
		r = jin_string(&in, &key_out);
		if (r < 0 || key_out.cut)
			return -EBADMSG;
		jin_ws(&in);
		if (in.p >= in.end || *in.p++ != ':')
			return -EBADMSG;
		jin_ws(&in);
		for (i = 0; i < JFIELDS; i++)
			if (!strcmp(key, jfields[i].key))
				break;
		if (i < JFIELDS) {
			if (seen & (1u << i))
				return -EBADMSG; /* duplicate key */
			seen |= 1u << i;
			r = jin_field(&in, &jfields[i], &s);
		} else {
			r = jin_skip(&in);
		}
		if (r < 0)
			return r;
		jin_ws(&in);
		if (in.p >= in.end)
			return -EBADMSG;
		if (*in.p == '}')
			break;
		if (*in.p++ != ',')
			return -EBADMSG;
	}
	in.p++;
	jin_ws(&in);
	if (in.p != in.end || !(seen & 1u))
		return -EBADMSG;
	*ret = s;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Client of the control socket                                       */
/* ------------------------------------------------------------------ */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for events on fd until deadline (CLOCK_MONOTONIC ms). */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	int64_t left;
	int n;

	for (;;) {
		left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n > 0)
			return 0;
	}
}

/* Send "status\n" to CACHEDIR/control.sock and read one reply line into
 * line (NUL-terminated, newline dropped). */
static int control_ask(const char *cache_dir, char *line, size_t cap,
		       size_t *ret_len)
{
	static const char req[] = "status\n";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int64_t deadline = now_ms() + STATUS_QUERY_TIMEOUT_MS;
	struct timeval tv = {STATUS_QUERY_TIMEOUT_MS / 1000, 0};
	size_t got = 0, sent = 0;
	ssize_t n;
	int fd, r = 0;
	char *nl;

	n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/control.sock",
		     cache_dir);
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A blocking AF_UNIX connect waits on a full backlog up to the send
	 * timeout; the reads below have their own deadline. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto out;
	}
	while (sent < sizeof(req) - 1) {
		r = wait_fd(fd, POLLOUT, deadline);
		if (r < 0)
			goto out;
		/* MSG_NOSIGNAL: a server gone away is an error, not SIGPIPE. */
		n = send(fd, req + sent, sizeof(req) - 1 - sent,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		sent += (size_t)n;
	}
	for (;;) {
		if (got >= cap - 1) {
			r = -EMSGSIZE;
			goto out;
		}
		r = wait_fd(fd, POLLIN, deadline);
		if (r < 0)
			goto out;
		n = recv(fd, line + got, cap - 1 - got, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		if (n == 0) {
			r = -EPROTO; /* closed before a whole line */
			goto out;
		}
		line[got + (size_t)n] = '\0';
		nl = memchr(line + got, '\n', (size_t)n);
		got += (size_t)n;
		if (nl) {
			*nl = '\0';
			*ret_len = (size_t)(nl - line);
			r = 0;
			goto out;
		}
	}
out:
	close(fd);
	return r;
}

int hyd_status_query(const char *cache_dir, struct hyd_status *ret)
{
	size_t len = 0;
	char *line;
	int r;

	if (!cache_dir || !ret)
		return -EINVAL;
	line = malloc(HYD_STATUS_LINE_MAX + 1);
	if (!line)
		return -ENOMEM;
	r = control_ask(cache_dir, line, HYD_STATUS_LINE_MAX + 1, &len);
	if (r == 0)
		r = hyd__status_parse(line, len, ret);
	free(line);
	/* No hydrator, a stale socket, a slow or garbled answer: the files
	 * still say how far the cache is. */
	return r == 0 ? 0 : hyd_status_from_cache(cache_dir, ret);
}
