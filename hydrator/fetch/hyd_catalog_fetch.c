/*
 * hydrator/fetch/hyd_catalog_fetch.c — download, check and cache a catalog.
 *
 * GET BASE/HEAD names the current generation; GET BASE/catalog/GEN is the
 * zstd-compressed SQLite catalog (with nothing cached to make a delta
 * from, and no statement to check first, both come in one answer to
 * GET BASE/HEAD?catalog=1 from a server that knows the query: one round
 * trip fewer for a fresh mount; see cf_head_cat), streamed through
 * ZSTD_decompressStream into CACHEDIR/catalogs/GEN.db.tmp under a size cap,
 * fsynced, opened with cat_reader_open to prove it is a ferry catalog of that
 * generation, checked whole against the tree rule (cat_check_tree: a graph of
 * directories would make every walk of it blow up), then renamed into
 * place, and the check's pass remembered beside it (GEN.db.tree-ok,
 * cat_check_remember) so that no later open pays for it again: it costs
 * O(entries), 0.3-0.6 s per million. CACHEDIR/catalogs/url records
 * which base URL the cached catalogs came from, so an unreachable server
 * can be stood in for by the newest of them, and only by them.
 *
 * With --trust-key (hyd_trust_priv.h) a generation is taken only
 * with its signed statement (GET BASE/signature/GEN), checked before a
 * byte of the catalog is fetched; the catalog, whole or rebuilt from a
 * delta, must then have the digest the statement names before it is
 * renamed into place, beside the statement (catalogs/GEN.sig). A refusal
 * is -EKEYREJECTED and installs nothing.
 *
 * Blocking (curl easy API): the hydrator calls this once before its event
 * loop starts. URLs are parsed and joined with curl's URL API.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <zstd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "hydrator/fetch/hyd_trust_priv.h"
#include "hydrator/hydrator.h"

#define HYD_ERRBODY_MAX 2048	 /* bytes of an error body kept for detail */
#define HYD_DETAIL_MAX 200	 /* chars of a server detail we quote */
#define HYD_URL_FILE_MAX 8192	 /* bytes of catalogs/url */
#define HYD_STALL_BYTES_PER_S 1L /* below this for HYD_STALL_S: a stall */
#define HYD_STALL_S 30L
#define HYD_CONNECT_TIMEOUT_DEFAULT 10L

/* One fetch: what every step needs. */
struct hyd_cf {
	const char *base; /* as the caller spelled it, for messages */
	CURLU *url;	  /* base, its path ending in '/' so joins append */
	char *base_norm;  /* curl's rendering of url: what catalogs/url holds */
	CURL *h;
	const struct hyd_creds *creds; /* borrowed; may be NULL */
	long connect_timeout_s;
	char cat_dir[4096];
	char *errbuf;
	size_t errcap;
	char curl_err[CURL_ERROR_SIZE];
	/* --trust-key: the URL's namespace, the highest generation seen from
	 * this URL, and the checked statement of the generation being
	 * installed (have_stmt) with its bytes */
	char ns[BASE_NS_NAME_MAX + 1];
	uint64_t seen;
	int have_stmt;
	struct cat_stmt stmt;
	char stmt_buf[CAT_STMT_MAX + 1];
	size_t stmt_len;
	uint64_t requests, bytes; /* sent, received: hyd_catalog_result */
	uint64_t rtt_ns;	  /* hyd_catalog_result's */
	int connect_timed_out;	  /* hyd_catalog_result's */
};

/* What the write callback does with a response body. */
struct hyd_sink {
	CURL *h;
	int err; /* -errno that made the callback abort the transfer */
	/* A non-200 answer: its body, for the server's detail. */
	char errbody[HYD_ERRBODY_MAX + 1];
	size_t errlen;
	/* A 200 answer: into small[] (HEAD, a signature: up to small_cap
	 * bytes, 0 meaning HYD_HEAD_MAX), or through zstd into fd. */
	ZSTD_DStream *zd;
	char small[CAT_STMT_MAX + 1];
	size_t small_len, small_cap;
	int fd;
	void *zout;
	size_t zout_cap;
	size_t zlast; /* last ZSTD_decompressStream hint; 0 at a frame end */
	uint64_t in_total, out_total;
	const char *zerr; /* zstd's error name, for the message */
	/* GET HEAD?catalog=1 (either): the first byte of a 200 decides, by
	 * its Content-Type and Ferry-Generation, between the catalog
	 * (head_gen set: through zstd into fd) and HEAD's text (as_small). */
	int either, decided, as_small;
	uint64_t head_gen;
};

__attribute__((format(printf, 2, 3))) static void cf_err(struct hyd_cf *f,
							 const char *fmt, ...)
{
	va_list ap;

	if (!f->errbuf || f->errcap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(f->errbuf, f->errcap, fmt, ap);
	va_end(ap);
}

/* What a TLS failure means for the user, before curl's own words (which
 * for a refused client certificate are only OpenSSL's alert name); NULL
 * when cc and what are not about TLS. */
static const char *tls_meaning(CURLcode cc, const char *what)
{
	switch (cc) {
	case CURLE_PEER_FAILED_VERIFICATION:
		return strstr(what, "expired") || strstr(what, "not yet valid")
			   ? "the server's certificate is not valid now"
			   : "the server's certificate is not trusted (the "
			     "CAs of --ca-file, else the system's, did not "
			     "sign it, or it names another host)";
	case CURLE_SSL_CACERT_BADFILE:
		return "cannot use the CAs of --ca-file";
	case CURLE_SSL_CERTPROBLEM:
		return "cannot use the client certificate of --cert/--key";
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
		/* the server's alert, as OpenSSL names it */
		if (strstr(what, "alert certificate required"))
			return "the server requires a client certificate "
			       "(--cert and --key)";
		if (strstr(what, "alert unknown ca") ||
		    strstr(what, "alert bad certificate") ||
		    strstr(what, "alert certificate expired") ||
		    strstr(what, "alert certificate revoked") ||
		    strstr(what, "alert certificate unknown") ||
		    strstr(what, "alert unsupported certificate") ||
		    strstr(what, "alert access denied"))
			return "the server refused the client certificate "
			       "(--cert)";
		if (strstr(what, "alert protocol version") ||
		    strstr(what, "wrong version number") ||
		    strstr(what, "alert handshake failure"))
			return "no TLS handshake with the server (is it "
			       "https, TLS 1.2 or 1.3?)";
		return NULL;
	default:
		return NULL;
	}
}

/* A failed transfer as -errno (base_curl_errno), with what it was in
 * errbuf. Failures before the server was ever heard from are the ones a
 * cached catalog may paper over: they become -EHOSTUNREACH. */
static int cf_curl_fail(struct hyd_cf *f, CURLcode cc, const char *url,
			const struct hyd_sink *k)
{
	const char *what =
	    f->curl_err[0] ? f->curl_err : curl_easy_strerror(cc);
	const char *tls = tls_meaning(cc, what);
	int r = base_curl_errno(cc);
	curl_off_t connected = -1;

	/* TLS refused: not a server that is away (no cached catalog stands
	 * in for one that fails its check), and said as what it is */
	if (tls) {
		cf_err(f, "%s: %s: %s (curl error %d)", url, tls, what,
		       (int)cc);
		return -EPROTO;
	}
	switch (r) {
	case -ETIMEDOUT:
		/* no connection made: the connect is what timed out */
		if (curl_easy_getinfo(f->h, CURLINFO_CONNECT_TIME_T,
				      &connected) == CURLE_OK &&
		    connected == 0)
			f->connect_timed_out = 1;
		/* fall through */
	case -EHOSTUNREACH:
		cf_err(f, "cannot reach %s: %s", f->base, what);
		return -EHOSTUNREACH;
	case -ECANCELED:
		/* Our callback stopped the transfer and said why. */
		if (k && k->err)
			return k->err;
		break;
	case -ENOMEM:
		cf_err(f, "%s: out of memory", url);
		return -ENOMEM;
	case -EINVAL:
		cf_err(f, "%s: %s (curl error %d)", url, what, (int)cc);
		return -EINVAL;
	default:
		break;
	}
	cf_err(f, "%s: %s (curl error %d)", url, what, (int)cc);
	return -EPROTO;
}

/* Feed compressed bytes to zstd and append what comes out to k->fd. */
static int sink_zstd(struct hyd_sink *k, const void *buf, size_t len)
{
	ZSTD_inBuffer in = {buf, len, 0};
	int r;

	k->in_total += len;
	/* Skippable frames decode to nothing, so the input needs a cap too. */
	if (k->in_total > HYD_CATALOG_MAX_BYTES)
		return -EFBIG;
	for (;;) {
		ZSTD_outBuffer out = {k->zout, k->zout_cap, 0};
		size_t in_before = in.pos;
		size_t ret = ZSTD_decompressStream(k->zd, &out, &in);

		if (ZSTD_isError(ret)) {
			k->zerr = ZSTD_getErrorName(ret);
			return base_zstd_errno(ret, 1);
		}
		/* Only a call that moved bytes says where the frame stands:
		 * after a frame has ended, a further call with no input (taken
		 * when the output buffer came back exactly full) returns the
		 * header size of a next frame that does not exist. */
		if (in.pos > in_before || out.pos > 0)
			k->zlast = ret;
		if (out.pos > 0) {
			k->out_total += out.pos;
			if (k->out_total > HYD_CATALOG_MAX_BYTES)
				return -EFBIG;
			r = base_write_all(k->fd, k->zout, out.pos);
			if (r < 0)
				return r;
		}
		/* A full output buffer may leave more inside zstd: go again
		 * until it stops filling the buffer. */
		if (in.pos == in.size && out.pos < out.size)
			return 0;
	}
}

/* A 200 to GET HEAD?catalog=1: a catalog when it says which generation
 * it is, else HEAD's text (a server or a static tree that does not know
 * the query answers it as HEAD). */
static void sink_decide(struct hyd_sink *k)
{
	struct curl_header *hd = NULL;
	char *ct = NULL;
	uint64_t gen;

	k->decided = 1;
	k->as_small = 1;
	if (curl_easy_getinfo(k->h, CURLINFO_CONTENT_TYPE, &ct) != CURLE_OK ||
	    !ct || strncasecmp(ct, "application/zstd", 16) != 0)
		return;
	if (curl_easy_header(k->h, "Ferry-Generation", 0, CURLH_HEADER, -1,
			     &hd) != CURLHE_OK ||
	    base_parse_u64(hd->value, 1, UINT64_MAX, &gen) < 0)
		return;
	k->head_gen = gen;
	k->as_small = 0;
}

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct hyd_sink *k = ud;
	size_t n = size * nmemb, room;
	long status = 0;
	int r;

	curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		room = HYD_ERRBODY_MAX - k->errlen;
		if (room > n)
			room = n;
		memcpy(k->errbody + k->errlen, ptr, room);
		k->errlen += room;
		k->errbody[k->errlen] = '\0';
		return n;
	}
	if (k->either && !k->decided)
		sink_decide(k);
	if (!k->zd || k->as_small) {
		room = k->small_cap ? k->small_cap : HYD_HEAD_MAX;
		if (n > room - k->small_len) {
			k->err = -EPROTO;
			return 0;
		}
		memcpy(k->small + k->small_len, ptr, n);
		k->small_len += n;
		k->small[k->small_len] = '\0';
		return n;
	}
	r = sink_zstd(k, ptr, n);
	if (r < 0) {
		k->err = r;
		return 0;
	}
	return n;
}

/* Copy the "detail" string of a JSON error body (docs/protocol.md) into
 * out; empty when there is none. Only a message is built from it, and the
 * logger shows its control bytes as \\xNN, so anything unexpected just
 * yields no detail. */
static void json_detail(const char *body, char *out, size_t cap)
{
	json_t *root = json_loads(body, JSON_REJECT_DUPLICATES, NULL);
	const char *d = json_string_value(json_object_get(root, "detail"));

	if (cap)
		snprintf(out, cap, "%s", d ? d : "");
	json_decref(root);
}

/* GET url into k. 0 with *ret_status set, or -errno with errbuf set. */
static int cf_get(struct hyd_cf *f, const char *url, struct hyd_sink *k,
		  long *ret_status)
{
	CURLcode cc;

	f->curl_err[0] = '\0';
	k->h = f->h;
	cc = curl_easy_setopt(f->h, CURLOPT_URL, url);
	if (cc == CURLE_OK)
		cc = curl_easy_setopt(f->h, CURLOPT_WRITEDATA, k);
	if (cc == CURLE_OK) {
		curl_off_t got = 0;
		uint64_t rtt;

		cc = curl_easy_perform(f->h);
		f->requests++;
		if (curl_easy_getinfo(f->h, CURLINFO_SIZE_DOWNLOAD_T, &got) ==
			CURLE_OK &&
		    got > 0)
			f->bytes += (uint64_t)got;
		/* The least round trip of the call's requests. */
		rtt = cc == CURLE_OK ? hyd_curl_rtt_ns(f->h) : 0;
		if (rtt && (!f->rtt_ns || rtt < f->rtt_ns))
			f->rtt_ns = rtt;
	}
	if (cc != CURLE_OK)
		return cf_curl_fail(f, cc, url, k);
	curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, ret_status);
	return 0;
}

/* The error for a non-200 answer to a GET of url. */
static int cf_status_err(struct hyd_cf *f, const char *url, long status,
			 const struct hyd_sink *k, const char *notfound)
{
	char detail[HYD_DETAIL_MAX + 1];

	json_detail(k->errbody, detail, sizeof(detail));
	if (status == 404) {
		cf_err(f, "%s: %s (HTTP 404)", url,
		       detail[0] ? detail : notfound);
		return -ENOENT;
	}
	if (detail[0])
		cf_err(f, "%s: %s (HTTP %ld)", url, detail, status);
	else
		cf_err(f, "%s: unexpected answer (HTTP %ld)", url, status);
	return -EPROTO;
}

/* Resolve rel against the base URL; the result is freed with curl_free. */
static int cf_join(struct hyd_cf *f, const char *rel, char **ret)
{
	CURLU *u = curl_url_dup(f->url);
	CURLUcode uc;

	*ret = NULL;
	if (!u)
		return -ENOMEM;
	uc = curl_url_set(u, CURLUPART_URL, rel, 0);
	if (uc == CURLUE_OK)
		uc = curl_url_get(u, CURLUPART_URL, ret, 0);
	curl_url_cleanup(u);
	return uc == CURLUE_OK		    ? 0
	       : uc == CURLUE_OUT_OF_MEMORY ? -ENOMEM
					    : -EINVAL;
}

static int cf_head(struct hyd_cf *f, uint64_t *ret_gen)
{
	struct hyd_sink k = {.fd = -1};
	char *url = NULL;
	long status = 0;
	uint64_t v;
	int r;

	r = cf_join(f, "HEAD", &url);
	if (r < 0) {
		cf_err(f, "%s: cannot build the HEAD URL", f->base);
		goto out;
	}
	r = cf_get(f, url, &k, &status);
	if (r == -EPROTO && k.err == -EPROTO)
		cf_err(f, "%s: HEAD answer longer than %d bytes", url,
		       HYD_HEAD_MAX);
	if (r < 0)
		goto out;
	if (status != 200) {
		r = cf_status_err(f, status == 404 ? f->base : url, status, &k,
				  "namespace not found");
		goto out;
	}
	if (hyd_head_parse(k.small, k.small_len, &v) < 0) {
		cf_err(f, "%s: not a generation number", url);
		r = -EPROTO;
		goto out;
	}
	*ret_gen = v;
out:
	curl_free(url);
	return r;
}

/* GET BASE/signature/GEN and check it (hyd_trust_check) into f->stmt,
 * before anything of generation gen is fetched. -EKEYREJECTED (errbuf
 * says why) for a statement that is missing or does not check out;
 * transport and other HTTP errors as cf_get. */
static int cf_statement(struct hyd_cf *f, uint64_t gen)
{
	struct hyd_sink k = {.fd = -1, .small_cap = CAT_STMT_MAX};
	char rel[48], why[512];
	char *url = NULL;
	long status = 0;
	int r;

	f->have_stmt = 0;
	snprintf(rel, sizeof(rel), "signature/%llu", (unsigned long long)gen);
	r = cf_join(f, rel, &url);
	if (r < 0) {
		cf_err(f, "%s: cannot build the signature URL", f->base);
		goto out;
	}
	r = cf_get(f, url, &k, &status);
	if (r == -EPROTO && k.err == -EPROTO) {
		cf_err(f,
		       "%s: refusing generation %llu: longer than a signed "
		       "statement (%u bytes)",
		       url, (unsigned long long)gen, CAT_STMT_MAX);
		r = -EKEYREJECTED;
	}
	if (r < 0)
		goto out;
	if (status == 404) {
		cf_err(f,
		       "%s: refusing generation %llu: it is not signed (HTTP "
		       "404) and --trust-key takes signed generations only",
		       url, (unsigned long long)gen);
		r = -EKEYREJECTED;
		goto out;
	}
	if (status != 200) {
		r = cf_status_err(f, url, status, &k, "no signature");
		goto out;
	}
	r = hyd_trust_check(f->creds, f->ns, gen, f->seen, k.small, k.small_len,
			    &f->stmt, why, sizeof(why));
	if (r < 0) {
		cf_err(f, "%s: refusing generation %llu: %s", url,
		       (unsigned long long)gen, why);
		goto out;
	}
	memcpy(f->stmt_buf, k.small, k.small_len);
	f->stmt_len = k.small_len;
	f->have_stmt = 1;
	base_debug("signed statement checked generation=%llu parent=%llu "
		   "key=%.16s url=%s",
		   (unsigned long long)gen, (unsigned long long)f->stmt.parent,
		   f->stmt.key_id, f->base);
out:
	curl_free(url);
	return r;
}

/* path "CAT_DIR/NAME" into buf. */
static int cf_path(const struct hyd_cf *f, char *buf, size_t cap,
		   const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", f->cat_dir, name);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Remove a temp catalog and whatever SQLite may have put beside it. */
static void unlink_db_tmp(const char *tmp)
{
	static const char *const sfx[] = {"", "-journal", "-wal", "-shm"};
	char p[4200];
	size_t i;

	for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		int n = snprintf(p, sizeof(p), "%s%s", tmp, sfx[i]);

		if (n > 0 && (size_t)n < sizeof(p))
			unlink(p);
	}
}

/* Is tmp a ferry catalog of generation gen, its entries a tree? 0 or
 * -EBADMSG (why says what breaks the tree rule, when that was it),
 * -ENOMEM, -EPROTONOSUPPORT (one of a later format than this build
 * reads). Its meta into *ret_m. */
static int cf_check_catalog(const char *tmp, uint64_t gen,
			    struct cat_meta *ret_m, char *why, size_t cap)
{
	struct cat_meta m;
	cat_reader *cr = NULL;
	int r;

	why[0] = '\0';
	r = cat_reader_open(tmp, &cr);
	if (r == -ENOMEM || r == -EPROTONOSUPPORT)
		return r;
	/* Whatever the reader dislikes (not SQLite, not our schema, a
	 * library error on what is really garbage) is a bad catalog. */
	if (r < 0)
		return -EBADMSG;
	cat_reader_meta(cr, &m);
	/* Here, once, before the file is in the cache: every consumer
	 * (mount, S3, sync, a follow's switch) opens it from there. */
	r = m.generation == gen ? cat_check_tree(cr, why, cap) : -EBADMSG;
	cat_reader_close(cr);
	*ret_m = m;
	if (r == -ENOMEM)
		return r;
	return r < 0 ? -EBADMSG : 0;
}

/* The catalog at tmp (meta m) is the one f->stmt signs: its rows have the
 * digest the statement names (checked already when it was rebuilt from a
 * delta: by_delta), and its parent is the statement's. 0 or -EKEYREJECTED
 * (errbuf says so), -errno. */
static int cf_check_signed(struct hyd_cf *f, const char *url, const char *tmp,
			   const struct cat_meta *m, int by_delta)
{
	char hex[65];
	int r;

	if (!by_delta) {
		r = cat_digest(tmp, hex);
		if (r < 0) {
			cf_err(f, "%s: cannot compute the catalog's digest: %s",
			       url, strerror(-r));
			return r == -ENOMEM ? r : -EIO;
		}
		if (strcmp(hex, f->stmt.digest) != 0) {
			cf_err(f,
			       "%s: refusing generation %llu: the catalog's "
			       "rows do not have the digest its signed "
			       "statement names (changed on the way)",
			       url, (unsigned long long)m->generation);
			return -EKEYREJECTED;
		}
	}
	if (m->parent_generation != f->stmt.parent) {
		cf_err(f,
		       "%s: refusing generation %llu: its parent is %llu, the "
		       "signed statement says %llu",
		       url, (unsigned long long)m->generation,
		       (unsigned long long)m->parent_generation,
		       (unsigned long long)f->stmt.parent);
		return -EKEYREJECTED;
	}
	return 0;
}

/* The sink's zstd stream and file, freed (fd closed). */
static void sink_fini(struct hyd_sink *k)
{
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	free(k->zout);
	ZSTD_freeDStream(k->zd);
}

/* GET url through zstd into tmp (made afresh, fsynced) with k (fd -1,
 * `either` set by the caller or not; sink_fini after). A 404 is
 * notfound, named by nf_url. With `either`, an answer that is not a
 * catalog (no head_gen) is left in k->small for the caller: 0, or
 * -EPROTO when it was longer than HEAD's. */
static int cf_fetch_zst(struct hyd_cf *f, const char *url, const char *tmp,
			struct hyd_sink *k, const char *nf_url,
			const char *notfound)
{
	long status = 0;
	int r;

	k->zd = ZSTD_createDStream();
	k->zout_cap = ZSTD_DStreamOutSize();
	k->zout = malloc(k->zout_cap);
	if (!k->zd || !k->zout)
		return -ENOMEM;
	/* A stale temp from a crash is ours to replace; O_EXCL then makes
	 * sure we write a file nobody else holds. */
	unlink_db_tmp(tmp);
	k->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (k->fd < 0) {
		r = -errno;
		cf_err(f, "%s: %s", tmp, strerror(-r));
		return -EIO;
	}
	r = cf_get(f, url, k, &status);
	if (r == 0 && status != 200)
		return cf_status_err(f, status == 404 ? nf_url : url, status, k,
				     notfound);
	if (r == -EHOSTUNREACH || r == -ENOENT || (r < 0 && r != k->err))
		return r;
	if (k->either && !k->head_gen)
		return r;
	/* A 200 whose body is not whole zstd frames is garbage too. */
	if (r == 0 && (k->in_total == 0 || k->zlast != 0))
		r = -EBADMSG;
	if (r == -EBADMSG || r == -EFBIG) {
		cf_err(f, "%s: not a valid ferry catalog%s%s%s", url,
		       k->zerr ? " (zstd: " : "", k->zerr ? k->zerr : "",
		       k->zerr	     ? ")"
		       : r == -EFBIG ? " (too large)"
				     : "");
		return -EBADMSG;
	}
	if (r < 0) {
		cf_err(f, "%s: writing %s: %s", url, tmp, strerror(-r));
		return r == -ENOSPC ? r : -EIO;
	}
	if (fsync(k->fd) < 0) {
		cf_err(f, "%s: %s", tmp, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* GET url (a catalog or a delta) into tmp. */
static int cf_download(struct hyd_cf *f, const char *url, const char *tmp)
{
	struct hyd_sink k = {.fd = -1};
	int r = cf_fetch_zst(f, url, tmp, &k, url, "catalog not found");

	sink_fini(&k);
	return r;
}

/* GET BASE/HEAD?catalog=1, for a cache with no catalog of this URL: a
 * server that knows the query sends the current catalog with its
 * generation (one round trip instead of HEAD's and the catalog's), into
 * tmp (*ret_cat 1); any other answers HEAD's text (*ret_cat 0, tmp
 * removed). */
static int cf_head_cat(struct hyd_cf *f, const char *tmp, uint64_t *ret_gen,
		       int *ret_cat)
{
	struct hyd_sink k = {.fd = -1, .either = 1};
	char *url = NULL;
	uint64_t v;
	int r;

	*ret_cat = 0;
	r = cf_join(f, "HEAD?catalog=1", &url);
	if (r < 0) {
		cf_err(f, "%s: cannot build the HEAD URL", f->base);
		goto out;
	}
	r = cf_fetch_zst(f, url, tmp, &k, f->base, "namespace not found");
	if (r == -EPROTO && k.err == -EPROTO)
		cf_err(f, "%s: HEAD answer longer than %d bytes", url,
		       HYD_HEAD_MAX);
	if (r < 0)
		goto out;
	if (k.head_gen) {
		*ret_gen = k.head_gen;
		*ret_cat = 1;
		goto out;
	}
	if (hyd_head_parse(k.small, k.small_len, &v) < 0) {
		cf_err(f, "%s: not a generation number", url);
		r = -EPROTO;
		goto out;
	}
	*ret_gen = v;
out:
	sink_fini(&k);
	if (!*ret_cat)
		unlink_db_tmp(tmp);
	curl_free(url);
	return r;
}

/* catalogs/GEN.db into tmp from the cached catalogs/BASE.db and the
 * delta BASE -> GEN (GET BASE/delta/BASE/GEN), checked against the
 * digest the delta names (cat_delta_apply). Any failure is only a reason
 * to download the whole catalog: errbuf is left as it was. */
static int cf_delta(struct hyd_cf *f, uint64_t base, uint64_t gen,
		    const char *tmp)
{
	char rel[96], from[4200], dtmp[4220], keep[512] = "";
	char *url = NULL;
	uint64_t a = 0, b = 0;
	struct stat st;
	int r;

	snprintf(rel, sizeof(rel), "delta/%llu/%llu", (unsigned long long)base,
		 (unsigned long long)gen);
	if (cf_join(f, rel, &url) < 0)
		return -ENOMEM;
	snprintf(rel, sizeof(rel), "%llu.db", (unsigned long long)base);
	if (cf_path(f, from, sizeof(from), rel) < 0 ||
	    snprintf(dtmp, sizeof(dtmp), "%s.delta", tmp) >=
		(int)sizeof(dtmp)) {
		curl_free(url);
		return -ENAMETOOLONG;
	}
	if (f->errbuf && f->errcap)
		snprintf(keep, sizeof(keep), "%s", f->errbuf);
	r = cf_download(f, url, dtmp);
	if (r == 0) {
		unlink_db_tmp(tmp);
		/* signed: the result must be the catalog the statement
		 * names, whatever digest the delta claims */
		r = cat_delta_apply_want(from, dtmp, tmp,
					 f->have_stmt ? f->stmt.digest : NULL,
					 &a, &b);
		if (r == 0 && b != gen)
			r = -EBADMSG;
	}
	if (r == 0 && stat(dtmp, &st) == 0)
		base_info("catalog from a delta from=%llu to=%llu "
			  "delta_db_bytes=%lld "
			  "url=%s",
			  (unsigned long long)a, (unsigned long long)b,
			  (long long)st.st_size, f->base);
	else
		base_debug("no delta from=%llu to=%llu (%s): fetching the "
			   "whole catalog",
			   (unsigned long long)base, (unsigned long long)gen,
			   strerror(-r));
	unlink_db_tmp(dtmp);
	if (r < 0) {
		unlink_db_tmp(tmp);
		if (f->errbuf && f->errcap)
			snprintf(f->errbuf, f->errcap, "%s", keep);
	}
	curl_free(url);
	return r;
}

/* Download (or make from the cached catalog base and a delta; base 0:
 * none; or take pre, the file the catalog came into with HEAD), check
 * and install catalogs/GEN.db. */
static int cf_catalog(struct hyd_cf *f, uint64_t gen, uint64_t base,
		      const char *pre)
{
	char rel[64], tmp[4210] = "", dst[4200], why[256];
	char *url = NULL;
	struct cat_meta m;
	int n, r, by_delta = 0;

	snprintf(rel, sizeof(rel), "catalog/%llu", (unsigned long long)gen);
	r = cf_join(f, rel, &url);
	if (r < 0) {
		cf_err(f, "%s: cannot build the catalog URL", f->base);
		return r;
	}
	snprintf(rel, sizeof(rel), "%llu.db", (unsigned long long)gen);
	n = snprintf(dst, sizeof(dst), "%s/%s", f->cat_dir, rel);
	if (n < 0 || (size_t)n + 4 >= sizeof(dst)) {
		cf_err(f, "%s: cache path too long", f->cat_dir);
		r = -ENAMETOOLONG;
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
	if (pre) {
		/* came with HEAD (cf_head_cat) */
		r = rename(pre, tmp) < 0 ? -errno : 0;
		if (r < 0) {
			cf_err(f, "%s: %s", pre, strerror(-r));
			r = -EIO;
			goto out;
		}
	} else {
		r = base && base < gen ? cf_delta(f, base, gen, tmp) : -ENOENT;
		by_delta = r == 0;
		if (r < 0)
			r = cf_download(f, url, tmp);
	}
	if (r < 0)
		goto out;
	r = cf_check_catalog(tmp, gen, &m, why, sizeof(why));
	if (r == -EPROTONOSUPPORT) {
		cf_err(f,
		       "%s: a ferry catalog of a later format than this "
		       "build reads (upgrade ferry)",
		       url);
		goto out;
	}
	if (r < 0) {
		cf_err(f, "%s: not a valid ferry catalog%s%s", url,
		       why[0] ? ": " : "", why);
		goto out;
	}
	if (f->have_stmt) {
		r = cf_check_signed(f, url, tmp, &m, by_delta);
		/* the statement goes in before its catalog: a catalog of a
		 * signed cache is never there without it */
		if (r == 0 && (r = hyd_trust_keep(f->cat_dir, gen, f->stmt_buf,
						  f->stmt_len)) < 0) {
			cf_err(f, "%s/%llu.sig: %s", f->cat_dir,
			       (unsigned long long)gen, strerror(-r));
			r = -EIO;
		}
		if (r < 0)
			goto out;
	}
	/* The checked file goes into place in one step, and the rename is
	 * made durable before anyone is told the catalog is there. */
	if (rename(tmp, dst) < 0 || (r = base_fsync_path(f->cat_dir)) < 0) {
		cf_err(f, "%s: installing %s: %s", url, dst,
		       strerror(r < 0 ? -r : errno));
		r = -EIO;
		goto out;
	}
	/* Marked after the rename, which gives the file the ctime the
	 * marker names. A marker that cannot be written costs one more
	 * check at the next open, nothing else. */
	n = cat_check_remember(dst);
	if (n < 0)
		base_debug("cannot remember the tree check path=%s%s err=%s",
			   dst, CAT_CHECK_MARK_SUFFIX, strerror(-n));
out:
	/* On success only SQLite side files can be left; on failure all. */
	if (tmp[0])
		unlink_db_tmp(tmp);
	curl_free(url);
	return r;
}

/* 1 when name is a file that goes with cached catalog GEN.db: its
 * manifest overlay or one of SQLite's files beside it ("GEN.overlay.db",
 * "-wal", "-shm"), or the tree check's marker ("GEN.db.tree-ok", and
 * the temp file a crash may leave of it). */
static int is_overlay_name(const char *name)
{
	static const char *const sfx[] = {
	    ".overlay.db", ".overlay.db-wal", ".overlay.db-shm",
	    ".db" CAT_CHECK_MARK_SUFFIX, ".db" CAT_CHECK_MARK_SUFFIX ".tmp"};
	size_t digits = strspn(name, "0123456789");

	if (digits == 0 || name[0] == '0')
		return 0;
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
		if (!strcmp(name + digits, sfx[i]))
			return 1;
	return 0;
}

/* Newest cached generation that stays (0: none). below > 0: delete
 * every cached catalog, and the files that go with it, of a generation
 * below it:
 * UINT64_MAX when they came from another URL and must never stand in for
 * this one, or the generation just installed (the older ones served
 * their turn, the last as the delta's base; the cache's lock is held, so
 * no mount of this cache reads them). */
static uint64_t cached_newest(const struct hyd_cf *f, uint64_t below)
{
	struct dirent *de;
	uint64_t best = 0, g;
	char p[4200];
	DIR *d = opendir(f->cat_dir);

	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL) {
		if (is_overlay_name(de->d_name)) {
			g = strtoull(de->d_name, NULL, 10);
			if (below && g < below &&
			    cf_path(f, p, sizeof(p), de->d_name) == 0)
				unlink(p);
			continue;
		}
		g = hyd_cache_catalog_gen(de->d_name);
		if (g == 0)
			continue;
		if (below && g < below) {
			if (cf_path(f, p, sizeof(p), de->d_name) == 0)
				unlink(p);
			continue;
		}
		if (g > best)
			best = g;
	}
	closedir(d);
	return best;
}

/* 1 when catalogs/url records our base URL, 0 when not (or absent). */
static int cached_url_same(const struct hyd_cf *f)
{
	char p[4200], buf[HYD_URL_FILE_MAX + 1];
	size_t n;

	if (cf_path(f, p, sizeof(p), "url") < 0 ||
	    base_file_read_small(p, buf, sizeof(buf), &n) < 0 || n == 0)
		return 0;
	if (buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	return strcmp(buf, f->base_norm) == 0;
}

/* catalogs/url := base URL, durably. */
static int cached_url_write(struct hyd_cf *f)
{
	char dst[4200], line[HYD_URL_FILE_MAX + 2];
	int n, r;

	r = cf_path(f, dst, sizeof(dst), "url");
	if (r < 0)
		return r;
	n = snprintf(line, sizeof(line), "%s\n", f->base_norm);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -ENAMETOOLONG;
	return base_file_write_atomic(dst, line, (size_t)n, 0600);
}

/* Parse base_url, insist on http(s), and make its path end in '/' so
 * that joining "HEAD" appends rather than replaces the last segment. */
static int cf_parse_base(struct hyd_cf *f)
{
	char *scheme = NULL, *path = NULL, *slashed = NULL;
	CURLUcode uc;
	size_t len;
	int r = -EINVAL;

	f->url = curl_url();
	if (!f->url)
		return -ENOMEM;
	uc = curl_url_set(f->url, CURLUPART_URL, f->base, 0);
	if (uc == CURLUE_OK)
		uc = curl_url_get(f->url, CURLUPART_SCHEME, &scheme, 0);
	if (uc != CURLUE_OK || (strcasecmp(scheme, "http") != 0 &&
				strcasecmp(scheme, "https") != 0)) {
		cf_err(f, "%s: not an http:// or https:// URL", f->base);
		goto out;
	}
	uc = curl_url_get(f->url, CURLUPART_PATH, &path, 0);
	if (uc != CURLUE_OK)
		goto out;
	len = strlen(path);
	if (len == 0 || path[len - 1] != '/') {
		slashed = malloc(len + 2);
		if (!slashed) {
			r = -ENOMEM;
			goto out;
		}
		memcpy(slashed, path, len);
		memcpy(slashed + len, "/", 2);
		uc = curl_url_set(f->url, CURLUPART_PATH, slashed, 0);
	}
	/* A query or fragment of the base would not carry over to the
	 * joined URLs anyway; drop them so catalogs/url is canonical. */
	if (uc == CURLUE_OK)
		uc = curl_url_set(f->url, CURLUPART_QUERY, NULL, 0);
	if (uc == CURLUE_OK)
		uc = curl_url_set(f->url, CURLUPART_FRAGMENT, NULL, 0);
	if (uc == CURLUE_OK)
		uc = curl_url_get(f->url, CURLUPART_URL, &f->base_norm, 0);
	if (uc != CURLUE_OK) {
		cf_err(f, "%s: not a valid URL", f->base);
		goto out;
	}
	r = 0;
out:
	free(slashed);
	curl_free(path);
	curl_free(scheme);
	return r;
}

static int cf_setup(struct hyd_cf *f, const char *cache_dir)
{
	CURLcode cc = CURLE_OK;
	int n, r;

	r = cf_parse_base(f);
	if (r < 0)
		return r;
	if (hyd_trust_on(f->creds) &&
	    hyd_trust_url_ns(f->base_norm, f->ns, sizeof(f->ns)) < 0) {
		cf_err(f, "%s: no namespace in the URL to check signatures of",
		       f->base);
		return -EINVAL;
	}
	n = snprintf(f->cat_dir, sizeof(f->cat_dir), "%s/catalogs", cache_dir);
	if (n < 0 || (size_t)n >= sizeof(f->cat_dir)) {
		cf_err(f, "%s: path too long", cache_dir);
		return -EINVAL;
	}
	if ((mkdir(cache_dir, 0700) < 0 && errno != EEXIST) ||
	    (mkdir(f->cat_dir, 0700) < 0 && errno != EEXIST)) {
		r = -errno;
		cf_err(f, "%s: %s", f->cat_dir, strerror(-r));
		return r == -EACCES || r == -ENOTDIR ? r : -EIO;
	}
	/* a damaged record of the highest generation seen holds nothing to
	 * go by: the next one checked replaces it */
	if (hyd_trust_on(f->creds) && hyd_trust_seen(f->cat_dir, &f->seen) < 0)
		f->seen = 0;
	f->h = curl_easy_init();
	if (!f->h)
		return -ENOMEM;
#define SETOPT(opt, val)                                                       \
	do {                                                                   \
		if (cc == CURLE_OK)                                            \
			cc = curl_easy_setopt(f->h, opt, val);                 \
	} while (0)
	cc = hyd_curl_get_setup(f->h, f->curl_err, f->creds);
	SETOPT(CURLOPT_CONNECTTIMEOUT, f->connect_timeout_s);
	/* No total timeout (a catalog can be large); a stall ends it. */
	SETOPT(CURLOPT_LOW_SPEED_LIMIT, HYD_STALL_BYTES_PER_S);
	SETOPT(CURLOPT_LOW_SPEED_TIME, HYD_STALL_S);
	SETOPT(CURLOPT_WRITEFUNCTION, sink_write);
#undef SETOPT
	if (cc != CURLE_OK)
		return cf_curl_fail(f, cc, f->base, NULL);
	return 0;
}

/* Is catalogs/GEN.db (at path) the catalog f->stmt signs? Its kept
 * statement names the same digest, or else its rows have it (then the
 * statement is kept now). 1 yes, 0 no (the caller drops it and fetches
 * it again), -errno. */
static int cf_cached_signed(struct hyd_cf *f, uint64_t gen, const char *path)
{
	struct cat_stmt kept;
	char hex[65];
	int r;

	if (hyd_trust_kept(f->creds, f->cat_dir, f->ns, gen, &kept) == 0 &&
	    !strcmp(kept.digest, f->stmt.digest))
		return 1;
	r = cat_digest(path, hex);
	if (r < 0 || strcmp(hex, f->stmt.digest) != 0)
		return 0;
	r = hyd_trust_keep(f->cat_dir, gen, f->stmt_buf, f->stmt_len);
	return r < 0 ? r : 1;
}

/* Drop catalogs/GEN.db, its overlay and statement: not the signed one. */
static void cf_drop_cached(const struct hyd_cf *f, const char *path)
{
	char ov[4300];

	base_warn("cached catalog is not the signed one, fetching it again "
		  "path=%s",
		  path);
	if (hyd_cache_overlay_path(path, ov, sizeof(ov)) == 0)
		unlink_db_tmp(ov);
	if (snprintf(ov, sizeof(ov), "%s%s", path, CAT_CHECK_MARK_SUFFIX) <
	    (int)sizeof(ov))
		unlink(ov);
	unlink(path);
	hyd_trust_forget(f->cat_dir, 0); /* its statement, if one was kept */
}

/* After generation gen was taken with its statement: it is the highest
 * seen (durably), and statements whose catalog left go. */
static int cf_trust_done(struct hyd_cf *f, uint64_t gen)
{
	int r = hyd_trust_seen_raise(f->cat_dir, gen);

	if (r < 0) {
		cf_err(f, "%s/seen: %s", f->cat_dir, strerror(-r));
		return -EIO;
	}
	hyd_trust_forget(f->cat_dir, 0);
	return 0;
}

static int set_result(const struct hyd_cf *f, uint64_t gen, int from_cache,
		      struct hyd_catalog_result *ret)
{
	int n = snprintf(ret->path, sizeof(ret->path), "%s/%llu.db", f->cat_dir,
			 (unsigned long long)gen);

	if (n < 0 || (size_t)n >= sizeof(ret->path))
		return -ENAMETOOLONG;
	ret->generation = gen;
	ret->from_cache = from_cache;
	return 0;
}

/* The connect timeout, and curl's global state (the caller's
 * curl_global_cleanup balances it). */
static int cf_begin(struct hyd_cf *f, const char *base_url,
		    const struct hyd_creds *creds, long connect_timeout_s,
		    char *errbuf, size_t errcap)
{
	memset(f, 0, sizeof(*f));
	f->base = base_url;
	f->creds = creds;
	f->errbuf = errbuf;
	f->errcap = errcap;
	f->connect_timeout_s = connect_timeout_s > 0
				   ? connect_timeout_s
				   : HYD_CONNECT_TIMEOUT_DEFAULT;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		cf_err(f, "%s: cannot initialize libcurl", f->base);
		return -ENOMEM;
	}
	return 0;
}

/* What cf_begin and the calls after it set up, undone. */
static void cf_end(struct hyd_cf *f)
{
	curl_easy_cleanup(f->h);
	curl_free(f->base_norm);
	curl_url_cleanup(f->url);
	curl_global_cleanup();
}

int hyd_catalog_fetch(const char *base_url, const char *cache_dir,
		      const struct hyd_creds *creds, long connect_timeout_s,
		      struct hyd_catalog_result *ret, char *errbuf,
		      size_t errcap)
{
	struct hyd_cf f;
	int trust = hyd_trust_on(creds);
	uint64_t gen = 0, cached;
	char name[32], path[4200], pre[4200];
	struct stat sb;
	int r, same, with_head = 0;

	if (errbuf && errcap)
		errbuf[0] = '\0';
	if (!base_url || !cache_dir || !ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	r = cf_begin(&f, base_url, creds, connect_timeout_s, errbuf, errcap);
	if (r < 0)
		return r;
	r = cf_setup(&f, cache_dir);
	if (r < 0)
		goto out;
	same = cached_url_same(&f);
	if (!same)
		f.seen = 0; /* another URL's: it goes below */
	/* Nothing cached to make a delta from, and no statement to check
	 * before the first byte: the catalog may come with HEAD. */
	if (!trust && !(same && cached_newest(&f, 0) > 0) &&
	    cf_path(&f, pre, sizeof(pre), "HEAD.db.tmp") == 0) {
		r = cf_head_cat(&f, pre, &gen, &with_head);
		/* Neither HEAD's text nor a catalog that says its generation
		 * (a proxy that drops the header): ask HEAD alone. */
		if (r == -EPROTO) {
			if (errbuf && errcap)
				errbuf[0] = '\0';
			r = cf_head(&f, &gen);
		}
	} else {
		r = cf_head(&f, &gen);
	}
	if (r == 0 && trust)
		r = cf_statement(&f, gen);
	if (r < 0)
		goto fallback;
	snprintf(name, sizeof(name), "%llu.db", (unsigned long long)gen);
	r = cf_path(&f, path, sizeof(path), name);
	if (r < 0)
		goto out;
	/* Catalogs are immutable per (URL, generation): a checked copy is as
	 * good as a new download (signed: when it is the one signed). Older
	 * ones a mount that followed left (a crash before their last reader
	 * let go) served their turn. */
	if (same && stat(path, &sb) == 0) {
		r = trust ? cf_cached_signed(&f, gen, path) : 1;
		if (r < 0) {
			cf_err(&f, "%s: %s", path, strerror(-r));
			r = -EIO;
			goto out;
		}
		if (r == 1) {
			cached_newest(&f, gen);
			r = trust ? cf_trust_done(&f, gen) : 0;
			if (r == 0)
				r = set_result(&f, gen, 0, ret);
			goto out;
		}
		cf_drop_cached(&f, path);
	}
	if (!same) {
		/* Forget the other URL before the first byte of this one
		 * lands, so no crash can leave its catalogs under our name. */
		if (cf_path(&f, path, sizeof(path), "url") == 0)
			unlink(path);
		cached_newest(&f, UINT64_MAX);
		hyd_trust_forget(f.cat_dir, 1);
		base_fsync_path(f.cat_dir);
	}
	r = cf_catalog(&f, gen, same ? cached_newest(&f, 0) : 0,
		       with_head ? pre : NULL);
	if (with_head)
		unlink_db_tmp(pre);
	if (r < 0)
		goto fallback;
	cached_newest(&f, gen);
	if (!same) {
		r = cached_url_write(&f);
		if (r < 0) {
			cf_err(&f, "%s/url: %s", f.cat_dir, strerror(-r));
			r = -EIO;
			goto out;
		}
	}
	r = trust ? cf_trust_done(&f, gen) : 0;
	if (r == 0)
		r = set_result(&f, gen, 0, ret);
	goto out;
fallback:
	/* Only a server we never heard from is stood in for by the cache;
	 * signed: only by a catalog whose kept statement still checks out
	 * and is no older than the highest generation seen. */
	if (r == -EHOSTUNREACH && same) {
		struct cat_stmt kept;

		cached = cached_newest(&f, 0);
		if (cached > 0 && trust &&
		    (hyd_trust_kept(creds, f.cat_dir, f.ns, cached, &kept) <
			 0 ||
		     cached < f.seen)) {
			size_t n = errbuf && errcap ? strlen(errbuf) : 0;

			if (n < errcap)
				snprintf(
				    errbuf + n, errcap - n,
				    "; the cached catalog (generation "
				    "%llu) has no statement by the trusted "
				    "key: not serving it",
				    (unsigned long long)cached);
			r = -EKEYREJECTED;
			goto out;
		}
		/* errbuf keeps the "cannot reach" line: the caller can warn
		 * why it is serving an older generation. */
		if (cached > 0)
			r = set_result(&f, cached, 1, ret);
	}
out:
	ret->requests = f.requests;
	ret->bytes = f.bytes;
	ret->rtt_ns = f.rtt_ns;
	ret->connect_timed_out = r == -EHOSTUNREACH && f.connect_timed_out;
	cf_end(&f);
	return r;
}

/* curl's progress callback: a non-zero *stop ends the transfer. */
static int stop_xferinfo(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut,
			 curl_off_t un)
{
	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	return __atomic_load_n((const int *)p, __ATOMIC_RELAXED) != 0;
}

int hyd_catalog_update(const char *base_url, const char *cache_dir,
		       const struct hyd_creds *creds, uint64_t have,
		       long connect_timeout_s, const int *stop,
		       struct hyd_catalog_result *ret, char *errbuf,
		       size_t errcap)
{
	struct hyd_cf f;
	int trust = hyd_trust_on(creds);
	uint64_t gen = 0;
	char name[32], path[4200];
	struct stat sb;
	int r;

	if (errbuf && errcap)
		errbuf[0] = '\0';
	if (!base_url || !cache_dir || !ret || !have)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	r = cf_begin(&f, base_url, creds, connect_timeout_s, errbuf, errcap);
	if (r < 0)
		return r;
	r = cf_setup(&f, cache_dir);
	if (r == 0 && stop &&
	    (curl_easy_setopt(f.h, CURLOPT_XFERINFOFUNCTION, stop_xferinfo) !=
		 CURLE_OK ||
	     curl_easy_setopt(f.h, CURLOPT_XFERINFODATA, (void *)stop) !=
		 CURLE_OK ||
	     curl_easy_setopt(f.h, CURLOPT_NOPROGRESS, 0L) != CURLE_OK))
		r = -ENOMEM;
	if (r == 0 && !cached_url_same(&f)) {
		cf_err(&f, "%s: the cache's catalogs came from another URL",
		       base_url);
		r = -ESTALE;
	}
	if (r == 0)
		r = cf_head(&f, &gen);
	if (r == 0)
		r = set_result(&f, gen, 0, ret);
	if (r < 0 || gen <= have)
		goto out;
	/* signed: the statement is checked before the catalog moves */
	if (trust)
		r = cf_statement(&f, gen);
	if (r == 0) {
		snprintf(name, sizeof(name), "%llu.db",
			 (unsigned long long)gen);
		r = cf_path(&f, path, sizeof(path), name);
	}
	/* Installed by an earlier try whose switch did not happen: the
	 * same checked file (signed: when it is the one signed). Else the
	 * delta from the one the mount has. */
	if (r == 0 && trust && stat(path, &sb) == 0) {
		r = cf_cached_signed(&f, gen, path);
		if (r == 0)
			cf_drop_cached(&f, path);
		r = r < 0 ? r : 0;
	}
	if (r == 0 && stat(path, &sb) != 0)
		r = cf_catalog(&f, gen, have, NULL);
	if (r == 0 && trust)
		r = cf_trust_done(&f, gen);
	if (r == 0)
		r = 1;
out:
	ret->requests = f.requests;
	ret->bytes = f.bytes;
	ret->rtt_ns = f.rtt_ns;
	cf_end(&f);
	return r;
}

int hyd_catalog_head(const char *base_url, const struct hyd_creds *creds,
		     long connect_timeout_s, uint64_t *ret_gen, char *errbuf,
		     size_t errcap)
{
	struct hyd_cf f;
	CURLcode cc = CURLE_OK;
	int r;

	if (errbuf && errcap)
		errbuf[0] = '\0';
	r = cf_begin(&f, base_url, creds, connect_timeout_s, errbuf, errcap);
	if (r < 0)
		return r;
	r = cf_parse_base(&f);
	if (r == 0) {
		f.h = curl_easy_init();
		r = f.h ? 0 : -ENOMEM;
	}
	if (r == 0) {
		cc = hyd_curl_get_setup(f.h, f.curl_err, f.creds);
		if (cc == CURLE_OK)
			cc = curl_easy_setopt(f.h, CURLOPT_CONNECTTIMEOUT,
					      f.connect_timeout_s);
		if (cc == CURLE_OK)
			cc = curl_easy_setopt(f.h, CURLOPT_TIMEOUT,
					      f.connect_timeout_s * 2);
		if (cc == CURLE_OK)
			cc = curl_easy_setopt(f.h, CURLOPT_WRITEFUNCTION,
					      sink_write);
		if (cc != CURLE_OK)
			r = cf_curl_fail(&f, cc, f.base, NULL);
	}
	if (r == 0)
		r = cf_head(&f, ret_gen);
	cf_end(&f);
	return r;
}
