/*
 * catalog/httpd/httpd.h — ferry's one HTTP/1.1 server layer, the face of
 * catalog/httpd/. Three servers stand on it: the replicator (--listen),
 * and the hydrator's --metrics-listen and --s3-listen.
 *
 *   httpd_listen.c  the HOST:PORT rule (one for every server), resolving
 *                   and binding
 *   httpd_head.c    the response writer: status line, reason phrases,
 *                   Server, Date, Content-Type, the body's framing,
 *                   Connection, extra header lines
 *   httpd_reader.c  the request reader on http_parser, with the limits
 *                   (httpd_limits.c: each server's defaults, side by side)
 *   httpd_server.c  the libuv connection engine: accept within the limits,
 *   httpd_conn.c      the sweeper, pipelining with ordered answers,
 *   httpd_req.c       reference-counted requests, streamed answers
 *   httpd_tls.c     TLS for the engine's connections (OpenSSL over memory
 *                   BIOs: the loop keeps doing the socket I/O)
 *   httpd_peer.c    who a client is: loopback, this host
 *
 * The replicator and the metrics server embed the engine; the S3 server
 * runs a thread per connection (its requests block in the mount's read
 * path) and takes the listener, the reader, the limits and the writer.
 * The header names no library type. Functions return 0 (or a count) or
 * -errno.
 */
#ifndef FERRY_HTTPD_H
#define FERRY_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "catalog/base/base.h"

/* ---- listen addresses (httpd_listen.c); any thread ---- */

/*
 * The rule, for --listen, --metrics-listen and --s3-listen alike:
 * HOST:PORT, where HOST is a name or an IPv4 address (no ':'), or
 * [V6]:PORT with an IPv6 address in brackets; HOST is never empty. PORT is
 * decimal, 0 to 65535; 0 asks the kernel for any free port, and the
 * server's log line names the port it got. An IPv6 address without
 * brackets ("::1:8700") is refused: its last ':' may be the address's own.
 */
#define HTTPD_HOST_MAX 256

/* Split s into host (NUL-terminated, at most cap-1 bytes; the brackets
 * taken off) and port, without resolving. -EINVAL when s breaks the rule
 * or host does not fit (a usage error). */
int httpd_listen_split(const char *s, char *host, size_t cap,
		       uint16_t *ret_port);

/* s as a socket address to bind: the host resolved (AI_PASSIVE, the first
 * answer), the port set. -EINVAL (malformed), -EADDRNOTAVAIL (the host
 * does not resolve). */
int httpd_listen_resolve(const char *s, struct sockaddr_storage *ret);

/* A blocking listening TCP socket on sa (close-on-exec, SO_REUSEADDR):
 * the fd, or -errno of socket, bind or listen. For servers that do not
 * use the engine (S3). */
int httpd_listen_socket(const struct sockaddr_storage *sa, int backlog);

/* The address s names with the port actually bound (bound: from
 * getsockname), "HOST:PORT" or "[V6]:PORT" with HOST as s gives it, into
 * buf: what a log line shows when s asked for port 0. -EINVAL, -ENOBUFS. */
int httpd_listen_name(const char *s, const struct sockaddr *bound, char *buf,
		      size_t cap);

/* 1 when sa is a loopback address (127.0.0.0/8, ::1, IPv4-mapped 127.x),
 * else 0 (0.0.0.0 and :: are every interface). */
int httpd_sockaddr_loopback(const struct sockaddr *sa);

/* 1 when host (numeric or a name) resolves to loopback addresses only,
 * else 0 (also when it does not resolve). */
int httpd_host_loopback(const char *host);

/* ---- peers (httpd_peer.c); any thread ---- */

/* 1 when addr (len 4: IPv4, 16: IPv6) is loopback, else 0. */
int httpd_addr_loopback(const uint8_t *addr, unsigned len);

/* 1 when addr (len 4 or 16; an IPv4-mapped address given as IPv4) is one
 * of this host's: loopback, equal to local (the address the client
 * connected to; may be NULL), or held by an interface of this network
 * namespace. 0 otherwise, and when the interfaces cannot be listed. */
int httpd_addr_same_host(const uint8_t *addr, unsigned len,
			 const struct sockaddr *local);

/* ---- the response writer (httpd_head.c); any thread ---- */

/* The Server header of each program. */
#define HTTPD_SERVER_REPLICATOR "ferry-replicator/" FERRY_VERSION
#define HTTPD_SERVER_HYDRATOR "ferry-hydrator/" FERRY_VERSION

/* The reason phrase of status ("OK", "Not Found", ...). */
const char *httpd_reason(int status);

/* One response head. */
struct httpd_head {
	int status;
	const char *server; /* the Server header's value; NULL: none */
	const char *ctype;  /* Content-Type; NULL: none */
	/* >= 0: Content-Length. < 0: a streamed body, chunked for HTTP/1.1,
	 * else delimited by the close (keep_alive is then cleared) */
	int64_t length;
	const char *extra; /* NULL, "" or whole "Name: value\r\n" lines */
	int http_minor;	   /* the request's HTTP/1.x */
	/* in: the connection stays open after the answer; "Connection:
	 * close" when 0, "Connection: keep-alive" for HTTP/1.0 when 1.
	 * out: cleared when a close-delimited body needs the close */
	int keep_alive;
	int chunked; /* out: the body goes in chunks (httpd_chunk_prefix) */
};

/* Write h's head, with a Date, into buf. Returns its length, or -ENOBUFS
 * (nothing useful in buf). Updates h->keep_alive and h->chunked. */
int httpd_head_format(struct httpd_head *h, char *buf, size_t cap);

/* The "SIZE\r\n" before a chunk of len bytes (the chunk ends in "\r\n";
 * the body in HTTPD_CHUNK_END). Returns its length. */
#define HTTPD_CHUNK_PREFIX_MAX 20
#define HTTPD_CHUNK_END "0\r\n\r\n"
size_t httpd_chunk_prefix(uint64_t len, char buf[HTTPD_CHUNK_PREFIX_MAX]);

/* ---- limits (httpd_limits.c) ---- */

/* What a server accepts; the reader answers the first four, the engine
 * the rest (the S3 server the timeouts and the connection cap itself). */
struct httpd_limits {
	size_t url_max;	   /* request target, bytes: 414 beyond */
	size_t head_max;   /* header names and values, bytes: 431 beyond */
	size_t fields_max; /* header lines: 431 beyond; 0: head_max only */
	/* body bytes, said by Content-Length or sent: 413 beyond;
	 * HTTPD_BODY_ANY: no cap */
	uint64_t body_max;
	uint64_t header_ms; /* a request's head (and body) from its 1st byte */
	uint64_t idle_ms;   /* no request begun, or an answer unread */
	size_t max_conns;   /* open connections in all */
	size_t per_addr;    /* open connections per client address; 0: any */
	unsigned pipeline;  /* requests read ahead of their answer, >= 1 */
	unsigned per_conn;  /* requests per connection; 0: any */
	/* bytes servers hold for answers, in all (httpd_req_reserve);
	 * 0: not counted */
	size_t inflight_max;
};
#define HTTPD_BODY_ANY UINT64_MAX

/* Each server's defaults (its options may change some). The replicator's
 * are ferry-replicator(1)'s LIMITS; the metrics server takes one small
 * request per connection; S3 keeps a connection's thread for 60 s
 * without a request and drops bodies (it takes no writes). */
extern const struct httpd_limits HTTPD_LIMITS_REPLICATOR;
extern const struct httpd_limits HTTPD_LIMITS_METRICS;
extern const struct httpd_limits HTTPD_LIMITS_S3;

/* ---- the request reader (httpd_reader.c); one thread at a time ---- */

enum httpd_method {
	HTTPD_OTHER = 0,
	HTTPD_GET,
	HTTPD_HEAD,
	HTTPD_POST,
	HTTPD_PUT,
	HTTPD_DELETE,
	HTTPD_OPTIONS,
	HTTPD_PATCH,
	HTTPD_CONNECT,
};

/* One connection's requests, parsed with http_parser and held to the
 * limits. The bytes are fed as they come; the reader stops at each
 * event and says how much it took, so its owner decides when to go on
 * (after an answer, with room in its queue, ...). */
struct httpd_reader;

/* What a feed stopped at. */
enum httpd_rd {
	HTTPD_RD_MORE = 0, /* every byte taken; the request is not whole */
	HTTPD_RD_HEAD,	   /* the head is complete: httpd_reader_msg */
	HTTPD_RD_BODY,	   /* a piece of the body: httpd_reader_body */
	HTTPD_RD_END,	   /* the request is complete */
	HTTPD_RD_FAIL,	   /* no more requests: httpd_reader_fail says why */
};

int httpd_reader_new(const struct httpd_limits *lim, struct httpd_reader **ret);
void httpd_reader_free(struct httpd_reader *r); /* NULL: no-op */

/* Parse p[0..len): *ret_used is what was taken (the rest is the caller's
 * to feed again, after it handled the event). A failure is sticky. */
enum httpd_rd httpd_reader_feed(struct httpd_reader *r, const char *p,
				size_t len, size_t *ret_used);

/* 1 while a request has begun and is not complete. */
int httpd_reader_busy(const struct httpd_reader *r);

/* The head, after HTTPD_RD_HEAD; the strings live in the reader until the
 * next request begins, and may be changed in place (split, decoded). */
struct httpd_msg {
	enum httpd_method method;
	const char *method_name; /* "GET", ...: static */
	char *url;		 /* NUL-terminated, as sent */
	size_t url_len;
	int http_minor;	     /* HTTP/1.x (a later version reads as 1.1) */
	int expect_continue; /* Expect: 100-continue */
	uint64_t length;     /* Content-Length; UINT64_MAX: none said */
	size_t nfields;
};
void httpd_reader_msg(struct httpd_reader *r, struct httpd_msg *m);

/* Header line i (< nfields) of the head, in order: the name lower-cased,
 * both NUL-terminated, living as the URL does. */
void httpd_reader_field(struct httpd_reader *r, size_t i, char **name,
			size_t *nlen, char **value, size_t *vlen);

/* The value of the first header named lname (lower-case), or NULL. */
const char *httpd_reader_get(const struct httpd_reader *r, const char *lname);

/* After HTTPD_RD_BODY: the piece, in the bytes last fed. */
void httpd_reader_body(const struct httpd_reader *r, const char **at,
		       size_t *len);

/* After HTTPD_RD_END: 1 when the connection may carry another request. */
int httpd_reader_keep_alive(const struct httpd_reader *r);

/* After HTTPD_RD_FAIL: the status to answer (400, 405, 413, 414, 431,
 * 500) and why, in words (lives with the reader). */
int httpd_reader_fail(const struct httpd_reader *r, const char **detail);

/* The path of a request target (origin or absolute form), without its
 * query: *ret_path points into url. -EINVAL when url is malformed. */
int httpd_url_path(const char *url, size_t len, const char **ret_path,
		   size_t *ret_len);

/* The value of the first query parameter NAME=VALUE of a request target
 * (raw, not percent-decoded): *ret_val points into url. 1 when found, 0
 * when not (no query, or no such name). */
int httpd_url_param(const char *url, size_t len, const char *name,
		    const char **ret_val, size_t *ret_len);

/* ---- TLS for the engine (httpd_tls.c); loop thread ---- */

/*
 * TLS 1.2 and 1.3 only; ECDHE key exchange with AEAD ciphers only; no
 * renegotiation, no compression; with a client CA, a client certificate
 * signed by it is required. A reload builds a new context for new
 * connections; open ones keep theirs; a failed reload changes nothing.
 */
struct httpd_tls;

struct httpd_tls_opts {
	const char *cert;      /* PEM: the certificate, then its chain */
	const char *key;       /* PEM: its private key */
	const char *client_ca; /* PEM CAs a client certificate must chain
				* to; NULL: no client certificate asked */
};

/* Load the files of o (paths copied, read again at each reload). 0,
 * -EINVAL (a file cannot be read or is not what it should be: why says
 * which and why) or -ENOMEM. */
int httpd_tls_new(const struct httpd_tls_opts *o, struct httpd_tls **ret,
		  char *why, size_t cap);

/* Read the files again for new connections; on failure (why says) the
 * old context stays. */
int httpd_tls_reload(struct httpd_tls *t, char *why, size_t cap);

/* One line about the certificate in use: subject="..." not_after=...
 * Returns 1 when it is outside its validity period now, else 0. */
int httpd_tls_describe(const struct httpd_tls *t, char *buf, size_t cap);

/* Free t (NULL: no-op); connections made from it keep their context. */
void httpd_tls_free(struct httpd_tls *t);

/* ---- the connection engine (httpd_server.c, httpd_conn.c,
 * httpd_req.c); everything on the loop's thread ---- */

/*
 * One libuv loop, many connections. Each connection reads requests into a
 * queue (pipelining, at most limits.pipeline ahead) and answers them
 * strictly in order: only the request at the head is dispatched, the next
 * one when that one is done. What a connection waits for decides what may
 * end it: one the server is answering is never timed out nor closed for
 * room; one waiting for its client (a head still coming, idle between
 * requests, an answer not read, bytes its tenant holds) is closed by a
 * sweep past header_ms or idle_ms, and at max_conns one that has waited
 * at least half a second makes room for a new one, of the tenant holding
 * most connections, the one that waited longest; with none, accepting
 * pauses. The bytes of answers are held to each tenant's share (below).
 *
 * A request is what dispatch gets: struct httpd_req, first member of the
 * server's own request struct (opts.req_size), reference counted (its
 * place in the queue, each write in flight, and whatever the server holds:
 * a worker job, a timer). Its answer goes through the request API below,
 * which says nothing of HTTP/1.1's framing: the engine writes heads,
 * chunks and the last chunk, so an HTTP/2 session could deliver requests
 * to the same dispatch and answer them through the same calls.
 */
struct httpd_server;
struct httpd_req;
struct uv_loop_s;

/* A write of req finished (status < 0: failed, or cancelled because the
 * connection closed). req may be dead. */
typedef void (*httpd_write_cb)(struct httpd_req *req, void *arg, int status);

/* Connections refused or closed by a limit. */
enum httpd_limit {
	HTTPD_LIM_PER_ADDR = 0, /* refused: the address is at its cap */
	HTTPD_LIM_CAP_WAIT,	/* at the cap, none to close: paused */
	HTTPD_LIM_EVICTED,	/* closed to make room (cap or no fds) */
	HTTPD_LIM_NO_FDS,	/* accept failed: out of file descriptors */
	HTTPD_LIM_HEADER,	/* closed: header timeout */
	HTTPD_LIM_IDLE,		/* closed: idle timeout */
	HTTPD_LIM_UNREAD,	/* closed: the answer was not read */
	HTTPD_LIM_RECLAIMED,	/* closed: stalled, its tenant over its share
				 * of bytes while another waited */
	HTTPD_LIM_N
};

/* What the server counts (each may be NULL); ctx is opts.ctx. */
struct httpd_hooks {
	void (*accepted)(void *ctx);
	void (*limited)(void *ctx, enum httpd_limit why);
	/* the first bytes of req's answer go to its connection (status and
	 * head_ns are set): time to first byte */
	void (*first_byte)(struct httpd_req *req);
	void (*bytes)(void *ctx, size_t n); /* answer bytes, before TLS */
	void (*error)(struct httpd_req *req, const char *code);
	void (*aborted)(struct httpd_req *req); /* cut mid-answer */
};

struct httpd_server_opts {
	struct uv_loop_s *loop;
	const struct httpd_limits *limits; /* copied */
	const char *server;		   /* Server header: HTTPD_SERVER_* */
	const char *tag;       /* NULL, or a word the limit logs add */
	struct httpd_tls *tls; /* NULL: plain HTTP; outlives the server */
	size_t req_size;       /* >= sizeof(struct httpd_req) */
	size_t conn_size;      /* the server's bytes per connection */
	void *ctx;	       /* handed back in requests and hooks */
	/* Answer req, now or later. Requests the reader refused come too,
	 * with fail_status set: answer them with httpd_req_error. */
	void (*dispatch)(struct httpd_req *req);
	/* Each header line of a request, whole, before dispatch (name
	 * lower-case; NULL: not told). */
	void (*header)(struct httpd_req *req, const char *name, size_t nlen,
		       const char *value, size_t vlen);
	/* req goes: free what the server hung on it (NULL: nothing). */
	void (*req_free)(struct httpd_req *req);
	/* The body of an error answer into buf, its type in *ret_ctype;
	 * its length, or < 0 for none. NULL: the detail and a newline,
	 * text/plain. */
	int (*error_body)(struct httpd_req *req, const char *code,
			  const char *detail, char *buf, size_t cap,
			  const char **ret_ctype);
	struct httpd_hooks hooks;
};

/* An engine on o->loop, not listening yet. 0, -EINVAL, -ENOMEM. */
int httpd_server_new(const struct httpd_server_opts *o,
		     struct httpd_server **ret);

/* Bind and listen on sa. 0 or -errno (libuv's: -EADDRINUSE, ...). */
int httpd_server_listen(struct httpd_server *s, const struct sockaddr *sa,
			int backlog);

/* Bind and listen on the Unix domain socket at path (absolute, shorter
 * than 108 bytes), mode 0600: only this user connects. Nothing that is
 * at path already is replaced (-EADDRINUSE). Closing the server unlinks
 * it. Peers have no address: no per-address cap, and never "same host"
 * (httpd_req_peer_same_host). 0 or -errno. One listen per server. */
int httpd_server_listen_unix(struct httpd_server *s, const char *path,
			     int backlog);

/* The address bound (port 0 asked: the one the kernel gave); -ENOTSUP
 * for a Unix socket. */
int httpd_server_bound(const struct httpd_server *s,
		       struct sockaddr_storage *ret);

/* Open connections now. */
size_t httpd_server_conns(const struct httpd_server *s);

/* Bytes reserved for answers now (httpd_req_reserve). */
size_t httpd_server_inflight(const struct httpd_server *s);

/* Stop: close the listener and every connection (their requests turn
 * dead). The server frees itself once its last connection and request
 * are gone: run the loop until then. NULL: no-op. */
void httpd_server_close(struct httpd_server *s);

/* One request. The fields above `x` are the server's to read, never to
 * write; `x` is the engine's. */
struct httpd_req {
	enum httpd_method method;
	const char *method_name; /* static */
	char *url;		 /* the request target, NUL-terminated */
	size_t url_len;
	uint8_t *body; /* NULL when none */
	size_t body_len;
	int head_only; /* HEAD: a GET's head; body bytes sent are dropped */
	/* the reader refused it: answer this status (and detail) */
	int fail_status;
	const char *fail_detail;
	uint64_t head_ns; /* uv_hrtime() when its head was complete */
	void *ctx;	  /* opts.ctx */
	void *conn_data;  /* opts.conn_size zeroed bytes, per connection */
	int status;	  /* the answer's, from httpd_req_head on */
	int dead; /* the connection is gone: answers go nowhere; let go */
	int done; /* the answer is complete */
	struct {
		struct httpd_req *next;
		struct httpd_server *srv;
		struct httpd_conn *conn;
		const struct httpd_tx *tx;
		int refs, started, counted, keep_alive, http_minor, chunked;
		char *head; /* formatted, not written yet */
		size_t head_len, body_cap;
		/* bytes reserved, and on whom (httpd_tenant.c) */
		struct httpd_tenant *tenant;
		size_t bytes;
		/* waiting for bytes */
		int waiting;
		struct httpd_req *wprev, *wnext;
		struct httpd_tenant *wtenant;
		size_t wneed;
		void (*wcb)(struct httpd_req *req, void *arg);
		void *warg;
		uint64_t wpass;
	} x;
};

void httpd_req_ref(struct httpd_req *req);
void httpd_req_unref(struct httpd_req *req);

/* The answer's head: status, Content-Type, length (< 0: a streamed body)
 * and extra ("" or whole "Name: value\r\n" lines). It goes out with the
 * first send or with done. 0, or -ECANCELED: the connection is gone or
 * the head was cut off (it is closed); nothing more to do. */
int httpd_req_head(struct httpd_req *req, int status, const char *ctype,
		   int64_t length, const char *extra);

/* Body bytes: pre (copied) then data (borrowed until cb). cb (NULL: none)
 * runs once they are written, which is the senders' flow control. 0, or
 * -ECANCELED when the connection is closing (cb is then not called; data
 * is still the caller's). */
int httpd_req_send(struct httpd_req *req, const void *pre, size_t pre_len,
		   const void *data, size_t data_len, httpd_write_cb cb,
		   void *arg);

/* The answer is complete (a streamed body is ended): the connection
 * takes the next request. */
void httpd_req_done(struct httpd_req *req);

/* Give up on the answer now: the client sees it cut (the connection is
 * closed). */
void httpd_req_abort(struct httpd_req *req);

/* A whole small answer (body copied), and done. */
void httpd_req_respond(struct httpd_req *req, int status, const char *ctype,
		       const char *extra, const void *body, size_t len);

/* An error answer and done: code is a fixed ASCII word the server's
 * error_body and error hook see; detail is printf-style, cut at 511
 * bytes. */
void httpd_req_error(struct httpd_req *req, int status, const char *code,
		     const char *extra, const char *fmt, ...) BASE_PRINTF(5, 6);

/* 1 when req's client is on a loopback address, else 0. */
int httpd_req_peer_loopback(const struct httpd_req *req);

/* 1 when req's client is on this host (httpd_addr_same_host, decided once
 * per connection), else 0. */
int httpd_req_peer_same_host(struct httpd_req *req);

/*
 * Tenants and the bytes answers hold. A tenant is who a connection works
 * for: its client's address (an IPv6 address's /64) until the server
 * names it from a request. At the connection cap the connection to close
 * is taken from the tenant holding most connections. What a server holds
 * in memory for an answer (frames read ahead, a read buffer) is reserved
 * on the request's tenant against limits.inflight_max before it is made,
 * and released when it goes; a tenant may hold its share, inflight_max
 * over the tenants holding or waiting for bytes. A tenant over its share
 * reads no further pipelined requests; when another tenant waits, its
 * connections stalled for half a second are closed until it is back
 * within its share. What a request still holds when it is freed is
 * released then.
 */

/* req's connection works for the tenant named by id[0..len) (a token's
 * digest, say) from now on. */
void httpd_req_set_tenant(struct httpd_req *req, const void *id, size_t len);

/* Who req's connection works for, as a number (equal for equal
 * tenants). */
uint64_t httpd_req_tenant(const struct httpd_req *req);

/* Bytes were reserved for req after all: cb runs (on the loop, req
 * alive and not dead) once they are. */
typedef void (*httpd_resume_cb)(struct httpd_req *req, void *arg);

/* Reserve n bytes for req. 0: reserved. -EAGAIN: not now; cb(req, arg)
 * runs once they are (not when the connection closes first). With cb
 * NULL the bytes are taken as they are, never waiting (what is already
 * held: a body, a manifest made). -EBUSY: req waits already;
 * -ECANCELED: the connection is gone. */
int httpd_req_reserve(struct httpd_req *req, size_t n, httpd_resume_cb cb,
		      void *arg);

/* Give back n of req's bytes (at most what it holds). */
void httpd_req_release(struct httpd_req *req, size_t n);

/* Bytes of req's connection not sent yet: libuv's queue and the socket's
 * (SIOCOUTQNSD). */
size_t httpd_req_unsent(const struct httpd_req *req);

#endif
