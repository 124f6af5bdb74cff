/*
 * tests/unit/test_hyd_read.c — the read path (hyd_read.c) and its
 * decoded-chunk cache (hyd_read_cache.c).
 *
 * The cache is driven with a counting loader, to check that a chunk is
 * loaded once however many readers want it at once, that pinned slots are
 * never reused, that decode-ahead never throws away its own unread work,
 * and that a failed or wrong-length load is never cached. The read path
 * runs on a real store and catalog in a temp dir (every chunk stored, with
 * raw, zstd and lz4 frames of many sizes) and is compared byte for byte
 * with the source, with and without the cache, from several threads; a
 * corrupt stored frame must give -EIO, never its bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/read/hyd_stream_priv.h"
#include "tsupport.h"

#define FILE_INO 2u
#define N_CHUNKS 96u
#define MAX_RAW (256u * 1024u)

/* ---- the cache, with a loader that counts ---- */

struct fake {
	unsigned calls; /* __atomic */
	int fail;	/* returned instead of loading when set */
	size_t len;	/* length to report; 0: cap */
	unsigned delay_us;
};

/* Bytes of the fake chunk id: byte i is id[0] + i. */
static void fake_fill(const chunk_id *id, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(id->b[0] + i);
}

static int fake_load(void *arg, const chunk_id *id, uint8_t *buf, size_t cap,
		     size_t *ret_len)
{
	struct fake *f = arg;

	__atomic_add_fetch(&f->calls, 1, __ATOMIC_RELAXED);
	if (f->delay_us)
		usleep(f->delay_us);
	if (f->fail)
		return f->fail;
	*ret_len = f->len ? f->len : cap;
	fake_fill(id, buf, cap);
	return 0;
}

static chunk_id fid(uint8_t v)
{
	chunk_id id;

	memset(&id, v, sizeof(id));
	return id;
}

/* Pin id (raw_len len), check its bytes, unpin; returns pin's result. */
static int pin_check(hyd_read_cache *c, uint8_t v, uint32_t len, struct fake *f)
{
	chunk_id id = fid(v);
	uint8_t *want = malloc(len);
	const uint8_t *raw = NULL;
	void *pin = NULL;
	int r;

	assert_non_null(want);
	r = hyd_read_cache_pin(c, &id, len, fake_load, f, &raw, &pin);
	if (r == 0) {
		fake_fill(&id, want, len);
		assert_memory_equal(raw, want, len);
		hyd_read_cache_unpin(c, pin);
	}
	free(want);
	return r;
}

static void test_cache_hit(void **state)
{
	struct fake f = {0};
	hyd_read_cache *c;

	(void)state;
	assert_int_equal(hyd_read_cache_new(4, &c), 0);
	assert_int_equal(pin_check(c, 1, 5000, &f), 0);
	assert_int_equal(f.calls, 1);
	assert_int_equal(pin_check(c, 1, 5000, &f), 0);
	assert_int_equal(f.calls, 1);
	/* The same id with another manifest length is that row's error. */
	assert_int_equal(pin_check(c, 1, 4000, &f), -ERANGE);
	assert_int_equal(f.calls, 1);
	hyd_read_cache_free(c);
}

static void test_cache_failures_not_kept(void **state)
{
	struct fake f = {0};
	hyd_read_cache *c;

	(void)state;
	assert_int_equal(hyd_read_cache_new(4, &c), 0);
	f.fail = -EBADMSG;
	assert_int_equal(pin_check(c, 2, 3000, &f), -EBADMSG);
	f.fail = 0;
	f.len = 2999; /* the loader found another length */
	assert_int_equal(pin_check(c, 2, 3000, &f), -ERANGE);
	f.len = 0;
	assert_int_equal(pin_check(c, 2, 3000, &f), 0);
	assert_int_equal(f.calls, 3);
	assert_int_equal(pin_check(c, 2, 3000, &f), 0);
	assert_int_equal(f.calls, 3);
	/* A prefetch that fails leaves nothing behind either. */
	f.fail = -ENOENT;
	assert_int_equal(
	    hyd_read_cache_prefetch(c, &(chunk_id){{3}}, 100, fake_load, &f),
	    -ENOENT);
	f.fail = 0;
	assert_int_equal(
	    hyd_read_cache_prefetch(c, &(chunk_id){{3}}, 100, fake_load, &f),
	    1);
	hyd_read_cache_free(c);
}

/* Eviction: never a pinned slot; LRU among the rest. */
static void test_cache_pins(void **state)
{
	struct fake f = {0};
	hyd_read_cache *c;
	const uint8_t *ra, *rb;
	void *pa, *pb;
	chunk_id a = fid(10), b = fid(11);

	(void)state;
	assert_int_equal(hyd_read_cache_new(2, &c), 0);
	assert_int_equal(
	    hyd_read_cache_pin(c, &a, 1000, fake_load, &f, &ra, &pa), 0);
	assert_int_equal(
	    hyd_read_cache_pin(c, &b, 1000, fake_load, &f, &rb, &pb), 0);
	/* Both slots pinned: a third chunk is refused, not loaded. */
	assert_int_equal(pin_check(c, 12, 1000, &f), -EBUSY);
	assert_int_equal(f.calls, 2);
	hyd_read_cache_unpin(c, pa);
	/* Now it may take a's slot; b's bytes stay put under the pin. */
	assert_int_equal(pin_check(c, 12, 1000, &f), 0);
	assert_int_equal(f.calls, 3);
	assert_int_equal(rb[0], 11);
	assert_int_equal(rb[999], (uint8_t)(11 + 999));
	hyd_read_cache_unpin(c, pb);
	/* b was last used before 12 was loaded: b goes first. */
	assert_int_equal(pin_check(c, 10, 1000, &f), 0);
	assert_int_equal(f.calls, 4);
	assert_int_equal(pin_check(c, 12, 1000, &f), 0);
	assert_int_equal(f.calls, 4);
	hyd_read_cache_free(c);
}

/* Decode-ahead never evicts decode-ahead work nobody has read yet; a
 * demand read may evict anything unpinned. */
static void test_cache_ahead(void **state)
{
	struct fake f = {0};
	hyd_read_cache *c;
	chunk_id a = fid(20), b = fid(21), d = fid(22);

	(void)state;
	assert_int_equal(hyd_read_cache_new(2, &c), 0);
	assert_int_equal(hyd_read_cache_prefetch(c, &a, 500, fake_load, &f), 1);
	assert_int_equal(hyd_read_cache_prefetch(c, &b, 500, fake_load, &f), 1);
	/* Cached already: nothing to do. */
	assert_int_equal(hyd_read_cache_prefetch(c, &a, 500, fake_load, &f), 0);
	/* Full of unread prefetches: d is not decoded ahead. */
	assert_int_equal(hyd_read_cache_prefetch(c, &d, 500, fake_load, &f),
			 -EBUSY);
	assert_int_equal(f.calls, 2);
	/* a is read (a hit), so its slot may go to the next prefetch. */
	assert_int_equal(pin_check(c, 20, 500, &f), 0);
	assert_int_equal(f.calls, 2);
	assert_int_equal(hyd_read_cache_prefetch(c, &d, 500, fake_load, &f), 1);
	assert_int_equal(f.calls, 3);
	assert_int_equal(pin_check(c, 20, 500, &f), 0); /* evicted: reload */
	assert_int_equal(f.calls, 4);
	hyd_read_cache_free(c);
}

static void test_cache_put(void **state)
{
	struct fake f = {.fail = -EIO};
	hyd_read_cache *c;
	chunk_id id = fid(30);
	uint8_t raw[777];

	(void)state;
	assert_int_equal(hyd_read_cache_new(3, &c), 0);
	fake_fill(&id, raw, sizeof(raw));
	hyd_read_cache_put(c, &id, raw, sizeof(raw));
	assert_int_equal(pin_check(c, 30, sizeof(raw), &f), 0);
	assert_int_equal(f.calls, 0);
	hyd_read_cache_free(c);
	/* A cache of no slots holds nothing and loads nothing. */
	assert_int_equal(hyd_read_cache_new(0, &c), 0);
	hyd_read_cache_put(c, &id, raw, sizeof(raw));
	assert_int_equal(pin_check(c, 30, sizeof(raw), &f), -EBUSY);
	assert_int_equal(f.calls, 0);
	hyd_read_cache_free(c);
}

struct pin_arg {
	hyd_read_cache *c;
	struct fake *f;
	int r;
};

static void *pin_thread(void *p)
{
	struct pin_arg *a = p;

	a->r = pin_check(a->c, 40, 65536, a->f);
	return NULL;
}

/* Eight readers of one chunk at once: one load, eight right answers. */
static void test_cache_single_flight(void **state)
{
	struct fake f = {.delay_us = 100000};
	struct pin_arg a[8];
	pthread_t th[8];
	hyd_read_cache *c;
	int i;

	(void)state;
	assert_int_equal(hyd_read_cache_new(4, &c), 0);
	for (i = 0; i < 8; i++) {
		a[i].c = c;
		a[i].f = &f;
		a[i].r = 1;
		assert_int_equal(
		    pthread_create(&th[i], NULL, pin_thread, &a[i]), 0);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].r, 0);
	}
	assert_int_equal(f.calls, 1);
	hyd_read_cache_free(c);
}

/* ---- the read path on a real store and catalog ---- */

struct fx {
	char dir[64];
	uint8_t *data; /* the file's bytes */
	uint64_t size;
	struct cat_chunk rows[N_CHUNKS];
	hyd_store *store;
	cat_reader *cat;
	hyd_read_cache *cache;
	struct hyd_read_ctx rc; /* with the cache */
	struct hyd_read_ctx nc; /* without */
};

/* Chunk lengths: tiny to the max, so reads start and end everywhere. */
static uint32_t chunk_len(unsigned i)
{
	static const uint32_t lens[] = {1,	100,	 4096,	65536,
					70001,	MAX_RAW, 12345, 131072,
					131073, 999,	 20000, 250000};

	return lens[(i * 7) % (sizeof(lens) / sizeof(lens[0]))];
}

static void build(struct fx *fx)
{
	static const enum frame_policy pol[] = {
	    FRAME_POLICY_RAW, FRAME_POLICY_ZSTD, FRAME_POLICY_LZ4,
	    FRAME_POLICY_AUTO};
	struct cat_inode in;
	cat_writer *w = NULL;
	char path[128];
	uint8_t *frame = malloc(frame_bound(MAX_RAW));
	size_t flen, i, k;
	uint64_t off = 0, seed = 5;

	assert_non_null(frame);
	for (i = 0; i < N_CHUNKS; i++)
		fx->size += chunk_len((unsigned)i);
	fx->data = malloc(fx->size);
	assert_non_null(fx->data);
	for (i = 0; i < N_CHUNKS; i++) {
		uint32_t len = chunk_len((unsigned)i);
		uint8_t *p = fx->data + off;

		/* Four text chunks (raw, zstd, lz4, auto frames), four of
		 * noise (raw whatever the policy), and so on. */
		for (k = 0; k < len; k++)
			p[k] = (i / 4) % 2
				   ? (uint8_t)(tsup_splitmix64(&seed) >> 24)
				   : (uint8_t)("weights "[(k + i) % 8] ^ i);
		fx->rows[i].off = off;
		fx->rows[i].len = len;
		assert_int_equal(chunk_id_compute(p, len, &fx->rows[i].id), 0);
		assert_int_equal(frame_encode(NULL, pol[i % 4], 1, p, len,
					      frame, frame_bound(MAX_RAW),
					      &flen),
				 0);
		assert_true(hyd_store_put(fx->store, &fx->rows[i].id, frame,
					  flen) >= 0);
		off += len;
	}
	free(frame);

	snprintf(path, sizeof(path), "%s/cat.db", fx->dir);
	w = tsup_cat_begin(path);
	memset(&in, 0, sizeof(in));
	in.ino = FILE_INO;
	in.kind = CAT_REG;
	in.mode = S_IFREG | 0644;
	in.nlink = 1;
	in.size = fx->size;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
	assert_int_equal(
	    cat_writer_add_dirent(w, CAT_ROOT_INO, "f", 1, FILE_INO), 0);
	for (i = 0; i < N_CHUNKS; i++)
		assert_int_equal(
		    cat_writer_add_chunk(w, FILE_INO, fx->rows[i].off,
					 fx->rows[i].len, &fx->rows[i].id),
		    0);
	assert_int_equal(cat_writer_commit(w), 0);
	assert_int_equal(cat_reader_open(path, &fx->cat), 0);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char p[128];

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ferry-test-read-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(p, sizeof(p), "%s/cache", fx->dir);
	assert_int_equal(hyd_store_open(p, MAX_RAW, &fx->store), 0);
	build(fx);
	assert_int_equal(hyd_read_cache_new(HYD_READ_CACHE_SLOTS, &fx->cache),
			 0);
	fx->rc.cat = fx->cat;
	fx->rc.store = fx->store;
	fx->rc.cache = fx->cache;
	fx->rc.max_raw = MAX_RAW;
	fx->rc.timeout_ns = 300000000ull;
	fx->nc = fx->rc;
	fx->nc.cache = NULL;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	hyd_read_cache_free(fx->cache);
	cat_reader_close(fx->cat);
	hyd_store_close(fx->store);
	tsup_rm_rf(fx->dir);
	free(fx->data);
	free(fx);
	return 0;
}

/* Read [off, off+len) through the open file and compare. */
static void check_iov(struct fx *fx, struct hyd_read_open *of, uint64_t off,
		      size_t len)
{
	struct hyd_read_iov rv;
	uint64_t want = off >= fx->size	       ? 0
			: len < fx->size - off ? len
					       : fx->size - off;
	size_t i, at = 0;

	assert_int_equal(hyd_read_open_iov(&fx->rc, of, off, len, &rv), 0);
	assert_int_equal(rv.len, want);
	for (i = 0; i < rv.n; i++) {
		assert_true(at + rv.iov[i].iov_len <= want);
		assert_memory_equal(rv.iov[i].iov_base, fx->data + off + at,
				    rv.iov[i].iov_len);
		at += rv.iov[i].iov_len;
	}
	assert_int_equal(at, want);
	hyd_read_iov_release(&fx->rc, &rv);
}

static void check_copy(struct fx *fx, const struct hyd_read_ctx *rc,
		       uint64_t off, size_t len)
{
	uint8_t *out = malloc(len ? len : 1);
	size_t n = 12345;

	assert_non_null(out);
	assert_int_equal(
	    hyd_read_file(rc, FILE_INO, fx->size, off, len, out, &n), 0);
	assert_int_equal(n, off >= fx->size	   ? 0
			    : len < fx->size - off ? len
						   : fx->size - off);
	assert_memory_equal(out, fx->data + off, n);
	free(out);
}

static void test_read_ranges(void **state)
{
	struct fx *fx = *state;
	struct hyd_read_open *of;
	uint64_t seed = 9, off;
	size_t len;
	int i;

	assert_int_equal(hyd_read_open_new(NULL, FILE_INO, fx->size, &of), 0);
	/* Edges: whole file, every chunk boundary, empty, past the end. */
	check_iov(fx, of, 0, (size_t)fx->size);
	for (i = 0; i < (int)N_CHUNKS; i++) {
		off = fx->rows[i].off;
		check_iov(fx, of, off ? off - 1 : 0, 2);
		check_iov(fx, of, off, fx->rows[i].len);
	}
	check_iov(fx, of, 5, 0);
	check_iov(fx, of, fx->size, 4096);
	check_iov(fx, of, fx->size - 1, 4096);
	for (i = 0; i < 300; i++) {
		off = tsup_splitmix64(&seed) % fx->size;
		len = (size_t)(tsup_splitmix64(&seed) % (3u << 20));
		check_iov(fx, of, off, len);
		check_copy(fx, &fx->rc, off, len);
		check_copy(fx, &fx->nc, off, len);
	}
	hyd_read_open_unref(of);
}

struct seq_arg {
	struct fx *fx;
	struct hyd_read_open *of;
	size_t step;
};

/* A sequential reader in step-sized requests, with decode-ahead. */
static void *seq_thread(void *p)
{
	struct seq_arg *a = p;
	uint64_t off;

	for (off = 0; off < a->fx->size; off += a->step) {
		check_iov(a->fx, a->of, off, a->step);
		hyd_read_ahead(&a->fx->rc, a->of, off, a->step);
	}
	return NULL;
}

static void test_read_threads(void **state)
{
	struct fx *fx = *state;
	struct hyd_read_open *of;
	struct seq_arg a[4];
	pthread_t th[4];
	int i;

	assert_int_equal(hyd_read_open_new(NULL, FILE_INO, fx->size, &of), 0);
	for (i = 0; i < 4; i++) {
		a[i].fx = fx;
		a[i].of = of;
		a[i].step = (size_t)(128u << 10) + (size_t)i * 4093;
		assert_int_equal(
		    pthread_create(&th[i], NULL, seq_thread, &a[i]), 0);
	}
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	hyd_read_open_unref(of);
}

/* 1 when chunk i is in the cache (a pin that must not load). */
static int cached(struct fx *fx, unsigned i)
{
	struct fake f = {.fail = -EIO};
	const uint8_t *raw;
	void *pin;
	int r = hyd_read_cache_pin(fx->cache, &fx->rows[i].id, fx->rows[i].len,
				   fake_load, &f, &raw, &pin);

	if (r == 0) {
		assert_memory_equal(raw, fx->data + fx->rows[i].off,
				    fx->rows[i].len);
		hyd_read_cache_unpin(fx->cache, pin);
	}
	return r == 0;
}

/* Index of the chunk holding byte off. */
static unsigned chunk_at(struct fx *fx, uint64_t off)
{
	unsigned i;

	for (i = 0; i + 1 < N_CHUNKS && fx->rows[i + 1].off <= off; i++)
		;
	return i;
}

static void test_read_ahead(void **state)
{
	struct fx *fx = *state;
	struct hyd_read_open *of;
	const size_t step = 128u << 10;
	uint64_t jump = fx->size / 2;
	unsigned i, last;

	assert_int_equal(hyd_read_open_new(NULL, FILE_INO, fx->size, &of), 0);
	/* A first read at a jump starts a stream: nothing decoded ahead. */
	check_iov(fx, of, jump, step);
	hyd_read_ahead(&fx->rc, of, jump, step);
	i = chunk_at(fx, jump + step) + 2;
	assert_false(cached(fx, i));
	/* The next read continues it: the chunks of the next
	 * HYD_STREAM_DECODE past it are decoded and verified. */
	check_iov(fx, of, jump + step, step);
	hyd_read_ahead(&fx->rc, of, jump + step, step);
	last = chunk_at(fx, jump + 2 * step + HYD_STREAM_DECODE - 1);
	for (i = chunk_at(fx, jump + 2 * step); i <= last; i++)
		assert_true(cached(fx, i));
	/* And no further. */
	if (last + 2 < N_CHUNKS)
		assert_false(cached(fx, last + 2));
	hyd_read_open_unref(of);
}

/* Flip a byte of chunk i's frame in its volume. */
static void corrupt(struct fx *fx, unsigned i)
{
	char p[128];
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t vol, off, flen;

	snprintf(p, sizeof(p), "%s/cache/state.db", fx->dir);
	assert_int_equal(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT vol, off, frame_len FROM"
					    " chunk WHERE id = ?1",
					    -1, &st, NULL),
			 SQLITE_OK);
	sqlite3_bind_blob(st, 1, fx->rows[i].id.b, CHUNK_ID_LEN, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	vol = sqlite3_column_int64(st, 0);
	off = sqlite3_column_int64(st, 1);
	flen = sqlite3_column_int64(st, 2);
	sqlite3_finalize(st);
	sqlite3_close(db);
	snprintf(p, sizeof(p), "%s/cache/volumes/%08u.vol", fx->dir,
		 (unsigned)vol);
	/* the payload's last byte */
	tsup_flip_byte(p, (uint64_t)(off + flen - 1), 0x40);
}

/* A stored frame that rotted is never served: the read fails (the
 * fetcher here reaches no server) and the store forgets the frame. */
static void test_read_corrupt(void **state)
{
	struct fx *fx = *state;
	struct hyd_fetch_config c;
	struct hyd_read_open *of;
	struct hyd_read_iov rv;
	char url[64];
	unsigned i;

	memset(&c, 0, sizeof(c));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/t",
		 tsup_free_port());
	c.base_url = url;
	c.store = fx->store;
	c.max_raw = MAX_RAW;
	c.connections = 2;
	c.connect_timeout_ms = 100;
	assert_int_equal(hyd_fetch_new(&c, &fx->rc.fetch), 0);
	assert_int_equal(hyd_fetch_start(fx->rc.fetch), 0);
	assert_int_equal(hyd_read_open_new(NULL, FILE_INO, fx->size, &of), 0);
	/* A zstd frame (9: text, zstd policy) and a raw one (12: noise). */
	for (i = 9; i <= 12; i += 3) {
		corrupt(fx, i);
		assert_int_equal(
		    hyd_read_open_iov(&fx->rc, of, fx->rows[i].off, 10, &rv),
		    -EIO);
		assert_int_equal(rv.n, 0);
		assert_int_equal(hyd_store_has(fx->store, &fx->rows[i].id), 0);
		/* Its neighbours still read fine. */
		check_iov(fx, of, fx->rows[i - 1].off, fx->rows[i - 1].len);
	}
	hyd_read_open_unref(of);
	hyd_fetch_stop(fx->rc.fetch);
	hyd_fetch_free(fx->rc.fetch);
	fx->rc.fetch = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cache_hit),
	    cmocka_unit_test(test_cache_failures_not_kept),
	    cmocka_unit_test(test_cache_pins),
	    cmocka_unit_test(test_cache_ahead),
	    cmocka_unit_test(test_cache_put),
	    cmocka_unit_test(test_cache_single_flight),
	    cmocka_unit_test_setup_teardown(test_read_ranges, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_threads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_ahead, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_corrupt, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
