/*
 * hydrator/sync/hyd_pathset.c — a map from strings (paths) to pointers,
 * open addressing with FNV-1a, for `ferry sync`'s filter: the paths
 * --files-from names and the directories above them, and the rules each
 * directory's per-directory merge file holds. Also the line reader of
 * the rule and list files.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/sync/hyd_sync_priv.h"

static size_t hash(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
	return (size_t)h;
}

static struct hyd_pathset_slot *find(const struct hyd_pathset *s, const char *p,
				     size_t n)
{
	size_t i;

	if (!s->n)
		return NULL;
	for (i = hash(p, n) & (s->cap - 1); s->v[i].key;
	     i = (i + 1) & (s->cap - 1))
		if (!strncmp(s->v[i].key, p, n) && !s->v[i].key[n])
			return &s->v[i];
	return NULL;
}

void *hyd_pathset_get(const struct hyd_pathset *s, const char *p, size_t n)
{
	struct hyd_pathset_slot *e = find(s, p, n);

	return e ? e->val : NULL;
}

static int grow(struct hyd_pathset *s)
{
	size_t cap = s->cap ? s->cap * 2 : 64, i;
	struct hyd_pathset_slot *v = calloc(cap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t j = 0; j < s->cap; j++) {
		if (!s->v[j].key)
			continue;
		for (i = hash(s->v[j].key, strlen(s->v[j].key)) & (cap - 1);
		     v[i].key; i = (i + 1) & (cap - 1))
			;
		v[i] = s->v[j];
	}
	free(s->v);
	s->v = v;
	s->cap = cap;
	return 0;
}

int hyd_pathset_put(struct hyd_pathset *s, const char *p, size_t n, void *val)
{
	size_t i;

	if (find(s, p, n))
		return 1;
	if ((s->n + 1) * 2 > s->cap && grow(s) < 0)
		return -ENOMEM;
	for (i = hash(p, n) & (s->cap - 1); s->v[i].key;
	     i = (i + 1) & (s->cap - 1))
		;
	s->v[i].key = strndup(p, n);
	if (!s->v[i].key)
		return -ENOMEM;
	s->v[i].val = val;
	s->n++;
	return 0;
}

void hyd_pathset_free(struct hyd_pathset *s, void (*free_val)(void *))
{
	for (size_t i = 0; i < s->cap; i++) {
		free(s->v[i].key);
		if (s->v[i].key && free_val)
			free_val(s->v[i].val);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}

int hyd_each_line(const char *path, int from0,
		  int (*fn)(void *arg, const char *line, const char **why),
		  void *arg, const char **why)
{
	FILE *in = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int r = 0;

	if (!in) {
		*why = "cannot open the file";
		return -errno;
	}
	while (r == 0 &&
	       (n = getdelim(&line, &cap, from0 ? '\0' : '\n', in)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
				 line[n - 1] == '\0'))
			line[--n] = '\0';
		if (n == 0 || (!from0 && (line[0] == ';' || line[0] == '#')))
			continue;
		r = fn(arg, line, why);
	}
	if (r == 0 && ferror(in)) {
		*why = "cannot read the file";
		r = -EIO;
	}
	free(line);
	if (in != stdin)
		fclose(in);
	return r;
}
