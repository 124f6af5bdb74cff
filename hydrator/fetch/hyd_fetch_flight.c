/*
 * hydrator/fetch/hyd_fetch_flight.c — the single-flight table.
 *
 * A hash table of the chunks being fetched, keyed by chunk id, plus one FIFO
 * queue per priority of the flights the loop has not started yet. One mutex
 * guards all of it; each flight has its own condvar so a landing chunk wakes
 * only its own readers. Chunk ids are SHA-256 digests, so their first bytes
 * are already a good hash; a hostile catalog can at worst lengthen chains,
 * and the number of flights in the table is small.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"

#define HYD_FLIGHT_BUCKETS 1024u

static size_t flight_bucket(const struct hyd_flights *t, const chunk_id *id)
{
	uint64_t h;

	memcpy(&h, id->b, sizeof(h));
	return (size_t)(h & (t->nbuckets - 1));
}

int hyd_flights_init(struct hyd_flights *t, void (*kick)(void *), void *arg)
{
	int r;

	memset(t, 0, sizeof(*t));
	t->nbuckets = HYD_FLIGHT_BUCKETS;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	t->ended = calloc(t->nbuckets, sizeof(*t->ended));
	r = t->buckets && t->ended ? pthread_mutex_init(&t->lock, NULL)
				   : ENOMEM;
	if (r) {
		free(t->buckets);
		free(t->ended);
		t->buckets = NULL;
		t->ended = NULL;
		return -r;
	}
	t->kick = kick;
	t->kick_arg = arg;
	return 0;
}

void hyd_flights_fini(struct hyd_flights *t)
{
	if (!t->buckets)
		return;
	pthread_mutex_destroy(&t->lock);
	free(t->buckets);
	free(t->ended);
	t->buckets = NULL;
	t->ended = NULL;
}

void hyd_flights_open(struct hyd_flights *t)
{
	pthread_mutex_lock(&t->lock);
	t->open = 1;
	pthread_mutex_unlock(&t->lock);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static void queue_push(struct hyd_flights *t, struct hyd_flight *fl)
{
	enum hyd_prio p = fl->prio;

	fl->queued_at = base_now_ns();
	t->nqueued[p]++;
	fl->qnext = NULL;
	fl->qprev = t->qtail[p];
	if (t->qtail[p])
		t->qtail[p]->qnext = fl;
	else
		t->qhead[p] = fl;
	t->qtail[p] = fl;
	t->queued++;
}

/* Out of its queue: the time it waited there does not count against its
 * deadline (a timeout runs from when the request is sent). */
static void queue_unlink(struct hyd_flights *t, struct hyd_flight *fl)
{
	enum hyd_prio p = fl->prio;
	uint64_t now = base_now_ns(), stint;

	stint = now > fl->queued_at ? now - fl->queued_at : 0;
	fl->queued_ns += stint;
	fl->deadline_ns = sat_add(fl->deadline_ns, stint);
	t->nqueued[p]--;
	if (fl->qprev)
		fl->qprev->qnext = fl->qnext;
	else
		t->qhead[p] = fl->qnext;
	if (fl->qnext)
		fl->qnext->qprev = fl->qprev;
	else
		t->qtail[p] = fl->qprev;
	fl->qprev = fl->qnext = NULL;
	t->queued--;
}

static struct hyd_flight *table_find(struct hyd_flights *t, const chunk_id *id)
{
	struct hyd_flight *fl;

	for (fl = t->buckets[flight_bucket(t, id)]; fl; fl = fl->hnext)
		if (!memcmp(fl->id.b, id->b, CHUNK_ID_LEN))
			return fl;
	return NULL;
}

static void table_remove(struct hyd_flights *t, struct hyd_flight *fl)
{
	struct hyd_flight **pp;

	if (!fl->in_table)
		return;
	for (pp = &t->buckets[flight_bucket(t, &fl->id)]; *pp;
	     pp = &(*pp)->hnext) {
		if (*pp == fl) {
			*pp = fl->hnext;
			break;
		}
	}
	fl->hnext = NULL;
	fl->in_table = 0;
	t->count--;
}

static void flight_free(struct hyd_flight *fl)
{
	hyd_pack_obj_unref(fl->obj);
	pthread_cond_destroy(&fl->cond);
	free(fl->raw);
	free(fl);
}

/* A new flight, queued (lock held), not in the table: 0 or -errno. */
static int flight_queue_new(struct hyd_flights *t, const chunk_id *id,
			    uint32_t raw_len, enum hyd_prio prio,
			    uint64_t deadline_ns, struct hyd_flight **ret)
{
	struct hyd_flight *fl;
	int r;

	fl = calloc(1, sizeof(*fl));
	if (!fl)
		return -ENOMEM;
	/* Waits use absolute base_now_ns deadlines. */
	r = base_cond_init(&fl->cond);
	if (r < 0) {
		free(fl);
		return r;
	}
	fl->id = *id;
	fl->raw_len = raw_len;
	fl->prio = prio;
	fl->state = HYD_FLIGHT_QUEUED;
	fl->refs = 2; /* the caller's and the fetch's own */
	fl->deadline_ns = deadline_ns;
	queue_push(t, fl);
	*ret = fl;
	return 0;
}

/* A new queued flight in the table (lock held): 1, or -errno. */
static int flight_create(struct hyd_flights *t, const chunk_id *id,
			 uint32_t raw_len, enum hyd_prio prio,
			 uint64_t deadline_ns, unsigned watch,
			 struct hyd_flight **ret)
{
	struct hyd_flight *fl;
	int r;

	r = flight_queue_new(t, id, raw_len, prio, deadline_ns, &fl);
	if (r < 0)
		return r;
	fl->watch = watch;
	fl->in_table = 1;
	fl->hnext = t->buckets[flight_bucket(t, id)];
	t->buckets[flight_bucket(t, id)] = fl;
	t->count++;
	*ret = fl;
	return 1;
}

/* Another holder of fl (lock held): a reference, the later deadline, and
 * a move up to prio while it is still queued (a demand read must not wait
 * behind backfill). */
static void flight_rejoin(struct hyd_flights *t, struct hyd_flight *fl,
			  enum hyd_prio prio, uint64_t deadline_ns)
{
	fl->refs++;
	if (fl->deadline_ns < deadline_ns)
		fl->deadline_ns = deadline_ns;
	if (fl->state == HYD_FLIGHT_QUEUED && prio < fl->prio) {
		queue_unlink(t, fl);
		fl->prio = prio;
		queue_push(t, fl);
	}
}

/* check: 0 never ask the have hook, 1 ask it when no flight exists, 2 ask
 * it only when id's bucket saw a flight end since stamp. */
static int flights_join(struct hyd_flights *t, const chunk_id *id,
			uint32_t raw_len, enum hyd_prio prio,
			uint64_t deadline_ns, unsigned watch, int check,
			uint32_t stamp, struct hyd_flight **ret)
{
	struct hyd_flight *fl;
	int r = 0;

	*ret = NULL;
	if (prio >= HYD_PRIO_N)
		prio = HYD_PRIO_BACKFILL;
	pthread_mutex_lock(&t->lock);
	if (!t->open) {
		r = -ESHUTDOWN;
		goto out;
	}
	fl = table_find(t, id);
	if (fl) {
		flight_rejoin(t, fl, prio, deadline_ns);
		fl->watch += watch;
		*ret = fl;
		r = 0;
		goto out;
	}
	if (check == 2 && t->ended[flight_bucket(t, id)] == stamp)
		check = 0;
	if (check && t->have && t->have(t->have_arg, id) == 1) {
		r = 2;
		goto out;
	}
	r = flight_create(t, id, raw_len, prio, deadline_ns, watch, ret);
	if (r == 1 && t->kick)
		t->kick(t->kick_arg);
out:
	pthread_mutex_unlock(&t->lock);
	return r;
}

int hyd_flights_join(struct hyd_flights *t, const chunk_id *id,
		     uint32_t raw_len, enum hyd_prio prio, uint64_t deadline_ns,
		     struct hyd_flight **ret)
{
	return flights_join(t, id, raw_len, prio, deadline_ns, 0, 0, 0, ret);
}

int hyd_flights_join_watched(struct hyd_flights *t, const chunk_id *id,
			     uint32_t raw_len, enum hyd_prio prio,
			     uint64_t deadline_ns, struct hyd_flight **ret)
{
	return flights_join(t, id, raw_len, prio, deadline_ns, 1, 0, 0, ret);
}

int hyd_flights_join_checked(struct hyd_flights *t, const chunk_id *id,
			     uint32_t raw_len, enum hyd_prio prio,
			     uint64_t deadline_ns, unsigned watch,
			     struct hyd_flight **ret)
{
	return flights_join(t, id, raw_len, prio, deadline_ns, watch ? 1 : 0, 1,
			    0, ret);
}

uint32_t hyd_flights_stamp(struct hyd_flights *t, const chunk_id *id)
{
	return __atomic_load_n(&t->ended[flight_bucket(t, id)],
			       __ATOMIC_ACQUIRE);
}

int hyd_flights_join_after(struct hyd_flights *t, const chunk_id *id,
			   uint32_t raw_len, enum hyd_prio prio,
			   uint64_t deadline_ns, unsigned watch, uint32_t stamp,
			   struct hyd_flight **ret)
{
	return flights_join(t, id, raw_len, prio, deadline_ns, watch ? 1 : 0, 2,
			    stamp, ret);
}

void hyd_flights_set_have_hook(struct hyd_flights *t,
			       int (*have)(void *arg, const chunk_id *id),
			       void *arg)
{
	pthread_mutex_lock(&t->lock);
	t->have = have;
	t->have_arg = arg;
	pthread_mutex_unlock(&t->lock);
}

int hyd_flights_is_open(struct hyd_flights *t)
{
	int o;

	pthread_mutex_lock(&t->lock);
	o = t->open;
	pthread_mutex_unlock(&t->lock);
	return o;
}

struct hyd_flight *hyd_flights_next(struct hyd_flights *t)
{
	struct hyd_flight *fl = NULL;
	int p;

	pthread_mutex_lock(&t->lock);
	for (p = 0; p < HYD_PRIO_N && !fl; p++)
		fl = t->qhead[p];
	if (fl) {
		queue_unlink(t, fl);
		fl->state = HYD_FLIGHT_ACTIVE;
	}
	pthread_mutex_unlock(&t->lock);
	return fl;
}

uint64_t hyd_flights_deadline(struct hyd_flights *t, struct hyd_flight *fl)
{
	uint64_t d;

	pthread_mutex_lock(&t->lock);
	d = fl->deadline_ns;
	pthread_mutex_unlock(&t->lock);
	return d;
}

void hyd_flights_verified(struct hyd_flights *t, struct hyd_flight *fl,
			  uint8_t *raw)
{
	pthread_mutex_lock(&t->lock);
	free(fl->raw);
	fl->raw = raw;
	fl->result = 0;
	fl->state = HYD_FLIGHT_VERIFIED;
	pthread_cond_broadcast(&fl->cond);
	/* A rescue's waiters wait on its condvar for either. */
	if (fl->rescue)
		pthread_cond_broadcast(&fl->rescue->cond);
	pthread_mutex_unlock(&t->lock);
}

/* Called with the lock held. */
static void flight_end_locked(struct hyd_flights *t, struct hyd_flight *fl,
			      int result)
{
	/* A flight stores its chunk before it ends: whoever stamped this
	 * bucket before now and missed in the store may have missed it. */
	if (fl->in_table)
		__atomic_add_fetch(&t->ended[flight_bucket(t, &fl->id)], 1,
				   __ATOMIC_RELEASE);
	table_remove(t, fl);
	if (fl->state == HYD_FLIGHT_QUEUED)
		queue_unlink(t, fl);
	if (fl->state != HYD_FLIGHT_VERIFIED)
		fl->result = result;
	fl->state = HYD_FLIGHT_DONE;
	pthread_cond_broadcast(&fl->cond);
	/* Unlink a rescue pair: the other end may outlive this one. */
	if (fl->rescue) {
		pthread_cond_broadcast(&fl->rescue->cond);
		fl->rescue->parent = NULL;
		fl->rescue = NULL;
	}
	if (fl->parent) {
		fl->parent->rescue = NULL;
		fl->parent = NULL;
	}
	if (fl->watch && t->done)
		t->done(t->done_arg, fl, fl->result);
}

static void release_locked(struct hyd_flights *t, struct hyd_flight *fl,
			   int *ret_free)
{
	(void)t;
	*ret_free = (--fl->refs == 0);
}

void hyd_flights_finish(struct hyd_flights *t, struct hyd_flight *fl,
			int result)
{
	int do_free;

	pthread_mutex_lock(&t->lock);
	flight_end_locked(t, fl, result);
	release_locked(t, fl, &do_free);
	pthread_mutex_unlock(&t->lock);
	if (do_free)
		flight_free(fl);
}

/* A queued flight is looked at again this often: it may have been sent
 * (its queue time then stops growing) without a broadcast. */
#define HYD_QUEUED_RECHECK_NS 1000000000ull

/* The time fl spent in queues so far (lock held). */
static uint64_t queued_so_far(const struct hyd_flight *fl, uint64_t now)
{
	uint64_t q = fl->queued_ns;

	if (fl->state == HYD_FLIGHT_QUEUED && now > fl->queued_at)
		q += now - fl->queued_at;
	return q;
}

int hyd_flights_wait(struct hyd_flights *t, struct hyd_flight *fl,
		     uint64_t deadline_ns)
{
	uint64_t now, q0, eff, until;
	int r;

	pthread_mutex_lock(&t->lock);
	/* Only the queue time from now on moves this waiter's deadline:
	 * what the flight waited before (a backfill flight this read
	 * joined) was not this read's. */
	q0 = queued_so_far(fl, base_now_ns());
	while (fl->state != HYD_FLIGHT_VERIFIED &&
	       fl->state != HYD_FLIGHT_DONE) {
		now = base_now_ns();
		eff = sat_add(deadline_ns, queued_so_far(fl, now) - q0);
		if (now >= eff) {
			r = -ETIMEDOUT;
			goto out;
		}
		until = eff;
		if (fl->state == HYD_FLIGHT_QUEUED &&
		    until - now > HYD_QUEUED_RECHECK_NS)
			until = now + HYD_QUEUED_RECHECK_NS;
		base_cond_wait_until(&fl->cond, &t->lock, until);
	}
	r = fl->result;
	if (r == 0 && !fl->raw)
		r = -EIO; /* DONE with 0 but no bytes: never serve nothing */
out:
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* VERIFIED or DONE: a wait for fl is over (lock held). */
static int flight_ended(const struct hyd_flight *fl)
{
	return fl->state == HYD_FLIGHT_VERIFIED || fl->state == HYD_FLIGHT_DONE;
}

int hyd_flights_ready(struct hyd_flights *t, struct hyd_flight *fl)
{
	int r;

	pthread_mutex_lock(&t->lock);
	r = flight_ended(fl);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int hyd_flights_rescue(struct hyd_flights *t, struct hyd_flight *fl,
		       enum hyd_prio prio, uint64_t deadline_ns,
		       struct hyd_flight **ret)
{
	struct hyd_flight *r = NULL;
	int rc = 0;

	*ret = NULL;
	pthread_mutex_lock(&t->lock);
	if (!t->open || fl->state != HYD_FLIGHT_ACTIVE || fl->prio <= prio ||
	    fl->prio < HYD_PRIO_NEAR || fl->parent)
		goto out;
	r = fl->rescue;
	if (r) {
		flight_rejoin(t, r, prio, deadline_ns);
	} else {
		rc = flight_queue_new(t, &fl->id, fl->raw_len, prio,
				      deadline_ns, &r);
		if (rc < 0)
			goto out;
		r->parent = fl;
		fl->rescue = r;
		rc = 1;
		if (t->kick)
			t->kick(t->kick_arg);
	}
	*ret = r;
out:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

static int flight_has_bytes(const struct hyd_flight *fl)
{
	return flight_ended(fl) && fl->result == 0 && fl->raw;
}

int hyd_flights_wait_either(struct hyd_flights *t, struct hyd_flight *fl,
			    struct hyd_flight *r, uint64_t deadline_ns,
			    struct hyd_flight **ret_won)
{
	int rc;

	*ret_won = fl;
	pthread_mutex_lock(&t->lock);
	for (;;) {
		if (flight_has_bytes(fl) || flight_has_bytes(r)) {
			*ret_won = flight_has_bytes(fl) ? fl : r;
			rc = 0;
			break;
		}
		if (flight_ended(fl) && flight_ended(r)) {
			rc = fl->result ? fl->result
					: (r->result ? r->result : -EIO);
			break;
		}
		if (base_now_ns() >= deadline_ns) {
			rc = -ETIMEDOUT;
			break;
		}
		/* While linked, fl's ends wake r's waiters too. */
		base_cond_wait_until(flight_ended(r) ? &fl->cond : &r->cond,
				     &t->lock, deadline_ns);
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void hyd_flights_release(struct hyd_flights *t, struct hyd_flight *fl)
{
	int do_free;

	if (!fl)
		return;
	pthread_mutex_lock(&t->lock);
	release_locked(t, fl, &do_free);
	pthread_mutex_unlock(&t->lock);
	if (do_free)
		flight_free(fl);
}

size_t hyd_flights_close(struct hyd_flights *t, int err)
{
	struct hyd_flight *fl, *dead = NULL;
	size_t n = 0;
	int p, do_free;

	pthread_mutex_lock(&t->lock);
	/* Kicking under the lock, once, tells the loop to shut down: no join
	 * can kick after this. */
	if (t->open && t->kick)
		t->kick(t->kick_arg);
	t->open = 0;
	for (p = 0; p < HYD_PRIO_N; p++) {
		while ((fl = t->qhead[p])) {
			flight_end_locked(t, fl, err);
			release_locked(t, fl, &do_free);
			if (do_free) {
				/* Free outside the lock; chain through qnext.
				 */
				fl->qnext = dead;
				dead = fl;
			}
			n++;
		}
	}
	pthread_mutex_unlock(&t->lock);
	while (dead) {
		fl = dead;
		dead = fl->qnext;
		flight_free(fl);
	}
	return n;
}

void hyd_flights_set_done_hook(
    struct hyd_flights *t,
    void (*done)(void *arg, const struct hyd_flight *fl, int result), void *arg)
{
	pthread_mutex_lock(&t->lock);
	t->done = done;
	t->done_arg = arg;
	pthread_mutex_unlock(&t->lock);
}

int hyd_flights_top(struct hyd_flights *t, int *ret_nobatch)
{
	int p, top = -1;

	*ret_nobatch = 0;
	pthread_mutex_lock(&t->lock);
	for (p = 0; p < HYD_PRIO_N; p++) {
		if (t->qhead[p]) {
			top = p;
			*ret_nobatch = t->qhead[p]->nobatch;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return top;
}

size_t hyd_flights_next_batch(struct hyd_flights *t, enum hyd_prio prio,
			      size_t max_n, uint64_t max_bytes,
			      struct hyd_flight **ret)
{
	struct hyd_flight *fl;
	uint64_t bytes = 0;
	size_t n = 0;

	if (prio >= HYD_PRIO_N)
		return 0;
	pthread_mutex_lock(&t->lock);
	while (n < max_n && (fl = t->qhead[prio])) {
		if (fl->nobatch && n)
			break;
		if (n && bytes + fl->raw_len > max_bytes)
			break;
		queue_unlink(t, fl);
		fl->state = HYD_FLIGHT_ACTIVE;
		bytes += fl->raw_len;
		ret[n++] = fl;
		if (fl->nobatch)
			break;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

int hyd_flights_requeue(struct hyd_flights *t, struct hyd_flight *fl,
			int nobatch)
{
	enum hyd_prio p;
	int do_free = 0, r = 0;

	pthread_mutex_lock(&t->lock);
	if (!t->open) {
		/* Closed: nobody will pop it again, so end it here. */
		flight_end_locked(t, fl, -ECANCELED);
		release_locked(t, fl, &do_free);
		r = -ESHUTDOWN;
	} else if (fl->state == HYD_FLIGHT_ACTIVE) {
		fl->state = HYD_FLIGHT_QUEUED;
		if (nobatch)
			fl->nobatch = 1;
		/* At the head: it already waited its turn once. */
		p = fl->prio;
		fl->qprev = NULL;
		fl->qnext = t->qhead[p];
		if (t->qhead[p])
			t->qhead[p]->qprev = fl;
		else
			t->qtail[p] = fl;
		t->qhead[p] = fl;
		t->queued++;
	}
	pthread_mutex_unlock(&t->lock);
	if (do_free)
		flight_free(fl);
	return r;
}

size_t hyd_flights_queued(struct hyd_flights *t)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->queued;
	pthread_mutex_unlock(&t->lock);
	return n;
}

int hyd_flights_join_pack(struct hyd_flights *t, struct hyd_pack_obj *obj,
			  const uint8_t *want, enum hyd_prio prio,
			  unsigned watch, struct hyd_flight **fls,
			  uint8_t *state)
{
	struct hyd_flight *fl;
	size_t i;
	int r = 0, created = 0;

	if (prio >= HYD_PRIO_N)
		prio = HYD_PRIO_BACKFILL;
	for (i = 0; i < obj->n; i++) {
		fls[i] = NULL;
		state[i] = 3;
	}
	pthread_mutex_lock(&t->lock);
	if (!t->open) {
		r = -ESHUTDOWN;
		goto out;
	}
	for (i = 0; i < obj->n; i++) {
		if (!want[i])
			continue;
		fl = table_find(t, &obj->ids[i]);
		if (fl) {
			fl->refs++;
			fl->watch += watch;
			fls[i] = fl;
			state[i] = 0;
			continue;
		}
		if (t->have && t->have(t->have_arg, &obj->ids[i]) == 1) {
			state[i] = 2;
			continue;
		}
		r = flight_create(t, &obj->ids[i], obj->lens[i], prio,
				  HYD_DEADLINE_NONE, watch, &fl);
		if (r < 0)
			break;
		hyd_pack_obj_ref(obj);
		fl->obj = obj;
		fl->obj_idx = i;
		fls[i] = fl;
		state[i] = 1;
		created = 1;
		r = 0;
	}
	if (created && t->kick)
		t->kick(t->kick_arg);
out:
	pthread_mutex_unlock(&t->lock);
	return r;
}

struct hyd_pack_obj *hyd_flights_head_pack(struct hyd_flights *t,
					   enum hyd_prio prio)
{
	struct hyd_flight *fl;
	struct hyd_pack_obj *obj = NULL;

	if (prio >= HYD_PRIO_N)
		return NULL;
	pthread_mutex_lock(&t->lock);
	fl = t->qhead[prio];
	if (fl && !fl->nobatch && fl->obj) {
		obj = fl->obj;
		hyd_pack_obj_ref(obj);
	}
	pthread_mutex_unlock(&t->lock);
	return obj;
}

size_t hyd_flights_next_pack(struct hyd_flights *t, enum hyd_prio prio,
			     const struct hyd_pack_obj *obj,
			     struct hyd_flight **ret)
{
	struct hyd_flight *fl, *next;
	size_t n = 0;

	if (prio >= HYD_PRIO_N)
		return 0;
	pthread_mutex_lock(&t->lock);
	fl = t->qhead[prio];
	if (!fl || fl->obj != obj || fl->nobatch)
		goto out;
	for (; fl && n < obj->n; fl = next) {
		next = fl->qnext;
		if (fl->obj != obj || fl->nobatch)
			continue;
		queue_unlink(t, fl);
		fl->state = HYD_FLIGHT_ACTIVE;
		ret[n++] = fl;
	}
out:
	pthread_mutex_unlock(&t->lock);
	return n;
}

size_t hyd_flights_expire(struct hyd_flights *t, uint64_t now_ns)
{
	struct hyd_flight *fl, *next;
	size_t n = 0;
	int p, do_free;

	pthread_mutex_lock(&t->lock);
	for (p = HYD_PRIO_DEMAND; p <= HYD_PRIO_READAHEAD; p++) {
		for (fl = t->qhead[p]; fl; fl = next) {
			next = fl->qnext;
			/* deadline_ns less the queue time it was credited:
			 * the deadline as joined, counting the queue */
			if (fl->deadline_ns >= HYD_DEADLINE_NONE ||
			    fl->deadline_ns - fl->queued_ns > now_ns)
				continue;
			flight_end_locked(t, fl, -ETIMEDOUT);
			release_locked(t, fl, &do_free); /* the fetch's */
			if (do_free)
				flight_free(fl);
			n++;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

size_t hyd_flights_queued_prio(struct hyd_flights *t, enum hyd_prio prio)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = prio < HYD_PRIO_N ? t->nqueued[prio] : 0;
	pthread_mutex_unlock(&t->lock);
	return n;
}

uint64_t hyd_flights_head_age(struct hyd_flights *t, enum hyd_prio prio,
			      uint64_t now_ns)
{
	uint64_t age = 0;

	pthread_mutex_lock(&t->lock);
	if (prio < HYD_PRIO_N && t->qhead[prio] &&
	    now_ns > t->qhead[prio]->queued_at)
		age = now_ns - t->qhead[prio]->queued_at;
	pthread_mutex_unlock(&t->lock);
	return age;
}
