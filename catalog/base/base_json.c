/*
 * catalog/base/base_json.c — JSON values through jansson.
 *
 * jansson checks that every string it is given is valid UTF-8 and refuses
 * it otherwise, which is right for a wire format but wrong for file names,
 * which are bytes. base_json_bytes is the one bridge: valid UTF-8 passes
 * unchanged (so UTF-8 names round-trip exactly), and a byte that is not
 * part of valid UTF-8 becomes the text \xNN — the same rule as a log line
 * (base_text_escape), so a name looks alike in hydrator.log, on a terminal
 * and in a JSON body. Control characters stay themselves in the value and
 * are escaped by JSON's own syntax when dumped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "catalog/base/base.h"

json_t *base_json_bytes(const void *src, size_t len)
{
	json_t *v;
	char *buf;
	size_t n;

	if (len > (SIZE_MAX - 1) / 4)
		return NULL;
	buf = malloc(4 * len + 1);
	if (!buf)
		return NULL;
	n = base_bytes_escape(buf, 4 * len + 1, src ? src : "", len, 1);
	v = json_stringn(buf, n);
	free(buf);
	return v;
}

json_t *base_json_str(const char *s)
{
	return base_json_bytes(s, s ? strlen(s) : 0);
}

int base_json_line(const json_t *v, char *buf, size_t cap)
{
	size_t need;

	if (cap == 0)
		return -ENOBUFS;
	buf[0] = '\0';
	need = json_dumpb(v, buf, cap - 1,
			  JSON_COMPACT | JSON_ENCODE_ANY |
			      JSON_REAL_PRECISION(15));
	if (need == 0 || need > cap - 1) {
		buf[0] = '\0';
		return need == 0 ? -EINVAL : -ENOBUFS;
	}
	buf[need] = '\0';
	return (int)need;
}
