/*
 * tests/bench/store_put.c — `make bench-micro`'s store row: how fast the
 * chunk store takes frames, with group commit, from T threads at once.
 *
 *   store_put [--async] DIR THREADS MIB [FRAME_KIB]
 *
 * Opens (creates) a store in DIR, starts THREADS threads that together put
 * MIB MiB of raw frames of FRAME_KIB KiB (default 64, the chunker's
 * average) under distinct ids, and prints one line:
 *
 *   mode=M threads=T puts=N mb=M seconds=S mbps=R groups=G syncs=Y
 *   puts_per_sync=P
 *
 * (MB = 10^6 bytes; mbps counts frame bytes durable and indexed: the clock
 * stops when the last put's row is committed). Without --async each put
 * waits for its row (hyd_store_put), so a group holds at most one frame
 * per thread, and one thread is a store without group commit (one
 * fdatasync and one transaction per chunk). With --async
 * (hyd_store_put_async, what the fetcher's landing threads use) a put
 * returns once appended and groups hold what arrives during a sync. The
 * payload is one random buffer shared by
 * all puts: the store reads nothing of it but a checksum, and ids need not
 * be its hash here (the fetcher checks them before it puts).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"

/* Async puts not yet told, and the first failure. */
struct pending {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t n;
	int rc;
};

static void put_done(void *arg, int rc)
{
	struct pending *p = arg;

	pthread_mutex_lock(&p->mu);
	if (rc < 0 && p->rc == 0)
		p->rc = rc;
	if (--p->n == 0)
		pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

struct worker {
	hyd_store *store;
	struct pending *async; /* NULL: hyd_store_put */
	const uint8_t *frame;
	size_t frame_len;
	uint64_t first, n; /* puts first .. first + n - 1 */
	int rc;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t k;
	chunk_id id;
	int r;

	for (k = w->first; k < w->first + w->n; k++) {
		r = chunk_id_compute(&k, sizeof(k), &id);
		if (r == 0 && w->async) {
			pthread_mutex_lock(&w->async->mu);
			w->async->n++;
			pthread_mutex_unlock(&w->async->mu);
			r = hyd_store_put_async(w->store, &id, w->frame,
						w->frame_len, put_done,
						w->async);
			if (r != 0)
				put_done(w->async, 0); /* not to be told */
		} else if (r == 0) {
			r = hyd_store_put(w->store, &id, w->frame,
					  w->frame_len);
		}
		if (r < 0) {
			w->rc = r;
			return NULL;
		}
	}
	return NULL;
}

static int parse(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret)
{
	if (base_parse_u64(s, lo, hi, ret) < 0) {
		fprintf(stderr,
			"store_put: bad number %s (%" PRIu64 "..%" PRIu64 ")\n",
			s, lo, hi);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct pending pend = {PTHREAD_MUTEX_INITIALIZER,
			       PTHREAD_COND_INITIALIZER, 0, 0};
	struct hyd_store_stats st;
	struct worker *ws = NULL;
	pthread_t *tids = NULL;
	uint64_t threads, mib, kib = 64, puts, t0, t1, started = 0;
	uint8_t *raw = NULL, *frame = NULL;
	size_t raw_len, frame_len;
	hyd_store *store = NULL;
	FILE *rnd;
	int r, rc = 1, async = 0;

	if (argc > 1 && !strcmp(argv[1], "--async")) {
		async = 1;
		argv++;
		argc--;
	}
	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: store_put [--async] DIR THREADS MIB "
				"[FRAME_KIB]\n");
		return 2;
	}
	if (parse(argv[2], 1, 256, &threads) < 0 ||
	    parse(argv[3], 1, 1 << 20, &mib) < 0 ||
	    (argc == 5 && parse(argv[4], 1, 1024, &kib) < 0))
		return 2;
	raw_len = (size_t)kib << 10;
	puts = (mib << 20) / raw_len;
	if (puts < threads)
		puts = threads;
	raw = malloc(raw_len);
	frame = malloc(frame_bound(raw_len));
	ws = calloc(threads, sizeof(*ws));
	tids = calloc(threads, sizeof(*tids));
	if (!raw || !frame || !ws || !tids) {
		fprintf(stderr, "store_put: out of memory\n");
		goto out;
	}
	rnd = fopen("/dev/urandom", "rb");
	if (!rnd || fread(raw, 1, raw_len, rnd) != raw_len) {
		fprintf(stderr, "store_put: cannot read /dev/urandom\n");
		if (rnd)
			fclose(rnd);
		goto out;
	}
	fclose(rnd);
	r = frame_encode(NULL, FRAME_POLICY_RAW, 0, raw, raw_len, frame,
			 frame_bound(raw_len), &frame_len);
	if (r == 0)
		r = hyd_store_open(argv[1], (uint32_t)raw_len, &store);
	if (r < 0) {
		fprintf(stderr, "store_put: cannot open a store in %s: %s\n",
			argv[1], strerror(-r));
		goto out;
	}
	t0 = base_now_ns();
	for (started = 0; started < threads; started++) {
		struct worker *w = &ws[started];

		w->store = store;
		w->async = async ? &pend : NULL;
		w->frame = frame;
		w->frame_len = frame_len;
		w->first = puts / threads * started;
		w->n =
		    started + 1 == threads ? puts - w->first : puts / threads;
		if (pthread_create(&tids[started], NULL, worker_main, w) != 0) {
			fprintf(stderr, "store_put: cannot start a thread\n");
			break;
		}
	}
	for (uint64_t i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_lock(&pend.mu);
	while (pend.n)
		pthread_cond_wait(&pend.cv, &pend.mu);
	pthread_mutex_unlock(&pend.mu);
	t1 = base_now_ns();
	if (pend.rc < 0) {
		fprintf(stderr, "store_put: an async put failed: %s\n",
			strerror(-pend.rc));
		goto out;
	}
	if (started < threads)
		goto out;
	for (uint64_t i = 0; i < threads; i++)
		if (ws[i].rc < 0) {
			fprintf(stderr, "store_put: a put failed: %s\n",
				strerror(-ws[i].rc));
			goto out;
		}
	r = hyd_store_stats(store, &st);
	if (r < 0 || st.chunks != puts) {
		fprintf(stderr,
			"store_put: the store holds %" PRIu64
			" chunks, not %" PRIu64 "\n",
			r < 0 ? 0 : st.chunks, puts);
		goto out;
	}
	printf("mode=%s threads=%" PRIu64 " puts=%" PRIu64
	       " mb=%.1f seconds=%.3f "
	       "mbps=%.1f groups=%" PRIu64 " syncs=%" PRIu64
	       " puts_per_sync=%.2f\n",
	       async ? "async" : "wait", threads, puts,
	       (double)(puts * frame_len) / 1e6, (double)(t1 - t0) / 1e9,
	       (double)(puts * frame_len) * 1e3 / (double)(t1 - t0), st.groups,
	       st.syncs, st.syncs ? (double)puts / (double)st.syncs : 0.0);
	rc = 0;
out:
	hyd_store_close(store);
	free(raw);
	free(frame);
	free(ws);
	free(tids);
	return rc;
}
