/*
 * hydrator/fetch/hyd_manifest.c — fetching the manifests of pending files
 * (hyd_manifest.h): blocking GETs through pooled curl easy
 * handles (a handle keeps its connection alive for the next request),
 * retried until the caller's deadline, one request per file or segment at
 * a time in the process (single flight), bodies stored through
 * cat_overlay_put_wire, which checks them whole first.
 *
 * A body is held in memory until it is checked; its cap comes from the
 * catalog: a per-file answer has at most size / chunk_min + 2 chunks (the
 * chunker never cuts before chunk_min bytes except at the end of a file),
 * a segment answer at most 1,024 records of HYD_MANIFEST_INLINE_MAX
 * chunks. Anything longer is -EBADMSG, stored nowhere.
 *
 * With --trust-key an answer is stored only with its Ferry-Signature
 * header verifying (catalog.h, cat_verify_manifests: the namespace, the
 * generation, the ino range asked for and the body's SHA-256): a cache in
 * between can neither change a byte of it nor answer with another
 * file's manifest. A refusal is -EKEYREJECTED, not retried.
 *
 * Cleanup style in this file: goto out.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/fetch/hyd_manifest_bulk_priv.h"
#include "hydrator/fetch/hyd_trust_priv.h"

#define POOL_MAX 8u /* idle handles kept (each with its connection) */
#define CONNECT_TIMEOUT_MS_DEFAULT 5000L
#define WAIT_MAX_S 30u
/* A transfer slower than 1 byte/s for ?wait= plus this is a stall (the
 * server sends nothing while it holds a request). No total timeout: a
 * big manifest may take long; the caller's deadline bounds it. */
#define STALL_SLACK_S 15L
/* A transfer still running this long past the caller's deadline ends. */
#define DEADLINE_GRACE_NS 2000000000ull
#define RETRY_AFTER_MAX_S 5
#define BACKOFF_FIRST_MS 100u
#define BACKOFF_MAX_MS 2000u
#define SLICE_NS 50000000ull /* naps and waits look at cancel this often */
#define SEC_NS 1000000000ull
#define URL_EXTRA 96u /* "/manifests/GEN/SEG?wait=S" */

#define STAT_ADD(m, field, v)                                                  \
	__atomic_add_fetch(&(m)->st.field, (v), __ATOMIC_RELAXED)

enum mf_kind { MF_FILE = 0, MF_SEGMENT = 1 };

/* A response body being received. */
struct mf_body {
	CURL *h;
	uint8_t *p;
	size_t n, cap, limit;
	int over; /* the answer passed limit: the transfer was stopped */
};

/* A pooled easy handle and what its callbacks look at. */
struct mf_handle {
	CURL *h;
	hyd_manifest *m;
	const int *stop;      /* the current call's, or NULL */
	uint64_t deadline_ns; /* the current call's */
	int timed_out;	      /* on_progress ended it at the deadline */
	char err[CURL_ERROR_SIZE];
};

/* One file or segment being fetched; waiters sleep on cond. */
struct mf_flight {
	enum mf_kind kind;
	uint64_t key; /* ino or segment */
	int done, result;
	unsigned waiters;
	pthread_cond_t cond;
	struct mf_flight *next;
};

struct hyd_manifest {
	char *base_url;		       /* without a trailing '/' */
	const struct hyd_creds *creds; /* borrowed; may be NULL */
	char ns[BASE_NS_NAME_MAX + 1]; /* the URL's (--trust-key) */
	cat_overlay *ov;
	long connect_timeout_ms;
	unsigned wait_s;
	int cancel;	    /* __atomic */
	pthread_mutex_t mu; /* flights and pool */
	struct mf_flight *flights;
	struct mf_handle *pool[POOL_MAX];
	unsigned npool;
	struct hyd_manifest_stats st;
	struct hyd_mount_counts *counts; /* borrowed; may be NULL */
	struct hyd_mbulk *bulk;		 /* the prefetch (__atomic) */
	/* Under mu: the segments whose answer was stored, a set (open
	 * addressing, seg + 1 so that 0 is empty; cap a power of two): a
	 * file the answer left out is then asked for alone, without the
	 * segment again (hyd_manifest_segment_for). */
	uint64_t *answered;
	size_t answered_n, answered_cap;
};

/* ---- answered segments (mu held) ---- */

static size_t answered_slot(uint64_t seg, size_t cap)
{
	return (size_t)(((seg + 1) * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static int answered_has(const hyd_manifest *m, uint64_t seg)
{
	size_t i;

	if (!m->answered_cap)
		return 0;
	for (i = answered_slot(seg, m->answered_cap); m->answered[i];
	     i = (i + 1) & (m->answered_cap - 1))
		if (m->answered[i] == seg + 1)
			return 1;
	return 0;
}

static void answered_put(uint64_t *v, size_t cap, uint64_t key)
{
	size_t i;

	for (i = answered_slot(key - 1, cap); v[i]; i = (i + 1) & (cap - 1))
		;
	v[i] = key;
}

/* A set that cannot grow only costs a segment asked for again. */
static void answered_add(hyd_manifest *m, uint64_t seg)
{
	uint64_t *nv;
	size_t ncap, i;

	if (seg == UINT64_MAX || answered_has(m, seg))
		return;
	/* Keep the load under one half: probes stay short. */
	if ((m->answered_n + 1) * 2 > m->answered_cap) {
		ncap = m->answered_cap ? m->answered_cap * 2 : 64;
		nv = calloc(ncap, sizeof(*nv));
		if (!nv)
			return;
		for (i = 0; i < m->answered_cap; i++)
			if (m->answered[i])
				answered_put(nv, ncap, m->answered[i]);
		free(m->answered);
		m->answered = nv;
		m->answered_cap = ncap;
	}
	answered_put(m->answered, m->answered_cap, seg + 1);
	m->answered_n++;
}

static int cancelled(hyd_manifest *m, const int *stop)
{
	return __atomic_load_n(&m->cancel, __ATOMIC_RELAXED) ||
	       (stop && __atomic_load_n(stop, __ATOMIC_RELAXED));
}

/* ---- curl handles ---- */

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct mf_body *b = ud;
	size_t n = size * nmemb, nc;
	long status = 0;
	uint8_t *np;

	curl_easy_getinfo(b->h, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
		return n; /* an error's body: the status says enough */
	if (n > b->limit - b->n) {
		b->over = 1;
		return 0;
	}
	if (n > b->cap - b->n) {
		nc = b->cap ? b->cap : 4096;
		while (nc - b->n < n)
			nc = nc > b->limit / 2 ? b->limit : nc * 2;
		np = realloc(b->p, nc);
		if (!np)
			return 0; /* -ECANCELED, and p NULL tells why */
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->n, ptr, n);
	b->n += n;
	return n;
}

/* curl asks about once a second, and more often while bytes move: a
 * cancel, or the caller's deadline (with a little grace, for an answer
 * already on its way), ends a request the server is holding for ?wait=
 * or a slow body. */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
		       curl_off_t un)
{
	struct mf_handle *mh = ud;

	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	if (cancelled(mh->m, mh->stop))
		return 1;
	if (base_now_ns() >= mh->deadline_ns + DEADLINE_GRACE_NS) {
		mh->timed_out = 1;
		return 1;
	}
	return 0;
}

static void handle_free(struct mf_handle *mh)
{
	if (!mh)
		return;
	curl_easy_cleanup(mh->h);
	free(mh);
}

static struct mf_handle *handle_new(hyd_manifest *m)
{
	struct mf_handle *mh = calloc(1, sizeof(*mh));
	CURLcode cc = CURLE_OK;

	if (!mh)
		return NULL;
	mh->m = m;
	mh->h = curl_easy_init();
	if (!mh->h) {
		free(mh);
		return NULL;
	}
#define SETOPT(opt, val)                                                       \
	do {                                                                   \
		if (cc == CURLE_OK)                                            \
			cc = curl_easy_setopt(mh->h, opt, val);                \
	} while (0)
	cc = hyd_curl_get_setup(mh->h, mh->err, m->creds);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, m->connect_timeout_ms);
	SETOPT(CURLOPT_LOW_SPEED_LIMIT, 1L);
	SETOPT(CURLOPT_LOW_SPEED_TIME, (long)m->wait_s + STALL_SLACK_S);
	SETOPT(CURLOPT_WRITEFUNCTION, on_write);
	SETOPT(CURLOPT_NOPROGRESS, 0L);
	SETOPT(CURLOPT_XFERINFOFUNCTION, on_progress);
	SETOPT(CURLOPT_XFERINFODATA, mh);
#undef SETOPT
	if (cc != CURLE_OK) {
		base_curl_errno(cc); /* the code at debug level */
		handle_free(mh);
		return NULL;
	}
	return mh;
}

static struct mf_handle *handle_get(hyd_manifest *m)
{
	struct mf_handle *mh = NULL;

	pthread_mutex_lock(&m->mu);
	if (m->npool)
		mh = m->pool[--m->npool];
	pthread_mutex_unlock(&m->mu);
	return mh ? mh : handle_new(m);
}

static void handle_put(hyd_manifest *m, struct mf_handle *mh)
{
	if (!mh)
		return;
	mh->stop = NULL;
	pthread_mutex_lock(&m->mu);
	if (m->npool < POOL_MAX) {
		m->pool[m->npool++] = mh;
		mh = NULL;
	}
	pthread_mutex_unlock(&m->mu);
	handle_free(mh);
}

/* ---- one request ---- */

/* GET url into b. 0 with *ret_status (and *ret_retry_s, the Retry-After
 * seconds or 0) set, or -errno with why set. */
static int get(struct mf_handle *mh, const char *url, struct mf_body *b,
	       long *ret_status, long *ret_retry_s, char *why, size_t whycap)
{
	curl_off_t ra = 0;
	CURLcode cc;
	int r;

	mh->err[0] = '\0';
	mh->timed_out = 0;
	b->h = mh->h;
	b->n = 0;
	b->over = 0;
	cc = curl_easy_setopt(mh->h, CURLOPT_URL, url);
	if (cc == CURLE_OK)
		cc = curl_easy_setopt(mh->h, CURLOPT_WRITEDATA, b);
	if (cc == CURLE_OK)
		cc = curl_easy_perform(mh->h);
	if (cc != CURLE_OK) {
		r = base_curl_errno(cc);
		if (r == -ECANCELED && b->over) {
			snprintf(why, whycap, "answer longer than %zu bytes",
				 b->limit);
			return -EBADMSG;
		}
		if (r == -ECANCELED && mh->timed_out) {
			snprintf(why, whycap,
				 "transfer still running at the "
				 "deadline");
			return -ETIMEDOUT;
		}
		if (r == -ECANCELED && !cancelled(mh->m, mh->stop)) {
			snprintf(why, whycap, "out of memory");
			return -ENOMEM;
		}
		snprintf(why, whycap, "curl %d: %s", (int)cc,
			 mh->err[0] ? mh->err : curl_easy_strerror(cc));
		return r;
	}
	curl_easy_getinfo(mh->h, CURLINFO_RESPONSE_CODE, ret_status);
	if (curl_easy_getinfo(mh->h, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK)
		ra = 0;
	*ret_retry_s = ra > 0 ? (long)ra : 0;
	return 0;
}

/* --trust-key: the answer in b to [first, last] of generation gen is
 * signed by the trusted key. 0, or -EKEYREJECTED with why set. */
static int signed_answer(hyd_manifest *m, struct mf_handle *mh, uint64_t gen,
			 uint64_t first, uint64_t last, const struct mf_body *b,
			 char *why, size_t whycap)
{
	struct curl_header *hd = NULL;
	int r;

	if (curl_easy_header(mh->h, "Ferry-Signature", 0, CURLH_HEADER, -1,
			     &hd) != CURLHE_OK ||
	    !hd || !hd->value) {
		snprintf(why, whycap,
			 "unsigned answer (no Ferry-Signature), and "
			 "--trust-key takes signed manifests only");
		return -EKEYREJECTED;
	}
	r = cat_verify_manifests(m->creds->trust_pub, m->ns, gen, first, last,
				 b->p, b->n, hd->value, strlen(hd->value));
	if (r == 0)
		return 0;
	if (r == -EBADMSG)
		snprintf(why, whycap, "malformed Ferry-Signature header");
	else
		snprintf(why, whycap,
			 "its signature does not verify with the trusted key "
			 "(%s): the answer was changed on the way",
			 m->creds->trust_key);
	return -EKEYREJECTED;
}

static uint64_t backoff_ms(unsigned attempts)
{
	uint64_t ms = (uint64_t)BACKOFF_FIRST_MS
		      << (attempts < 8 ? attempts : 8);

	return ms > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms;
}

/* Sleep until until_ns, ending early on a cancel. */
static void nap(hyd_manifest *m, const int *stop, uint64_t until_ns)
{
	uint64_t now;
	struct timespec ts;

	while (!cancelled(m, stop) && (now = base_now_ns()) < until_ns) {
		uint64_t d =
		    until_ns - now < SLICE_NS ? until_ns - now : SLICE_NS;

		ts.tv_sec = (time_t)(d / SEC_NS);
		ts.tv_nsec = (long)(d % SEC_NS);
		nanosleep(&ts, NULL);
	}
}

/* The most bytes a correct answer for kind/key can have. */
static int body_limit(cat_reader *r, const struct cat_meta *meta,
		      enum mf_kind kind, uint64_t key, size_t *ret)
{
	struct cat_inode in;
	uint64_t chunks;
	int rc;

	if (kind == MF_SEGMENT) {
		*ret = CAT_MWIRE_HEAD +
		       (size_t)HYD_MANIFEST_SEG_INOS *
			   (CAT_MWIRE_REC +
			    (size_t)HYD_MANIFEST_INLINE_MAX * CAT_MWIRE_ENTRY);
		return 0;
	}
	rc = cat_getattr(r, key, &in);
	if (rc < 0)
		return rc;
	chunks = in.size / meta->params.min + 2;
	if (chunks > (SIZE_MAX / 2) / CAT_MWIRE_ENTRY)
		return -EFBIG;
	*ret =
	    CAT_MWIRE_HEAD + CAT_MWIRE_REC + (size_t)chunks * CAT_MWIRE_ENTRY;
	return 0;
}

/* What a non-200 status means: 1 retry (503: *not_ready set), 0 never
 * (rc and why set). */
static int status_retry(long status, int *not_ready, int *rc, char *why,
			size_t whycap)
{
	*not_ready = status == 503;
	snprintf(why, whycap, "HTTP %ld", status);
	if (status == 503 || status >= 500 || status == 408 || status == 429)
		return 1;
	if (status == 404) {
		*rc = -ENOENT;
		snprintf(why, whycap,
			 "not a pending file of this generation "
			 "(HTTP 404)");
	} else if (status == 410) {
		*rc = -ESTALE;
		snprintf(why, whycap,
			 "generation superseded (HTTP 410): remount to follow");
	} else {
		*rc = -EPROTO;
		snprintf(why, whycap, "unexpected answer (HTTP %ld)", status);
	}
	return 0;
}

/*
 * The requests for one file or segment, until its answer is stored or
 * the deadline passes; the caller is the flight's only performer. Logs
 * the one line of a failure.
 */
static int perform(hyd_manifest *m, cat_reader *r, enum mf_kind kind,
		   uint64_t key, uint64_t deadline, const int *stop,
		   size_t *ret_files)
{
	struct mf_body b = {0};
	struct mf_handle *mh = NULL;
	struct cat_meta meta;
	char why[CURL_ERROR_SIZE + 64] = "", *url = NULL;
	uint64_t first, last, now, left_s, until;
	unsigned attempts = 0, requests = 0, wait;
	long status = 0, retry_s = 0;
	size_t ulen, files = 0;
	int rc, not_ready = 0, last_err = -ETIMEDOUT;

	cat_reader_meta(r, &meta);
	first = kind == MF_SEGMENT ? key * HYD_MANIFEST_SEG_INOS : key;
	last = kind == MF_SEGMENT ? first + HYD_MANIFEST_SEG_INOS - 1 : key;
	rc = body_limit(r, &meta, kind, key, &b.limit);
	if (rc < 0) {
		snprintf(why, sizeof(why), "cannot size the answer");
		goto out;
	}
	ulen = strlen(m->base_url) + URL_EXTRA;
	url = malloc(ulen);
	mh = handle_get(m);
	if (!url || !mh) {
		rc = -ENOMEM;
		snprintf(why, sizeof(why), "out of memory");
		goto out;
	}
	mh->stop = stop;
	mh->deadline_ns = deadline;
	for (;;) {
		if (cancelled(m, stop)) {
			rc = -ECANCELED;
			break;
		}
		/* The server holds a request for at most ?wait= seconds:
		 * never longer than the caller has left. */
		now = base_now_ns();
		left_s = deadline > now ? (deadline - now) / SEC_NS : 0;
		wait = left_s < m->wait_s ? (unsigned)left_s : m->wait_s;
		snprintf(url, ulen, "%s/%s/%" PRIu64 "/%" PRIu64 "?wait=%u",
			 m->base_url,
			 kind == MF_SEGMENT ? "manifests" : "manifest",
			 meta.generation, key, wait);
		requests++;
		STAT_ADD(m, requests, 1);
		HYD_MOUNT_COUNT(m->counts, manifest_requests, 1);
		rc = get(mh, url, &b, &status, &retry_s, why, sizeof(why));
		if (rc == 0 && status == 200) {
			STAT_ADD(m, bytes, b.n);
			HYD_MOUNT_COUNT(m->counts, manifest_bytes, b.n);
			if (hyd_trust_on(m->creds)) {
				rc =
				    signed_answer(m, mh, meta.generation, first,
						  last, &b, why, sizeof(why));
				if (rc < 0)
					break;
			}
			rc = cat_overlay_put_wire(m->ov, r, first, last, b.p,
						  b.n, &files);
			if (rc == -EBADMSG)
				snprintf(why, sizeof(why),
					 "answer fails its checks against the "
					 "catalog");
			else if (rc < 0)
				snprintf(why, sizeof(why),
					 "cannot write the manifest overlay");
			break;
		}
		if (rc == 0 &&
		    !status_retry(status, &not_ready, &rc, why, sizeof(why)))
			break;
		if (rc < 0 && !base_err_transient(rc))
			break;
		if (rc < 0)
			not_ready = 0;
		if (not_ready)
			STAT_ADD(m, not_ready, 1);
		last_err = not_ready ? -EAGAIN : -ETIMEDOUT;
		/* 503 says when to come back; anything else backs off. */
		until = base_now_ns() +
			(not_ready ? (uint64_t)(retry_s < 1 ? 1
						: retry_s > RETRY_AFTER_MAX_S
						    ? RETRY_AFTER_MAX_S
						    : retry_s) *
					 SEC_NS
				   : backoff_ms(attempts++) * 1000000ull);
		if (until >= deadline) {
			rc = last_err;
			if (not_ready)
				snprintf(why, sizeof(why),
					 "not hashed yet at the deadline "
					 "(HTTP 503)");
			break;
		}
		nap(m, stop, until);
	}
	if (rc == 0 && kind == MF_FILE &&
	    cat_manifest_state(r, key) == CAT_MANIFEST_MISSING) {
		/* A well-formed answer that leaves the file out (or marks
		 * it "on its own" at the per-file endpoint). */
		rc = -EBADMSG;
		snprintf(why, sizeof(why),
			 "the answer holds no manifest for the file");
	}
	if (rc == 0)
		STAT_ADD(m, files, files);
out:
	if (rc < 0 && rc != -ECANCELED) {
		STAT_ADD(m, failures, 1);
		base_log(rc == -EAGAIN	       ? BASE_LOG_DEBUG
			 : rc == -EKEYREJECTED ? BASE_LOG_ERROR
					       : BASE_LOG_WARN,
			 "manifest fetch failed %s=%" PRIu64
			 " url=%s errno=%s requests=%u why=\"%s\"",
			 kind == MF_SEGMENT ? "segment" : "ino", key,
			 url ? url : m->base_url, base_errname(rc), requests,
			 why);
	}
	if (ret_files)
		*ret_files = rc == 0 ? files : 0;
	handle_put(m, mh);
	free(url);
	free(b.p);
	return rc;
}

/* ---- single flight ---- */

static struct mf_flight *flight_find(hyd_manifest *m, enum mf_kind kind,
				     uint64_t key)
{
	struct mf_flight *fl;

	for (fl = m->flights; fl; fl = fl->next)
		if (fl->kind == kind && fl->key == key)
			return fl;
	return NULL;
}

static void flight_unlink(hyd_manifest *m, struct mf_flight *fl)
{
	struct mf_flight **pp;

	for (pp = &m->flights; *pp; pp = &(*pp)->next)
		if (*pp == fl) {
			*pp = fl->next;
			return;
		}
}

static void flight_free(struct mf_flight *fl)
{
	pthread_cond_destroy(&fl->cond);
	free(fl);
}

/* Wait (m->mu held) for fl to end, our deadline or a cancel. */
static void flight_wait(hyd_manifest *m, struct mf_flight *fl,
			uint64_t deadline, const int *stop)
{
	uint64_t now, t;

	while (!fl->done && !cancelled(m, stop) &&
	       (now = base_now_ns()) < deadline) {
		/* In slices, so a stop flag (not signalled) is seen. */
		t = deadline - now < SLICE_NS ? deadline : now + SLICE_NS;
		base_cond_wait_until(&fl->cond, &m->mu, t);
	}
}

/* Run the flight for kind/key: perform it, or wait for the caller that
 * does. A waiter whose deadline outlasts a performer that gave up for a
 * reason that may pass (not hashed yet, transient, its own stop) tries
 * again itself. */
static int flight_run(hyd_manifest *m, cat_reader *r, enum mf_kind kind,
		      uint64_t key, uint64_t deadline, const int *stop,
		      size_t *ret_files)
{
	struct mf_flight *fl;
	int rc, done;

	if (ret_files)
		*ret_files = 0;
	for (;;) {
		if (cancelled(m, stop))
			return -ECANCELED;
		pthread_mutex_lock(&m->mu);
		fl = flight_find(m, kind, key);
		if (!fl) {
			fl = calloc(1, sizeof(*fl));
			if (!fl || base_cond_init(&fl->cond) < 0) {
				pthread_mutex_unlock(&m->mu);
				free(fl);
				return -ENOMEM;
			}
			fl->kind = kind;
			fl->key = key;
			fl->next = m->flights;
			m->flights = fl;
			pthread_mutex_unlock(&m->mu);
			rc =
			    perform(m, r, kind, key, deadline, stop, ret_files);
			pthread_mutex_lock(&m->mu);
			if (rc == 0 && kind == MF_SEGMENT)
				answered_add(m, key);
			fl->done = 1;
			fl->result = rc;
			flight_unlink(m, fl);
			pthread_cond_broadcast(&fl->cond);
			if (!fl->waiters)
				flight_free(fl);
			pthread_mutex_unlock(&m->mu);
			return rc;
		}
		fl->waiters++;
		flight_wait(m, fl, deadline, stop);
		done = fl->done;
		rc = fl->result;
		/* The performer unlinked it: the last waiter frees it. */
		if (--fl->waiters == 0 && done)
			flight_free(fl);
		pthread_mutex_unlock(&m->mu);
		if (!done)
			return cancelled(m, stop) ? -ECANCELED : -ETIMEDOUT;
		if (rc == 0)
			return 0;
		if ((rc != -EAGAIN && rc != -ETIMEDOUT && rc != -ECANCELED) ||
		    base_now_ns() >= deadline)
			return rc;
	}
}

/* ---- public ---- */

/* 1 when ino's manifest is still to come, 0 when it is local (or ino is
 * no pending file), or -errno. */
static int file_missing(hyd_manifest *m, cat_reader *r, uint64_t ino)
{
	int rc;

	if (!m || !r)
		return -EINVAL;
	rc = cat_manifest_state(r, ino);
	return rc < 0 ? rc : rc == CAT_MANIFEST_MISSING;
}

static int file_fetch(hyd_manifest *m, cat_reader *r, uint64_t ino,
		      uint64_t deadline, const int *stop, size_t *ret_files)
{
	int rc;

	if (ret_files)
		*ret_files = 0;
	rc = file_missing(m, r, ino);
	if (rc <= 0)
		return rc;
	return flight_run(m, r, MF_FILE, ino, deadline, stop, ret_files);
}

/* Segment seg's answer stored: joined when in flight, and not asked for
 * again once stored (the answer is the generation's, immutable; what it
 * left out is asked for file by file). */
static int segment_answer(hyd_manifest *m, cat_reader *r, uint64_t seg,
			  uint64_t deadline, const int *stop, size_t *ret_files)
{
	int known;

	*ret_files = 0;
	pthread_mutex_lock(&m->mu);
	known = answered_has(m, seg);
	pthread_mutex_unlock(&m->mu);
	return known ? 0
		     : flight_run(m, r, MF_SEGMENT, seg, deadline, stop,
				  ret_files);
}

int hyd_manifest_file(hyd_manifest *m, cat_reader *r, uint64_t ino,
		      uint64_t deadline_ns, const int *stop)
{
	return file_fetch(m, r, ino, deadline_ns, stop, NULL);
}

/* The first pending ino of [first, last] the overlay lacks: 1 with *ret,
 * 0 when none, -errno. */
static int next_missing(cat_reader *r, uint64_t first, uint64_t last,
			uint64_t *ret)
{
	size_t n = 0;
	int rc;

	rc = cat_pending_missing(r, first ? first - 1 : 0, ret, 1, &n);
	if (rc < 0)
		return rc;
	return n == 1 && *ret <= last;
}

int hyd_manifest_segment(hyd_manifest *m, cat_reader *r, uint64_t seg,
			 uint64_t deadline_ns, const int *stop,
			 size_t *ret_files)
{
	uint64_t first, last, ino;
	size_t files = 0, one = 0;
	int rc;

	if (ret_files)
		*ret_files = 0;
	if (!m || !r || seg > UINT64_MAX / HYD_MANIFEST_SEG_INOS - 1)
		return -EINVAL;
	first = seg * HYD_MANIFEST_SEG_INOS;
	last = first + HYD_MANIFEST_SEG_INOS - 1;
	rc = next_missing(r, first, last, &ino);
	if (rc <= 0)
		return rc;
	rc = segment_answer(m, r, seg, deadline_ns, stop, &files);
	/* What the answer left to the per-file endpoint, in ino order (an
	 * ino that fails ends the call: the rest would wait as long). */
	while (rc == 0 && (rc = next_missing(r, first, last, &ino)) == 1) {
		rc = file_fetch(m, r, ino, deadline_ns, stop, &one);
		files += one;
		first = ino + 1;
	}
	if (ret_files)
		*ret_files = files;
	return rc < 0 ? rc : 0;
}

int hyd_manifest_segment_for(hyd_manifest *m, cat_reader *r, uint64_t ino,
			     uint64_t deadline_ns, const int *stop,
			     size_t *ret_files)
{
	size_t files = 0, one = 0;
	int rc;

	if (ret_files)
		*ret_files = 0;
	rc = file_missing(m, r, ino);
	if (rc <= 0)
		return rc;
	rc = segment_answer(m, r, ino / HYD_MANIFEST_SEG_INOS, deadline_ns,
			    stop, &files);
	if (rc == 0)
		rc = file_fetch(m, r, ino, deadline_ns, stop, &one);
	if (ret_files)
		*ret_files = files + one;
	return rc < 0 ? rc : 0;
}

int hyd_manifest_new(const struct hyd_manifest_config *cfg, hyd_manifest **ret)
{
	hyd_manifest *m;
	size_t n;

	*ret = NULL;
	if (!cfg || !cfg->base_url || !cfg->ov)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->base_url = strdup(cfg->base_url);
	if (!m->base_url) {
		free(m);
		return -ENOMEM;
	}
	n = strlen(m->base_url);
	while (n && m->base_url[n - 1] == '/')
		m->base_url[--n] = '\0';
	m->ov = cfg->ov;
	m->connect_timeout_ms = cfg->connect_timeout_ms > 0
				    ? cfg->connect_timeout_ms
				    : CONNECT_TIMEOUT_MS_DEFAULT;
	m->wait_s = cfg->wait_s ? cfg->wait_s : HYD_MANIFEST_WAIT_S;
	m->creds = cfg->creds;
	m->counts = cfg->counts;
	if (hyd_trust_on(m->creds) &&
	    hyd_trust_url_ns(m->base_url, m->ns, sizeof(m->ns)) < 0) {
		free(m->base_url);
		free(m);
		return -EINVAL;
	}
	if (m->wait_s > WAIT_MAX_S)
		m->wait_s = WAIT_MAX_S;
	pthread_mutex_init(&m->mu, NULL);
	*ret = m;
	return 0;
}

void hyd_manifest_free(hyd_manifest *m)
{
	if (!m)
		return;
	/* Its requests run through m: stopped first. */
	hyd_mbulk_stop(m->bulk);
	while (m->npool)
		handle_free(m->pool[--m->npool]);
	free(m->answered);
	pthread_mutex_destroy(&m->mu);
	free(m->base_url);
	free(m);
}

void hyd_manifest_cancel(hyd_manifest *m)
{
	if (m)
		__atomic_store_n(&m->cancel, 1, __ATOMIC_RELAXED);
}

void hyd_manifest_stats(hyd_manifest *m, struct hyd_manifest_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (!m)
		return;
	ret->requests = __atomic_load_n(&m->st.requests, __ATOMIC_RELAXED);
	ret->not_ready = __atomic_load_n(&m->st.not_ready, __ATOMIC_RELAXED);
	ret->files = __atomic_load_n(&m->st.files, __ATOMIC_RELAXED);
	ret->bytes = __atomic_load_n(&m->st.bytes, __ATOMIC_RELAXED);
	ret->failures = __atomic_load_n(&m->st.failures, __ATOMIC_RELAXED);
}

static int prefetch(hyd_manifest *m, cat_reader *r, unsigned threads,
		    int asked_only)
{
	struct hyd_mbulk *b = NULL;
	int e;

	if (__atomic_load_n(&m->bulk, __ATOMIC_ACQUIRE))
		return 0;
	e = asked_only ? hyd_mbulk_start_asked(m, r, threads, &b)
		       : hyd_mbulk_start(m, r, threads, &b);
	if (e < 0)
		return e;
	__atomic_store_n(&m->bulk, b, __ATOMIC_RELEASE);
	return 0;
}

int hyd_manifest_prefetch(hyd_manifest *m, cat_reader *r, unsigned threads)
{
	return prefetch(m, r, threads, 0);
}

int hyd_manifest_prefetch_asked(hyd_manifest *m, cat_reader *r,
				unsigned threads)
{
	return prefetch(m, r, threads, 1);
}

void hyd_manifest_want(hyd_manifest *m, uint64_t ino)
{
	if (m)
		hyd_mbulk_want(__atomic_load_n(&m->bulk, __ATOMIC_ACQUIRE),
			       ino);
}

void hyd_manifest_prefetch_progress(hyd_manifest *m, uint64_t *ret_segments,
				    uint64_t *ret_files, int *ret_running)
{
	struct hyd_mbulk *b =
	    m ? __atomic_load_n(&m->bulk, __ATOMIC_ACQUIRE) : NULL;

	*ret_segments = *ret_files = 0;
	*ret_running = 0;
	if (b)
		hyd_mbulk_progress(b, ret_segments, ret_files, ret_running);
}
