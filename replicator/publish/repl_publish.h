/*
 * replicator/publish/repl_publish.h — the publish room's face: how a
 * namespace's generations are made and kept, and what of them the server
 * hands out.
 *   - repl_generation_build: one whole generation in a namespace state
 *     directory (scan, compressed catalog + its SHA-256, signature, HEAD
 *     last), repl_publish.c; deltas between generations and pruning;
 *   - signed statements of generations (repl_sign.c);
 *   - the chunk lists of cacheable pack objects (repl_pack.c);
 *   - the static published store, --publish (repl_static*.c).
 * Any thread; every call blocks (never from an event-loop callback).
 */
#ifndef FERRY_REPL_PUBLISH_H
#define FERRY_REPL_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "replicator/source/repl_source.h"

/* Result of one generation build. */
struct repl_generation {
	uint64_t generation; /* the one HEAD names afterwards */
	int unchanged;	     /* 1: the tree was the same as HEAD's, which
			      * stays; nothing new was published */
	struct repl_scan_stats stats;
	char sha256[65]; /* hex of GEN.db.zst */
	uint64_t zst_bytes;
	double seconds; /* wall time of the whole build */
};

/* Build the next generation of a namespace: read state_dir/HEAD (none: 0),
 * scan dir as HEAD+1 (o->generation, o->parent_generation and the paths
 * of o are set here), reusing the manifests of files HEAD's generation
 * holds unchanged. When the new catalog's rows are those of HEAD's
 * (cat_meta.tree_sha256), it is removed and HEAD stays (ret->unchanged,
 * ret->generation = HEAD); else the catalog is compressed and HEAD is
 * written last. Creates state_dir and its subfolders (0755) as needed.
 * Returns 0 or -errno as repl_scan, plus -EIO for a failed publish. */
int repl_generation_build(const char *state_dir, const char *dir,
			  const struct repl_scan_opts *o,
			  struct repl_generation *ret);

/* The generation state_dir's HEAD names, as repl_generation_build reports
 * one with nothing changed (ret->unchanged set; stats from its catalog's
 * meta: params, files as inodes, bytes, pending): to serve it before the
 * first walk (--serve-last). 0, -ENOENT (no generation yet), -errno. */
int repl_generation_last(const char *state_dir, struct repl_generation *ret);

/* Compress the file at src into dst with zstd (streaming, level 3), via
 * "dst.tmp", fsync, rename, fsync of the directory; the hex SHA-256 of the
 * compressed bytes goes into ret_hex and into "dst.sha256" (same dance).
 * *ret_bytes is the compressed size. Returns 0, -EIO, -errno. */
int repl_catalog_compress(const char *src, const char *dst, char ret_hex[65],
			  uint64_t *ret_bytes);

/* The chunk list of pack (first, part) of generation gen of the
 * namespace whose state is state_dir (repl_pack.c). Worker thread. 0,
 * -ENOENT (no such generation or pack), -EAGAIN (a file of it is not
 * hashed yet), -EBADMSG, -errno. */
int repl_pack_list(const char *state_dir, uint64_t gen, uint64_t first,
		   uint64_t part, struct cat_pack_list *out);

/* Make the compressed delta from generation from to to (cat_delta_build,
 * then zstd with its SHA-256, as a catalog), unless it is there already.
 * Serialized. 0, -ENOENT (one of the catalogs is gone), -errno. */
int repl_delta_make(const char *state_dir, uint64_t from, uint64_t to);

/* Sign generation gen of namespace ns (its catalog in state_dir, which
 * gives the parent and the digest) with k, now, into catalog/GEN.db.sig
 * (temp + rename). keep: a statement already there of (ns, gen) by this
 * key stays as it is. Blocking: a scan of the catalog's rows
 * (cat_digest). 0, -EBADMSG (the catalog is not of gen), -errno.
 * repl_sign.c. */
struct cat_sign_key;
int repl_generation_sign(const char *state_dir, const char *ns, uint64_t gen,
			 const struct cat_sign_key *k, int keep);

/* Read the hex SHA-256 kept next to a compressed catalog (zst_path +
 * ".sha256") into ret_hex. Returns 0, -EBADMSG, -errno. */
int repl_catalog_sha_read(const char *zst_path, char ret_hex[65]);

/* Remove every generation older than the keep newest up to head
 * (generations head - keep + 1 .. head stay) from state_dir: the
 * compressed catalogs first, so no client starts on one that is going,
 * then their digests, the catalogs and the source indexes (with SQLite's
 * side files). Only names "GEN.db*" with GEN a decimal below the cut are
 * touched. A crash in the middle leaves files the next call removes; a
 * file a request still has open stays readable until it is closed.
 * *ret_removed (may be NULL) counts the generations whose catalog went.
 * Returns 0 or the first -errno (it goes on past a failure). */
int repl_generations_prune(const char *state_dir, uint64_t head, unsigned keep,
			   uint64_t *ret_removed);

/* -- the static published store (repl_static.c, repl_static_prune.c,
 * repl_static_run.c) -- */

struct repl_static_opts {
	const char *state_dir; /* the namespace's: STATE/NAME */
	const char *src_dir;   /* its source directory */
	const char *out_dir;   /* OUTDIR */
	uint64_t gen;	       /* a generation of state_dir, format 1 */
	int policy;	       /* enum frame_policy */
	unsigned threads;      /* readers and writers, 1..64 */
	unsigned keep;	       /* generations OUTDIR keeps; 0: 3 */
};

struct repl_static_stats {
	uint64_t generation;
	uint64_t previous;	/* what OUTDIR/HEAD named before; 0 none */
	uint64_t chunks;	/* distinct chunk ids (holes left out) */
	uint64_t written;	/* chunk objects written now */
	uint64_t written_bytes; /* their frame bytes */
	uint64_t raw_bytes;	/* their raw bytes */
	int delta;		/* delta/PREVIOUS/GEN written */
	int signed_;		/* signature/GEN written */
	double seconds;
	/* older generations dropped after HEAD (repl_static_prune) */
	uint64_t pruned_gens, pruned_objects, pruned_bytes;
};

/* What repl_static_prune removed. */
struct repl_static_prune_stats {
	uint64_t generations; /* catalogs dropped, with their files */
	uint64_t objects;     /* chunk objects removed */
	uint64_t bytes;	      /* their bytes */
};

/* OUTDIR keeps the newest keep (>= 1) generations of OUTDIR/catalog and
 * head, the one just published: the chunk objects only older generations
 * name are removed, then those generations' signatures and deltas, their
 * catalogs last (a crash part way leaves the catalog; the next call
 * finishes). tmpfd and chunkfd are OUTDIR/.ferry-tmp (the publish lock
 * held) and OUTDIR/chunk. 0 or -errno with why set to one line. */
int repl_static_prune(const char *out, int tmpfd, int chunkfd, uint64_t head,
		      unsigned keep, struct repl_static_prune_stats *st,
		      char *why, size_t whycap);

/* Write generation o->gen of a namespace into o->out_dir as the static
 * layout (the paths of its URLs): every chunk object the directory lacks
 * (read beneath src_dir, checked against its id, framed), the catalog,
 * the delta from the generation OUTDIR held, the signature, HEAD last.
 * Returns 0 or -errno with err set to one line: -EBUSY (another publish
 * holds OUTDIR), -ESTALE (OUTDIR holds a newer generation), -EEXIST
 * (OUTDIR has another catalog of that number), -EBADMSG (the source
 * changed since the scan). Blocking; threads of its own. */
int repl_static_publish(const struct repl_static_opts *o,
			struct repl_static_stats *st, char *err, size_t errcap);

/* ferry-replicator --publish NAME=OUTDIR: build the next generation of
 * the namespace (every new or changed file hashed: no pending
 * manifests), write it into OUTDIR, drop state generations beyond keep.
 * One info line on success, one error line otherwise. Returns 0 or
 * -errno. sign_key may be NULL. */
struct cat_sign_key;
struct repl_static_run {
	const char *ns;
	const char *state_root; /* --state-dir: the namespace's is below */
	const char *src_dir;
	const char *out_dir;
	int policy;
	unsigned threads; /* 0: one per CPU */
	unsigned keep;	  /* generations kept, in OUTDIR and the state dir;
			   * 0: 3 */
	const struct cat_sign_key *sign_key;
};
int repl_static_run(const struct repl_static_run *o);

#endif
