/*
 * tools/ferry_sync.c — `ferry sync [OPTIONS] URL DEST`: rsync's options
 * and exit codes around hyd_sync (hydrator.h), and --watch.
 *
 * Exit codes are rsync's where they apply (docs/man/ferry.1): 0 done, 1
 * usage, 2 a catalog or protocol this build does not speak, 10 the
 * server cannot be reached (or went away mid-run), 11 DEST cannot be
 * written, 12 bad data from the server, 20 interrupted, 22 out of memory,
 * 23 some entries failed, 24 some entries vanished (changed) at the
 * source and nothing else failed, 30 the server stopped answering
 * mid-run (fetches timed out), 35 timed out connecting. A SIGINT or SIGTERM
 * ends the process at once with 20: the store is crash-safe and the next run
 * resumes (the writer's temp files are removed then).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

/* rsync's exit codes */
#define RERR_SYNTAX 1
#define RERR_PROTOCOL 2
#define RERR_SOCKETIO 10
#define RERR_FILEIO 11
#define RERR_STREAMIO 12
#define RERR_SIGNAL 20
#define RERR_MALLOC 22
#define RERR_PARTIAL 23
#define RERR_VANISHED 24
#define RERR_TIMEOUT 30
#define RERR_CONTIMEOUT 35

#define JOBS_MAX 256L
#define POLL_DEFAULT_S 30L

#define PREFETCH_MAX 16
#define SEEDS_MAX 20

struct args {
	struct hyd_sync_opts o;
	struct hyd_creds creds;	      /* o.creds points here */
	struct hyd_ssh_opts ssh_opts; /* -e/--rsh, --remote-ferry */
	struct hyd_ssh ssh;	      /* a HOST:PATH source's session */
	char dest_buf[PATH_MAX];      /* DEST/NAME for HOST:PATH without '/' */
	char url_buf[PATH_MAX];	      /* a local file's URL */
	hyd_filter *filter;
	hyd_attrmap *attrmap; /* --chmod, --chown, --usermap, --groupmap */
	struct hyd_sync_backup backup; /* -b, --backup-dir, --suffix */
	const char *log_file;	       /* --log-file */
	const char *files_from;	       /* --files-from */
	int from0, recursive;	       /* -0; -r given (for --files-from) */
	int cvs;		       /* -C: its rules go after the rest */
	int nF;			       /* -F given so many times */
	int backup_on, suffix_set;
	int watch;
	long poll_s;
	/* --prefetch: traces read at the start; tracep for o.traces */
	struct hyd_trace traces[PREFETCH_MAX];
	const struct hyd_trace *tracep[PREFETCH_MAX];
	/* --seed, --link-dest, --copy-dest, --compare-dest; o.seeds */
	struct hyd_seed_dir seeds[SEEDS_MAX];
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry sync [OPTIONS] URL|[USER@]HOST:PATH|SRC DEST\n"
	    "\n"
	    "Fetch what the ferry-replicator at URL serves and make DEST a\n"
	    "plain directory tree identical to it: contents, modes, mtimes,\n"
	    "owners (as root), symlinks, hard links, xattrs, fifos and\n"
	    "devices, empty directories. Chunks are verified (SHA-256) and\n"
	    "kept in the cache a mount of URL uses, so an interrupted sync\n"
	    "resumes: stored chunks are not fetched again and files already\n"
	    "correct in DEST are not rewritten. Options and exit codes are\n"
	    "rsync's (always -a, -H, -X); entries DEST has and the source\n"
	    "lacks stay unless --delete.\n"
	    "\n"
	    "  URL    http[s]://HOST[:PORT]/v1/NAME[/SUB/DIR[/]]: the whole\n"
	    "         namespace (its contents go into DEST), or a directory\n"
	    "         of it: with a trailing '/' its contents go into DEST,\n"
	    "         without one it becomes DEST/DIR (rsync's rule)\n"
	    "  [USER@]HOST:PATH, ssh://[USER@]HOST[:PORT]/PATH\n"
	    "         over ssh, nothing to set up at HOST but sshd and\n"
	    "         ferry-replicator on its PATH: it is started there\n"
	    "         for this run (state kept in ~/.cache/ferry/ssh/,\n"
	    "         so a rerun hashes only what changed) and stopped at\n"
	    "         the end; no port is opened. PATH/ fills DEST, PATH\n"
	    "         makes DEST/NAME\n"
	    "  SRC    a local directory: the same, without ssh (the\n"
	    "         replicator beside ferry, state in ~/.cache/ferry/\n"
	    "         local/)\n"
	    "         A URL, HOST:PATH or SRC that names a file copies that\n"
	    "         file: into DEST when DEST is a directory, else as DEST\n"
	    "  DEST   directory to create or update (not inside a ferry "
	    "mount)\n"
	    "\n"
	    "Options:\n"
	    "  -e, --rsh COMMAND    the ssh command line for HOST:PATH\n"
	    "                       (default: $FERRY_RSH, else ssh)\n"
	    "      --remote-ferry PATH  ferry-replicator's path on HOST (or\n"
	    "                       for SRC, here)\n"
	    "      --cache-dir DIR  chunk store and catalogs (default: as for\n"
	    "                       ferry-hydrator, ~/.cache/ferry/NAME-HASH "
	    "or\n"
	    "                       /var/cache/ferry/NAME-HASH as root); -c\n"
	    "                       is rsync's --checksum since 0.2\n"
	    "  -n, --dry-run        show what would change; fetch no chunk\n"
	    "  -i, --itemize-changes  one line per change in rsync's format\n"
	    "                       (YXcstpoguax PATH)\n"
	    "      --delete         delete entries DEST has and the source\n"
	    "                       lacks (none after an error, or when the\n"
	    "                       source's scan left entries out), after\n"
	    "                       the transfer: --delete-after, -delay,\n"
	    "                       -before, -during and --del are the same\n"
	    "      --delete-excluded  also delete excluded entries in DEST\n"
	    "      --existing       create nothing DEST lacks\n"
	    "      --ignore-existing  update nothing DEST has\n"
	    "  -u, --update         leave files newer in DEST\n"
	    "      --size-only      a file DEST has with the source's size\n"
	    "                       is up to date (times, modes still set)\n"
	    "      --max-size SIZE, --min-size SIZE\n"
	    "                       leave regular files larger (smaller)\n"
	    "                       than SIZE (K, M, G: 1024; KB, MB: 1000)\n"
	    "                       as DEST has them (their chunks are not\n"
	    "                       fetched either)\n"
	    "      --seed DIR       take the chunks of files DIR holds at the\n"
	    "                       same path (an older copy, a previous\n"
	    "                       checkpoint) from there, verified by\n"
	    "                       SHA-256, instead of the wire; repeatable.\n"
	    "                       DEST's own files always seed their path\n"
	    "      --link-dest DIR, --copy-dest DIR, --compare-dest DIR\n"
	    "                       rsync's: a file DIR holds unchanged "
	    "(size,\n"
	    "                       mtime and content) is hard linked (with\n"
	    "                       the same attributes too), copied, or not\n"
	    "                       written; other files seed as with --seed.\n"
	    "                       Relative DIRs are DEST's; up to 20\n"
	    "      --chmod CHMOD    rsync's: DEST's modes from the source's\n"
	    "                       ([DF]OCTAL or [DF][ugoa]*[-+=][rwxXst]*,\n"
	    "                       comma-separated; repeatable)\n"
	    "      --chown USER:GROUP, --usermap FROM:TO,..., --groupmap\n"
	    "                       FROM:TO,...  rsync's: DEST's owners from\n"
	    "                       the source's ids (FROM: an id, LOW-HIGH,\n"
	    "                       a name known here, or *); set as root\n"
	    "  -b, --backup         rsync's: what is replaced or deleted is\n"
	    "                       renamed first, to NAME~ (--suffix)\n"
	    "      --backup-dir DIR  ...to DIR/PATH (a relative DIR is\n"
	    "                       DEST's; on DEST's filesystem)\n"
	    "      --suffix SUFFIX  the backup suffix (default ~, or none\n"
	    "                       with --backup-dir)\n"
	    "  -O, --omit-dir-times  leave directories' mtimes (implied by\n"
	    "                       -b without --backup-dir, as in rsync)\n"
	    "      --out-format FORMAT  item lines in rsync's escapes (%%n "
	    "%%f\n"
	    "                       %%i %%L %%l %%b %%o %%M %%t %%B %%p %%U "
	    "%%G; %%i\n"
	    "                       in it: every change, as -i)\n"
	    "      --log-file FILE  append every change, dated, to FILE\n"
	    "      --log-file-format FORMAT  its lines (default %%i %%n%%L)\n"
	    "      --files-from FILE  only the paths FILE names (relative to\n"
	    "                       the source, which is their base with or\n"
	    "                       without a trailing '/') and the\n"
	    "                       directories above them; with -r also all\n"
	    "                       below a named directory. -0, --from0:\n"
	    "                       FILE's names end in NUL\n"
	    "      --ignore-errors  delete even after errors\n"
	    "      --exclude PATTERN, --include PATTERN\n"
	    "      --exclude-from FILE, --include-from FILE\n"
	    "  -f, --filter RULE    rsync's rules: '- PAT', '+ PAT', 'P PAT',\n"
	    "                       'R PAT', 'H PAT', 'S PAT', '!', '. FILE'\n"
	    "                       (merge), ': NAME' (dir-merge: the\n"
	    "                       source's NAME file in each directory)\n"
	    "                       and their modifiers (see ferry(1))\n"
	    "  -F                   -f 'dir-merge /.rsync-filter'; twice,\n"
	    "                       also -f '- .rsync-filter'\n"
	    "  -C, --cvs-exclude    rsync's CVS-ignore list, ~/.cvsignore,\n"
	    "                       $CVSIGNORE and each directory's\n"
	    "                       .cvsignore, after the other rules\n"
	    "  -P, --progress, --info=progress2\n"
	    "                       the progress line even when stdout is no\n"
	    "                       terminal (it is shown on one by default)\n"
	    "      --bwlimit RATE   cap the wire rate: KiB/s, or with a K, M\n"
	    "                       or G suffix (1024-based); 0 = no cap\n"
	    "  -j, --jobs N         parallel HTTP connections (default 8)\n"
	    "      --prefetch FILE  fetch the ranges a trace (ferry trace\n"
	    "                       export) names first, in its order, then\n"
	    "                       the rest; files changed since are\n"
	    "                       skipped; repeatable (up to 16)\n"
	    "      --cacheable      GET only, by URLs an HTTP cache can keep\n"
	    "                       for every client: packs of 4 MiB, no POST\n"
	    "                       batches (through nginx, Varnish or a CDN)\n"
	    "      --timeout S      give up one chunk fetch after S seconds\n"
	    "                       (default 30); failed chunks are retried\n"
	    "                       once at the end\n"
	    "      --no-owners      do not set owners (default: set them when\n"
	    "                       run as root)\n"
	    "      --watch          after the sync, keep DEST following the\n"
	    "                       source: sync again whenever it publishes\n"
	    "                       a new generation, until stopped\n"
	    "      --poll SECONDS   how often --watch asks (default 30)\n"
	    "      --stats          print the full statistics table at the "
	    "end\n"
	    "  -v, --verbose        name each entry created, written or\n"
	    "                       deleted; -vv also every retry (debug)\n"
	    "  -q, --quiet          no progress and no summary, errors only\n"
	    "  -a -r -l -p -t -g -o -D -H -X -A -S -z -c -h, --archive,\n"
	    "  --checksum, --partial, --numeric-ids, --human-readable,\n"
	    "  --acls, --sparse, --xattrs, --hard-links, --compress,\n"
	    "  --recursive, --links, --perms, --times, --group, --owner,\n"
	    "  --devices, --specials\n"
	    "                       accepted: what ferry always does (ACLs\n"
	    "                       as their xattrs, holes kept, content\n"
	    "                       compared by SHA-256, sizes human-\n"
	    "                       readable); any other rsync option is\n"
	    "                       refused, named (-x among "
	    "them)\n" HYD_CREDS_HELP "      --help           this text\n"
	    "      --version        ferry's version\n"
	    "\n"
	    "Exit status (rsync's): 0 done, 1 usage, 2 unsupported catalog,\n"
	    "10 server unreachable, 11 DEST not writable, 12 bad data from\n"
	    "the server, 20 interrupted, 23 some entries failed (named on\n"
	    "stderr), 24 some vanished at the source, 30 the server stopped\n"
	    "answering mid-run, 35 connect timeout.\n"
	    "See ferry(1).\n");
}

/* rsync's --bwlimit: a bare number is KiB/s; K, M, G, T suffixes
 * (1024-based; a trailing B or iB is allowed). */
/* --max-size/--min-size: rsync's SIZE: bytes, or with a suffix K, M, G,
 * T (or KiB...: 1024-based) or KB, MB, GB, TB (1000-based), any case, a
 * fraction allowed ("1.5M"); at least 1 byte. */
static int parse_size(const char *s, uint64_t *ret)
{
	static const char units[] = "kmgt";
	double v, mul = 1;
	const char *u;
	char *end;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0 || *s == '-' || *s == '+')
		return -EINVAL;
	if (*end && (u = strchr(units, end[0] | 0x20)) != NULL) {
		double base = 1024;

		end++;
		if ((*end | 0x20) == 'b' && end[0]) {
			base = 1000;
			end++;
		} else if ((end[0] | 0x20) == 'i' && (end[1] | 0x20) == 'b') {
			end += 2;
		}
		for (const char *k = units; k <= u; k++)
			mul *= base;
	} else if ((*end | 0x20) == 'b' && *end) {
		end++;
	}
	if (*end || v * mul < 1 || v * mul > 9.2e18)
		return -EINVAL;
	*ret = (uint64_t)(v * mul);
	return 0;
}

static int parse_bwlimit(const char *s, uint64_t *ret)
{
	char *end;
	double v, mul = 1024;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1024.0 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 't':
	case 'T':
		mul = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	case 'b':
	case 'B':
		mul = 1; /* "--bwlimit 100b": bytes */
		end++;
		break;
	default:
		break;
	}
	if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib") ||
	    !strcmp(end, "b"))
		end += strlen(end);
	if (*end || v * mul > 1e18)
		return -EINVAL;
	*ret = (uint64_t)(v * mul);
	return 0;
}

static int filter_error(const char *opt, const char *arg, int r,
			const char *why)
{
	if (r == -ENOMEM)
		base_error("out of memory");
	else
		base_error("%s '%s': %s%s%s (see --help)", opt, arg, why,
			   r == -EINVAL ? "" : ": ",
			   r == -EINVAL ? "" : strerror(-r));
	return -1;
}

/* --info FLAGS: the progress and stats flags rsync users pass. */
static int parse_info(const char *arg, struct ferry_sync_out *c)
{
	char *dup = strdup(arg), *save = NULL, *tok;
	int r = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ",", &save); tok && r == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "progress2") || !strcmp(tok, "progress1") ||
		    !strcmp(tok, "progress"))
			c->progress = 1;
		else if (!strcmp(tok, "progress0"))
			c->progress = 0;
		else if (!strncmp(tok, "stats", 5))
			c->stats = strcmp(tok, "stats0") != 0;
		else if (!strcmp(tok, "name") || !strcmp(tok, "name1"))
			c->verbose = c->verbose ? c->verbose : 1;
		else if (!strcmp(tok, "name0"))
			c->verbose = 0;
		else
			r = -EINVAL;
	}
	free(dup);
	return r;
}

enum {
	OPT_TIMEOUT = 256,
	OPT_NO_OWNERS,
	OPT_STATS,
	OPT_DELETE,
	OPT_DELETE_EXCLUDED,
	OPT_IGNORE_ERRORS,
	OPT_EXCLUDE,
	OPT_INCLUDE,
	OPT_EXCLUDE_FROM,
	OPT_INCLUDE_FROM,
	OPT_PROGRESS,
	OPT_INFO,
	OPT_BWLIMIT,
	OPT_CACHEABLE,
	OPT_PREFETCH,
	OPT_WATCH,
	OPT_POLL,
	OPT_NOOP,
	OPT_REMOTE_FERRY,
	OPT_CACHE_DIR,
	OPT_HELP,
	OPT_VERSION,
	OPT_ONE_FS,
	OPT_EXISTING,
	OPT_IGNORE_EXISTING,
	OPT_MAX_SIZE,
	OPT_MIN_SIZE,
	OPT_SIZE_ONLY,
	OPT_SEED,
	OPT_LINK_DEST,
	OPT_COPY_DEST,
	OPT_COMPARE_DEST,
	OPT_CHMOD,
	OPT_CHOWN,
	OPT_USERMAP,
	OPT_GROUPMAP,
	OPT_BACKUP_DIR,
	OPT_SUFFIX,
	OPT_OUT_FORMAT,
	OPT_LOG_FILE,
	OPT_LOG_FILE_FORMAT,
	OPT_FILES_FROM,
	OPT_CVS,
};

/* -b, --backup-dir, --suffix once every option is read: rsync's
 * defaults ("~", "" with a backup dir), and with --delete the protect
 * rules rsync adds, so backups are not deleted by the next run. 0 or -1
 * after the error. */
static int backup_done(struct args *a)
{
	char rule[PATH_MAX + 8];
	const char *why = "", *d = a->backup.dir;

	if (!a->backup_on)
		return 0;
	if (!a->suffix_set)
		a->backup.suffix = d ? "" : "~";
	if (strchr(a->backup.suffix, '/')) {
		base_error("--suffix '%s': it may not contain a '/'",
			   a->backup.suffix);
		return -1;
	}
	if (!d && !a->backup.suffix[0]) {
		base_error("--suffix '': a backup beside its file needs a "
			   "suffix (or give --backup-dir)");
		return -1;
	}
	a->o.backup = &a->backup;
	if (!a->o.delete_extra)
		return 0;
	if (!d && snprintf(rule, sizeof(rule), "P *%s", a->backup.suffix) > 0 &&
	    hyd_filter_rule(a->filter, rule, &why) < 0)
		return -1;
	/* a backup dir inside DEST */
	if (d && d[0] != '/' && strncmp(d, "..", 2) &&
	    (size_t)snprintf(rule, sizeof(rule), "P /%s", d) < sizeof(rule) &&
	    hyd_filter_rule(a->filter, rule, &why) < 0)
		return -1;
	return 0;
}

/* --chmod, --chown, --usermap, --groupmap. 0 or -1 after the error. */
static int add_map(struct args *a, int ch, const char *arg)
{
	const char *opt = ch == OPT_CHMOD     ? "--chmod"
			  : ch == OPT_CHOWN   ? "--chown"
			  : ch == OPT_USERMAP ? "--usermap"
					      : "--groupmap";
	int r;

	r = ch == OPT_CHMOD ? hyd_attrmap_chmod(a->attrmap, arg)
	    : ch == OPT_CHOWN
		? hyd_attrmap_chown(a->attrmap, arg)
		: hyd_attrmap_ids(a->attrmap, ch == OPT_USERMAP, arg);
	if (r == -ENOENT)
		base_error("%s '%s': a name this machine does not know", opt,
			   arg);
	else if (r < 0)
		base_error("%s '%s': %s", opt, arg,
			   ch == OPT_CHMOD
			       ? "items are [DF]OCTAL or [DF][ugoa]*[-+=]"
				 "[rwxXst]*, comma-separated"
			   : ch == OPT_CHOWN ? "USER:GROUP, USER or :GROUP"
					     : "FROM:TO pairs, comma-separated "
					       "(FROM: an id, LOW-HIGH, a name "
					       "or *)");
	return r < 0 ? -1 : 0;
}

/* --seed DIR and rsync's --link-dest, --copy-dest, --compare-dest DIR
 * (one kind of the three per run, as rsync has it). 0 or -1 after the
 * error line. */
static int add_seed(struct args *a, int ch, const char *dir)
{
	static const char *const name[] = {"--seed", "--compare-dest",
					   "--copy-dest", "--link-dest"};
	enum hyd_seed_how how = ch == OPT_LINK_DEST	 ? HYD_SEED_LINK
				: ch == OPT_COPY_DEST	 ? HYD_SEED_COPY
				: ch == OPT_COMPARE_DEST ? HYD_SEED_COMPARE
							 : HYD_SEED_CHUNKS;
	size_t i, n = a->o.nseeds;

	if (!dir[0]) {
		base_error("%s: an empty directory name", name[how]);
		return -1;
	}
	if (n == SEEDS_MAX) {
		base_error("%s: at most %d seed directories in all", name[how],
			   SEEDS_MAX);
		return -1;
	}
	for (i = 0; i < n && how != HYD_SEED_CHUNKS; i++) {
		if (a->seeds[i].how != HYD_SEED_CHUNKS &&
		    a->seeds[i].how != how) {
			base_error("you may not mix --compare-dest, "
				   "--copy-dest and --link-dest (%s after %s)",
				   name[how], name[a->seeds[i].how]);
			return -1;
		}
	}
	a->seeds[n].path = dir;
	a->seeds[n].how = how;
	a->o.seeds = a->seeds;
	a->o.nseeds = n + 1;
	return 0;
}

/* --prefetch FILE: read and checked now (a bad trace is a usage error). */
static int load_trace(struct args *a, const char *path)
{
	char why[256];
	size_t n = a->o.ntraces;

	if (n == PREFETCH_MAX) {
		base_error("--prefetch: at most %d traces", PREFETCH_MAX);
		return -1;
	}
	if (hyd_trace_load(path, &a->traces[n], why, sizeof(why)) < 0) {
		base_error("--prefetch %s: %s", path, why);
		return -1;
	}
	a->tracep[n] = &a->traces[n];
	a->o.traces = a->tracep;
	a->o.ntraces = n + 1;
	return 0;
}

static void free_traces(struct args *a)
{
	size_t i;

	for (i = 0; i < a->o.ntraces; i++)
		hyd_trace_free(&a->traces[i]);
}

/* --exclude, --include, --exclude-from, --include-from or --filter (ch)
 * with arg into the rules. 0, or -1 after the error line. */
static int add_rule(struct args *a, int ch, const char *arg)
{
	const char *why = "", *opt;
	int r;

	switch (ch) {
	case OPT_EXCLUDE:
	case OPT_INCLUDE:
		opt = ch == OPT_INCLUDE ? "--include" : "--exclude";
		r = hyd_filter_pattern(a->filter, ch == OPT_INCLUDE, arg, &why);
		break;
	case OPT_EXCLUDE_FROM:
	case OPT_INCLUDE_FROM:
		opt = ch == OPT_INCLUDE_FROM ? "--include-from"
					     : "--exclude-from";
		r = hyd_filter_file(a->filter, ch == OPT_INCLUDE_FROM, arg,
				    &why);
		break;
	default:
		opt = "--filter";
		r = hyd_filter_rule(a->filter, arg, &why);
		break;
	}
	return r < 0 ? filter_error(opt, arg, r, why) : 0;
}

/* 0 to run, 1 help printed, -1 usage error (reported). */
static int parse_args(int argc, char **argv, struct args *a,
		      struct ferry_sync_out *c)
{
	static const struct option longopts[] = {
	    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
	    {"jobs", required_argument, NULL, 'j'},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"no-owners", no_argument, NULL, OPT_NO_OWNERS},
	    {"stats", no_argument, NULL, OPT_STATS},
	    {"dry-run", no_argument, NULL, 'n'},
	    {"itemize-changes", no_argument, NULL, 'i'},
	    {"delete", no_argument, NULL, OPT_DELETE},
	    {"delete-before", no_argument, NULL, OPT_DELETE},
	    {"delete-during", no_argument, NULL, OPT_DELETE},
	    {"del", no_argument, NULL, OPT_DELETE},
	    {"delete-after", no_argument, NULL, OPT_DELETE},
	    {"delete-delay", no_argument, NULL, OPT_DELETE},
	    {"existing", no_argument, NULL, OPT_EXISTING},
	    {"ignore-non-existing", no_argument, NULL, OPT_EXISTING},
	    {"ignore-existing", no_argument, NULL, OPT_IGNORE_EXISTING},
	    {"update", no_argument, NULL, 'u'},
	    {"max-size", required_argument, NULL, OPT_MAX_SIZE},
	    {"min-size", required_argument, NULL, OPT_MIN_SIZE},
	    {"size-only", no_argument, NULL, OPT_SIZE_ONLY},
	    {"seed", required_argument, NULL, OPT_SEED},
	    {"link-dest", required_argument, NULL, OPT_LINK_DEST},
	    {"copy-dest", required_argument, NULL, OPT_COPY_DEST},
	    {"compare-dest", required_argument, NULL, OPT_COMPARE_DEST},
	    {"chmod", required_argument, NULL, OPT_CHMOD},
	    {"chown", required_argument, NULL, OPT_CHOWN},
	    {"usermap", required_argument, NULL, OPT_USERMAP},
	    {"groupmap", required_argument, NULL, OPT_GROUPMAP},
	    {"backup", no_argument, NULL, 'b'},
	    {"backup-dir", required_argument, NULL, OPT_BACKUP_DIR},
	    {"suffix", required_argument, NULL, OPT_SUFFIX},
	    {"omit-dir-times", no_argument, NULL, 'O'},
	    {"out-format", required_argument, NULL, OPT_OUT_FORMAT},
	    {"log-format", required_argument, NULL, OPT_OUT_FORMAT},
	    {"log-file", required_argument, NULL, OPT_LOG_FILE},
	    {"log-file-format", required_argument, NULL, OPT_LOG_FILE_FORMAT},
	    {"delete-excluded", no_argument, NULL, OPT_DELETE_EXCLUDED},
	    {"ignore-errors", no_argument, NULL, OPT_IGNORE_ERRORS},
	    {"exclude", required_argument, NULL, OPT_EXCLUDE},
	    {"include", required_argument, NULL, OPT_INCLUDE},
	    {"exclude-from", required_argument, NULL, OPT_EXCLUDE_FROM},
	    {"include-from", required_argument, NULL, OPT_INCLUDE_FROM},
	    {"filter", required_argument, NULL, 'f'},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"info", required_argument, NULL, OPT_INFO},
	    {"bwlimit", required_argument, NULL, OPT_BWLIMIT},
	    {"cacheable", no_argument, NULL, OPT_CACHEABLE},
	    {"prefetch", required_argument, NULL, OPT_PREFETCH},
	    {"watch", no_argument, NULL, OPT_WATCH},
	    {"poll", required_argument, NULL, OPT_POLL},
	    {"rsh", required_argument, NULL, 'e'},
	    {"remote-ferry", required_argument, NULL, OPT_REMOTE_FERRY},
	    {"archive", no_argument, NULL, OPT_NOOP},
	    {"checksum", no_argument, NULL, OPT_NOOP},
	    {"partial", no_argument, NULL, OPT_NOOP},
	    {"numeric-ids", no_argument, NULL, OPT_NOOP},
	    {"verbose", no_argument, NULL, 'v'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, OPT_HELP},
	    {"version", no_argument, NULL, OPT_VERSION},
	    {"human-readable", no_argument, NULL, OPT_NOOP},
	    {"recursive", no_argument, NULL, 'r'},
	    {"files-from", required_argument, NULL, OPT_FILES_FROM},
	    {"from0", no_argument, NULL, '0'},
	    {"links", no_argument, NULL, OPT_NOOP},
	    {"perms", no_argument, NULL, OPT_NOOP},
	    {"times", no_argument, NULL, OPT_NOOP},
	    {"group", no_argument, NULL, OPT_NOOP},
	    {"owner", no_argument, NULL, OPT_NOOP},
	    {"devices", no_argument, NULL, OPT_NOOP},
	    {"specials", no_argument, NULL, OPT_NOOP},
	    {"acls", no_argument, NULL, OPT_NOOP},
	    {"sparse", no_argument, NULL, OPT_NOOP},
	    {"one-file-system", no_argument, NULL, OPT_ONE_FS},
	    {"cvs-exclude", no_argument, NULL, OPT_CVS},
	    {"xattrs", no_argument, NULL, OPT_NOOP},
	    {"hard-links", no_argument, NULL, OPT_NOOP},
	    {"compress", no_argument, NULL, OPT_NOOP},
	    HYD_CREDS_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	struct hyd_sync_opts *o = &a->o;
	char bad = 0;
	long v;
	int ch, r;

	opterr = 0;
	optind = 1;
	while (
	    (ch = getopt_long(argc, argv, ":j:f:e:niPvqharlptgoDHXzcASxhubO0FC",
			      longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_CACHE_DIR:
			o->cache_dir = optarg;
			break;
		case 'e':
			a->ssh_opts.rsh = optarg;
			break;
		case OPT_REMOTE_FERRY:
			a->ssh_opts.remote_ferry = optarg;
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
		case 'n':
			o->dry_run = c->dry_run = 1;
			break;
		case 'i':
			c->itemize = 1;
			break;
		case OPT_DELETE:
			o->delete_extra = c->delete_extra = 1;
			break;
		case OPT_DELETE_EXCLUDED:
			o->delete_extra = c->delete_extra = 1;
			hyd_filter_delete_excluded(a->filter);
			break;
		case OPT_IGNORE_ERRORS:
			o->ignore_errors = 1;
			break;
		case OPT_EXISTING:
			o->skip.existing = 1;
			break;
		case OPT_IGNORE_EXISTING:
			o->skip.ignore_existing = 1;
			break;
		case 'u':
			o->skip.update = 1;
			break;
		case OPT_SIZE_ONLY:
			o->skip.size_only = 1;
			break;
		case OPT_SEED:
		case OPT_LINK_DEST:
		case OPT_COPY_DEST:
		case OPT_COMPARE_DEST:
			if (add_seed(a, ch, optarg) < 0)
				return -1;
			break;
		case OPT_CHMOD:
		case OPT_CHOWN:
		case OPT_USERMAP:
		case OPT_GROUPMAP:
			if (add_map(a, ch, optarg) < 0)
				return -1;
			break;
		case 'b':
			a->backup_on = 1;
			break;
		case 'O':
			o->omit_dir_times = 1;
			break;
		case OPT_OUT_FORMAT:
		case OPT_LOG_FILE_FORMAT:
			if (ferry_outfmt_check(optarg, &bad) < 0) {
				base_error("--%s '%s': %%%c is not an escape "
					   "ferry knows (see ferry(1))",
					   ch == OPT_OUT_FORMAT
					       ? "out-format"
					       : "log-file-format",
					   optarg, bad ? bad : ' ');
				return -1;
			}
			if (ch == OPT_OUT_FORMAT)
				c->out_format = optarg;
			else
				c->log_format = optarg;
			break;
		case OPT_LOG_FILE:
			a->log_file = optarg;
			break;
		case OPT_FILES_FROM:
			a->files_from = optarg;
			break;
		case '0':
			a->from0 = 1;
			break;
		case OPT_BACKUP_DIR:
			a->backup_on = 1;
			a->backup.dir = optarg;
			break;
		case OPT_SUFFIX:
			a->suffix_set = 1;
			a->backup.suffix = optarg;
			break;
		case OPT_MAX_SIZE:
		case OPT_MIN_SIZE:
			if (parse_size(optarg, ch == OPT_MAX_SIZE
						   ? &o->skip.max_size
						   : &o->skip.min_size) < 0) {
				base_error("--%s '%s': a size in bytes, or "
					   "with K, M, G or T (1024-based) "
					   "or KB, MB, GB, TB (1000-based)",
					   ch == OPT_MAX_SIZE ? "max-size"
							      : "min-size",
					   optarg);
				return -1;
			}
			break;
		case OPT_EXCLUDE:
		case OPT_INCLUDE:
		case OPT_EXCLUDE_FROM:
		case OPT_INCLUDE_FROM:
		case 'f':
			if (add_rule(a, ch, optarg) < 0)
				return -1;
			break;
		case 'F':
			/* rsync: the first -F is this rule, the second
			 * excludes the files themselves */
			if (add_rule(a, 'f',
				     a->nF++ ? "- .rsync-filter"
					     : "dir-merge /.rsync-filter") < 0)
				return -1;
			break;
		case 'C':
		case OPT_CVS:
			a->cvs = 1;
			break;
		case 'P':
		case OPT_PROGRESS:
			c->progress = 1;
			break;
		case OPT_INFO:
			if (parse_info(optarg, c) < 0) {
				base_error("--info '%s': known flags are "
					   "progress2, progress0, stats, "
					   "name, name0 (see --help)",
					   optarg);
				return -1;
			}
			break;
		case OPT_CACHEABLE:
			o->cacheable = 1;
			break;
		case OPT_PREFETCH:
			if (load_trace(a, optarg) < 0)
				return -1;
			break;
		case OPT_BWLIMIT:
			if (parse_bwlimit(optarg, &o->bwlimit) < 0) {
				base_error("--bwlimit '%s': a rate in KiB/s, "
					   "or with a K, M or G suffix (see "
					   "--help)",
					   optarg);
				return -1;
			}
			break;
		case OPT_WATCH:
			a->watch = 1;
			break;
		case OPT_POLL:
			if (base_opt_long("--poll", optarg, 1, 86400,
					  &a->poll_s) < 0)
				return -1;
			break;
		case 'v':
			c->verbose++;
			break;
		case 'q':
			c->quiet = 1;
			break;
		case OPT_HELP:
			usage(stdout);
			return 1;
		case OPT_VERSION:
			printf("ferry sync %s\n", FERRY_VERSION);
			return 1;
		case 'x':
		case OPT_ONE_FS:
			base_error("-x (--one-file-system) is not supported: "
				   "the replicator walks the source, across "
				   "the file systems mounted in it");
			return -1;
		case OPT_NOOP:
		case 'h': /* human-readable: what ferry always prints */
		case 'c': /* --checksum: content is always compared */
		case 'A': /* ACLs: copied as the xattrs that hold them */
		case 'S': /* sparse: holes are always kept */
		case 'r':
			a->recursive = 1; /* --files-from: below listed dirs */
			break;
		case 'a':
		case 'l':
		case 'p':
		case 't':
		case 'g':
		case 'o':
		case 'D':
		case 'H':
		case 'X':
		case 'z':
			break;
		default:
			r = hyd_creds_opt(&a->creds, ch, optarg);
			if (r > 0)
				break;
			if (r == 0)
				base_opt_error(ch, argv);
			return -1;
		}
	}
	o->creds = &a->creds;
	if (argc - optind != 2) {
		base_error("expected URL and DEST, got %d argument%s (see "
			   "--help)",
			   argc - optind, argc - optind == 1 ? "" : "s");
		return -1;
	}
	o->url = argv[optind];
	o->dest = argv[optind + 1];
	/* rsync: -C's rules come after the user's, wherever it stood */
	if (a->cvs) {
		const char *why = "";

		r = hyd_filter_cvs(a->filter, &why);
		if (r < 0)
			return filter_error("-C", "", r, why);
	}
	if (a->files_from) {
		const char *why = "";

		r = hyd_filter_files_from(a->filter, a->files_from, a->from0,
					  a->recursive, &why);
		if (r < 0) {
			base_error("--files-from %s: %s", a->files_from, why);
			return -1;
		}
	}
	return backup_done(a);
}

/* rsync's code for a run that failed as a whole (hyd_sync < 0). */
static int run_exit(int r, const struct hyd_sync_result *res)
{
	switch (-r) {
	case EINVAL:
		/* a bad URL, already explained */
		return res->files == 0 && res->dirs == 0 ? RERR_SYNTAX
							 : RERR_PARTIAL;
	case EXDEV: /* DEST inside a ferry mount: refused */
		return RERR_SYNTAX;
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
		return RERR_SOCKETIO;
	case ETIMEDOUT:
		return RERR_CONTIMEOUT;
	case EBADMSG:
	case EPROTO:
	case EKEYREJECTED: /* --trust-key refused the generation */
		return RERR_STREAMIO;
	case EPROTONOSUPPORT:
	case ENOTSUP:
		return RERR_PROTOCOL;
	case ENOSPC:
	case EDQUOT:
	case EROFS:
	case EACCES:
	case EPERM:
	case EIO:
	case ENOTDIR:
	case EEXIST:
	case EISDIR:
	case ENAMETOOLONG:
		return RERR_FILEIO;
	case ENOMEM:
		return RERR_MALLOC;
	default:
		return RERR_PARTIAL;
	}
}

/* The ssh or local session's socket and its directory (set once the
 * session is up): removed on the way out of a signal too. The session
 * itself ends as the process does (its pipe closes). */
static const char *stop_sock, *stop_dir;

static void on_stop(int sig)
{
	static const char msg[] = "ferry sync: interrupted: the next run "
				  "resumes where this one stopped\n";
	ssize_t w;

	(void)sig;
	w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
	(void)w;
	if (stop_sock)
		(void)unlink(stop_sock);
	if (stop_dir)
		(void)rmdir(stop_dir);
	_exit(RERR_SIGNAL);
}

/* DEST's length without its trailing slashes ("/" stays). */
static int dest_len(const char *d)
{
	size_t n = strlen(d);

	while (n > 1 && d[n - 1] == '/')
		n--;
	return (int)n;
}

/* One run; its exit code. */
static int sync_once(struct args *a, struct ferry_sync_out *c,
		     struct hyd_sync_result *res)
{
	int r = hyd_sync(&a->o, res);

	ferry_sync_end_line(c);
	if (r < 0)
		return run_exit(r, res);
	/* rsync's note for a DEST it makes, with -v or -i */
	if (res->dest_created && !c->quiet && (c->itemize || c->verbose) &&
	    !c->out_format)
		printf("created directory %.*s\n", dest_len(a->o.dest),
		       a->o.dest);
	ferry_sync_summary(c, res);
	if (res->failed) {
		base_error("%" PRIu64 " entr%s could not be reproduced (named "
			   "above)%s",
			   res->failed, res->failed == 1 ? "y" : "ies",
			   res->vanished == res->failed
			       ? ": the source changed or vanished"
			       : "");
		/* the server went away mid-run: rsync's socket and timeout
		 * codes say so */
		if (res->gave_up_err == -ETIMEDOUT)
			return RERR_TIMEOUT;
		if (res->gave_up_err == -ECONNREFUSED ||
		    res->gave_up_err == -ECONNRESET ||
		    res->gave_up_err == -EHOSTUNREACH)
			return RERR_SOCKETIO;
		/* DEST full or read-only: rsync's file I/O code */
		if (res->dest_err)
			return RERR_FILEIO;
		return res->vanished == res->failed ? RERR_VANISHED
						    : RERR_PARTIAL;
	}
	/* Every entry is in DEST, but the cache could not keep the chunks
	 * (no space, read-only; said above): rsync's file I/O code. */
	if (res->dest_err)
		return RERR_FILEIO;
	return 0;
}

/* --watch: wait for a generation after gen, asking every poll_s; the
 * server being away is waited out. */
static void wait_new(const struct args *a, uint64_t gen)
{
	char err[512];
	uint64_t now;
	int away = 0;

	for (;;) {
		sleep((unsigned)a->poll_s);
		if (hyd_sync_head(a->o.url, a->o.creds, &now, err,
				  sizeof(err)) < 0) {
			if (!away)
				base_warn("watching: %s", err);
			away = 1;
			continue;
		}
		if (away)
			base_info("watching: the server answers again");
		away = 0;
		if (now != gen)
			return;
	}
}

/* A [USER@]HOST:PATH source: the replicator started over ssh (hyd_ssh),
 * its URL and socket in place of a URL's; a local directory: the same
 * without ssh (hyd_local_start). rsync's rule for the name: HOST:DIR
 * makes DEST/DIR, HOST:DIR/ fills DEST. 0, or the exit code (said). */
/* SRC (not a directory) as DIR/NAME: DIR into dir. 0 or -1. */
static int local_file(const char *src, char *dir, size_t cap)
{
	const char *slash = strrchr(src, '/');

	if (!slash)
		return snprintf(dir, cap, ".") > 0 ? 0 : -1;
	if (slash == src)
		return snprintf(dir, cap, "/") > 0 ? 0 : -1;
	return (size_t)(slash - src) < cap &&
		       snprintf(dir, cap, "%.*s", (int)(slash - src), src) > 0
		   ? 0
		   : -1;
}

static int ssh_open(struct args *a)
{
	const char *src = a->o.url, *name;
	char err[512], dir[PATH_MAX];
	struct stat st;
	size_t n;
	int r, file = 0;

	a->ssh.to_fd = a->ssh.from_fd = a->ssh.pid = -1;
	/* --watch: the replicator started for the run looks for changes as
	 * often as we ask for them */
	if (a->watch)
		a->ssh_opts.rescan_s = (unsigned)a->poll_s;
	if (hyd_ssh_source(src))
		r = hyd_ssh_start(src, &a->ssh_opts, &a->ssh, err, sizeof(err));
	else if (strncmp(src, "http://", 7) != 0 &&
		 strncmp(src, "https://", 8) != 0 && stat(src, &st) == 0 &&
		 S_ISDIR(st.st_mode))
		r = hyd_local_start(src, &a->ssh_opts, &a->ssh, err,
				    sizeof(err));
	else if (strncmp(src, "http://", 7) != 0 &&
		 strncmp(src, "https://", 8) != 0 && lstat(src, &st) == 0 &&
		 !S_ISDIR(st.st_mode) &&
		 local_file(src, dir, sizeof(dir)) == 0) {
		/* a single file: its directory is served, the URL names it */
		file = 1;
		r = hyd_local_start(dir, &a->ssh_opts, &a->ssh, err,
				    sizeof(err));
	} else
		return 0; /* a URL (or not one: hyd_sync says so) */
	if (r < 0) {
		base_error("%s", err);
		return r == -EINVAL || r == -ENAMETOOLONG ? RERR_SYNTAX
							  : RERR_SOCKETIO;
	}
	a->o.url = a->ssh.url;
	a->creds.unix_socket = a->ssh.sock;
	stop_sock = a->ssh.sock;
	stop_dir = a->ssh.dir;
	if (a->ssh.file) { /* HOST:PATH named a file */
		name = strrchr(a->ssh.path, '/');
		name = name ? name + 1 : a->ssh.path;
		file = 1;
	} else if (file) {
		name = strrchr(src, '/');
		name = name ? name + 1 : src;
	}
	if (file) {
		if ((size_t)snprintf(a->url_buf, sizeof(a->url_buf), "%s/%s",
				     a->ssh.url, name) >= sizeof(a->url_buf)) {
			base_error("%s: name too long", src);
			hyd_ssh_stop(&a->ssh);
			return RERR_SYNTAX;
		}
		a->o.url = a->url_buf;
		return 0; /* DEST/NAME or DEST itself: hyd_sync's rule */
	}
	n = strlen(a->ssh.path);
	name = strrchr(a->ssh.path, '/');
	name = name ? name + 1 : a->ssh.path;
	/* --files-from: the source is the base of its paths, slash or not */
	if (n && a->ssh.path[n - 1] != '/' && !a->files_from &&
	    strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && *name) {
		if ((size_t)snprintf(a->dest_buf, sizeof(a->dest_buf), "%s/%s",
				     a->o.dest, name) >= sizeof(a->dest_buf)) {
			base_error("DEST/%s: name too long", name);
			hyd_ssh_stop(&a->ssh);
			return RERR_SYNTAX;
		}
		a->o.dest = a->dest_buf;
	}
	return 0;
}

int ferry_cmd_sync(int argc, char **argv)
{
	struct hyd_sync_result res;
	struct ferry_sync_out c;
	struct args a;
	int r, rc;

	memset(&a, 0, sizeof(a));
	memset(&c, 0, sizeof(c));
	c.phase = -1;
	pthread_mutex_init(&c.lock, NULL);
	a.o.owners = -1; /* hyd_sync: < 0 means "when root" */
	a.poll_s = POLL_DEFAULT_S;
	base_log_init("ferry sync", BASE_LOG_INFO);
	a.filter = hyd_filter_new();
	if (!a.filter || hyd_attrmap_new(&a.attrmap) < 0) {
		hyd_filter_free(a.filter);
		base_error("out of memory");
		return RERR_MALLOC;
	}
	r = parse_args(argc, argv, &a, &c);
	if (r != 0) {
		hyd_filter_free(a.filter);
		hyd_attrmap_free(a.attrmap);
		free_traces(&a);
		return r > 0 ? 0 : RERR_SYNTAX;
	}
	base_log_init("ferry sync", c.quiet	    ? BASE_LOG_ERROR
				    : c.verbose > 1 ? BASE_LOG_DEBUG
						    : BASE_LOG_INFO);
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	c.tty = isatty(STDOUT_FILENO);
	if (a.log_file) {
		c.log = fopen(a.log_file, "ae");
		if (!c.log) {
			base_log_err(BASE_LOG_ERROR, -errno,
				     "--log-file: cannot open path=%s",
				     a.log_file);
			hyd_filter_free(a.filter);
			hyd_attrmap_free(a.attrmap);
			free_traces(&a);
			return RERR_FILEIO;
		}
		setvbuf(c.log, NULL, _IOLBF, 0);
	}
	a.o.filter = a.filter;
	a.o.attrmap = a.attrmap;
	a.o.progress = ferry_sync_progress;
	a.o.progress_arg = &c;
	a.o.item = ferry_sync_item;
	a.o.item_arg = &c;
	rc = ssh_open(&a);
	if (rc != 0) {
		if (c.log)
			fclose(c.log);
		hyd_filter_free(a.filter);
		hyd_attrmap_free(a.attrmap);
		free_traces(&a);
		return rc;
	}
	rc = sync_once(&a, &c, &res);
	while (a.watch && !a.o.dry_run && rc != RERR_SYNTAX) {
		if (!c.quiet)
			printf("watching for a generation after %" PRIu64
			       " (every %lds; Ctrl-C stops)\n",
			       res.generation, a.poll_s);
		fflush(stdout);
		wait_new(&a, res.generation);
		rc = sync_once(&a, &c, &res);
	}
	hyd_ssh_stop(&a.ssh);
	if (c.log)
		fclose(c.log);
	hyd_filter_free(a.filter);
	hyd_attrmap_free(a.attrmap);
	free_traces(&a);
	pthread_mutex_destroy(&c.lock);
	return rc;
}
