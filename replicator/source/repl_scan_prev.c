/*
 * replicator/source/repl_scan_prev.c — the previous generation, as a scan sees
 * it: for a regular file the walk found, the manifest that generation
 * already holds, when the file is unchanged, so its bytes are not read
 * and hashed again.
 *
 * The quick check (docs/catalog.md, "Reuse across generations"): the
 * file's source identity (st_dev, st_ino) names a catalog ino in the
 * previous generation's source index, and that inode's size, mtime_ns and
 * ctime_ns equal the file's now. Any write through the file system moves
 * ctime, so a rewrite that restores mtime and size is still seen; what it
 * cannot see is a change that leaves ctime alone (a raw write to the block
 * device, a file system that does not keep ctime, or a clock set back to
 * the second), and a device number that changed (a remount on another
 * device re-reads everything: safe, only slow).
 *
 * Any scanning thread may ask: the catalog reader serializes itself, the
 * source index lookup is under mu.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_scan_priv.h"
#include "replicator/source/repl_srcindex.h"

/* Manifest rows fetched from the catalog at a time (on the stack). */
#define PREV_ROWS 64u

struct repl_prev {
	cat_reader *cat;
	repl_srcindex *idx; /* under mu */
	pthread_mutex_t mu;
	chunk_params params;
};

int repl_prev_open(const char *catalog_path, const char *srcindex_path,
		   const chunk_params *params, struct repl_prev **ret)
{
	struct repl_prev *p;
	struct cat_meta meta;
	int r;

	*ret = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->mu, NULL);
	r = cat_reader_open(catalog_path, &p->cat);
	if (r == 0)
		r = repl_srcindex_open(srcindex_path, &p->idx);
	if (r < 0)
		goto fail;
	/* Manifests cut with other parameters are other manifests. */
	cat_reader_meta(p->cat, &meta);
	if (meta.params.min != params->min || meta.params.avg != params->avg ||
	    meta.params.max != params->max) {
		r = -ESTALE;
		goto fail;
	}
	p->params = meta.params;
	*ret = p;
	return 0;
fail:
	repl_prev_close(p);
	return r;
}

void repl_prev_close(struct repl_prev *p)
{
	if (!p)
		return;
	repl_srcindex_close(p->idx);
	cat_reader_close(p->cat);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000ll + ts->tv_nsec;
}

/* The hasher's manifest of ino in the previous source index. */
static int prev_hashed(struct repl_prev *p, uint64_t ino, uint64_t size,
		       struct repl_manifest *m)
{
	struct repl_src_manifest sm;
	uint64_t off = 0;
	int r;

	pthread_mutex_lock(&p->mu);
	r = repl_srcindex_manifest(p->idx, ino, &sm);
	if (r == 0 && (sm.state != REPL_HASH_OK || sm.size != size))
		r = -ENOENT;
	for (size_t i = 0; r == 0 && i < sm.n; i++) {
		if (sm.v[i].off != off) {
			r = -EBADMSG;
			break;
		}
		off += sm.v[i].len;
		r = repl_manifest_add(m, &sm.v[i]);
	}
	pthread_mutex_unlock(&p->mu);
	if (r == 0 && off == size)
		return 1;
	repl_manifest_reset(m);
	/* not hashed there (yet), or unusable: read it */
	return r == -ENOMEM ? r : 0;
}

/* The previous generation's entry of st's identity: 1 with *in, 0 when
 * there is none (or it does not read back), -errno. */
static int prev_entry(struct repl_prev *p, const struct stat *st,
		      struct cat_inode *in)
{
	uint64_t ino = 0;
	int r;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	r = repl_srcindex_ident(p->idx, (uint64_t)st->st_dev,
				(uint64_t)st->st_ino, &ino);
	pthread_mutex_unlock(&p->mu);
	if (r < 0)
		return r == -ENOENT ? 0 : r;
	r = cat_getattr(p->cat, ino, in);
	if (r < 0)
		return r == -ENOENT || r == -EBADMSG ? 0 : r;
	return 1;
}

int repl_prev_manifest(struct repl_prev *p, const struct stat *st,
		       struct repl_manifest *m, uint64_t *ret_prev_ino)
{
	struct cat_chunk cs[PREV_ROWS];
	struct cat_inode in;
	uint64_t ino = 0, off = 0, size = (uint64_t)st->st_size;
	size_t n, i;
	int r;

	*ret_prev_ino = 0;
	r = prev_entry(p, st, &in);
	if (r <= 0)
		return r;
	ino = in.ino;
	if (in.kind != CAT_REG || in.size != size ||
	    in.mtime_ns != ns_of(&st->st_mtim) ||
	    in.ctime_ns != ns_of(&st->st_ctim))
		return 0;
	/* The same file, unchanged: its number stays, whether or not its
	 * manifest can be reused below. A file whose size or times moved
	 * gets a new number: a number names one content, so a mount that
	 * switches generations in place keeps serving the old bytes to whoever
	 * holds the old number open, and the kernel's page cache of it is
	 * never mixed with the new content. */
	*ret_prev_ino = ino;
	repl_manifest_reset(m);
	if (size == 0)
		return 1;
	/* Pending in that catalog: its manifest, if the hasher finished
	 * it, is in that generation's source index. */
	r = cat_manifest_state(p->cat, ino);
	if (r < 0)
		return r == -ENOMEM ? r : 0;
	if (r != CAT_MANIFEST_CATALOG)
		return prev_hashed(p, ino, size, m);
	/* The rows must cover [0, size) without a gap, as the reader checks
	 * within one call: across calls each batch starts where the last
	 * one ended. Anything else is no reuse, not an error: read it. */
	while (off < size) {
		r = cat_chunks_range(p->cat, ino, off, size - off, cs,
				     PREV_ROWS, &n);
		if (r < 0 || n == 0 || cs[0].off != off) {
			r = r == -ENOMEM ? r : 0;
			break;
		}
		for (i = 0; i < n; i++) {
			r = repl_manifest_add(m, &cs[i]);
			if (r < 0)
				break;
		}
		if (r < 0)
			break;
		off = cs[n - 1].off + cs[n - 1].len;
	}
	if (off == size && r >= 0)
		return 1;
	repl_manifest_reset(m);
	return r < 0 ? r : 0;
}

int repl_prev_ino(struct repl_prev *p, const struct stat *st, int kind,
		  uint64_t *ret)
{
	struct cat_inode in;
	int r;

	*ret = 0;
	r = prev_entry(p, st, &in);
	if (r <= 0 || (int)in.kind != kind)
		return r < 0 ? r : 0;
	*ret = in.ino;
	return 1;
}

uint64_t repl_prev_next_ino(struct repl_prev *p)
{
	uint64_t next = 0;

	if (!p || cat_next_ino(p->cat, &next) < 0)
		return 0;
	return next;
}
