/*
 * tests/unit/test_repl_pool.c — the idle sweep's side of a namespace's
 * worker pool (replicator/serve/repl_chunk.c): repl_chunk_pool_take_idle takes
 * nothing while a context came back less than the idle time ago, takes
 * the whole pool (leaving it empty) once it is idle, and nothing from an
 * empty pool; repl_chunk_workers_free frees what it took (the ASan build
 * finds a leak or a double free). The sweep timer and its worker job
 * (repl_ns.c) are measured by bench/namespaces.sh (descriptors back to
 * one a namespace 45 s after the last chunk).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_serve_priv.h"

#define SEC 1000000000ull

static struct repl_worker *worker(struct repl_worker *next)
{
	struct repl_worker *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->next = next;
	w->raw = malloc(64); /* freed with it */
	assert_non_null(w->raw);
	w->raw_cap = 64;
	return w;
}

static void test_take_idle(void **state)
{
	struct repl_ns *ns = calloc(1, sizeof(*ns));
	struct repl_worker *got, *w;
	uint64_t put = 1000 * SEC;
	size_t n = 0;

	(void)state;
	assert_non_null(ns);
	uv_mutex_init(&ns->pool_lock);
	assert_null(repl_chunk_pool_take_idle(ns, put + 3600 * SEC, SEC));

	ns->pool = worker(worker(worker(NULL)));
	ns->pool_put_ns = put;
	/* a context came back 29.9 s ago: in use, kept */
	assert_null(repl_chunk_pool_take_idle(
	    ns, put + REPL_POOL_IDLE_S * SEC - SEC / 10,
	    REPL_POOL_IDLE_S * SEC));
	assert_non_null(ns->pool);
	/* 30 s: idle, all of it taken */
	got = repl_chunk_pool_take_idle(ns, put + REPL_POOL_IDLE_S * SEC,
					REPL_POOL_IDLE_S * SEC);
	assert_non_null(got);
	assert_null(ns->pool);
	for (w = got; w; w = w->next)
		n++;
	assert_int_equal(n, 3);
	assert_null(repl_chunk_pool_take_idle(ns, put + 3600 * SEC, SEC));
	repl_chunk_workers_free(got);
	repl_chunk_workers_free(NULL);
	uv_mutex_destroy(&ns->pool_lock);
	free(ns);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_take_idle),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
