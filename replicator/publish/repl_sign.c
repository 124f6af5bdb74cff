/*
 * replicator/publish/repl_sign.c — signed generations on the source side
 * (--sign-key; formats in catalog.h and docs/formats.md):
 *   - repl_generation_sign: the statement of one generation (namespace,
 *     generation, parent, cat_digest of its catalog, time), written as
 *     STATE/catalog/GEN.db.sig beside the catalog before HEAD names it,
 *     and pruned with it (repl_generations_prune takes "GEN.db*").
 * The server hands that file out (serve/repl_route_sign.c); a manifests
 * answer is signed where it is built (serve/repl_routes_manifest.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"

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
	char *cat = repl_catalog_path(state_dir, gen);
	char *sig = repl_sig_path(state_dir, gen);
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
