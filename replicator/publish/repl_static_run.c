/*
 * replicator/publish/repl_static_run.c — ferry-replicator --publish
 * NAME=OUTDIR: the next generation of one namespace built with every file
 * hashed (a static store has no one to hash pending files later), written into
 * OUTDIR (repl_static.c), and the state dir's old generations dropped.
 * Runs on the calling thread; no server.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/publish/repl_publish.h"

static void run_warn(void *ctx, const char *rel, size_t rel_len, int err,
		     const char *why)
{
	const struct repl_static_run *o = ctx;

	repl_scan_warn_log(o->ns, o->src_dir, rel, rel_len, err, why);
}

/* Regular files of gen's catalog still waiting for their manifest. */
static int pending_of(const char *state_dir, uint64_t gen, uint64_t *ret)
{
	char *path = repl_catalog_path(state_dir, gen);
	struct cat_meta m;
	cat_reader *r = NULL;
	int rc;

	if (!path)
		return -ENOMEM;
	rc = cat_reader_open(path, &r);
	free(path);
	if (rc < 0)
		return rc;
	cat_reader_meta(r, &m);
	*ret = m.pending;
	cat_reader_close(r);
	return 0;
}

int repl_static_run(const struct repl_static_run *o)
{
	struct repl_scan_opts so = {
	    .defer = 0,
	    .warn = run_warn,
	    .ctx = (void *)o,
	    .threads = o->threads,
	    .sign_key = o->sign_key,
	    .ns_name = o->ns,
	};
	struct repl_generation g;
	struct repl_static_stats st;
	struct repl_static_opts po;
	char err[768];
	char *state = base_path_fmt("%s/%s", o->state_root, o->ns);
	uint64_t pending = 0;
	long ncpu;
	int r;

	if (!state) {
		base_error("out of memory");
		return -ENOMEM;
	}
	r = repl_generation_build(state, o->src_dir, &so, &g);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot scan for publishing ns=%s path=\"%s\"",
			     o->ns, o->src_dir);
		goto out;
	}
	r = pending_of(state, g.generation, &pending);
	if (r == 0 && pending) {
		base_error("cannot publish ns=%s generation=%" PRIu64
			   ": %" PRIu64
			   " files of it were never hashed (a state dir a "
			   "serving replicator publishes into); give "
			   "--publish a --state-dir of its own",
			   o->ns, g.generation, pending);
		r = -EAGAIN;
		goto out;
	}
	if (r < 0) {
		base_log_err(
		    BASE_LOG_ERROR, r,
		    "cannot open the catalog ns=%s generation=%" PRIu64, o->ns,
		    g.generation);
		goto out;
	}
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	po = (struct repl_static_opts){
	    .state_dir = state,
	    .src_dir = o->src_dir,
	    .out_dir = o->out_dir,
	    .gen = g.generation,
	    .policy = o->policy,
	    .keep = o->keep,
	    .threads = o->threads ? o->threads
		       : ncpu < 1 ? 1
				  : (unsigned)ncpu,
	};
	if (po.threads > 64)
		po.threads = 64;
	r = repl_static_publish(&po, &st, err, sizeof(err));
	if (r < 0) {
		base_error("cannot publish ns=%s generation=%" PRIu64
			   " out=\"%s\" why=\"%s\"",
			   o->ns, g.generation, o->out_dir, err);
		goto out;
	}
	base_info("published ns=%s generation=%" PRIu64 " previous=%" PRIu64
		  " out=\"%s\" files=%" PRIu64 " bytes=%" PRIu64
		  " bytes_read_scan=%" PRIu64 " chunks=%" PRIu64
		  " written=%" PRIu64 " written_bytes=%" PRIu64
		  " raw_bytes=%" PRIu64 " delta=%d signed=%d unchanged=%d "
		  "dropped_generations=%" PRIu64 " dropped_chunks=%" PRIu64
		  " dropped_bytes=%" PRIu64 " scan_seconds=%.1f seconds=%.1f",
		  o->ns, st.generation, st.previous, o->out_dir, g.stats.files,
		  g.stats.bytes, g.stats.bytes_read, st.chunks, st.written,
		  st.written_bytes, st.raw_bytes, st.delta, st.signed_,
		  g.unchanged, st.pruned_gens, st.pruned_objects,
		  st.pruned_bytes, g.seconds, st.seconds);
	/* The state dir keeps as many generations as OUTDIR (the next
	 * publish's delta needs this one). */
	(void)repl_generations_prune(state, g.generation, o->keep ? o->keep : 3,
				     NULL);
out:
	free(state);
	return r;
}
