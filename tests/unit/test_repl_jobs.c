/*
 * tests/unit/test_repl_jobs.c — the replicator's queue of requests' work
 * (replicator/serve/repl_jobs.c) on a real libuv loop and thread pool (8
 * threads, as the replicator runs it): with 20 chunks of batches queued
 * (bulk) whose work blocks, at most 6 of them hold pool threads, and a
 * single chunk's work (repl_req_work) queued after all of them runs at
 * once, while the other 14 still wait, and the six that hold threads are
 * the first six queued; released, every job runs and every after-work
 * callback comes.
 * And the other way: 20 single chunks' works queued before 4 bulk ones
 * (all blocking until released, 150 ms later) do not all start before
 * the first bulk one (a bulk job that waited 100 ms with none running
 * goes next).
 * Checked that it can fail: with bulk jobs queued as any other (the
 * queue as it was), the single chunk's work did not run before the
 * release and the first test failed; with bulk taken only when nothing
 * else waits, the second failed (all 20 started first).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/base/base.h"
#include "catalog/httpd/httpd_priv.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_serve_priv.h"

#define BULK 20
#define SEC 1000000000ull

struct box {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int released;
	int in_work; /* blocking works running now */
	int urgent_ran;
	int afters;
	int order[32], norder;
};

static struct box box = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
};

struct item {
	uv_work_t w;
	int idx; /* -1: the single chunk */
};

/* Every blocking work: records its start (its idx) and blocks until
 * released. */
static void blocking_work(uv_work_t *w)
{
	struct item *it = w->data;

	pthread_mutex_lock(&box.mu);
	box.in_work++;
	box.order[box.norder++] = it->idx;
	pthread_cond_broadcast(&box.cv);
	while (!box.released)
		pthread_cond_wait(&box.cv, &box.mu);
	box.in_work--;
	pthread_mutex_unlock(&box.mu);
}

static void urgent_work(uv_work_t *w)
{
	(void)w;
	pthread_mutex_lock(&box.mu);
	box.urgent_ran = 1;
	pthread_cond_broadcast(&box.cv);
	pthread_mutex_unlock(&box.mu);
}

static void after(uv_work_t *w, int status)
{
	(void)w;
	assert_int_equal(status, 0);
	box.afters++;
}

/* Wait (up to 5 s) until pred holds; its value then. */
static int wait_for(int (*pred)(void))
{
	uint64_t until = base_now_ns() + 5 * SEC;
	int ok;

	pthread_mutex_lock(&box.mu);
	while (!(ok = pred()) && base_now_ns() < until)
		base_cond_wait_until(&box.cv, &box.mu,
				     base_now_ns() + SEC / 20);
	pthread_mutex_unlock(&box.mu);
	return ok;
}

static int urgent_done(void)
{
	return box.urgent_ran;
}

static int six_in_work(void)
{
	return box.in_work >= 6;
}

static int eight_in_work(void)
{
	return box.in_work >= 8;
}

static void test_single_before_bulk(void **state)
{
	struct httpd_tenant tenant = {.key = 42};
	struct httpd_conn conn = {.tenant = &tenant};
	struct repl_server *srv = calloc(1, sizeof(*srv));
	struct repl_req *req = calloc(1, sizeof(*req));
	struct item items[BULK + 1];
	uv_loop_t loop;
	int i;

	(void)state;
	assert_non_null(srv);
	assert_non_null(req);
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(repl_jobs_init(&srv->jobs, &loop), 0);
	req->srv = srv;
	req->h.x.conn = &conn;
	for (i = 0; i < BULK; i++) {
		items[i].idx = i;
		items[i].w.data = &items[i];
		assert_int_equal(
		    repl_req_work_bulk(req, &items[i].w, blocking_work, after),
		    0);
	}
	items[BULK].idx = -1;
	items[BULK].w.data = &items[BULK];
	assert_int_equal(repl_req_work(req, &items[BULK].w, urgent_work, after),
			 0);

	/* the pool holds six bulk works, blocked, and no more */
	assert_true(wait_for(six_in_work));
	/* the single chunk's work runs although 14 bulk ones came first */
	assert_true(wait_for(urgent_done));
	pthread_mutex_lock(&box.mu);
	assert_int_equal(box.in_work, 6);
	assert_int_equal(box.norder, 6);
	box.released = 1;
	pthread_cond_broadcast(&box.cv);
	pthread_mutex_unlock(&box.mu);

	/* every job runs and is answered */
	while (box.afters < BULK + 1)
		uv_run(&loop, UV_RUN_ONCE);
	assert_int_equal(box.norder, BULK);
	/* the six that held threads were the first six queued (the rest
	 * start on eight threads at once, in no order a test can rely on) */
	for (i = 6; i < BULK; i++)
		assert_true(box.order[i] >= 6);
	assert_int_equal(srv->jobs.running, 0);
	assert_int_equal(srv->jobs.bulk_running, 0);
	repl_jobs_fini(&srv->jobs);
	assert_int_equal(uv_loop_close(&loop), 0);
	free(req);
	free(srv);
}

static void test_bulk_not_starved(void **state)
{
	struct httpd_tenant tenant = {.key = 7};
	struct httpd_conn conn = {.tenant = &tenant};
	struct repl_server *srv = calloc(1, sizeof(*srv));
	struct repl_req *req = calloc(1, sizeof(*req));
	struct item items[24];
	uv_loop_t loop;
	int i, first_bulk = -1;

	(void)state;
	assert_non_null(srv);
	assert_non_null(req);
	pthread_mutex_lock(&box.mu);
	box.released = 0;
	box.in_work = 0;
	box.afters = 0;
	box.norder = 0;
	pthread_mutex_unlock(&box.mu);
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(repl_jobs_init(&srv->jobs, &loop), 0);
	req->srv = srv;
	req->h.x.conn = &conn;
	for (i = 0; i < 24; i++) {
		items[i].idx = i < 20 ? i : 100 + i;
		items[i].w.data = &items[i];
		if (i < 20)
			assert_int_equal(repl_req_work(req, &items[i].w,
						       blocking_work, after),
					 0);
		else
			assert_int_equal(repl_req_work_bulk(req, &items[i].w,
							    blocking_work,
							    after),
					 0);
	}
	/* eight single chunks' works hold the threads, for 150 ms */
	assert_true(wait_for(eight_in_work));
	usleep(150000);
	uv_update_time(&loop);
	pthread_mutex_lock(&box.mu);
	box.released = 1;
	pthread_cond_broadcast(&box.cv);
	pthread_mutex_unlock(&box.mu);
	while (box.afters < 24)
		uv_run(&loop, UV_RUN_ONCE);
	assert_int_equal(box.norder, 24);
	for (i = 0; i < 24 && first_bulk < 0; i++)
		if (box.order[i] >= 100)
			first_bulk = i;
	/* the first bulk work started before the last single one */
	assert_true(first_bulk >= 0 && first_bulk < 20);
	repl_jobs_fini(&srv->jobs);
	assert_int_equal(uv_loop_close(&loop), 0);
	free(req);
	free(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_single_before_bulk),
	    cmocka_unit_test(test_bulk_not_starved),
	};

	/* the replicator's pool (repl_main.c sets the same) */
	setenv("UV_THREADPOOL_SIZE", "8", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
