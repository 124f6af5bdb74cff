/*
 * catalog/cat_mwire.c — the manifests wire format, encoder side (the
 * replicator builds bodies with it; cat_overlay.c parses them). All
 * integers little-endian; docs/protocol.md, "Manifests", is the reference:
 *   head:   "FERRYMN1", u64 generation, u64 first ino, u64 last ino,
 *           u32 records
 *   record: u64 ino, u64 size, u32 chunks (or a marker), then that many
 *           entries of u32 len and the 32-byte SHA-256 id
 * Offsets are implied: a file's chunks follow each other from 0.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"

void cat_buf_fini(struct cat_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static int buf_room(struct cat_buf *b, size_t add)
{
	size_t nc;
	uint8_t *np;

	if (add <= b->cap - b->n)
		return 0;
	if (add > SIZE_MAX / 2 - b->n)
		return -ENOMEM;
	nc = b->cap ? b->cap : 4096;
	while (nc - b->n < add)
		nc *= 2;
	np = realloc(b->p, nc);
	if (!np)
		return -ENOMEM;
	b->p = np;
	b->cap = nc;
	return 0;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int cat_mwire_begin(struct cat_buf *b, uint64_t gen, uint64_t first,
		    uint64_t last)
{
	int r;

	b->n = 0;
	r = buf_room(b, CAT_MWIRE_HEAD);
	if (r)
		return r;
	memcpy(b->p, CAT_MWIRE_MAGIC, 8);
	put_le(b->p + 8, gen, 8);
	put_le(b->p + 16, first, 8);
	put_le(b->p + 24, last, 8);
	put_le(b->p + 32, 0, 4);
	b->n = CAT_MWIRE_HEAD;
	return 0;
}

int cat_mwire_add(struct cat_buf *b, uint64_t ino, uint64_t size,
		  uint32_t count, const struct cat_chunk *v)
{
	size_t entries = count > CAT_MWIRE_COUNT_MAX ? 0 : count;
	uint8_t *p;
	uint32_t nrec;
	int r;

	if (b->n < CAT_MWIRE_HEAD || (entries && !v))
		return -EINVAL;
	if (entries > (SIZE_MAX - CAT_MWIRE_REC) / CAT_MWIRE_ENTRY)
		return -ENOMEM;
	r = buf_room(b, CAT_MWIRE_REC + entries * CAT_MWIRE_ENTRY);
	if (r)
		return r;
	p = b->p + b->n;
	put_le(p, ino, 8);
	put_le(p + 8, size, 8);
	put_le(p + 16, count, 4);
	p += CAT_MWIRE_REC;
	for (size_t i = 0; i < entries; i++) {
		put_le(p, v[i].len, 4);
		memcpy(p + 4, v[i].id.b, CHUNK_ID_LEN);
		p += CAT_MWIRE_ENTRY;
	}
	b->n = (size_t)(p - b->p);
	nrec = (uint32_t)b->p[32] | (uint32_t)b->p[33] << 8 |
	       (uint32_t)b->p[34] << 16 | (uint32_t)b->p[35] << 24;
	put_le(b->p + 32, nrec + 1, 4);
	return 0;
}
