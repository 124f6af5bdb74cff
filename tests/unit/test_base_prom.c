/*
 * test_base_prom.c — catalog/base/base_prom.c: the Prometheus text both
 * daemons' GET /metrics answer with. Exact bytes: escaping of label
 * values and HELP text, cumulative histogram buckets ending in +Inf with
 * _count equal to it, bucket edges, doubles, and a histogram observed
 * from several threads at once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "catalog/base/base.h"

static void test_family_and_escaping(void **state)
{
	struct base_prom p;
	struct base_prom_label l[2] = {
	    {"namespace", "a\\b\"c\nd"},
	    {"kind", "chunk"},
	};

	(void)state;
	base_prom_init(&p);
	base_prom_family(&p, "x_total", "counter", "says \"hi\" \\ and\nmore");
	base_prom_u64(&p, "x_total", l, 2, 42);
	base_prom_u64(&p, "x_total", NULL, 0, UINT64_MAX);
	assert_int_equal(p.out.err, 0);
	/* HELP escapes backslash and newline but not the quote; label
	 * values escape all three */
	assert_string_equal(
	    p.out.buf, "# HELP x_total says \"hi\" \\\\ and\\nmore\n"
		       "# TYPE x_total counter\n"
		       "x_total{namespace=\"a\\\\b\\\"c\\nd\",kind=\"chunk\"}"
		       " 42\n"
		       "x_total 18446744073709551615\n");
	assert_int_equal(p.out.len, strlen(p.out.buf));
	base_prom_fini(&p);
	assert_null(p.out.buf);
}

static void test_double(void **state)
{
	struct base_prom p;
	struct base_prom_label l = {"a", ""};

	(void)state;
	base_prom_init(&p);
	base_prom_double(&p, "g", &l, 1, 0.005);
	base_prom_double(&p, "g", NULL, 0, 1.0 / 0.0);
	base_prom_double(&p, "g", NULL, 0, -1.0 / 0.0);
	base_prom_double(&p, "g", NULL, 0, 0.0 / 0.0);
	base_prom_double(&p, "g", NULL, 0, 0.1 + 0.2);
	assert_string_equal(p.out.buf, "g{a=\"\"} 0.005\n"
				       "g +Inf\n"
				       "g -Inf\n"
				       "g NaN\n"
				       "g 0.30000000000000004\n");
	base_prom_fini(&p);
}

static const double BOUNDS[] = {0.001, 0.01, 0.1};

static void test_hist_cumulative(void **state)
{
	struct base_prom p;
	struct base_hist h;
	struct base_prom_label l = {"route", "chunk"};

	(void)state;
	assert_int_equal(base_hist_init(&h, BOUNDS, 3), 0);
	base_hist_observe_ns(&h, 500000);     /* 0.0005: first bucket */
	base_hist_observe_ns(&h, 1000000);    /* 0.001 exactly: le is <= */
	base_hist_observe_ns(&h, 5000000);    /* 0.005 */
	base_hist_observe_ns(&h, 2000000000); /* 2 s: only +Inf */
	base_prom_init(&p);
	base_prom_hist(&p, "t_seconds", &l, 1, &h);
	assert_int_equal(p.out.err, 0);
	assert_string_equal(p.out.buf,
			    "t_seconds_bucket{route=\"chunk\",le=\"0.001\"} 2\n"
			    "t_seconds_bucket{route=\"chunk\",le=\"0.01\"} 3\n"
			    "t_seconds_bucket{route=\"chunk\",le=\"0.1\"} 3\n"
			    "t_seconds_bucket{route=\"chunk\",le=\"+Inf\"} 4\n"
			    "t_seconds_sum{route=\"chunk\"} 2.0065\n"
			    "t_seconds_count{route=\"chunk\"} 4\n");
	base_prom_fini(&p);

	/* no labels: le alone in the braces; empty: all zero */
	assert_int_equal(base_hist_init(&h, BOUNDS, 1), 0);
	base_prom_init(&p);
	base_prom_hist(&p, "e", NULL, 0, &h);
	assert_string_equal(p.out.buf, "e_bucket{le=\"0.001\"} 0\n"
				       "e_bucket{le=\"+Inf\"} 0\n"
				       "e_sum 0\n"
				       "e_count 0\n");
	base_prom_fini(&p);
}

static void test_hist_init_checks(void **state)
{
	static const double bad[] = {0.1, 0.1};
	static const double many[BASE_HIST_MAX + 1] = {0};
	struct base_hist h;

	(void)state;
	assert_int_equal(base_hist_init(&h, bad, 2), -EINVAL);
	assert_int_equal(base_hist_init(&h, many, BASE_HIST_MAX + 1), -EINVAL);
	assert_int_equal(base_hist_init(&h, BOUNDS, 0), 0);
}

#define THREADS 4
#define PER_THREAD 100000

static void *observer(void *arg)
{
	struct base_hist *h = arg;
	int i;

	for (i = 0; i < PER_THREAD; i++)
		base_hist_observe_ns(h, (uint64_t)(i % 3) * 5000000u);
	return NULL;
}

static void test_hist_threads(void **state)
{
	pthread_t t[THREADS];
	struct base_hist h;
	uint64_t n = 0;
	size_t i;

	(void)state;
	assert_int_equal(base_hist_init(&h, BOUNDS, 3), 0);
	for (i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, observer, &h), 0);
	for (i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i <= 3; i++)
		n += h.counts[i];
	assert_int_equal(n, (uint64_t)THREADS * PER_THREAD);
	/* 0 and 0.005 and 0.01 s: 0 -> first, both others -> le 0.01 */
	assert_int_equal(h.counts[3], 0);
	assert_int_equal(h.counts[0] + h.counts[1], n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_family_and_escaping),
	    cmocka_unit_test(test_double),
	    cmocka_unit_test(test_hist_cumulative),
	    cmocka_unit_test(test_hist_init_checks),
	    cmocka_unit_test(test_hist_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
