/*
 * tests/fuzz_driver/fuzz_replay.c — run a fuzz target over a corpus
 * without libFuzzer.
 *
 * Linked with one tests/fuzz/fuzz_*.c, it feeds every file named on the
 * command line (directories: their files, sorted, down to a few levels) to
 * LLVMFuzzerTestOneInput. make check uses it to replay the committed corpus
 * with the normal compiler and under ASan/UBSan; a target reports a bug by
 * aborting, which fails the run.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

static int replay_file(const char *path, size_t *count)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r;

	r = read_input(path, &buf, &len);
	if (r < 0) {
		fprintf(stderr, "fuzz_replay: path=%s error=%s\n", path,
			strerror(-r));
		return r;
	}
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	(*count)++;
	return 0;
}

static int replay_path(const char *path, int depth, size_t *count)
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
		return replay_file(path, count);
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
		/* A README or similar next to the corpus is an input like
		 * any other: targets must accept arbitrary bytes. */
		if (replay_path(child, depth + 1, count) < 0)
			r = -EIO;
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

int main(int argc, char **argv)
{
	size_t count = 0;
	int failed = 0;

	if (argc < 2) {
		fprintf(stderr,
			"usage: %s FILE|DIR...\n"
			"Run LLVMFuzzerTestOneInput on each file "
			"(directories: every file inside).\n",
			argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], 0, &count) < 0)
			failed = 1;
	if (failed) {
		fprintf(stderr,
			"fuzz_replay: %zu inputs ok, some paths "
			"could not be read\n",
			count);
		return 1;
	}
	if (count == 0) {
		/* An empty or mistyped corpus path must not pass silently. */
		fprintf(stderr, "fuzz_replay: no inputs found\n");
		return 1;
	}
	printf("fuzz_replay: %zu inputs ok\n", count);
	return 0;
}
