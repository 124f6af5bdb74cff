/*
 * replicator/serve/repl_auth.c — bearer tokens: making one (`ferry token new`),
 * the tokens file of `ferry-replicator --tokens` (its format is in
 * repl_auth.h and ferry-replicator(1)), and the check of a
 * request's Authorization header against it.
 *
 * Only digests are kept: the file and this memory hold the SHA-256 of each
 * token, so reading them gives nobody a token. A presented token is hashed
 * once and its digest compared with CRYPTO_memcmp against every digest,
 * whatever matched before, so the time a check takes depends only on the
 * number of lines and on the presented token's own length. Nothing here
 * logs; the caller says what failed, never with a token in it.
 *
 * No libuv in here: the ferry command links this file alone.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_auth.h"

#define DIGEST_LEN 32u

struct repl_token_line {
	char ns[BASE_NS_NAME_MAX + 1];
	unsigned char digest[DIGEST_LEN];
};

struct repl_tokens {
	size_t n;
	struct repl_token_line *lines;
};

static int sha256(const void *buf, size_t len, unsigned char out[DIGEST_LEN])
{
	unsigned int md_len = 0;
	static const char empty[1];

	if (EVP_Digest(len ? buf : empty, len, out, &md_len, EVP_sha256(),
		       NULL) != 1 ||
	    md_len != DIGEST_LEN)
		return -EIO;
	return 0;
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int repl_token_hash_hex(const char *token, size_t len, char ret_hex[65])
{
	unsigned char d[DIGEST_LEN];
	int r = sha256(token, len, d);

	if (r < 0)
		return r;
	to_hex(d, DIGEST_LEN, ret_hex);
	OPENSSL_cleanse(d, sizeof(d));
	return 0;
}

int repl_token_new(char *ret_token, size_t cap, char ret_hex[65])
{
	static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				     "abcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char raw[REPL_TOKEN_BYTES];
	size_t i, o = 0;
	uint32_t acc = 0;
	int bits = 0, r;

	if (cap < REPL_TOKEN_TEXT_MAX + 1)
		return -ENOBUFS;
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -EIO;
	/* base64url without padding (RFC 4648 section 5): 43 characters,
	 * all of them RFC 6750 b64token characters */
	for (i = 0; i < sizeof(raw); i++) {
		acc = (acc << 8) | raw[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			ret_token[o++] = b64url[(acc >> bits) & 63];
		}
	}
	if (bits > 0)
		ret_token[o++] = b64url[(acc << (6 - bits)) & 63];
	ret_token[o] = '\0';
	OPENSSL_cleanse(raw, sizeof(raw));
	r = repl_token_hash_hex(ret_token, o, ret_hex);
	if (r < 0)
		OPENSSL_cleanse(ret_token, cap);
	return r;
}

/* -- the tokens file -- */

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* One line (without its '\n'): blank, a comment, or NAME HEX. Adds the
 * token line to t (room made by the caller). */
static int parse_line(struct repl_tokens *t, const char *s, size_t len,
		      size_t lineno, char *err, size_t errcap)
{
	struct repl_token_line *l = &t->lines[t->n];
	size_t i = 0, ns0, nsl, hex0, hexl, k;

	if (len > REPL_TOKENS_LINE_MAX) {
		snprintf(err, errcap, "line %zu: longer than %u bytes", lineno,
			 REPL_TOKENS_LINE_MAX);
		return -EINVAL;
	}
	while (i < len && is_blank(s[i]))
		i++;
	if (i == len || s[i] == '#')
		return 0;
	ns0 = i;
	while (i < len && !is_blank(s[i]))
		i++;
	nsl = i - ns0;
	while (i < len && is_blank(s[i]))
		i++;
	hex0 = i;
	while (i < len && !is_blank(s[i]))
		i++;
	hexl = i - hex0;
	while (i < len && is_blank(s[i]))
		i++;
	if (hexl == 0 || i != len) {
		snprintf(err, errcap,
			 "line %zu: expected a namespace name and the "
			 "SHA-256 of a token in hex",
			 lineno);
		return -EINVAL;
	}
	if (base_ns_name_check(s + ns0, nsl) < 0) {
		snprintf(err, errcap,
			 "line %zu: not a namespace name (1-64 of "
			 "[A-Za-z0-9._-], not starting with '.')",
			 lineno);
		return -EINVAL;
	}
	if (hexl != 2 * DIGEST_LEN) {
		snprintf(err, errcap,
			 "line %zu: a token's SHA-256 is 64 hex digits "
			 "(ferry token new prints the line)",
			 lineno);
		return -EINVAL;
	}
	for (k = 0; k < DIGEST_LEN; k++) {
		int hi = base_hex_digit(s[hex0 + 2 * k]),
		    lo = base_hex_digit(s[hex0 + 2 * k + 1]);

		if (hi < 0 || lo < 0) {
			snprintf(err, errcap,
				 "line %zu: a token's SHA-256 is 64 hex digits",
				 lineno);
			return -EINVAL;
		}
		l->digest[k] = (unsigned char)(hi << 4 | lo);
	}
	memcpy(l->ns, s + ns0, nsl);
	l->ns[nsl] = '\0';
	t->n++;
	return 0;
}

int repl_tokens_parse(const char *text, size_t len, struct repl_tokens **ret,
		      char *err, size_t errcap)
{
	struct repl_tokens *t;
	size_t lines = 1, i, start = 0, lineno = 0;
	int r = 0;

	*ret = NULL;
	if (errcap)
		err[0] = '\0';
	for (i = 0; i < len; i++)
		if (text[i] == '\n')
			lines++;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->lines = calloc(lines, sizeof(*t->lines));
	if (!t->lines) {
		free(t);
		return -ENOMEM;
	}
	for (i = 0; i <= len && r == 0; i++) {
		if (i < len && text[i] != '\n')
			continue;
		lineno++;
		if (i < len || i > start) {
			if (memchr(text + start, '\0', i - start)) {
				snprintf(err, errcap,
					 "line %zu: holds a NUL byte", lineno);
				r = -EINVAL;
				break;
			}
			r = parse_line(t, text + start, i - start, lineno, err,
				       errcap);
		}
		start = i + 1;
	}
	if (r < 0) {
		repl_tokens_free(t);
		return r;
	}
	*ret = t;
	return 0;
}

int repl_tokens_load(const char *path, struct repl_tokens **ret, char *err,
		     size_t errcap)
{
	char *buf = malloc(REPL_TOKENS_FILE_MAX + 1);
	size_t len = 0;
	int r;

	*ret = NULL;
	if (!buf)
		return -ENOMEM;
	r = base_file_read_small(path, buf, REPL_TOKENS_FILE_MAX + 1, &len);
	if (r == -EFBIG)
		snprintf(err, errcap, "larger than %u bytes",
			 REPL_TOKENS_FILE_MAX);
	else if (r < 0)
		snprintf(err, errcap, "%s", strerror(-r));
	else
		r = repl_tokens_parse(buf, len, ret, err, errcap);
	free(buf);
	return r;
}

void repl_tokens_free(struct repl_tokens *t)
{
	if (!t)
		return;
	free(t->lines);
	free(t);
}

size_t repl_tokens_count(const struct repl_tokens *t)
{
	return t ? t->n : 0;
}

const char *repl_tokens_ns(const struct repl_tokens *t, size_t i)
{
	return t->lines[i].ns;
}

static int ns_is(const struct repl_token_line *l, const char *ns, size_t len)
{
	return strlen(l->ns) == len && memcmp(l->ns, ns, len) == 0;
}

size_t repl_tokens_of(const struct repl_tokens *t, const char *ns,
		      size_t ns_len)
{
	size_t i, n = 0;

	for (i = 0; t && i < t->n; i++)
		n += (size_t)ns_is(&t->lines[i], ns, ns_len);
	return n;
}

/* RFC 6750's b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
 * "/" ) *"=" — checked loosely (any '=' among them): the digest decides. */
static int token_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || (c && strchr("-._~+/=", c));
}

enum repl_auth repl_tokens_check(const struct repl_tokens *t, const char *ns,
				 size_t ns_len, unsigned n_hdr,
				 const char *authz, size_t authz_len, int over,
				 unsigned char *ret_digest)
{
	unsigned char d[DIGEST_LEN];
	size_t i = 0, tok0, tokl;
	unsigned match = 0;

	if (n_hdr == 0)
		return REPL_AUTH_MISSING;
	if (n_hdr > 1 || over || !t)
		return REPL_AUTH_INVALID;
	if (authz_len < 7 || strncasecmp(authz, "Bearer", 6) != 0 ||
	    (authz[6] != ' ' && authz[6] != '\t'))
		return REPL_AUTH_INVALID;
	i = 6;
	while (i < authz_len && is_blank(authz[i]))
		i++;
	tok0 = i;
	while (i < authz_len && token_char((unsigned char)authz[i]))
		i++;
	tokl = i - tok0;
	while (i < authz_len && is_blank(authz[i]))
		i++;
	if (tokl == 0 || i != authz_len)
		return REPL_AUTH_INVALID;
	if (sha256(authz + tok0, tokl, d) < 0)
		return REPL_AUTH_INVALID;
	/* Every line is compared, whichever matched: no early exit. */
	for (i = 0; i < t->n; i++) {
		unsigned same =
		    CRYPTO_memcmp(d, t->lines[i].digest, DIGEST_LEN) == 0;

		match |= same & (unsigned)ns_is(&t->lines[i], ns, ns_len);
	}
	if (match && ret_digest)
		memcpy(ret_digest, d, DIGEST_LEN);
	OPENSSL_cleanse(d, sizeof(d));
	return match ? REPL_AUTH_OK : REPL_AUTH_INVALID;
}
