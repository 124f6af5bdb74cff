/*
 * catalog/base/base_time.c — the clocks: monotonic for deadlines and rates,
 * wall time only for what people read; and threads' names.
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "catalog/base/base.h"

uint64_t base_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t base_wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + (int64_t)ts.tv_nsec;
}

int base_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	int r = pthread_condattr_init(&ca);

	if (r)
		return -r;
	r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (r == 0)
		r = pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
	return -r;
}

int base_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m,
			 uint64_t deadline_ns)
{
	struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
			      (long)(deadline_ns % 1000000000ull)};

	return pthread_cond_timedwait(c, m, &ts);
}

void base_thread_name(const char *what)
{
	char name[16];

	snprintf(name, sizeof(name), "ferry-%s", what);
	(void)pthread_setname_np(pthread_self(), name);
}
