/*
 * hydrator/fetch/hyd_trust.c — the destination's side of signed
 * generations (see hyd_trust_priv.h): a statement checked against the
 * trusted key, the URL's namespace, the generation asked for and the
 * highest one seen; the statements and that generation kept in the
 * cache. The catalog download (hyd_catalog_fetch.c) calls these before it
 * installs anything.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_trust_priv.h"

_Static_assert(HYD_TRUST_PUB_LEN == CAT_SIGN_PUB_LEN,
	       "--trust-key holds a raw Ed25519 public key");

#define SEEN_NAME "seen"

int hyd_trust_on(const struct hyd_creds *c)
{
	return c && c->trust_key;
}

int hyd_trust_url_ns(const char *base_url, char *ns, size_t cap)
{
	size_t len = strlen(base_url);
	const char *end, *start;

	while (len && base_url[len - 1] == '/')
		len--;
	end = base_url + len;
	start = end;
	while (start > base_url && start[-1] != '/')
		start--;
	if (base_ns_name_check(start, (size_t)(end - start)) < 0 ||
	    (size_t)(end - start) >= cap)
		return -EINVAL;
	memcpy(ns, start, (size_t)(end - start));
	ns[end - start] = '\0';
	return 0;
}

static int path_of(char *buf, size_t cap, const char *cat_dir, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", cat_dir, name);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int hyd_trust_seen(const char *cat_dir, uint64_t *ret)
{
	char p[4200], buf[32];
	size_t len = 0;
	int r;

	*ret = 0;
	r = path_of(p, sizeof(p), cat_dir, SEEN_NAME);
	if (r < 0)
		return r;
	r = base_file_read_small(p, buf, sizeof(buf), &len);
	if (r == -ENOENT)
		return 0;
	if (r == -EFBIG)
		return -EBADMSG;
	if (r < 0)
		return r;
	if (len < 2 || buf[len - 1] != '\n')
		return -EBADMSG;
	buf[len - 1] = '\0';
	return base_parse_u64(buf, 1, UINT64_MAX, ret) < 0 ? -EBADMSG : 0;
}

int hyd_trust_seen_raise(const char *cat_dir, uint64_t gen)
{
	char p[4200], line[32];
	uint64_t now = 0;
	int n, r;

	r = hyd_trust_seen(cat_dir, &now);
	/* a damaged file says nothing we can keep: replaced */
	if (r < 0 && r != -EBADMSG)
		return r;
	if (r == 0 && now >= gen)
		return 0;
	r = path_of(p, sizeof(p), cat_dir, SEEN_NAME);
	if (r < 0)
		return r;
	n = snprintf(line, sizeof(line), "%" PRIu64 "\n", gen);
	return base_file_write_atomic(p, line, (size_t)n, 0600);
}

/* The first 16 hex digits of a key id: enough to tell keys apart in a
 * message. */
#define ID_SHOWN 16

int hyd_trust_check(const struct hyd_creds *c, const char *ns, uint64_t gen,
		    uint64_t seen, const void *buf, size_t len,
		    struct cat_stmt *ret, char *why, size_t whycap)
{
	char ours[65];
	int r;

	r = cat_sign_key_id(c->trust_pub, ours);
	if (r < 0) {
		snprintf(why, whycap, "cannot compute the trusted key's id");
		return -EKEYREJECTED;
	}
	r = cat_stmt_verify(buf, len, c->trust_pub, ret);
	if (r == -EBADMSG) {
		snprintf(why, whycap, "not a signed statement");
		return -EKEYREJECTED;
	}
	if (r == -EKEYREJECTED && strcmp(ret->key_id, ours) != 0) {
		snprintf(why, whycap,
			 "signed by another key (key %.*s, not the trusted "
			 "%.*s of %s)",
			 ID_SHOWN, ret->key_id, ID_SHOWN, ours, c->trust_key);
		return -EKEYREJECTED;
	}
	if (r < 0) {
		snprintf(why, whycap,
			 "the signature does not verify with the trusted key "
			 "(%s): the statement was changed",
			 c->trust_key);
		return -EKEYREJECTED;
	}
	if (strcmp(ret->ns, ns) != 0) {
		snprintf(why, whycap,
			 "the signature is for namespace '%s', not '%s'",
			 ret->ns, ns);
		return -EKEYREJECTED;
	}
	if (ret->generation != gen) {
		snprintf(why, whycap,
			 "the signature is for generation %" PRIu64
			 ", not %" PRIu64,
			 ret->generation, gen);
		return -EKEYREJECTED;
	}
	if (gen < seen) {
		snprintf(why, whycap,
			 "generation %" PRIu64
			 " is older than generation %" PRIu64
			 " already seen from this URL (a rollback)",
			 gen, seen);
		return -EKEYREJECTED;
	}
	return 0;
}

int hyd_trust_keep(const char *cat_dir, uint64_t gen, const void *buf,
		   size_t len)
{
	char name[32], p[4200];
	int r;

	snprintf(name, sizeof(name), "%" PRIu64 ".sig", gen);
	r = path_of(p, sizeof(p), cat_dir, name);
	return r < 0 ? r : base_file_write_atomic(p, buf, len, 0600);
}

int hyd_trust_kept(const struct hyd_creds *c, const char *cat_dir,
		   const char *ns, uint64_t gen, struct cat_stmt *ret)
{
	char name[32], p[4200], buf[CAT_STMT_MAX + 1];
	size_t len = 0;
	int r;

	snprintf(name, sizeof(name), "%" PRIu64 ".sig", gen);
	r = path_of(p, sizeof(p), cat_dir, name);
	if (r == 0)
		r = base_file_read_small(p, buf, sizeof(buf), &len);
	if (r == -EFBIG)
		return -EKEYREJECTED;
	if (r < 0)
		return r;
	r = cat_stmt_verify(buf, len, c->trust_pub, ret);
	if (r == -EBADMSG ||
	    (r == 0 && (strcmp(ret->ns, ns) != 0 || ret->generation != gen)))
		r = -EKEYREJECTED;
	return r;
}

/* GEN of "GEN.sig" (GEN decimal, no leading zero); 0 otherwise. */
static uint64_t sig_gen(const char *name)
{
	size_t digits = strspn(name, "0123456789");
	char num[24];
	uint64_t g;

	if (digits == 0 || digits > 20 || name[0] == '0' ||
	    strcmp(name + digits, ".sig") != 0)
		return 0;
	memcpy(num, name, digits);
	num[digits] = '\0';
	return base_parse_u64(num, 1, UINT64_MAX, &g) == 0 ? g : 0;
}

void hyd_trust_forget(const char *cat_dir, int all)
{
	char p[4200], name[32];
	struct dirent *de;
	DIR *d = opendir(cat_dir);
	uint64_t g;

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		g = sig_gen(de->d_name);
		if (g == 0)
			continue;
		snprintf(name, sizeof(name), "%" PRIu64 ".db", g);
		if (!all && path_of(p, sizeof(p), cat_dir, name) == 0 &&
		    access(p, F_OK) == 0)
			continue;
		if (path_of(p, sizeof(p), cat_dir, de->d_name) == 0)
			unlink(p);
	}
	closedir(d);
	if (all && path_of(p, sizeof(p), cat_dir, SEEN_NAME) == 0)
		unlink(p);
}
