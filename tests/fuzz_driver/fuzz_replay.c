/*
 * tests/fuzz_driver/fuzz_replay.c — run a fuzz target over a corpus
 * without libFuzzer, and check each input's verdict.
 *
 * Linked with one tests/fuzz/fuzz_*.c, it feeds every file named on the
 * command line (directories: their files, sorted, down to a few levels) to
 * LLVMFuzzerTestOneInput. make check uses it to replay the committed corpus
 * with the normal compiler and under ASan/UBSan; a target reports a bug by
 * aborting, which fails the run.
 *
 * Verdicts: the target says once per input whether it accepted it
 * (fuzz_report, tests/fuzz/fuzz_verdict.h), and the input's file name says
 * what it must say: a name starting with "ok_" must be accepted, one
 * starting with "bad_" refused. A file named neither way fails the replay
 * (every committed input states its verdict; rename a libFuzzer crash-*
 * or hash-named file to ok_* or bad_* before it joins a corpus), and so
 * does an input the target gave no verdict for, or more than one. Dotfiles
 * are skipped. Every input is replayed and every mismatch named, one line
 * each, before the exit status: 0 all as named, 1 otherwise (also when a
 * path cannot be read or no input was found), 2 bad usage.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the target said about the input being replayed: -1 nothing yet,
 * else the last verdict; calls counts them (one is right). */
static int got_verdict = -1;
static unsigned verdict_calls;

/* The replay's definition of the weak hook in fuzz_verdict.h. */
void fuzz_verdict(int accepted)
{
	got_verdict = accepted ? 1 : 0;
	verdict_calls++;
}

struct tally {
	size_t inputs;	 /* replayed */
	size_t accepted; /* ok_* accepted, as named */
	size_t refused;	 /* bad_* refused, as named */
	size_t wrong;	 /* verdict mismatch, none, several, or unnamed */
};

/* 1 for ok_*, 0 for bad_*, -1 for any other name (of path's last
 * component). */
static int want_verdict(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (!strncmp(base, "ok_", 3))
		return 1;
	if (!strncmp(base, "bad_", 4))
		return 0;
	return -1;
}

/* Directory levels followed below a path given on the command line. */
#define REPLAY_MAX_DEPTH 4
/* Inputs bigger than this are not fuzz inputs; refuse rather than OOM. */
#define REPLAY_MAX_INPUT (64u << 20)

/* Read path into a heap buffer of exactly its size, so ASan flags any
 * read past the end. Returns 0 or -errno. */
static int read_input(const char *path, uint8_t **ret_buf, size_t *ret_len)
{
	uint8_t *buf = NULL;
	size_t len = 0, got;
	struct stat st;
	FILE *f;
	int r = 0;

	f = fopen(path, "rb");
	if (!f)
		return -errno;
	if (fstat(fileno(f), &st) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		goto out;
	}
	if ((uint64_t)st.st_size > REPLAY_MAX_INPUT) {
		r = -EFBIG;
		goto out;
	}
	len = (size_t)st.st_size;
	/* malloc(0) may return NULL; keep one spare byte but pass len. */
	buf = malloc(len ? len : 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	got = fread(buf, 1, len, f);
	if (got != len || ferror(f)) {
		r = -EIO;
		goto out;
	}
	*ret_buf = buf;
	*ret_len = len;
	buf = NULL;
out:
	free(buf);
	fclose(f);
	return r;
}

static int replay_file(const char *path, struct tally *t)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r, want = want_verdict(path);

	r = read_input(path, &buf, &len);
	if (r < 0) {
		fprintf(stderr, "fuzz_replay: path=%s error=%s\n", path,
			strerror(-r));
		return r;
	}
	got_verdict = -1;
	verdict_calls = 0;
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	t->inputs++;
	if (verdict_calls != 1) {
		fprintf(stderr,
			"fuzz_replay: path=%s error=the target gave %u "
			"verdicts, not one\n",
			path, verdict_calls);
		t->wrong++;
	} else if (want < 0) {
		fprintf(stderr,
			"fuzz_replay: path=%s error=the name starts with "
			"neither ok_ nor bad_ (target said %s)\n",
			path, got_verdict ? "accepted" : "refused");
		t->wrong++;
	} else if (got_verdict != want) {
		fprintf(stderr,
			"fuzz_replay: path=%s error=%s input %s by the "
			"target\n",
			path, want ? "an ok_" : "a bad_",
			got_verdict ? "accepted" : "refused");
		t->wrong++;
	} else if (want) {
		t->accepted++;
	} else {
		t->refused++;
	}
	return 0;
}

static int replay_path(const char *path, int depth, struct tally *t)
{
	struct dirent **names = NULL;
	struct stat st;
	int n, r = 0;

	if (stat(path, &st) < 0) {
		r = -errno;
		fprintf(stderr, "fuzz_replay: path=%s error=%s\n", path,
			strerror(-r));
		return r;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path, t);
	if (depth > REPLAY_MAX_DEPTH)
		return 0;

	/* Sorted, so a failing run names the same input every time. */
	n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		r = -errno;
		fprintf(stderr, "fuzz_replay: path=%s error=%s\n", path,
			strerror(-r));
		return r;
	}
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;
		char child[4096];
		int w;

		/* Skip ., .. and dotfiles (editor and VCS droppings). */
		if (name[0] == '.')
			continue;
		w = snprintf(child, sizeof(child), "%s/%s", path, name);
		if (w < 0 || (size_t)w >= sizeof(child)) {
			fprintf(stderr, "fuzz_replay: path=%s/%s error=%s\n",
				path, name, strerror(ENAMETOOLONG));
			r = -ENAMETOOLONG;
			continue;
		}
		/* A README or similar in a corpus directory is an input
		 * like any other, so without ok_ or bad_ it fails. */
		if (replay_path(child, depth + 1, t) < 0)
			r = -EIO;
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

int main(int argc, char **argv)
{
	struct tally t = {0};
	int failed = 0;

	if (argc < 2) {
		fprintf(stderr,
			"usage: %s FILE|DIR...\n"
			"Run LLVMFuzzerTestOneInput on each file "
			"(directories: every file inside); ok_* must be\n"
			"accepted, bad_* refused, other names fail.\n",
			argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], 0, &t) < 0)
			failed = 1;
	if (failed)
		fprintf(stderr, "fuzz_replay: some paths could not be read\n");
	if (t.inputs == 0) {
		/* An empty or mistyped corpus path must not pass silently. */
		fprintf(stderr, "fuzz_replay: no inputs found\n");
		failed = 1;
	}
	if (t.wrong) {
		fprintf(stderr,
			"fuzz_replay: %zu of %zu inputs not as their names "
			"say\n",
			t.wrong, t.inputs);
		failed = 1;
	}
	if (failed)
		return 1;
	printf("fuzz_replay: %zu inputs ok: %zu ok_ accepted, %zu bad_ "
	       "refused\n",
	       t.inputs, t.accepted, t.refused);
	return 0;
}
