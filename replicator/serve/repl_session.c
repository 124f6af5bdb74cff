/*
 * replicator/serve/repl_session.c — --session: a replicator that lives as
 * long as the ssh channel that started it (ferry's ssh transport,
 * docs/protocol.md "Over ssh").
 *
 * The client runs `ssh HOST ferry-replicator --session -l unix:PATH ...`
 * with PATH forwarded to a socket of its own, reads "ready" from the
 * channel once every namespace has published its first generation (the
 * line tells it the forwarded socket answers), and ends the session by
 * closing the channel: standard input then reaches its end of file, and
 * the replicator stops as on SIGTERM. When ssh dies instead (killed,
 * network gone), sshd closes the channel just the same, so no replicator
 * is left behind on the host. Nothing else is ever read from standard
 * input; bytes that come are dropped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_serve_priv.h"

#define SESSION_READ_BUF 256u

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
	static char buf[SESSION_READ_BUF];

	(void)h;
	(void)hint;
	*b = uv_buf_init(buf, sizeof(buf));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
	struct repl_server *srv = st->data;

	(void)b;
	if (n >= 0)
		return; /* dropped: the channel carries nothing for us */
	repl_server_stop(srv, n == UV_EOF ? "session=ended" : "session=failed");
}

int repl_session_start(struct repl_server *srv)
{
	int r;

	r = uv_pipe_init(&srv->loop, &srv->session_in, 0);
	if (r == 0) {
		srv->session_in_open = 1;
		srv->session_in.data = srv;
		r = uv_pipe_open(&srv->session_in, STDIN_FILENO);
	}
	if (r == 0)
		r = uv_read_start((uv_stream_t *)&srv->session_in, on_alloc,
				  on_read);
	if (r < 0)
		base_log_err(BASE_LOG_ERROR, r,
			     "--session: cannot watch standard input");
	return r;
}

void repl_session_close(struct repl_server *srv)
{
	if (!srv->session_in_open)
		return;
	srv->session_in_open = 0;
	uv_close((uv_handle_t *)&srv->session_in, NULL);
}

void repl_session_ns_ready(struct repl_server *srv, struct repl_ns *ns)
{
	(void)ns;
	if (!srv->session || ++srv->session_ready != srv->n_ns)
		return;
	/* The one line the client waits for; flushed at once (stdout is a
	 * pipe into the channel, fully buffered otherwise). */
	fputs("ready\n", stdout);
	fflush(stdout);
}
