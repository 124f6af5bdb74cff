/*
 * fuzz_catalog.c — a catalog file is untrusted input on the destination.
 * Write the input to a temp file, open it with cat_reader_open, and walk
 * everything the reader offers: getattr, readdir, lookup, readlink, xattrs,
 * chunk manifests. Nothing may crash, and whatever is handed out must obey
 * the reader's contract (safe names, bounded sizes, contiguous chunks).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/catalog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct walk {
	cat_reader *r;
	uint64_t inos[64];
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
	if (w->n < sizeof(w->inos) / sizeof(w->inos[0]))
		w->inos[w->n++] = in->ino;
	return 0;
}

static void poke_inode(cat_reader *r, const struct cat_meta *m, uint64_t ino)
{
	struct cat_inode in;
	char buf[CAT_TARGET_MAX + 1];
	size_t len = 0;
	struct cat_chunk ch[8];
	size_t n = 0;

	if (cat_getattr(r, ino, &in) != 0)
		return;
	(void)cat_readlink(r, ino, buf, sizeof(buf), &len);
	if (cat_listxattr(r, ino, buf, sizeof(buf), &len) == 0 && len > 0) {
		char val[256];
		size_t vlen;
		const char *p = buf;
		while (p < buf + len) {
			size_t nl = strnlen(p, (size_t)(buf + len - p));
			(void)cat_getxattr(r, ino, p, nl, val, sizeof(val),
					   &vlen);
			p += nl + 1;
		}
	}
	if (in.kind == CAT_REG &&
	    cat_chunks_range(r, ino, 0, in.size, ch, 8, &n) == 0) {
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
	struct walk w = {0};
	int chunks = 0;

	if (fd < 0)
		abort();
	if (write(fd, data, size) != (ssize_t)size)
		abort();
	close(fd);
	if (cat_reader_open(path, &r) == 0) {
		cat_reader_meta(r, &m);
		if (chunk_params_check(&m.params) != 0)
			abort();
		w.r = r;
		poke_inode(r, &m, CAT_ROOT_INO);
		(void)cat_readdir(r, CAT_ROOT_INO, 0, collect, &w);
		for (size_t i = 0; i < w.n; i++) {
			struct walk sub = {.r = r};
			poke_inode(r, &m, w.inos[i]);
			(void)cat_readdir(r, w.inos[i], 0, collect, &sub);
			for (size_t k = 0; k < sub.n; k++)
				poke_inode(r, &m, sub.inos[k]);
		}
		(void)cat_chunks_each(r, count_chunk, &chunks);
		cat_reader_close(r);
	}
	unlink(path);
	return 0;
}
