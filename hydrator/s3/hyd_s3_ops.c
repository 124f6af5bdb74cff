/*
 * hydrator/s3/hyd_s3_ops.c — one S3 request to one operation: the
 * signature check, then by path and query ListBuckets, HeadBucket,
 * GetBucketLocation, ListObjects (V1) and ListObjectsV2, and the object
 * operations of hyd_s3_object.c. Writes are MethodNotAllowed; any other
 * sub-resource is NotImplemented.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/s3/hyd_s3_conn_priv.h"

#define S3_XMLNS "http://s3.amazonaws.com/doc/2006-03-01/"
#define S3_KEY_MAX 4096u

/* Sub-resources this server does not implement (a bucket's or an
 * object's configuration, versions, multipart uploads...). */
static const char *const UNSUPPORTED[] = {
    "acl",
    "policy",
    "versioning",
    "versions",
    "uploads",
    "uploadId",
    "tagging",
    "lifecycle",
    "cors",
    "website",
    "logging",
    "replication",
    "encryption",
    "notification",
    "requestPayment",
    "accelerate",
    "analytics",
    "inventory",
    "metrics",
    "object-lock",
    "legal-hold",
    "retention",
    "torrent",
    "restore",
    "select",
    "attributes",
    "ownershipControls",
    "publicAccessBlock",
    "intelligent-tiering",
    "policyStatus",
    "delete",
    NULL,
};

/* The decoded value of query parameter name into out; 1 found, 0 not,
 * -EINVAL (bad escape or too long). */
static int qget(const char *query, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	const char *p = query;

	while (*p) {
		size_t len = strcspn(p, "&");

		if (len >= nl && strncmp(p, name, nl) == 0 &&
		    (len == nl || p[nl] == '=')) {
			size_t vl = len > nl ? len - nl - 1 : 0;

			if (vl >= cap)
				return -EINVAL;
			if (hyd_s3_uri_decode(p + nl + 1, vl, out, 1) < 0)
				return -EINVAL;
			if (len == nl)
				out[0] = '\0';
			return 1;
		}
		p += len + (p[len] ? 1 : 0);
	}
	return 0;
}

static const char *unsupported_sub(const char *query)
{
	char v[8];
	size_t i;

	for (i = 0; UNSUPPORTED[i]; i++)
		if (qget(query, UNSUPPORTED[i], v, sizeof(v)) != 0)
			return UNSUPPORTED[i];
	return NULL;
}

static int list_buckets(struct hyd_s3_conn *c, int head_only)
{
	const struct hyd_s3_src *src = &c->s->src;
	struct base_buf b = {0};
	char date[40];
	int r;

	hyd_s3_iso_date(src->created_ns / 1000000000, date);
	base_buf_str(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			 "<ListAllMyBucketsResult xmlns=\"" S3_XMLNS "\">"
			 "<Owner><ID>ferry</ID><DisplayName>ferry"
			 "</DisplayName></Owner><Buckets><Bucket><Name>");
	hyd_s3_xml_add(&b, src->bucket);
	base_buf_printf(&b,
			"</Name><CreationDate>%s</CreationDate></Bucket>"
			"</Buckets></ListAllMyBucketsResult>",
			date);
	r = b.err ? b.err
		  : hyd_s3__send(c, 200, "application/xml", "", b.buf, b.len,
				 head_only);
	base_buf_fini(&b);
	return r;
}

/* The parameters of a listing. */
struct list_args {
	int v2, url_enc;
	char prefix[S3_KEY_MAX + 1], delim[64];
	char token[2 * S3_KEY_MAX + 1], start_after[S3_KEY_MAX + 1];
	char marker[S3_KEY_MAX + 1]; /* what paging starts after */
	size_t max_keys;
};

/* s into b: XML, URL-encoded first when the client asked for it. */
static void list_str(struct base_buf *b, const struct list_args *a,
		     const char *s, size_t n)
{
	struct base_buf t = {0};

	base_buf_add(&t, s, n);
	if (a->url_enc && !t.err) {
		struct base_buf u = {0};

		hyd_s3_uri_add(&u, t.buf, t.len, 1);
		base_buf_add(&u, "", 0);
		base_buf_fini(&t);
		t = u;
	}
	if (t.err)
		b->err = t.err;
	else
		hyd_s3_xml_add(b, t.buf);
	base_buf_fini(&t);
}

static void list_elem(struct base_buf *b, const struct list_args *a,
		      const char *tag, const char *s)
{
	base_buf_printf(b, "<%s>", tag);
	list_str(b, a, s, strlen(s));
	base_buf_printf(b, "</%s>", tag);
}

/* A continuation token (hex) back to the key it names. */
static int unhex(const char *s, char *out, size_t cap)
{
	size_t n = strlen(s), i;

	if (n % 2 || n / 2 >= cap)
		return -EINVAL;
	for (i = 0; i < n / 2; i++) {
		int hi = base_hex_digit(s[2 * i]),
		    lo = base_hex_digit(s[2 * i + 1]);

		if (hi < 0 || lo < 0 || (hi | lo) == 0)
			return -EINVAL;
		out[i] = (char)(hi * 16 + lo);
	}
	out[n / 2] = '\0';
	return 0;
}

static void list_body(struct base_buf *b, const struct list_args *a,
		      const struct hyd_s3_ents *e, const struct hyd_s3_item *it,
		      size_t n, int truncated, const char *bucket)
{
	size_t i;

	base_buf_str(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			"<ListBucketResult xmlns=\"" S3_XMLNS "\"><Name>");
	hyd_s3_xml_add(b, bucket);
	base_buf_str(b, "</Name>");
	list_elem(b, a, "Prefix", a->prefix);
	if (a->delim[0])
		list_elem(b, a, "Delimiter", a->delim);
	base_buf_printf(b, "<MaxKeys>%zu</MaxKeys>", a->max_keys);
	if (a->url_enc)
		base_buf_str(b, "<EncodingType>url</EncodingType>");
	base_buf_printf(b, "<IsTruncated>%s</IsTruncated>",
			truncated ? "true" : "false");
	if (a->v2) {
		base_buf_printf(b, "<KeyCount>%zu</KeyCount>", n);
		if (a->token[0]) {
			base_buf_str(b, "<ContinuationToken>");
			hyd_s3_xml_add(b, a->token);
			base_buf_str(b, "</ContinuationToken>");
		}
		if (a->start_after[0])
			list_elem(b, a, "StartAfter", a->start_after);
	} else {
		list_elem(b, a, "Marker", a->marker);
	}
	if (truncated && n > 0) {
		const struct hyd_s3_item *last = &it[n - 1];
		const char *k = e->v[last->ent].key;
		char mk[S3_KEY_MAX + 1], *tok;
		size_t ml = last->plen ? last->plen : strlen(k);

		if (ml > S3_KEY_MAX)
			ml = S3_KEY_MAX;
		memcpy(mk, k, ml);
		mk[ml] = '\0';
		if (a->v2) {
			tok = malloc(2 * ml + 1);
			if (!tok) {
				b->err = -ENOMEM;
				return;
			}
			base_hex_encode(mk, ml, tok);
			base_buf_printf(b,
					"<NextContinuationToken>%s"
					"</NextContinuationToken>",
					tok);
			free(tok);
		} else {
			list_elem(b, a, "NextMarker", mk);
		}
	}
	for (i = 0; i < n; i++) {
		const struct hyd_s3_ent *x = &e->v[it[i].ent];
		char date[40];

		if (it[i].plen)
			continue;
		hyd_s3_iso_date(x->mtime_ns / 1000000000, date);
		base_buf_str(b, "<Contents><Key>");
		list_str(b, a, x->key, strlen(x->key));
		base_buf_printf(b,
				"</Key><LastModified>%s</LastModified>"
				"<Size>%llu</Size><StorageClass>STANDARD"
				"</StorageClass></Contents>",
				date, (unsigned long long)x->size);
	}
	for (i = 0; i < n; i++) {
		if (!it[i].plen)
			continue;
		base_buf_str(b, "<CommonPrefixes><Prefix>");
		list_str(b, a, e->v[it[i].ent].key, it[i].plen);
		base_buf_str(b, "</Prefix></CommonPrefixes>");
	}
	base_buf_str(b, "</ListBucketResult>");
}

/* Parse the listing's parameters; 0, or -EINVAL with *ret_msg. */
static int list_args_parse(const char *query, struct list_args *a,
			   const char **ret_msg)
{
	char v[32];
	uint64_t mk;
	int r;

	memset(a, 0, sizeof(*a));
	a->max_keys = HYD_S3_MAX_KEYS;
	r = qget(query, "list-type", v, sizeof(v));
	a->v2 = r == 1 && strcmp(v, "2") == 0;
	if (qget(query, "prefix", a->prefix, sizeof(a->prefix)) < 0 ||
	    qget(query, "delimiter", a->delim, sizeof(a->delim)) < 0 ||
	    qget(query, "start-after", a->start_after, sizeof(a->start_after)) <
		0 ||
	    qget(query, "continuation-token", a->token, sizeof(a->token)) < 0 ||
	    qget(query, "marker", a->marker, sizeof(a->marker)) < 0) {
		*ret_msg = "a listing parameter is malformed or too long";
		return -EINVAL;
	}
	r = qget(query, "max-keys", v, sizeof(v));
	if (r != 0) {
		if (r < 0 || base_parse_u64(v, 0, UINT64_MAX, &mk) < 0) {
			*ret_msg = "max-keys is not a number";
			return -EINVAL;
		}
		a->max_keys = mk > HYD_S3_MAX_KEYS ? HYD_S3_MAX_KEYS : mk;
	}
	r = qget(query, "encoding-type", v, sizeof(v));
	if (r == 1 && strcmp(v, "url") != 0) {
		*ret_msg = "encoding-type must be url";
		return -EINVAL;
	}
	a->url_enc = r == 1;
	if (a->v2) {
		a->marker[0] = '\0';
		if (a->token[0]) {
			if (unhex(a->token, a->marker, sizeof(a->marker)) < 0) {
				*ret_msg = "the continuation token is not "
					   "one this server gave";
				return -EINVAL;
			}
		} else if (a->start_after[0]) {
			memcpy(a->marker, a->start_after,
			       strlen(a->start_after) + 1);
		}
	}
	return 0;
}

static int list_objects(struct hyd_s3_conn *c, const struct hyd_s3_req *rq,
			const char *resource, int head_only)
{
	struct list_args *a = malloc(sizeof(*a));
	struct hyd_s3_listing *l = NULL;
	struct hyd_s3_item *it = NULL;
	struct base_buf b = {0};
	struct hyd_gen *g = NULL;
	const char *msg = NULL;
	size_t n = 0;
	int truncated = 0, r;

	if (!a)
		return -ENOMEM;
	if (list_args_parse(rq->query, a, &msg) < 0) {
		r = hyd_s3__send_error(c, 400, "InvalidArgument", msg, resource,
				       head_only);
		goto out;
	}
	g = hyd_fs_gen(c->s->src.fs);
	r = hyd_s3_list_get(&c->s->lists, g, a->prefix,
			    strcmp(a->delim, "/") == 0, &l);
	it = calloc(a->max_keys ? a->max_keys : 1, sizeof(*it));
	if (r < 0 || !it) {
		base_log_err(BASE_LOG_ERROR, r < 0 ? r : -ENOMEM,
			     "s3: cannot list prefix=%s", a->prefix);
		r = hyd_s3__send_error(c, 500, "InternalError",
				       "cannot read the catalog", resource,
				       head_only);
		goto out;
	}
	hyd_s3_list_page(&l->e, a->prefix, a->delim, a->marker, a->max_keys, it,
			 &n, &truncated);
	list_body(&b, a, &l->e, it, n, truncated, c->s->src.bucket);
	r = b.err ? b.err
		  : hyd_s3__send(c, 200, "application/xml", "", b.buf, b.len,
				 head_only);
out:
	hyd_s3_listing_unref(&c->s->lists, l);
	hyd_gen_unref(g);
	base_buf_fini(&b);
	free(it);
	free(a);
	return r;
}

static int bucket_op(struct hyd_s3_conn *c, const struct hyd_s3_req *rq,
		     const char *resource, int head_only)
{
	static const char LOCATION[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<LocationConstraint xmlns=\"" S3_XMLNS "\"/>";
	const char *sub = unsupported_sub(rq->query);
	char v[8];

	if (head_only && !rq->query[0])
		return hyd_s3__send(c, 200, "application/xml", "", "", 0, 1);
	if (sub)
		return hyd_s3__send_error(c, 501, "NotImplemented",
					  "this sub-resource is not "
					  "implemented (read-only S3)",
					  resource, head_only);
	if (qget(rq->query, "location", v, sizeof(v)) == 1)
		return hyd_s3__send(c, 200, "application/xml", "", LOCATION,
				    sizeof(LOCATION) - 1, head_only);
	return list_objects(c, rq, resource, head_only);
}

int hyd_s3__serve(struct hyd_s3_conn *c, const struct hyd_s3_req *rq)
{
	const struct hyd_s3_src *src = &c->s->src;
	int head_only = strcmp(rq->method, "HEAD") == 0;
	size_t plen = strlen(rq->path);
	char *path = NULL, *key;
	int r;

	if (strcmp(rq->method, "GET") != 0 && !head_only) {
		int write = strcmp(rq->method, "PUT") == 0 ||
			    strcmp(rq->method, "POST") == 0 ||
			    strcmp(rq->method, "DELETE") == 0 ||
			    strcmp(rq->method, "PATCH") == 0;

		hyd_s3__send_error(c, write ? 405 : 501,
				   write ? "MethodNotAllowed"
					 : "NotImplemented",
				   write ? "this S3 endpoint is read-only"
					 : "this method is not implemented",
				   rq->path, 0);
		return -EPERM; /* a body may follow: do not read it */
	}
	if (src->keys) {
		const char *code;
		int status;

		if (hyd_s3_sigv4_check(src->keys, rq,
				       base_wall_ns() / 1000000000, &code,
				       &status) < 0) {
			base_debug("s3: denied path=%s code=%s", rq->path,
				   code);
			return hyd_s3__send_error(c, status, code,
						  "the request is not signed "
						  "with a known key",
						  rq->path, head_only);
		}
	}
	path = malloc(plen + 1);
	if (!path)
		return -ENOMEM;
	if (rq->path[0] != '/' ||
	    hyd_s3_uri_decode(rq->path, plen, path, 0) < 0) {
		r = hyd_s3__send_error(c, 400, "InvalidURI",
				       "the path cannot be decoded", rq->path,
				       head_only);
		goto out;
	}
	if (path[1] == '\0') {
		r = list_buckets(c, head_only);
		goto out;
	}
	key = strchr(path + 1, '/');
	if (key)
		*key++ = '\0';
	if (strcmp(path + 1, src->bucket) != 0) {
		r = hyd_s3__send_error(c, 404, "NoSuchBucket",
				       "the bucket does not exist", rq->path,
				       head_only);
		goto out;
	}
	if (!key || !*key)
		r = bucket_op(c, rq, rq->path, head_only);
	else if (unsupported_sub(rq->query))
		r = hyd_s3__send_error(c, 501, "NotImplemented",
				       "this sub-resource is not implemented "
				       "(read-only S3)",
				       rq->path, head_only);
	else
		r = hyd_s3__object(c, rq, key, rq->path, head_only);
out:
	free(path);
	return r;
}
