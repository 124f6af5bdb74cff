/*
 * tests/unit/test_repl_http.c — the replicator's HTTP layer and routes,
 * against the real server: repl_server_init over a small temp tree (four
 * one-chunk files, one with a UTF-8 and one with a non-UTF-8 name, served
 * as "ns", and a namespace "broken" whose scan fails), its libuv loop on
 * a thread, and raw HTTP/1.1 over a loopback TCP socket. Answers are read with
 * http_parser in response mode, so framing (Content-Length, chunked, HEAD
 * without a body, several answers in one stream) is checked by a parser, not by
 * string matching.
 *
 * Covered: GET of HEAD, catalog and chunk (status, Content-Type,
 * Content-Length, ETag, Cache-Control, bytes), HEAD, keep-alive and
 * Connection: close, pipelining, 404/400/405/409/413/414/431/503 with a
 * JSON body of "error" and "detail" strings (parsed with jansson), UTF-8
 * in a detail kept exactly and a non-UTF-8 byte shown as \xNN, /stats
 * counters, a batch (including the 1024-id limit) and one sent after
 * "Expect: 100-continue", and the other protocol on the port (plain HTTP
 * to https, a TLS handshake to plain HTTP). The server is stopped with
 * SIGTERM, its real shutdown path, and freed.
 *
 * Every test runs twice: over plain HTTP, then over TLS (the server with
 * --tls-cert/--tls-key made by the test, the client OpenSSL on the same
 * socket), so keep-alive, pipelining, streamed batches, errors and cut
 * connections are checked through the TLS records as well.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <http_parser.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_serve_priv.h"
#include "tsupport.h"

#define IMMUTABLE "public, max-age=31536000, immutable"
#define UTF8_NAME "caf\xc3\xa9.txt"
#define BAD_NAME "bad\xff.txt"
#define HDR_MAX 32
#define BUF_CAP (256u * 1024u)

static const char HELLO[] = "hello, ferry\n";
static const char WORLD[] = "the other small file\n";
static const char UTF8_BODY[] = "un caf\xc3\xa9 au lait\n";
static const char BAD_BODY[] = "not UTF-8 at all\n";

/* -- the server under test -- */

struct fixture {
	char root[64];
	char src[96], state[96];
	char listen[32];
	int port;
	struct repl_server srv;
	pthread_t loop;
	chunk_id hello, world, utf8, bad;
	int tls;      /* serve and talk https */
	char ca[128]; /* the CA that signed the server's certificate */
	char cert[128], key[128];
};

static void *loop_thread(void *arg)
{
	struct fixture *f = arg;

	repl_server_run(&f->srv);
	return NULL;
}

/* -- a raw HTTP client that parses answers with http_parser -- */

struct resp {
	int status, major, minor, keep_alive, complete;
	size_t n_hdr;
	char name[HDR_MAX][64], value[HDR_MAX][512];
	int in_value;
	uint8_t *body;
	size_t body_len;
};

struct client {
	int fd;
	SSL_CTX *ctx; /* TLS: over fd; NULL: plain */
	SSL *ssl;
	http_parser p;
	struct resp *cur;
	int head_only;
	size_t off, len;
	char buf[BUF_CAP];
};

static void resp_free(struct resp *r)
{
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static int on_begin(http_parser *p)
{
	struct client *c = p->data;

	resp_free(c->cur);
	return 0;
}

static void append(char *dst, size_t cap, const char *at, size_t len)
{
	size_t have = strlen(dst);

	assert_true(have + len < cap);
	memcpy(dst + have, at, len);
	dst[have + len] = '\0';
}

static int on_field(http_parser *p, const char *at, size_t len)
{
	struct resp *r = ((struct client *)p->data)->cur;

	if (r->in_value || r->n_hdr == 0) {
		assert_true(r->n_hdr < HDR_MAX);
		r->n_hdr++;
		r->in_value = 0;
	}
	append(r->name[r->n_hdr - 1], sizeof(r->name[0]), at, len);
	return 0;
}

static int on_value(http_parser *p, const char *at, size_t len)
{
	struct resp *r = ((struct client *)p->data)->cur;

	r->in_value = 1;
	append(r->value[r->n_hdr - 1], sizeof(r->value[0]), at, len);
	return 0;
}

static int on_headers(http_parser *p)
{
	struct client *c = p->data;

	c->cur->status = p->status_code;
	c->cur->major = p->http_major;
	c->cur->minor = p->http_minor;
	/* An answer to HEAD has the GET's headers and no body: 1 tells the
	 * parser so. Body bytes sent anyway would be parsed as the next
	 * answer's status line, and fail. */
	return c->head_only ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	struct resp *r = ((struct client *)p->data)->cur;
	uint8_t *nb = realloc(r->body, r->body_len + len + 1);

	assert_non_null(nb);
	r->body = nb;
	memcpy(r->body + r->body_len, at, len);
	r->body_len += len;
	r->body[r->body_len] = '\0';
	return 0;
}

static int on_complete(http_parser *p)
{
	struct client *c = p->data;

	c->cur->complete = 1;
	c->cur->keep_alive = http_should_keep_alive(p);
	/* one answer per cl_read: the rest stays buffered */
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings RESP_SETTINGS = {
    .on_message_begin = on_begin,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

/* A connection; over TLS when the server speaks it, unless plain. */
static struct client *cl_open_as(const struct fixture *f, int plain)
{
	struct client *c = calloc(1, sizeof(*c));
	struct sockaddr_in a = {.sin_family = AF_INET};
	/* a safety net against a hang, never a measured time */
	struct timeval tv = {.tv_sec = 120};

	assert_non_null(c);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(c->fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)f->port);
	assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(
	    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	if (f->tls && !plain) {
		/* a client as curl is one: the server's certificate checked
		 * against the CA, for the address it was asked at */
		c->ctx = SSL_CTX_new(TLS_client_method());
		assert_non_null(c->ctx);
		assert_int_equal(
		    SSL_CTX_load_verify_locations(c->ctx, f->ca, NULL), 1);
		SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
		c->ssl = SSL_new(c->ctx);
		assert_non_null(c->ssl);
		assert_int_equal(SSL_set_fd(c->ssl, c->fd), 1);
		assert_int_equal(SSL_set1_host(c->ssl, "127.0.0.1"), 1);
		ERR_clear_error();
		assert_int_equal(SSL_connect(c->ssl), 1);
	}
	http_parser_init(&c->p, HTTP_RESPONSE);
	c->p.data = c;
	return c;
}

static struct client *cl_open(const struct fixture *f)
{
	return cl_open_as(f, 0);
}

static void cl_close(struct client *c)
{
	SSL_free(c->ssl);
	SSL_CTX_free(c->ctx);
	close(c->fd);
	free(c);
}

/* send(2) or SSL_write: > 0 bytes, or -1 with errno. */
static ssize_t cl_out(struct client *c, const void *buf, size_t len)
{
	int n;

	if (!c->ssl)
		return send(c->fd, buf, len, MSG_NOSIGNAL);
	ERR_clear_error();
	n = SSL_write(c->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
	if (n > 0)
		return n;
	if (SSL_get_error(c->ssl, n) != SSL_ERROR_SYSCALL || errno == 0)
		errno = EPIPE;
	return -1;
}

/* recv(2) or SSL_read: > 0 bytes, 0 at the end of the connection (over
 * TLS: close_notify, or a cut, which a test tells apart by what it read
 * before), -1 with errno (EAGAIN: the receive timeout). */
static ssize_t cl_in(struct client *c, void *buf, size_t cap)
{
	int n;

	if (!c->ssl)
		return recv(c->fd, buf, cap, 0);
	ERR_clear_error();
	n = SSL_read(c->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, n)) {
	case SSL_ERROR_WANT_READ:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_SYSCALL:
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return -1;
		return 0;
	default:
		return 0;
	}
}

static void cl_send(struct client *c, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = cl_out(c, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		assert_true(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

static void cl_sends(struct client *c, const char *s)
{
	cl_send(c, s, strlen(s));
}

/* Read the next whole answer into r (freed by resp_free). head_only: it
 * answers a HEAD request. Returns 0, or -1 when the server closed the
 * connection before a whole answer. Fails on a malformed answer. */
static int cl_read(struct client *c, int head_only, struct resp *r)
{
	memset(r, 0, sizeof(*r));
	c->cur = r;
	c->head_only = head_only;
	for (;;) {
		ssize_t n;

		if (c->off < c->len) {
			size_t used = http_parser_execute(&c->p, &RESP_SETTINGS,
							  c->buf + c->off,
							  c->len - c->off);
			enum http_errno e = HTTP_PARSER_ERRNO(&c->p);

			c->off += used;
			if (e == HPE_PAUSED) {
				http_parser_pause(&c->p, 0);
				return 0;
			}
			if (e != HPE_OK)
				fail_msg("malformed answer: %s",
					 http_errno_name(e));
		}
		if (c->off == c->len)
			c->off = c->len = 0;
		assert_true(c->len < sizeof(c->buf));
		n = cl_in(c, c->buf + c->len, sizeof(c->buf) - c->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			fail_msg("no answer from the server");
		if (n <= 0) {
			/* EOF (or a reset after it): the end of a
			 * close-delimited body, or of the connection */
			http_parser_execute(&c->p, &RESP_SETTINGS, NULL, 0);
			return r->complete ? 0 : -1;
		}
		c->len += (size_t)n;
	}
}

/* 1 when the server has closed the connection and sent nothing more. */
static int cl_at_eof(struct client *c)
{
	char b;
	ssize_t n;

	if (c->off < c->len)
		return 0;
	do
		n = cl_in(c, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		fail_msg("the server kept the connection open");
	return n <= 0;
}

static const char *hdr(const struct resp *r, const char *name)
{
	for (size_t i = 0; i < r->n_hdr; i++)
		if (!strcasecmp(r->name[i], name))
			return r->value[i];
	return NULL;
}

static void assert_hdr(const struct resp *r, const char *name, const char *want)
{
	const char *v = hdr(r, name);

	if (!v)
		fail_msg("no %s header (status %d)", name, r->status);
	assert_string_equal(v, want);
}

/* One request on a fresh connection, answer into r. */
static void fetch(const struct fixture *f, const char *req, int head_only,
		  struct resp *r)
{
	struct client *c = cl_open(f);

	cl_sends(c, req);
	assert_int_equal(cl_read(c, head_only, r), 0);
	cl_close(c);
}

static void get(const struct fixture *f, const char *path, struct resp *r)
{
	char req[8192];

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
	fetch(f, req, 0, r);
}

/* An error answer: the status, application/json, and a body that is one
 * line of JSON, exactly {"error":code,"detail":STRING}, then a newline.
 * The detail is copied into detail (when not NULL). */
static void assert_error(const struct resp *r, int status, const char *code,
			 char *detail, size_t cap)
{
	json_error_t jerr;
	json_t *o, *e, *d;
	char cl[32];

	if (r->status != status)
		fail_msg("status %d, expected %d: %.*s", r->status, status,
			 (int)r->body_len, r->body ? (char *)r->body : "");
	assert_hdr(r, "Content-Type", "application/json");
	snprintf(cl, sizeof(cl), "%zu", r->body_len);
	assert_hdr(r, "Content-Length", cl);
	assert_true(r->body_len >= 2);
	assert_int_equal(r->body[r->body_len - 1], '\n');
	assert_null(memchr(r->body, '\n', r->body_len - 1));
	o = json_loadb((const char *)r->body, r->body_len, 0, &jerr);
	if (!o)
		fail_msg("not JSON (%s): %s", jerr.text, (char *)r->body);
	assert_true(json_is_object(o));
	assert_int_equal(json_object_size(o), 2);
	e = json_object_get(o, "error");
	d = json_object_get(o, "detail");
	assert_true(json_is_string(e));
	assert_true(json_is_string(d));
	assert_string_equal(json_string_value(e), code);
	if (detail) {
		assert_true(json_string_length(d) < cap);
		memcpy(detail, json_string_value(d), json_string_length(d) + 1);
	}
	json_decref(o);
}

static void chunk_path(char *buf, size_t cap, const chunk_id *id)
{
	char hex[CHUNK_ID_HEX_LEN + 1];

	chunk_id_to_hex(id, hex);
	snprintf(buf, cap, "/v1/ns/chunk/%s", hex);
}

/* Decode one frame of the body and compare it with want. */
static void assert_frame(const uint8_t *frame, size_t len, const char *want)
{
	uint8_t out[256];
	size_t raw = 0;

	assert_int_equal(frame_decode(NULL, frame, len, CHUNK_MAX_LIMIT, out,
				      sizeof(out), &raw),
			 0);
	assert_int_equal(raw, strlen(want));
	assert_memory_equal(out, want, raw);
}

/* -- set-up: tree, state, server on a thread, both scans settled -- */

static void put(const struct fixture *f, const char *name, const char *body,
		chunk_id *ret_id)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", f->src, name);
	tsup_write_file(p, body, strlen(body));
	/* smaller than the minimum chunk: one chunk, the whole file */
	assert_int_equal(chunk_id_compute(body, strlen(body), ret_id), 0);
}

/* Poll until the namespace "broken" reports its failed scan. Scans run
 * one after the other, "ns" first, so "ns" is settled then too. */
static void wait_scans(const struct fixture *f)
{
	char detail[512];
	int i;

	for (i = 0; i < 1200; i++) {
		struct resp r;

		get(f, "/v1/broken/HEAD", &r);
		assert_error(&r, 503, "not_ready", detail, sizeof(detail));
		resp_free(&r);
		if (strstr(detail, "failed to scan"))
			break;
		usleep(50 * 1000);
	}
	if (i == 1200)
		fail_msg("the scans did not finish");
	/* The walk publishes; chunks are known once hashing is done. */
	for (i = 0; i < 1200; i++) {
		struct resp r;

		get(f, "/v1/ns/stats", &r);
		assert_int_equal(r.status, 200);
		if (memmem(r.body, r.body_len, "\"state\":\"done\"", 14)) {
			resp_free(&r);
			return;
		}
		resp_free(&r);
		usleep(50 * 1000);
	}
	fail_msg("hashing did not finish");
}

static int setup(void **state, int tls)
{
	static const char *const names[] = {"ns", "broken"};
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dirs[2];
	struct repl_server_opts o = {0};
	char p[256];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_repl_http.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->src, sizeof(f->src), "%s/src", f->root);
	snprintf(f->state, sizeof(f->state), "%s/state", f->root);
	assert_int_equal(mkdir(f->src, 0755), 0);
	assert_int_equal(mkdir(f->state, 0755), 0);
	put(f, "hello.txt", HELLO, &f->hello);
	put(f, "world.txt", WORLD, &f->world);
	put(f, UTF8_NAME, UTF8_BODY, &f->utf8);
	put(f, BAD_NAME, BAD_BODY, &f->bad);
	/* "broken"'s state dir is a file: its scan cannot start */
	snprintf(p, sizeof(p), "%s/broken", f->state);
	tsup_write_file(p, "x", 1);

	f->port = tsup_free_port();
	snprintf(f->listen, sizeof(f->listen), "127.0.0.1:%d", f->port);
	dirs[0] = dirs[1] = f->src;
	o.listen = f->listen;
	o.state_dir = f->state;
	o.policy = FRAME_POLICY_AUTO;
	o.scan_threads = 1;
	o.n_ns = 2;
	o.ns_names = names;
	o.ns_dirs = dirs;
	if (tls) {
		char cakey[128];

		f->tls = 1;
		snprintf(f->ca, sizeof(f->ca), "%s/ca.pem", f->root);
		snprintf(cakey, sizeof(cakey), "%s/ca.key", f->root);
		snprintf(f->cert, sizeof(f->cert), "%s/srv.pem", f->root);
		snprintf(f->key, sizeof(f->key), "%s/srv.key", f->root);
		tsup_cert_make(f->ca, cakey, "test CA", NULL, NULL, -86400,
			       86400, 0);
		tsup_cert_make(f->cert, f->key, "127.0.0.1", f->ca, cakey,
			       -86400, 86400, 0);
		o.tls_cert = f->cert;
		o.tls_key = f->key;
	}
	assert_int_equal(repl_server_init(&f->srv, &o), 0);
	assert_int_equal(pthread_create(&f->loop, NULL, loop_thread, f), 0);
	wait_scans(f);
	*state = f;
	return 0;
}

static int group_setup(void **state)
{
	return setup(state, 0);
}

static int group_setup_tls(void **state)
{
	return setup(state, 1);
}

static int group_teardown(void **state)
{
	struct fixture *f = *state;

	/* the daemon's own way out: SIGTERM closes everything, the loop
	 * ends, run returns */
	assert_int_equal(kill(getpid(), SIGTERM), 0);
	assert_int_equal(pthread_join(f->loop, NULL), 0);
	repl_server_fini(&f->srv);
	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

/* -- GET of each resource -- */

static void test_get_head(void **state)
{
	struct fixture *f = *state;
	struct resp r;

	get(f, "/v1/ns/HEAD", &r);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.major, 1);
	assert_int_equal(r.minor, 1);
	assert_hdr(&r, "Content-Type", "text/plain");
	assert_hdr(&r, "Content-Length", "2");
	assert_hdr(&r, "Cache-Control", "no-cache");
	assert_null(hdr(&r, "ETag"));
	assert_int_equal(r.body_len, 2);
	assert_memory_equal(r.body, "1\n", 2);
	assert_true(r.keep_alive);
	resp_free(&r);
}

static void test_get_catalog(void **state)
{
	struct fixture *f = *state;
	char p[256], etag[80], cl[32], hex[CHUNK_ID_HEX_LEN + 1];
	uint8_t *want, *sha;
	size_t want_len, sha_len;
	chunk_id sum;
	struct resp r;

	snprintf(p, sizeof(p), "%s/ns/catalog/1.db.zst", f->state);
	want = tsup_read_file(p, &want_len);
	snprintf(p, sizeof(p), "%s/ns/catalog/1.db.zst.sha256", f->state);
	sha = tsup_read_file(p, &sha_len);
	assert_int_equal(sha_len, CHUNK_ID_HEX_LEN + 1);

	get(f, "/v1/ns/catalog/1", &r);
	assert_int_equal(r.status, 200);
	assert_hdr(&r, "Content-Type", "application/zstd");
	snprintf(cl, sizeof(cl), "%zu", want_len);
	assert_hdr(&r, "Content-Length", cl);
	snprintf(etag, sizeof(etag), "\"%.64s\"", (char *)sha);
	assert_hdr(&r, "ETag", etag);
	assert_hdr(&r, "Cache-Control", IMMUTABLE);
	assert_int_equal(r.body_len, want_len);
	assert_memory_equal(r.body, want, want_len);
	/* the ETag is the SHA-256 of exactly these bytes */
	assert_int_equal(chunk_id_compute(r.body, r.body_len, &sum), 0);
	chunk_id_to_hex(&sum, hex);
	assert_memory_equal(hex, sha, CHUNK_ID_HEX_LEN);
	resp_free(&r);
	free(want);
	free(sha);
}

static void test_get_chunk(void **state)
{
	struct fixture *f = *state;
	char p[160], etag[80], cl[32], hex[CHUNK_ID_HEX_LEN + 1];
	struct resp r;

	chunk_id_to_hex(&f->hello, hex);
	chunk_path(p, sizeof(p), &f->hello);
	get(f, p, &r);
	assert_int_equal(r.status, 200);
	assert_hdr(&r, "Content-Type", "application/octet-stream");
	snprintf(cl, sizeof(cl), "%zu", r.body_len);
	assert_hdr(&r, "Content-Length", cl);
	snprintf(etag, sizeof(etag), "\"%s\"", hex);
	assert_hdr(&r, "ETag", etag);
	assert_hdr(&r, "Cache-Control", IMMUTABLE);
	assert_frame(r.body, r.body_len, HELLO);
	resp_free(&r);
}

/* -- HEAD: the GET's headers, no body -- */

/* The header name of a and of b: the same value, or absent from both. */
static void assert_same_hdr(const struct resp *a, const struct resp *b,
			    const char *name)
{
	const char *va = hdr(a, name), *vb = hdr(b, name);

	if (!va || !vb) {
		assert_null(va);
		assert_null(vb);
		return;
	}
	assert_string_equal(va, vb);
}

static void test_head_method(void **state)
{
	static const char *const names[] = {"Content-Type", "ETag",
					    "Cache-Control"};
	struct fixture *f = *state;
	char chunk[160], req[1024], cl[32];
	const char *paths[] = {chunk, "/v1/ns/catalog/1", "/v1/ns/HEAD",
			       "/v1/nope/HEAD"};
	struct client *c = cl_open(f);
	size_t i, k;
	struct resp g, r;

	chunk_path(chunk, sizeof(chunk), &f->hello);
	/* Each HEAD on one connection, then a GET there: had any HEAD
	 * answer carried a body, the next status line would not parse. */
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		get(f, paths[i], &g);
		snprintf(req, sizeof(req),
			 "HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n", paths[i]);
		cl_sends(c, req);
		assert_int_equal(cl_read(c, 1, &r), 0);
		assert_int_equal(r.status, g.status);
		assert_int_equal(r.body_len, 0);
		/* the length of the body a GET gets */
		snprintf(cl, sizeof(cl), "%zu", g.body_len);
		assert_hdr(&r, "Content-Length", cl);
		for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
			assert_same_hdr(&r, &g, names[k]);
		assert_true(r.keep_alive);
		resp_free(&r);
		resp_free(&g);
	}
	cl_sends(c, "GET /v1/ns/HEAD HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_memory_equal(r.body, "1\n", 2);
	resp_free(&r);
	cl_close(c);
}

/* -- connections -- */

static void test_keep_alive(void **state)
{
	struct fixture *f = *state;
	struct client *c = cl_open(f);
	char p[160], req[1024];
	struct resp r;

	/* two requests, one after the other's answer, on one connection */
	cl_sends(c, "GET /v1/ns/HEAD HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_null(hdr(&r, "Connection"));
	assert_true(r.keep_alive);
	resp_free(&r);
	chunk_path(p, sizeof(p), &f->world);
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", p);
	cl_sends(c, req);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_frame(r.body, r.body_len, WORLD);
	resp_free(&r);
	/* a third asks to close: answered, said so, then closed */
	cl_sends(c, "GET /v1/ns/HEAD HTTP/1.1\r\nHost: t\r\n"
		    "Connection: close\r\n\r\n");
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_hdr(&r, "Connection", "close");
	assert_false(r.keep_alive);
	resp_free(&r);
	assert_true(cl_at_eof(c));
	cl_close(c);

	/* HTTP/1.0 without keep-alive: one answer, then the close */
	c = cl_open(f);
	cl_sends(c, "GET /v1/ns/HEAD HTTP/1.0\r\n\r\n");
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_hdr(&r, "Connection", "close");
	resp_free(&r);
	assert_true(cl_at_eof(c));
	cl_close(c);
}

static void test_pipelining(void **state)
{
	struct fixture *f = *state;
	struct client *c = cl_open(f);
	char p1[160], p2[160], req[2048];
	struct resp r;

	/* Three requests in one write. The chunks are read on worker
	 * threads while HEAD and the 404 are answered at once, so answers
	 * in request order show the queue, not luck. */
	chunk_path(p1, sizeof(p1), &f->hello);
	chunk_path(p2, sizeof(p2), &f->world);
	snprintf(req, sizeof(req),
		 "GET %s HTTP/1.1\r\nHost: t\r\n\r\n"
		 "GET /v1/ns/HEAD HTTP/1.1\r\nHost: t\r\n\r\n"
		 "GET %s HTTP/1.1\r\nHost: t\r\n\r\n"
		 "GET /v1/nope/HEAD HTTP/1.1\r\nHost: t\r\n\r\n",
		 p1, p2);
	cl_sends(c, req);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_frame(r.body, r.body_len, HELLO);
	resp_free(&r);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_hdr(&r, "Content-Type", "text/plain");
	assert_memory_equal(r.body, "1\n", 2);
	resp_free(&r);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_frame(r.body, r.body_len, WORLD);
	resp_free(&r);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 404, "not_found", NULL, 0);
	resp_free(&r);
	cl_close(c);
}

/* -- errors -- */

/* One request on a fresh connection; its answer must be the error status
 * and code, with that detail (when not NULL) and that header (when hname
 * is not NULL). */
static void expect_error_hdr(const struct fixture *f, const char *req,
			     int status, const char *code, const char *detail,
			     const char *hname, const char *hvalue)
{
	char got[1024];
	struct resp r;

	fetch(f, req, 0, &r);
	assert_error(&r, status, code, got, sizeof(got));
	if (detail)
		assert_string_equal(got, detail);
	if (hname)
		assert_hdr(&r, hname, hvalue);
	resp_free(&r);
}

static void expect_error(const struct fixture *f, const char *req, int status,
			 const char *code, const char *detail)
{
	expect_error_hdr(f, req, status, code, detail, NULL, NULL);
}

/* POST /v1/ns/chunks with body[0..len) (len may be 0). */
static void cl_post(struct client *c, const void *body, size_t len)
{
	char head[256];

	snprintf(head, sizeof(head),
		 "POST /v1/ns/chunks HTTP/1.1\r\nHost: t\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 len);
	cl_sends(c, head);
	if (len)
		cl_send(c, body, len);
}

/* A batch answer: for each of the n ids in order, the id, then its frame,
 * which decodes to want[i % n_want]; nothing after the last. */
static void assert_batch(const struct resp *r, const uint8_t *ids, size_t n,
			 const char *const *want, size_t n_want)
{
	size_t off = 0, i;

	assert_int_equal(r->status, 200);
	for (i = 0; i < n; i++) {
		struct frame_info fi;

		assert_true(r->body_len - off > CHUNK_ID_LEN);
		assert_memory_equal(r->body + off, ids + i * CHUNK_ID_LEN,
				    CHUNK_ID_LEN);
		off += CHUNK_ID_LEN;
		assert_int_equal(frame_header_parse(r->body + off,
						    r->body_len - off,
						    CHUNK_MAX_LIMIT, &fi),
				 0);
		assert_true(fi.frame_len <= r->body_len - off);
		assert_frame(r->body + off, fi.frame_len, want[i % n_want]);
		off += fi.frame_len;
	}
	assert_int_equal(off, r->body_len);
}

static void test_not_found(void **state)
{
	struct fixture *f = *state;
	char detail[160], req[1024], hex[CHUNK_ID_HEX_LEN + 1];
	uint8_t ids[3 * CHUNK_ID_LEN];
	struct client *c;
	struct resp r;

	expect_error(f, "GET /v1/nope/HEAD HTTP/1.1\r\n\r\n", 404, "not_found",
		     "unknown namespace 'nope'");
	expect_error(f, "GET /etc/passwd HTTP/1.1\r\n\r\n", 404, "not_found",
		     "unknown path '/etc/passwd'");
	expect_error(f, "GET /v1/ns/nothing HTTP/1.1\r\n\r\n", 404, "not_found",
		     "unknown path '/v1/ns/nothing'");
	expect_error(f, "GET /v1/ns/catalog/2 HTTP/1.1\r\n\r\n", 404,
		     "not_found", "unknown generation '2'");
	expect_error(f, "GET /v1/ns/catalog/01 HTTP/1.1\r\n\r\n", 404,
		     "not_found", "unknown generation '01'");
	memset(hex, '0', CHUNK_ID_HEX_LEN);
	hex[CHUNK_ID_HEX_LEN] = '\0';
	snprintf(req, sizeof(req), "GET /v1/ns/chunk/%s HTTP/1.1\r\n\r\n", hex);
	snprintf(detail, sizeof(detail), "unknown chunk ID %s", hex);
	expect_error(f, req, 404, "not_found", detail);

	/* a batch with one unknown id among known ones: all of it is 404 */
	memcpy(ids, f->hello.b, CHUNK_ID_LEN);
	memset(ids + CHUNK_ID_LEN, 0, CHUNK_ID_LEN);
	memcpy(ids + 2 * CHUNK_ID_LEN, f->world.b, CHUNK_ID_LEN);
	c = cl_open(f);
	cl_post(c, ids, sizeof(ids));
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 404, "not_found", req, sizeof(req));
	snprintf(detail, sizeof(detail),
		 "unknown chunk ID %s (id 1 of the batch)", hex);
	assert_string_equal(req, detail);
	resp_free(&r);
	cl_close(c);
}

static void test_bad_request(void **state)
{
	struct fixture *f = *state;
	char req[1024], id[CHUNK_ID_HEX_LEN + 1], odd[CHUNK_ID_LEN + 1];
	struct client *c;
	struct resp r;

	expect_error(f, "GET /v1/ns/chunk/xyz HTTP/1.1\r\n\r\n", 400,
		     "bad_request", "a chunk ID is 64 hex digits");
	memset(id, 'a', CHUNK_ID_HEX_LEN);
	id[CHUNK_ID_HEX_LEN - 1] = 'g';
	id[CHUNK_ID_HEX_LEN] = '\0';
	snprintf(req, sizeof(req), "GET /v1/ns/chunk/%s HTTP/1.1\r\n\r\n", id);
	expect_error(f, req, 400, "bad_request", NULL);
	snprintf(req, sizeof(req), "GET /v1/ns/chunk/%.63s HTTP/1.1\r\n\r\n",
		 id);
	expect_error(f, req, 400, "bad_request", NULL);

	/* a request line that is not HTTP: 400, and the connection ends */
	c = cl_open(f);
	cl_sends(c, "GARBAGE\r\n\r\n");
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 400, "bad_request", NULL, 0);
	assert_hdr(&r, "Connection", "close");
	resp_free(&r);
	assert_true(cl_at_eof(c));
	cl_close(c);

	/* batch bodies that are not 1..1024 whole ids; the connection stays
	 * good after each */
	c = cl_open(f);
	memset(odd, 'a', sizeof(odd));
	cl_post(c, odd, sizeof(odd));
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 400, "bad_request", req, sizeof(req));
	assert_non_null(strstr(req, "(got 33 bytes)"));
	resp_free(&r);
	cl_post(c, NULL, 0);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 400, "bad_request", req, sizeof(req));
	assert_non_null(strstr(req, "(got 0 bytes)"));
	resp_free(&r);
	cl_close(c);
}

static void test_method_not_allowed(void **state)
{
	struct fixture *f = *state;
	char p[160], req[1024];

	expect_error_hdr(f,
			 "POST /v1/ns/HEAD HTTP/1.1\r\nHost: t\r\n"
			 "Content-Length: 0\r\n\r\n",
			 405, "method_not_allowed", "POST is not allowed here",
			 "Allow", "GET, HEAD");
	expect_error_hdr(f, "GET /v1/ns/chunks HTTP/1.1\r\nHost: t\r\n\r\n",
			 405, "method_not_allowed", "GET is not allowed here",
			 "Allow", "POST");
	chunk_path(p, sizeof(p), &f->hello);
	snprintf(req, sizeof(req), "DELETE %s HTTP/1.1\r\nHost: t\r\n\r\n", p);
	expect_error_hdr(f, req, 405, "method_not_allowed",
			 "DELETE is not allowed here", "Allow", "GET, HEAD");
}

static void test_too_large(void **state)
{
	static const char *const hello[] = {HELLO};
	struct fixture *f = *state;
	size_t n = REPL_BATCH_MAX * CHUNK_ID_LEN, i;
	uint8_t *body = malloc(n + 1);
	char req[1024];
	struct client *c;
	struct resp r;

	assert_non_null(body);
	/* 1025 ids announced: refused from the headers alone */
	snprintf(req, sizeof(req),
		 "POST /v1/ns/chunks HTTP/1.1\r\nHost: t\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 n + CHUNK_ID_LEN);
	c = cl_open(f);
	cl_sends(c, req);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 413, "too_large", NULL, 0);
	resp_free(&r);
	assert_true(cl_at_eof(c));
	cl_close(c);

	/* a chunked body one byte over the limit: refused at that byte */
	c = cl_open(f);
	snprintf(req, sizeof(req),
		 "POST /v1/ns/chunks HTTP/1.1\r\nHost: t\r\n"
		 "Transfer-Encoding: chunked\r\n\r\n%zx\r\n",
		 n + 1);
	cl_sends(c, req);
	memset(body, 'x', n + 1);
	cl_send(c, body, n + 1);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 413, "too_large", NULL, 0);
	resp_free(&r);
	assert_true(cl_at_eof(c));
	cl_close(c);

	/* exactly 1024 ids is allowed: 1024 frames come back */
	for (i = 0; i < REPL_BATCH_MAX; i++)
		memcpy(body + i * CHUNK_ID_LEN, f->hello.b, CHUNK_ID_LEN);
	c = cl_open(f);
	cl_post(c, body, n);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_batch(&r, body, REPL_BATCH_MAX, hello, 1);
	resp_free(&r);
	cl_close(c);
	free(body);
}

static void test_uri_too_long(void **state)
{
	struct fixture *f = *state;
	size_t len = HTTPD_LIMITS_REPLICATOR.url_max + 100;
	char *req = malloc(len + 64);

	assert_non_null(req);
	/* "GET " and a URL of len bytes: "/v1/ns/" and 'a's */
	memcpy(req, "GET /v1/ns/", 11);
	memset(req + 11, 'a', len - 7);
	snprintf(req + 4 + len, 64, " HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_error(f, req, 414, "uri_too_long", NULL);
	free(req);
}

static void test_headers_too_large(void **state)
{
	struct fixture *f = *state;
	size_t len = HTTPD_LIMITS_REPLICATOR.head_max + 100, n;
	char *req = malloc(len + 128);

	assert_non_null(req);
	n = (size_t)snprintf(req, 128, "GET /v1/ns/HEAD HTTP/1.1\r\nX-Big: ");
	memset(req + n, 'b', len);
	snprintf(req + n + len, 64, "\r\n\r\n");
	expect_error(f, req, 431, "headers_too_large", NULL);
	free(req);
}

static void test_not_ready(void **state)
{
	struct fixture *f = *state;

	expect_error_hdr(f, "GET /v1/broken/HEAD HTTP/1.1\r\n\r\n", 503,
			 "not_ready", "namespace 'broken' failed to scan",
			 "Retry-After", "5");
}

/* -- strings in JSON bodies: UTF-8 as is, other bytes as \xNN -- */

static void test_utf8_detail(void **state)
{
	struct fixture *f = *state;
	struct resp r;

	/* raw bytes in the request line (the server does not
	 * percent-decode): the detail holds them exactly */
	expect_error(f, "GET /v1/ns/caf\xc3\xa9 HTTP/1.1\r\n\r\n", 404,
		     "not_found", "unknown path '/v1/ns/caf\xc3\xa9'");
	expect_error(
	    f, "GET /v1/\xe6\x97\xa5\xe6\x9c\xac/HEAD HTTP/1.1\r\n\r\n", 404,
	    "not_found", "unknown namespace '\xe6\x97\xa5\xe6\x9c\xac'");
	/* and on the wire too, not as \u escapes */
	fetch(f, "GET /v1/ns/caf\xc3\xa9 HTTP/1.1\r\n\r\n", 0, &r);
	assert_non_null(memmem(r.body, r.body_len, "caf\xc3\xa9", 5));
	resp_free(&r);

	/* a byte that is not UTF-8 arrives as the text \xff; a lone lead
	 * byte of a sequence the same */
	expect_error(f, "GET /v1/ns/bad\xff HTTP/1.1\r\n\r\n", 404, "not_found",
		     "unknown path '/v1/ns/bad\\xff'");
	expect_error(f, "GET /v1/ns/cut\xc3 HTTP/1.1\r\n\r\n", 404, "not_found",
		     "unknown path '/v1/ns/cut\\xc3'");
	fetch(f, "GET /v1/ns/bad\xff HTTP/1.1\r\n\r\n", 0, &r);
	assert_null(memchr(r.body, 0xff, r.body_len));
	resp_free(&r);
}

/* -- /stats and a source that changed after the scan (409) -- */

static json_int_t stat_of(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v))
		fail_msg("stats: %s is not an integer", key);
	return json_integer_value(v);
}

static json_t *get_stats(const struct fixture *f)
{
	static const char *const keys[] = {
	    "generation",	  "requests",	"chunks_served",
	    "chunk_bytes_served", "mismatches", "manifests_served",
	    "chunks_rehashed",	  "rescans",	"lz4_frames_served",
	    "zstd_frames_served"};
	json_error_t jerr;
	struct resp r;
	json_t *o;

	get(f, "/v1/ns/stats", &r);
	assert_int_equal(r.status, 200);
	assert_hdr(&r, "Content-Type", "application/json");
	assert_hdr(&r, "Cache-Control", "no-cache");
	assert_int_equal(r.body[r.body_len - 1], '\n');
	o = json_loadb((const char *)r.body, r.body_len, 0, &jerr);
	if (!o)
		fail_msg("stats not JSON (%s): %s", jerr.text, (char *)r.body);
	/* the counters, when the generation was switched to, whether a
	 * rescan runs, and the hashing object */
	assert_int_equal(json_object_size(o), 13);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		stat_of(o, keys[i]);
	assert_true(json_is_string(json_object_get(o, "switched_at")));
	assert_int_equal(
	    strlen(json_string_value(json_object_get(o, "switched_at"))), 20);
	assert_true(json_is_false(json_object_get(o, "rescanning")));
	assert_true(json_is_object(json_object_get(o, "hashing")));
	resp_free(&r);
	return o;
}

static void test_stats(void **state)
{
	struct fixture *f = *state;
	json_t *a = get_stats(f), *b;
	char p[160];
	struct resp r;

	assert_int_equal(stat_of(a, "generation"), 1);
	chunk_path(p, sizeof(p), &f->hello);
	get(f, p, &r);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	b = get_stats(f);
	/* the chunk and this second /stats */
	assert_int_equal(stat_of(b, "requests") - stat_of(a, "requests"), 2);
	assert_int_equal(
	    stat_of(b, "chunks_served") - stat_of(a, "chunks_served"), 1);
	/* its file was written just now: hashed again */
	assert_int_equal(
	    stat_of(b, "chunks_rehashed") - stat_of(a, "chunks_rehashed"), 1);
	assert_int_equal(stat_of(b, "chunk_bytes_served") -
			     stat_of(a, "chunk_bytes_served"),
			 (json_int_t)strlen(HELLO));
	/* too short to shrink: a raw frame, neither lz4 nor zstd */
	assert_int_equal(stat_of(b, "lz4_frames_served"),
			 stat_of(a, "lz4_frames_served"));
	assert_int_equal(stat_of(b, "zstd_frames_served"),
			 stat_of(a, "zstd_frames_served"));
	json_decref(a);
	json_decref(b);
}

static void test_changed_source(void **state)
{
	struct fixture *f = *state;
	json_t *a = get_stats(f), *b;
	char p[256], got[512];
	struct resp r;

	/* same sizes, other bytes: the scan's chunk ids no longer match */
	snprintf(p, sizeof(p), "%s/%s", f->src, UTF8_NAME);
	tsup_flip_byte(p, 0, 0x20);
	snprintf(p, sizeof(p), "%s/%s", f->src, BAD_NAME);
	tsup_flip_byte(p, 0, 0x20);

	chunk_path(p, sizeof(p), &f->utf8);
	get(f, p, &r);
	assert_error(&r, 409, "changed", got, sizeof(got));
	assert_string_equal(got, "chunk ID of " UTF8_NAME
				 " no longer matches its source");
	resp_free(&r);

	chunk_path(p, sizeof(p), &f->bad);
	get(f, p, &r);
	assert_error(&r, 409, "changed", got, sizeof(got));
	assert_string_equal(
	    got, "chunk ID of bad\\xff.txt no longer matches its source");
	resp_free(&r);

	b = get_stats(f);
	assert_int_equal(stat_of(b, "mismatches") - stat_of(a, "mismatches"),
			 2);
	assert_int_equal(
	    stat_of(b, "chunks_served") - stat_of(a, "chunks_served"), 0);
	json_decref(a);
	json_decref(b);
}

static void test_batch(void **state)
{
	static const char *const want[] = {WORLD, HELLO};
	struct fixture *f = *state;
	uint8_t ids[2 * CHUNK_ID_LEN];
	struct client *c = cl_open(f);
	struct resp r;

	memcpy(ids, f->world.b, CHUNK_ID_LEN);
	memcpy(ids + CHUNK_ID_LEN, f->hello.b, CHUNK_ID_LEN);
	cl_post(c, ids, sizeof(ids));
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_hdr(&r, "Content-Type", "application/octet-stream");
	assert_hdr(&r, "Transfer-Encoding", "chunked");
	assert_hdr(&r, "Cache-Control", "no-store");
	assert_batch(&r, ids, 2, want, 2);
	assert_true(r.keep_alive);
	resp_free(&r);
	cl_close(c);
}

/* A batch whose body the client sends only after "100 Continue" (curl
 * does so for bodies over 1 KiB unless told not to). */
static void test_expect_continue(void **state)
{
	static const char *const want[] = {HELLO, WORLD};
	struct fixture *f = *state;
	uint8_t ids[2 * CHUNK_ID_LEN];
	struct client *c = cl_open(f);
	struct resp r;

	memcpy(ids, f->hello.b, CHUNK_ID_LEN);
	memcpy(ids + CHUNK_ID_LEN, f->world.b, CHUNK_ID_LEN);
	cl_sends(c, "POST /v1/ns/chunks HTTP/1.1\r\nHost: t\r\n"
		    "Content-Length: 64\r\nExpect: 100-continue\r\n\r\n");
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_int_equal(r.status, 100);
	resp_free(&r);
	cl_send(c, ids, sizeof(ids));
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_batch(&r, ids, 2, want, 2);
	resp_free(&r);
	cl_close(c);
}

/* The other protocol on the port: plain HTTP to the https server is told
 * to use https, in the clear; a TLS handshake to the plain server is a
 * bad request. Either way, then the close. */
static void test_wrong_scheme(void **state)
{
	/* the start of a TLS ClientHello record */
	static const char hello[] =
	    "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
	struct fixture *f = *state;
	struct client *c = cl_open_as(f, 1);
	char detail[512];
	struct resp r;

	if (f->tls)
		cl_sends(c, "GET /v1/ns/HEAD HTTP/1.1\r\nHost: t\r\n\r\n");
	else
		cl_send(c, hello, sizeof(hello) - 1);
	assert_int_equal(cl_read(c, 0, &r), 0);
	assert_error(&r, 400, "bad_request", detail, sizeof(detail));
	assert_hdr(&r, "Connection", "close");
	if (f->tls)
		assert_string_equal(detail,
				    "this server speaks https: use an https:// "
				    "URL");
	resp_free(&r);
	assert_true(cl_at_eof(c));
	cl_close(c);
}

/* -- which clients are on this host (catalog/httpd/httpd_peer.c) -- */

static void test_peer_same_host(void **state)
{
	static const uint8_t lo4[4] = {127, 0, 0, 1}, lo4b[4] = {127, 9, 8, 7};
	static const uint8_t lo6[16] = {[15] = 1};
	static const uint8_t doc4[4] = {192, 0, 2, 77}; /* TEST-NET-1 */
	static const uint8_t doc6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 5};
	struct sockaddr_in local = {.sin_family = AF_INET};
	struct sockaddr_in6 mapped = {.sin6_family = AF_INET6};
	struct ifaddrs *ifs, *i;
	int seen = 0;

	(void)state;
	assert_int_equal(httpd_addr_same_host(lo4, 4, NULL), 1);
	assert_int_equal(httpd_addr_same_host(lo4b, 4, NULL), 1);
	assert_int_equal(httpd_addr_same_host(lo6, 16, NULL), 1);
	/* no interface here has a documentation address */
	assert_int_equal(httpd_addr_same_host(doc4, 4, NULL), 0);
	assert_int_equal(httpd_addr_same_host(doc6, 16, NULL), 0);
	assert_int_equal(httpd_addr_same_host(doc4, 0, NULL), 0);
	/* ... unless the client connected to that very address */
	memcpy(&local.sin_addr, doc4, 4);
	assert_int_equal(
	    httpd_addr_same_host(doc4, 4, (const struct sockaddr *)&local), 1);
	memcpy(mapped.sin6_addr.s6_addr + 10, "\xff\xff", 2);
	memcpy(mapped.sin6_addr.s6_addr + 12, doc4, 4);
	assert_int_equal(
	    httpd_addr_same_host(doc4, 4, (const struct sockaddr *)&mapped), 1);
	local.sin_addr.s_addr ^= htonl(1);
	assert_int_equal(
	    httpd_addr_same_host(doc4, 4, (const struct sockaddr *)&local), 0);
	/* every IPv4 address an interface here has is this host's */
	assert_int_equal(getifaddrs(&ifs), 0);
	for (i = ifs; i; i = i->ifa_next) {
		const struct sockaddr_in *a = (const void *)i->ifa_addr;

		if (!a || a->sin_family != AF_INET)
			continue;
		assert_int_equal(httpd_addr_same_host(
				     (const uint8_t *)&a->sin_addr, 4, NULL),
				 1);
		seen++;
	}
	freeifaddrs(ifs);
	assert_true(seen > 0); /* lo at least */
}

/* -- the batch codec by how a connection drains (repl_adapt.c) -- */

/* n notes of unsent bytes each; the choice after them. */
static int adapt_notes(struct repl_adapt *a, int n, size_t unsent)
{
	while (n-- > 0)
		repl_adapt_note(a, unsent);
	return a->lz4;
}

static void test_adapt(void **state)
{
	struct repl_adapt a;
	int n;

	(void)state;
	repl_adapt_init(&a);
	assert_int_equal(a.lz4, 0); /* zstd from the first frame */
	/* a socket that stays full keeps zstd */
	assert_int_equal(adapt_notes(&a, 100, 1u << 20), 0);
	/* a few empty moments do not flip it ... */
	assert_int_equal(adapt_notes(&a, 3, 0), 0);
	/* ... nor do bytes below a frame's tail */
	repl_adapt_init(&a);
	for (n = 0; n < 100 && !a.lz4; n++)
		repl_adapt_note(&a, 4096);
	assert_true(a.lz4);
	assert_in_range(n, 5, 40);
	/* a drained socket held: lz4, and one full moment keeps it */
	assert_int_equal(adapt_notes(&a, 100, 0), 1);
	assert_int_equal(adapt_notes(&a, 1, 1u << 20), 1);
	/* a backlog that lasts brings zstd back within a few frames */
	for (n = 0; n < 100 && a.lz4; n++)
		repl_adapt_note(&a, 1u << 20);
	assert_false(a.lz4);
	assert_in_range(n, 2, 20);
	/* full one time in three sits inside the band: the choice stays as
	 * it was, either way (no flapping) */
	for (n = 0; n < 300; n++)
		repl_adapt_note(&a, n % 3 ? 0 : 1u << 20);
	assert_int_equal(a.lz4, 0);
	assert_int_equal(adapt_notes(&a, 100, 0), 1);
	for (n = 0; n < 300; n++)
		repl_adapt_note(&a, n % 3 ? 0 : 1u << 20);
	assert_int_equal(a.lz4, 1);
}

int main(void)
{
	const struct CMUnitTest peers[] = {
	    cmocka_unit_test(test_peer_same_host),
	    cmocka_unit_test(test_adapt),
	};
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_get_head),
	    cmocka_unit_test(test_get_catalog),
	    cmocka_unit_test(test_get_chunk),
	    cmocka_unit_test(test_head_method),
	    cmocka_unit_test(test_keep_alive),
	    cmocka_unit_test(test_pipelining),
	    cmocka_unit_test(test_not_found),
	    cmocka_unit_test(test_bad_request),
	    cmocka_unit_test(test_method_not_allowed),
	    cmocka_unit_test(test_too_large),
	    cmocka_unit_test(test_uri_too_long),
	    cmocka_unit_test(test_headers_too_large),
	    cmocka_unit_test(test_not_ready),
	    cmocka_unit_test(test_utf8_detail),
	    cmocka_unit_test(test_stats),
	    cmocka_unit_test(test_batch),
	    cmocka_unit_test(test_expect_continue),
	    cmocka_unit_test(test_wrong_scheme),
	    /* last: it changes two source files */
	    cmocka_unit_test(test_changed_source),
	};

	base_log_init("test_repl_http", BASE_LOG_INFO);
	/* a client that closes first must not kill the test with SIGPIPE */
	signal(SIGPIPE, SIG_IGN);
	if (cmocka_run_group_tests_name("peers", peers, NULL, NULL) != 0)
		return 1;
	if (cmocka_run_group_tests_name("plain HTTP", tests, group_setup,
					group_teardown) != 0)
		return 1;
	return cmocka_run_group_tests_name("https", tests, group_setup_tls,
					   group_teardown);
}
