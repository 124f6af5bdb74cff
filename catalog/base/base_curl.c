/*
 * catalog/base/base_curl.c — the one translation of curl's result codes.
 *
 * The hydrator's fetch loop, its catalog download and `ferry sync` all see
 * the same failure as the same -errno, so "unreachable", "timed out" and
 * "cut mid-transfer" mean one thing in every message and every retry
 * decision. The only file of catalog/ that includes curl: the map needs
 * curl's names, the callers need none of curl in this header.
 */
#include <errno.h>

#include <curl/curl.h>

#include "catalog/base/base.h"

int base_curl_errno(int curl_code)
{
	CURLcode cc = (CURLcode)curl_code;
	int r;

	switch (cc) {
	case CURLE_OK:
		return 0;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
		r = -EHOSTUNREACH;
		break;
	case CURLE_OPERATION_TIMEDOUT:
		r = -ETIMEDOUT;
		break;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		r = -ECONNRESET;
		break;
	case CURLE_OUT_OF_MEMORY:
		r = -ENOMEM;
		break;
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
		r = -EINVAL;
		break;
	case CURLE_WRITE_ERROR:
	case CURLE_ABORTED_BY_CALLBACK:
		r = -ECANCELED;
		break;
	default:
		r = -EPROTO;
		break;
	}
	base_debug("curl curl_rc=%d curl_err=\"%s\" err=%s", curl_code,
		   curl_easy_strerror(cc), base_errname(r));
	return r;
}

int base_err_transient(int err)
{
	return err == -EHOSTUNREACH || err == -ETIMEDOUT ||
	       err == -ECONNRESET || err == -ECONNREFUSED || err == -EAGAIN;
}
