/*
 * hydrator/sync/hyd_filter.c — `ferry sync`'s include/exclude rules, with
 * rsync's meanings (its "FILTER RULES", "INCLUDE/EXCLUDE PATTERN RULES"
 * and "MERGE-FILE FILTER RULES"), for the subset docs/man/ferry.1 lists.
 *
 * A rule is a side (sender: what is transferred; receiver: what --delete
 * may remove; both for + and -), a verdict, and a pattern. Paths are
 * relative to the transfer root, "a/b/c", without a leading slash. The
 * first rule that matches decides; no match means included. A pattern:
 *   - ending in '/' matches directories only;
 *   - starting with '/' is anchored at the transfer root (in a
 *     per-directory merge file: at that file's directory);
 *   - without a '/' (other than those two) or "**", matches the last
 *     component; with one, the whole path or any tail of it that starts
 *     at a component (unless anchored);
 *   - a pattern ending in a '/' and "***" (rsync's "DIR/" "***")
 *     matches DIR and everything below it;
 *   - wildcards as hyd_wild.c says.
 * An excluded directory is not descended into, so nothing below it is
 * transferred whatever later rules say (rsync's "--include='*.c'
 * --exclude='*'" keeps only the top level's .c files).
 *
 * A dir-merge rule (": NAME") stands in the list for the rules of the
 * NAME files of the source's directories: for a path, those of its
 * parent directory's file, then (unless 'n') its grandparent's, up to
 * the transfer root; a "!" in one file ends the chain there. The files
 * are loaded (hyd_filter_merge_load) by the walk that reads the source
 * before it judges any entry of their directory.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/sync/hyd_filter_priv.h"

hyd_filter *hyd_filter_new(void)
{
	return calloc(1, sizeof(struct hyd_filter));
}

void hyd_filter__rs_clear(struct ruleset *rs)
{
	for (size_t i = 0; i < rs->n; i++) {
		free(rs->v[i].pat);
		free(rs->v[i].below);
	}
	rs->n = 0;
}

void hyd_filter__dirrules_free(void *p)
{
	struct dirrules *d = p;

	hyd_filter__rs_clear(&d->rs);
	free(d->rs.v);
	free(d);
}

void hyd_filter_merge_reset(hyd_filter *f)
{
	for (size_t i = 0; f && i < f->nmerges; i++)
		hyd_pathset_free(&f->merges[i].dirs, hyd_filter__dirrules_free);
}

void hyd_filter_free(hyd_filter *f)
{
	if (!f)
		return;
	hyd_filter__rs_clear(&f->rules);
	free(f->rules.v);
	hyd_filter_merge_reset(f);
	for (size_t i = 0; i < f->nmerges; i++)
		free(f->merges[i].name);
	free(f->merges);
	hyd_pathset_free(&f->list, NULL);
	hyd_pathset_free(&f->above, NULL);
	free(f);
}

size_t hyd_filter_count(const hyd_filter *f)
{
	return f ? f->rules.n + (f->has_list != 0) : 0;
}

int hyd_filter_has_list(const hyd_filter *f)
{
	return f && f->has_list;
}

size_t hyd_filter_merges(const hyd_filter *f)
{
	return f ? f->nmerges : 0;
}

const char *hyd_filter_merge_name(const hyd_filter *f, size_t i)
{
	return i < f->nmerges ? f->merges[i].name : NULL;
}

/* ---- --files-from ---- */

#define MEMBER ((void *)1)

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
		if (buf[i] == '/' &&
		    hyd_pathset_put(&f->above, buf, i, MEMBER) < 0)
			goto nomem;
	if (hyd_pathset_put(&f->list, buf, n, MEMBER) < 0)
		goto nomem;
	return 0;
nomem:
	*why = "out of memory";
	return -ENOMEM;
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
	return hyd_each_line(path, from0, list_line, f, why);
}

/* Outside the --files-from list: not named, not a directory above a
 * name, and (with -r) not below a named directory. */
static int unlisted(const hyd_filter *f, const char *path)
{
	size_t n = strlen(path);

	if (hyd_pathset_get(&f->list, path, n) ||
	    hyd_pathset_get(&f->above, path, n))
		return 0;
	if (!f->list_recursive)
		return 1;
	while (n > 0) {
		while (n > 0 && path[n - 1] != '/')
			n--;
		if (n == 0)
			break;
		n--; /* the '/' */
		if (hyd_pathset_get(&f->list, path, n))
			return 0;
	}
	return 1;
}

void hyd_filter_delete_excluded(hyd_filter *f)
{
	f->delete_excluded = 1;
}

/* ---- matching ---- */

/* The pattern against the whole path, or against every tail of it that
 * starts at a component when not anchored. */
static int wild_path(const struct rule *r, const char *pat, const char *path)
{
	const char *t = path;

	if (!r->whole) {
		const char *slash = strrchr(path, '/');

		return hyd_wild(pat, slash ? slash + 1 : path);
	}
	for (;;) {
		if (hyd_wild(pat, t))
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

struct ask {
	const hyd_filter *f;
	const char *path;
	int is_dir, side, gone;
};

static int eval(const struct ask *a, const struct ruleset *rs);

/* A dir-merge rule: the files of path's parent, grandparent, ... */
static int eval_merge(const struct ask *a, const struct merge *mg)
{
	const struct dirrules *d;
	size_t k = strlen(a->path), dn;
	int v;

	if (!mg->dirs.n)
		return -1;
	for (;;) {
		while (k > 0 && a->path[k - 1] != '/')
			k--;
		dn = k ? k - 1 : 0; /* the parent: path[0, dn) */
		d = hyd_pathset_get(&mg->dirs, a->path, dn);
		if (d) {
			v = eval(a, &d->rs);
			if (v >= 0)
				return v;
			if (d->clears)
				return -1;
		}
		if (!mg->inherit || dn == 0)
			return -1;
		k = dn;
	}
}

/* 1 excluded, 0 included by the first rule of rs that matches; -1 none
 * does. */
static int eval(const struct ask *a, const struct ruleset *rs)
{
	for (size_t i = 0; i < rs->n; i++) {
		const struct rule *r = &rs->v[i];
		int sides = r->sides, v;

		if (r->merge) {
			v = eval_merge(a, &a->f->merges[r->merge - 1]);
			if (v >= 0)
				return v;
			continue;
		}
		if (a->f->delete_excluded && r->from_pm)
			sides = SIDE_SEND;
		if (!(sides & a->side) || (a->gone && r->perishable))
			continue;
		if (rule_matches(r, a->path, a->is_dir) == r->negate)
			continue;
		return !r->include;
	}
	return -1;
}

int hyd_filter_excluded(const hyd_filter *f, const char *path, int is_dir,
			int deleting)
{
	struct ask a = {f, path, is_dir, deleting ? SIDE_RECV : SIDE_SEND,
			deleting == 2};
	int v;

	if (!f)
		return 0;
	v = eval(&a, &f->rules);
	if (v >= 0)
		return v;
	/* rsync's --files-from: what the list leaves out is excluded (and
	 * so protected from --delete, unless --delete-excluded) */
	if (f->has_list && path[0] && unlisted(f, path))
		return !(deleting && f->delete_excluded);
	return 0;
}

/* ---- building ---- */

struct rule *hyd_filter__rs_push(struct ruleset *rs, const char **why)
{
	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? rs->cap * 2 : 8;
		struct rule *v = realloc(rs->v, cap * sizeof(*v));

		if (!v) {
			*why = "out of memory";
			return NULL;
		}
		rs->v = v;
		rs->cap = cap;
	}
	memset(&rs->v[rs->n], 0, sizeof(rs->v[0]));
	return &rs->v[rs->n++];
}

/* A pattern rule into d's list: pat as the user wrote it. */
int hyd_filter__add(const struct dest *d, const struct rule *tmpl,
		    const char *pat, const char **why)
{
	struct rule r = *tmpl, *slot;
	size_t n = strlen(pat), dl = d->dir ? strlen(d->dir) : 0;

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
	/* anchored in a merge file's directory: from the root, that dir */
	if (!r.anchored)
		dl = 0;
	r.pat = malloc(dl + 1 + n + 1);
	if (!r.pat) {
		*why = "out of memory";
		return -ENOMEM;
	}
	if (dl)
		memcpy(r.pat, d->dir, dl);
	if (dl && n)
		r.pat[dl++] = '/';
	memcpy(r.pat + dl, pat, n);
	n += dl;
	r.pat[n] = '\0';
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
	slot = hyd_filter__rs_push(d->rs, why);
	if (!slot) {
		free(r.pat);
		free(r.below);
		return -ENOMEM;
	}
	*slot = r;
	return 0;
}

/* An item of a list that holds only patterns (a '+' or '-' merge file,
 * --exclude, --include, the CVS-ignore list). */
int hyd_filter__add_plain(const struct dest *d, int include, int from_pm,
			  int perishable, const char *pat, const char **why)
{
	struct rule t = {.include = include,
			 .sides = d->sides ? d->sides : SIDE_SEND | SIDE_RECV,
			 .from_pm = from_pm,
			 .perishable = perishable};

	return hyd_filter__add(d, &t, pat, why);
}

int hyd_filter_pattern(hyd_filter *f, int include, const char *pat,
		       const char **why)
{
	struct dest d = {.f = f, .rs = &f->rules};

	/* rsync: "- " or "+ " before a pattern overrides the option */
	if ((pat[0] == '-' || pat[0] == '+') && pat[1] == ' ')
		return hyd_filter__add_plain(&d, pat[0] == '+', 1, 0, pat + 2,
					     why);
	return hyd_filter__add_plain(&d, include, 1, 0, pat, why);
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

	return hyd_each_line(path, 0, pattern_line, &p, why);
}
