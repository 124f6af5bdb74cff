/*
 * hydrator/status/hyd_status.c — how far a cache is hydrated, and the status
 * line of the control protocol.
 *
 * hyd_status_from_cache answers from files alone: the newest
 * CACHEDIR/catalogs/GEN.db, with CACHEDIR/state.db ATTACHed read-only, so
 * one SQL statement can ask "which catalog chunk ids are not in the store".
 * A catalog with pending files (format 2) has its manifest overlay
 * GEN.overlay.db ATTACHed too (read-only; an empty stand-in before the
 * first manifest is fetched): the pending files' chunks are the overlay's
 * rows, counted only for files the catalog lists as pending, and how many
 * manifests are local is the overlay's file rows against the catalog's
 * pending table.
 * state.db is WAL: reading it while a hydrator writes neither blocks nor
 * sees a half-written row, and one read transaction gives every number the
 * same snapshot (files_hydrated never disagrees with chunks_stored).
 * Failures are returned, not logged: the caller knows why it asked (the
 * SQLite code behind one is a debug line of base_sqlite_errno).
 *
 * hyd_status_query asks a live hydrator on CACHEDIR/control.sock for its
 * status line (hyd_status_json.c writes and parses it; hyd_control.c
 * serves it) and falls back to the cache.
 *
 * Cleanup style in this file: goto out.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/status/hyd_control.h"

#define STATUS_PATH_MAX 4200 /* CACHEDIR plus a file name in it */
#define STATUS_QUERY_TIMEOUT_MS 2000
#define STATUS_PID_FILE_MAX 32
#define STATUS_PROC_STAT_MAX 1024

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

static int path_join(char *buf, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* A small text file whole into buf with its trailing whitespace (the
 * newline) dropped. -EFBIG when it holds cap - 1 bytes or more. */
static int read_trimmed(const char *path, char *buf, size_t cap)
{
	size_t len = 0;
	int r;

	r = base_file_read_small(path, buf, cap, &len);
	if (r < 0)
		return r;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
			   buf[len - 1] == ' ' || buf[len - 1] == '\t'))
		buf[--len] = '\0';
	return 0;
}

/* 0 when /proc says pid is a zombie or a program not named ferry* (the
 * pid was reused after a crash left the pid file behind); 1 otherwise,
 * including when /proc cannot tell. */
static int proc_is_ferry(long pid)
{
	char path[64], buf[STATUS_PROC_STAT_MAX], *rp;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (read_trimmed(path, buf, sizeof(buf)) < 0)
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
	long pid;

	if (path_join(path, sizeof(path), cache_dir, "hydrator.pid") < 0 ||
	    read_trimmed(path, buf, sizeof(buf)) < 0 ||
	    base_parse_long(buf, 1, INT_MAX, &pid) < 0)
		return 0;
	/* EPERM: it exists but belongs to someone else; still running. */
	if (kill((pid_t)pid, 0) < 0 && errno != EPERM)
		return 0;
	return proc_is_ferry(pid) ? pid : 0;
}

/* Run sql (no parameters), which returns one row of n integers (all 0
 * when it returns none). what names it for base_sqlite_errno. */
static int sql_row(sqlite3 *db, const char *sql, int64_t *cols, int n,
		   const char *what)
{
	sqlite3_stmt *st = NULL;
	int rc, i, r = 0;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		r = base_sqlite_errno(db, rc, what);
		goto out;
	}
	for (i = 0; i < n; i++)
		cols[i] = rc == SQLITE_ROW ? sqlite3_column_int64(st, i) : 0;
out:
	sqlite3_finalize(st);
	return r;
}

/* An empty in-memory stand-in for state.db, attached as "st" with the same
 * tables, so the queries need no second spelling for a cache without one. */
static int attach_empty_store(sqlite3 *db)
{
	return base_sqlite_exec(
	    db,
	    "ATTACH 'file:ferry-status-empty?mode=memory' AS st;"
	    "CREATE TABLE st.chunk(id BLOB PRIMARY KEY,"
	    " frame_len INTEGER) WITHOUT ROWID;"
	    "CREATE TABLE st.meta(key TEXT PRIMARY KEY, value);",
	    "attach empty store");
}

/* The same for the manifest overlay, attached as "m". */
static int attach_empty_overlay(sqlite3 *db)
{
	return base_sqlite_exec(
	    db,
	    "ATTACH 'file:ferry-status-empty-overlay?mode=memory' AS m;"
	    "CREATE TABLE m.file(ino INTEGER PRIMARY KEY,"
	    " state INTEGER NOT NULL);"
	    "CREATE TABLE m.chunk(ino INTEGER NOT NULL, off INTEGER NOT NULL,"
	    " len INTEGER NOT NULL, id BLOB NOT NULL, PRIMARY KEY(ino, off))"
	    " WITHOUT ROWID;",
	    "attach empty overlay");
}

/* Attach path read-only with attach_sql ("ATTACH ?1 AS x"); when there is
 * no file yet, or it lacks the tables (tables_sql counts them, want of
 * them), empty() attaches its stand-in instead. what names it. */
static int attach_ro(sqlite3 *db, const char *path, const char *attach_sql,
		     const char *tables_sql, int64_t want,
		     const char *detach_sql, int (*empty)(sqlite3 *db),
		     const char *what)
{
	sqlite3_stmt *st = NULL;
	int64_t tables = 0;
	char *uri = NULL;
	struct stat sb;
	int rc, r;

	if (stat(path, &sb) < 0)
		return errno == ENOENT ? empty(db) : -errno;
	r = base_sqlite_uri(path, "mode=ro", &uri);
	if (r < 0)
		return r;
	rc = sqlite3_prepare_v2(db, attach_sql, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc != SQLITE_DONE) {
		r = base_sqlite_errno(db, rc, what);
		goto out;
	}
	r = sql_row(db, tables_sql, &tables, 1, what);
	if (r < 0 || tables == want)
		goto out;
	r = base_sqlite_exec(db, detach_sql, what);
	if (r == 0)
		r = empty(db);
out:
	sqlite3_finalize(st);
	free(uri);
	return r;
}

/* Attach CACHEDIR/state.db read-only as "st"; when there is none yet (or
 * it is so new it has no tables), the empty stand-in instead. */
static int attach_store(sqlite3 *db, const char *cache_dir)
{
	char path[STATUS_PATH_MAX];
	int r;

	r = path_join(path, sizeof(path), cache_dir, "state.db");
	if (r < 0)
		return r;
	return attach_ro(db, path, "ATTACH ?1 AS st",
			 "SELECT COUNT(*) FROM st.sqlite_master WHERE"
			 " type = 'table' AND name IN ('chunk', 'meta')",
			 2, "DETACH st", attach_empty_store, "attach state.db");
}

/* Attach the manifest overlay beside cat_path read-only as "m" (the
 * empty stand-in before the hydrator made one). */
static int attach_overlay(sqlite3 *db, const char *cat_path)
{
	char path[STATUS_PATH_MAX];
	int r;

	r = hyd_cache_overlay_path(cat_path, path, sizeof(path));
	if (r < 0)
		return r;
	return attach_ro(db, path, "ATTACH ?1 AS m",
			 "SELECT COUNT(*) FROM m.sqlite_master WHERE"
			 " type = 'table' AND name IN ('file', 'chunk')",
			 2, "DETACH m", attach_empty_overlay, "attach overlay");
}

/* st.meta "wire_bytes" (a decimal count the fetcher keeps), 0 if absent
 * or not a number. */
static int stored_wire_bytes(sqlite3 *db, uint64_t *ret)
{
	sqlite3_stmt *st = NULL;
	const unsigned char *v;
	uint64_t n;
	int rc, r = 0;

	*ret = 0;
	rc = sqlite3_prepare_v2(db,
				"SELECT CAST(value AS TEXT) FROM st.meta"
				" WHERE key = 'wire_bytes'",
				-1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		v = sqlite3_column_text(st, 0);
		if (base_parse_u64((const char *)v, 0, UINT64_MAX, &n) == 0)
			*ret = n;
	} else if (rc != SQLITE_DONE) {
		r = base_sqlite_errno(db, rc, "wire_bytes");
	}
	sqlite3_finalize(st);
	return r;
}

/* Holes (the all-zero id) are never stored and never missing. */
#define HOLE_NOT " AND c.id != zeroblob(32)"
#define SQL_ROWS_CATALOG                                                       \
	"(SELECT id, len FROM main.chunk WHERE id != zeroblob(32))"

/* Hydrated: no chunk of the file is missing (empty files qualify). */
#define SQL_HYDRATED                                                           \
	"SELECT COUNT(*), COALESCE(SUM(i.size), 0) FROM main.inode i"          \
	" WHERE i.kind = 1 AND NOT EXISTS ("                                   \
	"  SELECT 1 FROM main.chunk c WHERE c.ino = i.ino" HOLE_NOT            \
	"  AND NOT EXISTS (SELECT 1 FROM st.chunk s"                           \
	"                  WHERE s.id = c.id))"
/* The same with pending files: one of them is hydrated when its manifest
 * is in the overlay (not the source-changed marker) and none of that
 * manifest's chunks is missing; empty files still qualify. */
#define SQL_HYDRATED_PENDING                                                   \
	"SELECT COUNT(*), COALESCE(SUM(i.size), 0) FROM main.inode i"          \
	" WHERE i.kind = 1 AND (i.size = 0 OR CASE WHEN EXISTS ("              \
	"  SELECT 1 FROM main.pending p WHERE p.ino = i.ino)"                  \
	" THEN EXISTS (SELECT 1 FROM m.file f WHERE f.ino = i.ino"             \
	"              AND f.state = 0)"                                       \
	"  AND NOT EXISTS (SELECT 1 FROM m.chunk c WHERE c.ino = "             \
	"i.ino" HOLE_NOT                                                       \
	"   AND NOT EXISTS (SELECT 1 FROM st.chunk s WHERE s.id = c.id))"      \
	" ELSE NOT EXISTS (SELECT 1 FROM main.chunk c WHERE c.ino = "          \
	"i.ino" HOLE_NOT                                                       \
	"   AND NOT EXISTS (SELECT 1 FROM st.chunk s WHERE s.id = c.id))"      \
	" END)"
/* Distinct ids, through a LEFT JOIN on st.chunk's key: one lookup per
 * distinct id (an EXISTS used twice would be evaluated twice). ROWS is
 * the (id, len) rows of every local manifest. */
#define SQL_CHUNKS(ROWS)                                                       \
	"SELECT COUNT(*), COALESCE(SUM(g.len), 0), COUNT(s.id),"               \
	" COALESCE(SUM(CASE WHEN s.id IS NULL THEN 0 ELSE g.len END), 0)"      \
	" FROM (SELECT id, MAX(len) AS len FROM " ROWS " GROUP BY id) g"       \
	" LEFT JOIN st.chunk s ON s.id = g.id"
/* The overlay's rows count for files the catalog lists as pending, with
 * a manifest (state 0), as the catalog reader reads them. */
#define SQL_ROWS_PENDING                                                       \
	"(SELECT id, len FROM main.chunk WHERE id != zeroblob(32) UNION ALL"   \
	" SELECT k.id, k.len FROM m.chunk k"                                   \
	" JOIN m.file f ON f.ino = k.ino AND f.state = 0"                      \
	" JOIN main.pending p ON p.ino = k.ino WHERE k.id != zeroblob(32))"
#define SQL_MANIFESTS                                                          \
	"SELECT (SELECT COUNT(*) FROM main.pending), COUNT(*),"                \
	" COALESCE(SUM(f.state = 1), 0)"                                       \
	" FROM m.file f JOIN main.pending p ON p.ino = f.ino"

/* The counts, all in one read transaction over catalog + store (+ the
 * overlay when pending is set). Indexes used: inode(ino), the catalog's
 * chunk(ino, off) and the overlay's for "chunks of this file", st.chunk(id)
 * for "is it stored". The chunk tables have no index on id, so distinct
 * ids come from one GROUP BY (a sort). */
static int count_all(sqlite3 *db, int pending, struct hyd_status *s)
{
	int64_t c[4];
	int r;

	r = base_sqlite_exec(db, "BEGIN", "begin");
	if (r < 0)
		return r;
	r = sql_row(db,
		    "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM main.inode"
		    " WHERE kind = 1",
		    c, 2, "files");
	if (r < 0)
		goto out;
	s->files_total = (uint64_t)c[0];
	s->bytes_total = (uint64_t)c[1];
	r = sql_row(db, pending ? SQL_HYDRATED_PENDING : SQL_HYDRATED, c, 2,
		    "hydrated files");
	if (r < 0)
		goto out;
	s->files_hydrated = (uint64_t)c[0];
	s->bytes_hydrated = (uint64_t)c[1];
	r = sql_row(db,
		    pending ? SQL_CHUNKS(SQL_ROWS_PENDING)
			    : SQL_CHUNKS(SQL_ROWS_CATALOG),
		    c, 4, "chunks");
	if (r < 0)
		goto out;
	s->chunks_total = (uint64_t)c[0];
	s->unique_bytes_total = (uint64_t)c[1];
	s->chunks_stored = (uint64_t)c[2];
	s->unique_bytes_stored = (uint64_t)c[3];
	if (pending) {
		r = sql_row(db, SQL_MANIFESTS, c, 3, "manifests");
		if (r < 0)
			goto out;
		s->manifests_total = (uint64_t)c[0];
		s->manifests_local = (uint64_t)c[1];
		s->manifests_changed = (uint64_t)c[2];
	}
	r = sql_row(db, "SELECT COALESCE(SUM(frame_len), 0) FROM st.chunk", c,
		    1, "rest bytes");
	if (r < 0)
		goto out;
	s->rest_bytes = (uint64_t)c[0];
	r = stored_wire_bytes(db, &s->wire_bytes);
out:
	/* Read-only: ending the transaction either way only drops the
	 * snapshot. */
	sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	return r;
}

/* When the mount began to serve its generation: meta "switched_at" of
 * state.db (ns since the epoch, written by the mount), as seconds. */
static void switched_from_store(sqlite3 *db, struct hyd_status *s)
{
	sqlite3_stmt *st = NULL;
	const unsigned char *v;
	uint64_t ns;

	if (sqlite3_prepare_v2(db,
			       "SELECT CAST(value AS TEXT) FROM st.meta"
			       " WHERE key = 'switched_at'",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		v = sqlite3_column_text(st, 0);
		if (v &&
		    base_parse_u64((const char *)v, 1, INT64_MAX, &ns) == 0)
			s->switched_at = (int64_t)(ns / 1000000000ull);
	}
	sqlite3_finalize(st);
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

int hyd_into_state_read(const char *cache_dir, char *dir, size_t cap,
			uint64_t *ret_gen)
{
	char path[STATUS_PATH_MAX], line[STATUS_PATH_MAX + 8], *nl;
	int have_dir = 0, have_gen = 0;
	FILE *f;

	if (path_join(path, sizeof(path), cache_dir, HYD_INTO_STATE) < 0)
		return -ENAMETOOLONG;
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strncmp(line, "dir=", 4) && line[4] == '/' &&
		    strlen(line + 4) < cap) {
			memcpy(dir, line + 4, strlen(line + 4) + 1);
			have_dir = 1;
		} else if (!strncmp(line, "generation=", 11) &&
			   base_parse_u64(line + 11, 0, UINT64_MAX, ret_gen) ==
			       0) {
			have_gen = 1;
		}
	}
	fclose(f);
	return have_dir && have_gen ? 0 : -EINVAL;
}

int hyd_status_from_cache(const char *cache_dir, struct hyd_status *ret)
{
	char cat_path[STATUS_PATH_MAX], path[STATUS_PATH_MAX];
	char url[HYD_URL_MAX + 2];
	struct hyd_status s;
	struct cat_meta meta;
	cat_reader *rd = NULL;
	sqlite3 *db = NULL;
	char *uri = NULL;
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
	r = base_sqlite_uri(cat_path, "mode=ro", &uri);
	if (r < 0)
		goto out;
	rc = sqlite3_open_v2(
	    uri, &db,
	    SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		r = base_sqlite_errno(db, rc, "open catalog");
		goto out;
	}
	sqlite3_busy_timeout(db, STATUS_QUERY_TIMEOUT_MS);
	r = attach_store(db, cache_dir);
	if (r == 0 && meta.pending)
		r = attach_overlay(db, cat_path);
	if (r == 0)
		r = count_all(db, meta.pending > 0, &s);
	if (r < 0)
		goto out;

	/* catalogs/url as written (one line), else the store's copy. */
	if (path_join(path, sizeof(path), cache_dir, "catalogs/url") == 0 &&
	    read_trimmed(path, url, sizeof(url)) == 0 &&
	    strlen(url) < sizeof(s.url))
		memcpy(s.url, url, strlen(url) + 1);
	else
		url_from_store(db, &s);
	switched_from_store(db, &s);
	s.pid = live_pid(cache_dir);
	if (hyd_into_state_read(cache_dir, s.into_dir, sizeof(s.into_dir),
				&s.into_generation) == 0)
		snprintf(s.into, sizeof(s.into), "%s",
			 s.into_generation == s.generation ? "landed"
							   : "behind");
	/* Complete needs every manifest too: until then the chunk totals
	 * leave out the chunks of the manifests still missing. */
	if (s.chunks_stored >= s.chunks_total &&
	    s.manifests_local >= s.manifests_total) {
		s.state = HYD_STATE_COMPLETE;
		s.eta_s = 0;
	} else {
		s.state = HYD_STATE_STOPPED;
	}
	*ret = s;
out:
	sqlite3_close(db);
	free(uri);
	return r;
}

/* ------------------------------------------------------------------ */
/* Client of the control socket                                       */
/* ------------------------------------------------------------------ */

/* Wait for events on fd until deadline (base_now_ns). */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	uint64_t now;
	int n;

	for (;;) {
		now = base_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		/* Rounded up: poll(0) would spin through the last ms. */
		n = poll(&pfd, 1, (int)((deadline - now + 999999) / 1000000));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n > 0)
			return 0;
	}
}

int hyd__control_ask(const char *cache_dir, const char *req,
		     unsigned timeout_ms, char *line, size_t cap,
		     size_t *ret_len)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	uint64_t deadline = base_now_ns() + (uint64_t)timeout_ms * 1000000u;
	/* only the connect uses it: at most the status timeout */
	struct timeval tv = {STATUS_QUERY_TIMEOUT_MS / 1000, 0};
	size_t got = 0, sent = 0, req_len = strlen(req);
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
	while (sent < req_len) {
		r = wait_fd(fd, POLLOUT, deadline);
		if (r < 0)
			goto out;
		/* MSG_NOSIGNAL: a server gone away is an error, not SIGPIPE. */
		n = send(fd, req + sent, req_len - sent,
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
	r = hyd__control_ask(cache_dir, "status\n", STATUS_QUERY_TIMEOUT_MS,
			     line, HYD_STATUS_LINE_MAX + 1, &len);
	if (r == 0)
		r = hyd__status_parse(line, len, ret);
	free(line);
	if (r == 0)
		return 0;
	/* No hydrator, a stale socket, a slow or garbled answer: the files
	 * still say how far the cache is. */
	base_log_err(BASE_LOG_DEBUG, r,
		     "no live status on control.sock, reading the files "
		     "dir=\"%s\"",
		     cache_dir);
	return hyd_status_from_cache(cache_dir, ret);
}
