/*
 * hydrator/fetch/hyd_creds.c — a client's credentials on its requests:
 * the CAs it trusts for https, its client certificate for mutual TLS, and
 * its bearer token (struct hyd_creds, hydrator.h).
 *
 * Every request of the hydrator, ferry sync and ferry status goes through
 * a curl easy handle set up by hyd_curl_creds, so https is verified the
 * same way everywhere (curl's defaults: peer and host verified, against
 * the system's CAs unless --ca-file says otherwise) and the token rides
 * on every request as "Authorization: Bearer" (curl's bearer auth, which
 * it does not pass on to another host a redirect leads to). The token is
 * read from a file, never from the command line (where ps shows it), and
 * never written to a log. The trust key (--trust-key) is checked where
 * catalogs and manifests arrive (hyd_trust.c), not on the connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/hydrator.h"

/* Characters of a token: RFC 6750's b64token. */
static int token_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || strchr("-._~+/=", c) != NULL;
}

int hyd_creds_token_load(struct hyd_creds *c, const char *path, char *errbuf,
			 size_t errcap)
{
	char buf[4096];
	size_t n = 0, i;
	int r;

	if (errcap)
		errbuf[0] = '\0';
	r = base_file_read_small(path, buf, sizeof(buf), &n);
	if (r == -EFBIG || r == -ERANGE || r == -ENOBUFS) {
		snprintf(errbuf, errcap,
			 "token file %s: larger than a token file (4 KiB)",
			 path);
		return -EINVAL;
	}
	if (r < 0) {
		snprintf(errbuf, errcap, "token file %s: %s", path,
			 strerror(-r));
		return r;
	}
	buf[n < sizeof(buf) ? n : sizeof(buf) - 1] = '\0';
	n = strcspn(buf, "\r\n");
	buf[n] = '\0';
	for (i = 0; i < n && token_char((unsigned char)buf[i]); i++)
		;
	if (n == 0 || n > HYD_TOKEN_MAX || i != n) {
		snprintf(errbuf, errcap,
			 "token file %s: its first line is not a token", path);
		return -EINVAL;
	}
	memcpy(c->token, buf, n + 1);
	return 0;
}

int hyd_creds_opt(struct hyd_creds *c, int code, const char *arg)
{
	char err[512];
	const char *what, **field;
	char *abs;
	int r;

	switch (code) {
	case HYD_OPT_TRUST_KEY:
		r = cat_sign_pub_load(arg, c->trust_pub);
		if (r == -EBADMSG) {
			base_error(
			    "--trust-key: not an Ed25519 public key (PEM, "
			    "as ferry keygen's sign.pub) path=%s",
			    arg);
			return -1;
		}
		if (r < 0) {
			base_log_err(BASE_LOG_ERROR, r,
				     "--trust-key: cannot read path=%s", arg);
			return -1;
		}
		c->trust_key = arg;
		return 1;
	case HYD_OPT_TOKEN_FILE:
		if (hyd_creds_token_load(c, arg, err, sizeof(err)) < 0) {
			base_error("--token-file: %s", err);
			return -1;
		}
		return 1;
	case HYD_OPT_CA_FILE:
		what = "--ca-file";
		field = &c->ca_file;
		abs = c->path_buf[0];
		break;
	case HYD_OPT_CERT:
		what = "--cert";
		field = &c->cert;
		abs = c->path_buf[1];
		break;
	case HYD_OPT_KEY:
		what = "--key";
		field = &c->key;
		abs = c->path_buf[2];
		break;
	default:
		return 0;
	}
	/* absolute: the hydrator's daemon reads it from / */
	if (access(arg, R_OK) < 0 || !realpath(arg, abs)) {
		base_log_err(BASE_LOG_ERROR, -errno, "%s: cannot read path=%s",
			     what, arg);
		return -1;
	}
	*field = abs;
	return 1;
}

CURLcode hyd_curl_creds(CURL *h, const struct hyd_creds *c)
{
	CURLcode cc = CURLE_OK;

	if (!c)
		return CURLE_OK;
	if (c->unix_socket)
		cc = curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH,
				      c->unix_socket);
	if (cc == CURLE_OK && c->ca_file)
		cc = curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	if (cc == CURLE_OK && c->cert)
		cc = curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert);
	if (cc == CURLE_OK && c->key)
		cc = curl_easy_setopt(h, CURLOPT_SSLKEY, c->key);
	if (cc == CURLE_OK && c->token[0]) {
		cc = curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
		if (cc == CURLE_OK)
			cc = curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER,
					      c->token);
	}
	return cc;
}
