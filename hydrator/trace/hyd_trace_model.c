/*
 * hydrator/trace/hyd_trace_model.c — where a model file's tensors are,
 * from its header: safetensors and GGUF (docs/formats.md, "Model files").
 *
 * safetensors: an 8-byte little-endian length N, N bytes of JSON (an
 * object: tensor name -> {"dtype", "shape", "data_offsets": [BEGIN, END]},
 * and an optional "__metadata__"), then the data; a tensor's bytes are
 * [8 + N + BEGIN, 8 + N + END).
 *
 * GGUF (versions 2 and 3, little-endian): "GGUF", u32 version, u64
 * tensor count, u64 key/value count, the key/values (a string key, a u32
 * type, a value: 8- to 64-bit numbers, bool, string, or an array of one
 * type and a u64 count), the tensor infos (string name, u32 dimensions,
 * u64 each, u32 type, u64 offset), then the data from the next multiple of
 * general.alignment (default 32); a tensor's offset is relative to it.
 * Sizes are not stored (they follow from the type's block size): a
 * tensor's range runs to the next tensor's offset, the last to the end of
 * the file.
 *
 * Everything here is untrusted: every length is bounded by the bytes
 * given and the file's size; a header that does not parse is -EBADMSG,
 * never a guess.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hydrator/trace/hyd_trace.h"

#define ST_HEADER_MAX (100ull << 20) /* safetensors' own limit */
#define GGUF_ARRAY_DEPTH 2u
#define GGUF_ALIGN_DEFAULT 32u

void hyd_model_free(struct hyd_model *m)
{
	if (!m)
		return;
	free(m->ranges);
	memset(m, 0, sizeof(*m));
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static int add_range(struct hyd_model *m, uint64_t off, uint64_t len)
{
	struct hyd_model_range *nv;
	size_t cap;

	if (!len)
		return 0;
	if (m->n == m->cap) {
		cap = m->cap ? m->cap * 2 : 64;
		if (cap > HYD_MODEL_TENSORS_MAX)
			cap = HYD_MODEL_TENSORS_MAX;
		if (m->n >= cap)
			return -EBADMSG;
		nv = realloc(m->ranges, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		m->ranges = nv;
		m->cap = cap;
	}
	m->ranges[m->n].off = off;
	m->ranges[m->n].len = len;
	m->n++;
	return 0;
}

static int by_off(const void *a, const void *b)
{
	const struct hyd_model_range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* ---- safetensors ---- */

static int safetensors(const uint8_t *h, size_t len, uint64_t size,
		       struct hyd_model *m)
{
	uint64_t n = le64(h), data, b, e;
	json_error_t err;
	json_t *root, *v, *off;
	const char *key;
	int r = 0;

	if (n < 2 || n > ST_HEADER_MAX || n > size - 8)
		return -ENOTSUP;
	if (len > 8 && h[8] != '{')
		return -ENOTSUP;
	if (len < 8 + n) {
		m->need = 8 + n;
		return -EAGAIN;
	}
	data = 8 + n;
	root = json_loadb((const char *)h + 8, n, JSON_REJECT_DUPLICATES, &err);
	if (!root || !json_is_object(root)) {
		json_decref(root);
		return -EBADMSG;
	}
	m->kind = HYD_MODEL_SAFETENSORS;
	m->header = data;
	json_object_foreach(root, key, v)
	{
		if (!strcmp(key, "__metadata__"))
			continue;
		off = json_is_object(v) ? json_object_get(v, "data_offsets")
					: NULL;
		if (!json_is_array(off) || json_array_size(off) != 2 ||
		    !json_is_integer(json_array_get(off, 0)) ||
		    !json_is_integer(json_array_get(off, 1))) {
			r = -EBADMSG;
			break;
		}
		b = (uint64_t)json_integer_value(json_array_get(off, 0));
		e = (uint64_t)json_integer_value(json_array_get(off, 1));
		if (json_integer_value(json_array_get(off, 0)) < 0 ||
		    json_integer_value(json_array_get(off, 1)) < 0 || b > e ||
		    e > size - data) {
			r = -EBADMSG;
			break;
		}
		r = add_range(m, data + b, e - b);
		if (r < 0)
			break;
	}
	json_decref(root);
	return r;
}

/* ---- GGUF ---- */

struct rd {
	const uint8_t *p;
	size_t len, at;
	int short_; /* ran past the bytes given */
};

static int take(struct rd *d, size_t n, const uint8_t **ret)
{
	if (n > d->len - d->at) {
		d->short_ = 1;
		return -1;
	}
	*ret = d->p + d->at;
	d->at += n;
	return 0;
}

static int u32_(struct rd *d, uint32_t *v)
{
	const uint8_t *p;

	if (take(d, 4, &p) < 0)
		return -1;
	*v = le32(p);
	return 0;
}

static int u64_(struct rd *d, uint64_t *v)
{
	const uint8_t *p;

	if (take(d, 8, &p) < 0)
		return -1;
	*v = le64(p);
	return 0;
}

/* A string: u64 length, bytes (at most 64 KiB: no real key or name is
 * longer). The bytes are in [*ret, *ret + *ret_n). */
static int str_(struct rd *d, const uint8_t **ret, uint64_t *ret_n)
{
	if (u64_(d, ret_n) < 0)
		return -1;
	if (*ret_n > 65536)
		return -2;
	return take(d, (size_t)*ret_n, ret);
}

/* The size of a GGUF scalar type, 0 for string or array, -1 unknown. */
static int scalar_size(uint32_t t)
{
	static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

	return t < 13 ? sz[t] : -1;
}

enum { GGUF_T_UINT32 = 4, GGUF_T_STRING = 8, GGUF_T_ARRAY = 9 };

/* Skip a value of type t; -1 short, -2 malformed. */
static int skip_value(struct rd *d, uint32_t t, unsigned depth)
{
	const uint8_t *p;
	uint64_t n, i, sl;
	uint32_t et;
	int s = scalar_size(t), r;

	if (s > 0)
		return take(d, (size_t)s, &p);
	if (s < 0)
		return -2;
	if (t == GGUF_T_STRING)
		return str_(d, &p, &sl);
	if (depth >= GGUF_ARRAY_DEPTH)
		return -2;
	if (u32_(d, &et) < 0 || u64_(d, &n) < 0)
		return -1;
	s = scalar_size(et);
	if (s < 0)
		return -2;
	if (s > 0) {
		if (n > (d->len - d->at) / (uint64_t)s) {
			d->short_ = 1;
			return -1;
		}
		return take(d, (size_t)(n * (uint64_t)s), &p);
	}
	for (i = 0; i < n; i++) {
		r = skip_value(d, et, depth + 1);
		if (r < 0)
			return r;
	}
	return 0;
}

static int gguf(const uint8_t *h, size_t len, uint64_t size,
		struct hyd_model *m)
{
	struct rd d = {.p = h, .len = len, .at = 4};
	uint64_t nt, nkv, i, kl, nl, dims, dim, off, data;
	uint32_t version, t, nd, align = GGUF_ALIGN_DEFAULT, a;
	const uint8_t *k, *nm;
	uint64_t *offs = NULL;
	int r = -EBADMSG, rv;

	if (u32_(&d, &version) < 0 || u64_(&d, &nt) < 0 || u64_(&d, &nkv) < 0)
		goto short_;
	if (version < 2 || version > 3)
		return -ENOTSUP;
	if (nt > HYD_MODEL_TENSORS_MAX || nkv > (1u << 20))
		return -EBADMSG;
	for (i = 0; i < nkv; i++) {
		rv = str_(&d, &k, &kl);
		if (rv == 0)
			rv = u32_(&d, &t);
		if (rv == 0 && t == GGUF_T_UINT32 && kl == 17 &&
		    !memcmp(k, "general.alignment", 17)) {
			rv = u32_(&d, &a);
			if (rv == 0 && (a == 0 || (a & (a - 1)) || a > 65536))
				return -EBADMSG;
			if (rv == 0)
				align = a;
		} else if (rv == 0) {
			rv = skip_value(&d, t, 0);
		}
		if (rv == -2)
			return -EBADMSG;
		if (rv < 0)
			goto short_;
	}
	offs = malloc((nt ? nt : 1) * sizeof(*offs));
	if (!offs)
		return -ENOMEM;
	for (i = 0; i < nt; i++) {
		rv = str_(&d, &nm, &nl);
		if (rv == -2)
			goto out;
		if (rv < 0 || u32_(&d, &nd) < 0)
			goto short_;
		if (nd > 8)
			goto out;
		for (dims = 0; dims < nd; dims++)
			if (u64_(&d, &dim) < 0)
				goto short_;
		if (u32_(&d, &t) < 0 || u64_(&d, &off) < 0)
			goto short_;
		offs[i] = off;
	}
	data = ((uint64_t)d.at + align - 1) / align * align;
	if (data > size)
		goto out;
	m->kind = HYD_MODEL_GGUF;
	m->header = data;
	for (i = 0; i < nt; i++) {
		if (offs[i] > size - data) {
			r = -EBADMSG; /* r may be add_range's 0 by now */
			goto out;
		}
		r = add_range(m, data + offs[i], 1);
		if (r < 0)
			goto out;
	}
	r = 0;
	/* Each tensor runs to the next one's start (sorted below). */
	goto out;
short_:
	free(offs);
	/* Twice what was given, up to the file (a header is rarely more than
	 * a few MiB; HYD_MODEL_HEAD_MAX bounds what a caller reads). */
	m->need = len * 2 > size ? size : len * 2;
	return m->need > len ? -EAGAIN : -EBADMSG;
out:
	free(offs);
	return r;
}

int hyd_model_parse(const void *head, size_t len, uint64_t size,
		    struct hyd_model *ret)
{
	const uint8_t *h = head;
	uint64_t end;
	size_t i;
	int r;

	memset(ret, 0, sizeof(*ret));
	if (len > size)
		len = (size_t)size;
	if (len >= 4 && !memcmp(h, "GGUF", 4))
		r = gguf(h, len, size, ret);
	else if (len >= 8)
		r = safetensors(h, len, size, ret);
	else
		r = -ENOTSUP;
	if (r == -EAGAIN && ret->need > HYD_MODEL_HEAD_MAX)
		r = -EBADMSG; /* a header this big is not one we read */
	if (r < 0) {
		size_t need = ret->need;

		hyd_model_free(ret);
		ret->need = r == -EAGAIN ? need : 0;
		return r;
	}
	if (ret->n > 1) /* ranges is NULL when n is 0: not for qsort */
		qsort(ret->ranges, ret->n, sizeof(*ret->ranges), by_off);
	/* safetensors' tensors share no byte (its own loader checks it):
	 * an overlap is a header that lies, not one to guess at. */
	for (i = 1; ret->kind == HYD_MODEL_SAFETENSORS && i < ret->n; i++) {
		if (ret->ranges[i].off <
		    ret->ranges[i - 1].off + ret->ranges[i - 1].len) {
			hyd_model_free(ret);
			return -EBADMSG;
		}
	}
	if (ret->kind == HYD_MODEL_GGUF) {
		for (i = 0; i < ret->n; i++) {
			end = i + 1 < ret->n ? ret->ranges[i + 1].off : size;
			ret->ranges[i].len = end - ret->ranges[i].off;
		}
		/* Tensors at the same offset (len 0 now) go. */
		for (i = 0; i < ret->n;) {
			if (!ret->ranges[i].len) {
				memmove(ret->ranges + i, ret->ranges + i + 1,
					(ret->n - i - 1) *
					    sizeof(*ret->ranges));
				ret->n--;
			} else {
				i++;
			}
		}
	}
	return 0;
}
