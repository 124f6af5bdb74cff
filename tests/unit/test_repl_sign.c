/*
 * tests/unit/test_repl_sign.c — the source's side of signed generations
 * (replicator/publish/repl_sign.c through repl_generation_build): each
 * published generation has its statement beside the catalog before HEAD names
 * it, naming the namespace, the generation, its parent and the digest of its
 * catalog's rows, verifiable with the key's public half; an unchanged
 * rescan keeps HEAD's statement, or signs it anew for another key (an
 * unsigned state dir gets its HEAD signed); statements are pruned with
 * their generation; without a key nothing is signed.
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
#include "replicator/publish/repl_publish.h"
#include "replicator/publish/repl_publish.h"
#include "tsupport.h"

struct fx {
	char root[64], src[96], ns[96];
	struct cat_sign_key k, k2;
};

static void load_key(struct fx *f, const char *sub, struct cat_sign_key *k)
{
	char dir[128], p[160];

	snprintf(dir, sizeof(dir), "%s/%s", f->root, sub);
	assert_int_equal(cat_sign_keygen(dir), 0);
	snprintf(p, sizeof(p), "%s/sign.key", dir);
	assert_int_equal(cat_sign_key_load(p, k), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char p[160];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_repl_sign.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->src, sizeof(f->src), "%s/src", f->root);
	snprintf(f->ns, sizeof(f->ns), "%s/state/data", f->root);
	assert_int_equal(mkdir(f->src, 0755), 0);
	snprintf(p, sizeof(p), "%s/a", f->src);
	tsup_write_file(p, "one\n", 4);
	load_key(f, "k", &f->k);
	load_key(f, "k2", &f->k2);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	cat_sign_key_wipe(&f->k);
	cat_sign_key_wipe(&f->k2);
	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

static uint64_t build(struct fx *f, const struct cat_sign_key *k)
{
	struct repl_scan_opts o = {
	    .defer = 1, .sign_key = k, .ns_name = "data"};
	struct repl_generation g;

	assert_int_equal(repl_generation_build(f->ns, f->src, &o, &g), 0);
	return g.generation;
}

/* The statement of gen, verified with pub, into *s; its bytes' hash in
 * ret_sum (to see whether it was made again). 0 or the verify error. */
static int stmt_of(struct fx *f, uint64_t gen, const uint8_t *pub,
		   struct cat_stmt *s, chunk_id *ret_sum)
{
	char *path = repl_sig_path(f->ns, gen);
	size_t n = 0;
	void *buf;
	int r;

	assert_non_null(path);
	buf = tsup_read_file(path, &n);
	free(path);
	if (ret_sum)
		assert_int_equal(chunk_id_compute(buf, n, ret_sum), 0);
	r = cat_stmt_verify(buf, n, pub, s);
	free(buf);
	return r;
}

static void test_signed_generations(void **state)
{
	struct fx *f = *state;
	struct cat_stmt s;
	char digest[65], p[160], *cat, *sig;
	chunk_id a, b;

	assert_int_equal(build(f, &f->k), 1);
	assert_int_equal(stmt_of(f, 1, f->k.pub, &s, &a), 0);
	assert_string_equal(s.ns, "data");
	assert_int_equal(s.generation, 1);
	assert_int_equal(s.parent, 0);
	cat = repl_catalog_path(f->ns, 1);
	assert_int_equal(cat_digest(cat, digest), 0);
	free(cat);
	assert_string_equal(s.digest, digest);
	assert_true(s.time > 1600000000);
	/* another key's half does not verify it */
	assert_int_equal(stmt_of(f, 1, f->k2.pub, &s, NULL), -EKEYREJECTED);
	/* nothing changed: the same statement stays */
	assert_int_equal(build(f, &f->k), 1);
	assert_int_equal(stmt_of(f, 1, f->k.pub, &s, &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	/* nothing changed, another key: HEAD signed by it now */
	assert_int_equal(build(f, &f->k2), 1);
	assert_int_equal(stmt_of(f, 1, f->k2.pub, &s, NULL), 0);
	/* a change: generation 2, parent 1 */
	snprintf(p, sizeof(p), "%s/b", f->src);
	tsup_write_file(p, "two\n", 4);
	assert_int_equal(build(f, &f->k2), 2);
	assert_int_equal(stmt_of(f, 2, f->k2.pub, &s, NULL), 0);
	assert_int_equal(s.parent, 1);
	cat = repl_catalog_path(f->ns, 2);
	assert_int_equal(cat_digest(cat, digest), 0);
	free(cat);
	assert_string_equal(s.digest, digest);
	/* pruned with its generation */
	assert_int_equal(repl_generations_prune(f->ns, 2, 1, NULL), 0);
	sig = repl_sig_path(f->ns, 1);
	assert_int_equal(access(sig, F_OK), -1);
	free(sig);
	sig = repl_sig_path(f->ns, 2);
	assert_int_equal(access(sig, F_OK), 0);
	free(sig);
}

static void test_unsigned(void **state)
{
	struct fx *f = *state;
	char *sig;

	assert_int_equal(build(f, NULL), 1);
	sig = repl_sig_path(f->ns, 1);
	assert_int_equal(access(sig, F_OK), -1);
	/* a state dir published unsigned: its HEAD signed at the next start */
	assert_int_equal(build(f, &f->k), 1);
	assert_int_equal(access(sig, F_OK), 0);
	free(sig);
	/* a key without a namespace to name is a caller's error */
	{
		struct repl_scan_opts o = {.defer = 1, .sign_key = &f->k};
		struct repl_generation g;

		assert_int_equal(repl_generation_build(f->ns, f->src, &o, &g),
				 -EINVAL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_signed_generations, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_unsigned, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
