/*
 * replicator/serve/repl_route_sign.c — GET|HEAD /v1/NS/signature/GEN: the
 * signed statement of a generation (publish/repl_sign.c writes it as
 * STATE/catalog/GEN.db.sig), read on a worker and answered on the loop as
 * an immutable text body; 404 when the generation has none.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_source.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/serve/repl_serve_priv.h"

#define IMMUTABLE "Cache-Control: public, max-age=31536000, immutable\r\n"

struct sig_job {
	uv_work_t w;
	struct repl_req *req;
	char *path;
	uint64_t gen;
	int err;
	size_t len;
	char buf[CAT_STMT_MAX + 1];
};

static void sig_job_free(struct repl_req *req)
{
	struct sig_job *j = req->route;

	free(j->path);
	free(j);
}

static void sig_work(uv_work_t *w)
{
	struct sig_job *j = w->data;

	j->err = base_file_read_small(j->path, j->buf, sizeof(j->buf), &j->len);
}

static void sig_done(uv_work_t *w, int status)
{
	struct sig_job *j = w->data;
	struct repl_req *req = j->req;

	if (req->h.dead || status < 0)
		goto out;
	if (j->err == -ENOENT) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"no signature of generation %" PRIu64
				" (the replicator signs with --sign-key)",
				j->gen);
		goto out;
	}
	if (j->err < 0) {
		base_log_err(BASE_LOG_ERROR, j->err,
			     "cannot read a signature path=\"%s\"", j->path);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"cannot read the signature: %s",
				strerror(-j->err));
		goto out;
	}
	httpd_req_respond(&req->h, 200, "text/plain", IMMUTABLE, j->buf,
			  j->len);
out:
	httpd_req_unref(&req->h);
}

void repl_route_signature(struct repl_req *req, struct repl_ns *ns,
			  const char *arg, size_t len)
{
	struct sig_job *j;
	uint64_t gen;

	if (repl_route_gen_arg(req, ns, arg, len, &gen) < 0)
		return;
	j = calloc(1, sizeof(*j));
	if (!j) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return;
	}
	j->req = req;
	j->gen = gen;
	j->path = repl_sig_path(ns->state_dir, gen);
	req->route = j;
	req->on_free = sig_job_free;
	if (!j->path) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return;
	}
	j->w.data = j;
	httpd_req_ref(&req->h);
	if (repl_req_work(req, &j->w, sig_work, sig_done) < 0) {
		httpd_req_unref(&req->h);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"cannot queue work");
	}
}
