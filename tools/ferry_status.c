/*
 * tools/ferry_status.c — `ferry status MOUNTPOINT|CACHEDIR`: how far a
 * cache is hydrated, how fast, how long to go.
 *
 * The numbers come from hyd_status_query: the running hydrator's control
 * socket when one answers, else the cache's files. A CACHEDIR is named
 * directly; for a MOUNTPOINT we find its cache: /proc/self/mountinfo says
 * which mount (fstype fuse.ferry) holds the path, then /proc/PID/cmdline of
 * each ferry-hydrator says which one serves that mount, and its cache is
 * the directory of the state.db it holds open (/proc/PID/fd), else its -c
 * argument, else the default cache directory of its URL.
 *
 * Output: a progress line in the manner of rsync --info=progress2 and a
 * few lines of detail; --watch redraws them in place on a terminal (and
 * appends blocks otherwise); --json prints hyd_status_json lines.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_internal.h"

#define PROG "ferry status"
#define STATUS_JSON_CAP 32768 /* > any hyd_status_json line */
#define CMDLINE_MAX 65536     /* bytes of /proc/PID/cmdline we read */
#define MOUNTINFO_LINE_MAX 16384
#define BAR_WIDTH 24
#define DETAIL_LINES 8 /* lines after the progress line */

/* Set by SIGINT/SIGTERM during --watch; the only global, a signal flag. */
static volatile sig_atomic_t stop_requested;

struct opts {
	const char *path;
	int json;
	int watch;
	double interval_s;
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
	    "[--watch [SECONDS]]\n"
	    "\n"
	    "Show how much of a ferry tree is hydrated: files and bytes,\n"
	    "unique chunks, bytes on the wire and at rest, savings from\n"
	    "dedup and compression, rate, ETA and the hydrator's state.\n"
	    "Asks the running hydrator (CACHEDIR/control.sock); without one\n"
	    "the cache's files are read.\n"
	    "\n"
	    "  MOUNTPOINT        a ferry-hydrator mount (its cache is found)\n"
	    "  CACHEDIR          a cache directory (state.db, catalogs/)\n"
	    "  --json            one line of JSON (stable keys) per refresh\n"
	    "  --watch [SECONDS] refresh every SECONDS (default 1) until\n"
	    "                    complete or interrupted\n"
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

/* 0 to go on, 1 when help was printed, -1 on a usage error (reported). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	int i, only_paths = 0;

	memset(o, 0, sizeof(*o));
	o->interval_s = 1.0;
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
				fprintf(stderr,
					PROG ": --watch wants seconds "
					     "(0.1-86400), not '%s'\n",
					a + 8);
				return -1;
			}
		} else if (!only_paths && a[0] == '-' && a[1]) {
			fprintf(stderr,
				PROG ": unknown option '%s' (see "
				     "ferry status --help)\n",
				a);
			return -1;
		} else if (o->path) {
			fprintf(stderr,
				PROG ": one MOUNTPOINT or CACHEDIR, "
				     "not '%s' too\n",
				a);
			return -1;
		} else {
			o->path = a;
		}
	}
	if (!o->path) {
		fprintf(stderr, PROG ": expected MOUNTPOINT or CACHEDIR (see "
				     "ferry status --help)\n");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Which cache                                                        */
/* ------------------------------------------------------------------ */

static int is_dir(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A cache directory holds state.db or catalogs/. */
static int is_cache_dir(const char *dir)
{
	char p[PATH_MAX + 16];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/state.db", dir);
	if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
		return 1;
	snprintf(p, sizeof(p), "%s/catalogs", dir);
	return is_dir(p);
}

/* Undo mountinfo's octal escapes (\040 for a space...) in place. */
static void unescape_octal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* The mount that holds a file of device dev: its mount point and fstype
 * from /proc/self/mountinfo. 1 when found, 0 when not, -errno. */
static int mount_of(dev_t dev, char *mnt, size_t mnt_cap, char *fstype,
		    size_t fs_cap)
{
	char *line = malloc(MOUNTINFO_LINE_MAX);
	unsigned maj, min;
	int found = 0;
	FILE *f;

	if (!line)
		return -ENOMEM;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f) {
		free(line);
		return -errno;
	}
	while (!found && fgets(line, MOUNTINFO_LINE_MAX, f)) {
		char *save = NULL, *tok, *mp = NULL, *sep;
		int field = 0;

		/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPT...] - TYPE ..."
		 */
		sep = strstr(line, " - ");
		if (!sep)
			continue;
		*sep = '\0';
		for (tok = strtok_r(line, " ", &save); tok;
		     tok = strtok_r(NULL, " ", &save), field++) {
			if (field == 2 && sscanf(tok, "%u:%u", &maj, &min) != 2)
				break;
			if (field == 4)
				mp = tok;
		}
		if (!mp || makedev(maj, min) != dev)
			continue;
		tok = strtok_r(sep + 3, " ", &save);
		if (!tok)
			continue;
		unescape_octal(mp);
		snprintf(mnt, mnt_cap, "%s", mp);
		snprintf(fstype, fs_cap, "%s", tok);
		found = 1;
	}
	fclose(f);
	free(line);
	return found;
}

/* The process's launch directory as its environment recorded it (PWD),
 * for relative arguments of a daemon that has since done chdir("/"). */
static int env_pwd(long pid, char *out, size_t cap)
{
	char p[64], *buf;
	size_t len = 0, i;
	ssize_t n;
	int fd, found = 0;

	snprintf(p, sizeof(p), "/proc/%ld/environ", pid);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	buf = malloc(CMDLINE_MAX + 1);
	if (buf) {
		while (len < CMDLINE_MAX &&
		       (n = read(fd, buf + len, CMDLINE_MAX - len)) > 0)
			len += (size_t)n;
		buf[len] = '\0';
		for (i = 0; i < len && !found; i += strlen(buf + i) + 1)
			if (!strncmp(buf + i, "PWD=/", 5) &&
			    strlen(buf + i + 4) < cap) {
				memcpy(out, buf + i + 4,
				       strlen(buf + i + 4) + 1);
				found = 1;
			}
		free(buf);
	}
	close(fd);
	return found;
}

/* Resolve a hydrator argument to a real path: absolute as is; relative
 * against the process's working directory when how == 0, against the PWD
 * it was started with when how == 1 (a daemon's cwd is "/" by now, where
 * "mnt" may well name something else). 0 or -errno. */
static int resolve_arg(long pid, const char *arg, int how, char *out)
{
	char p[PATH_MAX + 64], pwd[PATH_MAX];

	if (arg[0] == '/')
		return how == 0 && realpath(arg, out) ? 0 : -ENOENT;
	if (how == 0) {
		snprintf(p, sizeof(p), "/proc/%ld/cwd/%s", pid, arg);
	} else {
		if (!env_pwd(pid, pwd, sizeof(pwd)))
			return -ENOENT;
		snprintf(p, sizeof(p), "%s/%s", pwd, arg);
	}
	return realpath(p, out) ? 0 : -errno;
}

/* How well a hydrator's MOUNTPOINT word names mnt: 2 it resolves to mnt;
 * 1 it is relative and a tail of mnt ("mnt", "./x/mnt") but nothing tells
 * where it started from; 0 no. */
static int word_match(long pid, const char *word, const char *mnt)
{
	char real[PATH_MAX], w[PATH_MAX];
	size_t wl, ml = strlen(mnt);
	int how;

	for (how = 0; how < 2; how++)
		if (resolve_arg(pid, word, how, real) == 0 &&
		    !strcmp(real, mnt))
			return 2;
	if (word[0] == '/' || strstr(word, ".."))
		return 0;
	while (!strncmp(word, "./", 2))
		word += 2;
	snprintf(w, sizeof(w), "%s", word);
	wl = strlen(w);
	while (wl > 0 && w[wl - 1] == '/')
		w[--wl] = '\0';
	return wl > 0 && ml > wl && !strcmp(mnt + ml - wl, w) &&
	       mnt[ml - wl - 1] == '/';
}

/* The directory of a state.db the process holds open, if we may look. */
static int cache_from_fds(long pid, char *out, size_t cap)
{
	char dir[64], lp[PATH_MAX + 64], target[PATH_MAX];
	struct dirent *de;
	ssize_t n;
	int found = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%ld/fd", pid);
	d = opendir(dir);
	if (!d)
		return 0;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(lp, sizeof(lp), "%s/%s", dir, de->d_name);
		n = readlink(lp, target, sizeof(target) - 1);
		if (n < 10)
			continue;
		target[n] = '\0';
		if (strcmp(target + n - 9, "/state.db") != 0)
			continue;
		target[n - 9] = '\0';
		if ((size_t)(n - 9) < cap) {
			memcpy(out, target, (size_t)(n - 9) + 1);
			found = 1;
		}
	}
	closedir(d);
	return found;
}

/* The arguments of a ferry-hydrator command line that matter here. */
struct hyd_args {
	const char *cache; /* -c/--cache-dir, NULL when absent */
	const char *url;
	const char *words[64]; /* non-option words: URL and MOUNTPOINT */
	size_t n_words;
};

/* Options of ferry-hydrator that take a value, so their values are not
 * taken for the MOUNTPOINT. Unknown ones are harmless: a word that is not
 * the mount simply does not match. */
static int takes_value(const char *opt)
{
	static const char *const longs[] = {
	    "--cache-dir", "--timeout", "--connections", "--jobs", "--bwlimit"};
	size_t i;

	for (i = 0; i < sizeof(longs) / sizeof(longs[0]); i++)
		if (!strcmp(opt, longs[i]))
			return 1;
	return 0;
}

static void split_cmdline(char *buf, size_t len, struct hyd_args *h)
{
	size_t i = 0;
	int only_words = 0, want_cache = 0, skip_next = 0;

	memset(h, 0, sizeof(*h));
	/* argv[0] was checked by the caller; skip it. */
	i = strnlen(buf, len) + 1;
	while (i < len) {
		char *a = buf + i;

		i += strnlen(a, len - i) + 1;
		if (want_cache || skip_next) {
			if (want_cache)
				h->cache = a;
			want_cache = skip_next = 0;
		} else if (!only_words && !strcmp(a, "--")) {
			only_words = 1;
		} else if (!only_words && !strncmp(a, "--", 2)) {
			if (!strncmp(a, "--cache-dir=", 12))
				h->cache = a + 12;
			else if (!strcmp(a, "--cache-dir"))
				want_cache = 1;
			else if (!strchr(a, '=') && takes_value(a))
				skip_next = 1;
		} else if (!only_words && a[0] == '-' && a[1]) {
			/* A cluster of short options: -f, -v, -c DIR,
			 * -fcDIR, -o OPTS. */
			const char *c;

			for (c = a + 1; *c; c++) {
				if (*c == 'c' || *c == 'o' || *c == 'j') {
					if (c[1] && *c == 'c')
						h->cache = c + 1;
					else if (!c[1] && *c == 'c')
						want_cache = 1;
					else if (!c[1])
						skip_next = 1;
					break;
				}
			}
		} else if (h->n_words <
			   sizeof(h->words) / sizeof(h->words[0])) {
			h->words[h->n_words++] = a;
			if (!h->url && (!strncmp(a, "http://", 7) ||
					!strncmp(a, "https://", 8)))
				h->url = a;
		}
	}
}

/* Whether the ferry-hydrator process pid serves mnt (word_match's 0, 1,
 * 2) and, when it does, its cache directory into out (else out is ""). */
static int hydrator_cache(long pid, const char *mnt, char *out, size_t cap)
{
	char p[64], *buf, real[PATH_MAX], base[HYD_URL_MAX];
	char name[BASE_NS_NAME_MAX + 1], err[256];
	const char *argv0;
	struct hyd_args h;
	ssize_t n;
	size_t len = 0, i;
	int fd, m, match = 0;

	out[0] = '\0';
	snprintf(p, sizeof(p), "/proc/%ld/cmdline", pid);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	buf = malloc(CMDLINE_MAX + 1);
	if (!buf) {
		close(fd);
		return 0;
	}
	while (len < CMDLINE_MAX &&
	       (n = read(fd, buf + len, CMDLINE_MAX - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	argv0 = strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf;
	if (len == 0 || strcmp(argv0, "ferry-hydrator") != 0)
		goto out;
	split_cmdline(buf, len, &h);
	for (i = 0; i < h.n_words && match < 2; i++) {
		m = h.words[i] == h.url ? 0 : word_match(pid, h.words[i], mnt);
		if (m > match)
			match = m;
	}
	if (!match)
		goto out;
	if (cache_from_fds(pid, out, cap))
		goto out;
	if (h.cache) {
		/* Only reached when /proc/PID/fd is closed to us. */
		for (i = 0; i < 2 && !out[0]; i++)
			if (resolve_arg(pid, h.cache, (int)i, real) == 0 &&
			    is_cache_dir(real) && strlen(real) < cap)
				memcpy(out, real, strlen(real) + 1);
	} else if (h.url &&
		   hyd_url_parse(h.url, base, sizeof(base), name, sizeof(name),
				 err, sizeof(err)) == 0) {
		/* Our own HOME/XDG_CACHE_HOME: right when it is our mount. */
		if (hyd_cache_dir_default(base, name, out, cap) < 0)
			out[0] = '\0';
	}
out:
	free(buf);
	return out[0] ? match : 0;
}

/* Scan /proc for the hydrator serving mnt: one whose MOUNTPOINT resolves
 * to it, else the only one whose relative MOUNTPOINT is a tail of it.
 * 1 found (cache filled), 0 none or ambiguous. */
static int find_hydrator_cache(const char *mnt, char *out, size_t cap)
{
	char cand[PATH_MAX];
	struct dirent *de;
	int m, strong = 0, weak = 0;
	char *end;
	long pid;
	DIR *d = opendir("/proc");

	if (!d)
		return 0;
	while (!strong && (de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		errno = 0;
		pid = strtol(de->d_name, &end, 10);
		if (errno || *end || pid <= 0 || pid == (long)getpid())
			continue;
		m = hydrator_cache(pid, mnt, cand, sizeof(cand));
		if (m == 0 || strlen(cand) >= cap)
			continue;
		if (m == 2 || weak == 0)
			memcpy(out, cand, strlen(cand) + 1);
		if (m == 2)
			strong = 1;
		else
			weak++;
	}
	closedir(d);
	return strong || weak == 1;
}

/* The cache directory that path names or serves into cache. 0, or 1 after
 * one line on stderr saying why not. */
static int find_cache(const char *path, char *cache, size_t cap)
{
	char real[PATH_MAX], mnt[PATH_MAX], fstype[64];
	struct stat sb;
	int r;

	if (stat(path, &sb) < 0) {
		if (errno == ENOTCONN)
			fprintf(stderr,
				PROG ": %s: a FUSE mount whose daemon is gone "
				     "(unmount it with fusermount3 -u)\n",
				path);
		else
			fprintf(stderr, PROG ": %s: %s\n", path,
				strerror(errno));
		return 1;
	}
	r = mount_of(sb.st_dev, mnt, sizeof(mnt), fstype, sizeof(fstype));
	if (r > 0 && !strcmp(fstype, "fuse.ferry")) {
		if (find_hydrator_cache(mnt, cache, cap) && is_cache_dir(cache))
			return 0;
		fprintf(stderr,
			PROG ": %s is a ferry mount, but no ferry-hydrator "
			     "serving it could be found (run ferry status "
			     "CACHEDIR instead)\n",
			mnt);
		return 1;
	}
	if (S_ISDIR(sb.st_mode) && realpath(path, real) && is_cache_dir(real) &&
	    strlen(real) < cap) {
		memcpy(cache, real, strlen(real) + 1);
		return 0;
	}
	fprintf(stderr,
		PROG ": %s is neither a ferry mount nor a ferry cache "
		     "directory\n",
		path);
	return 1;
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

static void fmt_hms(int64_t s, char *buf, size_t cap)
{
	if (s < 0) {
		snprintf(buf, cap, "--:--:--");
		return;
	}
	snprintf(buf, cap, "%" PRId64 ":%02d:%02d", s / 3600,
		 (int)(s / 60 % 60), (int)(s % 60));
}

/* part of whole in percent; whole 0 is 100%. */
static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 100.0;
}

/* A string from the hydrator or the server, safe to print: control bytes
 * (escape sequences) become '?'. */
static void printable(const char *s, char *out, size_t cap)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < cap; i++)
		out[i] =
		    ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
	out[i] = '\0';
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The lines of one refresh into lines[0..1+DETAIL_LINES). */
static void render(const struct hyd_status *st, const struct sample *prev,
		   char lines[][512])
{
	char a[32], b[32], rate[32], eta[32], el[32], bar[BAR_WIDTH + 1];
	char text[HYD_URL_MAX];
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
	fmt_hms(st->state == HYD_STATE_COMPLETE ? 0 : eta_s, eta, sizeof(eta));
	snprintf(lines[k++], 512, "%11s / %-11s %5.1f%%  %12s  %9s ETA  [%s]",
		 a, b, p, rate, eta, bar);
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
	snprintf(lines[k++], 512, "at rest        %s in packs", a);
	fmt_bytes(st->bytes_total > st->unique_bytes_total
		      ? st->bytes_total - st->unique_bytes_total
		      : 0,
		  a, sizeof(a));
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
	fmt_hms((int64_t)st->elapsed_s, el, sizeof(el));
	/* Live numbers come only from a hydrator that answered: it reports
	 * its elapsed time, and never "stopped". */
	live = st->elapsed_s > 0 || (st->state != HYD_STATE_STOPPED &&
				     st->state != HYD_STATE_COMPLETE);
	if (live)
		snprintf(lines[k++], 512,
			 "state          %s (pid %ld, up %s; this run: %" PRIu64
			 " mismatches, %" PRIu64 " retries, %" PRIu64
			 " failures)",
			 hyd_state_name(st->state), st->pid, el, st->mismatches,
			 st->retries, st->failures);
	else if (st->pid > 0)
		snprintf(lines[k++], 512,
			 "state          %s (hydrator pid %ld is running but "
			 "did not answer on control.sock)",
			 hyd_state_name(st->state), st->pid);
	else
		snprintf(lines[k++], 512,
			 "state          %s (no hydrator running)",
			 hyd_state_name(st->state));
	printable(st->last_error[0] ? st->last_error : "none", text,
		  sizeof(text));
	snprintf(lines[k++], 512, "last error     %.480s", text);
}

/* Print a refresh. On a terminal in --watch the block is redrawn in place
 * (cursor up over the previous one); elsewhere blocks follow each other. */
static void show_human(const struct hyd_status *st, const struct sample *prev,
		       int tty, int watch, int redraw)
{
	char lines[1 + DETAIL_LINES][512];
	int i;

	render(st, prev, lines);
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

static int show_json(const struct hyd_status *st)
{
	char *buf = malloc(STATUS_JSON_CAP);
	int n;

	if (!buf) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	n = hyd_status_json(st, buf, STATUS_JSON_CAP);
	if (n >= 0 && n < STATUS_JSON_CAP)
		printf("%s\n", buf);
	free(buf);
	fflush(stdout);
	return 0;
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

	r = parse_args(argc, argv, &o);
	if (r != 0)
		return r > 0 ? 0 : 2;
	if (find_cache(o.path, cache, sizeof(cache)) != 0)
		return 1;
	st = malloc(sizeof(*st));
	if (!st) {
		fprintf(stderr, PROG ": out of memory\n");
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
			fprintf(stderr,
				PROG ": %s: cannot read its status: %s\n",
				cache,
				r == -ENOENT ? "no catalog in it yet"
					     : strerror(-r));
			rc = 1;
			break;
		}
		if (o.json)
			rc = show_json(st);
		else
			show_human(st, &prev, tty, o.watch, redraw);
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
