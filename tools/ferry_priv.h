/*
 * tools/ferry_priv.h — the subcommands of the `ferry` command. Each
 * takes the arguments after its own name (argv[0] is the subcommand) and
 * returns the process exit status. tools/ uses public headers only.
 */
#ifndef FERRY_FERRY_PRIV_H
#define FERRY_FERRY_PRIV_H

#include <getopt.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "hydrator/hydrator.h"

int ferry_cmd_sync(int argc, char **argv);   /* tools/ferry_sync.c */
int ferry_cmd_status(int argc, char **argv); /* tools/ferry_status.c */
int ferry_cmd_verify(int argc, char **argv); /* tools/ferry_verify.c */
int ferry_cmd_gc(int argc, char **argv);     /* tools/ferry_gc.c */
int ferry_cmd_token(int argc, char **argv);  /* tools/ferry_token.c */
int ferry_cmd_keygen(int argc, char **argv); /* tools/ferry_keygen.c */
int ferry_cmd_finish(int argc, char **argv); /* tools/ferry_finish.c */
int ferry_cmd_pin(int argc, char **argv);    /* tools/ferry_pin.c */

int ferry_cmd_trace(int argc, char **argv); /* tools/ferry_trace.c */

#define FERRY_EXIT_USAGE 2

/* The cache directory path names (tools/ferry_cache.c): a ferry mount or
 * a path inside one, or a cache directory. 0 with the absolute directory
 * in cache, or 1 after one line on stderr saying why not. */
int ferry_find_cache(const char *path, char *cache, size_t cap);

/* The options of a small subcommand (tools/ferry_opts.c): prog is its
 * log prefix ("ferry gc"); shortopts start with ':' and may hold q, v
 * (quiet sets quiet; verbose turns on debug lines) and h (usage to
 * stdout); any other option goes to extra (may be NULL), which returns 0
 * when it took it. Returns -1 to go on with argv[optind...], or the exit
 * status: 0 after --help, FERRY_EXIT_USAGE after one line on a bad
 * option. */
struct ferry_opts {
	const char *prog;
	const char *shortopts;
	const struct option *longopts;
	void (*usage)(FILE *f);
	int (*extra)(void *ctx, int ch, const char *arg);
	void *ctx;
	int quiet;
};
int ferry_opts_parse(int argc, char **argv, struct ferry_opts *o);

/* Seconds as H:MM:SS, "--:--:--" when s < 0 (unknown). tools/ferry_fmt.c */
void ferry_fmt_hms(int64_t s, char *buf, size_t cap);

/* "1.23M"-style, rsync's human units (powers of 1024). */
void ferry_human(uint64_t v, char *buf, size_t cap);

/* `ferry sync`'s output (tools/ferry_sync_out.c): what the options asked
 * for, and the state of the progress line. */
struct ferry_sync_out {
	int quiet, stats, tty;
	int progress;	  /* -P, --progress, --info=progress2: even no tty */
	int itemize;	  /* -i */
	int verbose;	  /* -v count */
	int dry_run;	  /* -n: the summary says so */
	int delete_extra; /* --delete: the summary counts deletions */
	int shown;	  /* a progress line is on screen */
	/* The rate shown is the phase's own: bytes of this phase since it
	 * began (fetching: chunk bytes stored; writing: file bytes). */
	int phase; /* -1 before the first call */
	double t0;
	uint64_t num0;
	double pct_shown;	/* the phase's last percentage: never less */
	const char *out_format; /* --out-format; NULL: -i's or -v's lines */
	FILE *log;		/* --log-file; NULL: none */
	const char *log_format; /* --log-file-format (default "%i %n%L") */
	pthread_mutex_t lock;
};
void ferry_sync_progress(void *arg, const struct hyd_status *st);
void ferry_sync_item(void *arg, const char *code, const char *path,
		     const char *extra, const struct hyd_item_attrs *attrs);

/* rsync's --out-format escapes (tools/ferry_outfmt.c). check: 0, or
 * -EINVAL with *bad the escape letter it does not know. */
int ferry_outfmt_check(const char *fmt, char *bad);
/* One item line into out (cap bytes, always NUL-terminated). */
void ferry_outfmt(const char *fmt, const char *code, const char *path,
		  const char *extra, const struct hyd_item_attrs *a, char *out,
		  size_t cap);
void ferry_sync_end_line(struct ferry_sync_out *c);
void ferry_sync_summary(const struct ferry_sync_out *c,
			const struct hyd_sync_result *r);

#endif
