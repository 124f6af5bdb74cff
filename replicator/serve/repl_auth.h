/*
 * replicator/serve/repl_auth.h — per-namespace bearer tokens: the
 * tokens file of `ferry-replicator --tokens FILE` and the check of a
 * request's Authorization header against it (repl_auth.c).
 *
 * The tokens file holds no token, only the SHA-256 of each: one line per
 * token, "NAME HEX" (a namespace name, blanks, the 64 hex digits of the
 * SHA-256 of the token's text), '#' comment lines and blank lines
 * allowed; a namespace may have several tokens (several clients, or a
 * rotation), and a namespace with none refuses every request.
 *
 * A check hashes the presented token once and compares that digest with
 * every digest of the file (CRYPTO_memcmp, no early exit), so how long it
 * takes says nothing about which bytes of which token matched.
 *
 * A struct repl_tokens is immutable once made; any thread may check
 * against it. Who frees it: its owner, with repl_tokens_free.
 */
#ifndef FERRY_REPL_AUTH_H
#define FERRY_REPL_AUTH_H

#include <stddef.h>

/* Bounds of a tokens file, and of an Authorization header we look at. */
#define REPL_TOKENS_FILE_MAX (1u << 20)
#define REPL_TOKENS_LINE_MAX 512u
#define REPL_AUTH_MAX 1024u

struct repl_tokens;

/* Parse the text of a tokens file (text[0..len), no NUL needed). On
 * success *ret is a new set (free with repl_tokens_free); on failure
 * *ret is NULL and err holds one line without a newline naming the first
 * bad line ("line 3: ..."), never the line's bytes beyond the namespace.
 * Returns 0, -EINVAL (malformed), -ENOMEM. */
int repl_tokens_parse(const char *text, size_t len, struct repl_tokens **ret,
		      char *err, size_t errcap);

/* Read and parse the tokens file at path (at most REPL_TOKENS_FILE_MAX
 * bytes). Errors as repl_tokens_parse, plus -errno from reading it (err
 * says which), -EFBIG when it is too large. Blocking. */
int repl_tokens_load(const char *path, struct repl_tokens **ret, char *err,
		     size_t errcap);

void repl_tokens_free(struct repl_tokens *t);

/* How many tokens (lines) the set holds, and how many of them are of
 * namespace ns (ns_len bytes). */
size_t repl_tokens_count(const struct repl_tokens *t);
size_t repl_tokens_of(const struct repl_tokens *t, const char *ns,
		      size_t ns_len);

/* The i-th token line's namespace (i < repl_tokens_count), NUL-ended. */
const char *repl_tokens_ns(const struct repl_tokens *t, size_t i);

enum repl_auth {
	REPL_AUTH_OK = 0,      /* a token of this namespace */
	REPL_AUTH_MISSING = 1, /* no Authorization header */
	REPL_AUTH_INVALID = 2, /* any other: malformed, not Bearer, several
				* headers, too long, or no token of ns */
};

/* May a request that carried n_hdr Authorization headers, the value of
 * the last being authz[0..authz_len) (cut at REPL_AUTH_MAX: over is set
 * when it was longer), read namespace ns (ns_len bytes)? The value must
 * be "Bearer TOKEN" (scheme in any case, RFC 6750's b64token). With
 * REPL_AUTH_OK, ret_digest (NULL: not wanted; else REPL_TOKEN_DIGEST_LEN
 * bytes) gets the token's SHA-256: who the client is, for its share of
 * the server (the tokens file holds it already). */
#define REPL_TOKEN_DIGEST_LEN 32u
enum repl_auth repl_tokens_check(const struct repl_tokens *t, const char *ns,
				 size_t ns_len, unsigned n_hdr,
				 const char *authz, size_t authz_len, int over,
				 unsigned char *ret_digest);

/* -- bearer tokens (ferry-replicator --tokens, `ferry token new`) -- */

/* A token is REPL_TOKEN_BYTES random bytes written as base64url without
 * padding (43 characters of [A-Za-z0-9_-]); the replicator's tokens file
 * holds only its SHA-256, "NAME HEX" per line (ferry-replicator(1)). */
#define REPL_TOKEN_BYTES 32u
#define REPL_TOKEN_TEXT_MAX 64u

/* A fresh token from OpenSSL's RAND_bytes into ret_token (cap >=
 * REPL_TOKEN_TEXT_MAX + 1, NUL-ended) and the lowercase hex SHA-256 of its
 * text into ret_hex. Returns 0, -ENOBUFS (cap), -EIO (no randomness). */
int repl_token_new(char *ret_token, size_t cap, char ret_hex[65]);

/* The lowercase hex SHA-256 of token[0..len), as a tokens file line wants
 * it. Returns 0 or -EIO. */
int repl_token_hash_hex(const char *token, size_t len, char ret_hex[65]);

#endif
