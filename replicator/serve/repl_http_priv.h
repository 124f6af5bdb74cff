/*
 * replicator/serve/repl_http_priv.h — HTTP/1.1 connections on libuv, parsed
 * with http_parser (repl_http.c), and the routes behind them
 * (repl_routes.c).
 *
 * Model: each connection parses requests into a queue (pipelining) and
 * answers them strictly in order: only the request at the head of the queue
 * is dispatched to a route, and the next one starts when the route calls
 * repl_http_done. At most REPL_PIPELINE_MAX requests wait per connection;
 * beyond that the parser is paused and reading stops, so a client cannot
 * make us buffer without bound.
 *
 * Lifetimes: a request is reference counted (its place in the queue, each
 * worker job and each write it has in flight). When its connection goes
 * away, `dead` is set and the route's callbacks only drop what they hold.
 * Everything here runs on the loop thread.
 */
#ifndef FERRY_REPL_HTTP_PRIV_H
#define FERRY_REPL_HTTP_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>
#include <uv.h>

#include "catalog/catalog.h"
#include "replicator/serve/repl_auth.h"

#define REPL_URL_MAX 4096u
#define REPL_HEADERS_MAX 16384u
#define REPL_BATCH_MAX 1024u
#define REPL_BODY_MAX (CHUNK_ID_LEN * REPL_BATCH_MAX)
#define REPL_PIPELINE_MAX 16u

struct repl_server;
struct repl_conn;
struct repl_req;
struct repl_ns;

/* Called when a write of the request finishes (status < 0: failed or
 * cancelled because the connection closed). req may be dead. */
typedef void (*repl_write_cb)(struct repl_req *req, void *arg, int status);

struct repl_req {
	struct repl_req *next; /* connection queue */
	struct repl_conn *conn;
	struct repl_server *srv;
	enum http_method method;
	int head_parsed; /* method and version are known */
	int head_only;	 /* HEAD: headers as for GET, no body */
	int keep_alive;	 /* decided at message end; 0 closes after the reply */
	int http_minor;
	int chunked; /* streamed body uses chunked transfer-encoding */
	int started; /* dispatched */
	int done;    /* response fully queued */
	int dead;    /* connection gone */
	int refs;
	int fail_status; /* parse-level error to answer (400/413/...) */
	const char *fail_detail;
	char url[REPL_URL_MAX + 1];
	size_t url_len;
	uint8_t *body;
	size_t body_len;
	/* Authorization headers: how many came, the last one's value (cut
	 * at REPL_AUTH_MAX, auth_over set), wiped when the request goes */
	unsigned auth_n;
	int auth_over;
	size_t auth_len;
	char auth[REPL_AUTH_MAX + 1];
	int status; /* answered status, for the -v log */
	/* the namespace it was dispatched to, with a reference dropped when
	 * the request goes (after on_free): a namespace removed meanwhile
	 * outlives what its requests hold */
	struct repl_ns *ns;
	/* metrics (repl_metrics.c): what was asked (enum repl_route_kind),
	 * when its head was parsed (uv_hrtime), counted at its first byte */
	int kind;
	int counted;
	uint64_t head_ns;
	/* route state, freed by on_free when the request goes */
	void *route;
	void (*on_free)(struct repl_req *req);
};

/* Accept connections on srv->listener (uv_listen callback). Within the
 * limits of srv (repl_serve_priv.h, struct repl_limits): a client
 * address at its cap is refused; at the connection cap, or out of file
 * descriptors, the connection that has waited longest for its client
 * (nothing being answered or written) is closed to make room, and the
 * new one is refused only when every connection is busy. */
void repl_http_on_connection(uv_stream_t *server, int status);

/* The sweeper of connections that outlive their timeouts (a request head
 * not complete within the header timeout, a connection idle or an answer
 * unread for the idle timeout): set up at init, it runs while
 * connections are open. */
void repl_http_init(struct repl_server *srv);

/* Close every connection and the sweeper (shutdown). */
void repl_http_close_all(struct repl_server *srv);

void repl_req_ref(struct repl_req *req);
void repl_req_unref(struct repl_req *req);

/* Queue pre (copied), data (borrowed until cb) and post (copied) as one
 * write. Returns 0, or -ECANCELED when the connection is closing (cb is
 * then not called; the caller still owns data). */
int repl_http_send(struct repl_req *req, const void *pre, size_t pre_len,
		   const void *data, size_t data_len, const void *post,
		   size_t post_len, repl_write_cb cb, void *arg);

/* Format a response head into buf. content_length < 0 means a streamed
 * body (chunked for HTTP/1.1, else close-delimited: sets req->chunked or
 * clears keep_alive). extra is "" or complete "Name: value\r\n" lines.
 * Returns the length, or -ENOBUFS. */
int repl_http_head(struct repl_req *req, int status, const char *ctype,
		   int64_t content_length, const char *extra, char *buf,
		   size_t cap);

/* Whole small response (head + body copied) and done. */
void repl_http_respond(struct repl_req *req, int status, const char *ctype,
		       const char *extra, const void *body, size_t len);

/* One-line JSON error {"error":code,"detail":...} plus a newline, and
 * done. code is a fixed ASCII word (docs/protocol.md). detail is
 * printf-style, cut at 511 bytes, and may carry any bytes (a URL, a file
 * name): it goes through base_json_bytes, so valid UTF-8 arrives as is
 * and every other byte as the text \xNN. */
void repl_http_error(struct repl_req *req, int status, const char *code,
		     const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The response is completely queued: start the next request. */
void repl_http_done(struct repl_req *req);

/* Give up on the connection now (mid-stream failure: the client sees a
 * truncated body). */
void repl_http_abort(struct repl_req *req);

/* 1 when req's client connected from a loopback address (127.0.0.0/8,
 * ::1, or an IPv4-mapped 127.x), else 0. */
int repl_http_peer_loopback(const struct repl_req *req);

/* 1 when req's client connected from this host (repl_peer_same_host,
 * decided once per connection), else 0. */
int repl_http_peer_same_host(const struct repl_req *req);

/* -- peers (repl_peer.c) -- */

struct sockaddr;

/* 1 when addr (len 4: IPv4, 16: IPv6) is a loopback address
 * (127.0.0.0/8, ::1), else 0. */
int repl_peer_loopback(const uint8_t *addr, unsigned len);

/* 1 when addr (len 4: IPv4, 16: IPv6; an IPv4-mapped address given as
 * IPv4) is one of this host's: loopback, equal to local (the address the
 * client connected to; may be NULL), or held by an interface of this
 * network namespace. 0 otherwise, and when the interfaces cannot be
 * listed. */
int repl_peer_same_host(const uint8_t *addr, unsigned len,
			const struct sockaddr *local);

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
int repl_http_adapt_lz4(const struct repl_req *req);

/* -- routes (repl_routes.c) -- */

/* Answer the request at the head of its connection's queue. */
void repl_routes_dispatch(struct repl_req *req);

#endif
