/*
 * replicator/publish/repl_static_prune.c — a published store keeps the newest
 * few generations (--keep-generations, default 3): after a publish, what
 * only older generations name goes.
 *
 * For each generation past the newest `keep` of OUTDIR/catalog: first the
 * chunk objects its catalog names and no kept generation's catalog names,
 * then its signature and the deltas from and to it, its catalog last. A
 * crash part way leaves that catalog, so the next publish finishes the
 * job; nothing a kept generation names is ever removed.
 *
 * The ids are worked out in a scratch SQLite file under .ferry-tmp: the
 * ids of the dropped generations go in, the ids of each kept one are taken
 * out, one catalog at a time (each decompressed next to it, then removed),
 * so memory stays flat whatever the tree's size. The cost is one pass over
 * the chunk rows of each catalog involved, the order of the publish's own
 * pass over its catalog. A mount still on a dropped generation gets 404s
 * for the chunks it no longer shares; one that follows (--poll) moved on
 * when the newer generations came.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include <zstd.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/publish/repl_publish.h"

#define SCRATCH_DB "prune.db"
#define SCRATCH_CAT "prune-catalog"

struct prune {
	const char *out;
	int tmpfd, chunkfd;
	sqlite3 *db;
	sqlite3_stmt *put, *take;
	char *why;
	size_t whycap;
	uint64_t stop_after; /* test hook: removals before a simulated crash */
};

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* The generations of OUTDIR/catalog, newest first, in *ret_gens (all of
 * them: a kept set made from part of the listing could miss a newer
 * generation and drop what it names). The caller frees *ret_gens. */
static int list_gens(const char *out, uint64_t **ret_gens, size_t *ret_n)
{
	char *path = base_path_fmt("%s/catalog", out);
	uint64_t *gens = NULL, *ng, g;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	if (!path)
		return -ENOMEM;
	d = opendir(path);
	free(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (base_parse_u64(de->d_name, 1, UINT64_MAX, &g) < 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			ng = realloc(gens, cap * sizeof(*gens));
			if (!ng) {
				closedir(d);
				free(gens);
				return -ENOMEM;
			}
			gens = ng;
		}
		gens[n++] = g;
	}
	closedir(d);
	qsort(gens, n, sizeof(*gens), cmp_desc);
	*ret_gens = gens;
	*ret_n = n;
	return 0;
}

/* OUTDIR/catalog/GEN (zstd) into .ferry-tmp/SCRATCH_CAT. */
static int unpack(struct prune *p, uint64_t gen)
{
	char name[40], *path;
	uint8_t *in = NULL, *outb = NULL;
	size_t incap = ZSTD_DStreamInSize(), outcap = ZSTD_DStreamOutSize();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	int src = -1, dst = -1, r = 0, ended = 1;
	ssize_t got;

	snprintf(name, sizeof(name), "%" PRIu64, gen);
	path = base_path_fmt("%s/catalog/%s", p->out, name);
	in = malloc(incap);
	outb = malloc(outcap);
	if (!path || !in || !outb || !dc) {
		r = -ENOMEM;
		goto out;
	}
	src = open(path, O_RDONLY | O_CLOEXEC);
	dst = openat(p->tmpfd, SCRATCH_CAT,
		     O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (src < 0 || dst < 0) {
		r = -errno;
		goto out;
	}
	while ((got = read(src, in, incap)) != 0) {
		ZSTD_inBuffer ib = {in, 0, 0};

		if (got < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			goto out;
		}
		ib.size = (size_t)got;
		while (ib.pos < ib.size) {
			ZSTD_outBuffer ob = {outb, outcap, 0};
			size_t rc = ZSTD_decompressStream(dc, &ob, &ib);

			if (ZSTD_isError(rc)) {
				r = base_zstd_errno(rc, 1);
				goto out;
			}
			ended = rc == 0;
			r = base_write_all(dst, outb, ob.pos);
			if (r < 0)
				goto out;
		}
	}
	if (!ended)
		r = -EBADMSG; /* cut short */
out:
	if (r < 0)
		snprintf(p->why, p->whycap,
			 "cannot unpack catalog/%" PRIu64 ": %s", gen,
			 base_errname(r));
	if (src >= 0)
		close(src);
	if (dst >= 0)
		close(dst);
	ZSTD_freeDCtx(dc);
	free(in);
	free(outb);
	free(path);
	return r;
}

static int step_id(sqlite3_stmt *st, const chunk_id *id)
{
	int rc;

	sqlite3_bind_blob(st, 1, id->b, CHUNK_ID_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

static int put_cb(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	(void)ino;
	return chunk_id_is_hole(&c->id) ? 0 : step_id(ctx, &c->id);
}

/* Every chunk id of generation gen's catalog through st (put or take). */
static int each_id(struct prune *p, uint64_t gen, sqlite3_stmt *st)
{
	char *path = NULL;
	cat_reader *cat = NULL;
	int r = unpack(p, gen);

	if (r < 0)
		return r;
	path = base_path_fmt("%s/.ferry-tmp/" SCRATCH_CAT, p->out);
	r = path ? cat_reader_open(path, &cat) : -ENOMEM;
	if (r == 0) {
		r = cat_chunks_each(cat, put_cb, st);
		cat_reader_close(cat);
	}
	if (r < 0)
		snprintf(p->why, p->whycap,
			 "cannot list the chunks of catalog/%" PRIu64 ": %s",
			 gen, base_errname(r));
	(void)unlinkat(p->tmpfd, SCRATCH_CAT, 0);
	free(path);
	return r;
}

static int scratch_open(struct prune *p)
{
	char *path = base_path_fmt("%s/.ferry-tmp/" SCRATCH_DB, p->out);
	int rc;

	if (!path)
		return -ENOMEM;
	(void)unlinkat(p->tmpfd, SCRATCH_DB, 0);
	rc = sqlite3_open_v2(path, &p->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	free(path);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(p->db,
				  "PRAGMA journal_mode=OFF;"
				  "PRAGMA synchronous=OFF;"
				  "CREATE TABLE gone(id BLOB PRIMARY KEY) "
				  "WITHOUT ROWID;",
				  NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(p->db,
					"INSERT OR IGNORE INTO gone VALUES(?)",
					-1, &p->put, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(p->db, "DELETE FROM gone WHERE id=?",
					-1, &p->take, NULL);
	if (rc != SQLITE_OK) {
		snprintf(p->why, p->whycap, "cannot make .ferry-tmp/%s: %s",
			 SCRATCH_DB,
			 p->db ? sqlite3_errmsg(p->db) : "out of memory");
		return -EIO;
	}
	return 0;
}

/* Remove the chunk objects left in gone. */
static int drop_objects(struct prune *p, struct repl_static_prune_stats *st)
{
	char hex[CHUNK_ID_HEX_LEN + 1];
	sqlite3_stmt *q = NULL;
	struct stat sb;
	int rc, r = 0;

	rc = sqlite3_prepare_v2(p->db, "SELECT id FROM gone", -1, &q, NULL);
	while (rc == SQLITE_OK || rc == SQLITE_ROW) {
		chunk_id id;

		rc = sqlite3_step(q);
		if (rc != SQLITE_ROW)
			break;
		if (sqlite3_column_bytes(q, 0) != CHUNK_ID_LEN)
			continue;
		memcpy(id.b, sqlite3_column_blob(q, 0), CHUNK_ID_LEN);
		chunk_id_to_hex(&id, hex);
		if (fstatat(p->chunkfd, hex, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone already (a crash, or never there) */
		if (unlinkat(p->chunkfd, hex, 0) < 0 && errno != ENOENT) {
			r = -errno;
			snprintf(p->why, p->whycap,
				 "cannot remove chunk/%s: %s", hex,
				 base_errname(r));
			break;
		}
		st->objects++;
		st->bytes += (uint64_t)sb.st_size;
		if (p->stop_after && st->objects == p->stop_after) {
			r = -EINTR; /* as a crash here would leave it */
			snprintf(p->why, p->whycap,
				 "stopped after %" PRIu64
				 " removals (FERRY_TEST_PRUNE_STOP_AFTER)",
				 st->objects);
			break;
		}
	}
	if (r == 0 && rc != SQLITE_DONE) {
		r = -EIO;
		snprintf(p->why, p->whycap, "cannot read .ferry-tmp/%s: %s",
			 SCRATCH_DB, sqlite3_errmsg(p->db));
	}
	sqlite3_finalize(q);
	if (r == 0 && fsync(p->chunkfd) < 0) {
		r = -errno;
		snprintf(p->why, p->whycap, "cannot fsync chunk/: %s",
			 base_errname(r));
	}
	return r;
}

/* unlink OUTDIR/rel, fine when it is not there. */
static int rm_rel(const char *out, const char *rel)
{
	char *path = base_path_fmt("%s/%s", out, rel);
	int r = 0;

	if (!path)
		return -ENOMEM;
	if (unlink(path) < 0 && errno != ENOENT)
		r = -errno;
	free(path);
	return r;
}

/* The directory name below dirfd and the files in it (deltas: no
 * subdirectories), fine when it is not there. */
static int rm_dir(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	int r = 0;

	if (!d) {
		r = errno;
		if (fd >= 0)
			close(fd);
		return r == ENOENT ? 0 : -r;
	}
	while (r == 0 && (de = readdir(d)))
		if (de->d_name[0] != '.' && unlinkat(fd, de->d_name, 0) < 0 &&
		    errno != ENOENT)
			r = -errno;
	closedir(d);
	if (r == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 &&
	    errno != ENOENT)
		r = -errno;
	return r;
}

/* Generation gen's signature and deltas (delta/GEN/ as a whole, and
 * delta/FROM/GEN), its catalog last. */
static int drop_meta(struct prune *p, uint64_t gen)
{
	char name[24], rel[320];
	char *ddir = base_path_fmt("%s/delta", p->out);
	struct dirent *de;
	DIR *d = ddir ? opendir(ddir) : NULL;
	int r;

	free(ddir);
	snprintf(name, sizeof(name), "%" PRIu64, gen);
	snprintf(rel, sizeof(rel), "signature/%s", name);
	r = rm_rel(p->out, rel);
	while (r == 0 && d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (strcmp(de->d_name, name) != 0) {
			snprintf(rel, sizeof(rel), "delta/%s/%s", de->d_name,
				 name);
			r = rm_rel(p->out, rel);
		} else {
			r = rm_dir(dirfd(d), name);
		}
	}
	if (d)
		closedir(d);
	snprintf(rel, sizeof(rel), "catalog/%s", name);
	if (r == 0)
		r = rm_rel(p->out, rel);
	if (r < 0)
		snprintf(p->why, p->whycap,
			 "cannot remove generation %" PRIu64 "'s files: %s",
			 gen, base_errname(r));
	return r;
}

int repl_static_prune(const char *out, int tmpfd, int chunkfd, uint64_t head,
		      unsigned keep, struct repl_static_prune_stats *st,
		      char *why, size_t whycap)
{
	struct prune p = {.out = out,
			  .tmpfd = tmpfd,
			  .chunkfd = chunkfd,
			  .why = why,
			  .whycap = whycap};
	uint64_t *gens = NULL;
	size_t n = 0, i;
	int r;

	memset(st, 0, sizeof(*st));
	/* A test hook, not an option: stop part way, as a crash would. */
	if (getenv("FERRY_TEST_PRUNE_STOP_AFTER"))
		(void)base_parse_u64(getenv("FERRY_TEST_PRUNE_STOP_AFTER"), 0,
				     UINT64_MAX, &p.stop_after);
	r = list_gens(out, &gens, &n);
	if (r < 0) {
		snprintf(why, whycap, "cannot list %s/catalog: %s", out,
			 base_errname(r));
		goto out;
	}
	if (keep < 1)
		keep = 1;
	/* Never the generation just published, whatever else is there. */
	for (i = keep; i < n; i++)
		if (gens[i] == head)
			gens[i] = gens[--n];
	if (n <= keep)
		goto out;
	r = scratch_open(&p);
	if (r == 0)
		r = sqlite3_exec(p.db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK
			? 0
			: -EIO;
	for (i = keep; r == 0 && i < n; i++)
		r = each_id(&p, gens[i], p.put);
	for (i = 0; r == 0 && i < keep; i++)
		r = each_id(&p, gens[i], p.take);
	if (r == 0)
		r = drop_objects(&p, st);
	for (i = keep; r == 0 && i < n; i++) {
		r = drop_meta(&p, gens[i]);
		if (r == 0)
			st->generations++;
	}
out:
	sqlite3_finalize(p.put);
	sqlite3_finalize(p.take);
	if (p.db)
		sqlite3_close(p.db);
	(void)unlinkat(tmpfd, SCRATCH_DB, 0);
	free(gens);
	return r;
}
