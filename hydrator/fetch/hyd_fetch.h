/*
 * hydrator/fetch/hyd_fetch.h — getting missing chunks over HTTP.
 *
 * Two parts:
 *   - the single-flight table (hyd_fetch_flight.c): one hyd_flight per chunk
 *     id being fetched; every reader of that chunk joins the same flight and
 *     waits on it, so concurrent reads of one chunk cause one fetch. The
 *     table also holds the per-priority queues of flights not yet started.
 *   - the fetcher (hyd_fetch.c): one libuv loop thread owning a curl multi
 *     handle driven by the socket-action API (the pattern of curl's
 *     docs/examples/multi-uv.c). FUSE threads never touch curl: they join a
 *     flight, which queues it and wakes the loop with uv_async_send.
 *
 * A flight's life:  QUEUED -> ACTIVE -> [VERIFIED] -> DONE
 *   QUEUED    in a priority queue, no transfer yet
 *   ACTIVE    the loop owns it: transfer, backoff, decode/verify
 *   VERIFIED  raw bytes passed chunk_id_verify; waiters may use fl->raw; the
 *             store write is still going on, so the flight stays in the
 *             table and late readers get the bytes without a second fetch
 *   DONE      result final; out of the table (a later read starts afresh)
 *
 * Errors (-errno): -ENOENT the server has no such chunk (404), -ESTALE the
 * source changed under the chunk (409), -EBADMSG the frame or hash did not
 * check out twice, -ETIMEDOUT transient failures lasted past the deadline,
 * -EPROTO an unexpected HTTP answer, -ECANCELED / -ESHUTDOWN the fetcher is
 * stopping, -ENOMEM, -EIO.
 */
#ifndef FERRY_HYD_FETCH_H
#define FERRY_HYD_FETCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"

/* Request classes, most urgent first. The loop always starts the most
 * urgent queued flight; backfill (a later class) only gets what is left. */
enum hyd_prio {
	HYD_PRIO_DEMAND = 0,	/* a read() is blocked on it */
	HYD_PRIO_READAHEAD = 1, /* likely to be read soon */
	HYD_PRIO_NEAR = 2,	/* backfill that follows a job: the files
				 * around what it opened (backfill's lane,
				 * ahead of the rest) */
	HYD_PRIO_BACKFILL = 3,	/* hydrate everything, in the background */
	HYD_PRIO_N = 4,
};

enum hyd_flight_state {
	HYD_FLIGHT_QUEUED = 0,
	HYD_FLIGHT_ACTIVE,
	HYD_FLIGHT_VERIFIED,
	HYD_FLIGHT_DONE,
};

/* A pack (catalog.h, cat_pack): the object GET BASE/pack/GEN/INO/K and
 * its whole chunk list, in the answer's order. Shared by the flights
 * submitted for it (each holds a reference); immutable once made. */
struct hyd_pack_obj {
	unsigned refs; /* atomic */
	char *url;     /* the whole URL */
	size_t n;
	chunk_id *ids;
	uint32_t *lens;
};

/* One chunk being fetched. Fields are guarded by the table lock, except
 * raw/raw_len, which are immutable once the state is VERIFIED and stay valid
 * until the holder's hyd_flights_release. */
struct hyd_flight {
	chunk_id id;
	uint32_t raw_len; /* expected raw length (from the catalog) */
	enum hyd_prio prio;
	enum hyd_flight_state state;
	int result;	      /* 0 or -errno, final once DONE */
	unsigned refs;	      /* waiters + the fetch itself */
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; the latest of all joiners,
			       * moved on by the time it waited in a queue:
			       * a timeout counts from when it is sent */
	uint64_t queued_at;   /* base_now_ns it (last) entered a queue */
	uint64_t queued_ns;   /* time it spent queued before that */
	uint8_t *raw;	      /* verified bytes (owned) once VERIFIED */
	pthread_cond_t cond;  /* broadcast on VERIFIED and DONE */
	int in_table;
	/* For backfill and batches (all under the table lock): */
	unsigned watch; /* watched joins (hyd_flights_join_watched) */
	int nobatch;	/* fetch alone with a GET, not in a batch */
	int store_rc;	/* hyd_store_put's result once VERIFIED (0, 1 or
			 * -errno); set by the fetcher before finishing */
	struct hyd_pack_obj *obj; /* the pack it was asked for in, or NULL;
				   * set at creation, a reference */
	size_t obj_idx;		  /* its place in obj's list */
	/* A rescue (hyd_flights_rescue): a second flight of the same chunk,
	 * out of the table, racing this one while it sits in a backfill
	 * transfer. Each link is cleared when its far end ends. */
	struct hyd_flight *rescue;	  /* this flight's rescue, or NULL */
	struct hyd_flight *parent;	  /* a rescue's: the flight it races */
	struct hyd_flight *hnext;	  /* hash chain */
	struct hyd_flight *qprev, *qnext; /* priority queue while QUEUED */
};

struct hyd_flights {
	pthread_mutex_t lock;
	struct hyd_flight **buckets;
	/* Per bucket: how many flights of it have ended (written under the
	 * lock, read with __atomic acquire anywhere; see hyd_flights_stamp). */
	uint32_t *ended;
	size_t nbuckets; /* power of two */
	size_t count;	 /* flights in the table */
	struct hyd_flight *qhead[HYD_PRIO_N], *qtail[HYD_PRIO_N];
	size_t nqueued[HYD_PRIO_N];
	size_t queued;
	int open; /* joins are refused while 0 */
	/* Called with the lock held whenever a flight is queued, so the loop's
	 * wake-up can never race with the loop shutting down. */
	void (*kick)(void *arg);
	void *kick_arg;
	/* Called with the lock held when a flight with watch > 0 ends (see
	 * hyd_flights_set_done_hook). */
	void (*done)(void *arg, const struct hyd_flight *fl, int result);
	void *done_arg;
	/* Called with the lock held by a checked join that finds no flight:
	 * 1 when the chunk is stored (see hyd_flights_join_checked). */
	int (*have)(void *arg, const chunk_id *id);
	void *have_arg;
};

/* ---- single-flight table (hyd_fetch_flight.c); any thread ---- */

/* Initialise an empty, closed table. Returns 0 or -ENOMEM. */
int hyd_flights_init(struct hyd_flights *t, void (*kick)(void *), void *arg);
/* Free the table. Every flight must have been finished and released. */
void hyd_flights_fini(struct hyd_flights *t);
/* Accept joins from now on. */
void hyd_flights_open(struct hyd_flights *t);
/* 1 while joins are accepted (between open and close). */
int hyd_flights_is_open(struct hyd_flights *t);

/* Join the flight for id, creating and queueing it (and kicking the loop)
 * when there is none. On success *ret holds a reference the caller gives
 * back with hyd_flights_release. A joiner with a more urgent prio moves a
 * still-queued flight up; a later deadline extends it.
 * Returns 1 when created, 0 when joined, -ESHUTDOWN when closed, -ENOMEM. */
int hyd_flights_join(struct hyd_flights *t, const chunk_id *id,
		     uint32_t raw_len, enum hyd_prio prio, uint64_t deadline_ns,
		     struct hyd_flight **ret);

/* Loop side: pop the most urgent queued flight (now ACTIVE) or NULL. The
 * table's own reference passes to the caller, who must end the flight with
 * hyd_flights_finish. */
struct hyd_flight *hyd_flights_next(struct hyd_flights *t);

/* Current deadline of an ACTIVE flight (joiners may extend it). */
uint64_t hyd_flights_deadline(struct hyd_flights *t, struct hyd_flight *fl);

/* Publish verified bytes (raw: raw_len bytes, malloc()ed, ownership passes
 * to the flight) and wake the waiters. Only bytes that passed
 * chunk_id_verify may be published. */
void hyd_flights_verified(struct hyd_flights *t, struct hyd_flight *fl,
			  uint8_t *raw);

/* End a flight: out of the table, state DONE with result (ignored when
 * already VERIFIED: those bytes stand), waiters woken, the fetch reference
 * dropped. */
void hyd_flights_finish(struct hyd_flights *t, struct hyd_flight *fl,
			int result);

/* Wait until fl is VERIFIED or DONE, or until deadline_ns (monotonic)
 * moved on by the time fl waited in a queue for a transfer: a timeout
 * counts from when the request is sent, not from when it was asked for
 * (while the link is up; hyd_flights_expire ends what waits behind a
 * link that is down). Returns 0 (fl->raw holds fl->raw_len verified
 * bytes), the flight's -errno, or -ETIMEDOUT. */
int hyd_flights_wait(struct hyd_flights *t, struct hyd_flight *fl,
		     uint64_t deadline_ns);

/* Is fl VERIFIED or DONE (hyd_flights_wait would return at once)? */
int hyd_flights_ready(struct hyd_flights *t, struct hyd_flight *fl);

/* fl, a flight of backfill's, was sent already (in a batch or a pack
 * whose answer streams in behind megabytes of others), and now someone
 * wants it at prio: a second flight of the same chunk at prio, out of the
 * table, queued as any other (a demand read's goes alone or with other
 * reads', a directory's with its neighbours), so the wait is a round trip
 * instead of the batch. Both may land; the store keeps one copy. *ret: a
 * reference to the rescue (fl's one, made now or earlier, moved up to
 * prio), or NULL when fl needs none (queued: a join moves it up;
 * verified; ended; or as urgent already). Returns 1 when made, 0, or
 * -errno. */
int hyd_flights_rescue(struct hyd_flights *t, struct hyd_flight *fl,
		       enum hyd_prio prio, uint64_t deadline_ns,
		       struct hyd_flight **ret);

/* Wait for fl or its rescue r, whichever has the bytes first: 0 with
 * *ret_won the one to use, or the error of fl (r's when fl's is none),
 * or -ETIMEDOUT at deadline_ns. */
int hyd_flights_wait_either(struct hyd_flights *t, struct hyd_flight *fl,
			    struct hyd_flight *r, uint64_t deadline_ns,
			    struct hyd_flight **ret_won);

/* Drop a reference; the last one frees the flight. NULL is a no-op. */
void hyd_flights_release(struct hyd_flights *t, struct hyd_flight *fl);

/* Refuse new joins and end every QUEUED flight with err; returns how many.
 * ACTIVE flights are the loop's to end. When the table was open, kick is
 * called once more, under the lock, so the loop learns of the close. */
size_t hyd_flights_close(struct hyd_flights *t, int err);

/* hyd_flights_join, and count the join in fl->watch: when the flight
 * ends, the done hook is called (once per flight, with watch telling how
 * many watched joins it had). A watcher may release its reference at once
 * and learn the outcome from the hook alone. */
int hyd_flights_join_watched(struct hyd_flights *t, const chunk_id *id,
			     uint32_t raw_len, enum hyd_prio prio,
			     uint64_t deadline_ns, struct hyd_flight **ret);

/* hyd_flights_join (watch 0) or _watched (1), except that when no flight
 * for id exists, the have hook is asked under the table lock before one is
 * created: when it says the chunk is stored, returns 2 with *ret NULL. A
 * flight stores its chunk before it leaves the table, so a look in the
 * store made this way cannot fall between a flight's store write and its
 * end, which a look before the join can (and then fetches the chunk a
 * second time). Without a have hook this is a plain join. */
int hyd_flights_join_checked(struct hyd_flights *t, const chunk_id *id,
			     uint32_t raw_len, enum hyd_prio prio,
			     uint64_t deadline_ns, unsigned watch,
			     struct hyd_flight **ret);

/* A stamp of the flights that ended in id's bucket. Take it before looking
 * in the store, and pass it to hyd_flights_join_after once the store said
 * no. Any thread, no lock (one atomic load). */
uint32_t hyd_flights_stamp(struct hyd_flights *t, const chunk_id *id);

/* hyd_flights_join_checked for a caller that just missed id in the store,
 * having taken stamp before it looked: the have hook is asked only when a
 * flight of id's bucket ended since the stamp, since only such a flight
 * can have stored the chunk after the caller's look. Otherwise a flight is
 * joined or created without asking the store a second time. Returns as
 * hyd_flights_join_checked. */
int hyd_flights_join_after(struct hyd_flights *t, const chunk_id *id,
			   uint32_t raw_len, enum hyd_prio prio,
			   uint64_t deadline_ns, unsigned watch, uint32_t stamp,
			   struct hyd_flight **ret);

/* Set the hook a checked join asks (quick, takes no table lock: e.g. a
 * store lookup). Set it before the table is opened. */
void hyd_flights_set_have_hook(struct hyd_flights *t,
			       int (*have)(void *arg, const chunk_id *id),
			       void *arg);

/* Set the hook called, with the table lock held, when a watched flight
 * ends: result is its final result (0 when verified; fl->store_rc then
 * says whether the store took it). The hook must be quick and must not
 * call into the table. Set it before the table is opened. */
void hyd_flights_set_done_hook(struct hyd_flights *t,
			       void (*done)(void *arg,
					    const struct hyd_flight *fl,
					    int result),
			       void *arg);

/* The prio of the most urgent queued flight, or -1 when none is queued;
 * *ret_nobatch says whether that flight must be fetched alone. */
int hyd_flights_top(struct hyd_flights *t, int *ret_nobatch);

/* Loop side: pop up to max_n queued flights of prio (now ACTIVE), in queue
 * order, stopping before one marked nobatch or when their raw lengths
 * would pass max_bytes (the first is always taken). Returns how many were
 * put in ret; each carries the table's reference, as hyd_flights_next. */
size_t hyd_flights_next_batch(struct hyd_flights *t, enum hyd_prio prio,
			      size_t max_n, uint64_t max_bytes,
			      struct hyd_flight **ret);

/* Loop side: put an ACTIVE flight back at the head of its queue (with
 * nobatch set if asked); the caller's reference goes back to the table.
 * Returns 0, or -ESHUTDOWN when the table is closed: the flight was then
 * ended with -ECANCELED and the reference dropped. */
int hyd_flights_requeue(struct hyd_flights *t, struct hyd_flight *fl,
			int nobatch);

/* Join (watch counted) or create the flights of pack obj's entries with
 * want[i] set, under one hold of the table lock, so the loop sees all of
 * them queued or none: a new flight carries obj (a reference of its own)
 * and its index. Per entry, state[i]: 1 created, 0 joined, 2 stored (the
 * have hook said so; fls[i] NULL), 3 not wanted; fls[i] holds a
 * reference as hyd_flights_join's. Returns 0, -ESHUTDOWN, -ENOMEM (the
 * entries before the failure stand). */
int hyd_flights_join_pack(struct hyd_flights *t, struct hyd_pack_obj *obj,
			  const uint8_t *want, enum hyd_prio prio,
			  unsigned watch, struct hyd_flight **fls,
			  uint8_t *state);

/* Loop side: the pack the head of prio's queue was asked for in (a
 * reference for the caller), or NULL when it has none or is nobatch. */
struct hyd_pack_obj *hyd_flights_head_pack(struct hyd_flights *t,
					   enum hyd_prio prio);

/* Loop side: when the head of prio's queue was asked for in pack obj,
 * pop it and every queued flight of prio asked for in obj (now ACTIVE,
 * each with the table's reference) into ret (room for obj->n), and
 * return how many; 0 when the head is another's or nobatch. */
size_t hyd_flights_next_pack(struct hyd_flights *t, enum hyd_prio prio,
			     const struct hyd_pack_obj *obj,
			     struct hyd_flight **ret);

/* Pack objects (hyd_pack_list.c). */
void hyd_pack_obj_ref(struct hyd_pack_obj *o);
void hyd_pack_obj_unref(struct hyd_pack_obj *o);
/* Part `part` of pack p of generation gen, with the whole list from cat
 * (its overlay for pending files: -EAGAIN while a manifest of them is
 * not local), named under base_url. One reference to *ret. 0 or -errno
 * (cat_pack_ids'). */
int hyd_pack_obj_make(const char *base_url, uint64_t gen, cat_reader *cat,
		      const struct cat_pack *p, uint64_t part,
		      struct hyd_pack_obj **ret);

/* Loop side, while the link is down: end with -ETIMEDOUT every queued
 * demand or readahead flight whose deadline, counting its time in the
 * queue, has passed (queue time only stops counting while requests can be
 * sent). Returns how many. */
size_t hyd_flights_expire(struct hyd_flights *t, uint64_t now_ns);

/* How long the head of prio's queue has waited there (0: none). */
uint64_t hyd_flights_head_age(struct hyd_flights *t, enum hyd_prio prio,
			      uint64_t now_ns);

/* Queued flights of prio (a snapshot). */
size_t hyd_flights_queued_prio(struct hyd_flights *t, enum hyd_prio prio);

/* Number of QUEUED flights. */
size_t hyd_flights_queued(struct hyd_flights *t);

/* ---- fetcher (hyd_fetch.c) ---- */

typedef struct hyd_fetch hyd_fetch;

struct hyd_fetch_config {
	const char *base_url; /* "http://host:port/v1/NAME" (copied) */
	hyd_store *store;     /* borrowed until hyd_fetch_free; NULL: do not
			       * store (tests) */
	uint32_t max_raw;     /* the catalog's max chunk size */
	unsigned connections; /* parallel transfers, >= 1 */
	long connect_timeout_ms;
	/* Background transfers (0 = default): */
	unsigned bg_connections; /* most transfers backfill-class flights may
				  * hold; default and cap connections - 1
				  * (at least 1): the last one is always
				  * left for demand reads */
	/* Transfers demand reads and readahead may hold, beside
	 * backfill's (0: HYD_READ_CONNS_DEFAULT, at least connections):
	 * backfill can never take them, so a read never waits for a
	 * backfill batch to end. */
	unsigned read_connections;
	/* Raw bytes per demand or readahead batch (0: default 2 MiB):
	 * small enough that a read is not stuck behind other reads'
	 * chunks, big enough that a stream's window is a few requests. */
	uint64_t read_batch_bytes;
	unsigned batch_max;   /* flights per POST BASE/chunks, default 1024,
			       * 1 turns batching off */
	uint64_t batch_bytes; /* raw bytes per batch, default 8 MiB */
	int cacheable;	      /* --cacheable: backfill flights submitted in
			       * packs go as GET BASE/pack/..., the rest as
			       * single GETs; no POST */
	uint64_t bwlimit;     /* wire bytes/s for everything, 0 = none */
	const struct hyd_creds *creds; /* CAs, client cert, token; borrowed
					* until hyd_fetch_free; NULL: none */
};

#define HYD_READ_CONNS_DEFAULT 16u
#define HYD_READ_BATCH_BYTES_DEFAULT (2u << 20)

/* Counters; read with hyd_fetch_stats (relaxed atomics: a snapshot). */
struct hyd_fetch_stats {
	uint64_t requests;     /* GET requests started (batches: below) */
	uint64_t chunks;       /* chunks fetched and verified */
	uint64_t wire_bytes;   /* response body bytes of 200 answers */
	uint64_t failures;     /* flights that ended in an error */
	uint64_t mismatches;   /* frames that failed decode or hash check */
	uint64_t retries;      /* transient failures retried */
	uint64_t store_errors; /* verified chunks hyd_store_put refused */
	/* Batches, the queue and the last events (for status): */
	uint64_t batches;	/* POST BASE/chunks requests started (not in
				 * requests) */
	uint64_t batch_frames;	/* frames that arrived inside batches */
	uint64_t batch_bytes;	/* of wire_bytes, those of batch answers */
	uint64_t rescues;	/* chunks asked for again ahead of the
				 * backfill transfer they were in
				 * (hyd_flights_rescue) */
	uint64_t queued;	/* flights waiting for a transfer (snapshot) */
	uint64_t active;	/* transfers running or backing off */
	uint64_t last_ok_ns;	/* base_now_ns of the last verified chunk, 0 */
	uint64_t last_error_ns; /* base_now_ns of last_error, 0 when none */
	int last_store_err;	/* last -errno of hyd_store_put, 0 when none */
	char last_error[256];	/* the last transfer failure, one line */
};

/* What a mount counts outside the fetcher, for its metrics
 * (hydrator/metrics/): the requests and body bytes of catalog transfers
 * (HEAD polls, catalogs, deltas, signatures: hyd_catalog_result) and of
 * manifest requests (hyd_manifest_config.counts), and generation
 * switches. Relaxed atomics (HYD_MOUNT_COUNT); one per mount, owned by
 * the program, borrowed by whatever fetches. */
struct hyd_mount_counts {
	uint64_t catalog_requests, catalog_bytes;
	uint64_t manifest_requests, manifest_bytes;
	uint64_t switches;
	uint64_t generation; /* served now: set at start and each switch */
};

/* Add n to a field of struct hyd_mount_counts (c may be NULL). */
#define HYD_MOUNT_COUNT(c, field, n)                                           \
	do {                                                                   \
		if (c)                                                         \
			__atomic_add_fetch(&(c)->field, (uint64_t)(n),         \
					   __ATOMIC_RELAXED);                  \
	} while (0)

/* curl's process-wide set-up and tear-down (curl_global_init, counted by
 * curl): once in main before any thread starts, and around a library call
 * that fetches (hyd_sync). 0 or -EIO. */
int hyd_fetch_global_init(void);
void hyd_fetch_global_cleanup(void);

/* Allocate a fetcher; no thread, no loop yet (safe before fork()). The
 * caller must have called hyd_fetch_global_init. Returns 0, -EINVAL, -ENOMEM.
 */
int hyd_fetch_new(const struct hyd_fetch_config *cfg, hyd_fetch **ret);

/* Create the loop, the multi handle and the loop thread (signals blocked in
 * it, so SIGTERM reaches the FUSE main thread). Returns 0 or -errno. */
int hyd_fetch_start(hyd_fetch *f);

/* Stop the loop: queued and active flights end with -ECANCELED, all
 * handles are closed, the thread is joined. Idempotent. */
void hyd_fetch_stop(hyd_fetch *f);

/* Begin stopping without waiting: every waiter is woken with -ECANCELED
 * soon, new submits get -ESHUTDOWN. Any thread; hyd_fetch_stop still joins.
 * For a process that is going away while reads are blocked. */
void hyd_fetch_cancel(hyd_fetch *f);

/* Stop (if needed) and free. NULL is a no-op. */
void hyd_fetch_free(hyd_fetch *f);

/* Ask for a chunk; see hyd_flights_join. Any thread but the loop thread.
 * Returns 1 / 0 with *ret set, or -errno (-ESHUTDOWN when not running). */
int hyd_fetch_submit(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
		     enum hyd_prio prio, uint64_t deadline_ns,
		     struct hyd_flight **ret);

/* A reader read (a FUSE read, served or not): for the next second, the
 * metadata requests around it are a job's, and backfill does not hold
 * for them (hyd_fetch_hold_background). Any thread; cheap. */
void hyd_fetch_note_read(hyd_fetch *f);

/* Wait for a submitted flight; see hyd_flights_wait. Blocks: never call
 * from the loop thread. */
int hyd_fetch_wait(hyd_fetch *f, struct hyd_flight *fl, uint64_t deadline_ns);
/* hyd_fetch_wait for a demand read: across a WAN (a round trip of
 * HYD_FETCH_WAN_RTT_NS or more, or none measured yet) a flight that is
 * still in a backfill transfer a round trip later (HYD_RESCUE_UNKNOWN_NS
 * before one is measured) is rescued (hyd_flights_rescue) and the read
 * takes whichever lands first: *fl is then the flight whose bytes to
 * use, a reference the caller gives back with hyd_fetch_release (the
 * call dropped the one it replaced). */
#define HYD_RESCUE_UNKNOWN_NS (20ull * 1000000ull)
int hyd_fetch_wait_demand(hyd_fetch *f, struct hyd_flight **fl,
			  uint64_t deadline_ns);
/* hyd_flights_rescue for backfill: the rescue's reference is dropped at
 * once (the store gets the chunk either way). 1 when one was made. */
int hyd_fetch_rescue(hyd_fetch *f, struct hyd_flight *fl, enum hyd_prio prio);
/* Has a submitted flight ended, so that hyd_fetch_wait returns at once? */
int hyd_fetch_ready(hyd_fetch *f, struct hyd_flight *fl);

/* The deadline the fetcher keeps for a flight: the latest of its joiners'
 * (HYD_DEADLINE_NONE once backfill asked for it). A waiter whose own
 * deadline is earlier hears no verdict from the fetcher by then. */
uint64_t hyd_fetch_deadline(hyd_fetch *f, struct hyd_flight *fl);

/* Submit pack obj's entries with want[i] set at backfill priority, all
 * at once (hyd_flights_join_pack: state[i] and fls[i] as there; each
 * fls[i] a reference to release). Returns 0, -ESHUTDOWN, -ENOMEM. */
int hyd_fetch_submit_pack(hyd_fetch *f, struct hyd_pack_obj *obj,
			  const uint8_t *want, unsigned watched,
			  struct hyd_flight **fls, uint8_t *state);
/* 1 when backfill should ask in packs: --cacheable, and the server has
 * not shown it has none. Any thread. */
int hyd_fetch_packs(const hyd_fetch *f);
/* The link as this fetcher's requests see it: *ret_rate the most body
 * bytes a second it received lately (0 before it received any), *ret_rtt
 * the least time from a request sent to its first byte lately (ns; 0 when
 * not known yet). For sizing a stream's window to the bandwidth-delay
 * product. Any thread; a snapshot. */
void hyd_fetch_link(const hyd_fetch *f, uint64_t *ret_rate, uint64_t *ret_rtt);
/* A round trip measured before the fetcher's first request (the
 * catalog's, hyd_catalog_result.rtt_ns) counts as its first sample; 0
 * is none. Before hyd_fetch_start. */
void hyd_fetch_link_seed(hyd_fetch *f, uint64_t rtt_ns);
/* Open up to n (at most HYD_FETCH_WARM_MAX) connections now, each with a
 * GET of BASE/HEAD, so the first reads find them open instead of paying
 * a round trip (and a TLS handshake) to connect. After hyd_fetch_start;
 * any thread. */
#define HYD_FETCH_WARM_MAX 8u
void hyd_fetch_warm(hyd_fetch *f, unsigned n);
/* From this round trip on the link is a WAN to the scheduling rules that
 * care: a request costs more than the bytes it moves (backfill's batches,
 * its order). */
#define HYD_FETCH_WAN_RTT_NS (10ull * 1000000ull)
/* The base URL the fetcher was made with ("http://host:port/v1/NAME"). */
const char *hyd_fetch_base_url(const hyd_fetch *f);

/* hyd_fetch_submit (watched 0) or hyd_fetch_submit_watched (1) through
 * hyd_flights_join_checked against the fetcher's store: 2 with *ret NULL
 * when no flight exists and the store has the chunk. */
int hyd_fetch_submit_checked(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
			     enum hyd_prio prio, uint64_t deadline_ns,
			     unsigned watched, struct hyd_flight **ret);

/* The read path's one look in the store per miss: take
 * hyd_fetch_stamp(f, id) before looking; after a miss, submit with
 * hyd_fetch_submit_after, which asks the store again only when a flight
 * that may have stored the chunk ended in between (hyd_flights_join_after).
 * Returns as hyd_fetch_submit_checked. */
uint32_t hyd_fetch_stamp(hyd_fetch *f, const chunk_id *id);
int hyd_fetch_submit_after(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
			   enum hyd_prio prio, uint64_t deadline_ns,
			   unsigned watched, uint32_t stamp,
			   struct hyd_flight **ret);

/* Someone is browsing (a FUSE metadata request): backfill transfers hold
 * still for ms from now, so listing the tree does not share the CPU and
 * the link with the background. Demand reads are not held. Any thread;
 * one atomic load (and at most one store). */
void hyd_fetch_hold_background(hyd_fetch *f, unsigned ms);

/* 1 while such a hold lasts and no reader read in the last second (a
 * job's lookups between its reads are not browsing; hyd_fetch_note_read),
 * else 0: backfill's transfers and its scheduler hold still meanwhile.
 * Any thread. */
int hyd_fetch_browsing(hyd_fetch *f);

/* 1 while a browse hold lasts (hyd_fetch_hold_background) or a reader read in
 * the last within_ns, else 0: work nobody waits on (--into's landing)
 * holds still meanwhile. Any thread; two atomic loads. */
int hyd_fetch_serving(hyd_fetch *f, uint64_t within_ns);

/* Give back the reference from hyd_fetch_submit. NULL is a no-op. */
void hyd_fetch_release(hyd_fetch *f, struct hyd_flight *fl);

void hyd_fetch_stats(hyd_fetch *f, struct hyd_fetch_stats *ret);

/* hyd_fetch_submit through hyd_flights_join_watched: the done hook (see
 * hyd_fetch_set_done_hook) learns how the flight ended, so the caller may
 * hyd_fetch_release at once. */
int hyd_fetch_submit_watched(hyd_fetch *f, const chunk_id *id, uint32_t raw_len,
			     enum hyd_prio prio, uint64_t deadline_ns,
			     struct hyd_flight **ret);

/* See hyd_flights_set_done_hook. Call before hyd_fetch_start. */
void hyd_fetch_set_done_hook(hyd_fetch *f,
			     void (*done)(void *arg,
					  const struct hyd_flight *fl,
					  int result),
			     void *arg);

/* A deadline far enough away to mean "keep retrying" (backfill). */
#define HYD_DEADLINE_NONE (UINT64_MAX / 4)

#endif
