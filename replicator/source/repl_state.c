/*
 * replicator/source/repl_state.c — the layout of a namespace's state
 * directory (repl_source.h): where each generation's catalog, compressed
 * catalog, delta, signature and source index live, and HEAD, the one
 * file that names the current generation.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "replicator/source/repl_source.h"

char *repl_catalog_path(const char *state_dir, uint64_t gen)
{
	return base_path_fmt("%s/catalog/%" PRIu64 ".db", state_dir, gen);
}

char *repl_catalog_zst_path(const char *state_dir, uint64_t gen)
{
	return base_path_fmt("%s/catalog/%" PRIu64 ".db.zst", state_dir, gen);
}

char *repl_delta_zst_path(const char *state_dir, uint64_t from, uint64_t to)
{
	return base_path_fmt("%s/catalog/%" PRIu64 "-%" PRIu64 ".delta.zst",
			     state_dir, from, to);
}

char *repl_srcindex_path(const char *state_dir, uint64_t gen)
{
	return base_path_fmt("%s/source/%" PRIu64 ".db", state_dir, gen);
}

char *repl_sig_path(const char *state_dir, uint64_t gen)
{
	return base_path_fmt("%s/catalog/%" PRIu64 ".db.sig", state_dir, gen);
}

int repl_head_read(const char *state_dir, uint64_t *ret_gen)
{
	char *path = base_path_fmt("%s/HEAD", state_dir);
	char buf[32];
	uint64_t v;
	size_t len;
	int r;

	*ret_gen = 0;
	if (!path)
		return -ENOMEM;
	r = base_file_read_small(path, buf, sizeof(buf), &len);
	free(path);
	if (r == -ENOENT)
		return 0;
	if (r == -EFBIG)
		return -EBADMSG; /* longer than anything we write */
	if (r < 0)
		return r;
	if (len < 2 || buf[len - 1] != '\n' || buf[0] < '1' || buf[0] > '9')
		return -EBADMSG;
	buf[len - 1] = '\0';
	/* UINT64_MAX would leave no next generation */
	if (base_parse_u64(buf, 1, UINT64_MAX - 1, &v) < 0)
		return -EBADMSG;
	*ret_gen = v;
	return 0;
}

int repl_head_write(const char *state_dir, uint64_t gen)
{
	char *path = base_path_fmt("%s/HEAD", state_dir);
	char buf[32];
	int n, r;

	if (!path)
		return -ENOMEM;
	n = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", gen);
	r = base_file_write_atomic(path, buf, (size_t)n, 0644);
	free(path);
	return r;
}
