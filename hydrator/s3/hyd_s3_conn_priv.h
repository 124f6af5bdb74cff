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

#include <http_parser.h>

#include "hydrator/s3/hyd_s3.h"

#define HYD_S3_HEAD_MAX 16384u /* request line and headers */

struct hyd_s3 {
	struct hyd_s3_src src;
	int lfd; /* listening socket */
	pthread_t th;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hyd_s3_conn *conns; /* under mu */
	size_t n_conns;		   /* under mu */
	int stop;		   /* under mu */
	uint64_t reqs;		   /* __atomic: request ids */
	struct hyd_s3_list_cache lists;
	char listen[128];
};

struct hyd_s3_conn {
	struct hyd_s3 *s;
	int fd;
	struct hyd_s3_conn *prev, *next; /* s->conns, under s->mu */
	http_parser parser;
	/* the request head, each piece NUL-terminated */
	char arena[HYD_S3_HEAD_MAX + HYD_S3_HDRS_MAX * 2 + 4];
	size_t alen;
	int piece; /* 0 none, 1 url, 2 header name, 3 header value */
	size_t url_off, name_off[HYD_S3_HDRS_MAX], value_off[HYD_S3_HDRS_MAX];
	size_t nhdr;
	int fail; /* the head is too big or malformed */
	int done; /* the message is complete */
	char request_id[24];
	char rbuf[8192];
	size_t rlen; /* unparsed bytes in rbuf */
};

/* The status line, the common headers (Content-Length, x-amz-request-id,
 * Date, Server) and extra (each line ending in \r\n; may be ""). */
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
