/*
 * catalog/base/base_mountinfo.c — /proc/self/mountinfo, parsed in one
 * place: the hydrator's readahead tuning (which device is this mount), the
 * refusal of a sync DEST inside a ferry mount, and `ferry status MOUNT`
 * (which cache serves this mount) all read it.
 *
 * A line is "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE
 * SOURCE SUPER_OPTIONS" (proc(5)); ROOT, POINT and SOURCE carry octal
 * escapes for space, tab, newline and backslash.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"

#define MOUNTINFO_MAX (64u << 20)

/* Undo the kernel's \ooo escapes in place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Split off the next space-separated field of *p; NULL at the end. */
static char *field(char **p)
{
	char *s = *p, *e;

	while (*s == ' ')
		s++;
	if (!*s)
		return NULL;
	e = strchr(s, ' ');
	if (e) {
		*e = '\0';
		*p = e + 1;
	} else {
		*p = s + strlen(s);
	}
	return s;
}

/* Parse one line (modified in place). 0 when it is well formed. */
static int parse_line(char *line, struct base_mount *m)
{
	char *p = line, *f[5], *dev, *colon, *end, *sep, *fstype, *source;
	unsigned long maj, min;
	int i;

	/* The optional fields end at a lone "-": find it first, so a mount
	 * point with " - " in it cannot fool us (it would be \040-\040). */
	sep = strstr(line, " - ");
	if (!sep)
		return -1;
	*sep = '\0';
	for (i = 0; i < 5; i++) {
		f[i] = field(&p);
		if (!f[i])
			return -1;
	}
	dev = f[2];
	colon = strchr(dev, ':');
	if (!colon)
		return -1;
	*colon = '\0';
	errno = 0;
	maj = strtoul(dev, &end, 10);
	if (errno || *end || end == dev)
		return -1;
	min = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1)
		return -1;
	p = sep + 3;
	fstype = field(&p);
	source = field(&p);
	if (!fstype || !source)
		return -1;
	unescape(f[3]);
	unescape(f[4]);
	unescape(source);
	m->major = (unsigned)maj;
	m->minor = (unsigned)min;
	m->fstype = fstype;
	m->source = source;
	m->root = f[3];
	m->point = f[4];
	return 0;
}

int base_mountinfo_each(const char *text, base_mount_fn fn, void *ctx)
{
	const char *s = text;
	char *line = NULL;
	size_t cap = 0;
	int r = 0;

	while (*s && r == 0) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);
		struct base_mount m;

		if (len + 1 > cap) {
			char *n = realloc(line, len + 1);

			if (!n) {
				r = -ENOMEM;
				break;
			}
			line = n;
			cap = len + 1;
		}
		memcpy(line, s, len);
		line[len] = '\0';
		if (parse_line(line, &m) == 0)
			r = fn(ctx, &m);
		s += len + (nl ? 1 : 0);
	}
	free(line);
	return r;
}

int base_mountinfo_read(char **ret_text)
{
	size_t have = 0, cap = 64u << 10;
	char *buf = malloc(cap), *n;
	ssize_t got;
	int fd, r = 0;

	*ret_text = NULL;
	if (!buf)
		return -ENOMEM;
	fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		free(buf);
		return -errno;
	}
	/* A proc file has no size: read until EOF, growing. */
	for (;;) {
		if (cap - have < 2) {
			if (cap >= MOUNTINFO_MAX) {
				r = -EFBIG;
				break;
			}
			n = realloc(buf, cap * 2);
			if (!n) {
				r = -ENOMEM;
				break;
			}
			buf = n;
			cap *= 2;
		}
		got = read(fd, buf + have, cap - 1 - have);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			r = -errno;
			break;
		}
		if (got == 0)
			break;
		have += (size_t)got;
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[have] = '\0';
	*ret_text = buf;
	return 0;
}
