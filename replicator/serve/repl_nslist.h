/*
 * replicator/serve/repl_nslist.h — the set of namespaces to serve, as
 * given: NAME=DIR arguments and the lines of a --namespaces FILE
 * (repl_nslist.c). Parsing and checking only; the running server turns a
 * list into served namespaces (repl_ns.c).
 *
 * The namespaces file has one NAME=DIR per line, the same text as an
 * argument: NAME is 1-64 of [A-Za-z0-9._-], not starting with '.'
 * (base_ns_name_check), DIR everything after the first '=' (relative to
 * the replicator's working directory, as an argument is). Blanks around
 * the line are ignored, as are blank lines and lines whose first
 * non-blank character is '#'; CRLF line ends are fine. At most
 * REPL_NSFILE_LINE_MAX bytes a line and REPL_NSFILE_MAX in all. A name
 * may appear once, in the arguments and the file together.
 *
 * No libuv in here, no thread of its own: every call works on the
 * caller's list, on the caller's thread.
 */
#ifndef FERRY_REPL_NSLIST_H
#define FERRY_REPL_NSLIST_H

#include <stddef.h>

#include "catalog/base/base.h"

#define REPL_NSFILE_MAX (16u << 20)
#define REPL_NSFILE_LINE_MAX 8192u
/* Namespaces one server takes, arguments and file together. */
#define REPL_NS_MAX 100000u

struct repl_ns_spec {
	char name[BASE_NS_NAME_MAX + 1];
	char *dir;     /* malloc'd, as written */
	size_t lineno; /* line of the namespaces file; 0: an argument */
};

/* A list owns its specs and their dirs. Zero-initialised is empty. */
struct repl_ns_list {
	size_t n, cap;
	struct repl_ns_spec *v;
};

void repl_ns_list_fini(struct repl_ns_list *l);

/* Make dst (empty) a copy of src. Returns 0 or -ENOMEM (dst empty). */
int repl_ns_list_copy(struct repl_ns_list *dst, const struct repl_ns_list *src);

/* The spec named name[0..len), or NULL. */
const struct repl_ns_spec *repl_ns_list_find(const struct repl_ns_list *l,
					     const char *name, size_t len);

/* Append the argument "NAME=DIR" (arg[0..len), no NUL needed). On
 * failure err holds one line naming the problem, as the usage error of
 * ferry-replicator says it. Returns 0, -EINVAL (no '=', empty DIR, a
 * bad name), -EEXIST (the name is in l already), -E2BIG (REPL_NS_MAX),
 * -ENOMEM. */
int repl_ns_list_add_arg(struct repl_ns_list *l, const char *arg, size_t len,
			 char *err, size_t errcap);

/* Append every NAME=DIR line of a namespaces file's text[0..len) (no
 * NUL needed). A name already in l (an argument, or an earlier line) is
 * -EEXIST. On failure err says "line N: ..." for the first bad line and
 * l is as it was. Returns 0, -EINVAL, -EEXIST, -E2BIG, -ENOMEM. */
int repl_ns_list_parse(struct repl_ns_list *l, const char *text, size_t len,
		       char *err, size_t errcap);

/* Read the file at path and append its lines (repl_ns_list_parse). Errors
 * as there, plus -errno from reading it (err says why) and -EFBIG when it
 * is larger than REPL_NSFILE_MAX. Blocking. */
int repl_ns_list_load(struct repl_ns_list *l, const char *path, char *err,
		      size_t errcap);

/* Is each DIR of l[from..n) a directory? On failure err says "line N:"
 * (or the argument) with the name, the path and why. Returns 0, -ENOTDIR
 * or the -errno of stat. Blocking. */
int repl_ns_list_check_dirs(const struct repl_ns_list *l, size_t from,
			    char *err, size_t errcap);

#endif
