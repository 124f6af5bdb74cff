/*
 * tests/unit/test_repl_manifest.c — deferred hashing on the real server:
 * repl_server_init over a temp tree with the hashing test hook on (each
 * file waits before it is hashed), its loop on a thread, libcurl as the
 * client. Covered: the walk publishes before any file is hashed; a file
 * asked for jumps the queue and its manifest arrives while others still
 * wait; the manifest's chunks are the file's bytes; 503 with Retry-After
 * while hashing, a long-poll that ends with 200; a segment lists every
 * pending file once all are hashed; 404/400 for what is not a pending
 * file or not a request; a file changed before its turn, or while it is
 * being read, is recorded as changed and named in the log; /stats counts; a
 * stop in the middle and a restart re-read nothing that was hashed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "replicator/serve/repl_serve_priv.h"
#include "tsupport.h"

#define NFILES 8
#define FSIZE (300u * 1024u)
#define DELAY_MS 250u

struct fixture {
	char root[64], src[96], state[96], listen[32];
	int port, running;
	struct repl_server srv;
	pthread_t loop;
	uint8_t *data[NFILES];
	void (*opened)(void *ctx, const char *path); /* hasher test hook */
	void *opened_ctx;
};

struct resp {
	long status;
	uint8_t *body;
	size_t len;
	char retry_after[16], cache[96];
};

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
	struct resp *r = ud;
	uint8_t *nb = realloc(r->body, r->len + sz * n + 1);

	if (!nb)
		return 0;
	r->body = nb;
	memcpy(r->body + r->len, p, sz * n);
	r->len += sz * n;
	r->body[r->len] = 0;
	return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
	struct resp *r = ud;
	size_t len = sz * n;

	if (len > 13 && !strncasecmp(p, "Retry-After: ", 13))
		snprintf(r->retry_after, sizeof(r->retry_after), "%.*s",
			 (int)(len - 15), p + 13);
	if (len > 15 && !strncasecmp(p, "Cache-Control: ", 15))
		snprintf(r->cache, sizeof(r->cache), "%.*s", (int)(len - 17),
			 p + 15);
	return len;
}

static void get(const struct fixture *f, const char *path, struct resp *r)
{
	char url[256];
	CURL *h = curl_easy_init();

	memset(r, 0, sizeof(*r));
	assert_non_null(h);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", f->port, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_cleanup(h);
}

static void *loop_thread(void *arg)
{
	struct fixture *f = arg;

	repl_server_run(&f->srv);
	return NULL;
}

static void start(struct fixture *f, unsigned delay_ms)
{
	static const char *const names[] = {"ns"};
	const char *dirs[1] = {f->src};
	struct repl_server_opts o = {0};

	o.listen = f->listen;
	o.state_dir = f->state;
	o.policy = FRAME_POLICY_AUTO;
	o.scan_threads = 1;
	o.hash_delay_ms = delay_ms;
	o.hash_opened = f->opened;
	o.hash_opened_ctx = f->opened_ctx;
	o.n_ns = 1;
	o.ns_names = names;
	o.ns_dirs = dirs;
	assert_int_equal(repl_server_init(&f->srv, &o), 0);
	assert_int_equal(pthread_create(&f->loop, NULL, loop_thread, f), 0);
	f->running = 1;
}

static void stop(struct fixture *f)
{
	if (!f->running)
		return;
	assert_int_equal(kill(getpid(), SIGTERM), 0);
	assert_int_equal(pthread_join(f->loop, NULL), 0);
	repl_server_fini(&f->srv);
	f->running = 0;
}

static json_t *stats(const struct fixture *f)
{
	json_error_t e;
	struct resp r;
	json_t *o;

	get(f, "/v1/ns/stats", &r);
	assert_int_equal(r.status, 200);
	o = json_loadb((const char *)r.body, r.len, 0, &e);
	assert_non_null(o);
	free(r.body);
	return o;
}

static int64_t hstat(json_t *o, const char *key)
{
	json_t *h = json_object_get(o, "hashing");
	json_t *v = json_object_get(h, key);

	assert_true(json_is_integer(v));
	return json_integer_value(v);
}

static const char *hstate(json_t *o)
{
	return json_string_value(
	    json_object_get(json_object_get(o, "hashing"), "state"));
}

/* Wait until the namespace is served. */
static void wait_ready(const struct fixture *f)
{
	for (int i = 0; i < 400; i++) {
		struct resp r;

		get(f, "/v1/ns/HEAD", &r);
		free(r.body);
		if (r.status == 200)
			return;
		usleep(25 * 1000);
	}
	fail_msg("the walk did not finish");
}

static void wait_hashed(const struct fixture *f)
{
	for (int i = 0; i < 1200; i++) {
		json_t *o = stats(f);
		int done = !strcmp(hstate(o), "done");

		json_decref(o);
		if (done)
			return;
		usleep(25 * 1000);
	}
	fail_msg("hashing did not finish");
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char p[160];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_repl_manifest.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->src, sizeof(f->src), "%s/src", f->root);
	snprintf(f->state, sizeof(f->state), "%s/state", f->root);
	assert_int_equal(mkdir(f->src, 0755), 0);
	assert_int_equal(mkdir(f->state, 0755), 0);
	/* f0..f7: ino order is name order in one directory */
	for (int i = 0; i < NFILES; i++) {
		f->data[i] = tsup_random_bytes(FSIZE, (uint64_t)i + 1);
		snprintf(p, sizeof(p), "%s/f%d", f->src, i);
		tsup_write_file(p, f->data[i], FSIZE);
	}
	snprintf(p, sizeof(p), "%s/empty", f->src);
	tsup_write_file(p, "", 0);
	f->port = tsup_free_port();
	snprintf(f->listen, sizeof(f->listen), "127.0.0.1:%d", f->port);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	stop(f);
	for (int i = 0; i < NFILES; i++)
		free(f->data[i]);
	tsup_rm_rf(f->root);
	free(f);
	return 0;
}

/* Catalog ino of f<i>: the root is 1, "empty" 2, then f0.. in name
 * order. */
static uint64_t ino_of(int i)
{
	return 3 + (uint64_t)i;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* One record at *off of a body: check it is file i's manifest (its
 * chunks are its bytes, in order). */
static void check_record(const struct fixture *f, const uint8_t *b, size_t len,
			 size_t *off, int i)
{
	uint64_t n, pos = 0;

	assert_true(*off + 20 <= len);
	assert_int_equal(le(b + *off, 8), ino_of(i));
	assert_int_equal(le(b + *off + 8, 8), FSIZE);
	n = le(b + *off + 16, 4);
	*off += 20;
	assert_true(n >= 1 && n < 1000);
	for (uint64_t k = 0; k < n; k++) {
		uint32_t l = (uint32_t)le(b + *off, 4);
		chunk_id id;

		assert_true(*off + 36 <= len);
		assert_true(pos + l <= FSIZE);
		assert_int_equal(chunk_id_compute(f->data[i] + pos, l, &id), 0);
		assert_memory_equal(id.b, b + *off + 4, CHUNK_ID_LEN);
		pos += l;
		*off += 36;
	}
	assert_int_equal(pos, FSIZE);
}

static void check_head(const uint8_t *b, size_t len, uint64_t first,
		       uint64_t last, uint32_t records)
{
	assert_true(len >= 36);
	assert_memory_equal(b, "FERRYMN1", 8);
	assert_int_equal(le(b + 8, 8), 1);
	assert_int_equal(le(b + 16, 8), first);
	assert_int_equal(le(b + 24, 8), last);
	assert_int_equal(le(b + 32, 4), records);
}

static void test_published_before_hashed(void **state)
{
	struct fixture *f = *state;
	struct resp r;
	size_t off = 36;
	char path[96];
	json_t *o;

	start(f, DELAY_MS);
	wait_ready(f);
	o = stats(f);
	assert_int_equal(hstat(o, "files"), NFILES);
	assert_int_equal(hstat(o, "bytes"), NFILES * FSIZE);
	assert_true(hstat(o, "files_done") <= 1);
	json_decref(o);
	/* not ready and no wait: 503 at once, never cached */
	snprintf(path, sizeof(path), "/v1/ns/manifest/1/%llu",
		 (unsigned long long)ino_of(NFILES - 1));
	get(f, path, &r);
	assert_int_equal(r.status, 503);
	assert_string_equal(r.retry_after, "1");
	assert_string_equal(r.cache, "no-store");
	free(r.body);
	/* the last file, asked for: it is hashed next, before the rest */
	snprintf(path, sizeof(path), "/v1/ns/manifest/1/%llu?wait=20",
		 (unsigned long long)ino_of(NFILES - 1));
	get(f, path, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.cache, "public, max-age=31536000, immutable");
	check_head(r.body, r.len, ino_of(NFILES - 1), ino_of(NFILES - 1), 1);
	check_record(f, r.body, r.len, &off, NFILES - 1);
	assert_int_equal(off, r.len);
	free(r.body);
	o = stats(f);
	assert_true(hstat(o, "files_done") <= 4);
	assert_string_equal(hstate(o), "hashing");
	json_decref(o);
	/* the segment waits for everything */
	get(f, "/v1/ns/manifests/1/0", &r);
	assert_int_equal(r.status, 503);
	free(r.body);
	get(f, "/v1/ns/manifests/1/0?wait=30", &r);
	assert_int_equal(r.status, 200);
	check_head(r.body, r.len, 0, 1023, NFILES);
	off = 36;
	for (int i = 0; i < NFILES; i++)
		check_record(f, r.body, r.len, &off, i);
	assert_int_equal(off, r.len);
	free(r.body);
	wait_hashed(f);
	o = stats(f);
	assert_int_equal(hstat(o, "files_done"), NFILES);
	assert_int_equal(hstat(o, "bytes_read"), NFILES * FSIZE);
	assert_int_equal(hstat(o, "changed"), 0);
	assert_int_equal(
	    json_integer_value(json_object_get(o, "manifests_served")), 2);
	json_decref(o);
}

static void test_not_manifests(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *path;
		long status;
	} cases[] = {
	    {"/v1/ns/manifest/1/1", 404},	  /* the root */
	    {"/v1/ns/manifest/1/2", 404},	  /* empty: never pending */
	    {"/v1/ns/manifest/1/999", 404},	  /* no such ino */
	    {"/v1/ns/manifest/2/3", 404},	  /* no such generation */
	    {"/v1/ns/manifest/1/x", 400},	  /* not a number */
	    {"/v1/ns/manifest/1/0", 400},	  /* ino 0 */
	    {"/v1/ns/manifest/1", 400},		  /* no ino */
	    {"/v1/ns/manifest/1/3?wait=31", 400}, /* wait too long */
	    {"/v1/ns/manifests/1/5", 200},	  /* an empty segment */
	};
	struct resp r;

	start(f, 0);
	wait_ready(f);
	wait_hashed(f);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		get(f, cases[i].path, &r);
		if (r.status != cases[i].status)
			fail_msg("%s: %ld, not %ld", cases[i].path, r.status,
				 cases[i].status);
		if (r.status == 200)
			check_head(r.body, r.len, 5 * 1024, 6 * 1024 - 1, 0);
		free(r.body);
	}
}

/* File i's manifest says "changed": one record, the size the catalog has,
 * no chunk. */
static void check_changed(const struct fixture *f, int i)
{
	char path[96];
	struct resp r;

	snprintf(path, sizeof(path), "/v1/ns/manifest/1/%llu?wait=20",
		 (unsigned long long)ino_of(i));
	get(f, path, &r);
	assert_int_equal(r.status, 200);
	check_head(r.body, r.len, ino_of(i), ino_of(i), 1);
	assert_int_equal(le(r.body + 44, 8), FSIZE);
	assert_int_equal(le(r.body + 52, 4), CAT_MWIRE_CHANGED);
	assert_int_equal(r.len, 36 + 20);
	free(r.body);
}

static void test_changed_before_its_turn(void **state)
{
	struct fixture *f = *state;
	char p[160];
	json_t *o;

	start(f, DELAY_MS);
	wait_ready(f);
	/* f6 grows before the hasher gets to it */
	snprintf(p, sizeof(p), "%s/f6", f->src);
	tsup_write_file(p, f->data[0], FSIZE / 2);
	check_changed(f, 6);
	wait_hashed(f);
	o = stats(f);
	assert_int_equal(hstat(o, "changed"), 1);
	assert_int_equal(hstat(o, "files_done"), NFILES);
	json_decref(o);
}

/* f5 is rewritten after the hasher opened it and found it as the walk
 * saw it, before its bytes are read: same size, other bytes, so only
 * mtime and ctime tell. Recorded as changed (no manifest, so no chunk id
 * of it is ever served), named in one log line, read once: the retry stops
 * at its first fstat. */
struct rewrite {
	char path[160];
	atomic_int hits;
	atomic_int written; /* bytes the rewrite wrote (checked by the test:
			     * the hook runs on a hasher thread) */
};

static void rewrite_f5(void *ctx, const char *path)
{
	struct rewrite *c = ctx;
	int fd;

	if (strcmp(path, "f5"))
		return;
	atomic_fetch_add(&c->hits, 1);
	fd = open(c->path, O_WRONLY);
	if (fd < 0)
		return;
	atomic_store(&c->written, (int)pwrite(fd, "rewritten", 9, 1000));
	close(fd);
}

static void test_changed_while_hashed(void **state)
{
	struct fixture *f = *state;
	struct rewrite c = {0};
	char path[96], logp[160], want[256], *log;
	size_t off = 36, loglen;
	struct resp r;
	json_t *o;
	int saved, fd;

	snprintf(c.path, sizeof(c.path), "%s/f5", f->src);
	f->opened = rewrite_f5;
	f->opened_ctx = &c;
	/* the replicator's log goes to stderr: keep it to read it back */
	snprintf(logp, sizeof(logp), "%s/log", f->root);
	fflush(stderr);
	saved = dup(2);
	fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	assert_int_equal(dup2(fd, 2), 2);
	close(fd);
	start(f, 0);
	wait_ready(f);
	wait_hashed(f);
	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);

	assert_int_equal(atomic_load(&c.hits), 1);
	assert_int_equal(atomic_load(&c.written), 9);
	check_changed(f, 5);
	/* its neighbour is hashed as usual */
	snprintf(path, sizeof(path), "/v1/ns/manifest/1/%llu",
		 (unsigned long long)ino_of(4));
	get(f, path, &r);
	assert_int_equal(r.status, 200);
	check_head(r.body, r.len, ino_of(4), ino_of(4), 1);
	check_record(f, r.body, r.len, &off, 4);
	free(r.body);
	o = stats(f);
	assert_int_equal(hstat(o, "changed"), 1);
	assert_int_equal(hstat(o, "files_done"), NFILES);
	assert_int_equal(hstat(o, "bytes_read"), (int64_t)NFILES * FSIZE);
	json_decref(o);
	log = tsup_read_file(logp, &loglen);
	log[loglen] = 0;
	snprintf(want, sizeof(want),
		 "no manifest for a file, reads of it will fail ns=ns "
		 "path=\"%s/f5\" why=\"changed while being hashed\"",
		 f->src);
	if (!strstr(log, want))
		fail_msg("no line naming f5 in the log:\n%s", log);
	assert_null(strstr(strstr(log, want) + 1, "no manifest for a file"));
	free(log);
}

/* A stop in the middle keeps what was hashed; the restart (same tree, so
 * the same generation) hashes only the rest. */
static void test_restart_resumes(void **state)
{
	struct fixture *f = *state;
	int64_t done1, bytes1;
	json_t *o;

	start(f, DELAY_MS);
	wait_ready(f);
	usleep(3 * DELAY_MS * 1000);
	stop(f);
	start(f, 0);
	wait_ready(f);
	wait_hashed(f);
	o = stats(f);
	assert_int_equal(json_integer_value(json_object_get(o, "generation")),
			 1);
	assert_int_equal(hstat(o, "files_done"), NFILES);
	/* files_total counts the generation; bytes_read this run only */
	assert_int_equal(hstat(o, "files"), NFILES);
	bytes1 = NFILES * FSIZE - hstat(o, "bytes_read");
	done1 = bytes1 / FSIZE;
	json_decref(o);
	/* the first run finished some, and not all */
	assert_int_equal(bytes1 % FSIZE, 0);
	assert_true(done1 >= 1 && done1 < NFILES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_published_before_hashed, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_not_manifests, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_changed_before_its_turn, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_changed_while_hashed, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_restart_resumes, setup,
					    teardown),
	};

	base_log_init("test_repl_manifest", BASE_LOG_WARN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
