/*
 * tests/unit/test_httpd_share.c — catalog/httpd/'s tenants and the bytes
 * of answers (httpd_tenant.c), with a server of the test's own on a
 * libuv loop in a thread and real sockets on loopback:
 *   - a tenant that opens connections and reads none of its answers
 *     holds no more than the pool (inflight_max), however many it opens:
 *     the rest wait, counted as waiting for their client;
 *   - another tenant that asks then gets its answer whole: the first
 *     one's stalled connections over its share are closed (reset, and
 *     counted as HTTPD_LIM_RECLAIMED) until it is back within its share;
 *   - at the connection cap the connection closed for room is one of the
 *     tenant holding most connections, not the newcomer's lone one;
 *   - what a request holds is given back when it goes: the pool is empty
 *     once every connection closed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "catalog/base/base.h"
#include "catalog/httpd/httpd.h"
#include "tsupport.h"

#define POOL (2u << 20)	    /* inflight_max */
#define ANSWER (512u << 10) /* each /big answer's bytes, reserved */
/* and how many times they are sent: more than a socket's buffers take,
 * so a client that does not read stalls the answer */
#define PIECES 32u
#define CAP 12u /* max_conns */

struct ssrv {
	uv_loop_t loop;
	uv_async_t stop, ask;
	pthread_t th;
	struct httpd_server *http;
	int port;
	/* loop thread; read by the test under lock */
	pthread_mutex_t lock;
	size_t inflight_peak, inflight_now;
	unsigned limited[HTTPD_LIM_N];
	unsigned big_done;
};

static uint8_t BODY[ANSWER];

/* GET /big/T: tenant T, ANSWER bytes reserved, then sent PIECES times,
 * one write at a time, then released. GET /pool: the bytes reserved now
 * (no reservation). */
static void big_sent(struct httpd_req *h, void *arg, int status)
{
	struct ssrv *t = h->ctx;
	uintptr_t left = (uintptr_t)arg;

	if (status >= 0 && left > 0) {
		(void)httpd_req_send(h, NULL, 0, BODY, ANSWER, big_sent,
				     (void *)(left - 1));
		return;
	}
	httpd_req_release(h, ANSWER);
	if (status >= 0) {
		httpd_req_done(h);
		pthread_mutex_lock(&t->lock);
		t->big_done++;
		pthread_mutex_unlock(&t->lock);
	}
}

static void note(struct ssrv *t)
{
	size_t n = httpd_server_inflight(t->http);

	pthread_mutex_lock(&t->lock);
	t->inflight_now = n;
	if (n > t->inflight_peak)
		t->inflight_peak = n;
	pthread_mutex_unlock(&t->lock);
}

static void big_go(struct httpd_req *h, void *arg)
{
	(void)arg;
	note(h->ctx);
	if (httpd_req_head(h, 200, "application/octet-stream",
			   (int64_t)ANSWER * PIECES, NULL) < 0)
		return;
	(void)httpd_req_send(h, NULL, 0, BODY, ANSWER, big_sent,
			     (void *)(uintptr_t)(PIECES - 1));
}

static void s_dispatch(struct httpd_req *h)
{
	struct ssrv *t = h->ctx;
	char body[32];
	int n, r;

	if (h->url_len > 5 && !memcmp(h->url, "/big/", 5)) {
		httpd_req_set_tenant(h, h->url + 5, h->url_len - 5);
		r = httpd_req_reserve(h, ANSWER, big_go, NULL);
		if (r == 0)
			big_go(h, NULL);
		else
			assert_int_equal(r, -EAGAIN);
		note(t);
		return;
	}
	/* /pool: 200 when nothing is held, else 409 with what is */
	n = snprintf(body, sizeof(body), "%zu\n",
		     httpd_server_inflight(t->http));
	httpd_req_respond(h, httpd_server_inflight(t->http) ? 409 : 200,
			  "text/plain", NULL, body, (size_t)n);
}

static void s_limited(void *ctx, enum httpd_limit why)
{
	struct ssrv *t = ctx;

	pthread_mutex_lock(&t->lock);
	t->limited[why]++;
	pthread_mutex_unlock(&t->lock);
}

static void s_stop(uv_async_t *a)
{
	struct ssrv *t = a->data;

	httpd_server_close(t->http);
	uv_close((uv_handle_t *)a, NULL);
	uv_close((uv_handle_t *)&t->ask, NULL);
}

static void s_ask(uv_async_t *a)
{
	note(a->data);
}

static void *s_loop(void *arg)
{
	struct ssrv *t = arg;

	uv_run(&t->loop, UV_RUN_DEFAULT);
	return NULL;
}

static int share_setup(void **state)
{
	struct ssrv *t = calloc(1, sizeof(*t));
	struct httpd_limits lim = HTTPD_LIMITS_REPLICATOR;
	struct httpd_server_opts o = {
	    .limits = &lim,
	    .server = "ferry-test/1",
	    .req_size = sizeof(struct httpd_req),
	    .dispatch = s_dispatch,
	    .hooks = {.limited = s_limited},
	};
	struct sockaddr_storage sa;

	assert_non_null(t);
	lim.inflight_max = POOL;
	lim.max_conns = CAP;
	lim.per_addr = 0;
	pthread_mutex_init(&t->lock, NULL);
	assert_int_equal(uv_loop_init(&t->loop), 0);
	o.loop = &t->loop;
	o.ctx = t;
	uv_async_init(&t->loop, &t->stop, s_stop);
	t->stop.data = t;
	uv_async_init(&t->loop, &t->ask, s_ask);
	t->ask.data = t;
	assert_int_equal(httpd_server_new(&o, &t->http), 0);
	assert_int_equal(httpd_listen_resolve("127.0.0.1:0", &sa), 0);
	assert_int_equal(
	    httpd_server_listen(t->http, (struct sockaddr *)&sa, 64), 0);
	assert_int_equal(httpd_server_bound(t->http, &sa), 0);
	t->port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
	assert_int_equal(pthread_create(&t->th, NULL, s_loop, t), 0);
	*state = t;
	return 0;
}

static int share_teardown(void **state)
{
	struct ssrv *t = *state;

	uv_async_send(&t->stop);
	assert_int_equal(pthread_join(t->th, NULL), 0);
	assert_int_equal(uv_loop_close(&t->loop), 0);
	pthread_mutex_destroy(&t->lock);
	free(t);
	return 0;
}

/* A connection from 127.0.0.1 with a small receive buffer, its request
 * sent; never read. */
static int stalled(int port, const char *tenant)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rcv = 4096;
	char req[128];
	int n =
	    snprintf(req, sizeof(req), "GET /big/%s HTTP/1.1\r\n\r\n", tenant);

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
	return fd;
}

/* GET path on a new connection, read to the close: the body's length
 * when the answer is a 200, minus its status when it is another, -1 when
 * there is none. Within 20 s. */
static long fetch(int port, const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timeval tv = {20, 0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t cap = (size_t)ANSWER * PIECES + 4096;
	char req[128], *buf = malloc(cap), *body;
	size_t got = 0;
	ssize_t n;
	long len;
	int k = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nConnection: close\r\n\r\n", path);

	assert_true(fd >= 0 && buf);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(send(fd, req, (size_t)k, MSG_NOSIGNAL), k);
	while (got + 1 < cap && (n = recv(fd, buf + got, cap - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	body = strstr(buf, "\r\n\r\n");
	if (!body || strncmp(buf, "HTTP/1.1 ", 9))
		len = -1;
	else if (strncmp(buf, "HTTP/1.1 200 ", 13))
		len = -strtol(buf + 9, NULL, 10);
	else
		len = (long)(got - (size_t)(body + 4 - buf));
	free(buf);
	return len;
}

/* 1 when the server reset fd (its answer cut), 0 when it is still open. */
static int was_reset(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};
	int err = 0;
	socklen_t l = sizeof(err);

	if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLERR | POLLHUP)))
		return 0;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
	return err == ECONNRESET || (p.revents & POLLHUP);
}

static size_t peak(struct ssrv *t)
{
	size_t p;

	pthread_mutex_lock(&t->lock);
	p = t->inflight_peak;
	pthread_mutex_unlock(&t->lock);
	return p;
}

static unsigned limited(struct ssrv *t, enum httpd_limit why)
{
	unsigned n;

	pthread_mutex_lock(&t->lock);
	n = t->limited[why];
	pthread_mutex_unlock(&t->lock);
	return n;
}

static void test_share(void **state)
{
	struct ssrv *t = *state;
	int a[8], i, reset = 0;
	long got;

	/* tenant a: eight connections, none read. Alone, it may hold the
	 * whole pool (four answers); the other four wait. */
	for (i = 0; i < 8; i++)
		a[i] = stalled(t->port, "a");
	usleep(300 * 1000);
	assert_true(peak(t) <= POOL);
	assert_true(peak(t) >= POOL - ANSWER);
	/* tenant b asks: a is brought back to its share (half the pool)
	 * by closing its stalled connections, and b is answered whole */
	got = fetch(t->port, "/big/b");
	assert_int_equal(got, (long)ANSWER * PIECES);
	assert_true(limited(t, HTTPD_LIM_RECLAIMED) >= 1);
	assert_true(peak(t) <= POOL);
	for (i = 0; i < 8; i++)
		reset += was_reset(a[i]);
	assert_true(reset >= 1);
	assert_true(reset < 8); /* within its share it keeps some */
	for (i = 0; i < 8; i++)
		close(a[i]);
	/* everything held went with the connections */
	for (i = 0; i < 100 && fetch(t->port, "/pool") != 2; i++)
		usleep(50 * 1000);
	assert_int_equal(fetch(t->port, "/pool"), 2); /* 200, "0\n" */
}

static void test_cap(void **state)
{
	struct ssrv *t = *state;
	int a[CAP], i, evicted0 = (int)limited(t, HTTPD_LIM_EVICTED);

	/* tenant a fills the cap with connections that do not read (one
	 * address: before a request names it, the address is the tenant;
	 * here the requests name it "a") */
	for (i = 0; i < (int)CAP; i++)
		a[i] = stalled(t->port, "a");
	usleep(700 * 1000); /* past the half second they may be closed at */
	/* a newcomer gets in: one of a's makes room, and it is answered
	 * (409: the pool is not empty, a holds it) */
	assert_int_equal(fetch(t->port, "/pool"), -409);
	assert_true((int)limited(t, HTTPD_LIM_EVICTED) > evicted0);
	for (i = 0; i < (int)CAP; i++)
		close(a[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_share, share_setup,
					    share_teardown),
	    cmocka_unit_test_setup_teardown(test_cap, share_setup,
					    share_teardown),
	};

	memset(BODY, 'x', sizeof(BODY));
	/* the server writes to sockets the test closes, as the programs
	 * do (they ignore it too) */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
