/*
 * replicator/serve/repl_nslist.c — the namespaces to serve as given: NAME=DIR
 * arguments and --namespaces FILE lines (format: repl_nslist.h
 * and ferry-replicator(1)), one parser for both, with the name rules of
 * base_ns_name_check and no name twice. Nothing here logs: the caller
 * says which file, the error text says which line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog/base/base.h"
#include "replicator/serve/repl_nslist.h"

void repl_ns_list_fini(struct repl_ns_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i].dir);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

int repl_ns_list_copy(struct repl_ns_list *dst, const struct repl_ns_list *src)
{
	size_t i;

	memset(dst, 0, sizeof(*dst));
	if (!src->n)
		return 0;
	dst->v = calloc(src->n, sizeof(*dst->v));
	if (!dst->v)
		return -ENOMEM;
	dst->cap = src->n;
	for (i = 0; i < src->n; i++) {
		dst->v[i] = src->v[i];
		dst->v[i].dir = strdup(src->v[i].dir);
		if (!dst->v[i].dir) {
			repl_ns_list_fini(dst);
			return -ENOMEM;
		}
		dst->n++;
	}
	return 0;
}

const struct repl_ns_spec *repl_ns_list_find(const struct repl_ns_list *l,
					     const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (strlen(l->v[i].name) == len &&
		    memcmp(l->v[i].name, name, len) == 0)
			return &l->v[i];
	return NULL;
}

/* "line N: " or "" (an argument), for the messages below. */
static const char *where(size_t lineno, char *buf, size_t cap)
{
	if (!lineno)
		return "";
	snprintf(buf, cap, "line %zu: ", lineno);
	return buf;
}

/* Check and append NAME=DIR (s[0..len), no blanks around it). */
static int add_one(struct repl_ns_list *l, const char *s, size_t len,
		   size_t lineno, char *err, size_t errcap)
{
	const char *eq = memchr(s, '=', len);
	size_t nl = eq ? (size_t)(eq - s) : 0, dl = eq ? len - nl - 1 : 0;
	int shown = len > 200 ? 200 : (int)len;
	struct repl_ns_spec *sp;
	char at[32];

	where(lineno, at, sizeof(at));
	if (memchr(s, '\0', len)) {
		snprintf(err, errcap, "%sholds a NUL byte", lineno ? at : "");
		return -EINVAL;
	}
	if (!eq) {
		snprintf(err, errcap, "%s'%.*s' is not NAME=DIR",
			 lineno ? at : "", shown, s);
		return -EINVAL;
	}
	if (base_ns_name_check(s, nl) < 0) {
		snprintf(err, errcap,
			 "%sbad namespace name '%.*s': use 1-64 of "
			 "[A-Za-z0-9._-], not starting with '.'",
			 lineno ? at : "", nl > 80 ? 80 : (int)nl, s);
		return -EINVAL;
	}
	if (dl == 0) {
		snprintf(err, errcap, "%snamespace '%.*s' has no DIR",
			 lineno ? at : "", (int)nl, s);
		return -EINVAL;
	}
	if (repl_ns_list_find(l, s, nl)) {
		snprintf(err, errcap, "%snamespace '%.*s' given twice",
			 lineno ? at : "", (int)nl, s);
		return -EEXIST;
	}
	if (l->n >= REPL_NS_MAX) {
		snprintf(err, errcap, "%smore than %u namespaces",
			 lineno ? at : "", REPL_NS_MAX);
		return -E2BIG;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		struct repl_ns_spec *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			goto nomem;
		l->v = v;
		l->cap = cap;
	}
	sp = &l->v[l->n];
	memset(sp, 0, sizeof(*sp));
	memcpy(sp->name, s, nl);
	sp->name[nl] = '\0';
	sp->dir = strndup(eq + 1, dl);
	if (!sp->dir)
		goto nomem;
	sp->lineno = lineno;
	l->n++;
	return 0;
nomem:
	snprintf(err, errcap, "out of memory");
	return -ENOMEM;
}

int repl_ns_list_add_arg(struct repl_ns_list *l, const char *arg, size_t len,
			 char *err, size_t errcap)
{
	if (errcap)
		err[0] = '\0';
	return add_one(l, arg, len, 0, err, errcap);
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

int repl_ns_list_parse(struct repl_ns_list *l, const char *text, size_t len,
		       char *err, size_t errcap)
{
	size_t n0 = l->n, i, start = 0, lineno = 0;
	int r = 0;

	if (errcap)
		err[0] = '\0';
	for (i = 0; i <= len && r == 0; i++) {
		size_t a, b;

		if (i < len && text[i] != '\n')
			continue;
		lineno++;
		a = start;
		b = i;
		start = i + 1;
		if (b - a > REPL_NSFILE_LINE_MAX) {
			snprintf(err, errcap, "line %zu: longer than %u bytes",
				 lineno, REPL_NSFILE_LINE_MAX);
			r = -EINVAL;
			break;
		}
		while (a < b && is_blank(text[a]))
			a++;
		while (b > a && is_blank(text[b - 1]))
			b--;
		if (a == b || text[a] == '#')
			continue;
		r = add_one(l, text + a, b - a, lineno, err, errcap);
	}
	if (r < 0) {
		/* all or nothing: the lines taken before the bad one go */
		while (l->n > n0)
			free(l->v[--l->n].dir);
	}
	return r;
}

int repl_ns_list_load(struct repl_ns_list *l, const char *path, char *err,
		      size_t errcap)
{
	char *buf = malloc(REPL_NSFILE_MAX + 1);
	size_t len = 0;
	int r;

	if (errcap)
		err[0] = '\0';
	if (!buf) {
		snprintf(err, errcap, "out of memory");
		return -ENOMEM;
	}
	r = base_file_read_small(path, buf, REPL_NSFILE_MAX + 1, &len);
	if (r == -EFBIG)
		snprintf(err, errcap, "larger than %u bytes", REPL_NSFILE_MAX);
	else if (r < 0)
		snprintf(err, errcap, "%s", strerror(-r));
	else
		r = repl_ns_list_parse(l, buf, len, err, errcap);
	free(buf);
	return r;
}

int repl_ns_list_check_dirs(const struct repl_ns_list *l, size_t from,
			    char *err, size_t errcap)
{
	size_t i;
	char at[32];

	if (errcap)
		err[0] = '\0';
	for (i = from; i < l->n; i++) {
		const struct repl_ns_spec *s = &l->v[i];
		struct stat st;
		int r = 0;

		if (stat(s->dir, &st) < 0)
			r = -errno;
		else if (!S_ISDIR(st.st_mode))
			r = -ENOTDIR;
		if (r < 0) {
			snprintf(err, errcap,
				 "%scannot use the source directory of "
				 "namespace '%s' (%s): %s",
				 where(s->lineno, at, sizeof(at)), s->name,
				 s->dir, strerror(-r));
			return r;
		}
	}
	return 0;
}
