/*
 * hydrator/hyd_main.c — the ferry-hydrator program: arguments, start-up,
 * daemon, shutdown.
 *
 * Start-up runs strictly in this order, each step failing with one
 * "ferry-hydrator: error: ..." line and exit 1 (bad arguments: exit 2),
 * leaving nothing mounted: arguments, mountpoint checks, then the start-up
 * it shares with `ferry sync` (hyd_open: cache directory, chunk store and
 * its lock, catalog download and open), FUSE session and mount, then
 * the fork into the daemon (daemon_start) — whose parent returns only once
 * the daemon says it is set up (pid file written, fetcher and backfill
 * made), with the daemon's verdict as its exit status, so the tree is
 * browsable and being served when the command returns 0, and a daemon that
 * failed to start is exit 1, not a mount that answers nothing. The child
 * reopens the store and the catalog with its manifest overlay (SQLite
 * connections must not cross a fork) and only then makes the fetcher and
 * backfill. Threads (the fetcher's loop, backfill, the control socket,
 * the metrics server, FUSE workers) are started only after that fork: a fork
 * copies the calling thread alone.
 */
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "catalog/httpd/httpd.h"
#include "hydrator/backfill/hyd_backfill.h"
#include "hydrator/fetch/hyd_bwlimit.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/fetch/hyd_manifest.h"
#include "hydrator/fetch/hyd_open.h"
#include "hydrator/follow/hyd_follow.h"
#include "hydrator/hyd_main_priv.h"
#include "hydrator/hydrator.h"
#include "hydrator/metrics/hyd_metrics.h"
#include "hydrator/s3/hyd_s3.h"
#include "hydrator/read/hyd_fuse.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/status/hyd_control.h"
#include "hydrator/store/hyd_store.h"
#include "hydrator/trace/hyd_trace.h"

/* Allocations below this come from the heap, never a mapping of their own. */
#define HYD_MMAP_THRESHOLD (8 << 20)
#define PROG "ferry-hydrator"
#define EXIT_USAGE 2
#define TIMEOUT_DEFAULT_S 30L
#define POLL_DEFAULT_S 30L
#define POLL_MAX_S 86400L
#define KEEP_DEFAULT 3L
#define JOBS_DEFAULT 4L
#define HYD_PREFETCH_MAX 16
#define HYD_SEEDS_MAX 20
#define JOBS_MAX 256L
/* With --bwlimit one batch connection per this much rate is plenty; fewer
 * connections mean fewer bytes buffered beyond the bucket's sight. */
#define BWLIMIT_PER_BATCH_CONN (32ull << 20)
#define BATCH_BYTES_MIN (256u << 10)
#define BATCH_BYTES_MAX (8u << 20)
#define CONNECT_TIMEOUT_S 5L
#define FUSE_IDLE_THREADS 16u
/* Reads block while their chunks travel, so allow more workers than the
 * libfuse default of 10: each one in a read is one more parallel fetch. */
#define FUSE_MAX_THREADS 64u

struct opts {
	const char *url;
	const char *mountpoint;
	const char *cache_dir;
	int foreground;
	int allow_other;
	int log_level; /* BASE_LOG_*: info, -v debug, -q errors only */
	long timeout_s;
	long jobs; /* --jobs, also spelled --connections */
	int no_backfill;
	int cacheable;
	uint64_t bwlimit;	    /* bytes/s, 0: none */
	long poll_s;		    /* --poll: 0 never */
	long keep;		    /* --keep-generations */
	struct hyd_creds creds;	    /* --ca-file, --cert, --key, --token-file */
	const char *metrics_listen; /* --metrics-listen HOST:PORT; NULL */
	const char *s3_listen;	    /* --s3-listen HOST:PORT; NULL */
	const char *s3_keys;	    /* --s3-keys FILE; NULL: anonymous */
	const char *prefetch[HYD_PREFETCH_MAX]; /* --prefetch FILE... */
	size_t nprefetch;
	int no_record; /* --no-record: no CACHEDIR/trace.rec */
	/* --seed DIR..., made absolute before any fork */
	struct hyd_seed_dir seeds[HYD_SEEDS_MAX];
	char *seed_paths[HYD_SEEDS_MAX];
	size_t nseeds;
	struct hyd_ssh_opts ssh_opts; /* -e/--rsh, --remote-ferry */
	char *into; /* --into DIR, made absolute before any fork */
	/* --cache-max, --cold-dir, --cold-max, --pin */
	struct hyd_main_cache cache;
};

/* Set in the daemon (the child of daemon_start): main then ends its log
 * with its exit status, which no shell can wait for. */
static int daemonized;

/* Everything the running mount owns; freed by mount_free. */
struct mount {
	struct hyd_open op; /* URL, cache directory, store, catalog */
	char mnt[PATH_MAX];
	char pidfile[PATH_MAX + 16];
	int64_t started_ns; /* wall clock: when the first generation mounted */
	hyd_backfill *bf;
	hyd_follow *follow; /* owns backfill's reader */
	hyd_control *ctl;
	hyd_metrics *metrics;	   /* --metrics-listen; NULL: none */
	hyd_s3 *s3;		   /* --s3-listen; NULL: none */
	struct hyd_s3_keys s3keys; /* --s3-keys, read before any fork */
	/* what the metrics read besides the fetcher's own counters */
	struct hyd_read_counts rcounts;
	struct hyd_mount_counts mcounts;
	hyd_read_cache *rcache;
	hyd_fetch *fetch;
	struct fuse_session *se;
	int mounted;
	int pid_written;
	int prefetch; /* manifests in bulk (not with --no-backfill) */
	/* --prefetch's traces, read before any fork; tracep for backfill */
	struct hyd_trace traces[HYD_PREFETCH_MAX];
	const struct hyd_trace *tracep[HYD_PREFETCH_MAX];
	size_t ntraces;
	const struct opts *o; /* --seed's dirs, for backfill's thread */
	struct hyd_fs fs;
	struct hyd_main_into into;   /* --into */
	struct hyd_main_cache cache; /* --cache-max and the rest */
};

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: " PROG " [OPTIONS] URL MOUNTPOINT\n"
	    "\n"
	    "Mount the tree a ferry-replicator serves at URL on MOUNTPOINT,\n"
	    "read-only. The command returns once the tree is browsable;\n"
	    "file data is fetched on first read, verified (SHA-256) and\n"
	    "kept in the cache directory.\n"
	    "\n"
	    "  URL         http[s]://HOST[:PORT]/v1/NAME, or over ssh\n"
	    "              [USER@]HOST:PATH or ssh://[USER@]HOST[:PORT]/PATH\n"
	    "              (ferry-replicator started there for this mount,\n"
	    "              stopped at the unmount; no port opened)\n"
	    "  MOUNTPOINT  an existing, empty directory\n"
	    "\n"
	    "Options:\n"
	    "  -e, --rsh COMMAND     the ssh command line for HOST:PATH\n"
	    "                        (default: $FERRY_RSH, else ssh); a\n"
	    "                        daemon's ssh runs in its own session:\n"
	    "                        keys or an agent, no password prompt\n"
	    "      --remote-ferry PATH  ferry-replicator's path on HOST\n"
	    "  -c, --cache-dir DIR   chunk store and catalogs (default:\n"
	    "                        /var/cache/ferry/NAME-HASH as root,\n"
	    "                        else $XDG_CACHE_HOME/ferry/NAME-HASH or\n"
	    "                        ~/.cache/ferry/NAME-HASH)\n"
	    "  -f, --foreground      stay in the foreground, log to stderr\n"
	    "  -o allow_other        let other users see the mount (needs\n"
	    "                        user_allow_other in /etc/fuse.conf)\n"
	    "      --timeout SECONDS give up a read after this long without\n"
	    "                        its data (EIO); default %ld\n"
	    "  -j, --jobs N          parallel backfill transfers; default "
	    "%ld.\n"
	    "                        Reads and their readahead have as many\n"
	    "                        of their own (at least 16), which\n"
	    "                        backfill never takes\n"
	    "      --connections N   the same as --jobs\n"
	    "      --no-backfill     fetch only what is read (and its\n"
	    "                        readahead), nothing in the background\n"
	    "      --cacheable       GET only, by URLs an HTTP cache can keep\n"
	    "                        for every hydrator: backfill asks for\n"
	    "                        packs (a file's 4 MiB parts, small files\n"
	    "                        in groups), never for POST batches; for\n"
	    "                        many hydrators behind one nginx, Varnish\n"
	    "                        or CDN\n"
	    "      --bwlimit RATE    cap the wire rate of everything fetched:\n"
	    "                        bytes/s with an optional K, M, G suffix\n"
	    "                        (1024-based), e.g. 50M; 0 = no cap\n"
	    "      --poll SECONDS    ask the source for a new generation this\n"
	    "                        often and switch to it in place; default\n"
	    "                        %ld, 0 = never (keep serving this "
	    "one)\n" HYD_CREDS_HELP "      --keep-generations K\n"
	    "                        generations served at once after "
	    "switches\n"
	    "                        (files opened before one read on from\n"
	    "                        theirs); default %ld, 1..16\n"
	    "      --metrics-listen HOST:PORT\n"
	    "                        serve GET /metrics (Prometheus text) on\n"
	    "                        HOST:PORT; no authentication: use a\n"
	    "                        loopback address, e.g. 127.0.0.1:9851\n"
	    "      --s3-listen HOST:PORT\n"
	    "                        serve the tree read-only as an S3 bucket\n"
	    "                        named NAME (path-style URLs): "
	    "ListObjects\n"
	    "                        (V1, V2), ListBuckets, HeadBucket,\n"
	    "                        GetObject (Range), HeadObject; objects\n"
	    "                        are fetched like reads of the mount\n"
	    "      --s3-keys FILE    lines \"ACCESS_KEY SECRET\": requests "
	    "must\n"
	    "                        be signed with one (AWS SigV4); without\n"
	    "                        it --s3-listen must be a loopback "
	    "address\n"
	    "                        and access is anonymous (docs/s3.md)\n"
	    "      --prefetch FILE   a trace (ferry trace export) of a job to\n"
	    "                        come: its reads are fetched first, in\n"
	    "                        its order, ahead of backfill (reads\n"
	    "                        still go before it); files changed\n"
	    "                        since it was taken are skipped;\n"
	    "                        repeatable (up to %d)\n"
	    "      --seed DIR        files DIR holds at the same path (an\n"
	    "                        older copy, a previous checkpoint) give\n"
	    "                        their chunks, verified by SHA-256,\n"
	    "                        before backfill fetches the rest;\n"
	    "                        repeatable (up to 20)\n"
	    "      --into DIR        the mount becomes the copy: every\n"
	    "                        generation is written into DIR as the\n"
	    "                        plain tree while the mount serves\n"
	    "                        (DIR empty, or this cache's DIR: what\n"
	    "                        the source lacks is deleted); ferry\n"
	    "                        finish MOUNTPOINT then puts DIR in the\n"
	    "                        mount's place\n"
	    "      --cache-max SIZE  keep the store under SIZE (K, M, G, T):\n"
	    "                        chunks least recently read are evicted\n"
	    "                        (never pinned ones, never one being\n"
	    "                        read); backfill fetches pinned files,\n"
	    "                        then the rest only while the store is\n"
	    "                        under 90%% of SIZE; reads fetch what\n"
	    "                        was evicted again\n"
	    "      --cold-dir DIR    a capacity tier under --cache-max (a\n"
	    "                        bigger, slower disk): evicted chunks\n"
	    "                        move there, a read there moves them\n"
	    "                        back up; needs --cold-max\n"
	    "      --cold-max SIZE   the capacity tier's own bound\n"
	    "      --pin PATTERN     fetch the files PATTERN names in full,\n"
	    "                        first, and never evict them: a shell\n"
	    "                        glob on paths from the tree's root\n"
	    "                        (a directory pins all below it);\n"
	    "                        repeatable; ferry pin adds more\n"
	    "      --no-record       keep no trace of this mount's reads (by\n"
	    "                        default CACHEDIR/trace.rec records them\n"
	    "                        for ferry trace export)\n"
	    "  -v, --verbose         log more: every fetch retry and backfill\n"
	    "                        pass (debug lines)\n"
	    "  -q, --quiet           log errors only\n"
	    "  -h, --help            this text\n"
	    "  -V, --version         print the version\n"
	    "\n"
	    "Unmount with: fusermount3 -u MOUNTPOINT (or send SIGTERM).\n"
	    "A daemonized hydrator logs to CACHEDIR/hydrator.log and writes\n"
	    "its pid to CACHEDIR/hydrator.pid. See ferry-hydrator(1).\n",
	    TIMEOUT_DEFAULT_S, JOBS_DEFAULT, POLL_DEFAULT_S, KEEP_DEFAULT,
	    HYD_PREFETCH_MAX);
}

/* --into DIR, --cold-dir DIR: created (mode) when missing, and made
 * absolute now (the daemon leaves the directory it was started in).
 * NULL after the error line naming opt. */
static char *abs_dir(const char *opt, const char *dir, mode_t mode)
{
	char *abs;
	int r;

	r = base_mkdir_p(dir, mode);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "%s: cannot make dir=%s", opt,
			     dir);
		return NULL;
	}
	abs = realpath(dir, NULL);
	if (!abs)
		base_log_err(BASE_LOG_ERROR, -errno,
			     "%s: cannot resolve dir=%s", opt, dir);
	return abs;
}

/* A size as --bwlimit writes a rate (K, M, G, T: 1024-based), at least
 * 1 MiB. 0 or -1 (said). */
static int size_opt(const char *name, const char *arg, uint64_t *ret)
{
	char err[256];

	if (hyd_rate_parse(arg, ret, err, sizeof(err)) < 0 ||
	    *ret < (1u << 20)) {
		base_error("%s wants a size of at least 1M (a number with an "
			   "optional K, M, G or T suffix), not '%s'",
			   name, arg);
		return -1;
	}
	return 0;
}

/* Is path at or below dir (both absolute, resolved)? */
static int below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	while (n > 1 && dir[n - 1] == '/')
		n--;
	return !strncmp(path, dir, n) &&
	       (path[n] == '/' || path[n] == '\0' || n == 1);
}

/* --into's DIR against the mount and its cache: not the mountpoint or
 * below it, and empty unless it is this cache's DIR already (DIR
 * becomes the source's copy: what it holds besides goes). 0 or -1. */
static int check_into(const struct opts *o, const struct mount *m)
{
	char had[4096];
	uint64_t gen;
	DIR *d;
	struct dirent *e;
	int empty = 1;

	if (!o->into)
		return 0;
	/* a finish before this mount: this one starts a new life */
	if (snprintf(had, sizeof(had), "%s/" HYD_INTO_FINISHED, m->op.cache) <
	    (int)sizeof(had))
		(void)unlink(had);
	if (below(o->into, m->mnt) || below(m->mnt, o->into)) {
		base_error(
		    "--into %s: the mountpoint %s is in it, or it in the "
		    "mountpoint",
		    o->into, m->mnt);
		return -1;
	}
	if (below(o->into, m->op.cache) || below(m->op.cache, o->into)) {
		base_error("--into %s: the cache directory %s is in it, or it "
			   "in the cache (the landing deletes what the source "
			   "lacks)",
			   o->into, m->op.cache);
		return -1;
	}
	if (hyd_into_state_read(m->op.cache, had, sizeof(had), &gen) == 0 &&
	    !strcmp(had, o->into))
		return 0;
	d = opendir(o->into);
	if (!d) {
		base_log_err(BASE_LOG_ERROR, -errno,
			     "--into: cannot read dir=%s", o->into);
		return -1;
	}
	while (empty && (e = readdir(d)))
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	if (!empty) {
		base_error("--into %s: not empty, and not this cache's --into "
			   "directory (it becomes the source's copy, so what "
			   "it holds would be deleted; give an empty one, or "
			   "ferry sync --delete into it first)",
			   o->into);
		return -1;
	}
	return 0;
}

/* --seed DIR: made absolute now (the daemon leaves the directory it
 * was started in). 0 or -1 after the error line. */
static int add_seed(struct opts *o, const char *dir)
{
	char *p;

	if (o->nseeds == HYD_SEEDS_MAX) {
		base_error("--seed: at most %d directories", HYD_SEEDS_MAX);
		return -1;
	}
	p = realpath(dir, NULL);
	if (!p) {
		base_log_err(BASE_LOG_ERROR, -errno,
			     "--seed: no directory "
			     "path=%s",
			     dir);
		return -1;
	}
	o->seed_paths[o->nseeds] = p;
	o->seeds[o->nseeds].path = p;
	o->seeds[o->nseeds].how = HYD_SEED_CHUNKS;
	o->nseeds++;
	return 0;
}

static void free_seeds(struct opts *o)
{
	while (o->nseeds)
		free(o->seed_paths[--o->nseeds]);
}

/* -o takes a comma list; only allow_other means anything here (ro and
 * default_permissions are always on and accepted for fstab habits). */
static int parse_o(const char *arg, struct opts *o)
{
	char *dup = strdup(arg), *tok, *save = NULL;
	int r = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "allow_other")) {
			o->allow_other = 1;
		} else if (strcmp(tok, "ro") &&
			   strcmp(tok, "default_permissions")) {
			base_error(
			    "unknown mount option '%s' (only allow_other "
			    "is supported; see --help)",
			    tok);
			r = -EINVAL;
			break;
		}
	}
	free(dup);
	return r;
}

/* Returns 0 to go on, 1 when done (help/version printed), -1 on a usage
 * error (already reported). */
/* --s3-listen and --s3-keys: a well-formed address, keys only with a
 * listener, and anonymous access on loopback alone. 0 or -1 (logged). */
static int check_s3_opts(const struct opts *o)
{
	char host[HTTPD_HOST_MAX];
	uint16_t port;

	if (o->s3_keys && !o->s3_listen) {
		base_error("--s3-keys needs --s3-listen");
		return -1;
	}
	if (!o->s3_listen)
		return 0;
	if (httpd_listen_split(o->s3_listen, host, sizeof(host), &port) < 0) {
		base_error("--s3-listen wants HOST:PORT (e.g. "
			   "127.0.0.1:9000), not '%s'",
			   o->s3_listen);
		return -1;
	}
	if (!o->s3_keys && !hyd_s3_host_is_loopback(host)) {
		base_error("--s3-listen %s is not a loopback address: "
			   "anonymous S3 access is for loopback only; give "
			   "--s3-keys FILE",
			   o->s3_listen);
		return -1;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	enum {
		OPT_TIMEOUT = 256,
		OPT_NO_BACKFILL,
		OPT_BWLIMIT,
		OPT_POLL,
		OPT_KEEP,
		OPT_METRICS_LISTEN,
		OPT_S3_LISTEN,
		OPT_S3_KEYS,
		OPT_CACHEABLE,
		OPT_PREFETCH,
		OPT_NO_RECORD,
		OPT_REMOTE_FERRY,
		OPT_SEED,
		OPT_INTO,
		OPT_CACHE_MAX,
		OPT_COLD_DIR,
		OPT_COLD_MAX,
		OPT_PIN
	};
	static const struct option longopts[] = {
	    {"cache-dir", required_argument, NULL, 'c'},
	    {"foreground", no_argument, NULL, 'f'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"jobs", required_argument, NULL, 'j'},
	    {"connections", required_argument, NULL, 'j'},
	    {"no-backfill", no_argument, NULL, OPT_NO_BACKFILL},
	    {"cacheable", no_argument, NULL, OPT_CACHEABLE},
	    {"bwlimit", required_argument, NULL, OPT_BWLIMIT},
	    {"poll", required_argument, NULL, OPT_POLL},
	    {"keep-generations", required_argument, NULL, OPT_KEEP},
	    {"metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN},
	    {"s3-listen", required_argument, NULL, OPT_S3_LISTEN},
	    {"s3-keys", required_argument, NULL, OPT_S3_KEYS},
	    {"prefetch", required_argument, NULL, OPT_PREFETCH},
	    {"no-record", no_argument, NULL, OPT_NO_RECORD},
	    {"seed", required_argument, NULL, OPT_SEED},
	    {"into", required_argument, NULL, OPT_INTO},
	    {"cache-max", required_argument, NULL, OPT_CACHE_MAX},
	    {"cold-dir", required_argument, NULL, OPT_COLD_DIR},
	    {"cold-max", required_argument, NULL, OPT_COLD_MAX},
	    {"pin", required_argument, NULL, OPT_PIN},
	    {"rsh", required_argument, NULL, 'e'},
	    {"remote-ferry", required_argument, NULL, OPT_REMOTE_FERRY},
	    HYD_CREDS_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	char err[256];
	int c, r;

	memset(o, 0, sizeof(*o));
	o->timeout_s = TIMEOUT_DEFAULT_S;
	o->jobs = JOBS_DEFAULT;
	o->poll_s = POLL_DEFAULT_S;
	o->keep = KEEP_DEFAULT;
	o->log_level = BASE_LOG_INFO;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:fo:vqhVj:e:", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'c':
			o->cache_dir = optarg;
			break;
		case 'f':
			o->foreground = 1;
			break;
		case 'o':
			if (parse_o(optarg, o) < 0)
				return -1;
			break;
		case 'v':
			o->log_level = BASE_LOG_DEBUG;
			break;
		case 'q':
			o->log_level = BASE_LOG_ERROR;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf(PROG " " FERRY_VERSION "\n");
			return 1;
		case OPT_METRICS_LISTEN: {
			char host[HTTPD_HOST_MAX];
			uint16_t port;

			if (httpd_listen_split(optarg, host, sizeof(host),
					       &port) < 0) {
				base_error("--metrics-listen wants HOST:PORT "
					   "(e.g. 127.0.0.1:9851), not '%s'",
					   optarg);
				return -1;
			}
			o->metrics_listen = optarg;
			break;
		}
		case OPT_S3_LISTEN:
			o->s3_listen = optarg;
			break;
		case OPT_S3_KEYS:
			o->s3_keys = optarg;
			break;
		case OPT_TIMEOUT:
			if (base_opt_long("--timeout", optarg, 1, 86400,
					  &o->timeout_s) < 0)
				return -1;
			break;
		case 'j':
			if (base_opt_long("--jobs", optarg, 1, JOBS_MAX,
					  &o->jobs) < 0)
				return -1;
			break;
		case OPT_NO_BACKFILL:
			o->no_backfill = 1;
			break;
		case OPT_CACHEABLE:
			o->cacheable = 1;
			break;
		case OPT_PREFETCH:
			if (o->nprefetch == HYD_PREFETCH_MAX) {
				base_error("--prefetch: at most %d traces",
					   HYD_PREFETCH_MAX);
				return -1;
			}
			o->prefetch[o->nprefetch++] = optarg;
			break;
		case OPT_NO_RECORD:
			o->no_record = 1;
			break;
		case OPT_SEED:
			if (add_seed(o, optarg) < 0)
				return -1;
			break;
		case OPT_INTO:
			free(o->into);
			o->into = abs_dir("--into", optarg, 0755);
			if (!o->into)
				return -1;
			break;
		case OPT_CACHE_MAX:
		case OPT_COLD_MAX:
			if (size_opt(c == OPT_CACHE_MAX ? "--cache-max"
							: "--cold-max",
				     optarg,
				     c == OPT_CACHE_MAX
					 ? &o->cache.max
					 : &o->cache.cold_max) < 0)
				return -1;
			break;
		case OPT_COLD_DIR:
			free(o->cache.cold_dir);
			o->cache.cold_dir = abs_dir("--cold-dir", optarg, 0700);
			if (!o->cache.cold_dir)
				return -1;
			break;
		case OPT_PIN:
			if (o->cache.npins == HYD_PINS_MAX) {
				base_error("--pin: at most %d patterns (ferry "
					   "pin adds more)",
					   HYD_PINS_MAX);
				return -1;
			}
			o->cache.pins[o->cache.npins++] = optarg;
			break;
		case 'e':
			o->ssh_opts.rsh = optarg;
			break;
		case OPT_REMOTE_FERRY:
			o->ssh_opts.remote_ferry = optarg;
			break;
		case OPT_POLL:
			if (base_opt_long("--poll", optarg, 0, POLL_MAX_S,
					  &o->poll_s) < 0)
				return -1;
			break;
		case OPT_KEEP:
			if (base_opt_long("--keep-generations", optarg, 1,
					  HYD_GENS_MAX, &o->keep) < 0)
				return -1;
			break;
		case OPT_BWLIMIT:
			if (hyd_rate_parse(optarg, &o->bwlimit, err,
					   sizeof(err)) < 0) {
				base_error("--bwlimit: %s", err);
				return -1;
			}
			break;
		default:
			r = hyd_creds_opt(&o->creds, c, optarg);
			if (r > 0)
				break;
			if (r == 0)
				base_opt_error(c, argv);
			return -1;
		}
	}
	if (argc - optind != 2) {
		base_error(
		    "expected URL and MOUNTPOINT, got %d argument%s (see "
		    "--help)",
		    argc - optind, argc - optind == 1 ? "" : "s");
		return -1;
	}
	o->url = argv[optind];
	o->mountpoint = argv[optind + 1];
	if (o->nseeds && o->no_backfill) {
		base_error("--seed is backfill's first step: not with "
			   "--no-backfill");
		return -1;
	}
	if (hyd_main_cache_opts(&o->cache, NULL) < 0)
		return -1;
	if (o->into && o->cache.max) {
		base_error("--into lands the whole tree in DIR: a bound on the "
			   "store (--cache-max) has nothing to keep");
		return -1;
	}
	if (o->into && o->no_backfill) {
		base_error("--into lands the whole tree: not with "
			   "--no-backfill");
		return -1;
	}
	return check_s3_opts(o);
}

/* An existing, empty directory; its absolute path into m->mnt. */
static int check_mountpoint(const char *path, struct mount *m)
{
	struct stat st;
	struct dirent *de;
	DIR *d;
	int busy = 0;

	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			base_error("mountpoint does not exist path=%s", path);
		else
			base_log_err(BASE_LOG_ERROR, errno,
				     "cannot use the mountpoint path=%s", path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		base_error("mountpoint is not a directory path=%s", path);
		return -1;
	}
	d = opendir(path);
	if (!d) {
		base_log_err(BASE_LOG_ERROR, errno,
			     "cannot read the mountpoint path=%s", path);
		return -1;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			busy = 1;
			break;
		}
	closedir(d);
	if (busy) {
		base_error("mountpoint is not empty path=%s", path);
		return -1;
	}
	if (!realpath(path, m->mnt)) {
		base_log_err(BASE_LOG_ERROR, errno,
			     "cannot resolve the mountpoint path=%s", path);
		return -1;
	}
	return 0;
}

/* The store is ours (its lock): a hydrator.pid left by a crash is stale. */
static int open_cache(const struct opts *o, struct mount *m)
{
	if (hyd_open_cache_dir(&m->op, o->cache_dir) < 0 ||
	    hyd_open_store(&m->op) < 0)
		return -1;
	snprintf(m->pidfile, sizeof(m->pidfile), "%s/hydrator.pid",
		 m->op.cache);
	unlink(m->pidfile);
	/* The credentials are checked here, before anything is mounted: a
	 * wrong token or certificate fails the catalog's fetch. */
	m->op.creds = &o->creds;
	if (hyd_open_catalog(&m->op, CONNECT_TIMEOUT_S) < 0)
		return -1;
	/* the first catalog's transfers, for the metrics */
	m->mcounts.catalog_requests = m->op.cat_requests;
	m->mcounts.catalog_bytes = m->op.cat_bytes;
	m->mcounts.generation = m->op.meta.generation;
	return 0;
}

/* The first generation: the catalog hyd_open opened, its overlay and
 * (files pending) their manifest fetcher, owned by the generation from
 * here on. */
static int first_gen(struct mount *m, struct hyd_gen **ret)
{
	hyd_manifest *man = NULL;
	int r = 0;

	*ret = NULL;
	if (m->op.ov) {
		struct hyd_manifest_config mc = {
		    .base_url = m->op.base,
		    .ov = m->op.ov,
		    .connect_timeout_ms = CONNECT_TIMEOUT_S * 1000,
		    .creds = m->op.creds,
		    .counts = &m->mcounts,
		};

		r = hyd_manifest_new(&mc, &man);
	}
	if (r == 0)
		r = hyd_gen_new(m->op.cat, m->op.ov, man, m->op.catpath,
				m->op.ovpath, ret);
	if (r < 0) {
		hyd_manifest_free(man);
		return r;
	}
	m->op.cat = NULL;
	m->op.ov = NULL;
	return 0;
}

/* --seed, on backfill's thread before its first pass (it fetches what
 * the seeds did not give). */
static int seed_run(void *arg, cat_reader *cat, const int *stop)
{
	struct mount *m = arg;
	struct hyd_seed_stats st;
	hyd_seeder *sd;
	uint64_t t0 = base_now_ns();
	int r;

	r = hyd_seeder_new(m->op.store, &m->op.meta.params, NULL, m->o->seeds,
			   m->o->nseeds, &sd);
	if (r == 0) {
		base_info("seeding from %zu director%s", m->o->nseeds,
			  m->o->nseeds == 1 ? "y" : "ies");
		r = hyd_seeder_tree(sd, cat, stop);
		if (hyd_seeder_finish(sd) < 0 && r == 0)
			r = -EIO;
		hyd_seeder_stats(sd, &st);
		base_info("seeded files_read=%" PRIu64 " bytes_read=%" PRIu64
			  " chunks=%" PRIu64 " bytes=%" PRIu64 " secs=%.1f",
			  st.files_read, st.bytes_read, st.chunks_seeded,
			  st.bytes_seeded, (double)(base_now_ns() - t0) / 1e9);
		hyd_seeder_free(sd);
	}
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "seeding stopped: backfill fetches the rest");
	return r;
}

/* Everything the FUSE ops need, except the threads. */
static int setup_fs(const struct opts *o, struct mount *m)
{
	struct hyd_backfill_config bc;
	struct hyd_fetch_config fc;
	uint32_t max_raw = m->op.meta.params.max;
	cat_reader *bf_cat = NULL;
	struct hyd_gen *g = NULL;
	uint64_t bg = 1;
	int r;

	r = hyd_read_cache_new(HYD_READ_CACHE_SLOTS, &m->rcache);
	if (r == 0) {
		memset(&fc, 0, sizeof(fc));
		fc.base_url = m->op.base;
		fc.store = m->op.store;
		fc.max_raw = max_raw;
		/* --jobs is backfill's; reads have a lane of their own
		 * (hyd_fetch: read_connections, at least as many). */
		fc.connections = (unsigned)o->jobs;
		bg = (uint64_t)o->jobs;
		if (o->bwlimit && bg > o->bwlimit / BWLIMIT_PER_BATCH_CONN + 1)
			bg = o->bwlimit / BWLIMIT_PER_BATCH_CONN + 1;
		fc.bg_connections = (unsigned)bg;
		fc.bwlimit = o->bwlimit;
		fc.cacheable = o->cacheable;
		/* A server pushes a whole batch into its socket buffers at
		 * once, beyond the bucket's reach: under a cap, a batch is a
		 * quarter second of it, so the server is never far ahead. */
		if (o->bwlimit) {
			fc.batch_bytes = o->bwlimit / 4;
			if (fc.batch_bytes < BATCH_BYTES_MIN)
				fc.batch_bytes = BATCH_BYTES_MIN;
			if (fc.batch_bytes > BATCH_BYTES_MAX)
				fc.batch_bytes = BATCH_BYTES_MAX;
		}
		fc.connect_timeout_ms = CONNECT_TIMEOUT_S * 1000;
		fc.creds = &o->creds;
		r = hyd_fetch_new(&fc, &m->fetch);
		/* The catalog's requests measured the round trip already:
		 * what backfill's first pass is ordered by (hyd_backfill). */
		if (r == 0)
			hyd_fetch_link_seed(m->fetch, m->op.cat_rtt_ns);
	}
	/* Pending files (format 2): their manifests come from the same
	 * server, on demand for reads and by segment for backfill. */
	if (r == 0)
		r = first_gen(m, &g);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot set up the fetcher");
		return -1;
	}
	hyd_fs_gens_init(&m->fs, g);
	/* Backfill walks with a reader of its own, so its long walk never
	 * waits on (or holds up) FUSE's lookups. */
	r = hyd_open_reader(&m->op, &bf_cat);
	if (r == 0) {
		memset(&bc, 0, sizeof(bc));
		bc.cat = bf_cat;
		bc.store = m->op.store;
		bc.fetch = m->fetch;
		bc.manifest = g->manifest;
		bc.max_raw = max_raw;
		bc.enabled = !o->no_backfill;
		m->prefetch = !o->no_backfill;
		/* Enough to keep every batch transfer busy with the next
		 * batch ready behind it: up to 1,024 chunks each (small
		 * files: a batch of 64 of them is a round trip for 300 KB),
		 * and on a long fat link up to 64 MiB each (hyd_fetch). */
		bc.window = (unsigned)(bg * 1024 * 2);
		bc.window_bytes = bg * (64ull << 20);
		bc.log_progress = 1;
		bc.traces = m->tracep;
		bc.ntraces = m->ntraces;
		m->cache = o->cache;
		m->cache.cold_dir =
		    o->cache.cold_dir ? strdup(o->cache.cold_dir) : NULL;
		m->cache.rcounts = &m->rcounts;
		if (hyd_main_cache_opts(&m->cache, m->op.cache) < 0 ||
		    (o->cache.cold_dir && !m->cache.cold_dir))
			r = -ENOMEM;
		bc.bound = m->cache.max;
		bc.pins = m->cache.pins;
		bc.npins = m->cache.npins;
		bc.pins_file = m->cache.pins_file;
		m->o = o;
		if (o->nseeds) {
			bc.seed = seed_run;
			bc.seed_arg = m;
		}
		if (r == 0)
			r = hyd_backfill_new(&bc, &m->bf);
		m->cache.bf = m->bf;
	}
	if (r < 0) {
		cat_reader_close(bf_cat);
		base_log_err(BASE_LOG_ERROR, r, "cannot set up backfill");
		return -1;
	}
	/* The follower owns backfill's reader from here on (and swaps it at
	 * each switch). */
	{
		struct hyd_follow_config wc = {
		    .base_url = m->op.base,
		    .cache_dir = m->op.cache,
		    .store = m->op.store,
		    .fs = &m->fs,
		    .se = m->se,
		    .bf = m->bf,
		    .prefetch = m->prefetch,
		    .bf_cat = bf_cat,
		    .creds = &o->creds,
		    .poll_s = (unsigned)o->poll_s,
		    .keep = (unsigned)o->keep,
		    .connect_timeout_s = CONNECT_TIMEOUT_S,
		    .started_ns = m->started_ns,
		    .counts = &m->mcounts,
		};

		r = hyd_follow_new(&wc, &m->follow);
	}
	if (r < 0) {
		cat_reader_close(bf_cat);
		base_log_err(BASE_LOG_ERROR, r, "cannot set up following");
		return -1;
	}
	m->fs.on_open = hyd_backfill_on_open;
	m->fs.on_open_arg = m->bf;
	/* The record of this mount's reads: without it the mount works,
	 * only no trace can be exported from it. */
	if (!o->no_record) {
		r = hyd_trace_rec_open(m->op.cache, m->op.meta.generation, 0,
				       &m->fs.trace);
		if (r < 0)
			base_log_err(BASE_LOG_WARN, r,
				     "no record of this mount's reads dir=%s",
				     m->op.cache);
	}
	m->fs.mountpoint = m->mnt;
	m->fs.rd.store = m->op.store;
	m->fs.rd.fetch = m->fetch;
	m->fs.rd.cache = m->rcache;
	m->fs.rd.max_raw = max_raw;
	m->fs.rd.timeout_ns = (uint64_t)o->timeout_s * 1000000000ull;
	m->fs.rd.counts = &m->rcounts;
	if (o->into) {
		struct hyd_into_config ic = {
		    .dir = o->into,
		    .cache_dir = m->op.cache,
		    .store = m->op.store,
		    .fetch = m->fetch,
		    .timeout_ns = m->fs.rd.timeout_ns,
		    .owners = geteuid() == 0,
		};

		m->into.fs = &m->fs;
		m->into.bf = m->bf;
		if (hyd_main_into_new(&m->into, &ic) < 0)
			return -1;
	}
	return 0;
}

/* Add "name=value" to a FUSE option list, with ',' and '\\' escaped as
 * libfuse's option parser wants. 0 or -1. */
static int fuse_opt_kv(char **opts, const char *name, const char *value)
{
	char buf[PATH_MAX + 64];
	int n = snprintf(buf, sizeof(buf), "%s=%s", name, value);

	if (n < 0 || (size_t)n >= sizeof(buf))
		return -1;
	return fuse_opt_add_opt_escaped(opts, buf);
}

static int setup_fuse(const struct opts *o, struct mount *m)
{
	struct fuse_lowlevel_ops ops;
	char source[PATH_MAX + 8], *mopts = NULL;
	char *argv[] = {PROG, "-o", NULL, NULL};
	struct fuse_args args;
	int r;

	/* The mount's source names the cache it serves ("ferry:CACHEDIR"),
	 * so `ferry status MOUNTPOINT` finds it in /proc/self/mountinfo. */
	snprintf(source, sizeof(source), "%s%s", HYD_FSNAME_PREFIX,
		 m->op.cache);
	r = fuse_opt_add_opt(&mopts, "ro,default_permissions,subtype=ferry");
	if (r == 0)
		r = fuse_opt_kv(&mopts, "fsname", source);
	if (r == 0 && o->allow_other)
		r = fuse_opt_add_opt(&mopts, "allow_other");
	/* --into: reads spliced from DIR fit the pipe (hyd_fuse.h) */
	if (r == 0 && o->into) {
		char mr[32];

		snprintf(mr, sizeof(mr), "%u", HYD_FUSE_MAX_READ_SPLICE);
		m->fs.max_read = HYD_FUSE_MAX_READ_SPLICE;
		r = fuse_opt_kv(&mopts, "max_read", mr);
	}
	if (r != 0) {
		free(mopts);
		base_error("out of memory");
		return -1;
	}
	argv[2] = mopts;
	args = (struct fuse_args)FUSE_ARGS_INIT(3, argv);
	hyd_fuse_ops_fill(&ops);
	m->se = fuse_session_new(&args, &ops, sizeof(ops), &m->fs);
	fuse_opt_free_args(&args);
	free(mopts);
	if (!m->se) {
		base_error("cannot create the FUSE session");
		return -1;
	}
	if (fuse_session_mount(m->se, m->mnt) != 0) {
		base_error("cannot mount path=%s (is /dev/fuse there and "
			   "fusermount3 installed?%s)",
			   m->mnt,
			   o->allow_other
			       ? " allow_other needs user_allow_other "
				 "in /etc/fuse.conf"
			       : "");
		return -1;
	}
	m->mounted = 1;
	return 0;
}

/* Fork into the daemon. The parent waits for one byte from the child
 * (daemon_ready: 0 serving, else it failed and has unmounted) and exits
 * with it; it never returns. In the child: a new session, cwd /, stdio on
 * /dev/null (redirect_log then points stderr at the log), *ret_fd the pipe
 * to report on. -1 if the fork failed (still in the one process). */
static int daemon_start(const struct mount *m, int *ret_fd)
{
	int p[2], nul;
	char c = 1;
	ssize_t n;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid > 0) {
		/* Nothing of the mount stays open here: the child takes the
		 * store's lock anew (its reopen), which our copy of the lock
		 * file's descriptor would hold. */
		close(p[1]);
		if (p[0] > 3)
			close_range(3, (unsigned)p[0] - 1, 0);
		close_range((unsigned)p[0] + 1, ~0u, 0);
		do
			n = read(p[0], &c, 1);
		while (n < 0 && errno == EINTR);
		if (n != 1 || c != 0)
			base_error("the mount's daemon did not start; see "
				   "%s/hydrator.log",
				   m->op.cache);
		_exit(n == 1 && c == 0 ? 0 : 1);
	}
	close(p[0]);
	setsid();
	if (chdir("/") < 0) {
		/* "/" always exists; nothing relies on the cwd anyway. */
	}
	nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		dup2(nul, STDERR_FILENO);
		if (nul > STDERR_FILENO)
			close(nul);
	}
	*ret_fd = p[1];
	return 0;
}

/* Tell the waiting parent (if any still waits) how start-up ended. */
static void daemon_ready(int *fd, int code)
{
	char c = (char)code;
	ssize_t n;

	if (*fd < 0)
		return;
	do
		n = write(*fd, &c, 1);
	while (n < 0 && errno == EINTR);
	close(*fd);
	*fd = -1;
}

/* After daemonizing: stderr goes to CACHEDIR/hydrator.log, and its lines
 * get timestamps. */
static void redirect_log(struct mount *m)
{
	char path[sizeof(m->op.cache) + 16];
	int fd;

	snprintf(path, sizeof(path), "%s/hydrator.log", m->op.cache);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return; /* stderr stays /dev/null: nothing better to do */
	dup2(fd, STDERR_FILENO);
	close(fd);
	base_log_stamps(1);
}

static void write_pidfile(struct mount *m)
{
	char buf[32];
	int n, r;

	n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	r = base_file_write_atomic(m->pidfile, buf, (size_t)n, 0644);
	if (r == 0)
		m->pid_written = 1;
	else
		base_log_err(BASE_LOG_WARN, r,
			     "cannot write the pid file path=%s", m->pidfile);
}

#define REOPEN_TRIES 100
#define REOPEN_WAIT_US 50000

/* In the daemon, after daemon_start's fork: SQLite connections must not
 * cross a fork (fcntl locks are not inherited, so the child's connection
 * would hold none, and another process opening state.db would think it
 * the last user and delete the live WAL under it). Close what the parent
 * opened and open it again here. The cache lock (flock) is shared with the
 * parent until it exits, which it does at once: wait for it. */
static int reopen_after_fork(struct mount *m)
{
	int r = -EBUSY, i;

	hyd_open_close(&m->op);
	for (i = 0; i < REOPEN_TRIES && r == -EBUSY; i++) {
		r = hyd_store_open(m->op.cache, CHUNK_MAX_LIMIT, &m->op.store);
		if (r == -EBUSY)
			usleep(REOPEN_WAIT_US);
	}
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r,
			     "cannot reopen the cache directory after "
			     "daemonizing path=%s",
			     m->op.cache);
		return -1;
	}
	/* The catalog, and the overlay of its pending manifests (it logs
	 * what fails). */
	if (hyd_open_local(&m->op) < 0)
		return -1;
	/* The lock file still names the parent, which has exited. */
	r = hyd_store_claim(m->op.store);
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "cannot record the pid in the lock file dir=%s",
			     m->op.cache);
	return 0;
}

static void log_event(const char *what, const struct mount *m)
{
	base_info("%s url=%s mountpoint=%s cache=%s generation=%" PRIu64
		  " pid=%ld",
		  what, m->op.base, m->mnt, m->op.cache, m->op.meta.generation,
		  (long)getpid());
}

/* libfuse's signal handler only flags the session as exited, and its loop
 * then joins workers that may sit in a read waiting out a dead server for
 * --timeout seconds. This thread sees the flag and cancels the fetcher
 * (and the manifest fetcher, whose requests a server may hold for their
 * ?wait=), so those reads end (EIO) at once and SIGTERM stops the
 * hydrator promptly. */
struct watch {
	struct fuse_session *se;
	hyd_fetch *fetch;
	struct hyd_fs *fs; /* its generations' manifest fetchers */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
};

#define WATCH_PERIOD_NS 100000000ull

static void *watch_main(void *arg)
{
	struct watch *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->done) {
		if (fuse_session_exited(w->se)) {
			hyd_fetch_cancel(w->fetch);
			hyd_fs_gens_cancel(w->fs);
			break;
		}
		base_cond_wait_until(&w->cond, &w->lock,
				     base_now_ns() + WATCH_PERIOD_NS);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static int watch_start(struct watch *w, pthread_t *th)
{
	sigset_t all, old;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = pthread_create(th, NULL, watch_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
}

static void watch_stop(struct watch *w, pthread_t th)
{
	pthread_mutex_lock(&w->lock);
	w->done = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(th, NULL);
}

/* The control socket's live numbers: backfill's, and the generation
 * served now with when it began (the cache's newest catalog may be one the
 * mount is about to switch to). */
static void live_status(void *arg, struct hyd_status *st)
{
	struct mount *m = arg;
	uint64_t gen = 0;
	int64_t ns = 0;

	hyd_backfill_live(m->bf, st);
	hyd_main_into_status(&m->into, st);
	hyd_main_cache_status(&m->cache, st);
	hyd_follow_info(m->follow, &gen, &ns);
	if (gen)
		st->generation = gen;
	if (ns > 0)
		st->switched_at = ns / 1000000000;
}

/* `ferry gc` over the control socket: the follower collects between two
 * switches. */
static int gc_now(void *arg, struct hyd_gc_result *ret)
{
	struct mount *m = arg;

	return hyd_follow_gc(m->follow, 0, ret);
}

/* `ferry pin` over the control socket. */
static int pin_now(void *arg, const char *path, char *err, size_t cap)
{
	struct mount *m = arg;

	return hyd_main_cache_pin(&m->cache, path, err, cap);
}

/* Threads, then the FUSE loop until unmount or SIGTERM. */
/* Pending files: their manifests in bulk from now on, so a job does not
 * wait a round trip per file before its chunks can be asked for; with
 * --no-backfill only the segments of what is listed, looked up or read.
 * Without it reads still fetch each file's own: a warning, not an end. */
static void prefetch_manifests(struct mount *m)
{
	struct hyd_gen *g;
	int r = 0;

	pthread_mutex_lock(&m->fs.gen_mu);
	g = m->fs.ngens ? m->fs.gens[0] : NULL;
	if (g && g->manifest)
		r = m->prefetch
			? hyd_manifest_prefetch(g->manifest, g->cat, 0)
			: hyd_manifest_prefetch_asked(
			      g->manifest, g->cat, HYD_MANIFEST_ASKED_THREADS);
	pthread_mutex_unlock(&m->fs.gen_mu);
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r,
			     "no manifest prefetch: manifests come file by "
			     "file");
}

static int serve(struct mount *m)
{
	struct fuse_loop_config *cfg;
	struct hyd_fetch_stats st;
	struct watch w = {.se = m->se, .fetch = m->fetch, .fs = &m->fs};
	pthread_t wth;
	int r, watching, cond_ok;

	/* The bound before the first put (after any fork: the capacity
	 * tier's lock belongs to the daemon). */
	if (hyd_main_cache_start(&m->cache, m->op.store) < 0)
		return -1;
	r = hyd_fetch_start(m->fetch);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot start the fetcher");
		return -1;
	}
	/* The job that starts now finds its first reads' connections open
	 * (each new one costs a round trip, and a TLS handshake). */
	hyd_fetch_warm(m->fetch, HYD_FETCH_WARM_MAX);
	prefetch_manifests(m);
	/* --into first: what backfill fetches lands in DIR from the start */
	if (hyd_main_into_start(&m->into) < 0)
		return -1;
	r = hyd_backfill_start(m->bf);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot start backfill");
		return -1;
	}
	r = hyd_follow_start(m->follow);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot start following");
		return -1;
	}
	/* Status without a control socket still works (from the cache), so
	 * a failure here is a warning. */
	r = hyd_control_start(m->op.cache, live_status, gc_now, m, &m->ctl);
	if (r == 0)
		hyd_control_set_pin(m->ctl, pin_now);
	if (r < 0)
		base_log_err(BASE_LOG_WARN, r, "no control socket dir=%s",
			     m->op.cache);
	else
		hyd_metrics_set_control(m->metrics, m->ctl);
	if (fuse_set_signal_handlers(m->se) != 0) {
		base_error("cannot set signal handlers");
		return -1;
	}
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		fuse_remove_signal_handlers(m->se);
		base_error("out of memory");
		return -1;
	}
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_idle_threads(cfg, FUSE_IDLE_THREADS);
	fuse_loop_cfg_set_max_threads(cfg, FUSE_MAX_THREADS);
	pthread_mutex_init(&w.lock, NULL);
	/* Without the watcher SIGTERM still works, only slower. */
	cond_ok = base_cond_init(&w.cond) == 0;
	watching = cond_ok && watch_start(&w, &wth) == 0;
	/* Without it the next small files are read on demand only. */
	if (hyd_push_start(&m->fs.push, &m->fs, m->se, !m->prefetch) < 0)
		base_warn("cannot start the thread that pushes small files "
			  "into the page cache");
	r = fuse_session_loop_mt(m->se, cfg);
	hyd_push_stop(&m->fs.push);
	if (watching)
		watch_stop(&w, wth);
	if (cond_ok)
		pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	fuse_loop_cfg_destroy(cfg);
	fuse_remove_signal_handlers(m->se);
	/* S3 reads go through the fetcher: they end before it stops */
	hyd_s3_stop(m->s3);
	m->s3 = NULL;
	/* the metrics read the control socket: they go first */
	hyd_metrics_stop(m->metrics);
	m->metrics = NULL;
	hyd_control_stop(m->ctl);
	m->ctl = NULL;
	/* --into reads the generations and the store, and waits on
	 * backfill: it stops before them. */
	hyd_main_into_free(&m->into);
	/* A switch calls into backfill: the follower stops first. */
	hyd_follow_stop(m->follow);
	hyd_backfill_stop(m->bf);
	hyd_fetch_stop(m->fetch);
	hyd_fetch_stats(m->fetch, &st);
	base_info("stopping requests=%" PRIu64 " batches=%" PRIu64
		  " chunks=%" PRIu64 " wire_bytes=%" PRIu64 " failures=%" PRIu64
		  " mismatches=%" PRIu64 " retries=%" PRIu64
		  " rescues=%" PRIu64,
		  st.requests, st.batches, st.chunks, st.wire_bytes,
		  st.failures, st.mismatches, st.retries, st.rescues);
	/* A signal number is a normal way to stop; -errno is not. */
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "FUSE loop failed");
		return -1;
	}
	return 0;
}

static void mount_free(struct mount *m)
{
	hyd_main_into_free(&m->into);
	hyd_s3_stop(m->s3);
	hyd_s3_keys_fini(&m->s3keys);
	hyd_metrics_stop(m->metrics);
	hyd_control_stop(m->ctl);
	hyd_follow_stop(m->follow);
	/* The fetcher first: its done hook points into backfill. */
	hyd_backfill_stop(m->bf);
	hyd_fetch_free(m->fetch);
	hyd_backfill_free(m->bf);
	/* After backfill: it closes the reader backfill used. */
	hyd_follow_free(m->follow);
	if (m->se) {
		if (m->mounted)
			fuse_session_unmount(m->se);
		fuse_session_destroy(m->se);
	}
	/* After the session: no read is left to hold a state. */
	hyd_files_fini(&m->fs.files);
	hyd_trace_rec_close(m->fs.trace);
	for (size_t i = 0; i < m->ntraces; i++)
		hyd_trace_free(&m->traces[i]);
	hyd_read_cache_free(m->rcache);
	/* No reader or backfill is left to use them: the generations go
	 * (manifest fetchers, catalogs, overlays), then the store. */
	if (m->fs.ngens)
		hyd_fs_gens_fini(&m->fs);
	hyd_open_close(&m->op);
	/* After the store, which evicts into it until it closes. */
	hyd_main_cache_close(&m->cache);
	if (m->pid_written)
		unlink(m->pidfile);
	free(m);
}

/* --metrics-listen: the server, reading the fetcher's, the read path's
 * and the mount's counters (the control socket's status joins in serve,
 * once it runs). */
static int start_metrics(const struct opts *o, struct mount *m)
{
	struct hyd_metrics_src src = {
	    .fetch = m->fetch,
	    .read = &m->rcounts,
	    .mount = &m->mcounts,
	};

	return hyd_metrics_start(o->metrics_listen, &src, &m->metrics);
}

/* --s3-listen: the bucket is the namespace, served from the mount's
 * generations, open files and read path. */
static int start_s3(const struct opts *o, struct mount *m)
{
	struct hyd_s3_src src = {
	    .fs = &m->fs,
	    .bucket = m->op.name,
	    .created_ns = m->started_ns,
	    .keys = o->s3_keys ? &m->s3keys : NULL,
	};

	return hyd_s3_start(o->s3_listen, &src, &m->s3);
}

/* --prefetch: every trace read and checked now, so a bad one is a
 * usage error on the terminal, not a line in the daemon's log. */
static int load_traces(const struct opts *o, struct mount *m)
{
	char why[256];
	size_t i;
	int r;

	for (i = 0; i < o->nprefetch; i++) {
		r = hyd_trace_load(o->prefetch[i], &m->traces[i], why,
				   sizeof(why));
		if (r < 0) {
			base_error("--prefetch %s: %s", o->prefetch[i], why);
			return -1;
		}
		m->tracep[i] = &m->traces[i];
		m->ntraces = i + 1;
	}
	return 0;
}

static int run(const struct opts *o)
{
	char cache[4096] = "";
	struct mount *m;
	int r = 1, ready_fd = -1;

	m = calloc(1, sizeof(*m));
	if (!m) {
		base_error("out of memory");
		return 1;
	}
	hyd_files_init(&m->fs.files);
	hyd_read_counts_init(&m->rcounts);
	m->started_ns = base_wall_ns();
	if (hyd_open_url(&m->op, o->url) < 0) {
		r = EXIT_USAGE;
		goto out;
	}
	/* before the daemon's chdir: a relative path works */
	if (o->s3_keys && hyd_s3_keys_load(o->s3_keys, &m->s3keys) < 0) {
		r = EXIT_USAGE;
		goto out;
	}
	if (load_traces(o, m) < 0) {
		r = EXIT_USAGE;
		goto out;
	}
	if (check_mountpoint(o->mountpoint, m) < 0 || open_cache(o, m) < 0 ||
	    check_into(o, m) < 0 || setup_fuse(o, m) < 0)
		goto out;
	if (!o->foreground) {
		/* The parent waits in daemon_start until the child is set
		 * up (below), then exits with its verdict. */
		if (daemon_start(m, &ready_fd) != 0) {
			base_error("cannot daemonize");
			goto out;
		}
		daemonized = 1;
		redirect_log(m);
		if (reopen_after_fork(m) < 0)
			goto out;
	}
	/* The FUSE session only calls into m->fs from serve() on, so the
	 * fetcher and backfill are made here, on this side of the fork. */
	if (setup_fs(o, m) < 0)
		goto out;
	/* Before the parent is told: an address that cannot be served is
	 * a failed start, not a mount without the metrics asked for. */
	if (o->metrics_listen && start_metrics(o, m) < 0)
		goto out;
	if (o->s3_listen && start_s3(o, m) < 0)
		goto out;
	write_pidfile(m);
	log_event("mounted", m);
	daemon_ready(&ready_fd, 0);
	if (serve(m) == 0)
		r = 0;
	log_event(r == 0 ? "unmounted" : "failed", m);
out:
	if (r == 0 && o->into)
		snprintf(cache, sizeof(cache), "%s", m->op.cache);
	mount_free(m);
	if (cache[0])
		hyd_main_into_drop_store(cache);
	/* Start-up failed in the daemon: unmounted now, the parent exits 1. */
	daemon_ready(&ready_fd, 1);
	return r;
}

/* A [USER@]HOST:PATH source: ferry-replicator started over ssh
 * (hyd_ssh), its URL and socket in place of a URL's. 0, or the exit
 * status (said). */
static int ssh_open(struct opts *o, struct hyd_ssh *ssh)
{
	char err[512];
	int r;

	if (!hyd_ssh_source(o->url))
		return 0;
	o->ssh_opts.detach = !o->foreground;
	o->ssh_opts.serve_last = 1; /* browsable before the walk ends */
	/* The mount follows the source: the replicator started for it
	 * rescans PATH as often as the mount asks for a new generation. */
	o->ssh_opts.rescan_s = o->poll_s > 0 ? (unsigned)o->poll_s : 0;
	r = hyd_ssh_start(o->url, &o->ssh_opts, ssh, err, sizeof(err));
	if (r < 0) {
		base_error("%s", err);
		return r == -EINVAL || r == -ENAMETOOLONG ? EXIT_USAGE : 1;
	}
	if (ssh->file) {
		base_error("%s names a file: a mount needs a directory (ferry "
			   "sync copies a single file)",
			   o->url);
		return EXIT_USAGE;
	}
	base_info("over ssh source=%s url=%s", o->url, ssh->url);
	o->url = ssh->url;
	o->creds.unix_socket = ssh->sock;
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct hyd_ssh ssh = {.pid = -1, .to_fd = -1, .from_fd = -1};
	int r;

	hyd_pool_default();
	/* Chunk buffers (up to 256 KiB, frames a little more) are taken and
	 * given back for every read; above glibc's mmap threshold each would
	 * be a fresh mapping the kernel zero-fills, then unmaps: 10% of a
	 * streaming read's CPU went to clearing pages. Served from the heap
	 * they are reused (docs/performance.md, "S3 on the same copy"). */
	mallopt(M_MMAP_THRESHOLD, HYD_MMAP_THRESHOLD);
	mallopt(M_TRIM_THRESHOLD, 4 * HYD_MMAP_THRESHOLD);
	/* ...and a heap that grows keeps some room, so freed buffers are
	 * not handed back and faulted in again at the next read. */
	mallopt(M_TOP_PAD, 8 * HYD_MMAP_THRESHOLD);
	base_log_init(PROG, BASE_LOG_INFO);
	r = parse_args(argc, argv, &o);
	if (r != 0) {
		free_seeds(&o);
		free(o.into);
		free(o.cache.cold_dir);
		return r > 0 ? 0 : EXIT_USAGE;
	}
	base_log_init(PROG, o.log_level);
	/* Once, before any thread exists. */
	if (hyd_fetch_global_init() < 0) {
		base_error("curl_global_init failed");
		return 1;
	}
	r = ssh_open(&o, &ssh);
	if (r == 0)
		r = run(&o);
	/* In a daemon the session ends here, at the unmount (ssh is its
	 * parent's child then: the end of its input stops it). */
	hyd_ssh_stop(&ssh);
	hyd_fetch_global_cleanup();
	free_seeds(&o);
	free(o.into);
	free(o.cache.cold_dir);
	/* The daemon's last line: what it exits with (tests check it). */
	if (daemonized)
		base_info("exit status=%d pid=%ld", r, (long)getpid());
	return r;
}
