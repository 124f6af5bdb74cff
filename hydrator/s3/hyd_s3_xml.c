/*
 * hydrator/s3/hyd_s3_xml.c — the encodings S3 speaks: XML character data
 * for keys in listings and errors (a byte that is not UTF-8 shown as the
 * text \xNN, as in ferry's logs), SigV4's URI encoding (also the
 * encoding-type=url form of listings), percent-decoding of paths and
 * queries, S3's error body, and the two date formats.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hydrator/s3/hyd_s3.h"

void hyd_s3_xml_add(struct base_buf *b, const char *s)
{
	const char *run = s, *end = s + strlen(s);

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		const char *rep = NULL;
		char num[8];
		size_t k;

		/* A byte that is not part of valid UTF-8 cannot be XML text
		 * (a parser stops there): it is written as the four
		 * characters \xNN, the way every log line and JSON string of
		 * ferry shows such a byte (base_text_escape). Valid UTF-8
		 * passes whole. A key listed so names no object (a GET of it
		 * is NoSuchKey); encoding-type=url keeps the bytes. */
		if (ch >= 0x80) {
			k = base_utf8_len((const unsigned char *)s,
					  (size_t)(end - s));
			/* U+FFFE and U+FFFF are UTF-8 but no XML character */
			if (k == 3 && ch == 0xef &&
			    (unsigned char)s[1] == 0xbf &&
			    ((unsigned char)s[2] & 0xfe) == 0xbe)
				k = 0;
			if (k > 0) {
				s += k - 1;
				continue;
			}
			base_buf_add(b, run, (size_t)(s - run));
			base_text_escape(num, sizeof(num), s, 1);
			base_buf_str(b, num);
			run = s + 1;
			continue;
		}
		switch (ch) {
		case '&':
			rep = "&amp;";
			break;
		case '<':
			rep = "&lt;";
			break;
		case '>':
			rep = "&gt;";
			break;
		case '"':
			rep = "&quot;";
			break;
		case '\'':
			rep = "&apos;";
			break;
		default:
			if (ch < 0x20 && ch != '\t' && ch != '\n' &&
			    ch != '\r') {
				snprintf(num, sizeof(num), "&#x%02X;", ch);
				rep = num;
			}
		}
		if (!rep)
			continue;
		base_buf_add(b, run, (size_t)(s - run));
		base_buf_str(b, rep);
		run = s + 1;
	}
	base_buf_add(b, run, (size_t)(s - run));
}

void hyd_s3_uri_add(struct base_buf *b, const char *s, size_t n, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[3];

		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
		    ch == '.' || ch == '~' || (ch == '/' && keep_slash)) {
			base_buf_add(b, &s[i], 1);
			continue;
		}
		esc[0] = '%';
		esc[1] = hex[ch >> 4];
		esc[2] = hex[ch & 15];
		base_buf_add(b, esc, 3);
	}
}

int hyd_s3_uri_decode(const char *s, size_t n, char *out, int plus)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		char ch = s[i];

		if (ch == '%') {
			int hi, lo;

			if (i + 2 >= n)
				return -EINVAL;
			hi = base_hex_digit(s[i + 1]);
			lo = base_hex_digit(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			ch = (char)(hi * 16 + lo);
			i += 2;
		} else if (ch == '+' && plus) {
			ch = ' ';
		}
		if (ch == '\0')
			return -EINVAL;
		out[o++] = ch;
	}
	out[o] = '\0';
	return 0;
}

void hyd_s3_xml_error(struct base_buf *b, const char *code, const char *msg,
		      const char *resource, const char *request_id)
{
	base_buf_str(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			"<Error><Code>");
	hyd_s3_xml_add(b, code);
	base_buf_str(b, "</Code><Message>");
	hyd_s3_xml_add(b, msg);
	base_buf_str(b, "</Message><Resource>");
	hyd_s3_xml_add(b, resource);
	base_buf_str(b, "</Resource><RequestId>");
	hyd_s3_xml_add(b, request_id);
	base_buf_str(b, "</RequestId></Error>");
}

void hyd_s3_http_date(int64_t sec, char out[40])
{
	time_t t = (time_t)sec;
	struct tm tm;

	gmtime_r(&t, &tm);
	/* strftime's %a and %b follow the locale; RFC 7231 wants English */
	static const char *const day[] = {"Sun", "Mon", "Tue", "Wed",
					  "Thu", "Fri", "Sat"};
	static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr",
					  "May", "Jun", "Jul", "Aug",
					  "Sep", "Oct", "Nov", "Dec"};
	/* the % 100 tell the compiler the fields' widths */
	snprintf(out, 40, "%s, %02u %s %04u %02u:%02u:%02u GMT",
		 day[tm.tm_wday % 7], (unsigned)tm.tm_mday % 100u,
		 mon[tm.tm_mon % 12], (unsigned)(tm.tm_year + 1900) % 10000u,
		 (unsigned)tm.tm_hour % 100u, (unsigned)tm.tm_min % 100u,
		 (unsigned)tm.tm_sec % 100u);
}

void hyd_s3_iso_date(int64_t sec, char out[40])
{
	time_t t = (time_t)sec;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, 40, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
}
