/*
 * tests/unit/test_httpd.c — catalog/httpd/, the one HTTP/1.1 server layer,
 * on its own:
 *   - the HOST:PORT rule, with the cases the replicator's and the
 *     hydrator's old parsers disagreed on (port 0; an IPv6 address without
 *     brackets), resolving, the name of what was bound, loopback;
 *   - the response writer: reason phrases, Server, Date, the framing of a
 *     known length, of a stream for HTTP/1.1 (chunked) and for HTTP/1.0
 *     (the close, which the head then says), Connection, extra lines;
 *   - the request reader: heads and bodies fed whole and byte by byte,
 *     pipelined requests, chunked bodies, keep-alive, Expect, and each
 *     limit to its status (414, 431 by bytes and by lines, 413 said and
 *     sent, 405 for CONNECT, 400), a refusal sticky;
 *   - the engine, with a server of the test's own on a libuv loop in a
 *     thread: answers in order behind a slow one, a streamed answer
 *     chunked for HTTP/1.1 and close-delimited for HTTP/1.0, HEAD without
 *     a body, a refused request dispatched with its status, per-request
 *     and per-connection server state, and the counting hooks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "catalog/base/base.h"
#include "catalog/httpd/httpd.h"
#include "tsupport.h"

/* -- the HOST:PORT rule -- */

static void test_listen_split(void **state)
{
	static const struct {
		const char *s, *host;
		unsigned port;
	} good[] = {
	    {"127.0.0.1:9851", "127.0.0.1", 9851},
	    {"[::1]:80", "::1", 80},
	    {"localhost:1", "localhost", 1},
	    {"0.0.0.0:65535", "0.0.0.0", 65535},
	    /* port 0, any free one: the replicator took it, the hydrator's
	     * parser did not; now every server does */
	    {"127.0.0.1:0", "127.0.0.1", 0},
	    {"[::1]:0", "::1", 0},
	    {"[fe80::1%lo]:8700", "fe80::1%lo", 8700},
	};
	static const char *const bad[] = {
	    "nonsense",
	    ":9851",
	    "127.0.0.1:",
	    "h:65536",
	    "h:12x",
	    "h:-1",
	    "h:+80",
	    "h: 80",
	    "[::1]80",
	    "[::1]:",
	    "[]:80",
	    "[::1",
	    "a]:80",
	    "a[b:80",
	    "[a[b]:80",
	    "",
	    /* an IPv6 address without brackets: the replicator's parser
	     * split it at the last ':' (host "::1", port 80), the hydrator's
	     * refused it; refused now, since "::1:80" is itself an address */
	    "::1:80",
	    "fe80::1:8700",
	    /* two ports */
	    "h:1:2",
	};
	char host[64];
	uint16_t port;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		port = 1;
		assert_int_equal(
		    httpd_listen_split(good[i].s, host, sizeof(host), &port),
		    0);
		assert_string_equal(host, good[i].host);
		assert_int_equal(port, good[i].port);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
		    httpd_listen_split(bad[i], host, sizeof(host), &port),
		    -EINVAL);
	assert_int_equal(httpd_listen_split(NULL, host, sizeof(host), &port),
			 -EINVAL);
	/* a host longer than the buffer is refused, not cut */
	assert_int_equal(httpd_listen_split("abcdefgh:1", host, 8, &port),
			 -EINVAL);
	assert_int_equal(httpd_listen_split("abcdefg:1", host, 8, &port), 0);
}

static void test_listen_resolve(void **state)
{
	struct sockaddr_storage sa;
	struct sockaddr_in6 b6 = {.sin6_family = AF_INET6};
	struct sockaddr_in b4 = {.sin_family = AF_INET};
	char name[64];

	(void)state;
	assert_int_equal(httpd_listen_resolve("127.0.0.1:8700", &sa), 0);
	assert_int_equal(sa.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&sa)->sin_port), 8700);
	assert_int_equal(httpd_sockaddr_loopback((struct sockaddr *)&sa), 1);
	assert_int_equal(httpd_listen_resolve("[::1]:0", &sa), 0);
	assert_int_equal(sa.ss_family, AF_INET6);
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&sa)->sin6_port), 0);
	assert_int_equal(httpd_sockaddr_loopback((struct sockaddr *)&sa), 1);
	assert_int_equal(httpd_listen_resolve("0.0.0.0:1", &sa), 0);
	assert_int_equal(httpd_sockaddr_loopback((struct sockaddr *)&sa), 0);
	assert_int_equal(httpd_listen_resolve("::1:80", &sa), -EINVAL);
	assert_int_equal(httpd_listen_resolve("no-such-host.invalid:80", &sa),
			 -EADDRNOTAVAIL);
	assert_int_equal(httpd_host_loopback("127.0.0.1"), 1);
	assert_int_equal(httpd_host_loopback("::1"), 1);
	assert_int_equal(httpd_host_loopback("0.0.0.0"), 0);
	assert_int_equal(httpd_host_loopback("no-such-host.invalid"), 0);

	/* what a log line shows: the port bound, the host as given */
	b4.sin_port = htons(41234);
	assert_int_equal(httpd_listen_name("127.0.0.1:0",
					   (struct sockaddr *)&b4, name,
					   sizeof(name)),
			 0);
	assert_string_equal(name, "127.0.0.1:41234");
	b6.sin6_port = htons(41234);
	assert_int_equal(httpd_listen_name("[::1]:0", (struct sockaddr *)&b6,
					   name, sizeof(name)),
			 0);
	assert_string_equal(name, "[::1]:41234");
	assert_int_equal(
	    httpd_listen_name("localhost:9000", NULL, name, sizeof(name)), 0);
	assert_string_equal(name, "localhost:9000");
	assert_int_equal(httpd_listen_name("localhost:9000", NULL, name, 8),
			 -ENOBUFS);
}

/* A blocking listener on port 0 gets a port, and answers connects. */
static void test_listen_socket(void **state)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	int fd;

	(void)state;
	assert_int_equal(httpd_listen_resolve("127.0.0.1:0", &sa), 0);
	fd = httpd_listen_socket(&sa, 4);
	assert_true(fd >= 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	assert_int_not_equal(ntohs(((struct sockaddr_in *)&sa)->sin_port), 0);
	assert_int_equal(
	    tsup_port_answers(ntohs(((struct sockaddr_in *)&sa)->sin_port)), 1);
	close(fd);
}

/* -- the response writer -- */

static void test_head_format(void **state)
{
	char buf[1024];
	struct httpd_head h = {
	    .status = 200,
	    .server = HTTPD_SERVER_REPLICATOR,
	    .ctype = "text/plain",
	    .length = 5,
	    .extra = "ETag: \"x\"\r\n",
	    .http_minor = 1,
	    .keep_alive = 1,
	};
	int n;

	(void)state;
	n = httpd_head_format(&h, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	assert_memory_equal(buf, "HTTP/1.1 200 OK\r\nServer: ferry-replicator/",
			    42);
	assert_non_null(strstr(
	    buf, "\r\nServer: ferry-replicator/" FERRY_VERSION "\r\nDate: "));
	assert_non_null(strstr(buf,
			       " GMT\r\nContent-Type: text/plain\r\n"
			       "Content-Length: 5\r\nETag: \"x\"\r\n\r\n"));
	assert_null(strstr(buf, "Connection"));
	assert_int_equal(h.keep_alive, 1);
	assert_int_equal(h.chunked, 0);

	/* HTTP/1.0 keep-alive is said */
	h.http_minor = 0;
	assert_true(httpd_head_format(&h, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "\r\nConnection: keep-alive\r\n\r\n"));

	/* a stream: chunked for 1.1 */
	h.http_minor = 1;
	h.length = -1;
	h.extra = NULL;
	assert_true(httpd_head_format(&h, buf, sizeof(buf)) > 0);
	assert_int_equal(h.chunked, 1);
	assert_int_equal(h.keep_alive, 1);
	assert_non_null(strstr(buf, "\r\nTransfer-Encoding: chunked\r\n\r\n"));
	assert_null(strstr(buf, "Content-Length"));

	/* ... and up to the close for 1.0, which says so */
	h.http_minor = 0;
	assert_true(httpd_head_format(&h, buf, sizeof(buf)) > 0);
	assert_int_equal(h.chunked, 0);
	assert_int_equal(h.keep_alive, 0);
	assert_non_null(strstr(buf, "\r\nConnection: close\r\n\r\n"));
	assert_null(strstr(buf, "Transfer-Encoding"));
	assert_null(strstr(buf, "Content-Length"));

	/* the hydrator's name, no type, a closing answer */
	h = (struct httpd_head){.status = 404,
				.server = HTTPD_SERVER_HYDRATOR,
				.length = 0,
				.http_minor = 1};
	assert_true(httpd_head_format(&h, buf, sizeof(buf)) > 0);
	assert_memory_equal(buf, "HTTP/1.1 404 Not Found\r\n", 24);
	assert_non_null(strstr(buf, "\r\nServer: ferry-hydrator/"));
	assert_null(strstr(buf, "Content-Type"));
	assert_non_null(
	    strstr(buf, "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));

	/* no room: nothing half made */
	assert_int_equal(httpd_head_format(&h, buf, 40), -ENOBUFS);

	assert_string_equal(httpd_reason(206), "Partial Content");
	assert_string_equal(httpd_reason(410), "Gone");
	assert_string_equal(httpd_reason(413), "Payload Too Large");
	assert_string_equal(httpd_reason(414), "URI Too Long");
	assert_string_equal(httpd_reason(416), "Range Not Satisfiable");
	assert_string_equal(httpd_reason(431),
			    "Request Header Fields Too Large");
	assert_string_equal(httpd_reason(503), "Service Unavailable");
	assert_string_equal(httpd_reason(599), "Internal Server Error");
	assert_string_equal(httpd_reason(499), "Error");
	assert_int_equal(httpd_chunk_prefix(0x20, buf), 4);
	assert_memory_equal(buf, "20\r\n", 4);
	assert_int_equal(httpd_chunk_prefix(0, buf), 3);
}

/* -- the request reader -- */

/* What a reader made of a stream: the events in order (one letter each:
 * H head, B body, E end, F failure), the bodies, the URLs. */
struct seen {
	char ev[64];
	size_t nev;
	char body[4096];
	size_t body_len;
	char urls[4][256];
	size_t nurl;
	int keep[4];
	size_t nend;
	int fail;
	const char *detail;
	struct httpd_msg m; /* the last head */
};

/* Feed s in pieces of step bytes (0: whole), acting on every event as
 * an owner does (going on with the rest). */
static void feed(struct httpd_reader *r, const char *s, size_t len, size_t step,
		 struct seen *out)
{
	size_t off = 0;

	memset(out, 0, sizeof(*out));
	while (off < len && !out->fail) {
		size_t n = step && len - off > step ? step : len - off, used;
		enum httpd_rd ev;
		const char *at;
		size_t blen;

		ev = httpd_reader_feed(r, s + off, n, &used);
		assert_true(used <= n);
		off += used;
		switch (ev) {
		case HTTPD_RD_HEAD:
			out->ev[out->nev++] = 'H';
			httpd_reader_msg(r, &out->m);
			assert_true(out->nurl < 4);
			snprintf(out->urls[out->nurl++], 256, "%s", out->m.url);
			break;
		case HTTPD_RD_BODY:
			if (!out->nev || out->ev[out->nev - 1] != 'B')
				out->ev[out->nev++] = 'B';
			httpd_reader_body(r, &at, &blen);
			/* kept as far as it fits, counted whole */
			if (out->body_len + blen <= sizeof(out->body))
				memcpy(out->body + out->body_len, at, blen);
			out->body_len += blen;
			break;
		case HTTPD_RD_END:
			out->ev[out->nev++] = 'E';
			out->keep[out->nend++ % 4] = httpd_reader_keep_alive(r);
			break;
		case HTTPD_RD_FAIL:
			out->ev[out->nev++] = 'F';
			out->fail = httpd_reader_fail(r, &out->detail);
			break;
		case HTTPD_RD_MORE:
			assert_int_equal(used, n);
			break;
		}
	}
	out->ev[out->nev] = '\0';
}

static struct httpd_reader *reader(const struct httpd_limits *lim)
{
	struct httpd_reader *r;

	assert_int_equal(httpd_reader_new(lim, &r), 0);
	return r;
}

static void test_reader_heads(void **state)
{
	static const char REQ[] =
	    "GET /v1/ns/HEAD?x=1 HTTP/1.1\r\nHost: h\r\n"
	    "Authorization: Bearer a\r\nX-Empty:\r\nAUTHORIZATION: b\r\n\r\n"
	    "POST /v1/ns/chunks HTTP/1.1\r\nContent-Length: 11\r\n"
	    "Expect: 100-Continue\r\n\r\nhello world"
	    "GET /last HTTP/1.0\r\n\r\n";
	static const size_t steps[] = {0, 1, 2, 7, 64};
	struct seen s;
	struct httpd_reader *r;
	size_t i;
	char *name, *value;
	size_t nl, vl;

	(void)state;
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		r = reader(&HTTPD_LIMITS_REPLICATOR);
		feed(r, REQ, sizeof(REQ) - 1, steps[i], &s);
		assert_string_equal(s.ev, "HEHBEHE");
		assert_int_equal(s.nurl, 3);
		assert_string_equal(s.urls[0], "/v1/ns/HEAD?x=1");
		assert_string_equal(s.urls[1], "/v1/ns/chunks");
		assert_string_equal(s.urls[2], "/last");
		assert_int_equal(s.body_len, 11);
		assert_memory_equal(s.body, "hello world", 11);
		/* 1.1 stays open, 1.0 without keep-alive does not */
		assert_int_equal(s.keep[0], 1);
		assert_int_equal(s.keep[1], 1);
		assert_int_equal(s.keep[2], 0);
		assert_int_equal(s.m.method, HTTPD_GET);
		assert_int_equal(s.m.http_minor, 0);
		httpd_reader_free(r);
	}

	/* the first head, fed whole, looked at before going on */
	r = reader(&HTTPD_LIMITS_REPLICATOR);
	{
		size_t used;
		struct httpd_msg m;

		assert_int_equal(
		    httpd_reader_feed(r, REQ, sizeof(REQ) - 1, &used),
		    HTTPD_RD_HEAD);
		httpd_reader_msg(r, &m);
		assert_int_equal(httpd_reader_busy(r), 1);
		assert_int_equal(m.method, HTTPD_GET);
		assert_string_equal(m.method_name, "GET");
		assert_int_equal(m.http_minor, 1);
		assert_int_equal(m.expect_continue, 0);
		assert_int_equal(m.length, UINT64_MAX);
		assert_int_equal(m.nfields, 4);
		/* names lower-cased, values as sent, in order */
		httpd_reader_field(r, 1, &name, &nl, &value, &vl);
		assert_string_equal(name, "authorization");
		assert_int_equal(nl, 13);
		assert_string_equal(value, "Bearer a");
		assert_int_equal(vl, 8);
		httpd_reader_field(r, 2, &name, &nl, &value, &vl);
		assert_string_equal(name, "x-empty");
		assert_string_equal(value, "");
		assert_int_equal(vl, 0);
		httpd_reader_field(r, 3, &name, &nl, &value, &vl);
		assert_string_equal(name, "authorization");
		assert_string_equal(value, "b");
		/* the first of a name */
		assert_string_equal(httpd_reader_get(r, "authorization"),
				    "Bearer a");
		assert_string_equal(httpd_reader_get(r, "host"), "h");
		assert_null(httpd_reader_get(r, "cookie"));
		/* the rest: the end of the first, the head of the second */
		assert_int_equal(httpd_reader_feed(r, REQ + used,
						   sizeof(REQ) - 1 - used,
						   &used),
				 HTTPD_RD_END);
		assert_int_equal(httpd_reader_busy(r), 0);
	}
	httpd_reader_free(r);
}

static void test_reader_bodies(void **state)
{
	static const char CHUNKED[] =
	    "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
	    "GET /n HTTP/1.1\r\nConnection: close\r\n\r\n";
	static const char EXPECT[] = "POST /e HTTP/1.1\r\nContent-Length: 1\r\n"
				     "Expect: 100-continue\r\n\r\n";
	struct seen s;
	struct httpd_reader *r;
	size_t step;

	(void)state;
	for (step = 0; step < 9; step += 4) {
		r = reader(&HTTPD_LIMITS_REPLICATOR);
		feed(r, CHUNKED, sizeof(CHUNKED) - 1, step, &s);
		assert_string_equal(s.ev, "HBEHE");
		assert_int_equal(s.body_len, 11);
		assert_memory_equal(s.body, "hello world", 11);
		assert_int_equal(s.keep[0], 1);
		assert_int_equal(s.keep[1], 0);
		httpd_reader_free(r);
	}
	r = reader(&HTTPD_LIMITS_REPLICATOR);
	feed(r, EXPECT, sizeof(EXPECT) - 1, 0, &s);
	assert_string_equal(s.ev, "H");
	assert_int_equal(s.m.expect_continue, 1);
	assert_int_equal(s.m.length, 1);
	assert_int_equal(httpd_reader_busy(r), 1);
	httpd_reader_free(r);

	/* an upgrade: answered, nothing after it read */
	r = reader(&HTTPD_LIMITS_REPLICATOR);
	feed(r, "GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
	     53, 0, &s);
	assert_string_equal(s.ev, "HE");
	assert_int_equal(s.keep[0], 0);
	httpd_reader_free(r);
}

/* One request against limits lim: the status it fails with (0: none). */
static int refused(const struct httpd_limits *lim, const char *req, size_t len,
		   size_t step)
{
	struct httpd_reader *r = reader(lim);
	struct seen s;
	size_t used;

	feed(r, req, len, step, &s);
	if (s.fail) {
		/* sticky: nothing more is read */
		assert_int_equal(
		    httpd_reader_feed(r, "GET / HTTP/1.1\r\n\r\n", 18, &used),
		    HTTPD_RD_FAIL);
		assert_int_equal(used, 0);
		assert_true(strlen(s.detail) > 0);
	}
	httpd_reader_free(r);
	return s.fail;
}

static void test_reader_limits(void **state)
{
	struct httpd_limits lim = HTTPD_LIMITS_REPLICATOR;
	char *big = malloc(70000);
	size_t n, step;

	(void)state;
	assert_non_null(big);
	lim.url_max = 100;
	lim.head_max = 200;
	lim.fields_max = 4;
	lim.body_max = 10;
	for (step = 0; step < 4; step += 3) {
		/* the URL: 100 bytes pass, 101 are 414 */
		n = (size_t)snprintf(big, 70000, "GET /%099d HTTP/1.1\r\n\r\n",
				     0);
		assert_int_equal(refused(&lim, big, n, step), 0);
		n = (size_t)snprintf(big, 70000, "GET /%0100d HTTP/1.1\r\n\r\n",
				     0);
		assert_int_equal(refused(&lim, big, n, step), 414);
		/* header bytes, names and values: 200 pass, 201 are 431 */
		n = (size_t)snprintf(big, 70000,
				     "GET / HTTP/1.1\r\nX: %0199d\r\n\r\n", 0);
		assert_int_equal(refused(&lim, big, n, step), 0);
		n = (size_t)snprintf(big, 70000,
				     "GET / HTTP/1.1\r\nX: %0200d\r\n\r\n", 0);
		assert_int_equal(refused(&lim, big, n, step), 431);
		/* header lines: 4 pass, 5 are 431 */
		n = (size_t)snprintf(
		    big, 70000,
		    "GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n"
		    "d: 4\r\n\r\n");
		assert_int_equal(refused(&lim, big, n, step), 0);
		n = (size_t)snprintf(
		    big, 70000,
		    "GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n"
		    "d: 4\r\ne: 5\r\n\r\n");
		assert_int_equal(refused(&lim, big, n, step), 431);
		/* a body: said too long, sent too long */
		n = (size_t)snprintf(big, 70000,
				     "POST / HTTP/1.1\r\nContent-Length: 10\r\n"
				     "\r\n0123456789");
		assert_int_equal(refused(&lim, big, n, step), 0);
		n = (size_t)snprintf(big, 70000,
				     "POST / HTTP/1.1\r\nContent-Length: 11\r\n"
				     "\r\n01234567890");
		assert_int_equal(refused(&lim, big, n, step), 413);
		n = (size_t)snprintf(big, 70000,
				     "POST / HTTP/1.1\r\nTransfer-Encoding: "
				     "chunked\r\n\r\n6\r\n012345\r\n5\r\n"
				     "01234\r\n0\r\n\r\n");
		assert_int_equal(refused(&lim, big, n, step), 413);
		/* CONNECT, and what http_parser refuses */
		n = (size_t)snprintf(big, 70000,
				     "CONNECT h:443 HTTP/1.1\r\n\r\n");
		assert_int_equal(refused(&lim, big, n, step), 405);
		n = (size_t)snprintf(big, 70000, "NOT HTTP AT ALL\r\n\r\n");
		assert_int_equal(refused(&lim, big, n, step), 400);
		n = (size_t)snprintf(big, 70000,
				     "GET / HTTP/1.1\r\nContent-Length: x\r\n"
				     "\r\n");
		assert_int_equal(refused(&lim, big, n, step), 400);
	}
	/* each server's own numbers */
	memset(big, 'a', 70000);
	memcpy(big, "GET /", 5);
	memcpy(big + 4 + 4097, " HTTP/1.1\r\n\r\n", 13);
	assert_int_equal(
	    refused(&HTTPD_LIMITS_REPLICATOR, big, 4 + 4097 + 13, 0), 414);
	memcpy(big + 4 + 4096, " HTTP/1.1\r\n\r\n", 13);
	assert_int_equal(
	    refused(&HTTPD_LIMITS_REPLICATOR, big, 4 + 4096 + 13, 0), 0);
	assert_int_equal(refused(&HTTPD_LIMITS_METRICS, big, 4 + 4096 + 13, 0),
			 414);
	assert_int_equal(refused(&HTTPD_LIMITS_S3, big, 4 + 4096 + 13, 0), 0);
	/* S3 takes a body of any size and keeps none of it */
	n = (size_t)snprintf(
	    big, 70000, "PUT /b/k HTTP/1.1\r\nContent-Length: 60000\r\n\r\n");
	memset(big + n, 'x', 60000);
	assert_int_equal(refused(&HTTPD_LIMITS_S3, big, n + 60000, 0), 0);
	assert_int_equal(refused(&HTTPD_LIMITS_S3, big, n + 60000, 1000), 0);
	assert_int_equal(refused(&HTTPD_LIMITS_REPLICATOR, big, n + 60000, 0),
			 413);
	/* 64 header lines for S3, 65 are too many */
	n = (size_t)snprintf(big, 70000, "GET / HTTP/1.1\r\n");
	for (int i = 0; i < 65; i++)
		n += (size_t)snprintf(big + n, 70000 - n, "h%d: v\r\n", i);
	n += (size_t)snprintf(big + n, 70000 - n, "\r\n");
	assert_int_equal(refused(&HTTPD_LIMITS_S3, big, n, 0), 431);
	assert_int_equal(refused(&HTTPD_LIMITS_REPLICATOR, big, n, 0), 0);
	free(big);
}

static void test_url_path(void **state)
{
	const char *p;
	size_t n;

	(void)state;
	assert_int_equal(httpd_url_path("/v1/ns/HEAD?x=1", 15, &p, &n), 0);
	assert_int_equal(n, 11);
	assert_memory_equal(p, "/v1/ns/HEAD", 11);
	assert_int_equal(httpd_url_path("http://h:1/metrics?a", 20, &p, &n), 0);
	assert_int_equal(n, 8);
	assert_memory_equal(p, "/metrics", 8);
	assert_int_equal(httpd_url_path("", 0, &p, &n), -EINVAL);
	assert_int_equal(httpd_url_path("http://h", 8, &p, &n), -EINVAL);
}

static void test_url_param(void **state)
{
	const char *u = "/v1/ns/HEAD?waits=9&wait=12&catalog=1&wait=3&e=";
	const char *v;
	size_t n;

	(void)state;
	assert_int_equal(httpd_url_param(u, strlen(u), "wait", &v, &n), 1);
	assert_int_equal(n, 2);
	assert_memory_equal(v, "12", 2);
	assert_int_equal(httpd_url_param(u, strlen(u), "catalog", &v, &n), 1);
	assert_int_equal(n, 1);
	assert_memory_equal(v, "1", 1);
	assert_int_equal(httpd_url_param(u, strlen(u), "e", &v, &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(httpd_url_param(u, strlen(u), "cat", &v, &n), 0);
	/* the length given is the end: a parameter past it is not seen */
	assert_int_equal(httpd_url_param(u, 20, "wait", &v, &n), 0);
	assert_int_equal(httpd_url_param("/v1/ns/HEAD", 11, "wait", &v, &n), 0);
	assert_int_equal(httpd_url_param("/x?", 3, "wait", &v, &n), 0);
}

/* -- the engine, with a server of the test's own -- */

struct tsrv {
	uv_loop_t loop;
	uv_async_t stop;
	pthread_t th;
	struct httpd_server *http;
	int port;
	char dir[64], path[80]; /* the Unix socket's, for the unix group */
	/* what the hooks saw (loop thread; read after the join) */
	unsigned accepted, first_bytes, errors, aborted, freed;
	size_t bytes;
	char last_code[32];
};

/* The test's request: per-request state after the engine's. */
struct treq {
	struct httpd_req h;
	uv_timer_t timer;
	int nheaders;
};

/* Per connection: how many requests it carried. */
struct tconn {
	unsigned requests;
};

static void later_closed(uv_handle_t *t)
{
	struct treq *r = t->data;

	httpd_req_unref(&r->h);
}

static void later_fire(uv_timer_t *t)
{
	struct treq *r = t->data;

	httpd_req_respond(&r->h, 200, "text/plain", NULL, "later\n", 6);
	uv_close((uv_handle_t *)t, later_closed);
}

static void t_dispatch(struct httpd_req *h)
{
	struct treq *r = (struct treq *)h;
	struct tsrv *t = h->ctx;
	struct tconn *c = h->conn_data;
	char body[64];
	const char *path;
	size_t plen;
	int n;

	c->requests++;
	if (h->fail_status) {
		httpd_req_error(h, h->fail_status, "refused", NULL, "%s",
				h->fail_detail);
		return;
	}
	if (httpd_url_path(h->url, h->url_len, &path, &plen) < 0)
		plen = 0;
	if (plen == 6 && !memcmp(path, "/later", 6)) {
		/* answered from a timer: the request is held meanwhile */
		httpd_req_ref(h);
		uv_timer_init(&t->loop, &r->timer);
		r->timer.data = r;
		uv_timer_start(&r->timer, later_fire, 100, 0);
	} else if (plen == 7 && !memcmp(path, "/stream", 7)) {
		if (httpd_req_head(h, 200, "text/plain", -1, NULL) < 0 ||
		    httpd_req_send(h, "ab", 2, "cd", 2, NULL, NULL) < 0 ||
		    httpd_req_send(h, NULL, 0, "ef", 2, NULL, NULL) < 0)
			return;
		httpd_req_done(h);
	} else if (plen == 6 && !memcmp(path, "/count", 6)) {
		n = snprintf(body, sizeof(body), "%u %d\n", c->requests,
			     r->nheaders);
		httpd_req_respond(h, 200, "text/plain", "X-T: 1\r\n", body,
				  (size_t)n);
	} else if (plen == 6 && !memcmp(path, "/abort", 6)) {
		if (httpd_req_head(h, 200, "text/plain", 100, NULL) == 0 &&
		    httpd_req_send(h, "part", 4, NULL, 0, NULL, NULL) == 0)
			httpd_req_abort(h);
	} else {
		httpd_req_error(h, 404, "not_found", NULL, "no %.*s", (int)plen,
				path);
	}
}

static void t_header(struct httpd_req *h, const char *name, size_t nlen,
		     const char *value, size_t vlen)
{
	(void)name;
	(void)nlen;
	(void)value;
	(void)vlen;
	((struct treq *)h)->nheaders++;
}

static void t_free(struct httpd_req *h)
{
	((struct tsrv *)h->ctx)->freed++;
}

static void t_accepted(void *ctx)
{
	((struct tsrv *)ctx)->accepted++;
}

static void t_first_byte(struct httpd_req *h)
{
	struct tsrv *t = h->ctx;

	assert_true(h->status >= 200);
	assert_true(h->head_ns > 0);
	t->first_bytes++;
}

static void t_bytes(void *ctx, size_t n)
{
	((struct tsrv *)ctx)->bytes += n;
}

static void t_error(struct httpd_req *h, const char *code)
{
	struct tsrv *t = h->ctx;

	t->errors++;
	snprintf(t->last_code, sizeof(t->last_code), "%s", code);
}

static void t_aborted(struct httpd_req *h)
{
	((struct tsrv *)h->ctx)->aborted++;
}

static void t_stop(uv_async_t *a)
{
	struct tsrv *t = a->data;

	httpd_server_close(t->http);
	uv_close((uv_handle_t *)a, NULL);
}

static void *t_loop(void *arg)
{
	struct tsrv *t = arg;

	uv_run(&t->loop, UV_RUN_DEFAULT);
	return NULL;
}

static const char *body_of(const char *a);

static int engine_make(void **state, int unix_sock)
{
	struct tsrv *t = calloc(1, sizeof(*t));
	struct httpd_limits lim = HTTPD_LIMITS_REPLICATOR;
	struct httpd_server_opts o = {
	    .limits = &lim,
	    .server = "ferry-test/1",
	    .req_size = sizeof(struct treq),
	    .conn_size = sizeof(struct tconn),
	    .dispatch = t_dispatch,
	    .header = t_header,
	    .req_free = t_free,
	    .hooks = {.accepted = t_accepted,
		      .first_byte = t_first_byte,
		      .bytes = t_bytes,
		      .error = t_error,
		      .aborted = t_aborted},
	};
	struct sockaddr_storage sa;

	assert_non_null(t);
	lim.url_max = 64;
	assert_int_equal(uv_loop_init(&t->loop), 0);
	o.loop = &t->loop;
	o.ctx = t;
	uv_async_init(&t->loop, &t->stop, t_stop);
	t->stop.data = t;
	assert_int_equal(httpd_server_new(&o, &t->http), 0);
	if (unix_sock) {
		snprintf(t->dir, sizeof(t->dir), "/tmp/ferry-ut-XXXXXX");
		assert_non_null(mkdtemp(t->dir));
		snprintf(t->path, sizeof(t->path), "%s/s", t->dir);
		/* relative: refused before anything is made */
		assert_int_equal(httpd_server_listen_unix(t->http, "s", 16),
				 -EINVAL);
		assert_int_equal(httpd_server_listen_unix(t->http, t->path, 16),
				 0);
		assert_int_equal(httpd_server_bound(t->http, &sa), -ENOTSUP);
	} else {
		assert_int_equal(httpd_listen_resolve("127.0.0.1:0", &sa), 0);
		assert_int_equal(
		    httpd_server_listen(t->http, (struct sockaddr *)&sa, 16),
		    0);
		assert_int_equal(httpd_server_bound(t->http, &sa), 0);
		t->port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
		assert_int_not_equal(t->port, 0);
	}
	/* one listener a server */
	assert_int_equal(httpd_server_listen_unix(t->http, "/tmp/x", 16),
			 -EALREADY);
	assert_int_equal(pthread_create(&t->th, NULL, t_loop, t), 0);
	*state = t;
	return 0;
}

static int engine_setup(void **state)
{
	return engine_make(state, 0);
}

static int engine_setup_unix(void **state)
{
	return engine_make(state, 1);
}

/* The Unix socket's server stopped: its socket is gone with it. */
static int engine_teardown_unix(void **state)
{
	struct tsrv *t = *state;
	struct stat st;

	uv_async_send(&t->stop);
	assert_int_equal(pthread_join(t->th, NULL), 0);
	assert_int_equal(uv_loop_close(&t->loop), 0);
	assert_int_equal(lstat(t->path, &st), -1);
	assert_int_equal(rmdir(t->dir), 0);
	assert_true(t->accepted >= 1);
	free(t);
	return 0;
}

/* A request over the Unix socket: only its owner may connect (0600),
 * answers as over TCP; a second server cannot take the path. */
static void test_engine_unix(void **state)
{
	struct tsrv *t = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {5, 0};
	const char *req = "GET /count HTTP/1.1\r\nA: 1\r\n\r\n";
	char buf[4096];
	struct stat st;
	size_t got = 0;
	ssize_t n;
	int fd;

	assert_int_equal(lstat(t->path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", t->path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL),
			 (ssize_t)strlen(req));
	shutdown(fd, SHUT_WR);
	while (got + 1 < sizeof(buf) &&
	       (n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	assert_ptr_equal(strstr(buf, "HTTP/1.1 200 OK\r\n"), buf);
	assert_string_equal(body_of(buf), "1 1\n");
}

static int engine_teardown(void **state)
{
	struct tsrv *t = *state;

	uv_async_send(&t->stop);
	assert_int_equal(pthread_join(t->th, NULL), 0);
	/* every handle closed: the engine freed itself, and every request */
	assert_int_equal(uv_loop_close(&t->loop), 0);
	assert_true(t->accepted >= 5);
	assert_true(t->freed >= 10);
	assert_true(t->first_bytes >= 10);
	assert_true(t->bytes > 0);
	assert_true(t->errors >= 2);
	assert_int_equal(t->aborted, 1);
	free(t);
	return 0;
}

/* One connection: send req, half-close, read until the server closes.
 * The answer, NUL-terminated, into buf. */
static void exchange(int port, const char *req, char *buf, size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timeval tv = {5, 0};
	size_t got = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL),
			 (ssize_t)strlen(req));
	shutdown(fd, SHUT_WR);
	while (got + 1 < cap && (n = recv(fd, buf + got, cap - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
}

/* The body of the answer that starts at a (after its head). */
static const char *body_of(const char *a)
{
	const char *e = strstr(a, "\r\n\r\n");

	assert_non_null(e);
	return e + 4;
}

static void test_engine_order(void **state)
{
	struct tsrv *t = *state;
	char buf[8192];
	const char *a, *b, *c;

	/* the slow one first: answers come in the order asked */
	exchange(t->port,
		 "GET /later HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\nA: 1\r\n"
		 "B: 2\r\n\r\nGET /nope HTTP/1.1\r\n\r\n",
		 buf, sizeof(buf));
	a = strstr(buf, "HTTP/1.1 200 OK\r\n");
	assert_ptr_equal(a, buf);
	assert_non_null(strstr(a, "\r\nServer: ferry-test/1\r\n"));
	assert_memory_equal(body_of(a), "later\n", 6);
	b = strstr(a + 1, "HTTP/1.1 200 OK\r\n");
	assert_non_null(b);
	assert_non_null(strstr(b, "\r\nX-T: 1\r\n"));
	/* the connection's third request so far is its second; two
	 * headers were told */
	assert_memory_equal(body_of(b), "2 2\n", 4);
	c = strstr(b + 1, "HTTP/1.1 404 Not Found\r\n");
	assert_non_null(c);
	/* no error body of the server's: the detail and a newline */
	assert_non_null(strstr(c, "\r\nContent-Type: text/plain; "
				  "charset=utf-8\r\n"));
	assert_string_equal(body_of(c), "no /nope\n");
}

static void test_engine_stream(void **state)
{
	struct tsrv *t = *state;
	char buf[8192];
	const char *b;

	/* HTTP/1.1: chunks, then the last one; the connection stays */
	exchange(t->port,
		 "GET /stream HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\n\r\n", buf,
		 sizeof(buf));
	assert_non_null(strstr(buf, "\r\nTransfer-Encoding: chunked\r\n"));
	assert_memory_equal(body_of(buf), "4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n",
			    21);
	b = strstr(body_of(buf), "HTTP/1.1 200 OK\r\n");
	assert_non_null(b);
	assert_string_equal(body_of(b), "2 0\n");

	/* HTTP/1.0: up to the close, which the head says */
	exchange(t->port,
		 "GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
		 "GET /count HTTP/1.0\r\n\r\n",
		 buf, sizeof(buf));
	assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
	assert_null(strstr(buf, "Transfer-Encoding"));
	assert_string_equal(body_of(buf), "abcdef");

	/* HEAD: the head a GET gets, no body; the next answer follows */
	exchange(t->port,
		 "HEAD /stream HTTP/1.1\r\n\r\nHEAD /count HTTP/1.1\r\n\r\n"
		 "GET /count HTTP/1.1\r\n\r\n",
		 buf, sizeof(buf));
	assert_ptr_equal(strstr(buf, "HTTP/1.1 200 OK\r\n"), buf);
	b = body_of(buf);
	assert_memory_equal(b, "HTTP/1.1 200 OK\r\n", 17);
	assert_non_null(strstr(b, "\r\nContent-Length: 4\r\n"));
	b = body_of(b);
	assert_memory_equal(b, "HTTP/1.1 200 OK\r\n", 17);
	assert_string_equal(body_of(b), "3 0\n");
}

static void test_engine_refused(void **state)
{
	struct tsrv *t = *state;
	char buf[8192], req[256];

	/* past this server's url_max: dispatched with its status, closed */
	snprintf(req, sizeof(req),
		 "GET /%070d HTTP/1.1\r\n\r\nGET /count HTTP/1.1\r\n\r\n", 0);
	exchange(t->port, req, buf, sizeof(buf));
	assert_memory_equal(buf, "HTTP/1.1 414 URI Too Long\r\n", 27);
	assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
	assert_string_equal(body_of(buf), "URL longer than 64 bytes\n");
	assert_null(strstr(body_of(buf), "HTTP/1.1"));

	/* an answer cut: the client sees the close before the length */
	exchange(t->port, "GET /abort HTTP/1.1\r\n\r\n", buf, sizeof(buf));
	assert_non_null(strstr(buf, "\r\nContent-Length: 100\r\n"));
	assert_string_equal(body_of(buf), "part");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_listen_split),
	    cmocka_unit_test(test_listen_resolve),
	    cmocka_unit_test(test_listen_socket),
	    cmocka_unit_test(test_head_format),
	    cmocka_unit_test(test_reader_heads),
	    cmocka_unit_test(test_reader_bodies),
	    cmocka_unit_test(test_reader_limits),
	    cmocka_unit_test(test_url_path),
	    cmocka_unit_test(test_url_param),
	};
	const struct CMUnitTest engine[] = {
	    cmocka_unit_test(test_engine_order),
	    cmocka_unit_test(test_engine_stream),
	    cmocka_unit_test(test_engine_refused),
	};
	const struct CMUnitTest engine_unix[] = {
	    cmocka_unit_test(test_engine_unix),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);

	r += cmocka_run_group_tests_name("engine", engine, engine_setup,
					 engine_teardown);
	return r + cmocka_run_group_tests_name("engine over a Unix socket",
					       engine_unix, engine_setup_unix,
					       engine_teardown_unix);
}
