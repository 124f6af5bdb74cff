/*
 * replicator/serve/repl_routes.c — the protocol's endpoints (docs: the
 * ENDPOINTS section of ferry-replicator(1)):
 *
 *   GET|HEAD /v1/NS/HEAD          current generation, text
 *            ?catalog=1           its catalog instead, Ferry-Generation
 *   GET|HEAD /v1/NS/catalog/GEN   GEN.db.zst, immutable, ETag = its SHA-256
 *   GET|HEAD /v1/NS/chunk/ID      one frame, immutable, ETag = ID
 *   GET|HEAD /v1/NS/signature/GEN its signed statement (repl_sign.c)
 *   POST     /v1/NS/chunks        for each id in the body: id, frame
 *   GET|HEAD /v1/NS/stats         counters, JSON
 *   GET|HEAD /metrics             every counter, Prometheus text
 *                                 (repl_metrics.c)
 *
 * Everything that blocks (SQLite, file reads, hashing, compression) runs on
 * the worker threads, each tenant in turn (repl_req_work); the after-work
 * callbacks here, on the loop thread, own the
 * counters and the answers. A request whose connection went away while
 * work was queued is `dead`: its callbacks only release what they hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_http_priv.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/serve/repl_serve_priv.h"

#define CAT_READ_BUF (256u * 1024u)
#define BATCH_WINDOW 8u	    /* chunks being read/encoded at once */
#define BATCH_WRITES_MAX 4u /* frames written but not yet sent */
/* bytes reserved for a batch before its work starts: its ids (1024 of
 * 32 bytes at most in a POST; a longer pack list is counted when made) */
#define BATCH_ROOM (64u * 1024u)

static const char *code_for(int status)
{
	switch (status) {
	case 400:
		return "bad_request";
	case 401:
		return "unauthorized";
	case 403:
		return "forbidden";
	case 404:
		return "not_found";
	case 405:
		return "method_not_allowed";
	case 409:
		return "changed";
	case 410:
		return "superseded";
	case 413:
		return "too_large";
	case 414:
		return "uri_too_long";
	case 431:
		return "headers_too_large";
	case 503:
		return "not_ready";
	default:
		return "internal";
	}
}

/* -- stats -- */

/* Source hashing, for /stats: state "none" (nothing was deferred),
 * "hashing" or "done" ("stopped" when an error ended it). */
static json_t *hashing_json(struct repl_ns *ns)
{
	struct repl_hasher_stats h;
	const char *state;
	double secs, rate = 0, eta = 0;
	uint64_t end;

	if (ns->hasher)
		repl_hasher_stats(ns->hasher, &h);
	else if (ns->hash_known)
		h = ns->hash;
	else
		return json_pack("{ss}", "state", "none");
	if (h.files_total == 0 && !h.err)
		return json_pack("{ss}", "state", "none");
	state = h.err ? "stopped" : h.ended_ns ? "done" : "hashing";
	end = h.ended_ns ? h.ended_ns : base_now_ns();
	secs = (double)(end - h.started_ns) / 1e9;
	if (secs > 0)
		rate = (double)h.bytes_read / secs;
	if (!h.ended_ns && rate > 0)
		eta = (double)(h.bytes_total - h.bytes_done) / rate;
	return json_pack(
	    "{sssIsIsIsIsIsIsfsf}", "state", state, "files",
	    (json_int_t)h.files_total, "files_done", (json_int_t)h.files_done,
	    "bytes", (json_int_t)h.bytes_total, "bytes_done",
	    (json_int_t)h.bytes_done, "changed", (json_int_t)h.changed,
	    "bytes_read", (json_int_t)h.bytes_read, "rate",
	    (double)(int64_t)(rate * 1000) / 1000, "eta_s",
	    (double)(int64_t)(eta * 1000) / 1000);
}

/* When the served generation was published by this process (its scan
 * ended), as UTC "YYYY-MM-DDTHH:MM:SSZ" into buf. */
static const char *switched_at(const struct repl_ns *ns, char *buf, size_t n)
{
	time_t t = (time_t)(ns->switched_ns / 1000000000ull);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, n, "unknown");
	return buf;
}

/* Count a chunk's frame as sent. */
static void stats_served(struct repl_ns *ns, const struct repl_chunk_res *res)
{
	struct frame_info fi;

	ns->stats.chunks_served++;
	ns->stats.chunks_rehashed += res->hashed ? 1u : 0u;
	ns->stats.chunk_bytes_served += res->raw_len;
	ns->stats.frame_bytes_served += res->frame_len;
	if (frame_header_parse(res->frame, res->frame_len, CHUNK_MAX_LIMIT,
			       &fi) < 0 ||
	    fi.codec == FRAME_RAW)
		return;
	if (fi.codec == FRAME_LZ4)
		ns->stats.lz4_frames_served++;
	else
		ns->stats.zstd_frames_served++;
}

static void route_stats(struct repl_req *req, struct repl_ns *ns)
{
	char body[1024], when[32];
	/* json_int_t is 64-bit signed: no counter gets near its limit */
	json_t *o = json_pack(
	    "{sIsssIsbsIsIsIsIsIsIsIsIso}", "generation",
	    (json_int_t)ns->generation, "switched_at",
	    switched_at(ns, when, sizeof(when)), "rescans",
	    (json_int_t)ns->rescans, "rescanning", ns->scan_running, "requests",
	    (json_int_t)ns->stats.requests, "chunks_served",
	    (json_int_t)ns->stats.chunks_served, "chunk_bytes_served",
	    (json_int_t)ns->stats.chunk_bytes_served, "lz4_frames_served",
	    (json_int_t)ns->stats.lz4_frames_served, "zstd_frames_served",
	    (json_int_t)ns->stats.zstd_frames_served, "mismatches",
	    (json_int_t)ns->stats.mismatches, "chunks_rehashed",
	    (json_int_t)ns->stats.chunks_rehashed, "manifests_served",
	    (json_int_t)ns->stats.manifests_served, "hashing",
	    hashing_json(ns));
	int n = o ? base_json_line(o, body, sizeof(body) - 1) : -ENOMEM;

	json_decref(o);
	if (n < 0) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"cannot build the counters");
		return;
	}
	body[n++] = '\n';
	httpd_req_respond(&req->h, 200, "application/json",
			  "Cache-Control: no-cache\r\n", body, (size_t)n);
}

/* -- catalog: open on a worker, stream with uv_fs_read -- */

struct cat_job {
	uv_work_t w;
	uv_fs_t fs;
	struct repl_req *req;
	char *path;
	const char *state_dir; /* a delta: made on first request */
	uint64_t from, to;     /* a delta's generations; from 0: a catalog */
	uint64_t head_gen;     /* > 0: the answer to HEAD?catalog=1 */
	int fd, err;
	uint64_t size, off;
	char sha[65];
	char *buf;
};

static void cat_job_free(struct repl_req *req)
{
	struct cat_job *j = req->route;

	/* a regular file's close does not block: fine on the loop thread */
	if (j->fd >= 0)
		close(j->fd);
	free(j->path);
	free(j->buf);
	free(j);
}

static void cat_open_work(uv_work_t *w)
{
	struct cat_job *j = w->data;
	struct stat st;

	if (j->from) {
		j->err = repl_delta_make(j->state_dir, j->from, j->to);
		if (j->err < 0)
			return;
	}
	j->fd = open(j->path, O_RDONLY | O_CLOEXEC);
	if (j->fd < 0) {
		j->err = -errno;
		return;
	}
	if (fstat(j->fd, &st) < 0) {
		j->err = -errno;
		return;
	}
	j->size = (uint64_t)st.st_size;
	j->err = repl_catalog_sha_read(j->path, j->sha);
}

static void cat_read_next(struct repl_req *req);

static void cat_written(struct httpd_req *h, void *arg, int status)
{
	struct repl_req *req = repl_req_of(h);
	struct cat_job *j = arg;

	if (status < 0 || req->h.dead || req->h.done)
		return;
	if (j->off < j->size)
		cat_read_next(req);
}

static void cat_on_read(uv_fs_t *fs)
{
	struct cat_job *j = fs->data;
	struct repl_req *req = j->req;
	ssize_t n = fs->result;

	uv_fs_req_cleanup(fs);
	if (req->h.dead)
		goto out;
	if (n <= 0) {
		/* a published catalog never shrinks; the length promised in
		 * the head cannot be kept, so the client must see a cut */
		if (n < 0)
			base_log_err(BASE_LOG_ERROR, (int)n,
				     "catalog read failed path=\"%s\" "
				     "offset=%" PRIu64,
				     j->path, j->off);
		else
			base_error("catalog read failed path=\"%s\" "
				   "offset=%" PRIu64 " why=\"unexpected end\"",
				   j->path, j->off);
		httpd_req_abort(&req->h);
		goto out;
	}
	j->off += (uint64_t)n;
	if (httpd_req_send(&req->h, NULL, 0, j->buf, (size_t)n, cat_written,
			   j) < 0)
		goto out;
	if (j->off >= j->size)
		httpd_req_done(&req->h);
out:
	httpd_req_unref(&req->h);
}

static void cat_read_next(struct repl_req *req)
{
	struct cat_job *j = req->route;
	uint64_t left = j->size - j->off;
	uv_buf_t b = uv_buf_init(j->buf, left < CAT_READ_BUF ? (unsigned)left
							     : CAT_READ_BUF);

	j->fs.data = j;
	httpd_req_ref(&req->h);
	if (uv_fs_read(&req->srv->loop, &j->fs, j->fd, &b, 1, (int64_t)j->off,
		       cat_on_read) < 0) {
		httpd_req_unref(&req->h);
		httpd_req_abort(&req->h);
	}
}

static void cat_opened(uv_work_t *w, int status)
{
	struct cat_job *j = w->data;
	struct repl_req *req = j->req;
	char extra[256];

	if (req->h.dead || status < 0)
		goto out;
	if (j->err == -ENOENT) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				j->from
				    ? "no catalog of one of these "
				      "generations any more"
				    : "no catalog file for this generation");
		goto out;
	}
	if (j->err < 0) {
		base_log_err(BASE_LOG_ERROR, j->err,
			     "cannot open the catalog path=\"%s\"", j->path);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"cannot open the catalog: %s",
				strerror(-j->err));
		goto out;
	}
	if (j->head_gen)
		snprintf(extra, sizeof(extra),
			 "Ferry-Generation: %" PRIu64
			 "\r\nCache-Control: no-cache\r\n",
			 j->head_gen);
	else
		snprintf(extra, sizeof(extra), "ETag: \"%s\"\r\n%s", j->sha,
			 req->srv->immutable);
	/* the head now, the bytes as they are read */
	if (httpd_req_head(&req->h, 200, "application/zstd", (int64_t)j->size,
			   extra) < 0 ||
	    httpd_req_send(&req->h, NULL, 0, NULL, 0, NULL, NULL) < 0)
		goto out;
	if (req->h.head_only || j->size == 0) {
		httpd_req_done(&req->h);
		goto out;
	}
	j->buf = malloc(CAT_READ_BUF);
	if (!j->buf) {
		httpd_req_abort(&req->h);
		goto out;
	}
	cat_read_next(req);
out:
	httpd_req_unref(&req->h);
}

/* A job for req; NULL after answering 500. */
static struct cat_job *cat_job_new(struct repl_req *req)
{
	struct cat_job *j = calloc(1, sizeof(*j));

	if (!j) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return NULL;
	}
	j->fd = -1;
	j->req = req;
	return j;
}

/* Open (for a delta: make) j->path on a worker, then stream it. */
static void cat_job_start(struct repl_req *req, struct cat_job *j)
{
	req->route = j;
	req->on_free = cat_job_free;
	if (!j->path) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return;
	}
	j->w.data = j;
	/* its read buffer's bytes first */
	repl_req_queue(req, CAT_READ_BUF, &j->w, cat_open_work, cat_opened);
}

/* -- HEAD -- */

/* GET HEAD?catalog=1: the catalog of the current generation in the same
 * answer (a fresh mount's one round trip instead of two), its generation
 * in Ferry-Generation, not cacheable (HEAD moves); anyone else, and a
 * server before this, answers the query with HEAD's text. */
static void route_head(struct repl_req *req, struct repl_ns *ns)
{
	char body[32];
	int n = snprintf(body, sizeof(body), "%" PRIu64 "\n", ns->generation);
	struct cat_job *j;
	const char *v;
	size_t vl;

	if (httpd_url_param(req->h.url, req->h.url_len, "catalog", &v, &vl) &&
	    vl == 1 && v[0] == '1') {
		j = cat_job_new(req);
		if (!j)
			return;
		j->head_gen = ns->generation;
		j->path = repl_catalog_zst_path(ns->state_dir, ns->generation);
		cat_job_start(req, j);
		return;
	}
	httpd_req_respond(&req->h, 200, "text/plain",
			  "Cache-Control: no-cache\r\n", body, (size_t)n);
}

/* GET /v1/NS/delta/FROM/TO: the rows that turn catalog FROM into TO
 * (catalog/cat_delta.c), zstd-compressed, made on the first request and
 * kept while both generations are. */
static void route_delta(struct repl_req *req, struct repl_ns *ns,
			const char *arg, size_t len)
{
	const char *slash = memchr(arg, '/', len);
	uint64_t from, to;
	struct cat_job *j;
	char a[24], b[24];
	size_t al, bl;

	al = slash ? (size_t)(slash - arg) : 0;
	bl = slash ? len - al - 1 : 0;
	if (!slash || al == 0 || bl == 0 || al >= sizeof(a) ||
	    bl >= sizeof(b) || arg[0] == '0' || slash[1] == '0') {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				"expected delta/FROM/TO");
		return;
	}
	memcpy(a, arg, al);
	a[al] = '\0';
	memcpy(b, slash + 1, bl);
	b[bl] = '\0';
	if (base_parse_u64(a, 1, INT64_MAX, &from) < 0 ||
	    base_parse_u64(b, 1, INT64_MAX, &to) < 0 || from >= to) {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				"expected delta/FROM/TO with FROM < TO");
		return;
	}
	if (to > ns->generation) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown generation %" PRIu64, to);
		return;
	}
	j = cat_job_new(req);
	if (!j)
		return;
	j->from = from;
	j->to = to;
	j->state_dir = ns->state_dir;
	j->path = repl_delta_zst_path(ns->state_dir, from, to);
	cat_job_start(req, j);
}

int repl_route_gen_arg(struct repl_req *req, const struct repl_ns *ns,
		       const char *arg, size_t len, uint64_t *ret_gen)
{
	char num[24];

	/* canonical decimal only: one URL per answer, for caches */
	if (len < 1 || len > 20 || arg[0] < '1' || arg[0] > '9') {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown generation '%.*s'",
				(int)(len > 40 ? 40 : len), arg);
		return -1;
	}
	memcpy(num, arg, len);
	num[len] = '\0';
	if (base_parse_u64(num, 1, ns->generation, ret_gen) < 0) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown generation '%s'", num);
		return -1;
	}
	return 0;
}

static void route_catalog(struct repl_req *req, struct repl_ns *ns,
			  const char *arg, size_t len)
{
	struct cat_job *j;
	uint64_t gen;

	if (repl_route_gen_arg(req, ns, arg, len, &gen) < 0)
		return;
	j = cat_job_new(req);
	if (!j)
		return;
	j->path = repl_catalog_zst_path(ns->state_dir, gen);
	cat_job_start(req, j);
}

/* The room a frame of ns may need: its largest chunk, stored raw. */
static size_t frame_room(const struct repl_ns *ns)
{
	uint32_t max = ns->gen.stats.params.max;

	return frame_bound(max ? max : CHUNK_MAX_DEFAULT);
}

/* -- one chunk -- */

struct chunk_job {
	uv_work_t w;
	struct repl_req *req;
	struct repl_ns *ns;
	enum frame_policy policy;
	chunk_id id;
	struct repl_chunk_res res;
};

static void chunk_job_free(struct repl_req *req)
{
	struct chunk_job *j = req->route;

	repl_chunk_res_fini(&j->res);
	free(j);
}

static void chunk_work(uv_work_t *w)
{
	struct chunk_job *j = w->data;

	repl_chunk_load(j->ns, j->policy, &j->id, &j->res);
}

static void log_mismatch(struct repl_ns *ns, const chunk_id *id,
			 const char *path)
{
	char hex[CHUNK_ID_HEX_LEN + 1];

	chunk_id_to_hex(id, hex);
	ns->stats.mismatches++;
	base_warn("chunk no longer matches its source, not served ns=%s "
		  "chunk=%s path=\"%s\"",
		  ns->name, hex, path ? path : "?");
}

static void chunk_done(uv_work_t *w, int status)
{
	struct chunk_job *j = w->data;
	struct repl_req *req = j->req;
	char hex[CHUNK_ID_HEX_LEN + 1], extra[256];

	if (req->h.dead || status < 0)
		goto out;
	chunk_id_to_hex(&j->id, hex);
	if (j->res.err == -ENOENT) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown chunk ID %s", hex);
		goto out;
	}
	if (j->res.err == -EBADMSG) {
		log_mismatch(j->ns, &j->id, j->res.path);
		/* the raw name: the JSON error body shows it as JSON can */
		httpd_req_error(&req->h, 409, "changed", NULL,
				"chunk ID of %s no longer matches its source",
				j->res.path ? j->res.path : "?");
		goto out;
	}
	if (j->res.err < 0) {
		base_log_err(BASE_LOG_ERROR, j->res.err,
			     "cannot serve a chunk ns=%s chunk=%s", j->ns->name,
			     hex);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"reading chunk %s: %s", hex,
				strerror(-j->res.err));
		goto out;
	}
	snprintf(extra, sizeof(extra), "ETag: \"%s\"\r\n%s", hex,
		 req->srv->immutable);
	/* the frame stays with the job until the request is freed, which is
	 * after its writes complete */
	if (httpd_req_head(&req->h, 200, "application/octet-stream",
			   (int64_t)j->res.frame_len, extra) < 0 ||
	    httpd_req_send(&req->h, NULL, 0, j->res.frame,
			   req->h.head_only ? 0 : j->res.frame_len, NULL,
			   NULL) < 0)
		goto out;
	if (!req->h.head_only)
		stats_served(j->ns, &j->res);
	httpd_req_done(&req->h);
out:
	httpd_req_unref(&req->h);
}

static void route_chunk(struct repl_req *req, struct repl_ns *ns,
			const char *arg, size_t len)
{
	struct chunk_job *j;
	chunk_id id;

	if (chunk_id_from_hex(arg, len, &id) < 0) {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				"a chunk ID is 64 hex digits");
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return;
	}
	j->id = id;
	j->req = req;
	j->ns = ns;
	j->policy = req->srv->policy;
	j->w.data = j;
	req->route = j;
	req->on_free = chunk_job_free;
	/* room for its frame first */
	repl_req_queue(req, frame_room(ns), &j->w, chunk_work, chunk_done);
}

/* -- batch: validate all ids, then stream id+frame in order -- */

struct batch;

struct batch_slot {
	uv_work_t w;
	struct batch *b;
	size_t idx;
	int ready;
	size_t held; /* bytes reserved for its frame (httpd_req_reserve) */
	enum frame_policy policy; /* this frame's */
	struct repl_chunk_res res;
};

struct batch {
	uv_work_t vw;
	struct repl_req *req;
	struct repl_ns *ns;
	chunk_id *ids;
	size_t n;
	/* A pack (GET pack/GEN/FIRST/PART): the list is made on a worker,
	 * and the answer is immutable. */
	int pack;
	int ids_borrowed; /* ids is the request's body */
	uint64_t gen, first, part;
	enum frame_policy policy; /* how its frames are made */
	int adapt; /* auto, across a link: lz4 when the link keeps up */
	int vrc;
	size_t bad;
	size_t next_launch, next_write, writes;
	int ended;
	/* the bytes of a frame to come, reserved before it is read: room
	 * for the largest; waiting for them; granted after a wait */
	size_t room;
	int room_wait, room_granted;
	struct batch_slot slots[BATCH_WINDOW];
	/* frames being written, and the bytes each holds */
	struct batch_wr {
		uint8_t *frame;
		size_t held;
		struct batch *b;
	} wr[BATCH_WRITES_MAX];
};

static void batch_free(struct repl_req *req)
{
	struct batch *b = req->route;
	size_t i;

	for (i = 0; i < BATCH_WINDOW; i++)
		repl_chunk_res_fini(&b->slots[i].res);
	if (!b->ids_borrowed)
		free(b->ids);
	free(b);
}

static void batch_pump(struct batch *b);
static void slot_hold_actual(struct batch *b, struct batch_slot *s);

static void batch_slot_work(uv_work_t *w)
{
	struct batch_slot *s = w->data;

	repl_chunk_load(s->b->ns, s->policy, &s->b->ids[s->idx], &s->res);
}

static void batch_slot_done(uv_work_t *w, int status)
{
	struct batch_slot *s = w->data;
	struct repl_req *req = s->b->req;

	s->ready = 1;
	if (status < 0 && !s->res.err)
		s->res.err = -ECANCELED;
	slot_hold_actual(s->b, s);
	if (!req->h.dead)
		batch_pump(s->b);
	httpd_req_unref(&req->h);
}

static void batch_written(struct httpd_req *h, void *arg, int status)
{
	struct repl_req *req = repl_req_of(h);
	struct batch_wr *wr = arg;
	struct batch *b = wr->b;

	free(wr->frame);
	wr->frame = NULL;
	httpd_req_release(&req->h, wr->held);
	wr->held = 0;
	b->writes--;
	if (status >= 0 && !req->h.dead)
		batch_pump(b);
}

/* The bytes of the next frame were granted after a wait. */
static void batch_room(struct httpd_req *h, void *arg)
{
	struct batch *b = arg;

	(void)h;
	b->room_wait = 0;
	b->room_granted = 1;
	batch_pump(b);
}

/* A slot's frame is made: it holds what it is, not the room it had. */
static void slot_hold_actual(struct batch *b, struct batch_slot *s)
{
	struct httpd_req *h = &b->req->h;
	size_t want = s->res.err ? 0 : s->res.frame_len;

	if (want < s->held)
		httpd_req_release(h, s->held - want);
	else if (want > s->held)
		(void)httpd_req_reserve(h, want - s->held, NULL, NULL);
	s->held = want;
}

/* Hand the ready head slot to the connection. Returns 0, or -1 when the
 * stream had to be cut (mismatch or error mid-body). */
static int batch_write_slot(struct batch *b, struct batch_slot *s)
{
	struct repl_req *req = b->req;
	char hex[CHUNK_ID_HEX_LEN + 1];
	struct batch_wr *wr = NULL;
	size_t i;

	if (s->res.err) {
		/* The status line went out long ago: cutting the connection is
		 * the only way to tell the client this body is not whole. */
		chunk_id_to_hex(&b->ids[s->idx], hex);
		if (s->res.err == -EBADMSG)
			log_mismatch(b->ns, &b->ids[s->idx], s->res.path);
		else
			base_log_err(BASE_LOG_ERROR, s->res.err,
				     "batch response cut ns=%s chunk=%s",
				     b->ns->name, hex);
		httpd_req_abort(&req->h);
		return -1;
	}
	/* What the link did with the frames before this one (not the
	 * first: before it the client was between requests). */
	if (b->adapt && b->next_write > 0)
		repl_http_adapt_note(req);
	/* each entry: the id, then its frame (the engine frames the body:
	 * chunked, or up to the close for HTTP/1.0); the frame and its
	 * bytes go with the write */
	for (i = 0; i < BATCH_WRITES_MAX && !wr; i++)
		if (!b->wr[i].frame)
			wr = &b->wr[i];
	if (!wr) {
		httpd_req_abort(&req->h); /* cannot be: writes < MAX */
		return -1;
	}
	wr->b = b;
	wr->frame = s->res.frame;
	if (httpd_req_send(&req->h, b->ids[s->idx].b, CHUNK_ID_LEN, wr->frame,
			   s->res.frame_len, batch_written, wr) < 0) {
		wr->frame = NULL;
		return -1;
	}
	wr->held = s->held;
	s->held = 0;
	b->writes++;
	stats_served(b->ns, &s->res);
	s->res.frame = NULL; /* now the write's */
	repl_chunk_res_fini(&s->res);
	s->ready = 0;
	return 0;
}

static void batch_pump(struct batch *b)
{
	struct repl_req *req = b->req;
	int progress = 1;

	while (progress && !b->ended && !req->h.dead) {
		progress = 0;
		while (b->next_launch < b->n &&
		       b->next_launch - b->next_write < BATCH_WINDOW &&
		       b->writes < BATCH_WRITES_MAX && !b->room_wait) {
			struct batch_slot *s =
			    &b->slots[b->next_launch % BATCH_WINDOW];
			int r = 0;

			/* room for its frame first: a client that does not
			 * read holds no more than its tenant's share */
			if (!b->room_granted)
				r = httpd_req_reserve(&req->h, b->room,
						      batch_room, b);
			if (r == -EAGAIN) {
				b->room_wait = 1;
				break;
			}
			if (r < 0)
				return;
			b->room_granted = 0;
			s->held = b->room;
			s->b = b;
			s->idx = b->next_launch++;
			s->ready = 0;
			s->policy = b->adapt && repl_http_adapt_lz4(req)
					? FRAME_POLICY_LZ4
					: b->policy;
			s->w.data = s;
			httpd_req_ref(&req->h);
			if (repl_req_work_bulk(req, &s->w, batch_slot_work,
					       batch_slot_done) < 0) {
				httpd_req_unref(&req->h);
				httpd_req_abort(&req->h);
				return;
			}
		}
		while (b->next_write < b->n && b->writes < BATCH_WRITES_MAX &&
		       b->slots[b->next_write % BATCH_WINDOW].ready &&
		       b->slots[b->next_write % BATCH_WINDOW].idx ==
			   b->next_write) {
			if (batch_write_slot(
				b, &b->slots[b->next_write % BATCH_WINDOW]) < 0)
				return;
			b->next_write++;
			progress = 1;
		}
	}
	if (!b->ended && !req->h.dead && b->next_write == b->n) {
		b->ended = 1;
		httpd_req_done(&req->h);
	}
}

static void batch_check_work(uv_work_t *w)
{
	struct batch *b = w->data;
	struct cat_pack_list l = {0};

	if (b->pack) {
		b->vrc = repl_pack_list(b->ns->state_dir, b->gen, b->first,
					b->part, &l);
		if (b->vrc < 0) {
			cat_pack_list_fini(&l);
			return;
		}
		b->ids = l.ids; /* the lengths are the client's to check */
		l.ids = NULL;
		b->n = l.n;
		cat_pack_list_fini(&l);
		if (b->n == 0)
			return;
	}
	b->vrc = repl_chunk_check(b->ns, b->ids, b->n, &b->bad);
}

static void batch_checked(uv_work_t *w, int status)
{
	struct batch *b = w->data;
	struct repl_req *req = b->req;
	char hex[CHUNK_ID_HEX_LEN + 1], extra[256];

	if (b->pack && b->n * sizeof(*b->ids) > BATCH_ROOM) /* a long list */
		(void)httpd_req_reserve(
		    &req->h, b->n * sizeof(*b->ids) - BATCH_ROOM, NULL, NULL);
	if (req->h.dead || status < 0)
		goto out;
	if (b->pack && b->vrc == -EAGAIN) {
		httpd_req_error(&req->h, 503, "hashing",
				"Retry-After: 1\r\nCache-Control: no-store\r\n",
				"a file of pack %" PRIu64 "/%" PRIu64
				"/%" PRIu64 " is still being hashed",
				b->gen, b->first, b->part);
		goto out;
	}
	if (b->pack && b->vrc == -ENOENT) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"no pack %" PRIu64 "/%" PRIu64 "/%" PRIu64,
				b->gen, b->first, b->part);
		goto out;
	}
	if (b->vrc == 1) {
		chunk_id_to_hex(&b->ids[b->bad], hex);
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown chunk ID %s (id %zu of the batch)",
				hex, b->bad);
		goto out;
	}
	if (b->vrc < 0) {
		base_log_err(BASE_LOG_ERROR, b->vrc,
			     "source index lookup failed ns=%s ids=%zu",
			     b->ns->name, b->n);
		httpd_req_error(&req->h, 500, "internal", NULL,
				"source index lookup failed: %s",
				strerror(-b->vrc));
		goto out;
	}
	if (b->pack)
		snprintf(extra, sizeof(extra),
			 "%sETag: \"p-%" PRIu64 "-%" PRIu64 "-%" PRIu64
			 "\"\r\n",
			 req->srv->immutable, b->gen, b->first, b->part);
	else
		snprintf(extra, sizeof(extra), "Cache-Control: no-store\r\n");
	/* the head now, each frame as it is ready */
	if (httpd_req_head(&req->h, 200, "application/octet-stream", -1,
			   extra) < 0 ||
	    httpd_req_send(&req->h, NULL, 0, NULL, 0, NULL, NULL) < 0)
		goto out;
	batch_pump(b);
out:
	httpd_req_unref(&req->h);
}

/* A batch for req (the request owns it from here), or NULL with the
 * 500 sent. */
static struct batch *batch_new(struct repl_req *req, struct repl_ns *ns)
{
	struct batch *b = calloc(1, sizeof(*b));

	if (!b) {
		httpd_req_error(&req->h, 500, "internal", NULL,
				"out of memory");
		return NULL;
	}
	req->route = b;
	req->on_free = batch_free;
	b->req = req;
	b->ns = ns;
	b->policy = req->srv->policy;
	b->room = frame_room(ns);
	b->vw.data = b;
	return b;
}

/* Look the batch's ids up (a pack: make its list first) on a worker,
 * once the room for its list is reserved: a tenant past its share starts
 * no new work. */
static void batch_queue(struct repl_req *req, struct batch *b)
{
	/* a POST's list is its body, reserved already: none more, but
	 * it waits while its tenant is past its share all the same */
	repl_req_queue(req, b->pack ? BATCH_ROOM : 0, &b->vw, batch_check_work,
		       batch_checked);
}

static void route_batch(struct repl_req *req, struct repl_ns *ns)
{
	struct batch *b;

	if (req->h.body_len == 0 || req->h.body_len % CHUNK_ID_LEN != 0) {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				"body must be 1..%u chunk ids of 32 bytes each "
				"(got %zu bytes)",
				REPL_BATCH_MAX, req->h.body_len);
		return;
	}
	if (req->h.body_len > REPL_BODY_MAX) {
		httpd_req_error(&req->h, 413, "too_large", NULL,
				"at most %u chunk ids per batch",
				REPL_BATCH_MAX);
		return;
	}
	b = batch_new(req, ns);
	if (!b)
		return;
	b->n = req->h.body_len / CHUNK_ID_LEN;
	/* the body is the list (its bytes were reserved when it came) */
	b->ids = (chunk_id *)req->h.body;
	b->ids_borrowed = 1;
	/* A batch is a POST nobody caches, so its framing may suit the
	 * client: lz4 for one on this host (httpd_peer.c), where the copy
	 * waits for zstd's CPU and no wire is saved; for one across a link,
	 * lz4 or zstd frame by frame as the link keeps up (repl_adapt.c).
	 * GET chunk and pack answers are immutable and the same for
	 * everyone. */
	if (b->policy == FRAME_POLICY_AUTO && httpd_req_peer_same_host(&req->h))
		b->policy = FRAME_POLICY_LZ4;
	else if (b->policy == FRAME_POLICY_AUTO)
		b->adapt = 1;
	batch_queue(req, b);
}

/* GET pack/GEN/FIRST/PART (catalog.h, cat_pack): a batch whose list the
 * server makes, so every client asking for it gets the same bytes. */
static void route_pack(struct repl_req *req, struct repl_ns *ns,
		       const char *arg, size_t len)
{
	const char *s1 = memchr(arg, '/', len), *s2;
	char num[24];
	uint64_t first, part, gen;
	struct batch *b;
	size_t l2, l3;

	s2 = s1 ? memchr(s1 + 1, '/', len - (size_t)(s1 + 1 - arg)) : NULL;
	if (!s2)
		goto bad;
	if (repl_route_gen_arg(req, ns, arg, (size_t)(s1 - arg), &gen))
		return; /* answered */
	l2 = (size_t)(s2 - s1 - 1);
	l3 = len - (size_t)(s2 + 1 - arg);
	/* canonical decimals only, as generations: one URL per answer */
	if (l2 < 1 || l2 > 19 || s1[1] < '1' || s1[1] > '9' || l3 < 1 ||
	    l3 > 19 || (s2[1] == '0' && l3 > 1))
		goto bad;
	memcpy(num, s1 + 1, l2);
	num[l2] = '\0';
	if (base_parse_u64(num, 1, INT64_MAX, &first) < 0)
		goto bad;
	memcpy(num, s2 + 1, l3);
	num[l3] = '\0';
	if (base_parse_u64(num, 0, INT64_MAX, &part) < 0)
		goto bad;
	b = batch_new(req, ns);
	if (!b)
		return;
	b->pack = 1;
	b->gen = gen;
	b->first = first;
	b->part = part;
	batch_queue(req, b);
	return;
bad:
	httpd_req_error(&req->h, 404, "not_found", NULL,
			"expected pack/GEN/INO/PART, not '%.*s'",
			(int)(len > 80 ? 80 : len), arg);
}

/* -- dispatch -- */

/* With --tokens: may req read namespace name[0..len)? Answers 401 and
 * returns -1 when not; when it may, its connection counts as its
 * token's (httpd_req_set_tenant). The same answer whether or not the namespace
 * exists, so a client without a token of it learns nothing, not even its
 * name; the token itself is never logged or echoed. */
static int auth_check(struct repl_req *req, const char *name, size_t len)
{
	unsigned char who[REPL_TOKEN_DIGEST_LEN];
	enum repl_auth a;
	int shown = len > 80 ? 80 : (int)len;

	if (!req->srv->tokens_path)
		return 0;
	a = repl_tokens_check(req->srv->tokens, name, len, req->auth_n,
			      req->auth, req->auth_len, req->auth_over, who);
	if (a == REPL_AUTH_OK) {
		/* the token is the tenant: its connections and bytes are
		 * counted together, whatever addresses they come from */
		httpd_req_set_tenant(&req->h, who, sizeof(who));
		return 0;
	}
	if (a == REPL_AUTH_MISSING)
		httpd_req_error(
		    &req->h, 401, "unauthorized",
		    "WWW-Authenticate: Bearer realm=\"ferry\"\r\n",
		    "namespace '%.*s' needs a token (Authorization: "
		    "Bearer; --token-file)",
		    shown, name);
	else
		httpd_req_error(
		    &req->h, 401, "unauthorized",
		    "WWW-Authenticate: Bearer realm=\"ferry\", "
		    "error=\"invalid_token\"\r\n",
		    "the token given is not valid for namespace '%.*s'", shown,
		    name);
	return -1;
}

/* In the order of enum repl_route_kind, from REPL_RK_HEAD on (the
 * metrics' route label is R_x + REPL_RK_HEAD). */
enum route {
	R_HEAD,
	R_STATS,
	R_CHUNKS,
	R_CATALOG,
	R_DELTA,
	R_CHUNK,
	R_MANIFEST,
	R_MANIFESTS,
	R_SIGNATURE,
	R_PACK
};
_Static_assert(REPL_RK_HEAD + (int)R_SIGNATURE == REPL_RK_SIGNATURE &&
		   REPL_RK_HEAD + (int)R_PACK == REPL_RK_PACK &&
		   REPL_RK_HEAD + (int)R_MANIFEST == REPL_RK_MANIFEST,
	       "enum route follows enum repl_route_kind");

static int route_of(const char *rest, size_t len, enum route *ret,
		    const char **ret_arg, size_t *ret_arg_len)
{
	static const struct {
		const char *prefix;
		int has_arg;
		enum route r;
	} table[] = {
	    {"HEAD", 0, R_HEAD},
	    {"stats", 0, R_STATS},
	    {"chunks", 0, R_CHUNKS},
	    {"catalog/", 1, R_CATALOG},
	    {"delta/", 2, R_DELTA},
	    {"chunk/", 1, R_CHUNK},
	    {"manifest/", 2, R_MANIFEST},
	    {"manifests/", 2, R_MANIFESTS},
	    {"signature/", 1, R_SIGNATURE},
	    {"pack/", 2, R_PACK},
	};
	size_t i;

	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		size_t pl = strlen(table[i].prefix);

		if (table[i].has_arg ? len <= pl : len != pl)
			continue;
		if (memcmp(rest, table[i].prefix, pl) != 0)
			continue;
		/* has_arg 2: "GEN/N", one slash inside */
		if (table[i].has_arg == 1 && memchr(rest + pl, '/', len - pl))
			continue;
		*ret = table[i].r;
		*ret_arg = rest + pl;
		*ret_arg_len = len - pl;
		return 0;
	}
	return -ENOENT;
}

void repl_routes_dispatch(struct repl_req *req)
{
	struct repl_ns *ns;
	const char *path, *slash, *arg = NULL;
	size_t plen, nlen, arg_len = 0;
	enum route r = R_HEAD;
	int get_like, known;

	if (req->h.fail_status) {
		httpd_req_error(&req->h, req->h.fail_status,
				code_for(req->h.fail_status), NULL, "%s",
				req->h.fail_detail ? req->h.fail_detail
						   : "bad request");
		return;
	}
	if (httpd_url_path(req->h.url, req->h.url_len, &path, &plen) < 0) {
		httpd_req_error(&req->h, 400, "bad_request", NULL,
				"malformed URL");
		return;
	}
	if (plen == 8 && memcmp(path, "/metrics", 8) == 0) {
		req->kind = REPL_RK_METRICS;
		repl_route_metrics(req);
		return;
	}
	if (plen < 4 || memcmp(path, "/v1/", 4) != 0) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown path '%.*s'",
				(int)(plen > 200 ? 200 : plen), path);
		return;
	}
	path += 4;
	plen -= 4;
	slash = memchr(path, '/', plen);
	nlen = slash ? (size_t)(slash - path) : plen;
	/* the route is known before the checks, for the metrics' label */
	known = slash &&
		route_of(slash + 1, plen - nlen - 1, &r, &arg, &arg_len) == 0;
	if (known)
		req->kind = REPL_RK_HEAD + (int)r;
	if (auth_check(req, path, nlen) < 0)
		return;
	ns = repl_server_ns(req->srv, path, nlen);
	if (!ns) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown namespace '%.*s'",
				(int)(nlen > 80 ? 80 : nlen), path);
		return;
	}
	/* held until the request goes: a reload may remove ns meanwhile */
	req->ns = ns;
	repl_ns_ref(ns);
	ns->stats.requests++;
	if (!known) {
		httpd_req_error(&req->h, 404, "not_found", NULL,
				"unknown path '/v1/%.*s'",
				(int)(plen > 200 ? 200 : plen), path);
		return;
	}
	get_like = req->h.method == HTTPD_GET || req->h.method == HTTPD_HEAD;
	if (r == R_CHUNKS ? req->h.method != HTTPD_POST : !get_like) {
		httpd_req_error(&req->h, 405, "method_not_allowed",
				r == R_CHUNKS ? "Allow: POST\r\n"
					      : "Allow: GET, HEAD\r\n",
				"%s is not allowed here", req->h.method_name);
		return;
	}
	if (ns->state != REPL_NS_READY) {
		httpd_req_error(&req->h, 503, "not_ready", "Retry-After: 5\r\n",
				ns->state == REPL_NS_FAILED
				    ? "namespace '%s' failed to scan"
				    : "namespace '%s' is still being scanned",
				ns->name);
		return;
	}
	switch (r) {
	case R_HEAD:
		route_head(req, ns);
		break;
	case R_STATS:
		route_stats(req, ns);
		break;
	case R_CHUNKS:
		route_batch(req, ns);
		break;
	case R_CATALOG:
		route_catalog(req, ns, arg, arg_len);
		break;
	case R_DELTA:
		route_delta(req, ns, arg, arg_len);
		break;
	case R_CHUNK:
		route_chunk(req, ns, arg, arg_len);
		break;
	case R_MANIFEST:
	case R_MANIFESTS:
		repl_route_manifest(req, ns, arg, arg_len, r == R_MANIFESTS);
		break;
	case R_SIGNATURE:
		repl_route_signature(req, ns, arg, arg_len);
		break;
	case R_PACK:
		route_pack(req, ns, arg, arg_len);
		break;
	}
}
