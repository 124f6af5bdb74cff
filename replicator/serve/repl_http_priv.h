/*
 * replicator/serve/repl_http_priv.h — the replicator's requests on the
 * shared engine (catalog/httpd/httpd.h): what a request carries for the
 * routes (repl_routes*.c), the glue that hands the engine's requests to
 * them (repl_http.c), and the batch codec by how a connection drains
 * (repl_adapt.c).
 *
 * The engine reads, queues and orders the requests, writes the answers
 * and keeps the limits; a route answers through httpd_req_* on &req->h.
 * A request is reference counted (httpd_req_ref/unref on &req->h: its
 * place in the queue, each write in flight, and each worker job, timer
 * or stream of a route). When its connection goes away, req->h.dead is
 * set and the route's callbacks only drop what they hold. Everything
 * here runs on the loop thread.
 */
#ifndef FERRY_REPL_HTTP_PRIV_H
#define FERRY_REPL_HTTP_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "catalog/catalog.h"
#include "catalog/httpd/httpd.h"
#include "replicator/serve/repl_auth.h"

#define REPL_BATCH_MAX 1024u
#define REPL_BODY_MAX (CHUNK_ID_LEN * REPL_BATCH_MAX)

struct repl_server;
struct repl_ns;

struct repl_req {
	struct httpd_req h;	 /* first: the engine's request */
	struct repl_server *srv; /* set at dispatch */
	/* Authorization headers: how many came, the last one's value (cut
	 * at REPL_AUTH_MAX, auth_over set), wiped when the request goes */
	unsigned auth_n;
	int auth_over;
	size_t auth_len;
	char auth[REPL_AUTH_MAX + 1];
	/* the namespace it was dispatched to, with a reference dropped when
	 * the request goes (after on_free): a namespace removed meanwhile
	 * outlives what its requests hold */
	struct repl_ns *ns;
	/* metrics (repl_metrics.c): what was asked (enum repl_route_kind) */
	int kind;
	/* route state, freed by on_free when the request goes */
	void *route;
	void (*on_free)(struct repl_req *req);
	/* work queued once its bytes are reserved (repl_req_queue) */
	uv_work_t *work;
	uv_work_cb work_cb;
	uv_after_work_cb after_cb;
};

/* The replicator's request of an engine request (and back: &req->h). */
static inline struct repl_req *repl_req_of(struct httpd_req *h)
{
	return (struct repl_req *)h;
}

/* Queue work for req, as uv_queue_work would (w->data is what work and
 * after see), in turn with other tenants' work (repl_jobs.c): after runs
 * with UV_ECANCELED, work not at all, when req's connection went away
 * first. The caller holds a reference of req until after. 0, -ENOMEM. */
int repl_req_work(struct repl_req *req, uv_work_t *w, uv_work_cb work,
		  uv_after_work_cb after);

/* The same for a chunk of a batch: bulk work, which goes after all other
 * and holds only some of the pool's threads (repl_jobs.c). */
int repl_req_work_bulk(struct repl_req *req, uv_work_t *w, uv_work_cb work,
		       uv_after_work_cb after);

/* Queue work (w, run on a worker; after on the loop, which must drop a
 * reference of req) once room bytes are reserved for req's answer: now,
 * or when its tenant's share allows (httpd_req_reserve). A client that
 * does not read so holds no more than its share. Answers 500 when the
 * work cannot be queued. */
void repl_req_queue(struct repl_req *req, size_t room, uv_work_t *w,
		    uv_work_cb work, uv_after_work_cb after);

/* Create the engine for srv (its limits, TLS, counters, routes), bound
 * and listening on sa, or with sa NULL on the Unix socket at unix_path.
 * Logs nothing; 0 or -errno. */
int repl_http_start(struct repl_server *srv, const struct sockaddr *sa,
		    const char *unix_path);

/* -- codec by how a connection drains (repl_adapt.c) -- */

#define REPL_ADAPT_ONE 1024

/* A connection's recent backlog: the average, 0..REPL_ADAPT_ONE, of
 * "bytes were still waiting to be sent" over the frames launched. */
struct repl_adapt {
	int backlog;
	int lz4; /* the current choice */
};

/* Start at zstd (a full backlog). */
void repl_adapt_init(struct repl_adapt *a);

/* Note that a batch frame is being handed to its connection while unsent
 * bytes (the socket's not yet sent plus libuv's queue) wait there; then
 * a->lz4 is 1 when the frames made next should be lz4, 0 when they should
 * keep --codec auto's zstd. */
void repl_adapt_note(struct repl_adapt *a, size_t unsent);

/* repl_adapt_note for req's connection, with its unsent bytes now. */
void repl_http_adapt_note(struct repl_req *req);

/* 1 when the next batch frame for req's connection should be lz4 (the
 * link keeps up with zstd's pace: repl_adapt.c), else 0. */
int repl_http_adapt_lz4(struct repl_req *req);

/* -- routes (repl_routes.c) -- */

/* Answer the request at the head of its connection's queue. */
void repl_routes_dispatch(struct repl_req *req);

#endif
