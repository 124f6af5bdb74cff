/*
 * hydrator/hydrator.h — the destination side of ferry, as a library.
 *
 * This is the one public header of hydrator/: what tools/ (the `ferry`
 * command) may call, and what every room of hydrator/ may include. The
 * mount itself is the ferry-hydrator program (hydrator/hyd_main.c). Here:
 *   - the names a tool shares with the program: the URL rule, the default
 *     cache directory, the mount's FUSE source, the cache's catalogs
 *     (pure computation, or a read of the cache directory);
 *   - status (status/): from the cache's files, or asked of the running
 *     hydrator over its control socket — file and socket I/O, bounded by
 *     a timeout;
 *   - sync and verify (sync/): whole runs, blocking, with network and
 *     disk I/O, logging each failed entry.
 * Each function says what it touches. Conventions as in catalog.h: 0 on
 * success, -errno on failure; every function may be called from any
 * thread unless it says otherwise.
 */
#ifndef FERRY_HYDRATOR_H
#define FERRY_HYDRATOR_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define HYD_URL_MAX 2048u     /* bytes in a base URL */
#define HYD_TOKEN_MAX 256u    /* bytes of a bearer token */
#define HYD_TRUST_PUB_LEN 32u /* a raw Ed25519 public key (catalog.h's) */

/* How a client proves itself to the server and checks the server: what
 * the hydrator, ferry sync and ferry status send with every request.
 * Filled once from the command line before any request, then read-only;
 * borrowed by everything that makes requests. A zeroed struct (or NULL
 * where one is taken) means the system's CAs, no client certificate, no
 * token. */
struct hyd_creds {
	const char *ca_file; /* --ca-file: trust these CAs (PEM), not the
			      * system's; NULL: the system's */
	const char *cert;    /* --cert: client certificate (PEM) for mutual
			      * TLS; NULL: none */
	const char *key;     /* --key: its private key (PEM); NULL: in cert */
	char token[HYD_TOKEN_MAX + 1]; /* --token-file's token; "": none.
					* Sent as "Authorization: Bearer",
					* never logged */
	/* where hyd_creds_opt keeps the absolute paths of the three files
	 * (a daemon changes its directory to / before its first request) */
	char path_buf[3][PATH_MAX];
	/* --trust-key: the replicator's public key file (ferry keygen's
	 * sign.pub); NULL: generations are taken unsigned. With it, only
	 * a generation whose signed statement verifies with the key, names
	 * this URL's namespace and is not older than one already seen is
	 * installed, and only signed manifests answers are stored
	 * (docs/protocol.md, "Signed generations"). */
	const char *trust_key;
	uint8_t trust_pub[HYD_TRUST_PUB_LEN]; /* the key, read by
					       * hyd_creds_opt */
	/* Every request goes to this Unix socket, whatever the URL's host
	 * (the local end of the ssh transport's forward, hyd_ssh); NULL:
	 * TCP to the URL's host */
	const char *unix_socket;
};

/* ---- ssh as a transport (hyd_ssh.c) ---- */

struct hyd_ssh_opts {
	const char *rsh;	  /* -e/--rsh: ssh's command line (words
				   * split on blanks, '...' and "..."
				   * group); NULL: $FERRY_RSH, else ssh */
	const char *remote_ferry; /* --remote-ferry: ferry-replicator's
				   * path on HOST; NULL: its name */
	unsigned ready_timeout_s; /* 0: no limit (a big tree's walk takes
				   * minutes; ssh ending ends the wait) */
	unsigned rescan_s;	  /* the replicator rescans PATH this often (its
				   * --rescan-interval; ferry sync --watch's poll);
				   * 0: never (it publishes what it found at start) */
	int detach;	/* a mount's: ssh in its own session (no hang-up from
			 * the terminal; no password prompt either) */
	int serve_last; /* a mount's: the replicator serves the generation
			 * its state holds at once, then walks (--serve-last):
			 * the mount is up before the walk ends and switches
			 * to what the walk finds at its next poll */
};

struct hyd_ssh {
	char dest[256];	     /* [USER@]HOST as ssh is given it */
	uint16_t port;	     /* 0: ssh's own (its config's) */
	char path[PATH_MAX]; /* PATH on HOST ("." for HOST:) */
	char ns[24];	     /* the namespace served: s + 16 hex */
	char url[64];	     /* http://localhost/v1/NS */
	char dir[96];	     /* the local socket's private directory */
	char sock[104];	     /* the local end of the forward */
	int pid;	     /* ssh, while this process is its parent */
	int to_fd, from_fd;  /* ssh's standard input and output */
	int local;	     /* hyd_local_start's: no ssh */
	int file;	     /* PATH named a file: its directory is served,
			      * url + "/" + its name is the source */
};

/* 1 when s names a source over ssh: ssh://[USER@]HOST[:PORT]/PATH, or
 * [USER@]HOST:PATH with no '/' before the first ':' (rsync's rule) and
 * no "//" after it (SCHEME://... is a URL). */
int hyd_ssh_source(const char *s);

/* Start ssh to src's host with the replicator serving src's PATH for this
 * client alone (its state kept on the host, under
 * ~/.cache/ferry/ssh/), and wait for it to be ready: then s->url is the
 * URL to fetch and s->sock the socket to set as hyd_creds.unix_socket.
 * ssh's own messages go to standard error. 0, or -errno with a line in
 * err (nothing left running). */
int hyd_ssh_start(const char *src, const struct hyd_ssh_opts *o,
		  struct hyd_ssh *s, char *err, size_t errcap);

/* A local directory as a source (`ferry sync /src /dst`): the same
 * session as hyd_ssh_start's without ssh: ferry-replicator (beside this
 * program, else on PATH; o->remote_ferry overrides) started here, serving
 * dir on a Unix socket in a private directory, its state kept in
 * $XDG_CACHE_HOME/ferry/local/ or ~/.cache/ferry/local/. Returns as
 * hyd_ssh_start. */
int hyd_local_start(const char *dir, const struct hyd_ssh_opts *o,
		    struct hyd_ssh *s, char *err, size_t errcap);

/* End the session (the remote replicator stops), reap ssh if this
 * process started it, remove the local socket. Idempotent. */
void hyd_ssh_stop(struct hyd_ssh *s);

/* Read the token of a token file into c->token: its first line without
 * the line end, 1..HYD_TOKEN_MAX bytes of [A-Za-z0-9._~+/=-]. On failure
 * writes one human line (no newline, without the token) into errbuf and
 * returns -ENOENT, -EACCES, -EINVAL (no token, or a malformed one),
 * -errno. */
int hyd_creds_token_load(struct hyd_creds *c, const char *path, char *errbuf,
			 size_t errcap);

/* The credential options every client program takes, as getopt_long
 * codes (above any short option and any program's own codes):
 *   --ca-file FILE   --cert FILE   --key FILE   --token-file FILE
 *   --trust-key FILE (not ferry status's: it installs nothing) */
enum {
	HYD_OPT_CA_FILE = 0x1000,
	HYD_OPT_CERT,
	HYD_OPT_KEY,
	HYD_OPT_TOKEN_FILE,
	HYD_OPT_TRUST_KEY,
};
#define HYD_CREDS_LONGOPTS                                                     \
	{"ca-file", required_argument, NULL, HYD_OPT_CA_FILE},                 \
	    {"cert", required_argument, NULL, HYD_OPT_CERT},                   \
	    {"key", required_argument, NULL, HYD_OPT_KEY},                     \
	    {"token-file", required_argument, NULL, HYD_OPT_TOKEN_FILE},       \
	{                                                                      \
		"trust-key", required_argument, NULL, HYD_OPT_TRUST_KEY        \
	}
/* The --help lines of those options. */
#define HYD_CREDS_HELP                                                         \
	"      --ca-file FILE    trust the CAs in FILE (PEM) for https\n"      \
	"                        instead of the system's\n"                    \
	"      --cert FILE       client certificate (PEM) for a server that\n" \
	"                        asks for one (mutual TLS)\n"                  \
	"      --key FILE        its private key (PEM), when not in --cert\n"  \
	"      --token-file FILE send the token in FILE (its first line)\n"    \
	"                        with every request (Authorization: Bearer)\n" \
	"      --trust-key FILE  take only generations signed by this key\n"   \
	"                        (PEM, ferry keygen's sign.pub), never an\n"   \
	"                        older one than already seen\n"

/* Take credential option code with its argument into c. 1 when code is
 * one of them and was taken, 0 when it is not one of them, -1 after one
 * error line on stderr (a file that cannot be read, a malformed token,
 * a trust key that is not an Ed25519 public key: a usage error). The
 * token and the trust key are read here; the other files are only
 * checked to be readable (curl reads them per connection) and kept as
 * absolute paths in c->path_buf. */
int hyd_creds_opt(struct hyd_creds *c, int code, const char *arg);

/* A mount's source in /proc/self/mountinfo (its FUSE fsname) is this
 * prefix followed by the absolute cache directory it serves, escaped by
 * the kernel like every mountinfo field (\040 for a space...): how
 * `ferry status MOUNTPOINT` finds the cache. The type is "fuse.ferry". */
#define HYD_FSNAME_PREFIX "ferry:"

/* Check a hydrator URL, "http[s]://HOST[:PORT]/v1/NAME" (one trailing '/'
 * allowed), with curl's URL parser: scheme http or https, a host, no
 * user:password, query or fragment, path exactly /v1/NAME with NAME a
 * namespace name ([A-Za-z0-9._-]{1,64}, not starting with '.').
 * On success writes the normalized base URL (curl's spelling, no trailing
 * '/') into ret_base and NAME into ret_name.
 * On failure writes one human line (no newline) into errbuf and returns
 * -EINVAL (bad URL), -ENAMETOOLONG (a buffer is too small) or -ENOMEM. */
int hyd_url_parse(const char *url, char *ret_base, size_t base_cap,
		  char *ret_name, size_t name_cap, char *errbuf, size_t errcap);

/* The default cache directory of a mount of base_url (as returned by
 * hyd_url_parse) of namespace name:
 *   as root:    /var/cache/ferry/NAME-H
 *   otherwise:  $XDG_CACHE_HOME/ferry/NAME-H, else $HOME/.cache/ferry/NAME-H
 * where H is the first 12 hex digits of SHA-256(base_url). Only computes
 * the path; creates nothing. Returns 0, -ENOENT (neither XDG_CACHE_HOME nor
 * HOME is set, non-root), -ENAMETOOLONG, -EIO. */
int hyd_cache_dir_default(const char *base_url, const char *name, char *buf,
			  size_t cap);

/* The generation a catalog file name in CACHEDIR/catalogs names: "GEN.db"
 * with GEN decimal, 1 or more, no leading zero; 0 for any other name. */
uint64_t hyd_cache_catalog_gen(const char *name);

/* The manifest overlay beside a catalog (catalog.h, "pending manifests"):
 * catpath ".../GEN.db" gives ".../GEN.overlay.db" into buf. Only computes
 * the path. Returns 0, -EINVAL (catpath does not end in ".db"),
 * -ENAMETOOLONG. */
int hyd_cache_overlay_path(const char *catpath, char *buf, size_t cap);

/* The newest catalog a cache directory holds: its path into path (may be
 * NULL) and its generation into *ret_gen (may be NULL). Returns 0,
 * -ENOENT (none, or no catalogs/ at all), -ENAMETOOLONG, -errno. */
int hyd_cache_catalog_newest(const char *cache_dir, char *path, size_t cap,
			     uint64_t *ret_gen);

/* ------------------------------------------------------------------ */
/* Status (hyd_status.c): what is hydrated, how fast, how long to go.  */
/* ------------------------------------------------------------------ */

enum hyd_state {
	HYD_STATE_BROWSING = 0,	   /* mounted, backfill off or not started */
	HYD_STATE_BACKFILLING = 1, /* workers are fetching the rest */
	HYD_STATE_COMPLETE = 2,	   /* every chunk of the catalog is stored */
	HYD_STATE_STALLED = 3,	   /* backfill cannot progress: last_error */
	HYD_STATE_STOPPED = 4,	   /* no hydrator running on this cache */
};

/* "browsing", "backfilling", "complete", "stalled", "stopped". */
const char *hyd_state_name(enum hyd_state s);

struct hyd_status {
	enum hyd_state state;
	char url[HYD_URL_MAX]; /* base URL the cache was filled from */
	char last_error[256];  /* empty when none */
	long pid;	       /* running hydrator, 0 when none */
	uint64_t generation;   /* the catalog served (the newest cached) */
	int64_t switched_at;   /* seconds since the epoch when the mount began
				* to serve it (mounted, or switched to it in
				* place); 0: unknown */
	uint64_t files_total, files_hydrated; /* regular files; a file is
					       * hydrated when its manifest is
					       * local and all its chunks are
					       * stored (empty files are) */
	uint64_t bytes_total, bytes_hydrated; /* logical file bytes */
	uint64_t chunks_total, chunks_stored; /* distinct chunk ids of the
					       * manifests that are local */
	uint64_t unique_bytes_total;	      /* raw bytes of distinct chunks */
	uint64_t unique_bytes_stored;
	/* Pending files of a format 2 catalog (0 for others): all of them,
	 * those whose manifest answer is local (in the overlay), and of
	 * those the ones without a manifest because their source changed
	 * before it was hashed (never hydrated in this generation). Until
	 * manifests_local == manifests_total the chunk totals leave the
	 * missing manifests' chunks out, and the state is not complete. */
	uint64_t manifests_total, manifests_local, manifests_changed;
	uint64_t rest_bytes;			/* frame bytes in volumes */
	uint64_t wire_bytes;			/* bytes received, all runs */
	uint64_t mismatches, retries, failures; /* this run (0 offline) */
	double rate_now, rate_avg;		/* wire bytes/s (0 offline) */
	int64_t eta_s;				/* -1 unknown */
	double elapsed_s;			/* this run (0 offline) */
	/* The link as the running hydrator's requests see it (0 unknown
	 * or offline): the least time from a request sent to its first
	 * byte lately, and the most bytes a second it received lately;
	 * what sizes a sequential reader's readahead window. */
	double link_rtt_ms, link_rate;
	/* --prefetch (ferry-hydrator): "" none given, else "planning",
	 * "running" or "done" (every range asked for, and landed or
	 * failed); the files the
	 * traces name and of them those skipped (gone, or changed since
	 * the trace), their ranges and raw bytes, and of those how many
	 * were asked for so far (or found stored). */
	char prefetch[12];
	uint64_t prefetch_files, prefetch_skipped;
	uint64_t prefetch_ranges, prefetch_ranges_done;
	uint64_t prefetch_bytes, prefetch_bytes_done;
	/* --into DIR (ferry-hydrator): "" none, "landing" (a pass is
	 * writing DIR) or "landed" (DIR holds the generation served whole);
	 * from the cache alone (no hydrator running), "landed" or "behind"
	 * (DIR holds an older generation); DIR; the generation DIR holds
	 * whole (0 none yet), the one being written (0 none), and the
	 * entries the last pass could not write. */
	char into[12];
	char into_dir[HYD_URL_MAX];
	uint64_t into_generation, into_landing, into_failed;
	/* --cache-max (ferry-hydrator; 0 from the cache alone): the bound
	 * (0: none) and the frame bytes pinned; since this run started,
	 * the frame bytes evicted and the chunk lookups of reads that hit
	 * (decoded cache or store) and missed (fetched); the capacity
	 * tier's bound and frame bytes (--cold-dir; 0: none); 1 when the
	 * walk stopped at the bound; the regular files --pin and ferry pin
	 * name, and their bytes. */
	uint64_t cache_max, cache_pinned, cache_evicted;
	uint64_t cache_hits, cache_misses;
	uint64_t cold_max, cold_bytes, cache_full;
	uint64_t pin_files, pin_bytes;
};

/* Fill *ret from a cache directory's files alone (catalog + state.db, read
 * only; works while a hydrator runs and when none does: state is then
 * STOPPED unless complete). Returns 0, -ENOENT (no catalog in it), -errno. */
int hyd_status_from_cache(const char *cache_dir, struct hyd_status *ret);

/* Ask the hydrator running on cache_dir over its control socket
 * (CACHEDIR/control.sock) for live status, falling back to
 * hyd_status_from_cache when none answers. Returns 0 or -errno. */
int hyd_status_query(const char *cache_dir, struct hyd_status *ret);

/* How far the source's background hashing is (the replicator's
 * GET BASE/stats "hashing" object, docs/protocol.md). */
struct hyd_source_hashing {
	char state[16]; /* "none", "hashing", "done", "stopped" */
	uint64_t files, files_done, bytes, bytes_done, changed;
	double rate;  /* bytes/s */
	double eta_s; /* seconds left at that rate */
};

/* Ask the replicator at base_url (the cache's URL) how far its hashing
 * is, with creds (may be NULL); at most about 2 s. Initializes libcurl if
 * nobody has. Returns 0, -EHOSTUNREACH / -ETIMEDOUT and the like
 * (base_curl_errno), -EPROTO (not 200), -EBADMSG (no hashing object, an older
 * replicator, or a state word other than none, hashing, done, stopped),
 * -ENOMEM. */
int hyd_source_hashing(const char *base_url, const struct hyd_creds *creds,
		       struct hyd_source_hashing *ret);

/* Stable JSON for machines, one line, no trailing newline. Keys:
 * state, url, last_error, pid, generation, switched_at (a UTC time
 * "YYYY-MM-DDTHH:MM:SSZ", or null), files_total, files_hydrated,
 * bytes_total, bytes_hydrated, chunks_total, chunks_stored,
 * unique_bytes_total, unique_bytes_stored, manifests_total,
 * manifests_local, manifests_changed, rest_bytes, wire_bytes,
 * dedup_savings_bytes (bytes_total - unique_bytes_total),
 * compression_savings_bytes (unique_bytes_stored - rest_bytes),
 * mismatches, retries, failures, rate_now, rate_avg, eta_s, elapsed_s,
 * link_rtt_ms, link_rate.
 * Counters are integers (at most INT64_MAX), the doubles reals with
 * 3 decimals, url and last_error strings made by base_json_bytes (valid
 * UTF-8 unchanged, other bytes as the text \xNN). Written through jansson
 * (base_json_line) into buf, NUL-terminated. Returns the length, or
 * -ENOBUFS when the line does not fit in cap - 1 bytes, -ENOMEM; buf is
 * then "" (when cap > 0). Any thread. */
int hyd_status_json(const struct hyd_status *st, char *buf, size_t cap);

/* The same line with one more key, source_hashing: null when src is NULL
 * (unknown), else an object of src's fields (state, files, files_done,
 * bytes, bytes_done, changed as integers; rate and eta_s as reals). What
 * `ferry status --json` prints. */
int hyd_status_json_source(const struct hyd_status *st,
			   const struct hyd_source_hashing *src, char *buf,
			   size_t cap);

/* ------------------------------------------------------------------ */
/* Garbage collection (hyd_gc.c): `ferry gc`                           */
/* ------------------------------------------------------------------ */

struct hyd_gc_result {
	uint64_t catalogs;	/* catalog files whose chunks were kept */
	uint64_t live;		/* distinct chunk ids they name */
	uint64_t dropped;	/* chunks dropped from the store */
	uint64_t dropped_bytes; /* their bytes at rest, given back */
	uint64_t kept;		/* chunks left in the store */
	double elapsed_s;
	int by_daemon; /* the hydrator running on the cache collected */
};

/* Drop from cache_dir's store every chunk that no catalog kept in
 * CACHEDIR/catalogs names, and give their space back. With a hydrator
 * running on the cache, asked of it over the control socket (it collects
 * between two generation switches, so nothing it serves is dropped); else
 * done here, holding the cache's lock. Blocking (a scan of the store and
 * the catalogs). Returns 0, -EBUSY (the cache is in use by a process that
 * does not answer, e.g. `ferry sync`), -ENOENT (no cache there), -errno;
 * the failure is logged. */
int hyd_gc(const char *cache_dir, struct hyd_gc_result *ret);

/* `ferry pin` (hyd_pin.c): ask the hydrator running on cache_dir to pin
 * path (from the tree's root, literal; a directory pins all below it):
 * recorded in CACHEDIR/pins, then fetched in full and never evicted.
 * 0, or -errno with one line for people in err (nobody answers, the
 * hydrator refused). */
int hyd_pin(const char *cache_dir, const char *path, char *err, size_t cap);

/* ------------------------------------------------------------------ */
/* Sync and verify (hyd_sync*.c, hyd_verify.c)                         */
/* ------------------------------------------------------------------ */

/* Include/exclude rules with rsync's meanings (hyd_filter.c; the subset
 * docs/man/ferry.1 lists). Built on one thread, then read-only. */
typedef struct hyd_filter hyd_filter;
hyd_filter *hyd_filter_new(void); /* NULL: out of memory */
void hyd_filter_free(hyd_filter *f);
/* --exclude PAT (include 0) or --include PAT (1); a "- " or "+ " prefix
 * overrides. --filter RULE. --exclude-from / --include-from FILE ("-":
 * standard input; blank lines and ';' or '#' comments skipped). Each
 * returns 0, or -errno with *why saying what is wrong. */
int hyd_filter_pattern(hyd_filter *f, int include, const char *pat,
		       const char **why);
int hyd_filter_rule(hyd_filter *f, const char *rule, const char **why);
int hyd_filter_file(hyd_filter *f, int include, const char *path,
		    const char **why);
/* --files-from FILE ("-": standard input; from0: NUL-separated, else
 * one path per line, blank lines and ';' or '#' comments skipped): only
 * the paths it names (relative to the source) and the directories above
 * them are transferred; with recursive (-r given), everything below a
 * named directory too. Checked after the rules. 0 or -errno with *why. */
int hyd_filter_files_from(hyd_filter *f, const char *path, int from0,
			  int recursive, const char **why);
/* Was --files-from given (the source is then the base of the paths,
 * whatever its trailing slash)? */
int hyd_filter_has_list(const hyd_filter *f);
/* --delete-excluded: + and - rules stop protecting DEST's entries. */
void hyd_filter_delete_excluded(hyd_filter *f);
size_t hyd_filter_count(const hyd_filter *f);
/* -C (--cvs-exclude): rsync's per-directory ".cvsignore" rule (":C")
 * and its CVS-ignore list (perishable defaults, ~/.cvsignore,
 * $CVSIGNORE), after the rules so far; call it after the last. 0 or
 * -errno with *why. */
int hyd_filter_cvs(hyd_filter *f, const char **why);
/* The dir-merge rules' file names (": NAME", -F's ".rsync-filter"):
 * the sync reads the source's file of each name in each directory it
 * walks and loads it before it judges the directory's entries. */
size_t hyd_filter_merges(const hyd_filter *f);
const char *hyd_filter_merge_name(const hyd_filter *f, size_t i);
/* Rules of merge i's file in directory dir ("" the transfer root, else
 * "a/b"), text [text, text + len); a directory loaded twice keeps the
 * first. 0 or -errno with *why (-EINVAL: a bad rule). */
int hyd_filter_merge_load(hyd_filter *f, size_t i, const char *dir,
			  const char *text, size_t len, const char **why);
/* Forget what was loaded (a new run reads the files again). */
void hyd_filter_merge_reset(hyd_filter *f);
/* 1 when path (relative to the transfer root, "a/b", no leading '/') is
 * excluded from the transfer (deleting 0) or protected from deletion
 * (deleting 1; 2 inside a directory being deleted, where perishable
 * rules do not count). f NULL: 0. */
int hyd_filter_excluded(const hyd_filter *f, const char *path, int is_dir,
			int deleting);

/* ---- ferry-hydrator --into DIR (hyd_into.c) ---- */

/* CACHEDIR/HYD_INTO_STATE's DIR (into dir, cap bytes) and generation
 * (hyd_status.c). 0, -ENOENT (no --into here), -EINVAL (not one). */
int hyd_into_state_read(const char *cache_dir, char *dir, size_t cap,
			uint64_t *ret_gen);

/* What the cache directory keeps of it: "dir=DIR" and "generation=N",
 * the generation DIR holds whole (written atomically after DIR's syncfs). */
#define HYD_INTO_STATE "into.state"
/* Written by `ferry finish` before it detaches the mount ("generation=N"):
 * the hydrator drops its store's files when it exits. */
#define HYD_INTO_FINISHED "finished"
/* Made by `ferry finish` when DIR differs from the generation it holds:
 * the landing writes that generation again, then removes it. */
#define HYD_INTO_RELAND "into.reland"

/* --into's placement (hyd_place.c): the record of the chunks written
 * straight into DIR's files, in the cache directory, and DIR's directory
 * of files being filled (gone once a generation lands whole). */
#define HYD_PLACE_DB "into.db"
#define HYD_PLACE_PARTS ".ferry-into"
/* After `ferry finish`: remove both (DIR holds the tree). 0. */
int hyd_place_drop(const char *cache_dir, const char *dir);

typedef struct hyd_into hyd_into;
struct hyd_manifest;
struct hyd_fetch;

/* A generation to land, from the mount (its files stay while the
 * caller's reference, released by release(), does). */
struct hyd_into_gen {
	uint64_t generation;
	const char *catpath;
	const char *ovpath;	       /* "" or NULL: no overlay */
	struct hyd_manifest *manifest; /* NULL: none */
	void *ref;		       /* the caller's */
};

struct hyd_into_config {
	const char *dir;	 /* DIR, absolute (copied) */
	const char *cache_dir;	 /* the mount's (copied): the record of what
				  * was written, and HYD_INTO_STATE */
	struct hyd_store *store; /* borrowed */
	struct hyd_fetch *fetch; /* borrowed: chunks backfill did not get */
	uint64_t timeout_ns;	 /* a fetch's deadline */
	int owners;		 /* set uid/gid */
	/* The mount's current generation, with a reference: 0, or -errno
	 * (none yet). */
	int (*current)(void *arg, struct hyd_into_gen *ret);
	void (*release)(void *arg, struct hyd_into_gen *g);
	/* 1 while backfill still fetches the current generation (a chunk
	 * the store lacks is then waited for); NULL: never */
	int (*filling)(void *arg);
	/* the writer is about to write regular file ino: fetch it first;
	 * NULL: none */
	void (*want)(void *arg, uint64_t ino);
	void *arg;
};

enum hyd_into_state {
	HYD_INTO_LANDING = 1, /* a pass is writing DIR (or will retry) */
	HYD_INTO_LANDED = 2,  /* DIR holds the current generation whole */
};

struct hyd_into_stats {
	enum hyd_into_state state;
	uint64_t landed;  /* the generation DIR holds whole, 0: none yet */
	uint64_t landing; /* the one being written */
	uint64_t files;	  /* regular files of the last pass's tree */
	uint64_t failed;  /* entries the last pass could not write */
	char last_error[256];
};

/* Set up (reads HYD_INTO_STATE: a generation DIR already holds is not
 * written again). No thread yet. 0, -EINVAL, -ENAMETOOLONG, -ENOMEM. */
int hyd_into_new(const struct hyd_into_config *c, hyd_into **ret);
/* Start the landing thread (after any fork). 0 or -errno. */
int hyd_into_start(hyd_into *in);
void hyd_into_stats(hyd_into *in, struct hyd_into_stats *ret);
/* Stop the thread (a pass in progress ends at its next entry) and free.
 * NULL is a no-op. */
void hyd_into_free(hyd_into *in);
/* `ferry finish`'s check (hyd_into_check.c): DIR against the newest
 * catalog of cache_dir, as a dry run of the landing with --delete would
 * see it; each difference is named on stderr and counted in *ret_diffs.
 * Cheap for what the landing wrote (its record: a stat per entry). An
 * info line every 10 s says how far it is, and one at the end what it
 * checked. 0 or -errno. */
int hyd_into_check(const char *cache_dir, const char *dir, uint64_t *ret_diffs);

/* One change `ferry sync` makes (or, with dry_run, would make), for -i and
 * -v: code is rsync's 11-character itemized string ("*deleting" for a
 * deletion), path DEST-relative ("./" for the root, dirs end in '/'),
 * extra "" or " -> TARGET" (symlink) or " => FIRST" (hard link). Called
 * on the writing thread. */
/* The entry's attributes as the source has them (after --chmod and the
 * id maps), for --out-format's %l %M %B %U %G; NULL for a deletion. */
struct hyd_item_attrs {
	uint64_t size; /* regular file, symlink: bytes; else 0 */
	int64_t mtime_ns;
	uint32_t mode, uid, gid;
};
typedef void (*hyd_sync_item_fn)(void *arg, const char *code, const char *path,
				 const char *extra,
				 const struct hyd_item_attrs *attrs);

struct hyd_trace; /* the traces section below */

/* rsync's rules for what ferry sync leaves as DEST has it (--existing,
 * --ignore-existing, -u, --max-size, --min-size); all 0: none. */
struct hyd_sync_skip {
	int existing;	     /* create nothing DEST lacks (of any kind: a
			      * directory not there is not entered) */
	int ignore_existing; /* update no non-directory DEST has */
	int update;	     /* -u: leave a non-directory DEST has with a
			      * newer mtime than the source's */
	uint64_t max_size;   /* regular files larger are left (0: none) */
	uint64_t min_size;   /* and smaller */
	int size_only;	     /* --size-only: a regular file DEST has with
			      * the source's size counts as up to date (its
			      * times and modes are still set) */
};

/* rsync's --chmod, --chown, --usermap, --groupmap (hyd_attrmap.c): the
 * modes and owners DEST's entries get, from the catalog's. */
typedef struct hyd_attrmap hyd_attrmap;
int hyd_attrmap_new(hyd_attrmap **ret); /* takes the umask now */
/* Add rsync's --chmod items (D/F prefixes, octal or chmod(1)'s symbolic
 * form), --usermap/--groupmap (user 1/0) FROM:TO lists, or --chown's
 * USER:GROUP. 0, -EINVAL (bad syntax), -ENOENT (a name unknown here). */
int hyd_attrmap_chmod(hyd_attrmap *m, const char *spec);
int hyd_attrmap_ids(hyd_attrmap *m, int user, const char *spec);
int hyd_attrmap_chown(hyd_attrmap *m, const char *spec);
int hyd_attrmap_active(const hyd_attrmap *m);
void hyd_attrmap_free(hyd_attrmap *m);

/* Local data as a seed (hyd_seed.c): files already on this machine (an
 * older copy of the tree, a previous checkpoint) whose chunks are taken
 * from there instead of from the wire. Every chunk taken is verified by
 * its SHA-256 against the catalog before it is stored; a file is read
 * only when the store lacks some of its chunks (or, for the -dest kinds,
 * when its size and mtime match and its content is checked whole). */
enum hyd_seed_how {
	HYD_SEED_CHUNKS = 0, /* --seed: chunks only */
	HYD_SEED_COMPARE,    /* --compare-dest: a whole match is not written */
	HYD_SEED_COPY,	     /* --copy-dest: a whole match is copied here */
	HYD_SEED_LINK,	     /* --link-dest: ... hard linked when its
			      * attributes match too, else copied */
};
struct hyd_seed_dir {
	const char *path; /* DIR: a candidate of catalog path P is DIR/P */
	enum hyd_seed_how how;
};
/* What seeding did, for --stats and the mount's log. */
struct hyd_seed_stats {
	uint64_t files_read;	/* candidate files read */
	uint64_t bytes_read;	/* their bytes read */
	uint64_t chunks_seeded; /* verified chunks stored from them */
	uint64_t bytes_seeded;	/* their raw bytes */
	uint64_t put_failed;	/* verified chunks the store did not take */
};
typedef struct hyd_seeder hyd_seeder;
struct hyd_store;
struct chunk_params;
struct cat_reader;
struct cat_inode;
/* dest: DEST, whose files seed their own path (NULL: none); dirs
 * (borrowed until free, like dest; absolute paths) in the order they
 * are tried; p the catalog's chunk parameters (a seed is cut as the
 * source cut). Returns 0, -EINVAL, -ENOMEM. */
int hyd_seeder_new(struct hyd_store *store, const struct chunk_params *p,
		   const char *dest, const struct hyd_seed_dir *dirs,
		   size_t ndirs, hyd_seeder **ret);
/* Seed one regular file of the catalog (in, at catalog path rel: DEST's
 * path for a sync). Returns what it still needs from the wire:
 * HYD_SEED_FETCH (what the store lacks), HYD_SEED_DEST (DEST's file has
 * the catalog's size and mtime) or HYD_SEED_DIR (a -dest DIR's has):
 * nothing is fetched for those, the writer checks them; HYD_SEED_LATER:
 * its manifest is not local yet and a candidate exists, so its path is
 * kept for hyd_seeder_again. -errno for a store or catalog failure (a
 * candidate that cannot be read is skipped, never an error). One thread
 * at a time per seeder. */
#define HYD_SEED_FETCH 0
#define HYD_SEED_DEST 1
#define HYD_SEED_DIR 2
#define HYD_SEED_LATER 3
int hyd_seeder_file(hyd_seeder *sd, struct cat_reader *cat,
		    const struct cat_inode *in, const char *rel);
/* A file whose manifest came: seeded as by hyd_seeder_file when it was
 * LATER (never LATER again), else HYD_SEED_FETCH at once. */
int hyd_seeder_again(hyd_seeder *sd, struct cat_reader *cat,
		     const struct cat_inode *in);
/* Every regular file below the catalog's root, with hyd_seeder_file,
 * then the LATER ones as their manifests come: the mount's seeding,
 * before backfill. stop (read atomically) ends it early. 0 or -errno. */
int hyd_seeder_tree(hyd_seeder *sd, struct cat_reader *cat, const int *stop);
/* Wait until every chunk put so far is durable; 0 or the first put's
 * -errno. */
int hyd_seeder_finish(hyd_seeder *sd);
void hyd_seeder_stats(const hyd_seeder *sd, struct hyd_seed_stats *ret);
/* Finishes first. NULL is a no-op. */
void hyd_seeder_free(hyd_seeder *sd);

/* rsync's --backup (hyd_backup.c): what a sync replaces or deletes is
 * renamed first. */
struct hyd_sync_backup {
	const char *suffix; /* "~" by default, "" with dir */
	const char *dir;    /* --backup-dir (a relative one is DEST's, made
			     * absolute by hyd_sync); NULL: beside the file */
};

struct hyd_sync_opts {
	/* http[s]://HOST[:PORT]/v1/NAME[/SUB/DIR[/]]: a subtree with
	 * rsync's trailing-slash rule (SUB/DIR/ writes its contents into
	 * DEST, SUB/DIR writes DEST/DIR); the namespace's root always
	 * writes its contents into DEST. */
	const char *url;
	const char *dest;      /* directory to create or update */
	const char *cache_dir; /* NULL: hyd_cache_dir_default */
	unsigned jobs;	       /* parallel connections, 0: default 8 */
	long timeout_s;	       /* per chunk fetch deadline, 0: default 30 */
	int owners;	       /* set uid/gid: < 0 when root (the CLI's
				* default), 0 never, > 0 always */
	/* Progress, called from the syncing thread at most ~5 times a second
	 * and once at the end; may be NULL. */
	void (*progress)(void *arg, const struct hyd_status *st);
	void *progress_arg;
	/* NULL: everything; the run loads the source's per-directory
	 * merge files into it (hyd_filter_merge_load) */
	hyd_filter *filter;
	int delete_extra;  /* --delete: remove what the source lacks */
	int ignore_errors; /* --ignore-errors: delete even after errors */
	int dry_run;	   /* -n: change nothing, fetch no chunk */
	uint64_t bwlimit;  /* wire bytes/s, 0: none */
	int cacheable;	   /* GET only, packs (ferry-hydrator --cacheable) */
	hyd_sync_item_fn item; /* NULL: no item reports */
	void *item_arg;
	const struct hyd_creds *creds; /* https CAs, client cert, token;
					* NULL: none */
	/* --prefetch: the traces' ranges (files unchanged since) are
	 * fetched first, in order, then the rest; borrowed; NULL/0: none */
	const struct hyd_trace *const *traces;
	size_t ntraces;
	struct hyd_sync_skip skip; /* rsync's leave-alone rules */
	/* --seed, --link-dest, --copy-dest, --compare-dest, in the order
	 * tried (a relative path is DEST's, as rsync's); borrowed. */
	const struct hyd_seed_dir *seeds;
	size_t nseeds;
	const hyd_attrmap *attrmap; /* NULL: modes and owners as the source's */
	const struct hyd_sync_backup *backup; /* NULL: no backups */
	int omit_dir_times; /* -O: directories' mtimes are not set (also
			     * with a backup that has no dir: rsync's) */
};

struct hyd_sync_result {
	uint64_t generation;			  /* of the catalog synced */
	uint64_t files, dirs, symlinks, specials; /* entries in the tree */
	uint64_t files_written;	 /* regular files (re)written this run */
	uint64_t bytes_written;	 /* their bytes */
	uint64_t chunks_fetched; /* this run */
	/* of them, written from memory as the fetching pass verified them
	 * (not read back from the store, which decodes and hashes again) */
	uint64_t chunks_handed;
	/* put in the hand-off and pushed out before the writer took them:
	 * it was full and no room came in time (or the put may not wait) */
	uint64_t chunks_dropped;
	uint64_t wire_bytes;	/* this run */
	uint64_t logical_bytes; /* regular file bytes in the tree */
	uint64_t unique_bytes;	/* raw bytes of distinct chunks */
	uint64_t rest_bytes;	/* frame bytes of those chunks at rest */
	double elapsed_s;
	uint64_t failed;       /* entries that could not be reproduced */
	uint64_t vanished;     /* of those: the source changed or went away */
	uint64_t deleted;      /* entries removed from DEST (--delete) */
	uint64_t files_linked; /* hard linked from a --link-dest DIR */
	uint64_t files_copied; /* copied from a --copy-dest (--link-dest) DIR */
	uint64_t files_compared; /* left out: a --compare-dest DIR has them */
	uint64_t backups;	 /* entries renamed by --backup */
	int dest_created; /* DEST was not there (a dry run: would be made) */
	struct hyd_seed_stats seed; /* what DEST and the seeds gave */
	int deletions_skipped; /* --delete skipped: errors, or the scan left
				* entries out */
	int gave_up_err; /* -errno of the fetch that made the run give up on
			  * the server (64 failures in a row), else 0 */
	int dest_err;	 /* -ENOSPC, -EDQUOT or -EROFS when DEST or the
			  * cache could not take more (an entry failed, or
			  * verified chunks could not be stored), else 0 */
};

/* Call first in main, before any thread exists. Fetched frames are
 * decoded, verified and stored on libuv's thread pool, all but four of
 * its threads for backfill's batch frames. The pool gets HYD_POOL_THREADS
 * threads unless UV_THREADPOOL_SIZE is set. Measured while a landing
 * thread still waited for its group to be durable (so threads set the
 * group size): the bench tree over loopback, backfill 3.5-4.5 s with 4,
 * 2.3 s with 8; the medium tree at 1 Gbit/s, 13.1-14.2 s with 8,
 * 11.2-12.2 s with 16, about the same with 32. With async puts, a
 * 1 Gbit/s `ferry sync` took 15.1-15.8 s with 4 threads or 16 alike; 16
 * is kept. */
#define HYD_POOL_THREADS 16
void hyd_pool_default(void);

/* Hydrate everything of url into the store (same store and fetcher as the
 * mount, no FUSE) and write a plain tree at dest identical to the source:
 * files to a temp name then renamed, modes, mtimes, owners (opts->owners),
 * symlinks never followed, hard links, xattrs, empty directories,
 * directory times set last. Files already correct (size, mtime, content
 * per the catalog) are not rewritten; stored chunks are not fetched again.
 * dest inside a ferry mount, or a name that would escape dest, is refused.
 * Each entry that fails is named on stderr and counted in ret->failed.
 * Returns 0 (ret->failed may still be > 0), or -errno for a failure of the
 * whole run (with one line on stderr). */
int hyd_sync(const struct hyd_sync_opts *opts, struct hyd_sync_result *ret);

/* The generation the server at url (a sync URL, subtree or not) serves
 * now: for `ferry sync --watch`. 0 or -errno; errbuf gets one line. */
int hyd_sync_head(const char *url, const struct hyd_creds *creds,
		  uint64_t *ret_gen, char *errbuf, size_t errcap);

/* Re-hash everything in a cache's store (path is a CACHEDIR), or compare a
 * materialized tree against a catalog (path is a DEST, catalog_path the
 * catalog it was made from). Mismatches are named on stderr.
 * Returns the number of mismatches (0 = all good) or -errno. */
int hyd_verify_cache(const char *cache_dir, uint64_t *ret_checked);
int hyd_verify_tree(const char *dest, const char *catalog_path,
		    uint64_t *ret_checked);

/* ------------------------------------------------------------------ */
/* traces: a job's first reads (trace/, docs/formats.md "Traces")      */
/* ------------------------------------------------------------------ */

/* A mount records the order in which its files and byte ranges are first
 * read (CACHEDIR/HYD_TRACE_REC_NAME, by ino, for the generation it
 * mounted); `ferry trace export` turns that into a trace file: paths, not
 * inos, so it serves any later mount of the same namespace, and each
 * file's size and mtime, so a replay skips files that changed since. The
 * previous mount's record is kept as HYD_TRACE_PREV_NAME. */
#define HYD_TRACE_REC_NAME "trace.rec"
#define HYD_TRACE_PREV_NAME "trace.prev.rec"
#define HYD_TRACE_MAGIC "ferry-trace 1"
/* Bounds of what a trace file may hold (and a record keeps) */
#define HYD_TRACE_MAX_FILES (1u << 22)
#define HYD_TRACE_MAX_RANGES (1u << 22)
#define HYD_TRACE_LINE_MAX 16384u

struct hyd_trace_file {
	char *path;	  /* relative to the tree's root, no leading '/',
			   * components checked like catalog names */
	uint64_t size;	  /* the file as it was read */
	int64_t mtime_ns; /* ditto */
};

struct hyd_trace_range {
	uint32_t file;	   /* index into files */
	uint32_t t_ms;	   /* first read, ms after the mount started */
	uint64_t off, len; /* len >= 1, off + len <= the file's size */
};

struct hyd_trace {
	uint64_t generation; /* the generation the reads were of */
	struct hyd_trace_file *files;
	size_t nfiles, capfiles;
	struct hyd_trace_range *ranges; /* in the order of first reads */
	size_t nranges, capranges;
};

/* Parse a trace file's bytes (untrusted: every field bounded, every path
 * checked, the "end" line required). 0 with *ret filled (the caller's to
 * hyd_trace_free), or -EBADMSG with one line (no newline) in why naming
 * the line and what is wrong, -ENOMEM. */
int hyd_trace_parse(const char *buf, size_t len, struct hyd_trace *ret,
		    char *why, size_t cap);
/* Read and parse the trace file at path ("-": standard input). Errors as
 * hyd_trace_parse, plus -errno of the read (why says so). */
int hyd_trace_load(const char *path, struct hyd_trace *ret, char *why,
		   size_t cap);
/* Write t in the trace file format to fd. 0 or -errno. */
int hyd_trace_write(int fd, const struct hyd_trace *t);
void hyd_trace_free(struct hyd_trace *t);

/* hyd_trace_export's flags */
#define HYD_TRACE_PREVIOUS 1 /* the previous mount's record */
#define HYD_TRACE_READS_ONLY                                                   \
	2 /* leave out the files the mount pushed into                         \
	   * the kernel's cache (counted as read by                            \
	   * default: the job's reads of them never                            \
	   * reached the mount) */

/* The trace of cache_dir's record: its reads resolved to paths with the
 * newest catalog of the cache, ranges of one file merged where they touch
 * (the merged range keeps the earliest time and place), reads of inos the
 * catalog has no regular file for dropped. -ENOENT (no record), -EBADMSG
 * (why says), -errno. */
int hyd_trace_export(const char *cache_dir, int flags, struct hyd_trace *ret,
		     char *why, size_t cap);

#endif
