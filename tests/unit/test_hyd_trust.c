/*
 * tests/unit/test_hyd_trust.c — the destination's checks of signed
 * generations (hydrator/fetch/hyd_trust.c): a statement is taken only
 * when it verifies with the trusted key, names the URL's namespace and
 * the generation asked for, and is not below the highest generation seen;
 * each refusal says why in one line; the highest generation seen only
 * rises, survives a damaged file, and goes with the cache's URL; kept
 * statements are checked again when read back.
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
#include "hydrator/fetch/hyd_trust_priv.h"
#include "hydrator/hydrator.h"
#include "tsupport.h"

#define DIGEST                                                                 \
	"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

struct fx {
	char root[64], cat[96];
	struct cat_sign_key k, other;
	struct hyd_creds c;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char dir[128], p[160];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_hyd_trust.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->cat, sizeof(f->cat), "%s/catalogs", f->root);
	assert_int_equal(mkdir(f->cat, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/k", f->root);
	assert_int_equal(cat_sign_keygen(dir), 0);
	snprintf(p, sizeof(p), "%s/sign.key", dir);
	assert_int_equal(cat_sign_key_load(p, &f->k), 0);
	snprintf(dir, sizeof(dir), "%s/o", f->root);
	assert_int_equal(cat_sign_keygen(dir), 0);
	snprintf(p, sizeof(p), "%s/sign.key", dir);
	assert_int_equal(cat_sign_key_load(p, &f->other), 0);
	/* what --trust-key k/sign.pub leaves in the creds */
	snprintf(p, sizeof(p), "%s/k/sign.pub", f->root);
	assert_int_equal(hyd_creds_opt(&f->c, HYD_OPT_TRUST_KEY, p), 1);
	f->c.trust_key = "k/sign.pub";
	assert_memory_equal(f->c.trust_pub, f->k.pub, CAT_SIGN_PUB_LEN);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	cat_sign_key_wipe(&f->k);
	cat_sign_key_wipe(&f->other);
	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

/* A statement of (ns, gen) signed by k into buf; its length. */
static size_t stmt(const struct cat_sign_key *k, const char *ns, uint64_t gen,
		   char *buf, size_t cap)
{
	struct cat_stmt s;
	size_t n = 0;

	memset(&s, 0, sizeof(s));
	snprintf(s.ns, sizeof(s.ns), "%s", ns);
	s.generation = gen;
	s.parent = gen - 1;
	memcpy(s.digest, DIGEST, 65);
	s.time = 1767225600;
	assert_int_equal(cat_stmt_sign(k, &s, buf, cap, &n), 0);
	return n;
}

static void test_url_ns(void **state)
{
	char ns[65];

	(void)state;
	assert_int_equal(hyd_trust_url_ns("http://h:1/v1/data", ns, sizeof(ns)),
			 0);
	assert_string_equal(ns, "data");
	assert_int_equal(
	    hyd_trust_url_ns("https://h/v1/my.data-1/", ns, sizeof(ns)), 0);
	assert_string_equal(ns, "my.data-1");
	assert_int_equal(hyd_trust_url_ns("http://h/v1/", ns, sizeof(ns)), 0);
	assert_string_equal(ns, "v1");
	assert_int_equal(hyd_trust_url_ns("http://h/v1/.x", ns, sizeof(ns)),
			 -EINVAL);
	assert_int_equal(hyd_trust_url_ns("http://h/v1/data", ns, 4), -EINVAL);
}

static void test_seen(void **state)
{
	struct fx *f = *state;
	char p[160];
	uint64_t g = 99;

	assert_int_equal(hyd_trust_seen(f->cat, &g), 0);
	assert_int_equal(g, 0);
	assert_int_equal(hyd_trust_seen_raise(f->cat, 5), 0);
	assert_int_equal(hyd_trust_seen(f->cat, &g), 0);
	assert_int_equal(g, 5);
	/* never down */
	assert_int_equal(hyd_trust_seen_raise(f->cat, 3), 0);
	assert_int_equal(hyd_trust_seen(f->cat, &g), 0);
	assert_int_equal(g, 5);
	assert_int_equal(hyd_trust_seen_raise(f->cat, 7), 0);
	assert_int_equal(hyd_trust_seen(f->cat, &g), 0);
	assert_int_equal(g, 7);
	/* the file: a decimal and a newline, private */
	snprintf(p, sizeof(p), "%s/seen", f->cat);
	{
		size_t n;
		char *t = tsup_read_file(p, &n);
		struct stat st;

		assert_int_equal(n, 2);
		assert_memory_equal(t, "7\n", 2);
		free(t);
		assert_int_equal(stat(p, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}
	/* damaged: said so, and the next raise replaces it */
	tsup_write_file(p, "x7\n", 3);
	assert_int_equal(hyd_trust_seen(f->cat, &g), -EBADMSG);
	assert_int_equal(hyd_trust_seen_raise(f->cat, 2), 0);
	assert_int_equal(hyd_trust_seen(f->cat, &g), 0);
	assert_int_equal(g, 2);
	/* another URL: forgotten with the statements */
	hyd_trust_forget(f->cat, 1);
	assert_int_equal(hyd_trust_seen(f->cat, &g), 0);
	assert_int_equal(g, 0);
}

static void test_check(void **state)
{
	struct fx *f = *state;
	char buf[CAT_STMT_MAX], why[512], id[65];
	struct cat_stmt s;
	size_t n;

	n = stmt(&f->k, "data", 5, buf, sizeof(buf));
	assert_int_equal(
	    hyd_trust_check(&f->c, "data", 5, 0, buf, n, &s, why, sizeof(why)),
	    0);
	assert_int_equal(s.generation, 5);
	/* the same generation as the highest seen is no rollback */
	assert_int_equal(
	    hyd_trust_check(&f->c, "data", 5, 5, buf, n, &s, why, sizeof(why)),
	    0);
	assert_int_equal(
	    hyd_trust_check(&f->c, "data", 5, 6, buf, n, &s, why, sizeof(why)),
	    -EKEYREJECTED);
	assert_string_equal(why, "generation 5 is older than generation 6 "
				 "already seen from this URL (a rollback)");
	assert_int_equal(
	    hyd_trust_check(&f->c, "other", 5, 0, buf, n, &s, why, sizeof(why)),
	    -EKEYREJECTED);
	assert_string_equal(
	    why, "the signature is for namespace 'data', not 'other'");
	assert_int_equal(
	    hyd_trust_check(&f->c, "data", 6, 0, buf, n, &s, why, sizeof(why)),
	    -EKEYREJECTED);
	assert_string_equal(why, "the signature is for generation 5, not 6");
	/* changed on the way: one digit of the digest */
	buf[strstr(buf, "catalog-digest ") - buf + 15] = '1';
	assert_int_equal(
	    hyd_trust_check(&f->c, "data", 5, 0, buf, n, &s, why, sizeof(why)),
	    -EKEYREJECTED);
	assert_non_null(strstr(why, "does not verify with the trusted key"));
	/* another key: named by its id */
	n = stmt(&f->other, "data", 5, buf, sizeof(buf));
	assert_int_equal(
	    hyd_trust_check(&f->c, "data", 5, 0, buf, n, &s, why, sizeof(why)),
	    -EKEYREJECTED);
	assert_int_equal(cat_sign_key_id(f->other.pub, id), 0);
	assert_non_null(strstr(why, "signed by another key"));
	assert_non_null(strstr(why, "k/sign.pub"));
	id[16] = '\0';
	assert_non_null(strstr(why, id));
	/* not a statement */
	assert_int_equal(hyd_trust_check(&f->c, "data", 5, 0, "{\"error\"}", 9,
					 &s, why, sizeof(why)),
			 -EKEYREJECTED);
	assert_string_equal(why, "not a signed statement");
	/* no newline in any message: each is one log line */
	assert_null(strchr(why, '\n'));
}

static void test_kept(void **state)
{
	struct fx *f = *state;
	char buf[CAT_STMT_MAX], p[160];
	struct cat_stmt s;
	size_t n;

	assert_int_equal(hyd_trust_kept(&f->c, f->cat, "data", 5, &s), -ENOENT);
	n = stmt(&f->k, "data", 5, buf, sizeof(buf));
	assert_int_equal(hyd_trust_keep(f->cat, 5, buf, n), 0);
	assert_int_equal(hyd_trust_kept(&f->c, f->cat, "data", 5, &s), 0);
	assert_string_equal(s.digest, DIGEST);
	/* read back under another name or generation: not it */
	assert_int_equal(hyd_trust_kept(&f->c, f->cat, "other", 5, &s),
			 -EKEYREJECTED);
	n = stmt(&f->k, "data", 4, buf, sizeof(buf));
	assert_int_equal(hyd_trust_keep(f->cat, 6, buf, n), 0);
	assert_int_equal(hyd_trust_kept(&f->c, f->cat, "data", 6, &s),
			 -EKEYREJECTED);
	/* changed in the cache */
	snprintf(p, sizeof(p), "%s/5.sig", f->cat);
	tsup_flip_byte(p, 40, 1);
	assert_int_equal(hyd_trust_kept(&f->c, f->cat, "data", 5, &s),
			 -EKEYREJECTED);
	/* statements go with their catalog: 5 has one, 6 has none */
	snprintf(p, sizeof(p), "%s/5.db", f->cat);
	tsup_write_file(p, "", 0);
	hyd_trust_forget(f->cat, 0);
	snprintf(p, sizeof(p), "%s/5.sig", f->cat);
	assert_int_equal(access(p, F_OK), 0);
	snprintf(p, sizeof(p), "%s/6.sig", f->cat);
	assert_int_equal(access(p, F_OK), -1);
	hyd_trust_forget(f->cat, 1);
	snprintf(p, sizeof(p), "%s/5.sig", f->cat);
	assert_int_equal(access(p, F_OK), -1);
}

static void test_creds_refuse(void **state)
{
	struct fx *f = *state;
	struct hyd_creds c;
	char p[160];

	memset(&c, 0, sizeof(c));
	snprintf(p, sizeof(p), "%s/k/sign.key", f->root);
	assert_int_equal(hyd_creds_opt(&c, HYD_OPT_TRUST_KEY, p), -1);
	assert_null(c.trust_key);
	snprintf(p, sizeof(p), "%s/none.pub", f->root);
	assert_int_equal(hyd_creds_opt(&c, HYD_OPT_TRUST_KEY, p), -1);
	assert_null(c.trust_key);
	assert_int_equal(hyd_trust_on(&c), 0);
	assert_int_equal(hyd_trust_on(NULL), 0);
	assert_int_equal(hyd_trust_on(&f->c), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_url_ns),
	    cmocka_unit_test_setup_teardown(test_seen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_check, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kept, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_creds_refuse, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
