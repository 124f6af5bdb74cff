/*
 * replicator/serve/repl_serve.h — the serve room's face: the running
 * replicator as ferry-replicator starts it. One libuv loop serves every
 * namespace over HTTP/1.1 (TLS with --tls-cert), scans and rescans them on
 * a worker, hashes pending files in the background and reads chunks from
 * the source on the thread pool (repl_serve_priv.h has the server's
 * insides; tokens are repl_auth.h, the namespaces list repl_nslist.h).
 */
#ifndef FERRY_REPL_SERVE_H
#define FERRY_REPL_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "catalog/httpd/httpd.h"

/* Who may GET /metrics (--metrics). */
enum repl_metrics_access {
	REPL_METRICS_AUTO = 0, /* LOOPBACK with --tokens, else OPEN */
	REPL_METRICS_OPEN,     /* anyone who can connect */
	REPL_METRICS_LOOPBACK, /* clients on 127.0.0.0/8 or ::1 only */
	REPL_METRICS_OFF,      /* 404 */
};

/* Parse a --metrics word (open, loopback, off). 0 or -EINVAL. */
int repl_metrics_access_parse(const char *s, enum repl_metrics_access *ret);

/* Connection limits' defaults (ferry-replicator(1), LIMITS): the
 * shared layer's table of every server's limits has them. */
#define REPL_HEADER_TIMEOUT_DEFAULT_S                                          \
	((unsigned)(HTTPD_LIMITS_REPLICATOR.header_ms / 1000))
#define REPL_IDLE_TIMEOUT_DEFAULT_S                                            \
	((unsigned)(HTTPD_LIMITS_REPLICATOR.idle_ms / 1000))
#define REPL_MAX_CONNS_DEFAULT ((unsigned)HTTPD_LIMITS_REPLICATOR.max_conns)
#define REPL_PER_ADDR_DEFAULT ((unsigned)HTTPD_LIMITS_REPLICATOR.per_addr)
#define REPL_INFLIGHT_DEFAULT_MIB (HTTPD_LIMITS_REPLICATOR.inflight_max >> 20)

/* Generations kept when --keep-generations is not given. */
#define REPL_KEEP_GENS_DEFAULT 3u

/* Options the program hands to the server. */
/* -l unix:PATH: a Unix domain socket at PATH instead of HOST:PORT */
#define REPL_LISTEN_UNIX "unix:"

struct repl_server_opts {
	const char *listen; /* HOST:PORT (httpd_listen_split's rule), or
			     * unix:PATH */
	/* --session: serve while standard input stays open (the ssh
	 * channel that started it): "ready" on standard output once every
	 * namespace is, and a clean stop at its end of file */
	int session;
	/* --serve-last: serve the generation the state holds at once, then
	 * walk (the walk publishes the next one if the tree changed) */
	int serve_last;
	/* --rehash: every chunk read to be served is hashed again, even
	 * from a file that is what the walk saw (repl_reread.c) */
	int rehash;
	const char *state_dir;
	enum frame_policy policy;
	unsigned scan_threads;	    /* repl_scan_opts.threads */
	int hash_first;		    /* --hash-before-publish */
	unsigned hash_delay_ms;	    /* test hook: FERRY_HASH_DELAY_MS */
	unsigned rescan_interval_s; /* --rescan-interval; 0: off */
	unsigned keep_gens;	    /* --keep-generations; 0: the default */
	/* --tls-cert, --tls-key (both or neither) and --client-ca */
	const char *tls_cert, *tls_key, *tls_client_ca;
	/* --header-timeout, --idle-timeout (seconds), --max-conns,
	 * --max-conns-per-addr; 0: the default (per_addr: -1 for none) */
	unsigned header_timeout_s, idle_timeout_s;
	size_t max_conns;
	long per_addr;
	size_t inflight_mib;		  /* --max-inflight; 0: the default */
	const char *tokens_path;	  /* --tokens FILE; NULL: none */
	const char *sign_key;		  /* --sign-key FILE; NULL: unsigned */
	enum repl_metrics_access metrics; /* --metrics; AUTO: the default */
	/* Test hook (unit tests): called on a hashing thread once a file is
	 * open, before its bytes are read (repl_hasher_opts.opened). */
	void (*hash_opened)(void *ctx, const char *path);
	void *hash_opened_ctx;
	/* the namespaces to start with: the first n_args came as NAME=DIR
	 * arguments, the rest from ns_file (--namespaces; NULL: none) */
	size_t n_ns, n_args;
	const char *const *ns_names;
	const char *const *ns_dirs;
	const char *ns_file;
};

struct repl_server;

/* Set up a server: the loop, the namespaces, bind and listen. Every
 * failure is logged here, as one error line with its context (the caller
 * only exits). Returns 0 with *ret set, or -errno (*ret NULL). */
int repl_server_new(const struct repl_server_opts *o, struct repl_server **ret);

/* Scan the namespaces one after the other and serve until SIGINT/SIGTERM;
 * SIGHUP and the rescan interval scan them again. Returns 0 after a clean
 * shutdown. */
int repl_server_run(struct repl_server *srv);

/* Free a server after run (NULL: no-op). */
void repl_server_free(struct repl_server *srv);

#endif
