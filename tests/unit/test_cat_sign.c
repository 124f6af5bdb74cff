/*
 * tests/unit/test_cat_sign.c — signed generations (catalog/cat_sign.c):
 * a key pair made in a temp dir (modes, never overwritten, what
 * `openssl pkey` reads), keys loaded back and refused when they are not
 * Ed25519 keys of the right kind; a statement signed, formatted, parsed
 * and verified, refused by another key (naming the key that signed it)
 * and after any byte of it changed; the parser's refusals, one per rule;
 * a manifests answer's signature, refused for another body, range,
 * generation or namespace.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "catalog/catalog.h"
#include "tsupport.h"

/* A P-256 key, made once with `openssl genpkey -algorithm EC`: a valid
 * key of another kind. */
static const char EC_KEY[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgwvhcbMZx568KsJfE\n"
    "9qAim1gqLFxNkFu+9Hgz2WhVyqmhRANCAAS0RdSk7IhMCJiRbCAcWZ/7HGDQuAyN\n"
    "JfTUw+1cCYDeXNejA55qbykiPudbFqQnLgxPfKB8tQVfTT9CbVT5DwMm\n"
    "-----END PRIVATE KEY-----\n";
static const char EC_PUB[] =
    "-----BEGIN PUBLIC KEY-----\n"
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEtEXUpOyITAiYkWwgHFmf+xxg0LgM\n"
    "jSX01MPtXAmA3lzXowOeam8pIj7nWxakJy4MT3ygfLUFX00/Qm1U+Q8DJg==\n"
    "-----END PUBLIC KEY-----\n";

#define DIGEST                                                                 \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

struct fx {
	char root[64], a[96], b[96];
	struct cat_sign_key ka, kb;
};

static void path_in(char *buf, size_t cap, const char *dir, const char *name)
{
	assert_true(snprintf(buf, cap, "%s/%s", dir, name) < (int)cap);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char p[160];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_cat_sign.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->a, sizeof(f->a), "%s/a", f->root);
	snprintf(f->b, sizeof(f->b), "%s/b/deeper", f->root);
	assert_int_equal(cat_sign_keygen(f->a), 0);
	assert_int_equal(cat_sign_keygen(f->b), 0);
	path_in(p, sizeof(p), f->a, "sign.key");
	assert_int_equal(cat_sign_key_load(p, &f->ka), 0);
	path_in(p, sizeof(p), f->b, "sign.key");
	assert_int_equal(cat_sign_key_load(p, &f->kb), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	cat_sign_key_wipe(&f->ka);
	cat_sign_key_wipe(&f->kb);
	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

static void test_keygen(void **state)
{
	struct fx *f = *state;
	char kp[160], pp[160], cmd[400];
	uint8_t pub[CAT_SIGN_PUB_LEN];
	struct stat st;

	path_in(kp, sizeof(kp), f->a, "sign.key");
	path_in(pp, sizeof(pp), f->a, "sign.pub");
	assert_int_equal(stat(kp, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(stat(pp, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(stat(f->b, &st), 0); /* made, with its parent */
	assert_int_equal(st.st_mode & 07777, 0700);
	/* the .pub is the private key's public half */
	assert_int_equal(cat_sign_pub_load(pp, pub), 0);
	assert_memory_equal(pub, f->ka.pub, CAT_SIGN_PUB_LEN);
	assert_memory_not_equal(f->ka.pub, f->kb.pub, CAT_SIGN_PUB_LEN);
	/* never over an existing key, nor half of one: nothing changes */
	{
		size_t n0, n1;
		void *before = tsup_read_file(kp, &n0), *after;

		assert_int_equal(cat_sign_keygen(f->a), -EEXIST);
		assert_int_equal(unlink(kp), 0);
		assert_int_equal(cat_sign_keygen(f->a), -EEXIST);
		assert_int_equal(access(kp, F_OK), -1);
		tsup_write_file(kp, before, n0);
		after = tsup_read_file(kp, &n1);
		assert_memory_equal(before, after, n0);
		free(before);
		free(after);
	}
	/* no temp file is left behind */
	snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) = 2", f->a);
	assert_int_equal(system(cmd), 0);
	/* what OpenSSL's own tool makes of it: the same public key */
	snprintf(cmd, sizeof(cmd),
		 "openssl pkey -in %s -pubout 2>/dev/null | cmp -s - %s", kp,
		 pp);
	assert_int_equal(system(cmd), 0);
}

static void test_key_refused(void **state)
{
	struct fx *f = *state;
	struct cat_sign_key k;
	uint8_t pub[CAT_SIGN_PUB_LEN];
	char p[160], kp[160], pp[160];

	path_in(kp, sizeof(kp), f->a, "sign.key");
	path_in(pp, sizeof(pp), f->a, "sign.pub");
	path_in(p, sizeof(p), f->root, "none");
	assert_int_equal(cat_sign_key_load(p, &k), -ENOENT);
	assert_int_equal(cat_sign_pub_load(p, pub), -ENOENT);
	/* one half for the other */
	assert_int_equal(cat_sign_key_load(pp, &k), -EBADMSG);
	assert_int_equal(cat_sign_pub_load(kp, pub), -EBADMSG);
	/* keys of another kind */
	path_in(p, sizeof(p), f->root, "ec.key");
	tsup_write_file(p, EC_KEY, strlen(EC_KEY));
	assert_int_equal(cat_sign_key_load(p, &k), -EBADMSG);
	path_in(p, sizeof(p), f->root, "ec.pub");
	tsup_write_file(p, EC_PUB, strlen(EC_PUB));
	assert_int_equal(cat_sign_pub_load(p, pub), -EBADMSG);
	/* garbage, and a file too big to be a key */
	path_in(p, sizeof(p), f->root, "junk");
	tsup_write_file(p, "not a key\n", 10);
	assert_int_equal(cat_sign_key_load(p, &k), -EBADMSG);
	assert_int_equal(cat_sign_pub_load(p, pub), -EBADMSG);
	{
		char *big = malloc(20000);

		assert_non_null(big);
		memset(big, 'A', 20000);
		tsup_write_file(p, big, 20000);
		free(big);
	}
	assert_int_equal(cat_sign_pub_load(p, pub), -EBADMSG);
}

/* A statement of generation 5 of "data", signed by k, into buf. */
static size_t signed_stmt(const struct cat_sign_key *k, char *buf, size_t cap,
			  struct cat_stmt *s)
{
	size_t n = 0;

	memset(s, 0, sizeof(*s));
	snprintf(s->ns, sizeof(s->ns), "data");
	s->generation = 5;
	s->parent = 4;
	memcpy(s->digest, DIGEST, 65);
	s->time = 1767225600;
	assert_int_equal(cat_stmt_sign(k, s, buf, cap, &n), 0);
	assert_int_equal(strlen(buf), n);
	return n;
}

static void test_statement(void **state)
{
	struct fx *f = *state;
	struct cat_stmt s, p;
	char buf[CAT_STMT_MAX], again[CAT_STMT_MAX], id[65];
	size_t n, n2;

	n = signed_stmt(&f->ka, buf, sizeof(buf), &s);
	assert_true(n < 512);
	assert_int_equal(
	    strncmp(buf,
		    "ferry-signed-generation/1\nnamespace data\n"
		    "generation 5\nparent 4\ncatalog-digest " DIGEST
		    "\ntime 1767225600\nkey ",
		    strlen("ferry-signed-generation/1\nnamespace data\n"
			   "generation 5\nparent 4\ncatalog-digest " DIGEST
			   "\ntime 1767225600\nkey ")),
	    0);
	assert_non_null(strstr(buf, "\nsignature "));
	assert_int_equal(buf[n - 1], '\n');
	assert_int_equal(cat_sign_key_id(f->ka.pub, id), 0);
	assert_string_equal(s.key_id, id);
	/* parse gives the fields back; format gives the bytes back */
	assert_int_equal(cat_stmt_verify(buf, n, f->ka.pub, &p), 0);
	assert_string_equal(p.ns, "data");
	assert_int_equal(p.generation, 5);
	assert_int_equal(p.parent, 4);
	assert_string_equal(p.digest, DIGEST);
	assert_int_equal(p.time, 1767225600);
	assert_string_equal(p.key_id, id);
	assert_memory_equal(p.sig, s.sig, CAT_SIGN_SIG_LEN);
	assert_int_equal(p.signed_len,
			 (size_t)(strstr(buf, "signature ") - buf));
	assert_int_equal(cat_stmt_format(&p, again, sizeof(again), &n2), 0);
	assert_int_equal(n2, n);
	assert_memory_equal(again, buf, n);
	/* Ed25519 is deterministic: the same statement, the same bytes */
	assert_int_equal(cat_stmt_sign(&f->ka, &s, again, sizeof(again), &n2),
			 0);
	assert_memory_equal(again, buf, n);
	/* another key: refused, and the parse says whose it is */
	assert_int_equal(cat_stmt_verify(buf, n, f->kb.pub, &p), -EKEYREJECTED);
	assert_string_equal(p.key_id, id);
	assert_int_equal(p.generation, 5);
}

static void test_statement_altered(void **state)
{
	struct fx *f = *state;
	struct cat_stmt s, p;
	char buf[CAT_STMT_MAX];
	size_t n, i;
	int r;

	n = signed_stmt(&f->ka, buf, sizeof(buf), &s);
	/* Any one byte changed, anywhere: refused, as not a statement or as
	 * a signature that does not verify; never accepted. */
	for (i = 0; i < n; i++) {
		char c = buf[i];

		buf[i] = c == '9' ? '8' : c == 'f' ? 'e' : c == '5' ? '6' : 'a';
		if (buf[i] == c)
			buf[i] = 'b';
		r = cat_stmt_verify(buf, n, f->ka.pub, &p);
		if (r != -EBADMSG && r != -EKEYREJECTED)
			fail_msg("byte %zu changed: verify says %d", i, r);
		buf[i] = c;
	}
	assert_int_equal(cat_stmt_verify(buf, n, f->ka.pub, &p), 0);
	/* the generation moved by one: parses, does not verify */
	{
		char *g = strstr(buf, "generation 5");

		g[11] = '6';
		assert_int_equal(cat_stmt_parse(buf, n, &p), 0);
		assert_int_equal(p.generation, 6);
		assert_int_equal(cat_stmt_verify(buf, n, f->ka.pub, &p),
				 -EKEYREJECTED);
	}
}

/* Replace the first "from" in good by "to" and expect a refusal. */
static void refused_with(const char *good, const char *from, const char *to)
{
	char buf[4096];
	const char *at = strstr(good, from);
	struct cat_stmt p;
	int n;

	assert_non_null(at);
	n = snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - good), good, to,
		     at + strlen(from));
	assert_true(n > 0 && n < (int)sizeof(buf));
	if (cat_stmt_parse(buf, (size_t)n, &p) != -EBADMSG)
		fail_msg("accepted with '%s' for '%s'", to, from);
	/* a refusal leaves nothing behind */
	assert_int_equal(p.generation, 0);
	assert_int_equal(p.ns[0], '\0');
}

static void test_parser_rules(void **state)
{
	struct fx *f = *state;
	struct cat_stmt s, p;
	char good[CAT_STMT_MAX], big[CAT_STMT_MAX + 64];
	size_t n;

	n = signed_stmt(&f->ka, good, sizeof(good), &s);
	assert_int_equal(cat_stmt_parse(good, n, &p), 0);
	refused_with(good, "ferry-signed-generation/1",
		     "ferry-signed-generation/2");
	refused_with(good, "ferry-signed-generation/1\n",
		     "ferry-signed-manifests/1\n");
	refused_with(good, "\n", "\r\n"); /* CRLF */
	refused_with(good, "namespace data", "namespace .data");
	refused_with(good, "namespace data", "namespace da/ta");
	refused_with(good, "namespace data", "namespace ");
	refused_with(good, "namespace data", "namespace  data");
	{
		char ns[80] = "namespace ";

		memset(ns + 10, 'a', 65); /* one over a name's 64 */
		ns[75] = '\0';
		refused_with(good, "namespace data", ns);
		ns[74] = '\0'; /* 64 is a name: parses */
		{
			const char *at = strstr(good, "namespace data");
			int m = snprintf(big, sizeof(big), "%.*s%s%s",
					 (int)(at - good), good, ns, at + 14);

			assert_true(m > 0 && m < (int)sizeof(big));
			assert_int_equal(cat_stmt_parse(big, (size_t)m, &p), 0);
			assert_int_equal(strlen(p.ns), 64);
		}
	}
	refused_with(good, "generation 5", "generation 05");
	refused_with(good, "generation 5", "generation 0");
	refused_with(good, "generation 5", "generation +5");
	refused_with(good, "generation 5", "generation 5 ");
	refused_with(good, "generation 5", "generation 18446744073709551616");
	refused_with(good, "parent 4", "parent 5"); /* not before it */
	refused_with(good, "parent 4", "parent 9");
	refused_with(good, "parent 4\n", ""); /* a line missing */
	refused_with(good, "parent 4\n", "parent 4\nparent 4\n");
	refused_with(good, "generation 5\nparent 4\n",
		     "parent 4\ngeneration 5\n"); /* order */
	refused_with(good, "catalog-digest 0123", "catalog-digest 0A23");
	refused_with(good, "catalog-digest 0123", "catalog-digest 012");
	refused_with(good, "time 1767225600", "time 9223372036854775808");
	refused_with(good, "time 1767225600", "time -1");
	refused_with(good, "key ", "Key ");
	refused_with(good, "signature ", "signature  ");
	/* a NUL inside a value */
	memcpy(big, good, n);
	big[strlen("ferry-signed-generation/1\nnamespace d")] = '\0';
	assert_int_equal(cat_stmt_parse(big, n, &p), -EBADMSG);
	/* the signature line: short, long, upper case */
	{
		char *sig = strstr(good, "signature ") + 10;
		char c = sig[5];

		sig[5] = 'A';
		assert_int_equal(cat_stmt_parse(good, n, &p), -EBADMSG);
		sig[5] = c;
	}
	assert_int_equal(cat_stmt_parse(good, n - 2, &p), -EBADMSG);
	assert_int_equal(cat_stmt_parse(good, n - 1, &p), -EBADMSG);
	/* nothing may follow */
	memcpy(big, good, n);
	big[n] = '\n';
	assert_int_equal(cat_stmt_parse(big, n + 1, &p), -EBADMSG);
	big[n] = '\0';
	assert_int_equal(cat_stmt_parse(big, n + 1, &p), -EBADMSG);
	assert_int_equal(cat_stmt_parse(good, 0, &p), -EBADMSG);
	assert_int_equal(cat_stmt_parse(NULL, 0, &p), -EBADMSG);
	/* longer than a statement may be, whatever it holds */
	memset(big, 'x', sizeof(big));
	assert_int_equal(cat_stmt_parse(big, sizeof(big), &p), -EBADMSG);
	assert_int_equal(cat_stmt_parse(good, n, &p), 0);
}

static void test_format_refuses(void **state)
{
	struct fx *f = *state;
	struct cat_stmt s;
	char buf[CAT_STMT_MAX];
	size_t n;

	signed_stmt(&f->ka, buf, sizeof(buf), &s);
	s.parent = s.generation;
	assert_int_equal(cat_stmt_format(&s, buf, sizeof(buf), &n), -EINVAL);
	s.parent = 4;
	snprintf(s.ns, sizeof(s.ns), "a b");
	assert_int_equal(cat_stmt_sign(&f->ka, &s, buf, sizeof(buf), &n),
			 -EINVAL);
	snprintf(s.ns, sizeof(s.ns), "data");
	s.digest[3] = 'G';
	assert_int_equal(cat_stmt_format(&s, buf, sizeof(buf), &n), -EINVAL);
	s.digest[3] = '3';
	assert_int_equal(cat_stmt_format(&s, buf, 100, &n), -ENOBUFS);
	assert_int_equal(cat_stmt_format(&s, buf, 300, &n), -ENOBUFS);
	assert_int_equal(cat_stmt_format(&s, buf, sizeof(buf), &n), 0);
}

static void test_manifests(void **state)
{
	struct fx *f = *state;
	char hex[CAT_SIGN_SIG_HEX_LEN + 1], body[100];

	memset(body, 7, sizeof(body));
	assert_int_equal(cat_sign_manifests(&f->ka, "data", 3, 1024, 2047, body,
					    sizeof(body), hex),
			 0);
	assert_int_equal(strlen(hex), CAT_SIGN_SIG_HEX_LEN);
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1024, 2047,
					      body, sizeof(body), hex,
					      strlen(hex)),
			 0);
	/* another key, body, range, generation, namespace */
	assert_int_equal(cat_verify_manifests(f->kb.pub, "data", 3, 1024, 2047,
					      body, sizeof(body), hex, 128),
			 -EKEYREJECTED);
	body[50] ^= 1;
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1024, 2047,
					      body, sizeof(body), hex, 128),
			 -EKEYREJECTED);
	body[50] ^= 1;
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1024, 2047,
					      body, sizeof(body) - 1, hex, 128),
			 -EKEYREJECTED);
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1025, 2047,
					      body, sizeof(body), hex, 128),
			 -EKEYREJECTED);
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 4, 1024, 2047,
					      body, sizeof(body), hex, 128),
			 -EKEYREJECTED);
	assert_int_equal(cat_verify_manifests(f->ka.pub, "datb", 3, 1024, 2047,
					      body, sizeof(body), hex, 128),
			 -EKEYREJECTED);
	/* not a signature at all */
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1024, 2047,
					      body, sizeof(body), hex, 127),
			 -EBADMSG);
	hex[0] = 'X';
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1024, 2047,
					      body, sizeof(body), hex, 128),
			 -EBADMSG);
	assert_int_equal(cat_verify_manifests(f->ka.pub, "data", 3, 1024, 2047,
					      body, sizeof(body), NULL, 0),
			 -EBADMSG);
	/* a generation statement's signature is no manifests signature */
	{
		struct cat_stmt s;
		char buf[CAT_STMT_MAX];

		signed_stmt(&f->ka, buf, sizeof(buf), &s);
		assert_int_equal(
		    cat_verify_manifests(f->ka.pub, "data", 5, 4, 4, buf,
					 s.signed_len,
					 strstr(buf, "signature ") + 10, 128),
		    -EKEYREJECTED);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_keygen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_key_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_statement, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_statement_altered, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_parser_rules, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_format_refuses, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_manifests, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
