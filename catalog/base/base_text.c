/*
 * catalog/base/base_text.c — rules for text that arrives as bytes: how a
 * byte that is not printable UTF-8 is shown (the same in a log line, on a
 * terminal and in a JSON string), whole decimal numbers, namespace names,
 * hex digits.
 * Pure functions, no allocation.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"

size_t base_utf8_len(const unsigned char *s, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and code points past U+10FFFF are not
	 * UTF-8 (RFC 3629). */
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

size_t base_bytes_escape(char *dst, size_t cap, const void *src, size_t len,
			 int keep_controls)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = src;
	size_t i = 0, out = 0, end = 0, k, w;

	while (i < len) {
		k = s[i] && (keep_controls || (s[i] >= 0x20 && s[i] != 0x7f))
			? base_utf8_len(s + i, len - i)
			: 0;
		w = k ? k : 4;
		/* A unit is written whole or not at all, so a cut result
		 * never ends inside a UTF-8 sequence or an escape. */
		if (end == out && out + w < cap) {
			if (k) {
				memcpy(dst + out, s + i, k);
			} else {
				dst[out] = '\\';
				dst[out + 1] = 'x';
				dst[out + 2] = hex[s[i] >> 4];
				dst[out + 3] = hex[s[i] & 15];
			}
			end = out + w;
		}
		out += w;
		i += k ? k : 1;
	}
	if (cap > 0)
		dst[end] = '\0';
	return out;
}

size_t base_text_escape(char *dst, size_t cap, const void *src, size_t len)
{
	return base_bytes_escape(dst, cap, src, len, 0);
}

int base_parse_long(const char *s, long lo, long hi, long *ret)
{
	char *end;
	long v;

	if (!s || !*s || (*s != '-' && (*s < '0' || *s > '9')))
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*ret = v;
	return 0;
}

int base_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret)
{
	unsigned long long v;
	char *end;

	/* strtoull takes "-1" as ULLONG_MAX and skips spaces: only digits. */
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*ret = (uint64_t)v;
	return 0;
}

int base_ns_name_check(const char *name, size_t len)
{
	size_t i;

	if (!name || len < 1 || len > BASE_NS_NAME_MAX || name[0] == '.')
		return -EINVAL;
	for (i = 0; i < len; i++) {
		char ch = name[i];

		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		      ch == '-'))
			return -EINVAL;
	}
	return 0;
}

int base_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void base_hex_encode(const void *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}
