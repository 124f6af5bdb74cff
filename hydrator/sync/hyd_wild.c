/*
 * hydrator/sync/hyd_wild.c — rsync's wildcard matching for `ferry
 * sync`'s filter rules: '*' any run of characters but '/', "**" any run
 * at all, '?' one character but '/', "[...]" a class ('!' or '^' negates,
 * ranges, ']' first is literal, a class without its ']' is a literal
 * '['), '\' quotes the next character.
 */
#include <string.h>

#include "hydrator/sync/hyd_sync_priv.h"

/* 1 when the class at p (just after '[') holds c; *end is set after its
 * ']'. 0 with *end NULL when there is no closing ']'. */
static int class_has(const char *p, unsigned char c, const char **end)
{
	int neg = 0, hit = 0;
	const char *q = p;

	*end = NULL;
	if (*q == '!' || *q == '^') {
		neg = 1;
		q++;
	}
	if (*q == ']') { /* a ']' first is one of the class */
		hit |= c == ']';
		q++;
	}
	while (*q && *q != ']') {
		unsigned char lo, hi;

		if (*q == '\\' && q[1])
			q++;
		lo = hi = (unsigned char)*q;
		if (q[1] == '-' && q[2] && q[2] != ']') {
			q += 2;
			if (*q == '\\' && q[1])
				q++;
			hi = (unsigned char)*q;
		}
		hit |= c >= lo && c <= hi;
		q++;
	}
	if (*q != ']')
		return 0;
	*end = q + 1;
	return neg ? !hit : hit;
}

int hyd_wild(const char *p, const char *t)
{
	const char *end;

	for (; *p; p++, t++) {
		switch (*p) {
		case '\\':
			if (p[1])
				p++;
			if (*t != *p)
				return 0;
			break;
		case '?':
			if (!*t || *t == '/')
				return 0;
			break;
		case '*': {
			int any = p[1] == '*';

			while (*p == '*')
				p++;
			if (!*p)
				return any || !strchr(t, '/');
			for (;; t++) {
				if (hyd_wild(p, t))
					return 1;
				if (!*t || (!any && *t == '/'))
					return 0;
			}
		}
		case '[':
			if (!*t || *t == '/')
				return 0;
			if (!class_has(p + 1, (unsigned char)*t, &end)) {
				if (end)
					return 0;
				/* no ']': a literal '[' */
				if (*t != '[')
					return 0;
				break;
			}
			p = end - 1;
			break;
		default:
			if (*t != *p)
				return 0;
			break;
		}
	}
	return *t == '\0';
}
