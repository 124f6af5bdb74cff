/*
 * replicator/source/repl_scan_pool.c — the threads that read, chunk and hash
 * files for the walk.
 *
 * Two queues under one lock: file jobs (FIFO, in walk order) and hash
 * tasks (FIFO; a window's tasks hold its buffer, so they go first). A
 * worker takes a hash task if there is one, else the oldest job. Nobody
 * who waits sleeps while there is work it may do:
 *   - a thread waiting for its window's hash tasks runs hash tasks (never a
 *     job: it is inside one, and its reader's buffers are busy);
 *   - the walker waiting for job j runs j itself if nobody has started it,
 *     else hash tasks, else the oldest queued job (its reader is free).
 * So with N scanning threads the pool starts N - 1 workers and the walker
 * is the N-th. A wait always ends: a job waited for is either queued (and
 * then run by the waiter) or running on a thread that only ever waits for
 * its own hash tasks, which are queued or running.
 *
 * One condition variable for every change (new work, job done, window
 * done): with a handful of threads a broadcast is cheaper than getting
 * several conditions right.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/source/repl_scan_priv.h"

struct repl_scan_pool {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct repl_file_job *jobs, *jobs_tail;
	struct repl_hash_task *tasks, *tasks_tail;
	int stop;
	struct repl_scan_shared *sh;
	unsigned n; /* workers started */
	pthread_t *threads;
	struct repl_file_reader *readers; /* one per worker */
};

/* Pop the oldest hash task; lock held. */
static struct repl_hash_task *task_pop(struct repl_scan_pool *pool)
{
	struct repl_hash_task *t = pool->tasks;

	if (t) {
		pool->tasks = t->next;
		if (!pool->tasks)
			pool->tasks_tail = NULL;
		t->next = NULL;
	}
	return t;
}

/* Run t with the lock dropped, then account for it; lock held on entry
 * and on return. */
static void task_run_locked(struct repl_scan_pool *pool,
			    struct repl_hash_task *t)
{
	struct repl_window *w = t->w;
	int r;

	pthread_mutex_unlock(&pool->lock);
	r = repl_hash_task_run(t);
	pthread_mutex_lock(&pool->lock);
	if (r < 0 && !w->err)
		w->err = r;
	if (--w->pending == 0)
		pthread_cond_broadcast(&pool->cv);
}

/* Unlink j from the job queue; lock held, j queued. */
static void job_unlink(struct repl_scan_pool *pool, struct repl_file_job *j)
{
	struct repl_file_job **pp = &pool->jobs, *prev = NULL;

	while (*pp != j) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	*pp = j->next;
	if (pool->jobs_tail == j)
		pool->jobs_tail = prev;
	j->next = NULL;
}

/* Run queued job j here with reader fr; lock held on entry and return. */
static void job_run_locked(struct repl_scan_pool *pool, struct repl_file_job *j,
			   struct repl_file_reader *fr)
{
	job_unlink(pool, j);
	j->state = REPL_JOB_RUNNING;
	pthread_mutex_unlock(&pool->lock);
	repl_file_job_run(j, fr);
	pthread_mutex_lock(&pool->lock);
	j->state = REPL_JOB_DONE;
	pthread_cond_broadcast(&pool->cv);
}

struct worker_arg {
	struct repl_scan_pool *pool;
	struct repl_file_reader *fr;
};

static void *worker_main(void *arg)
{
	struct repl_scan_pool *pool = ((struct worker_arg *)arg)->pool;
	struct repl_file_reader *fr = ((struct worker_arg *)arg)->fr;
	struct repl_hash_task *t;

	free(arg);
	pthread_mutex_lock(&pool->lock);
	while (!pool->stop) {
		t = task_pop(pool);
		if (t)
			task_run_locked(pool, t);
		else if (pool->jobs)
			job_run_locked(pool, pool->jobs, fr);
		else
			pthread_cond_wait(&pool->cv, &pool->lock);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

int repl_scan_pool_new(struct repl_scan_shared *sh, unsigned workers,
		       struct repl_scan_pool **ret_pool)
{
	struct repl_scan_pool *pool;
	unsigned i;
	int r = 0;

	*ret_pool = NULL;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->sh = sh;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->cv, NULL);
	pool->threads = calloc(workers ? workers : 1, sizeof(*pool->threads));
	pool->readers = calloc(workers ? workers : 1, sizeof(*pool->readers));
	if (!pool->threads || !pool->readers) {
		r = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < workers; i++) {
		struct worker_arg *a = malloc(sizeof(*a));

		r = a ? repl_file_reader_init(&pool->readers[i], sh) : -ENOMEM;
		if (r < 0) {
			free(a);
			goto fail;
		}
		a->pool = pool;
		a->fr = &pool->readers[i];
		r = -pthread_create(&pool->threads[i], NULL, worker_main, a);
		if (r < 0) {
			free(a);
			repl_file_reader_fini(&pool->readers[i]);
			goto fail;
		}
		pool->n++;
	}
	*ret_pool = pool;
	return 0;
fail:
	repl_scan_pool_free(pool);
	return r;
}

void repl_scan_pool_free(struct repl_scan_pool *pool)
{
	unsigned i;

	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	pool->stop = 1;
	pthread_cond_broadcast(&pool->cv);
	pthread_mutex_unlock(&pool->lock);
	for (i = 0; i < pool->n; i++) {
		pthread_join(pool->threads[i], NULL);
		repl_file_reader_fini(&pool->readers[i]);
	}
	pthread_cond_destroy(&pool->cv);
	pthread_mutex_destroy(&pool->lock);
	free(pool->threads);
	free(pool->readers);
	free(pool);
}

unsigned repl_scan_pool_workers(const struct repl_scan_pool *pool)
{
	return pool ? pool->n : 0;
}

void repl_scan_pool_submit(struct repl_scan_pool *pool, struct repl_file_job *j)
{
	j->submitted = 1;
	pthread_mutex_lock(&pool->lock);
	j->state = REPL_JOB_QUEUED;
	j->next = NULL;
	if (pool->jobs_tail)
		pool->jobs_tail->next = j;
	else
		pool->jobs = j;
	pool->jobs_tail = j;
	pthread_cond_broadcast(&pool->cv);
	pthread_mutex_unlock(&pool->lock);
}

void repl_scan_pool_wait_job(struct repl_scan_pool *pool,
			     struct repl_file_job *j,
			     struct repl_file_reader *fr)
{
	struct repl_hash_task *t;

	if (!pool || !j->submitted) {
		repl_file_job_run(j, fr);
		j->state = REPL_JOB_DONE;
		return;
	}
	pthread_mutex_lock(&pool->lock);
	while (j->state != REPL_JOB_DONE) {
		if (j->state == REPL_JOB_QUEUED) {
			job_run_locked(pool, j, fr);
		} else if ((t = task_pop(pool))) {
			task_run_locked(pool, t);
		} else if (pool->jobs) {
			/* j runs elsewhere: do a later one meanwhile. */
			job_run_locked(pool, pool->jobs, fr);
		} else {
			pthread_cond_wait(&pool->cv, &pool->lock);
		}
	}
	pthread_mutex_unlock(&pool->lock);
}

void repl_scan_pool_cancel_job(struct repl_scan_pool *pool,
			       struct repl_file_job *j)
{
	struct repl_hash_task *t;

	if (!pool || !j->submitted)
		return;
	pthread_mutex_lock(&pool->lock);
	if (j->state == REPL_JOB_QUEUED) {
		job_unlink(pool, j);
		j->state = REPL_JOB_IDLE;
	}
	/* Running: its dfd and name must stay valid until it is done. Only
	 * hash tasks are run meanwhile: the walker is leaving. */
	while (j->state == REPL_JOB_RUNNING) {
		t = task_pop(pool);
		if (t)
			task_run_locked(pool, t);
		else
			pthread_cond_wait(&pool->cv, &pool->lock);
	}
	pthread_mutex_unlock(&pool->lock);
}

void repl_scan_pool_post_hash(struct repl_scan_pool *pool,
			      struct repl_window *w, size_t n)
{
	size_t i;

	pthread_mutex_lock(&pool->lock);
	w->pending = (unsigned)n;
	w->err = 0;
	for (i = 0; i < n; i++) {
		struct repl_hash_task *t = &w->t[i];

		t->next = NULL;
		if (pool->tasks_tail)
			pool->tasks_tail->next = t;
		else
			pool->tasks = t;
		pool->tasks_tail = t;
	}
	pthread_cond_broadcast(&pool->cv);
	pthread_mutex_unlock(&pool->lock);
}

int repl_scan_pool_wait_window(struct repl_scan_pool *pool,
			       struct repl_window *w)
{
	struct repl_hash_task *t;
	int r;

	pthread_mutex_lock(&pool->lock);
	while (w->pending) {
		t = task_pop(pool);
		if (t)
			task_run_locked(pool, t);
		else
			pthread_cond_wait(&pool->cv, &pool->lock);
	}
	r = w->err;
	pthread_mutex_unlock(&pool->lock);
	return r;
}
