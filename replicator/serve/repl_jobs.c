/*
 * replicator/serve/repl_jobs.c — requests' work on the worker threads,
 * taken in turn by tenant.
 *
 * libuv's pool takes work first come, first served: a tenant that sends
 * a thousand requests a second would put a thousand jobs ahead of a
 * client that sends one, and that client would wait for all of them.
 * Here each tenant (httpd_req_tenant: its token, or its address) has a
 * queue of its own; at most REPL_JOBS_AHEAD jobs are in libuv's pool at
 * once, and the next one is taken from the tenants in turn, one job each.
 * So a client's job waits behind at most one job of every other busy
 * tenant, however much those tenants ask. A job whose connection went
 * away before its turn is not run: its after-work callback gets
 * UV_ECANCELED, as a cancelled libuv job's would.
 * Two classes: a chunk of a batch (POST chunks: backfill, bulk copies) is
 * bulk; anything else (a single chunk GET, which is what a client's
 * blocked read asks for, a manifest, a signature) goes before bulk jobs,
 * and bulk jobs hold at most REPL_JOBS_BULK of the pool's threads: a
 * read's chunk never waits for a thread behind a batch's (cold disk reads
 * of a big file on a fast link). When no bulk job has run for
 * REPL_JOBS_BULK_WAIT_MS while one waits, the next one goes first: no
 * tenant's single requests, however many, stop the others' batches.
 *
 * Everything here runs on the loop thread, except the work itself.
 */
#include <errno.h>
#include <stdlib.h>

#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_serve_priv.h"

/* In libuv's pool at once: its threads (UV_THREADPOOL_SIZE, 8) and a few
 * more, so a thread that finishes finds the next job without waiting for
 * the loop. */
#define REPL_JOBS_AHEAD 12u
/* Bulk jobs in the pool at once: two of its eight threads stay free for
 * the rest. */
#define REPL_JOBS_BULK 6u
#define REPL_JOBS_BULK_WAIT_MS 100u
#define REPL_JOBS_BUCKETS 256u

struct repl_job {
	uv_work_t uw; /* what libuv runs */
	struct repl_jobs *q;
	struct repl_req *req;
	uv_work_t *w; /* the caller's: its data is what the callbacks use */
	uv_work_cb work;
	uv_after_work_cb after;
	int bulk;
	struct repl_job *next;
};

/* One tenant's jobs of one class waiting for their turn. */
struct repl_job_line {
	uint64_t key; /* the tenant's, with the class in bit 0 */
	struct repl_job *head, *tail;
	struct repl_job_line *hnext; /* in its bucket */
	struct repl_job_line *rnext; /* in the ring of lines with jobs */
};

int repl_jobs_init(struct repl_jobs *q, uv_loop_t *loop)
{
	q->loop = loop;
	q->running = 0;
	q->bulk_running = 0;
	q->pumping = 0;
	q->ring = NULL;
	q->bulk_ring = NULL;
	q->lines = calloc(REPL_JOBS_BUCKETS, sizeof(*q->lines));
	return q->lines ? 0 : -ENOMEM;
}

void repl_jobs_fini(struct repl_jobs *q)
{
	/* the loop ran until every request went: no job is left */
	free(q->lines);
	q->lines = NULL;
}

static struct repl_job_line *line_of(struct repl_jobs *q, uint64_t key)
{
	struct repl_job_line **b = &q->lines[key % REPL_JOBS_BUCKETS], *l;

	for (l = *b; l; l = l->hnext)
		if (l->key == key)
			return l;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->key = key;
	l->hnext = *b;
	*b = l;
	return l;
}

static void line_free(struct repl_jobs *q, struct repl_job_line *l)
{
	struct repl_job_line **p;

	for (p = &q->lines[l->key % REPL_JOBS_BUCKETS]; *p; p = &(*p)->hnext)
		if (*p == l) {
			*p = l->hnext;
			break;
		}
	free(l);
}

/* Into a ring, at its end (*ring is the last line; its rnext the
 * first). */
static void ring_add(struct repl_job_line **ring, struct repl_job_line *l)
{
	if (!*ring) {
		l->rnext = l;
	} else {
		l->rnext = (*ring)->rnext;
		(*ring)->rnext = l;
	}
	*ring = l;
}

/* The next job of a ring in turn, its line moved to the end of the ring
 * (or out of it, and freed, when it has no more). NULL when none waits. */
static struct repl_job *ring_take(struct repl_jobs *q,
				  struct repl_job_line **ring)
{
	struct repl_job_line *l;
	struct repl_job *j;

	if (!*ring)
		return NULL;
	l = (*ring)->rnext; /* the first */
	j = l->head;
	l->head = j->next;
	if (!l->head)
		l->tail = NULL;
	j->next = NULL;
	if (!l->head) {
		if (l->rnext == l)
			*ring = NULL;
		else
			(*ring)->rnext = l->rnext;
		line_free(q, l);
	} else {
		*ring = l; /* the first becomes the last */
	}
	return j;
}

/* The next job to run: a bulk one when none ran for REPL_JOBS_BULK_WAIT_MS,
 * else any other, then bulk while fewer than REPL_JOBS_BULK run. */
static struct repl_job *take_next(struct repl_jobs *q)
{
	struct repl_job *j = NULL;

	if (!q->bulk_running && q->bulk_ring &&
	    uv_now(q->loop) - q->bulk_at_ms >= REPL_JOBS_BULK_WAIT_MS)
		j = ring_take(q, &q->bulk_ring);
	if (!j)
		j = ring_take(q, &q->ring);
	if (!j && q->bulk_running < REPL_JOBS_BULK)
		j = ring_take(q, &q->bulk_ring);
	return j;
}

static void job_work(uv_work_t *uw)
{
	struct repl_job *j = uw->data;

	j->work(j->w);
}

static void pump(struct repl_jobs *q);

static void job_after(uv_work_t *uw, int status)
{
	struct repl_job *j = uw->data;
	struct repl_jobs *q = j->q;

	q->running--;
	if (j->bulk)
		q->bulk_running--;
	j->after(j->w, status);
	free(j);
	pump(q);
}

static void pump(struct repl_jobs *q)
{
	struct repl_job *j;

	/* an after-work callback below may queue more: the loop here takes
	 * them */
	if (q->pumping)
		return;
	q->pumping = 1;
	while (q->running < REPL_JOBS_AHEAD && (j = take_next(q))) {
		if (j->req->h.dead) {
			j->after(j->w, UV_ECANCELED);
			free(j);
			continue;
		}
		j->uw.data = j;
		if (uv_queue_work(q->loop, &j->uw, job_work, job_after) < 0) {
			j->after(j->w, UV_ECANCELED);
			free(j);
			continue;
		}
		q->running++;
		if (j->bulk) {
			q->bulk_running++;
			q->bulk_at_ms = uv_now(q->loop);
		}
	}
	q->pumping = 0;
}

static int queue_work(struct repl_req *req, uv_work_t *w, uv_work_cb work,
		      uv_after_work_cb after, int bulk)
{
	struct repl_jobs *q = &req->srv->jobs;
	struct repl_job_line *l;
	struct repl_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	l = line_of(q, (httpd_req_tenant(&req->h) << 1) | (uint64_t) !!bulk);
	if (!l) {
		free(j);
		return -ENOMEM;
	}
	j->q = q;
	j->req = req;
	j->w = w;
	j->work = work;
	j->after = after;
	j->bulk = bulk;
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	/* a bulk job's wait counts from when it came to an empty line */
	if (bulk && !q->bulk_ring && !q->bulk_running)
		q->bulk_at_ms = uv_now(q->loop);
	if (!l->tail)
		ring_add(bulk ? &q->bulk_ring : &q->ring, l);
	l->tail = j;
	pump(q);
	return 0;
}

int repl_req_work(struct repl_req *req, uv_work_t *w, uv_work_cb work,
		  uv_after_work_cb after)
{
	return queue_work(req, w, work, after, 0);
}

int repl_req_work_bulk(struct repl_req *req, uv_work_t *w, uv_work_cb work,
		       uv_after_work_cb after)
{
	return queue_work(req, w, work, after, 1);
}
