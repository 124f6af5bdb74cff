/*
 * catalog/httpd/httpd_tls.c — TLS for the engine's connections (the
 * replicator's --tls-cert), with OpenSSL over in-memory BIOs per
 * connection (the rules are in httpd.h, a connection's side in
 * httpd_tls_priv.h).
 *
 * In-memory BIOs keep TLS out of the socket I/O: libuv reads and writes
 * the socket as for plain HTTP, and OpenSSL only turns bytes into bytes.
 * In: a memory BIO, holding at most what one uv_read brought (the
 * connection stops reading while it has plaintext left to parse). Out: a sink
 * BIO of ours that appends OpenSSL's records to a plain buffer, which
 * httpd_tls_conn_take hands over as it is: the records are copied once,
 * from OpenSSL's write buffer into the one uv_write sends, and nothing
 * stays allocated between writes (a memory BIO would copy twice and keep
 * its largest size for good).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "catalog/httpd/httpd_tls_priv.h"

/* TLS 1.2: ECDHE (forward secrecy) with AEAD only; the server's order, so
 * AES-GCM goes first where both ends have it, ChaCha20 when the client
 * prefers it (SSL_OP_PRIORITIZE_CHACHA: a client without AES hardware). */
static const char TLS12_CIPHERS[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
/* TLS 1.3's suites are all AEAD with (EC)DHE; no CCM. */
static const char TLS13_SUITES[] = "TLS_AES_128_GCM_SHA256:"
				   "TLS_AES_256_GCM_SHA384:"
				   "TLS_CHACHA20_POLY1305_SHA256";
/* Sessions resume only on a context that set one (with client
 * certificates OpenSSL refuses to resume otherwise). */
static const unsigned char SID_CTX[] = "ferry-replicator";

struct httpd_tls {
	SSL_CTX *ctx; /* for new connections */
	char *cert, *key, *client_ca;
};

struct httpd_tls_conn {
	SSL *ssl;
	BIO *in, *out;	  /* owned by ssl */
	BIO_METHOD *sink; /* out's methods, freed after ssl */
	char *pend;	  /* records made and not taken yet */
	size_t pend_len, pend_cap;
	int failed;    /* TLS failed: nothing more in or out */
	int peer_done; /* the peer's close_notify came */
	int plain;     /* the peer spoke plain HTTP */
	char why[200];
};

/* OpenSSL's reason for the first error of this thread (the cause: a bad
 * PEM file is "no start line", then "PEM lib"), and clear them. */
static void ssl_reason(char *buf, size_t cap)
{
	unsigned long e = ERR_peek_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	if (r)
		snprintf(buf, cap, "%s", r);
	else if (e)
		ERR_error_string_n(e, buf, cap);
	else
		snprintf(buf, cap, "unknown TLS error");
	ERR_clear_error();
}

/* why = "WHAT path=PATH: reason", the reason OpenSSL's. */
static int ssl_fail(char *why, size_t cap, const char *what, const char *path)
{
	char r[160];

	ssl_reason(r, sizeof(r));
	if (path)
		snprintf(why, cap, "%s path=%s: %s", what, path, r);
	else
		snprintf(why, cap, "%s: %s", what, r);
	return -EINVAL;
}

/* A file OpenSSL will read: a missing or unreadable one said plainly,
 * not as OpenSSL's "system library" line. */
static int readable(const char *what, const char *path, char *why, size_t cap)
{
	if (access(path, R_OK) == 0)
		return 0;
	snprintf(why, cap, "cannot read the %s path=%s: %s", what, path,
		 strerror(errno));
	return -EINVAL;
}

static int ctx_build(const struct httpd_tls *t, SSL_CTX **ret, char *why,
		     size_t cap)
{
	STACK_OF(X509_NAME) *names = NULL;
	SSL_CTX *ctx;
	int r = -EINVAL;

	*ret = NULL;
	if (readable("certificate", t->cert, why, cap) < 0 ||
	    readable("key", t->key, why, cap) < 0 ||
	    (t->client_ca &&
	     readable("client CA file", t->client_ca, why, cap) < 0))
		return -EINVAL;
	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx)
		return ssl_fail(why, cap, "cannot make a TLS context", NULL);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS) != 1 ||
	    SSL_CTX_set_ciphersuites(ctx, TLS13_SUITES) != 1 ||
	    SSL_CTX_set_session_id_context(ctx, SID_CTX, sizeof(SID_CTX) - 1) !=
		1) {
		r = ssl_fail(why, cap, "cannot set up TLS", NULL);
		goto out;
	}
	SSL_CTX_set_options(
	    ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
		     SSL_OP_PRIORITIZE_CHACHA | SSL_OP_NO_COMPRESSION);
	if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1) {
		r = ssl_fail(why, cap, "cannot load the certificate", t->cert);
		goto out;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1) {
		/* a key of another certificate fails here already */
		r = ssl_fail(why, cap,
			     ERR_GET_REASON(ERR_peek_last_error()) ==
				     X509_R_KEY_VALUES_MISMATCH
				 ? "the key does not match the certificate"
				 : "cannot load the key",
			     t->key);
		goto out;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		r = ssl_fail(why, cap, "the key does not match the certificate",
			     t->key);
		goto out;
	}
	if (t->client_ca) {
		names = SSL_load_client_CA_file(t->client_ca);
		if (!names || SSL_CTX_load_verify_locations(ctx, t->client_ca,
							    NULL) != 1) {
			r = ssl_fail(why, cap, "cannot load the client CAs",
				     t->client_ca);
			goto out;
		}
		/* the names go to the client, so it picks its certificate */
		SSL_CTX_set_client_CA_list(ctx, names);
		names = NULL;
		SSL_CTX_set_verify(
		    ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
		    NULL);
	}
	*ret = ctx;
	ctx = NULL;
	r = 0;
out:
	if (names)
		sk_X509_NAME_pop_free(names, X509_NAME_free);
	SSL_CTX_free(ctx);
	return r;
}

void httpd_tls_free(struct httpd_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t->cert);
	free(t->key);
	free(t->client_ca);
	free(t);
}

int httpd_tls_new(const struct httpd_tls_opts *o, struct httpd_tls **ret,
		  char *why, size_t cap)
{
	struct httpd_tls *t = calloc(1, sizeof(*t));
	int r;

	*ret = NULL;
	if (!t)
		goto oom;
	t->cert = strdup(o->cert);
	t->key = strdup(o->key);
	t->client_ca = o->client_ca ? strdup(o->client_ca) : NULL;
	if (!t->cert || !t->key || (o->client_ca && !t->client_ca))
		goto oom;
	r = ctx_build(t, &t->ctx, why, cap);
	if (r < 0) {
		httpd_tls_free(t);
		return r;
	}
	*ret = t;
	return 0;
oom:
	httpd_tls_free(t);
	snprintf(why, cap, "out of memory");
	return -ENOMEM;
}

int httpd_tls_reload(struct httpd_tls *t, char *why, size_t cap)
{
	SSL_CTX *ctx;
	int r = ctx_build(t, &ctx, why, cap);

	if (r < 0)
		return r;
	/* connections of the old context hold their own references */
	SSL_CTX_free(t->ctx);
	t->ctx = ctx;
	return 0;
}

int httpd_tls_describe(const struct httpd_tls *t, char *buf, size_t cap)
{
	X509 *x = SSL_CTX_get0_certificate(t->ctx);
	char subject[256] = "", until[32] = "?";
	BIO *b;
	struct tm tm;
	int n, out_of_date;

	if (!x) {
		snprintf(buf, cap, "subject=?");
		return 0;
	}
	b = BIO_new(BIO_s_mem());
	if (b && X509_NAME_print_ex(b, X509_get_subject_name(x), 0,
				    XN_FLAG_RFC2253) >= 0) {
		n = BIO_read(b, subject, (int)sizeof(subject) - 1);
		subject[n > 0 ? n : 0] = '\0';
	}
	BIO_free(b);
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
		strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm);
	out_of_date = X509_cmp_current_time(X509_get0_notAfter(x)) < 0 ||
		      X509_cmp_current_time(X509_get0_notBefore(x)) > 0;
	ERR_clear_error();
	snprintf(buf, cap, "subject=\"%s\" not_after=%s", subject, until);
	return out_of_date;
}

/* Room for n more bytes in tc->pend. */
static int pend_reserve(struct httpd_tls_conn *tc, size_t n)
{
	size_t cap = tc->pend_cap;
	char *p;

	if (tc->pend_cap - tc->pend_len >= n)
		return 0;
	if (cap < 4096)
		cap = 4096;
	while (cap - tc->pend_len < n)
		cap *= 2;
	p = realloc(tc->pend, cap);
	if (!p)
		return -ENOMEM;
	tc->pend = p;
	tc->pend_cap = cap;
	return 0;
}

/* The out BIO: every record OpenSSL writes is appended to tc->pend. */
static int sink_write(BIO *b, const char *in, int inl)
{
	struct httpd_tls_conn *tc = BIO_get_data(b);

	BIO_clear_retry_flags(b);
	if (inl <= 0)
		return 0;
	if (pend_reserve(tc, (size_t)inl) < 0)
		return -1; /* the write fails, and the connection with it */
	memcpy(tc->pend + tc->pend_len, in, (size_t)inl);
	tc->pend_len += (size_t)inl;
	return inl;
}

static long sink_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)b;
	(void)num;
	(void)ptr;
	/* written is as good as sent: nothing to flush */
	return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sink_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

struct httpd_tls_conn *httpd_tls_conn_new(struct httpd_tls *t)
{
	struct httpd_tls_conn *tc = calloc(1, sizeof(*tc));

	if (!tc)
		return NULL;
	tc->ssl = SSL_new(t->ctx);
	tc->in = BIO_new(BIO_s_mem());
	/* a method per connection: it outlives any httpd_tls object */
	tc->sink = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
				"ferry records out");
	if (tc->sink && (BIO_meth_set_write(tc->sink, sink_write) != 1 ||
			 BIO_meth_set_ctrl(tc->sink, sink_ctrl) != 1 ||
			 BIO_meth_set_create(tc->sink, sink_create) != 1)) {
		BIO_meth_free(tc->sink);
		tc->sink = NULL;
	}
	tc->out = tc->sink ? BIO_new(tc->sink) : NULL;
	if (!tc->ssl || !tc->in || !tc->out) {
		BIO_free(tc->in);
		BIO_free(tc->out);
		BIO_meth_free(tc->sink);
		SSL_free(tc->ssl);
		free(tc);
		ERR_clear_error();
		return NULL;
	}
	BIO_set_data(tc->out, tc);
	/* empty means "more later", never end of file */
	BIO_set_mem_eof_return(tc->in, -1);
	SSL_set_bio(tc->ssl, tc->in, tc->out);
	SSL_set_accept_state(tc->ssl);
	return tc;
}

void httpd_tls_conn_free(struct httpd_tls_conn *tc)
{
	if (!tc)
		return;
	SSL_free(tc->ssl); /* and its BIOs */
	BIO_meth_free(tc->sink);
	free(tc->pend);
	free(tc);
}

int httpd_tls_conn_feed(struct httpd_tls_conn *tc, const void *p, size_t len)
{
	if (len > INT_MAX)
		return -EINVAL;
	if (len && BIO_write(tc->in, p, (int)len) != (int)len) {
		ERR_clear_error();
		return -ENOMEM;
	}
	return 0;
}

static void conn_failed(struct httpd_tls_conn *tc)
{
	unsigned long e = ERR_peek_last_error();

	tc->failed = 1;
	tc->plain = ERR_GET_LIB(e) == ERR_LIB_SSL &&
		    ERR_GET_REASON(e) == SSL_R_HTTP_REQUEST;
	ssl_reason(tc->why, sizeof(tc->why));
}

ssize_t httpd_tls_conn_read(struct httpd_tls_conn *tc, void *buf, size_t cap)
{
	size_t got = 0, n;
	int r;

	/* SSL_read returns one record at a time: fill buf from as many as
	 * there are, so the parser gets big pieces */
	while (got < cap && !tc->failed && !tc->peer_done) {
		ERR_clear_error();
		r = SSL_read_ex(tc->ssl, (char *)buf + got, cap - got, &n);
		if (r == 1) {
			got += n;
			continue;
		}
		switch (SSL_get_error(tc->ssl, r)) {
		case SSL_ERROR_WANT_READ:
			return (ssize_t)got;
		case SSL_ERROR_ZERO_RETURN:
			tc->peer_done = 1;
			break;
		default:
			conn_failed(tc);
			break;
		}
	}
	if (got)
		return (ssize_t)got;
	if (tc->failed)
		return tc->plain ? -ENOPROTOOPT : -EPROTO;
	return tc->peer_done ? -ESHUTDOWN : 0;
}

int httpd_tls_conn_write(struct httpd_tls_conn *tc, const void *p, size_t len)
{
	const char *b = p;
	size_t n;

	while (len > 0) {
		if (tc->failed)
			return -EPROTO;
		ERR_clear_error();
		/* The sink takes everything: the whole buffer goes as
		 * records now (no partial writes are asked for). */
		if (SSL_write_ex(tc->ssl, b, len, &n) != 1) {
			conn_failed(tc);
			return -EPROTO;
		}
		b += n;
		len -= n;
	}
	return 0;
}

void httpd_tls_conn_shutdown(struct httpd_tls_conn *tc)
{
	if (tc->failed || !SSL_is_init_finished(tc->ssl))
		return;
	ERR_clear_error();
	(void)SSL_shutdown(tc->ssl); /* 0: sent, the peer's still to come */
	ERR_clear_error();
}

int httpd_tls_conn_reserve(struct httpd_tls_conn *tc, size_t len)
{
	/* A record carries at most 16 KiB and adds at most 29 bytes (TLS
	 * 1.2 AES-GCM: header, explicit nonce, tag); 64 per record, and a
	 * few records more for pieces written apart and a KeyUpdate. */
	return pend_reserve(tc, len + (len / 16384 + 8) * 64);
}

int httpd_tls_conn_take(struct httpd_tls_conn *tc, char **ret, size_t *ret_len)
{
	*ret = NULL;
	*ret_len = 0;
	if (tc->pend_len == 0)
		return 0;
	/* handed over as it is: no copy */
	*ret = tc->pend;
	*ret_len = tc->pend_len;
	tc->pend = NULL;
	tc->pend_len = tc->pend_cap = 0;
	return 0;
}

const char *httpd_tls_conn_why(const struct httpd_tls_conn *tc)
{
	return tc->why;
}
