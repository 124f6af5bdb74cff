/*
 * fuzz_name.c — cat_name_check and cat_xattr_name_check on arbitrary bytes:
 * whatever they accept must be a single safe path component. The verdict
 * (fuzz_verdict.h) is cat_name_check's: the corpus names path components.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int ok = cat_name_check(data, size) == 0;

	fuzz_report(ok);
	if (ok) {
		/* Accepted: 1..255 bytes, no '/', no NUL, not "." or "..". */
		if (size == 0 || size > CAT_NAME_MAX)
			abort();
		if (memchr(data, '/', size) || memchr(data, 0, size))
			abort();
		if ((size == 1 && data[0] == '.') ||
		    (size == 2 && data[0] == '.' && data[1] == '.'))
			abort();
	}
	if (cat_xattr_name_check(data, size) == 0) {
		if (size == 0 || size > CAT_XATTR_NAME_MAX ||
		    memchr(data, 0, size))
			abort();
	}
	return 0;
}
