/*
 * hydrator/fetch/hyd_fetch_loop_priv.h — the fetcher's own structures,
 * shared by its files and by nothing else: hyd_fetch.c        loop, sockets,
 * timers, single GETs, public API hyd_fetch_batch.c  POST BASE/chunks transfers
 * and their frame works hyd_fetch_pace.c   token bucket, backfill hold, stall
 * watchdog Every field under "loop thread only" is touched by the fetch loop
 * thread alone (and by hyd_fetch_start before that thread exists).
 */
#ifndef FERRY_HYD_FETCH_LOOP_PRIV_H
#define FERRY_HYD_FETCH_LOOP_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <uv.h>

#include "hydrator/fetch/hyd_batch_parse_priv.h"
#include "hydrator/fetch/hyd_bwlimit.h"
#include "hydrator/fetch/hyd_fetch.h"

#define HYD_CODER_POOL 16u
/* The most raw bytes a batch asks for (1,024 chunks of 64 KiB). */
#define HYD_BATCH_BYTES_MAX (64ull << 20)
/* A transfer moving less than LOW_SPEED bytes/s for LOW_TIME s is stalled. */
#define HYD_LOW_SPEED_BYTES 1024L
#define HYD_LOW_SPEED_TIME_S 10L
/* curl's receive buffer for batches and packs (its default is 16 KiB):
 * a body of megabytes then takes a sixteenth of the reads and write
 * callbacks. Not for single chunks: an easy handle is made per request. */
#define HYD_BULK_BUFFER (256L * 1024L)

/* Where a transfer is. CURL and RETRY count against `connections`: during
 * an outage only that many flights back off and retry, the rest stay
 * queued in priority order. */
enum xfer_where { XFER_IDLE, XFER_CURL, XFER_RETRY, XFER_WORK, XFER_DONE };

/* Why curl holds a transfer paused (bits of hyd_xfer.paused). */
#define HYD_PAUSE_BUCKET 1u /* --bwlimit: no tokens */
#define HYD_PAUSE_HOLD 2u   /* backfill yields to demand reads and browsing */
#define HYD_PAUSE_WORK 4u   /* too many batch frames wait for verification */

/* One socket curl wants watched. */
struct hyd_poll {
	uv_poll_t h;
	hyd_fetch *f;
	curl_socket_t fd;
	struct hyd_poll *prev, *next;
};

/* The batch half of a transfer: flights not yet delivered, in request
 * order (an entry is NULL once its frame went to a frame work). */
struct hyd_batch_xfer {
	struct hyd_flight **fls;
	size_t n;
	chunk_id *ids;	/* request body of the current attempt */
	uint32_t *lens; /* catalog raw lengths, same order */
	size_t body_n;	/* entries in ids/lens and in the parser */
	struct hyd_batch_parser p;
	int parser_live;
	long code;	 /* HTTP status, once on_write saw it */
	int parse_err;	 /* the parser's error that aborted the body */
	unsigned peeled; /* flights sent off alone after broken bodies */
	struct curl_slist *hdrs; /* request headers, borrowed by curl */
	/* A pack (GET obj->url): fls has obj->n entries, ours at their
	 * places in its list, NULL elsewhere; a reference. */
	struct hyd_pack_obj *obj;
};

/* The loop's side of one transfer: one flight by GET, or a batch. */
struct hyd_xfer {
	hyd_fetch *f;
	struct hyd_flight *fl;	   /* single: holds the fetch reference */
	struct hyd_batch_xfer *bx; /* batch: NULL for a single */
	CURL *easy;
	char *url;
	uint8_t *body;
	size_t body_len, body_cap;
	enum xfer_where where;
	int bg;		     /* backfill class: counts against bg_max */
	int urgent;	     /* demand/readahead: backfill yields to it */
	int near;	     /* backfill that follows a job: never held */
	uint64_t want_bytes; /* raw bytes it asks for (urgent_bytes) */
	unsigned paused;     /* HYD_PAUSE_* while curl holds it paused */
	uint64_t last_rx_ns; /* last byte in (or start, or unpause) */
	unsigned requests;   /* HTTP requests made for this transfer */
	unsigned attempts;   /* transient failures so far */
	unsigned mismatches; /* bad frames so far */
	uint64_t retry_at_ns;
	int work_rc;
	uv_work_t work;
	char why[CURL_ERROR_SIZE + 64]; /* last failure, for the one log line */
	char errbuf[CURL_ERROR_SIZE];
	struct hyd_xfer *prev, *next;
};

/* One frame out of a batch, on its way through decode/verify/store. */
struct hyd_fwork {
	hyd_fetch *f;
	struct hyd_flight *fl; /* holds the fetch reference */
	uint8_t *frame;
	size_t frame_len;
	int rc;
	char why[96];
	uv_work_t work;
	struct hyd_fwork *next;
};

/* A round trip is the third least sample of an epoch (LINK_EPOCH_NS),
 * or the least of this epoch's and the last one's: a sample is the time
 * from a request sent to its first byte, which queueing only lengthens;
 * but curl notes "sent" when it next looks at the transfer, and a
 * thread that stalls between the write and that look (a loaded machine)
 * gives a sample shorter than the path. One or two such samples an epoch
 * are not taken for the link. */
#define HYD_RTT_LOW 3u
struct hyd_rtt {
	uint64_t low[HYD_RTT_LOW]; /* this epoch's least, ascending; 0: none */
	uint64_t prev;		   /* the last epoch's estimate; 0: none */
	uint64_t epoch_ns;	   /* when this epoch began */
};
/* Takes one sample at time now; returns the estimate (0: none yet). */
uint64_t hyd_rtt_add(struct hyd_rtt *r, uint64_t ns, uint64_t now);

struct hyd_fetch {
	char *base_url;
	char *batch_url;
	hyd_store *store;
	uint32_t max_raw;
	unsigned connections; /* bg_max + read_max: curl's per-host cap */
	unsigned bg_max;
	unsigned read_max; /* demand and readahead transfers */
	uint64_t read_batch_bytes;
	unsigned batch_max;
	uint64_t batch_bytes;
	uint64_t bwlimit;
	long connect_timeout_ms;
	const struct hyd_creds *creds; /* borrowed; may be NULL */

	struct hyd_flights flights;
	struct hyd_fetch_stats stats; /* relaxed atomics; not last_error */
	uint64_t browse_until_ns; /* atomic; see hyd_fetch_hold_background */
	uint64_t read_at_ns;	  /* atomic; see hyd_fetch_note_read */
	pthread_mutex_t err_lock; /* guards stats.last_error */

	pthread_mutex_t coder_lock; /* frame coders for the pool threads */
	frame_coder *coders[HYD_CODER_POOL];
	size_t n_coders;

	/* Frames put with hyd_store_put_async and not yet durable: their
	 * flights end on the loop when the store says so (stored, a list
	 * under stored_lock, filled by the store's thread, then
	 * stored_async). store_pending is atomic; close waits for 0. */
	pthread_mutex_t stored_lock;
	struct hyd_stored *stored;
	unsigned store_pending;

	/* loop thread only */
	uv_loop_t loop;
	uv_async_t async;
	uv_async_t stored_async;
	uv_timer_t curl_timer;
	uv_timer_t retry_timer;
	uv_timer_t pace_timer;	 /* bucket refills and unpausing */
	uv_timer_t tick_timer;	 /* stall watchdog, once a second */
	uv_timer_t gather_timer; /* a backfill batch waiting to fill */
	CURLM *multi;
	struct hyd_poll *polls;
	struct hyd_xfer *xfers;
	unsigned n_busy;       /* transfers in XFER_CURL or XFER_RETRY */
	unsigned n_bg;	       /* of those, backfill class */
	unsigned n_urgent;     /* urgent transfers in XFER_CURL */
	uint64_t urgent_bytes; /* their want_bytes: what reads have on the
				* wire (backfill holds past a share of the
				* link's bandwidth-delay product) */
	int batch_off;	       /* the server cannot do batches: GETs only */
	int cacheable;	       /* backfill by packs (GET), never a POST */
	int pack_off;	       /* the server has no packs: single GETs */
	struct hyd_bucket bucket;
	int pace_armed;
	struct hyd_fwork *fq_head,
	    *fq_tail; /* frames waiting for a pool slot */
	size_t fq_len;
	unsigned fw_running; /* frame works in the pool */
	unsigned fw_max;     /* most frame works in the pool at once */
	uint64_t rng;	     /* xorshift state for backoff jitter */
	/* base_now_ns since when no request gets through (a flight ended
	 * with -ETIMEDOUT after transient failures, and nothing verified
	 * since); 0 while the link is up. Queue time counts against a
	 * read's deadline only then (hyd_flights_expire). */
	uint64_t down_since;
	/* The link as the requests see it (hyd_fetch_link): round trip from
	 * the times from a request sent to its first byte (struct hyd_rtt);
	 * rate = the most body bytes a second over the last LINK_RATE_TICKS
	 * ticks. Written here, read anywhere. */
	struct hyd_rtt rtt;			/* loop only */
	uint64_t rtt_ns;			/* __atomic */
	uint64_t rate_ring[32];			/* loop only */
	unsigned rate_pos;			/* loop only */
	uint64_t rate_last_bytes, rate_last_ns; /* loop only */
	uint64_t rate_bps;			/* __atomic, bytes/s */
	int shutting_down;
	/* connections opened ahead of the first reads (hyd_fetch_warm):
	 * wanted (any thread, __atomic), and their GETs in curl (loop) */
	unsigned warm_want;
	CURL *warm[HYD_FETCH_WARM_MAX];
	int cleaning; /* inside curl_multi_cleanup */
	int closed;

	/* owner thread (start/stop) only */
	pthread_t thread;
	int started;
};

#define STAT_ADD(f, field, n)                                                  \
	__atomic_fetch_add(&(f)->stats.field, (uint64_t)(n), __ATOMIC_RELAXED)

/* -- hyd_fetch.c -- */
void hyd_fetch__pump(hyd_fetch *f);
void hyd_fetch__maybe_close(hyd_fetch *f);
void hyd_fetch__xfer_set(struct hyd_xfer *x, enum xfer_where w);
/* A new transfer with the options every request shares (not started,
 * linked into f->xfers); NULL on allocation failure. */
struct hyd_xfer *hyd_fetch__xfer_alloc(hyd_fetch *f);
void hyd_fetch__xfer_free(struct hyd_xfer *x);
/* Backoff before retry number `attempts` (0-based): capped exponential
 * with jitter, in ms. */
uint64_t hyd_fetch__backoff_ms(hyd_fetch *f, unsigned attempts);
void hyd_fetch__arm_retry_timer(hyd_fetch *f);
/* A transfer got its whole answer: its time to first byte is a round
 * trip sample. Loop thread. */
void hyd_fetch__link_sample(hyd_fetch *f, CURL *easy);
/* Once a tick: the body bytes since the last one are a rate sample. */
void hyd_fetch__link_tick(hyd_fetch *f, uint64_t now);
/* A transient failure (no connection, reset, 5xx): the link may be down
 * (f->down_since). Loop thread. */
void hyd_fetch__note_transient(hyd_fetch *f);
/* Remember a failure for status (one line). Any thread. */
void hyd_fetch__note_error(hyd_fetch *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Pool thread: decode frame (checked against fl's catalog length), verify
 * the hash, publish to the waiters, store. 0 when verified (fl->store_rc
 * says what the store did), -EBADMSG for a bad frame, -ENOMEM. With
 * async set the put does not wait for durability: HYD_LAND_STORING means
 * it is on its way, and the loop ends the flight (store_rc set) when the
 * store says its group is done; the caller must not end it. */
#define HYD_LAND_STORING 1
int hyd_fetch__frame_land(hyd_fetch *f, struct hyd_flight *fl,
			  const uint8_t *frame, size_t frame_len, int async,
			  char *why, size_t whycap);

/* -- hyd_fetch_batch.c -- */
/* Start one batch of up to batch_max queued flights of prio (near or
 * backfill: batch_bytes of them or more, counted against bg_max; demand or
 * readahead: read_batch_bytes, urgent). Returns 1 when a transfer was started
 * (or flights were dealt with), 0 when none was queued. */
int hyd_fetch__batch_launch(hyd_fetch *f, enum hyd_prio prio);
void hyd_fetch__batch_start(struct hyd_xfer *x);
void hyd_fetch__batch_done(struct hyd_xfer *x, CURLcode res);
/* End the batch: every undelivered flight finishes with rc. */
void hyd_fetch__batch_end(struct hyd_xfer *x, int rc);
void hyd_fetch__batch_free(struct hyd_batch_xfer *bx);
/* CURLOPT_WRITEFUNCTION of batch and pack answers. */
size_t hyd_fetch__batch_write(char *ptr, size_t size, size_t nmemb,
			      void *userdata);
/* Send x's flights from index from on off alone (GETs). */
void hyd_fetch__batch_requeue(struct hyd_xfer *x, size_t from);
/* Whether x's answer `code` says the server has no such endpoint at all
 * (a static store behind a web server or in a bucket): 405, 501, or a 404
 * that is not the replicator's own (its errors are JSON). */
int hyd_fetch__no_endpoint(struct hyd_xfer *x, long code);

/* -- hyd_fetch_pack.c -- */
/* Start the pack at the head of the backfill queue: 1 when started (or
 * its flights dealt with), 0 when the head flight has no pack. */
int hyd_fetch__pack_launch(hyd_fetch *f);
/* A pack transfer left curl. */
void hyd_fetch__pack_done(struct hyd_xfer *x, CURLcode res);
/* Flights of a pack transfer not delivered yet. */
size_t hyd_fetch__pack_left(const struct hyd_batch_xfer *bx);
/* Shutdown: frames not yet in the pool end with -ECANCELED. */
void hyd_fetch__fwork_cancel_queued(hyd_fetch *f);

/* -- hyd_fetch_pace.c -- */
void hyd_fetch__pace_init(hyd_fetch *f);
/* Write callbacks ask before taking n bytes: 0 to take them (and the
 * bucket is charged), else the HYD_PAUSE_* reason to pause. */
unsigned hyd_fetch__gate(struct hyd_xfer *x, size_t n);
/* Something may let paused transfers go: look soon. */
void hyd_fetch__pace_kick(hyd_fetch *f);
/* CURLOPT_SOCKOPTFUNCTION when --bwlimit is on. */
int hyd_fetch__sockopt(void *clientp, curl_socket_t fd, curlsocktype purpose);

#endif
