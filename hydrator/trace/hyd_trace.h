/*
 * hydrator/trace/hyd_trace.h — a job's first reads, recorded at one mount
 * and replayed at the next (docs/formats.md, "Traces").
 *
 * The recorder (hyd_trace_rec.c) sits on the read path: each read a FUSE
 * request answers is told to it (ino, offset, length); it coalesces a
 * file's reads that follow on from each other and appends lines to
 * CACHEDIR/trace.rec now and then, so the read path does a little memory
 * work and, about once a second, one write. The plan (hyd_trace_plan.c)
 * turns a trace file (paths) into what backfill fetches first: each range
 * of a file that is still the one the trace saw, by ino, in the trace's
 * order. The trace file format itself (parse, write) and the export of a
 * record are hydrator.h's, for tools/ too.
 */
#ifndef FERRY_HYD_TRACE_H
#define FERRY_HYD_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "hydrator/hydrator.h"

/* ---- recording (hyd_trace_rec.c) ---- */

typedef struct hyd_trace_rec hyd_trace_rec;

/* Start a record of this mount in cache_dir: an existing record becomes
 * HYD_TRACE_PREV_NAME, a new one is begun for generation gen. At most
 * max_records read lines are kept (0: HYD_TRACE_MAX_RANGES); past that
 * the record says it was cut short and keeps no more. Returns 0 or
 * -errno (the mount goes on without a record then). */
int hyd_trace_rec_open(const char *cache_dir, uint64_t gen,
		       unsigned max_records, hyd_trace_rec **ret);

/* A read of [off, off + len) of regular file ino was answered. Any
 * thread; no I/O but an occasional append. NULL rec is a no-op. A
 * mount that follows keeps one record: an entry a generation keeps keeps
 * its ino, so the export names reads of older generations too. */
void hyd_trace_rec_read(hyd_trace_rec *rec, uint64_t ino, uint64_t off,
			uint64_t len);

/* The whole of file ino (len bytes) was pushed into the kernel's page
 * cache (hyd_push): the job's reads of it will not reach the mount, so
 * the record keeps the push in their place ("p" lines; export counts
 * them as reads unless asked for reads only). As hyd_trace_rec_read. */
void hyd_trace_rec_pushed(hyd_trace_rec *rec, uint64_t ino, uint64_t len);

/* Write what is buffered. 0 or -errno. */
int hyd_trace_rec_flush(hyd_trace_rec *rec);

/* Flush and free. NULL is a no-op. */
void hyd_trace_rec_close(hyd_trace_rec *rec);

/* ---- the record's lines (shared by the recorder and the export) ---- */

#define HYD_TRACE_REC_MAGIC "ferry-trace-record 1"

/* ---- replay (hyd_trace_plan.c) ---- */

struct hyd_trace_step {
	uint64_t ino; /* 0: skipped (see why_skipped) */
	uint64_t off, len;
};

struct hyd_trace_plan {
	struct hyd_trace_step *steps; /* the traces' ranges, in order */
	size_t nsteps;
	uint64_t files;	  /* files named (over all traces) */
	uint64_t missing; /* of them, not in the catalog as regular files */
	uint64_t changed; /* of them, another size or mtime now */
	uint64_t bytes;	  /* raw bytes of the steps not skipped */
};

/* Resolve traces t[0..n) against the catalog r: each file's path looked
 * up from the root, kept when it is a regular file of the same size and
 * mtime, its ranges appended in each trace's order (a range past the
 * file's end is cut to it). 0 or -ENOMEM, -EIO; a lookup that fails
 * otherwise counts the file missing. */
int hyd_trace_plan_make(cat_reader *r, const struct hyd_trace *const *t,
			size_t n, struct hyd_trace_plan *ret);
void hyd_trace_plan_free(struct hyd_trace_plan *p);

/* ---- model files (hyd_trace_model.c) ----
 *
 * Where a safetensors or GGUF file's header ends and its tensors lie, so a
 * file a loader opens can be fetched header first, then tensor by tensor
 * in the order of their offsets. */

/* The most header bytes read and the most tensors taken: far above what
 * model files carry, low enough that what a hostile header makes the
 * parser hold (jansson's tree of it) stays bounded. */
#define HYD_MODEL_HEAD_MAX (16u << 20)
#define HYD_MODEL_TENSORS_MAX (1u << 18)

enum hyd_model_kind {
	HYD_MODEL_NONE = 0,
	HYD_MODEL_SAFETENSORS,
	HYD_MODEL_GGUF,
};

struct hyd_model_range {
	uint64_t off, len;
};

struct hyd_model {
	enum hyd_model_kind kind;
	uint64_t header;		/* bytes [0, header) are the header */
	struct hyd_model_range *ranges; /* tensors, by offset, non-empty */
	size_t n, cap;
	size_t need; /* -EAGAIN: the header bytes needed (or, for GGUF, a
		      * guess: twice as many as given) */
};

/* Parse the first len bytes of a file of size bytes. 0 with *ret filled
 * (hyd_model_free it); -EAGAIN when more of the file is needed (ret->need
 * says how much, at most HYD_MODEL_HEAD_MAX); -ENOTSUP when it is not a
 * model file of a kind known here; -EBADMSG when it claims to be one and
 * its header does not parse or points outside the file; -ENOMEM. */
int hyd_model_parse(const void *head, size_t len, uint64_t size,
		    struct hyd_model *ret);
void hyd_model_free(struct hyd_model *m);

#endif
