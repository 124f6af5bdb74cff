/*
 * hydrator/fetch/hyd_head.c — the body of GET BASE/HEAD: a generation
 * number, as bytes from the network.
 */
#include <errno.h>
#include <stdint.h>

#include "hydrator/fetch/hyd_catalog.h"

int hyd_head_parse(const char *buf, size_t len, uint64_t *ret_gen)
{
	uint64_t v = 0;
	size_t i, n;

	if (!buf || len > HYD_HEAD_MAX)
		return -EPROTO;
	/* one line: the trailing newline (and \r, spaces) the server or a
	 * cache in between may add, nothing else around the digits */
	n = len;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
			 buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	if (n == 0 || n > 20)
		return -EPROTO;
	for (i = 0; i < n; i++) {
		unsigned d = (unsigned char)buf[i] - '0';

		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return -EPROTO; /* not a digit (a NUL too), or 2^64 up
					 */
		v = v * 10 + d;
	}
	if (v == 0 || (n > 1 && buf[0] == '0'))
		return -EPROTO; /* generations start at 1, no leading zeros */
	*ret_gen = v;
	return 0;
}
