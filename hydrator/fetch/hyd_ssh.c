/*
 * hydrator/fetch/hyd_ssh.c — ssh as a transport: `ferry sync HOST:PATH
 * DEST` and `ferry-hydrator HOST:PATH MNT` with nothing set up at the
 * source but sshd and ferry-replicator on its PATH.
 *
 * The client runs the user's ssh (-e/--rsh, else $FERRY_RSH, else "ssh":
 * its config, keys, agent and ProxyJump apply) with one local forward from
 * a Unix socket of its own (a fresh 0700 directory under $TMPDIR or /tmp)
 * to a Unix socket on HOST, and as the remote command
 *
 *   mkdir -p "$HOME/.cache/ferry/ssh" && exec ferry-replicator -q
 *     --session -l unix:/tmp/ferry-ssh-RAND.sock
 *     -s "$HOME/.cache/ferry/ssh/KEY" sKEY=PATH
 *
 * KEY is made of the path (the state, so a rerun walks and hashes only what
 * changed, stays on HOST between runs); RAND is new each run. The remote
 * socket is mode 0600 and the replicator listens on no TCP port.
 * Encryption and authentication are ssh's. The replicator prints "ready"
 * once its namespace is published; from then on every request of the
 * client goes to the local socket (CURLOPT_UNIX_SOCKET_PATH, hyd_creds),
 * by the URL http://localhost/v1/sKEY. Closing ssh's standard input ends
 * the session: the replicator sees its end of file and stops, and ssh
 * exits; ssh killed, sshd closes the channel just the same.
 *
 * Cleanup style in this file: goto out.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"

#define ARGV_MAX 64u
#define STOP_WAIT_MS 5000

/* A source in ssh's syntax? "ssh://[USER@]HOST[:PORT]/PATH", or
 * "[USER@]HOST:PATH" whose part before the first ':' has no '/' (rsync's
 * rule: "./a:b" is a local name) and is not empty. */
int hyd_ssh_source(const char *s)
{
	const char *colon, *slash;

	if (!s)
		return 0;
	if (strncmp(s, "ssh://", 6) == 0)
		return 1;
	if (strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0)
		return 0;
	colon = strchr(s, ':');
	slash = strchr(s, '/');
	/* SCHEME://...: a URL of some other scheme (the URL parser says it
	 * is not ferry's), never host "SCHEME" */
	if (colon && strncmp(colon, "://", 3) == 0)
		return 0;
	return colon && colon != s && (!slash || colon < slash);
}

/* Split src into dst (the [USER@]HOST ssh is given), port (0: ssh's
 * own) and path; "" path is ".", the home directory, as for rsync. */
static int split(const char *src, struct hyd_ssh *s, char *err, size_t errcap)
{
	const char *h, *end, *p;
	size_t n;
	uint64_t port = 0;

	if (strncmp(src, "ssh://", 6) == 0) {
		h = src + 6;
		p = strchr(h, '/');
		if (!p) {
			snprintf(err, errcap,
				 "%s: expected ssh://[USER@]HOST[:PORT]/PATH",
				 src);
			return -EINVAL;
		}
		end = p;
		/* the port after the last ':' (not in an IPv6 bracket) */
		for (const char *c = p; c > h; c--) {
			if (c[-1] == ']')
				break;
			if (c[-1] == ':') {
				char num[8];

				n = (size_t)(p - c);
				if (n == 0 || n >= sizeof(num)) {
					snprintf(err, errcap, "%s: bad port",
						 src);
					return -EINVAL;
				}
				memcpy(num, c, n);
				num[n] = '\0';
				if (base_parse_u64(num, 1, 65535, &port) < 0) {
					snprintf(err, errcap, "%s: bad port",
						 src);
					return -EINVAL;
				}
				end = c - 1;
				break;
			}
		}
		/* ssh://host/abs/path: the path is absolute, as in a URL */
	} else {
		h = src;
		end = strchr(src, ':');
		p = end + 1;
		if (*p == ':') {
			snprintf(err, errcap,
				 "%s: HOST::MODULE is rsync's daemon syntax; "
				 "ferry goes over ssh (HOST:PATH) or to a "
				 "replicator's URL",
				 src);
			return -EINVAL;
		}
	}
	n = (size_t)(end - h);
	if (n == 0 || n >= sizeof(s->dest) || memchr(h, ' ', n) ||
	    h[0] == '-') {
		snprintf(err, errcap, "%s: no host, or not a host name", src);
		return -EINVAL;
	}
	memcpy(s->dest, h, n);
	s->dest[n] = '\0';
	s->port = (uint16_t)port;
	if (strlen(p) >= sizeof(s->path)) {
		snprintf(err, errcap, "%s: path too long", src);
		return -ENAMETOOLONG;
	}
	snprintf(s->path, sizeof(s->path), "%s", *p ? p : ".");
	return 0;
}

/* s with every ' as '\'' inside single quotes: one word to a POSIX shell. */
static int shell_quote(const char *s, char *out, size_t cap)
{
	size_t k = 0;

	if (cap < 3)
		return -ENAMETOOLONG;
	out[k++] = '\'';
	for (; *s; s++) {
		if (*s == '\'') {
			if (k + 5 >= cap)
				return -ENAMETOOLONG;
			memcpy(out + k, "'\\''", 4);
			k += 4;
		} else {
			if (k + 2 >= cap)
				return -ENAMETOOLONG;
			out[k++] = *s;
		}
	}
	out[k++] = '\'';
	out[k] = '\0';
	return 0;
}

/* The words of the --rsh command line into argv (blanks split; '...' and
 * "..." group, without escapes, as rsync's -e takes them). buf holds the
 * words. Returns how many, or -EINVAL. */
static int split_words(const char *cmd, char *buf, size_t cap, char **argv,
		       size_t max)
{
	size_t n = 0, k = 0;
	char q = 0;
	int in = 0;

	for (; *cmd; cmd++) {
		char c = *cmd;

		if (q) {
			if (c == q) {
				q = 0;
				continue;
			}
		} else if (c == '\'' || c == '"') {
			q = c;
			if (!in) {
				if (n == max)
					return -EINVAL;
				argv[n++] = buf + k;
				in = 1;
			}
			continue;
		} else if (c == ' ' || c == '\t') {
			if (in) {
				if (k >= cap)
					return -EINVAL;
				buf[k++] = '\0';
				in = 0;
			}
			continue;
		}
		if (!in) {
			if (n == max)
				return -EINVAL;
			argv[n++] = buf + k;
			in = 1;
		}
		if (k >= cap)
			return -EINVAL;
		buf[k++] = c;
	}
	if (q)
		return -EINVAL;
	if (in) {
		if (k >= cap)
			return -EINVAL;
		buf[k++] = '\0';
	}
	return (int)n;
}

/* Wait up to timeout_s for the line "ready" from the remote replicator.
 * 0, or -errno with err set (ssh's own message went to stderr). */
static int wait_ready(struct hyd_ssh *s, unsigned timeout_s, char *err,
		      size_t errcap)
{
	uint64_t until =
	    timeout_s ? base_now_ns() + (uint64_t)timeout_s * 1000000000ull
		      : UINT64_MAX;
	char line[64];
	size_t k = 0;

	for (;;) {
		struct pollfd pfd = {.fd = s->from_fd, .events = POLLIN};
		uint64_t now = base_now_ns();
		ssize_t n;
		char c;
		int r;

		if (now >= until) {
			snprintf(err, errcap,
				 "%s%s: the %s ferry-replicator was not ready "
				 "after %u s",
				 s->local ? "" : "ssh ", s->dest,
				 s->local ? "local" : "remote", timeout_s);
			return -ETIMEDOUT;
		}
		r = poll(&pfd, 1,
			 until == UINT64_MAX
			     ? -1
			     : (int)((until - now) / 1000000ull) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		n = read(s->from_fd, &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (s->local)
				snprintf(err, errcap,
					 "%s: the local ferry-replicator "
					 "ended before it was ready (see its "
					 "messages above)",
					 s->path);
			else
				snprintf(err, errcap,
					 "ssh %s: the session ended before "
					 "the remote ferry-replicator was "
					 "ready (see ssh's and its messages "
					 "above; is ferry-replicator on the "
					 "remote PATH, or give "
					 "--remote-ferry?)",
					 s->dest);
			return -ECONNREFUSED;
		}
		if (c != '\n') {
			if (k + 1 < sizeof(line))
				line[k++] = c;
			continue;
		}
		line[k] = '\0';
		if (strcmp(line, "ready") == 0)
			return 0;
		/* the remote PATH names a file: its directory is served */
		if (strcmp(line, "ferry-file") == 0)
			s->file = 1;
		k = 0; /* anything else is not ours: skip it */
	}
}

/* Run argv with its standard input and output on pipes of ours (s->to_fd,
 * s->from_fd) and wait for its "ready" line. 0, or -errno with err set
 * (the child then still runs: hyd_ssh_stop ends it). */
static int spawn(struct hyd_ssh *s, char *const *argv,
		 const struct hyd_ssh_opts *o, char *err, size_t errcap)
{
	int to[2] = {-1, -1}, from[2] = {-1, -1}, r;
	pid_t pid;

	if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0) {
		r = -errno;
		snprintf(err, errcap, "pipe: %s", strerror(errno));
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		r = -errno;
		snprintf(err, errcap, "fork: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0) {
		/* A mount's ssh outlives the terminal it was started from
		 * (its own session: no hang-up reaches it; it must then
		 * authenticate without a prompt). */
		if (o && o->detach)
			(void)setsid();
		if (dup2(to[0], STDIN_FILENO) < 0 ||
		    dup2(from[1], STDOUT_FILENO) < 0)
			_exit(127);
		execvp(argv[0], argv);
		fprintf(stderr, "ferry: cannot run %s: %s\n", argv[0],
			strerror(errno));
		_exit(127);
	}
	s->pid = pid;
	close(to[0]);
	close(from[1]);
	s->to_fd = to[1];
	s->from_fd = from[0];
	return wait_ready(s, o ? o->ready_timeout_s : 0, err, errcap);
fail:
	for (int i = 0; i < 2; i++) {
		if (to[i] >= 0)
			close(to[i]);
		if (from[i] >= 0)
			close(from[i]);
	}
	return r;
}

/* The private directory of the local socket (0700), and the socket's
 * name in it. 0, or -errno with err set. */
static int make_sock_dir(struct hyd_ssh *s, char *err, size_t errcap)
{
	const char *tmp = getenv("TMPDIR");
	int r;

	if (!tmp || tmp[0] != '/' || strlen(tmp) > 64)
		tmp = "/tmp";
	snprintf(s->dir, sizeof(s->dir), "%s/ferry-ssh-XXXXXX", tmp);
	if (!mkdtemp(s->dir)) {
		r = -errno;
		snprintf(err, errcap, "cannot make a directory in %s: %s", tmp,
			 strerror(errno));
		s->dir[0] = '\0';
		return r;
	}
	snprintf(s->sock, sizeof(s->sock), "%s/s", s->dir);
	return 0;
}

/* s->ns and s->url from what names the source (its key). */
static int name_source(struct hyd_ssh *s, const char *what, char *key,
		       char *err, size_t errcap)
{
	chunk_id id;

	if (chunk_id_compute(what, strlen(what), &id) < 0) {
		snprintf(err, errcap, "cannot hash the source's name");
		return -ENOMEM;
	}
	base_hex_encode(id.b, 8, key);
	snprintf(s->ns, sizeof(s->ns), "s%s", key);
	snprintf(s->url, sizeof(s->url), "http://localhost/v1/%s", s->ns);
	return 0;
}

int hyd_ssh_start(const char *src, const struct hyd_ssh_opts *o,
		  struct hyd_ssh *s, char *err, size_t errcap)
{
	char wordbuf[4096], qpath[2 * PATH_MAX + 8], fwd[2 * PATH_MAX + 8];
	char remote_sock[64], cmd[3 * PATH_MAX + 512], key[17], rnd_hex[17];
	char *argv[ARGV_MAX + 16], portbuf[8];
	const char *rsh, *remote_ferry;
	uint8_t rnd[8];
	int nw, r;
	size_t argc;

	memset(s, 0, sizeof(*s));
	s->to_fd = s->from_fd = -1;
	s->pid = -1;
	r = split(src, s, err, errcap);
	if (r < 0)
		return r;
	/* The key of the state on HOST and of the cache here: where and
	 * what (user@host, port, path). */
	snprintf(cmd, sizeof(cmd), "%s\n%u\n%s", s->dest, (unsigned)s->port,
		 s->path);
	r = name_source(s, cmd, key, err, errcap);
	if (r < 0)
		return r;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		snprintf(err, errcap, "no random bytes for the socket's name");
		return -EIO;
	}
	base_hex_encode(rnd, sizeof(rnd), rnd_hex);
	snprintf(remote_sock, sizeof(remote_sock), "/tmp/ferry-ssh-%s.sock",
		 rnd_hex);
	r = make_sock_dir(s, err, errcap);
	if (r < 0)
		return r;
	remote_ferry =
	    o && o->remote_ferry ? o->remote_ferry : "ferry-replicator";
	r = shell_quote(s->path, qpath, sizeof(qpath));
	if (r == 0) {
		char qprog[PATH_MAX + 8];

		r = shell_quote(remote_ferry, qprog, sizeof(qprog));
		if (r == 0 &&
		    (size_t)snprintf(
			cmd, sizeof(cmd),
			"mkdir -p \"$HOME/.cache/ferry/ssh\" && P=%s && "
			"if [ -e \"$P\" ] && [ ! -d \"$P\" ]; then "
			"echo ferry-file; P=$(dirname -- \"$P\"); fi && "
			"exec %s -q --session%s --rescan-interval %u "
			"-l unix:%s -s \"$HOME/.cache/ferry/ssh/%s\" "
			"%s=\"$P\"",
			qpath, qprog, o && o->serve_last ? " --serve-last" : "",
			o ? o->rescan_s : 0, remote_sock, key,
			s->ns) >= sizeof(cmd))
			r = -ENAMETOOLONG;
	}
	if (r < 0) {
		snprintf(err, errcap, "%s: path too long", src);
		goto fail;
	}
	rsh = o && o->rsh ? o->rsh : getenv("FERRY_RSH");
	if (!rsh || !*rsh)
		rsh = "ssh";
	nw = split_words(rsh, wordbuf, sizeof(wordbuf), argv, ARGV_MAX);
	if (nw <= 0) {
		snprintf(err, errcap, "--rsh '%s': not a command line", rsh);
		r = -EINVAL;
		goto fail;
	}
	argc = (size_t)nw;
	snprintf(fwd, sizeof(fwd), "%s:%s", s->sock, remote_sock);
	argv[argc++] = "-T"; /* no terminal on HOST: the channel is data */
	argv[argc++] = "-o";
	argv[argc++] = "ExitOnForwardFailure=yes";
	argv[argc++] = "-L";
	argv[argc++] = fwd;
	if (s->port) {
		snprintf(portbuf, sizeof(portbuf), "%u", (unsigned)s->port);
		argv[argc++] = "-p";
		argv[argc++] = portbuf;
	}
	argv[argc++] = "--";
	argv[argc++] = s->dest;
	argv[argc++] = cmd;
	argv[argc] = NULL;
	r = spawn(s, argv, o, err, errcap);
	if (r < 0)
		goto fail;
	return 0;
fail:
	hyd_ssh_stop(s);
	return r;
}

/* The replicator beside this program (the same installation), else the
 * one on PATH. */
static void local_replicator(char *out, size_t cap)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	snprintf(out, cap, "ferry-replicator");
	if (n <= 0)
		return;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = '\0';
	if ((size_t)snprintf(out, cap, "%s/ferry-replicator", self) >= cap ||
	    access(out, X_OK) < 0)
		snprintf(out, cap, "ferry-replicator");
}

int hyd_local_start(const char *dir, const struct hyd_ssh_opts *o,
		    struct hyd_ssh *s, char *err, size_t errcap)
{
	char real[PATH_MAX], prog[PATH_MAX], state[PATH_MAX + 64];
	char listen[sizeof(s->sock) + 8], nsarg[sizeof(s->ns) + PATH_MAX + 2];
	char key[17], *argv[16], rescan[16];
	const char *home = getenv("XDG_CACHE_HOME");
	size_t argc = 0;
	int r;

	memset(s, 0, sizeof(*s));
	s->to_fd = s->from_fd = -1;
	s->pid = -1;
	if (!realpath(dir, real)) {
		r = -errno;
		snprintf(err, errcap, "%s: %s", dir, strerror(errno));
		return r;
	}
	snprintf(s->path, sizeof(s->path), "%s", dir);
	r = name_source(s, real, key, err, errcap);
	if (r < 0)
		return r;
	/* the state of this source, kept between runs */
	if (home && home[0] == '/')
		r = snprintf(state, sizeof(state), "%s/ferry/local/%s", home,
			     key);
	else if ((home = getenv("HOME")) && home[0] == '/')
		r = snprintf(state, sizeof(state), "%s/.cache/ferry/local/%s",
			     home, key);
	else
		r = snprintf(state, sizeof(state), "/tmp/ferry-local-%s", key);
	if (r < 0 || (size_t)r >= sizeof(state)) {
		snprintf(err, errcap, "the state directory's name is too long");
		return -ENAMETOOLONG;
	}
	r = base_mkdir_p(state, 0700);
	if (r < 0) {
		snprintf(err, errcap, "cannot create %s: %s", state,
			 strerror(-r));
		return r;
	}
	r = make_sock_dir(s, err, errcap);
	if (r < 0)
		return r;
	if (o && o->remote_ferry)
		snprintf(prog, sizeof(prog), "%s", o->remote_ferry);
	else
		local_replicator(prog, sizeof(prog));
	snprintf(listen, sizeof(listen), "unix:%s", s->sock);
	snprintf(rescan, sizeof(rescan), "%u", o ? o->rescan_s : 0);
	snprintf(nsarg, sizeof(nsarg), "%s=%s", s->ns, real);
	argv[argc++] = prog;
	argv[argc++] = "-q";
	argv[argc++] = "--session";
	if (o && o->serve_last)
		argv[argc++] = "--serve-last";
	argv[argc++] = "--rescan-interval";
	argv[argc++] = rescan;
	argv[argc++] = "-l";
	argv[argc++] = listen;
	argv[argc++] = "-s";
	argv[argc++] = state;
	argv[argc++] = "--";
	argv[argc++] = nsarg;
	argv[argc] = NULL;
	snprintf(s->dest, sizeof(s->dest), "%.*s", (int)sizeof(s->dest) - 1,
		 real);
	s->local = 1;
	r = spawn(s, argv, o, err, errcap);
	if (r < 0) {
		hyd_ssh_stop(s);
		return r;
	}
	/* the replicator made the socket itself, and removes it */
	return 0;
}

void hyd_ssh_stop(struct hyd_ssh *s)
{
	int st;

	if (s->to_fd >= 0) {
		/* The end of the session: the replicator stops, ssh exits. */
		close(s->to_fd);
		s->to_fd = -1;
	}
	if (s->from_fd >= 0) {
		close(s->from_fd);
		s->from_fd = -1;
	}
	if (s->pid > 0) {
		/* Our child only while this process forked it (a daemon's
		 * was its parent's): then wait a while, then insist. */
		for (int i = 0; i < STOP_WAIT_MS / 50; i++) {
			pid_t w = waitpid(s->pid, &st, WNOHANG);

			if (w != 0)
				break;
			usleep(50000);
			if (i == STOP_WAIT_MS / 50 - 1) {
				kill(s->pid, SIGTERM);
				(void)waitpid(s->pid, &st, 0);
			}
		}
		s->pid = -1;
	}
	if (s->sock[0]) {
		(void)unlink(s->sock);
		s->sock[0] = '\0';
	}
	if (s->dir[0]) {
		(void)rmdir(s->dir);
		s->dir[0] = '\0';
	}
}
