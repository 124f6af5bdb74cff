/*
 * fuzz_head.c — hyd_head_parse on arbitrary bytes: the body of a HEAD
 * answer, the first thing a hydrator, a mount that follows and ferry sync
 * take from the network. What it accepts must be a generation >= 1 whose
 * decimal digits are exactly the input's first bytes, followed only by
 * line-end blanks; the verdict (fuzz_verdict.h) is the parser's.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/fetch/hyd_catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t gen = 0;
	char digits[32];
	size_t n, i;
	int ok = hyd_head_parse((const char *)data, size, &gen) == 0;

	fuzz_report(ok);
	if (!ok)
		return 0;
	if (gen == 0 || size > HYD_HEAD_MAX)
		abort();
	n = (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, gen);
	if (n > size || memcmp(digits, data, n))
		abort(); /* the number is not the bytes it came from */
	for (i = n; i < size; i++)
		if (!strchr(" \t\r\n", data[i]) || !data[i])
			abort();
	return 0;
}
