/*
 * fuzz_catalog.c — a catalog file is untrusted input on the destination.
 * Write the input to a temp file, open it with cat_reader_open, and walk
 * everything the reader offers: getattr, readdir, lookup, readlink, xattrs,
 * chunk manifests. Nothing may crash, and whatever is handed out must obey
 * the reader's contract (safe names, bounded sizes, contiguous chunks).
 * Before the walk, the tree rule every consumer applies once
 * (cat_check_tree): it must end (a cycle cannot make it loop), and a
 * refusal must come with one line saying why.
 * Verdict (fuzz_verdict.h): accepted when cat_reader_open takes the file,
 * cat_check_tree passes it, and no call of the walk finds it corrupt
 * (-EBADMSG, or a name readdir lists that lookup does not find as the
 * same inode). The walk runs on a refused tree too (two levels, bounded),
 * for the reader's sake.
 *
 * Corpus (tests/fuzz/corpus/catalog): besides ok_small.db and its
 * damaged copies, each bad_tree_* is ok_small.db (root: dir=4, file=2,
 * link=3; dir 4: hard=2) with rows added by the sqlite3 CLI, one shape
 * the tree rule refuses: root_twice (root lists a -> 1 and b -> 1),
 * ancestor (dir 4 gets sub=5, and 5 gets up -> 4), dir_link (root gets
 * dir2 -> 4), dangling (dir 4 gets ghost -> 99, no such inode), island
 * (directories 5 and 6 naming each other, not reached from the root),
 * under_file (an entry under regular file 2). ok_tree_file_links adds
 * two more names of file 2; ok_tree_moved puts dir 4 under a new dir 5
 * (a parent numbered above its child, as after a move).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Set when any reader call of the walk said the file is corrupt
 * (-EBADMSG): SQLite reads pages lazily, so a damaged page is found only
 * when a query reaches it, long after cat_reader_open took the file. */
static int corrupt;

static int note(int rc)
{
	if (rc == -EBADMSG)
		corrupt = 1;
	return rc;
}

struct walk {
	cat_reader *r;
	uint64_t inos[64];
	uint8_t names[64][CAT_NAME_MAX];
	size_t lens[64];
	size_t n;
};

static int collect(void *ctx, const void *name, size_t len,
		   const struct cat_inode *in, uint64_t pos)
{
	struct walk *w = ctx;
	(void)pos;
	if (cat_name_check(name, len) != 0)
		abort(); /* the reader must never hand out an unsafe name */
	if (in->size > CAT_SIZE_MAX)
		abort();
	if (w->n < sizeof(w->inos) / sizeof(w->inos[0])) {
		memcpy(w->names[w->n], name, len);
		w->lens[w->n] = len;
		w->inos[w->n++] = in->ino;
	}
	return 0;
}

/* Each name readdir listed in dir, looked up: the same inode, or the
 * table and its name index disagree (corrupt). Not from inside readdir's
 * callback, which holds the reader. */
static void check_lookups(cat_reader *r, uint64_t dir, const struct walk *w)
{
	struct cat_inode in;

	for (size_t i = 0; i < w->n; i++)
		if (cat_lookup(r, dir, w->names[i], w->lens[i], &in) != 0 ||
		    in.ino != w->inos[i])
			corrupt = 1;
}

static void poke_inode(cat_reader *r, const struct cat_meta *m, uint64_t ino)
{
	struct cat_inode in;
	char buf[CAT_TARGET_MAX + 1];
	size_t len = 0;
	struct cat_chunk ch[8];
	size_t n = 0;

	if (note(cat_getattr(r, ino, &in)) != 0)
		return;
	(void)note(cat_readlink(r, ino, buf, sizeof(buf), &len));
	if (note(cat_listxattr(r, ino, buf, sizeof(buf), &len)) == 0 &&
	    len > 0) {
		char val[256];
		size_t vlen;
		const char *p = buf;
		while (p < buf + len) {
			size_t nl = strnlen(p, (size_t)(buf + len - p));
			(void)note(cat_getxattr(r, ino, p, nl, val, sizeof(val),
						&vlen));
			p += nl + 1;
		}
	}
	if (in.kind == CAT_REG &&
	    note(cat_chunks_range(r, ino, 0, in.size, ch, 8, &n)) == 0) {
		for (size_t i = 0; i < n; i++) {
			if (ch[i].len == 0 || ch[i].len > m->params.max)
				abort();
			if (i > 0 && ch[i].off != ch[i - 1].off + ch[i - 1].len)
				abort();
		}
	}
}

static int count_chunk(void *ctx, uint64_t ino, const struct cat_chunk *c)
{
	(void)ino;
	(void)c;
	return ++*(int *)ctx >= 1000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[] = "/tmp/ferry-fuzz-catalog.XXXXXX";
	int fd = mkstemp(path);
	cat_reader *r = NULL;
	struct cat_meta m;
	struct walk *w = calloc(2, sizeof(*w)), *sub = w + 1;
	int chunks = 0, opened;

	if (fd < 0 || !w)
		abort();
	if (write(fd, data, size) != (ssize_t)size)
		abort();
	close(fd);
	corrupt = 0;
	opened = cat_reader_open(path, &r) == 0;
	if (opened) {
		char why[256] = "";
		int t = cat_check_tree(r, why, sizeof(why));

		/* a refusal says why, in one line */
		if (t == -EBADMSG && (!why[0] || strchr(why, '\n')))
			abort();
		if (t != 0)
			corrupt = 1;
		cat_reader_meta(r, &m);
		if (chunk_params_check(&m.params) != 0)
			abort();
		w->r = r;
		poke_inode(r, &m, CAT_ROOT_INO);
		(void)note(cat_readdir(r, CAT_ROOT_INO, 0, collect, w));
		check_lookups(r, CAT_ROOT_INO, w);
		for (size_t i = 0; i < w->n; i++) {
			sub->r = r;
			sub->n = 0;
			poke_inode(r, &m, w->inos[i]);
			(void)note(cat_readdir(r, w->inos[i], 0, collect, sub));
			check_lookups(r, w->inos[i], sub);
			for (size_t k = 0; k < sub->n; k++)
				poke_inode(r, &m, sub->inos[k]);
		}
		(void)note(cat_chunks_each(r, count_chunk, &chunks));
		cat_reader_close(r);
	}
	fuzz_report(opened && !corrupt);
	free(w);
	unlink(path);
	return 0;
}
