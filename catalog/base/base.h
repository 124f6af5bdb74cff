/*
 * catalog/base/base.h — the base both sites stand on, beneath the formats.
 *
 * This is the one public header of catalog/base/. The replicator, the
 * hydrator, the ferry command and catalog/ itself use it for what every one
 * of them needs and none of them owns:
 *   - the logger: program name set once, levels, one line per event with
 *     key=value fields (base_log.c);
 *   - how bytes that may not be text are shown, in log lines and in JSON
 *     strings alike (base_text.c, base_json.c);
 *   - JSON values through jansson: strings from raw bytes, one-line dumps;
 *   - the one map from SQLite result codes to -errno, SQLite file URIs and
 *     statement helpers (base_sqlite.c);
 *   - the one map from curl result codes to -errno (base_curl.c);
 *   - files: whole writes, durable small files, mkdir -p, fsync of a path or
 *     its directory, small-file and pread_full readers (base_file.c);
 *   - /proc/self/mountinfo, parsed once (base_mountinfo.c);
 *   - numbers and namespace names from untrusted text (base_text.c);
 *   - monotonic time (base_time.c);
 *   - Prometheus text exposition (0.0.4) and duration histograms whose
 *     counters take concurrent updates without a lock (base_prom.c).
 *
 * Conventions as in catalog/catalog.h: 0 on success, a positive value only
 * where documented, -errno on failure. Every function may be called from
 * any thread, except base_log_init, which main calls once before any
 * thread starts. The header names no library type: SQLite's and jansson's
 * handles are declared here as incomplete structs, so including it pulls in
 * neither library (base_curl_errno takes curl's code as an int).
 */
#ifndef FERRY_BASE_H
#define FERRY_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sqlite3;
struct sqlite3_stmt;
struct json_t;

/* The project's version: --version of every program, and the
 * User-Agent and Server headers. */
#define FERRY_VERSION "0.1.0"

#define BASE_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ------------------------------------------------------------------ */
/* Logging                                                            */
/* ------------------------------------------------------------------ */

/*
 * One line per event on stderr:
 *   PROG: [LEVEL: ]text key=value key="value with spaces" err="errno text"
 * LEVEL is "error", "warning" or "debug"; info lines have none. With
 * stamps on (a daemon writing its log file) each line starts with the UTC
 * time, "2026-12-01T11:12:13.456Z ". Every line is written with one
 * write(2), so lines of different threads never interleave, and every byte
 * that is a control character or not valid UTF-8 is shown as \xNN
 * (base_text_escape): whatever a file name holds, one event stays one line.
 * Lines longer than BASE_LOG_LINE_MAX are cut and end in "...".
 */
enum base_log_level {
	BASE_LOG_ERROR = 0,
	BASE_LOG_WARN = 1,
	BASE_LOG_INFO = 2, /* the default */
	BASE_LOG_DEBUG = 3,
};

#define BASE_LOG_LINE_MAX 4096u

/* Set the program name shown on every line (borrowed: a string literal or
 * argv[0]'s basename) and the most verbose level written. Call once in
 * main, before any thread starts; until then lines say "ferry". -v raises
 * the level by one, -q lowers it to BASE_LOG_ERROR. */
void base_log_init(const char *prog, int level);

/* Start each line with a UTC timestamp (a daemon's log file). Same rule
 * as base_log_init: main, before threads. */
void base_log_stamps(int on);

/* The program name and the level given to base_log_init. */
const char *base_log_prog(void);
int base_log_level(void);

/* 1 when lines of this level are written. Cheap: test it before building
 * an expensive field. */
int base_log_on(int level);

/* Write one line at level (dropped when !base_log_on(level)). fmt is the
 * event text and its fields; no trailing newline. */
void base_log(int level, const char *fmt, ...) BASE_PRINTF(2, 3);
void base_vlog(int level, const char *fmt, va_list ap) BASE_PRINTF(2, 0);

/* The same with err (a -errno or errno value; 0 adds nothing) appended as
 * err="strerror text". */
void base_log_err(int level, int err, const char *fmt, ...) BASE_PRINTF(3, 4);

/* Shorthands. */
#define base_error(...) base_log(BASE_LOG_ERROR, __VA_ARGS__)
#define base_warn(...) base_log(BASE_LOG_WARN, __VA_ARGS__)
#define base_info(...) base_log(BASE_LOG_INFO, __VA_ARGS__)
#define base_debug(...) base_log(BASE_LOG_DEBUG, __VA_ARGS__)

/* "ENOENT" for -ENOENT or ENOENT: the errno's name for key=value fields;
 * "EUNKNOWN" for a number without one. Static storage. */
const char *base_errname(int err);

/* ------------------------------------------------------------------ */
/* Text from untrusted bytes                                          */
/* ------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s[0..n) (1..4, shortest form, no
 * surrogates, at most U+10FFFF), or 0 when s does not start one. */
size_t base_utf8_len(const unsigned char *s, size_t n);

/* Copy src[0..len) into dst for display, NUL-terminated: valid UTF-8 other
 * than control characters passes unchanged; every other byte (controls,
 * DEL, bytes that are not part of valid UTF-8, NUL) becomes the four
 * characters \xNN (lowercase hex). The rule of every log line and of every
 * JSON string made from bytes. Returns the length the whole result needs
 * (like snprintf: it was cut when that is >= cap). */
size_t base_text_escape(char *dst, size_t cap, const void *src, size_t len);

/* The value of hex digit c (either case), or -1. */
int base_hex_digit(char c);
/* n bytes of p as 2n lowercase hex digits and a NUL into out (room for
 * 2n + 1). */
void base_hex_encode(const void *p, size_t n, char *out);

/* The rule behind base_text_escape and base_json_bytes: with keep_controls
 * set, control characters (not NUL) pass as themselves. */
size_t base_bytes_escape(char *dst, size_t cap, const void *src, size_t len,
			 int keep_controls);

/* Parse a whole decimal number (optional leading '-' for long, nothing
 * else around it) within [lo, hi]. 0 or -EINVAL (empty, junk, out of
 * range). s may be NULL (-EINVAL). */
int base_parse_long(const char *s, long lo, long hi, long *ret);
int base_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret);

/* Namespace names: [A-Za-z0-9._-]{1,BASE_NS_NAME_MAX}, not starting with
 * '.', the rule the replicator's NAME=DIR and the hydrator's URL share.
 * 0 or -EINVAL. */
#define BASE_NS_NAME_MAX 64u
int base_ns_name_check(const char *name, size_t len);

/* ------------------------------------------------------------------ */
/* Command lines                                                      */
/* ------------------------------------------------------------------ */

/* The one line for a getopt_long failure: c is what it returned (':' for
 * a missing value, anything else for an unknown option) and argv the
 * vector it parsed, with optind and optopt as it left them. Names the
 * option (a short one inside a cluster by its letter) and points at
 * --help. The caller exits 2. */
void base_opt_error(int c, char *const argv[]);

/* base_parse_long for the value arg of option name ("--jobs"), with the
 * one line "--jobs wants a whole number from 1 to 256, not 'x'" when it
 * is not one. 0 or -EINVAL. */
int base_opt_long(const char *name, const char *arg, long lo, long hi,
		  long *ret);

/* ------------------------------------------------------------------ */
/* JSON (jansson)                                                     */
/* ------------------------------------------------------------------ */

/* A new JSON string of src[0..len) as base_text_escape shows it, except
 * that control characters other than NUL stay themselves (JSON escapes
 * them as \u00XX): valid UTF-8 round-trips exactly; a byte that is not
 * part of valid UTF-8, or NUL, arrives as the text \xNN. NULL when out of
 * memory. The caller owns the reference. */
struct json_t *base_json_bytes(const void *src, size_t len);

/* base_json_bytes(s, strlen(s)). */
struct json_t *base_json_str(const char *s);

/* Dump v as one compact line (keys in insertion order, reals with at most
 * 15 significant digits, no newline) into buf; returns the length, or
 * -ENOBUFS when it does not fit in cap - 1 bytes (buf is then ""). */
int base_json_line(const struct json_t *v, char *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* SQLite                                                             */
/* ------------------------------------------------------------------ */

/* The one translation of a SQLite result code into -errno. rc must be an
 * error (not SQLITE_OK/ROW/DONE); db may be NULL. The native code and
 * message are logged at debug level with what (the caller logs the event
 * itself, once, with its context). Mapping:
 *   NOMEM -> -ENOMEM; CORRUPT, NOTADB, FORMAT, TOOBIG -> -EBADMSG;
 *   CONSTRAINT -> -EEXIST; FULL -> -ENOSPC; BUSY, LOCKED -> -EBUSY;
 *   PERM, AUTH -> -EACCES; READONLY -> -EROFS; RANGE, MISUSE -> -EINVAL;
 *   INTERRUPT -> -EINTR; CANTOPEN, IOERR -> the OS errno when SQLite kept
 *   one (so a missing file is -ENOENT), else -EIO; anything else -> -EIO. */
int base_sqlite_errno(struct sqlite3 *db, int rc, const char *what);

/* A SQLite URI "file:<path percent-encoded>[?query]" for path, so a path
 * holding '?', '#' or '%' is never read as URI syntax; an absolute path
 * gets an empty authority ("file:///x"). query may be NULL. *ret_uri is
 * malloc'ed; the caller frees it. 0, -EINVAL (empty path), -ENOMEM. */
int base_sqlite_uri(const char *path, const char *query, char **ret_uri);

/* Run fixed SQL (no parameters). 0 or -errno (base_sqlite_errno). */
int base_sqlite_exec(struct sqlite3 *db, const char *sql, const char *what);

/* ATTACH the database file at path as schema `as` (a fixed SQL name the
 * caller writes, never input: it is pasted into the statement; the path
 * is bound). 0 or -errno. */
int base_sqlite_attach(struct sqlite3 *db, const char *path, const char *as);

/* Prepare one statement for repeated use (SQLITE_PREPARE_PERSISTENT).
 * 0 or -errno; *ret_st is NULL on failure. */
int base_sqlite_prepare(struct sqlite3 *db, const char *sql,
			struct sqlite3_stmt **ret_st);

/* Finalize *st if set and clear it. */
void base_sqlite_finalize(struct sqlite3_stmt **st);

/* ------------------------------------------------------------------ */
/* curl                                                               */
/* ------------------------------------------------------------------ */

/* The one translation of a CURLcode (passed as int) into -errno; the code
 * and curl's text are logged at debug level. Mapping:
 *   OK -> 0;
 *   COULDNT_RESOLVE_HOST, COULDNT_RESOLVE_PROXY, COULDNT_CONNECT
 *     -> -EHOSTUNREACH (the server was never heard from);
 *   OPERATION_TIMEDOUT -> -ETIMEDOUT;
 *   SEND_ERROR, RECV_ERROR, GOT_NOTHING, PARTIAL_FILE, SSL_CONNECT_ERROR,
 *   HTTP2, HTTP2_STREAM -> -ECONNRESET (cut mid-transfer);
 *   OUT_OF_MEMORY -> -ENOMEM;
 *   UNSUPPORTED_PROTOCOL, URL_MALFORMAT -> -EINVAL;
 *   WRITE_ERROR, ABORTED_BY_CALLBACK -> -ECANCELED (one of our callbacks
 *     stopped the transfer; it knows why);
 *   anything else -> -EPROTO. */
int base_curl_errno(int curl_code);

/* 1 when err (-errno) is a transport failure worth retrying: -EHOSTUNREACH,
 * -ETIMEDOUT, -ECONNRESET, -ECONNREFUSED, -EAGAIN. */
int base_err_transient(int err);

/* ------------------------------------------------------------------ */
/* zstd                                                               */
/* ------------------------------------------------------------------ */

/* The one translation of a zstd result code (ZSTD_isError(code) true, or
 * 0 for success) into -errno:
 *   - allocation failure is -ENOMEM either way;
 *   - while encoding (decoding 0), "destination too small" is -ENOBUFS
 *     (the frame encoder reads it as "does not shrink enough"), anything
 *     else a library failure, -EIO;
 *   - while decoding, every other error means the input is bad: -EBADMSG.
 * Logs nothing (ZSTD_getErrorName gives the text for a message). */
int base_zstd_errno(size_t code, int decoding);

/* ------------------------------------------------------------------ */
/* Files                                                              */
/* ------------------------------------------------------------------ */

/* Write all of buf, retrying short writes and EINTR. 0 or -errno. */
int base_write_all(int fd, const void *buf, size_t len);
/* pwrite all of buf at off, retrying short writes and EINTR. */
int base_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

/* pread up to len bytes at off, retrying short reads and EINTR; *ret_got is
 * less than len only at the end of the file. 0 or -errno. */
int base_pread_full(int fd, void *buf, size_t len, uint64_t off,
		    size_t *ret_got);

/* Read a small file whole into buf, NUL-terminated; *ret_len (may be NULL)
 * is its length. -EFBIG when it holds cap - 1 bytes or more (cap >= 2),
 * -errno from open/read (-ENOENT: no such file). */
int base_file_read_small(const char *path, char *buf, size_t cap,
			 size_t *ret_len);

/* Replace path durably with data[0..len): "path.tmp" (a stale one is
 * removed, then O_EXCL), write, fsync, rename over path, fsync the
 * directory. mode is the new file's (less the umask). 0 or -errno; no
 * temp file is left. */
int base_file_write_atomic(const char *path, const void *data, size_t len,
			   mode_t mode);

/* The same, but a new file only, with exactly mode (not narrowed by the
 * umask): linked into place, never over an existing path (-EEXIST, path
 * untouched). */
int base_file_write_new(const char *path, const void *data, size_t len,
			mode_t mode);

/* A path (or any short string) built printf-style into a malloc'd buffer
 * the caller frees: NULL on allocation failure or a bad format. */
char *base_path_fmt(const char *fmt, ...) BASE_PRINTF(1, 2);

/* A relative path that grows and shrinks as a walk goes down and up. */
struct base_path {
	char *b; /* NUL-terminated once pushed to; free() it */
	size_t len, cap;
};
/* Append "/name" (just "name" when empty); *ret_old is what
 * base_path_pop takes to undo it. 0 or -ENOMEM (p unchanged). */
int base_path_push(struct base_path *p, const char *name, size_t len,
		   size_t *ret_old);
void base_path_pop(struct base_path *p, size_t old);

/* mkdir -p: create path and missing parents with mode. 0 when path is a
 * directory afterwards; -ENOTDIR when it exists as something else. */
int base_mkdir_p(const char *path, mode_t mode);

/* fsync a file or a directory by name; or the directory holding path
 * (after a rename into it). 0 or -errno. */
int base_fsync_path(const char *path);
int base_fsync_parent(const char *path);

/* ------------------------------------------------------------------ */
/* /proc/self/mountinfo                                               */
/* ------------------------------------------------------------------ */

/* One line of a mountinfo table, with the kernel's octal escapes (\040 for
 * a space, \011, \012, \134) undone in root, point and source. Borrowed:
 * valid during the callback only. */
struct base_mount {
	unsigned major,
	    minor;	    /* st_dev of files on it: makedev(major, minor) */
	const char *root;   /* the mounted subtree of its filesystem */
	const char *point;  /* where it is mounted */
	const char *fstype; /* "ext4", "fuse.ferry", ... */
	const char *source; /* the mount source (a FUSE fsname) */
};

/* Call fn for each well-formed line of a mountinfo text, in order (later
 * lines are mounted over earlier ones), until fn returns non-zero; that
 * value is returned, else 0. Lines that do not parse are skipped. Pure:
 * tests feed it fake tables. -ENOMEM. */
typedef int (*base_mount_fn)(void *ctx, const struct base_mount *m);
int base_mountinfo_each(const char *text, base_mount_fn fn, void *ctx);

/* /proc/self/mountinfo, NUL-terminated, malloc'ed into *ret_text (the
 * caller frees). 0 or -errno (-EFBIG past 64 MiB). */
int base_mountinfo_read(char **ret_text);

/* ------------------------------------------------------------------ */
/* Time                                                               */
/* ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in nanoseconds: deadlines, rates, timeouts. */
uint64_t base_now_ns(void);

/* CLOCK_REALTIME in nanoseconds since the epoch: timestamps for people. */
int64_t base_wall_ns(void);

/* A condition variable whose timed waits run on base_now_ns's clock, so a
 * deadline is base_now_ns() + a timeout and a change of the wall clock
 * does not move it. 0 or -errno. */
int base_cond_init(pthread_cond_t *c);
/* pthread_cond_timedwait on a base_cond_init condvar (m held) until
 * deadline_ns (base_now_ns time): 0 when woken (perhaps spuriously),
 * ETIMEDOUT when the deadline passed. */
int base_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m,
			 uint64_t deadline_ns);

/* Name the calling thread "ferry-" + what (cut at 15 bytes), as top -H,
 * ps -L, perf and /proc/PID/task/TID/comm show it. */
void base_thread_name(const char *what);

/* ------------------------------------------------------------------ */
/* Prometheus text exposition format 0.0.4 (base_prom.c)              */
/* ------------------------------------------------------------------ */

/* A growable, NUL-terminated byte buffer (base_buf.c). A failed
 * allocation is remembered (err) and later appends do nothing, so a
 * builder checks once at the end; buf is NULL until the first append.
 * The owner frees with base_buf_fini. */
struct base_buf {
	char *buf;
	size_t len, cap;
	int err; /* 0, or -ENOMEM (-EINVAL: a format error) once one failed */
};
void base_buf_fini(struct base_buf *b);
void base_buf_add(struct base_buf *b, const void *p, size_t n);
void base_buf_str(struct base_buf *b, const char *s);
void base_buf_printf(struct base_buf *b, const char *fmt, ...)
    BASE_PRINTF(2, 3);

/* Make room for need elements of size bytes in the array *v of *cap
 * (doubling from 64; nothing moves when need <= *cap). 0 or -ENOMEM
 * (*v and *cap unchanged). */
int base_grow(void **v, size_t *cap, size_t need, size_t size);

/* The body of a GET /metrics answer, built into a growable buffer: a
 * family's "# HELP" and "# TYPE" lines, then its samples. A failed
 * allocation is remembered (err) and later calls do nothing, so a
 * renderer checks once at the end. Not thread-safe: one builder, one
 * thread. Names are the caller's ASCII literals ([a-zA-Z_:][a-zA-Z0-9_:]*,
 * not checked); label values may be any bytes: '\\', '"' and a newline
 * are escaped as the format says, other bytes go as they are. */
struct base_prom {
	struct base_buf out; /* the text; the caller frees (base_prom_fini) */
};

/* One label: name (ASCII literal) and value (any bytes, NUL-terminated). */
struct base_prom_label {
	const char *name;
	const char *value;
};

#define BASE_PROM_CTYPE "text/plain; version=0.0.4; charset=utf-8"

void base_prom_init(struct base_prom *p);
void base_prom_fini(struct base_prom *p);

/* "# HELP name help" (help: '\\' and newline escaped) and "# TYPE name
 * type"; type is "counter", "gauge" or "histogram". */
void base_prom_family(struct base_prom *p, const char *name, const char *type,
		      const char *help);

/* One sample line: name{l1="v1",...} value. n labels (0: no braces). */
void base_prom_u64(struct base_prom *p, const char *name,
		   const struct base_prom_label *labels, size_t n,
		   uint64_t value);
void base_prom_double(struct base_prom *p, const char *name,
		      const struct base_prom_label *labels, size_t n,
		      double value);

/* A histogram of durations: bucket upper bounds in seconds (ascending,
 * at most BASE_HIST_MAX), counts per bucket not cumulative (the last,
 * counts[n_bounds], is above every bound), the sum in nanoseconds.
 * base_hist_observe_ns may run on any number of threads at once (relaxed
 * atomics, no lock); a snapshot read while observations land can be a
 * few observations behind in one field, never torn. */
#define BASE_HIST_MAX 24
struct base_hist {
	const double *bounds; /* seconds, borrowed (a static table) */
	size_t n_bounds;
	uint64_t counts[BASE_HIST_MAX + 1];
	uint64_t sum_ns;
};

/* Set bounds (n <= BASE_HIST_MAX, ascending; -EINVAL otherwise) and zero
 * the counts. 0 or -EINVAL. */
int base_hist_init(struct base_hist *h, const double *bounds, size_t n);

/* Count one duration. Any thread. */
void base_hist_observe_ns(struct base_hist *h, uint64_t ns);

/* The _bucket lines (cumulative, le="..." added after labels, the last
 * le="+Inf"), _sum (seconds) and _count (equal to the +Inf bucket) of
 * histogram name, from a snapshot of h. */
void base_prom_hist(struct base_prom *p, const char *name,
		    const struct base_prom_label *labels, size_t n,
		    const struct base_hist *h);

#endif /* FERRY_BASE_H */
