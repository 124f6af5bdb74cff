/*
 * hydrator/sync/hyd_place_priv.h — the pieces of --into's placement
 * (hyd_place.c: writing chunks and answering for them; hyd_place_land.c:
 * files renamed in and found in DIR; hyd_place_gen.c: the record's rows
 * per generation and their pruning). Nothing outside them includes it.
 *
 * Locking: mu guards the SQLite connection, the fd cache, the pending
 * round and the counters; it is never held across a write, a read or a
 * sync of a part (an fd in use is held by refs instead).
 */
#ifndef FERRY_HYD_PLACE_PRIV_H
#define FERRY_HYD_PLACE_PRIV_H

#include <pthread.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hydrator/sync/hyd_sync_priv.h"

#define NFD 64		/* part fds kept open */
#define MAX_PLACES 4096 /* places one chunk is written to at most */
#define BUSY_MS 60000
#define IMPORT_NS 200000000ull
#define ROUND_NS 200000000ull /* a flush round gathers this long */
/* the landing's transaction ends after this many files or this long */
#define LAND_TX_FILES 512u
#define LAND_TX_NS 200000000ull

struct pfd {
	uint64_t ino;
	int fd; /* -1: empty */
	int rw;
	unsigned refs;
	uint64_t used;
};

struct pend {
	uint64_t ino, off, xxh;
	uint32_t len;
};

/* The chunks of a flush round: written, not recorded yet. Their puts are
 * answered at once (the fetcher goes on while the disk catches up), and
 * has/get find them here until their rows commit. Open addressing; the
 * hole id (never placed) marks a free slot. */
#define IDSET_CAP (1u << 14)
struct idslot {
	chunk_id id;
	uint64_t ino, off, xxh;
	uint32_t len;
};
struct idset {
	struct idslot *v; /* IDSET_CAP */
	uint32_t n;
};

/* Where a file's look for a range not yet recorded goes on: every range
 * it wants below off is recorded (hyd_place__look). A file's ranges come
 * over many rounds and passes, so its rows are scanned about once in
 * all, not once a look (a count a look made a big file's cost grow with
 * its chunks times the rounds it spans, under mu). Direct-mapped by ino, so a
 * miss (or a collision) costs one scan from the start, never a wrong answer; a
 * forget of the file's ranges, a new generation and a prune drop it. */
#define NHINT 4096u
struct whint {
	uint64_t ino, off;
	int used;
};

struct pcb {
	hyd_store_put_cb cb;
	void *arg;
};

struct hyd_place {
	char dir[4096];
	int dirfd;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sqlite3 *db;
	sqlite3_stmt *st_want, *st_find, *st_ins, *st_part, *st_forget,
	    *st_setpath, *st_ranges, *st_setdigest, *st_landed, *st_missing,
	    *st_nmissing, *st_unrecorded;
	/* hyd_place_serve.c: the sync record, read-only (its own lock) */
	char cache_dir[4096];
	pthread_mutex_t rec_mu;
	struct hyd_sync_rec *rec;
	uint64_t rec_tried; /* base_now_ns of the last failed open */
	struct pfd fds[NFD];
	uint64_t clock;
	struct pend *pend;
	size_t npend, cpend;
	struct pend *fl_pend; /* the round the flusher syncs and records */
	size_t fl_npend;
	struct pcb *cbs;
	size_t ncb, ccb;
	int stop, started;
	int ov_attached;    /* the current generation's overlay, as ov */
	uint64_t ov_gen;    /* its generation */
	char ov_path[4096]; /* "": none */
	/* test hook FERRY_PLACE_RECORD_DELAY_MS: the flusher waits this
	 * long between the data's sync and its record */
	unsigned record_delay_ms;
	unsigned warned;
	int recheck;	      /* ranges recorded by an earlier run: read back */
	uint64_t last_import; /* base_now_ns */
	uint64_t round_at;    /* base_now_ns when the last round's sync began */
	unsigned settling;    /* hyd_place_settle callers waiting */
	int in_round;	      /* the flusher is syncing and recording one */
	unsigned land_n; /* files in the landing's open transaction (0: none) */
	uint64_t land_at; /* base_now_ns when it began */
	pthread_t th;
	/* files whose every range is recorded since the landing last took
	 * them (hyd_place_take_whole); may repeat */
	uint64_t *whole;
	size_t nwhole, cwhole;
	struct hyd_place_stats st;
	struct idset cur, flushing; /* this round's chunks, and the last's */
	struct whint hint[NHINT];   /* note_whole's, under mu */
};

/* hyd_place.c */
/* Wait until what is placed now (not what comes after) is recorded: the
 * round the flusher is in, and the one gathering, without the gather's
 * wait. Under mu (waits on cv). */
void hyd_place__rounds_wait(hyd_place *p);
/* Log a failure of the record (once, with SQLite's words) and map it. */
int hyd_place__db_err(hyd_place *p, int rc, const char *what);
/* 0 or -errno; ends the landing's transaction first */
int hyd_place__exec(hyd_place *p, const char *sql);
/* Commit the landing's open transaction, if any, before any other
 * transaction, ATTACH or DETACH on the connection. Under mu. */
void hyd_place__land_tx_end(hyd_place *p);
/* DIR-relative name of ino's part. */
void hyd_place__part_name(uint64_t ino, char *buf, size_t cap);
/* The slot of ino's fd, opened when needed; refs taken (the caller drops
 * them under mu). rw: for placing (only a part, made at its size when
 * missing). -ENOENT: none (or, rw, the file is landed already), -EMFILE
 * (every slot in use), -errno. Under mu. */
int hyd_place__fd_get(hyd_place *p, uint64_t ino, int rw, int *ret_slot);
/* Close ino's fds not in use (its file moved or went). Under mu. */
void hyd_place__fd_drop(hyd_place *p, uint64_t ino);
/* Record n ranges whose bytes are on disk, in one transaction. 0 or
 * -errno (none recorded). Under mu. */
int hyd_place__record(hyd_place *p, const struct pend *v, size_t n);
/* Forget ino's range at off (off < 0: all of them). Under mu. */
void hyd_place__forget(hyd_place *p, uint64_t ino, int64_t off);
/* Whether ino is whole, from its hint on. Under mu. 0 or -EIO. */
struct hyd_place_look {
	int wants;	  /* it has ranges to place */
	int landed;	  /* at its path already */
	int lacks;	  /* a range it wants is not recorded: */
	uint64_t missing; /* the first such, else 0 */
	int whole;	  /* wants, lacks none, not landed */
};
int hyd_place__look(hyd_place *p, uint64_t ino, struct hyd_place_look *ret);
/* Drop every file's hint (want or placed rows went). Under mu. */
void hyd_place__hints_clear(hyd_place *p);

/* hyd_place_gen.c */
/* The manifests the mount learned since the last look (at most every
 * IMPORT_NS unless force). 1 when any came, 0, -errno. Under mu. */
int hyd_place__import_locked(hyd_place *p, int force);

#endif
