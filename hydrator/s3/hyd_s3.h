/*
 * hydrator/s3/hyd_s3.h — ferry-hydrator --s3-listen HOST:PORT:
 * a read-only S3-compatible API over the mounted namespace (docs/s3.md).
 *
 * The bucket is the namespace name; keys are the paths of the tree's
 * regular files. Objects are read through the mount's own read path
 * (hyd_fs_file_get + hyd_read_open_iov, the read room's FUSE-free face
 * hyd_read.h): a chunk fetched for an S3 client is verified and stored
 * once, and the mount then finds it stored.
 *
 * The pieces:
 *   hyd_s3_xml.c     XML escaping, URI encoding, S3's error body, dates
 *   hyd_s3_sigv4.c   AWS Signature Version 4: canonical request, key, check
 *   hyd_s3_keys.c    --s3-keys FILE
 *   hyd_s3_list.c    ListObjects(V2) paging over sorted keys, tree walk
 *   hyd_s3_object.c  key -> file, ETag, Range, streaming a body
 *   hyd_s3_ops.c     routing one request to an operation
 *   hyd_s3_http.c    the server: accept thread, one thread per connection,
 *                    on catalog/httpd's listener, reader, limits and
 *                    response writer
 */
#ifndef FERRY_HYD_S3_H
#define FERRY_HYD_S3_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/read/hyd_read.h"

/* Bodies and canonical requests are built in a struct base_buf. */

/* ---- encodings (hyd_s3_xml.c) ---- */

/* s as XML character data: & < > " ' escaped; bytes below 0x20 other
 * than tab, LF and CR (not allowed in XML 1.0) as &#xNN; references,
 * which S3 clients accept. */
void hyd_s3_xml_add(struct base_buf *b, const char *s);
/* s URI-encoded the SigV4 way: A-Z a-z 0-9 - _ . ~ kept, everything else
 * %XX (upper-case hex); '/' kept when keep_slash. */
void hyd_s3_uri_add(struct base_buf *b, const char *s, size_t n,
		    int keep_slash);
/* Percent-decode s[0..n) into out (room for n + 1 bytes), NUL-terminated;
 * '+' is a space when plus. -EINVAL: a bad escape or a decoded NUL. */
int hyd_s3_uri_decode(const char *s, size_t n, char *out, int plus);
/* An S3 error body: Code, Message, Resource, RequestId. */
void hyd_s3_xml_error(struct base_buf *b, const char *code, const char *msg,
		      const char *resource, const char *request_id);
/* Unix seconds as an RFC 7231 date ("Sun, 06 Nov 1994 08:49:37 GMT")
 * and as ISO 8601 with milliseconds ("1994-11-06T08:49:37.000Z"). */
void hyd_s3_http_date(int64_t sec, char out[40]);
void hyd_s3_iso_date(int64_t sec, char out[40]);

/* ---- requests ---- */

#define HYD_S3_HDRS_MAX 64u

struct hyd_s3_hdr {
	char *name; /* lower-case */
	char *value;
};

/* One parsed request; every string points into the connection's
 * buffers and lives until the next request on it. */
struct hyd_s3_req {
	const char *method; /* "GET", "HEAD", ... */
	char *path;	    /* raw, as sent (still percent-encoded) */
	char *query;	    /* raw, without '?'; "" when none */
	struct hyd_s3_hdr hdr[HYD_S3_HDRS_MAX];
	size_t nhdr;
};

/* The value of header lname (lower-case), or NULL. */
const char *hyd_s3_req_header(const struct hyd_s3_req *rq, const char *lname);

/* ---- keys (hyd_s3_keys.c) ---- */

struct hyd_s3_key {
	char access[129];
	char secret[129];
};
struct hyd_s3_keys {
	struct hyd_s3_key *v;
	size_t n;
};

/* Read FILE: lines "ACCESS_KEY SECRET", '#' comments, blank lines.
 * -ENOENT/-EACCES (cannot read), -EINVAL (a malformed line: logged with
 * its number, never its text), -ENOMEM. No key at all is -EINVAL. */
int hyd_s3_keys_load(const char *path, struct hyd_s3_keys *ret);
/* Wipe and free the secrets. */
void hyd_s3_keys_fini(struct hyd_s3_keys *k);

/* ---- Signature Version 4 (hyd_s3_sigv4.c); any thread ---- */

/* kSigning = HMAC chain over "AWS4"+secret, date (YYYYMMDD), region,
 * service, "aws4_request". 0 or -EIO. */
int hyd_s3_sigv4_key(const char *secret, const char *date, const char *region,
		     const char *service, uint8_t ret[32]);

/* The canonical request of rq (method, raw path, canonical query, the
 * headers named in signed_headers ("a;b;c", lower-case, sorted), payload
 * hash) into b. With skip_sig, X-Amz-Signature is left out of the query
 * (presigned URLs). 0 or -EINVAL (a signed header is missing, a bad
 * query escape). */
int hyd_s3_sigv4_canonical(const struct hyd_s3_req *rq,
			   const char *signed_headers, const char *payload,
			   int skip_sig, struct base_buf *b);

/* The hex signature of canonical under key k, amz_date and scope
 * ("DATE/REGION/SERVICE/aws4_request"). 0 or -EIO. */
int hyd_s3_sigv4_sign(const uint8_t k[32], const char *amz_date,
		      const char *scope, const char *canonical,
		      char ret_hex[65]);

/* Check rq's signature (Authorization header, or a presigned query)
 * against keys at now (Unix seconds). 0: valid. Else -EACCES with
 * *ret_code an S3 error code (AccessDenied, InvalidAccessKeyId,
 * SignatureDoesNotMatch, RequestTimeTooSkewed,
 * AuthorizationHeaderMalformed) and *ret_status 400 or 403. */
int hyd_s3_sigv4_check(const struct hyd_s3_keys *keys,
		       const struct hyd_s3_req *rq, int64_t now,
		       const char **ret_code, int *ret_status);

/* Clock skew tolerated, seconds. */
#define HYD_S3_SKEW_S (15 * 60)

/* ---- listing (hyd_s3_list.c) ---- */

/* One candidate of a listing: a regular file's key, or (dir) a
 * directory's key with a trailing '/', which only a '/' delimiter shows
 * (as a CommonPrefix). */
struct hyd_s3_ent {
	char *key; /* owned by the array */
	uint64_t size;
	int64_t mtime_ns;
	uint64_t ino;
	int dir;
};

struct hyd_s3_ents {
	struct hyd_s3_ent *v;
	size_t n, cap;
};
void hyd_s3_ents_fini(struct hyd_s3_ents *e);
/* Add a copy of key; 0 or -ENOMEM. */
int hyd_s3_ents_add(struct hyd_s3_ents *e, const char *key, size_t klen,
		    const struct cat_inode *in, int dir);
/* Sort by key, bytewise (S3's order). */
void hyd_s3_ents_sort(struct hyd_s3_ents *e);

/* The candidates for prefix into e (unsorted): the regular files under
 * the deepest directory prefix names, walked recursively, or with
 * slash_delim its entries alone (directories as dir entries). 0, or the
 * catalog's -errno; a prefix that names no directory gives none. */
int hyd_s3_list_collect(cat_reader *cat, const char *prefix, int slash_delim,
			struct hyd_s3_ents *e);

/* ---- listings kept for paging (hyd_s3_list_cache.c); any thread ---- */

/* The sorted candidates of one (generation, prefix, slash_delim): a
 * client paging through a large directory sorts it once, not once a page.
 * Immutable once made; reference counted. */
struct hyd_s3_listing {
	unsigned refs; /* under the cache's mutex */
	uint64_t generation;
	int slash_delim;
	char *prefix;
	uint64_t used; /* LRU clock */
	struct hyd_s3_ents e;
};

#define HYD_S3_LISTINGS 4u
/* Listings larger than this are made per request, not kept. */
#define HYD_S3_LISTING_KEEP_MAX (1u << 20)

struct hyd_s3_list_cache {
	pthread_mutex_t mu;
	uint64_t clock;
	struct hyd_s3_listing *slot[HYD_S3_LISTINGS]; /* one reference each */
};

void hyd_s3_list_cache_init(struct hyd_s3_list_cache *c);
void hyd_s3_list_cache_fini(struct hyd_s3_list_cache *c);
/* The listing of prefix in generation g (hyd_s3_list_collect, sorted),
 * kept or made, with a reference for the caller (hyd_s3_listing_unref).
 * 0, -ENOMEM, or the catalog's error. */
int hyd_s3_list_get(struct hyd_s3_list_cache *c, const struct hyd_gen *g,
		    const char *prefix, int slash_delim,
		    struct hyd_s3_listing **ret);
void hyd_s3_listing_unref(struct hyd_s3_list_cache *c,
			  struct hyd_s3_listing *l);

/* One item of a page: entry ent as a key (plen 0), or as the
 * CommonPrefix key[0..plen). */
struct hyd_s3_item {
	size_t ent;
	size_t plen;
};

/* One page of a listing over e (sorted): entries starting with prefix,
 * rolled up at the first delim (NULL or "": none) after the prefix,
 * after marker (a key or a CommonPrefix returned last; NULL or "": from
 * the start), at most max_keys items into out (room for max_keys).
 * *ret_truncated: more items follow (the last item is then the next
 * marker). Pure; any thread. */
void hyd_s3_list_page(const struct hyd_s3_ents *e, const char *prefix,
		      const char *delim, const char *marker, size_t max_keys,
		      struct hyd_s3_item *out, size_t *ret_n,
		      int *ret_truncated);

/* ---- the server (hyd_s3_http.c, hyd_s3_ops.c, hyd_s3_object.c) ---- */

typedef struct hyd_s3 hyd_s3;

#define HYD_S3_MAX_KEYS 1000u

/* What the server serves; borrowed until hyd_s3_stop. */
struct hyd_s3_src {
	struct hyd_fs *fs;  /* the mount: generations, open files, reads */
	const char *bucket; /* the namespace name */
	int64_t created_ns; /* the bucket's CreationDate */
	/* NULL: anonymous (loopback only; checked by hyd_s3_start) */
	const struct hyd_s3_keys *keys;
};

/* 1 when host (a numeric address or a name) resolves to loopback
 * addresses only, else 0 (httpd_host_loopback). */
int hyd_s3_host_is_loopback(const char *host);

/* Bind and listen on listen (HOST:PORT, httpd_listen_split's rule; port
 * 0: any free one, which the log line names), start the server thread.
 * Returns 0, -EINVAL (malformed, or no keys and HOST not loopback),
 * -errno of bind; logged. */
int hyd_s3_start(const char *listen, const struct hyd_s3_src *src,
		 hyd_s3 **ret);
/* Stop accepting, end every connection, join, free. NULL is a no-op. */
void hyd_s3_stop(hyd_s3 *s);

/* Internal to the server's files. */
struct hyd_s3_conn;
/* Answer rq on connection c (hyd_s3_ops.c). 0: the connection may take
 * another request; -errno: close it. */
int hyd_s3__serve(struct hyd_s3_conn *c, const struct hyd_s3_req *rq);

#endif
