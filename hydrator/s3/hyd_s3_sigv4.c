/*
 * hydrator/s3/hyd_s3_sigv4.c — AWS Signature Version 4, as S3 checks it:
 * the canonical request (method, the path as sent, the query sorted and
 * re-encoded, the signed headers trimmed, the payload hash the client
 * declared), the string to sign, the HMAC-SHA256 key chain, and the check
 * of a request's Authorization header or presigned query.
 *
 * The payload hash is taken as declared (x-amz-content-sha256): the server
 * reads no request body (every operation here is a GET or a HEAD), so
 * there is nothing to compare it with. Signatures are compared with
 * CRYPTO_memcmp; secrets are never logged.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "hydrator/s3/hyd_s3.h"

#define SIG_QUERY_PARAMS_MAX 64u

static int hmac(const void *key, size_t klen, const char *msg, uint8_t out[32])
{
	unsigned int olen = 0;

	if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg,
		  strlen(msg), out, &olen) ||
	    olen != 32)
		return -EIO;
	return 0;
}

int hyd_s3_sigv4_key(const char *secret, const char *date, const char *region,
		     const char *service, uint8_t ret[32])
{
	char k0[4 + 129];
	uint8_t k[32];
	int r;

	if (snprintf(k0, sizeof(k0), "AWS4%s", secret) >= (int)sizeof(k0))
		return -EINVAL;
	r = hmac(k0, strlen(k0), date, k);
	if (r == 0)
		r = hmac(k, 32, region, k);
	if (r == 0)
		r = hmac(k, 32, service, k);
	if (r == 0)
		r = hmac(k, 32, "aws4_request", ret);
	OPENSSL_cleanse(k0, sizeof(k0));
	OPENSSL_cleanse(k, sizeof(k));
	return r;
}

const char *hyd_s3_req_header(const struct hyd_s3_req *rq, const char *lname)
{
	size_t i;

	for (i = 0; i < rq->nhdr; i++)
		if (strcmp(rq->hdr[i].name, lname) == 0)
			return rq->hdr[i].value;
	return NULL;
}

/* One query parameter, encoded canonically. */
struct qparam {
	struct base_buf k, v;
};

static int qparam_cmp(const void *a, const void *b)
{
	const struct qparam *x = a, *y = b;
	int c = strcmp(x->k.buf, y->k.buf);

	return c ? c : strcmp(x->v.buf, y->v.buf);
}

/* Decode name and value of s[0..n) and encode them canonically. */
static int qparam_set(struct qparam *q, const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	size_t kl = eq ? (size_t)(eq - s) : n;
	size_t vl = eq ? n - kl - 1 : 0;
	char *tmp = malloc(n + 1);
	int r = -ENOMEM;

	if (!tmp)
		return r;
	r = hyd_s3_uri_decode(s, kl, tmp, 1);
	if (r == 0) {
		hyd_s3_uri_add(&q->k, tmp, strlen(tmp), 0);
		base_buf_add(&q->k, "", 0);
		r = hyd_s3_uri_decode(eq ? eq + 1 : "", vl, tmp, 1);
	}
	if (r == 0) {
		hyd_s3_uri_add(&q->v, tmp, strlen(tmp), 0);
		base_buf_add(&q->v, "", 0);
		r = q->k.err ? q->k.err : q->v.err;
	}
	free(tmp);
	return r;
}

/* The canonical query string of query into b. */
static int canonical_query(const char *query, int skip_sig, struct base_buf *b)
{
	struct qparam q[SIG_QUERY_PARAMS_MAX];
	size_t n = 0, i;
	const char *p = query;
	int r = 0;

	memset(q, 0, sizeof(q));
	while (*p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);

		if (len > 0 &&
		    !(skip_sig && strncmp(p, "X-Amz-Signature=", 16) == 0)) {
			if (n == SIG_QUERY_PARAMS_MAX) {
				r = -EINVAL;
				goto out;
			}
			r = qparam_set(&q[n++], p, len);
			if (r < 0)
				goto out;
		}
		p += len + (amp ? 1 : 0);
	}
	qsort(q, n, sizeof(q[0]), qparam_cmp);
	for (i = 0; i < n; i++) {
		if (i)
			base_buf_add(b, "&", 1);
		base_buf_str(b, q[i].k.buf);
		base_buf_add(b, "=", 1);
		base_buf_str(b, q[i].v.buf);
	}
out:
	for (i = 0; i < n; i++) {
		base_buf_fini(&q[i].k);
		base_buf_fini(&q[i].v);
	}
	return r;
}

/* A header's value, trimmed, inner runs of spaces made one. */
static void header_value_add(struct base_buf *b, const char *v)
{
	int space = 0;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space)
			base_buf_add(b, " ", 1);
		space = 0;
		base_buf_add(b, v, 1);
	}
}

/* "name:value\n" of every header named lname (several: joined with ','). */
static int canonical_header(const struct hyd_s3_req *rq, const char *lname,
			    struct base_buf *b)
{
	size_t i;
	int found = 0;

	for (i = 0; i < rq->nhdr; i++) {
		if (strcmp(rq->hdr[i].name, lname) != 0)
			continue;
		base_buf_str(b, found ? "," : lname);
		if (!found)
			base_buf_add(b, ":", 1);
		header_value_add(b, rq->hdr[i].value);
		found = 1;
	}
	if (!found)
		return -EINVAL;
	base_buf_add(b, "\n", 1);
	return 0;
}

int hyd_s3_sigv4_canonical(const struct hyd_s3_req *rq,
			   const char *signed_headers, const char *payload,
			   int skip_sig, struct base_buf *b)
{
	const char *p = signed_headers;
	char name[128];
	int r;

	base_buf_printf(b, "%s\n%s\n", rq->method, rq->path);
	r = canonical_query(rq->query, skip_sig, b);
	if (r < 0)
		return r;
	base_buf_add(b, "\n", 1);
	while (*p) {
		size_t len = strcspn(p, ";");

		if (len == 0 || len >= sizeof(name))
			return -EINVAL;
		memcpy(name, p, len);
		name[len] = '\0';
		r = canonical_header(rq, name, b);
		if (r < 0)
			return r;
		p += len + (p[len] ? 1 : 0);
	}
	base_buf_printf(b, "\n%s\n%s", signed_headers, payload);
	return b->err;
}

int hyd_s3_sigv4_sign(const uint8_t k[32], const char *amz_date,
		      const char *scope, const char *canonical,
		      char ret_hex[65])
{
	uint8_t h[32], sig[32];
	char hh[65];
	struct base_buf sts = {0};
	int r = -EIO;

	if (!EVP_Digest(canonical, strlen(canonical), h, NULL, EVP_sha256(),
			NULL))
		return -EIO;
	base_hex_encode(h, 32, hh);
	base_buf_printf(&sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, scope,
			hh);
	if (sts.err == 0 && hmac(k, 32, sts.buf, sig) == 0) {
		base_hex_encode(sig, 32, ret_hex);
		r = 0;
	}
	base_buf_fini(&sts);
	return r;
}

/* The parts of a signature, from the header or the query. */
struct sig_parts {
	char access[129];
	char date[9], region[64], service[16];
	char scope[256];
	char signed_headers[1024];
	char signature[65];
	char amz_date[17];
	int presigned;
	int64_t expires;
};

/* Copy the value after "key=" in s (up to a ',' or end) into out. */
static int auth_field(const char *s, const char *key, char *out, size_t cap)
{
	const char *p = strstr(s, key);
	size_t len;

	if (!p)
		return -EINVAL;
	p += strlen(key);
	len = strcspn(p, ", ");
	if (len == 0 || len >= cap)
		return -EINVAL;
	memcpy(out, p, len);
	out[len] = '\0';
	return 0;
}

/* Split "AK/DATE/REGION/SERVICE/aws4_request" into sp. */
static int credential_split(const char *cred, struct sig_parts *sp)
{
	char tmp[512], *parts[5], *save = NULL, *t;
	size_t n = 0;

	if (snprintf(tmp, sizeof(tmp), "%s", cred) >= (int)sizeof(tmp))
		return -EINVAL;
	for (t = strtok_r(tmp, "/", &save); t && n < 5;
	     t = strtok_r(NULL, "/", &save))
		parts[n++] = t;
	if (n != 5 || t || strcmp(parts[4], "aws4_request") != 0 ||
	    strlen(parts[1]) != 8 ||
	    snprintf(sp->access, sizeof(sp->access), "%s", parts[0]) >=
		(int)sizeof(sp->access) ||
	    snprintf(sp->region, sizeof(sp->region), "%s", parts[2]) >=
		(int)sizeof(sp->region) ||
	    snprintf(sp->service, sizeof(sp->service), "%s", parts[3]) >=
		(int)sizeof(sp->service))
		return -EINVAL;
	memcpy(sp->date, parts[1], 9);
	snprintf(sp->scope, sizeof(sp->scope), "%s/%s/%s/aws4_request",
		 sp->date, sp->region, sp->service);
	return 0;
}

/* The decoded value of query parameter name, into out. */
static int query_param(const char *query, const char *name, char *out,
		       size_t cap)
{
	size_t nl = strlen(name);
	const char *p = query;

	while (*p) {
		size_t len = strcspn(p, "&");

		if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
			if (len - nl - 1 >= cap)
				return -EINVAL;
			return hyd_s3_uri_decode(p + nl + 1, len - nl - 1, out,
						 1);
		}
		p += len + (p[len] ? 1 : 0);
	}
	return -ENOENT;
}

static int parts_from_header(const char *auth, const struct hyd_s3_req *rq,
			     struct sig_parts *sp)
{
	char cred[512];
	const char *d = hyd_s3_req_header(rq, "x-amz-date");

	if (strncmp(auth, "AWS4-HMAC-SHA256 ", 17) != 0 ||
	    auth_field(auth, "Credential=", cred, sizeof(cred)) < 0 ||
	    credential_split(cred, sp) < 0 ||
	    auth_field(auth, "SignedHeaders=", sp->signed_headers,
		       sizeof(sp->signed_headers)) < 0 ||
	    auth_field(auth, "Signature=", sp->signature,
		       sizeof(sp->signature)) < 0 ||
	    strlen(sp->signature) != 64 || !d ||
	    snprintf(sp->amz_date, sizeof(sp->amz_date), "%s", d) != 16)
		return -EINVAL;
	return 0;
}

static int parts_from_query(const char *query, struct sig_parts *sp)
{
	char cred[512], exp[16];
	uint64_t e;

	sp->presigned = 1;
	if (query_param(query, "X-Amz-Credential", cred, sizeof(cred)) < 0 ||
	    credential_split(cred, sp) < 0 ||
	    query_param(query, "X-Amz-SignedHeaders", sp->signed_headers,
			sizeof(sp->signed_headers)) < 0 ||
	    query_param(query, "X-Amz-Signature", sp->signature,
			sizeof(sp->signature)) < 0 ||
	    strlen(sp->signature) != 64 ||
	    query_param(query, "X-Amz-Date", sp->amz_date,
			sizeof(sp->amz_date)) < 0 ||
	    strlen(sp->amz_date) != 16 ||
	    query_param(query, "X-Amz-Expires", exp, sizeof(exp)) < 0 ||
	    base_parse_u64(exp, 1, 604800, &e) < 0)
		return -EINVAL;
	sp->expires = (int64_t)e;
	return 0;
}

/* YYYYMMDDTHHMMSSZ as Unix seconds; -1 when malformed. */
static int64_t amz_time(const char *s)
{
	struct tm tm;
	const char *end;

	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%Y%m%dT%H%M%SZ", &tm);
	if (!end || *end)
		return -1;
	return (int64_t)timegm(&tm);
}

static int deny(const char *code, int status, const char **ret_code,
		int *ret_status)
{
	*ret_code = code;
	*ret_status = status;
	return -EACCES;
}

int hyd_s3_sigv4_check(const struct hyd_s3_keys *keys,
		       const struct hyd_s3_req *rq, int64_t now,
		       const char **ret_code, int *ret_status)
{
	const char *auth = hyd_s3_req_header(rq, "authorization");
	const char *payload = "UNSIGNED-PAYLOAD";
	const struct hyd_s3_key *key = NULL;
	struct sig_parts sp;
	struct base_buf canon = {0};
	uint8_t k[32];
	char sig[65];
	int64_t t;
	size_t i;
	int r;

	memset(&sp, 0, sizeof(sp));
	if (auth)
		r = parts_from_header(auth, rq, &sp);
	else if (strstr(rq->query, "X-Amz-Signature="))
		r = parts_from_query(rq->query, &sp);
	else
		return deny("AccessDenied", 403, ret_code, ret_status);
	if (r < 0 || strncmp(sp.amz_date, sp.date, 8) != 0)
		return deny("AuthorizationHeaderMalformed", 400, ret_code,
			    ret_status);
	t = amz_time(sp.amz_date);
	if (t < 0)
		return deny("AuthorizationHeaderMalformed", 400, ret_code,
			    ret_status);
	if (sp.presigned ? (now + HYD_S3_SKEW_S < t || now > t + sp.expires)
			 : (t > now + HYD_S3_SKEW_S || t < now - HYD_S3_SKEW_S))
		return deny(sp.presigned ? "AccessDenied"
					 : "RequestTimeTooSkewed",
			    403, ret_code, ret_status);
	for (i = 0; i < keys->n; i++)
		if (strcmp(keys->v[i].access, sp.access) == 0)
			key = &keys->v[i];
	if (!key)
		return deny("InvalidAccessKeyId", 403, ret_code, ret_status);
	if (!sp.presigned) {
		payload = hyd_s3_req_header(rq, "x-amz-content-sha256");
		if (!payload)
			return deny("AuthorizationHeaderMalformed", 400,
				    ret_code, ret_status);
	}
	r = hyd_s3_sigv4_canonical(rq, sp.signed_headers, payload, sp.presigned,
				   &canon);
	if (r == 0)
		r = hyd_s3_sigv4_key(key->secret, sp.date, sp.region,
				     sp.service, k);
	if (r == 0)
		r = hyd_s3_sigv4_sign(k, sp.amz_date, sp.scope, canon.buf, sig);
	OPENSSL_cleanse(k, sizeof(k));
	base_buf_fini(&canon);
	if (r < 0 || CRYPTO_memcmp(sig, sp.signature, 64) != 0)
		return deny("SignatureDoesNotMatch", 403, ret_code, ret_status);
	return 0;
}
