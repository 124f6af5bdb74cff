/*
 * replicator/serve/repl_metrics_priv.h — the replicator's counters for
 * GET /metrics (Prometheus text, repl_metrics.c; every metric is listed
 * in docs/metrics.md).
 *
 * Threads: every counter here is touched on the loop thread only (the
 * places that count — the engine's hooks at accept, the sweep, the first
 * write of an answer and an error answer (repl_http.c), the routes'
 * after-work callbacks — all run there), so
 * they are plain integers: no lock, no atomic on the hot path. Per
 * namespace numbers are not kept here: the scrape reads each namespace's
 * own (struct repl_stats, its generation, its hasher) from the namespaces
 * that exist at that moment, so a namespace that comes or goes needs
 * nothing from this file.
 */
#ifndef FERRY_REPL_METRICS_PRIV_H
#define FERRY_REPL_METRICS_PRIV_H

#include <stdint.h>

#include "catalog/base/base.h"
#include "catalog/httpd/httpd.h"
#include "replicator/serve/repl_serve.h"

struct repl_req;
struct repl_server;

/* What a request asked for: the "route" label. */
enum repl_route_kind {
	REPL_RK_OTHER = 0, /* unknown path, malformed request */
	REPL_RK_HEAD,
	REPL_RK_STATS,
	REPL_RK_CHUNKS,
	REPL_RK_CATALOG,
	REPL_RK_DELTA,
	REPL_RK_CHUNK,
	REPL_RK_MANIFEST,
	REPL_RK_MANIFESTS,
	REPL_RK_SIGNATURE,
	REPL_RK_PACK,
	REPL_RK_METRICS,
	REPL_RK_N
};

/* Why an answer was an error or was cut: the "kind" label of
 * ferry_replicator_errors_total. The first ones are the error codes of
 * docs/protocol.md (httpd_req_error's code); ABORTED is a response cut
 * mid-body (httpd_req_abort). */
enum repl_err_kind {
	REPL_ERR_BAD_REQUEST = 0,
	REPL_ERR_UNAUTHORIZED,
	REPL_ERR_FORBIDDEN,
	REPL_ERR_NOT_FOUND,
	REPL_ERR_METHOD,
	REPL_ERR_CHANGED,
	REPL_ERR_SUPERSEDED,
	REPL_ERR_TOO_LARGE,
	REPL_ERR_URI_TOO_LONG,
	REPL_ERR_HEADERS_TOO_LARGE,
	REPL_ERR_NOT_READY,
	REPL_ERR_INTERNAL,
	REPL_ERR_ABORTED,
	REPL_ERR_N
};

#define REPL_STATUS_CLASSES 5 /* 1xx .. 5xx */

struct repl_metrics {
	enum repl_metrics_access access; /* never AUTO once the server runs */
	uint64_t requests[REPL_RK_N][REPL_STATUS_CLASSES];
	struct base_hist ttfb;	 /* request head parsed -> first byte written */
	uint64_t response_bytes; /* heads and bodies handed to connections */
	uint64_t errors[REPL_ERR_N];
	uint64_t conns_accepted;
	uint64_t conns_limited[HTTPD_LIM_N]; /* by enum httpd_limit */
};

/* Zero the counters, set up the histogram; access AUTO is resolved from
 * tokens (non-zero: --tokens is on). */
void repl_metrics_init(struct repl_metrics *m, enum repl_metrics_access access,
		       int tokens);

/* The first bytes of req's answer were handed to its connection: count
 * the request (route kind, status class) and its time to first byte. */
void repl_metrics_first_byte(struct repl_req *req);

/* An error answer with this protocol code (httpd_req_error's). */
void repl_metrics_error_code(struct repl_server *srv, const char *code);

/* GET /metrics: the access rule, then the text. Loop thread. */
void repl_route_metrics(struct repl_req *req);

#endif
