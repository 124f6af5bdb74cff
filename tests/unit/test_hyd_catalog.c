/*
 * tests/unit/test_hyd_catalog.c — fetching a catalog over real HTTP.
 *
 * The group setup writes a small catalog with cat_writer, zstd-compresses it
 * into a static layout (ROOT/www/v1/NS/HEAD, ROOT/www/v1/NS/catalog/GEN, the
 * same paths `publish` writes) next to some broken namespaces, and serves it
 * with `python3 -m http.server` on a free loopback port. A second, scripted
 * http.server answers JSON errors the way the replicator does. Without
 * python3 every test is skipped with a message saying so.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <zstd.h>

#include "catalog/catalog.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "tsupport.h"

struct server {
	pid_t pid;
	int port;
};

struct gx {
	int have_python;
	char root[64];
	char www[96];
	struct server plain; /* python3 -m http.server on www */
	struct server json;  /* answers 404/500 with a JSON body */
	int cache_n;	     /* numbers fresh cache dirs */
};

/* Replicator-style errors: one-line JSON with a detail. */
static const char json_server_py[] =
    "import sys, http.server\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "    def do_GET(self):\n"
    "        if self.path.startswith('/v1/boom/'):\n"
    "            code, b = 500, b'{\"error\":\"internal\",\"detail\":\"disk on "
    "fire\"}\\n'\n"
    "        else:\n"
    "            code, b = 404, b'{\"error\":\"not_found\",\"detail\":\"no "
    "namespace \\\\\"gone\\\\\"\"}\\n'\n"
    "        self.send_response(code)\n"
    "        self.send_header('Content-Type', 'application/json')\n"
    "        self.send_header('Content-Length', str(len(b)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(b)\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), "
    "H).serve_forever()\n";

static int python_works(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		execlp("python3", "python3", "-c", "import http.server",
		       (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return 0;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Start python3 with argv (PORT substituted by the port's decimal) and wait
 * until it accepts connections. */
static void server_start(struct server *sv, const char *script, const char *dir)
{
	char port[16];
	struct timespec ts = {0, 20 * 1000 * 1000};
	int i;

	sv->port = tsup_free_port();
	snprintf(port, sizeof(port), "%d", sv->port);
	sv->pid = fork();
	assert_true(sv->pid >= 0);
	if (sv->pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		if (script)
			execlp("python3", "python3", "-c", script, port,
			       (char *)NULL);
		else
			execlp("python3", "python3", "-m", "http.server",
			       "--bind", "127.0.0.1", port, "--directory", dir,
			       (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 500; i++) {
		if (tsup_port_answers(sv->port))
			return;
		nanosleep(&ts, NULL);
	}
	fail_msg("python3 http server on port %d did not come up", sv->port);
}

/* 0, or -1 when the server had died before (said on stderr). */
static int server_stop(struct server *sv)
{
	int r;

	if (sv->pid <= 0)
		return 0;
	r = tsup_stop_server(sv->pid, "python3 http.server");
	sv->pid = 0;
	return r;
}

static void mkdirs(const char *fmt_root, const char *ns)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/v1", fmt_root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/v1/%s", fmt_root, ns);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/v1/%s/catalog", fmt_root, ns);
	mkdir(p, 0755);
}

/* Publish namespace ns: HEAD says gen, catalog/gen holds body. */
static void publish(const struct gx *g, const char *ns, uint64_t gen,
		    const void *body, size_t len)
{
	char p[256], head[32];
	int n;

	mkdirs(g->www, ns);
	n = snprintf(head, sizeof(head), "%llu\n", (unsigned long long)gen);
	snprintf(p, sizeof(p), "%s/v1/%s/HEAD", g->www, ns);
	tsup_write_file(p, head, (size_t)n);
	snprintf(p, sizeof(p), "%s/v1/%s/catalog/%llu", g->www, ns,
		 (unsigned long long)gen);
	tsup_write_file(p, body, len);
}

static void *zstd_of(const void *buf, size_t len, size_t *ret_len)
{
	size_t cap = ZSTD_compressBound(len);
	void *out = malloc(cap);

	assert_non_null(out);
	*ret_len = ZSTD_compress(out, cap, buf, len, 3);
	assert_false(ZSTD_isError(*ret_len));
	return out;
}

/* A two-entry catalog of generation 1. */
static void build_catalog(const char *path)
{
	struct cat_meta m = {.generation = 1, .created_ns = 1};
	struct cat_inode root = {
	    .ino = 1, .kind = CAT_DIR, .mode = S_IFDIR | 0755, .nlink = 2};
	struct cat_inode file = {.ino = 2,
				 .kind = CAT_REG,
				 .mode = S_IFREG | 0644,
				 .size = 5,
				 .nlink = 1};
	cat_writer *w = NULL;
	chunk_id id;

	chunk_params_default(&m.params);
	assert_int_equal(chunk_id_compute("hello", 5, &id), 0);
	assert_int_equal(cat_writer_open(path, &m, &w), 0);
	assert_int_equal(cat_writer_add_inode(w, &root, NULL, 0), 0);
	assert_int_equal(cat_writer_add_inode(w, &file, NULL, 0), 0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "hello", 5, 2), 0);
	assert_int_equal(cat_writer_add_chunk(w, 2, 0, 5, &id), 0);
	assert_int_equal(cat_writer_commit(w), 0);
}

static int group_setup(void **state)
{
	struct gx *g = calloc(1, sizeof(*g));
	uint8_t garbage[4096];
	char p[160];
	void *db, *z;
	size_t db_len, z_len, i;

	assert_non_null(g);
	*state = g;
	snprintf(g->root, sizeof(g->root), "/tmp/ferry-test-cat-XXXXXX");
	assert_non_null(mkdtemp(g->root));
	/* Loopback must not go through a proxy the environment names. */
	setenv("NO_PROXY", "127.0.0.1,localhost", 1);
	setenv("no_proxy", "127.0.0.1,localhost", 1);
	g->have_python = python_works();
	if (!g->have_python) {
		fprintf(stderr,
			"SKIP test_hyd_catalog: python3 with http.server "
			"not found; the fetch tests need a real HTTP "
			"server\n");
		return 0;
	}
	snprintf(g->www, sizeof(g->www), "%s/www", g->root);
	assert_int_equal(mkdir(g->www, 0755), 0);

	snprintf(p, sizeof(p), "%s/built.db", g->root);
	build_catalog(p);
	db = tsup_read_file(p, &db_len);
	z = zstd_of(db, db_len, &z_len);
	publish(g, "ns", 1, z, z_len);
	/* Broken namespaces: not zstd, zstd of not-a-catalog, a catalog of
	 * another generation, a cut-off stream. */
	for (i = 0; i < sizeof(garbage); i++)
		garbage[i] = (uint8_t)(i * 131 + 7);
	publish(g, "garbage", 1, garbage, sizeof(garbage));
	{
		size_t zl;
		void *zn = zstd_of(garbage, sizeof(garbage), &zl);

		publish(g, "notcat", 1, zn, zl);
		free(zn);
	}
	publish(g, "ns2", 1, z, z_len);
	publish(g, "wronggen", 2, z, z_len);
	publish(g, "cut", 1, z, z_len / 2);
	free(z);
	free(db);

	server_start(&g->plain, NULL, g->www);
	server_start(&g->json, json_server_py, NULL);
	return 0;
}

static int group_teardown(void **state)
{
	struct gx *g = *state;
	int rc = 0;

	/* cmocka prints a failed group teardown but exits 0: tests/run.sh
	 * fails the test on its "[  FAILED  ]" line. */
	if (server_stop(&g->plain) < 0)
		rc = -1;
	if (server_stop(&g->json) < 0)
		rc = -1;
	if (g->root[0])
		tsup_rm_rf(g->root);
	free(g);
	return rc;
}

/* A fresh cache dir under the group's root. */
static void new_cache(struct gx *g, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/cache%d", g->root, ++g->cache_n);
}

static void url_of(const struct server *sv, const char *ns, char *buf,
		   size_t cap)
{
	snprintf(buf, cap, "http://127.0.0.1:%d/v1/%s", sv->port, ns);
}

/* Entries of CACHE/catalogs other than "." and "..". */
static int count_entries(const char *cache)
{
	char p[256];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(p, sizeof(p), "%s/catalogs", cache);
	d = opendir(p);
	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 &&
		    strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

#define NEED_PYTHON(g)                                                         \
	do {                                                                   \
		if (!(g)->have_python) {                                       \
			fprintf(stderr, "SKIP: python3 not found\n");          \
			skip();                                                \
		}                                                              \
	} while (0)

static void check_catalog(const char *path)
{
	struct cat_inode in;
	struct cat_meta m;
	cat_reader *r = NULL;

	assert_int_equal(cat_reader_open(path, &r), 0);
	cat_reader_meta(r, &m);
	assert_int_equal(m.generation, 1);
	assert_int_equal(cat_lookup(r, 1, "hello", 5, &in), 0);
	assert_int_equal(in.ino, 2);
	assert_int_equal(in.size, 5);
	cat_reader_close(r);
}

static void test_fetch(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], want[256], err[512];
	struct stat sb1, sb2;
	size_t len;
	char *txt;

	NEED_PYTHON(g);
	new_cache(g, cache, sizeof(cache));
	url_of(&g->plain, "ns", url, sizeof(url));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)), 0);
	assert_int_equal(res.generation, 1);
	assert_int_equal(res.from_cache, 0);
	snprintf(want, sizeof(want), "%s/catalogs/1.db", cache);
	assert_string_equal(res.path, want);
	check_catalog(res.path);
	/* Only the catalog, its tree-check marker and the url record: no
	 * temp files. */
	assert_int_equal(count_entries(cache), 3);
	snprintf(want, sizeof(want), "%s/catalogs/url", cache);
	txt = tsup_read_file(want, &len);
	txt[len] = '\0';
	snprintf(want, sizeof(want), "%s/\n", url);
	assert_string_equal(txt, want);
	free(txt);

	/* Same URL and generation again: the checked copy is kept, not
	 * downloaded again; a trailing slash is the same URL. */
	assert_int_equal(stat(res.path, &sb1), 0);
	snprintf(want, sizeof(want), "%s/", url);
	assert_int_equal(
	    hyd_catalog_fetch(want, cache, NULL, 5, &res, err, sizeof(err)), 0);
	assert_int_equal(res.from_cache, 0);
	assert_int_equal(stat(res.path, &sb2), 0);
	assert_int_equal(sb1.st_ino, sb2.st_ino);
}

static void test_fetch_cache(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], other[128], err[512];

	NEED_PYTHON(g);
	new_cache(g, cache, sizeof(cache));
	url_of(&g->plain, "ns", url, sizeof(url));
	url_of(&g->plain, "other", other, sizeof(other));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)), 0);
	assert_int_equal(server_stop(&g->plain), 0);

	memset(&res, 0, sizeof(res));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)), 0);
	assert_int_equal(res.from_cache, 1);
	assert_int_equal(res.generation, 1);
	check_catalog(res.path);
	/* errbuf says why the cache stood in. */
	assert_non_null(strstr(err, "cannot reach"));
	/* The cache stands in only for the URL it came from. */
	assert_int_equal(
	    hyd_catalog_fetch(other, cache, NULL, 5, &res, err, sizeof(err)),
	    -EHOSTUNREACH);
	assert_non_null(strstr(err, other));

	server_start(&g->plain, NULL, g->www);
}

/* Another base URL on the same cache: the old catalogs are forgotten, so
 * they can never stand in for the new URL. */
static void test_url_change(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], url2[128], p[256], err[512];
	struct stat sb1, sb2;
	size_t len;
	char *txt;

	NEED_PYTHON(g);
	new_cache(g, cache, sizeof(cache));
	url_of(&g->plain, "ns", url, sizeof(url));
	url_of(&g->plain, "ns2", url2, sizeof(url2));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)), 0);
	/* A second name keeps the old inode alive to compare against. */
	snprintf(p, sizeof(p), "%s/old.db", cache);
	assert_int_equal(link(res.path, p), 0);
	assert_int_equal(
	    hyd_catalog_fetch(url2, cache, NULL, 5, &res, err, sizeof(err)), 0);
	assert_int_equal(res.from_cache, 0);
	assert_int_equal(stat(p, &sb1), 0);
	assert_int_equal(sb1.st_nlink, 1); /* the old one was removed */
	assert_int_equal(stat(res.path, &sb2), 0);
	assert_int_not_equal(sb1.st_ino, sb2.st_ino); /* downloaded anew */
	assert_int_equal(count_entries(cache), 3);
	snprintf(p, sizeof(p), "%s/catalogs/url", cache);
	txt = tsup_read_file(p, &len);
	txt[len] = '\0';
	snprintf(p, sizeof(p), "%s/\n", url2);
	assert_string_equal(txt, p);
	free(txt);
	check_catalog(res.path);
}

static void test_wrong_namespace(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], err[512];

	NEED_PYTHON(g);
	new_cache(g, cache, sizeof(cache));
	url_of(&g->plain, "nope", url, sizeof(url));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)),
	    -ENOENT);
	assert_non_null(strstr(err, url));
	assert_non_null(strstr(err, "404"));
	assert_int_equal(count_entries(cache), 0);
}

static void test_json_errors(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], err[512];

	NEED_PYTHON(g);
	new_cache(g, cache, sizeof(cache));
	url_of(&g->json, "gone", url, sizeof(url));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)),
	    -ENOENT);
	assert_non_null(strstr(err, url));
	assert_non_null(strstr(err, "no namespace \"gone\""));
	url_of(&g->json, "boom", url, sizeof(url));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)),
	    -EPROTO);
	assert_non_null(strstr(err, "disk on fire"));
	assert_non_null(strstr(err, "HTTP 500"));
}

static void test_garbage(void **state)
{
	static const char *const ns[] = {"garbage", "notcat", "wronggen",
					 "cut"};
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], err[512];
	size_t i;

	NEED_PYTHON(g);
	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		new_cache(g, cache, sizeof(cache));
		url_of(&g->plain, ns[i], url, sizeof(url));
		assert_int_equal(hyd_catalog_fetch(url, cache, NULL, 5, &res,
						   err, sizeof(err)),
				 -EBADMSG);
		assert_non_null(strstr(err, "not a valid ferry catalog"));
		assert_non_null(strstr(err, url));
		/* Nothing left behind: no temp, no catalog, no url record. */
		assert_int_equal(count_entries(cache), 0);
	}
}

static void test_unreachable(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], err[512];

	new_cache(g, cache, sizeof(cache));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/x",
		 tsup_free_port());
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 2, &res, err, sizeof(err)),
	    -EHOSTUNREACH);
	assert_non_null(strstr(err, "cannot reach"));
	assert_non_null(strstr(err, url));
}

static void test_bad_url(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], err[512];

	new_cache(g, cache, sizeof(cache));
	assert_int_equal(hyd_catalog_fetch("ftp://127.0.0.1/v1/x", cache, NULL,
					   2, &res, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "ftp://127.0.0.1/v1/x"));
	assert_int_equal(hyd_catalog_fetch("not a url", cache, NULL, 2, &res,
					   err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(hyd_catalog_fetch("file:///etc/passwd", cache, NULL, 2,
					   &res, err, sizeof(err)),
			 -EINVAL);
}

/* A catalog whose size is an exact multiple of zstd's streaming output
 * buffer: the decoder then sees one call with no input after the frame
 * ended, which must not read as "frame incomplete" (a regression). */
static void test_aligned_size(void **state)
{
	struct gx *g = *state;
	struct hyd_catalog_result res;
	char cache[128], url[128], err[512], path[256];
	char value[3000];
	size_t align = ZSTD_DStreamOutSize(), db_len = 0, z_len;
	void *db = NULL, *z;
	int n;

	NEED_PYTHON(g);
	memset(value, 'v', sizeof(value));
	snprintf(path, sizeof(path), "%s/aligned.db", g->root);
	/* Each 3000-byte xattr adds about a page: grow until aligned. */
	for (n = 0; n < 200; n++) {
		struct cat_meta m = {.generation = 1, .created_ns = 1};
		struct cat_inode root = {.ino = 1,
					 .kind = CAT_DIR,
					 .mode = S_IFDIR | 0755,
					 .nlink = 2};
		cat_writer *w = NULL;
		char name[32];

		chunk_params_default(&m.params);
		unlink(path);
		assert_int_equal(cat_writer_open(path, &m, &w), 0);
		assert_int_equal(cat_writer_add_inode(w, &root, NULL, 0), 0);
		for (int i = 0; i < n; i++) {
			int k = snprintf(name, sizeof(name), "user.x%d", i);
			assert_int_equal(cat_writer_add_xattr(w, 1, name,
							      (size_t)k, value,
							      sizeof(value)),
					 0);
		}
		assert_int_equal(cat_writer_commit(w), 0);
		free(db);
		db = tsup_read_file(path, &db_len);
		if (db_len % align == 0)
			break;
	}
	assert_int_equal(db_len % align, 0);
	z = zstd_of(db, db_len, &z_len);
	publish(g, "aligned", 1, z, z_len);
	new_cache(g, cache, sizeof(cache));
	url_of(&g->plain, "aligned", url, sizeof(url));
	assert_int_equal(
	    hyd_catalog_fetch(url, cache, NULL, 5, &res, err, sizeof(err)), 0);
	assert_int_equal(res.generation, 1);
	free(z);
	free(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fetch),
	    cmocka_unit_test(test_fetch_cache),
	    cmocka_unit_test(test_url_change),
	    cmocka_unit_test(test_wrong_namespace),
	    cmocka_unit_test(test_json_errors),
	    cmocka_unit_test(test_garbage),
	    cmocka_unit_test(test_unreachable),
	    cmocka_unit_test(test_bad_url),
	    cmocka_unit_test(test_aligned_size),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
