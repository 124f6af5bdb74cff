/*
 * hydrator/s3/hyd_s3_object.c — GetObject and HeadObject: the key to a
 * regular file of the current generation, its ETag, the Range, and the
 * body streamed through the mount's read path.
 *
 * The bytes come from hyd_read_open_iov on the mount's own open-file
 * state (hyd_fs_file_get), so a chunk not stored yet is fetched by the one
 * fetcher, verified, and stored once, exactly as for a FUSE read; the
 * mount then finds it stored. The body goes out in steps of S3_STEP bytes
 * with the read path's readahead after each, so memory stays bounded
 * whatever the object's size.
 *
 * ETag: the first 128 bits of SHA-256 over the file's size and its chunk
 * ids in order, in hex, then "-" and the number of chunks, quoted. It
 * names the content (the same bytes chunked the same way give the same
 * ETag, in every generation and after restarts); it is not an MD5, and
 * its "-N" form is the one S3 gives multipart objects, so clients do not
 * check it as an MD5 of the body.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "hydrator/s3/hyd_s3_conn_priv.h"

#define S3_STEP (1u << 20)
#define S3_ETAG_ROWS 256u

/* The regular file key names in cat; 0, -ENOENT, or the catalog's error. */
static int key_lookup(cat_reader *cat, const char *key, struct cat_inode *ret)
{
	uint64_t dir = 1;
	const char *p = key;

	for (;;) {
		size_t len = strcspn(p, "/");
		int r;

		if (len == 0)
			return -ENOENT; /* "a//b", "a/" or a leading '/' */
		r = cat_lookup(cat, dir, p, len, ret);
		if (r < 0)
			return r;
		if (p[len] == '\0')
			return ret->kind == CAT_REG ? 0 : -ENOENT;
		if (ret->kind != CAT_DIR)
			return -ENOENT;
		dir = ret->ino;
		p += len + 1;
	}
}

/* The ETag of of (see above) into out. 0, -EAGAIN (a pending file whose
 * manifest is not local yet), or the catalog's error. */
static int etag_of(cat_reader *cat, const struct hyd_read_open *of,
		   char out[48])
{
	struct cat_chunk rows[S3_ETAG_ROWS];
	uint8_t le[8], md[32];
	uint64_t off = 0, nchunks = 0;
	unsigned mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int r = -EIO, i;

	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		goto out;
	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)(of->size >> (8 * i));
	EVP_DigestUpdate(ctx, le, 8);
	while (off < of->size) {
		size_t n = 0, j;

		r = cat_chunks_range(cat, of->ino, off, of->size - off, rows,
				     S3_ETAG_ROWS, &n);
		if (r < 0)
			goto out;
		if (n == 0) {
			r = -EBADMSG; /* a manifest that stops short */
			goto out;
		}
		for (j = 0; j < n; j++)
			EVP_DigestUpdate(ctx, rows[j].id.b, CHUNK_ID_LEN);
		nchunks += n;
		off = rows[n - 1].off + rows[n - 1].len;
	}
	r = -EIO;
	if (!EVP_DigestFinal_ex(ctx, md, &mdlen))
		goto out;
	out[0] = '"';
	base_hex_encode(md, 16, out + 1);
	snprintf(out + 33, 48 - 33, "-%" PRIu64 "\"", nchunks);
	r = 0;
out:
	EVP_MD_CTX_free(ctx);
	return r;
}

/* The ETag, fetching a pending file's manifest first when needed (a
 * one-byte read through the read path does that, with its deadline). */
static int etag_get(struct hyd_fs *fs, struct hyd_read_open *of, char out[48])
{
	const struct hyd_read_ctx *rd = hyd_fs_read_ctx(fs);
	cat_reader *cat = of->gen ? of->gen->cat : rd->cat;
	int r = etag_of(cat, of, out);

	if (r == -EAGAIN) {
		struct hyd_read_iov rv = {0};

		r = hyd_read_open_iov(rd, of, 0, 1, &rv);
		hyd_read_iov_release(rd, &rv);
		if (r == 0)
			r = etag_of(cat, of, out);
	}
	return r;
}

/* The Range header against size: 0 (the whole object: none, or one this
 * server ignores, as S3 does a multi-range), 1 (a satisfiable single
 * range, [*ret_off, *ret_off + *ret_len)), -ERANGE (unsatisfiable). */
static int range_parse(const char *h, uint64_t size, uint64_t *ret_off,
		       uint64_t *ret_len)
{
	char a[24] = "", b[24] = "";
	const char *dash;
	uint64_t lo, hi;
	size_t al, bl;

	if (!h || strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
		return 0;
	h += 6;
	dash = strchr(h, '-');
	if (!dash)
		return 0;
	al = (size_t)(dash - h);
	bl = strlen(dash + 1);
	if (al >= sizeof(a) || bl >= sizeof(b) || (al == 0 && bl == 0))
		return 0;
	memcpy(a, h, al);
	memcpy(b, dash + 1, bl);
	if (al == 0) { /* the last N bytes */
		if (base_parse_u64(b, 0, UINT64_MAX, &hi) < 0)
			return 0;
		if (hi == 0 || size == 0)
			return -ERANGE;
		*ret_len = hi < size ? hi : size;
		*ret_off = size - *ret_len;
		return 1;
	}
	if (base_parse_u64(a, 0, UINT64_MAX, &lo) < 0 ||
	    (bl && base_parse_u64(b, 0, UINT64_MAX, &hi) < 0))
		return 0;
	if (bl && hi < lo)
		return 0; /* syntactically invalid: ignored (RFC 7233) */
	if (lo >= size)
		return -ERANGE;
	if (!bl || hi >= size)
		hi = size - 1;
	*ret_off = lo;
	*ret_len = hi - lo + 1;
	return 1;
}

/* The body of a large object is read by S3_READERS threads of their own
 * while the connection's thread sends: each claims the next step of
 * S3_STEP bytes, reads it (copying or decoding and verifying stored
 * chunks, waiting for fetches) and its readahead, so reading overlaps
 * sending and the SHA-256 of the chunks runs on several cores, as FUSE's
 * workers do for a sequential reader's requests. At most S3_QUEUE steps
 * are read ahead of the one being sent (their chunks pinned). */
#define S3_QUEUE 4u
#define S3_READERS 2u

struct stream_slot {
	struct hyd_read_iov rv;
	int ready;
};

struct stream {
	const struct hyd_read_ctx *rd;
	struct hyd_read_open *of;
	uint64_t off, len; /* the body: [off, off + len) */
	uint64_t nsteps;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct stream_slot q[S3_QUEUE]; /* step k in q[k % S3_QUEUE] */
	uint64_t next_claim;		/* the next step to read */
	uint64_t next_send;		/* the next step to send */
	unsigned running;		/* readers not returned yet */
	int err;			/* a reader's failure */
	int stop;			/* the sender is done */
};

/* Read step k into its slot. 0 or -errno. */
static int stream_read(struct stream *st, uint64_t k)
{
	uint64_t off = st->off + k * S3_STEP, left = st->off + st->len - off;
	size_t step = left < S3_STEP ? (size_t)left : S3_STEP;
	struct hyd_read_iov rv = {0};
	int r = hyd_read_open_iov(st->rd, st->of, off, step, &rv);

	if (r == 0 && rv.len != step) {
		hyd_read_iov_release(st->rd, &rv);
		r = -EIO; /* the file is shorter than its size */
	}
	pthread_mutex_lock(&st->mu);
	if (r < 0) {
		st->err = r;
	} else {
		st->q[k % S3_QUEUE].rv = rv;
		st->q[k % S3_QUEUE].ready = 1;
	}
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	if (r == 0)
		hyd_read_ahead(st->rd, st->of, off, step);
	return r;
}

static void *stream_thread(void *p)
{
	struct stream *st = p;

	pthread_mutex_lock(&st->mu);
	for (;;) {
		uint64_t k;

		while (!st->stop && !st->err && st->next_claim < st->nsteps &&
		       st->next_claim >= st->next_send + S3_QUEUE)
			pthread_cond_wait(&st->cv, &st->mu);
		if (st->stop || st->err || st->next_claim >= st->nsteps)
			break;
		k = st->next_claim++;
		pthread_mutex_unlock(&st->mu);
		stream_read(st, k);
		pthread_mutex_lock(&st->mu);
	}
	st->running--;
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	return NULL;
}

/* Send the steps in order as they become ready. */
static int stream_send(struct hyd_s3_conn *c, struct stream *st)
{
	int r = 0;

	pthread_mutex_lock(&st->mu);
	while (st->next_send < st->nsteps) {
		struct stream_slot *sl = &st->q[st->next_send % S3_QUEUE];
		struct hyd_read_iov rv;

		while (!sl->ready && !st->err && st->running > 0)
			pthread_cond_wait(&st->cv, &st->mu);
		if (!sl->ready) {
			r = st->err ? st->err : -EIO;
			break;
		}
		rv = sl->rv;
		sl->ready = 0;
		st->next_send++;
		pthread_cond_broadcast(&st->cv);
		pthread_mutex_unlock(&st->mu);
		r = hyd_s3__send_iov(c, rv.iov, rv.n);
		hyd_read_iov_release(st->rd, &rv);
		pthread_mutex_lock(&st->mu);
		if (r < 0)
			break;
	}
	st->stop = 1;
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
	return r;
}

/* The body: [off, off + len) of of. */
static int send_body(struct hyd_s3_conn *c, struct hyd_read_open *of,
		     uint64_t off, uint64_t len)
{
	struct stream st = {.rd = hyd_fs_read_ctx(c->s->src.fs),
			    .of = of,
			    .off = off,
			    .len = len,
			    .nsteps = (len + S3_STEP - 1) / S3_STEP};
	pthread_t th[S3_READERS];
	unsigned i, n = 0;
	int r;

	if (len == 0)
		return 0;
	pthread_mutex_init(&st.mu, NULL);
	pthread_cond_init(&st.cv, NULL);
	if (st.nsteps == 1) {
		/* one step: read it here */
		r = stream_read(&st, 0);
		st.next_claim = 1;
		if (r == 0)
			r = stream_send(c, &st);
	} else {
		st.running = S3_READERS;
		for (i = 0; i < S3_READERS; i++)
			if (pthread_create(&th[n], NULL, stream_thread, &st) ==
			    0)
				n++;
		pthread_mutex_lock(&st.mu);
		st.running = n;
		pthread_mutex_unlock(&st.mu);
		r = n ? stream_send(c, &st) : -EAGAIN;
		for (i = 0; i < n; i++)
			pthread_join(th[i], NULL);
	}
	for (i = 0; i < S3_QUEUE; i++) /* what a failed send left */
		if (st.q[i].ready)
			hyd_read_iov_release(st.rd, &st.q[i].rv);
	pthread_cond_destroy(&st.cv);
	pthread_mutex_destroy(&st.mu);
	return r;
}

int hyd_s3__object(struct hyd_s3_conn *c, const struct hyd_s3_req *rq,
		   const char *key, const char *resource, int head_only)
{
	struct hyd_fs *fs = c->s->src.fs;
	struct hyd_read_open *of = NULL;
	struct hyd_gen *g = hyd_fs_gen(fs);
	struct cat_inode in;
	char etag[48], date[40], extra[512];
	uint64_t off = 0, len;
	int r, isnew = 0, ranged;

	r = key_lookup(g->cat, key, &in);
	hyd_gen_unref(g);
	if (r == 0)
		r = hyd_fs_file_get(fs, in.ino, &of, &isnew);
	if (r == -ENOENT || r == -EISDIR || r == -EINVAL)
		return hyd_s3__send_error(c, 404, "NoSuchKey",
					  "the key does not exist", resource,
					  head_only);
	if (r == 0)
		r = etag_get(fs, of, etag);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "s3: cannot serve key=%s", key);
		hyd_read_open_unref(of);
		return hyd_s3__send_error(c, 500, "InternalError",
					  "cannot read the object", resource,
					  head_only);
	}
	len = of->size;
	ranged =
	    range_parse(hyd_s3_req_header(rq, "range"), of->size, &off, &len);
	if (ranged < 0) {
		snprintf(extra, sizeof(extra),
			 "Content-Range: bytes */%" PRIu64 "\r\n", of->size);
		hyd_read_open_unref(of);
		return hyd_s3__send_error(c, 416, "InvalidRange",
					  "the range is not satisfiable",
					  resource, head_only);
	}
	hyd_s3_http_date(in.mtime_ns / 1000000000, date);
	r = snprintf(
	    extra, sizeof(extra),
	    "ETag: %s\r\nLast-Modified: %s\r\nAccept-Ranges: bytes\r\n", etag,
	    date);
	if (ranged && r > 0 && (size_t)r < sizeof(extra))
		snprintf(extra + r, sizeof(extra) - (size_t)r,
			 "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64
			 "\r\n",
			 off, off + len - 1, of->size);
	r = hyd_s3__send_head(c, ranged ? 206 : 200, "application/octet-stream",
			      len, extra);
	if (r == 0 && !head_only)
		r = send_body(c, of, off, len);
	if (r < 0 && r != -EPIPE && r != -ECONNRESET)
		base_log_err(BASE_LOG_WARN, r, "s3: body cut short key=%s",
			     key);
	hyd_read_open_unref(of);
	return r;
}
