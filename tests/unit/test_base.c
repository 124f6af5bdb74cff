/*
 * test_base.c — catalog/base/: the logger's lines, the byte display rule,
 * JSON strings from bytes, numbers and namespace names from text, the
 * SQLite and curl error maps, mountinfo parsing, the clocks. (Files are in
 * test_base_file.c.)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>
#include <sqlite3.h>

#include "catalog/base/base.h"

/* ---- the byte display rule ---- */

static void check_escape(const char *in, size_t len, const char *want)
{
	char out[256];
	size_t n = base_text_escape(out, sizeof(out), in, len);

	assert_string_equal(out, want);
	assert_int_equal(n, strlen(want));
}

static void test_text_escape(void **state)
{
	char small[8];
	size_t n;

	(void)state;
	check_escape("plain text", 10, "plain text");
	/* UTF-8 passes: é, €, 𝄞 (2, 3, 4 bytes). */
	check_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e", 14,
		     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e");
	/* Controls, DEL and NUL: one event stays one line. */
	check_escape("a\nb\tc\x7f", 6, "a\\x0ab\\x09c\\x7f");
	check_escape("a\0b", 3, "a\\x00b");
	/* Not UTF-8: a lone continuation byte, 0xff, an overlong '/', a
	 * surrogate, a truncated sequence, past U+10FFFF. */
	check_escape("\x80", 1, "\\x80");
	check_escape("\xff", 1, "\\xff");
	check_escape("\xc0\xaf", 2, "\\xc0\\xaf");
	check_escape("\xed\xa0\x80", 3, "\\xed\\xa0\\x80");
	check_escape("\xe2\x82", 2, "\\xe2\\x82");
	check_escape("\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80");
	/* A cut never ends inside a sequence or an escape, and the return
	 * value is the whole length, like snprintf. */
	n = base_text_escape(small, sizeof(small), "ab\xe2\x82\xac", 5);
	assert_int_equal(n, 5);
	assert_string_equal(small, "ab\xe2\x82\xac");
	n = base_text_escape(small, 5, "ab\xe2\x82\xac", 5);
	assert_int_equal(n, 5);
	assert_string_equal(small, "ab");
	n = base_text_escape(small, 6, "ab\xff", 3);
	assert_int_equal(n, 6);
	assert_string_equal(small, "ab");
	assert_int_equal(base_text_escape(NULL, 0, "\xff", 1), 4);
}

static void test_utf8_len(void **state)
{
	(void)state;
	assert_int_equal(base_utf8_len((const unsigned char *)"a", 1), 1);
	assert_int_equal(base_utf8_len((const unsigned char *)"\xc3\xa9", 2),
			 2);
	assert_int_equal(base_utf8_len((const unsigned char *)"\xc3\xa9", 1),
			 0);
	assert_int_equal(
	    base_utf8_len((const unsigned char *)"\xef\xbf\xbd", 3), 3);
	assert_int_equal(
	    base_utf8_len((const unsigned char *)"\xe0\x80\x80", 3), 0);
	assert_int_equal(base_utf8_len((const unsigned char *)"", 0), 0);
}

/* ---- numbers and names ---- */

static void test_parse(void **state)
{
	uint64_t u = 7;
	long l = 7;

	(void)state;
	assert_int_equal(base_parse_long("42", 1, 100, &l), 0);
	assert_int_equal(l, 42);
	assert_int_equal(base_parse_long("-5", -10, 10, &l), 0);
	assert_int_equal(l, -5);
	assert_int_equal(base_parse_long("101", 1, 100, &l), -EINVAL);
	assert_int_equal(base_parse_long("0", 1, 100, &l), -EINVAL);
	assert_int_equal(base_parse_long("4x", 1, 100, &l), -EINVAL);
	assert_int_equal(base_parse_long(" 4", 1, 100, &l), -EINVAL);
	assert_int_equal(base_parse_long("", 1, 100, &l), -EINVAL);
	assert_int_equal(base_parse_long(NULL, 1, 100, &l), -EINVAL);
	assert_int_equal(base_parse_long("99999999999999999999", 1, 100, &l),
			 -EINVAL);
	assert_int_equal(l, -5); /* untouched by failures */
	assert_int_equal(
	    base_parse_u64("18446744073709551615", 0, UINT64_MAX, &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(
	    base_parse_u64("18446744073709551616", 0, UINT64_MAX, &u), -EINVAL);
	/* strtoull would take "-1" as UINT64_MAX and skip spaces. */
	assert_int_equal(base_parse_u64("-1", 0, UINT64_MAX, &u), -EINVAL);
	assert_int_equal(base_parse_u64(" 1", 0, UINT64_MAX, &u), -EINVAL);
	assert_int_equal(base_parse_u64("+1", 0, UINT64_MAX, &u), -EINVAL);
	assert_int_equal(base_parse_u64("12", 13, 20, &u), -EINVAL);
}

static void test_ns_name(void **state)
{
	char long_name[BASE_NS_NAME_MAX + 2];

	(void)state;
	assert_int_equal(base_ns_name_check("data-1.x_y", 10), 0);
	assert_int_equal(base_ns_name_check(".hidden", 7), -EINVAL);
	assert_int_equal(base_ns_name_check("", 0), -EINVAL);
	assert_int_equal(base_ns_name_check("a/b", 3), -EINVAL);
	assert_int_equal(base_ns_name_check("a b", 3), -EINVAL);
	assert_int_equal(base_ns_name_check("caf\xc3\xa9", 5), -EINVAL);
	/* The length given is what is checked: a NUL inside is a byte. */
	assert_int_equal(base_ns_name_check("ab\0c", 4), -EINVAL);
	assert_int_equal(base_ns_name_check("abc", 2), 0);
	memset(long_name, 'a', sizeof(long_name));
	assert_int_equal(base_ns_name_check(long_name, BASE_NS_NAME_MAX), 0);
	assert_int_equal(base_ns_name_check(long_name, BASE_NS_NAME_MAX + 1),
			 -EINVAL);
}

/* ---- JSON ---- */

static void test_json_bytes(void **state)
{
	const char utf8[] =
	    "d\xc3\xa9j\xc3\xa0 vu/\xe2\x82\xac \xf0\x9f\x93\x81";
	char line[256];
	json_t *v, *o, *back;
	int n;

	(void)state;
	/* Valid UTF-8 round-trips exactly through a dump and a parse. */
	o = json_object();
	v = base_json_str(utf8);
	assert_non_null(v);
	json_object_set_new(o, "name", v);
	n = base_json_line(o, line, sizeof(line));
	assert_true(n > 0);
	assert_int_equal(strlen(line), (size_t)n);
	assert_null(strchr(line, '\n'));
	back = json_loads(line, 0, NULL);
	assert_non_null(back);
	assert_string_equal(json_string_value(json_object_get(back, "name")),
			    utf8);
	json_decref(back);
	/* Too small a buffer says so and leaves "". */
	assert_int_equal(base_json_line(o, line, 8), -ENOBUFS);
	assert_string_equal(line, "");
	json_decref(o);
	/* A byte that is not UTF-8 arrives as the text \xNN, NUL too;
	 * controls stay themselves (JSON escapes them). */
	v = base_json_bytes("a\xff"
			    "b\0c\n",
			    6);
	assert_non_null(v);
	assert_string_equal(json_string_value(v), "a\\xffb\\x00c\n");
	assert_int_equal(base_json_line(v, line, sizeof(line)),
			 (int)strlen("\"a\\\\xffb\\\\x00c\\n\""));
	assert_string_equal(line, "\"a\\\\xffb\\\\x00c\\n\"");
	json_decref(v);
	v = base_json_bytes(NULL, 0);
	assert_string_equal(json_string_value(v), "");
	json_decref(v);
}

static void test_json_reals(void **state)
{
	char line[128];
	json_t *o = json_pack("{s:I,s:f,s:f}", "n", (json_int_t)123456789012,
			      "rate", 1048576.125, "t", 0.001);

	(void)state;
	assert_non_null(o);
	assert_true(base_json_line(o, line, sizeof(line)) > 0);
	/* Insertion order, no spaces, at most 15 significant digits. */
	assert_string_equal(
	    line, "{\"n\":123456789012,\"rate\":1048576.125,\"t\":0.001}");
	json_decref(o);
}

/* ---- error maps ---- */

static void test_sqlite_errno(void **state)
{
	sqlite3 *db = NULL;
	char *uri = NULL;
	int rc;

	(void)state;
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_CORRUPT, "t"),
			 -EBADMSG);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_NOTADB, "t"), -EBADMSG);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_FULL, "t"), -ENOSPC);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_CONSTRAINT_UNIQUE, "t"),
			 -EEXIST);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_BUSY, "t"), -EBUSY);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_LOCKED, "t"), -EBUSY);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_NOMEM, "t"), -ENOMEM);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_READONLY, "t"), -EROFS);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_PERM, "t"), -EACCES);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_MISUSE, "t"), -EINVAL);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_INTERRUPT, "t"),
			 -EINTR);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_IOERR, "t"), -EIO);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_IOERR_NOMEM, "t"),
			 -ENOMEM);
	assert_int_equal(base_sqlite_errno(NULL, SQLITE_ERROR, "t"), -EIO);
	/* CANTOPEN carries the OS errno: a missing file is -ENOENT. */
	rc = sqlite3_open_v2("/nonexistent-ferry-dir/x.db", &db,
			     SQLITE_OPEN_READONLY, NULL);
	assert_int_equal(rc, SQLITE_CANTOPEN);
	assert_int_equal(base_sqlite_errno(db, rc, "open"), -ENOENT);
	sqlite3_close(db);
	/* URIs: '?', '#', '%' and spaces never read as URI syntax; an
	 * absolute path gets an empty authority. */
	assert_int_equal(base_sqlite_uri("/a b/c?d#e%f", "mode=ro", &uri), 0);
	assert_string_equal(uri, "file:///a%20b/c%3Fd%23e%25f?mode=ro");
	free(uri);
	assert_int_equal(base_sqlite_uri("//host/x", NULL, &uri), 0);
	assert_string_equal(uri, "file:////host/x");
	free(uri);
	assert_int_equal(base_sqlite_uri("rel.db", NULL, &uri), 0);
	assert_string_equal(uri, "file:rel.db");
	free(uri);
	assert_int_equal(base_sqlite_uri("", NULL, &uri), -EINVAL);
	assert_null(uri);
}

static void test_curl_errno(void **state)
{
	(void)state;
	assert_int_equal(base_curl_errno(CURLE_OK), 0);
	assert_int_equal(base_curl_errno(CURLE_COULDNT_CONNECT), -EHOSTUNREACH);
	assert_int_equal(base_curl_errno(CURLE_COULDNT_RESOLVE_HOST),
			 -EHOSTUNREACH);
	assert_int_equal(base_curl_errno(CURLE_OPERATION_TIMEDOUT), -ETIMEDOUT);
	assert_int_equal(base_curl_errno(CURLE_RECV_ERROR), -ECONNRESET);
	assert_int_equal(base_curl_errno(CURLE_PARTIAL_FILE), -ECONNRESET);
	assert_int_equal(base_curl_errno(CURLE_GOT_NOTHING), -ECONNRESET);
	assert_int_equal(base_curl_errno(CURLE_OUT_OF_MEMORY), -ENOMEM);
	assert_int_equal(base_curl_errno(CURLE_URL_MALFORMAT), -EINVAL);
	assert_int_equal(base_curl_errno(CURLE_WRITE_ERROR), -ECANCELED);
	assert_int_equal(base_curl_errno(CURLE_PEER_FAILED_VERIFICATION),
			 -EPROTO);
	/* What is worth retrying, and what is not. */
	assert_true(base_err_transient(base_curl_errno(CURLE_COULDNT_CONNECT)));
	assert_true(base_err_transient(base_curl_errno(CURLE_RECV_ERROR)));
	assert_true(
	    base_err_transient(base_curl_errno(CURLE_OPERATION_TIMEDOUT)));
	assert_true(base_err_transient(-EAGAIN));
	assert_false(base_err_transient(base_curl_errno(CURLE_WRITE_ERROR)));
	assert_false(base_err_transient(base_curl_errno(CURLE_URL_MALFORMAT)));
	assert_false(base_err_transient(-ENOENT));
	assert_false(base_err_transient(0));
}

/* ---- mountinfo ---- */

struct seen {
	char points[8][128], types[8][32], sources[8][128];
	unsigned major[8], minor[8];
	int n, stop_at;
};

static int seen_cb(void *ctx, const struct base_mount *m)
{
	struct seen *s = ctx;

	if (s->n == 8)
		return -1;
	snprintf(s->points[s->n], sizeof(s->points[0]), "%s", m->point);
	snprintf(s->types[s->n], sizeof(s->types[0]), "%s", m->fstype);
	snprintf(s->sources[s->n], sizeof(s->sources[0]), "%s", m->source);
	s->major[s->n] = m->major;
	s->minor[s->n] = m->minor;
	s->n++;
	return s->n == s->stop_at ? 7 : 0;
}

static void test_mountinfo(void **state)
{
	/* A root, a FUSE mount whose point and source hold escaped spaces,
	 * tabs, backslashes and " - ", a line with no separator (skipped),
	 * one with optional fields, and one without a newline at the end. */
	static const char table[] =
	    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	    "40 22 0:52 / /mnt/my\\040dir\\040-\\040x rw,nosuid - fuse.ferry "
	    "ferry:/var/cache/a\\040b\\011c\\134d,e rw,user_id=0\n"
	    "garbage line without the separator\n"
	    "41 22 0:53 / /t rw shared:3 master:1 - tmpfs tmpfs rw\n"
	    "42 22 0:54 /sub /last rw - fuse.other src rw";
	struct seen s;

	(void)state;
	memset(&s, 0, sizeof(s));
	assert_int_equal(base_mountinfo_each(table, seen_cb, &s), 0);
	assert_int_equal(s.n, 4);
	assert_string_equal(s.points[0], "/");
	assert_string_equal(s.types[0], "ext4");
	assert_string_equal(s.points[1], "/mnt/my dir - x");
	assert_string_equal(s.types[1], "fuse.ferry");
	assert_string_equal(s.sources[1], "ferry:/var/cache/a b\tc\\d,e");
	assert_int_equal(s.major[1], 0);
	assert_int_equal(s.minor[1], 52);
	assert_string_equal(s.types[2], "tmpfs");
	assert_string_equal(s.points[3], "/last");
	assert_string_equal(s.sources[3], "src");
	/* A non-zero return stops the walk and is returned. */
	memset(&s, 0, sizeof(s));
	s.stop_at = 2;
	assert_int_equal(base_mountinfo_each(table, seen_cb, &s), 7);
	assert_int_equal(s.n, 2);
	/* The real table parses and has the root. */
	{
		char *mi = NULL;
		int i, root = 0;

		assert_int_equal(base_mountinfo_read(&mi), 0);
		memset(&s, 0, sizeof(s));
		base_mountinfo_each(mi, seen_cb, &s);
		for (i = 0; i < s.n; i++)
			root |= !strcmp(s.points[i], "/");
		assert_true(root);
		free(mi);
	}
}

/* ---- the logger ---- */

/* Run fn with stderr captured; the text written, NUL-terminated. */
static char *captured(void (*fn)(void))
{
	static char out[3 * BASE_LOG_LINE_MAX];
	int p[2], saved;
	ssize_t n;
	size_t have = 0;

	assert_int_equal(pipe(p), 0);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	dup2(p[1], STDERR_FILENO);
	close(p[1]);
	fn();
	dup2(saved, STDERR_FILENO);
	close(saved);
	while ((n = read(p[0], out + have, sizeof(out) - 1 - have)) > 0)
		have += (size_t)n;
	close(p[0]);
	out[have] = '\0';
	return out;
}

static void log_levels(void)
{
	base_log_init("t-prog", BASE_LOG_INFO);
	base_debug("not shown");
	base_info("ready ns=%s files=%d", "data", 3);
	base_warn("slow link rate=%d", 5);
	base_error("cannot open path=%s", "/x y");
	base_log_err(BASE_LOG_ERROR, -ENOENT, "no store dir=%s", "/c");
	base_log_err(BASE_LOG_WARN, 0, "nothing appended");
}

static void log_quiet(void)
{
	base_log_init("t-prog", BASE_LOG_ERROR);
	base_info("hidden");
	base_warn("hidden too");
	base_error("shown");
	base_log_init("t-prog", BASE_LOG_DEBUG);
	base_debug("now shown");
}

static void log_bytes(void)
{
	base_log_init("t-prog", BASE_LOG_INFO);
	base_info("name=%s", "a\nb\xff"
			     "caf\xc3\xa9");
}

static void log_long(void)
{
	char big[BASE_LOG_LINE_MAX * 2];
	size_t i;

	/* 3-byte characters all the way, so the cut falls inside one. */
	for (i = 0; i + 3 < sizeof(big); i += 3)
		memcpy(big + i, "\xe2\x82\xac", 3);
	big[i] = '\0';
	base_log_init("t-prog", BASE_LOG_INFO);
	base_info("long=%s", big);
}

/* Escapes of 4 bytes each, one byte off the 3-byte units above, so the
 * cut falls between escapes. */
static void log_long_escapes(void)
{
	char big[BASE_LOG_LINE_MAX];

	memset(big, 0xff, sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	base_log_init("t-prog", BASE_LOG_INFO);
	base_info("x%s", big);
}

static void check_cut(const char *out)
{
	size_t len = strlen(out);

	/* The pipe read stops at the first NUL: a NUL in the line would
	 * show as a line that ends early, without "...\n". */
	assert_true(len <= BASE_LOG_LINE_MAX);
	assert_true(len > BASE_LOG_LINE_MAX - 16);
	assert_memory_equal(out + len - 4, "...\n", 4);
	assert_true(strchr(out, '\n') == out + len - 1);
}

static void log_stamped(void)
{
	base_log_init("t-prog", BASE_LOG_INFO);
	base_log_stamps(1);
	base_info("mounted");
	base_log_stamps(0);
}

static void test_log(void **state)
{
	char *out;
	regex_t re;
	size_t len;

	(void)state;
	out = captured(log_levels);
	assert_string_equal(out, "t-prog: ready ns=data files=3\n"
				 "t-prog: warning: slow link rate=5\n"
				 "t-prog: error: cannot open path=/x y\n"
				 "t-prog: error: no store dir=/c err=\"No such "
				 "file or directory\"\n"
				 "t-prog: warning: nothing appended\n");
	assert_string_equal(base_log_prog(), "t-prog");
	out = captured(log_quiet);
	assert_string_equal(out, "t-prog: error: shown\n"
				 "t-prog: debug: now shown\n");
	assert_true(base_log_on(BASE_LOG_DEBUG));
	/* One event, one line: controls and non-UTF-8 bytes are shown. */
	out = captured(log_bytes);
	assert_string_equal(out, "t-prog: name=a\\x0ab\\xffcaf\xc3\xa9\n");
	/* A long line is cut, ends in "..." and a newline, and holds no
	 * broken UTF-8 sequence. */
	out = captured(log_long);
	check_cut(out);
	len = strlen(out);
	for (size_t i = 0; i + 4 < len;) {
		size_t k = base_utf8_len((unsigned char *)out + i, len - 4 - i);

		assert_true(k > 0);
		i += k;
	}
	out = captured(log_long_escapes);
	check_cut(out);
	/* Whole escapes only before the "...". */
	len = strlen(out) - 4 - strlen("t-prog: x");
	assert_int_equal(len % 4, 0);
	for (size_t i = 0; i < len; i += 4)
		assert_memory_equal(out + strlen("t-prog: x") + i, "\\xff", 4);
	out = captured(log_stamped);
	assert_int_equal(
	    regcomp(&re,
		    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\."
		    "[0-9]{3}Z t-prog: mounted\n$",
		    REG_EXTENDED),
	    0);
	assert_int_equal(regexec(&re, out, 0, NULL, 0), 0);
	regfree(&re);
	assert_string_equal(base_errname(-ENOENT), "ENOENT");
	assert_string_equal(base_errname(EIO), "EIO");
	assert_string_equal(base_errname(99999), "EUNKNOWN");
}

/* getopt_long over argv (NULL-terminated) until it fails; then the line
 * base_opt_error writes. */
static char *opt_line_argv[8];

static void opt_run(void)
{
	static const struct option lo[] = {
	    {"jobs", required_argument, NULL, 'j'},
	    {"verbose", no_argument, NULL, 'v'},
	    {NULL, 0, NULL, 0},
	};
	int argc = 0, c;

	while (opt_line_argv[argc])
		argc++;
	base_log_init("t-prog", BASE_LOG_INFO);
	opterr = 0;
	optind = 0; /* glibc: a full reset, clusters included */
	while ((c = getopt_long(argc, opt_line_argv, ":j:v", lo, NULL)) != -1)
		if (c == ':' || c == '?') {
			base_opt_error(c, opt_line_argv);
			return;
		}
}

static char *opt_line(const char *a, const char *b)
{
	static char w0[] = "prog", w1[64], w2[64];

	snprintf(w1, sizeof(w1), "%s", a);
	opt_line_argv[0] = w0;
	opt_line_argv[1] = w1;
	opt_line_argv[2] = NULL;
	if (b) {
		snprintf(w2, sizeof(w2), "%s", b);
		opt_line_argv[2] = w2;
		opt_line_argv[3] = NULL;
	}
	return captured(opt_run);
}

static void opt_num(void)
{
	long v = 5;

	base_log_init("t-prog", BASE_LOG_INFO);
	assert_int_equal(base_opt_long("--jobs", "7", 1, 8, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(base_opt_long("--jobs", "9", 1, 8, &v), -EINVAL);
	assert_int_equal(v, 7);
}

static void test_opt_errors(void **state)
{
	(void)state;
	assert_string_equal(opt_line("--bogus", NULL),
			    "t-prog: error: unknown option '--bogus' (see "
			    "--help)\n");
	/* Inside a cluster the letter is named, not the whole word. */
	assert_string_equal(
	    opt_line("-vz", NULL),
	    "t-prog: error: unknown option '-z' (see --help)\n");
	assert_string_equal(opt_line("-v", "-j"),
			    "t-prog: error: option '-j' needs a value (see "
			    "--help)\n");
	assert_string_equal(opt_line("--jobs", NULL),
			    "t-prog: error: option '--jobs' needs a value (see "
			    "--help)\n");
	assert_string_equal(captured(opt_num),
			    "t-prog: error: --jobs wants a whole number from 1 "
			    "to 8, not '9'\n");
}

static void test_clocks(void **state)
{
	uint64_t a = base_now_ns(), b;
	int64_t w = base_wall_ns();

	(void)state;
	usleep(2000);
	b = base_now_ns();
	assert_true(b >= a + 1000000);
	/* After 2020, before 2200. */
	assert_true(w > 1577836800ll * 1000000000ll);
	assert_true(w < 7258118400ll * 1000000000ll);
}

struct cond_fx {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int flag;
};

static void *cond_signal(void *arg)
{
	struct cond_fx *c = arg;

	usleep(20000);
	pthread_mutex_lock(&c->mu);
	c->flag = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* base_cond_wait_until waits on base_now_ns's clock: a deadline 30 ms
 * ahead is waited out (a condvar on the wall clock would take it as long
 * past and return at once), a past one returns at once, and a signal
 * ends the wait long before a far deadline. */
static void test_cond(void **state)
{
	struct cond_fx c = {.flag = 0};
	uint64_t deadline, far;
	pthread_t t;
	int r = 0;

	(void)state;
	pthread_mutex_init(&c.mu, NULL);
	assert_int_equal(base_cond_init(&c.cv), 0);
	pthread_mutex_lock(&c.mu);
	deadline = base_now_ns() + 30000000ull;
	while (r != ETIMEDOUT)
		r = base_cond_wait_until(&c.cv, &c.mu, deadline);
	assert_true(base_now_ns() >= deadline);
	assert_int_equal(base_cond_wait_until(&c.cv, &c.mu, deadline),
			 ETIMEDOUT);
	assert_int_equal(pthread_create(&t, NULL, cond_signal, &c), 0);
	far = base_now_ns() + 10000000000ull;
	r = 0;
	while (!c.flag && r != ETIMEDOUT)
		r = base_cond_wait_until(&c.cv, &c.mu, far);
	assert_int_equal(c.flag, 1);
	assert_true(base_now_ns() < far);
	pthread_mutex_unlock(&c.mu);
	pthread_join(t, NULL);
	pthread_cond_destroy(&c.cv);
	pthread_mutex_destroy(&c.mu);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_text_escape),
	    cmocka_unit_test(test_utf8_len),
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_ns_name),
	    cmocka_unit_test(test_json_bytes),
	    cmocka_unit_test(test_json_reals),
	    cmocka_unit_test(test_sqlite_errno),
	    cmocka_unit_test(test_curl_errno),
	    cmocka_unit_test(test_mountinfo),
	    cmocka_unit_test(test_log),
	    cmocka_unit_test(test_opt_errors),
	    cmocka_unit_test(test_clocks),
	    cmocka_unit_test(test_cond),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
