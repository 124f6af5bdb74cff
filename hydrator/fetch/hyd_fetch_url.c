/*
 * hydrator/fetch/hyd_fetch_url.c — what a hydrator URL means: checked with
 * curl's URL API (never parsed by hand), the namespace name it names, and the
 * default cache directory derived from it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/hydrator.h"

/* Fetch one part; absent parts come back as NULL. */
static char *url_part(CURLU *u, CURLUPart what)
{
	char *s = NULL;

	if (curl_url_get(u, what, &s, 0) != CURLUE_OK)
		return NULL;
	return s;
}

int hyd_url_parse(const char *url, char *ret_base, size_t base_cap,
		  char *ret_name, size_t name_cap, char *errbuf, size_t errcap)
{
	CURLU *u = NULL;
	CURLUcode uc;
	char *scheme = NULL, *host = NULL, *path = NULL, *user = NULL;
	char *query = NULL, *frag = NULL, *full = NULL;
	const char *name;
	size_t name_len;
	int r = -EINVAL;

	errbuf[0] = '\0';
	if (strlen(url) > HYD_URL_MAX) {
		snprintf(errbuf, errcap, "URL is longer than %u bytes",
			 HYD_URL_MAX);
		return -EINVAL;
	}
	u = curl_url();
	if (!u)
		return -ENOMEM;
	uc = curl_url_set(u, CURLUPART_URL, url, 0);
	if (uc != CURLUE_OK) {
		snprintf(errbuf, errcap, "bad URL '%s': %s", url,
			 curl_url_strerror(uc));
		goto out;
	}
	scheme = url_part(u, CURLUPART_SCHEME);
	host = url_part(u, CURLUPART_HOST);
	path = url_part(u, CURLUPART_PATH);
	user = url_part(u, CURLUPART_USER);
	query = url_part(u, CURLUPART_QUERY);
	frag = url_part(u, CURLUPART_FRAGMENT);
	if (!scheme || (strcmp(scheme, "http") && strcmp(scheme, "https"))) {
		snprintf(errbuf, errcap,
			 "bad URL '%s': scheme must be http or https", url);
		goto out;
	}
	if (!host || !host[0]) {
		snprintf(errbuf, errcap, "bad URL '%s': no host", url);
		goto out;
	}
	if (user || query || frag) {
		snprintf(errbuf, errcap,
			 "bad URL '%s': user, query or fragment not allowed",
			 url);
		goto out;
	}
	if (!path || strncmp(path, "/v1/", 4)) {
		snprintf(errbuf, errcap, "bad URL '%s': path must be /v1/NAME",
			 url);
		goto out;
	}
	name = path + 4;
	name_len = strlen(name);
	if (name_len && name[name_len - 1] == '/')
		name_len--;
	if (base_ns_name_check(name, name_len) < 0) {
		snprintf(errbuf, errcap,
			 "bad URL '%s': path must be /v1/NAME with NAME of "
			 "[A-Za-z0-9._-], 1-%u bytes, not starting with '.'",
			 url, BASE_NS_NAME_MAX);
		goto out;
	}
	/* Normalize: curl's spelling of the URL without the trailing '/'. */
	if (name_len != strlen(name)) {
		path[4 + name_len] = '\0';
		if (curl_url_set(u, CURLUPART_PATH, path, 0) != CURLUE_OK) {
			r = -ENOMEM;
			goto out;
		}
	}
	full = url_part(u, CURLUPART_URL);
	if (!full) {
		r = -ENOMEM;
		goto out;
	}
	if (strlen(full) >= base_cap || name_len >= name_cap) {
		snprintf(errbuf, errcap, "URL '%s' is too long", url);
		r = -ENAMETOOLONG;
		goto out;
	}
	memcpy(ret_base, full, strlen(full) + 1);
	memcpy(ret_name, name, name_len);
	ret_name[name_len] = '\0';
	r = 0;
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(path);
	curl_free(user);
	curl_free(query);
	curl_free(frag);
	curl_free(full);
	curl_url_cleanup(u);
	return r;
}

int hyd_cache_dir_default(const char *base_url, const char *name, char *buf,
			  size_t cap)
{
	chunk_id h;
	char hex[CHUNK_ID_HEX_LEN + 1];
	const char *xdg, *home;
	int r, n;

	r = chunk_id_compute(base_url, strlen(base_url), &h);
	if (r < 0)
		return r;
	chunk_id_to_hex(&h, hex);
	hex[12] = '\0';
	if (geteuid() == 0) {
		n = snprintf(buf, cap, "/var/cache/ferry/%s-%s", name, hex);
	} else {
		xdg = getenv("XDG_CACHE_HOME");
		home = getenv("HOME");
		/* The XDG spec says a relative XDG_CACHE_HOME is to be
		 * ignored. */
		if (xdg && xdg[0] == '/')
			n = snprintf(buf, cap, "%s/ferry/%s-%s", xdg, name,
				     hex);
		else if (home && home[0])
			n = snprintf(buf, cap, "%s/.cache/ferry/%s-%s", home,
				     name, hex);
		else
			return -ENOENT;
	}
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

uint64_t hyd_curl_rtt_ns(CURL *h)
{
	curl_off_t pre = 0, first = 0;

	if (curl_easy_getinfo(h, CURLINFO_PRETRANSFER_TIME_T, &pre) !=
		CURLE_OK ||
	    curl_easy_getinfo(h, CURLINFO_STARTTRANSFER_TIME_T, &first) !=
		CURLE_OK ||
	    first <= pre)
		return 0;
	return (uint64_t)(first - pre) * 1000ull;
}

CURLcode hyd_curl_get_setup(CURL *h, char *errbuf, const struct hyd_creds *c)
{
	CURLcode cc = curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);

	if (cc == CURLE_OK)
		cc = curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (cc == CURLE_OK)
		cc = curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR,
				      "http,https");
	if (cc == CURLE_OK)
		cc = curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	if (cc == CURLE_OK)
		cc = curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
	if (cc == CURLE_OK)
		cc = curl_easy_setopt(h, CURLOPT_USERAGENT, "ferry-hydrator");
	if (cc == CURLE_OK && errbuf)
		cc = curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	if (cc == CURLE_OK)
		cc = hyd_curl_creds(h, c);
	return cc;
}
