/*
 * tests/fuzz/fuzz_request.c — fuzz the replicator's request handling: the
 * real server (repl_server_init over a small fixed tree served as "ns", its
 * libuv loop on a thread, listening on loopback) gets each input as the
 * bytes of one client connection, which then half-closes and reads what
 * comes back. Everything between the socket and the routes runs: request
 * parsing (http_parser), the limits (413/414/431), pipelining, routing,
 * catalog, chunk, batch, delta, manifest and stats answers, error bodies.
 *
 * Properties (a violation aborts): after every input the server still
 * answers a plain GET of HEAD with 200 (a request cannot take it down or
 * wedge it); ASan and UBSan watch the server's code as it runs.
 * Verdict (fuzz_verdict.h): accepted when the first final answer's
 * status is 2xx (a 100 Continue before it is skipped); refused for an error
 * status, or when nothing came back.
 *
 * The server starts on the first input and stops at exit (SIGTERM, its
 * own way out). Corpus (tests/fuzz/corpus/request): requests written by
 * tests/fuzz/corpus/make_request.py against this tree.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "replicator/serve/repl_serve_priv.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ANSWER_MAX (4u << 20)
#define IO_TIMEOUT_S 2

/* The tree served: small files, one of them empty, one of two chunks. */
static const struct {
	const char *name;
	const char *text;
} FILES[] = {
    {"hello.txt", "hello, ferry\n"},
    {"world.txt", "the other small file\n"},
    {"empty", ""},
};

static struct {
	int ready;
	char root[64], src[96], state[96], listen[32];
	int port;
	struct repl_server srv;
	pthread_t loop;
} g;

static void *loop_main(void *arg)
{
	(void)arg;
	repl_server_run(&g.srv);
	return NULL;
}

static void put(const char *name, const void *buf, size_t len)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", g.src, name);
	f = fopen(p, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		abort();
}

/* The status of the first final answer in buf (interim 1xx answers, such
 * as 100 Continue, skipped), 0 when there is none. */
static int first_status(const char *buf, size_t len)
{
	size_t at = 0;
	const char *end;
	int st;

	while (len - at >= 12 && !memcmp(buf + at, "HTTP/1.", 7) &&
	       buf[at + 8] == ' ') {
		st = (buf[at + 9] - '0') * 100 + (buf[at + 10] - '0') * 10 +
		     (buf[at + 11] - '0');
		if (st < 100 || st > 199)
			return st;
		end = memmem(buf + at, len - at, "\r\n\r\n", 4);
		if (!end)
			return 0;
		at = (size_t)(end - buf) + 4;
	}
	return 0;
}

/* One connection: send, half-close, read until the server closes (or
 * the timeout). The first answer's status, 0 when none came. */
static int exchange(const void *req, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timeval tv = {IO_TIMEOUT_S, 0};
	char *buf = malloc(ANSWER_MAX);
	size_t got = 0, sent = 0;
	int fd, status = 0;
	ssize_t n;

	if (!buf)
		abort();
	sa.sin_port = htons((uint16_t)g.port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		abort(); /* the server refuses connections: a finding too */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (sent < len) {
		n = send(fd, (const char *)req + sent, len - sent,
			 MSG_NOSIGNAL);
		if (n <= 0)
			break; /* the server closed on us: fine */
		sent += (size_t)n;
	}
	shutdown(fd, SHUT_WR);
	while (got < ANSWER_MAX &&
	       (n = recv(fd, buf + got, ANSWER_MAX - got, 0)) > 0)
		got += (size_t)n;
	close(fd);
	status = first_status(buf, got);
	free(buf);
	return status;
}

static const char PROBE[] = "GET /v1/ns/HEAD HTTP/1.1\r\nHost: probe\r\n"
			    "Connection: close\r\n\r\n";

static void stop_server(void)
{
	if (!g.ready)
		return;
	/* the daemon's own way out: the loop ends, run returns */
	kill(getpid(), SIGTERM);
	pthread_join(g.loop, NULL);
	repl_server_fini(&g.srv);
	g.ready = 0;
}

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void setup_once(void)
{
	static const char *const names[] = {"ns"};
	const char *dirs[1];
	struct repl_server_opts o = {0};
	char *big;
	int i;

	if (g.ready)
		return;
	/* A write to a client that went away must not kill the process. */
	signal(SIGPIPE, SIG_IGN);
	snprintf(g.root, sizeof(g.root), "/tmp/fuzz_request.XXXXXX");
	if (!mkdtemp(g.root))
		abort();
	snprintf(g.src, sizeof(g.src), "%s/src", g.root);
	snprintf(g.state, sizeof(g.state), "%s/state", g.root);
	if (mkdir(g.src, 0755) < 0 || mkdir(g.state, 0755) < 0)
		abort();
	for (i = 0; i < (int)(sizeof(FILES) / sizeof(FILES[0])); i++)
		put(FILES[i].name, FILES[i].text, strlen(FILES[i].text));
	/* 300 KiB of fixed bytes: more than one chunk */
	big = malloc(300u << 10);
	if (!big)
		abort();
	for (i = 0; i < (300 << 10); i++)
		big[i] = (char)(i * 2654435761u >> 13);
	put("big.bin", big, 300u << 10);
	free(big);
	g.port = free_port();
	snprintf(g.listen, sizeof(g.listen), "127.0.0.1:%d", g.port);
	dirs[0] = g.src;
	o.listen = g.listen;
	o.state_dir = g.state;
	o.policy = FRAME_POLICY_AUTO;
	o.scan_threads = 1;
	o.hash_first = 1; /* manifests in the catalog: chunk ids are known */
	o.n_ns = 1;
	o.ns_names = names;
	o.ns_dirs = dirs;
	if (g.port <= 0 || repl_server_init(&g.srv, &o) != 0 ||
	    pthread_create(&g.loop, NULL, loop_main, NULL) != 0)
		abort();
	g.ready = 1;
	atexit(stop_server);
	/* until the namespace answers (its first scan) */
	for (i = 0; i < 600 && exchange(PROBE, sizeof(PROBE) - 1) != 200; i++)
		usleep(50000);
	if (i == 600)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int status;

	setup_once();
	status = exchange(data, size);
	if (exchange(PROBE, sizeof(PROBE) - 1) != 200)
		abort(); /* the input took the server down or wedged it */
	fuzz_report(status >= 200 && status < 300);
	return 0;
}
