/*
 * tests/unit/test_repl_tls.c — the replicator's TLS (catalog/httpd/httpd_tls.c)
 * on its own: a server httpd_tls_conn and an OpenSSL client joined by memory
 * (each side's records handed to the other by the test), certificates
 * made by the test (tsup_cert_make: a CA, servers, an expired one,
 * clients of this CA and of another).
 *
 * Covered: TLS 1.3 and 1.2 handshakes with an AEAD, ECDHE cipher and data
 * both ways (a megabyte out in records); TLS 1.1 and non-AEAD or
 * non-ECDHE TLS 1.2 ciphers refused; a client certificate required,
 * checked against --client-ca's CAs (none, another CA's: refused); a
 * reload: a connection made before keeps its certificate, a new one gets
 * the new certificate, a reload from a bad file keeps the one in use;
 * start-up errors (missing file, garbage, a key of another certificate)
 * named; plain HTTP told apart; close_notify both ways; the expiry seen.
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
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "catalog/httpd/httpd_tls_priv.h"
#include "tsupport.h"

#define DAY 86400L

enum {
	P_CA,
	P_CA_KEY,
	P_CA2,
	P_CA2_KEY,
	P_SRV,
	P_SRV_KEY,
	P_SRV2,
	P_SRV2_KEY,
	P_EXP,
	P_EXP_KEY,
	P_CLI,
	P_CLI_KEY,
	P_CLI2,
	P_CLI2_KEY,
	P_CUR,	   /* the files a reload reads: copies of SRV or SRV2 */
	P_CUR_KEY, /* or garbage */
	P_RSA,
	P_RSA_KEY,
	P_N,
};

struct certs {
	char dir[64];
	char p[P_N][128]; /* paths, by the P_ names */
};

static const char *const NAMES[] = {
    "ca.pem",	"ca.key",   "ca2.pem", "ca2.key", "srv.pem", "srv.key",
    "srv2.pem", "srv2.key", "exp.pem", "exp.key", "cli.pem", "cli.key",
    "cli2.pem", "cli2.key", "cur.pem", "cur.key", "rsa.pem", "rsa.key",
};

static void copy_file(const char *from, const char *to)
{
	size_t n;
	void *b = tsup_read_file(from, &n);

	tsup_write_file(to, b, n);
	free(b);
}

static int group_setup(void **state)
{
	struct certs *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	snprintf(c->dir, sizeof(c->dir), "/tmp/test_repl_tls.XXXXXX");
	assert_non_null(mkdtemp(c->dir));
	for (size_t i = 0; i < P_N; i++)
		snprintf(c->p[i], sizeof(c->p[i]), "%s/%s", c->dir, NAMES[i]);
	tsup_cert_make(c->p[P_CA], c->p[P_CA_KEY], "ferry test CA", NULL, NULL,
		       -DAY, 30 * DAY, 0);
	tsup_cert_make(c->p[P_CA2], c->p[P_CA2_KEY], "another CA", NULL, NULL,
		       -DAY, 30 * DAY, 0);
	tsup_cert_make(c->p[P_SRV], c->p[P_SRV_KEY], "first", c->p[P_CA],
		       c->p[P_CA_KEY], -DAY, 30 * DAY, 0);
	tsup_cert_make(c->p[P_SRV2], c->p[P_SRV2_KEY], "second", c->p[P_CA],
		       c->p[P_CA_KEY], -DAY, 30 * DAY, 0);
	tsup_cert_make(c->p[P_RSA], c->p[P_RSA_KEY], "rsa", c->p[P_CA],
		       c->p[P_CA_KEY], -DAY, 30 * DAY, 1);
	tsup_cert_make(c->p[P_EXP], c->p[P_EXP_KEY], "expired", c->p[P_CA],
		       c->p[P_CA_KEY], -30 * DAY, -DAY, 0);
	tsup_cert_make(c->p[P_CLI], c->p[P_CLI_KEY], "client", c->p[P_CA],
		       c->p[P_CA_KEY], -DAY, 30 * DAY, 0);
	tsup_cert_make(c->p[P_CLI2], c->p[P_CLI2_KEY], "stranger", c->p[P_CA2],
		       c->p[P_CA2_KEY], -DAY, 30 * DAY, 0);
	*state = c;
	return 0;
}

static int group_teardown(void **state)
{
	struct certs *c = *state;

	tsup_rm_rf(c->dir);
	free(c);
	return 0;
}

/* -- a client and a server joined by memory -- */

struct pair {
	SSL_CTX *cctx;
	SSL *cli;
	BIO *cin, *cout; /* the client's, owned by cli */
	struct httpd_tls_conn *srv;
	int srv_err; /* the server's read result once it failed */
	char plain[4096];
	size_t plain_len; /* what the server read */
};

/* A client trusting ca (NULL: none) with a client certificate (NULL:
 * none); max_version 0: any; ciphers NULL: OpenSSL's default. */
static SSL_CTX *client_ctx(const char *ca, const char *cert, const char *key,
			   int max_version, const char *ciphers)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	assert_non_null(ctx);
	/* let the client offer what a server must refuse */
	SSL_CTX_set_security_level(ctx, 0);
	assert_int_equal(SSL_CTX_set_min_proto_version(ctx, TLS1_VERSION), 1);
	if (max_version)
		assert_int_equal(
		    SSL_CTX_set_max_proto_version(ctx, max_version), 1);
	if (ciphers)
		assert_int_equal(SSL_CTX_set_cipher_list(ctx, ciphers), 1);
	if (ca) {
		assert_int_equal(SSL_CTX_load_verify_locations(ctx, ca, NULL),
				 1);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	if (cert) {
		assert_int_equal(
		    SSL_CTX_use_certificate_file(ctx, cert, SSL_FILETYPE_PEM),
		    1);
		assert_int_equal(
		    SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM), 1);
	}
	return ctx;
}

static void pair_open(struct pair *p, struct httpd_tls *t, SSL_CTX *cctx)
{
	memset(p, 0, sizeof(*p));
	p->cctx = cctx;
	p->cli = SSL_new(cctx);
	p->cin = BIO_new(BIO_s_mem());
	p->cout = BIO_new(BIO_s_mem());
	assert_non_null(p->cli);
	assert_non_null(p->cin);
	assert_non_null(p->cout);
	BIO_set_mem_eof_return(p->cin, -1);
	BIO_set_mem_eof_return(p->cout, -1);
	SSL_set_bio(p->cli, p->cin, p->cout);
	SSL_set_connect_state(p->cli);
	assert_int_equal(SSL_set1_host(p->cli, "127.0.0.1"), 1);
	p->srv = httpd_tls_conn_new(t);
	assert_non_null(p->srv);
}

static void pair_close(struct pair *p)
{
	SSL_free(p->cli);
	SSL_CTX_free(p->cctx);
	httpd_tls_conn_free(p->srv);
}

/* The server's records to the client. */
static void srv_to_cli(struct pair *p)
{
	char *b;
	size_t n;

	assert_int_equal(httpd_tls_conn_take(p->srv, &b, &n), 0);
	if (n)
		assert_int_equal(BIO_write(p->cin, b, (int)n), (int)n);
	free(b);
}

/* The client's records to the server, and what it reads of them. */
static void cli_to_srv(struct pair *p)
{
	char b[65536];
	int n;
	ssize_t r;

	while ((n = BIO_read(p->cout, b, sizeof(b))) > 0)
		assert_int_equal(httpd_tls_conn_feed(p->srv, b, (size_t)n), 0);
	if (p->srv_err)
		return;
	r = httpd_tls_conn_read(p->srv, p->plain + p->plain_len,
				sizeof(p->plain) - p->plain_len);
	if (r < 0)
		p->srv_err = (int)r;
	else
		p->plain_len += (size_t)r;
}

/* Run the handshake, then the client sends "ping"; the server reads it.
 * Returns 0 when the server read it, else the server's error (the
 * client's side is left as it came out). */
static int pair_talk(struct pair *p)
{
	int i;

	for (i = 0; i < 10 && !SSL_is_init_finished(p->cli); i++) {
		ERR_clear_error();
		SSL_do_handshake(p->cli);
		cli_to_srv(p);
		srv_to_cli(p);
		if (p->srv_err)
			return p->srv_err;
	}
	if (!SSL_is_init_finished(p->cli))
		return -EPROTO; /* the client gave up */
	assert_int_equal(SSL_write(p->cli, "ping", 4), 4);
	cli_to_srv(p);
	srv_to_cli(p);
	if (p->srv_err)
		return p->srv_err;
	assert_int_equal(p->plain_len, 4);
	assert_memory_equal(p->plain, "ping", 4);
	return 0;
}

/* The common name of the certificate the client got. */
static void peer_cn(struct pair *p, char *buf, size_t cap)
{
	X509 *x = SSL_get1_peer_certificate(p->cli);

	assert_non_null(x);
	assert_true(X509_NAME_get_text_by_NID(X509_get_subject_name(x),
					      NID_commonName, buf,
					      (int)cap) > 0);
	X509_free(x);
}

static struct httpd_tls *tls_new(struct certs *c, int cert, int key, int ca)
{
	struct httpd_tls_opts o = {
	    .cert = c->p[cert],
	    .key = c->p[key],
	    .client_ca = ca >= 0 ? c->p[ca] : NULL,
	};
	struct httpd_tls *t = NULL;
	char why[512];

	if (httpd_tls_new(&o, &t, why, sizeof(why)) < 0)
		fail_msg("httpd_tls_new: %s", why);
	return t;
}

static void assert_aead_ecdhe(SSL *s)
{
	const SSL_CIPHER *ci = SSL_get_current_cipher(s);

	assert_non_null(ci);
	assert_true(SSL_CIPHER_is_aead(ci));
	/* TLS 1.3 suites leave the exchange to the groups: (EC)DHE always */
	if (SSL_version(s) == TLS1_2_VERSION)
		assert_int_equal(SSL_CIPHER_get_kx_nid(ci), NID_kx_ecdhe);
}

/* -- tests -- */

static void test_tls13_both_ways(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t = tls_new(c, P_SRV, P_SRV_KEY, -1);
	struct pair p;
	size_t big = 1u << 20, got = 0, i;
	uint8_t *out = tsup_random_bytes(big, 7), *in = malloc(big);
	char cn[64];

	assert_non_null(in);
	pair_open(&p, t, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&p), 0);
	assert_int_equal(SSL_version(p.cli), TLS1_3_VERSION);
	assert_aead_ecdhe(p.cli);
	assert_int_equal(SSL_get_verify_result(p.cli), X509_V_OK);
	peer_cn(&p, cn, sizeof(cn));
	assert_string_equal(cn, "first");
	/* a megabyte out: every byte comes back through the records */
	for (i = 0; i < big; i += 100000)
		assert_int_equal(
		    httpd_tls_conn_write(p.srv, out + i,
					 big - i < 100000 ? big - i : 100000),
		    0);
	srv_to_cli(&p);
	while (got < big) {
		int n = SSL_read(p.cli, in + got, (int)(big - got));

		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_memory_equal(in, out, big);
	assert_int_equal(httpd_tls_conn_why(p.srv)[0], '\0');
	pair_close(&p);
	httpd_tls_free(t);
	free(in);
	free(out);
}

static void test_tls12_aead(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t = tls_new(c, P_SRV, P_SRV_KEY, -1);
	struct pair p;

	pair_open(&p, t,
		  client_ctx(c->p[P_CA], NULL, NULL, TLS1_2_VERSION, NULL));
	assert_int_equal(pair_talk(&p), 0);
	assert_int_equal(SSL_version(p.cli), TLS1_2_VERSION);
	assert_aead_ecdhe(p.cli);
	pair_close(&p);
	httpd_tls_free(t);
}

static void test_old_refused(void **state)
{
	struct certs *c = *state;
	/* an RSA key, so that a static RSA exchange would be possible */
	struct httpd_tls *t = tls_new(c, P_RSA, P_RSA_KEY, -1);
	/* TLS 1.1; TLS 1.2 with CBC (not AEAD); with AES-GCM over a static
	 * RSA exchange (no forward secrecy) */
	static const struct {
		int max;
		const char *ciphers;
	} offers[] = {
	    {TLS1_1_VERSION, NULL},
	    {TLS1_2_VERSION, "ECDHE-RSA-AES128-SHA256:ECDHE-RSA-AES128-SHA:"
			     "ECDHE-RSA-AES256-SHA384"},
	    {TLS1_2_VERSION, "AES128-GCM-SHA256:AES256-GCM-SHA384:"
			     "DHE-RSA-AES128-GCM-SHA256"},
	};

	struct pair p;

	/* what it takes: an ECDHE, AEAD cipher */
	pair_open(&p, t,
		  client_ctx(c->p[P_CA], NULL, NULL, TLS1_2_VERSION, NULL));
	assert_int_equal(pair_talk(&p), 0);
	assert_aead_ecdhe(p.cli);
	pair_close(&p);
	for (size_t i = 0; i < sizeof(offers) / sizeof(offers[0]); i++) {
		pair_open(&p, t,
			  client_ctx(c->p[P_CA], NULL, NULL, offers[i].max,
				     offers[i].ciphers));
		assert_int_equal(pair_talk(&p), -EPROTO);
		assert_false(SSL_is_init_finished(p.cli));
		assert_true(httpd_tls_conn_why(p.srv)[0] != '\0');
		/* nothing goes out after the failure */
		assert_int_equal(httpd_tls_conn_write(p.srv, "x", 1), -EPROTO);
		pair_close(&p);
	}
	httpd_tls_free(t);
}

static void test_client_ca(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t = tls_new(c, P_SRV, P_SRV_KEY, P_CA);
	struct pair p;

	/* none: TLS 1.3 says so after the client's Finished */
	pair_open(&p, t, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&p), -EPROTO);
	assert_non_null(strstr(httpd_tls_conn_why(p.srv), "certificate"));
	/* the alert reaches the client */
	assert_true(SSL_read(p.cli, p.plain, 1) <= 0);
	assert_int_equal(SSL_get_error(p.cli, -1), SSL_ERROR_SSL);
	pair_close(&p);
	/* one of another CA */
	pair_open(
	    &p, t,
	    client_ctx(c->p[P_CA], c->p[P_CLI2], c->p[P_CLI2_KEY], 0, NULL));
	assert_int_equal(pair_talk(&p), -EPROTO);
	pair_close(&p);
	/* TLS 1.2 without one: refused in the handshake */
	pair_open(&p, t,
		  client_ctx(c->p[P_CA], NULL, NULL, TLS1_2_VERSION, NULL));
	assert_int_equal(pair_talk(&p), -EPROTO);
	pair_close(&p);
	/* the right one, both versions */
	pair_open(
	    &p, t,
	    client_ctx(c->p[P_CA], c->p[P_CLI], c->p[P_CLI_KEY], 0, NULL));
	assert_int_equal(pair_talk(&p), 0);
	pair_close(&p);
	pair_open(&p, t,
		  client_ctx(c->p[P_CA], c->p[P_CLI], c->p[P_CLI_KEY],
			     TLS1_2_VERSION, NULL));
	assert_int_equal(pair_talk(&p), 0);
	pair_close(&p);
	httpd_tls_free(t);
}

static void test_reload(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t;
	struct pair before, after, kept;
	char cn[64], why[512];

	copy_file(c->p[P_SRV], c->p[P_CUR]);
	copy_file(c->p[P_SRV_KEY], c->p[P_CUR_KEY]);
	t = tls_new(c, P_CUR, P_CUR_KEY, -1);
	/* a connection made now, its handshake still to come */
	pair_open(&before, t, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	copy_file(c->p[P_SRV2], c->p[P_CUR]);
	copy_file(c->p[P_SRV2_KEY], c->p[P_CUR_KEY]);
	assert_int_equal(httpd_tls_reload(t, why, sizeof(why)), 0);
	pair_open(&after, t, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&after), 0);
	peer_cn(&after, cn, sizeof(cn));
	assert_string_equal(cn, "second");
	assert_int_equal(pair_talk(&before), 0);
	peer_cn(&before, cn, sizeof(cn));
	assert_string_equal(cn, "first");
	/* a bad file: an error naming it, and "second" stays */
	tsup_write_file(c->p[P_CUR], "not a certificate\n", 18);
	assert_int_equal(httpd_tls_reload(t, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, c->p[P_CUR]));
	/* a key of another certificate */
	copy_file(c->p[P_SRV], c->p[P_CUR]);
	copy_file(c->p[P_SRV2_KEY], c->p[P_CUR_KEY]);
	assert_int_equal(httpd_tls_reload(t, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "does not match"));
	pair_open(&kept, t, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&kept), 0);
	peer_cn(&kept, cn, sizeof(cn));
	assert_string_equal(cn, "second");
	/* the connections outlive the object they were made from */
	httpd_tls_free(t);
	assert_int_equal(httpd_tls_conn_write(before.srv, "pong", 4), 0);
	srv_to_cli(&before);
	assert_int_equal(SSL_read(before.cli, cn, sizeof(cn)), 4);
	pair_close(&before);
	pair_close(&after);
	pair_close(&kept);
}

static void test_bad_files(void **state)
{
	struct certs *c = *state;
	struct httpd_tls_opts o = {.cert = c->p[P_SRV], .key = c->p[P_SRV_KEY]};
	struct httpd_tls *t = NULL;
	char why[512], missing[160];

	snprintf(missing, sizeof(missing), "%s/none.pem", c->dir);
	o.cert = missing;
	assert_int_equal(httpd_tls_new(&o, &t, why, sizeof(why)), -EINVAL);
	assert_null(t);
	assert_non_null(strstr(why, "cannot read the certificate"));
	assert_non_null(strstr(why, missing));
	o.cert = c->p[P_SRV];
	o.key = c->p[P_SRV2_KEY];
	assert_int_equal(httpd_tls_new(&o, &t, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "does not match"));
	o.key = c->p[P_SRV_KEY];
	o.client_ca = c->p[P_SRV_KEY]; /* a key is no CA */
	assert_int_equal(httpd_tls_new(&o, &t, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "client CA"));
	o.client_ca = missing;
	assert_int_equal(httpd_tls_new(&o, &t, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "cannot read the client CA"));
}

static void test_plain_http(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t = tls_new(c, P_SRV, P_SRV_KEY, -1);
	struct httpd_tls_conn *tc = httpd_tls_conn_new(t);
	static const char req[] = "GET /v1/ns/HEAD HTTP/1.1\r\nHost: x\r\n\r\n";
	char buf[256], *out;
	size_t n;

	assert_non_null(tc);
	assert_int_equal(httpd_tls_conn_feed(tc, req, sizeof(req) - 1), 0);
	assert_int_equal(httpd_tls_conn_read(tc, buf, sizeof(buf)),
			 -ENOPROTOOPT);
	/* no alert to send: the caller may answer in the clear */
	assert_int_equal(httpd_tls_conn_take(tc, &out, &n), 0);
	assert_int_equal(n, 0);
	assert_null(out);
	httpd_tls_conn_free(tc);
	httpd_tls_free(t);
}

static void test_close_notify(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t = tls_new(c, P_SRV, P_SRV_KEY, -1);
	struct pair p;
	char b[16];

	pair_open(&p, t, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&p), 0);
	/* the client is done sending: its data first, then -ESHUTDOWN */
	assert_int_equal(SSL_write(p.cli, "last", 4), 4);
	assert_true(SSL_shutdown(p.cli) >= 0);
	cli_to_srv(&p);
	assert_int_equal(p.plain_len, 8);
	assert_memory_equal(p.plain + 4, "last", 4);
	assert_int_equal(httpd_tls_conn_read(p.srv, b, sizeof(b)), -ESHUTDOWN);
	/* the server still answers, then says close_notify */
	assert_int_equal(httpd_tls_conn_write(p.srv, "bye", 3), 0);
	httpd_tls_conn_shutdown(p.srv);
	srv_to_cli(&p);
	assert_int_equal(SSL_read(p.cli, b, sizeof(b)), 3);
	assert_int_equal(SSL_read(p.cli, b, sizeof(b)), 0);
	assert_int_equal(SSL_get_error(p.cli, 0), SSL_ERROR_ZERO_RETURN);
	pair_close(&p);
	httpd_tls_free(t);
}

static void test_describe(void **state)
{
	struct certs *c = *state;
	struct httpd_tls *t = tls_new(c, P_SRV, P_SRV_KEY, -1);
	struct httpd_tls *e = tls_new(c, P_EXP, P_EXP_KEY, -1);
	struct pair p;
	char d[384];

	assert_int_equal(httpd_tls_describe(t, d, sizeof(d)), 0);
	assert_non_null(strstr(d, "subject=\"CN=first\" not_after=20"));
	assert_int_equal(httpd_tls_describe(e, d, sizeof(d)), 1);
	assert_non_null(strstr(d, "CN=expired"));
	/* served as it is: refusing it is the client's call */
	pair_open(&p, e, client_ctx(NULL, NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&p), 0);
	pair_close(&p);
	pair_open(&p, e, client_ctx(c->p[P_CA], NULL, NULL, 0, NULL));
	assert_int_equal(pair_talk(&p), -EPROTO);
	assert_int_equal(SSL_get_verify_result(p.cli),
			 X509_V_ERR_CERT_HAS_EXPIRED);
	pair_close(&p);
	httpd_tls_free(t);
	httpd_tls_free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tls13_both_ways),
	    cmocka_unit_test(test_tls12_aead),
	    cmocka_unit_test(test_old_refused),
	    cmocka_unit_test(test_client_ca),
	    cmocka_unit_test(test_reload),
	    cmocka_unit_test(test_bad_files),
	    cmocka_unit_test(test_plain_http),
	    cmocka_unit_test(test_close_notify),
	    cmocka_unit_test(test_describe),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
