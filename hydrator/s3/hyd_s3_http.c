/*
 * hydrator/s3/hyd_s3_http.c — the server behind --s3-listen: an accept
 * thread and one thread per connection (at most HTTPD_LIMITS_S3's
 * max_conns), each reading requests with the shared request reader
 * (keep-alive, the limits of HTTPD_LIMITS_S3), handing them to
 * hyd_s3__serve, and writing the answers, heads made by the shared
 * response writer, with blocking sends.
 *
 * Why threads and not the libuv engine the replicator and the metrics
 * server share (catalog/httpd/): every S3 request does blocking work
 * (catalog queries, and object reads that wait for chunks from the
 * fetcher, as FUSE workers do), and a GetObject streams up to gigabytes
 * at the client's pace. On an event loop each of those would have to be
 * turned into callbacks and worker jobs, or stall every other connection
 * of the loop; a thread per connection keeps each of them off everybody
 * else's path, with bounded memory: a connection holds its reader's head
 * and one read step of an object. The timeouts are the engine's, kept
 * here with poll: idle_ms for a request to begin (and for a send to make
 * progress), header_ms for the rest of it once it has.
 *
 * Stopping: the listening socket is shut down (accept returns), then every
 * connection's socket (its blocked poll, recv or send returns), and
 * hyd_s3_stop waits until the last connection thread is gone.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "hydrator/s3/hyd_s3_conn_priv.h"

#define S3_BACKLOG 64

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
	char head[2048], lines[1536];
	struct httpd_head h = {
	    .status = status,
	    .server = HTTPD_SERVER_HYDRATOR,
	    .ctype = ctype,
	    .length = (int64_t)length,
	    .extra = lines,
	    .http_minor = c->http_minor,
	    .keep_alive = c->keep_alive,
	};
	struct iovec iov;
	int n;

	n = snprintf(lines, sizeof(lines), "x-amz-request-id: %s\r\n%s",
		     c->request_id, extra);
	if (n < 0 || (size_t)n >= sizeof(lines))
		return -ENAMETOOLONG;
	n = httpd_head_format(&h, head, sizeof(head));
	if (n < 0)
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

/* The parsed head as a request: pointers into the reader, which keeps
 * them until the next request begins. */
static void req_build(struct hyd_s3_conn *c, struct hyd_s3_req *rq)
{
	struct httpd_msg m;
	char *q;
	size_t i, vlen, nlen;

	memset(rq, 0, sizeof(*rq));
	httpd_reader_msg(c->rd, &m);
	rq->method = m.method_name;
	c->http_minor = m.http_minor;
	q = strchr(m.url, '?');
	if (q)
		*q++ = '\0';
	rq->path = m.url;
	rq->query = q ? q : m.url + strlen(m.url);
	/* the reader refuses more lines than HTTPD_LIMITS_S3 allows */
	for (i = 0; i < m.nfields && i < HYD_S3_HDRS_MAX; i++)
		httpd_reader_field(c->rd, i, &rq->hdr[i].name, &nlen,
				   &rq->hdr[i].value, &vlen);
	rq->nhdr = i;
}

/* Wait until fd has bytes, until deadline (base_now_ns). 0, -ETIMEDOUT,
 * or -errno. */
static int wait_readable(int fd, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	for (;;) {
		uint64_t now = base_now_ns();
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* Read until a request is complete; its head into rq. 0, -EPROTO (the
 * reader refused it: httpd_reader_fail says what to answer), or -errno
 * (the client went away or took too long: nothing to answer). */
static int conn_read_request(struct hyd_s3_conn *c, struct hyd_s3_req *rq)
{
	const struct httpd_limits *lim = &c->s->lim;
	uint64_t deadline = base_now_ns() + lim->idle_ms * 1000000ull;

	for (;;) {
		ssize_t n;
		int r;

		while (c->rlen > 0) {
			int was_busy = httpd_reader_busy(c->rd);
			enum httpd_rd ev;
			size_t used;

			ev = httpd_reader_feed(c->rd, c->rbuf + c->roff,
					       c->rlen, &used);
			c->roff += used;
			c->rlen -= used;
			/* a request began: the rest of it within header_ms */
			if (!was_busy &&
			    (httpd_reader_busy(c->rd) || ev != HTTPD_RD_MORE))
				deadline =
				    base_now_ns() + lim->header_ms * 1000000ull;
			if (ev == HTTPD_RD_HEAD) {
				req_build(c, rq);
			} else if (ev == HTTPD_RD_END) {
				c->keep_alive = httpd_reader_keep_alive(c->rd);
				return 0;
			} else if (ev == HTTPD_RD_FAIL) {
				return -EPROTO;
			} else if (ev == HTTPD_RD_MORE && used == 0) {
				break;
			}
			/* HTTPD_RD_BODY: no body is kept (no writes) */
		}
		c->roff = c->rlen = 0;
		r = wait_readable(c->fd, deadline);
		if (r < 0)
			return r;
		n = recv(c->fd, c->rbuf, sizeof(c->rbuf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ECONNRESET;
		c->rlen = (size_t)n;
	}
}

/* The S3 error code of a request the reader refused. */
static const char *fail_code(int status)
{
	switch (status) {
	case 405:
		return "MethodNotAllowed";
	case 413:
		return "EntityTooLarge";
	case 414:
		return "InvalidURI";
	case 431:
		return "RequestHeaderSectionTooLarge";
	case 500:
		return "InternalError";
	default:
		return "InvalidRequest";
	}
}

static void conn_serve(struct hyd_s3_conn *c)
{
	struct hyd_s3_req rq;

	for (;;) {
		uint64_t id =
		    __atomic_add_fetch(&c->s->reqs, 1, __ATOMIC_RELAXED);
		const char *detail;
		int r, st;

		snprintf(c->request_id, sizeof(c->request_id), "%016llX",
			 (unsigned long long)id);
		c->http_minor = 1;
		c->keep_alive = 0;
		r = conn_read_request(c, &rq);
		if (r == -EPROTO) {
			st = httpd_reader_fail(c->rd, &detail);
			hyd_s3__send_error(c, st, fail_code(st), detail, "", 0);
		}
		if (r < 0)
			return;
		if (hyd_s3__serve(c, &rq) < 0 || !c->keep_alive)
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
	httpd_reader_free(c->rd);
	free(c);
	return NULL;
}

/* Take connection fd: a thread of its own, or closed when there are too
 * many or the server is stopping. */
static void conn_start(struct hyd_s3 *s, int fd)
{
	/* an answer the client does not read: the idle timeout, as the
	 * engine's "answer not read" */
	struct timeval snd = {.tv_sec = (time_t)(s->lim.idle_ms / 1000),
			      .tv_usec =
				  (suseconds_t)(s->lim.idle_ms % 1000 * 1000)};
	struct hyd_s3_conn *c;
	pthread_attr_t attr;
	pthread_t th;
	int one = 1, sndbuf = 4 << 20;

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof(snd));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a whole read step fits: the sender hands over 1 MiB at a time */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c = calloc(1, sizeof(*c));
	if (!c || httpd_reader_new(&s->lim, &c->rd) < 0) {
		free(c);
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	pthread_mutex_lock(&s->mu);
	if (s->stop || s->n_conns >= s->lim.max_conns) {
		pthread_mutex_unlock(&s->mu);
		base_debug("s3: connection refused conns=%zu", s->n_conns);
		close(fd);
		httpd_reader_free(c->rd);
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
		httpd_reader_free(c->rd);
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
	return httpd_host_loopback(host);
}

/* The listening socket of listen_addr and its name with the port bound
 * (port 0 asked for any). 0 or -errno (logged). */
static int s3_listen(struct hyd_s3 *s, const char *listen_addr, char *name,
		     size_t cap)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	int r = httpd_listen_resolve(listen_addr, &sa);

	if (r == 0)
		r = s->lfd = httpd_listen_socket(&sa, S3_BACKLOG);
	if (r >= 0 && getsockname(s->lfd, (struct sockaddr *)&sa, &len) < 0)
		r = -errno;
	if (r >= 0)
		r = httpd_listen_name(listen_addr, (const struct sockaddr *)&sa,
				      name, cap);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot serve S3 listen=%s",
			     listen_addr);
		if (s->lfd >= 0)
			close(s->lfd);
		s->lfd = -1;
	}
	return r < 0 ? r : 0;
}

int hyd_s3_start(const char *listen_addr, const struct hyd_s3_src *src,
		 hyd_s3 **ret)
{
	char host[HTTPD_HOST_MAX], name[HTTPD_HOST_MAX + 16];
	uint16_t port;
	sigset_t all, old;
	hyd_s3 *s;
	int r;

	*ret = NULL;
	if (httpd_listen_split(listen_addr, host, sizeof(host), &port) < 0) {
		base_error("--s3-listen wants HOST:PORT, not '%s'",
			   listen_addr);
		return -EINVAL;
	}
	if (!src->keys && !httpd_host_loopback(host)) {
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
	s->lim = HTTPD_LIMITS_S3;
	s->lfd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	hyd_s3_list_cache_init(&s->lists);
	r = s3_listen(s, listen_addr, name, sizeof(name));
	if (r < 0)
		goto fail;
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
	base_info("serving S3 url=http://%s/%s auth=%s", name, src->bucket,
		  src->keys ? "sigv4" : "anonymous");
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
