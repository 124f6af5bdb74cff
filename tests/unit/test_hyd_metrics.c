/*
 * test_hyd_metrics.c — hydrator/metrics/: the --metrics-listen address
 * rule, and the text hyd_metrics_render makes from the read path's and
 * the mount's counters (no fetcher, no control socket: those families
 * are zero or left out, never made up).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "catalog/base/base.h"
#include "hydrator/metrics/hyd_metrics.h"

static void test_listen_split(void **state)
{
	char host[64];
	uint16_t port = 0;

	(void)state;
	assert_int_equal(hyd_metrics_listen_split("127.0.0.1:9851", host,
						  sizeof(host), &port),
			 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 9851);
	assert_int_equal(
	    hyd_metrics_listen_split("[::1]:80", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 80);
	assert_int_equal(
	    hyd_metrics_listen_split("localhost:1", host, sizeof(host), &port),
	    0);
	assert_string_equal(host, "localhost");
	static const char *const bad[] = {
	    "nonsense", ":9851", "127.0.0.1:", "127.0.0.1:0",
	    "h:65536",	"h:12x", "::1:80",     "[::1]80",
	    "[::1]:",	"[]:80", "h:-1",       "h:+80",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
		    hyd_metrics_listen_split(bad[i], host, sizeof(host), &port),
		    -EINVAL);
	/* a host longer than the buffer is refused, not cut */
	assert_int_equal(hyd_metrics_listen_split("abcdefgh:1", host, 8, &port),
			 -EINVAL);
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
	    cmocka_unit_test(test_listen_split),
	    cmocka_unit_test(test_render),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
