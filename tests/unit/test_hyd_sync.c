/*
 * tests/unit/test_hyd_sync.c — `ferry sync` and `ferry verify` as library
 * calls (hyd_sync, hyd_verify_tree, hyd_verify_cache) against the REAL
 * replicator ($FERRY_BIN/ferry-replicator, else ../bin next to this test),
 * started here on a free loopback port over a temp source tree holding odd
 * names (spaces, a newline, non-UTF-8 bytes), nested and empty
 * directories, an empty file, relative, dangling and absolute symlinks,
 * hard links, xattrs on a file and a directory, a fifo, a character device
 * and foreign owners (as root), a 2 MiB random file, two identical files,
 * modes 0600/0755/0700 and nanosecond mtimes on everything.
 *
 * DEST is compared with the source in C: lstat type, mode, size, mtime
 * (ns), uid, gid, nlink, link targets, user.* xattrs, content. Then: a
 * second run writes and fetches nothing; a deleted and a corrupted file
 * (same size and mtime) are exactly the two rewritten; a symlink planted
 * where a directory belongs is replaced without anything appearing at its
 * target; crash leftovers are removed; a locked cache is refused; verify
 * finds a corrupted file and a flipped volume byte, which the next sync
 * heals by fetching that chunk again; the mount check reads a
 * fake mountinfo (a real ferry mount is tests/e2e/080-sync.sh's job); a
 * file whose source changed after the scan (409) is the one entry failed;
 * with the replicator stopped a sync from the complete cache still works;
 * entries of that cached catalog whose names are no single path component
 * ("..", "a/b", empty, a NUL), which the reader skips, are each named on
 * stderr (directory and bytes as \xNN) and counted failed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"
#include "hydrator/sync/hyd_sync_priv.h"
#include "hydrator/hydrator.h"
#include "tsupport.h"

#define NONUTF8 "n\xff\xfe-name"

struct fx {
	char t[64]; /* temp root */
	char src[128], dest[128], cache[128], state[128], outside[128];
	char url[128];
	char repl[PATH_MAX];
	pid_t pid;
	int root;
};

/* ---- building the source ---- */

static void put(const char *path, const void *buf, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static uint8_t *rnd(size_t n, uint64_t seed)
{
	uint8_t *b = malloc(n);
	size_t i;

	assert_non_null(b);
	for (i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (uint8_t)(seed >> 56);
	}
	return b;
}

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

static void set_mtime(const char *path, int64_t sec, long nsec)
{
	struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};

	assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

static void build_src(struct fx *f)
{
	static const char *dirs[] = {"d1",	 "d1/d2",   "d1/d2/d3",
				     "emptydir", "odd dir", "xdir"};
	static const char *leaves[] = {"empty",
				       "big",
				       "same1",
				       "same2",
				       "secret",
				       "exec",
				       "hl1",
				       "d1/hl2",
				       "d1/d2/d3/deep",
				       "odd dir/with space",
				       "odd dir/new\nline",
				       NONUTF8,
				       "rel",
				       "dangling",
				       "abs",
				       "fifo",
				       "xdir/x"};
	char p[256], q[256];
	uint8_t *b;
	size_t i;
	long k = 0;

	assert_int_equal(mkdir(f->src, 0755), 0);
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		pathf(p, sizeof(p), "%s/%s", f->src, dirs[i]);
		assert_int_equal(mkdir(p, 0755), 0);
	}
	pathf(p, sizeof(p), "%s/empty", f->src);
	put(p, "", 0, 0644);
	b = rnd(2u << 20, 1);
	pathf(p, sizeof(p), "%s/big", f->src);
	put(p, b, 2u << 20, 0644);
	free(b);
	b = rnd(300000, 2);
	pathf(p, sizeof(p), "%s/same1", f->src);
	put(p, b, 300000, 0644);
	pathf(p, sizeof(p), "%s/same2", f->src);
	put(p, b, 300000, 0644);
	free(b);
	pathf(p, sizeof(p), "%s/secret", f->src);
	put(p, "secret\n", 7, 0600);
	pathf(p, sizeof(p), "%s/exec", f->src);
	put(p, "#!/bin/sh\n", 10, 0755);
	pathf(p, sizeof(p), "%s/hl1", f->src);
	put(p, "linked\n", 7, 0640);
	pathf(q, sizeof(q), "%s/d1/hl2", f->src);
	assert_int_equal(link(p, q), 0);
	pathf(p, sizeof(p), "%s/d1/d2/d3/deep", f->src);
	put(p, "deep\n", 5, 0644);
	pathf(p, sizeof(p), "%s/odd dir/with space", f->src);
	put(p, "s", 1, 0644);
	pathf(p, sizeof(p), "%s/odd dir/new\nline", f->src);
	put(p, "n", 1, 0644);
	pathf(p, sizeof(p), "%s/" NONUTF8, f->src);
	put(p, "u", 1, 0644);
	pathf(p, sizeof(p), "%s/rel", f->src);
	assert_int_equal(symlink("d1/d2", p), 0);
	pathf(p, sizeof(p), "%s/dangling", f->src);
	assert_int_equal(symlink("no/such/thing", p), 0);
	pathf(p, sizeof(p), "%s/abs", f->src);
	assert_int_equal(symlink("/etc/hostname", p), 0);
	pathf(p, sizeof(p), "%s/fifo", f->src);
	assert_int_equal(mkfifo(p, 0620), 0);
	pathf(p, sizeof(p), "%s/xdir/x", f->src);
	put(p, "x", 1, 0644);
	assert_int_equal(setxattr(p, "user.color", "blue", 4, 0), 0);
	pathf(p, sizeof(p), "%s/xdir", f->src);
	assert_int_equal(setxattr(p, "user.dir", "yes", 3, 0), 0);
	assert_int_equal(chmod(p, 0700), 0);
	if (f->root) {
		pathf(p, sizeof(p), "%s/chr", f->src);
		if (mknod(p, S_IFCHR | 0600, makedev(1, 3)) == 0)
			assert_int_equal(lchown(p, 0, 0), 0);
		pathf(p, sizeof(p), "%s/exec", f->src);
		assert_int_equal(chown(p, 1234, 5678), 0);
		pathf(p, sizeof(p), "%s/rel", f->src);
		assert_int_equal(lchown(p, 4321, 8765), 0);
	}
	/* Nanosecond mtimes everywhere; directories last, deepest first. */
	for (i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++) {
		pathf(p, sizeof(p), "%s/%s", f->src, leaves[i]);
		set_mtime(p, 1500000000 + (int64_t)i * 1000, 123456789 + k++);
	}
	pathf(p, sizeof(p), "%s/chr", f->src);
	if (f->root && access(p, F_OK) == 0)
		set_mtime(p, 1400000000, 5);
	for (i = sizeof(dirs) / sizeof(dirs[0]); i-- > 0;) {
		pathf(p, sizeof(p), "%s/%s", f->src, dirs[i]);
		set_mtime(p, 1600000000 + (int64_t)i, 987654321 - (long)i);
	}
	set_mtime(f->src, 1700000000, 42);
}

/* ---- the replicator ---- */

static size_t sink(void *p, size_t sz, size_t n, void *u)
{
	(void)p;
	(void)u;
	return sz * n;
}

/* 1 when GET url answers 200. */
static int http_ok(const char *url)
{
	CURL *c = curl_easy_init();
	long code = 0;

	if (!c)
		return 0;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 2L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	return code == 200;
}

static void repl_start(struct fx *f)
{
	char listen[64], ns[192], log[160], head[192];
	int port = tsup_free_port(), i, fd;

	pathf(listen, sizeof(listen), "127.0.0.1:%d", port);
	pathf(ns, sizeof(ns), "ns=%s", f->src);
	pathf(log, sizeof(log), "%s/repl.log", f->t);
	pathf(f->url, sizeof(f->url), "http://127.0.0.1:%d/v1/ns", port);
	f->pid = fork();
	assert_true(f->pid >= 0);
	if (f->pid == 0) {
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(f->repl, f->repl, "-l", listen, "-s", f->state, ns,
		      (char *)NULL);
		_exit(127);
	}
	pathf(head, sizeof(head), "%s/HEAD", f->url);
	for (i = 0; i < 300; i++) {
		if (http_ok(head))
			return;
		usleep(100000);
	}
	fail_msg("replicator not ready; see %s", log);
}

/* SIGTERM: the replicator must exit 0, and its log hold no sanitizer
 * report. 0 or -1 (said on stderr). */
static int repl_stop(struct fx *f)
{
	char log[160];
	int r = 0;

	if (f->pid > 0)
		r = tsup_stop_child(f->pid, "ferry-replicator");
	f->pid = 0;
	pathf(log, sizeof(log), "%s/repl.log", f->t);
	if (tsup_log_clean(log) < 0)
		r = -1;
	return r;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	const char *bin = getenv("FERRY_BIN");
	char self[PATH_MAX];
	ssize_t n;

	assert_non_null(f);
	f->root = geteuid() == 0;
	if (bin) {
		pathf(f->repl, sizeof(f->repl), "%s/ferry-replicator", bin);
	} else {
		/* BUILD/tests/test_hyd_sync -> BUILD/bin/ferry-replicator */
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		assert_true(n > 0);
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		pathf(f->repl, sizeof(f->repl), "%s/../bin/ferry-replicator",
		      self);
	}
	if (access(f->repl, X_OK) != 0) {
		/* tests/run.sh counts exit 77 as a skip, with this reason. */
		printf("SKIP: no replicator at %s (build it first)\n", f->repl);
		free(f);
		exit(77);
	}
	memcpy(f->t, "/tmp/test_hyd_sync.XXXXXX", 26);
	assert_non_null(mkdtemp(f->t));
	pathf(f->src, sizeof(f->src), "%s/src", f->t);
	pathf(f->dest, sizeof(f->dest), "%s/dest", f->t);
	pathf(f->cache, sizeof(f->cache), "%s/cache", f->t);
	pathf(f->state, sizeof(f->state), "%s/state", f->t);
	pathf(f->outside, sizeof(f->outside), "%s/outside", f->t);
	assert_int_equal(mkdir(f->outside, 0755), 0);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	build_src(f);
	repl_start(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc;

	if (!f)
		return 0;
	/* cmocka prints a failed group teardown but still exits 0: tests/
	 * run.sh fails the test on its "[  FAILED  ]" line. */
	rc = repl_stop(f);
	if (!getenv("KEEP_TMP"))
		tsup_rm_rf(f->t);
	curl_global_cleanup();
	free(f);
	return rc;
}

/* ---- comparing two trees ---- */

static void cmp_xattrs(const char *a, const char *b)
{
	char la[4096], lb[4096], va[1024], vb[1024], *p;
	ssize_t na, nb, xa, xb;

	na = llistxattr(a, la, sizeof(la));
	nb = llistxattr(b, lb, sizeof(lb));
	assert_true(na >= 0 && nb >= 0);
	for (p = la; p < la + na; p += strlen(p) + 1) {
		if (strncmp(p, "user.", 5))
			continue;
		xa = lgetxattr(a, p, va, sizeof(va));
		xb = lgetxattr(b, p, vb, sizeof(vb));
		if (xa != xb || xa < 0 || memcmp(va, vb, (size_t)xa))
			fail_msg("xattr %s differs on %s", p, b);
	}
}

static void cmp_content(const char *a, const char *b, off_t size)
{
	int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
	uint8_t *ba = malloc((size_t)size + 1), *bb = malloc((size_t)size + 1);

	assert_true(fa >= 0 && fb >= 0 && ba && bb);
	assert_int_equal(read(fa, ba, (size_t)size + 1), size);
	assert_int_equal(read(fb, bb, (size_t)size + 1), size);
	if (memcmp(ba, bb, (size_t)size))
		fail_msg("content differs: %s", b);
	close(fa);
	close(fb);
	free(ba);
	free(bb);
}

/* Every entry of a (the source) is in b with equal metadata and content;
 * returns the number of entries compared. */
static unsigned cmp_tree(const char *a, const char *b)
{
	struct stat sa, sb;
	struct dirent *de;
	char pa[1024], pb[1024], ta[512], tb[512];
	unsigned n = 1;
	ssize_t la, lb;
	DIR *d;

	assert_int_equal(lstat(a, &sa), 0);
	if (lstat(b, &sb) != 0)
		fail_msg("missing in DEST: %s", b);
	if (sa.st_mode != sb.st_mode)
		fail_msg("mode %o != %o: %s", sa.st_mode, sb.st_mode, b);
	if (sa.st_uid != sb.st_uid || sa.st_gid != sb.st_gid)
		fail_msg("owner %u:%u != %u:%u: %s", sa.st_uid, sa.st_gid,
			 sb.st_uid, sb.st_gid, b);
	if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec ||
	    sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec)
		fail_msg("mtime differs: %s", b);
	if (sa.st_nlink != sb.st_nlink)
		fail_msg("nlink %lu != %lu: %s", (unsigned long)sa.st_nlink,
			 (unsigned long)sb.st_nlink, b);
	if (S_ISCHR(sa.st_mode) && sa.st_rdev != sb.st_rdev)
		fail_msg("rdev differs: %s", b);
	if (!S_ISDIR(sa.st_mode) && sa.st_size != sb.st_size)
		fail_msg("size differs: %s", b);
	if (S_ISLNK(sa.st_mode)) {
		la = readlink(a, ta, sizeof(ta));
		lb = readlink(b, tb, sizeof(tb));
		if (la != lb || la < 0 || memcmp(ta, tb, (size_t)la))
			fail_msg("link target differs: %s", b);
		return n;
	}
	cmp_xattrs(a, b);
	if (S_ISREG(sa.st_mode))
		cmp_content(a, b, sa.st_size);
	if (!S_ISDIR(sa.st_mode))
		return n;
	d = opendir(a);
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		pathf(pa, sizeof(pa), "%s/%s", a, de->d_name);
		pathf(pb, sizeof(pb), "%s/%s", b, de->d_name);
		n += cmp_tree(pa, pb);
	}
	closedir(d);
	return n;
}

/* ---- helpers around hyd_sync ---- */

static int run_sync_in(struct fx *f, const char *cache, const char *dest,
		       struct hyd_sync_result *r)
{
	struct hyd_sync_opts o;

	memset(&o, 0, sizeof(o));
	o.url = f->url;
	o.dest = dest;
	o.cache_dir = cache;
	o.jobs = 4;
	o.timeout_s = 10;
	o.owners = -1;
	return hyd_sync(&o, r);
}

static int run_sync(struct fx *f, const char *dest, struct hyd_sync_result *r)
{
	return run_sync_in(f, f->cache, dest, r);
}

/* A sync of its own (DEST and cache named after name, dest[256] set)
 * with the environment variable env set to val; no entry may fail. */
static void sync_with(struct fx *f, const char *name, const char *env,
		      const char *val, char *dest, struct hyd_sync_result *r)
{
	char cache[256];

	pathf(dest, 256, "%s/dest-%s", f->t, name);
	pathf(cache, sizeof(cache), "%s/cache-%s", f->t, name);
	setenv(env, val, 1);
	assert_int_equal(run_sync_in(f, cache, dest, r), 0);
	unsetenv(env);
	assert_int_equal(r->failed, 0);
}

static uint64_t verify_tree(struct fx *f, const char *dest)
{
	char cat[256];
	uint64_t checked = 0;
	int r;

	pathf(cat, sizeof(cat), "%s/catalogs/1.db", f->cache);
	r = hyd_verify_tree(dest, cat, &checked);
	assert_true(r >= 0);
	assert_true(checked > 20);
	return (uint64_t)r;
}

/* ---- tests ---- */

static void test_first_sync(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	uint64_t checked = 0;
	struct statfs sf;
	size_t pages, in;
	char p[300];

	assert_int_equal(run_sync(f, f->dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_true(r.files_written >= 12);
	assert_true(r.chunks_fetched > 0);
	/* Written from the fetching pass's hand-off, not read back from
	 * the store (the writer follows the fetcher). A chunk two files
	 * share can be handed twice, so this is not bounded by the fetched
	 * count. */
	assert_true(r.chunks_handed > 0);
	assert_true(r.wire_bytes > 0);
	/* same1/same2 share chunks: dedup shows in the counters. */
	assert_true(r.unique_bytes < r.logical_bytes);
	/* The writer dropped behind itself: big is on disk and out of the
	 * page cache (before anything here reads it back). A tmpfs keeps
	 * its pages whatever one asks. */
	pathf(p, sizeof(p), "%s/big", f->dest);
	in = tsup_resident(p, &pages);
	assert_int_equal(pages, (2u << 20) / 4096);
	if (statfs(p, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		fprintf(stderr, "DEST is a tmpfs: drop-behind not checked\n");
	else
		assert_true(in * 10 <= pages);
	assert_true(cmp_tree(f->src, f->dest) > 20);
	assert_int_equal(verify_tree(f, f->dest), 0);
	assert_int_equal(hyd_verify_cache(f->cache, &checked), 0);
	assert_int_equal(checked, r.chunks_fetched);
}

/* FERRY_DROP_BEHIND=0 keeps what the writer wrote in the page cache
 * (what a plain write does): test_first_sync's check of the opposite can
 * tell the two apart. At least half, not all: this VM's own reclaim
 * (DAMON pageout, see e2e 140) may take some pages within moments. */
static void test_drop_behind(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char dest[256], p[300];
	size_t pages, in;

	sync_with(f, "keep", "FERRY_DROP_BEHIND", "0", dest, &r);
	pathf(p, sizeof(p), "%s/big", dest);
	in = tsup_resident(p, &pages);
	assert_true(in * 2 >= pages);
	assert_true(cmp_tree(f->src, dest) > 20);
}

/* A hand-off of one byte holds one chunk at a time. When a put may not
 * wait for the writer, a put drops the one before whenever the writer
 * has not taken it yet, so the writer reads chunks back from the store
 * (1-9 of 40 taken from memory seen here). The tree is the same either
 * way, and nothing leaks (ASan). */
static void test_handoff_drops(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char dest[256];

	setenv("FERRY_TEST_HANDOFF_WAIT_MS", "0", 1);
	sync_with(f, "small-handoff", "FERRY_TEST_HANDOFF_BYTES", "1", dest,
		  &r);
	unsetenv("FERRY_TEST_HANDOFF_WAIT_MS");
	assert_true(r.chunks_fetched > 0);
	assert_true(r.chunks_handed < r.chunks_fetched);
	assert_true(r.chunks_dropped > 0);
	assert_true(cmp_tree(f->src, dest) > 20);
	assert_int_equal(verify_tree(f, dest), 0);
}

/* A hand-off of 256 KiB, smaller than the tree, with puts waiting for the
 * writer: the fetching pass goes no further ahead than the writer takes,
 * so no chunk is pushed out of the hand-off before the writer took it (0
 * dropped in every run seen, loaded machine and ASan included). Without
 * the wait, 2-27 of 40 were dropped (12 runs of 12). The wait is 1 s
 * here so that a loaded machine never runs one out. How many chunks the
 * writer takes from memory is not asserted: a chunk the store makes
 * visible before its flight is handed over is read from the store (a
 * race; 38-44 of 40 taken from memory on an idle machine, 19-44 under
 * load). */
static void test_handoff_waits(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char dest[256];

	setenv("FERRY_TEST_HANDOFF_WAIT_MS", "1000", 1);
	sync_with(f, "waiting-handoff", "FERRY_TEST_HANDOFF_BYTES", "262144",
		  dest, &r);
	unsetenv("FERRY_TEST_HANDOFF_WAIT_MS");
	print_message("handed %" PRIu64 " of %" PRIu64
		      " chunks fetched, %" PRIu64 " dropped\n",
		      r.chunks_handed, r.chunks_fetched, r.chunks_dropped);
	assert_true(r.chunks_fetched > 0);
	assert_int_equal(r.chunks_dropped, 0);
	assert_true(r.chunks_handed > 0);
	assert_true(cmp_tree(f->src, dest) > 20);
	assert_int_equal(verify_tree(f, dest), 0);
}

static void test_second_sync_is_noop(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	struct stat before, after;
	char p[256];

	pathf(p, sizeof(p), "%s/big", f->dest);
	assert_int_equal(lstat(p, &before), 0);
	assert_int_equal(run_sync(f, f->dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(r.files_written, 0);
	assert_int_equal(r.chunks_fetched, 0);
	assert_int_equal(r.chunks_handed, 0);
	assert_int_equal(r.wire_bytes, 0);
	assert_int_equal(lstat(p, &after), 0);
	assert_int_equal(before.st_ino, after.st_ino); /* not replaced */
	cmp_tree(f->src, f->dest);
}

static void test_repair_two_files(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	struct stat st;
	struct timespec ts[2];
	char p[256];
	int fd;

	pathf(p, sizeof(p), "%s/d1/d2/d3/deep", f->dest);
	assert_int_equal(unlink(p), 0);
	/* Same size, same mtime: only the hash can tell. */
	pathf(p, sizeof(p), "%s/big", f->dest);
	assert_int_equal(lstat(p, &st), 0);
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\x00\x01\x02", 3, 1000000), 3);
	close(fd);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
	/* An xattr changed on a file, one removed from a directory. */
	pathf(p, sizeof(p), "%s/xdir/x", f->dest);
	assert_int_equal(setxattr(p, "user.color", "red", 3, 0), 0);
	pathf(p, sizeof(p), "%s/xdir", f->dest);
	assert_int_equal(removexattr(p, "user.dir"), 0);
	/* deep missing, its directory's mtime (the unlink), big's content,
	 * the two xattrs */
	assert_int_equal(verify_tree(f, f->dest), 5);

	assert_int_equal(run_sync(f, f->dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(r.files_written, 2);
	assert_int_equal(r.chunks_fetched, 0); /* all in the store */
	cmp_tree(f->src, f->dest);	       /* the xattrs are back too */
	assert_int_equal(verify_tree(f, f->dest), 0);
}

static void test_planted_symlink(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	struct stat st;
	char p[256], cmd[512];
	DIR *d;
	struct dirent *de;
	int n = 0;

	/* DEST/d1 becomes a symlink to a directory outside DEST. */
	pathf(cmd, sizeof(cmd), "rm -rf '%s/d1'", f->dest);
	assert_int_equal(system(cmd), 0);
	pathf(p, sizeof(p), "%s/d1", f->dest);
	assert_int_equal(symlink(f->outside, p), 0);
	assert_int_equal(run_sync(f, f->dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	d = opendir(f->outside);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	assert_int_equal(n, 0); /* nothing written through the symlink */
	cmp_tree(f->src, f->dest);
}

static void test_stale_temp_removed(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char p[256], keep[256];

	pathf(p, sizeof(p), "%s/odd dir/.ferry-tmp.with space.Ab3dE9", f->dest);
	put(p, "junk", 4, 0600);
	pathf(keep, sizeof(keep), "%s/mine.txt", f->dest); /* not ours */
	put(keep, "keep", 4, 0644);
	assert_int_equal(run_sync(f, f->dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(r.files_written, 0);
	assert_int_equal(access(p, F_OK), -1);
	assert_int_equal(access(keep, F_OK), 0); /* like rsync, no --delete */
	assert_int_equal(unlink(keep), 0);
}

static void test_cache_locked(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	hyd_store *s = NULL;

	/* A mount holds the cache: a sync must refuse, not share it. */
	assert_int_equal(hyd_store_open(f->cache, CHUNK_MAX_LIMIT, &s), 0);
	assert_int_equal(run_sync(f, f->dest, &r), -EBUSY);
	hyd_store_close(s);
}

static void test_bad_url(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_opts o;
	struct hyd_sync_result r;
	char cache[256], dest[256];
	int port = tsup_free_port();
	char url[128];

	memset(&o, 0, sizeof(o));
	pathf(cache, sizeof(cache), "%s/cache-bad", f->t);
	pathf(dest, sizeof(dest), "%s/dest-bad", f->t);
	o.url = "ftp://127.0.0.1/v1/ns";
	o.dest = dest;
	o.cache_dir = cache;
	assert_int_equal(hyd_sync(&o, &r), -EINVAL);
	/* Nobody listens and there is no cached catalog. */
	pathf(url, sizeof(url), "http://127.0.0.1:%d/v1/ns", port);
	o.url = url;
	assert_true(hyd_sync(&o, &r) < 0);
	assert_int_equal(access(dest, F_OK), -1); /* nothing written */
}

static void test_mount_detection(void **state)
{
	static const char mi[] =
	    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	    "40 22 0:52 / /mnt/m rw,nosuid,nodev shared:20 - fuse.ferry "
	    "ferry ro,user_id=0,group_id=0\n"
	    "41 22 0:53 / /mnt/s rw - fuse.sshfs host: rw\n";
	struct fx *f = *state;

	assert_int_equal(hyd_sync__mountinfo_is_ferry(mi, makedev(0, 52)), 1);
	assert_int_equal(hyd_sync__mountinfo_is_ferry(mi, makedev(0, 53)), 0);
	assert_int_equal(hyd_sync__mountinfo_is_ferry(mi, makedev(8, 1)), 0);
	assert_int_equal(hyd_sync__mountinfo_is_ferry("", makedev(0, 52)), 0);
	/* A plain directory, and one that does not exist yet, are fine. */
	assert_int_equal(hyd_sync__dest_check(f->dest), 0);
	assert_int_equal(hyd_sync__dest_check("/tmp/no/such/dir/x"), 0);
}

static void test_verify_cache_flip(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char p[256], dest[256];
	uint64_t checked = 0, before;
	uint8_t b;
	int fd;

	assert_int_equal(hyd_verify_cache(f->cache, &before), 0);
	pathf(p, sizeof(p), "%s/volumes/00000001.vol", f->cache);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	/* Inside the first frame's payload (the header is 16 bytes). */
	assert_int_equal(pread(fd, &b, 1, 100), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, 100), 1);
	close(fd);
	assert_int_equal(hyd_verify_cache(f->cache, &checked), 1);
	assert_int_equal(checked, before);
	/* A sync reading that chunk finds it corrupt (the store drops it)
	 * and fetches it again: the new tree is whole, the store too. */
	pathf(dest, sizeof(dest), "%s/dest-heal", f->t);
	assert_int_equal(run_sync(f, dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(r.chunks_fetched, 1);
	cmp_tree(f->src, dest);
	assert_int_equal(hyd_verify_cache(f->cache, &checked), 0);
	assert_int_equal(checked, before);
}

static void test_failed_file_named(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_opts o;
	struct hyd_sync_result r;
	char p[256], cache[256], dest[256];
	struct stat st;
	struct timespec ts[2];
	int fd;

	/* The source changes after the scan: the replicator answers 409 for
	 * that chunk, the file is named and counted, the rest is written. */
	pathf(p, sizeof(p), "%s/secret", f->src);
	assert_int_equal(lstat(p, &st), 0);
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "S", 1, 0), 1);
	pathf(cache, sizeof(cache), "%s/cache-fail", f->t);
	pathf(dest, sizeof(dest), "%s/dest-fail", f->t);
	memset(&o, 0, sizeof(o));
	o.url = f->url;
	o.dest = dest;
	o.cache_dir = cache;
	o.timeout_s = 5;
	assert_int_equal(hyd_sync(&o, &r), 0);
	assert_int_equal(r.failed, 1);
	pathf(p, sizeof(p), "%s/secret", dest);
	assert_int_equal(access(p, F_OK), -1);
	pathf(p, sizeof(p), "%s/big", dest);
	assert_int_equal(access(p, F_OK), 0);
	/* Put the source back as it was. */
	assert_int_equal(pwrite(fd, "s", 1, 0), 1);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	assert_int_equal(futimens(fd, ts), 0);
	close(fd);
}

static void test_offline_from_cache(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char dest[256];

	/* Last: the server goes away; the complete cache still syncs. */
	assert_int_equal(repl_stop(f), 0);
	pathf(dest, sizeof(dest), "%s/dest-offline", f->t);
	assert_int_equal(run_sync(f, dest, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(r.chunks_fetched, 0);
	assert_true(r.files_written >= 12);
	cmp_tree(f->src, dest);
}

/* Run a sync with stderr into path (the writer's lines), restored after. */
static int sync_logged(struct fx *f, const char *dest, const char *path,
		       struct hyd_sync_result *r)
{
	int fd, saved, rc;

	fflush(stderr);
	saved = dup(2);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(saved >= 0 && fd >= 0);
	assert_int_equal(dup2(fd, 2), 2);
	close(fd);
	rc = run_sync(f, dest, r);
	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	return rc;
}

static void test_unsafe_names_named(void **state)
{
	struct fx *f = *state;
	struct hyd_sync_result r;
	char cat[256], dest[256], log[256], line[512], want[512];
	static const char *const names[] = {"..", "a/b", "", "x\\x00\\xffy"};
	sqlite3 *db;
	FILE *fp;
	size_t i, found[4] = {0};

	/* Still offline: the cached catalog gets entries the reader never
	 * hands out, next to real ones (at the root and in d1). */
	pathf(cat, sizeof(cat), "%s/catalogs/1.db", f->cache);
	assert_int_equal(sqlite3_open(cat, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(
		db,
		"INSERT INTO dirent(parent, pos, name, ino) SELECT 1, "
		"1000000, X'2E2E', ino FROM dirent WHERE parent = 1 AND "
		"name = CAST('secret' AS BLOB);"
		"INSERT INTO dirent(parent, pos, name, ino) SELECT d.ino, "
		"1000000 + k.n, k.name, h.ino FROM dirent d, dirent h, "
		"(SELECT 1 AS n, X'612F62' AS name UNION ALL SELECT 2, X'' "
		"UNION ALL SELECT 3, X'7800FF79') k WHERE d.parent = 1 AND "
		"d.name = CAST('d1' AS BLOB) AND h.parent = d.ino AND "
		"h.name = CAST('hl2' AS BLOB);",
		NULL, NULL, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_changes(db), 3);
	sqlite3_close(db);
	pathf(dest, sizeof(dest), "%s/dest-unsafe", f->t);
	pathf(log, sizeof(log), "%s/unsafe.log", f->t);
	assert_int_equal(sync_logged(f, dest, log, &r), 0);
	assert_int_equal(r.failed, 4);
	assert_int_equal(r.vanished, 0);
	cmp_tree(f->src, dest);
	fp = fopen(log, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp))
		for (i = 0; i < 4; i++) {
			pathf(want, sizeof(want),
			      "error: a name in the catalog is not a single "
			      "path component: not written path=\"%s%s\" "
			      "name=\"%s\"\n",
			      dest, i ? "/d1" : "", names[i]);
			if (strstr(line, want))
				found[i]++;
		}
	fclose(fp);
	for (i = 0; i < 4; i++)
		if (found[i] != 1)
			fail_msg("name %s named %zu times, see %s", names[i],
				 found[i], log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mount_detection),
	    cmocka_unit_test(test_first_sync),
	    cmocka_unit_test(test_drop_behind),
	    cmocka_unit_test(test_handoff_drops),
	    cmocka_unit_test(test_handoff_waits),
	    cmocka_unit_test(test_second_sync_is_noop),
	    cmocka_unit_test(test_repair_two_files),
	    cmocka_unit_test(test_planted_symlink),
	    cmocka_unit_test(test_stale_temp_removed),
	    cmocka_unit_test(test_cache_locked),
	    cmocka_unit_test(test_bad_url),
	    cmocka_unit_test(test_verify_cache_flip),
	    cmocka_unit_test(test_failed_file_named),
	    cmocka_unit_test(test_offline_from_cache),
	    cmocka_unit_test(test_unsafe_names_named),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
