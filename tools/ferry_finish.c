/*
 * tools/ferry_finish.c — `ferry finish MOUNTPOINT`: the end of a migration
 * with ferry-hydrator --into DIR. Waits until DIR holds the mount's
 * current generation whole, checks DIR against it, then puts DIR in the
 * mount's place: the FUSE mount is detached lazily (a process holding a
 * file open on it reads on until it closes it; the hydrator serves it
 * until then) and DIR is bind-mounted at MOUNTPOINT.
 *
 * Each step can be repeated: a note (RUNDIR/ferry-finish-KEY, KEY from
 * the mountpoint's path) holds the cache and DIR from before the detach
 * on, so a finish killed between the detach and the bind is completed by
 * running it again, and one that already ended says so.
 * Exit: 0 done, 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

#define POLL_S 1
#define SAY_EVERY_S 10

struct finish {
	char mnt[PATH_MAX];
	char cache[PATH_MAX];
	char dir[PATH_MAX];
	char note[PATH_MAX + 64];
	int verify, quiet;
	long timeout_s; /* 0: wait as long as it takes */
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry finish [OPTIONS] MOUNTPOINT\n"
	    "\n"
	    "End a migration made with ferry-hydrator --into DIR: wait until\n"
	    "DIR holds the mount's current generation whole, check DIR\n"
	    "against it, then detach the FUSE mount lazily (processes with\n"
	    "files open on it read on until they close them) and bind-mount\n"
	    "DIR at MOUNTPOINT. Run it again after an interruption: it goes\n"
	    "on from the step it reached.\n"
	    "\n"
	    "Options:\n"
	    "      --verify     re-read and hash every file of DIR against\n"
	    "                   the catalog (default: the landing's record,\n"
	    "                   a stat per entry)\n"
	    "      --timeout S  give up waiting after S seconds (default:\n"
	    "                   wait)\n"
	    "  -q, --quiet      errors only\n"
	    "  -h, --help       this text\n"
	    "\n"
	    "Exit status: 0 finished (or already), 1 failed (said why), 2 bad\n"
	    "usage. See ferry(1).\n");
}

/* Where the notes of finishes in progress are kept. */
static void note_path(struct finish *f)
{
	const char *run = getenv("FERRY_RUN_DIR");
	chunk_id id;
	char hex[17];

	if (!run || !run[0])
		run = geteuid() == 0 ? "/run/ferry" : "/tmp";
	chunk_id_compute(f->mnt, strlen(f->mnt), &id);
	for (int i = 0; i < 8; i++)
		snprintf(hex + 2 * i, 3, "%02x", id.b[i]);
	snprintf(f->note, sizeof(f->note), "%s/ferry-finish-%s", run, hex);
}

static int note_write(const struct finish *f)
{
	char text[2 * PATH_MAX + 32], dir[PATH_MAX + 64], *slash;
	int n;

	snprintf(dir, sizeof(dir), "%s", f->note);
	slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		(void)base_mkdir_p(dir, 0700);
	}
	n = snprintf(text, sizeof(text), "cache=%s\ndir=%s\n", f->cache,
		     f->dir);
	return base_file_write_atomic(f->note, text, (size_t)n, 0600);
}

/* 1 when the note was there (cache and dir set), else 0. */
static int note_read(struct finish *f)
{
	char line[PATH_MAX + 16], *nl;
	FILE *in = fopen(f->note, "r");
	int have = 0;

	if (!in)
		return 0;
	while (fgets(line, sizeof(line), in)) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strncmp(line, "cache=", 6))
			have |= snprintf(f->cache, sizeof(f->cache), "%s",
					 line + 6) > 0;
		else if (!strncmp(line, "dir=", 4))
			have |= (snprintf(f->dir, sizeof(f->dir), "%s",
					  line + 4) > 0)
				<< 1;
	}
	fclose(in);
	return have == 3;
}

struct top {
	const char *point;
	int ferry;
	char source[PATH_MAX + 16];
};

static int top_one(void *ctx, const struct base_mount *m)
{
	struct top *t = ctx;

	if (strcmp(m->point, t->point))
		return 0;
	t->ferry = !strcmp(m->fstype, "fuse.ferry");
	snprintf(t->source, sizeof(t->source), "%s", m->source);
	return 0;
}

/* Is the top mount at mnt a ferry mount? Its cache into cache. */
static int ferry_mounted(struct finish *f)
{
	struct top t = {.point = f->mnt};
	size_t plen = strlen(HYD_FSNAME_PREFIX);
	char *text = NULL;

	if (base_mountinfo_read(&text) < 0)
		return 0;
	base_mountinfo_each(text, top_one, &t);
	free(text);
	if (!t.ferry || strncmp(t.source, HYD_FSNAME_PREFIX, plen) ||
	    strlen(t.source + plen) >= sizeof(f->cache))
		return 0;
	memcpy(f->cache, t.source + plen, strlen(t.source + plen) + 1);
	return 1;
}

/* Is DIR what MOUNTPOINT shows (the bind is made)? */
static int bound(const struct finish *f)
{
	struct stat a, b;

	return stat(f->mnt, &a) == 0 && stat(f->dir, &b) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Until DIR holds the generation served whole. 0 or -1 (said). */
static int wait_landed(struct finish *f, struct hyd_status *st)
{
	time_t t0 = time(NULL), said = 0;

	for (;;) {
		if (hyd_status_query(f->cache, st) < 0) {
			base_error("cannot read the mount's status cache=%s",
				   f->cache);
			return -1;
		}
		if (!st->into[0]) {
			base_error("%s was not mounted with --into DIR: "
				   "nothing to finish (ferry sync copies a "
				   "mount's tree)",
				   f->mnt);
			return -1;
		}
		snprintf(f->dir, sizeof(f->dir), "%s", st->into_dir);
		if (!strcmp(st->into, "landed") &&
		    st->into_generation == st->generation &&
		    st->state == HYD_STATE_COMPLETE)
			return 0;
		if (!st->pid) {
			base_error(
			    "no hydrator runs on the mount, and %s holds "
			    "generation %" PRIu64 " of %" PRIu64
			    ": mount it again with --into to go on",
			    f->dir, st->into_generation, st->generation);
			return -1;
		}
		if (f->timeout_s && time(NULL) - t0 >= f->timeout_s) {
			base_error("timed out: %s holds generation %" PRIu64
				   " of %" PRIu64 " (%s)",
				   f->dir, st->into_generation, st->generation,
				   st->into);
			return -1;
		}
		if (!f->quiet && time(NULL) - said >= SAY_EVERY_S) {
			said = time(NULL);
			base_info("waiting: %s is %s generation %" PRIu64
				  " (backfill %s, %" PRIu64 " of %" PRIu64
				  " files)",
				  f->dir, st->into,
				  st->into_landing ? st->into_landing
						   : st->generation,
				  hyd_state_name(st->state), st->files_hydrated,
				  st->files_total);
		}
		sleep(POLL_S);
	}
}

/* DIR against the generation: 0 the same, 1 differs (said), -1 failed
 * (said). */
static int check(const struct finish *f)
{
	char catpath[PATH_MAX];
	uint64_t diffs = 0, checked = 0;
	int r;

	if (f->verify) {
		r = hyd_cache_catalog_newest(f->cache, catpath, sizeof(catpath),
					     NULL);
		if (r == 0)
			r = hyd_verify_tree(f->dir, catpath, &checked);
		if (r >= 0)
			diffs = (uint64_t)r;
	} else {
		r = hyd_into_check(f->cache, f->dir, &diffs);
	}
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot check dir=%s", f->dir);
		return -1;
	}
	if (diffs) {
		base_warn("%s differs from the mount's generation in %" PRIu64
			  " entr%s (named above)",
			  f->dir, diffs, diffs == 1 ? "y" : "ies");
		return 1;
	}
	return 0;
}

/* DIR differs: the mount lands the generation again (once), then DIR is
 * checked again. 0 the same now, -1 not (said). */
static int reland(struct finish *f, struct hyd_status *st)
{
	char p[PATH_MAX + 32];
	int i, r;

	snprintf(p, sizeof(p), "%s/" HYD_INTO_RELAND, f->cache);
	if (base_file_write_atomic(p, "", 0, 0644) < 0) {
		base_error("cannot write path=%s", p);
		return -1;
	}
	if (!f->quiet)
		base_info("the mount writes the generation into %s again",
			  f->dir);
	for (i = 0; access(p, F_OK) == 0; i++) {
		if (f->timeout_s && i >= f->timeout_s) {
			base_error("timed out waiting for the mount to write "
				   "%s again",
				   f->dir);
			return -1;
		}
		if (hyd_status_query(f->cache, st) < 0 || !st->pid) {
			base_error("the hydrator stopped before writing %s "
				   "again",
				   f->dir);
			return -1;
		}
		sleep(POLL_S);
	}
	r = wait_landed(f, st);
	if (r == 0)
		r = check(f);
	if (r == 0)
		return 0;
	if (r > 0)
		base_error("%s still differs from the mount's generation: not "
			   "finished",
			   f->dir);
	return -1;
}

static int detach(const struct finish *f)
{
	pid_t pid;
	int status;

	if (geteuid() == 0) {
		if (umount2(f->mnt, MNT_DETACH) == 0)
			return 0;
		base_log_err(BASE_LOG_ERROR, -errno, "cannot detach mnt=%s",
			     f->mnt);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", "-z", f->mnt,
		       (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		base_error("fusermount3 -u -z %s failed", f->mnt);
		return -1;
	}
	return 0;
}

static int bind_dir(const struct finish *f)
{
	if (geteuid() != 0) {
		base_error("the mount is detached; binding DIR needs root: "
			   "mount --bind %s %s",
			   f->dir, f->mnt);
		return -1;
	}
	if (mount(f->dir, f->mnt, NULL, MS_BIND | MS_REC, NULL) < 0) {
		base_log_err(BASE_LOG_ERROR, -errno,
			     "cannot bind dir=%s mnt=%s", f->dir, f->mnt);
		return -1;
	}
	return 0;
}

static int parse(int argc, char **argv, struct finish *f)
{
	enum { OPT_VERIFY = 256, OPT_TIMEOUT };
	static const struct option longopts[] = {
	    {"verify", no_argument, NULL, OPT_VERIFY},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int ch;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_VERIFY:
			f->verify = 1;
			break;
		case OPT_TIMEOUT:
			if (base_opt_long("--timeout", optarg, 1, 30L * 86400,
					  &f->timeout_s) < 0)
				return FERRY_EXIT_USAGE;
			break;
		case 'q':
			f->quiet = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			base_opt_error(ch, argv);
			return FERRY_EXIT_USAGE;
		}
	}
	if (argc - optind != 1) {
		base_error("expected one MOUNTPOINT (see --help)");
		return FERRY_EXIT_USAGE;
	}
	if (!realpath(argv[optind], f->mnt)) {
		base_log_err(BASE_LOG_ERROR, -errno,
			     "no such mountpoint path=%s", argv[optind]);
		return 1;
	}
	return -1;
}

int ferry_cmd_finish(int argc, char **argv)
{
	struct finish f;
	struct hyd_status st;
	int r, live;

	memset(&f, 0, sizeof(f));
	base_log_init("ferry finish", BASE_LOG_INFO);
	r = parse(argc, argv, &f);
	if (r >= 0)
		return r;
	if (f.quiet)
		base_log_init("ferry finish", BASE_LOG_ERROR);
	note_path(&f);
	live = ferry_mounted(&f);
	if (!live && !note_read(&f)) {
		base_error("%s is not a ferry mount, and no finish of it was "
			   "begun",
			   f.mnt);
		return 1;
	}
	if (!live && bound(&f)) {
		if (!f.quiet)
			printf("%s is already finished: %s is there\n", f.mnt,
			       f.dir);
		return 0;
	}
	if (live && wait_landed(&f, &st) < 0)
		return 1;
	r = check(&f);
	/* written over since it landed: landed again while mounted */
	if (r > 0 && live)
		r = reland(&f, &st);
	if (r != 0) {
		if (r > 0)
			base_error("%s differs from the generation it was to "
				   "hold, and the mount is gone: mount it with "
				   "--into again",
				   f.dir);
		return 1;
	}
	if (live) {
		char flag[PATH_MAX + 32], text[64];
		int n = snprintf(text, sizeof(text), "generation=%" PRIu64 "\n",
				 st.generation);

		/* the hydrator drops its store when it exits */
		snprintf(flag, sizeof(flag), "%s/" HYD_INTO_FINISHED, f.cache);
		if (base_file_write_atomic(flag, text, (size_t)n, 0644) < 0) {
			base_error("cannot write path=%s", flag);
			return 1;
		}
		if (note_write(&f) < 0) {
			base_error("cannot write the note of this finish "
				   "path=%s",
				   f.note);
			return 1;
		}
		if (detach(&f) < 0)
			return 1;
		/* tests: a finish killed between the detach and the bind */
		if (getenv("FERRY_TEST_FINISH_STOP"))
			return 1;
	}
	if (bind_dir(&f) < 0)
		return 1;
	/* the note stays: a finish run again says it is done */
	if (!f.quiet)
		printf("finished: %s is at %s; the hydrator serves the files "
		       "still open on the old mount and exits when the last is "
		       "closed, then its cache %s can go\n",
		       f.dir, f.mnt, f.cache);
	return 0;
}
