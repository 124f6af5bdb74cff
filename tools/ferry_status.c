/*
 * tools/ferry_status.c — `ferry status MOUNTPOINT|CACHEDIR`: how far a
 * cache is hydrated, how fast, how long to go.
 *
 * The numbers come from hyd_status_query: the running hydrator's control
 * socket when one answers, else the cache's files. A CACHEDIR is named
 * directly. A MOUNTPOINT (or any path inside one) names its cache through
 * the mount table: the /proc/self/mountinfo line of the path's device (the
 * last one, if several) is a ferry mount when its type is fuse.ferry, and
 * its source, the FUSE fsname the hydrator mounted with, is
 * HYD_FSNAME_PREFIX followed by the absolute cache directory.
 *
 * Output: a progress line in the manner of rsync --info=progress2 and a
 * few lines of detail; --watch redraws them in place on a terminal (and
 * appends blocks otherwise); --json prints hyd_status_json lines.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

#define PROG "ferry status"
#define STATUS_JSON_CAP 32768 /* > any hyd_status_json line */
#define BAR_WIDTH 24
#define DETAIL_LINES 10 /* lines after the progress line */

/* Set by SIGINT/SIGTERM during --watch; the only global, a signal flag. */
static volatile sig_atomic_t stop_requested;

struct opts {
	const char *path;
	int json;
	int watch;
	double interval_s;
	int log_level;		/* BASE_LOG_*: -v debug, -q errors only */
	struct hyd_creds creds; /* for the replicator's /stats */
};

/* What the previous refresh saw, for a rate when the hydrator gives none
 * (a cache being filled by `ferry sync`, which has no control socket). */
struct sample {
	int have;
	double t;
	uint64_t stored;
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry status MOUNTPOINT|CACHEDIR [--json] "
	    "[--watch [SECONDS]] [-v|-q]\n"
	    "\n"
	    "Show how much of a ferry tree is hydrated: files and bytes,\n"
	    "unique chunks, bytes on the wire and at rest, savings from\n"
	    "dedup and compression, rate, ETA and the hydrator's state.\n"
	    "Asks the running hydrator (CACHEDIR/control.sock); without one\n"
	    "the cache's files are read.\n"
	    "\n"
	    "  MOUNTPOINT        a ferry-hydrator mount, or a path in one "
	    "(its\n"
	    "                    cache is the one the mount records)\n"
	    "  CACHEDIR          a cache directory (state.db, catalogs/)\n"
	    "  --json            one line of JSON (stable keys) per refresh\n"
	    "  --watch [SECONDS] refresh every SECONDS (default 1) until\n"
	    "                    complete or interrupted\n"
	    "  -v, --verbose     debug lines on stderr (why there is no live\n"
	    "                    answer, the SQLite codes behind an error)\n"
	    "  -q, --quiet       errors only on stderr\n"
	    "  --ca-file FILE, --cert FILE, --key FILE, --token-file FILE\n"
	    "                    how to reach the replicator for its hashing\n"
	    "                    progress (as for ferry-hydrator)\n"
	    "  -h, --help        this text\n"
	    "\n"
	    "Exit status: 0 shown; 1 not a ferry mount or cache, or its\n"
	    "status cannot be read; 2 bad usage.\n");
}

/* Seconds for --watch: a decimal number in [0.1, 86400]. */
static int parse_seconds(const char *s, double *ret)
{
	char *end;
	double v;

	if (!s || !*s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0.1 || v > 86400)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* The credential option a names (HYD_OPT_*), or 0. */
static int creds_code(const char *a)
{
	if (!strcmp(a, "--ca-file"))
		return HYD_OPT_CA_FILE;
	if (!strcmp(a, "--cert"))
		return HYD_OPT_CERT;
	if (!strcmp(a, "--key"))
		return HYD_OPT_KEY;
	if (!strcmp(a, "--token-file"))
		return HYD_OPT_TOKEN_FILE;
	return 0;
}

/* 0 to go on, 1 when help was printed, -1 on a usage error (reported). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	int i, code, only_paths = 0;

	memset(o, 0, sizeof(*o));
	o->interval_s = 1.0;
	o->log_level = BASE_LOG_INFO;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!only_paths && !strcmp(a, "--")) {
			only_paths = 1;
		} else if (!only_paths &&
			   (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
			usage(stdout);
			return 1;
		} else if (!only_paths && !strcmp(a, "--json")) {
			o->json = 1;
		} else if (!only_paths &&
			   (!strcmp(a, "-v") || !strcmp(a, "--verbose"))) {
			o->log_level = BASE_LOG_DEBUG;
		} else if (!only_paths &&
			   (!strcmp(a, "-q") || !strcmp(a, "--quiet"))) {
			o->log_level = BASE_LOG_ERROR;
		} else if (!only_paths && !strcmp(a, "--watch")) {
			o->watch = 1;
			/* SECONDS is optional: take the next word only if it
			 * reads as a number. */
			if (i + 1 < argc &&
			    parse_seconds(argv[i + 1], &o->interval_s) == 0)
				i++;
		} else if (!only_paths && !strncmp(a, "--watch=", 8)) {
			o->watch = 1;
			if (parse_seconds(a + 8, &o->interval_s) < 0) {
				base_error("--watch wants seconds (0.1-86400), "
					   "not '%s'",
					   a + 8);
				return -1;
			}
		} else if (!only_paths && (code = creds_code(a)) != 0) {
			if (i + 1 >= argc) {
				base_error("%s wants a FILE", a);
				return -1;
			}
			if (hyd_creds_opt(&o->creds, code, argv[++i]) < 0)
				return -1;
		} else if (!only_paths && a[0] == '-' && a[1]) {
			base_error("unknown option '%s' (see ferry status "
				   "--help)",
				   a);
			return -1;
		} else if (o->path) {
			base_error("one MOUNTPOINT or CACHEDIR, not '%s' too",
				   a);
			return -1;
		} else {
			o->path = a;
		}
	}
	if (!o->path) {
		base_error("expected MOUNTPOINT or CACHEDIR (see ferry status "
			   "--help)");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Human output                                                       */
/* ------------------------------------------------------------------ */

static void fmt_bytes(uint64_t v, char *buf, size_t cap)
{
	static const char *const units[] = {"KiB", "MiB", "GiB",
					    "TiB", "PiB", "EiB"};
	double d = (double)v;
	int u = -1;

	if (v < 1024) {
		snprintf(buf, cap, "%" PRIu64 " B", v);
		return;
	}
	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	snprintf(buf, cap, "%.*f %s", d < 10 ? 2 : 1, d, units[u]);
}

static void fmt_rate(double r, char *buf, size_t cap)
{
	char b[24];

	if (!(r > 0)) {
		snprintf(buf, cap, "--");
		return;
	}
	fmt_bytes(r > 1e18 ? UINT64_MAX : (uint64_t)r, b, sizeof(b));
	snprintf(buf, cap, "%s/s", b);
}

/* part of whole in percent; whole 0 is 100%. */
static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 100.0;
}

static double now_s(void)
{
	return (double)base_now_ns() / 1e9;
}

/* The source's hashing, next to hydration: what a deferred catalog's
 * missing manifests wait for. */
static void render_source(const struct hyd_status *st,
			  const struct hyd_creds *creds, char *line)
{
	struct hyd_source_hashing h;
	char a[32], b[32], rate[32], eta[32];
	int r = st->url[0] ? hyd_source_hashing(st->url, creds, &h) : -ENOENT;

	if (r < 0) {
		snprintf(line, 512, "source         %s",
			 r == -EBADMSG ? "does not say how far its hashing is"
			 : r == -ENOENT
			     ? "unknown"
			     : "cannot ask the replicator how far it is");
		return;
	}
	if (!strcmp(h.state, "none")) {
		snprintf(line, 512,
			 "source         every manifest was in the catalog");
		return;
	}
	fmt_bytes(h.bytes_done, a, sizeof(a));
	fmt_bytes(h.bytes, b, sizeof(b));
	fmt_rate(h.rate, rate, sizeof(rate));
	ferry_fmt_hms(!strcmp(h.state, "hashing") ? (int64_t)h.eta_s : 0, eta,
		      sizeof(eta));
	snprintf(line, 512,
		 "source         %s: %" PRIu64 " of %" PRIu64
		 " files hashed (%s of %s, %s, %s ETA, %" PRIu64 " changed)",
		 h.state, h.files_done, h.files, a, b, rate, eta, h.changed);
}

/* The generation served, and since when (a mount that follows switches
 * in place). */
static void render_generation(const struct hyd_status *st, char *line)
{
	time_t t = (time_t)st->switched_at;
	char when[64] = "";
	struct tm tm;

	if (st->switched_at > 0 && gmtime_r(&t, &tm))
		strftime(when, sizeof(when),
			 " (served since %Y-%m-%d %H:%M:%S UTC)", &tm);
	snprintf(line, 512, "generation     %" PRIu64 "%s", st->generation,
		 when);
}

/* --cache-max's numbers, for the end of the "at rest" line ("" without
 * a bound). */
static void render_bound(const struct hyd_status *st, char *out, size_t cap)
{
	char a[32], b[32], c[32], d[32];
	uint64_t look = st->cache_hits + st->cache_misses;
	size_t n;

	out[0] = '\0';
	if (!st->cache_max)
		return;
	fmt_bytes(st->cache_max, a, sizeof(a));
	fmt_bytes(st->cache_pinned, b, sizeof(b));
	fmt_bytes(st->cache_evicted, c, sizeof(c));
	snprintf(out, cap,
		 "; bound %s, %s pinned (%" PRIu64 " file%s), %s evicted, hit "
		 "rate %.1f%% of %" PRIu64 " lookups",
		 a, b, st->pin_files, st->pin_files == 1 ? "" : "s", c,
		 look ? 100.0 * (double)st->cache_hits / (double)look : 0.0,
		 look);
	n = strlen(out);
	if (st->cold_max) {
		fmt_bytes(st->cold_bytes, c, sizeof(c));
		fmt_bytes(st->cold_max, d, sizeof(d));
		snprintf(out + n, cap - n, "; capacity tier %s of %s", c, d);
		n = strlen(out);
	}
	if (st->cache_full)
		snprintf(out + n, cap - n, "; backfill stopped at the bound");
}

/* The lines of one refresh into lines[0..1+DETAIL_LINES). */
static void render(const struct hyd_status *st, const struct sample *prev,
		   const struct hyd_creds *creds, char lines[][512])
{
	char a[32], b[32], rate[32], eta[32], el[32], bar[BAR_WIDTH + 1];
	char text[HYD_URL_MAX], pf[320];
	double p = pct(st->bytes_hydrated, st->bytes_total), r = st->rate_now;
	int64_t eta_s = st->eta_s;
	int64_t comp = (int64_t)(st->unique_bytes_stored - st->rest_bytes);
	int i, k = 0, live, fill = (int)(p / 100.0 * BAR_WIDTH);

	/* No rate from a hydrator: estimate from what the store gained. */
	if (!(r > 0) && prev->have && now_s() > prev->t &&
	    st->unique_bytes_stored > prev->stored) {
		r = (double)(st->unique_bytes_stored - prev->stored) /
		    (now_s() - prev->t);
		if (eta_s < 0)
			eta_s = (int64_t)((double)(st->unique_bytes_total -
						   st->unique_bytes_stored) /
					  r);
	}
	for (i = 0; i < BAR_WIDTH; i++)
		bar[i] = i < fill ? '#' : '-';
	bar[BAR_WIDTH] = '\0';
	fmt_bytes(st->bytes_hydrated, a, sizeof(a));
	fmt_bytes(st->bytes_total, b, sizeof(b));
	fmt_rate(r, rate, sizeof(rate));
	ferry_fmt_hms(st->state == HYD_STATE_COMPLETE ? 0 : eta_s, eta,
		      sizeof(eta));
	snprintf(lines[k++], 512, "%11s / %-11s %5.1f%%  %12s  %9s ETA  [%s]",
		 a, b, p, rate, eta, bar);
	/* Pending files' manifests on the same line: the line count of a
	 * --watch redraw stays fixed. */
	if (st->manifests_total)
		snprintf(lines[k++], 512,
			 "files          %" PRIu64 " of %" PRIu64
			 " hydrated (manifests: %" PRIu64 " of %" PRIu64
			 " local, %" PRIu64 " changed at the source)",
			 st->files_hydrated, st->files_total,
			 st->manifests_local, st->manifests_total,
			 st->manifests_changed);
	else
		snprintf(lines[k++], 512,
			 "files          %" PRIu64 " of %" PRIu64 " hydrated",
			 st->files_hydrated, st->files_total);
	fmt_bytes(st->unique_bytes_stored, a, sizeof(a));
	fmt_bytes(st->unique_bytes_total, b, sizeof(b));
	snprintf(lines[k++], 512,
		 "unique chunks  %" PRIu64 " of %" PRIu64 " stored (%s of %s)",
		 st->chunks_stored, st->chunks_total, a, b);
	fmt_bytes(st->wire_bytes, a, sizeof(a));
	fmt_rate(st->rate_avg, b, sizeof(b));
	snprintf(lines[k++], 512, "wire           %s received (average %s)", a,
		 b);
	fmt_bytes(st->rest_bytes, a, sizeof(a));
	render_bound(st, text, sizeof(text));
	snprintf(lines[k++], 512, "at rest        %s in volumes%.400s", a,
		 text);
	fmt_bytes(st->bytes_total > st->unique_bytes_total
		      ? st->bytes_total - st->unique_bytes_total
		      : 0,
		  a, sizeof(a));
	if (st->manifests_local < st->manifests_total)
		snprintf(lines[k++], 512,
			 "dedup          known once every manifest is local");
	else
		snprintf(lines[k++], 512,
			 "dedup          saves %s (%.1f%% of file bytes)", a,
			 100.0 - pct(st->unique_bytes_total, st->bytes_total));
	if (comp > 0) {
		fmt_bytes((uint64_t)comp, a, sizeof(a));
		snprintf(lines[k++], 512,
			 "compression    saves %s (%.1f%% of stored chunks)", a,
			 pct((uint64_t)comp, st->unique_bytes_stored));
	} else {
		snprintf(lines[k++], 512, "compression    saves nothing");
	}
	ferry_fmt_hms((int64_t)st->elapsed_s, el, sizeof(el));
	/* Live numbers come only from a hydrator that answered: it reports
	 * its elapsed time, and never "stopped". */
	live = st->elapsed_s > 0 || (st->state != HYD_STATE_STOPPED &&
				     st->state != HYD_STATE_COMPLETE);
	pf[0] = '\0';
	if (st->prefetch[0]) {
		fmt_bytes(st->prefetch_bytes_done, a, sizeof(a));
		fmt_bytes(st->prefetch_bytes, b, sizeof(b));
		base_text_escape(text, sizeof(text), st->prefetch,
				 strnlen(st->prefetch, sizeof(st->prefetch)));
		snprintf(pf, sizeof(pf),
			 "; prefetch %.16s: %" PRIu64 " of %" PRIu64
			 " ranges, %s of %s, %" PRIu64 " of %" PRIu64
			 " files skipped",
			 text, st->prefetch_ranges_done, st->prefetch_ranges, a,
			 b, st->prefetch_skipped, st->prefetch_files);
	}
	if (st->into[0]) {
		size_t n = strlen(pf);

		base_text_escape(text, sizeof(text), st->into_dir,
				 strnlen(st->into_dir, sizeof(st->into_dir)));
		snprintf(pf + n, sizeof(pf) - n,
			 "; into %.120s: %.12s, generation %" PRIu64, text,
			 st->into, st->into_generation);
	}
	if (live)
		snprintf(lines[k++], 512,
			 "state          %s (pid %ld, up %s; this run: %" PRIu64
			 " mismatches, %" PRIu64 " retries, %" PRIu64
			 " failures%s)",
			 hyd_state_name(st->state), st->pid, el, st->mismatches,
			 st->retries, st->failures, pf);
	else if (st->pid > 0)
		snprintf(lines[k++], 512,
			 "state          %s (hydrator pid %ld is running but "
			 "did not answer on control.sock)",
			 hyd_state_name(st->state), st->pid);
	else
		snprintf(lines[k++], 512,
			 "state          %s (no hydrator running%s)",
			 hyd_state_name(st->state), pf);
	/* A string from the hydrator, safe on a terminal: control bytes
	 * (escape sequences) are shown as \xNN, as in a log line. */
	base_text_escape(text, sizeof(text),
			 st->last_error[0] ? st->last_error : "none",
			 st->last_error[0] ? strlen(st->last_error) : 4);
	snprintf(lines[k++], 512, "last error     %.480s", text);
	render_generation(st, lines[k++]);
	render_source(st, creds, lines[k++]);
}

/* Print a refresh. On a terminal in --watch the block is redrawn in place
 * (cursor up over the previous one); elsewhere blocks follow each other. */
static void show_human(const struct hyd_status *st, const struct sample *prev,
		       const struct hyd_creds *creds, int tty, int watch,
		       int redraw)
{
	char lines[1 + DETAIL_LINES][512];
	int i;

	render(st, prev, creds, lines);
	if (tty && watch && redraw)
		printf("\033[%dA", 1 + DETAIL_LINES);
	else if (!tty && watch && redraw)
		printf("\n");
	for (i = 0; i < 1 + DETAIL_LINES; i++) {
		if (tty)
			printf("\r\033[K");
		printf("%s\n", lines[i]);
	}
	fflush(stdout);
}

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static int show_json(const struct hyd_status *st, const struct hyd_creds *creds)
{
	char *buf = malloc(STATUS_JSON_CAP);
	struct hyd_source_hashing h;
	int n, known;

	if (!buf) {
		base_error("out of memory");
		return 1;
	}
	/* The source as render_source asks it: unknown is null. */
	known = st->url[0] && hyd_source_hashing(st->url, creds, &h) == 0;
	n = hyd_status_json_source(st, known ? &h : NULL, buf, STATUS_JSON_CAP);
	if (n >= 0)
		printf("%s\n", buf);
	else
		base_log_err(BASE_LOG_ERROR, n, "cannot write the status");
	free(buf);
	fflush(stdout);
	return n >= 0 ? 0 : 1;
}

/* Sleep s seconds, or less if a stop is requested. */
static void nap(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	while (!stop_requested && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int ferry_cmd_status(int argc, char **argv)
{
	char cache[PATH_MAX];
	struct sample prev = {0};
	struct sigaction sa;
	struct hyd_status *st;
	struct opts o;
	int r, rc = 0, tty, redraw = 0;

	base_log_init(PROG, BASE_LOG_INFO);
	r = parse_args(argc, argv, &o);
	if (r != 0)
		return r > 0 ? 0 : 2;
	base_log_init(PROG, o.log_level);
	if (ferry_find_cache(o.path, cache, sizeof(cache)) != 0)
		return 1;
	st = malloc(sizeof(*st));
	if (!st) {
		base_error("out of memory");
		return 1;
	}
	if (o.watch) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	tty = isatty(STDOUT_FILENO);
	for (;;) {
		r = hyd_status_query(cache, st);
		if (r < 0) {
			base_log_err(BASE_LOG_ERROR, r,
				     "cannot read the status of the cache%s "
				     "dir=\"%s\"",
				     r == -ENOENT ? " (no catalog in it yet)"
						  : "",
				     cache);
			rc = 1;
			break;
		}
		if (o.json)
			rc = show_json(st, &o.creds);
		else
			show_human(st, &prev, &o.creds, tty, o.watch, redraw);
		redraw = 1;
		prev.have = 1;
		prev.t = now_s();
		prev.stored = st->unique_bytes_stored;
		if (rc || !o.watch || stop_requested ||
		    st->state == HYD_STATE_COMPLETE)
			break;
		nap(o.interval_s);
		if (stop_requested)
			break;
	}
	free(st);
	return rc;
}
