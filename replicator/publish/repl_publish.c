/*
 * replicator/publish/repl_publish.c — one generation of a namespace's state:
 * scan into GEN.db, compress it into GEN.db.zst with its SHA-256, sign it
 * (--sign-key: GEN.db.sig, repl_sign.c), and move HEAD to it. Also the
 * durable-write helpers the rest of replicator/ uses.
 *
 * Crash safety: every file appears by rename of a fsynced temp file, and
 * HEAD is renamed last, so a reader following HEAD only ever finds complete
 * generations. Older generations are never touched: hydrators may still
 * be fetching them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zstd.h>

#include "catalog/base/base.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/publish/repl_publish.h"

#define ZST_LEVEL 3

int repl_catalog_sha_read(const char *zst_path, char ret_hex[65])
{
	char *path = base_path_fmt("%s.sha256", zst_path);
	char buf[80];
	size_t len, i;
	int r;

	if (!path)
		return -ENOMEM;
	r = base_file_read_small(path, buf, sizeof(buf), &len);
	free(path);
	if (r == -EFBIG)
		return -EBADMSG;
	if (r < 0)
		return r;
	if (len != 65 || buf[64] != '\n')
		return -EBADMSG;
	for (i = 0; i < 64; i++)
		if (!((buf[i] >= '0' && buf[i] <= '9') ||
		      (buf[i] >= 'a' && buf[i] <= 'f')))
			return -EBADMSG;
	memcpy(ret_hex, buf, 64);
	ret_hex[64] = '\0';
	return 0;
}

/* The zstd stream loop: src fd to dst fd, hashing what is written. */
static int compress_fd(int in, int outfd, EVP_MD_CTX *md, uint64_t *ret_bytes)
{
	size_t in_cap = ZSTD_CStreamInSize(), out_cap = ZSTD_CStreamOutSize();
	void *ibuf = malloc(in_cap), *obuf = malloc(out_cap);
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	uint64_t total = 0, off = 0;
	int r = 0, last = 0;

	if (!ibuf || !obuf || !cc) {
		r = -ENOMEM;
		goto out;
	}
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, ZST_LEVEL);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
	while (!last) {
		ZSTD_inBuffer zin;
		size_t n, left;

		r = base_pread_full(in, ibuf, in_cap, off, &n);
		if (r < 0)
			goto out;
		off += n;
		last = n < in_cap; /* short only at the end of the file */
		zin = (ZSTD_inBuffer){ibuf, n, 0};
		do {
			ZSTD_outBuffer zout = {obuf, out_cap, 0};

			left = ZSTD_compressStream2(cc, &zout, &zin,
						    last ? ZSTD_e_end
							 : ZSTD_e_continue);
			if (ZSTD_isError(left)) {
				/* the caller logs the event; the native
				 * code is for -v, as with SQLite's */
				base_debug("zstd op=compress zstd_err=\"%s\"",
					   ZSTD_getErrorName(left));
				r = base_zstd_errno(left, 0);
				goto out;
			}
			if (zout.pos) {
				r = base_write_all(outfd, obuf, zout.pos);
				if (r < 0)
					goto out;
				if (EVP_DigestUpdate(md, obuf, zout.pos) != 1) {
					r = -EIO;
					goto out;
				}
				total += zout.pos;
			}
		} while (last ? left != 0 : zin.pos < zin.size);
	}
	*ret_bytes = total;
out:
	ZSTD_freeCCtx(cc);
	free(ibuf);
	free(obuf);
	return r;
}

int repl_catalog_compress(const char *src, const char *dst, char ret_hex[65],
			  uint64_t *ret_bytes)
{
	char *tmp = base_path_fmt("%s.tmp", dst);
	char *shapath = base_path_fmt("%s.sha256", dst);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char dig[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	chunk_id sum;
	char line[66];
	int in = -1, outfd = -1, r;

	if (!tmp || !shapath || !md) {
		r = -ENOMEM;
		goto out;
	}
	if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		r = -EIO;
		goto out;
	}
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		r = -errno;
		goto out;
	}
	if (unlink(tmp) < 0 && errno != ENOENT) {
		r = -errno;
		goto out;
	}
	outfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (outfd < 0) {
		r = -errno;
		goto out;
	}
	r = compress_fd(in, outfd, md, ret_bytes);
	if (r < 0)
		goto out;
	if (EVP_DigestFinal_ex(md, dig, &dlen) != 1 || dlen != CHUNK_ID_LEN) {
		r = -EIO;
		goto out;
	}
	/* a SHA-256 digest, written as chunk ids are: 64 lowercase hex */
	memcpy(sum.b, dig, CHUNK_ID_LEN);
	chunk_id_to_hex(&sum, ret_hex);
	if (fsync(outfd) < 0) {
		r = -errno;
		goto out;
	}
	r = close(outfd) < 0 ? -errno : 0;
	outfd = -1;
	if (r < 0)
		goto out;
	/* The digest file goes first: a .zst without its .sha256 would be
	 * served without an ETag we can stand behind. */
	snprintf(line, sizeof(line), "%s\n", ret_hex);
	r = base_file_write_atomic(shapath, line, 65, 0644);
	if (r < 0)
		goto out;
	if (rename(tmp, dst) < 0) {
		r = -errno;
		goto out;
	}
	r = base_fsync_parent(dst);
out:
	if (outfd >= 0)
		close(outfd);
	if (in >= 0)
		close(in);
	if (r < 0 && tmp)
		unlink(tmp);
	EVP_MD_CTX_free(md);
	free(tmp);
	free(shapath);
	return r;
}

/* 1 when both catalogs open and have the same, known tree digest. */
static int same_tree(const char *a, const char *b)
{
	struct cat_meta ma, mb;
	cat_reader *ra = NULL, *rb = NULL;
	int same = 0;

	if (cat_reader_open(a, &ra) == 0 && cat_reader_open(b, &rb) == 0) {
		cat_reader_meta(ra, &ma);
		cat_reader_meta(rb, &mb);
		same = ma.tree_sha256[0] &&
		       !strcmp(ma.tree_sha256, mb.tree_sha256);
	}
	cat_reader_close(ra);
	cat_reader_close(rb);
	return same;
}

int repl_generation_last(const char *state_dir, struct repl_generation *ret)
{
	struct cat_meta meta;
	cat_reader *cr = NULL;
	struct stat st;
	uint64_t gen = 0;
	char *path, *zst;
	int r;

	memset(ret, 0, sizeof(*ret));
	r = repl_head_read(state_dir, &gen);
	if (r < 0)
		return r;
	if (!gen)
		return -ENOENT;
	path = repl_catalog_path(state_dir, gen);
	zst = repl_catalog_zst_path(state_dir, gen);
	if (!path || !zst) {
		free(path);
		free(zst);
		return -ENOMEM;
	}
	/* both what is served (the compressed catalog) and what the next
	 * walk reuses (the catalog) must be there */
	r = stat(zst, &st) < 0 ? -errno : cat_reader_open(path, &cr);
	free(path);
	free(zst);
	if (r < 0)
		return r;
	cat_reader_meta(cr, &meta);
	cat_reader_close(cr);
	ret->generation = gen;
	ret->unchanged = 1;
	ret->stats.params = meta.params;
	ret->stats.files = meta.inodes;
	ret->stats.bytes = meta.bytes;
	ret->stats.pending = meta.pending;
	ret->zst_bytes = (uint64_t)st.st_size;
	return 0;
}

int repl_generation_build(const char *state_dir, const char *dir,
			  const struct repl_scan_opts *o,
			  struct repl_generation *ret)
{
	struct repl_scan_opts so = *o;
	char *cat = NULL, *zst = NULL, *src = NULL, *sub = NULL;
	char *pcat = NULL, *psrc = NULL, *pzst = NULL;
	uint64_t t0 = base_now_ns();
	uint64_t head;
	int r;

	memset(ret, 0, sizeof(*ret));
	if (o->sign_key && !o->ns_name)
		return -EINVAL;
	r = base_mkdir_p(state_dir, 0755);
	if (r < 0)
		return r;
	r = repl_head_read(state_dir, &head);
	if (r < 0)
		return r;
	for (size_t i = 0; i < 2; i++) {
		sub = base_path_fmt("%s/%s", state_dir,
				    i == 0 ? "catalog" : "source");
		if (!sub)
			return -ENOMEM;
		r = base_mkdir_p(sub, 0755);
		free(sub);
		if (r < 0)
			return r;
	}

	ret->generation = head + 1;
	cat = repl_catalog_path(state_dir, ret->generation);
	zst = repl_catalog_zst_path(state_dir, ret->generation);
	src = repl_srcindex_path(state_dir, ret->generation);
	if (!cat || !zst || !src) {
		r = -ENOMEM;
		goto out;
	}
	so.generation = ret->generation;
	so.parent_generation = head;
	so.srcindex_path = src;
	so.prev_catalog_path = so.prev_srcindex_path = NULL;
	if (head) {
		pcat = repl_catalog_path(state_dir, head);
		psrc = repl_srcindex_path(state_dir, head);
		pzst = repl_catalog_zst_path(state_dir, head);
		if (!pcat || !psrc || !pzst) {
			r = -ENOMEM;
			goto out;
		}
		so.prev_catalog_path = pcat;
		so.prev_srcindex_path = psrc;
	}
	r = repl_scan(dir, cat, &so, &ret->stats);
	if (r < 0)
		goto out;
	if (head && same_tree(cat, pcat) &&
	    repl_catalog_sha_read(pzst, ret->sha256) == 0) {
		/* Nothing changed: HEAD's generation stays what is served,
		 * and the scan's copy of it goes. */
		unlink(cat);
		unlink(src);
		ret->generation = head;
		ret->unchanged = 1;
		/* HEAD's statement, made now if an unsigned run (or another
		 * key) published it */
		if (o->sign_key) {
			r = repl_generation_sign(state_dir, o->ns_name, head,
						 o->sign_key, 1);
			if (r < 0)
				goto out;
		}
		{
			struct stat sb;

			if (stat(pzst, &sb) == 0)
				ret->zst_bytes = (uint64_t)sb.st_size;
		}
		ret->seconds = (double)(base_now_ns() - t0) / 1e9;
		r = 0;
		goto out;
	}
	r = repl_catalog_compress(cat, zst, ret->sha256, &ret->zst_bytes);
	if (r < 0)
		goto out;
	/* The statement before HEAD: a client that sees HEAD name this
	 * generation finds its signature. */
	if (o->sign_key) {
		r = repl_generation_sign(state_dir, o->ns_name, ret->generation,
					 o->sign_key, 0);
		if (r < 0)
			goto out;
	}
	r = repl_head_write(state_dir, ret->generation);
	ret->seconds = (double)(base_now_ns() - t0) / 1e9;
out:
	free(cat);
	free(zst);
	free(src);
	free(pcat);
	free(psrc);
	free(pzst);
	return r;
}

/* GEN of a name "GEN.db..." (GEN decimal, no sign, no leading zero), or
 * FROM of a delta's "FROM-TO.delta..."; 0 when the name is anything
 * else. */
static uint64_t gen_of_name(const char *name)
{
	uint64_t g = 0;
	const char *p = name;

	if (*p < '1' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (g > (UINT64_MAX - 9) / 10)
			return 0;
		g = g * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '-') /* "FROM-TO.delta...": as old as FROM */
		return strstr(p, ".delta") ? g : 0;
	return strncmp(p, ".db", 3) == 0 ? g : 0;
}

/* One pass over sub: unlink "GEN.db*" with GEN < cut; zst_only: just the
 * compressed catalogs ("GEN.db.zst"). */
static int prune_dir(const char *state_dir, const char *sub, uint64_t cut,
		     int zst_only, uint64_t *removed)
{
	char *path = base_path_fmt("%s/%s", state_dir, sub);
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	if (!path)
		return -ENOMEM;
	d = opendir(path);
	free(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	fd = dirfd(d);
	while ((de = readdir(d))) {
		uint64_t g = gen_of_name(de->d_name);
		const char *rest;
		int zst;

		if (g == 0 || g >= cut)
			continue;
		rest = strchr(de->d_name, '.');
		zst = !strcmp(rest, ".db.zst") || !strcmp(rest, ".delta.zst");
		if (zst_only != zst)
			continue;
		if (unlinkat(fd, de->d_name, 0) < 0 && errno != ENOENT) {
			if (r == 0)
				r = -errno;
			continue;
		}
		if (zst && removed && !strcmp(rest, ".db.zst"))
			(*removed)++;
	}
	closedir(d);
	return r;
}

int repl_generations_prune(const char *state_dir, uint64_t head, unsigned keep,
			   uint64_t *ret_removed)
{
	uint64_t cut, removed = 0;
	int r, r2;

	if (ret_removed)
		*ret_removed = 0;
	if (keep == 0 || head < keep)
		return 0;
	cut = head - keep + 1; /* the oldest generation kept */
	r = prune_dir(state_dir, "catalog", cut, 1, &removed);
	r2 = prune_dir(state_dir, "catalog", cut, 0, NULL);
	r = r ? r : r2;
	r2 = prune_dir(state_dir, "source", cut, 0, NULL);
	r = r ? r : r2;
	if (ret_removed)
		*ret_removed = removed;
	return r;
}

/* One delta build at a time: two requests for the same delta would
 * write the same temp files. */
static pthread_mutex_t delta_mu = PTHREAD_MUTEX_INITIALIZER;

int repl_delta_make(const char *state_dir, uint64_t from, uint64_t to)
{
	char *a = repl_catalog_path(state_dir, from);
	char *b = repl_catalog_path(state_dir, to);
	char *zst = repl_delta_zst_path(state_dir, from, to);
	char *tmp =
	    base_path_fmt("%s/catalog/%" PRIu64 "-%" PRIu64 ".delta.db.tmp",
			  state_dir, from, to);
	char hex[65];
	struct stat st;
	uint64_t bytes;
	int r;

	if (!a || !b || !zst || !tmp) {
		r = -ENOMEM;
		goto out;
	}
	pthread_mutex_lock(&delta_mu);
	if (stat(zst, &st) == 0) {
		r = 0; /* made before: deltas are immutable */
	} else if (stat(a, &st) < 0 || stat(b, &st) < 0) {
		r = -ENOENT;
	} else {
		r = cat_delta_build(a, b, tmp);
		if (r == 0)
			r = repl_catalog_compress(tmp, zst, hex, &bytes);
		unlink(tmp);
	}
	pthread_mutex_unlock(&delta_mu);
out:
	free(a);
	free(b);
	free(zst);
	free(tmp);
	return r;
}
