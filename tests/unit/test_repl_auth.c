/*
 * tests/unit/test_repl_auth.c — the replicator's bearer tokens
 * (replicator/serve/repl_auth.c): the tokens file parser (comments, blank
 * lines, CRLF, several tokens per namespace, and every malformed line
 * refused with its number), loading from a file (missing, too large),
 * the check of an Authorization value (scheme, blanks, several headers,
 * too long, another namespace's token, a near miss), and that the check
 * is constant-time in the way repl_auth.c promises: the presented token's
 * SHA-256, never the token, is compared, with CRYPTO_memcmp, against
 * every line of the file whichever matched. This test defines
 * CRYPTO_memcmp itself (the linker binds repl_auth.o's calls to it), counts
 * the calls and what they compared, and hands each on to OpenSSL's.
 * Also repl_token_new (43 base64url characters, the hex SHA-256 of that
 * text, never the same twice) and repl_token_hash_hex against a known
 * vector.
 */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "catalog/base/base.h"
#include "replicator/replicator.h"
#include "replicator/serve/repl_auth.h"
#include "tsupport.h"

/* -- CRYPTO_memcmp, counted -- */

static unsigned n_memcmp;
static unsigned char last_a[32];

int CRYPTO_memcmp(const void *a, const void *b, size_t len)
{
	static int (*real)(const void *, const void *, size_t);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "CRYPTO_memcmp");
	assert_non_null(real);
	n_memcmp++;
	if (len == sizeof(last_a))
		memcpy(last_a, a, len);
	return real(a, b, len);
}

/* -- helpers -- */

static void digest_of(const char *s, unsigned char out[32])
{
	unsigned int n = 0;

	assert_int_equal(EVP_Digest(s, strlen(s), out, &n, EVP_sha256(), NULL),
			 1);
	assert_int_equal(n, 32);
}

static void hex_of(const char *s, char out[65])
{
	assert_int_equal(repl_token_hash_hex(s, strlen(s), out), 0);
}

static struct repl_tokens *parse_ok(const char *text)
{
	struct repl_tokens *t = NULL;
	char err[256];

	assert_int_equal(
	    repl_tokens_parse(text, strlen(text), &t, err, sizeof(err)), 0);
	assert_non_null(t);
	return t;
}

/* text must be refused, err naming line `line`. */
static void parse_bad(const char *text, size_t len, unsigned line)
{
	struct repl_tokens *t = (struct repl_tokens *)1;
	char err[256], want[32];

	assert_int_equal(repl_tokens_parse(text, len, &t, err, sizeof(err)),
			 -EINVAL);
	assert_null(t);
	snprintf(want, sizeof(want), "line %u:", line);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("error '%s' does not start with '%s'", err, want);
}

static enum repl_auth check(const struct repl_tokens *t, const char *ns,
			    const char *authz)
{
	return repl_tokens_check(t, ns, strlen(ns), authz ? 1 : 0,
				 authz ? authz : "", authz ? strlen(authz) : 0,
				 0, NULL);
}

/* -- the tokens file -- */

static void test_parse(void **state)
{
	char h1[65], h2[65], h3[65], text[1024];
	struct repl_tokens *t;

	(void)state;
	hex_of("tok-one", h1);
	hex_of("tok-two", h2);
	hex_of("tok-three", h3);
	/* comments, blank lines, tabs, CRLF, upper-case hex, several
	 * tokens for one namespace, no newline at the end */
	for (char *p = h3; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	snprintf(text, sizeof(text),
		 "# tokens\n"
		 "\n"
		 "   # indented comment\n"
		 "data %s\n"
		 "\tmodels\t \t%s  \r\n"
		 "   \t\r\n"
		 "data %s",
		 h1, h2, h3);
	t = parse_ok(text);
	assert_int_equal(repl_tokens_count(t), 3);
	assert_int_equal(repl_tokens_of(t, "data", 4), 2);
	assert_int_equal(repl_tokens_of(t, "models", 6), 1);
	assert_int_equal(repl_tokens_of(t, "dat", 3), 0);
	assert_string_equal(repl_tokens_ns(t, 1), "models");
	assert_int_equal(check(t, "data", "Bearer tok-one"), REPL_AUTH_OK);
	assert_int_equal(check(t, "data", "Bearer tok-three"), REPL_AUTH_OK);
	assert_int_equal(check(t, "models", "Bearer tok-two"), REPL_AUTH_OK);
	repl_tokens_free(t);

	/* an empty file and one of comments only: no token, all refused */
	t = parse_ok("");
	assert_int_equal(repl_tokens_count(t), 0);
	assert_int_equal(check(t, "data", "Bearer tok-one"), REPL_AUTH_INVALID);
	repl_tokens_free(t);
	t = parse_ok("# nothing yet\n\n");
	assert_int_equal(repl_tokens_count(t), 0);
	repl_tokens_free(t);
}

static void test_parse_bad(void **state)
{
	char h[65], text[2048];
	size_t n;

	(void)state;
	hex_of("x", h);
	parse_bad("data\n", 5, 1);
	snprintf(text, sizeof(text), "# c\n\ndata %s extra\n", h);
	parse_bad(text, strlen(text), 3);
	snprintf(text, sizeof(text), "data %s\n.hidden %s\n", h, h);
	parse_bad(text, strlen(text), 2);
	snprintf(text, sizeof(text), "a/b %s\n", h);
	parse_bad(text, strlen(text), 1);
	/* a name of 65 characters: one too many */
	memset(text, 'a', BASE_NS_NAME_MAX + 1);
	snprintf(text + BASE_NS_NAME_MAX + 1, sizeof(text) - 80, " %s\n", h);
	parse_bad(text, strlen(text), 1);
	text[BASE_NS_NAME_MAX] = ' '; /* 64 characters: fine */
	{
		struct repl_tokens *t = parse_ok(text + 1);

		assert_int_equal(repl_tokens_count(t), 1);
		repl_tokens_free(t);
	}
	snprintf(text, sizeof(text), "data %.63s\n", h); /* 63 digits */
	parse_bad(text, strlen(text), 1);
	snprintf(text, sizeof(text), "data %s0\n", h); /* 65 digits */
	parse_bad(text, strlen(text), 1);
	snprintf(text, sizeof(text), "data %s\n", h);
	text[5 + 17] = 'g'; /* not a hex digit */
	parse_bad(text, strlen(text), 1);
	/* a raw token where the digest goes is not taken for one */
	parse_bad("data w6jtrw__v1H6T5UVqMP7lqrFaX6o84OhDt64Q5TehJU\n", 49, 1);
	/* a NUL byte inside a line */
	n = (size_t)snprintf(text, sizeof(text), "# ok\ndata %s\n", h);
	text[7] = '\0';
	parse_bad(text, n, 2);
	/* a line longer than REPL_TOKENS_LINE_MAX, even a comment */
	memset(text, ' ', sizeof(text));
	text[0] = '#';
	text[REPL_TOKENS_LINE_MAX + 1] = '\n';
	parse_bad(text, REPL_TOKENS_LINE_MAX + 2, 1);
}

static void test_load(void **state)
{
	char dir[] = "/tmp/test_repl_auth.XXXXXX", path[64], err[256], h[65];
	char line[128], *big;
	struct repl_tokens *t = NULL;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tokens", dir);
	assert_int_equal(repl_tokens_load(path, &t, err, sizeof(err)), -ENOENT);
	assert_null(t);
	assert_non_null(strstr(err, "No such file"));
	hex_of("secret", h);
	snprintf(line, sizeof(line), "ns %s\n", h);
	tsup_write_file(path, line, strlen(line));
	assert_int_equal(repl_tokens_load(path, &t, err, sizeof(err)), 0);
	assert_int_equal(repl_tokens_count(t), 1);
	assert_int_equal(check(t, "ns", "Bearer secret"), REPL_AUTH_OK);
	repl_tokens_free(t);
	t = NULL;
	/* over REPL_TOKENS_FILE_MAX: refused whole */
	big = malloc(REPL_TOKENS_FILE_MAX + 1);
	assert_non_null(big);
	memset(big, '\n', REPL_TOKENS_FILE_MAX + 1);
	tsup_write_file(path, big, REPL_TOKENS_FILE_MAX + 1);
	free(big);
	assert_int_equal(repl_tokens_load(path, &t, err, sizeof(err)), -EFBIG);
	assert_null(t);
	tsup_rm_rf(dir);
}

/* -- the check -- */

static void test_check(void **state)
{
	char ha[65], hb[65], text[512], big[REPL_AUTH_MAX + 16], whohex[65];
	unsigned char who[REPL_TOKEN_DIGEST_LEN];
	struct repl_tokens *t;
	size_t i;

	(void)state;
	hex_of("alpha-token", ha);
	hex_of("beta_token~+/=", hb);
	snprintf(text, sizeof(text), "a %s\nb %s\n", ha, hb);
	t = parse_ok(text);
	assert_int_equal(check(t, "a", "Bearer alpha-token"), REPL_AUTH_OK);
	assert_int_equal(check(t, "b", "Bearer beta_token~+/="), REPL_AUTH_OK);
	/* the scheme in any case, blanks around the token */
	assert_int_equal(check(t, "a", "bearer alpha-token"), REPL_AUTH_OK);
	assert_int_equal(check(t, "a", "BEARER \t alpha-token \t"),
			 REPL_AUTH_OK);
	/* another namespace's token opens nothing here */
	assert_int_equal(check(t, "a", "Bearer beta_token~+/="),
			 REPL_AUTH_INVALID);
	assert_int_equal(check(t, "b", "Bearer alpha-token"),
			 REPL_AUTH_INVALID);
	assert_int_equal(check(t, "c", "Bearer alpha-token"),
			 REPL_AUTH_INVALID);
	/* the namespace compared whole */
	assert_int_equal(
	    repl_tokens_check(t, "ab", 1, 1, "Bearer alpha-token", 18, 0, NULL),
	    REPL_AUTH_OK);
	assert_int_equal(
	    repl_tokens_check(t, "ab", 2, 1, "Bearer alpha-token", 18, 0, NULL),
	    REPL_AUTH_INVALID);
	/* near misses */
	assert_int_equal(check(t, "a", "Bearer alpha-toke"), REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearer alpha-tokenx"),
			 REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearer alpha-tokeN"),
			 REPL_AUTH_INVALID);
	/* the digest the file holds is not a token */
	snprintf(text, sizeof(text), "Bearer %s", ha);
	assert_int_equal(check(t, "a", text), REPL_AUTH_INVALID);
	/* malformed values */
	assert_int_equal(check(t, "a", NULL), REPL_AUTH_MISSING);
	assert_int_equal(check(t, "a", ""), REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearer"), REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearer "), REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearerx alpha-token"),
			 REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Basic alpha-token"), REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearer alpha token"),
			 REPL_AUTH_INVALID);
	assert_int_equal(check(t, "a", "Bearer alpha-token,x"),
			 REPL_AUTH_INVALID);
	/* several Authorization headers, or one cut because too long */
	assert_int_equal(
	    repl_tokens_check(t, "a", 1, 2, "Bearer alpha-token", 18, 0, NULL),
	    REPL_AUTH_INVALID);
	assert_int_equal(
	    repl_tokens_check(t, "a", 1, 1, "Bearer alpha-token", 18, 1, NULL),
	    REPL_AUTH_INVALID);
	memset(big, 'x', sizeof(big));
	memcpy(big, "Bearer ", 7);
	assert_int_equal(
	    repl_tokens_check(t, "a", 1, 1, big, REPL_AUTH_MAX, 0, NULL),
	    REPL_AUTH_INVALID);
	/* no tokens at all (a caller without a set): refused */
	assert_int_equal(check(NULL, "a", "Bearer alpha-token"),
			 REPL_AUTH_INVALID);
	/* who the client is: the token's SHA-256, when it opens the
	 * namespace; nothing written when it does not */
	memset(who, 0xee, sizeof(who));
	assert_int_equal(
	    repl_tokens_check(t, "a", 1, 1, "Bearer alpha-token", 18, 0, who),
	    REPL_AUTH_OK);
	for (i = 0; i < sizeof(who); i++)
		snprintf(whohex + 2 * i, 3, "%02x", who[i]);
	assert_string_equal(whohex, ha);
	memset(who, 0xee, sizeof(who));
	assert_int_equal(
	    repl_tokens_check(t, "b", 1, 1, "Bearer alpha-token", 18, 0, who),
	    REPL_AUTH_INVALID);
	for (i = 0; i < sizeof(who); i++)
		assert_int_equal(who[i], 0xee);
	repl_tokens_free(t);
}

/* Every check that gets as far as a digest compares it with every line,
 * through CRYPTO_memcmp, wherever (and whether) it matches; what is
 * compared is the SHA-256 of the token, not its text. */
static void test_constant_time(void **state)
{
	static const char *const toks[] = {"t0", "t1", "t2", "t3", "t4"};
	static const char *const nss[] = {"a", "b", "a", "c", "a"};
	unsigned char d[32];
	char h[65], text[1024], authz[64];
	size_t off = 0, i;
	struct repl_tokens *t;

	(void)state;
	for (i = 0; i < 5; i++) {
		hex_of(toks[i], h);
		off += (size_t)snprintf(text + off, sizeof(text) - off,
					"%s %s\n", nss[i], h);
	}
	t = parse_ok(text);
	for (i = 0; i < 5; i++) {
		snprintf(authz, sizeof(authz), "Bearer %s", toks[i]);
		n_memcmp = 0;
		assert_int_equal(check(t, nss[i], authz), REPL_AUTH_OK);
		assert_int_equal(n_memcmp, 5);
		digest_of(toks[i], d);
		assert_memory_equal(last_a, d, 32);
		/* the same token for another namespace: every line too */
		n_memcmp = 0;
		assert_int_equal(check(t, "b", authz),
				 i == 1 ? REPL_AUTH_OK : REPL_AUTH_INVALID);
		assert_int_equal(n_memcmp, 5);
	}
	n_memcmp = 0;
	assert_int_equal(check(t, "a", "Bearer nobody"), REPL_AUTH_INVALID);
	assert_int_equal(n_memcmp, 5);
	/* refused before any digest: nothing compared */
	n_memcmp = 0;
	assert_int_equal(check(t, "a", NULL), REPL_AUTH_MISSING);
	assert_int_equal(check(t, "a", "Basic t0"), REPL_AUTH_INVALID);
	assert_int_equal(n_memcmp, 0);
	repl_tokens_free(t);
}

/* -- making tokens -- */

static void test_token_new(void **state)
{
	char tok[REPL_TOKEN_TEXT_MAX + 1], tok2[REPL_TOKEN_TEXT_MAX + 1];
	char hex[65], hex2[65], small[16];
	size_t i;

	(void)state;
	/* a known vector: SHA-256("abc") */
	assert_int_equal(repl_token_hash_hex("abc", 3, hex), 0);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223"
				 "b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(repl_token_new(tok, sizeof(tok), hex), 0);
	assert_int_equal(strlen(tok), 43);
	for (i = 0; i < 43; i++)
		assert_non_null(strchr(
		    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789-_",
		    tok[i]));
	assert_int_equal(repl_token_hash_hex(tok, strlen(tok), hex2), 0);
	assert_string_equal(hex, hex2);
	assert_int_equal(repl_token_new(tok2, sizeof(tok2), hex2), 0);
	assert_string_not_equal(tok, tok2);
	assert_string_not_equal(hex, hex2);
	assert_int_equal(repl_token_new(small, sizeof(small), hex), -ENOBUFS);
	/* and it opens its namespace through a file line made from hex */
	{
		char text[128];
		struct repl_tokens *t;

		assert_int_equal(repl_token_new(tok, sizeof(tok), hex), 0);
		snprintf(text, sizeof(text), "ns %s\n", hex);
		t = parse_ok(text);
		snprintf(text, sizeof(text), "Bearer %s", tok);
		assert_int_equal(check(t, "ns", text), REPL_AUTH_OK);
		repl_tokens_free(t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_parse_bad),
	    cmocka_unit_test(test_load),
	    cmocka_unit_test(test_check),
	    cmocka_unit_test(test_constant_time),
	    cmocka_unit_test(test_token_new),
	};

	base_log_init("test_repl_auth", BASE_LOG_INFO);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
