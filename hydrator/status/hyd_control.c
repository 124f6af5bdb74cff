/*
 * hydrator/status/hyd_control.c — the server end of CACHEDIR/control.sock.
 *
 * One thread of its own poll()s the listening socket and a self-pipe; the
 * pipe is how hyd_control_stop wakes it. Clients are served one at a time,
 * each under a deadline (a client that connects and says nothing cannot
 * hold the thread longer than that), and every wait also watches the pipe,
 * so stopping is prompt even mid-client. Neither the fetch loop nor a FUSE
 * worker ever waits on a status request.
 *
 * The cache half of a status (hyd_status_from_cache) scans the catalog:
 * seconds on a tree of millions of chunks, longer than a client waits. So a
 * second thread, the scanner, keeps the latest result (the memo): it scans
 * once at start and again on demand when a request finds the memo older
 * than CONTROL_REUSE_FACTOR times the last scan took (at least
 * CONTROL_REUSE_MIN_MS). Such a request waits briefly for the new scan and
 * otherwise answers from the old memo plus the live callback, so a client
 * never times out behind a scan. With no memo yet and none in time, the
 * reply is an error line (the client then reads the files itself).
 *
 * Only the hydrator's own user and root are answered: the socket file is
 * 0600 in a 0700 cache directory, and each client's credentials
 * (SO_PEERCRED) are checked as well, so a socket reached some other way
 * (a directory or socket whose mode someone widened, a descriptor passed
 * on) still tells another user nothing; such a client gets an error line.
 *
 * Protocol (hyd_control.h): one request line, one reply line, close.
 *   "status"  -> hyd_status_json of the live status
 *   "gc"      -> the numbers of a garbage collection of the store, run
 *                by the mount between two switches (hyd_gc)
 *   otherwise -> {"error":"unknown command"}
 * Every reply line is made by jansson, the error lines too.
 *
 * Cleanup style in this file: goto out.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "hydrator/status/hyd_control.h"

#define CONTROL_CLIENT_MS 2000 /* one client's whole exchange */
#define CONTROL_REQ_MAX 4200   /* bytes of a request line (pin PATH) */
#define CONTROL_BACKLOG 8
#define CONTROL_REUSE_MIN_MS 1000
#define CONTROL_REUSE_FACTOR 4
#define CONTROL_FIRST_SCAN_MS 1500 /* a request waits this long for one */
#define CONTROL_ERROR_MAX 256	   /* bytes of an error reply's text */

struct hyd_control {
	char *cache_dir;
	struct sockaddr_un addr;
	dev_t sock_dev; /* the socket file we bound: stop removes only it */
	ino_t sock_ino;
	int lfd;
	int wake[2]; /* self-pipe: [0] polled by the thread, [1] written */
	hyd_control_live_fn live;
	hyd_control_gc_fn gc;
	hyd_control_pin_fn pin; /* __atomic */
	void *arg;
	pthread_t thread;
	int started;

	pthread_t scanner;
	int scanner_started;
	int sync_ready;	    /* mu and cv initialized */
	pthread_mutex_t mu; /* guards everything below */
	pthread_cond_t cv;  /* CLOCK_MONOTONIC; scan wanted, scan done, stop */
	int stopping, scan_wanted, scanning;
	uint64_t scans; /* finished scans, successful or not */
	int scan_err;	/* -errno of the last scan, 0 when it worked */
	int have_memo;
	struct hyd_status memo; /* the last successful scan */
	int64_t memo_at_ms, memo_cost_ms;
};

/* base_now_ns in ms: the clock of the condition variable's deadlines. */
static int64_t mono_ms(void)
{
	return (int64_t)(base_now_ns() / 1000000u);
}

/* Wait until fd has events, the stop pipe is readable, or the deadline.
 * 0 when fd is ready; -ECANCELED on stop; -ETIMEDOUT; -errno. */
static int wait_client(hyd_control *c, int fd, short events, int64_t deadline)
{
	struct pollfd p[2] = {{.fd = fd, .events = events},
			      {.fd = c->wake[0], .events = POLLIN}};
	int64_t left;
	int n;

	for (;;) {
		left = deadline - mono_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(p, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (p[1].revents)
			return -ECANCELED;
		if (p[0].revents)
			return 0;
	}
}

/* Read one request line (without '\n') into buf. A line longer than cap - 1
 * is -EMSGSIZE. */
static int read_request(hyd_control *c, int fd, int64_t deadline, char *buf,
			size_t cap)
{
	size_t got = 0;
	ssize_t n;
	char *nl;
	int r;

	for (;;) {
		if (got >= cap - 1)
			return -EMSGSIZE;
		r = wait_client(c, fd, POLLIN, deadline);
		if (r < 0)
			return r;
		n = recv(fd, buf + got, cap - 1 - got, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPROTO;
		nl = memchr(buf + got, '\n', (size_t)n);
		got += (size_t)n;
		if (nl) {
			/* Tolerate "status\r\n" from a hand-typed client. */
			if (nl > buf && nl[-1] == '\r')
				nl--;
			*nl = '\0';
			return 0;
		}
	}
}

static int write_all_fd(hyd_control *c, int fd, const char *buf, size_t len,
			int64_t deadline)
{
	size_t sent = 0;
	ssize_t n;
	int r;

	while (sent < len) {
		r = wait_client(c, fd, POLLOUT, deadline);
		if (r < 0)
			return r;
		/* MSG_NOSIGNAL: a client that hung up must not SIGPIPE the
		 * hydrator. */
		n = send(fd, buf + sent, len - sent,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -errno;
		sent += (size_t)n;
	}
	return 0;
}

static void *scanner_thread(void *p)
{
	hyd_control *c = p;
	struct hyd_status *st = malloc(sizeof(*st));
	int64_t t0, t1;
	int r, last_err = 0;

	pthread_mutex_lock(&c->mu);
	while (!c->stopping) {
		if (!c->scan_wanted) {
			pthread_cond_wait(&c->cv, &c->mu);
			continue;
		}
		c->scan_wanted = 0;
		c->scanning = 1;
		pthread_mutex_unlock(&c->mu);
		t0 = mono_ms();
		r = st ? hyd_status_from_cache(c->cache_dir, st) : -ENOMEM;
		t1 = mono_ms();
		/* Once per new failure, not once per request that asks. */
		if (r < 0 && r != last_err)
			base_log_err(BASE_LOG_WARN, r,
				     "cannot count the cache for a status "
				     "reply dir=\"%s\"",
				     c->cache_dir);
		last_err = r;
		pthread_mutex_lock(&c->mu);
		if (r == 0) {
			c->memo = *st;
			c->have_memo = 1;
			c->memo_at_ms = t1;
			c->memo_cost_ms = t1 - t0;
		}
		c->scan_err = r;
		c->scanning = 0;
		c->scans++;
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
	free(st);
	return NULL;
}

/* The cache half of a status into *st. A fresh memo is used as is. A stale
 * one (or none) has the scanner count again, and the request waits up to
 * CONTROL_FIRST_SCAN_MS for a scan begun after it: on most trees that ends
 * in time and the answer is current; on huge ones the old memo is sent
 * (and the next request gets the new one). With no memo at all and no scan
 * ending in time: -ETIMEDOUT, or the failed scan's -errno. */
static int cache_status(hyd_control *c, struct hyd_status *st)
{
	int64_t now = mono_ms(), keep, deadline = now + CONTROL_FIRST_SCAN_MS;
	uint64_t target;
	int r = 0;

	pthread_mutex_lock(&c->mu);
	keep = c->memo_cost_ms * CONTROL_REUSE_FACTOR;
	if (keep < CONTROL_REUSE_MIN_MS)
		keep = CONTROL_REUSE_MIN_MS;
	if (c->have_memo && now - c->memo_at_ms < keep)
		goto done;
	/* A scan already running may have read the store before now. */
	target = c->scans + (c->scanning ? 2 : 1);
	c->scan_wanted = 1;
	pthread_cond_broadcast(&c->cv);
	while (c->scans < target && !c->stopping) {
		if (base_cond_wait_until(&c->cv, &c->mu,
					 (uint64_t)deadline * 1000000u) ==
		    ETIMEDOUT)
			break;
	}
done:
	if (c->have_memo)
		*st = c->memo;
	else if (c->scans > 0 && c->scan_err < 0)
		r = c->scan_err;
	else
		r = -ETIMEDOUT;
	pthread_mutex_unlock(&c->mu);
	return r;
}

/* Finish a reply line of n bytes (< cap - 1, or -errno) in buf with its
 * newline; its length into *ret. */
static int end_line(int n, char *buf, size_t cap, size_t *ret)
{
	if (n < 0 || (size_t)n + 1 >= cap)
		return n == -ENOMEM ? -ENOMEM : -EMSGSIZE;
	buf[n] = '\n';
	*ret = (size_t)n + 1;
	return 0;
}

/* The line {"error":"TEXT"} into buf, newline included. */
static int error_reply(const char *text, char *buf, size_t cap, size_t *ret)
{
	json_t *o = json_object();
	int n = -ENOMEM;

	if (o && json_object_set_new(o, "error", base_json_str(text)) == 0)
		n = base_json_line(o, buf, cap - 1);
	json_decref(o);
	return end_line(n, buf, cap, ret);
}

/* The reply to "status": cache numbers plus the live callback's. */
static int status_reply(hyd_control *c, char *buf, size_t cap, size_t *ret)
{
	char text[CONTROL_ERROR_MAX];
	struct hyd_status *st;
	int r;

	st = malloc(sizeof(*st)); /* 2.5 KiB: keep it off the thread stack */
	if (!st)
		return -ENOMEM;
	r = cache_status(c, st);
	if (r < 0) {
		/* Not a status without its counts: an error line, and the
		 * client reads the files itself. */
		snprintf(text, sizeof(text), "cannot count the cache: %s",
			 r == -ETIMEDOUT ? "still scanning" : strerror(-r));
		free(st);
		return error_reply(text, buf, cap, ret);
	}
	if (c->live)
		c->live(c->arg, st);
	r = hyd_status_json(st, buf, cap - 1);
	free(st);
	return end_line(r, buf, cap, ret);
}

int hyd_control_status(hyd_control *c, struct hyd_status *ret)
{
	struct hyd_status *st = malloc(sizeof(*st));
	int r;

	if (!st)
		return -ENOMEM;
	r = cache_status(c, st);
	if (r == 0) {
		if (c->live)
			c->live(c->arg, st);
		*ret = *st;
	}
	free(st);
	return r;
}

/* The reply to "gc": the collection's numbers, or an error line. */
static int gc_reply(hyd_control *c, char *buf, size_t cap, size_t *ret)
{
	struct hyd_gc_result res;
	char text[CONTROL_ERROR_MAX];
	int r;

	if (!c->gc)
		return error_reply("no garbage collection here", buf, cap, ret);
	memset(&res, 0, sizeof(res));
	r = c->gc(c->arg, &res);
	if (r < 0) {
		snprintf(text, sizeof(text), "garbage collection failed: %s",
			 strerror(-r));
		return error_reply(text, buf, cap, ret);
	}
	r = hyd__gc_json(&res, buf, cap - 1);
	return end_line(r, buf, cap, ret);
}

void hyd_control_set_pin(hyd_control *c, hyd_control_pin_fn fn)
{
	if (c)
		__atomic_store_n(&c->pin, fn, __ATOMIC_RELEASE);
}

/* The reply to "pin PATH": {"pinned":PATH} or an error line. */
static int pin_reply(hyd_control *c, const char *path, char *buf, size_t cap,
		     size_t *ret)
{
	hyd_control_pin_fn fn = __atomic_load_n(&c->pin, __ATOMIC_ACQUIRE);
	char text[CONTROL_ERROR_MAX];
	json_t *o;
	int n = -ENOMEM;

	if (!fn)
		return error_reply("this hydrator takes no pins", buf, cap,
				   ret);
	text[0] = '\0';
	n = fn(c->arg, path, text, sizeof(text));
	if (n < 0)
		return error_reply(text[0] ? text : strerror(-n), buf, cap,
				   ret);
	o = json_object();
	n = -ENOMEM;
	if (o && json_object_set_new(o, "pinned", base_json_str(path)) == 0)
		n = base_json_line(o, buf, cap - 1);
	json_decref(o);
	return end_line(n, buf, cap, ret);
}

/* 1 when the client on fd runs as our effective user or as root. */
static int peer_allowed(int fd, uid_t *ret_uid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	*ret_uid = (uid_t)-1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
	    len != sizeof(cr))
		return 0;
	*ret_uid = cr.uid;
	return cr.uid == 0 || cr.uid == geteuid();
}

/* One client: request, reply, close. Errors end only this client. */
static void serve_client(hyd_control *c, int fd)
{
	int64_t deadline = mono_ms() + CONTROL_CLIENT_MS;
	char req[CONTROL_REQ_MAX];
	size_t len = 0;
	char *out = NULL;
	uid_t uid;
	int r, allowed = peer_allowed(fd, &uid);

	r = read_request(c, fd, deadline, req, sizeof(req));
	if (r < 0)
		goto out;
	out = malloc(HYD_STATUS_JSON_MAX + 2);
	if (!out)
		goto out;
	if (!allowed) {
		/* after the request, so the client reads this line rather
		 * than a reset */
		base_debug("control client refused uid=%ld", (long)uid);
		r = error_reply("permission denied: this hydrator answers its "
				"own user and root only",
				out, HYD_STATUS_JSON_MAX + 2, &len);
	} else if (!strcmp(req, "status")) {
		r = status_reply(c, out, HYD_STATUS_JSON_MAX + 2, &len);
	} else if (!strcmp(req, "gc")) {
		r = gc_reply(c, out, HYD_STATUS_JSON_MAX + 2, &len);
		/* A collection takes as long as it takes: the client waits
		 * for it; the reply gets the usual time to go out. */
		deadline = mono_ms() + CONTROL_CLIENT_MS;
	} else if (!strncmp(req, "pin ", 4) && req[4]) {
		r = pin_reply(c, req + 4, out, HYD_STATUS_JSON_MAX + 2, &len);
	} else {
		r = error_reply("unknown command", out, HYD_STATUS_JSON_MAX + 2,
				&len);
	}
	if (r == 0)
		write_all_fd(c, fd, out, len, deadline);
out:
	free(out);
	close(fd);
}

static void *control_thread(void *p)
{
	hyd_control *c = p;
	struct pollfd fds[2];
	int fd;

	for (;;) {
		fds[0] = (struct pollfd){.fd = c->lfd, .events = POLLIN};
		fds[1] = (struct pollfd){.fd = c->wake[0], .events = POLLIN};
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[1].revents)
			break;
		if (!fds[0].revents)
			continue;
		fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			/* EMFILE and friends: the listener stays readable, so
			 * pause instead of spinning (still waking on stop). */
			if (errno != EINTR && errno != EAGAIN &&
			    errno != ECONNABORTED && poll(&fds[1], 1, 100) > 0)
				break;
			continue;
		}
		serve_client(c, fd);
	}
	return NULL;
}

/* A socket file already at the path: -EBUSY when someone answers on it,
 * else remove it (a hydrator that died leaves it behind). Only one process
 * holds the store's lock, so nobody else is binding here concurrently. */
static int clear_stale(const hyd_control *c)
{
	struct stat sb;
	int fd, r;

	if (lstat(c->addr.sun_path, &sb) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(sb.st_mode))
		return -EEXIST; /* not ours to remove */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)&c->addr, sizeof(c->addr));
	close(fd);
	if (r == 0)
		return -EBUSY;
	if (unlink(c->addr.sun_path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int control_listen(hyd_control *c)
{
	struct stat sb;
	int r;

	r = clear_stale(c);
	if (r < 0)
		return r;
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->lfd < 0)
		return -errno;
	if (bind(c->lfd, (const struct sockaddr *)&c->addr, sizeof(c->addr)) <
	    0)
		return errno == EADDRINUSE ? -EBUSY : -errno;
	/* Before listen: until then a connect is refused, so nobody gets in
	 * while the mode is still the umask's. */
	if (chmod(c->addr.sun_path, 0600) < 0 ||
	    lstat(c->addr.sun_path, &sb) < 0)
		goto fail;
	c->sock_dev = sb.st_dev;
	c->sock_ino = sb.st_ino;
	if (listen(c->lfd, CONTROL_BACKLOG) < 0)
		goto fail;
	return 0;
fail:
	r = -errno;
	unlink(c->addr.sun_path);
	return r;
}

static int sync_init(hyd_control *c)
{
	int r;

	r = pthread_mutex_init(&c->mu, NULL);
	if (r)
		return -r;
	r = base_cond_init(&c->cv);
	if (r < 0) {
		pthread_mutex_destroy(&c->mu);
		return r;
	}
	c->sync_ready = 1;
	return 0;
}

int hyd_control_start(const char *cache_dir, hyd_control_live_fn live,
		      hyd_control_gc_fn gc, void *arg, hyd_control **ret)
{
	sigset_t all, old;
	hyd_control *c;
	int n, r;

	*ret = NULL;
	if (!cache_dir)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->lfd = c->wake[0] = c->wake[1] = -1;
	c->live = live;
	c->gc = gc;
	c->arg = arg;
	c->addr.sun_family = AF_UNIX;
	n = snprintf(c->addr.sun_path, sizeof(c->addr.sun_path),
		     "%s/control.sock", cache_dir);
	if (n < 0 || (size_t)n >= sizeof(c->addr.sun_path)) {
		r = -ENAMETOOLONG;
		goto fail;
	}
	c->cache_dir = strdup(cache_dir);
	if (!c->cache_dir) {
		r = -ENOMEM;
		goto fail;
	}
	if (pipe2(c->wake, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail;
	}
	r = sync_init(c);
	if (r < 0)
		goto fail;
	r = control_listen(c);
	if (r < 0)
		goto fail;
	/* The thread takes no signals: the daemon's handlers run elsewhere
	 * and its poll() is never cut short by them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	c->scan_wanted = 1; /* the first scan starts now, before any ask */
	r = -pthread_create(&c->scanner, NULL, scanner_thread, c);
	if (r == 0) {
		c->scanner_started = 1;
		r = -pthread_create(&c->thread, NULL, control_thread, c);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		unlink(c->addr.sun_path);
		goto fail;
	}
	c->started = 1;
	*ret = c;
	return 0;
fail:
	hyd_control_stop(c);
	return r;
}

void hyd_control_stop(hyd_control *c)
{
	struct stat sb;
	ssize_t n;

	if (!c)
		return;
	if (c->started) {
		do
			n = write(c->wake[1], "x", 1);
		while (n < 0 && errno == EINTR);
		pthread_join(c->thread, NULL);
		/* Remove the socket only if it is still the one we bound. */
		if (lstat(c->addr.sun_path, &sb) == 0 &&
		    sb.st_dev == c->sock_dev && sb.st_ino == c->sock_ino)
			unlink(c->addr.sun_path);
	}
	if (c->scanner_started) {
		/* A scan under way finishes first: seconds at worst, on a
		 * huge tree, at unmount. */
		pthread_mutex_lock(&c->mu);
		c->stopping = 1;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->scanner, NULL);
	}
	if (c->sync_ready) {
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
	}
	if (c->lfd >= 0)
		close(c->lfd);
	if (c->wake[0] >= 0)
		close(c->wake[0]);
	if (c->wake[1] >= 0)
		close(c->wake[1]);
	free(c->cache_dir);
	free(c);
}
