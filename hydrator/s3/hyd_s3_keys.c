/*
 * hydrator/s3/hyd_s3_keys.c — --s3-keys FILE: the access keys S3 clients
 * sign with, read once at start. A malformed line is reported by its
 * number alone: its text may hold a secret.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "hydrator/s3/hyd_s3.h"

#define KEYS_LINE_MAX 1024

/* Parse one line into k: 1 (a key), 0 (blank or comment), -EINVAL. */
static int keys_line(char *line, struct hyd_s3_key *k)
{
	char *save = NULL, *a, *s;

	line[strcspn(line, "\r\n")] = '\0';
	a = strtok_r(line, " \t", &save);
	if (!a || a[0] == '#')
		return 0;
	s = strtok_r(NULL, " \t", &save);
	if (!s || strtok_r(NULL, " \t", &save) ||
	    strlen(a) >= sizeof(k->access) || strlen(s) >= sizeof(k->secret))
		return -EINVAL;
	memcpy(k->access, a, strlen(a) + 1);
	memcpy(k->secret, s, strlen(s) + 1);
	return 1;
}

int hyd_s3_keys_load(const char *path, struct hyd_s3_keys *ret)
{
	char line[KEYS_LINE_MAX];
	struct hyd_s3_key k;
	unsigned lineno = 0;
	FILE *f;
	int r = 0;

	memset(ret, 0, sizeof(*ret));
	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		base_log_err(BASE_LOG_ERROR, r, "cannot read --s3-keys file=%s",
			     path);
		return r;
	}
	while (fgets(line, sizeof(line), f)) {
		struct hyd_s3_key *v;

		lineno++;
		r = keys_line(line, &k);
		if (r == 0)
			continue;
		if (r < 0) {
			base_error("--s3-keys file=%s line=%u: want "
				   "\"ACCESS_KEY SECRET\"",
				   path, lineno);
			goto out;
		}
		v = realloc(ret->v, (ret->n + 1) * sizeof(*v));
		if (!v) {
			r = -ENOMEM;
			goto out;
		}
		ret->v = v;
		ret->v[ret->n++] = k;
		r = 0;
	}
	if (ret->n == 0) {
		base_error("--s3-keys file=%s holds no key", path);
		r = -EINVAL;
	}
out:
	OPENSSL_cleanse(line, sizeof(line));
	OPENSSL_cleanse(&k, sizeof(k));
	fclose(f);
	if (r < 0)
		hyd_s3_keys_fini(ret);
	return r;
}

void hyd_s3_keys_fini(struct hyd_s3_keys *k)
{
	if (k->v)
		OPENSSL_cleanse(k->v, k->n * sizeof(*k->v));
	free(k->v);
	memset(k, 0, sizeof(*k));
}
