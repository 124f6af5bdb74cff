/*
 * bench/rttproxy.c — `rttproxy`: the round-trip time that make bench adds
 * between the sites. This kernel has no netem (and no fq to pace with), so
 * delay is injected in user space: a TCP proxy in the client's namespace
 * that holds every byte it reads for ONE_WAY_MS before it forwards it, in
 * both directions, while tbf on the veth keeps shaping the rate.
 *
 *   rttproxy [--max-buffer BYTES] [--threads N]
 *            LISTEN_HOST:PORT TARGET_HOST:PORT ONE_WAY_MS
 *            [LISTEN_HOST:PORT TARGET_HOST:PORT ...]
 *
 * Model. A byte read at time t from either side goes out at t + ONE_WAY_MS,
 * in order, so a request and its answer gain 2 * ONE_WAY_MS. A new
 * connection is dialled to its target at once, but nothing is forwarded
 * before one extra round trip has passed since the accept (the TCP
 * handshake a real path would pay): a byte read at t leaves at
 * max(t, accept + 2 * ONE_WAY_MS) + ONE_WAY_MS. An EOF is forwarded as
 * shutdown(SHUT_WR) once the bytes before it are out and its own delay has
 * passed; a reset or an error on one side is forwarded the same way, as a
 * reset (SO_LINGER 0) after the bytes before it, and then both sides are
 * closed. Bytes going to a side that failed are dropped. No byte is lost
 * or reordered otherwise.
 *
 * Window. The proxy reads what arrives at once and holds up to
 * --max-buffer bytes per direction (default 64 MiB); when that is full it
 * stops reading, so TCP flow control reaches the sender. To the sender the
 * buffer is a large receive window that the delay does not shrink: a
 * stream can carry up to max-buffer / ONE_WAY_MS (64 MiB / 75 ms = 7
 * Gbit/s), so bulk throughput is limited by tbf's rate, not by window /
 * RTT. That is the model we want: Linux autotunes each connection's
 * windows up to tcp_rmem[2] / tcp_wmem[2], several MB (32 MiB receive on
 * the bench VM), enough for the bandwidth-delay product of the paths we
 * model (2 Gbit/s x 20 ms = 5 MB; 150 ms needs 37.5 MB, which hosts that
 * move data between sites configure); the benchmark compares the tools on
 * the link, not a sysctl. Not modelled: the sender's congestion window
 * grows at the veth's round trip, not the injected one (slow start and
 * loss recovery are faster than on a real path of that RTT).
 *
 * Design. The main thread accepts and hands each connection to one of N
 * worker threads round-robin (a pipe per worker). A worker owns its
 * connections: one epoll (edge-triggered), one timerfd (CLOCK_MONOTONIC,
 * absolute) set to the earliest due mark, a min-heap of directions keyed by
 * their next due mark, and a pool of 256 KiB chunks. A direction is a
 * chain of chunks (bytes in read order, reads of up to 1 MiB with readv)
 * plus a FIFO of marks (due time, end offset, kind: data, EOF or reset);
 * reads less than 50 us apart share a mark, so a stream of small reads
 * costs no memory per read (and a byte may leave up to 50 us early). When
 * a mark is due, the bytes up to it go out with sendmsg (up to 16 chunks a
 * call); when the socket is full, the rest waits for EPOLLOUT. A direction
 * moves at most 1 MiB each way a turn, then waits behind the timers and the
 * other connections (a busy list), so a fast sender cannot delay a due
 * mark. Measured on the 2-core bench VM: one thread carries one stream at
 * 7-12 Gbit/s unshaped (4 streams: 11 Gbit/s, the cores' limit, with 1 or
 * 2 threads) and about 20% of a core at 2 Gbit/s; due marks go out 30-90
 * us late on average. Two threads by default, so many connections can use
 * both cores.
 *
 * Output: one line "rttproxy: ready LISTEN->TARGET one-way X ms" a pair
 * on stdout once all are listening, then it serves until SIGTERM or SIGINT
 * (exit 0). Bad arguments or a failed bind: one line on stderr, exit 2.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_SIZE (256u * 1024u)
#define READ_CHUNKS 4		   /* a read fills at most 1 MiB */
#define WRITE_IOVS 16		   /* a sendmsg sends at most 4 MiB */
#define TURN_BYTES (1024u * 1024u) /* moved each way a turn */
#define POOL_KEEP 256		   /* free chunks a worker keeps (64 MiB) */
#define COALESCE_NS 50000	   /* reads this close share a mark */
#define MAX_EVENTS 256
#define MAX_PAIRS 64
#define MAX_THREADS 64
#define HOSTPORT_MAX 300
#define DEFAULT_MAX_BUFFER (64u * 1024u * 1024u)
#define NS_PER_MS 1000000LL
#define NS_PER_S 1000000000LL

enum side { CLIENT = 0, TARGET = 1 };
enum mark_kind { MARK_DATA, MARK_EOF, MARK_RST };
enum tag_kind { TAG_SOCK, TAG_TIMER, TAG_INBOX, TAG_LISTEN };

/* The one piece of global mutable state: set by SIGTERM / SIGINT. */
static volatile sig_atomic_t stop_requested;

struct pair {
	char listen_text[HOSTPORT_MAX];
	char target_text[HOSTPORT_MAX];
	struct sockaddr_storage listen_addr, target_addr;
	socklen_t listen_len, target_len;
	int lfd;
};

struct config {
	int64_t delay_ns; /* ONE_WAY_MS */
	int64_t setup_ns; /* the handshake's round trip: 2 * delay */
	double one_way_ms;
	size_t max_buffer;
	unsigned nthreads;
	size_t npairs;
	struct pair pairs[MAX_PAIRS];
};

/* What the main thread sends a worker: a pipe write, so atomic. */
struct handoff {
	int fd;
	int pair;
	int64_t accepted_ns;
};

struct tag {
	enum tag_kind kind;
	enum side side;
	struct conn *conn;
	size_t index; /* TAG_LISTEN: the pair */
};

struct chunk {
	struct chunk *next;
	unsigned char data[CHUNK_SIZE];
};

/* A node of a circular list with a sentinel head. */
struct link {
	struct link *prev, *next;
};

struct mark {
	int64_t due;
	uint64_t end; /* offset in the stream after the last byte it covers */
	enum mark_kind kind;
};

/* One direction of a connection: bytes read from src, to be written to
 * dst. Offsets count bytes of the stream: wpos <= avail <= rpos. */
struct dir {
	struct conn *conn;
	enum side src, dst;
	struct chunk *head, *tail;
	size_t head_off; /* first unsent byte in head */
	size_t tail_len; /* bytes filled in tail */
	uint64_t rpos;	 /* bytes read */
	uint64_t avail;	 /* bytes due (may be written) */
	uint64_t wpos;	 /* bytes written */
	struct mark *marks;
	size_t mcap, mhead, mcount;
	size_t heap_idx;  /* SIZE_MAX: not in the heap */
	struct link busy; /* on the worker's busy list: its turn ran out */
	bool in_ready, out_ready;
	bool eof_read;	/* no more reads: EOF, or src failed */
	bool eof_due;	/* the EOF mark is due */
	bool rst_due;	/* the reset mark is due */
	bool shut_done; /* EOF forwarded: shutdown(dst, SHUT_WR) */
	bool discarded; /* dst failed: bytes dropped */
};

struct conn {
	int fd[2];
	bool dead[2];
	bool connecting;
	bool closing;
	int64_t start_ns;
	struct dir d[2]; /* d[0]: client -> target, d[1]: target -> client */
	struct tag tag[2];
	struct conn *prev, *next; /* the worker's live list */
	struct conn *gc_next;	  /* the worker's list of closed conns */
};

struct worker {
	const struct config *cfg;
	pthread_t thread;
	int ep, tfd, inbox, inbox_w;
	struct tag timer_tag, inbox_tag;
	struct dir **heap;
	size_t nheap, heapcap;
	int64_t armed;	  /* the timerfd's due time, or -1 */
	struct link busy; /* directions whose turn ran out with work left */
	struct chunk *pool;
	size_t npool;
	struct conn *live, *gc;
	bool stopping;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static void link_init(struct link *l)
{
	l->prev = l->next = l;
}

static void link_del(struct link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
	link_init(l);
}

static void link_add(struct link *head, struct link *l)
{
	if (l->next != l)
		return;
	l->prev = head->prev;
	l->next = head;
	head->prev->next = l;
	head->prev = l;
}

static struct dir *busy_dir(struct link *l)
{
	return (struct dir *)(void *)((char *)l - offsetof(struct dir, busy));
}

/* ---- chunk pool ---- */

static struct chunk *chunk_get(struct worker *w)
{
	struct chunk *c = w->pool;

	if (c) {
		w->pool = c->next;
		w->npool--;
	} else {
		c = malloc(sizeof(*c));
		if (!c)
			return NULL;
	}
	c->next = NULL;
	return c;
}

static void chunk_put(struct worker *w, struct chunk *c)
{
	if (w->npool >= POOL_KEEP) {
		free(c);
		return;
	}
	c->next = w->pool;
	w->pool = c;
	w->npool++;
}

/* ---- the heap of directions, by the due time of their first mark ---- */

static int64_t dir_key(const struct dir *d)
{
	return d->marks[d->mhead].due;
}

static void heap_swap(struct worker *w, size_t a, size_t b)
{
	struct dir *t = w->heap[a];

	w->heap[a] = w->heap[b];
	w->heap[b] = t;
	w->heap[a]->heap_idx = a;
	w->heap[b]->heap_idx = b;
}

static void heap_up(struct worker *w, size_t i)
{
	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (dir_key(w->heap[p]) <= dir_key(w->heap[i]))
			break;
		heap_swap(w, i, p);
		i = p;
	}
}

static void heap_down(struct worker *w, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < w->nheap && dir_key(w->heap[l]) < dir_key(w->heap[m]))
			m = l;
		if (r < w->nheap && dir_key(w->heap[r]) < dir_key(w->heap[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(w, i, m);
		i = m;
	}
}

static void heap_remove(struct worker *w, struct dir *d)
{
	size_t i = d->heap_idx, last;
	struct dir *m;

	if (i == SIZE_MAX)
		return;
	d->heap_idx = SIZE_MAX;
	last = --w->nheap;
	if (i == last)
		return;
	m = w->heap[last];
	w->heap[i] = m;
	m->heap_idx = i;
	heap_up(w, i);
	heap_down(w, m->heap_idx);
}

/* Put d where its first mark says, or take it out if it has none. */
static int heap_fix(struct worker *w, struct dir *d)
{
	if (d->mcount == 0 || d->discarded) {
		heap_remove(w, d);
		return 0;
	}
	if (d->heap_idx == SIZE_MAX) {
		if (w->nheap == w->heapcap) {
			size_t cap = w->heapcap ? 2 * w->heapcap : 64;
			struct dir **h = realloc(w->heap, cap * sizeof(*h));

			if (!h)
				return -ENOMEM;
			w->heap = h;
			w->heapcap = cap;
		}
		d->heap_idx = w->nheap;
		w->heap[w->nheap++] = d;
		heap_up(w, d->heap_idx);
		return 0;
	}
	heap_up(w, d->heap_idx);
	heap_down(w, d->heap_idx);
	return 0;
}

/* ---- marks ---- */

static int64_t due_of(const struct worker *w, const struct conn *c, int64_t now)
{
	int64_t t = now;

	if (t < c->start_ns + w->cfg->setup_ns)
		t = c->start_ns + w->cfg->setup_ns;
	return t + w->cfg->delay_ns;
}

static int mark_push(struct dir *d, int64_t due, uint64_t end,
		     enum mark_kind kind)
{
	if (kind == MARK_DATA && d->mcount > 0) {
		struct mark *t =
		    &d->marks[(d->mhead + d->mcount - 1) % d->mcap];

		if (t->kind == MARK_DATA && due - t->due <= COALESCE_NS) {
			t->end = end;
			return 0;
		}
	}
	if (d->mcount == d->mcap) {
		size_t cap = d->mcap ? 2 * d->mcap : 16;
		struct mark *m = malloc(cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		for (size_t i = 0; i < d->mcount; i++)
			m[i] = d->marks[(d->mhead + i) % d->mcap];
		free(d->marks);
		d->marks = m;
		d->mcap = cap;
		d->mhead = 0;
	}
	d->marks[(d->mhead + d->mcount) % d->mcap] =
	    (struct mark){.due = due, .end = end, .kind = kind};
	d->mcount++;
	return 0;
}

/* Marks due by now: their bytes may go out. */
static void dir_release(struct dir *d, int64_t now)
{
	while (d->mcount > 0 && d->marks[d->mhead].due <= now) {
		const struct mark *m = &d->marks[d->mhead];

		d->avail = m->end;
		if (m->kind == MARK_EOF)
			d->eof_due = true;
		else if (m->kind == MARK_RST)
			d->rst_due = true;
		d->mhead = (d->mhead + 1) % d->mcap;
		d->mcount--;
	}
}

static void dir_free(struct worker *w, struct dir *d)
{
	heap_remove(w, d);
	link_del(&d->busy);
	while (d->head) {
		struct chunk *n = d->head->next;

		chunk_put(w, d->head);
		d->head = n;
	}
	d->tail = NULL;
	d->head_off = d->tail_len = 0;
	free(d->marks);
	d->marks = NULL;
	d->mcap = d->mhead = d->mcount = 0;
}

/* ---- connections ---- */

static void conn_unlink(struct worker *w, struct conn *c)
{
	dir_free(w, &c->d[0]);
	dir_free(w, &c->d[1]);
	if (c->prev)
		c->prev->next = c->next;
	else
		w->live = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->closing = true;
	c->gc_next = w->gc;
	w->gc = c;
}

/* Close both sides; with reset, as RST (SO_LINGER 0). The memory goes
 * after the current batch of events, which may still name c. */
static void conn_close(struct worker *w, struct conn *c, bool reset)
{
	if (c->closing)
		return;
	for (int s = 0; s < 2; s++) {
		if (c->fd[s] < 0)
			continue;
		if (reset) {
			struct linger lg = {.l_onoff = 1, .l_linger = 0};

			setsockopt(c->fd[s], SOL_SOCKET, SO_LINGER, &lg,
				   sizeof(lg));
		}
		close(c->fd[s]);
		c->fd[s] = -1;
	}
	conn_unlink(w, c);
}

/* Side s failed (reset, error, refused): what it sent still goes out
 * after its delay and then a reset; what was going to it is dropped. */
static void side_fail(struct worker *w, struct conn *c, enum side s,
		      int64_t now)
{
	struct dir *from = &c->d[s == CLIENT ? 0 : 1];
	struct dir *to = &c->d[s == CLIENT ? 1 : 0];

	if (c->closing || c->dead[s])
		return;
	c->dead[s] = true;
	dir_free(w, to);
	to->discarded = true;
	if (c->dead[!s] || from->discarded) {
		conn_close(w, c, true);
		return;
	}
	from->eof_read = true;
	from->in_ready = false;
	if (mark_push(from, due_of(w, c, now), from->rpos, MARK_RST) < 0 ||
	    heap_fix(w, from) < 0)
		conn_close(w, c, true);
}

/* ---- moving bytes ---- */

static size_t chunk_fill(const struct dir *d, const struct chunk *c)
{
	return c == d->tail ? d->tail_len : CHUNK_SIZE;
}

static void dir_consume(struct worker *w, struct dir *d, size_t n)
{
	d->wpos += n;
	while (n > 0 || (d->head && d->head_off == chunk_fill(d, d->head))) {
		size_t left = chunk_fill(d, d->head) - d->head_off;
		size_t take = n < left ? n : left;

		d->head_off += take;
		n -= take;
		if (d->head_off < chunk_fill(d, d->head))
			break;
		struct chunk *next = d->head->next;

		if (d->head == d->tail) {
			d->tail = NULL;
			d->tail_len = 0;
		}
		chunk_put(w, d->head);
		d->head = next;
		d->head_off = 0;
	}
}

/* Write what is due to dst until done, the socket is full or *turn bytes
 * went out. */
static int dir_write(struct worker *w, struct dir *d, size_t *turn)
{
	int fd = d->conn->fd[d->dst];

	while (d->wpos < d->avail && d->out_ready && *turn > 0) {
		struct iovec iov[WRITE_IOVS];
		uint64_t want = d->avail - d->wpos;
		size_t niov = 0, off = d->head_off;
		struct msghdr msg = {0};
		ssize_t n;

		if (want > *turn)
			want = *turn;
		for (struct chunk *c = d->head;
		     c && want > 0 && niov < WRITE_IOVS; c = c->next) {
			size_t len = chunk_fill(d, c) - off;

			if (len > want)
				len = want;
			iov[niov].iov_base = c->data + off;
			iov[niov].iov_len = len;
			niov++;
			want -= len;
			off = 0;
		}
		msg.msg_iov = iov;
		msg.msg_iovlen = niov;
		n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				d->out_ready = false;
				break;
			}
			return -errno;
		}
		dir_consume(w, d, (size_t)n);
		*turn -= (size_t)n;
	}
	return 0;
}

/* Read from src while it has bytes, the buffer has room and the turn is
 * not over; each read gets its due time. */
static int dir_read(struct worker *w, struct dir *d, size_t *turn)
{
	struct conn *c = d->conn;
	size_t max = w->cfg->max_buffer;

	for (;;) {
		size_t held = (size_t)(d->rpos - d->wpos);
		size_t budget = max - held;
		struct chunk *fresh[READ_CHUNKS];
		struct iovec iov[READ_CHUNKS + 1];
		size_t nfresh = 0, niov = 0, total = 0, intail = 0;
		ssize_t n;
		int err = 0;

		if (!d->in_ready || d->eof_read || held >= max || *turn == 0)
			break;
		if (budget > (size_t)READ_CHUNKS * CHUNK_SIZE)
			budget = (size_t)READ_CHUNKS * CHUNK_SIZE;
		if (budget > *turn)
			budget = *turn;
		if (d->tail && d->tail_len < CHUNK_SIZE) {
			intail = CHUNK_SIZE - d->tail_len;
			if (intail > budget)
				intail = budget;
			iov[niov].iov_base = d->tail->data + d->tail_len;
			iov[niov++].iov_len = intail;
			total = intail;
		}
		while (total < budget && nfresh < READ_CHUNKS) {
			size_t len = budget - total;
			struct chunk *k = chunk_get(w);

			if (!k)
				break;
			if (len > CHUNK_SIZE)
				len = CHUNK_SIZE;
			fresh[nfresh++] = k;
			iov[niov].iov_base = k->data;
			iov[niov++].iov_len = len;
			total += len;
		}
		if (niov == 0)
			return -ENOMEM;
		n = readv(c->fd[d->src], iov, (int)niov);
		if (n < 0)
			err = errno;
		/* Link the fresh chunks the read reached; return the rest. */
		size_t got = n > 0 ? (size_t)n : 0;
		size_t t = got < intail ? got : intail;

		d->tail_len += t;
		got -= t;
		for (size_t i = 0; i < nfresh; i++) {
			if (got == 0) {
				chunk_put(w, fresh[i]);
				continue;
			}
			size_t len = got < CHUNK_SIZE ? got : CHUNK_SIZE;

			if (d->tail)
				d->tail->next = fresh[i];
			else
				d->head = fresh[i];
			d->tail = fresh[i];
			d->tail_len = len;
			got -= len;
		}
		if (n < 0) {
			if (err == EINTR)
				continue;
			if (err == EAGAIN || err == EWOULDBLOCK) {
				d->in_ready = false;
				break;
			}
			return -err;
		}
		if (n == 0) {
			d->eof_read = true;
			d->in_ready = false;
			return mark_push(d, due_of(w, c, now_ns()), d->rpos,
					 MARK_EOF);
		}
		d->rpos += (uint64_t)n;
		*turn -= (size_t)n;
		int r =
		    mark_push(d, due_of(w, c, now_ns()), d->rpos, MARK_DATA);

		if (r < 0)
			return r;
	}
	return 0;
}

/* Everything a direction can do now: release due marks, write, forward an
 * EOF or a reset, read more, and take its place in the heap again. A turn
 * moves at most TURN_BYTES each way, so that a fast sender does not hold
 * up the timers; a direction with work left goes on the busy list. */
static void dir_run(struct worker *w, struct dir *d, int64_t now)
{
	struct conn *c = d->conn;
	size_t wturn = TURN_BYTES, rturn = TURN_BYTES;

	for (;;) {
		uint64_t rpos0 = d->rpos;
		bool eof0 = d->eof_read;
		/* Nothing goes to a target still being dialled. */
		bool can_out = !(d->dst == TARGET && c->connecting);
		int r;

		if (c->closing || d->discarded)
			return;
		dir_release(d, now);
		if (can_out) {
			r = dir_write(w, d, &wturn);
			if (r < 0) {
				side_fail(w, c, d->dst, now);
				return;
			}
		}
		if (d->wpos == d->avail && d->rst_due) {
			conn_close(w, c, true);
			return;
		}
		if (can_out && d->wpos == d->avail && d->eof_due &&
		    !d->shut_done) {
			shutdown(c->fd[d->dst], SHUT_WR);
			d->shut_done = true;
			if (c->d[0].shut_done && c->d[1].shut_done) {
				conn_close(w, c, false);
				return;
			}
		}
		r = dir_read(w, d, &rturn);
		if (r < 0) {
			side_fail(w, c, d->src, now);
			return;
		}
		/* With no delay, what was just read is due at once. */
		if ((d->rpos == rpos0 && d->eof_read == eof0) || d->mcount == 0)
			break;
		now = now_ns();
		if (dir_key(d) > now)
			break;
	}
	if ((wturn == 0 && d->out_ready && d->wpos < d->avail) ||
	    (rturn == 0 && d->in_ready && !d->eof_read))
		link_add(&w->busy, &d->busy);
	if (heap_fix(w, d) < 0)
		conn_close(w, c, true);
}

/* Another turn for each direction whose turn ran out. */
static void run_busy(struct worker *w)
{
	struct link todo;

	if (w->busy.next == &w->busy)
		return;
	/* Move the list to todo: dir_run may put a direction back. */
	todo.next = w->busy.next;
	todo.prev = w->busy.prev;
	todo.next->prev = &todo;
	todo.prev->next = &todo;
	link_init(&w->busy);
	while (todo.next != &todo) {
		struct dir *d = busy_dir(todo.next);

		link_del(&d->busy);
		dir_run(w, d, now_ns());
	}
}

static void conn_event(struct worker *w, struct conn *c, enum side s,
		       uint32_t ev)
{
	struct dir *from = &c->d[s == CLIENT ? 0 : 1];
	struct dir *to = &c->d[s == CLIENT ? 1 : 0];
	int64_t now = now_ns();

	if (c->closing || c->dead[s])
		return;
	if (s == TARGET && c->connecting) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(c->fd[TARGET], SOL_SOCKET, SO_ERROR, &err,
			       &len) < 0)
			err = errno;
		if (err == EINPROGRESS || err == EALREADY)
			return;
		if (err) {
			side_fail(w, c, TARGET, now);
			return;
		}
		c->connecting = false;
	}
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		from->in_ready = true;
	if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		to->out_ready = true;
	dir_run(w, from, now);
	dir_run(w, to, now);
}

static void set_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int conn_open(struct worker *w, const struct handoff *h)
{
	const struct pair *p = &w->cfg->pairs[h->pair];
	struct epoll_event ev = {0};
	struct conn *c;
	int tfd, r;

	tfd = socket(p->target_addr.ss_family,
		     SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tfd < 0)
		return -errno;
	set_nodelay(tfd);
	set_nodelay(h->fd);
	r = connect(tfd, (const struct sockaddr *)&p->target_addr,
		    p->target_len);
	if (r < 0 && errno != EINPROGRESS) {
		r = -errno;
		close(tfd);
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(tfd);
		return -ENOMEM;
	}
	c->fd[CLIENT] = h->fd;
	c->fd[TARGET] = tfd;
	c->connecting = r < 0;
	c->start_ns = h->accepted_ns;
	for (int i = 0; i < 2; i++) {
		c->d[i].conn = c;
		c->d[i].src = i == 0 ? CLIENT : TARGET;
		c->d[i].dst = i == 0 ? TARGET : CLIENT;
		c->d[i].heap_idx = SIZE_MAX;
		link_init(&c->d[i].busy);
		c->tag[i] = (struct tag){
		    .kind = TAG_SOCK, .side = (enum side)i, .conn = c};
	}
	for (int i = 0; i < 2; i++) {
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = &c->tag[i];
		if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd[i], &ev) < 0) {
			r = -errno;
			close(tfd);
			free(c);
			return r;
		}
	}
	c->next = w->live;
	if (w->live)
		w->live->prev = c;
	w->live = c;
	return 0;
}

static void inbox_drain(struct worker *w)
{
	struct handoff hs[64];

	for (;;) {
		ssize_t n = read(w->inbox, hs, sizeof(hs));

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			w->stopping = true;
			return;
		}
		if (n < 0)
			return;
		for (size_t i = 0; i < (size_t)n / sizeof(hs[0]); i++) {
			int r = conn_open(w, &hs[i]);

			if (r < 0) {
				struct linger lg = {.l_onoff = 1,
						    .l_linger = 0};

				setsockopt(hs[i].fd, SOL_SOCKET, SO_LINGER, &lg,
					   sizeof(lg));
				close(hs[i].fd);
			}
		}
	}
}

static void run_due(struct worker *w)
{
	int64_t now = now_ns();

	while (w->nheap > 0 && dir_key(w->heap[0]) <= now) {
		struct dir *d = w->heap[0];

		dir_run(w, d, now);
		/* dir_run releases every due mark; never loop on one. */
		if (w->nheap > 0 && w->heap[0] == d && dir_key(d) <= now)
			heap_remove(w, d);
	}
}

static void timer_arm(struct worker *w)
{
	struct itimerspec its = {0};
	int64_t due = w->nheap > 0 ? dir_key(w->heap[0]) : -1;

	if (due == w->armed)
		return;
	if (due >= 0) {
		its.it_value.tv_sec = due / NS_PER_S;
		its.it_value.tv_nsec = due % NS_PER_S;
		/* 0 would disarm: an absolute time of 0 ns is long past. */
		if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
			its.it_value.tv_nsec = 1;
	}
	timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	w->armed = due;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[MAX_EVENTS];

	while (!w->stopping) {
		bool busy = w->busy.next != &w->busy;
		int n = epoll_wait(w->ep, evs, MAX_EVENTS, busy ? 0 : -1);

		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			struct tag *t = evs[i].data.ptr;

			if (t->kind == TAG_SOCK) {
				conn_event(w, t->conn, t->side, evs[i].events);
			} else if (t->kind == TAG_TIMER) {
				uint64_t ticks;

				if (read(w->tfd, &ticks, sizeof(ticks)) < 0)
					ticks = 0;
				w->armed = -1;
			} else if (t->kind == TAG_INBOX) {
				inbox_drain(w);
			}
		}
		run_due(w);
		run_busy(w);
		timer_arm(w);
		while (w->gc) {
			struct conn *c = w->gc;

			w->gc = c->gc_next;
			free(c);
		}
	}
	while (w->live)
		conn_close(w, w->live, false);
	while (w->gc) {
		struct conn *c = w->gc;

		w->gc = c->gc_next;
		free(c);
	}
	while (w->pool) {
		struct chunk *k = w->pool;

		w->pool = k->next;
		free(k);
	}
	free(w->heap);
	return NULL;
}

/* ---- setup ---- */

static int worker_init(struct worker *w, const struct config *cfg)
{
	struct epoll_event ev = {.events = EPOLLIN};
	int p[2];

	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->armed = -1;
	link_init(&w->busy);
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->ep < 0 || w->tfd < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	w->inbox = p[0];
	w->inbox_w = p[1];
	if (fcntl(w->inbox, F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	w->timer_tag.kind = TAG_TIMER;
	w->inbox_tag.kind = TAG_INBOX;
	ev.data.ptr = &w->timer_tag;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->tfd, &ev) < 0)
		return -errno;
	ev.data.ptr = &w->inbox_tag;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->inbox, &ev) < 0)
		return -errno;
	return 0;
}

/* "HOST:PORT" (HOST may be [v6], or empty / * for any when listening). */
static int parse_hostport(const char *s, bool listen,
			  struct sockaddr_storage *ss, socklen_t *len)
{
	char host[HOSTPORT_MAX], *end;
	const char *colon = strrchr(s, ':');
	struct addrinfo hints = {0}, *ai = NULL;
	unsigned long port;
	size_t hl;

	if (!colon || colon[1] == '\0')
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl >= sizeof(host))
		return -ENAMETOOLONG;
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || colon[1] == '-' || colon[1] == '+' ||
	    port > 65535 || (!listen && port == 0))
		return -EINVAL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (listen ? AI_PASSIVE : 0);
	char portstr[8];

	snprintf(portstr, sizeof(portstr), "%lu", port);
	bool any = host[0] == '\0' || strcmp(host, "*") == 0;
	int r = getaddrinfo(any ? NULL : host, portstr, &hints, &ai);

	if (r != 0 || !ai)
		return -EHOSTUNREACH;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static int listen_on(struct pair *p)
{
	int one = 1;
	int fd = socket(p->listen_addr.ss_family,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&p->listen_addr, p->listen_len) <
		0 ||
	    listen(fd, 4096) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	p->lfd = fd;
	return 0;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v, mul = 1;

	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end == 'k' || *end == 'K')
		mul = 1ull << 10;
	else if (*end == 'm' || *end == 'M')
		mul = 1ull << 20;
	else if (*end == 'g' || *end == 'G')
		mul = 1ull << 30;
	else if (*end)
		return -EINVAL;
	if (mul > 1 && end[1] != '\0')
		return -EINVAL;
	if (v == 0 || v > (SIZE_MAX / 4) / mul)
		return -ERANGE;
	*out = (size_t)(v * mul);
	return 0;
}

static int parse_ms(const char *s, struct config *cfg)
{
	char *end;
	double v;

	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || end == s || !isfinite(v) || v < 0 || v > 3600000.0)
		return -EINVAL;
	cfg->one_way_ms = v;
	cfg->delay_ns = (int64_t)(v * (double)NS_PER_MS + 0.5);
	cfg->setup_ns = 2 * cfg->delay_ns;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: rttproxy [--max-buffer BYTES] [--threads N]\n"
	    "                LISTEN_HOST:PORT TARGET_HOST:PORT ONE_WAY_MS\n"
	    "                [LISTEN_HOST:PORT TARGET_HOST:PORT ...]\n"
	    "\n"
	    "Forward TCP from each LISTEN to its TARGET, every byte "
	    "ONE_WAY_MS\n"
	    "(a decimal) after it was read, both directions; the first bytes\n"
	    "of a connection wait one more round trip (the handshake).\n"
	    "  --max-buffer BYTES  bytes held per direction before reading\n"
	    "                      stops (default 64M; K, M, G suffixes)\n"
	    "  --threads N         worker threads (default 2)\n"
	    "Runs until SIGTERM or SIGINT (exit 0); bad usage exits 2.\n");
}

static int bad(const char *what, const char *arg)
{
	fprintf(stderr, "rttproxy: %s: %s (rttproxy --help)\n", what, arg);
	return 2;
}

static int parse_args(int argc, char **argv, struct config *cfg)
{
	int i = 1;
	unsigned long n;
	char *end;

	cfg->max_buffer = DEFAULT_MAX_BUFFER;
	cfg->nthreads = 2;
	while (i < argc && strncmp(argv[i], "--", 2) == 0) {
		const char *opt = argv[i], *val = NULL;
		const char *eq = strchr(opt, '=');
		size_t olen = eq ? (size_t)(eq - opt) : strlen(opt);

		if (strcmp(opt, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(opt, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (eq) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			return bad("missing value for", opt);
		}
		i++;
		if (olen == 12 && strncmp(opt, "--max-buffer", olen) == 0) {
			if (parse_size(val, &cfg->max_buffer) < 0)
				return bad("bad --max-buffer", val);
		} else if (olen == 9 && strncmp(opt, "--threads", olen) == 0) {
			errno = 0;
			n = strtoul(val, &end, 10);
			if (errno || *end || end == val || *val == '-' ||
			    n < 1 || n > MAX_THREADS)
				return bad("bad --threads (1-64)", val);
			cfg->nthreads = (unsigned)n;
		} else {
			return bad("unknown option", opt);
		}
	}
	argc -= i;
	argv += i;
	if (argc < 3 || (argc - 3) % 2 != 0) {
		fprintf(stderr,
			"rttproxy: expected LISTEN_HOST:PORT "
			"TARGET_HOST:PORT ONE_WAY_MS [LISTEN TARGET ...] "
			"(rttproxy --help)\n");
		return 2;
	}
	if (parse_ms(argv[2], cfg) < 0)
		return bad("bad ONE_WAY_MS", argv[2]);
	for (int a = 0; a < argc; a += a == 0 ? 3 : 2) {
		struct pair *p = &cfg->pairs[cfg->npairs];

		if (cfg->npairs == MAX_PAIRS)
			return bad("too many pairs", argv[a]);
		if (snprintf(p->listen_text, sizeof(p->listen_text), "%s",
			     argv[a]) >= (int)sizeof(p->listen_text) ||
		    parse_hostport(argv[a], true, &p->listen_addr,
				   &p->listen_len) < 0)
			return bad("bad LISTEN_HOST:PORT", argv[a]);
		if (snprintf(p->target_text, sizeof(p->target_text), "%s",
			     argv[a + 1]) >= (int)sizeof(p->target_text) ||
		    parse_hostport(argv[a + 1], false, &p->target_addr,
				   &p->target_len) < 0)
			return bad("bad TARGET_HOST:PORT", argv[a + 1]);
		p->lfd = -1;
		cfg->npairs++;
	}
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* The port a listener got (the one asked for, or the kernel's for 0). */
static unsigned bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void accept_all(struct config *cfg, size_t pi, struct worker *ws,
		       unsigned *rr)
{
	for (;;) {
		int fd = accept4(cfg->pairs[pi].lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct handoff h;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM) {
				struct timespec ts = {0, 10 * 1000 * 1000};

				fprintf(stderr, "rttproxy: accept: %s\n",
					strerror(errno));
				nanosleep(&ts, NULL);
			}
			return;
		}
		h = (struct handoff){
		    .fd = fd, .pair = (int)pi, .accepted_ns = now_ns()};
		if (write(ws[*rr].inbox_w, &h, sizeof(h)) != sizeof(h))
			close(fd);
		*rr = (*rr + 1) % cfg->nthreads;
	}
}

int main(int argc, char **argv)
{
	struct config cfg = {0};
	struct worker ws[MAX_THREADS];
	struct tag ltags[MAX_PAIRS];
	struct sigaction sa = {0};
	sigset_t block, orig;
	struct rlimit rl;
	unsigned rr = 0;
	int ep, r;

	r = parse_args(argc, argv, &cfg);
	if (r)
		return r;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	pthread_sigmask(SIG_BLOCK, &block, &orig);

	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		fprintf(stderr, "rttproxy: epoll: %s\n", strerror(errno));
		return 2;
	}
	for (size_t i = 0; i < cfg.npairs; i++) {
		struct epoll_event ev = {.events = EPOLLIN};

		r = listen_on(&cfg.pairs[i]);
		if (r < 0) {
			fprintf(stderr, "rttproxy: listen on %s: %s\n",
				cfg.pairs[i].listen_text, strerror(-r));
			return 2;
		}
		ltags[i] = (struct tag){.kind = TAG_LISTEN, .index = i};
		ev.data.ptr = &ltags[i];
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cfg.pairs[i].lfd, &ev) < 0) {
			fprintf(stderr, "rttproxy: epoll: %s\n",
				strerror(errno));
			return 2;
		}
	}
	for (unsigned i = 0; i < cfg.nthreads; i++) {
		r = worker_init(&ws[i], &cfg);
		if (r == 0)
			r = -pthread_create(&ws[i].thread, NULL, worker_main,
					    &ws[i]);
		if (r < 0) {
			fprintf(stderr, "rttproxy: worker: %s\n", strerror(-r));
			return 2;
		}
	}
	for (size_t i = 0; i < cfg.npairs; i++) {
		const struct pair *p = &cfg.pairs[i];
		const char *colon = strrchr(p->listen_text, ':');

		printf("rttproxy: ready %.*s:%u->%s one-way %g ms\n",
		       (int)(colon - p->listen_text), p->listen_text,
		       bound_port(p->lfd), p->target_text, cfg.one_way_ms);
	}
	fflush(stdout);

	while (!stop_requested) {
		struct epoll_event evs[MAX_PAIRS];
		int n = epoll_pwait(ep, evs, MAX_PAIRS, -1, &orig);

		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "rttproxy: epoll_wait: %s\n",
				strerror(errno));
			break;
		}
		for (int i = 0; i < n && !stop_requested; i++) {
			const struct tag *t = evs[i].data.ptr;

			accept_all(&cfg, t->index, ws, &rr);
		}
	}
	for (size_t i = 0; i < cfg.npairs; i++)
		close(cfg.pairs[i].lfd);
	for (unsigned i = 0; i < cfg.nthreads; i++) {
		close(ws[i].inbox_w);
		pthread_join(ws[i].thread, NULL);
		close(ws[i].inbox);
		close(ws[i].tfd);
		close(ws[i].ep);
	}
	close(ep);
	return stop_requested ? 0 : 1;
}
