/*
 * catalog/base/base_time.c — the clocks: monotonic for deadlines and rates,
 * wall time only for what people read.
 */
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
