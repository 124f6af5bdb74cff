/*
 * replicator/serve/repl_rescan.c — the scans of a running replicator and what
 * follows each: the first walk of every namespace, then a rescan of every
 * namespace on SIGHUP (which also rereads the --namespaces file,
 * repl_ns.c, and the --tokens file) and every
 * --rescan-interval seconds, the switch to a
 * new generation, the removal of generations older than the kept ones,
 * and the background hashing of the served generation's pending files.
 *
 * One scan job runs at a time, the namespaces in command-line order (a
 * walk uses every core it is given), one never published (just added by
 * a reload) before the others. A namespace removed while its walk runs
 * has it cancelled; the job still ends here, and only lets go of it. A
 * rescan is the same generation build as the first scan
 * (repl_generation_build): a stat-only walk that reuses the manifest of every
 * file the served generation holds unchanged, so it reads and hashes nothing
 * that did not change; it publishes generation N+1 only when the tree differs.
 * While it runs the namespace goes on serving generation N. A signal that comes
 * while a namespace's walk runs queues another walk of it (the running one may
 * have passed a change already); an interval tick that finds scans
 * running or queued adds nothing.
 *
 * The switch (loop thread, after HEAD names N+1 on disk): the hasher of
 * N stops (whatever it finished was already reused by the walk), chunk
 * requests move to N+1's source index (repl_chunk_pool_switch), manifest
 * requests waiting for N's hasher end as superseded, then generations
 * older than the kept ones are removed (repl_generations_prune) and N+1's
 * pending files start hashing. A chunk of N that N+1 still has is served
 * as before; one only N had is no longer in the source and is 404.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/source/repl_hasher.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/serve/repl_serve_priv.h"

/* Scan warnings, on a scanning thread: one line each. rel is raw bytes;
 * the logger shows whatever is not valid UTF-8 as \xNN, so a hostile file
 * name cannot break the line. */
static void scan_warn(void *ctx, const char *rel, size_t rel_len, int err,
		      const char *why)
{
	struct repl_ns *ns = ctx;

	repl_scan_warn_log(ns->name, ns->dir, rel, rel_len, err, why);
}

static void scan_work(uv_work_t *w)
{
	struct repl_ns *ns = w->data;
	struct repl_scan_opts o = {
	    .cancel = &ns->cancel, /* removal or shutdown */
	    .defer = !ns->srv->hash_first,
	    .warn = scan_warn,
	    .ctx = ns,
	    .threads = ns->srv->scan_threads,
	    .sign_key = ns->srv->signing ? &ns->srv->sign_key : NULL,
	    .ns_name = ns->name,
	};

	ns->scan_rc =
	    repl_generation_build(ns->state_dir, ns->dir, &o, &ns->next);
}

/* -- background hashing of the served generation -- */

/* A hasher worker recorded a file (any thread). */
static void hash_progress(void *ctx)
{
	struct repl_ns *ns = ctx;

	uv_async_send(&ns->hash_async);
}

static void hash_log_end(struct repl_ns *ns)
{
	const struct repl_hasher_stats *h = &ns->hash;
	double secs = (double)(h->ended_ns - h->started_ns) / 1e9;

	if (h->err || h->files_total == 0)
		return; /* it said why it stopped; or there was nothing */
	base_info("namespace hashed ns=%s generation=%" PRIu64 " files=%" PRIu64
		  " bytes=%" PRIu64 " changed=%" PRIu64 " bytes_read=%" PRIu64
		  " unique=%" PRIu64 " seconds=%.1f",
		  ns->name, ns->generation, h->files_done, h->bytes_done,
		  h->changed, h->bytes_read, h->unique, secs);
}

void repl_ns_on_hash_async(uv_async_t *a)
{
	struct repl_ns *ns = a->data;

	if (ns->hasher && repl_hasher_finished(ns->hasher)) {
		repl_hasher_stats(ns->hasher, &ns->hash);
		ns->hash_known = 1;
		repl_hasher_stop(ns->hasher); /* its threads have ended */
		ns->hasher = NULL;
		hash_log_end(ns);
	}
	repl_manifest_wake(ns);
}

/* Start hashing what the served generation left pending. */
static void hash_start(struct repl_ns *ns)
{
	struct repl_server *srv = ns->srv;
	struct repl_hasher_opts ho = {
	    .name = ns->name,
	    .dir = ns->dir,
	    .dirfd = ns->dirfd,
	    .srcindex_path = ns->srcindex_path,
	    .params = ns->gen.stats.params,
	    .threads = srv->scan_threads,
	    .progress = hash_progress,
	    .ctx = ns,
	    .delay_ms = srv->hash_delay_ms,
	    .opened = srv->hash_opened,
	    .opened_ctx = srv->hash_opened_ctx,
	};
	char *spill = base_path_fmt("%s/source", ns->state_dir);
	int r;

	if (!spill) {
		base_error("out of memory ns=%s", ns->name);
		return;
	}
	if (ho.threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		ho.threads = n < 1 ? 1 : (unsigned)n;
	}
	ho.spill_dir = spill;
	r = repl_hasher_start(&ho, &ns->hasher);
	free(spill);
	/* an index of an older format has nothing deferred */
	if (r == -EBADMSG || r == -ENOENT)
		return;
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot start hashing ns=%s generation=%" PRIu64,
			     ns->name, ns->generation);
		return;
	}
	if (repl_hasher_finished(ns->hasher))
		repl_ns_on_hash_async(&ns->hash_async);
}

void repl_hash_stop(struct repl_ns *ns)
{
	repl_hasher_stop(ns->hasher);
	ns->hasher = NULL;
	repl_manifest_waiters_close(ns);
}

/* -- the scan queue -- */

static void scan_next(struct repl_server *srv);

static void log_ready(struct repl_ns *ns)
{
	const struct repl_scan_stats *st = &ns->gen.stats;

	/* tests and scripts wait for one " ready" per published generation */
	base_info("namespace ready ns=%s generation=%" PRIu64 " files=%" PRIu64
		  " dirs=%" PRIu64 " bytes=%" PRIu64 " chunks=%" PRIu64
		  " unique=%" PRIu64 " reused=%" PRIu64 " bytes_read=%" PRIu64
		  " pending=%" PRIu64 " bytes_pending=%" PRIu64
		  " unchanged=%d seconds=%.1f",
		  ns->name, ns->generation, st->files, st->dirs, st->bytes,
		  st->chunks, st->unique, st->reused, st->bytes_read,
		  st->pending, st->bytes_pending, ns->gen.unchanged,
		  ns->gen.seconds);
}

/* Serve the generation the scan just built (HEAD names it already). */
static int adopt(struct repl_ns *ns, int first)
{
	struct repl_server *srv = ns->srv;
	uint64_t removed = 0;
	char *path;
	int r;

	path = repl_srcindex_path(ns->state_dir, ns->next.generation);
	if (!path)
		return -ENOMEM;
	if (!first) {
		/* N's hasher goes before its index stops being served */
		repl_hasher_stop(ns->hasher);
		ns->hasher = NULL;
		ns->hash_known = 0;
	}
	repl_chunk_pool_switch(ns, ns->next.generation, path);
	ns->gen = ns->next;
	ns->generation = ns->gen.generation;
	ns->switched_ns = (uint64_t)base_wall_ns();
	ns->state = REPL_NS_READY;
	log_ready(ns);
	if (first)
		repl_session_ns_ready(srv, ns);
	if (!first)
		repl_manifest_wake(ns); /* waits for N: superseded */
	r = repl_generations_prune(ns->state_dir, ns->generation,
				   srv->keep_gens, &removed);
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "cannot remove older generations ns=%s", ns->name);
	if (removed)
		base_info("older generations removed ns=%s removed=%" PRIu64
			  " kept=%u oldest=%" PRIu64,
			  ns->name, removed, srv->keep_gens,
			  ns->generation - srv->keep_gens + 1);
	hash_start(ns);
	return 0;
}

void repl_serve_last(struct repl_server *srv)
{
	size_t i;
	int r;

	for (i = 0; i < srv->n_ns; i++) {
		struct repl_ns *ns = srv->ns[i];

		r = repl_generation_last(ns->state_dir, &ns->next);
		if (r == 0)
			r = adopt(ns, 1);
		if (r == 0)
			base_info("serving the last generation before the walk "
				  "ns=%s generation=%" PRIu64,
				  ns->name, ns->generation);
		else if (r != -ENOENT)
			base_log_err(BASE_LOG_WARN, r,
				     "cannot serve the last generation: the "
				     "walk comes first ns=%s",
				     ns->name);
	}
}

static void scan_done(uv_work_t *w, int status)
{
	struct repl_ns *ns = w->data;
	struct repl_server *srv = ns->srv;
	int rc = status < 0 ? status : ns->scan_rc;
	int first = ns->state != REPL_NS_READY;

	ns->scan_running = 0;
	srv->scanning = 0;
	if (ns->gone) {
		/* removed while it scanned: what it published stays on disk
		 * for the day the name comes back; the next one's turn */
		repl_ns_unref(ns);
		scan_next(srv);
		return;
	}
	if (rc == -ECANCELED || srv->stopping) {
		if (first)
			ns->state = REPL_NS_FAILED;
		repl_ns_unref(ns);
		return;
	}
	if (!first)
		ns->rescans++;
	if (rc == 0 && !first && ns->next.unchanged) {
		base_log(ns->scan_quiet ? BASE_LOG_DEBUG : BASE_LOG_INFO,
			 "rescan found no change ns=%s generation=%" PRIu64
			 " files=%" PRIu64 " seconds=%.1f",
			 ns->name, ns->generation, ns->next.stats.files,
			 ns->next.seconds);
	} else if (rc == 0) {
		rc = adopt(ns, first);
	}
	if (rc < 0 && first) {
		ns->state = REPL_NS_FAILED;
		base_log_err(BASE_LOG_ERROR, rc,
			     "scan failed ns=%s path=\"%s\"", ns->name,
			     ns->dir);
	} else if (rc < 0) {
		base_log_err(
		    BASE_LOG_ERROR, rc,
		    "rescan failed ns=%s path=\"%s\" generation=%" PRIu64
		    " still served",
		    ns->name, ns->dir, ns->generation);
	}
	repl_ns_unref(ns); /* the job's */
	scan_next(srv);
}

/* The next namespace to walk: one never published first (added by a
 * reload, or whose scan failed), so a name added to a large set is not
 * queued behind a rescan of every other; then in srv->ns order. */
static struct repl_ns *scan_pick(struct repl_server *srv)
{
	size_t i;

	for (i = 0; i < srv->n_ns; i++)
		if (srv->ns[i]->scan_wanted &&
		    srv->ns[i]->state != REPL_NS_READY)
			return srv->ns[i];
	for (i = 0; i < srv->n_ns; i++)
		if (srv->ns[i]->scan_wanted)
			return srv->ns[i];
	return NULL;
}

static void scan_next(struct repl_server *srv)
{
	struct repl_ns *ns;

	if (srv->stopping || srv->scanning)
		return;
	while ((ns = scan_pick(srv))) {
		ns->scan_wanted = 0;
		/* a namespace whose scan failed is scanned from scratch */
		if (ns->state == REPL_NS_FAILED)
			ns->state = REPL_NS_SCANNING;
		if (ns->state == REPL_NS_READY)
			base_log(ns->scan_quiet ? BASE_LOG_DEBUG
						: BASE_LOG_INFO,
				 "rescan ns=%s generation=%" PRIu64, ns->name,
				 ns->generation);
		ns->scan_work.data = ns;
		if (uv_queue_work(&srv->loop, &ns->scan_work, scan_work,
				  scan_done) < 0) {
			if (ns->state == REPL_NS_SCANNING)
				ns->state = REPL_NS_FAILED;
			continue;
		}
		repl_ns_ref(ns); /* the job's, dropped in scan_done */
		ns->scan_running = 1;
		srv->scanning = 1;
		return;
	}
}

void repl_scan_want(struct repl_server *srv, int again, int quiet)
{
	size_t i;

	for (i = 0; i < srv->n_ns; i++) {
		struct repl_ns *ns = srv->ns[i];

		if (!again && ns->scan_running)
			continue;
		/* a signal's request is logged even if a tick's is queued */
		ns->scan_quiet =
		    ns->scan_wanted ? ns->scan_quiet && quiet : quiet;
		ns->scan_wanted = 1;
	}
	scan_next(srv);
}

static void on_hup(uv_signal_t *s, int signum)
{
	struct repl_server *srv = s->data;

	(void)signum;
	if (srv->stopping)
		return;
	repl_server_tls_reload(srv); /* new connections take it */
	/* the namespaces file, then the tokens file (its warnings are
	 * about the namespaces served from now on), both before the
	 * rescan: a token added for a client that waits for this rescan
	 * works at once */
	if (srv->ns_file)
		repl_ns_reload(srv);
	if (srv->tokens_path)
		repl_server_tokens_load(srv, 1);
	base_info("rescan requested signal=SIGHUP namespaces=%zu", srv->n_ns);
	repl_scan_want(srv, 1, 0);
}

static void on_interval(uv_timer_t *t)
{
	struct repl_server *srv = t->data;
	size_t i;

	if (srv->stopping)
		return;
	for (i = 0; i < srv->n_ns; i++)
		if (srv->ns[i]->scan_running || srv->ns[i]->scan_wanted)
			return; /* still at the last tick's scans */
	base_debug("rescan requested interval=%us", srv->rescan_interval_s);
	repl_scan_want(srv, 0, 1);
}

void repl_rescan_init(struct repl_server *srv)
{
	uv_signal_init(&srv->loop, &srv->sig_hup);
	srv->sig_hup.data = srv;
	uv_signal_start(&srv->sig_hup, on_hup, SIGHUP);
	uv_timer_init(&srv->loop, &srv->rescan_timer);
	srv->rescan_timer.data = srv;
	if (srv->rescan_interval_s)
		uv_timer_start(&srv->rescan_timer, on_interval,
			       (uint64_t)srv->rescan_interval_s * 1000,
			       (uint64_t)srv->rescan_interval_s * 1000);
}

void repl_rescan_close(struct repl_server *srv)
{
	uv_close((uv_handle_t *)&srv->sig_hup, NULL);
	uv_close((uv_handle_t *)&srv->rescan_timer, NULL);
}
