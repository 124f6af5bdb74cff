/*
 * hydrator/fetch/hyd_curl_priv.h — the options every blocking GET of
 * the fetch room sets on a curl easy handle (catalog, manifests, source
 * stats), in one place. Not a face: for this room's files only.
 */
#ifndef FERRY_HYD_CURL_PRIV_H
#define FERRY_HYD_CURL_PRIV_H

#include <stdint.h>

#include <curl/curl.h>

#include "hydrator/hydrator.h"

/* No signals, http and https only (redirects too: static layouts on object
 * stores and CDNs redirect, at most 5 times), ferry's user agent, errbuf
 * (CURL_ERROR_SIZE bytes, may be NULL) for curl's message, and the
 * credentials c (may be NULL; borrowed while h is used). Returns the first
 * failing option's code, or CURLE_OK. */
CURLcode hyd_curl_get_setup(CURL *h, char *errbuf, const struct hyd_creds *c);

/* The round trip h's last request saw: from the request sent to the
 * answer's first byte (ns), 0 when curl cannot tell. */
uint64_t hyd_curl_rtt_ns(CURL *h);

/* c's CAs, client certificate and token on h (hyd_creds.c); c NULL:
 * nothing. Borrowed: c must outlive h's requests. */
CURLcode hyd_curl_creds(CURL *h, const struct hyd_creds *c);

#endif
