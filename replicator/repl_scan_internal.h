/*
 * replicator/repl_scan_internal.h — the pieces of the scanner below the
 * walk (repl_scan_file.c): a file's chunk manifest (bounded memory, spills
 * to an unlinked temp file), reading and chunking one regular file, and
 * collecting an inode's extended attributes. All on the scanning thread.
 */
#ifndef FERRY_REPL_SCAN_INTERNAL_H
#define FERRY_REPL_SCAN_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "catalog/catalog.h"

/* Manifest entries kept in memory before spilling (48 bytes each). */
#define REPL_MANIFEST_MEM 16384u
/* Read window for file data; at least 2 * max chunk size. */
#define REPL_READ_WINDOW (4u * 1024u * 1024u)

struct repl_manifest {
	struct cat_chunk *v;
	size_t n;
	int spill_fd;	   /* -1 until first needed */
	uint64_t spilled;  /* entries in the spill file */
	char *spill_dir;   /* where the spill file is created */
};

int repl_manifest_init(struct repl_manifest *m, const char *spill_dir);
void repl_manifest_fini(struct repl_manifest *m);
void repl_manifest_reset(struct repl_manifest *m);
int repl_manifest_add(struct repl_manifest *m, uint64_t off, uint32_t len,
		      const chunk_id *id);

/* Call cb for every entry in order; stops at (and returns) a negative cb
 * result. */
typedef int (*repl_manifest_cb)(void *ctx, const struct cat_chunk *c);
int repl_manifest_each(struct repl_manifest *m, repl_manifest_cb cb,
		       void *ctx);

/* One reader of file data: the window buffer is reused across files. */
struct repl_file_reader {
	chunk_params p;
	uint8_t *buf;
	size_t cap;
	const atomic_int *cancel;
};

int repl_file_reader_init(struct repl_file_reader *fr, const chunk_params *p,
			  const atomic_int *cancel);
void repl_file_reader_fini(struct repl_file_reader *fr);

/* Read fd from its start to EOF, chunking into m (reset first). *ret_total
 * is the number of bytes read. Returns 0, -ECANCELED, -errno of read, -EIO
 * (hashing failed), -ENOMEM. */
int repl_file_chunk(struct repl_file_reader *fr, int fd,
		    struct repl_manifest *m, uint64_t *ret_total);

/* Extended attributes of one inode, collected before its row is written. */
struct repl_xattr {
	char *name; /* NUL-terminated */
	void *value;
	size_t value_len;
};

struct repl_xattrs {
	struct repl_xattr *v;
	size_t n, cap;
};

void repl_xattrs_clear(struct repl_xattrs *x);

/* Collect all readable xattrs: through fd when fd >= 0, else through
 * path with the l* calls (symlinks are not followed). ENOTSUP, EPERM and
 * EACCES mean "none"; a name that vanishes between list and get is
 * skipped; values above CAT_XATTR_VALUE_MAX are skipped.
 * Returns 0, -ENOENT (the inode vanished), -ENOMEM, -errno. */
int repl_xattrs_collect(struct repl_xattrs *x, int fd, const char *path);

#endif
