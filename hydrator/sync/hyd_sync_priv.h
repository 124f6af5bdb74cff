/*
 * hydrator/sync/hyd_sync_priv.h — what `ferry sync` and `ferry verify`
 * share inside hydrator/: the tree writer (hyd_materialize.c), the per-chunk
 * content check of a file on disk, and the refusal of a DEST that lies in
 * a ferry mount.
 *
 * hyd_sync.c hydrates the store and then hands a context to
 * hyd_sync__materialize; hyd_verify.c reuses the content check. Nothing
 * here touches the network: bytes come from the store (hyd_store_get,
 * which verifies every chunk) and from files on disk.
 */
#ifndef FERRY_HYD_SYNC_PRIV_H
#define FERRY_HYD_SYNC_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/store/hyd_store.h"
#include "hydrator/hydrator.h"

/* FUSE's statfs f_type; every FUSE mount reports it. */
#define HYD_FUSE_SUPER_MAGIC 0x65735546L
/* Temp files of the writer: ".ferry-tmp.NAME.XXXXXX" in the entry's own
 * directory; a later run removes leftovers of a crash by this prefix. */
#define HYD_SYNC_TMP_PREFIX ".ferry-tmp."
/* Directory nesting the writer and verify follow; each level holds one
 * directory fd open, so this also bounds the fds in use. */
#define HYD_SYNC_DEPTH_MAX 256u

/* A chunk hydration gave up on, with why; sorted by id for bsearch. */
struct hyd_sync_dead {
	chunk_id id;
	int err; /* -errno of its last fetch */
};
int hyd_sync__dead_cmp(const void *a, const void *b);

/* ---- pending manifests (hyd_sync_manifest.c) ---- */

/* `ferry sync`'s manifest thread: for a catalog with pending files, it
 * makes their manifests local segment by segment in ino order
 * (hyd_manifest_segment, on a reader of its own), waiting as long as the
 * server answers that it is still hashing, and hands the inos whose
 * manifest became local to the fetching pass, which asks for their
 * chunks. A segment that fails otherwise is skipped (the manifest fetcher
 * logged why; the writer names its files). */
struct hyd_sync_mq;
struct hyd_manifest;

/* Start the thread. man and cat are borrowed until hyd_sync__mq_free
 * (cat is the thread's alone); timeout_ns bounds each try against a
 * server that does not answer. 0 or -errno. */
int hyd_sync__mq_start(struct hyd_manifest *man, cat_reader *cat,
		       uint64_t timeout_ns, struct hyd_sync_mq **ret);

/* Up to cap inos whose manifest became local, into v. With wait set,
 * blocks until there is one or the thread is done. Returns how many; 0
 * (with wait) when the thread is done and everything was taken. */
size_t hyd_sync__mq_pop(struct hyd_sync_mq *q, uint64_t *v, size_t cap,
			int wait);

/* Manifest answers the thread stored so far (manifests and
 * source-changed markers), of those the source-changed markers (files
 * with no manifest: nothing to pop), and segments it gave up on. Any
 * thread. */
uint64_t hyd_sync__mq_answered(struct hyd_sync_mq *q);
uint64_t hyd_sync__mq_changed(struct hyd_sync_mq *q);
uint64_t hyd_sync__mq_failed(struct hyd_sync_mq *q);

/* Ask the thread to stop soon (a fetch in progress ends within about a
 * second); pops then drain what is queued and end. Any thread. */
void hyd_sync__mq_stop(struct hyd_sync_mq *q);

/* Stop, join, free. NULL is a no-op. */
void hyd_sync__mq_free(struct hyd_sync_mq *q);

/* ---- names the reader never hands out (hyd_unsafe.c) ---- */

/* A directory entry of the catalog whose name fails cat_name_check
 * (empty, "." or "..", a '/' or a NUL in it, over CAT_NAME_MAX bytes).
 * cat_readdir skips such an entry, so a walk alone would drop it without
 * a word. */
struct hyd_sync_unsafe_ent {
	uint64_t parent; /* the catalog directory holding it */
	uint8_t *name;	 /* len bytes, as the catalog has them (NUL too) */
	size_t len;
};
struct hyd_sync_unsafe {
	struct hyd_sync_unsafe_ent *v; /* sorted by (parent, pos) */
	size_t n;
};
/* Every such entry of the catalog file at catpath (one scan of its
 * dirent table). 0 or -errno; *ret is empty on failure. */
int hyd_sync__unsafe_scan(const char *catpath, struct hyd_sync_unsafe *ret);
/* How many of them directory dir holds (0: none), from u->v[*ret_first]
 * on. u may be NULL. */
size_t hyd_sync__unsafe_of(const struct hyd_sync_unsafe *u, uint64_t dir,
			   size_t *ret_first);
void hyd_sync__unsafe_free(struct hyd_sync_unsafe *u);

/* ---- verified chunks handed to the writer (hyd_sync_handoff.c) ---- */

/* The fetching pass puts each flight it reaped (verified raw bytes
 * held) here; the writer takes it by id instead of reading the chunk
 * back from the store, which would decode and hash it a second time.
 * Bounded by 8,192 entries and cap_bytes raw bytes. Positions are
 * (ino, offset) in the order both sides go: a full hand-off waits a
 * little for the writer, then drops its oldest entries. */
struct hyd_sync_handoff;
struct hyd_fetch;
struct hyd_flight;
struct hyd_sync_handoff_stats {
	uint64_t put, taken, dropped; /* dropped: full, the oldest */
	uint64_t stale;		      /* behind the writer */
	uint64_t waited, timeouts;    /* puts that waited; waits that ran out */
};

/* f is borrowed (it releases the flights) and must outlive the hand-off.
 * A put into a full hand-off waits up to wait_ns for the writer (0:
 * never). 0 or -ENOMEM. */
int hyd_sync__handoff_new(struct hyd_fetch *f, uint64_t cap_bytes,
			  uint64_t wait_ns, struct hyd_sync_handoff **ret);
/* Give the hand-off the caller's reference on fl (VERIFIED, raw set),
 * first used by the writer at offset off of ino (ino 0: not known; such
 * a put never waits). May wait up to wait_ns for the writer to take one. */
void hyd_sync__handoff_put(struct hyd_sync_handoff *h, struct hyd_flight *fl,
			   uint64_t ino, uint64_t off);
/* The writer is at offset off of ino and needs id: its flight with its
 * reference (raw holds raw_len verified bytes), or NULL when the
 * hand-off does not hold it. Give it back with hyd_sync__handoff_release
 * before the hand-off is freed. */
struct hyd_flight *hyd_sync__handoff_take(struct hyd_sync_handoff *h,
					  const chunk_id *id, uint64_t ino,
					  uint64_t off);
void hyd_sync__handoff_release(struct hyd_sync_handoff *h,
			       struct hyd_flight *fl);
/* The writer lacks a chunk: wait up to ns for a put (or the close). */
void hyd_sync__handoff_wait(struct hyd_sync_handoff *h, long ns);
/* No more puts wait: the fetching pass is over. NULL is a no-op. */
void hyd_sync__handoff_close(struct hyd_sync_handoff *h);
void hyd_sync__handoff_stats(struct hyd_sync_handoff *h,
			     struct hyd_sync_handoff_stats *ret);
/* Release what is left and free. No other thread may use it. NULL is a
 * no-op. */
void hyd_sync__handoff_free(struct hyd_sync_handoff *h);

/* The writer's context: borrowed handles plus the counters it adds to. */
struct hyd_mat {
	cat_reader *cat;	     /* borrowed */
	hyd_store *store;	     /* borrowed */
	uint32_t max_raw;	     /* the catalog's max chunk size */
	const char *dest;	     /* as given, for messages */
	int owners;		     /* set uid/gid */
	struct hyd_sync_result *res; /* files, dirs, ..., failed added here */
	/* Progress: called at most every ~200 ms with the bytes of regular
	 * files checked or written so far (per inode). May be NULL. */
	void (*tick)(void *arg, uint64_t files_done, uint64_t bytes_done);
	void *tick_arg;
	/* Optional: a running fetcher for chunks the store lost (a frame
	 * found corrupt is dropped by hyd_store_get) or never got; NULL when
	 * offline. Bytes from it are verified like the store's. */
	struct hyd_fetch *fetch;
	/* The same for the manifest of a pending file that is still not
	 * local when hydration ended; NULL when offline. */
	struct hyd_manifest *manifest;
	/* The catalog's pending files (its meta); 0: every manifest is in
	 * the catalog, and no file's is waited for or asked about. */
	uint64_t pending;
	uint64_t timeout_ns; /* deadline of such a fetch */
	/* Chunks already fetched and failed twice: not tried a third time,
	 * their files fail at once (borrowed; sorted; may be NULL). */
	const struct hyd_sync_dead *dead;
	size_t ndead;
	/* Files a chunk of which the server refused because the source
	 * changed since the scan (409), by ino (borrowed; sorted; may be
	 * NULL): the rest of their chunks was not asked for; they fail at
	 * once, named once. */
	const uint64_t *stale;
	size_t nstale;
	/* rsync's options (hyd_sync_opts): the filter decides what is
	 * written (paths relative to the transfer root, which are DEST's)
	 * and what --delete may remove; dry_run changes nothing; item gets
	 * every change made or, dry, that would be. */
	const hyd_filter *filter;
	const struct hyd_sync_skip *skip; /* leave-alone rules; may be NULL */
	int delete_extra, ignore_errors, dry_run;
	uint64_t left_out; /* the catalog's: entries the scan left out */
	hyd_sync_item_fn item;
	void *item_arg;
	/* The catalog directory the transfer starts at (CAT_ROOT_INO for
	 * the namespace), and root_name: NULL to write its contents into
	 * DEST, else the name it gets in DEST (a subtree URL without a
	 * trailing slash, rsync's rule). */
	uint64_t root_ino;
	const char *root_name;
	/* The cache directory, for the record of what was written to DEST
	 * (hyd_sync_record.c); NULL: no record, every file is hashed. */
	const char *cache_dir;
	struct hyd_sync_rec *rec; /* the writer's own */
	/* Non-zero (read atomically) while the fetching pass still runs on
	 * another thread: a chunk the store lacks, or a pending manifest not
	 * local yet, is then waited for, not fetched. That pass sets fetch,
	 * manifest, dead, ndead, stale and nstale before it clears this
	 * (release), so they are read only after seeing 0 (acquire). */
	int hydrating;
	/* Verified chunks from the fetching pass (NULL: none); set before
	 * the writer starts, freed after it ends. */
	struct hyd_sync_handoff *handoff;
	/* The catalog's entries with names no directory can take
	 * (hyd_unsafe.c; borrowed, may be NULL): each one below a directory
	 * the walk visits is named on stderr and counted failed. */
	const struct hyd_sync_unsafe *unsafe;
	/* --seed, --link-dest, --copy-dest, --compare-dest dirs (borrowed,
	 * resolved; NULL: none): the writer links, copies or leaves files
	 * a -dest DIR holds (hyd_mat_seed.c). */
	const struct hyd_seed_dir *seeds;
	size_t nseeds;
	/* --chmod, --chown, --usermap, --groupmap; NULL: none */
	const hyd_attrmap *attrmap;
	/* --backup: dir absolute (or NULL); NULL: none. backups counts
	 * what was renamed. */
	const struct hyd_sync_backup *backup;
	uint64_t backups;
	int omit_dir_times; /* -O: not set, not itemized */
	/* A mount's --into (hyd_into.c), all NULL otherwise: while
	 * filling(fill_arg) says 1 (backfill is still fetching), a chunk the
	 * store lacks is waited for as while hydrating; want(fill_arg, ino)
	 * hears of each regular file before it is written, so backfill
	 * takes it next; stop (read atomically) ends the walk early. */
	int (*filling)(void *arg);
	void (*want)(void *arg, uint64_t ino);
	void *fill_arg;
	/* before each entry: pace(pace_arg) may wait (the landing yields
	 * to the mount's readers) */
	void (*pace)(void *arg);
	void *pace_arg;
	const int *stop;
	/* With defer, while filling: a file whose chunks are not all stored
	 * is left for a later pass, nothing of it written (hard-linked ones
	 * are waited for); deferred counts them. */
	int defer;
	uint64_t deferred;
	/* With defer: each file this pass leaves for later is added to
	 * left_in (NULL: none kept). only (NULL: the whole tree): the pass
	 * looks at just these files (those the last pass left), then each
	 * of their directories' metadata; no other entry, nothing deleted.
	 * visited counts the entries the pass looked at. */
	struct hyd_mat_left *left_in;
	const struct hyd_mat_left *only;
	uint64_t visited;
	/* With only: whole (sorted, nwhole numbers), or NULL to look at
	 * every file listed. A listed file not in whole is left again
	 * unlooked at (the placer has not found it whole). */
	const uint64_t *whole;
	size_t nwhole;
	/* --into's placement (NULL: none): a regular file whose part is
	 * whole is renamed in instead of written, and every file written
	 * is told to it */
	struct hyd_place *place;
};
/* --into's placement (hyd_place.c): verified chunks written straight
 * into DIR's files; see there. All functions are thread-safe. */
typedef struct hyd_place hyd_place;
struct hyd_place_stats {
	uint64_t chunks;    /* placed (each once, however many places) */
	uint64_t bytes;	    /* written into parts */
	uint64_t flushes;   /* fdatasync-then-record rounds */
	uint64_t reads;	    /* chunks read back for the store's gets */
	uint64_t adopted;   /* parts renamed into their paths */
	uint64_t forgotten; /* ranges dropped: gone or written over */
	uint64_t pruned;    /* parts of numbers no catalog names */
	uint64_t found;	    /* ranges found in landed files, checked */
};
int hyd_place_open(const char *dir, const char *cache_dir, hyd_place **ret);
/* Records what waits (its callbacks told), then frees. NULL: no-op. */
void hyd_place_close(hyd_place *p);
/* The hooks for hyd_store_set_placer. */
void hyd_place_hook(hyd_place *p, struct hyd_store_placer *ret);
/* Want generation gen's chunks (its catalog at catpath, once per gen),
 * and those of the manifests its overlay (ovpath; NULL or "": none yet)
 * has learned. */
int hyd_place_gen(hyd_place *p, uint64_t gen, const char *catpath,
		  const char *ovpath);
/* The placer's three (hyd_store.h). */
int hyd_place_place(hyd_place *p, const chunk_id *id, const void *raw,
		    size_t len, hyd_store_put_cb cb, void *cb_arg);
int hyd_place_has(hyd_place *p, const chunk_id *id);
int hyd_place_get(hyd_place *p, const chunk_id *id, void *out, size_t cap,
		  size_t *ret_len);
/* ino's part when every range is recorded and reads back right: renamed
 * to dirfd/tmp, 1; 0 when not whole (or a range did not match: it is
 * fetched again); -errno. *ret_from (may be NULL): where its first range
 * not recorded is when not whole, else 0 (every range before it is in
 * DIR: a look at what else holds its chunks can start there). */
int hyd_place_adopt(hyd_place *p, uint64_t ino, uint32_t max_raw, int dirfd,
		    const char *tmp, uint64_t *ret_from);
/* ino's wanted ranges from off from on that are not recorded yet (placed
 * in a round under way included), in offset order, the first max of them:
 * in *ret (malloc'd, free() it; NULL when none), their count in *ret_n.
 * 0, or -errno. */
int hyd_place_unrecorded(hyd_place *p, uint64_t ino, uint64_t from, size_t max,
			 struct cat_chunk **ret, size_t *ret_n);
/* ino is now DIR/relpath (written, adopted or found matching): its
 * ranges are read there, and those not placed are read from it, checked
 * against their ids and recorded (nothing fetches them again). adopted:
 * its part was renamed there (hyd_place_adopt), nothing is left of it.
 * digest: ino's manifest digest as the landing notes it in the sync
 * record, kept with the path so reads can be served from the file
 * (hyd_place_landed_fd); NULL: not noted, not served so. */
void hyd_place_landed_file(hyd_place *p, uint64_t ino, const char *relpath,
			   int adopted, const uint8_t *digest);
/* The placer's landed (hyd_store.h; hyd_place_serve.c): a new read-only
 * fd of ino's file in DIR when it is at the path it landed at, at its
 * size, and the sync record vouches for it, unchanged since it was
 * synced, as holding the manifest digest noted with it, and in *ret_st
 * the fstat that matched the record. 0, -ENOENT (not so), -errno. */
int hyd_place_landed_fd(hyd_place *p, uint64_t ino, uint64_t size, int *ret_fd,
			struct stat *ret_st);
/* Forget the numbers no catalog in cache_dir/catalogs names (their rows,
 * and their parts not landed), remove what else lies in DIR's parts
 * directory without a row, and the directory itself when empty. 0,
 * -ENOENT (no catalog there: nothing removed), -errno. */
int hyd_place_prune(hyd_place *p, const char *cache_dir);
void hyd_place_stats(hyd_place *p, struct hyd_place_stats *ret);
/* Wait until every placement so far is recorded. */
void hyd_place_settle(hyd_place *p);
/* The files found whole (every range recorded) since the last call, in
 * *ret (malloc'd, free() it; may repeat a number); their count. */
size_t hyd_place_take_whole(hyd_place *p, uint64_t **ret);
/* --delete's protection of DIR's HYD_PLACE_PARTS, for the landing and
 * its check. NULL: out of memory. */
hyd_filter *hyd_place_filter(void);

/* 1 when the n bytes at b are all zero (n 0 included). */
int hyd_sync__all_zero(const uint8_t *b, size_t n);
/* One chunk fetched now, at demand priority, within timeout_ns (plus a
 * little slack for the fetcher's verdict): its verified bytes into out
 * (c->len of room). 0 or -errno (-EBADMSG: not the catalog's length). */
struct cat_chunk;
int hyd_sync__fetch_chunk(struct hyd_fetch *f, const struct cat_chunk *c,
			  uint64_t timeout_ns, uint8_t *out);
/* Is a chunk the store lacks to be waited for (hydrating, or filling)? */
int hyd_mat__waiting(const struct hyd_mat *m);
/* Has the walk been told to stop? */
int hyd_mat__stopped(const struct hyd_mat *m);

/* The files a landing pass left for the next, by directory
 * (hyd_mat_left.c): each directory once, by catalog number and path
 * relative to DEST, with the names of its files left, in the order met.
 * At most HYD_MAT_LEFT_MAX files and HYD_MAT_LEFT_BYTES of paths and
 * names; past that overflow is set and the list stops growing (the next
 * pass walks the tree, as it would without a list). Start zeroed.
 * Indices past the end, and the end of a directory's files, are
 * HYD_MAT_LEFT_END. */
#define HYD_MAT_LEFT_MAX (1u << 20)
#define HYD_MAT_LEFT_BYTES (128u << 20)
#define HYD_MAT_LEFT_END ((size_t)-1)
struct hyd_mat_left_dir {
	uint64_t ino;
	size_t path;	    /* offset into bytes */
	size_t first, last; /* its files, or HYD_MAT_LEFT_END */
};
struct hyd_mat_left_file {
	uint64_t ino;
	size_t name, len; /* offset into bytes, length */
	size_t next;	  /* the directory's next, or HYD_MAT_LEFT_END */
};
struct hyd_mat_left {
	struct hyd_mat_left_dir *dirs;
	size_t ndirs, dcap;
	struct hyd_mat_left_file *files;
	size_t nfiles, fcap;
	char *bytes;
	size_t blen, bcap;
	int overflow;
};
/* Add file name (len bytes, number ino) of directory dir_ino at
 * dir_path (its first dir_path_len bytes). *dir_slot: HYD_MAT_LEFT_END
 * for a directory not added yet this pass (set to its index once added),
 * else that index. */
void hyd_mat_left_add(struct hyd_mat_left *l, size_t *dir_slot,
		      uint64_t dir_ino, const char *dir_path,
		      size_t dir_path_len, const char *name, size_t len,
		      uint64_t ino);
const char *hyd_mat_left_path(const struct hyd_mat_left *l, size_t dir);
size_t hyd_mat_left_first(const struct hyd_mat_left *l, size_t dir);
size_t hyd_mat_left_next(const struct hyd_mat_left *l, size_t file);
const char *hyd_mat_left_name(const struct hyd_mat_left *l, size_t file,
			      size_t *ret_len);
void hyd_mat_left_clear(struct hyd_mat_left *l);
void hyd_mat_left_free(struct hyd_mat_left *l);
/* Sort the n numbers of v and drop repeats: how many are left. */
size_t hyd_mat_whole_sort(uint64_t *v, size_t n);
/* Is ino among the n of v (sorted)? */
int hyd_mat_whole_has(const uint64_t *v, size_t n, uint64_t ino);

/* Write the catalog's tree at m->dest (created when missing). Every entry
 * that fails is named on stderr and counted in m->res->failed; the walk
 * goes on. Returns 0, or -errno when DEST itself cannot be opened or the
 * catalog cannot be read at all (one line on stderr). */
int hyd_sync__materialize(struct hyd_mat *m);

/* SHA-256 ids of all-zero chunks by length, so a sparse or zero-filled
 * file is checked with a memcmp instead of a hash per chunk. Start zeroed. */
#define HYD_ZERO_IDS 4u
struct hyd_zero_ids {
	uint32_t len[HYD_ZERO_IDS]; /* 0: slot empty */
	chunk_id id[HYD_ZERO_IDS];
	unsigned next;
};

/* Does the open regular file fd hold exactly the catalog's content of ino
 * (size bytes)? Reads it chunk by chunk from the manifest and compares
 * SHA-256 ids; buf has room for max_raw bytes; zero may be NULL. Returns
 * 1 (matches), 0 (differs, or the manifest does not cover size), -errno
 * (read error; -EBADMSG bad manifest row). Does not look at fd's size
 * beyond size. */
int hyd_sync__file_matches(cat_reader *cat, uint64_t ino, uint64_t size, int fd,
			   uint8_t *buf, uint32_t max_raw,
			   struct hyd_zero_ids *zero);

/* 1 when the mountinfo text (as in /proc/self/mountinfo) has a mount of
 * device dev whose filesystem type is "fuse.ferry", else 0. Pure: tests
 * feed it a fake table. */
int hyd_sync__mountinfo_is_ferry(const char *mountinfo, dev_t dev);

/* Refuse a DEST inside a ferry mount: statfs DEST or its nearest existing
 * parent; when that is a FUSE filesystem, /proc/self/mountinfo decides
 * (an unreadable table counts as a ferry mount: refusing is the safe
 * side). Returns 0 (fine), -EXDEV (inside a ferry mount), -errno. */
int hyd_sync__dest_check(const char *dest);

/* ino -> (a, b, rel) for the inodes of hard-linked entries: the writer
 * keeps where it put the first name (rel, a path relative to DEST,
 * malloc()ed, owned by the map), verify the (st_dev, st_ino) it found. */
struct hyd_inomap_ent {
	uint64_t ino; /* 0: empty slot */
	uint64_t a, b;
	char *rel;
	int written; /* the writer (re)wrote the first name this run */
};
struct hyd_inomap {
	struct hyd_inomap_ent *v;
	size_t n, cap; /* cap: 0 or a power of two */
};
/* The entry of ino, or NULL. */
struct hyd_inomap_ent *hyd_inomap_find(struct hyd_inomap *m, uint64_t ino);
/* Add ino (must be absent, != 0) and return its zeroed entry, or NULL
 * (-ENOMEM). */
struct hyd_inomap_ent *hyd_inomap_add(struct hyd_inomap *m, uint64_t ino);
/* Free the table and every rel. */
void hyd_inomap_fini(struct hyd_inomap *m);

/* ---- rsync's itemized changes (hyd_itemize.c) ---- */

#define HYD_ITEM_LEN 12 /* "YXcstpoguax" and its NUL */
/* 'f', 'd', 'L', 'D' or 'S' for a catalog kind. */
char hyd_item_type(int kind);
/* A new entry: Y, its type, "+++++++++". */
void hyd_item_new(char code[HYD_ITEM_LEN], char y, int kind);
/* An entry DEST has (st, of the same type; dirfd/name reach it for its
 * xattrs, dirfd < 0 skips them): Y, its type, and a letter per attribute
 * that differs from in; content sets 'c'. */
void hyd_item_attrs(struct hyd_mat *m, int dirfd, const char *name,
		    const struct stat *st, const struct cat_inode *in, char y,
		    int content, char code[HYD_ITEM_LEN]);
/* Each catalog xattr of ino against the entry name of dirfd (name NULL:
 * dirfd itself; no symlink followed): cb gets its name, whether the
 * entry has it with the same value, and, when the entry lacks it, the
 * errno of the read (0 otherwise); a non-zero return stops. Used by the
 * itemizer and by verify. 0 or -ENOMEM. */
typedef int (*hyd_xattr_cmp_cb)(void *arg, const char *xname, int same,
				int missing_errno);
int hyd_sync__xattrs_cmp(cat_reader *cat, uint64_t ino, int dirfd,
			 const char *name, hyd_xattr_cmp_cb cb, void *arg);

/* 1 when the code says anything changes (rsync prints only those). */
int hyd_item_changed(const char code[HYD_ITEM_LEN]);
/* Hand one item to m->item (if any): path DEST-relative, "" the root
 * ("./"); a directory gets a trailing '/'. */
void hyd_item_emit(struct hyd_mat *m, const char *code, const char *path,
		   int is_dir, const char *extra, const struct cat_inode *in);

/* ---- what the writer knows it wrote (hyd_sync_record.c) ---- */

struct hyd_sync_rec;
/* SHA-256 over the (off, len, id) rows of ino's manifest, chained over
 * batches of HYD_SYNC_DIGEST_ROWS rows as cat_chunks_range returns them
 * from offset 0 on: a record made by a build with another batch size
 * does not match (the file is then compared, not skipped). */
#define HYD_SYNC_DIGEST_ROWS 64u
#define HYD_SYNC_DIGEST_LEN 32u
int hyd_sync__manifest_digest(cat_reader *cat, uint64_t ino, uint64_t size,
			      uint8_t out[HYD_SYNC_DIGEST_LEN]);
/* One step of it: d = SHA-256(d || rows of cs[0..k)), k at most
 * HYD_SYNC_DIGEST_ROWS (d starts as zero bytes). 0 or -errno. */
int hyd_sync__digest_rows(uint8_t d[HYD_SYNC_DIGEST_LEN],
			  const struct cat_chunk *cs, size_t k);
/* Open (or create) the record of DEST (which must exist) in cache_dir. */
int hyd_sync__rec_open(const char *cache_dir, const char *dest,
		       struct hyd_sync_rec **ret);
/* Open it read-only, beside the writer (only rec_has then); -errno when
 * there is none yet. */
int hyd_sync__rec_open_ro(const char *cache_dir, const char *dest,
			  struct hyd_sync_rec **ret);
/* 1 when the file st (of DEST) is recorded, unchanged, as holding the
 * manifest with this digest. r NULL: 0. */
int hyd_sync__rec_has(struct hyd_sync_rec *r, const struct stat *st,
		      const uint8_t digest[32]);
/* Note a file written or checked this run (its stat after its metadata
 * was set); committed by hyd_sync__rec_commit once DEST is synced. */
void hyd_sync__rec_note(struct hyd_sync_rec *r, const struct stat *st,
			const uint8_t digest[32]);
/* The record becomes this run's notes; with merge they are added to it
 * instead (a --into pass that looked at part of the tree). 0 or -errno. */
int hyd_sync__rec_commit(struct hyd_sync_rec *r, int merge);
void hyd_sync__rec_close(struct hyd_sync_rec *r);

/* ---- --backup (hyd_backup.c) ---- */

/* Before name (at DEST-relative rel) of dirfd is replaced or deleted:
 * with m->backup, a non-directory is renamed to its backup name. 1 when
 * renamed, 0 when there is nothing to back up (or no --backup, or a dry
 * run), -errno. */
int hyd_sync__backup(struct hyd_mat *m, int dirfd, const char *name,
		     const char *rel);

/* ---- --delete (hyd_delete.c) ---- */

/* Remove from the DEST directory fd (DEST-relative path, "" the root)
 * every entry that the catalog directory dir_ino lacks, or whose catalog
 * entry the filter excludes, unless the filter protects it (rsync's
 * receiver side); directories with all they hold, never following a
 * symlink. Each is handed to hyd_item_emit as "*deleting" first; with
 * m->dry_run nothing is removed. Temp names of the writer are left to
 * it. Returns the entries removed (or, dry, that would be); a failure is
 * one warning line, and the walk goes on. */
uint64_t hyd_sync__delete_extra(struct hyd_mat *m, int fd, uint64_t dir_ino,
				const char *path);

/* With --delete, a directory of DEST where the catalog has a file,
 * symlink or special file goes first, with all it holds (rsync deletes it
 * to make way; without --delete the write fails, "a directory is in the
 * way"), unless the filter protects it. rel is its DEST-relative path.
 * Each entry is handed to hyd_item_emit as "*deleting"; dry: nothing is
 * removed. Returns 1 when it went (or would), 0 when there was nothing to
 * do, -errno. */
int hyd_sync__make_way(struct hyd_mat *m, int dirfd, const char *name,
		       const char *rel);

/* ---- subtree and selection (hyd_select.c) ---- */

/* The directory at sub ("a/b", '/'-separated, empty and "." components
 * skipped) below the catalog's root. -ENOENT, -ENOTDIR, -EINVAL ("..").
 */
int hyd_sync__resolve(cat_reader *cat, const char *sub, uint64_t *ret_ino);
/* A single-file source: 1 when sub's last component names a
 * non-directory (its ino, and its name, a pointer into sub), 0 when a
 * directory, -errno (-ENOENT, -ENOTDIR on the way). */
int hyd_sync__resolve_file(cat_reader *cat, const char *sub, uint64_t *ret_ino,
			   const char **ret_name);

/* Regular files the writer will write, by ino (inactive: all of them). */
struct hyd_sync_sel {
	uint8_t *bits;
	uint64_t nbits;
	int active;
};
/* Walk the catalog from root_ino (named root_name in DEST, or NULL: its
 * contents go into DEST) with the filter and the leave-alone rules (skip
 * may be NULL; dest: DEST, whose entries they look at), as the writer
 * will. With a seeder (NULL: none), each file kept is seeded first
 * (hyd_seeder_file, DEST's own file a candidate): one DEST holds with the
 * catalog's size and mtime, or a -dest DIR holds whole, is left out of
 * the set (nothing of it is fetched; the writer checks or copies it).
 * With merge (NULL: none), each directory's merge files are loaded as
 * the walk enters it. */
struct hyd_sync_merge;
int hyd_sync__select(cat_reader *cat, uint64_t root_ino, const char *root_name,
		     const hyd_filter *f, const struct hyd_sync_skip *skip,
		     const char *dest, hyd_seeder *seeder,
		     struct hyd_sync_merge *merge, struct hyd_sync_sel *ret);

/* The seeder of a run (hyd_sync_seed.c): sd NULL when nothing can
 * seed (a dry run, or no seed dirs and an empty or missing DEST). */
struct hyd_sync_seeds {
	hyd_seeder *sd;
	struct hyd_seed_dir *dirs; /* n, paths resolved against DEST */
	char **paths;
	size_t n;
};
int hyd_sync__seeds_open(const struct hyd_sync_opts *o, hyd_store *store,
			 const chunk_params *p, struct hyd_sync_seeds *ret);
void hyd_sync__seeds_close(struct hyd_sync_seeds *s);

/* An entry's mode and owners as DEST is to have them (hyd_attrmap.c). */
struct cat_inode;
void hyd_attrmap_apply(const hyd_attrmap *m, struct cat_inode *in);

/* A stat's mtime in nanoseconds since the epoch, as catalogs keep it. */
int64_t hyd_sync__mtime_ns(const struct stat *st);
/* Any of skip's rules set? */
int hyd_sync__skip_active(const struct hyd_sync_skip *skip);
/* 1 when rsync's rules leave in as DEST has it: dst is DEST's entry of
 * that name (lstat), or NULL when there is none (hyd_select.c). */
int hyd_sync__skip(const struct hyd_sync_skip *skip, const struct cat_inode *in,
		   const struct stat *dst);
/* --size-only: 1 when in is a regular file and DEST's dst one of its
 * size (its content is taken as is). */
int hyd_sync__size_same(const struct hyd_sync_skip *skip,
			const struct cat_inode *in, const struct stat *dst);
int hyd_sync__sel_has(const struct hyd_sync_sel *s, uint64_t ino);
/* The set of ino alone. 0 or -ENOMEM. */
int hyd_sync__sel_one(struct hyd_sync_sel *s, uint64_t ino);
void hyd_sync__sel_free(struct hyd_sync_sel *s);

/* rsync's wildmatch (hyd_wild.c): 1 when text matches pattern whole. */
int hyd_wild(const char *pattern, const char *text);

/* A map from strings to pointers (hyd_pathset.c). Zeroed is empty. */
struct hyd_pathset_slot {
	char *key; /* NULL: an empty slot */
	void *val;
};
struct hyd_pathset {
	struct hyd_pathset_slot *v;
	size_t cap, n;
};
/* [p, p + n) -> val. 0 added, 1 already there (val not replaced),
 * -ENOMEM. */
int hyd_pathset_put(struct hyd_pathset *s, const char *p, size_t n, void *val);
/* The val of [p, p + n), NULL when absent. */
void *hyd_pathset_get(const struct hyd_pathset *s, const char *p, size_t n);
/* Free the keys, and each val with free_val (NULL: not); s is empty. */
void hyd_pathset_free(struct hyd_pathset *s, void (*free_val)(void *));
/* Each line of path ("-": standard input) to fn, its end (\n, \r\n, or
 * with from0 the NUL) cut; blank lines go, and without from0 so do ';'
 * and '#' comments, as rsync's readers skip them. 0, or the first -errno
 * (fn's, or the file's with *why set). */
int hyd_each_line(const char *path, int from0,
		  int (*fn)(void *arg, const char *line, const char **why),
		  void *arg, const char **why);

/* The per-directory merge files of the filter's dir-merge rules
 * (hyd_sync_merge.c): read from the source as the select walk enters
 * each directory, and loaded into the filter before any entry of that
 * directory is judged. */
struct hyd_manifest;
struct hyd_fetch;
struct hyd_sync_merge {
	hyd_filter *f;
	cat_reader *cat;
	hyd_store *store;
	struct hyd_fetch *fetch;       /* NULL: the store alone (offline) */
	struct hyd_manifest *manifest; /* NULL: none (nothing pending, or
					* offline) */
	int pending;		       /* the catalog has pending files */
	uint32_t max_raw;
	uint64_t timeout_ns;
	uint64_t files, bytes; /* merge files read */
};
/* Largest per-directory merge file read. */
#define HYD_SYNC_MERGE_MAX (1u << 20)
/* Load the merge files of catalog directory dir (at path, relative to
 * the transfer root, "" for it). 0, or -errno after an error line
 * (-EINVAL: a file with a bad rule). */
int hyd_sync__merge_dir(struct hyd_sync_merge *mg, uint64_t dir,
			const char *path);

/* A batch of one directory's catalog entries, copied out of cat_readdir
 * (whose callbacks may not call the reader), resumable from last_pos. */
struct hyd_dirent_copy {
	struct cat_inode in;
	uint64_t pos;
	size_t len;
	char name[CAT_NAME_MAX + 1]; /* NUL-terminated: names hold no NUL */
};
struct hyd_dirbatch {
	struct hyd_dirent_copy *e; /* cap entries */
	size_t n, cap;
	uint64_t last_pos;
};
/* cat_dirent_cb filling a hyd_dirbatch; stops (1) when it is full. */
int hyd_sync__batch_cb(void *ctx, const void *name, size_t len,
		       const struct cat_inode *in, uint64_t pos);

/* Each entry of catalog directory dir, in order, with its name pushed
 * onto path while fn runs (copied out of the reader in batches, so fn may
 * use the reader and walk below). fn's negative return stops the walk
 * and is returned; a name path cannot take is skipped and -ENOMEM
 * returned at the end. 0, or -errno (the catalog read failed). */
typedef int (*hyd_dir_each_fn)(void *arg, const struct hyd_dirent_copy *e);
int hyd_sync__dir_each(cat_reader *cat, uint64_t dir, struct base_path *path,
		       hyd_dir_each_fn fn, void *arg);

#endif
