/*
 * test_hyd_metrics.c — hydrator/metrics/: the --metrics-listen server on
 * the shared engine, over a loopback socket, and the text
 * hyd_metrics_render makes from the read path's and the mount's counters
 * (no fetcher, no control socket: those families are zero or left out,
 * never made up).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/base/base.h"
#include "hydrator/metrics/hyd_metrics.h"
#include "tsupport.h"

/* One exchange with the server at port: send req, read until it closes
 * (one request per connection). The answer, NUL-terminated, into buf. */
static size_t exchange(int port, const char *req, char *buf, size_t cap)
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
	while (got + 1 < cap && (n = recv(fd, buf + got, cap - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	return got;
}

/* The server on the shared engine (catalog/httpd/): GET and HEAD
 * /metrics, 404 and 405 elsewhere, the limits' 414, one answer per
 * connection, the hydrator's Server header; the shared HOST:PORT rule
 * (its cases are test_httpd.c's). */
static void test_serve(void **state)
{
	struct hyd_read_counts rc;
	struct hyd_mount_counts mc;
	struct hyd_metrics_src src;
	hyd_metrics *m = NULL;
	char listen[32], *buf = malloc(1 << 20), *big;
	int port = tsup_free_port();

	(void)state;
	assert_non_null(buf);
	hyd_read_counts_init(&rc);
	memset(&mc, 0, sizeof(mc));
	mc.generation = 7;
	memset(&src, 0, sizeof(src));
	src.read = &rc;
	src.mount = &mc;
	assert_int_equal(hyd_metrics_start("::1:9851", &src, &m), -EINVAL);
	assert_int_equal(hyd_metrics_start("127.0.0.1", &src, &m), -EINVAL);
	assert_null(m);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	assert_int_equal(hyd_metrics_start(listen, &src, &m), 0);

	exchange(port, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", buf,
		 1 << 20);
	assert_memory_equal(buf, "HTTP/1.1 200 OK\r\n", 17);
	assert_non_null(strstr(buf, "\r\nServer: ferry-hydrator/"));
	assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
	assert_non_null(strstr(buf, "\r\nCache-Control: no-cache\r\n"));
	assert_non_null(strstr(buf, "\nferry_hydrator_generation 7\n"));

	exchange(port, "HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n", buf,
		 1 << 20);
	assert_memory_equal(buf, "HTTP/1.1 200 OK\r\n", 17);
	assert_string_equal(strstr(buf, "\r\n\r\n"), "\r\n\r\n");

	exchange(port, "GET /other HTTP/1.1\r\nHost: t\r\n\r\n", buf, 1 << 20);
	assert_memory_equal(buf, "HTTP/1.1 404 Not Found\r\n", 24);
	assert_string_equal(strstr(buf, "\r\n\r\n"),
			    "\r\n\r\nonly /metrics is here\n");

	exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab",
		 buf, 1 << 20);
	assert_memory_equal(buf, "HTTP/1.1 405 Method Not Allowed\r\n", 33);
	assert_non_null(strstr(buf, "\r\nAllow: GET, HEAD\r\n"));

	/* a URL past the metrics server's limit */
	big = malloc(4096);
	assert_non_null(big);
	memset(big, 'a', 4096);
	memcpy(big, "GET /", 5);
	snprintf(big + 2000, 4096 - 2000, " HTTP/1.1\r\n\r\n");
	exchange(port, big, buf, 1 << 20);
	assert_memory_equal(buf, "HTTP/1.1 414 URI Too Long\r\n", 27);
	assert_string_equal(strstr(buf, "\r\n\r\n"), "\r\n\r\nbad request\n");

	/* two requests on one connection: one answer, then the close */
	exchange(port,
		 "GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n",
		 buf, 1 << 20);
	assert_null(strstr(strstr(buf, "HTTP/1.1 200") + 1, "HTTP/1.1 "));
	hyd_metrics_stop(m);
	free(big);
	free(buf);
}

static void test_render(void **state)
{
	struct hyd_read_counts rc;
	struct hyd_mount_counts mc;
	struct hyd_metrics_src src;
	struct base_prom p;

	(void)state;
	hyd_read_counts_init(&rc);
	memset(&mc, 0, sizeof(mc));
	rc.chunk_hits = 3;
	rc.chunk_misses = 5;
	rc.reads = 2;
	rc.read_bytes = 131072;
	base_hist_observe_ns(&rc.latency, 200000);     /* 0.2 ms */
	base_hist_observe_ns(&rc.latency, 3000000000); /* 3 s */
	mc.catalog_requests = 2;
	mc.catalog_bytes = 970;
	mc.manifest_requests = 1;
	mc.generation = 7;
	mc.switches = 4;
	memset(&src, 0, sizeof(src));
	src.read = &rc;
	src.mount = &mc;
	base_prom_init(&p);
	hyd_metrics_render(&src, &p);
	assert_int_equal(p.out.err, 0);
	assert_non_null(
	    strstr(p.out.buf,
		   "ferry_hydrator_store_lookups_total{result=\"hit\"} 3\n"));
	assert_non_null(
	    strstr(p.out.buf,
		   "ferry_hydrator_store_lookups_total{result=\"miss\"} 5\n"));
	assert_non_null(
	    strstr(p.out.buf, "ferry_hydrator_read_bytes_total 131072\n"));
	assert_non_null(
	    strstr(p.out.buf,
		   "ferry_hydrator_read_duration_seconds_bucket{le=\"0.00025\"}"
		   " 1\n"));
	assert_non_null(strstr(
	    p.out.buf, "ferry_hydrator_read_duration_seconds_bucket{le=\"2.5\"}"
		       " 1\n"));
	assert_non_null(
	    strstr(p.out.buf,
		   "ferry_hydrator_read_duration_seconds_bucket{le=\"+Inf\"}"
		   " 2\n"));
	assert_non_null(strstr(
	    p.out.buf, "ferry_hydrator_read_duration_seconds_count 2\n"));
	assert_non_null(strstr(
	    p.out.buf,
	    "ferry_hydrator_fetch_requests_total{kind=\"catalog\"} 2\n"));
	assert_non_null(
	    strstr(p.out.buf,
		   "ferry_hydrator_fetch_bytes_total{kind=\"catalog\"} 970\n"));
	assert_non_null(strstr(
	    p.out.buf,
	    "ferry_hydrator_fetch_requests_total{kind=\"manifest\"} 1\n"));
	/* no fetcher: its kinds are there, at zero */
	assert_non_null(
	    strstr(p.out.buf,
		   "ferry_hydrator_fetch_requests_total{kind=\"chunk\"} 0\n"));
	assert_non_null(strstr(p.out.buf, "ferry_hydrator_generation 7\n"));
	assert_non_null(
	    strstr(p.out.buf, "ferry_hydrator_generation_switches_total 4\n"));
	/* no control socket: no made-up progress */
	assert_null(strstr(p.out.buf, "ferry_hydrator_backfill_"));
	assert_null(strstr(p.out.buf, "ferry_hydrator_state"));
	/* every family has its HELP and TYPE once */
	assert_non_null(strstr(p.out.buf,
			       "# TYPE ferry_hydrator_read_duration_seconds "
			       "histogram\n"));
	assert_null(
	    strstr(strstr(p.out.buf, "# TYPE ferry_hydrator_generation ") + 1,
		   "# TYPE ferry_hydrator_generation "));
	base_prom_fini(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_serve),
	    cmocka_unit_test(test_render),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
