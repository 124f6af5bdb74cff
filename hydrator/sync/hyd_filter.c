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

#include "hydrator/sync/hyd_sync_priv.h"

#define SIDE_SEND 1
#define SIDE_RECV 2
/* Nested "merge FILE" rules a --filter may follow. */
#define MERGE_DEPTH_MAX 8
/* Largest "merge FILE" read. */
#define MERGE_FILE_MAX (16u << 20)

struct rule {
	char *pat;	/* without the leading '/', trailing '/' or tree tail */
	char *below;	/* tree rules: pat and a slash and two stars */
	int include;	/* 1: '+', 0: '-' */
	int sides;	/* SIDE_* */
	int anchored;	/* leading '/' */
	int dir_only;	/* trailing '/' */
	int whole;	/* matched against the whole path (a '/' or "**") */
	int tree;	/* a "/" "***" tail: the directory and all below */
	int from_pm;	/* from + or -: sender-only under --delete-excluded */
	int negate;	/* '!': it matches where the pattern does not */
	int perishable; /* 'p': ignored inside a directory being deleted */
	size_t merge;	/* a dir-merge rule: 1 + its index in f->merges */
};

struct ruleset {
	struct rule *v;
	size_t n, cap;
};

/* The rules one directory's merge file holds. */
struct dirrules {
	struct ruleset rs;
	int clears; /* it held a "!": its parents' files do not count */
};

/* A dir-merge rule's file and how to read it. */
struct merge {
	char *name;
	int inherit; /* not 'n': its rules hold below its directory too */
	int word;    /* 'w': split on white space, no comments */
	int only;    /* '+' or '-': every item is a pattern of that kind */
	int cvs;     /* 'C': .cvsignore's way ("!" clears) */
	int sides;   /* 's', 'r' or both */
	struct hyd_pathset dirs; /* directory path -> struct dirrules */
};

struct hyd_filter {
	struct ruleset rules;
	struct merge *merges;
	size_t nmerges;
	int delete_excluded;
	int has_list;		  /* --files-from given */
	int list_recursive;	  /* -r given: below a listed directory too */
	struct hyd_pathset list;  /* the paths named */
	struct hyd_pathset above; /* the directories above them (rsync -R) */
};

/* How a rule is read: the kind's letter and its modifiers. */
struct head {
	char kind; /* '-', '+', 'H', 'S', 'P', 'R', ':', '.', '!' */
	int negate, perishable, sides, noinherit, word, only, self, cvs;
	int cvs_list; /* "-C": the CVS-ignore list goes here */
	const char *pat;
};

/* Where a rule lands: a list, and for a merge file's rules its
 * directory (anchored patterns are made relative to the root). */
struct dest {
	hyd_filter *f;
	struct ruleset *rs;
	const char *dir; /* NULL or "": the transfer root */
	int sides;	 /* the merge rule's 's' / 'r': what its rules keep */
	int perdir;	 /* in a per-directory file: no merge rules */
	int depth;
	int *clears; /* set by a "!" */
};

hyd_filter *hyd_filter_new(void)
{
	return calloc(1, sizeof(struct hyd_filter));
}

static void rs_clear(struct ruleset *rs)
{
	for (size_t i = 0; i < rs->n; i++) {
		free(rs->v[i].pat);
		free(rs->v[i].below);
	}
	rs->n = 0;
}

static void dirrules_free(void *p)
{
	struct dirrules *d = p;

	rs_clear(&d->rs);
	free(d->rs.v);
	free(d);
}

void hyd_filter_merge_reset(hyd_filter *f)
{
	for (size_t i = 0; f && i < f->nmerges; i++)
		hyd_pathset_free(&f->merges[i].dirs, dirrules_free);
}

void hyd_filter_free(hyd_filter *f)
{
	if (!f)
		return;
	rs_clear(&f->rules);
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

static struct rule *rs_push(struct ruleset *rs, const char **why)
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
static int add(const struct dest *d, const struct rule *tmpl, const char *pat,
	       const char **why)
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
	slot = rs_push(d->rs, why);
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
static int add_plain(const struct dest *d, int include, int from_pm,
		     int perishable, const char *pat, const char **why)
{
	struct rule t = {.include = include,
			 .sides = d->sides ? d->sides : SIDE_SEND | SIDE_RECV,
			 .from_pm = from_pm,
			 .perishable = perishable};

	return add(d, &t, pat, why);
}

int hyd_filter_pattern(hyd_filter *f, int include, const char *pat,
		       const char **why)
{
	struct dest d = {.f = f, .rs = &f->rules};

	/* rsync: "- " or "+ " before a pattern overrides the option */
	if ((pat[0] == '-' || pat[0] == '+') && pat[1] == ' ')
		return add_plain(&d, pat[0] == '+', 1, 0, pat + 2, why);
	return add_plain(&d, include, 1, 0, pat, why);
}

/* rsync's -C list: its defaults (perishable), ~/.cvsignore, $CVSIGNORE. */
static const char cvs_defaults[] =
    "RCS SCCS CVS CVS.adm RCSLOG cvslog.* tags TAGS .make.state "
    ".nse_depinfo *~ #* .#* ,* _$* *$ *.old *.bak *.BAK *.orig *.rej "
    ".del-* *.a *.olb *.o *.obj *.so *.exe *.Z *.elc *.ln core .svn/ "
    ".git/ .hg/ .bzr/";

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

/* Each white-space separated word of [p, p + n) to fn. */
static int each_word(const char *p, size_t n,
		     int (*fn)(void *arg, const char *w, const char **why),
		     void *arg, const char **why)
{
	char buf[4096];
	size_t i = 0, j;
	int r;

	while (i < n) {
		while (i < n && is_space(p[i]))
			i++;
		for (j = i; j < n && !is_space(p[j]); j++)
			;
		if (j == i)
			break;
		if (j - i >= sizeof(buf) || memchr(p + i, '\0', j - i)) {
			*why = "a word too long, or holding a NUL byte";
			return -EINVAL;
		}
		memcpy(buf, p + i, j - i);
		buf[j - i] = '\0';
		r = fn(arg, buf, why);
		if (r < 0)
			return r;
		i = j;
	}
	return 0;
}

struct cvs_word {
	const struct dest *d;
	int perishable;
};

static int cvs_word(void *arg, const char *w, const char **why)
{
	struct cvs_word *c = arg;

	if (!strcmp(w, "!"))
		return 0; /* clears only a .cvsignore's own list */
	return add_plain(c->d, 0, 1, c->perishable, w, why);
}

/* A whole file into memory (at most max bytes). 0 or -errno, *why. */
static int slurp(const char *path, size_t max, char **ret, size_t *ret_n,
		 const char **why)
{
	FILE *in = fopen(path, "r");
	char *b = malloc(max + 1);
	size_t n;
	int r = 0;

	if (!in || !b) {
		r = in ? -ENOMEM : -errno;
		*why = in ? "out of memory" : "cannot open the file";
		goto out;
	}
	n = fread(b, 1, max + 1, in);
	if (ferror(in)) {
		r = -EIO;
		*why = "cannot read the file";
	} else if (n > max) {
		r = -EFBIG;
		*why = "the file is too large for a merge file";
	} else {
		b[n] = '\0';
		*ret = b;
		*ret_n = n;
		b = NULL;
	}
out:
	free(b);
	if (in)
		fclose(in);
	return r;
}

static int cvs_list(const struct dest *d, const char **why)
{
	struct cvs_word c = {d, 1};
	const char *home = getenv("HOME"), *env = getenv("CVSIGNORE");
	char path[4096], *text;
	size_t n;
	int r;

	r = each_word(cvs_defaults, sizeof(cvs_defaults) - 1, cvs_word, &c,
		      why);
	c.perishable = 0;
	if (r == 0 && home &&
	    (size_t)snprintf(path, sizeof(path), "%s/.cvsignore", home) <
		sizeof(path) &&
	    slurp(path, MERGE_FILE_MAX, &text, &n, why) == 0) {
		r = each_word(text, n, cvs_word, &c, why);
		free(text);
	}
	if (r == 0 && env)
		r = each_word(env, strlen(env), cvs_word, &c, why);
	return r;
}

/* The kind and modifiers at the start of rule; h->pat after them. */
static int parse_head(const char *rule, struct head *h, const char **why)
{
	static const struct {
		const char *word;
		char letter;
	} kinds[] = {
	    {"exclude", '-'}, {"include", '+'},	  {"hide", 'H'},
	    {"show", 'S'},    {"protect", 'P'},	  {"risk", 'R'},
	    {"merge", '.'},   {"dir-merge", ':'}, {"clear", '!'},
	};
	const char *p = NULL, *allowed;
	size_t i, wl;

	memset(h, 0, sizeof(*h));
	for (i = 0; i < sizeof(kinds) / sizeof(*kinds); i++) {
		wl = strlen(kinds[i].word);
		if (!strncmp(rule, kinds[i].word, wl) &&
		    (rule[wl] == ',' || rule[wl] == ' ' || rule[wl] == '_' ||
		     !rule[wl])) {
			p = rule + wl + (rule[wl] == ',');
			break;
		}
	}
	if (!p) {
		for (i = 0; i < sizeof(kinds) / sizeof(*kinds); i++)
			if (rule[0] == kinds[i].letter)
				break;
		if (i == sizeof(kinds) / sizeof(*kinds)) {
			*why = "unknown filter rule (rsync's '-', '+', 'H', "
			       "'S', 'P', 'R', '.', ':', '!' and their long "
			       "names are supported)";
			return -EINVAL;
		}
		p = rule + 1 + (rule[1] == ',');
	}
	h->kind = kinds[i].letter;
	h->sides = SIDE_SEND | SIDE_RECV;
	/* the modifiers each kind takes (rsync's, less '/', 'x') */
	allowed = h->kind == ':'   ? "-+nwesrC"
		  : h->kind == '.' ? "-+wsrC"
		  : h->kind == '-' ? "!psrC"
		  : h->kind == '+' ? "!psr"
		  : h->kind == '!' ? ""
				   : "!p";
	for (; *p && *p != ' ' && *p != '_'; p++) {
		if (!strchr(allowed, *p))
			goto bad;
		switch (*p) {
		case '!':
			h->negate = 1;
			break;
		case 'p':
			h->perishable = 1;
			break;
		case 's':
		case 'r':
			h->sides = *p == 's' ? SIDE_SEND : SIDE_RECV;
			break;
		case 'n':
			h->noinherit = 1;
			break;
		case 'w':
			h->word = 1;
			break;
		case 'e':
			h->self = 1;
			break;
		case '-':
		case '+':
			h->only = *p;
			break;
		default: /* 'C' */
			if (h->kind == '-') {
				h->cvs_list = 1;
				break;
			}
			h->cvs = h->word = 1;
			h->noinherit = h->kind == ':';
			h->only = '-';
			break;
		}
	}
	if (*p)
		p++;
	h->pat = p;
	return 0;
bad:
	*why = "unsupported rule modifier (supported: '!', 'p', 's', 'r' on "
	       "rules; '-', '+', 'n', 'e', 'w', 'C', 's', 'r' on merge "
	       "rules)";
	return -EINVAL;
}

static int parse_rule(const struct dest *d, const char *rule, const char **why);

static int merge_line(void *arg, const char *line, const char **why)
{
	return parse_rule(arg, line, why);
}

struct only_item {
	const struct dest *d;
	int include, cvs;
};

static int only_item(void *arg, const char *w, const char **why)
{
	struct only_item *o = arg;

	if (o->cvs && !strcmp(w, "!")) {
		rs_clear(o->d->rs);
		if (o->d->clears)
			*o->d->clears = 1;
		return 0;
	}
	return add_plain(o->d, o->include, 1, 0, w, why);
}

/* The items of a merge file's text: words or lines, each a rule, or a
 * pattern of h->only's kind. */
static int merge_text(const struct dest *d, const struct head *h,
		      const char *text, size_t n, const char **why)
{
	struct only_item o = {d, h->only == '+', h->cvs};
	char *line = NULL;
	size_t i = 0, j, k;
	int r = 0;

	if (h->word)
		return each_word(text, n, h->only ? only_item : merge_line,
				 h->only ? (void *)&o : (void *)d, why);
	while (r == 0 && i < n) {
		for (j = i; j < n && text[j] != '\n'; j++)
			;
		k = j;
		if (k > i && text[k - 1] == '\r')
			k--;
		if (k > i && text[i] != ';' && text[i] != '#') {
			if (memchr(text + i, '\0', k - i)) {
				*why = "a line holding a NUL byte";
				return -EINVAL;
			}
			line = strndup(text + i, k - i);
			if (!line) {
				*why = "out of memory";
				return -ENOMEM;
			}
			r = h->only ? only_item(&o, line, why)
				    : parse_rule(d, line, why);
			free(line);
		}
		i = j + 1;
	}
	return r;
}

/* A dir-merge rule into d's list (the top level). */
static int add_dir_merge(const struct dest *d, const struct head *h,
			 const char **why)
{
	hyd_filter *f = d->f;
	const char *name = h->pat;
	struct merge *v;
	struct rule *slot;

	while (*name == '/') /* rsync's "from the root down": see ferry(1) */
		name++;
	if (!*name && h->cvs)
		name = ".cvsignore";
	if (!*name || strchr(name, '/') || !strcmp(name, ".") ||
	    !strcmp(name, "..")) {
		*why = "a per-directory merge file is a file name, without a "
		       "'/' inside";
		return -EINVAL;
	}
	v = realloc(f->merges, (f->nmerges + 1) * sizeof(*v));
	if (!v) {
		*why = "out of memory";
		return -ENOMEM;
	}
	f->merges = v;
	v = &f->merges[f->nmerges];
	memset(v, 0, sizeof(*v));
	v->name = strdup(name);
	slot = v->name ? rs_push(d->rs, why) : NULL;
	if (!slot) {
		free(v->name);
		*why = "out of memory";
		return -ENOMEM;
	}
	v->inherit = !h->noinherit;
	v->word = h->word;
	v->only = h->only;
	v->cvs = h->cvs;
	v->sides = h->sides;
	slot->merge = ++f->nmerges;
	if (h->self)
		return add_plain(d, 0, 1, 0, name, why);
	return 0;
}

static int parse_rule(const struct dest *d, const char *rule, const char **why)
{
	struct head h;
	struct rule t = {0};
	int r;

	r = parse_head(rule, &h, why);
	if (r < 0)
		return r;
	switch (h.kind) {
	case '!':
		rs_clear(d->rs);
		if (d->clears)
			*d->clears = 1;
		return 0;
	case ':':
	case '.':
		if (d->perdir) {
			*why = "a merge rule inside a per-directory merge file "
			       "is not supported";
			return -EINVAL;
		}
		if (h.kind == ':')
			return add_dir_merge(d, &h, why);
		if (d->depth >= MERGE_DEPTH_MAX) {
			*why = "merge files nested too deep";
			return -ELOOP;
		} else {
			struct dest in = *d;
			char *text;
			size_t n;

			in.depth++;
			if (h.sides != (SIDE_SEND | SIDE_RECV))
				in.sides = h.sides;
			if (!*h.pat) {
				*why = "a merge rule names no file";
				return -EINVAL;
			}
			r = slurp(h.pat, MERGE_FILE_MAX, &text, &n, why);
			if (r == 0) {
				r = merge_text(&in, &h, text, n, why);
				free(text);
			}
			return r;
		}
	default:
		break;
	}
	if (h.cvs_list) {
		if (*h.pat) {
			*why = "'-C' takes no pattern";
			return -EINVAL;
		}
		return cvs_list(d, why);
	}
	t.include = h.kind == '+' || h.kind == 'S' || h.kind == 'R';
	t.sides = h.kind == 'H' || h.kind == 'S'   ? SIDE_SEND
		  : h.kind == 'P' || h.kind == 'R' ? SIDE_RECV
						   : h.sides;
	/* rsync: --delete-excluded makes sender-only the + and - rules
	 * that name no side */
	t.from_pm = (h.kind == '-' || h.kind == '+') &&
		    h.sides == (SIDE_SEND | SIDE_RECV) &&
		    (!d->sides || d->sides == (SIDE_SEND | SIDE_RECV));
	if (d->sides)
		t.sides &= d->sides;
	t.negate = h.negate;
	t.perishable = h.perishable;
	return add(d, &t, h.pat, why);
}

int hyd_filter_rule(hyd_filter *f, const char *rule, const char **why)
{
	struct dest d = {.f = f, .rs = &f->rules};

	return parse_rule(&d, rule, why);
}

int hyd_filter_cvs(hyd_filter *f, const char **why)
{
	struct dest d = {.f = f, .rs = &f->rules};
	int r;

	r = hyd_filter_rule(f, ":C", why);
	return r < 0 ? r : cvs_list(&d, why);
}

int hyd_filter_merge_load(hyd_filter *f, size_t i, const char *dir,
			  const char *text, size_t n, const char **why)
{
	struct merge *mg = &f->merges[i];
	struct dirrules *dr;
	struct head h = {
	    .kind = ':', .word = mg->word, .only = mg->only, .cvs = mg->cvs};
	struct dest d = {.f = f, .dir = dir, .sides = mg->sides, .perdir = 1};
	int r;

	if (hyd_pathset_get(&mg->dirs, dir, strlen(dir)))
		return 0; /* loaded already */
	dr = calloc(1, sizeof(*dr));
	if (!dr) {
		*why = "out of memory";
		return -ENOMEM;
	}
	d.rs = &dr->rs;
	d.clears = &dr->clears;
	r = merge_text(&d, &h, text, n, why);
	if (r == 0 && hyd_pathset_put(&mg->dirs, dir, strlen(dir), dr) < 0) {
		*why = "out of memory";
		r = -ENOMEM;
	}
	if (r < 0)
		dirrules_free(dr);
	return r;
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
