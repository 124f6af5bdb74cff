/*
 * replicator/serve/repl_metrics.c — GET /metrics: the replicator's counters in
 * the Prometheus text format (base_prom.c), and the few calls the engine's
 * hooks make to count (repl_metrics_priv.h, repl_http.c).
 *
 * Who may read it (--metrics): the per-namespace series name every
 * namespace and what was served from it, so with --tokens (tenants that
 * must not learn of one another) the default answers only clients on a
 * loopback address, and everyone else gets 403; without tokens every
 * namespace is open anyway and so is /metrics. `--metrics open` opens it
 * with tokens too (a warning at start), `--metrics off` makes it a 404.
 *
 * The scrape runs on the loop thread, like every counter it reads: it
 * walks the namespaces that exist at that moment and builds the text in
 * one buffer (a few KiB per namespace), answered with one write.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_metrics_priv.h"
#include "replicator/serve/repl_serve_priv.h"

/* Time to first byte: from 100 us (a HEAD from memory) to 10 s (a chunk
 * whose file must be read and hashed first, a manifest waiting). */
static const double TTFB_BOUNDS[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,	    2.5,   5,	 10};

static const char *const ROUTE_NAMES[REPL_RK_N] = {
    [REPL_RK_OTHER] = "other",	       [REPL_RK_HEAD] = "head",
    [REPL_RK_STATS] = "stats",	       [REPL_RK_CHUNKS] = "chunks",
    [REPL_RK_CATALOG] = "catalog",     [REPL_RK_DELTA] = "delta",
    [REPL_RK_CHUNK] = "chunk",	       [REPL_RK_MANIFEST] = "manifest",
    [REPL_RK_MANIFESTS] = "manifests", [REPL_RK_SIGNATURE] = "signature",
    [REPL_RK_PACK] = "pack",	       [REPL_RK_METRICS] = "metrics",
};

/* The protocol's error codes (docs/protocol.md), then ours. */
static const char *const ERR_NAMES[REPL_ERR_N] = {
    [REPL_ERR_BAD_REQUEST] = "bad_request",
    [REPL_ERR_UNAUTHORIZED] = "unauthorized",
    [REPL_ERR_FORBIDDEN] = "forbidden",
    [REPL_ERR_NOT_FOUND] = "not_found",
    [REPL_ERR_METHOD] = "method_not_allowed",
    [REPL_ERR_CHANGED] = "changed",
    [REPL_ERR_SUPERSEDED] = "superseded",
    [REPL_ERR_TOO_LARGE] = "too_large",
    [REPL_ERR_URI_TOO_LONG] = "uri_too_long",
    [REPL_ERR_HEADERS_TOO_LARGE] = "headers_too_large",
    [REPL_ERR_NOT_READY] = "not_ready",
    [REPL_ERR_INTERNAL] = "internal",
    [REPL_ERR_ABORTED] = "aborted",
};

static const char *const LIMIT_NAMES[HTTPD_LIM_N] = {
    [HTTPD_LIM_PER_ADDR] = "per_addr",	   [HTTPD_LIM_CAP_WAIT] = "cap_wait",
    [HTTPD_LIM_EVICTED] = "evicted",	   [HTTPD_LIM_NO_FDS] = "no_fds",
    [HTTPD_LIM_HEADER] = "header_timeout", [HTTPD_LIM_IDLE] = "idle_timeout",
    [HTTPD_LIM_UNREAD] = "answer_unread",  [HTTPD_LIM_RECLAIMED] = "reclaimed",
};

static const char *const CLASS_NAMES[REPL_STATUS_CLASSES] = {
    "1xx", "2xx", "3xx", "4xx", "5xx"};

void repl_metrics_init(struct repl_metrics *m, enum repl_metrics_access access,
		       int tokens)
{
	memset(m, 0, sizeof(*m));
	if (access == REPL_METRICS_AUTO)
		access = tokens ? REPL_METRICS_LOOPBACK : REPL_METRICS_OPEN;
	m->access = access;
	(void)base_hist_init(&m->ttfb, TTFB_BOUNDS,
			     sizeof(TTFB_BOUNDS) / sizeof(TTFB_BOUNDS[0]));
}

int repl_metrics_access_parse(const char *s, enum repl_metrics_access *ret)
{
	if (!strcmp(s, "open"))
		*ret = REPL_METRICS_OPEN;
	else if (!strcmp(s, "loopback"))
		*ret = REPL_METRICS_LOOPBACK;
	else if (!strcmp(s, "off"))
		*ret = REPL_METRICS_OFF;
	else
		return -EINVAL;
	return 0;
}

void repl_metrics_first_byte(struct repl_req *req)
{
	struct repl_metrics *m = &((struct repl_server *)req->h.ctx)->metrics;
	int cls = req->h.status / 100 - 1;
	uint64_t now = uv_hrtime();

	if (cls < 0 || cls >= REPL_STATUS_CLASSES)
		cls = REPL_STATUS_CLASSES - 1;
	if (req->kind < 0 || req->kind >= REPL_RK_N)
		req->kind = REPL_RK_OTHER;
	m->requests[req->kind][cls]++;
	base_hist_observe_ns(&m->ttfb, req->h.head_ns && now > req->h.head_ns
					   ? now - req->h.head_ns
					   : 0);
}

void repl_metrics_error_code(struct repl_server *srv, const char *code)
{
	size_t i;

	/* a dozen short words, once per error answer */
	for (i = 0; i < REPL_ERR_ABORTED; i++)
		if (!strcmp(code, ERR_NAMES[i])) {
			srv->metrics.errors[i]++;
			return;
		}
	srv->metrics.errors[REPL_ERR_INTERNAL]++;
}

static void render_http(struct base_prom *p, const struct repl_server *srv)
{
	const struct repl_metrics *m = &srv->metrics;
	struct base_prom_label l[2];
	size_t i, j;

	base_prom_family(p, "ferry_replicator_requests_total", "counter",
			 "Requests answered, by route and status class "
			 "(counted when the first byte of the answer is "
			 "written).");
	for (i = 0; i < REPL_RK_N; i++)
		for (j = 0; j < REPL_STATUS_CLASSES; j++) {
			if (!m->requests[i][j])
				continue;
			l[0] =
			    (struct base_prom_label){"route", ROUTE_NAMES[i]};
			l[1] = (struct base_prom_label){"code", CLASS_NAMES[j]};
			base_prom_u64(p, "ferry_replicator_requests_total", l,
				      2, m->requests[i][j]);
		}
	base_prom_family(p, "ferry_replicator_time_to_first_byte_seconds",
			 "histogram",
			 "From a request's head parsed to the first byte of "
			 "its answer written, every request.");
	base_prom_hist(p, "ferry_replicator_time_to_first_byte_seconds", NULL,
		       0, &m->ttfb);
	base_prom_family(p, "ferry_replicator_response_bytes_total", "counter",
			 "Bytes of answers (heads and bodies) handed to "
			 "connections, before TLS.");
	base_prom_u64(p, "ferry_replicator_response_bytes_total", NULL, 0,
		      m->response_bytes);
	base_prom_family(p, "ferry_replicator_errors_total", "counter",
			 "Error answers by protocol error code, and answers "
			 "cut mid-body (aborted).");
	for (i = 0; i < REPL_ERR_N; i++) {
		l[0] = (struct base_prom_label){"kind", ERR_NAMES[i]};
		base_prom_u64(p, "ferry_replicator_errors_total", l, 1,
			      m->errors[i]);
	}
	base_prom_family(p, "ferry_replicator_connections_open", "gauge",
			 "Client connections open now.");
	base_prom_u64(p, "ferry_replicator_connections_open", NULL, 0,
		      httpd_server_conns(srv->http));
	base_prom_family(p, "ferry_replicator_answer_bytes", "gauge",
			 "Bytes held in memory for answers now (frames read "
			 "ahead, read buffers, request bodies), within "
			 "--max-inflight.");
	base_prom_u64(p, "ferry_replicator_answer_bytes", NULL, 0,
		      httpd_server_inflight(srv->http));
	base_prom_family(p, "ferry_replicator_connections_accepted_total",
			 "counter", "Client connections accepted.");
	base_prom_u64(p, "ferry_replicator_connections_accepted_total", NULL, 0,
		      m->conns_accepted);
	base_prom_family(p, "ferry_replicator_connections_limited_total",
			 "counter",
			 "Connections refused, closed or kept waiting by a "
			 "limit, by reason.");
	for (i = 0; i < HTTPD_LIM_N; i++) {
		l[0] = (struct base_prom_label){"reason", LIMIT_NAMES[i]};
		base_prom_u64(p, "ferry_replicator_connections_limited_total",
			      l, 1, m->conns_limited[i]);
	}
}

/* One counter or gauge family with a sample per namespace; get reads the
 * value off a namespace. */
static void per_ns(struct base_prom *p, const struct repl_server *srv,
		   const char *name, const char *type, const char *help,
		   uint64_t (*get)(const struct repl_ns *ns))
{
	struct base_prom_label l;
	size_t i;

	base_prom_family(p, name, type, help);
	for (i = 0; i < srv->n_ns; i++) {
		l = (struct base_prom_label){"namespace", srv->ns[i]->name};
		base_prom_u64(p, name, &l, 1, get(srv->ns[i]));
	}
}

static uint64_t ns_ready(const struct repl_ns *ns)
{
	return ns->state == REPL_NS_READY;
}
static uint64_t ns_generation(const struct repl_ns *ns)
{
	return ns->generation;
}
static uint64_t ns_rescans(const struct repl_ns *ns)
{
	return ns->rescans;
}
static uint64_t ns_requests(const struct repl_ns *ns)
{
	return ns->stats.requests;
}
static uint64_t ns_chunks(const struct repl_ns *ns)
{
	return ns->stats.chunks_served;
}
static uint64_t ns_chunk_bytes(const struct repl_ns *ns)
{
	return ns->stats.chunk_bytes_served;
}
static uint64_t ns_frame_bytes(const struct repl_ns *ns)
{
	return ns->stats.frame_bytes_served;
}
static uint64_t ns_lz4_frames(const struct repl_ns *ns)
{
	return ns->stats.lz4_frames_served;
}
static uint64_t ns_zstd_frames(const struct repl_ns *ns)
{
	return ns->stats.zstd_frames_served;
}
static uint64_t ns_manifests(const struct repl_ns *ns)
{
	return ns->stats.manifests_served;
}
static uint64_t ns_mismatches(const struct repl_ns *ns)
{
	return ns->stats.mismatches;
}
static uint64_t ns_rehashed(const struct repl_ns *ns)
{
	return ns->stats.chunks_rehashed;
}

/* The hashing of a namespace's served generation, as /stats has it. */
static void ns_hash(const struct repl_ns *ns, struct repl_hasher_stats *h)
{
	memset(h, 0, sizeof(*h));
	if (ns->hasher)
		repl_hasher_stats(ns->hasher, h);
	else if (ns->hash_known)
		*h = ns->hash;
	/* pending is total - done: never below zero */
	if (h->files_done > h->files_total)
		h->files_done = h->files_total;
	if (h->bytes_done > h->bytes_total)
		h->bytes_done = h->bytes_total;
}

/* Hashing progress: in the text format a family's samples follow its
 * HELP and TYPE lines as one block, so files then bytes, each with every
 * namespace. */
static void render_hashing(struct base_prom *p, const struct repl_server *srv)
{
	struct repl_hasher_stats h;
	struct base_prom_label l[2];
	size_t i, b;

	for (b = 0; b < 2; b++) {
		const char *name = b ? "ferry_replicator_hash_bytes"
				     : "ferry_replicator_hash_files";

		base_prom_family(
		    p, name, "gauge",
		    b ? "Bytes of the files of the served generation left "
			"for background hashing: done or pending."
		      : "Files of the served generation left for background "
			"hashing: done (recorded) or pending.");
		for (i = 0; i < srv->n_ns; i++) {
			ns_hash(srv->ns[i], &h);
			l[0] = (struct base_prom_label){"namespace",
							srv->ns[i]->name};
			l[1] = (struct base_prom_label){"state", "done"};
			base_prom_u64(p, name, l, 2,
				      b ? h.bytes_done : h.files_done);
			l[1] = (struct base_prom_label){"state", "pending"};
			base_prom_u64(p, name, l, 2,
				      b ? h.bytes_total - h.bytes_done
					: h.files_total - h.files_done);
		}
	}
}

static void render_ns(struct base_prom *p, const struct repl_server *srv)
{
	per_ns(p, srv, "ferry_replicator_namespace_ready", "gauge",
	       "1 when the namespace is scanned and served, else 0.", ns_ready);
	per_ns(p, srv, "ferry_replicator_generation", "gauge",
	       "The generation served now (0 before the first scan ends).",
	       ns_generation);
	per_ns(p, srv, "ferry_replicator_rescans_total", "counter",
	       "Rescans finished, whether or not they changed anything.",
	       ns_rescans);
	per_ns(p, srv, "ferry_replicator_namespace_requests_total", "counter",
	       "Requests to /v1/NAME/ that passed the token check.",
	       ns_requests);
	per_ns(p, srv, "ferry_replicator_chunks_served_total", "counter",
	       "Chunks sent, alone or in batches.", ns_chunks);
	per_ns(p, srv, "ferry_replicator_chunk_bytes_served_total", "counter",
	       "Raw (decoded) bytes of the chunks sent.", ns_chunk_bytes);
	per_ns(p, srv, "ferry_replicator_frame_bytes_served_total", "counter",
	       "Bytes of the chunks' frames as sent (compressed).",
	       ns_frame_bytes);
	per_ns(p, srv, "ferry_replicator_lz4_frames_served_total", "counter",
	       "Of the chunks sent, those framed with lz4.", ns_lz4_frames);
	per_ns(p, srv, "ferry_replicator_zstd_frames_served_total", "counter",
	       "Of the chunks sent, those framed with zstd.", ns_zstd_frames);
	per_ns(p, srv, "ferry_replicator_manifests_served_total", "counter",
	       "Manifest and manifest segment answers sent.", ns_manifests);
	per_ns(p, srv, "ferry_replicator_mismatches_total", "counter",
	       "Chunks not served because their source no longer matched.",
	       ns_mismatches);
	per_ns(p, srv, "ferry_replicator_chunks_rehashed_total", "counter",
	       "Of the chunks sent, those hashed again before (their file "
	       "was not as the walk saw it, or --rehash).",
	       ns_rehashed);
	render_hashing(p, srv);
}

void repl_route_metrics(struct repl_req *req)
{
	struct repl_server *srv = req->srv;
	struct base_prom p;

	if (srv->metrics.access == REPL_METRICS_OFF) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"/metrics is off (--metrics off)");
		return;
	}
	if (srv->metrics.access == REPL_METRICS_LOOPBACK &&
	    !httpd_req_peer_loopback(&req->h)) {
		httpd_req_error(&req->h, 403, "forbidden", NULL,
				"/metrics answers loopback clients only "
				"(--metrics)");
		return;
	}
	if (req->h.method != HTTPD_GET && req->h.method != HTTPD_HEAD) {
		httpd_req_error(&req->h, 405, "method_not_allowed",
				"Allow: GET, HEAD\r\n",
				"%s is not allowed here", req->h.method_name);
		return;
	}
	base_prom_init(&p);
	render_http(&p, srv);
	render_ns(&p, srv);
	if (p.out.err) {
		base_prom_fini(&p);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"cannot build the metrics");
		return;
	}
	httpd_req_respond(&req->h, 200, BASE_PROM_CTYPE,
			  "Cache-Control: no-cache\r\n", p.out.buf, p.out.len);
	base_prom_fini(&p);
}
