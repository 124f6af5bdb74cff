/*
 * tools/ferry_sync.c — `ferry sync URL DEST`: options, the progress line
 * and the summary around hyd_sync (hydrator.h).
 *
 * Progress goes to stdout when it is a terminal, one line rewritten with
 * \r like `rsync --info=progress2`: first while chunks are fetched (bytes
 * are unique chunk bytes stored), then while the tree is written (bytes
 * are file bytes checked or written). Like rsync, a two-line summary ends
 * every run and --stats asks for the full table. Errors, one line per
 * entry, go to stderr. Exit: 0 all reproduced, 1 any entry failed or the
 * run failed, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_internal.h"

#define EXIT_USAGE 2
#define JOBS_MAX 256L

struct cli {
	int quiet, stats, tty;
	int log_level; /* BASE_LOG_*: -v debug, -q errors only */
	int shown;     /* a progress line is on screen */
	/* The rate shown is the phase's own: bytes of this phase since it
	 * began (fetching: chunk bytes stored; writing: file bytes). */
	int phase; /* -1 before the first call */
	double t0;
	uint64_t num0;
};

static double now_s(void)
{
	return (double)base_now_ns() / 1e9;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry sync [OPTIONS] URL DEST\n"
	    "\n"
	    "Fetch everything the ferry-replicator at URL serves and write a\n"
	    "plain directory tree at DEST identical to the source: contents,\n"
	    "modes, mtimes, owners (as root), symlinks, hard links, xattrs,\n"
	    "fifos and devices, empty directories. Chunks are verified\n"
	    "(SHA-256) and kept in the same cache a mount of URL uses, so an\n"
	    "interrupted sync resumes: stored chunks are not fetched again\n"
	    "and files already correct in DEST are not rewritten. Entries in\n"
	    "DEST that the source lacks are left alone.\n"
	    "\n"
	    "  URL    http[s]://HOST[:PORT]/v1/NAME\n"
	    "  DEST   directory to create or update (not inside a ferry "
	    "mount)\n"
	    "\n"
	    "Options:\n"
	    "  -c, --cache-dir DIR  chunk store and catalogs (default: as for\n"
	    "                       ferry-hydrator, ~/.cache/ferry/NAME-HASH "
	    "or\n"
	    "                       /var/cache/ferry/NAME-HASH as root)\n"
	    "  -j, --jobs N         parallel HTTP connections (default 8)\n"
	    "      --timeout S      give up one chunk fetch after S seconds\n"
	    "                       (default 30); failed chunks are retried\n"
	    "                       once at the end\n"
	    "      --no-owners      do not set owners (default: set them when\n"
	    "                       run as root)\n"
	    "      --stats          print the full statistics table at the "
	    "end\n"
	    "  -v, --verbose        name every retry and failed fetch (debug\n"
	    "                       lines)\n"
	    "  -q, --quiet          no progress and no summary, errors only\n"
	    "  -h, --help           this text\n"
	    "\n"
	    "Exit status: 0 when DEST reproduces the source, 1 when any entry\n"
	    "could not be reproduced (each is named on stderr) or the run\n"
	    "failed, 2 on bad usage. See ferry(1).\n");
}

/* "1.23M"-style, rsync's human units (powers of 1024). */
static void human(uint64_t v, char *buf, size_t cap)
{
	static const char units[] = "KMGTPE";
	double d = (double)v;
	int u = -1;

	while (d >= 1024.0 && u < 5) {
		d /= 1024.0;
		u++;
	}
	if (u < 0)
		snprintf(buf, cap, "%" PRIu64, v);
	else
		snprintf(buf, cap, "%.2f%c", d, units[u]);
}

static void on_progress(void *arg, const struct hyd_status *st)
{
	struct cli *c = arg;
	char done[32], rate[32], eta[32], man[64] = "";
	uint64_t num, den;
	double pct, dt, r = 0;
	int phase = st->state == HYD_STATE_BACKFILLING;

	if (c->quiet || !c->tty)
		return;
	if (st->state == HYD_STATE_BACKFILLING) {
		num = st->unique_bytes_stored;
		den = st->unique_bytes_total;
	} else {
		num = st->bytes_hydrated;
		den = st->bytes_total;
	}
	if (phase != c->phase) {
		c->phase = phase;
		c->t0 = now_s();
		c->num0 = num;
	}
	dt = now_s() - c->t0;
	if (dt > 0.2 && num >= c->num0)
		r = (double)(num - c->num0) / dt;
	pct = den ? 100.0 * (double)num / (double)den : 100.0;
	human(num, done, sizeof(done));
	human((uint64_t)r, rate, sizeof(rate));
	ferry_fmt_hms(st->eta_s, eta, sizeof(eta));
	/* Pending files: how many manifests are here, while any is not (the
	 * chunk total grows as they come). */
	if (st->manifests_local < st->manifests_total)
		snprintf(man, sizeof(man), " manifests=%" PRIu64 "/%" PRIu64,
			 st->manifests_local, st->manifests_total);
	if (phase)
		printf("\r%14s %3.0f%% %10s/s %10s  fetch chunks=%" PRIu64
		       "/%" PRIu64 "%s\033[K",
		       done, pct, rate, eta, st->chunks_stored,
		       st->chunks_total, man);
	else
		printf("\r%14s %3.0f%% %10s/s %10s  write files=%" PRIu64
		       "\033[K",
		       done, pct, rate, eta, st->files_hydrated);
	fflush(stdout);
	c->shown = 1;
}

static void summary(const struct cli *c, const struct hyd_sync_result *r)
{
	char a[32], b[32], d[32];
	uint64_t files_all = r->files + r->dirs + r->symlinks + r->specials;
	double rate =
	    r->elapsed_s > 0 ? (double)r->wire_bytes / r->elapsed_s : 0;

	if (c->quiet)
		return;
	human(r->bytes_written, a, sizeof(a));
	human(r->wire_bytes, b, sizeof(b));
	human((uint64_t)rate, d, sizeof(d));
	printf("wrote %" PRIu64 " files (%s bytes), fetched %" PRIu64
	       " chunks (%s wire bytes)  %s bytes/sec\n",
	       r->files_written, a, r->chunks_fetched, b, d);
	human(r->logical_bytes, a, sizeof(a));
	printf("total size is %s in %" PRIu64 " entries, %.1f s%s\n", a,
	       files_all, r->elapsed_s,
	       r->failed ? "  (SOME ENTRIES FAILED)" : "");
	if (!c->stats)
		return;
	printf("\nNumber of entries: %" PRIu64 " (reg: %" PRIu64
	       ", dir: %" PRIu64 ", link: %" PRIu64 ", special: %" PRIu64 ")\n",
	       files_all, r->files, r->dirs, r->symlinks, r->specials);
	printf("Number of regular files written: %" PRIu64 "\n",
	       r->files_written);
	printf("Total file size: %" PRIu64 " bytes\n", r->logical_bytes);
	printf("Total written file size: %" PRIu64 " bytes\n",
	       r->bytes_written);
	printf("Unique chunk bytes: %" PRIu64 " bytes\n", r->unique_bytes);
	printf("Dedup savings: %" PRId64 " bytes\n",
	       (int64_t)(r->logical_bytes - r->unique_bytes));
	printf("Bytes at rest in the store: %" PRIu64 " bytes\n",
	       r->rest_bytes);
	printf("Compression savings: %" PRId64 " bytes\n",
	       (int64_t)(r->unique_bytes - r->rest_bytes));
	printf("Chunks fetched: %" PRIu64 "\n", r->chunks_fetched);
	printf("Wire bytes received: %" PRIu64 "\n", r->wire_bytes);
	printf("Elapsed: %.3f s\n", r->elapsed_s);
	printf("Rate: %.0f wire bytes/sec\n", rate);
	printf("Failed entries: %" PRIu64 "\n", r->failed);
}

/* 0 to run, 1 help printed, -1 usage error (reported). */
static int parse_args(int argc, char **argv, struct hyd_sync_opts *o,
		      struct cli *c)
{
	enum { OPT_TIMEOUT = 256, OPT_NO_OWNERS, OPT_STATS };
	static const struct option longopts[] = {
	    {"cache-dir", required_argument, NULL, 'c'},
	    {"jobs", required_argument, NULL, 'j'},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"no-owners", no_argument, NULL, OPT_NO_OWNERS},
	    {"stats", no_argument, NULL, OPT_STATS},
	    {"verbose", no_argument, NULL, 'v'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	long v;
	int ch;

	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, ":c:j:vqh", longopts, NULL)) !=
	       -1) {
		switch (ch) {
		case 'c':
			o->cache_dir = optarg;
			break;
		case 'j':
			if (base_opt_long("--jobs", optarg, 1, JOBS_MAX, &v) <
			    0)
				return -1;
			o->jobs = (unsigned)v;
			break;
		case OPT_TIMEOUT:
			if (base_opt_long("--timeout", optarg, 1, 86400,
					  &o->timeout_s) < 0)
				return -1;
			break;
		case OPT_NO_OWNERS:
			o->owners = 0;
			break;
		case OPT_STATS:
			c->stats = 1;
			break;
		case 'v':
			c->log_level = BASE_LOG_DEBUG;
			break;
		case 'q':
			c->quiet = 1;
			c->log_level = BASE_LOG_ERROR;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			base_opt_error(ch, argv);
			return -1;
		}
	}
	if (argc - optind != 2) {
		base_error("expected URL and DEST, got %d argument%s (see "
			   "--help)",
			   argc - optind, argc - optind == 1 ? "" : "s");
		return -1;
	}
	o->url = argv[optind];
	o->dest = argv[optind + 1];
	return 0;
}

int ferry_cmd_sync(int argc, char **argv)
{
	struct hyd_sync_opts o;
	struct hyd_sync_result res;
	struct cli c;
	int r;

	memset(&o, 0, sizeof(o));
	memset(&c, 0, sizeof(c));
	c.phase = -1;
	c.log_level = BASE_LOG_INFO;
	o.owners = -1; /* hyd_sync: < 0 means "when root" */
	base_log_init("ferry sync", BASE_LOG_INFO);
	r = parse_args(argc, argv, &o, &c);
	if (r != 0)
		return r > 0 ? 0 : EXIT_USAGE;
	base_log_init("ferry sync", c.log_level);
	c.tty = isatty(STDOUT_FILENO);
	o.progress = on_progress;
	o.progress_arg = &c;
	r = hyd_sync(&o, &res);
	if (c.shown)
		printf("\n");
	if (r == -EINVAL && res.files == 0 && res.dirs == 0)
		return EXIT_USAGE; /* a bad URL, already explained */
	if (r < 0)
		return 1;
	summary(&c, &res);
	if (res.failed) {
		base_error("%" PRIu64 " entr%s could not be reproduced (named "
			   "above)",
			   res.failed, res.failed == 1 ? "y" : "ies");
		return 1;
	}
	return 0;
}
