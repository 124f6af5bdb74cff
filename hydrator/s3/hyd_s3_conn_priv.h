/*
 * hydrator/s3/hyd_s3_conn_priv.h — what the server's files share: the
 * server, one connection, and the answers a request handler sends
 * (hyd_s3_http.c). A connection is served by one thread of its own, which
 * blocks in the read path like a FUSE worker does; nothing else touches
 * it. Each send returns 0 or -errno (the connection is then closed).
 */
#ifndef FERRY_HYD_S3_CONN_PRIV_H
#define FERRY_HYD_S3_CONN_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "catalog/httpd/httpd.h"
#include "hydrator/s3/hyd_s3.h"

struct hyd_s3 {
	struct hyd_s3_src src;
	struct httpd_limits lim; /* HTTPD_LIMITS_S3 */
	int lfd;		 /* listening socket */
	pthread_t th;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hyd_s3_conn *conns; /* under mu */
	size_t n_conns;		   /* under mu */
	int stop;		   /* under mu */
	uint64_t reqs;		   /* __atomic: request ids */
	struct hyd_s3_list_cache lists;
};

struct hyd_s3_conn {
	struct hyd_s3 *s;
	int fd;
	struct hyd_s3_conn *prev, *next; /* s->conns, under s->mu */
	struct httpd_reader *rd;	 /* the shared request reader */
	/* the request being answered: its HTTP/1.x and whether the
	 * connection stays open after (the answer's head says so) */
	int http_minor, keep_alive;
	char request_id[24];
	char rbuf[8192];
	size_t roff, rlen; /* unparsed bytes in rbuf */
};

/* The head (httpd_head_format: status line, Server, Date, Content-Type,
 * Content-Length, Connection) with x-amz-request-id and extra (each line
 * ending in \r\n; may be ""). */
int hyd_s3__send_head(struct hyd_s3_conn *c, int status, const char *ctype,
		      uint64_t length, const char *extra);
/* Every byte of iov[0..n). */
int hyd_s3__send_iov(struct hyd_s3_conn *c, struct iovec *iov, size_t n);
/* A whole answer: head and (unless head_only) body. */
int hyd_s3__send(struct hyd_s3_conn *c, int status, const char *ctype,
		 const char *extra, const void *body, size_t len,
		 int head_only);
/* An S3 error: status and the XML body (no body to a HEAD). */
int hyd_s3__send_error(struct hyd_s3_conn *c, int status, const char *code,
		       const char *msg, const char *resource, int head_only);

/* hyd_s3_object.c: GetObject / HeadObject of key (decoded). */
int hyd_s3__object(struct hyd_s3_conn *c, const struct hyd_s3_req *rq,
		   const char *key, const char *resource, int head_only);

#endif
