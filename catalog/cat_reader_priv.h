/*
 * catalog/cat_reader_priv.h — what the two halves of the catalog
 * reader share: cat_reader.c (open, checks, inodes, names, xattrs) and
 * cat_reader_chunks.c (manifests: the catalog's own chunk rows, pending
 * files and the destination's manifest overlay). Not for other rooms.
 */
#ifndef FERRY_CAT_READER_PRIV_H
#define FERRY_CAT_READER_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include <sqlite3.h>

#include "catalog/catalog.h"

struct cat_reader {
	pthread_mutex_t mu;
	sqlite3 *db;
	struct cat_meta meta;
	int version; /* PRAGMA user_version: 1 or 2 */
	sqlite3_stmt *st_getattr, *st_lookup, *st_readdir, *st_xattr_get,
	    *st_xattr_list, *st_range, *st_each;
	/* format 2: is an ino pending (its manifest is published later) */
	sqlite3_stmt *st_pending;
	sqlite3_stmt *st_pending_each; /* (ino, kind, size) of a range */
	/* the manifest overlay ("m"), once attached */
	int overlay;
	sqlite3_stmt *st_m_state, *st_m_range, *st_m_each, *st_m_missing;
	/* cat_reader_snapshots: the longest a read transaction is kept,
	 * and when the open one began (open: the connection is out of
	 * autocommit; nothing else here begins a transaction) */
	uint64_t snap_max, snap_at;
};

/* Integer column within [lo, hi]; any other type fails (-EBADMSG). */
int cat__col_int(sqlite3_stmt *st, int col, int64_t lo, int64_t hi,
		 int64_t *ret);
/* sqlite3_step as 1 (row), 0 (done) or -errno. */
int cat__step(cat_reader *r, sqlite3_stmt *st, const char *what);
/* Reset and clear the bindings. */
void cat__done(sqlite3_stmt *st);
int cat__reader_lock(cat_reader *r);
/* getattr with the reader locked; the caller calls cat__done on
 * r->st_getattr afterwards. */
int cat__getattr_locked(cat_reader *r, uint64_t ino, struct cat_inode *ret,
			const void **ret_target);

/* Finalize the statements of cat_reader_chunks.c (at close). */
void cat__chunks_fini(cat_reader *r);
/* End the snapshot, if one is open (lock held). 1 when one was. */
int cat__snap_end(cat_reader *r);

#endif
