/*
 * tools/ferry_outfmt.c — rsync's --out-format and --log-file-format
 * escapes for `ferry sync`'s item lines.
 *
 *   %n  the path, a directory's with a trailing '/'   %f  without it
 *   %i  the itemized code ("*deleting" for a deletion)
 *   %L  " -> TARGET" for a symlink, " => FIRST" for a hard link, else ""
 *   %l  the length in bytes (a regular file's or symlink's; else 0)
 *   %b  bytes written to DEST for the entry (its length when its
 *       content was written, else 0: ferry does not count wire bytes
 *       per file)
 *   %o  "recv", or "del." for a deletion
 *   %M  the mtime, YYYY/MM/DD-hh:mm:ss           %t  now, YYYY/MM/DD hh:mm:ss
 *   %B  the permission bits as rwxrwxrwx          %p  this process's pid
 *   %U  %G  the uid and gid DEST gets              %%  a '%'
 *
 * Each may carry rsync's modifiers: '-' (left-justify), a width, and an
 * apostrophe (digit grouping: taken, not applied). The escapes of an
 * rsync daemon (%a %h %m %P %u) and checksums (%c %C) have no meaning
 * here and are refused when the option is read.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/ferry_priv.h"

static const char KNOWN[] = "nfiLlboMtBpUG%";

int ferry_outfmt_check(const char *fmt, char *bad)
{
	const char *p = fmt;

	while ((p = strchr(p, '%')) != NULL) {
		p++;
		while (*p == '-' || *p == '\'' || (*p >= '0' && *p <= '9'))
			p++;
		if (!*p || !strchr(KNOWN, *p)) {
			*bad = *p;
			return -EINVAL;
		}
		p++;
	}
	return 0;
}

static void put(char **o, char *end, const char *s, int left, int width)
{
	int n = (int)(end - *o);
	int w = snprintf(*o, (size_t)(n > 0 ? n : 0), left ? "%-*s" : "%*s",
			 width, s);

	if (w > 0)
		*o += w < n ? w : (n > 0 ? n - 1 : 0);
}

static void perms(uint32_t mode, char out[10])
{
	static const char rwx[] = "rwxrwxrwx";
	int i;

	for (i = 0; i < 9; i++)
		out[i] = mode & (0400u >> i) ? rwx[i] : '-';
	out[9] = '\0';
}

/* YYYY/MM/DD, then sep, then hh:mm:ss (local time, as rsync) */
static void when(int64_t ns, char sep, char *out, size_t cap)
{
	time_t t = (time_t)(ns / 1000000000 - (ns % 1000000000 < 0));
	struct tm tm;

	if (!localtime_r(&t, &tm))
		snprintf(out, cap, "?");
	else
		snprintf(out, cap, "%04d/%02d/%02d%c%02d:%02d:%02d",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, sep,
			 tm.tm_hour, tm.tm_min, tm.tm_sec);
}

void ferry_outfmt(const char *fmt, const char *code, const char *path,
		  const char *extra, const struct hyd_item_attrs *a, char *out,
		  size_t cap)
{
	char *o = out, *end = out + cap, v[64];
	const char *p = fmt;
	int del = code[0] == '*', left, width;
	size_t n;

	if (!cap)
		return;
	*o = '\0';
	while (*p && o < end - 1) {
		if (*p != '%') {
			*o++ = *p++;
			*o = '\0';
			continue;
		}
		p++;
		left = *p == '-';
		if (left)
			p++;
		while (*p == '\'')
			p++;
		width = 0;
		while (*p >= '0' && *p <= '9')
			width = width * 10 + (*p++ - '0');
		v[0] = '\0';
		switch (*p) {
		case 'n':
			put(&o, end, path, left, width);
			break;
		case 'f':
			n = strlen(path);
			if (n > 1 && path[n - 1] == '/') {
				char *f = strndup(path, n - 1);

				put(&o, end, f ? f : path, left, width);
				free(f);
			} else {
				put(&o, end, path, left, width);
			}
			break;
		case 'i': /* rsync's is 11 columns, left-justified */
			put(&o, end, code, width ? left : 1,
			    width ? width : 11);
			break;
		case 'L':
			put(&o, end, extra, left, width);
			break;
		case 'l':
		case 'b':
			snprintf(v, sizeof(v), "%" PRIu64,
				 !a || (*p == 'b' && code[0] != '>') ? 0
								     : a->size);
			put(&o, end, v, left, width);
			break;
		case 'o':
			put(&o, end, del ? "del." : "recv", left, width);
			break;
		case 'M':
			if (a)
				when(a->mtime_ns, '-', v, sizeof(v));
			put(&o, end, v, left, width);
			break;
		case 't':
			when((int64_t)time(NULL) * 1000000000, ' ', v,
			     sizeof(v));
			put(&o, end, v, left, width);
			break;
		case 'B':
			if (a)
				perms(a->mode, v);
			put(&o, end, v, left, width);
			break;
		case 'p':
			snprintf(v, sizeof(v), "%ld", (long)getpid());
			put(&o, end, v, left, width);
			break;
		case 'U':
		case 'G':
			if (a)
				snprintf(v, sizeof(v), "%" PRIu32,
					 *p == 'U' ? a->uid : a->gid);
			put(&o, end, v, left, width);
			break;
		case '%':
			put(&o, end, "%", left, width);
			break;
		default: /* ferry_outfmt_check refused it */
			return;
		}
		p++;
	}
}
