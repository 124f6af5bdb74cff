/*
 * tests/unit/test_hyd_manifest.c — pending manifests (catalog format 2)
 * on the destination: the manifest fetcher (hyd_manifest.c), the read
 * path, backfill, `ferry sync` and status with a catalog whose files'
 * manifests come after it.
 *
 * Each test publishes its own namespace as a static layout (HEAD,
 * catalog/GEN, chunk/ID, manifest/GEN/INO, manifests/GEN/SEG as files)
 * served by a small python3 http.server written here: it logs every
 * request's path (so a test can count them), answers 503 with
 * Retry-After: 1 while a "PATH.503" file holds a count above 0 (counting
 * it down) or a negative one (held until the test replaces the file; the
 * server never writes it then, so the test's "0" cannot be overwritten by
 * a countdown in flight), and sleeps before answering when "PATH.delay"
 * holds seconds. The test replaces control files by rename, so the server
 * never reads half of one.
 * The tree:
 *   /a     ino 2     300000 B  pending, in segment 0's answer
 *   /b     ino 3     100000 B  manifest in the catalog
 *   /c     ino 4     0 B       pending
 *   /d/e   ino 6     200000 B  pending; its first 80000 B are a's (dedup)
 *   /d/big ino 7     500000 B  pending, "fetch on its own" (ALONE) in
 *                              segment 0's answer
 *   /chg   ino 8     70000 B   pending, the source changed (CHANGED)
 *                              (only when a test asks for it)
 *   /far   ino 2000  50000 B   pending, segment 1
 * Without python3 every test is skipped, saying so.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <zstd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/backfill/hyd_backfill.h"
#include "hydrator/fetch/hyd_catalog.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/fetch/hyd_open.h"
#include "hydrator/hydrator.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/store/hyd_store.h"
#include "tsupport.h"

#define SEC 1000000000ull
#define CUT 40000u /* chunk length of every manifest here */
#define MAXROWS 16u
#define GEN 1u

enum kind { P_NONE, P_INLINE, P_ALONE, P_CHANGED };

static const struct fdef {
	const char *name;
	uint64_t ino, parent, size;
	enum kind kind;
} fdefs[] = {
    {"a", 2, 1, 300000, P_INLINE},     {"b", 3, 1, 100000, P_NONE},
    {"c", 4, 1, 0, P_INLINE},	       {"e", 6, 5, 200000, P_INLINE},
    {"big", 7, 5, 500000, P_ALONE},    {"chg", 8, 1, 70000, P_CHANGED},
    {"far", 2000, 1, 50000, P_INLINE},
};
#define NFILES (sizeof(fdefs) / sizeof(fdefs[0]))
#define F_A 0
#define F_B 1
#define F_C 2
#define F_E 3
#define F_BIG 4
#define F_CHG 5
#define F_FAR 6

struct tfile {
	uint8_t *data;
	struct cat_chunk rows[MAXROWS];
	size_t nrows;
};

/* One published namespace. */
struct ns {
	char name[32];
	char dir[256]; /* www/v1/NAME */
	char url[128];
	int with_changed;
	struct tfile f[NFILES];
};

struct gx {
	int have_python;
	char root[64];
	char www[96];
	char log[128];
	pid_t pid;
	int port;
	int n; /* numbers namespaces and caches */
};

static struct gx gx;

static const char server_py[] =
    "import os, sys, threading, time, http.server\n"
    "root, logp, port = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
    "lock = threading.Lock()\n"
    "class H(http.server.SimpleHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    def __init__(self, *a, **k):\n"
    "        super().__init__(*a, directory=root, **k)\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "    def do_GET(self):\n"
    "        path = self.path.split('?', 1)[0]\n"
    "        with lock:\n"
    "            with open(logp, 'a') as f:\n"
    "                f.write(path + '\\n')\n"
    "        fs = self.translate_path(path)\n"
    "        if os.path.exists(fs + '.delay'):\n"
    "            time.sleep(float(open(fs + '.delay').read()))\n"
    "        n = 0\n"
    "        with lock:\n"
    "            try:\n"
    "                n = int(open(fs + '.503').read())\n"
    "            except (OSError, ValueError):\n"
    "                n = 0\n"
    "            if n > 0:\n"
    "                open(fs + '.503', 'w').write(str(n - 1))\n"
    "        if n != 0:\n"
    "            b = b'{\"error\":\"hashing\",\"detail\":\"not yet\"}\\n'\n"
    "            self.send_response(503)\n"
    "            self.send_header('Retry-After', '1')\n"
    "            self.send_header('Content-Type', 'application/json')\n"
    "            self.send_header('Content-Length', str(len(b)))\n"
    "            self.end_headers()\n"
    "            self.wfile.write(b)\n"
    "            return\n"
    "        super().do_GET()\n"
    "http.server.ThreadingHTTPServer(('127.0.0.1', port), "
    "H).serve_forever()\n";

static void pathf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pathf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < cap);
}

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

/* ---- the server ---- */

static void server_start(void)
{
	char script[128], port[16];
	struct timespec ts = {0, 20 * 1000 * 1000};
	int i;

	pathf(script, sizeof(script), "%s/server.py", gx.root);
	tsup_write_file(script, server_py, sizeof(server_py) - 1);
	gx.port = tsup_free_port();
	snprintf(port, sizeof(port), "%d", gx.port);
	gx.pid = fork();
	assert_true(gx.pid >= 0);
	if (gx.pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		/* A test that crashes must not leave its server behind. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(null, 1);
		dup2(null, 2);
		execlp("python3", "python3", script, gx.www, gx.log, port,
		       (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 500; i++) {
		if (tsup_port_answers(gx.port))
			return;
		nanosleep(&ts, NULL);
	}
	fail_msg("python3 http server on port %d did not come up", gx.port);
}

/* How many requests for path (without the query) the server has seen. */
static int requests(const struct ns *n, const char *rel)
{
	char want[256], *log, *p, *nl;
	size_t len;
	int count = 0;

	pathf(want, sizeof(want), "/v1/%s/%s", n->name, rel);
	if (access(gx.log, F_OK) != 0)
		return 0;
	log = tsup_read_file(gx.log, &len);
	log[len] = '\0';
	for (p = log; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		if (!strcmp(p, want))
			count++;
	}
	free(log);
	return count;
}

/* A control file beside a served path: "PATH.503" or "PATH.delay",
 * replaced whole by rename. */
static void control(const struct ns *n, const char *rel, const char *what,
		    const char *text)
{
	char p[512], tmp[520];

	pathf(p, sizeof(p), "%s/%s.%s", n->dir, rel, what);
	pathf(tmp, sizeof(tmp), "%s.tmp", p);
	tsup_write_file(tmp, text, strlen(text));
	assert_int_equal(rename(tmp, p), 0);
}

/* ---- publishing a namespace ---- */

static void mkdir_p(const char *path)
{
	assert_int_equal(base_mkdir_p(path, 0755), 0);
}

static void put_file(const struct ns *n, const char *rel, const void *buf,
		     size_t len)
{
	char p[512], *slash;

	pathf(p, sizeof(p), "%s/%s", n->dir, rel);
	slash = strrchr(p, '/');
	*slash = '\0';
	mkdir_p(p);
	*slash = '/';
	tsup_write_file(p, buf, len);
}

static void meta_of(struct cat_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->generation = GEN;
	m->created_ns = 1;
	m->params.min = 4096;
	m->params.avg = 16384;
	m->params.max = 65536;
}

static void inode(cat_writer *w, uint64_t ino, enum cat_kind k, uint32_t mode,
		  uint64_t size)
{
	struct cat_inode in = {.ino = ino,
			       .kind = k,
			       .mode = mode,
			       .size = size,
			       .nlink = k == CAT_DIR ? 2 : 1,
			       .mtime_ns =
				   1600000000123456789ll + (int64_t)ino * 1000,
			       .ctime_ns = 1};

	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
}

/* The bytes and chunks of every file; e starts with a's first 80000. */
static void make_data(struct ns *n)
{
	for (size_t i = 0; i < NFILES; i++) {
		struct tfile *t = &n->f[i];
		uint64_t off = 0, size = fdefs[i].size;

		t->data = tsup_random_bytes((size_t)size, 100 + i);
		if (i == F_E)
			memcpy(t->data, n->f[F_A].data, 2 * CUT);
		while (off < size) {
			uint32_t l =
			    size - off > CUT ? CUT : (uint32_t)(size - off);

			assert_true(t->nrows < MAXROWS);
			t->rows[t->nrows].off = off;
			t->rows[t->nrows].len = l;
			assert_int_equal(
			    chunk_id_compute(t->data + off, l,
					     &t->rows[t->nrows].id),
			    0);
			t->nrows++;
			off += l;
		}
	}
}

static void put_chunks(const struct ns *n)
{
	uint8_t *frame = malloc(frame_bound(CUT));
	char rel[128], hex[CHUNK_ID_HEX_LEN + 1];
	size_t flen;

	assert_non_null(frame);
	for (size_t i = 0; i < NFILES; i++)
		for (size_t k = 0; k < n->f[i].nrows; k++) {
			const struct cat_chunk *c = &n->f[i].rows[k];

			assert_int_equal(frame_encode(NULL, FRAME_POLICY_ZSTD,
						      1, n->f[i].data + c->off,
						      c->len, frame,
						      frame_bound(CUT), &flen),
					 0);
			chunk_id_to_hex(&c->id, hex);
			pathf(rel, sizeof(rel), "chunk/%s", hex);
			put_file(n, rel, frame, flen);
		}
	free(frame);
}

/* A record of file i into body b (its marker when it has one). */
static void add_rec(const struct ns *n, struct cat_buf *b, size_t i,
		    int in_segment)
{
	uint32_t count = (uint32_t)n->f[i].nrows;

	if (fdefs[i].kind == P_CHANGED)
		count = CAT_MWIRE_CHANGED;
	else if (fdefs[i].kind == P_ALONE && in_segment)
		count = CAT_MWIRE_ALONE;
	assert_int_equal(
	    cat_mwire_add(b, fdefs[i].ino, fdefs[i].size, count,
			  count > CAT_MWIRE_COUNT_MAX ? NULL : n->f[i].rows),
	    0);
}

static int in_tree(const struct ns *n, size_t i)
{
	return fdefs[i].kind != P_CHANGED || n->with_changed;
}

static void put_manifests(const struct ns *n)
{
	struct cat_buf b = {0};
	char rel[128];
	uint64_t seg;

	for (size_t i = 0; i < NFILES; i++) {
		if (fdefs[i].kind == P_NONE || !in_tree(n, i))
			continue;
		assert_int_equal(
		    cat_mwire_begin(&b, GEN, fdefs[i].ino, fdefs[i].ino), 0);
		add_rec(n, &b, i, 0);
		pathf(rel, sizeof(rel), "manifest/%u/%llu", GEN,
		      (unsigned long long)fdefs[i].ino);
		put_file(n, rel, b.p, b.n);
	}
	for (seg = 0; seg < 2; seg++) {
		assert_int_equal(
		    cat_mwire_begin(&b, GEN, seg * 1024, seg * 1024 + 1023), 0);
		/* fdefs is in ino order, as records must be. */
		for (size_t i = 0; i < NFILES; i++)
			if (fdefs[i].kind != P_NONE && in_tree(n, i) &&
			    fdefs[i].ino / 1024 == seg)
				add_rec(n, &b, i, 1);
		pathf(rel, sizeof(rel), "manifests/%u/%llu", GEN,
		      (unsigned long long)seg);
		put_file(n, rel, b.p, b.n);
	}
	cat_buf_fini(&b);
}

static void put_catalog(const struct ns *n)
{
	struct cat_meta m;
	cat_writer *w = NULL;
	char path[256];
	uint8_t *db, *z;
	size_t len, zcap, zlen, i, k;

	meta_of(&m);
	pathf(path, sizeof(path), "%s/built-%s.db", gx.root, n->name);
	assert_int_equal(cat_writer_open(path, &m, &w), 0);
	inode(w, 1, CAT_DIR, S_IFDIR | 0755, 0);
	inode(w, 5, CAT_DIR, S_IFDIR | 0750, 0);
	for (i = 0; i < NFILES; i++)
		if (in_tree(n, i))
			inode(w, fdefs[i].ino, CAT_REG,
			      S_IFREG | (i % 2 ? 0600 : 0644), fdefs[i].size);
	/* Each directory's entries in one run. */
	for (i = 0; i < NFILES; i++)
		if (fdefs[i].parent == 1 && in_tree(n, i))
			assert_int_equal(
			    cat_writer_add_dirent(w, 1, fdefs[i].name,
						  strlen(fdefs[i].name),
						  fdefs[i].ino),
			    0);
	assert_int_equal(cat_writer_add_dirent(w, 1, "d", 1, 5), 0);
	for (i = 0; i < NFILES; i++)
		if (fdefs[i].parent == 5)
			assert_int_equal(
			    cat_writer_add_dirent(w, 5, fdefs[i].name,
						  strlen(fdefs[i].name),
						  fdefs[i].ino),
			    0);
	assert_int_equal(cat_writer_add_xattr(w, 6, "user.k", 6, "v", 1), 0);
	for (i = 0; i < NFILES; i++) {
		if (!in_tree(n, i))
			continue;
		if (fdefs[i].kind != P_NONE) {
			assert_int_equal(
			    cat_writer_add_pending(w, fdefs[i].ino), 0);
			continue;
		}
		for (k = 0; k < n->f[i].nrows; k++)
			assert_int_equal(
			    cat_writer_add_chunk(
				w, fdefs[i].ino, n->f[i].rows[k].off,
				n->f[i].rows[k].len, &n->f[i].rows[k].id),
			    0);
	}
	assert_int_equal(cat_writer_commit(w), 0);
	db = tsup_read_file(path, &len);
	zcap = ZSTD_compressBound(len);
	z = malloc(zcap);
	assert_non_null(z);
	zlen = ZSTD_compress(z, zcap, db, len, 3);
	assert_false(ZSTD_isError(zlen));
	pathf(path, sizeof(path), "catalog/%u", GEN);
	put_file(n, path, z, zlen);
	put_file(n, "HEAD", "1\n", 2);
	free(z);
	free(db);
}

/* A namespace of its own for one test. */
static void publish(struct ns *n, int with_changed)
{
	memset(n, 0, sizeof(*n));
	n->with_changed = with_changed;
	pathf(n->name, sizeof(n->name), "t%d", ++gx.n);
	pathf(n->dir, sizeof(n->dir), "%s/v1/%s", gx.www, n->name);
	pathf(n->url, sizeof(n->url), "http://127.0.0.1:%d/v1/%s", gx.port,
	      n->name);
	make_data(n);
	put_chunks(n);
	put_manifests(n);
	put_catalog(n);
}

static void ns_free(struct ns *n)
{
	for (size_t i = 0; i < NFILES; i++)
		free(n->f[i].data);
}

/* ---- a hydrator without FUSE: hyd_open, fetchers, the read path ---- */

struct rig {
	struct hyd_open op;
	hyd_fetch *fetch;
	hyd_manifest *man;
	struct hyd_read_ctx rc;
};

/* Open a fresh cache on n; the fetcher starts unless start is 0 (a
 * backfill must hook into it first: rig_start). */
static void rig_open2(const struct ns *n, struct rig *r, uint64_t timeout_ns,
		      int start)
{
	struct hyd_fetch_config fc;
	struct hyd_manifest_config mc;
	char cache[128];

	memset(r, 0, sizeof(*r));
	pathf(cache, sizeof(cache), "%s/cache%d", gx.root, ++gx.n);
	assert_int_equal(hyd_open_url(&r->op, n->url), 0);
	assert_int_equal(hyd_open_cache_dir(&r->op, cache), 0);
	assert_int_equal(hyd_open_store(&r->op), 0);
	assert_int_equal(hyd_open_catalog(&r->op, 5), 0);
	/* Pending files: the overlay is there and attached. */
	assert_non_null(r->op.ov);
	assert_true(r->op.meta.pending > 0);
	memset(&fc, 0, sizeof(fc));
	fc.base_url = r->op.base;
	fc.store = r->op.store;
	fc.max_raw = r->op.meta.params.max;
	fc.connections = 4;
	fc.connect_timeout_ms = 2000;
	assert_int_equal(hyd_fetch_new(&fc, &r->fetch), 0);
	if (start)
		assert_int_equal(hyd_fetch_start(r->fetch), 0);
	memset(&mc, 0, sizeof(mc));
	mc.base_url = r->op.base;
	mc.ov = r->op.ov;
	mc.connect_timeout_ms = 2000;
	assert_int_equal(hyd_manifest_new(&mc, &r->man), 0);
	r->rc.cat = r->op.cat;
	r->rc.store = r->op.store;
	r->rc.fetch = r->fetch;
	r->rc.manifest = r->man;
	r->rc.max_raw = r->op.meta.params.max;
	r->rc.timeout_ns = timeout_ns;
}

static void rig_open(const struct ns *n, struct rig *r, uint64_t timeout_ns)
{
	rig_open2(n, r, timeout_ns, 1);
}

static void rig_close(struct rig *r)
{
	hyd_fetch_stop(r->fetch);
	hyd_fetch_free(r->fetch);
	hyd_manifest_free(r->man);
	hyd_open_close(&r->op);
}

/* Rows of the overlay's file table (what was stored), read directly. */
static int64_t overlay_files(const struct rig *r)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t n;

	assert_int_equal(
	    sqlite3_open_v2(r->op.ovpath, &db, SQLITE_OPEN_READONLY, NULL),
	    SQLITE_OK);
	assert_int_equal(
	    sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM file", -1, &st, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* Read file i whole through the read path (an open file, as FUSE does)
 * and compare; returns the read's result. */
static int read_whole(const struct ns *n, struct rig *r, size_t i)
{
	struct hyd_read_open *of;
	struct hyd_read_iov rv;
	size_t at = 0;
	int rc;

	assert_int_equal(
	    hyd_read_open_new(NULL, fdefs[i].ino, fdefs[i].size, &of), 0);
	rc = hyd_read_open_iov(&r->rc, of, 0, (size_t)fdefs[i].size + 100, &rv);
	if (rc == 0) {
		assert_int_equal(rv.len, fdefs[i].size);
		for (size_t k = 0; k < rv.n; k++) {
			assert_memory_equal(rv.iov[k].iov_base,
					    n->f[i].data + at,
					    rv.iov[k].iov_len);
			at += rv.iov[k].iov_len;
		}
		assert_int_equal(at, fdefs[i].size);
		hyd_read_iov_release(&r->rc, &rv);
	}
	hyd_read_open_unref(of);
	return rc;
}

static int group_setup(void **state)
{
	(void)state;
	memcpy(gx.root, "/tmp/ferry-test-man-XXXXXX", 27);
	if (!mkdtemp(gx.root))
		return -1;
	/* Loopback must not go through a proxy the environment names. */
	setenv("NO_PROXY", "127.0.0.1,localhost", 1);
	setenv("no_proxy", "127.0.0.1,localhost", 1);
	gx.have_python = python_works();
	if (!gx.have_python) {
		fprintf(stderr, "SKIP test_hyd_manifest: python3 with "
				"http.server not found; these tests need a "
				"real HTTP server\n");
		return 0;
	}
	snprintf(gx.www, sizeof(gx.www), "%s/www", gx.root);
	snprintf(gx.log, sizeof(gx.log), "%s/requests.log", gx.root);
	if (mkdir(gx.www, 0755) < 0 || hyd_fetch_global_init() < 0)
		return -1;
	server_start();
	return 0;
}

static int group_teardown(void **state)
{
	int rc = 0;

	(void)state;
	if (gx.pid > 0) {
		/* a failed group teardown: see test_hyd_fetch.c */
		if (tsup_stop_server(gx.pid, "python3 server"))
			rc = -1;
		hyd_fetch_global_cleanup();
	}
	if (!getenv("KEEP_TMP"))
		tsup_rm_rf(gx.root);
	return rc;
}

#define NEED_PYTHON()                                                          \
	do {                                                                   \
		if (!gx.have_python) {                                         \
			fprintf(stderr, "SKIP: python3 not found\n");          \
			skip();                                                \
		}                                                              \
	} while (0)

/* ---- the read path ---- */

struct reader_arg {
	const struct ns *n;
	struct rig *r;
	int rc;
};

static void *reader_main(void *p)
{
	struct reader_arg *a = p;

	a->rc = read_whole(a->n, a->r, F_A);
	return NULL;
}

/* 16 readers of one pending file at once: one manifest request (for that
 * file alone: no segment is asked for), exact bytes for all of them. */
static void test_read_fetches_once(void **state)
{
	struct reader_arg a[16];
	pthread_t th[16];
	struct rig r;
	struct ns n;
	char rel[64];

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	rig_open(&n, &r, 20 * SEC);
	assert_int_equal(cat_manifest_state(r.op.cat, 2), CAT_MANIFEST_MISSING);
	/* The answer takes a while, so every reader is waiting for it. */
	pathf(rel, sizeof(rel), "manifest/%u/2", GEN);
	control(&n, rel, "delay", "0.5");
	for (int i = 0; i < 16; i++) {
		a[i] = (struct reader_arg){&n, &r, 1};
		assert_int_equal(
		    pthread_create(&th[i], NULL, reader_main, &a[i]), 0);
	}
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].rc, 0);
	}
	assert_int_equal(requests(&n, rel), 1);
	assert_int_equal(requests(&n, "manifests/1/0"), 0);
	assert_int_equal(cat_manifest_state(r.op.cat, 2), CAT_MANIFEST_LOCAL);
	/* Only a's record is stored; the next read asks nobody. */
	assert_int_equal(overlay_files(&r), 1);
	assert_int_equal(read_whole(&n, &r, F_A), 0);
	assert_int_equal(requests(&n, rel), 1);
	/* A file whose manifest is in the catalog never asks. */
	assert_int_equal(read_whole(&n, &r, F_B), 0);
	assert_int_equal(requests(&n, "manifest/1/3"), 0);
	rig_close(&r);
	ns_free(&n);
}

/* Not hashed yet twice (503, Retry-After: 1), then the answer: the read
 * waits it out within its deadline and gets the right bytes. */
static void test_read_503_then_200(void **state)
{
	struct hyd_manifest_stats ms;
	struct rig r;
	struct ns n;
	uint64_t t0;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	rig_open(&n, &r, 20 * SEC);
	control(&n, "manifest/1/6", "503", "2");
	t0 = base_now_ns();
	assert_int_equal(read_whole(&n, &r, F_E), 0);
	assert_true(base_now_ns() - t0 >= 2 * SEC - SEC / 10);
	assert_int_equal(requests(&n, "manifest/1/6"), 3);
	hyd_manifest_stats(r.man, &ms);
	assert_int_equal(ms.requests, 3);
	assert_int_equal(ms.not_ready, 2);
	assert_int_equal(ms.files, 1);
	assert_int_equal(ms.failures, 0);
	rig_close(&r);
	ns_free(&n);
}

/* Still not hashed when the read's deadline comes: EIO by then, not
 * later; the manifest fetcher says -EAGAIN. */
static void test_read_deadline(void **state)
{
	struct rig r;
	struct ns n;
	uint64_t t0, dt;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	rig_open(&n, &r, 2 * SEC);
	control(&n, "manifest/1/6", "503", "-1");
	t0 = base_now_ns();
	assert_int_equal(read_whole(&n, &r, F_E), -EIO);
	dt = base_now_ns() - t0;
	assert_true(dt >= 1 * SEC && dt < 5 * SEC);
	assert_int_equal(
	    hyd_manifest_file(r.man, r.op.cat, 6, base_now_ns(), NULL),
	    -EAGAIN);
	assert_int_equal(cat_manifest_state(r.op.cat, 6), CAT_MANIFEST_MISSING);
	rig_close(&r);
	ns_free(&n);
}

/* Bodies that are wrong in one way each: EIO for the read, -EBADMSG from
 * the fetcher, and nothing stored. */
static void test_read_malformed(void **state)
{
	struct cat_buf b = {0};
	struct cat_chunk bad[MAXROWS];
	struct rig r;
	struct ns n;
	int k;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	rig_open(&n, &r, 10 * SEC);
	for (k = 0; k < 4; k++) {
		memcpy(bad, n.f[F_A].rows, sizeof(bad));
		if (k == 0) {
			/* chunks that do not cover the file */
			bad[0].len -= 1;
			assert_int_equal(cat_mwire_begin(&b, GEN, 2, 2), 0);
			assert_int_equal(cat_mwire_add(&b, 2, fdefs[F_A].size,
						       (uint32_t)n.f[F_A].nrows,
						       bad),
					 0);
		} else if (k == 1) {
			/* another generation */
			assert_int_equal(cat_mwire_begin(&b, GEN + 1, 2, 2), 0);
			assert_int_equal(cat_mwire_add(&b, 2, fdefs[F_A].size,
						       (uint32_t)n.f[F_A].nrows,
						       bad),
					 0);
		} else if (k == 2) {
			/* the right record with a byte of junk after it */
			assert_int_equal(cat_mwire_begin(&b, GEN, 2, 2), 0);
			assert_int_equal(cat_mwire_add(&b, 2, fdefs[F_A].size,
						       (uint32_t)n.f[F_A].nrows,
						       bad),
					 0);
			b.p[b.n++] = 0;
		} else {
			/* well formed, but "on its own" at the per-file
			 * endpoint: no manifest in it */
			assert_int_equal(cat_mwire_begin(&b, GEN, 2, 2), 0);
			assert_int_equal(cat_mwire_add(&b, 2, fdefs[F_A].size,
						       CAT_MWIRE_ALONE, NULL),
					 0);
		}
		put_file(&n, "manifest/1/2", b.p, b.n);
		assert_int_equal(read_whole(&n, &r, F_A), -EIO);
		assert_int_equal(hyd_manifest_file(r.man, r.op.cat, 2,
						   base_now_ns() + 5 * SEC,
						   NULL),
				 -EBADMSG);
		assert_int_equal(cat_manifest_state(r.op.cat, 2),
				 CAT_MANIFEST_MISSING);
		assert_int_equal(overlay_files(&r), 0);
	}
	cat_buf_fini(&b);
	rig_close(&r);
	ns_free(&n);
}

/* The source changed before the file was hashed: its answer is stored
 * (so nobody asks again), and every read of it is EIO. */
static void test_read_changed(void **state)
{
	struct rig r;
	struct ns n;

	(void)state;
	NEED_PYTHON();
	publish(&n, 1);
	rig_open(&n, &r, 10 * SEC);
	assert_int_equal(read_whole(&n, &r, F_CHG), -EIO);
	assert_int_equal(cat_manifest_state(r.op.cat, 8), CAT_MANIFEST_CHANGED);
	assert_int_equal(read_whole(&n, &r, F_CHG), -EIO);
	/* The marker is an answer: asking again asks nobody. */
	assert_int_equal(hyd_manifest_file(r.man, r.op.cat, 8,
					   base_now_ns() + 5 * SEC, NULL),
			 0);
	assert_int_equal(requests(&n, "manifest/1/8"), 1);
	/* Reads of other files are not affected. */
	assert_int_equal(read_whole(&n, &r, F_FAR), 0);
	rig_close(&r);
	ns_free(&n);
}

/* ---- the fetcher alone ---- */

/* A segment: one request for its answer, one for the file it marks
 * "on its own", none for a file that is local already, none at all the
 * second time. */
static void test_segment_alone(void **state)
{
	struct rig r;
	struct ns n;
	size_t files = 99;

	(void)state;
	NEED_PYTHON();
	publish(&n, 1);
	rig_open(&n, &r, 10 * SEC);
	assert_int_equal(read_whole(&n, &r, F_A), 0);
	assert_int_equal(hyd_manifest_segment(r.man, r.op.cat, 0,
					      base_now_ns() + 10 * SEC, NULL,
					      &files),
			 0);
	/* e, c, chg from the segment, big on its own (a was stored). */
	assert_int_equal(files, 4);
	assert_int_equal(requests(&n, "manifests/1/0"), 1);
	assert_int_equal(requests(&n, "manifest/1/7"), 1);
	assert_int_equal(requests(&n, "manifest/1/6"), 0);
	assert_int_equal(cat_manifest_state(r.op.cat, 7), CAT_MANIFEST_LOCAL);
	assert_int_equal(cat_manifest_state(r.op.cat, 8), CAT_MANIFEST_CHANGED);
	assert_int_equal(cat_manifest_state(r.op.cat, 2000),
			 CAT_MANIFEST_MISSING);
	assert_int_equal(hyd_manifest_segment(r.man, r.op.cat, 0,
					      base_now_ns() + 10 * SEC, NULL,
					      &files),
			 0);
	assert_int_equal(files, 0);
	assert_int_equal(requests(&n, "manifests/1/0"), 1);
	assert_int_equal(hyd_manifest_segment(r.man, r.op.cat, 1,
					      base_now_ns() + 10 * SEC, NULL,
					      &files),
			 0);
	assert_int_equal(files, 1);
	assert_int_equal(read_whole(&n, &r, F_FAR), 0);
	assert_int_equal(read_whole(&n, &r, F_BIG), 0);
	assert_int_equal(requests(&n, "manifest/1/2000"), 0);
	rig_close(&r);
	ns_free(&n);
}

/* hyd_manifest_segment_for(ino) on r, within 10 s: its result, and the
 * overlay rows it wrote in *files. */
static int seg_for(struct rig *r, uint64_t ino, size_t *files)
{
	return hyd_manifest_segment_for(r->man, r->op.cat, ino,
					base_now_ns() + 10 * SEC, NULL, files);
}

/* One file's need of its segment: the segment's answer, and no request
 * for the file the answer left to its own (a big file's chunk list that
 * a caller needing a small one used to wait for). The answer is asked
 * for once: a later call for the segment (hyd_manifest_segment) or for
 * the big file itself asks for the big file alone. */
static void test_segment_for(void **state)
{
	struct rig r;
	struct ns n;
	size_t files = 99;

	(void)state;
	NEED_PYTHON();
	publish(&n, 1);
	rig_open(&n, &r, 10 * SEC);
	/* b's manifest is in the catalog: nothing to ask */
	assert_int_equal(seg_for(&r, 3, &files), 0);
	assert_int_equal(files, 0);
	assert_int_equal(requests(&n, "manifests/1/0"), 0);
	assert_int_equal(seg_for(&r, 6, &files), 0);
	/* a, c, e, chg from the answer; big left alone */
	assert_int_equal(files, 4);
	assert_int_equal(requests(&n, "manifests/1/0"), 1);
	assert_int_equal(requests(&n, "manifest/1/7"), 0);
	assert_int_equal(cat_manifest_state(r.op.cat, 6), CAT_MANIFEST_LOCAL);
	assert_int_equal(cat_manifest_state(r.op.cat, 7), CAT_MANIFEST_MISSING);
	/* local now: no request */
	assert_int_equal(seg_for(&r, 6, &files), 0);
	assert_int_equal(files, 0);
	assert_int_equal(requests(&n, "manifests/1/0"), 1);
	/* the whole segment: big alone, the answer not asked for again */
	assert_int_equal(hyd_manifest_segment(r.man, r.op.cat, 0,
					      base_now_ns() + 10 * SEC, NULL,
					      &files),
			 0);
	assert_int_equal(files, 1);
	assert_int_equal(requests(&n, "manifests/1/0"), 1);
	assert_int_equal(requests(&n, "manifest/1/7"), 1);
	assert_int_equal(read_whole(&n, &r, F_BIG), 0);
	rig_close(&r);

	/* A fresh cache: big asked for after a small file of its segment */
	rig_open(&n, &r, 10 * SEC);
	assert_int_equal(seg_for(&r, 2, &files), 0);
	assert_int_equal(files, 4);
	assert_int_equal(requests(&n, "manifests/1/0"), 2);
	assert_int_equal(requests(&n, "manifest/1/7"), 1);
	assert_int_equal(seg_for(&r, 7, &files), 0);
	assert_int_equal(files, 1);
	assert_int_equal(requests(&n, "manifests/1/0"), 2);
	assert_int_equal(requests(&n, "manifest/1/7"), 2);
	assert_int_equal(cat_manifest_state(r.op.cat, 7), CAT_MANIFEST_LOCAL);
	assert_int_equal(read_whole(&n, &r, F_BIG), 0);
	assert_int_equal(read_whole(&n, &r, F_E), 0);
	rig_close(&r);
	ns_free(&n);
}

/* 404 for a file, and a cancelled fetcher ends its calls at once. */
static void test_not_found_and_cancel(void **state)
{
	struct rig r;
	struct ns n;
	char p[512];
	uint64_t t0;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	rig_open(&n, &r, 10 * SEC);
	pathf(p, sizeof(p), "%s/manifest/1/2", n.dir);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(hyd_manifest_file(r.man, r.op.cat, 2,
					   base_now_ns() + 5 * SEC, NULL),
			 -ENOENT);
	assert_int_equal(read_whole(&n, &r, F_A), -EIO);
	/* Not pending: nothing to fetch. */
	assert_int_equal(hyd_manifest_file(r.man, r.op.cat, 3,
					   base_now_ns() + 5 * SEC, NULL),
			 0);
	control(&n, "manifest/1/6", "503", "-1");
	hyd_manifest_cancel(r.man);
	t0 = base_now_ns();
	assert_int_equal(hyd_manifest_file(r.man, r.op.cat, 6,
					   base_now_ns() + 30 * SEC, NULL),
			 -ECANCELED);
	assert_true(base_now_ns() - t0 < 2 * SEC);
	rig_close(&r);
	ns_free(&n);
}

/* ---- backfill ---- */

/* Distinct chunk ids of the tree's manifests (chg has none). */
static uint64_t distinct_chunks(const struct ns *n, uint64_t *ret_bytes)
{
	chunk_id seen[NFILES * MAXROWS];
	uint64_t count = 0, bytes = 0;

	for (size_t i = 0; i < NFILES; i++) {
		if (!in_tree(n, i) || fdefs[i].kind == P_CHANGED)
			continue;
		for (size_t k = 0; k < n->f[i].nrows; k++) {
			size_t j;

			for (j = 0; j < count; j++)
				if (!memcmp(&seen[j], &n->f[i].rows[k].id,
					    sizeof(chunk_id)))
					break;
			if (j < count)
				continue;
			seen[count++] = n->f[i].rows[k].id;
			bytes += n->f[i].rows[k].len;
		}
	}
	if (ret_bytes)
		*ret_bytes = bytes;
	return count;
}

struct bfrig {
	cat_reader *cat;
	hyd_backfill *bf;
};

static void bf_start(struct rig *r, struct bfrig *b, hyd_manifest *man)
{
	struct hyd_backfill_config bc;

	assert_int_equal(hyd_open_reader(&r->op, &b->cat), 0);
	memset(&bc, 0, sizeof(bc));
	bc.cat = b->cat;
	bc.store = r->op.store;
	bc.fetch = r->fetch;
	bc.manifest = man;
	bc.manifest_wait_ms = 1500;
	bc.max_raw = r->op.meta.params.max;
	bc.enabled = 1;
	bc.window = 16;
	assert_int_equal(hyd_backfill_new(&bc, &b->bf), 0);
	assert_int_equal(hyd_fetch_start(r->fetch), 0);
	assert_int_equal(hyd_backfill_start(b->bf), 0);
}

/* Poll until the backfill's state is want (or the time is up). */
static int bf_wait(struct bfrig *b, enum hyd_state want, unsigned secs,
		   struct hyd_backfill_stats *bs)
{
	for (unsigned i = 0; i < secs * 20; i++) {
		hyd_backfill_stats(b->bf, bs);
		if (bs->state == want)
			return 1;
		usleep(50000);
	}
	/* What it saw, so a failure in CI says where it stood. */
	print_message("backfill not in state %d after %u s: state=%d "
		      "passes=%" PRIu64 " chunks=%" PRIu64 "/%" PRIu64
		      " manifests_missing=%" PRIu64 " failed=%" PRIu64
		      " queued=%" PRIu64 " last_error=\"%s\"\n",
		      (int)want, secs, (int)bs->state, bs->passes,
		      bs->chunks_stored, bs->chunks_total,
		      bs->manifests_missing, bs->failed, bs->queued,
		      bs->last_error);
	return 0;
}

static void bf_stop(struct rig *r, struct bfrig *b)
{
	hyd_backfill_stop(b->bf);
	hyd_fetch_stop(r->fetch);
	hyd_backfill_free(b->bf);
	cat_reader_close(b->cat);
}

/* Every file of the tree but chg reads right from the store alone. */
static void check_offline(const struct ns *n, struct rig *r)
{
	struct hyd_read_ctx saved = r->rc;

	r->rc.fetch = NULL;
	r->rc.manifest = NULL;
	for (size_t i = 0; i < NFILES; i++)
		if (in_tree(n, i))
			assert_int_equal(read_whole(n, r, i),
					 fdefs[i].kind == P_CHANGED ? -EIO : 0);
	r->rc = saved;
}

/* Nothing read: backfill fetches segment 0's answer, big on its own,
 * segment 1's answer, and every chunk once; counts stay honest and the
 * end is COMPLETE with the changed file left out. */
static void test_backfill_pending(void **state)
{
	struct hyd_backfill_stats bs;
	struct hyd_status st;
	struct bfrig b;
	struct rig r;
	struct ns n;
	uint64_t want, want_bytes;

	char rel[128], hex[CHUNK_ID_HEX_LEN + 1];
	int seen_fresh = 0, i;

	(void)state;
	NEED_PYTHON();
	publish(&n, 1);
	/* e's own chunks come slowly, so the first pass lasts: its counts
	 * are watched while manifests arrive, before any recount. */
	for (size_t k = 2; k < n.f[F_E].nrows; k++) {
		chunk_id_to_hex(&n.f[F_E].rows[k].id, hex);
		pathf(rel, sizeof(rel), "chunk/%s", hex);
		control(&n, rel, "delay", "0.3");
	}
	rig_open2(&n, &r, 10 * SEC, 0);
	bf_start(&r, &b, r.man);
	for (i = 0; i < 6000; i++) {
		hyd_backfill_stats(b.bf, &bs);
		/* Never more stored than counted; in the first pass the
		 * total grows past b's chunks (the census's) as they come. */
		assert_true(bs.chunks_stored <= bs.chunks_total);
		assert_true(bs.bytes_stored <= bs.bytes_total);
		if (bs.passes == 1 && bs.chunks_total > n.f[F_B].nrows)
			seen_fresh = 1;
		if (bs.state == HYD_STATE_COMPLETE)
			break;
		usleep(10000);
	}
	assert_int_equal(bs.state, HYD_STATE_COMPLETE);
	assert_true(seen_fresh);
	bf_stop(&r, &b);
	want = distinct_chunks(&n, &want_bytes);
	assert_int_equal(bs.chunks_total, want);
	assert_int_equal(bs.chunks_stored, want);
	assert_int_equal(bs.bytes_total, want_bytes);
	assert_int_equal(bs.manifests_total, 6);
	assert_int_equal(bs.manifests_missing, 0);
	assert_int_equal(requests(&n, "manifests/1/0"), 1);
	assert_int_equal(requests(&n, "manifests/1/1"), 1);
	assert_int_equal(requests(&n, "manifest/1/7"), 1);
	assert_int_equal(requests(&n, "manifest/1/2"), 0);
	assert_int_equal(requests(&n, "manifest/1/6"), 0);
	check_offline(&n, &r);
	/* The cache's own numbers agree. */
	assert_int_equal(hyd_status_from_cache(r.op.cache, &st), 0);
	assert_int_equal(st.state, HYD_STATE_COMPLETE);
	assert_int_equal(st.manifests_total, 6);
	assert_int_equal(st.manifests_local, 6);
	assert_int_equal(st.manifests_changed, 1);
	assert_int_equal(st.chunks_total, want);
	assert_int_equal(st.chunks_stored, want);
	assert_int_equal(st.files_total, 7);
	assert_int_equal(st.files_hydrated, 6);
	rig_close(&r);
	ns_free(&n);
}

/* Segment 1 is not hashed for a while: backfill stores everything else
 * (in order), is not COMPLETE with a manifest missing, and finishes by
 * itself once the answer comes. */
static void test_backfill_waits_for_hashing(void **state)
{
	struct hyd_backfill_stats bs;
	struct bfrig b;
	struct rig r;
	struct ns n;
	uint64_t want;
	int i;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	control(&n, "manifests/1/1", "503", "-1");
	rig_open2(&n, &r, 10 * SEC, 0);
	bf_start(&r, &b, r.man);
	/* Every chunk but far's stored, far's manifest still missing. */
	want = distinct_chunks(&n, NULL) - n.f[F_FAR].nrows;
	for (i = 0; i < 600; i++) {
		hyd_backfill_stats(b.bf, &bs);
		if (bs.passes >= 2 && bs.chunks_stored == want)
			break;
		usleep(50000);
	}
	assert_int_equal(bs.chunks_stored, want);
	assert_true(bs.chunks_stored <= bs.chunks_total);
	assert_int_equal(bs.manifests_missing, 1);
	assert_int_not_equal(bs.state, HYD_STATE_COMPLETE);
	assert_int_equal(cat_manifest_state(r.op.cat, 2000),
			 CAT_MANIFEST_MISSING);
	control(&n, "manifests/1/1", "503", "0");
	assert_true(bf_wait(&b, HYD_STATE_COMPLETE, 60, &bs));
	bf_stop(&r, &b);
	assert_int_equal(bs.chunks_total, distinct_chunks(&n, NULL));
	assert_int_equal(bs.manifests_missing, 0);
	check_offline(&n, &r);
	rig_close(&r);
	ns_free(&n);
}

/* A read hands out verified bytes before the store write lands: wait for
 * file i's chunks to be stored. */
static void wait_stored(const struct ns *n, struct rig *r, size_t i)
{
	for (int t = 0; t < 200; t++) {
		size_t k;

		for (k = 0; k < n->f[i].nrows; k++)
			if (hyd_store_has(r->op.store, &n->f[i].rows[k].id) !=
			    1)
				break;
		if (k == n->f[i].nrows)
			return;
		usleep(20000);
	}
	fail_msg("chunks of %s never stored", fdefs[i].name);
}

/* Status from the cache while manifests are missing: never complete,
 * however many of the known chunks are stored; a file counts as hydrated
 * once its manifest is local and its chunks stored. */
static void test_status_pending(void **state)
{
	struct hyd_status st;
	struct rig r;
	struct ns n;
	char json[4096];

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	rig_open(&n, &r, 10 * SEC);
	assert_int_equal(hyd_status_from_cache(r.op.cache, &st), 0);
	assert_int_equal(st.manifests_total, 5);
	assert_int_equal(st.manifests_local, 0);
	assert_int_equal(st.chunks_total, n.f[F_B].nrows);
	/* b's chunks: every chunk of the local manifests is stored, but
	 * five manifests are missing. */
	assert_int_equal(read_whole(&n, &r, F_B), 0);
	wait_stored(&n, &r, F_B);
	assert_int_equal(hyd_status_from_cache(r.op.cache, &st), 0);
	assert_int_equal(st.chunks_stored, st.chunks_total);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	/* b, and the empty c (no manifest needed to read it). */
	assert_int_equal(st.files_hydrated, 2);
	assert_int_equal(read_whole(&n, &r, F_A), 0);
	wait_stored(&n, &r, F_A);
	assert_int_equal(hyd_status_from_cache(r.op.cache, &st), 0);
	assert_int_equal(st.manifests_local, 1);
	assert_int_equal(st.chunks_total, n.f[F_B].nrows + n.f[F_A].nrows);
	assert_int_equal(st.chunks_stored, st.chunks_total);
	assert_int_equal(st.files_hydrated, 3);
	assert_int_equal(st.bytes_hydrated, fdefs[F_A].size + fdefs[F_B].size);
	assert_int_equal(st.state, HYD_STATE_STOPPED);
	assert_true(hyd_status_json(&st, json, sizeof(json)) > 0);
	assert_non_null(strstr(json, "\"manifests_total\":5,"
				     "\"manifests_local\":1,"
				     "\"manifests_changed\":0,"));
	rig_close(&r);
	ns_free(&n);
}

/* A cache switched to another URL forgets the old one's catalogs and
 * their manifest overlays (its manifests belong to that catalog). */
static void test_url_switch_drops_overlays(void **state)
{
	struct hyd_catalog_result res;
	char ov[PATH_MAX], err[512], cache[PATH_MAX];
	struct rig r;
	struct ns n, m;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	publish(&m, 0);
	rig_open(&n, &r, 10 * SEC);
	assert_int_equal(read_whole(&n, &r, F_A), 0);
	memcpy(ov, r.op.ovpath, sizeof(ov));
	memcpy(cache, r.op.cache, sizeof(cache));
	rig_close(&r);
	assert_int_equal(access(ov, F_OK), 0);
	assert_int_equal(
	    hyd_catalog_fetch(m.url, cache, NULL, 5, &res, err, sizeof(err)),
	    0);
	assert_int_equal(access(ov, F_OK), -1);
	ns_free(&n);
	ns_free(&m);
}

/* ---- ferry sync ---- */

static int64_t mtime_of(uint64_t ino)
{
	return 1600000000123456789ll + (int64_t)ino * 1000;
}

static int64_t st_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec;
}

/* DEST against the namespace: type, mode, size, mtime, content, the
 * xattr, the directory; chg (when in the tree) must not be there. */
static void check_tree(const struct ns *n, const char *dest)
{
	char p[512], v[8];
	struct stat st;
	uint8_t *got;
	size_t len;

	for (size_t i = 0; i < NFILES; i++) {
		if (!in_tree(n, i))
			continue;
		pathf(p, sizeof(p), "%s/%s%s", dest,
		      fdefs[i].parent == 5 ? "d/" : "", fdefs[i].name);
		if (fdefs[i].kind == P_CHANGED) {
			assert_int_equal(lstat(p, &st), -1);
			continue;
		}
		assert_int_equal(lstat(p, &st), 0);
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal(st.st_mode & 07777, i % 2 ? 0600 : 0644);
		assert_int_equal(st.st_size, fdefs[i].size);
		assert_true(st_mtime_ns(&st) == mtime_of(fdefs[i].ino));
		got = tsup_read_file(p, &len);
		assert_int_equal(len, fdefs[i].size);
		if (len)
			assert_memory_equal(got, n->f[i].data, len);
		free(got);
	}
	pathf(p, sizeof(p), "%s/d/e", dest);
	assert_int_equal(lgetxattr(p, "user.k", v, sizeof(v)), 1);
	assert_int_equal(v[0], 'v');
	pathf(p, sizeof(p), "%s/d", dest);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0750);
	assert_true(st_mtime_ns(&st) == mtime_of(5));
	assert_int_equal(lstat(dest, &st), 0);
	assert_true(st_mtime_ns(&st) == mtime_of(1));
}

static int sync_once(const struct ns *n, const char *dest, const char *cache,
		     struct hyd_sync_result *res)
{
	struct hyd_sync_opts o;

	memset(&o, 0, sizeof(o));
	o.url = n->url;
	o.dest = dest;
	o.cache_dir = cache;
	o.jobs = 4;
	o.timeout_s = 10;
	o.owners = 0;
	return hyd_sync(&o, res);
}

/* A sync of a tree whose manifests come later (segment 0 twice not
 * hashed yet): byte- and metadata-exact, verify agrees, every manifest
 * asked for once (big on its own), and a second run asks and writes
 * nothing. */
static void test_sync_pending(void **state)
{
	struct hyd_sync_result res;
	char dest[128], cache[128], cat[160];
	uint64_t checked = 0, want_bytes = 0;
	struct ns n;

	(void)state;
	NEED_PYTHON();
	publish(&n, 0);
	control(&n, "manifests/1/0", "503", "2");
	pathf(dest, sizeof(dest), "%s/dest%d", gx.root, ++gx.n);
	pathf(cache, sizeof(cache), "%s/cache%d", gx.root, ++gx.n);
	assert_int_equal(sync_once(&n, dest, cache, &res), 0);
	assert_int_equal(res.failed, 0);
	assert_int_equal(res.files, 6);
	assert_int_equal(res.files_written, 6);
	/* The final recount: the distinct chunks of every manifest. */
	distinct_chunks(&n, &want_bytes);
	assert_int_equal(res.unique_bytes, want_bytes);
	check_tree(&n, dest);
	pathf(cat, sizeof(cat), "%s/catalogs/1.db", cache);
	assert_int_equal(hyd_verify_tree(dest, cat, &checked), 0);
	assert_true(checked >= 8);
	assert_int_equal(requests(&n, "manifests/1/0"), 3);
	assert_int_equal(requests(&n, "manifests/1/1"), 1);
	assert_int_equal(requests(&n, "manifest/1/7"), 1);
	assert_int_equal(requests(&n, "manifest/1/2"), 0);
	/* Everything is local now: nothing asked, nothing written. */
	assert_int_equal(sync_once(&n, dest, cache, &res), 0);
	assert_int_equal(res.failed, 0);
	assert_int_equal(res.files_written, 0);
	assert_int_equal(res.chunks_fetched, 0);
	assert_int_equal(requests(&n, "manifests/1/0"), 3);
	assert_int_equal(requests(&n, "manifest/1/7"), 1);
	check_tree(&n, dest);
	ns_free(&n);
}

/* The changed file is the one entry that fails (and is not written);
 * segment 1's answer is missing, so the writer asks for far's manifest
 * itself, and far is still right. */
static void test_sync_changed_and_fallback(void **state)
{
	struct hyd_sync_result res;
	char dest[128], cache[128], p[512];
	struct ns n;

	(void)state;
	NEED_PYTHON();
	publish(&n, 1);
	pathf(p, sizeof(p), "%s/manifests/1/1", n.dir);
	assert_int_equal(unlink(p), 0);
	pathf(dest, sizeof(dest), "%s/dest%d", gx.root, ++gx.n);
	pathf(cache, sizeof(cache), "%s/cache%d", gx.root, ++gx.n);
	assert_int_equal(sync_once(&n, dest, cache, &res), 0);
	assert_int_equal(res.failed, 1);
	assert_int_equal(res.files, 7);
	assert_int_equal(requests(&n, "manifests/1/1"), 1);
	assert_int_equal(requests(&n, "manifest/1/2000"), 1);
	check_tree(&n, dest);
	ns_free(&n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_read_fetches_once),
	    cmocka_unit_test(test_read_503_then_200),
	    cmocka_unit_test(test_read_deadline),
	    cmocka_unit_test(test_read_malformed),
	    cmocka_unit_test(test_read_changed),
	    cmocka_unit_test(test_segment_alone),
	    cmocka_unit_test(test_segment_for),
	    cmocka_unit_test(test_not_found_and_cancel),
	    cmocka_unit_test(test_backfill_pending),
	    cmocka_unit_test(test_backfill_waits_for_hashing),
	    cmocka_unit_test(test_status_pending),
	    cmocka_unit_test(test_url_switch_drops_overlays),
	    cmocka_unit_test(test_sync_pending),
	    cmocka_unit_test(test_sync_changed_and_fallback),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
