/*
 * hydrator/sync/hyd_filter_rule.c — `ferry sync`'s --filter rules as
 * rsync writes them: a kind ('-', '+', 'H', 'S', 'P', 'R', '!', '.'
 * merge, ':' dir-merge, or their long names), modifiers, a space or '_',
 * a pattern; the text of merge files, local ones at once and the
 * source's per-directory ones as the sync reads them; and -C's
 * CVS-ignore list.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/sync/hyd_filter_priv.h"

/* Nested "merge FILE" rules a --filter may follow. */
#define MERGE_DEPTH_MAX 8
/* Largest "merge FILE" read. */
#define MERGE_FILE_MAX (16u << 20)

/* How a rule is read: the kind's letter and its modifiers. */
struct head {
	char kind; /* '-', '+', 'H', 'S', 'P', 'R', ':', '.', '!' */
	int negate, perishable, sides, noinherit, word, only, self, cvs;
	int cvs_list; /* "-C": the CVS-ignore list goes here */
	const char *pat;
};

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
	return hyd_filter__add_plain(c->d, 0, 1, c->perishable, w, why);
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
		hyd_filter__rs_clear(o->d->rs);
		if (o->d->clears)
			*o->d->clears = 1;
		return 0;
	}
	return hyd_filter__add_plain(o->d, o->include, 1, 0, w, why);
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
	slot = v->name ? hyd_filter__rs_push(d->rs, why) : NULL;
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
		return hyd_filter__add_plain(d, 0, 1, 0, name, why);
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
		hyd_filter__rs_clear(d->rs);
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
		if (d->perdir) {
			*why = "the CVS-ignore list ('-C') in a per-directory "
			       "merge file is not supported";
			return -EINVAL;
		}
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
	return hyd_filter__add(d, &t, h.pat, why);
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
		hyd_filter__dirrules_free(dr);
	return r;
}
