/*
 * hydrator/s3/hyd_s3_http.c — the server behind --s3-listen: an accept
 * thread and one thread per connection (at most S3_CONNS_MAX), each
 * reading requests with http_parser (keep-alive), handing them to
 * hyd_s3__serve, and writing the answers with blocking sends.
 *
 * Why threads and not a libuv loop like the metrics server: every S3
 * request does blocking work (catalog queries, and object reads that wait
 * for chunks from the fetcher, as FUSE workers do), and a GetObject
 * streams up to gigabytes at the client's pace. A thread per connection
 * keeps each of them off everybody else's path, with bounded memory: a
 * connection holds its head buffer and one read step of an object.
 *
 * Stopping: the listening socket is shut down (accept returns), then every
 * connection's socket (its blocked recv or send returns), and hyd_s3_stop
 * waits until the last connection thread is gone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "hydrator/metrics/hyd_metrics.h"
#include "hydrator/s3/hyd_s3_conn_priv.h"

#define S3_CONNS_MAX 64u
#define S3_IDLE_S 60 /* a connection waiting for a request */
#define S3_SEND_S 60 /* a send that makes no progress */
#define S3_BACKLOG 64

static const char *reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 206:
		return "Partial Content";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 416:
		return "Range Not Satisfiable";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	default:
		return "Internal Server Error";
	}
}

int hyd_s3__send_iov(struct hyd_s3_conn *c, struct iovec *iov, size_t n)
{
	while (n > 0) {
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n};
		ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
		size_t left;

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		left = (size_t)w;
		while (n > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}

int hyd_s3__send_head(struct hyd_s3_conn *c, int status, const char *ctype,
		      uint64_t length, const char *extra)
{
	char head[1536], date[40];
	struct iovec iov;
	int n;

	hyd_s3_http_date(base_wall_ns() / 1000000000, date);
	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %llu\r\nDate: %s\r\n"
		     "x-amz-request-id: %s\r\nServer: ferry-hydrator\r\n"
		     "%s\r\n",
		     status, reason(status), ctype, (unsigned long long)length,
		     date, c->request_id, extra);
	if (n < 0 || (size_t)n >= sizeof(head))
		return -ENAMETOOLONG;
	iov.iov_base = head;
	iov.iov_len = (size_t)n;
	return hyd_s3__send_iov(c, &iov, 1);
}

int hyd_s3__send(struct hyd_s3_conn *c, int status, const char *ctype,
		 const char *extra, const void *body, size_t len, int head_only)
{
	struct iovec iov;
	int r = hyd_s3__send_head(c, status, ctype, len, extra);

	if (r < 0 || head_only || len == 0)
		return r;
	iov.iov_base = (void *)body;
	iov.iov_len = len;
	return hyd_s3__send_iov(c, &iov, 1);
}

int hyd_s3__send_error(struct hyd_s3_conn *c, int status, const char *code,
		       const char *msg, const char *resource, int head_only)
{
	struct base_buf b = {0};
	int r;

	hyd_s3_xml_error(&b, code, msg, resource, c->request_id);
	if (b.err) {
		base_buf_fini(&b);
		return b.err;
	}
	r = hyd_s3__send(c, status, "application/xml", "", b.buf, b.len,
			 head_only);
	base_buf_fini(&b);
	return r;
}

/* -- http_parser callbacks: the head into the arena -- */

/* Append at to the arena as part of a piece of kind k. */
static int arena_put(http_parser *hp, int k, const char *at, size_t len)
{
	struct hyd_s3_conn *c = hp->data;

	if (c->piece != k) {
		if (c->piece != 0)
			c->arena[c->alen++] = '\0';
		if (k == 2) {
			if (c->nhdr == HYD_S3_HDRS_MAX) {
				c->fail = 431;
				return -1;
			}
			c->name_off[c->nhdr++] = c->alen;
		} else if (k == 3) {
			c->value_off[c->nhdr - 1] = c->alen;
		} else {
			c->url_off = c->alen;
		}
		c->piece = k;
	}
	/* the arena has room for the head and every NUL */
	if (c->alen + len + 1 > sizeof(c->arena) - HYD_S3_HDRS_MAX * 2 ||
	    c->alen + len > HYD_S3_HEAD_MAX) {
		c->fail = 431;
		return -1;
	}
	memcpy(c->arena + c->alen, at, len);
	c->alen += len;
	return 0;
}

static int cb_url(http_parser *hp, const char *at, size_t len)
{
	return arena_put(hp, 1, at, len);
}

static int cb_field(http_parser *hp, const char *at, size_t len)
{
	return arena_put(hp, 2, at, len);
}

static int cb_value(http_parser *hp, const char *at, size_t len)
{
	struct hyd_s3_conn *c = hp->data;

	if (c->piece != 3 && c->piece != 2)
		return -1;
	return arena_put(hp, 3, at, len);
}

static int cb_headers_complete(http_parser *hp)
{
	struct hyd_s3_conn *c = hp->data;

	c->arena[c->alen++] = '\0';
	c->piece = 0;
	return 0;
}

static int cb_message_complete(http_parser *hp)
{
	struct hyd_s3_conn *c = hp->data;

	c->done = 1;
	http_parser_pause(hp, 1);
	return 0;
}

static const http_parser_settings SETTINGS = {
    .on_url = cb_url,
    .on_header_field = cb_field,
    .on_header_value = cb_value,
    .on_headers_complete = cb_headers_complete,
    .on_message_complete = cb_message_complete,
};

/* The parsed head as a request (pointers into the arena). */
static void req_build(struct hyd_s3_conn *c, struct hyd_s3_req *rq)
{
	char *url = c->arena + c->url_off, *q;
	size_t i;

	memset(rq, 0, sizeof(*rq));
	rq->method = http_method_str((enum http_method)c->parser.method);
	q = strchr(url, '?');
	if (q)
		*q++ = '\0';
	rq->path = url;
	rq->query = q ? q : url + strlen(url);
	for (i = 0; i < c->nhdr; i++) {
		char *p;

		rq->hdr[i].name = c->arena + c->name_off[i];
		rq->hdr[i].value =
		    c->value_off[i] ? c->arena + c->value_off[i] : (char *)"";
		for (p = rq->hdr[i].name; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
	}
	rq->nhdr = c->nhdr;
}

/* Read and parse until a request is complete. 0, or -errno / -EPROTO
 * (c->fail may then say which answer to give). */
static int conn_read_request(struct hyd_s3_conn *c)
{
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	c->alen = 0;
	c->piece = 0;
	c->nhdr = 0;
	c->url_off = 0;
	memset(c->value_off, 0, sizeof(c->value_off));
	c->fail = 0;
	c->done = 0;
	for (;;) {
		size_t used;
		ssize_t n;

		if (c->rlen > 0) {
			used = http_parser_execute(&c->parser, &SETTINGS,
						   c->rbuf, c->rlen);
			if (c->done) {
				/* keep what belongs to the next request */
				memmove(c->rbuf, c->rbuf + used,
					c->rlen - used);
				c->rlen -= used;
				return 0;
			}
			if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) {
				if (!c->fail)
					c->fail = 400;
				return -EPROTO;
			}
			c->rlen = 0;
		}
		n = recv(c->fd, c->rbuf, sizeof(c->rbuf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ECONNRESET;
		c->rlen = (size_t)n;
	}
}

static void conn_serve(struct hyd_s3_conn *c)
{
	struct hyd_s3_req rq;

	for (;;) {
		uint64_t id =
		    __atomic_add_fetch(&c->s->reqs, 1, __ATOMIC_RELAXED);
		int keep;

		snprintf(c->request_id, sizeof(c->request_id), "%016llX",
			 (unsigned long long)id);
		if (conn_read_request(c) < 0) {
			if (c->fail)
				hyd_s3__send_error(
				    c, c->fail,
				    c->fail == 431
					? "RequestHeaderSectionTooLarge"
					: "InvalidRequest",
				    "cannot parse the request", "", 0);
			return;
		}
		keep = http_should_keep_alive(&c->parser);
		http_parser_pause(&c->parser, 0);
		req_build(c, &rq);
		if (hyd_s3__serve(c, &rq) < 0 || !keep)
			return;
	}
}

static void conn_unlink(struct hyd_s3_conn *c)
{
	struct hyd_s3 *s = c->s;

	pthread_mutex_lock(&s->mu);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->n_conns--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void *conn_thread(void *p)
{
	struct hyd_s3_conn *c = p;

	conn_serve(c);
	conn_unlink(c);
	close(c->fd);
	free(c);
	return NULL;
}

/* Take connection fd: a thread of its own, or closed when there are too
 * many or the server is stopping. */
static void conn_start(struct hyd_s3 *s, int fd)
{
	struct timeval idle = {.tv_sec = S3_IDLE_S};
	struct timeval snd = {.tv_sec = S3_SEND_S};
	struct hyd_s3_conn *c;
	pthread_attr_t attr;
	pthread_t th;
	int one = 1, sndbuf = 4 << 20;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof(snd));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a whole read step fits: the sender hands over 1 MiB at a time */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	pthread_mutex_lock(&s->mu);
	if (s->stop || s->n_conns >= S3_CONNS_MAX) {
		pthread_mutex_unlock(&s->mu);
		base_debug("s3: connection refused conns=%zu", s->n_conns);
		close(fd);
		free(c);
		return;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->n_conns++;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, conn_thread, c) != 0) {
		pthread_mutex_unlock(&s->mu);
		conn_unlink(c);
		close(fd);
		free(c);
	} else {
		pthread_mutex_unlock(&s->mu);
	}
	pthread_attr_destroy(&attr);
}

static void *accept_thread(void *p)
{
	struct hyd_s3 *s = p;

	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		int stop;

		pthread_mutex_lock(&s->mu);
		stop = s->stop;
		pthread_mutex_unlock(&s->mu);
		if (stop) {
			if (fd >= 0)
				close(fd);
			return NULL;
		}
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				usleep(100000); /* let connections end */
			continue;
		}
		conn_start(s, fd);
	}
}

int hyd_s3_host_is_loopback(const char *host)
{
	struct addrinfo hints, *res = NULL, *a;
	int lo = 1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	for (a = res; a; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			const struct sockaddr_in *in = (const void *)a->ai_addr;

			if ((ntohl(in->sin_addr.s_addr) >> 24) != 127)
				lo = 0;
		} else if (a->ai_family == AF_INET6) {
			const struct sockaddr_in6 *in6 =
			    (const void *)a->ai_addr;

			if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
				lo = 0;
		} else {
			lo = 0;
		}
	}
	freeaddrinfo(res);
	return lo;
}

/* A listening socket on host:port. fd or -errno. */
static int s3_bind(const char *host, uint16_t port)
{
	struct addrinfo hints, *res = NULL;
	char ps[8];
	int fd, one = 1, r;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
	snprintf(ps, sizeof(ps), "%u", (unsigned)port);
	if (getaddrinfo(host, ps, &hints, &res) != 0)
		return -EADDRNOTAVAIL;
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
	    listen(fd, S3_BACKLOG) < 0) {
		r = -errno;
		close(fd);
		goto out;
	}
	r = fd;
out:
	freeaddrinfo(res);
	return r;
}

int hyd_s3_start(const char *listen_addr, const struct hyd_s3_src *src,
		 hyd_s3 **ret)
{
	char host[256];
	uint16_t port;
	sigset_t all, old;
	hyd_s3 *s;
	int r;

	*ret = NULL;
	/* the same HOST:PORT rule as --metrics-listen */
	if (hyd_metrics_listen_split(listen_addr, host, sizeof(host), &port) <
	    0) {
		base_error("--s3-listen wants HOST:PORT, not '%s'",
			   listen_addr);
		return -EINVAL;
	}
	if (!src->keys && !hyd_s3_host_is_loopback(host)) {
		base_error("--s3-listen %s is not a loopback address: give "
			   "--s3-keys FILE (anonymous access is for loopback "
			   "only)",
			   listen_addr);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->src = *src;
	snprintf(s->listen, sizeof(s->listen), "%s", listen_addr);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	hyd_s3_list_cache_init(&s->lists);
	s->lfd = s3_bind(host, port);
	if (s->lfd < 0) {
		r = s->lfd;
		base_log_err(BASE_LOG_ERROR, r, "cannot serve S3 listen=%s",
			     listen_addr);
		goto fail;
	}
	/* signals stay with the main thread (FUSE's handlers); the
	 * connection threads inherit this mask */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = -pthread_create(&s->th, NULL, accept_thread, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot start the S3 thread");
		close(s->lfd);
		goto fail;
	}
	s->started = 1;
	base_info("serving S3 url=http://%s/%s auth=%s", listen_addr,
		  src->bucket, src->keys ? "sigv4" : "anonymous");
	*ret = s;
	return 0;
fail:
	hyd_s3_list_cache_fini(&s->lists);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	return r;
}

void hyd_s3_stop(hyd_s3 *s)
{
	struct hyd_s3_conn *c;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_mutex_unlock(&s->mu);
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->th, NULL);
	close(s->lfd);
	pthread_mutex_lock(&s->mu);
	for (c = s->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	while (s->n_conns > 0)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	hyd_s3_list_cache_fini(&s->lists);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}
