/*
 * tests/fuzz/fuzz_manifest.c — a manifests body (GET /v1/NS/manifest/...
 * and /manifests/..., docs/protocol.md "Manifests") is untrusted input on
 * the destination: cat_overlay_put_wire checks it whole against the
 * catalog and stores it in the overlay, or nothing.
 *
 * The catalog is fixed, made on the first input (generation 1, params
 * default): pending regular files with inos 2..9 and the sizes in SIZES
 * below, ino 10 a file whose manifest is in the catalog, ino 11 a
 * directory. Input layout: u64 first, u64 last (little-endian: the range
 * asked for), then the body. Each input gets a fresh overlay.
 * Properties (a violation aborts): a refused body stores nothing; an
 * accepted one leaves every file it stored readable through the reader
 * with chunks that cover exactly its catalog size.
 * Verdict (fuzz_verdict.h): accepted when put_wire returns 0.
 * Corpus (tests/fuzz/corpus/manifest): tests/fuzz/corpus/make_manifest.py
 * writes bodies for this catalog.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sizes of the pending files 2..9 (make_manifest.py knows them too). */
static const uint64_t SIZES[] = {0, 1, 100, 65536, 70000, 300000, 5, 4096};
#define FIRST_PENDING 2u
#define N_PENDING (sizeof(SIZES) / sizeof(SIZES[0]))

static char dir[64], catpath[96], ovpath[96];
static cat_reader *cat;

static void make_catalog(void)
{
	struct cat_meta m;
	struct cat_inode in;
	struct cat_chunk c = {0};
	cat_writer *w = NULL;
	char name[16];

	memset(&m, 0, sizeof(m));
	m.generation = 1;
	chunk_params_default(&m.params);
	if (cat_writer_open(catpath, &m, &w) != 0)
		abort();
	memset(&in, 0, sizeof(in));
	in.ino = CAT_ROOT_INO;
	in.kind = CAT_DIR;
	in.mode = 040755;
	in.nlink = 3;
	if (cat_writer_add_inode(w, &in, NULL, 0) != 0)
		abort();
	for (uint64_t i = 0; i < N_PENDING + 2; i++) {
		memset(&in, 0, sizeof(in));
		in.ino = FIRST_PENDING + i;
		in.nlink = 1;
		if (i < N_PENDING) {
			in.kind = CAT_REG;
			in.mode = 0100644;
			in.size = SIZES[i];
		} else if (i == N_PENDING) {
			in.kind = CAT_REG;
			in.mode = 0100644;
			in.size = 10;
		} else {
			in.kind = CAT_DIR;
			in.mode = 040755;
			in.nlink = 2;
		}
		if (cat_writer_add_inode(w, &in, NULL, 0) != 0)
			abort();
		snprintf(name, sizeof(name), "f%llu",
			 (unsigned long long)in.ino);
		if (cat_writer_add_dirent(w, CAT_ROOT_INO, name, strlen(name),
					  in.ino) != 0)
			abort();
		if (i < N_PENDING && cat_writer_add_pending(w, in.ino) != 0)
			abort();
	}
	c.len = 10;
	memset(c.id.b, 0x5a, sizeof(c.id.b));
	if (cat_writer_add_chunk(w, FIRST_PENDING + N_PENDING, 0, 10, &c.id) !=
	    0)
		abort();
	if (cat_writer_commit(w) != 0 || cat_reader_open(catpath, &cat) != 0)
		abort();
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Every file the overlay holds covers its size exactly through the
 * reader (with the overlay attached); abort otherwise. How many it holds
 * with a manifest is *ret. */
static void check_stored(cat_reader *r, size_t *ret)
{
	struct cat_chunk cs[64];
	size_t n, held = 0;

	for (size_t i = 0; i < N_PENDING; i++) {
		uint64_t ino = FIRST_PENDING + i, off = 0;
		int st = cat_manifest_state(r, ino);

		if (st != CAT_MANIFEST_LOCAL)
			continue;
		held++;
		while (off < SIZES[i]) {
			if (cat_chunks_range(r, ino, off, SIZES[i] - off, cs,
					     64, &n) != 0 ||
			    n == 0 || cs[0].off != off)
				abort();
			off = cs[n - 1].off + cs[n - 1].len;
		}
		if (off != SIZES[i])
			abort();
	}
	*ret = held;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cat_overlay *ov = NULL;
	cat_reader *r = NULL;
	size_t files = 0, held = 0;
	int rc;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz_manifest.XXXXXX");
		if (!mkdtemp(dir))
			abort();
		snprintf(catpath, sizeof(catpath), "%s/1.db", dir);
		snprintf(ovpath, sizeof(ovpath), "%s/1.overlay.db", dir);
		make_catalog();
	}
	if (size < 16) {
		fuzz_report(0);
		return 0;
	}
	unlink(ovpath);
	if (cat_overlay_open(ovpath, &ov) != 0)
		abort();
	rc = cat_overlay_put_wire(ov, cat, le64(data), le64(data + 8),
				  data + 16, size - 16, &files);
	/* What the overlay holds now, read as the mount reads it. */
	if (cat_reader_open(catpath, &r) != 0 ||
	    cat_reader_attach_overlay(r, ovpath) != 0)
		abort();
	check_stored(r, &held);
	cat_reader_close(r);
	cat_overlay_close(ov);
	if (rc != 0 && held != 0)
		abort(); /* a refused body stored something */
	fuzz_report(rc == 0);
	return 0;
}
