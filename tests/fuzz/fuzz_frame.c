/*
 * tests/fuzz/fuzz_frame.c — fuzz the frame decoder with arbitrary bytes.
 *
 * The input is treated as one frame off the wire, with the default max
 * chunk size as the catalog's limit. Properties (a violation aborts):
 *   - a successful decode yields exactly the header's raw_len bytes, and
 *     only for input that is exactly one frame;
 *   - decode never succeeds where the header parser refuses;
 *   - decoded data survives a re-encode/decode round trip unchanged,
 *     under AUTO (which probes for byte planes) and forced into 2 and 4
 *     byte planes (any length: the tails of the plane layout);
 *   - a stream holding the frame followed by more bytes parses the same.
 * Out-buffers are heap blocks of exactly raw_len so ASan sees overruns.
 * Verdict (fuzz_verdict.h): accepted when the whole input decodes as one
 * frame.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_reencode(const uint8_t *raw, size_t raw_len)
{
	static const enum frame_policy pols[] = {FRAME_POLICY_AUTO,
						 FRAME_POLICY_ZSTD_SHUF2,
						 FRAME_POLICY_ZSTD_SHUF4};
	size_t cap = frame_bound(raw_len), flen = 0, got = 0;
	uint8_t *frame = malloc(cap);
	uint8_t *back = malloc(raw_len);

	if (!frame || !back)
		abort();
	for (size_t k = 0; k < sizeof(pols) / sizeof(*pols); k++) {
		if (frame_encode(NULL, pols[k], 0, raw, raw_len, frame, cap,
				 &flen) != 0)
			abort();
		if (frame_decode(NULL, frame, flen, CHUNK_MAX_DEFAULT, back,
				 raw_len, &got) != 0)
			abort();
		if (got != raw_len || memcmp(back, raw, raw_len) != 0)
			abort();
	}
	free(back);
	free(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame_info fi;
	uint8_t *out;
	size_t got = 0;
	int hr, r;

	hr = frame_header_parse(data, size, CHUNK_MAX_DEFAULT, &fi);
	if (hr != 0) {
		uint8_t one;

		if (hr != -EBADMSG)
			abort();
		/* The decoder must refuse what the parser refuses. */
		if (frame_decode(NULL, data, size, CHUNK_MAX_DEFAULT, &one, 1,
				 &got) != -EBADMSG)
			abort();
		fuzz_report(0);
		return 0;
	}
	if (fi.raw_len == 0 || fi.raw_len > CHUNK_MAX_DEFAULT ||
	    fi.frame_len != FRAME_HDR_LEN + (size_t)fi.stored_len)
		abort();

	out = malloc(fi.raw_len);
	if (!out)
		abort();
	r = frame_decode(NULL, data, size, CHUNK_MAX_DEFAULT, out, fi.raw_len,
			 &got);
	fuzz_report(r == 0);
	if (r == 0) {
		if (got != fi.raw_len || size != fi.frame_len)
			abort();
		check_reencode(out, got);
	} else if (r != -EBADMSG) {
		abort();
	}
	/* If the buffer holds more than one frame, decoding just the first
	 * frame_len bytes is the stream case. */
	if (size > fi.frame_len) {
		r = frame_decode(NULL, data, fi.frame_len, CHUNK_MAX_DEFAULT,
				 out, fi.raw_len, &got);
		if (r == 0 && got != fi.raw_len)
			abort();
		if (r != 0 && r != -EBADMSG)
			abort();
	}
	free(out);
	return 0;
}
