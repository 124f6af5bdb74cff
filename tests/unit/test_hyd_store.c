/*
 * tests/unit/test_hyd_store.c — the hydrator's chunk store (volumes + index).
 *
 * Every test gets a fresh temp CACHEDIR. Frames are built with frame_encode,
 * ids with chunk_id_compute, and the on-disk volume is poked directly to play
 * crashes (a garbage tail) and bit rot (a flipped byte).
 */
#include <dirent.h>
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
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"
#include "tsupport.h"

struct fx {
	char dir[64];
};

/* One test chunk: raw bytes, id and a frame. */
struct tchunk {
	uint8_t *raw;
	size_t raw_len;
	chunk_id id;
	uint8_t *frame;
	size_t frame_len;
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ferry-test-store-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	tsup_rm_rf(fx->dir);
	free(fx);
	unsetenv("FERRY_VOLUME_ROLL_BYTES");
	unsetenv("FERRY_PACK_ROLL_BYTES");
	unsetenv("FERRY_STORE_SYNC_DELAY_MS");
	return 0;
}

/* Deterministic bytes: compressible text when text is set, else noise. */
static void fill(uint8_t *buf, size_t len, uint32_t seed, int text)
{
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = text ? (uint8_t)("ferry moves trees "[(i + seed) % 18])
			      : (uint8_t)x;
	}
	/* Distinct seeds give distinct chunks, text ones included. */
	if (text && len >= sizeof(seed))
		memcpy(buf, &seed, sizeof(seed));
}

static void tchunk_make(struct tchunk *c, uint32_t seed, size_t len, int text,
			enum frame_policy pol)
{
	size_t cap = frame_bound(len);

	c->raw_len = len;
	c->raw = malloc(len);
	c->frame = malloc(cap);
	assert_non_null(c->raw);
	assert_non_null(c->frame);
	fill(c->raw, len, seed, text);
	assert_int_equal(chunk_id_compute(c->raw, len, &c->id), 0);
	assert_int_equal(frame_encode(NULL, pol, 3, c->raw, len, c->frame, cap,
				      &c->frame_len),
			 0);
}

static void tchunk_free(struct tchunk *c)
{
	free(c->raw);
	free(c->frame);
}

/* get id and compare with c's raw bytes. */
static void check_get(hyd_store *s, const struct tchunk *c)
{
	uint8_t *out = malloc(c->raw_len);
	size_t got = 0;

	assert_non_null(out);
	assert_int_equal(hyd_store_get(s, &c->id, out, c->raw_len, &got), 0);
	assert_int_equal(got, c->raw_len);
	assert_memory_equal(out, c->raw, c->raw_len);
	free(out);
}

static off_t file_size(const char *dir, const char *name)
{
	char p[256];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	if (stat(p, &sb) < 0)
		return -1;
	return sb.st_size;
}

static void test_roundtrip_codecs(void **state)
{
	struct fx *fx = *state;
	static const struct {
		enum frame_policy pol;
		uint8_t codec;
	} cases[] = {
	    {FRAME_POLICY_RAW, FRAME_RAW},
	    {FRAME_POLICY_LZ4, FRAME_LZ4},
	    {FRAME_POLICY_ZSTD, FRAME_ZSTD},
	};
	struct tchunk c[3];
	struct hyd_store_stats st;
	struct frame_info fi;
	hyd_store *s = NULL;
	size_t i;

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_string_equal(hyd_store_dir(s), fx->dir);
	for (i = 0; i < 3; i++) {
		tchunk_make(&c[i], (uint32_t)i, 20000, 1, cases[i].pol);
		assert_int_equal(frame_header_parse(c[i].frame, c[i].frame_len,
						    CHUNK_MAX_LIMIT, &fi),
				 0);
		assert_int_equal(fi.codec, cases[i].codec);
		assert_int_equal(hyd_store_has(s, &c[i].id), 0);
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
		assert_int_equal(hyd_store_has(s, &c[i].id), 1);
	}
	for (i = 0; i < 3; i++)
		check_get(s, &c[i]);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, 3);
	assert_int_equal(st.raw_bytes, 3 * 20000);
	assert_int_equal(st.stored_bytes,
			 c[0].frame_len + c[1].frame_len + c[2].frame_len);
	assert_int_equal(st.vols, 1);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"),
			 (off_t)st.stored_bytes);
	hyd_store_close(s);
	for (i = 0; i < 3; i++)
		tchunk_free(&c[i]);
}

static void test_put_idempotent(void **state)
{
	struct fx *fx = *state;
	struct hyd_store_stats st;
	struct tchunk c;
	hyd_store *s = NULL;
	off_t size;

	tchunk_make(&c, 7, 5000, 0, FRAME_POLICY_AUTO);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_put(s, &c.id, c.frame, c.frame_len), 0);
	size = file_size(fx->dir, "volumes/00000001.vol");
	assert_int_equal(size, (off_t)c.frame_len);
	assert_int_equal(hyd_store_put(s, &c.id, c.frame, c.frame_len), 1);
	assert_int_equal(hyd_store_put(s, &c.id, c.frame, c.frame_len), 1);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"), size);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, 1);
	assert_int_equal(st.stored_bytes, c.frame_len);
	check_get(s, &c);
	hyd_store_close(s);
	tchunk_free(&c);
}

static void test_bad_args(void **state)
{
	struct fx *fx = *state;
	uint8_t junk[64] = "not a frame";
	uint8_t small[10];
	struct tchunk c;
	hyd_store *s = NULL;
	size_t got;

	tchunk_make(&c, 8, 3000, 1, FRAME_POLICY_ZSTD);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_get(s, &c.id, small, sizeof(small), &got),
			 -ENOENT);
	assert_int_equal(hyd_store_put(s, &c.id, junk, sizeof(junk)), -EBADMSG);
	/* A frame with bytes after it is not one frame. */
	assert_int_equal(hyd_store_put(s, &c.id, c.frame, c.frame_len - 1),
			 -EBADMSG);
	assert_int_equal(hyd_store_put(s, &c.id, c.frame, c.frame_len), 0);
	assert_int_equal(hyd_store_get(s, &c.id, small, sizeof(small), &got),
			 -ENOBUFS);
	check_get(s, &c); /* ENOBUFS dropped nothing */
	hyd_store_close(s);
	tchunk_free(&c);
}

static void test_reopen(void **state)
{
	struct fx *fx = *state;
	struct hyd_store_stats st1, st2;
	struct tchunk c[10];
	hyd_store *s = NULL;
	size_t i;

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 10; i++) {
		tchunk_make(&c[i], (uint32_t)(100 + i), 1000 + i * 700, i & 1,
			    FRAME_POLICY_AUTO);
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	}
	assert_int_equal(hyd_store_meta_set(s, "url", "http://x/v1/y"), 0);
	assert_int_equal(hyd_store_stats(s, &st1), 0);
	hyd_store_close(s);

	/* one thread: every put is a group of its own */
	assert_int_equal(st1.groups, 10);
	assert_int_equal(st1.syncs, 10);
	assert_int_equal(hyd_store_open(fx->dir, 256 * 1024, &s), 0);
	assert_int_equal(hyd_store_stats(s, &st2), 0);
	/* what the store holds survives; the put counters are this open's */
	assert_int_equal(st2.chunks, st1.chunks);
	assert_int_equal(st2.raw_bytes, st1.raw_bytes);
	assert_int_equal(st2.stored_bytes, st1.stored_bytes);
	assert_int_equal(st2.vols, st1.vols);
	assert_int_equal(st2.groups, 0);
	assert_int_equal(st2.syncs, 0);
	for (i = 0; i < 10; i++) {
		assert_int_equal(hyd_store_has(s, &c[i].id), 1);
		check_get(s, &c[i]);
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 1);
	}
	{
		char buf[64];

		assert_int_equal(hyd_store_meta_get(s, "url", buf, sizeof(buf)),
				 0);
		assert_string_equal(buf, "http://x/v1/y");
	}
	hyd_store_close(s);
	for (i = 0; i < 10; i++)
		tchunk_free(&c[i]);
}

static void test_busy(void **state)
{
	struct fx *fx = *state;
	hyd_store *s = NULL, *s2 = NULL;
	char p[128], buf[32] = "", want[32];
	ssize_t n;
	int fd;

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	/* flock belongs to an open file description, so a second open in
	 * this process conflicts just like another process would. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s2), -EBUSY);
	assert_null(s2);
	snprintf(p, sizeof(p), "%s/lock", fx->dir);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n > 0);
	snprintf(want, sizeof(want), "%ld\n", (long)getpid());
	assert_string_equal(buf, want);
	hyd_store_close(s);
	/* Released on close. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s2), 0);
	hyd_store_close(s2);
}

static void test_not_a_dir(void **state)
{
	struct fx *fx = *state;
	hyd_store *s = NULL;
	char p[128];
	int fd;

	snprintf(p, sizeof(p), "%s/file", fx->dir);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(hyd_store_open(p, 0, &s), -ENOTDIR);
	assert_null(s);
	/* Nested dirs are created. */
	snprintf(p, sizeof(p), "%s/a/b/c", fx->dir);
	assert_int_equal(hyd_store_open(p, 0, &s), 0);
	hyd_store_close(s);
}

static void append_garbage(const char *dir, const char *vol, size_t n)
{
	char p[256];
	uint8_t *g = malloc(n);
	int fd;

	assert_non_null(g);
	fill(g, n, 99, 0);
	snprintf(p, sizeof(p), "%s/volumes/%s", dir, vol);
	fd = open(p, O_WRONLY | O_APPEND | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, g, n), (ssize_t)n);
	close(fd);
	free(g);
}

/* Make n test chunks (seeds seed.., len bytes, every other one text) and
 * store the first keep in a fresh open; the size of volume 1 after. */
static off_t store_first(struct fx *fx, struct tchunk *c, size_t n, size_t keep,
			 uint32_t seed, size_t len)
{
	hyd_store *s = NULL;
	size_t i;

	for (i = 0; i < n; i++)
		tchunk_make(&c[i], seed + (uint32_t)i, len, (int)(i % 2),
			    FRAME_POLICY_AUTO);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < keep; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	hyd_store_close(s);
	return file_size(fx->dir, "volumes/00000001.vol");
}

static void test_crash_tail(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[5];
	hyd_store *s = NULL;
	off_t good;
	size_t i;

	good = store_first(fx, c, 5, 3, 200, 4000);

	/* A put that died after its write but before its row leaves a tail
	 * the index does not know. */
	append_garbage(fx->dir, "00000001.vol", 777);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"), good);
	for (i = 0; i < 3; i++)
		check_get(s, &c[i]);
	for (i = 3; i < 5; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	for (i = 0; i < 5; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 5; i++)
		check_get(s, &c[i]);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"),
			 good + (off_t)c[3].frame_len + (off_t)c[4].frame_len);
	hyd_store_close(s);
	for (i = 0; i < 5; i++)
		tchunk_free(&c[i]);
}

/* A crash right after a roll: the newest volume holds only a tail. */
static void test_crash_after_roll(void **state)
{
	struct fx *fx = *state;
	struct hyd_store_stats st;
	struct tchunk c[2];
	hyd_store *s = NULL;
	off_t one;

	tchunk_make(&c[0], 250, 3000, 0, FRAME_POLICY_RAW);
	tchunk_make(&c[1], 251, 3000, 1, FRAME_POLICY_AUTO);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_put(s, &c[0].id, c[0].frame, c[0].frame_len),
			 0);
	hyd_store_close(s);
	one = file_size(fx->dir, "volumes/00000001.vol");
	append_garbage(fx->dir, "00000002.vol", 500);

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(file_size(fx->dir, "volumes/00000002.vol"), 0);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.vols, 2);
	assert_int_equal(hyd_store_put(s, &c[1].id, c[1].frame, c[1].frame_len),
			 0);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"), one);
	assert_int_equal(file_size(fx->dir, "volumes/00000002.vol"),
			 (off_t)c[1].frame_len);
	hyd_store_close(s);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	check_get(s, &c[0]);
	check_get(s, &c[1]);
	hyd_store_close(s);
	tchunk_free(&c[0]);
	tchunk_free(&c[1]);
}

/* A state.db from a newer build is refused, not half-understood. */
static void test_newer_schema(void **state)
{
	struct fx *fx = *state;
	hyd_store *s = NULL;
	sqlite3 *db = NULL;
	char p[128];

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	hyd_store_close(s);
	snprintf(p, sizeof(p), "%s/state.db", fx->dir);
	assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), -EPROTO);
	assert_null(s);
}

static void flip_byte(const char *dir, const char *vol, off_t off)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/volumes/%s", dir, vol);
	tsup_flip_byte(p, (uint64_t)off, 0x5a);
}

static void test_corruption(void **state)
{
	struct fx *fx = *state;
	struct hyd_store_stats st;
	struct tchunk c[3];
	uint8_t *out = malloc(8000);
	hyd_store *s = NULL;
	size_t got, i;
	off_t off;

	assert_non_null(out);
	tchunk_make(&c[0], 300, 8000, 0, FRAME_POLICY_RAW);
	tchunk_make(&c[1], 301, 8000, 1, FRAME_POLICY_ZSTD);
	tchunk_make(&c[2], 302, 8000, 1, FRAME_POLICY_LZ4);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	/* Backfill's mark that the store is complete: reads of intact
	 * frames leave it; the first dropped row takes it away. */
	assert_int_equal(
	    hyd_store_meta_set(s, HYD_STORE_META_COMPLETE, "1 2 - 3 4 0 0"), 0);
	check_get(s, &c[0]);
	assert_int_equal(
	    hyd_store_meta_get(s, HYD_STORE_META_COMPLETE, (char *)out, 8000),
	    0);
	/* Rot one payload byte of each frame: a raw one fails its hash, a
	 * compressed one its decoding or its hash. */
	off = 0;
	for (i = 0; i < 3; i++) {
		flip_byte(fx->dir, "00000001.vol",
			  off + FRAME_HDR_LEN + (off_t)c[i].frame_len / 3);
		off += (off_t)c[i].frame_len;
	}
	for (i = 0; i < 3; i++) {
		assert_int_equal(hyd_store_get(s, &c[i].id, out, 8000, &got),
				 -EBADMSG);
		assert_int_equal(hyd_store_get(s, &c[i].id, out, 8000, &got),
				 -ENOENT);
		assert_int_equal(hyd_store_has(s, &c[i].id), 0);
		assert_int_equal(hyd_store_meta_get(s, HYD_STORE_META_COMPLETE,
						    (char *)out, 8000),
				 -ENOENT);
	}
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.stored_bytes, 0);
	/* A later fetch can store it again. */
	assert_int_equal(hyd_store_put(s, &c[1].id, c[1].frame, c[1].frame_len),
			 0);
	check_get(s, &c[1]);
	hyd_store_close(s);

	/* The rotten bytes are dead space now, never a frame again. */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	check_get(s, &c[1]);
	assert_int_equal(hyd_store_has(s, &c[0].id), 0);
	hyd_store_close(s);
	for (i = 0; i < 3; i++)
		tchunk_free(&c[i]);
	free(out);
}

static void db_exec(const char *dir, const char *sql)
{
	sqlite3 *db = NULL;
	char p[128];

	snprintf(p, sizeof(p), "%s/state.db", dir);
	assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* Rename DIR/SUB/NNNNNNNN.FROM to .TO: every one, or (odd) only those of
 * odd number; to NULL: only count them. How many. */
static int rename_ext(const char *dir, const char *sub, const char *from,
		      const char *to, int odd)
{
	char p[256], a[600], b[600];
	struct dirent *de;
	size_t fl = strlen(from);
	int n = 0;
	DIR *d;

	snprintf(p, sizeof(p), "%s/%s", dir, sub);
	d = opendir(p);
	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		unsigned num;

		if (strlen(de->d_name) != 8 + fl ||
		    strcmp(de->d_name + 8, from) != 0 ||
		    sscanf(de->d_name, "%8u", &num) != 1 ||
		    (odd && num % 2 == 0))
			continue;
		n++;
		if (!to)
			continue;
		snprintf(a, sizeof(a), "%s/%s", p, de->d_name);
		snprintf(b, sizeof(b), "%s/%08u%s", p, num, to);
		assert_int_equal(rename(a, b), 0);
	}
	closedir(d);
	return n;
}

/* Turn the store in dir back into what a ferry from before volumes made
 * (packs/NNNNNNNN.pack, the column `pack` in chunk and gc_free), then run
 * sql (which sets the schema it plays). */
static void to_packs_layout(const char *dir, const char *sql)
{
	char a[256], b[256];

	rename_ext(dir, "volumes", ".vol", ".pack", 0);
	snprintf(a, sizeof(a), "%s/volumes", dir);
	snprintf(b, sizeof(b), "%s/packs", dir);
	assert_int_equal(rename(a, b), 0);
	/* back before schema 5 (the bound), then 4 (volumes) */
	db_exec(dir, "DROP INDEX chunk_used; DROP TABLE pin;"
		     "ALTER TABLE chunk DROP COLUMN used;");
	db_exec(dir, "ALTER TABLE chunk RENAME COLUMN vol TO pack;"
		     "ALTER TABLE gc_free RENAME COLUMN vol TO pack;");
	db_exec(dir, sql);
}

/* Reads check a frame by the XXH3-64 its row keeps: a row whose checksum
 * does not match intact frame bytes is refused (so the check really runs)
 * and dropped; a row from schema 1 (no checksum) is checked by SHA-256. */
static void test_frame_checksum(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[2];
	uint8_t out[8000];
	hyd_store *s = NULL;
	size_t got, i;

	tchunk_make(&c[0], 400, 8000, 0, FRAME_POLICY_RAW);
	tchunk_make(&c[1], 401, 8000, 1, FRAME_POLICY_ZSTD);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 2; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	hyd_store_close(s);
	db_exec(fx->dir, "UPDATE chunk SET xxh = xxh + 1");
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 2; i++) {
		assert_int_equal(hyd_store_get(s, &c[i].id, out, 8000, &got),
				 -EBADMSG);
		assert_int_equal(hyd_store_has(s, &c[i].id), 0);
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
		check_get(s, &c[i]);
	}
	hyd_store_close(s);

	/* Back to schema 1: the column goes, the migration brings it back
	 * empty, and those rows are read through SHA-256. */
	to_packs_layout(fx->dir, "DROP TABLE gc_free;"
				 "ALTER TABLE chunk DROP COLUMN xxh;"
				 "PRAGMA user_version = 1");
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 2; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);
	db_exec(fx->dir, "UPDATE chunk SET xxh = NULL");
	/* The raw frame of c[0] was stored again above, after 2 frames. */
	flip_byte(fx->dir, "00000001.vol",
		  (off_t)(c[0].frame_len + c[1].frame_len) + FRAME_HDR_LEN + 5);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_get(s, &c[0].id, out, 8000, &got), -EBADMSG);
	check_get(s, &c[1]);
	hyd_store_close(s);
	for (i = 0; i < 2; i++)
		tchunk_free(&c[i]);
}

static void test_header_corruption(void **state)
{
	struct fx *fx = *state;
	struct tchunk c;
	uint8_t out[4000];
	hyd_store *s = NULL;
	size_t got;

	tchunk_make(&c, 400, sizeof(out), 0, FRAME_POLICY_RAW);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_put(s, &c.id, c.frame, c.frame_len), 0);
	flip_byte(fx->dir, "00000001.vol", 9); /* raw_len */
	assert_int_equal(hyd_store_get(s, &c.id, out, sizeof(out), &got),
			 -EBADMSG);
	assert_int_equal(hyd_store_get(s, &c.id, out, sizeof(out), &got),
			 -ENOENT);
	hyd_store_close(s);
	tchunk_free(&c);
}

static int count_vols(const char *dir)
{
	char name[32];
	int n = 0;

	for (;;) {
		snprintf(name, sizeof(name), "volumes/%08d.vol", n + 1);
		if (file_size(dir, name) < 0)
			return n;
		n++;
	}
}

static void test_vol_roll(void **state)
{
	struct fx *fx = *state;
	struct hyd_store_stats st;
	struct tchunk c[20];
	hyd_store *s = NULL;
	char name[32];
	size_t i;
	int n;

	/* Documented test hook: roll after 4 KiB instead of 256 MiB. */
	setenv("FERRY_VOLUME_ROLL_BYTES", "4096", 1);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 20; i++) {
		tchunk_make(&c[i], (uint32_t)(500 + i), 1500, 0,
			    FRAME_POLICY_RAW);
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	}
	/* 1516-byte frames, two per 4 KiB volume. */
	n = count_vols(fx->dir);
	assert_int_equal(n, 10);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.vols, (uint64_t)n);
	for (i = 1; i <= (size_t)n; i++) {
		snprintf(name, sizeof(name), "volumes/%08zu.vol", i);
		assert_true(file_size(fx->dir, name) <= 4096);
	}
	for (i = 0; i < 20; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);

	/* A frame larger than the roll size gets a volume of its own. The
	 * hook's former name still works. */
	unsetenv("FERRY_VOLUME_ROLL_BYTES");
	setenv("FERRY_PACK_ROLL_BYTES", "1000", 1);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.vols, 10);
	for (i = 0; i < 20; i++)
		check_get(s, &c[i]);
	{
		struct tchunk big;

		tchunk_make(&big, 600, 3000, 0, FRAME_POLICY_RAW);
		assert_int_equal(
		    hyd_store_put(s, &big.id, big.frame, big.frame_len), 0);
		check_get(s, &big);
		assert_int_equal(count_vols(fx->dir), 11);
		tchunk_free(&big);
	}
	hyd_store_close(s);
	for (i = 0; i < 20; i++)
		tchunk_free(&c[i]);
}

static void test_meta(void **state)
{
	struct fx *fx = *state;
	hyd_store *s = NULL;
	char buf[8];

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(hyd_store_meta_get(s, "generation", buf, sizeof(buf)),
			 -ENOENT);
	assert_int_equal(hyd_store_meta_set(s, "generation", "12"), 0);
	assert_int_equal(hyd_store_meta_get(s, "generation", buf, sizeof(buf)),
			 0);
	assert_string_equal(buf, "12");
	assert_int_equal(hyd_store_meta_set(s, "generation", "1234567"), 0);
	assert_int_equal(hyd_store_meta_get(s, "generation", buf, sizeof(buf)),
			 0);
	assert_string_equal(buf, "1234567");
	assert_int_equal(hyd_store_meta_set(s, "generation", "12345678"), 0);
	assert_int_equal(hyd_store_meta_get(s, "generation", buf, sizeof(buf)),
			 -ERANGE);
	assert_int_equal(hyd_store_meta_set(s, "empty", ""), 0);
	assert_int_equal(hyd_store_meta_get(s, "empty", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	hyd_store_close(s);
}

/* Several threads put overlapping sets of chunks and read them back. */
#define CT_THREADS 4
#define CT_CHUNKS 24

struct ct_arg {
	hyd_store *s;
	struct tchunk *c;
	int first;
	int stored; /* puts that returned 0 */
};

static void *ct_worker(void *p)
{
	struct ct_arg *a = p;
	uint8_t *out = malloc(6000);
	int i, k, r;

	for (k = 0; k < CT_CHUNKS; k++) {
		i = (a->first + k) % CT_CHUNKS;
		r = hyd_store_put(a->s, &a->c[i].id, a->c[i].frame,
				  a->c[i].frame_len);
		if (r == 0)
			a->stored++;
		else if (r != 1)
			a->stored = -1000;
	}
	for (k = 0; k < CT_CHUNKS; k++) {
		size_t got = 0;

		r = hyd_store_get(a->s, &a->c[k].id, out, 6000, &got);
		if (r != 0 || got != a->c[k].raw_len ||
		    memcmp(out, a->c[k].raw, got) != 0)
			a->stored = -1000;
	}
	free(out);
	return NULL;
}

static void test_threads(void **state)
{
	struct fx *fx = *state;
	struct ct_arg a[CT_THREADS];
	pthread_t t[CT_THREADS];
	struct tchunk c[CT_CHUNKS];
	struct hyd_store_stats st;
	hyd_store *s = NULL;
	int i, total = 0;

	for (i = 0; i < CT_CHUNKS; i++)
		tchunk_make(&c[i], (uint32_t)(700 + i), 6000, i % 3 == 0,
			    FRAME_POLICY_AUTO);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < CT_THREADS; i++) {
		a[i] = (struct ct_arg){.s = s, .c = c, .first = i * 5};
		assert_int_equal(pthread_create(&t[i], NULL, ct_worker, &a[i]),
				 0);
	}
	for (i = 0; i < CT_THREADS; i++) {
		pthread_join(t[i], NULL);
		assert_true(a[i].stored >= 0);
		total += a[i].stored;
	}
	assert_int_equal(total, CT_CHUNKS); /* each stored exactly once */
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, CT_CHUNKS);
	hyd_store_close(s);
	for (i = 0; i < CT_CHUNKS; i++)
		tchunk_free(&c[i]);
}

/* Group commit: with each group's sync slowed (the test hook), the puts
 * of 8 threads that arrive during one sync share the next: far fewer
 * fdatasyncs and transactions than puts. Volumes roll every few frames, so
 * groups span two volumes (their old write fd is kept until they are
 * durable). Every chunk is stored once and reads back after a reopen. */
#define GC_THREADS 8
#define GC_PER 12

struct gc_arg {
	hyd_store *s;
	struct tchunk *c; /* GC_PER of its own */
	int rc;
};

static void *gc_worker(void *p)
{
	struct gc_arg *a = p;

	for (int k = 0; k < GC_PER && a->rc == 0; k++) {
		int r = hyd_store_put(a->s, &a->c[k].id, a->c[k].frame,
				      a->c[k].frame_len);

		if (r != 0)
			a->rc = r < 0 ? r : -EEXIST;
	}
	return NULL;
}

static void test_group_commit(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[GC_THREADS * GC_PER];
	struct gc_arg a[GC_THREADS];
	pthread_t t[GC_THREADS];
	struct hyd_store_stats st;
	hyd_store *s = NULL;
	int i, n = GC_THREADS * GC_PER;

	for (i = 0; i < n; i++)
		tchunk_make(&c[i], (uint32_t)(900 + i), 3000, i % 2,
			    FRAME_POLICY_AUTO);
	setenv("FERRY_STORE_SYNC_DELAY_MS", "15", 1);
	setenv("FERRY_VOLUME_ROLL_BYTES", "20000", 1);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < GC_THREADS; i++) {
		a[i] = (struct gc_arg){.s = s, .c = &c[i * GC_PER]};
		assert_int_equal(pthread_create(&t[i], NULL, gc_worker, &a[i]),
				 0);
	}
	for (i = 0; i < GC_THREADS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(a[i].rc, 0);
	}
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, n);
	assert_true(st.vols > 2);
	/* 96 puts; a group is whatever arrived during the last 15 ms sync */
	assert_true(st.groups <= (uint64_t)n / 3);
	assert_true(st.syncs >= st.groups && st.syncs <= 2 * st.groups);
	print_message("%d puts: %llu groups, %llu fdatasyncs, %llu volumes\n",
		      n, (unsigned long long)st.groups,
		      (unsigned long long)st.syncs,
		      (unsigned long long)st.vols);
	for (i = 0; i < n; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 1);
	hyd_store_close(s);
	unsetenv("FERRY_STORE_SYNC_DELAY_MS");
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < n; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);
	for (i = 0; i < n; i++)
		tchunk_free(&c[i]);
}

/* The parent's side of a kill mid-group: once the child pid has written
 * c[3..6] after the committed c[0..2] (the volume is `want` bytes), kill it;
 * the reopened store holds the three, dropped the tail (`good` bytes) and
 * takes the four again. Frees c. */
static void kill_mid_check(struct fx *fx, struct tchunk *c, pid_t pid,
			   off_t good, off_t want)
{
	hyd_store *s = NULL;
	int i, status;

	for (i = 0;
	     i < 1000 && file_size(fx->dir, "volumes/00000001.vol") < want; i++)
		usleep(10000);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"), want);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(file_size(fx->dir, "volumes/00000001.vol"), good);
	for (i = 0; i < 3; i++)
		check_get(s, &c[i]);
	for (i = 3; i < 7; i++) {
		assert_int_equal(hyd_store_has(s, &c[i].id), 0);
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	}
	for (i = 0; i < 7; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);
	for (i = 0; i < 7; i++)
		tchunk_free(&c[i]);
}

/* kill -9 in the middle of a group: a child stores three chunks, then
 * four threads put four more with each group's sync held back; once all
 * four frames are in the volume (written, not durable, not indexed), the
 * child dies. The reopened store has the three, drops the unindexed tail,
 * and takes the four again. */
static void test_kill_mid_group(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[7];
	hyd_store *s = NULL;
	off_t good, want;
	pid_t pid;
	int i;

	good = store_first(fx, c, 7, 3, 950, 5000);
	want = good;
	for (i = 3; i < 7; i++)
		want += (off_t)c[i].frame_len;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct gc_arg ca[4];
		pthread_t ct[4];

		setenv("FERRY_STORE_SYNC_DELAY_MS", "60000", 1);
		if (hyd_store_open(fx->dir, 0, &s) != 0)
			_exit(3);
		for (i = 0; i < 4; i++) {
			ca[i] = (struct gc_arg){.s = s, .c = &c[3 + i]};
			pthread_create(&ct[i], NULL, gc_worker, &ca[i]);
		}
		for (i = 0; i < 4; i++)
			pthread_join(ct[i], NULL);
		_exit(4); /* never: the parent kills us first */
	}
	kill_mid_check(fx, c, pid, good, want);
}

/* Async puts (hyd_store_put_async): a put returns once appended, and its
 * group holds every frame appended during the previous sync, so one
 * thread makes groups of many. Each callback comes once, after the rows
 * are committed: 0 for a stored frame, 1 for an id put again while its
 * group was still syncing. */
#define AS_N 60

struct as_tally {
	pthread_mutex_t mu;
	int calls[AS_N + 1]; /* by arg index; [AS_N]: the duplicate */
	int rc[AS_N + 1];
};

struct as_arg {
	struct as_tally *t;
	int i;
};

static void as_done(void *arg, int rc)
{
	struct as_arg *a = arg;
	struct as_tally *t = a->t;

	pthread_mutex_lock(&t->mu);
	t->calls[a->i]++;
	t->rc[a->i] = rc;
	pthread_mutex_unlock(&t->mu);
}

static int as_total(struct as_tally *t)
{
	int n = 0;

	pthread_mutex_lock(&t->mu);
	for (int i = 0; i <= AS_N; i++)
		n += t->calls[i];
	pthread_mutex_unlock(&t->mu);
	return n;
}

static void test_async_put(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[AS_N];
	struct as_arg a[AS_N + 1];
	struct as_tally t = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct hyd_store_stats st;
	hyd_store *s = NULL;
	int i, k;

	for (i = 0; i < AS_N; i++)
		tchunk_make(&c[i], (uint32_t)(1200 + i), 4000, i % 2,
			    FRAME_POLICY_AUTO);
	setenv("FERRY_STORE_SYNC_DELAY_MS", "20", 1);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i <= AS_N; i++)
		a[i] = (struct as_arg){&t, i};
	assert_int_equal(hyd_store_put_async(s, &c[0].id, c[0].frame,
					     c[0].frame_len, NULL, NULL),
			 -EINVAL);
	for (i = 0; i < AS_N; i++) {
		assert_int_equal(hyd_store_put_async(s, &c[i].id, c[i].frame,
						     c[i].frame_len, as_done,
						     &a[i]),
				 0);
		/* The first one again while it cannot be durable yet (its
		 * sync sleeps 20 ms): told 1 when its group commits. */
		if (i == 0)
			assert_int_equal(hyd_store_put_async(
					     s, &c[0].id, c[0].frame,
					     c[0].frame_len, as_done, &a[AS_N]),
					 0);
	}
	/* One thread putting: groups of many only if no put waited. */
	for (k = 0; k < 500 && as_total(&t) < AS_N + 1; k++)
		usleep(10000);
	assert_int_equal(as_total(&t), AS_N + 1);
	for (i = 0; i < AS_N; i++) {
		assert_int_equal(t.calls[i], 1);
		assert_int_equal(t.rc[i], 0);
		assert_int_equal(hyd_store_has(s, &c[i].id), 1);
	}
	assert_int_equal(t.rc[AS_N], 1);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, AS_N);
	print_message("%d async puts from one thread: %llu groups\n", AS_N,
		      (unsigned long long)st.groups);
	assert_true(st.groups <= AS_N / 4);
	/* Stored now: not queued, no callback. */
	assert_int_equal(hyd_store_put_async(s, &c[1].id, c[1].frame,
					     c[1].frame_len, as_done, &a[1]),
			 1);
	hyd_store_close(s);
	assert_int_equal(t.calls[1], 1);
	unsetenv("FERRY_STORE_SYNC_DELAY_MS");
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < AS_N; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);
	for (i = 0; i < AS_N; i++)
		tchunk_free(&c[i]);
}

/* Close makes every appended async put durable and tells it first. */
static void test_async_close_flushes(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[8];
	struct as_arg a[8];
	struct as_tally t = {.mu = PTHREAD_MUTEX_INITIALIZER};
	hyd_store *s = NULL;
	int i;

	for (i = 0; i < 8; i++) {
		tchunk_make(&c[i], (uint32_t)(1300 + i), 2500, 1,
			    FRAME_POLICY_AUTO);
		a[i] = (struct as_arg){&t, i};
	}
	setenv("FERRY_STORE_SYNC_DELAY_MS", "30", 1);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 8; i++)
		assert_int_equal(hyd_store_put_async(s, &c[i].id, c[i].frame,
						     c[i].frame_len, as_done,
						     &a[i]),
				 0);
	hyd_store_close(s);
	unsetenv("FERRY_STORE_SYNC_DELAY_MS");
	for (i = 0; i < 8; i++) {
		assert_int_equal(t.calls[i], 1);
		assert_int_equal(t.rc[i], 0);
	}
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 8; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);
	for (i = 0; i < 8; i++)
		tchunk_free(&c[i]);
}

/* kill -9 with async puts appended and their group not durable: the
 * reopened store has only what was committed, and takes the rest again. */
static void test_kill_mid_async_group(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[7];
	struct as_arg a[7];
	struct as_tally t = {.mu = PTHREAD_MUTEX_INITIALIZER};
	hyd_store *s = NULL;
	off_t good, want;
	pid_t pid;
	int i;

	good = store_first(fx, c, 7, 3, 1400, 5000);
	want = good;
	for (i = 3; i < 7; i++)
		want += (off_t)c[i].frame_len;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("FERRY_STORE_SYNC_DELAY_MS", "60000", 1);
		if (hyd_store_open(fx->dir, 0, &s) != 0)
			_exit(3);
		for (i = 3; i < 7; i++) {
			a[i] = (struct as_arg){&t, i};
			if (hyd_store_put_async(s, &c[i].id, c[i].frame,
						c[i].frame_len, as_done,
						&a[i]) != 0)
				_exit(5);
		}
		pause();
		_exit(4); /* never: the parent kills us first */
	}
	kill_mid_check(fx, c, pid, good, want);
}

/* A catalog at DIR/catalogs/NAME naming the chunks of c[i] for each i in
 * want (one file each), or an overlay-shaped file (chunk rows only). */
static void gc_catalog(const char *dir, const char *name, struct tchunk *c,
		       const int *want, size_t n)
{
	char p[256];
	cat_writer *w;
	struct cat_inode in;

	snprintf(p, sizeof(p), "%s/catalogs", dir);
	mkdir(p, 0700);
	snprintf(p, sizeof(p), "%s/catalogs/%s", dir, name);
	w = tsup_cat_begin(p);
	for (size_t i = 0; i < n; i++) {
		char fname[32];

		memset(&in, 0, sizeof(in));
		in.ino = 10 + i;
		in.kind = CAT_REG;
		in.mode = S_IFREG | 0644;
		in.nlink = 1;
		in.size = c[want[i]].raw_len;
		assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
		snprintf(fname, sizeof(fname), "f%zu", i);
		assert_int_equal(cat_writer_add_dirent(w, CAT_ROOT_INO, fname,
						       strlen(fname), in.ino),
				 0);
		assert_int_equal(cat_writer_add_chunk(w, in.ino, 0,
						      (uint32_t)in.size,
						      &c[want[i]].id),
				 0);
	}
	assert_int_equal(cat_writer_commit(w), 0);
}

static blkcnt_t blocks_of(const char *dir, const char *name)
{
	char p[256];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/volumes/%s", dir, name);
	assert_int_equal(stat(p, &sb), 0);
	return sb.st_blocks;
}

/* Collection drops exactly the chunks no catalog in catalogs/ names (an
 * overlay's manifests count), punches their frames out, removes a volume
 * left empty (not the one being appended to), keeps the complete mark;
 * a file in catalogs/ that is not a catalog stops it before anything
 * goes. */
static void test_gc(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[4];
	struct hyd_gc_result res;
	const int cat_a[] = {0}, ov_a[] = {3};
	hyd_store *s = NULL;
	char buf[64], p[256];
	blkcnt_t before;
	size_t i;

	/* One chunk a volume: c[1] and c[2] alone in volumes 2 and 3. */
	setenv("FERRY_VOLUME_ROLL_BYTES", "100000", 1);
	for (i = 0; i < 4; i++)
		tchunk_make(&c[i], 500 + (uint32_t)i, 120000, 0,
			    FRAME_POLICY_RAW);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 4; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	assert_int_equal(hyd_store_meta_set(s, HYD_STORE_META_COMPLETE, "x"),
			 0);
	gc_catalog(fx->dir, "1.db", c, cat_a, 1);
	/* the overlay of generation 1: c[3] is a pending file's chunk */
	gc_catalog(fx->dir, "1.overlay.db", c, ov_a, 1);
	/* garbage in catalogs/: nothing may go */
	snprintf(p, sizeof(p), "%s/catalogs/7.db", fx->dir);
	tsup_write_file(p, "not a catalog, not sqlite at all........", 40);
	assert_true(hyd_store_gc(s, &res) < 0);
	assert_int_equal(res.dropped, 0);
	for (i = 0; i < 4; i++)
		assert_int_equal(hyd_store_has(s, &c[i].id), 1);
	unlink(p);

	before = blocks_of(fx->dir, "00000002.vol");
	assert_int_equal(hyd_store_gc(s, &res), 0);
	assert_int_equal(res.catalogs, 2);
	assert_int_equal(res.dropped, 2);
	assert_int_equal(res.dropped_bytes, c[1].frame_len + c[2].frame_len);
	assert_int_equal(res.kept, 2);
	assert_int_equal(hyd_store_has(s, &c[0].id), 1);
	assert_int_equal(hyd_store_has(s, &c[1].id), 0);
	assert_int_equal(hyd_store_has(s, &c[2].id), 0);
	assert_int_equal(hyd_store_has(s, &c[3].id), 1);
	check_get(s, &c[0]);
	check_get(s, &c[3]);
	/* volume 2 held only c[1], and volume 4 (c[3]) is the newest: volume 2
	 * and 3 are gone */
	assert_true(before > 0);
	assert_int_equal(file_size(fx->dir, "volumes/00000002.vol"), -1);
	assert_int_equal(file_size(fx->dir, "volumes/00000003.vol"), -1);
	assert_int_equal(
	    hyd_store_meta_get(s, HYD_STORE_META_COMPLETE, buf, sizeof(buf)),
	    0);
	/* nothing more to drop; a dropped chunk can come back */
	assert_int_equal(hyd_store_gc(s, &res), 0);
	assert_int_equal(res.dropped, 0);
	assert_int_equal(hyd_store_put(s, &c[1].id, c[1].frame, c[1].frame_len),
			 0);
	check_get(s, &c[1]);
	hyd_store_close(s);
	for (i = 0; i < 4; i++)
		tchunk_free(&c[i]);
}

/* A collection cut short after its rows went: the frames it recorded in
 * gc_free are punched at the next open, before anything is appended, and
 * forgotten. */
/* Dead frames between live ones in one volume: a collection gives back
 * their space (side by side ones in one punch) and never a byte of a
 * live neighbour. */
static void test_gc_neighbours(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[8];
	struct hyd_gc_result res;
	const int keep[] = {0, 3, 4, 7};
	hyd_store *s = NULL;
	size_t i;

	for (i = 0; i < 8; i++)
		tchunk_make(&c[i], 700 + (uint32_t)i, 10000 + 777 * i, 0,
			    FRAME_POLICY_RAW);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 8; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	gc_catalog(fx->dir, "1.db", c, keep, 4);
	assert_int_equal(hyd_store_gc(s, &res), 0);
	assert_int_equal(res.dropped, 4);
	for (i = 0; i < 4; i++)
		check_get(s, &c[keep[i]]);
	hyd_store_close(s);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 4; i++)
		check_get(s, &c[keep[i]]);
	hyd_store_close(s);
	for (i = 0; i < 8; i++)
		tchunk_free(&c[i]);
}

static void test_gc_crash(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[3];
	hyd_store *s = NULL;
	blkcnt_t before, after;
	char sql[256];
	size_t i;

	for (i = 0; i < 3; i++)
		tchunk_make(&c[i], 600 + (uint32_t)i, 200000, 0,
			    FRAME_POLICY_RAW);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	hyd_store_close(s);
	/* what the sweep's transaction leaves: c[1]'s row gone, its frame
	 * in gc_free */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO gc_free SELECT vol, off, frame_len FROM chunk "
		 "WHERE off = %zu; DELETE FROM chunk WHERE off = %zu",
		 c[0].frame_len, c[0].frame_len);
	db_exec(fx->dir, sql);
	before = blocks_of(fx->dir, "00000001.vol");
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	after = blocks_of(fx->dir, "00000001.vol");
	/* 200,000 bytes punched: at least 190,000 of them in whole blocks */
	assert_true((before - after) * 512 >= 190000);
	check_get(s, &c[0]);
	check_get(s, &c[2]);
	assert_int_equal(hyd_store_has(s, &c[1].id), 0);
	hyd_store_close(s);
	/* and gc_free is empty: a second open punches nothing */
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_int_equal(blocks_of(fx->dir, "00000001.vol"), after);
	check_get(s, &c[2]);
	hyd_store_close(s);
	for (i = 0; i < 3; i++)
		tchunk_free(&c[i]);
}

/* ---- caches from before volumes (packs/NNNNNNNN.pack, column pack) ---- */

static int64_t db_int(const char *dir, const char *sql)
{
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	int64_t v = -1;
	char p[128];

	snprintf(p, sizeof(p), "%s/state.db", dir);
	assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

static int exists(const char *dir, const char *name)
{
	struct stat sb;
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &sb) == 0;
}

#define MG_N 12

static void mg_chunks(struct tchunk *c)
{
	for (int i = 0; i < MG_N; i++)
		tchunk_make(&c[i], 1500 + (uint32_t)i, 6000, i % 2,
			    i % 3 ? FRAME_POLICY_AUTO : FRAME_POLICY_RAW);
}

/* Store c[0..MG_N) in a new store at dir, in several volumes (rolled at
 * 20000 bytes: 3 frames each); how many volumes. */
static int mg_store(const char *dir, struct tchunk *c)
{
	struct hyd_store_stats st;
	hyd_store *s = NULL;

	setenv("FERRY_VOLUME_ROLL_BYTES", "20000", 1);
	assert_int_equal(hyd_store_open(dir, 0, &s), 0);
	for (int i = 0; i < MG_N; i++)
		assert_int_equal(
		    hyd_store_put(s, &c[i].id, c[i].frame, c[i].frame_len), 0);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	hyd_store_close(s);
	assert_true(st.vols >= 3);
	return (int)st.vols;
}

/* The store at dir is in the volumes layout (no packs/, every volume
 * NNNNNNNN.vol, schema 5 with the column vol, nothing left in gc_free)
 * and every chunk of c reads back. */
static void mg_check(const char *dir, struct tchunk *c)
{
	struct hyd_store_stats st;
	hyd_store *s = NULL;

	assert_int_equal(hyd_store_open(dir, 0, &s), 0);
	assert_false(exists(dir, "packs"));
	assert_int_equal(rename_ext(dir, "volumes", ".pack", NULL, 0), 0);
	assert_int_equal(hyd_store_stats(s, &st), 0);
	assert_int_equal(st.chunks, MG_N);
	assert_true(st.vols >= 3);
	assert_int_equal(count_vols(dir), (int)st.vols);
	assert_int_equal(rename_ext(dir, "volumes", ".vol", NULL, 0),
			 (int)st.vols);
	for (int i = 0; i < MG_N; i++)
		check_get(s, &c[i]);
	hyd_store_close(s);
	assert_int_equal(db_int(dir, "PRAGMA user_version"), 5);
	assert_int_equal(db_int(dir, "SELECT COUNT(vol) FROM chunk"), MG_N);
	assert_int_equal(db_int(dir, "SELECT COUNT(vol) FROM gc_free"), 0);
}

/* A cache made before volumes: its files and index are moved over at
 * open, every chunk reads back from the new names, and a collection the
 * old layout had cut short (a gc_free row naming a pack) is finished. */
static void test_migrate_from_packs(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[MG_N];
	hyd_store *s = NULL;
	int nvols;

	mg_chunks(c);
	nvols = mg_store(fx->dir, c);
	/* c[0] is the first frame of pack 1: its row went, its frame is in
	 * gc_free, as a collection cut short leaves them. */
	to_packs_layout(fx->dir,
			"INSERT INTO gc_free SELECT pack, off, frame_len"
			" FROM chunk WHERE pack = 1 AND off = 0;"
			"DELETE FROM chunk WHERE pack = 1 AND off = 0;"
			"PRAGMA user_version = 3");
	assert_false(exists(fx->dir, "volumes"));
	assert_int_equal(rename_ext(fx->dir, "packs", ".pack", NULL, 0), nvols);
	assert_true(exists(fx->dir, "packs/00000001.pack"));

	assert_int_equal(hyd_store_open(fx->dir, 0, &s), 0);
	assert_false(exists(fx->dir, "packs"));
	assert_true(exists(fx->dir, "volumes/00000001.vol"));
	assert_int_equal(count_vols(fx->dir), nvols);
	assert_int_equal(hyd_store_has(s, &c[0].id), 0);
	for (int i = 1; i < MG_N; i++)
		check_get(s, &c[i]);
	/* appends go on in the newest volume, under its new name */
	assert_int_equal(hyd_store_put(s, &c[0].id, c[0].frame, c[0].frame_len),
			 0);
	check_get(s, &c[0]);
	hyd_store_close(s);
	mg_check(fx->dir, c);
	for (int i = 0; i < MG_N; i++)
		tchunk_free(&c[i]);
}

/* A crash at each point of the move leaves what the next open finishes:
 * the index moved or not, none, some or all of the files renamed, the
 * directory not yet. (The index not moved with files renamed is not a
 * state the store leaves, it moves the index first, but the two steps do
 * not depend on each other.) */
static void test_migrate_crash(void **state)
{
	static const struct {
		int index_moved;
		int renamed; /* 0 none, 1 the odd ones, 2 all */
	} cases[] = {{0, 0}, {1, 0}, {1, 1}, {1, 2}, {0, 1}};
	struct fx *fx = *state;
	struct tchunk c[MG_N];
	char dir[128];

	mg_chunks(c);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int nvols, n;

		snprintf(dir, sizeof(dir), "%s/c%zu", fx->dir, k);
		nvols = mg_store(dir, c);
		to_packs_layout(dir, "PRAGMA user_version = 3");
		if (cases[k].index_moved)
			db_exec(dir,
				"ALTER TABLE chunk RENAME COLUMN pack TO vol;"
				"ALTER TABLE gc_free RENAME COLUMN pack TO vol;"
				"PRAGMA user_version = 4");
		n = cases[k].renamed ? rename_ext(dir, "packs", ".pack", ".vol",
						  cases[k].renamed == 1)
				     : 0;
		if (cases[k].renamed == 1)
			assert_true(n > 0 && n < nvols);
		assert_int_equal(rename_ext(dir, "packs", ".pack", NULL, 0) +
				     rename_ext(dir, "packs", ".vol", NULL, 0),
				 nvols);
		mg_check(dir, c);
		/* and once moved, an open finds nothing to do */
		mg_check(dir, c);
	}
	for (int i = 0; i < MG_N; i++)
		tchunk_free(&c[i]);
}

/* What the store will not guess: packs/ with files beside volumes/, and a
 * volume under both names. The open fails (the index is moved by then,
 * the files stay where they are); once the stray one is gone the next
 * open finishes the move. An empty packs/ beside volumes/ (an older ferry
 * makes one before it refuses a newer state.db) is removed. */
static void test_migrate_refuse(void **state)
{
	struct fx *fx = *state;
	struct tchunk c[MG_N];
	hyd_store *s = NULL;
	char a[256], b[256];
	int nvols;

	mg_chunks(c);
	nvols = mg_store(fx->dir, c);
	to_packs_layout(fx->dir, "PRAGMA user_version = 3");
	snprintf(a, sizeof(a), "%s/volumes", fx->dir);
	assert_int_equal(mkdir(a, 0700), 0);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), -EEXIST);
	assert_null(s);
	assert_int_equal(rename_ext(fx->dir, "packs", ".pack", NULL, 0), nvols);
	assert_int_equal(rmdir(a), 0);

	snprintf(a, sizeof(a), "%s/packs/00000002.pack", fx->dir);
	snprintf(b, sizeof(b), "%s/packs/00000002.vol", fx->dir);
	assert_int_equal(link(a, b), 0);
	assert_int_equal(hyd_store_open(fx->dir, 0, &s), -EEXIST);
	assert_true(exists(fx->dir, "packs/00000002.pack"));
	assert_true(exists(fx->dir, "packs/00000002.vol"));
	assert_false(exists(fx->dir, "volumes"));
	assert_int_equal(unlink(b), 0);
	mg_check(fx->dir, c);

	snprintf(a, sizeof(a), "%s/packs", fx->dir);
	assert_int_equal(mkdir(a, 0700), 0);
	mg_check(fx->dir, c);
	for (int i = 0; i < MG_N; i++)
		tchunk_free(&c[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_roundtrip_codecs, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_put_idempotent, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_busy, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_not_a_dir, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_after_roll, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_newer_schema, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_header_corruption, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_frame_checksum, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_vol_roll, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_meta, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill_mid_group, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_async_put, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_async_close_flushes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_gc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gc_crash, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gc_neighbours, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_kill_mid_async_group, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_from_packs, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_crash, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_refuse, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
