/*
 * catalog/httpd/httpd_priv.h — the insides of catalog/httpd/: the reader
 * (embedded in each engine connection), the engine's server and
 * connection, and the transport a request answers through.
 *
 * The transport (struct httpd_tx) is where HTTP/1.1 lives: httpd_req.c
 * turns the request API into its calls, httpd_conn.c implements it for
 * an HTTP/1.1 connection (heads as text, chunks, the last chunk). An
 * HTTP/2 session would be another implementation, its requests dispatched
 * the same way.
 */
#ifndef FERRY_HTTPD_PRIV_H
#define FERRY_HTTPD_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>
#include <uv.h>

#include "catalog/httpd/httpd.h"

/* ---- the reader (httpd_reader.c) ---- */

struct httpd_field {
	size_t name, nlen, value, vlen; /* offsets into the arena */
};

struct httpd_reader {
	http_parser p;
	struct httpd_limits lim;
	/* the head, each piece NUL-terminated: the URL first, then names
	 * and values; grown as needed, at most what the limits allow */
	char *arena;
	size_t alen, acap;
	struct httpd_field *f;
	size_t nf, fcap;
	size_t url_len, head_bytes;
	int piece; /* 0 none, 1 url, 2 a name, 3 a value */
	int busy;  /* a request began */
	int ev;	   /* what the callbacks stopped at (enum httpd_rd) */
	int fail;  /* a status once refused */
	int expect_continue, keep_alive;
	uint64_t body_seen;
	const char *body_at;
	size_t body_len;
	char detail[96];
};

/* Set up r for the limits lim (copied) / free what it holds. */
void httpd_reader_init(struct httpd_reader *r, const struct httpd_limits *lim);
void httpd_reader_fini(struct httpd_reader *r);

/* ---- TLS of a connection: httpd_tls_priv.h ---- */
struct httpd_tls_conn;

/* ---- the transport under a request ---- */

struct httpd_tx {
	int (*head)(struct httpd_req *req, int status, const char *ctype,
		    int64_t length, const char *extra);
	int (*send)(struct httpd_req *req, const void *pre, size_t pre_len,
		    const void *data, size_t data_len, httpd_write_cb cb,
		    void *arg);
	void (*done)(struct httpd_req *req);
	void (*abort)(struct httpd_req *req);
	/* the last reference went: let the connection go */
	void (*release)(struct httpd_req *req);
	struct httpd_peer *(*peer)(struct httpd_req *req);
	size_t (*unsent)(const struct httpd_req *req);
};

/* The HTTP/1.1 transport (httpd_conn.c). */
extern const struct httpd_tx HTTPD_TX_H1;

/* Who the client is (decided at accept; same_host when first asked). */
struct httpd_peer {
	uint8_t addr[16];  /* IPv4-mapped addresses stored as IPv4 */
	unsigned addr_len; /* 4, 16, or 0 when unknown */
	int same_host;	   /* -1: not decided yet */
	struct sockaddr_storage local;
	int local_ok;
};

/* The address as text, "unknown" when there is none. */
const char *httpd_peer_str(const struct httpd_peer *p, char *buf, size_t cap);

/* ---- the engine ---- */

/* A connection waiting for its client this long may be closed to make
 * room (at the cap) or to free memory (httpd_tenant.c). */
#define HTTPD_STALL_MS 500u

/* Who a connection works for (httpd_tenant.c). */
struct httpd_tenant {
	struct httpd_tenant *next; /* in its hash bucket */
	uint64_t key;
	size_t refs;	/* its connections until freed, requests holding
			 * or waiting for its bytes */
	size_t conns;	/* open connections */
	size_t bytes;	/* reserved by its requests */
	size_t going;	/* of those, held by closed connections */
	size_t waiting; /* requests waiting for bytes */
};

/* Refusals and evictions since their last log line: one warning per kind
 * every HTTPD_LIMIT_LOG_MS at most. */
struct httpd_limit_log {
	uint64_t n;
	uint64_t last_ms;
};

/* A listener or a connection: TCP, or a Unix domain socket
 * (httpd_server_listen_unix). Every uv_stream_t call takes either. */
union httpd_sock {
	uv_handle_t h;
	uv_stream_t s;
	uv_tcp_t tcp;
	uv_pipe_t pipe;
};

struct httpd_server {
	uv_loop_t *loop;
	union httpd_sock listener;
	int listening;	     /* the listener is made (closed with the server) */
	int unix_sock;	     /* it is a Unix domain socket */
	char unix_path[108]; /* its path, unlinked when the server closes */
	uv_timer_t sweep;
	int sweep_on;
	int closing;
	int accept_paused; /* at the cap, none to close: libuv holds one */
	/* the owner's, the listener's, the sweep timer's, one per
	 * connection until it is freed */
	int refs;
	struct httpd_limits lim;
	struct httpd_server_opts o;
	struct httpd_conn *conns;
	size_t n_conns;
	struct httpd_limit_log log_addr, log_full, log_evict;
	/* tenants and the bytes of answers (httpd_tenant.c) */
	struct httpd_tenant **tenants; /* hash buckets */
	size_t tenants_active;	       /* holding or waiting for bytes */
	size_t tenants_waiting;	       /* waiting for bytes */
	size_t inflight;	       /* bytes reserved in all */
	struct httpd_req *wait_head, *wait_tail;
	uv_timer_t resume;
	int resume_armed;
	uint64_t resume_pass, reclaim_ms;
	size_t released;  /* bytes released since the last trim */
	uint64_t trim_ms; /* when */
};

#define HTTPD_READ_BUF 65536u
#define HTTPD_READ_SMALL 4096u

struct httpd_conn {
	union httpd_sock tcp; /* TCP, or a Unix domain socket's stream */
	struct httpd_server *srv;
	struct httpd_conn *prev, *next;
	struct httpd_reader rd;
	struct httpd_req *cur; /* its head is read, its body coming */
	struct httpd_req *head, *tail;
	size_t queued;
	int refs; /* the handle + every live request */
	int closing, shutting, reading;
	int reset;	   /* httpd_conn_reset: RST if writes are pending */
	int eof;	   /* the peer finished sending */
	int no_more;	   /* no further requests will be taken */
	int paused;	   /* the queue is full: the reader waits */
	int body_wait;	   /* the body's bytes are not reserved yet */
	int want_continue; /* the client waits for 100 Continue */
	int kicking;
	/* what it waits for (httpd_conn_wait) began at this loop time:
	 * accept, a request's first byte, the last answer or write */
	uint64_t since_ms;
	uint64_t answered;     /* requests answered */
	uint64_t taken;	       /* requests read */
	unsigned writes;       /* writes in flight */
	unsigned budget_waits; /* requests waiting for bytes */
	size_t bytes;	       /* reserved by its requests */
	struct httpd_tenant *tenant;
	struct httpd_peer peer;
	uv_shutdown_t shut;
	struct httpd_tls_conn *tls; /* NULL: plain HTTP */
	int tls_pumping;	    /* in tls_pump */
	size_t pend_off, pend_len;  /* unparsed bytes in rbuf */
	void *data;		    /* the server's conn_size bytes */
	char *rbuf;		    /* while some of its bytes are unparsed */
	size_t rbuf_cap;	    /* HTTPD_READ_BUF, or HTTPD_READ_SMALL */
};

/* What a connection waits for. */
enum httpd_wait {
	HTTPD_WAIT_SERVER, /* a request is being answered */
	HTTPD_WAIT_HEAD,   /* the first request, or a request, is coming */
	HTTPD_WAIT_IDLE,   /* answered; the next request has not begun */
	HTTPD_WAIT_READER, /* writes in flight: the client must read them;
			    * or bytes its tenant holds must be released */
};

enum httpd_wait httpd_conn_wait(const struct httpd_conn *c);

/* A connection for s, accepted from the listener (httpd_conn.c): set up,
 * linked, reading. Refuses it (closed) when the per-address cap says
 * so. */
void httpd_conn_accept(struct httpd_server *s);

/* Close now: requests turn dead, writes are cancelled; what the kernel
 * holds still goes out, then the FIN (an answer cut by the server). */
void httpd_conn_close(struct httpd_conn *c);

/* Close a connection the server gives up on for its client (evicted at
 * the cap, timed out, reclaimed): with writes pending it is reset, so
 * the kernel lets go of what was queued for a client that may never
 * read it, and the client sees the cut at once. */
void httpd_conn_reset(struct httpd_conn *c);

/* The server lets go of a reference (a connection freed, a handle
 * closed); the last one frees it. */
void httpd_server_unref(struct httpd_server *s);

/* A limit acted: count it and log it (one line per kind and interval). */
void httpd_server_limit(struct httpd_server *s, enum httpd_limit kind,
			const char *what, const char *why,
			const struct httpd_conn *c);

/* Start the sweep when a connection opens and it is not running. */
void httpd_server_sweep_on(struct httpd_server *s);

/* Make room by closing a connection waiting for its client (of the
 * tenant holding most connections, the one that waited longest for its
 * client. 0, or -EBUSY when every connection is being answered. */
int httpd_server_evict(struct httpd_server *s, const char *why);

/* Tenants (httpd_tenant.c). The table / a tenant by key, referenced
 * (NULL: out of memory) / let go of one. */
int httpd_tenants_init(struct httpd_server *s);
void httpd_tenants_fini(struct httpd_server *s);
struct httpd_tenant *httpd_tenant_get(struct httpd_server *s, uint64_t key);
void httpd_tenant_put(struct httpd_server *s, struct httpd_tenant *t);
/* The key of a client address (an IPv6 address's /64). */
uint64_t httpd_tenant_addr_key(const struct httpd_peer *p);
/* 1 when t holds its share of bytes, or the pool is full: its
 * connections read no further requests. */
int httpd_tenant_over(const struct httpd_server *s,
		      const struct httpd_tenant *t);
/* c is closing: out of its tenant's count, its waiters dropped. */
void httpd_tenant_conn_closed(struct httpd_conn *c);
/* req goes: what it holds is released, its tenant let go. */
void httpd_tenant_req_free(struct httpd_req *req);
/* Waiters that fit now get their bytes (the resume timer's callback). */
void httpd_tenant_resume(uv_timer_t *t);
/* Give freed memory back to the system when much of the pool was
 * released since the last time (the sweep's). */
void httpd_tenant_trim(struct httpd_server *s);
/* Another tenant waits: close stalled connections of tenants over
 * their share (at most every few ms unless sweep). */
void httpd_tenant_reclaim(struct httpd_server *s, int sweep);

/* A request of connection c (httpd_req.c): allocated with the server's
 * size, one reference, c referenced. NULL when out of memory. */
struct httpd_req *httpd_req_new(struct httpd_conn *c, size_t url_len);

#endif
