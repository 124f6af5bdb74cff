/*
 * hydrator/sync/hyd_filter_priv.h — what the rule matcher (hyd_filter.c)
 * and the rule parser (hyd_filter_rule.c) share: a filter's lists of
 * rules, the per-directory files of its dir-merge rules, and where a
 * parsed rule lands.
 */
#ifndef FERRY_HYD_FILTER_PRIV_H
#define FERRY_HYD_FILTER_PRIV_H

#include <stddef.h>

#include "hydrator/sync/hyd_sync_priv.h"

#define SIDE_SEND 1
#define SIDE_RECV 2

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

void hyd_filter__rs_clear(struct ruleset *rs);
/* A zeroed rule at the end of rs; NULL (with *why) when out of memory. */
struct rule *hyd_filter__rs_push(struct ruleset *rs, const char **why);
void hyd_filter__dirrules_free(void *p);
/* A pattern rule into d's list: tmpl's kind, pat as the user wrote it
 * (a leading '/' anchors it, at d->dir in a per-directory file). 0 or
 * -errno with *why. */
int hyd_filter__add(const struct dest *d, const struct rule *tmpl,
		    const char *pat, const char **why);
/* A pattern of a list that holds only patterns (include 0: '-'). */
int hyd_filter__add_plain(const struct dest *d, int include, int from_pm,
			  int perishable, const char *pat, const char **why);

#endif
