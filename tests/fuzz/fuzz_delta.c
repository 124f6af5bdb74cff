/*
 * tests/fuzz/fuzz_delta.c — a delta catalog (GET /v1/NS/delta/FROM/TO) is
 * untrusted input on the destination: a hydrator or ferry sync applies it
 * to the catalog it holds and keeps the result only if the digest of its
 * rows is the one the delta names (catalog/cat_delta.c).
 *
 * Input layout (so a fuzzer can vary both, and the corpus can carry real
 * pairs): a u32 little-endian length n, n bytes of the base catalog, then
 * the delta file (uncompressed SQLite, as the client holds it after zstd).
 * Both are written to temp files and cat_delta_apply makes the result.
 * Properties (a violation aborts): a refused delta leaves no result file;
 * an accepted one's result has the digest the delta named (checked again
 * with cat_digest); the reader copes with whatever the result is.
 * Verdict (fuzz_verdict.h): accepted when cat_delta_apply returns 0.
 * Corpus (tests/fuzz/corpus/delta): tests/fuzz/corpus/make_delta.sh.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void write_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
		abort();
}

/* The digest the delta names, or "" (read with SQLite directly). */
static void named_digest(const char *delta, char out[65])
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	const unsigned char *v;

	out[0] = '\0';
	if (sqlite3_open_v2(delta, &db, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_prepare_v2(db,
			       "SELECT value FROM dmeta WHERE key = "
			       "'to_digest'",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW &&
	    (v = sqlite3_column_text(st, 0)) && strlen((const char *)v) < 65)
		snprintf(out, 65, "%s", (const char *)v);
	sqlite3_finalize(st);
	sqlite3_close(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char base[96], delta[96], out[96], want[65], got[65];
	uint64_t from = 0, to = 0; /* reported; callers check them */
	cat_reader *r = NULL;
	struct cat_meta m;
	uint32_t n;
	int rc;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz_delta.XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
	if (size < 4) {
		fuzz_report(0);
		return 0;
	}
	n = (uint32_t)data[0] | (uint32_t)data[1] << 8 |
	    (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
	if (n > size - 4) {
		fuzz_report(0);
		return 0;
	}
	snprintf(base, sizeof(base), "%s/base.db", dir);
	snprintf(delta, sizeof(delta), "%s/delta.db", dir);
	snprintf(out, sizeof(out), "%s/out.db", dir);
	write_file(base, data + 4, n);
	write_file(delta, data + 4 + n, size - 4 - n);
	unlink(out);
	rc = cat_delta_apply(base, delta, out, &from, &to);
	if (rc != 0) {
		if (access(out, F_OK) == 0)
			abort(); /* a refused delta left a result */
	} else {
		named_digest(delta, want);
		if (cat_digest(out, got) != 0 || strcmp(got, want) != 0)
			abort(); /* accepted a result not the named one */
		/* Rows a delta made up may not read as a catalog, or as one
		 * of another generation than it says: callers open and check
		 * the result (cf_check_catalog) before it is installed. Only
		 * that the reader copes with it is checked here. */
		if (cat_reader_open(out, &r) == 0) {
			cat_reader_meta(r, &m);
			cat_reader_close(r);
		}
	}
	unlink(base);
	unlink(delta);
	unlink(out);
	fuzz_report(rc == 0);
	return 0;
}
