/*
 * tests/fuzz/fuzz_model.c — the model header parser (hydrator/trace/
 * hyd_trace_model.c, hyd_model_parse) on arbitrary bytes, taken as a
 * whole file (its size is the input's length).
 *
 * Properties (a violation aborts):
 *   - a refusal is -ENOTSUP, -EBADMSG or -ENOMEM and leaves the result
 *     empty; -EAGAIN cannot happen with the whole file given;
 *   - an accepted header has a kind, header <= size, at most
 *     HYD_MODEL_TENSORS_MAX ranges, sorted by offset, not overlapping,
 *     each non-empty and within [header, size];
 *   - the header bytes alone (a copy of exactly header bytes, so ASan
 *     sees a read past them) give the same answer;
 *   - reading as the hydrator does (hydrator/backfill/
 *     hyd_backfill_model.c) converges to the same answer: from half the
 *     input (at least 8 bytes), every -EAGAIN asks for more than it was
 *     given and at most HYD_MODEL_HEAD_MAX, and the last answer is the
 *     one for the whole input.
 * Verdict (fuzz_verdict.h): accepted when hyd_model_parse of the whole
 * input returns 0.
 *
 * Corpus (tests/fuzz/corpus/model): written once by a throwaway python3
 * script (struct.pack): ok_* are a safetensors file with __metadata__,
 * tensors out of order, a zero-length one and padding; one whose header
 * is "{}"; GGUF v3 with every value type, arrays of strings and of arrays,
 * general.alignment 64 and two tensors at one offset; GGUF v2 with the
 * default alignment. bad_* break one rule each: safetensors with
 * overlapping tensors, an end past the file, a duplicate key, N past the
 * file, a header that is not an object; GGUF version 1, an unknown
 * value type, arrays nested three deep, nine dimensions, alignment 48, a
 * tensor offset past the file, a header cut short; random bytes; empty.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/trace/hyd_trace.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort unless a refusal r left m empty. */
static void check_refused(int r, const struct hyd_model *m)
{
	if (r != -ENOTSUP && r != -EBADMSG && r != -ENOMEM && r != -EAGAIN)
		abort();
	if (m->kind != HYD_MODEL_NONE || m->header || m->ranges || m->n ||
	    m->cap)
		abort();
	if (r != -EAGAIN && m->need)
		abort();
}

/* Abort unless an accepted m of a size-byte file keeps the bounds. */
static void check_bounds(const struct hyd_model *m, uint64_t size)
{
	size_t i;

	if (m->kind != HYD_MODEL_SAFETENSORS && m->kind != HYD_MODEL_GGUF)
		abort();
	if (m->header > size || m->n > HYD_MODEL_TENSORS_MAX || m->n > m->cap ||
	    (m->n && !m->ranges))
		abort();
	for (i = 0; i < m->n; i++) {
		const struct hyd_model_range *g = &m->ranges[i];

		if (g->len == 0 || g->off < m->header || g->off > size ||
		    g->len > size - g->off)
			abort();
		if (i && g->off < m->ranges[i - 1].off + m->ranges[i - 1].len)
			abort();
	}
}

static void check_same(const struct hyd_model *a, const struct hyd_model *b)
{
	if (a->kind != b->kind || a->header != b->header || a->n != b->n)
		abort();
	if (a->n && memcmp(a->ranges, b->ranges, a->n * sizeof(*a->ranges)))
		abort();
}

/* Parse the first len bytes of data, copied to a buffer of exactly len
 * bytes, as a file of size bytes. */
static int parse_prefix(const uint8_t *data, size_t len, uint64_t size,
			struct hyd_model *ret)
{
	uint8_t *p = malloc(len ? len : 1);
	int r;

	if (!p)
		abort();
	memcpy(p, data, len);
	r = hyd_model_parse(p, len, size, ret);
	free(p);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hyd_model m, again;
	size_t cur;
	int r, r2;

	r = hyd_model_parse(data, size, size, &m);
	fuzz_report(r == 0);
	if (r != 0) {
		if (r == -EAGAIN)
			abort();
		check_refused(r, &m);
	} else {
		check_bounds(&m, size);
		if (parse_prefix(data, (size_t)m.header, size, &again) != 0)
			abort();
		check_same(&m, &again);
		hyd_model_free(&again);
	}

	/* As the hydrator reads it: from half the file, then what the
	 * parser asks for. */
	cur = size / 2 < 8 ? size : size / 2;
	for (;;) {
		r2 = parse_prefix(data, cur, size, &again);
		if (r2 != -EAGAIN)
			break;
		check_refused(r2, &again);
		if (again.need <= cur || again.need > HYD_MODEL_HEAD_MAX ||
		    again.need > size)
			abort();
		cur = again.need;
	}
	if (r2 != r)
		abort();
	if (r2 == 0) {
		check_same(&m, &again);
		hyd_model_free(&again);
	} else {
		check_refused(r2, &again);
	}
	hyd_model_free(&m);
	return 0;
}
