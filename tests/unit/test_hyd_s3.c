/*
 * test_hyd_s3.c — hydrator/s3/: Signature Version 4 against AWS's
 * published examples (the signing key of the SigV4 documentation's
 * derivation example; the S3 documentation's GET Object and GET Bucket
 * examples: canonical request hash and signature), the check of a signed
 * request (good, wrong secret, unknown key, clock skew, malformed), XML
 * escaping of keys, URI encoding and decoding, the --s3-keys file, and
 * the ListObjects paging over sorted keys (prefix, delimiter,
 * CommonPrefixes, markers, max-keys).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "catalog/base/base.h"
#include "hydrator/s3/hyd_s3.h"
#include "tests/unit/tsupport.h"

#define EMPTY_SHA                                                              \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define S3_AK "AKIAIOSFODNN7EXAMPLE"
#define T_20130524 1369353600 /* 2013-05-24T00:00:00Z */

static void hexs(const uint8_t *p, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static void sha_hex(const char *s, char out[65])
{
	uint8_t md[32];

	assert_true(EVP_Digest(s, strlen(s), md, NULL, EVP_sha256(), NULL));
	hexs(md, 32, out);
}

/* The SigV4 documentation's key derivation example. */
static void test_signing_key(void **state)
{
	uint8_t k[32];
	char hex[65];

	(void)state;
	assert_int_equal(hyd_s3_sigv4_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAM"
					  "PLEKEY",
					  "20120215", "us-east-1", "iam", k),
			 0);
	hexs(k, 32, hex);
	assert_string_equal(hex, "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a435"
				 "05a000a1a9e090d414db404d");
}

/* A request as the S3 examples give it. */
static void req_init(struct hyd_s3_req *rq, char *path, char *query,
		     const char *range, const char *auth)
{
	memset(rq, 0, sizeof(*rq));
	rq->method = "GET";
	rq->path = path;
	rq->query = query;
	rq->hdr[rq->nhdr].name = "host";
	rq->hdr[rq->nhdr++].value = "examplebucket.s3.amazonaws.com";
	if (range) {
		rq->hdr[rq->nhdr].name = "range";
		rq->hdr[rq->nhdr++].value = (char *)range;
	}
	rq->hdr[rq->nhdr].name = "x-amz-date";
	rq->hdr[rq->nhdr++].value = "20130524T000000Z";
	rq->hdr[rq->nhdr].name = "x-amz-content-sha256";
	rq->hdr[rq->nhdr++].value = EMPTY_SHA;
	if (auth) {
		rq->hdr[rq->nhdr].name = "authorization";
		rq->hdr[rq->nhdr++].value = (char *)auth;
	}
}

/* A canonical request of the S3 examples (2013-05-24, us-east-1, their
 * secret): its SHA-256 and its signature are AWS's published ones. */
static void check_signed(const char *canonical, const char *want_hash,
			 const char *want_sig)
{
	char hex[65], sig[65];
	uint8_t k[32];

	sha_hex(canonical, hex);
	assert_string_equal(hex, want_hash);
	assert_int_equal(
	    hyd_s3_sigv4_key(S3_SECRET, "20130524", "us-east-1", "s3", k), 0);
	assert_int_equal(hyd_s3_sigv4_sign(k, "20130524T000000Z",
					   "20130524/us-east-1/s3/aws4_request",
					   canonical, sig),
			 0);
	assert_string_equal(sig, want_sig);
}

/* The S3 documentation's "GET Object" example, byte for byte. */
static void test_get_object_example(void **state)
{
	static const char want[] =
	    "GET\n/test.txt\n\n"
	    "host:examplebucket.s3.amazonaws.com\n"
	    "range:bytes=0-9\n"
	    "x-amz-content-sha256:" EMPTY_SHA "\n"
	    "x-amz-date:20130524T000000Z\n\n"
	    "host;range;x-amz-content-sha256;x-amz-date\n" EMPTY_SHA;
	struct hyd_s3_req rq;
	struct base_buf b = {0};
	char path[] = "/test.txt", query[] = "";

	(void)state;
	/* the value's outer and inner blanks are trimmed and collapsed */
	req_init(&rq, path, query, "  bytes=0-9 ", NULL);
	assert_int_equal(hyd_s3_sigv4_canonical(
			     &rq, "host;range;x-amz-content-sha256;x-amz-date",
			     EMPTY_SHA, 0, &b),
			 0);
	assert_string_equal(b.buf, want);
	check_signed(b.buf,
		     "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc439"
		     "64946972",
		     "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6"
		     "036bdb41");
	base_buf_fini(&b);
}

/* "GET Bucket (List Objects)": the query sorted and encoded. */
static void test_list_example(void **state)
{
	struct hyd_s3_req rq;
	struct base_buf b = {0};
	char path[] = "/", query[] = "prefix=J&max-keys=2";

	(void)state;
	req_init(&rq, path, query, NULL, NULL);
	assert_int_equal(
	    hyd_s3_sigv4_canonical(&rq, "host;x-amz-content-sha256;x-amz-date",
				   EMPTY_SHA, 0, &b),
	    0);
	assert_non_null(strstr(b.buf, "\n/\nmax-keys=2&prefix=J\n"));
	check_signed(b.buf,
		     "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e"
		     "7df1b9b7",
		     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711e"
		     "f69dc6f7");
	base_buf_fini(&b);
}

#define AUTH_GET                                                               \
	"AWS4-HMAC-SHA256 Credential=" S3_AK                                   \
	"/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;"        \
	"x-amz-content-sha256;x-amz-date,Signature="                           \
	"f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"

static int check(const struct hyd_s3_keys *keys, const char *range,
		 const char *auth, int64_t now, const char **code)
{
	struct hyd_s3_req rq;
	char path[] = "/test.txt", query[] = "";
	int status = 0;

	*code = NULL;
	req_init(&rq, path, query, range, auth);
	return hyd_s3_sigv4_check(keys, &rq, now, code, &status);
}

static void test_check(void **state)
{
	struct hyd_s3_key kv[2] = {{"OTHER", "x"}, {S3_AK, S3_SECRET}};
	struct hyd_s3_keys keys = {kv, 2};
	struct hyd_s3_key wrong = {S3_AK, S3_SECRET "x"};
	struct hyd_s3_keys wkeys = {&wrong, 1};
	struct hyd_s3_key other = {"OTHER", S3_SECRET};
	struct hyd_s3_keys okeys = {&other, 1};
	const char *code;

	(void)state;
	assert_int_equal(check(&keys, "bytes=0-9", AUTH_GET, T_20130524, &code),
			 0);
	/* 15 minutes of skew either way pass, a second more does not */
	assert_int_equal(
	    check(&keys, "bytes=0-9", AUTH_GET, T_20130524 + 900, &code), 0);
	assert_int_equal(
	    check(&keys, "bytes=0-9", AUTH_GET, T_20130524 - 900, &code), 0);
	assert_int_equal(
	    check(&keys, "bytes=0-9", AUTH_GET, T_20130524 + 901, &code),
	    -EACCES);
	assert_string_equal(code, "RequestTimeTooSkewed");
	assert_int_equal(
	    check(&keys, "bytes=0-9", AUTH_GET, T_20130524 - 901, &code),
	    -EACCES);
	assert_string_equal(code, "RequestTimeTooSkewed");
	/* a signed header changed */
	assert_int_equal(check(&keys, "bytes=0-8", AUTH_GET, T_20130524, &code),
			 -EACCES);
	assert_string_equal(code, "SignatureDoesNotMatch");
	assert_int_equal(
	    check(&wkeys, "bytes=0-9", AUTH_GET, T_20130524, &code), -EACCES);
	assert_string_equal(code, "SignatureDoesNotMatch");
	assert_int_equal(
	    check(&okeys, "bytes=0-9", AUTH_GET, T_20130524, &code), -EACCES);
	assert_string_equal(code, "InvalidAccessKeyId");
	/* a signed header the request lacks */
	assert_int_equal(check(&keys, NULL, AUTH_GET, T_20130524, &code),
			 -EACCES);
	assert_string_equal(code, "SignatureDoesNotMatch");
	assert_int_equal(check(&keys, "bytes=0-9", NULL, T_20130524, &code),
			 -EACCES);
	assert_string_equal(code, "AccessDenied");
	assert_int_equal(check(&keys, "bytes=0-9",
			       "AWS4-HMAC-SHA256 Credential=" S3_AK
			       "/20130524/us-east-1/s3/aws4_request",
			       T_20130524, &code),
			 -EACCES);
	assert_string_equal(code, "AuthorizationHeaderMalformed");
}

static void test_xml_escape(void **state)
{
	struct base_buf b = {0};

	(void)state;
	hyd_s3_xml_add(&b, "a&b<c>d\"e'f/\x01g\th");
	assert_string_equal(b.buf,
			    "a&amp;b&lt;c&gt;d&quot;e&apos;f/&#x01;g\th");
	base_buf_fini(&b);
	hyd_s3_xml_add(&b, "");
	assert_int_equal(b.len, 0);
	hyd_s3_xml_add(&b, "plain/key.txt");
	assert_string_equal(b.buf, "plain/key.txt");
	base_buf_fini(&b);
	/* Bytes that are not UTF-8 as the text \xNN (base_text_escape's
	 * rule), so the listing stays well-formed XML; valid UTF-8 whole. */
	hyd_s3_xml_add(&b, "caf\xe9/na\xc3\xafve/\xff\xfe&x/\xe2\x82");
	assert_string_equal(b.buf, "caf\\xe9/na\xc3\xafve/\\xff\\xfe&amp;x/"
				   "\\xe2\\x82");
	base_buf_fini(&b);
	/* overlong, a surrogate, U+FFFF (no XML character); U+10000 kept */
	hyd_s3_xml_add(&b,
		       "\xc0\xaf|\xed\xa0\x80|\xef\xbf\xbf|\xf0\x90\x80\x80");
	assert_string_equal(b.buf, "\\xc0\\xaf|\\xed\\xa0\\x80|"
				   "\\xef\\xbf\\xbf|\xf0\x90\x80\x80");
	base_buf_fini(&b);
	hyd_s3_xml_error(&b, "NoSuchKey", "gone", "/s/a&b", "01");
	assert_non_null(strstr(b.buf, "<Error><Code>NoSuchKey</Code><Message>"
				      "gone</Message><Resource>/s/a&amp;b"
				      "</Resource><RequestId>01</RequestId>"
				      "</Error>"));
	base_buf_fini(&b);
}

static void test_uri(void **state)
{
	struct base_buf b = {0};
	char out[64];

	(void)state;
	hyd_s3_uri_add(&b, "a b+c/d~e=é", strlen("a b+c/d~e=é"), 0);
	assert_string_equal(b.buf, "a%20b%2Bc%2Fd~e%3D%C3%A9");
	base_buf_fini(&b);
	hyd_s3_uri_add(&b, "x/y z", 5, 1);
	assert_string_equal(b.buf, "x/y%20z");
	base_buf_fini(&b);
	assert_int_equal(hyd_s3_uri_decode("a%20b+c%2f", 10, out, 1), 0);
	assert_string_equal(out, "a b c/");
	assert_int_equal(hyd_s3_uri_decode("a+b", 3, out, 0), 0);
	assert_string_equal(out, "a+b");
	assert_int_equal(hyd_s3_uri_decode("a%2", 3, out, 0), -EINVAL);
	assert_int_equal(hyd_s3_uri_decode("a%zz", 4, out, 0), -EINVAL);
	assert_int_equal(hyd_s3_uri_decode("a%00", 4, out, 0), -EINVAL);
}

static void test_keys_file(void **state)
{
	char path[] = "/tmp/ferry-s3keys.XXXXXX";
	static const char good[] = "# comment\n\nAK1 secret/one\n"
				   "  AK2\tsecret+two  \n";
	struct hyd_s3_keys k;
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	tsup_write_file(path, good, strlen(good));
	assert_int_equal(hyd_s3_keys_load(path, &k), 0);
	assert_int_equal(k.n, 2);
	assert_string_equal(k.v[0].access, "AK1");
	assert_string_equal(k.v[0].secret, "secret/one");
	assert_string_equal(k.v[1].access, "AK2");
	assert_string_equal(k.v[1].secret, "secret+two");
	hyd_s3_keys_fini(&k);
	assert_null(k.v);
	tsup_write_file(path, "AK1 s extra\n", 12);
	assert_int_equal(hyd_s3_keys_load(path, &k), -EINVAL);
	tsup_write_file(path, "onlykey\n", 8);
	assert_int_equal(hyd_s3_keys_load(path, &k), -EINVAL);
	tsup_write_file(path, "# none\n", 7);
	assert_int_equal(hyd_s3_keys_load(path, &k), -EINVAL);
	unlink(path);
	assert_int_equal(hyd_s3_keys_load(path, &k), -ENOENT);
}

/* Entries from keys (a trailing '/' marks a directory entry). */
static void ents_of(struct hyd_s3_ents *e, const char *const *keys)
{
	memset(e, 0, sizeof(*e));
	for (; *keys; keys++) {
		size_t n = strlen(*keys);

		assert_int_equal(
		    hyd_s3_ents_add(e, *keys, n, NULL, (*keys)[n - 1] == '/'),
		    0);
	}
	hyd_s3_ents_sort(e);
}

/* One page as "k:KEY" / "p:PREFIX" words, then "|T" when truncated. */
static void page(const struct hyd_s3_ents *e, const char *prefix,
		 const char *delim, const char *marker, size_t max, char *out,
		 size_t cap)
{
	struct hyd_s3_item it[128];
	size_t n, i, len = 0;
	int trunc;

	assert_true(max <= 128);
	hyd_s3_list_page(e, prefix, delim, marker, max, it, &n, &trunc);
	out[0] = '\0';
	for (i = 0; i < n; i++) {
		const char *k = e->v[it[i].ent].key;
		int w = it[i].plen ? snprintf(out + len, cap - len, "p:%.*s ",
					      (int)it[i].plen, k)
				   : snprintf(out + len, cap - len, "k:%s ", k);

		len += (size_t)w;
	}
	if (trunc)
		snprintf(out + len, cap - len, "|T");
}

static void test_list_page(void **state)
{
	/* unsorted on purpose: the page sorts by bytes */
	static const char *const keys[] = {
	    "b/2", "a/x", "a-b", "a/y/1", "a/y/2", "c", "a/z", "b/1", NULL,
	};
	struct hyd_s3_ents e;
	char s[512];

	(void)state;
	ents_of(&e, keys);
	assert_string_equal(e.v[0].key, "a-b"); /* '-' < '/' */
	page(&e, "", NULL, NULL, 100, s, sizeof(s));
	assert_string_equal(s, "k:a-b k:a/x k:a/y/1 k:a/y/2 k:a/z k:b/1 "
			       "k:b/2 k:c ");
	page(&e, "", "/", NULL, 100, s, sizeof(s));
	assert_string_equal(s, "k:a-b p:a/ p:b/ k:c ");
	page(&e, "a/", "/", NULL, 100, s, sizeof(s));
	assert_string_equal(s, "k:a/x p:a/y/ k:a/z ");
	page(&e, "a", NULL, NULL, 100, s, sizeof(s));
	assert_string_equal(s, "k:a-b k:a/x k:a/y/1 k:a/y/2 k:a/z ");
	page(&e, "zz", "/", NULL, 100, s, sizeof(s));
	assert_string_equal(s, "");
	/* paging: each page's last item is the next marker */
	page(&e, "", "/", NULL, 2, s, sizeof(s));
	assert_string_equal(s, "k:a-b p:a/ |T");
	page(&e, "", "/", "a/", 2, s, sizeof(s));
	assert_string_equal(s, "p:b/ k:c ");
	page(&e, "", NULL, NULL, 3, s, sizeof(s));
	assert_string_equal(s, "k:a-b k:a/x k:a/y/1 |T");
	page(&e, "", NULL, "a/y/1", 3, s, sizeof(s));
	assert_string_equal(s, "k:a/y/2 k:a/z k:b/1 |T");
	page(&e, "", NULL, "b/1", 3, s, sizeof(s));
	assert_string_equal(s, "k:b/2 k:c ");
	/* exactly max items left: not truncated */
	page(&e, "", NULL, "a/z", 3, s, sizeof(s));
	assert_string_equal(s, "k:b/1 k:b/2 k:c ");
	/* a marker inside a CommonPrefix: the CommonPrefix sorts at its own
	 * string, which is before the marker, so it is not given again
	 * (docs/s3.md) */
	page(&e, "a/", "/", "a/y/1", 10, s, sizeof(s));
	assert_string_equal(s, "k:a/z ");
	page(&e, "a/", "/", "a/y", 10, s, sizeof(s));
	assert_string_equal(s, "p:a/y/ k:a/z ");
	page(&e, "", NULL, NULL, 0, s, sizeof(s));
	assert_string_equal(s, "|T");
	hyd_s3_ents_fini(&e);

	/* directory entries (a '/' listing of one directory) */
	static const char *const dir[] = {"d/", "f", "d2/", "e", NULL};
	ents_of(&e, dir);
	page(&e, "", "/", NULL, 10, s, sizeof(s));
	assert_string_equal(s, "p:d/ p:d2/ k:e k:f ");
	page(&e, "", "/", "d/", 10, s, sizeof(s));
	assert_string_equal(s, "p:d2/ k:e k:f ");
	hyd_s3_ents_fini(&e);
}

static void test_dates(void **state)
{
	char d[40];

	(void)state;
	hyd_s3_http_date(1700000000, d);
	assert_string_equal(d, "Tue, 14 Nov 2023 22:13:20 GMT");
	hyd_s3_iso_date(1700000000, d);
	assert_string_equal(d, "2023-11-14T22:13:20.000Z");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_signing_key),
	    cmocka_unit_test(test_get_object_example),
	    cmocka_unit_test(test_list_example),
	    cmocka_unit_test(test_check),
	    cmocka_unit_test(test_xml_escape),
	    cmocka_unit_test(test_uri),
	    cmocka_unit_test(test_keys_file),
	    cmocka_unit_test(test_list_page),
	    cmocka_unit_test(test_dates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
