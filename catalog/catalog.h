/*
 * catalog/catalog.h — the vocabulary both sites share.
 *
 * This is the one public header of catalog/. It offers:
 *   - chunk ids (SHA-256 of a chunk's raw bytes, OpenSSL EVP),
 *   - the FastCDC content-defined chunker,
 *   - chunk frames (how a chunk travels and rests: raw, lz4, zstd, or
 *     zstd over byte planes),
 *   - name and size checks for untrusted input,
 *   - the SQLite catalog: a writer (source side) and a read-only reader
 *     (destination side).
 *
 * Conventions: functions return 0 on success, a positive value only where it
 * is documented to mean something, and -errno on failure:
 *   -EINVAL   bad argument or malformed input value
 *   -EBADMSG  a frame, hash or catalog row that fails its checks
 *   -ENOENT   not in the catalog
 *   -ENOMEM   allocation failed
 *   -EIO      a library (SQLite, zstd, lz4, OpenSSL) failed
 * catalog/ never includes libuv, curl or FUSE headers.
 */
#ifndef FERRY_CATALOG_H
#define FERRY_CATALOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ------------------------------------------------------------------ */
/* Chunk ids                                                          */
/* ------------------------------------------------------------------ */

#define CHUNK_ID_LEN 32	    /* SHA-256 digest bytes */
#define CHUNK_ID_HEX_LEN 64 /* lowercase hex, without NUL */

typedef struct chunk_id {
	uint8_t b[CHUNK_ID_LEN];
} chunk_id;

/* SHA-256 of buf[0..len) into *ret_id. Any thread. Returns 0 or -EIO. */
int chunk_id_compute(const void *buf, size_t len, chunk_id *ret_id);

/* 0 when SHA-256(buf) equals *id, -EBADMSG when it does not, -EIO. */
int chunk_id_verify(const chunk_id *id, const void *buf, size_t len);

/* Parse exactly `len` hex characters (must be CHUNK_ID_HEX_LEN, lowercase or
 * uppercase accepted) into *ret_id. Returns 0 or -EINVAL. */
/* 1 when id is the hole id (32 zero bytes): the chunk is len bytes of
 * zeros that the source did not store, so nothing reads, sends or stores
 * it. No SHA-256 is all zeros in practice. */
int chunk_id_is_hole(const chunk_id *id);

int chunk_id_from_hex(const char *hex, size_t len, chunk_id *ret_id);

/* Write 64 lowercase hex characters plus NUL into ret_hex. */
void chunk_id_to_hex(const chunk_id *id, char ret_hex[CHUNK_ID_HEX_LEN + 1]);

/* ------------------------------------------------------------------ */
/* FastCDC chunker                                                    */
/* ------------------------------------------------------------------ */

#define CHUNK_MIN_DEFAULT (16u * 1024u)
#define CHUNK_AVG_DEFAULT (64u * 1024u)
#define CHUNK_MAX_DEFAULT (256u * 1024u)
/* No catalog may declare a max chunk size above this; it bounds every
 * buffer sized from a catalog or a frame header. */
#define CHUNK_MAX_LIMIT (8u * 1024u * 1024u)

typedef struct chunk_params {
	uint32_t min; /* a cut is never placed before min bytes */
	uint32_t avg; /* power of two; the normalized target size */
	uint32_t max; /* a cut is always placed at max bytes */
} chunk_params;

/* Fill *ret with the defaults above. */
void chunk_params_default(chunk_params *ret);

/* 0 when 64 <= min < avg < max <= CHUNK_MAX_LIMIT and avg is a power of
 * two; -EINVAL otherwise. Used on parameters read from an untrusted catalog. */
int chunk_params_check(const chunk_params *p);

/* Find the next cut point in buf[0..len).  The caller passes
 * len = min(bytes left in the file, p->max); the result is the length of the
 * chunk that starts at buf[0], 1 <= result <= len (result == len when
 * len <= p->min). Pure function of (p, the bytes), so both sites and every
 * run agree (FastCDC with normalized chunking, a fixed gear table).
 * len == 0 returns 0. Any thread. */
size_t chunker_next(const chunk_params *p, const uint8_t *buf, size_t len);

/* ------------------------------------------------------------------ */
/* Frames                                                             */
/* ------------------------------------------------------------------ */

/*
 * Wire and pack format of one chunk (all integers little-endian):
 *
 *   offset size field
 *   0      4    magic "FRC1"
 *   4      1    codec      (enum frame_codec)
 *   5      1    flags      (must be 0)
 *   6      2    reserved   (must be 0)
 *   8      4    raw_len    (bytes after decoding; 1..max chunk size)
 *   12     4    stored_len (payload bytes that follow; 1..raw_len)
 *   16     ...  payload
 *
 * For FRAME_RAW stored_len == raw_len. A codec that does not shrink the
 * chunk is dropped for raw.
 *
 * FRAME_ZSTD_SHUF2 and FRAME_ZSTD_SHUF4 ("byte planes", the shuffle filter
 * of HDF5 and Blosc): the payload is one zstd frame of the chunk's bytes
 * regrouped by position modulo S (S = 2 or 4). With m = raw_len / S, the
 * regrouped buffer is plane 0 (raw[0], raw[S], ..., raw[(m-1)S]), then
 * plane 1 (raw[1], raw[S+1], ...), ..., plane S-1, then the last
 * raw_len % S bytes unchanged. Words of 16-bit (bf16, fp16) or 32-bit
 * (fp32) numbers then put their skewed sign/exponent bytes in planes of
 * their own, which zstd's Huffman stage codes far better than the
 * interleaved bytes. Decoding is zstd, then the inverse regrouping.
 */
#define FRAME_MAGIC "FRC1"
#define FRAME_HDR_LEN 16u

enum frame_codec {
	FRAME_RAW = 0,
	FRAME_LZ4 = 1,
	FRAME_ZSTD = 2,
	FRAME_ZSTD_SHUF2 = 3, /* zstd over 2 byte planes */
	FRAME_ZSTD_SHUF4 = 4, /* zstd over 4 byte planes */
};

/* How frame_encode picks a codec. Every policy falls back to raw when its
 * codec does not shrink the chunk. */
enum frame_policy {
	/* Per chunk of >= 4 KiB: a probe of 4 KiB sampled from the chunk
	 * compares the order-0 entropy of its bytes taken whole, as 2
	 * planes and as 4 planes; a layout that saves >= 5% picks
	 * FRAME_ZSTD_SHUF2/4 at zstd level 1, anything else (and any
	 * smaller chunk) is FRAME_ZSTD level 1. Raw when the result saves
	 * < 1/32 of the chunk. level is ignored. */
	FRAME_POLICY_AUTO = 0,
	FRAME_POLICY_ZSTD = 1,	     /* zstd at the given level */
	FRAME_POLICY_LZ4 = 2,	     /* lz4 default */
	FRAME_POLICY_RAW = 3,	     /* always raw */
	FRAME_POLICY_ZSTD_SHUF2 = 4, /* zstd over 2 planes, given level */
	FRAME_POLICY_ZSTD_SHUF4 = 5, /* zstd over 4 planes, given level */
};

struct frame_info {
	uint8_t codec;
	uint32_t raw_len;
	uint32_t stored_len;
	size_t frame_len; /* FRAME_HDR_LEN + stored_len */
};

/* Reusable compression/decompression contexts (zstd CCtx/DCtx, and made on
 * first use: a byte-plane buffer up to the largest chunk seen, the AUTO
 * probe's 32 KiB table). One coder per thread; a coder is not thread-safe.
 * frame_coder_new returns NULL on allocation failure;
 * frame_coder_free(NULL) is a no-op. */
typedef struct frame_coder frame_coder;
frame_coder *frame_coder_new(void);
void frame_coder_free(frame_coder *c);

/* Upper bound of a frame's size for raw_len bytes under any policy. */
size_t frame_bound(size_t raw_len);

/* Encode raw[0..raw_len) (1 <= raw_len <= CHUNK_MAX_LIMIT) into out, which
 * has room for out_cap >= frame_bound(raw_len) bytes. level is used by
 * FRAME_POLICY_ZSTD and _ZSTD_SHUF2/4 (0 means 1). *ret_len is the frame
 * length. coder may be NULL (a temporary one is made and freed). Returns
 * 0, -EINVAL, -ENOBUFS (out_cap too small), -ENOMEM, -EIO. */
int frame_encode(frame_coder *coder, enum frame_policy policy, int level,
		 const void *raw, size_t raw_len, void *out, size_t out_cap,
		 size_t *ret_len);

/* Parse and check a frame header at buf[0..len). len may be larger than
 * the frame (a stream of frames) but must hold the whole header. Checks
 * magic, codec, flags and reserved == 0, 1 <= raw_len <= max_raw,
 * stored_len <= frame_bound(raw_len) - FRAME_HDR_LEN, raw frames have
 * stored_len == raw_len. Does NOT require the payload to be present.
 * Returns 0 or -EBADMSG (-EINVAL if len < FRAME_HDR_LEN is reported as
 * -EBADMSG too). */
int frame_header_parse(const void *buf, size_t len, uint32_t max_raw,
		       struct frame_info *ret);

/* Decode one whole frame: frame_len must equal the header's frame_len.
 * Decompresses into out (out_cap >= raw_len) and checks the result is
 * exactly raw_len bytes. Does not check the hash: callers check the id with
 * chunk_id_verify before serving. coder may be NULL.
 * Returns 0 with *ret_raw_len set, -EBADMSG for any malformed, truncated,
 * oversized or undecodable frame, -ENOBUFS if out_cap < raw_len, -ENOMEM.
 * On failure the contents of out[0..raw_len) are unspecified. */
int frame_decode(frame_coder *coder, const void *frame, size_t frame_len,
		 uint32_t max_raw, void *out, size_t out_cap,
		 size_t *ret_raw_len);

/* ------------------------------------------------------------------ */
/* Names and bounds of untrusted input                                */
/* ------------------------------------------------------------------ */

#define CAT_NAME_MAX 255u    /* bytes in one path component */
#define CAT_TARGET_MAX 4095u /* bytes in a symlink target */
#define CAT_XATTR_NAME_MAX 255u
#define CAT_XATTR_VALUE_MAX 65536u
#define CAT_SIZE_MAX (1ull << 62) /* largest file size we accept */

/* 0 when name[0..len) is one safe path component: 1..CAT_NAME_MAX bytes,
 * not "." or "..", no '/' and no NUL. -EINVAL otherwise. */
int cat_name_check(const void *name, size_t len);

/* 0 when an xattr name is 1..CAT_XATTR_NAME_MAX bytes without NUL. */
int cat_xattr_name_check(const void *name, size_t len);

/* ------------------------------------------------------------------ */
/* The catalog (SQLite)                                               */
/* ------------------------------------------------------------------ */

/* Schema (docs/catalog.md mirrors this):
 *   meta(key TEXT PRIMARY KEY, value)
 *     format='ferry-catalog/2', generation, parent_generation, created_ns,
 *     chunk_min, chunk_avg, chunk_max, hash='sha256', inodes, bytes,
 *     pending (rows of the pending table),
 *     tree_sha256 (optional: the digest of the rows, see cat_meta)
 *   inode(ino INTEGER PRIMARY KEY, kind, mode, uid, gid, size, nlink,
 *         mtime_ns, ctime_ns, rdev, target BLOB, blocks) -- root is ino 1
 *         -- blocks: st_blocks of the source (format 2)
 *   dirent(parent, pos, name BLOB, ino, PRIMARY KEY(parent, pos))
 *         WITHOUT ROWID; UNIQUE INDEX dirent_name(parent, name)
 *         -- pos numbers a directory's entries 1..n: resumable readdir
 *   xattr(ino, name BLOB, value BLOB, PRIMARY KEY(ino, name)) WITHOUT ROWID
 *   chunk(ino, off, len, id BLOB, PRIMARY KEY(ino, off)) WITHOUT ROWID
 *         -- keyed by offset so "chunks covering [a,b)" is one index seek
 *         -- an id of 32 zero bytes (chunk_id_is_hole) is a hole: len
 *            bytes of zeros that are never read, sent or stored
 *   pending(ino INTEGER PRIMARY KEY)
 *         -- regular files whose manifest is not in this catalog: the
 *            replicator publishes it later (docs/protocol.md, manifests);
 *            such a file has no chunk rows here
 * Format 1 (user_version 1) is the same without the pending table and
 * the blocks column.
 */
#define CAT_FORMAT "ferry-catalog/2"
#define CAT_FORMAT_1 "ferry-catalog/1"
/* PRAGMA application_id of every catalog: "FERY" in ASCII. */
#define CAT_APP_ID 0x46455259
/* PRAGMA user_version: the schema revision. One migration step per bump. */
#define CAT_USER_VERSION 2
#define CAT_ROOT_INO 1u

enum cat_kind {
	CAT_REG = 1,
	CAT_DIR = 2,
	CAT_LNK = 3,
	CAT_FIFO = 4,
	CAT_CHR = 5,
	CAT_BLK = 6,
	CAT_SOCK = 7,
};

/* The S_IFMT bits of a kind, or -1 for a value that is not a kind. */
int cat_kind_ifmt(int kind);
/* The kind of an st_mode's file type, or 0 when it has none we record. */
int cat_kind_of_mode(unsigned mode);

struct cat_inode {
	uint64_t ino;
	enum cat_kind kind;
	uint32_t mode; /* full st_mode: type bits agree with kind */
	uint32_t uid, gid;
	uint64_t size; /* regular: bytes; symlink: target length; else 0 */
	uint32_t nlink;
	int64_t mtime_ns, ctime_ns;
	uint64_t rdev;
	/* 512-byte blocks the source file takes (st_blocks): less than the
	 * size for a sparse file. Format 1 catalogs have none: the reader
	 * gives ceil(size / 512). Not part of the tree digest. */
	uint64_t blocks;
};

struct cat_meta {
	uint64_t generation;	    /* >= 1 */
	uint64_t parent_generation; /* 0 when none */
	int64_t created_ns;
	chunk_params params;
	uint64_t inodes;  /* number of inode rows (set by the writer) */
	uint64_t bytes;	  /* sum of regular file sizes (set by the writer) */
	uint64_t pending; /* regular files whose manifest comes later (set
			   * by the writer; 0 for format 1) */
	/* Entries the scan left out (they vanished or could not be read):
	 * the tree is then not the whole source, and a client must not
	 * delete what it lacks (rsync's "IO error encountered -- skipping
	 * file deletion"). Set with cat_writer_set_left_out; 0 when reading
	 * a catalog written without it. */
	uint64_t left_out;
	/* The ino the next generation gives its first new entry: above
	 * every ino this one or an older one used, so a number never comes
	 * back for another entry (cat_writer_set_next_ino; 0 when reading a
	 * catalog written without it: then take the largest ino + 1). */
	uint64_t next_ino;
	/* SHA-256 (lowercase hex) of every namespace row (inode, dirent,
	 * xattr) the writer was given, in call order and a fixed encoding,
	 * with the chunk parameters; manifests are not part of it. Equal for
	 * two catalogs of the same tree whatever their generations, times,
	 * and whichever manifests they already hold. Set by the writer; ""
	 * when reading a catalog written without it. */
	char tree_sha256[65];
};

struct cat_chunk {
	uint64_t off;
	uint32_t len;
	chunk_id id;
};

/* -- writer (source side; one thread) -- */
typedef struct cat_writer cat_writer;

/* Start a new catalog that will appear at `path` on commit. Writes go to
 * "<path>.tmp" (replaced if a stale one exists) inside one transaction.
 * meta->inodes and meta->bytes are ignored (the writer counts).
 * Returns 0, -EINVAL, -EIO. */
int cat_writer_open(const char *path, const struct cat_meta *meta,
		    cat_writer **ret_w);

/* Add an inode row. target/target_len is the symlink text (NULL/0 for
 * other kinds). The inode must be added before commit; order is free. */
int cat_writer_add_inode(cat_writer *w, const struct cat_inode *in,
			 const void *target, size_t target_len);

/* Add a directory entry. The entries of one directory must be added in one
 * consecutive run; the writer numbers them pos = 1..n in call order.
 * Returns -EINVAL for an unsafe name, -EEXIST for a duplicate name. */
int cat_writer_add_dirent(cat_writer *w, uint64_t parent, const void *name,
			  size_t name_len, uint64_t ino);

int cat_writer_add_xattr(cat_writer *w, uint64_t ino, const void *name,
			 size_t name_len, const void *value, size_t value_len);

/* Chunks of one file are added in increasing, contiguous offset order. */
int cat_writer_add_chunk(cat_writer *w, uint64_t ino, uint64_t off,
			 uint32_t len, const chunk_id *id);

/* Mark regular file ino's manifest as pending: the catalog holds no chunk
 * rows for it; the replicator serves it later. Checked at commit (a
 * pending ino must be a regular file's and have no chunk rows: -EINVAL).
 * -EEXIST when ino is already pending. */
int cat_writer_add_pending(cat_writer *w, uint64_t ino);

/* How many entries the scan left out (meta "left_out"); before commit. */
void cat_writer_set_left_out(cat_writer *w, uint64_t n);
/* meta "next_ino" (see cat_meta); before commit. */
void cat_writer_set_next_ino(cat_writer *w, uint64_t next);

/* Commit: write meta, commit, fsync, rename "<path>.tmp" to path, fsync
 * the directory. Frees w in every case. Returns 0 or -errno (the temp file
 * is removed on failure). */
int cat_writer_commit(cat_writer *w);

/* Drop everything, remove the temp file, free w. NULL is a no-op. */
void cat_writer_abort(cat_writer *w);

/* -- deltas between generations (cat_delta.c; any thread, blocking) -- */

/* SHA-256 (hex) over every row of the catalog at path (meta, inode,
 * dirent, xattr, chunk, pending; each in key order, values typed and
 * length-prefixed): equal for catalogs with equal rows. 0 or -errno. */
int cat_digest(const char *path, char hex[65]);

/* Write at delta_path (replaced) the rows that turn the catalog at
 * from_path into the one at to_path, of a later generation, with to's
 * digest. 0, -EINVAL (not older), -EBADMSG (not catalogs), -errno. */
int cat_delta_build(const char *from_path, const char *to_path,
		    const char *delta_path);

/* Make out_path (replaced) the catalog from_path + the delta: refused
 * (-EBADMSG, nothing left at out_path) unless the delta is from
 * from_path's generation and the result's digest is the one the delta
 * names. *ret_from and *ret_to (may be NULL) get its generations. */
int cat_delta_apply(const char *from_path, const char *delta_path,
		    const char *out_path, uint64_t *ret_from, uint64_t *ret_to);

/* cat_delta_apply, and the result's digest must also be want (64 hex, the
 * digest a signed statement names: cat_stmt), whatever the delta claims:
 * how a delta is bound to a signed generation. -EBADMSG otherwise,
 * nothing left at out_path. */
int cat_delta_apply_want(const char *from_path, const char *delta_path,
			 const char *out_path, const char *want,
			 uint64_t *ret_from, uint64_t *ret_to);

/* -- what a mount switching generations in place must invalidate
 *    (cat_diff.c; any thread, blocking) -- */
enum cat_diff_kind {
	CAT_DIFF_NAME = 1, /* entry (ino = parent, name) added, removed, or
			    * naming another ino */
	CAT_DIFF_DIR = 2,  /* directory ino: its listing changed */
	CAT_DIFF_ATTR = 3, /* ino in both: its inode row or xattrs differ */
	CAT_DIFF_DATA = 4, /* regular file ino in both with another size or
			    * mtime under the same number */
	CAT_DIFF_GONE = 5, /* ino in the old catalog only */
};

struct cat_diff_item {
	enum cat_diff_kind kind;
	uint64_t ino;
	const void *name; /* CAT_DIFF_NAME only; valid during the call */
	size_t name_len;
};

/* Call cb for each difference between the catalog at old_path and the one
 * at new_path (names first, then directories, then inodes, then the inos
 * gone, in ascending order), until cb
 * returns non-zero (that value is returned). Chunk rows are not compared
 * (a changed file has a new number: docs/catalog.md). Scans both
 * catalogs' inode, dirent and xattr rows. 0, -EBADMSG (not catalogs),
 * -ENOENT, -ENOMEM, -EIO. */
typedef int (*cat_diff_cb)(void *ctx, const struct cat_diff_item *it);
int cat_diff(const char *old_path, const char *new_path, cat_diff_cb cb,
	     void *ctx);

/* -- reader (destination side; any thread: calls are serialized by an
 *    internal mutex, so callbacks must not call back into the reader) -- */
typedef struct cat_reader cat_reader;

/* Open a catalog read-only and check it is a ferry catalog: format string,
 * tables, chunk parameters (chunk_params_check), root inode is a directory.
 * Returns 0, -ENOENT (no file), -EBADMSG (not a valid ferry catalog),
 * -EPROTONOSUPPORT (a ferry catalog of a later format than this build
 * reads), -EIO. On failure *ret_r is NULL. */
int cat_reader_open(const char *path, cat_reader **ret_r);
void cat_reader_close(cat_reader *r);

/* Copy of the meta read at open. */
void cat_reader_meta(cat_reader *r, struct cat_meta *ret);

/* -- the tree rule (cat_check.c; any thread, blocking) --
 *
 * A catalog's entries must form one tree rooted at CAT_ROOT_INO
 * (docs/catalog.md, "The tree rule"): every dirent has integer keys and
 * names an inode that exists, under a parent that is a directory; no
 * entry names the root; a directory inode is named by at most one entry
 * (hard links are for other kinds); and every directory is reached from
 * the root. So no cycle, no entry back to an ancestor, no second parent,
 * no orphan directory: a walk from the root meets each entry once.
 * cat_reader_open does not check this (it would cost O(entries) on
 * every open); whoever takes a catalog from elsewhere does, once. */

/* Check r's tables against the rule: 0, or -EBADMSG with one line
 * (no newline) in why[0..cap) naming what is wrong, e.g. "directory
 * inode 5 is named by 2 entries (in directories 1 and 7): ...";
 * -ENOMEM, -EIO. O(entries) with memory that does not grow with the
 * catalog (SQLite's temporary b-trees); 0.3-0.6 s of CPU per million
 * entries. */
int cat_check_tree(cat_reader *r, char *why, size_t cap);

/* The verdict kept beside a catalog that passed: PATH + this suffix, a
 * line naming the file's device, inode, size, mtime and ctime, so any
 * change to the file (or another file renamed to PATH) voids it. */
#define CAT_CHECK_MARK_SUFFIX ".tree-ok"

/* Write the marker for the file at path as it is now (durably,
 * atomically). 0 or -errno. */
int cat_check_remember(const char *path);
/* 1 when path's marker matches the file as it is now, else 0. */
int cat_check_remembered(const char *path);

/* cat_reader_open, then cat_check_tree unless the file's marker says it
 * passed; a pass writes the marker when remember is set (best effort).
 * Errors as cat_reader_open and cat_check_tree (-EBADMSG with why set);
 * on failure *ret_r is NULL. */
int cat_reader_open_checked(const char *path, int remember, cat_reader **ret_r,
			    char *why, size_t cap);

/* The first ino a next generation may give a new entry: meta next_ino,
 * or (catalogs written without it) the largest ino + 1. 0 or -errno. */
int cat_next_ino(cat_reader *r, uint64_t *ret);

/* Every row handed out is checked: kind and mode agree, sizes within
 * bounds, names pass cat_name_check; a row that fails is -EBADMSG. */
int cat_getattr(cat_reader *r, uint64_t ino, struct cat_inode *ret);
int cat_lookup(cat_reader *r, uint64_t parent, const void *name,
	       size_t name_len, struct cat_inode *ret);

/* Call cb for each entry of dir with pos > after_pos, in pos order, until
 * cb returns non-zero (stop; that value is returned) or the directory ends
 * (returns 0). Entries with an invalid name are skipped. */
typedef int (*cat_dirent_cb)(void *ctx, const void *name, size_t name_len,
			     const struct cat_inode *in, uint64_t pos);
int cat_readdir(cat_reader *r, uint64_t dir, uint64_t after_pos,
		cat_dirent_cb cb, void *ctx);

/* Symlink target into buf (not NUL-terminated). -EINVAL if ino is not a
 * symlink, -ERANGE if cap is too small; *ret_len is the target length. */
int cat_readlink(cat_reader *r, uint64_t ino, void *buf, size_t cap,
		 size_t *ret_len);

/* getxattr semantics: cap == 0 only reports the size in *ret_len.
 * -ENODATA when absent, -ERANGE when cap is too small. */
int cat_getxattr(cat_reader *r, uint64_t ino, const void *name, size_t name_len,
		 void *buf, size_t cap, size_t *ret_len);

/* listxattr semantics: NUL-terminated names back to back; cap == 0 only
 * reports the size. -ERANGE when cap is too small. */
int cat_listxattr(cat_reader *r, uint64_t ino, void *buf, size_t cap,
		  size_t *ret_len);

/* Chunks of ino that overlap [off, off+len), in offset order, at most cap
 * of them into ret; *ret_n is how many. Call again from the end of the
 * last one for more. Each row is checked (len 1..params.max, within size,
 * contiguous with the previous one of the same call): -EBADMSG if not.
 * A pending file (format 2) is read from the attached overlay: -EAGAIN
 * while the overlay has no manifest for it, -ESTALE when the source
 * changed before it was hashed (no manifest will come for this
 * generation). */
int cat_chunks_range(cat_reader *r, uint64_t ino, uint64_t off, uint64_t len,
		     struct cat_chunk *ret, size_t cap, size_t *ret_n);

/* Call cb for every distinct chunk id of the catalog with one (ino, off,
 * len) that holds it (the lowest ino), in (ino, off) order, until cb
 * returns non-zero. For backfill, sync and tests. */
typedef int (*cat_chunk_cb)(void *ctx, uint64_t ino, const struct cat_chunk *c);
int cat_chunks_each(cat_reader *r, cat_chunk_cb cb, void *ctx);

/* -- packs: a generation's cacheable objects (cat_pack.c) --
 *
 * GET /v1/NS/pack/GEN/INO/K answers one pack: for each chunk of its list,
 * the 32-byte id and the frame (as a batch answer). A file of
 * CAT_PACK_SPAN bytes or more is cut into parts K = 0.. (the chunks that
 * start in [K x SPAN, (K+1) x SPAN)); smaller data files are grouped in
 * ino order within each segment of CAT_PACK_SEG_INOS inos until their
 * sizes reach SPAN (a big file ends a group), the group named by its
 * first ino and K = 0. Sizes alone decide the shape (both sides agree
 * from the catalog); the list needs the files' manifests. */
#define CAT_PACK_SPAN (4u << 20)
#define CAT_PACK_SEG_INOS 1024u
/* A bound no pack reaches (a group is under 2 x SPAN of data in at most
 * CAT_PACK_SEG_INOS files, a part at most SPAN / chunk_min + 1 chunks);
 * a list that would grow past it is -E2BIG. */
#define CAT_PACK_MAX_IDS 65536u

struct cat_pack {
	uint64_t first; /* the ino that names it */
	uint64_t last;	/* its last file (a group); first for a big file */
	uint64_t size;	/* the big file's size; the group's data bytes */
	uint64_t parts; /* parts of a big file; 1 for a group */
	int big;
};

/* The pack holding regular file ino (size > 0; for a big file, the pack
 * named (ino, K) for each K < parts). 0, -ENOENT (not a data file),
 * -EBADMSG, -errno. */
int cat_pack_find(cat_reader *r, uint64_t ino, struct cat_pack *ret);

/* The pack named (first, part): 0, -ENOENT when none has that name. */
int cat_pack_named(cat_reader *r, uint64_t first, uint64_t part,
		   struct cat_pack *ret);

/* A pack's chunk list: ids and raw lengths in order. */
struct cat_pack_list {
	chunk_id *ids;
	uint32_t *lens;
	size_t n, cap;
};
void cat_pack_list_fini(struct cat_pack_list *l);
/* Append c (a hole is skipped). 0, -ENOMEM, -E2BIG. */
int cat_pack_list_add(struct cat_pack_list *l, const struct cat_chunk *c);

/* Append to out, with cat_pack_list_add, the chunks of file ino (of size
 * bytes) that start in [lo, hi), in offset order. */
typedef int (*cat_pack_rows_fn)(void *ctx, uint64_t ino, uint64_t size,
				uint64_t lo, uint64_t hi,
				struct cat_pack_list *out);
/* The rows as r answers them (cat_chunks_range: the catalog's, or a
 * pending file's from the attached overlay; its errors, -EAGAIN
 * included). ctx is the cat_reader. */
int cat_pack_rows_reader(void *ctx, uint64_t ino, uint64_t size, uint64_t lo,
			 uint64_t hi, struct cat_pack_list *out);

/* Fill out (emptied first) with the list of part `part` of p: its files'
 * rows from rows(ctx, ...), each id at its first place only. 0,
 * -ENOENT (no such part), or the rows' -errno. */
int cat_pack_ids(cat_reader *r, const struct cat_pack *p, uint64_t part,
		 cat_pack_rows_fn rows, void *ctx, struct cat_pack_list *out);

/* -- pending manifests (format 2) and the destination's overlay --
 *
 * A format 2 catalog may list regular files as pending: their manifests
 * are published by the replicator after the catalog (docs/protocol.md).
 * The destination keeps the ones it has fetched in an overlay, a SQLite
 * file beside the catalog, written by cat_overlay_* below and read through
 * the reader once attached:
 *   file(ino INTEGER PRIMARY KEY, state INTEGER NOT NULL)
 *         -- CAT_OVERLAY_OK: the manifest is in chunk;
 *            CAT_OVERLAY_CHANGED: the source changed before it was
 *            hashed: no manifest in this generation
 *   chunk(ino, off, len, id BLOB, PRIMARY KEY(ino, off)) WITHOUT ROWID
 */
#define CAT_OVERLAY_OK 0
#define CAT_OVERLAY_CHANGED 1

enum cat_manifest_where {
	CAT_MANIFEST_CATALOG = 0, /* in the catalog's chunk rows */
	CAT_MANIFEST_LOCAL = 1,	  /* pending, and in the overlay */
	CAT_MANIFEST_MISSING = 2, /* pending, not fetched yet */
	CAT_MANIFEST_CHANGED = 3, /* pending, and the source changed */
};

/* Attach the overlay at path (read-only through this connection; it must
 * exist, made by cat_overlay_open). A format 1 catalog ignores it (0).
 * Returns 0, -EEXIST (one is attached), -EBADMSG (not an overlay), -EIO. */
int cat_reader_attach_overlay(cat_reader *r, const char *path);

/* Where regular file ino's manifest is: a cat_manifest_where value, or
 * -ENOENT, -EINVAL (not a regular file), -EBADMSG, -EIO. */
int cat_manifest_state(cat_reader *r, uint64_t ino);

/* Snapshots, for a reader that asks about thousands of files in a row (a
 * landing's walk): with max_age_ns > 0, cat_manifest_state and
 * cat_chunks_range share one read transaction of the overlay for up to
 * max_age_ns, instead of one each (two locks and a check of the WAL per
 * query). An answer "not local" under a snapshot is asked again in a
 * fresh one, so a manifest stored meanwhile is never missed; "local" stays
 * true (a manifest, once stored, does not change in its generation).
 * The other overlay queries end a snapshot first. 0 turns it off. */
void cat_reader_snapshots(cat_reader *r, uint64_t max_age_ns);

/* Pending inos greater than after whose manifest the overlay does not hold
 * (neither OK nor CHANGED), ascending, at most cap into ret. */
int cat_pending_missing(cat_reader *r, uint64_t after, uint64_t *ret,
			size_t cap, size_t *ret_n);

/* The pending files with first <= ino <= last, ascending, each with its
 * inode's kind and size (kind -1 and size 0 when the inode row is missing),
 * handed to cb in one query under the reader's lock (cb must not call the
 * reader). cb returns 0 to go on, 1 to stop (then 0 is returned), or
 * -errno (returned). A format 1 catalog has none. Returns 0, cb's error,
 * -EBADMSG, -EIO. */
typedef int (*cat_pending_cb)(void *ctx, uint64_t ino, int kind, uint64_t size);
int cat_pending_each(cat_reader *r, uint64_t first, uint64_t last,
		     cat_pending_cb cb, void *ctx);

/* -- the overlay's writer (destination side; any thread, serialized) -- */
typedef struct cat_overlay cat_overlay;

/* Open or create the overlay at path (WAL; a crash loses at most the last
 * put, never leaves a partial manifest). Returns 0, -EBADMSG (a file
 * that is not an overlay), -EIO, -ENOMEM. */
int cat_overlay_open(const char *path, cat_overlay **ret);
void cat_overlay_close(cat_overlay *ov);

/* Check a manifests body (the wire format of docs/protocol.md, "Manifests")
 * against the catalog r and store every record in it, in one transaction:
 * the header's generation must be r's and its ino range [first, last]
 * the one asked for; each record names a pending file of r inside the
 * range, ascending, with r's size, and its chunks cover [0, size)
 * contiguously with lengths 1..params.max. A record marked "fetch on its
 * own" is skipped. Files the overlay already holds are left as they are.
 * *ret_files (may be NULL) counts the records stored. Returns 0,
 * -EBADMSG (anything malformed: nothing is stored), -EIO. */
int cat_overlay_put_wire(cat_overlay *ov, cat_reader *r, uint64_t first,
			 uint64_t last, const void *buf, size_t len,
			 size_t *ret_files);

/* -- the manifests wire format (docs/protocol.md, "Manifests") -- */

#define CAT_MWIRE_MAGIC "FERRYMN1"
#define CAT_MWIRE_HEAD 36u  /* magic, gen, first, last, count */
#define CAT_MWIRE_REC 20u   /* ino, size, chunk count */
#define CAT_MWIRE_ENTRY 36u /* len, id */
/* Record chunk counts that are markers, not counts. */
#define CAT_MWIRE_CHANGED 0xffffffffu /* source changed: no manifest */
#define CAT_MWIRE_ALONE 0xfffffffeu   /* too big here: fetch on its own */
/* Largest count a record may carry inline (markers are above it). */
#define CAT_MWIRE_COUNT_MAX 0xfffffff0u

/* A growing buffer for the encoder. */
struct cat_buf {
	uint8_t *p;
	size_t n, cap;
};

void cat_buf_fini(struct cat_buf *b);
/* Start a body for [first, last] of generation gen (b is reset). */
int cat_mwire_begin(struct cat_buf *b, uint64_t gen, uint64_t first,
		    uint64_t last);
/* Add a record (the header's count follows): count chunks v[0..count),
 * or a marker (CAT_MWIRE_CHANGED, CAT_MWIRE_ALONE) with v NULL. */
int cat_mwire_add(struct cat_buf *b, uint64_t ino, uint64_t size,
		  uint32_t count, const struct cat_chunk *v);

/* ------------------------------------------------------------------ */
/* Signed generations (cat_sign.c; any thread)                        */
/* ------------------------------------------------------------------ */

/*
 * A replicator with a signing key (Ed25519, OpenSSL EVP) signs each
 * generation it publishes with a statement, a small text file
 * (docs/formats.md, "Signed statements"), every line "NAME VALUE\n" in
 * this order and nothing else:
 *
 *   ferry-signed-generation/1
 *   namespace NS            the namespace name
 *   generation G            >= 1
 *   parent P                the generation before it, 0 for none; < G
 *   catalog-digest HEX      cat_digest of the catalog's rows (64 hex)
 *   time T                  when it was signed: seconds since the epoch
 *   key HEX                 SHA-256 of the raw public key (64 hex)
 *   signature HEX           Ed25519 over every byte before this line
 *                           (128 hex)
 *
 * Numbers are decimal without leading zeros, hex is lowercase; anything
 * else is not a statement. Manifest answers are signed apart (their
 * answer's Ferry-Signature header) over cat_sign_manifests' message,
 * which starts with another first line, so neither signature can stand
 * for the other.
 */
#define CAT_STMT_MAGIC "ferry-signed-generation/1"
#define CAT_SIGN_MANIFESTS_MAGIC "ferry-signed-manifests/1"
#define CAT_STMT_MAX 1024u	 /* bytes a statement may have */
#define CAT_SIGN_PUB_LEN 32u	 /* raw Ed25519 public key */
#define CAT_SIGN_SIG_LEN 64u	 /* Ed25519 signature */
#define CAT_SIGN_SIG_HEX_LEN 128 /* the signature in hex, without NUL */
#define CAT_SIGN_NS_MAX 64u	 /* a namespace name (base.h's) */

/* A signing key pair, raw. Wipe it with cat_sign_key_wipe. */
struct cat_sign_key {
	uint8_t priv[32];
	uint8_t pub[CAT_SIGN_PUB_LEN];
};

/* Make a new key pair in dir (created 0700 when missing): dir/sign.key,
 * the private key as PEM (PKCS#8, mode 0600), and dir/sign.pub, the
 * public key as PEM (SubjectPublicKeyInfo, 0644); each written to a
 * temp file, fsynced and linked into place, so a crash leaves no half
 * key. Returns 0, -EEXIST (either file exists: nothing is touched),
 * -EIO (OpenSSL), -errno. Blocking. */
int cat_sign_keygen(const char *dir);

/* Load a private key (PEM, Ed25519; what cat_sign_keygen or `openssl
 * genpkey -algorithm ed25519` writes) into *ret. Returns 0, -ENOENT,
 * -EACCES, -EBADMSG (not an Ed25519 private key), -errno. */
int cat_sign_key_load(const char *path, struct cat_sign_key *ret);

/* Load a public key (PEM "PUBLIC KEY", Ed25519) as raw bytes. Returns 0,
 * -ENOENT, -EACCES, -EBADMSG (not an Ed25519 public key; a private key
 * file is refused too: give its .pub), -errno. */
int cat_sign_pub_load(const char *path, uint8_t ret[CAT_SIGN_PUB_LEN]);

/* Clear a key pair's bytes (OPENSSL_cleanse). */
void cat_sign_key_wipe(struct cat_sign_key *k);

/* A key's id: SHA-256 of its raw public key, 64 lowercase hex + NUL.
 * 0 or -EIO. */
int cat_sign_key_id(const uint8_t pub[CAT_SIGN_PUB_LEN], char ret_hex[65]);

/* One signed statement's fields. */
struct cat_stmt {
	char ns[CAT_SIGN_NS_MAX + 1];
	uint64_t generation;
	uint64_t parent;
	char digest[65]; /* cat_digest of the catalog */
	uint64_t time;	 /* seconds since the epoch */
	char key_id[65]; /* cat_sign_key_id of the signing key */
	uint8_t sig[CAT_SIGN_SIG_LEN];
	size_t signed_len; /* bytes the signature covers (set by parse and
			    * format) */
};

/* Write the statement s into buf[0..cap), signature line included (from
 * s->sig); *ret_len its length. Sets s->signed_len. Checks the fields as
 * cat_stmt_parse does. 0, -EINVAL (a field out of range), -ENOBUFS. */
int cat_stmt_format(struct cat_stmt *s, char *buf, size_t cap, size_t *ret_len);

/* Sign: s->ns, generation, parent, digest and time as given; key_id and
 * sig are set from k; the statement is written as cat_stmt_format does.
 * 0, -EINVAL, -ENOBUFS, -EIO (OpenSSL). */
int cat_stmt_sign(const struct cat_sign_key *k, struct cat_stmt *s, char *buf,
		  size_t cap, size_t *ret_len);

/* Parse buf[0..len) strictly (the format above, at most CAT_STMT_MAX
 * bytes; for bytes from the network) into *ret. Does not check the
 * signature. 0 or -EBADMSG. */
int cat_stmt_parse(const void *buf, size_t len, struct cat_stmt *ret);

/* Parse, then check the signature with pub. 0; -EBADMSG (not a
 * statement); -EKEYREJECTED (the signature does not verify with pub:
 * another key signed it, see ret->key_id, or the bytes were changed),
 * *ret then holds the parsed fields; -EIO. */
int cat_stmt_verify(const void *buf, size_t len,
		    const uint8_t pub[CAT_SIGN_PUB_LEN], struct cat_stmt *ret);

/* The signature of a manifests answer (docs/protocol.md, "Manifests"):
 * Ed25519 over the text
 *   ferry-signed-manifests/1\n namespace NS\n generation G\n
 *   first F\n last L\n body-sha256 HEX\n
 * (one line each, no spaces but the one after each name) where [F, L] is
 * the ino range asked for and HEX the SHA-256 of the body. Into ret_hex:
 * 128 lowercase hex + NUL. 0, -EINVAL, -EIO. */
int cat_sign_manifests(const struct cat_sign_key *k, const char *ns,
		       uint64_t gen, uint64_t first, uint64_t last,
		       const void *body, size_t len,
		       char ret_hex[CAT_SIGN_SIG_HEX_LEN + 1]);

/* Check hex[0..hex_len) is that signature by pub. 0, -EBADMSG (not 128
 * lowercase hex), -EKEYREJECTED (does not verify), -EIO. */
int cat_verify_manifests(const uint8_t pub[CAT_SIGN_PUB_LEN], const char *ns,
			 uint64_t gen, uint64_t first, uint64_t last,
			 const void *body, size_t len, const char *hex,
			 size_t hex_len);

#endif /* FERRY_CATALOG_H */
