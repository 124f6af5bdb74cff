/*
 * hydrator/fetch/hyd_source.c — how far the source's hashing is, for
 * `ferry status`: GET BASE/stats of the replicator, its "hashing" object
 * (docs/protocol.md). Blocking, short timeouts: a status line must not
 * hang on a source that is away.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_curl_priv.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/hydrator.h"

#define SOURCE_BODY_MAX 65536u

struct body {
	char *p;
	size_t n;
};

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
	struct body *b = ud;
	size_t len = sz * n;
	char *np;

	if (b->n + len > SOURCE_BODY_MAX)
		return 0; /* too big for a stats answer: fail the transfer */
	np = realloc(b->p, b->n + len + 1);
	if (!np)
		return 0;
	b->p = np;
	memcpy(b->p + b->n, p, len);
	b->n += len;
	b->p[b->n] = '\0';
	return len;
}

static uint64_t u64_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) >= 0
		   ? (uint64_t)json_integer_value(v)
		   : 0;
}

static int known_state(const char *s)
{
	static const char *const words[] = {"none", "hashing", "done",
					    "stopped"};

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(s, words[i]))
			return 1;
	return 0;
}

int hyd_source_hashing(const char *base_url, const struct hyd_creds *creds,
		       struct hyd_source_hashing *ret)
{
	struct body b = {0};
	json_t *o = NULL, *h;
	const char *state;
	char *url = NULL;
	size_t ul = strlen(base_url);
	long code = 0;
	CURL *c;
	int r;

	memset(ret, 0, sizeof(*ret));
	r = hyd_fetch_global_init();
	if (r < 0)
		return r;
	c = curl_easy_init();
	url = malloc(ul + sizeof("/stats"));
	if (!c || !url) {
		r = -ENOMEM;
		goto out;
	}
	/* BASE/stats, whether BASE ends in a slash or not */
	if (ul && base_url[ul - 1] == '/')
		ul--;
	memcpy(url, base_url, ul);
	memcpy(url + ul, "/stats", sizeof("/stats"));
	if (hyd_curl_get_setup(c, NULL, creds) != CURLE_OK) {
		r = -EIO;
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
	r = base_curl_errno(curl_easy_perform(c));
	if (r < 0)
		goto out;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200 || !b.p) {
		r = -EPROTO;
		goto out;
	}
	o = json_loads(b.p, 0, NULL);
	h = json_object_get(o, "hashing");
	state = json_string_value(json_object_get(h, "state"));
	/* The replicator's word ends up on a terminal: only the words it
	 * may say (docs/protocol.md) are taken. */
	if (!json_is_object(h) || !state || !known_state(state)) {
		r = -EBADMSG;
		goto out;
	}
	snprintf(ret->state, sizeof(ret->state), "%s", state);
	ret->files = u64_of(h, "files");
	ret->files_done = u64_of(h, "files_done");
	ret->bytes = u64_of(h, "bytes");
	ret->bytes_done = u64_of(h, "bytes_done");
	ret->changed = u64_of(h, "changed");
	ret->rate = json_number_value(json_object_get(h, "rate"));
	ret->eta_s = json_number_value(json_object_get(h, "eta_s"));
	r = 0;
out:
	json_decref(o);
	free(b.p);
	free(url);
	if (c)
		curl_easy_cleanup(c);
	return r;
}
