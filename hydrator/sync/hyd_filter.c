/*
 * hydrator/sync/hyd_filter.c — `ferry sync`'s include/exclude rules, with
 * rsync's meanings (its "FILTER RULES" and "INCLUDE/EXCLUDE PATTERN
 * RULES"), for the subset docs/man/ferry.1 lists.
 *
 * A rule is a side (sender: what is transferred; receiver: what --delete
 * may remove; both for + and -), a verdict, and a pattern. Paths are
 * relative to the transfer root, "a/b/c", without a leading slash. The
 * first rule that matches decides; no match means included. A pattern:
 *   - ending in '/' matches directories only;
 *   - starting with '/' is anchored at the transfer root;
 *   - without a '/' (other than those two) or "**", matches the last
 *     component; with one, the whole path or any tail of it that starts
 *     at a component (unless anchored);
 *   - a pattern ending in a '/' and "***" (rsync's "DIR/" "***")
 *     matches DIR and everything below it;
 *   - wildcards: '*' any run of characters but '/', "**" any run at all,
 *     '?' one character but '/', "[...]" a class ('!' or '^' negates,
 *     ranges, ']' first is literal), '\' quotes the next character.
 * An excluded directory is not descended into, so nothing below it is
 * transferred whatever later rules say (rsync's "--include='*.c'
 * --exclude='*'" keeps only the top level's .c files).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/hydrator.h"

#define SIDE_SEND 1
#define SIDE_RECV 2

struct rule {
	char *pat;    /* without the leading '/', trailing '/' or tree tail */
	char *below;  /* tree rules: pat and a slash and two stars */
	int include;  /* 1: '+', 0: '-' */
	int sides;    /* SIDE_* */
	int anchored; /* leading '/' */
	int dir_only; /* trailing '/' */
	int whole;    /* matched against the whole path (a '/' or "**") */
	int tree;     /* a "/" "***" tail: the directory and all below */
	int from_pm;  /* from + or -: sender-only under --delete-excluded */
};

/* --files-from: the listed paths and the directories above them, an
 * open-addressing set of strings (NULL: empty slot). */
struct pathset {
	char **v;
	size_t cap, n;
};

struct hyd_filter {
	struct rule *v;
	size_t n, cap;
	int delete_excluded;
	int has_list;	      /* --files-from given */
	int list_recursive;   /* -r given: below a listed directory too */
	struct pathset list;  /* the paths named */
	struct pathset above; /* the directories above them (rsync -R) */
};

hyd_filter *hyd_filter_new(void)
{
	return calloc(1, sizeof(struct hyd_filter));
}

static void clear(hyd_filter *f)
{
	for (size_t i = 0; i < f->n; i++) {
		free(f->v[i].pat);
		free(f->v[i].below);
	}
	f->n = 0;
}

static void set_free(struct pathset *s)
{
	for (size_t i = 0; i < s->cap; i++)
		free(s->v[i]);
	free(s->v);
}

void hyd_filter_free(hyd_filter *f)
{
	if (!f)
		return;
	clear(f);
	free(f->v);
	set_free(&f->list);
	set_free(&f->above);
	free(f);
}

size_t hyd_filter_count(const hyd_filter *f)
{
	return f ? f->n + (f->has_list != 0) : 0;
}

int hyd_filter_has_list(const hyd_filter *f)
{
	return f && f->has_list;
}

static size_t hash(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
	return (size_t)h;
}

/* Is [p, p + n) in s? */
static int set_has(const struct pathset *s, const char *p, size_t n)
{
	size_t i;

	if (!s->n)
		return 0;
	for (i = hash(p, n) & (s->cap - 1); s->v[i]; i = (i + 1) & (s->cap - 1))
		if (!strncmp(s->v[i], p, n) && !s->v[i][n])
			return 1;
	return 0;
}

static int set_add(struct pathset *s, const char *p, size_t n)
{
	size_t i;

	if (set_has(s, p, n))
		return 0;
	if ((s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		char **v = calloc(cap, sizeof(*v));

		if (!v)
			return -ENOMEM;
		for (size_t j = 0; j < s->cap; j++) {
			if (!s->v[j])
				continue;
			for (i = hash(s->v[j], strlen(s->v[j])) & (cap - 1);
			     v[i]; i = (i + 1) & (cap - 1))
				;
			v[i] = s->v[j];
		}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	for (i = hash(p, n) & (s->cap - 1); s->v[i]; i = (i + 1) & (s->cap - 1))
		;
	s->v[i] = strndup(p, n);
	if (!s->v[i])
		return -ENOMEM;
	s->n++;
	return 0;
}

/* One line of --files-from: "./" and '/' prefixes and "/." steps go
 * (the list is relative to the source); ".." is refused. */
static int list_add(hyd_filter *f, const char *line, const char **why)
{
	char buf[4096], *o = buf;
	const char *p = line;
	size_t n, i;

	while (*p) {
		const char *e = strchr(p, '/');

		n = e ? (size_t)(e - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			*why = "a path with \"..\" in the list";
			return -EINVAL;
		}
		if (n && !(n == 1 && p[0] == '.')) {
			if ((size_t)(o - buf) + n + 2 > sizeof(buf)) {
				*why = "a path too long in the list";
				return -ENAMETOOLONG;
			}
			if (o > buf)
				*o++ = '/';
			memcpy(o, p, n);
			o += n;
		}
		p += n + (e != NULL);
	}
	n = (size_t)(o - buf);
	if (!n)
		return 0; /* "." alone: nothing to name */
	for (i = 0; i < n; i++)
		if (buf[i] == '/' && set_add(&f->above, buf, i) < 0)
			goto nomem;
	if (set_add(&f->list, buf, n) < 0)
		goto nomem;
	return 0;
nomem:
	*why = "out of memory";
	return -ENOMEM;
}

/* Each line of path ("-": standard input) to fn, its end (\n, \r\n, or
 * with from0 the NUL) cut; blank lines go, and without from0 so do ';'
 * and '#' comments, as rsync's readers skip them. 0, or the first -errno
 * (fn's, or the file's with *why set). */
static int each_line(const char *path, int from0,
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

static int list_line(void *arg, const char *line, const char **why)
{
	return list_add(arg, line, why);
}

int hyd_filter_files_from(hyd_filter *f, const char *path, int from0,
			  int recursive, const char **why)
{
	f->has_list = 1;
	f->list_recursive = recursive;
	return each_line(path, from0, list_line, f, why);
}

/* Outside the --files-from list: not named, not a directory above a
 * name, and (with -r) not below a named directory. */
static int unlisted(const hyd_filter *f, const char *path)
{
	size_t n = strlen(path);

	if (set_has(&f->list, path, n) || set_has(&f->above, path, n))
		return 0;
	if (!f->list_recursive)
		return 1;
	while (n > 0) {
		while (n > 0 && path[n - 1] != '/')
			n--;
		if (n == 0)
			break;
		n--; /* the '/' */
		if (set_has(&f->list, path, n))
			return 0;
	}
	return 1;
}

void hyd_filter_delete_excluded(hyd_filter *f)
{
	f->delete_excluded = 1;
}

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

/* rsync's wildmatch over NUL-terminated p and t. */
static int wild(const char *p, const char *t)
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
				if (wild(p, t))
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

/* The pattern against the whole path, or against every tail of it that
 * starts at a component when not anchored. */
static int wild_path(const struct rule *r, const char *pat, const char *path)
{
	const char *t = path;

	if (!r->whole) {
		const char *slash = strrchr(path, '/');

		return wild(pat, slash ? slash + 1 : path);
	}
	for (;;) {
		if (wild(pat, t))
			return 1;
		if (r->anchored)
			return 0;
		t = strchr(t, '/');
		if (!t)
			return 0;
		t++;
	}
}

static int rule_matches(const struct rule *r, const char *path, int is_dir)
{
	/* the tree tail: DIR itself, then anything below */
	if (r->tree)
		return wild_path(r, r->pat, path) ||
		       wild_path(r, r->below, path);
	if (r->dir_only && !is_dir)
		return 0;
	return wild_path(r, r->pat, path);
}

int hyd_filter_excluded(const hyd_filter *f, const char *path, int is_dir,
			int deleting)
{
	int side = deleting ? SIDE_RECV : SIDE_SEND;

	if (!f)
		return 0;
	for (size_t i = 0; i < f->n; i++) {
		const struct rule *r = &f->v[i];
		int sides = r->sides;

		if (f->delete_excluded && r->from_pm)
			sides = SIDE_SEND;
		if (!(sides & side) || !rule_matches(r, path, is_dir))
			continue;
		return !r->include;
	}
	/* rsync's --files-from: what the list leaves out is excluded (and
	 * so protected from --delete, unless --delete-excluded) */
	if (f->has_list && path[0] && unlisted(f, path))
		return !(deleting && f->delete_excluded);
	return 0;
}

static int add(hyd_filter *f, int include, int sides, int from_pm,
	       const char *pat, const char **why)
{
	struct rule r = {
	    .include = include, .sides = sides, .from_pm = from_pm};
	size_t n = strlen(pat);

	if (n == 0) {
		*why = "empty pattern";
		return -EINVAL;
	}
	if (pat[0] == '/') {
		r.anchored = r.whole = 1;
		pat++;
		n--;
	}
	if (n >= 4 && !strcmp(pat + n - 4, "/***")) {
		r.tree = 1;
		n -= 4;
	} else if (n > 0 && pat[n - 1] == '/') {
		r.dir_only = 1;
		n--;
	}
	if (n == 0 && !r.tree) {
		*why = "the pattern names no file";
		return -EINVAL;
	}
	r.pat = strndup(pat, n);
	if (!r.pat) {
		*why = "out of memory";
		return -ENOMEM;
	}
	if (memchr(r.pat, '/', n) || strstr(r.pat, "**"))
		r.whole = 1;
	if (r.tree) {
		r.below = malloc(n + 4);
		if (!r.below) {
			free(r.pat);
			*why = "out of memory";
			return -ENOMEM;
		}
		memcpy(r.below, r.pat, n);
		memcpy(r.below + n, "/**", 4);
		r.whole = 1; /* the pattern had a '/': the whole path */
	}
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 8;
		struct rule *v = realloc(f->v, cap * sizeof(*v));

		if (!v) {
			free(r.pat);
			free(r.below);
			*why = "out of memory";
			return -ENOMEM;
		}
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = r;
	return 0;
}

int hyd_filter_pattern(hyd_filter *f, int include, const char *pat,
		       const char **why)
{
	/* rsync: "- " or "+ " before a pattern overrides the option */
	if ((pat[0] == '-' || pat[0] == '+') && pat[1] == ' ')
		return add(f, pat[0] == '+', SIDE_SEND | SIDE_RECV, 1, pat + 2,
			   why);
	return add(f, include, SIDE_SEND | SIDE_RECV, 1, pat, why);
}

int hyd_filter_rule(hyd_filter *f, const char *rule, const char **why)
{
	static const struct {
		const char *word;
		char letter;
		int include, sides, from_pm;
	} kinds[] = {
	    {"exclude", '-', 0, SIDE_SEND | SIDE_RECV, 1},
	    {"include", '+', 1, SIDE_SEND | SIDE_RECV, 1},
	    {"hide", 'H', 0, SIDE_SEND, 0},
	    {"show", 'S', 1, SIDE_SEND, 0},
	    {"protect", 'P', 0, SIDE_RECV, 0},
	    {"risk", 'R', 1, SIDE_RECV, 0},
	};
	size_t wl;

	if (!strcmp(rule, "!") || !strcmp(rule, "clear")) {
		clear(f);
		return 0;
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(*kinds); i++) {
		const char *pat = NULL;

		wl = strlen(kinds[i].word);
		if (rule[0] == kinds[i].letter &&
		    (rule[1] == ' ' || rule[1] == '_'))
			pat = rule + 2;
		else if (!strncmp(rule, kinds[i].word, wl) &&
			 (rule[wl] == ' ' || rule[wl] == '_'))
			pat = rule + wl + 1;
		if (pat)
			return add(f, kinds[i].include, kinds[i].sides,
				   kinds[i].from_pm, pat, why);
	}
	*why = "unsupported filter rule (supported: '- PATTERN', '+ "
	       "PATTERN', 'H', 'S', 'P', 'R' and their long names, '!')";
	return -EINVAL;
}

struct pattern_file {
	hyd_filter *f;
	int include;
};

static int pattern_line(void *arg, const char *line, const char **why)
{
	struct pattern_file *p = arg;

	return hyd_filter_pattern(p->f, p->include, line, why);
}

int hyd_filter_file(hyd_filter *f, int include, const char *path,
		    const char **why)
{
	struct pattern_file p = {f, include};

	return each_line(path, 0, pattern_line, &p, why);
}
