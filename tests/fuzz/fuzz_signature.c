/*
 * fuzz_signature.c — cat_stmt_parse, the parser of a generation's signed
 * statement (catalog.h; what a hydrator with --trust-key reads from
 * GET /v1/NS/signature/GEN), on arbitrary bytes, and cat_stmt_verify with
 * a fixed key. The verdict (fuzz_verdict.h) is the parser's: a well-formed
 * statement is accepted whoever signed it; the signature is checked apart.
 *
 * What must hold for every input, else abort():
 *   - an accepted input is canonical: cat_stmt_format of its fields gives
 *     exactly its bytes back, its signature line starts at signed_len,
 *     its parent is before its generation;
 *   - cat_stmt_verify refuses as not a statement (-EBADMSG) exactly what
 *     the parser refuses, and accepts (0) only a parsed statement signed
 *     by the corpus key.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The public half of the key that signed the corpus's ok_gen5 and friends
 * (tests/fuzz/corpus/README). */
static const uint8_t KEY[CAT_SIGN_PUB_LEN] = {
    0xe6, 0x38, 0xa3, 0x7c, 0x58, 0xa8, 0x86, 0x2d, 0xfd, 0xf4, 0xce,
    0xc4, 0x5e, 0xac, 0x90, 0x4d, 0xfc, 0xf7, 0x73, 0xd6, 0x87, 0x00,
    0xa6, 0x73, 0x45, 0x4a, 0x82, 0xc8, 0xeb, 0x6a, 0xfd, 0x18,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cat_stmt s, v, f;
	char again[CAT_STMT_MAX + 1];
	size_t n = 0;
	int ok, vr;

	ok = cat_stmt_parse(data, size, &s) == 0;
	fuzz_report(ok);
	if (ok) {
		f = s;
		if (cat_stmt_format(&f, again, sizeof(again), &n) != 0 ||
		    n != size || memcmp(again, data, size) != 0 ||
		    f.signed_len != s.signed_len)
			abort();
		if (s.signed_len >= size ||
		    memcmp(data + s.signed_len, "signature ", 10) != 0)
			abort();
		if (s.parent >= s.generation || s.ns[0] == '\0')
			abort();
	}
	vr = cat_stmt_verify(data, size, KEY, &v);
	if (ok ? vr == -EBADMSG : vr != -EBADMSG)
		abort();
	if (vr == 0 && (!ok || v.generation != s.generation))
		abort();
	return 0;
}
