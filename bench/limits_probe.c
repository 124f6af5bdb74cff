/*
 * bench/limits_probe.c — the probes of bench/limits.sh: what this machine
 * can do at best on two of the hot paths bench/micro.sh measures ferry on,
 * with nothing of ferry in the way. Built by limits.sh (cc -O3
 * -march=native, libcrypto, libfuse3); not part of ferry.
 *
 *   limits_probe pipe THREADS MIB PASSES
 *       Cut MIB MiB of random bytes in RAM into content-defined chunks
 *       (a gear rolling hash, one byte a step, with FastCDC's two masks:
 *       min 16 KiB, average 64 KiB, max 256 KiB, the first 16 KiB of a
 *       chunk skipped: ferry's parameters, not its code) and
 *       SHA-256 each chunk (OpenSSL EVP), PASSES times, in each of THREADS
 *       threads (a buffer each). Prints "mbps=R chunks=N avg_kib=A
 *       seconds=S" (MB = 10^6 bytes, all threads together).
 *   limits_probe fuse MOUNTPOINT NDIRS NFILES
 *       Mount a read-only FUSE file system (libfuse low level, one thread)
 *       that answers from nothing but arithmetic: NDIRS directories
 *       d0000.. of NFILES empty files f0000.. each, the shape of
 *       micro_gen.py tree. Runs in the foreground until unmounted.
 */
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fuse_lowlevel.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* --- pipe ---------------------------------------------------------------- */

#define MIN_SIZE (16u << 10)
#define AVG_SIZE (64u << 10)
#define MAX_SIZE (256u << 10)
/* FastCDC's normalized chunking, level 2: before the average size a cut
 * needs the top log2(avg) + 2 = 18 bits of the hash zero, after it the top
 * 14 (the top bits: they have seen the most bytes). */
#define BELOW_S (UINT64_C(1) << (64 - 18))
#define BELOW_L (UINT64_C(1) << (64 - 14))

static uint64_t gear[256];

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static size_t cut(const uint8_t *p, size_t n)
{
	uint64_t h = 0;
	size_t i = MIN_SIZE, normal = AVG_SIZE;
	if (n <= MIN_SIZE)
		return n;
	if (n > MAX_SIZE)
		n = MAX_SIZE;
	if (normal > n)
		normal = n;
	for (; i < normal; i++) {
		h = (h << 1) + gear[p[i]];
		if (h < BELOW_S)
			return i + 1;
	}
	for (; i < n; i++) {
		h = (h << 1) + gear[p[i]];
		if (h < BELOW_L)
			return i + 1;
	}
	return n;
}

struct worker {
	pthread_t tid;
	uint8_t *buf;
	size_t len;
	int passes;
	uint64_t chunks;
	unsigned char sink[32];
};

static void *pipe_worker(void *arg)
{
	struct worker *w = arg;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	const EVP_MD *md = EVP_sha256();
	unsigned char out[32];
	unsigned int olen;
	for (int k = 0; k < w->passes; k++) {
		size_t off = 0;
		while (off < w->len) {
			size_t c = cut(w->buf + off, w->len - off);
			EVP_DigestInit_ex(ctx, md, NULL);
			EVP_DigestUpdate(ctx, w->buf + off, c);
			EVP_DigestFinal_ex(ctx, out, &olen);
			w->sink[0] ^= out[0];
			w->chunks++;
			off += c;
		}
	}
	EVP_MD_CTX_free(ctx);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int run_pipe(int threads, size_t mib, int passes)
{
	uint64_t seed = 42;
	struct worker *ws = calloc(threads, sizeof(*ws));
	uint64_t chunks = 0;
	double t0, t1;
	if (!ws)
		return 1;
	for (int i = 0; i < 256; i++)
		gear[i] = splitmix(&seed);
	for (int t = 0; t < threads; t++) {
		ws[t].len = mib << 20;
		ws[t].passes = passes;
		ws[t].buf = malloc(ws[t].len);
		if (!ws[t].buf)
			return 1;
		for (size_t i = 0; i < ws[t].len; i += 8) {
			uint64_t v = splitmix(&seed);
			memcpy(ws[t].buf + i, &v, 8);
		}
	}
	t0 = now_s();
	for (int t = 0; t < threads; t++)
		pthread_create(&ws[t].tid, NULL, pipe_worker, &ws[t]);
	for (int t = 0; t < threads; t++) {
		pthread_join(ws[t].tid, NULL);
		chunks += ws[t].chunks;
	}
	t1 = now_s();
	double bytes = (double)threads * passes * (double)(mib << 20);
	printf("mbps=%.0f chunks=%llu avg_kib=%.1f seconds=%.3f\n", bytes / 1e6 / (t1 - t0),
	       (unsigned long long)chunks, bytes / 1024.0 / chunks, t1 - t0);
	return 0;
}

/* --- fuse ---------------------------------------------------------------- */

static unsigned ndirs, nfiles;

/* inode 1 is the root; directory d is 2 + d * (nfiles + 1); its file f
 * follows it. */
static fuse_ino_t dir_ino(unsigned d) { return 2 + (fuse_ino_t)d * (nfiles + 1); }

static int decode(fuse_ino_t ino, unsigned *d, unsigned *f)
{
	if (ino < 2)
		return -1;
	*d = (unsigned)((ino - 2) / (nfiles + 1));
	unsigned r = (unsigned)((ino - 2) % (nfiles + 1));
	if (*d >= ndirs)
		return -1;
	*f = r; /* 0: the directory itself, else file r - 1 */
	return 0;
}

static void fill(fuse_ino_t ino, struct stat *st)
{
	unsigned d, f;
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mtime = 1700000000;
	if (ino == 1 || (decode(ino, &d, &f) == 0 && f == 0)) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0644;
		st->st_nlink = 1;
	}
}

static int number(const char *name, char prefix, unsigned limit, unsigned *out)
{
	char *end;
	if (name[0] != prefix || strlen(name) != 5)
		return -1;
	unsigned long v = strtoul(name + 1, &end, 10);
	if (*end || v >= limit)
		return -1;
	*out = (unsigned)v;
	return 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	unsigned d, f, n;
	memset(&e, 0, sizeof(e));
	e.attr_timeout = e.entry_timeout = 1.0;
	if (parent == 1 && number(name, 'd', ndirs, &n) == 0)
		e.ino = dir_ino(n);
	else if (decode(parent, &d, &f) == 0 && f == 0 && number(name, 'f', nfiles, &n) == 0)
		e.ino = dir_ino(d) + 1 + n;
	else {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	(void)fi;
	fill(ino, &st);
	fuse_reply_attr(req, &st, 1.0);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	unsigned d, f, count;
	char *buf = malloc(size), name[16];
	size_t used = 0;
	struct stat st;
	(void)fi;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (ino == 1)
		count = ndirs;
	else if (decode(ino, &d, &f) == 0 && f == 0)
		count = nfiles;
	else {
		free(buf);
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	/* offsets: 0 ".", 1 "..", 2 + k entry k */
	for (off_t k = off; k < (off_t)count + 2; k++) {
		fuse_ino_t child;
		if (k < 2) {
			snprintf(name, sizeof(name), "%s", k == 0 ? "." : "..");
			child = ino;
		} else if (ino == 1) {
			snprintf(name, sizeof(name), "d%04u", (unsigned)(k - 2));
			child = dir_ino((unsigned)(k - 2));
		} else {
			snprintf(name, sizeof(name), "f%04u", (unsigned)(k - 2));
			child = ino + 1 + (fuse_ino_t)(k - 2);
		}
		fill(child, &st);
		size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, k + 1);
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup,
    .getattr = op_getattr,
    .readdir = op_readdir,
};

static int run_fuse(char *argv0, const char *mnt)
{
	char *args_v[] = {argv0, "-o", "ro,fsname=limits_probe"};
	struct fuse_args args = FUSE_ARGS_INIT(3, args_v);
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	int rc;
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mnt) != 0) {
		fuse_session_destroy(se);
		return 1;
	}
	rc = fuse_session_loop(se);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "pipe") == 0)
		return run_pipe(atoi(argv[2]), (size_t)atoi(argv[3]), atoi(argv[4]));
	if (argc == 5 && strcmp(argv[1], "fuse") == 0) {
		ndirs = (unsigned)atoi(argv[3]);
		nfiles = (unsigned)atoi(argv[4]);
		return run_fuse(argv[0], argv[2]);
	}
	fprintf(stderr, "usage: limits_probe pipe THREADS MIB PASSES | fuse MOUNTPOINT NDIRS NFILES\n");
	return 2;
}
