/*
 * tests/unit/test_hyd_store_evict.c — the store under a bound: least
 * recently used chunks evicted, pins kept, a capacity tier that takes
 * what is evicted and gives it back, and a kill -9 while evicting.
 *
 * Chunks are 64 KiB of noise (stored raw: a frame is the chunk plus its
 * header), so a bound of N frames holds N chunks.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"
#include "tsupport.h"

#define NCH 48
#define CLEN (64u << 10)

struct fx {
	char dir[128], low[160];
	uint8_t *raw[NCH];
	chunk_id id[NCH];
	uint8_t *frame[NCH];
	size_t frame_len[NCH];
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	assert_non_null(fx);
	assert_int_equal(tsup_tmpdir(fx->dir, sizeof(fx->dir), "evict"), 0);
	snprintf(fx->low, sizeof(fx->low), "%s/low", fx->dir);
	for (size_t i = 0; i < NCH; i++) {
		size_t cap = frame_bound(CLEN);

		fx->raw[i] = tsup_random_bytes(CLEN, 1000 + i);
		fx->frame[i] = malloc(cap);
		assert_non_null(fx->frame[i]);
		assert_int_equal(chunk_id_compute(fx->raw[i], CLEN, &fx->id[i]),
				 0);
		assert_int_equal(frame_encode(NULL, FRAME_POLICY_AUTO, 1,
					      fx->raw[i], CLEN, fx->frame[i],
					      cap, &fx->frame_len[i]),
				 0);
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	for (size_t i = 0; i < NCH; i++) {
		free(fx->raw[i]);
		free(fx->frame[i]);
	}
	tsup_rm_rf(fx->dir);
	free(fx);
	return 0;
}

static void check_get(hyd_store *s, struct fx *fx, size_t i)
{
	uint8_t *out = malloc(CLEN);
	size_t got = 0;

	assert_non_null(out);
	assert_int_equal(hyd_store_get(s, &fx->id[i], out, CLEN, &got), 0);
	assert_int_equal(got, CLEN);
	assert_memory_equal(out, fx->raw[i], CLEN);
	free(out);
}

/* Bytes the volumes hold on disk (blocks allocated). */
static uint64_t disk_bytes(const char *dir)
{
	char p[512];
	struct dirent *de;
	struct stat sb;
	uint64_t sum = 0;
	DIR *d;

	snprintf(p, sizeof(p), "%s/volumes", dir);
	d = opendir(p);
	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		snprintf(p, sizeof(p), "%s/volumes/%s", dir, de->d_name);
		if (de->d_name[0] != '.' && stat(p, &sb) == 0)
			sum += (uint64_t)sb.st_blocks * 512;
	}
	closedir(d);
	return sum;
}

static struct hyd_store_stats stats(hyd_store *s)
{
	struct hyd_store_stats st;

	assert_int_equal(hyd_store_stats(s, &st), 0);
	return st;
}

/* A bound of 10 frames: the store never holds more than that plus the
 * put in flight, a chunk read between puts survives while those put
 * before it and never read go, and a reopened store is whole. */
static void test_lru_bound(void **state)
{
	struct fx *fx = *state;
	uint64_t bound = 10 * (uint64_t)fx->frame_len[0];
	struct hyd_store_stats st;
	hyd_store *s;

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_set_bound(s, bound, NULL), 0);
	for (size_t i = 0; i < NCH; i++) {
		assert_int_equal(hyd_store_put(s, &fx->id[i], fx->frame[i],
					       fx->frame_len[i]),
				 0);
		/* chunk 0 is the working set: read after every put */
		check_get(s, fx, 0);
		st = stats(s);
		assert_true(st.stored_bytes <= bound + fx->frame_len[i]);
	}
	st = stats(s);
	assert_true(st.evicted >= NCH - 11);
	assert_true(st.evicted_bytes >= (NCH - 11) * (uint64_t)CLEN);
	assert_int_equal(st.bound, bound);
	assert_int_equal(hyd_store_has(s, &fx->id[0]), 1);
	for (size_t i = 1; i < NCH - 12; i++)
		assert_int_equal(hyd_store_has(s, &fx->id[i]), 0);
	assert_int_equal(hyd_store_has(s, &fx->id[NCH - 1]), 1);
	/* an evicted chunk reads as not stored, and comes back by a put */
	{
		uint8_t *out = malloc(CLEN);
		size_t got;

		assert_int_equal(hyd_store_get(s, &fx->id[1], out, CLEN, &got),
				 -ENOENT);
		free(out);
	}
	assert_int_equal(
	    hyd_store_put(s, &fx->id[1], fx->frame[1], fx->frame_len[1]), 0);
	check_get(s, fx, 1);
	hyd_store_close(s);

	/* Reopened without a bound: every row reads back exact. Frames put
	 * under a bound start on a block, so an evicted one gave all of its
	 * blocks back: the volumes hold what the bound counts. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	st = stats(s);
	assert_true(disk_bytes(fx->dir) <= st.held_bytes);
	assert_true(st.held_bytes <= st.stored_bytes + st.chunks * 4096);
	assert_true(st.stored_bytes <= bound + fx->frame_len[0]);
	for (size_t i = 0; i < NCH; i++)
		if (hyd_store_has(s, &fx->id[i]) == 1)
			check_get(s, fx, i);
	/* A smaller bound at open evicts at once. */
	assert_int_equal(hyd_store_set_bound(s, bound / 2, NULL), 0);
	assert_true(stats(s).stored_bytes <= bound / 2);
	hyd_store_close(s);
}

/* Pinned ids, before and after they are put, are never evicted. */
static void test_pin(void **state)
{
	struct fx *fx = *state;
	uint64_t bound = 8 * (uint64_t)fx->frame_len[0];
	struct hyd_store_stats st;
	hyd_store *s;

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_set_bound(s, bound, NULL), 0);
	assert_int_equal(
	    hyd_store_put(s, &fx->id[0], fx->frame[0], fx->frame_len[0]), 0);
	/* 0 stored already, 1 and 2 not yet */
	assert_int_equal(hyd_store_pin(s, &fx->id[0], 3), 0);
	for (size_t i = 1; i < NCH; i++)
		assert_int_equal(hyd_store_put(s, &fx->id[i], fx->frame[i],
					       fx->frame_len[i]),
				 0);
	for (size_t i = 0; i < 3; i++)
		check_get(s, fx, i);
	st = stats(s);
	assert_int_equal(st.pinned_chunks, 3);
	assert_int_equal(st.pinned_bytes, 3 * (uint64_t)fx->frame_len[0]);
	assert_true(st.stored_bytes <= bound + fx->frame_len[0]);
	assert_true(st.evicted > 0);
	hyd_store_close(s);
	/* Pins are durable: a reopen and a tiny bound keep them. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_set_bound(s, 2 * (uint64_t)CLEN, NULL), 0);
	for (size_t i = 0; i < 3; i++)
		check_get(s, fx, i);
	st = stats(s);
	assert_int_equal(st.stored_bytes, 3 * (uint64_t)fx->frame_len[0]);
	hyd_store_close(s);
}

/* Two tiers: what the fast one evicts the capacity tier keeps; a get
 * there reads exact and copies the chunk back up. */
static void test_tiers(void **state)
{
	struct fx *fx = *state;
	uint64_t bound = 6 * (uint64_t)fx->frame_len[0];
	struct hyd_store_stats st, lst;
	hyd_store *s, *lo;

	assert_int_equal(hyd_store_open(fx->low, 0, &lo), 0);
	assert_int_equal(hyd_store_set_bound(lo, 40 * (uint64_t)CLEN, NULL), 0);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_set_bound(s, bound, lo), 0);
	for (size_t i = 0; i < 24; i++)
		assert_int_equal(hyd_store_put(s, &fx->id[i], fx->frame[i],
					       fx->frame_len[i]),
				 0);
	st = stats(s);
	lst = stats(lo);
	assert_true(st.evicted >= 17);
	assert_int_equal(st.demoted, st.evicted);
	assert_true(lst.chunks >= 17);
	/* chunk 0 went down; a get reads it exact and copies it up */
	assert_int_equal(hyd_store_has(s, &fx->id[0]), 1);
	check_get(s, fx, 0);
	assert_int_equal(stats(s).promoted, 1);
	hyd_store_close(s);
	/* The fast tier alone holds it now. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_has(s, &fx->id[0]), 1);
	check_get(s, fx, 0);
	hyd_store_close(s);
	/* Every chunk reads exact from one tier or the other, the fast
	 * tier staying under its bound. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_set_bound(s, bound, lo), 0);
	for (size_t i = 0; i < 24; i++) {
		assert_int_equal(hyd_store_has(s, &fx->id[i]), 1);
		check_get(s, fx, i);
	}
	assert_true(stats(s).promoted >= 16);
	hyd_store_close(s);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_true(stats(s).stored_bytes <= bound + fx->frame_len[0]);
	hyd_store_close(s);
	hyd_store_close(lo);
}

/* A child puts under a tight bound and is killed at some moment of its
 * evictions; the reopened store reads every chunk it lists exact, keeps
 * the bound plus one group, and takes puts again. */
static void test_kill_while_evicting(void **state)
{
	struct fx *fx = *state;
	uint64_t bound = 5 * (uint64_t)fx->frame_len[0];

	for (int round = 0; round < 6; round++) {
		struct timespec ts = {0, (long)(3 + 7 * round) * 1000000L};
		struct hyd_store_stats st;
		hyd_store *s;
		pid_t pid;
		int status;

		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			if (hyd_store_open(fx->dir, 0, &s) != 0 ||
			    hyd_store_set_bound(s, bound, NULL) != 0)
				_exit(3);
			for (;;)
				for (size_t i = 0; i < NCH; i++)
					if (hyd_store_put(s, &fx->id[i],
							  fx->frame[i],
							  fx->frame_len[i]) < 0)
						_exit(4);
		}
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
		for (size_t i = 0; i < NCH; i++)
			if (hyd_store_has(s, &fx->id[i]) == 1)
				check_get(s, fx, i);
		st = stats(s);
		/* one group of puts beyond the bound at most */
		assert_true(st.stored_bytes <= bound + (32u << 20));
		assert_int_equal(hyd_store_set_bound(s, bound, NULL), 0);
		assert_int_equal(hyd_store_put(s, &fx->id[round],
					       fx->frame[round],
					       fx->frame_len[round]) >= 0,
				 1);
		check_get(s, fx, (size_t)round);
		assert_true(stats(s).stored_bytes <= bound + fx->frame_len[0]);
		hyd_store_close(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lru_bound, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pin, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tiers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill_while_evicting, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
