/*
 * hydrator/sync/hyd_sync_seed.c — the seeder of one `ferry sync` run:
 * DEST's own files (rsync's basis files: an older copy in DEST moves only
 * what changed) and --seed, --link-dest, --copy-dest, --compare-dest
 * directories, a relative one taken from DEST as rsync takes it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hydrator/sync/hyd_sync_priv.h"

/* Does DEST exist with at least one entry? */
static int dest_has_entries(const char *dest)
{
	DIR *d = opendir(dest);
	struct dirent *de;
	int any = 0;

	if (!d)
		return 0;
	while (!any && (de = readdir(d)) != NULL)
		any = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return any;
}

/* DEST/DIR with "." and ".." taken lexically, for a DEST not made yet
 * (the kernel cannot walk through it): "new/../old" is "old". In place;
 * a ".." above the start stays. */
static void lexical(char *p)
{
	char *out = p, *in = p, *seg;
	size_t n, keep = 0; /* ".." segments at the start that stay */
	int abs = p[0] == '/';

	if (abs)
		*out++ = *in++;
	while (*in) {
		while (*in == '/')
			in++;
		seg = in;
		while (*in && *in != '/')
			in++;
		n = (size_t)(in - seg);
		if (n == 0 || (n == 1 && seg[0] == '.'))
			continue;
		if (n == 2 && seg[0] == '.' && seg[1] == '.' &&
		    out > p + abs + keep) {
			/* drop the last segment written */
			out--;
			while (out > p + abs && out[-1] != '/')
				out--;
			continue;
		}
		if (out > p + abs && out[-1] != '/')
			*out++ = '/';
		memmove(out, seg, n);
		out += n;
		if (n == 2 && seg[0] == '.' && seg[1] == '.')
			keep = (size_t)(out - (p + abs));
	}
	if (out > p + abs && out[-1] == '/')
		out--;
	if (out == p)
		*out++ = '.';
	*out = '\0';
}

int hyd_sync__seeds_open(const struct hyd_sync_opts *o, hyd_store *store,
			 const chunk_params *p, struct hyd_sync_seeds *ret)
{
	struct stat st;
	size_t i;
	int r;

	memset(ret, 0, sizeof(*ret));
	if (o->dry_run || (!o->nseeds && !dest_has_entries(o->dest)))
		return 0;
	if (o->nseeds) {
		ret->dirs = calloc(o->nseeds, sizeof(*ret->dirs));
		ret->paths = calloc(o->nseeds, sizeof(*ret->paths));
		if (!ret->dirs || !ret->paths)
			goto nomem;
	}
	for (i = 0; i < o->nseeds; i++) {
		const char *d = o->seeds[i].path;
		size_t n = strlen(o->dest) + strlen(d) + 2;

		ret->paths[i] = malloc(n);
		if (!ret->paths[i])
			goto nomem;
		if (d[0] == '/') {
			snprintf(ret->paths[i], n, "%s", d);
		} else {
			snprintf(ret->paths[i], n, "%s/%s", o->dest, d);
			if (stat(o->dest, &st) < 0)
				lexical(ret->paths[i]);
		}
		ret->dirs[i].path = ret->paths[i];
		ret->dirs[i].how = o->seeds[i].how;
		ret->n++;
	}
	r = hyd_seeder_new(store, p, o->dest, ret->dirs, ret->n, &ret->sd);
	if (r < 0) {
		hyd_sync__seeds_close(ret);
		return r;
	}
	return 0;
nomem:
	hyd_sync__seeds_close(ret);
	return -ENOMEM;
}

void hyd_sync__seeds_close(struct hyd_sync_seeds *s)
{
	size_t i;

	hyd_seeder_free(s->sd);
	for (i = 0; s->paths && i < s->n; i++)
		free(s->paths[i]);
	free(s->paths);
	free(s->dirs);
	memset(s, 0, sizeof(*s));
}
