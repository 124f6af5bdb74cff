/*
 * replicator/serve/repl_serve_priv.h — the running replicator: the server
 * context (one libuv loop), its namespaces, and the chunk workers.
 *
 * Threads: everything in struct repl_server and struct repl_ns is owned by
 * the loop thread, except the worker pool (guarded by pool_lock) and the
 * read-only fields set before a namespace turns READY (dir, dirfd,
 * srcindex_path, params), which workers read. Workers never touch
 * counters or connections: they fill a result that the loop thread's
 * after-work callback turns into a response.
 *
 * Namespaces come and go at run time (--namespaces FILE, reread on
 * SIGHUP; repl_ns.c): srv->ns is an array of pointers, each namespace is
 * reference counted (loop thread only) and freed when the last
 * reference goes. A removed namespace is out of srv->ns at once (new
 * requests get the 404 of an unknown name), marked gone, and lives on
 * while a request that was dispatched to it, its scan job or its hasher's
 * async handle still holds it.
 */
#ifndef FERRY_REPL_SERVE_PRIV_H
#define FERRY_REPL_SERVE_PRIV_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "catalog/httpd/httpd.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/serve/repl_serve.h"
#include "replicator/source/repl_hasher.h"
#include "replicator/serve/repl_nslist.h"
#include "replicator/serve/repl_metrics_priv.h"
#include "replicator/source/repl_srcindex.h"

struct repl_req;
struct man_wait;

/* Counters of one namespace (loop thread only); GET /v1/NS/stats. */
struct repl_stats {
	uint64_t requests;
	uint64_t chunks_served;
	uint64_t chunk_bytes_served; /* raw chunk bytes, before framing */
	uint64_t frame_bytes_served; /* the frames of those, as sent */
	uint64_t lz4_frames_served;  /* of those frames, lz4 */
	uint64_t zstd_frames_served; /* and zstd (over planes or not) */
	uint64_t mismatches;
	uint64_t chunks_rehashed;  /* of those served, hashed again */
	uint64_t manifests_served; /* manifest and segment bodies */
};

enum repl_ns_state {
	REPL_NS_SCANNING = 0,
	REPL_NS_READY = 1,
	REPL_NS_FAILED = 2,
};

struct repl_server;

struct repl_ns {
	char name[BASE_NS_NAME_MAX + 1];
	char *dir;	 /* as given on the command line */
	char *state_dir; /* STATEDIR/NAME */
	/* of the served generation; replaced at a switch, so a worker reads
	 * it (and pool_gen) under pool_lock only */
	char *srcindex_path;
	int dirfd; /* O_PATH of dir: chunk paths resolve beneath */
	enum repl_ns_state state;
	uint64_t generation; /* served generation, once READY */
	struct repl_stats stats;
	struct repl_server *srv;
	uv_mutex_t pool_lock;
	struct repl_worker *pool; /* all of generation pool_gen */
	uint64_t pool_gen;
	uint64_t pool_put_ns; /* monotonic: a context last came back */
	/* the scan job: the first scan, then each rescan (repl_rescan.c) */
	uv_work_t scan_work;
	int scan_rc;
	int scan_wanted;	     /* queued: scan when the one before ends */
	int scan_running;	     /* scan_work is queued or running */
	int scan_quiet;		     /* interval rescan: log at debug */
	struct repl_generation next; /* the scan's result (its worker) */
	struct repl_generation gen;  /* the served generation's build */
	uint64_t rescans;	     /* rescans finished (changed or not) */
	uint64_t switched_ns;	     /* wall clock of the last publish */
	/* background hashing of the served generation's pending files */
	struct repl_hasher *hasher;    /* NULL when none runs */
	struct repl_hasher_stats hash; /* the last one's, once it ended */
	int hash_known;		       /* hash holds something */
	uv_async_t hash_async;	       /* hasher progress -> loop */
	int hash_async_ready;
	struct man_wait *waiters; /* manifest requests waiting (loop) */
	/* references (loop thread): srv->ns's while listed, each request
	 * dispatched to it (repl_req.ns), a queued or running scan job, the
	 * hash_async handle until its close callback */
	int refs;
	int gone;	   /* removed from srv->ns: serves nothing new */
	atomic_int cancel; /* stops its scan: removal, shutdown */
};

/* Requests' work, queued by tenant (repl_jobs.c). */
struct repl_job_line;
struct repl_jobs {
	uv_loop_t *loop;
	unsigned running;      /* in libuv's pool */
	unsigned bulk_running; /* of those, bulk (repl_req_work_bulk) */
	uint64_t bulk_at_ms;   /* loop time a bulk job last started or came */
	int pumping;
	struct repl_job_line *ring;	 /* lines with jobs; this is the last */
	struct repl_job_line *bulk_ring; /* the same of bulk jobs */
	struct repl_job_line **lines;	 /* by tenant key */
};

/* Set up / free the queue (empty by then). 0 or -ENOMEM. */
int repl_jobs_init(struct repl_jobs *q, uv_loop_t *loop);
void repl_jobs_fini(struct repl_jobs *q);

struct repl_server {
	uv_loop_t loop;
	struct repl_jobs jobs;
	/* the HTTP engine (catalog/httpd/, repl_http.c): the listener, the
	 * connections and their limits; NULL once closed */
	struct httpd_server *http;
	uv_signal_t sig_int, sig_term, sig_hup;
	uv_timer_t rescan_timer;
	uv_timer_t pool_sweep; /* idle worker contexts (repl_ns.c) */
	int pool_sweep_ready;
	unsigned rescan_interval_s; /* 0: rescans on SIGHUP only */
	unsigned keep_gens; /* generations kept, the served one included */
	int scanning;	    /* one scan job at a time, in ns order */
	/* the namespaces served, in the order given (arguments, then the
	 * file's lines; added ones at the end); each holds a reference */
	struct repl_ns **ns;
	size_t n_ns, cap_ns;
	char *state_dir;
	/* --namespaces FILE (NULL: none), reread on SIGHUP, and the NAME=DIR
	 * arguments, which stay whatever the file says */
	char *ns_file;
	struct repl_ns_list ns_args;
	enum frame_policy policy;
	unsigned scan_threads;	/* 0: one per CPU */
	int hash_first;		/* hash before publishing (no deferral) */
	unsigned hash_delay_ms; /* test hook (FERRY_HASH_DELAY_MS) */
	void (*hash_opened)(void *ctx, const char *path); /* test hook */
	void *hash_opened_ctx;
	/* --sign-key: generations and manifests answers are signed
	 * (repl_sign.c); read-only once loaded, by any thread */
	struct cat_sign_key sign_key;
	int signing;
	atomic_int cancel; /* set on shutdown; scans poll it */
	int stopping;
	/* --session (repl_session.c): standard input, watched for its end */
	int session;
	int serve_last; /* --serve-last */
	int rehash;	/* --rehash */
	uv_pipe_t session_in;
	int session_in_open;
	size_t session_ready; /* namespaces that published a generation */
	char listen_str[HTTPD_HOST_MAX + 16]; /* with the port bound */
	struct httpd_tls *tls;		      /* NULL: plain HTTP */
	/* connection limits (ferry-replicator(1), LIMITS) */
	struct httpd_limits limits;
	/* --tokens: the tokens file's path and its digests (NULL: no
	 * tokens, every namespace is open); replaced whole on SIGHUP */
	char *tokens_path;
	struct repl_tokens *tokens;
	/* Cache-Control of immutable answers: public, or private when
	 * tokens guard them (a shared cache must not hand them out) */
	const char *immutable;
	/* GET /metrics: counters and who may read them */
	struct repl_metrics metrics;
};

/* Set up the loop, open the namespaces, bind and listen. Every failure is
 * logged here, as one error line with its context (the caller only
 * exits). Returns 0 or -errno. Requests are logged at debug level. */
int repl_server_init(struct repl_server *srv, const struct repl_server_opts *o);

/* Stop serving (a signal, or the end of a --session): cancel the
 * scans, close the namespaces, the listener and every connection; the
 * loop ends when its last handle closes. why goes in the log line. */
void repl_server_stop(struct repl_server *srv, const char *why);

/* repl_session.c. --session: watch standard input (0, or -errno logged)
 * and close the watch (at a stop). */
int repl_session_start(struct repl_server *srv);
void repl_session_close(struct repl_server *srv);
/* ns published its first generation: with --session, once every
 * namespace has, "ready" goes to standard output. */
void repl_session_ns_ready(struct repl_server *srv, struct repl_ns *ns);

/* Free everything (after run, or after a failed init). */
void repl_server_fini(struct repl_server *srv);

/* SIGHUP: read the TLS certificate, key and client CAs again for new
 * connections (open ones keep theirs); one line in the log either way,
 * and on failure the old ones stay. No-op without TLS. Loop thread. */
void repl_server_tls_reload(struct repl_server *srv);

/* -- scans, rescans and hashing (repl_rescan.c), loop thread -- */

/* SIGHUP and the --rescan-interval timer on the loop (init), closed at
 * shutdown (close). */
void repl_rescan_init(struct repl_server *srv);
void repl_rescan_close(struct repl_server *srv);

/* Queue a scan of every namespace (the first scan, or a rescan). again:
 * a namespace whose walk runs now is walked once more after it. quiet:
 * the start of a rescan and a rescan that found nothing are logged at
 * debug level only (the interval's). */
void repl_scan_want(struct repl_server *srv, int again, int quiet);
/* --serve-last: each namespace whose state holds a generation serves it
 * now (its walk then runs as a rescan). Loop thread, before the first
 * repl_scan_want. */
void repl_serve_last(struct repl_server *srv);

/* The namespace's hash_async callback: hasher progress or end. */
void repl_ns_on_hash_async(uv_async_t *a);

/* Stop the hasher and let go of waiting manifest requests (shutdown). */
void repl_hash_stop(struct repl_ns *ns);

/* --tokens: (re)read srv->tokens_path. At start-up (reload 0) a bad file
 * is an error (logged, -errno); on SIGHUP (reload 1) it keeps the tokens
 * it had and logs one line. Warns about namespaces no token opens.
 * Loop thread (a small file, read in place). */
int repl_server_tokens_load(struct repl_server *srv, int reload);

/* -- namespaces at run time (repl_ns.c), loop thread -- */

/* Find a served namespace by name bytes; NULL if unknown (or removed). */
struct repl_ns *repl_server_ns(struct repl_server *srv, const char *name,
			       size_t len);

/* Start serving NAME=DIR: a new namespace, appended to srv->ns, state
 * SCANNING (repl_scan_want scans it). Logs why it failed. Returns 0,
 * -ENOMEM, -EIO, -errno of opening DIR. */
int repl_ns_add(struct repl_server *srv, const char *name, const char *dir);

/* Stop serving srv->ns[i]: out of the array at once, its scan cancelled,
 * its hasher stopped, its waiting manifest requests answered, its
 * memory freed once nothing refers to it. Its state directory stays. */
void repl_ns_remove(struct repl_server *srv, size_t i);

/* Warn (one line) when the open files limit is short of what this many
 * namespaces may hold open (start and reload). */
void repl_ns_nofile_check(struct repl_server *srv);

void repl_ns_ref(struct repl_ns *ns);
/* Drop a reference; the last one frees the namespace. NULL is a no-op. */
void repl_ns_unref(struct repl_ns *ns);

/* Close the namespace's hash_async (its reference goes in the close
 * callback). The hasher must be stopped. No-op when not open. */
void repl_ns_close_async(struct repl_ns *ns);

/* SIGHUP with --namespaces: read the file again, with the arguments, and
 * make srv->ns that set: new names added, missing ones removed, a name
 * whose DIR changed removed and added. A file that cannot be read, a bad
 * line or a DIR that is not a directory changes nothing: one error line
 * naming the line. One info line with the counts otherwise. Returns 0
 * or the -errno of the failure. */
int repl_ns_reload(struct repl_server *srv);

/* -- chunk workers (repl_chunk.c) -- */

/* Worker thread: look id up, read its bytes from beneath ns->dirfd
 * without following symlinks, verify the hash (repl_reread.c says when it
 * is not needed), encode a frame. */
void repl_chunk_load(struct repl_ns *ns, enum frame_policy policy,
		     const chunk_id *id, struct repl_chunk_res *res);

/* Worker thread: check every id is known. Returns 0 (all known), 1 with
 * *ret_bad the first unknown index, or -errno. */
int repl_chunk_check(struct repl_ns *ns, const chunk_id *ids, size_t n,
		     size_t *ret_bad);

/* Loop thread, when no work is queued: free the namespace's worker pool. */
void repl_chunk_pool_free(struct repl_ns *ns);

/* Loop thread: take the namespace's pooled contexts when none came back
 * for idle_ns (now_ns: base_now_ns()), else NULL. Each holds an open
 * source index (3 descriptors: the file, its WAL and shared memory):
 * idle namespaces must not keep them. Free the list with
 * repl_chunk_workers_free, on a worker (a close may checkpoint). */
struct repl_worker *repl_chunk_pool_take_idle(struct repl_ns *ns,
					      uint64_t now_ns,
					      uint64_t idle_ns);

/* Every REPL_POOL_SWEEP_S, the pooled contexts of namespaces that served
 * no chunk for REPL_POOL_IDLE_S are closed (repl_ns.c; init at start,
 * close at shutdown). Loop thread. */
#define REPL_POOL_IDLE_S 30u
#define REPL_POOL_SWEEP_S 10u
void repl_pool_sweep_init(struct repl_server *srv);
void repl_pool_sweep_close(struct repl_server *srv);

/* Loop thread: serve generation gen from the source index at path (taken
 * over, malloc'd): the pool's contexts of the generation before are freed,
 * and one a worker still holds is freed when it comes back. */
void repl_chunk_pool_switch(struct repl_ns *ns, uint64_t gen, char *path);

/* Worker thread: the manifests body (catalog.h cat_mwire_*) of file first
 * (segment 0) or of the pending files in [first, last] (segment 1) of
 * generation gen, from its source index; served is the generation the
 * namespace serves (its index is pooled). Returns 0, -EAGAIN (not hashed
 * yet), -ENOENT (no such generation, or not a pending file of it),
 * -ENOMEM, -EIO. */
int repl_manifest_body(struct repl_ns *ns, uint64_t served, uint64_t gen,
		       int segment, uint64_t first, uint64_t last,
		       struct cat_buf *out);

/* The GEN of a route's argument (arg[0..len), not NUL-terminated):
 * canonical decimal of a generation 1..ns->generation into *ret_gen, 0;
 * else the request is answered 404 and -1 returned. Loop thread
 * (repl_routes.c). */
int repl_route_gen_arg(struct repl_req *req, const struct repl_ns *ns,
		       const char *arg, size_t len, uint64_t *ret_gen);

/* -- signatures (repl_sign.c) -- */

/* GET /v1/NS/signature/GEN: the generation's signed statement (404 when
 * it has none). Loop thread. */
void repl_route_signature(struct repl_req *req, struct repl_ns *ns,
			  const char *arg, size_t len);

/* -- manifests (repl_routes_manifest.c) -- */

/* GET /v1/NS/manifest/GEN/INO (segment 0) or /v1/NS/manifests/GEN/SEG
 * (segment 1); arg is "GEN/N". Loop thread. */
void repl_route_manifest(struct repl_req *req, struct repl_ns *ns,
			 const char *arg, size_t len, int segment);

/* The hasher made progress (loop thread, from the namespace's async):
 * waiting manifest requests look again. */
void repl_manifest_wake(struct repl_ns *ns);

/* Close every waiting manifest request's timer (shutdown). */
void repl_manifest_waiters_close(struct repl_ns *ns);

#endif
