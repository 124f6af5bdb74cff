/*
 * replicator/repl_sign.c — signed generations on the source side
 * (--sign-key; formats in catalog.h and docs/formats.md):
 *   - repl_generation_sign: the statement of one generation (namespace,
 *     generation, parent, cat_digest of its catalog, time), written as
 *     STATE/catalog/GEN.db.sig beside the catalog before HEAD names it,
 *     and pruned with it (repl_generations_prune takes "GEN.db*");
 *   - GET|HEAD /v1/NS/signature/GEN: that file, immutable.
 * A manifests answer is signed where it is built (repl_routes_manifest.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog/base/base.h"
#include "replicator/repl_http_internal.h"
#include "replicator/repl_publish_internal.h"
#include "replicator/repl_server_internal.h"

#define IMMUTABLE "Cache-Control: public, max-age=31536000, immutable\r\n"

char *repl__sig_path(const char *state_dir, uint64_t gen)
{
	return repl__path_fmt("%s/catalog/%" PRIu64 ".db.sig", state_dir, gen);
}

/* 1 when path holds a statement of (ns, gen) by key id, 0 when not. */
static int signed_by(const char *path, const char *ns, uint64_t gen,
		     const char *id)
{
	char buf[CAT_STMT_MAX + 1];
	struct cat_stmt s;
	size_t len;

	if (base_file_read_small(path, buf, sizeof(buf), &len) < 0 ||
	    cat_stmt_parse(buf, len, &s) < 0)
		return 0;
	return !strcmp(s.ns, ns) && s.generation == gen &&
	       !strcmp(s.key_id, id);
}

int repl_generation_sign(const char *state_dir, const char *ns, uint64_t gen,
			 const struct cat_sign_key *k, int keep)
{
	char *cat = repl__catalog_path(state_dir, gen);
	char *sig = repl__sig_path(state_dir, gen);
	char buf[CAT_STMT_MAX], id[65];
	struct cat_stmt s;
	struct cat_meta m;
	cat_reader *r = NULL;
	size_t len;
	int rc;

	memset(&s, 0, sizeof(s));
	if (!cat || !sig) {
		rc = -ENOMEM;
		goto out;
	}
	rc = cat_sign_key_id(k->pub, id);
	if (rc < 0)
		goto out;
	if (keep && signed_by(sig, ns, gen, id))
		goto out; /* ours already: a statement stays as it was */
	rc = cat_reader_open(cat, &r);
	if (rc < 0)
		goto out;
	cat_reader_meta(r, &m);
	cat_reader_close(r);
	if (m.generation != gen) {
		rc = -EBADMSG;
		goto out;
	}
	snprintf(s.ns, sizeof(s.ns), "%s", ns);
	s.generation = gen;
	s.parent = m.parent_generation;
	s.time = (uint64_t)time(NULL);
	rc = cat_digest(cat, s.digest);
	if (rc == 0)
		rc = cat_stmt_sign(k, &s, buf, sizeof(buf), &len);
	if (rc == 0)
		rc = base_file_write_atomic(sig, buf, len, 0644);
out:
	free(cat);
	free(sig);
	return rc;
}

/* -- GET /v1/NS/signature/GEN: read on a worker, answer on the loop -- */

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

	if (req->dead || status < 0)
		goto out;
	if (j->err == -ENOENT) {
		repl_http_error(req, 404, "not_found", NULL,
				"no signature of generation %" PRIu64
				" (the replicator signs with --sign-key)",
				j->gen);
		goto out;
	}
	if (j->err < 0) {
		base_log_err(BASE_LOG_ERROR, j->err,
			     "cannot read a signature path=\"%s\"", j->path);
		repl_http_error(req, 500, "internal", NULL,
				"cannot read the signature: %s",
				strerror(-j->err));
		goto out;
	}
	repl_http_respond(req, 200, "text/plain", IMMUTABLE, j->buf, j->len);
out:
	repl_req_unref(req);
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
		repl_http_error(req, 500, "internal", NULL, "out of memory");
		return;
	}
	j->req = req;
	j->gen = gen;
	j->path = repl__sig_path(ns->state_dir, gen);
	req->route = j;
	req->on_free = sig_job_free;
	if (!j->path) {
		repl_http_error(req, 500, "internal", NULL, "out of memory");
		return;
	}
	j->w.data = j;
	repl_req_ref(req);
	if (uv_queue_work(&req->srv->loop, &j->w, sig_work, sig_done) < 0) {
		repl_req_unref(req);
		repl_http_error(req, 500, "internal", NULL,
				"cannot queue work");
	}
}
