/*
 * replicator/repl_main.c — ferry-replicator: command line, defaults, the
 * logger's level, and handing over to the server. Exit status: 0 clean
 * shutdown, 1 runtime failure (cannot listen, cannot start), 2 bad
 * arguments. Every message is one line through the base logger.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "catalog/httpd/httpd.h"
#include "replicator/publish/repl_publish.h"
#include "replicator/serve/repl_auth.h"
#include "replicator/serve/repl_nslist.h"
#include "replicator/serve/repl_serve.h"

#define PROG "ferry-replicator"
#define DEFAULT_LISTEN "127.0.0.1:8700"
#define ROOT_STATE_DIR "/var/lib/ferry-replicator"
/* long-only options (above every short option letter) */
#define OPT_METRICS 0x200
#define OPT_PUBLISH 0x201
#define OPT_SESSION 0x202
#define OPT_SERVE_LAST 0x203
#define OPT_REHASH 0x204
#define PUBLISH_MAX 64

static const char USAGE[] =
    "Usage: ferry-replicator [OPTIONS] NAME=DIR...\n"
    "       ferry-replicator [OPTIONS] --namespaces FILE [NAME=DIR...]\n"
    "       ferry-replicator [OPTIONS] --publish NAME=OUTDIR... NAME=DIR...\n"
    "\n"
    "Serve each directory DIR as the ferry namespace NAME over HTTP\n"
    "(https with --tls-cert and --tls-key).\n"
    "Every start walks each DIR without reading file data and publishes\n"
    "the namespace (a new generation only if something changed; the\n"
    "last few stay available); SIGHUP, or --rescan-interval, walks every\n"
    "DIR again the same way while the current generation is served, and\n"
    "switches to the new one when it is published. New and changed\n"
    "files are then hashed\n"
    "in the background, a file a client asks for first, and their\n"
    "manifests published as they are done. Files unchanged since the\n"
    "last generation are never read again. A namespace answers 503\n"
    "until its walk is done. Chunk data is read from DIR on demand and\n"
    "checked against its SHA-256 before it is sent.\n"
    "\n"
    "Options:\n"
    "  -l, --listen HOST:PORT  address to serve on (default " DEFAULT_LISTEN
    ");\n"
    "                          unix:PATH: a Unix socket (mode 0600) at\n"
    "                          the absolute PATH instead\n"
    "      --session           serve while standard input stays open:\n"
    "                          print \"ready\" on standard output once\n"
    "                          every namespace is, stop cleanly at its\n"
    "                          end (what ferry's ssh transport runs)\n"
    "      --serve-last        serve the generation the state dir holds\n"
    "                          at once, then walk (a new generation if\n"
    "                          the tree changed): a restart or a mount\n"
    "                          over ssh is served before its walk ends\n"
    "      --namespaces FILE   serve the namespaces FILE names too: one\n"
    "                          NAME=DIR a line, '#' comments; SIGHUP\n"
    "                          rereads it: new names start, missing ones\n"
    "                          stop being served (404), a changed DIR\n"
    "                          restarts its name; a bad file changes\n"
    "                          nothing\n"
    "  -s, --state-dir DIR     where catalogs and indexes are kept\n"
    "                          (default " ROOT_STATE_DIR " as root,\n"
    "                          else $HOME/.local/state/ferry-replicator)\n"
    "      --codec CODEC       frame compression: auto (default: per\n"
    "                          chunk, zstd over byte planes for 16/32-bit\n"
    "                          numbers, else zstd), zstd, zstd-shuf2,\n"
    "                          zstd-shuf4, lz4 or raw; auto frames the\n"
    "                          batches of a client on this host with lz4,\n"
    "                          and those of one across a link with lz4\n"
    "                          while the link drains faster than zstd\n"
    "                          fills it\n"
    "      --scan-threads N    threads that read, chunk and hash files\n"
    "                          while scanning, 1-64 (default: one per\n"
    "                          CPU); the catalog is the same for any N\n"
    "      --hash-before-publish  hash every new or changed file before\n"
    "                          the namespace is published (no pending\n"
    "                          manifests; browsing waits for the bytes)\n"
    "      --rehash            hash every chunk again as it is read to\n"
    "                          be served (default: only when its file is\n"
    "                          not exactly what the walk saw, or was\n"
    "                          written within 2 s of it); for a source\n"
    "                          file system where a write can leave a\n"
    "                          file's ctime alone\n"
    "      --rescan-interval SECONDS  rescan every namespace this often\n"
    "                          (default 0: only on SIGHUP)\n"
    "      --keep-generations K  generations kept on disk and served,\n"
    "                          the current one included, 1-1000\n"
    "                          (default 3); older ones are removed\n"
    "                          (with --publish: in OUTDIR too)\n"
    "      --tls-cert FILE     serve https: the certificate (PEM, then its\n"
    "                          chain); TLS 1.2 and 1.3, AEAD ciphers only;\n"
    "                          SIGHUP reads it again for new connections\n"
    "      --tls-key FILE      the certificate's private key (PEM)\n"
    "      --client-ca FILE    with TLS: require a client certificate\n"
    "                          signed by one of these CAs (PEM)\n"
    "      --tokens FILE       every request to /v1/NAME/ needs a bearer\n"
    "                          token of NAME: FILE has lines \"NAME HEX\"\n"
    "                          (HEX the SHA-256 of a token; `ferry token\n"
    "                          new NAME` makes both); reread on SIGHUP\n"
    "      --header-timeout SECONDS  a request's head must arrive within\n"
    "                          this (default %u)\n"
    "      --idle-timeout SECONDS  close a connection idle this long, or\n"
    "                          whose client stopped reading (default %u)\n"
    "      --max-conns N       open connections in all (default %u, less\n"
    "                          if the open files limit is lower); at the\n"
    "                          cap one waiting for its client is closed,\n"
    "                          of the client holding most\n"
    "      --max-conns-per-addr N  open connections per client address\n"
    "                          (default %u; 0: no cap)\n"
    "      --max-inflight MIB  memory for answers in flight, in MiB\n"
    "                          (default %zu); each client (token, or\n"
    "                          address) gets its share, and one that\n"
    "                          stops reading gives its share back\n"
    "      --sign-key FILE     sign each generation, and each manifests\n"
    "                          answer, with this Ed25519 private key\n"
    "                          (PEM: ferry keygen's sign.key); clients\n"
    "                          check it with --trust-key\n"
    "      --metrics WHO       who may GET /metrics (Prometheus text):\n"
    "                          open, loopback or off; default loopback\n"
    "                          with --tokens (it names every namespace),\n"
    "                          else open\n"
    "      --publish NAME=OUTDIR  do not serve: publish namespace NAME\n"
    "                          (every file hashed) into OUTDIR as static\n"
    "                          files (HEAD, catalog/, delta/, signature/,\n"
    "                          chunk/) that any web server or S3 bucket\n"
    "                          can serve as the source; only chunk\n"
    "                          objects OUTDIR lacks are written; HEAD\n"
    "                          last; then what only generations past\n"
    "                          --keep-generations name is removed;\n"
    "                          then exit. Repeatable\n"
    "  -v, --verbose           log more: every request, SQLite codes\n"
    "  -q, --quiet             log errors only\n"
    "  -h, --help              show this help and exit\n"
    "  -V, --version           show the version and exit\n"
    "\n"
    "NAME is 1-64 characters of [A-Za-z0-9._-], not starting with '.'.\n"
    "\n"
    "Endpoints (per namespace NAME):\n"
    "  GET  /v1/NAME/HEAD           current generation\n"
    "  GET  /v1/NAME/catalog/GEN    catalog (zstd-compressed SQLite)\n"
    "  GET  /v1/NAME/delta/FROM/TO  catalog FROM -> TO's changed rows\n"
    "  GET  /v1/NAME/chunk/ID       one chunk frame (ID: 64 hex digits)\n"
    "  POST /v1/NAME/chunks         body: 1..1024 ids of 32 bytes\n"
    "  GET  /v1/NAME/manifest/GEN/INO   a pending file's manifest\n"
    "  GET  /v1/NAME/manifests/GEN/SEG  pending files' manifests, by 1024\n"
    "  GET  /v1/NAME/signature/GEN  its signed statement (--sign-key)\n"
    "  GET  /v1/NAME/stats          counters (JSON)\n"
    "  GET  /metrics                every counter (Prometheus text)\n"
    "\n"
    "Example:\n"
    "  ferry-replicator -l 0.0.0.0:8700 models=/srv/models data=/srv/data\n";

static void print_usage(void)
{
	printf(USAGE, REPL_HEADER_TIMEOUT_DEFAULT_S,
	       REPL_IDLE_TIMEOUT_DEFAULT_S, REPL_MAX_CONNS_DEFAULT,
	       REPL_PER_ADDR_DEFAULT, (size_t)REPL_INFLIGHT_DEFAULT_MIB);
}

/* One error line naming the problem and pointing at --help; returns the
 * usage exit status. */
static int usage_error(const char *fmt, ...) BASE_PRINTF(1, 2);
static int usage_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	base_error("%s (see " PROG " --help)", msg);
	return 2;
}

/* The default state dir; malloc'd, NULL when there is no HOME. */
static char *default_state_dir(void)
{
	const char *home = getenv("HOME");

	if (geteuid() == 0)
		return strdup(ROOT_STATE_DIR);
	if (!home || home[0] != '/')
		return NULL;
	return base_path_fmt("%s/.local/state/ferry-replicator", home);
}

static int parse_codec(const char *s, enum frame_policy *ret)
{
	if (!strcmp(s, "auto"))
		*ret = FRAME_POLICY_AUTO;
	else if (!strcmp(s, "zstd"))
		*ret = FRAME_POLICY_ZSTD;
	else if (!strcmp(s, "lz4"))
		*ret = FRAME_POLICY_LZ4;
	else if (!strcmp(s, "raw"))
		*ret = FRAME_POLICY_RAW;
	else if (!strcmp(s, "zstd-shuf2"))
		*ret = FRAME_POLICY_ZSTD_SHUF2;
	else if (!strcmp(s, "zstd-shuf4"))
		*ret = FRAME_POLICY_ZSTD_SHUF4;
	else
		return -EINVAL;
	return 0;
}

/* Deep trees keep one fd per level open while scanning. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* The namespace of the command line that "NAME=OUTDIR" names, or NULL. */
static const struct repl_ns_spec *publish_ns(const struct repl_ns_list *list,
					     const char *arg)
{
	const char *eq = strchr(arg, '=');
	size_t k, len;

	if (!eq || !eq[1])
		return NULL;
	len = (size_t)(eq - arg);
	for (k = 0; k < list->n; k++)
		if (strlen(list->v[k].name) == len &&
		    !strncmp(list->v[k].name, arg, len))
			return &list->v[k];
	return NULL;
}

/* --publish NAME=OUTDIR for each of pubs: NAME must be a namespace of
 * the command line. The exit status: 0, 1 (a publish failed), 2. */
static int publish_all(const struct repl_server_opts *o,
		       const struct repl_ns_list *list, const char **pubs,
		       size_t n)
{
	const struct repl_ns_spec *sp;
	struct cat_sign_key key;
	struct repl_static_run ro;
	size_t i;
	int rc = 0;

	for (i = 0; i < n; i++)
		if (!publish_ns(list, pubs[i]))
			return usage_error("--publish takes NAME=OUTDIR with "
					   "NAME one of the NAME=DIR given, "
					   "not '%s'",
					   pubs[i]);
	if (o->sign_key && cat_sign_key_load(o->sign_key, &key) < 0) {
		base_error("cannot use the signing key path=\"%s\"",
			   o->sign_key);
		return 2;
	}
	raise_nofile();
	for (i = 0; i < n && rc == 0; i++) {
		sp = publish_ns(list, pubs[i]);
		ro = (struct repl_static_run){
		    .ns = sp->name,
		    .state_root = o->state_dir,
		    .src_dir = sp->dir,
		    .out_dir = strchr(pubs[i], '=') + 1,
		    .policy = (int)o->policy,
		    .threads = o->scan_threads,
		    .keep = o->keep_gens,
		    .sign_key = o->sign_key ? &key : NULL,
		};
		if (repl_static_run(&ro) < 0)
			rc = 1;
	}
	if (o->sign_key)
		cat_sign_key_wipe(&key);
	return rc;
}

/* What the command line asks for. */
struct cli {
	struct repl_server_opts o;
	char *state; /* --state-dir, malloc'd */
	const char *publish[PUBLISH_MAX];
	size_t n_publish;
	int level;
};

/* The numeric options: their names and ranges. */
static const struct num_opt {
	int opt;
	const char *name;
	long lo, hi;
} NUM_OPTS[] = {
    {'t', "--scan-threads", 1, 64},
    {'R', "--rescan-interval", 0, 86400 * 365},
    {'K', "--keep-generations", 1, 1000},
    {'W', "--header-timeout", 1, 3600},
    {'I', "--idle-timeout", 1, 86400},
    {'M', "--max-conns", 1, 1000000},
    {'P', "--max-conns-per-addr", 0, 1000000},
    {'B', "--max-inflight", 1, 1 << 20},
};

/* A numeric option into o: 1 (opt is one, and is set), 0 (opt is not a
 * numeric option), -1 (a bad value, said). */
static int num_option(int opt, const char *arg, struct repl_server_opts *o)
{
	const struct num_opt *n = NULL;
	size_t k;
	long v;

	for (k = 0; k < sizeof(NUM_OPTS) / sizeof(NUM_OPTS[0]); k++)
		if (NUM_OPTS[k].opt == opt)
			n = &NUM_OPTS[k];
	if (!n)
		return 0;
	if (base_opt_long(n->name, arg, n->lo, n->hi, &v) < 0)
		return -1;
	switch (opt) {
	case 't':
		o->scan_threads = (unsigned)v;
		break;
	case 'R':
		o->rescan_interval_s = (unsigned)v;
		break;
	case 'K':
		o->keep_gens = (unsigned)v;
		break;
	case 'W':
		o->header_timeout_s = (unsigned)v;
		break;
	case 'I':
		o->idle_timeout_s = (unsigned)v;
		break;
	case 'M':
		o->max_conns = (size_t)v;
		break;
	case 'B':
		o->inflight_mib = (size_t)v;
		break;
	default: /* 'P' */
		o->per_addr = v ? v : -1;
		break;
	}
	return 1;
}

/* The options, up to the first NAME=DIR. -1 to go on, else the exit
 * status (--help, --version, or a usage error, said). */
static int parse_options(int argc, char **argv, struct cli *c)
{
	static const struct option longopts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"codec", required_argument, NULL, 'c'},
	    {"scan-threads", required_argument, NULL, 't'},
	    {"hash-before-publish", no_argument, NULL, 'H'},
	    {"rescan-interval", required_argument, NULL, 'R'},
	    {"keep-generations", required_argument, NULL, 'K'},
	    {"tls-cert", required_argument, NULL, 'C'},
	    {"tls-key", required_argument, NULL, 'k'},
	    {"client-ca", required_argument, NULL, 'A'},
	    {"tokens", required_argument, NULL, 'T'},
	    {"header-timeout", required_argument, NULL, 'W'},
	    {"idle-timeout", required_argument, NULL, 'I'},
	    {"max-conns", required_argument, NULL, 'M'},
	    {"max-conns-per-addr", required_argument, NULL, 'P'},
	    {"max-inflight", required_argument, NULL, 'B'},
	    {"sign-key", required_argument, NULL, 'S'},
	    {"namespaces", required_argument, NULL, 'N'},
	    {"metrics", required_argument, NULL, OPT_METRICS},
	    {"publish", required_argument, NULL, OPT_PUBLISH},
	    {"session", no_argument, NULL, OPT_SESSION},
	    {"serve-last", no_argument, NULL, OPT_SERVE_LAST},
	    {"rehash", no_argument, NULL, OPT_REHASH},
	    {"verbose", no_argument, NULL, 'v'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	struct repl_server_opts *o = &c->o;
	int opt, r;

	opterr = 0; /* getopt's own messages would be a second line */
	while ((opt = getopt_long(argc, argv, ":l:s:vqhV", longopts, NULL)) !=
	       -1) {
		r = num_option(opt, optarg, o);
		if (r < 0)
			return 2;
		if (r > 0)
			continue;
		switch (opt) {
		case 'l':
			o->listen = optarg;
			break;
		case 's':
			free(c->state);
			c->state = strdup(optarg);
			if (!c->state) {
				base_error("out of memory");
				return 1;
			}
			break;
		case 'c':
			if (parse_codec(optarg, &o->policy) < 0)
				return usage_error("unknown codec '%s': use "
						   "auto, zstd, zstd-shuf2, "
						   "zstd-shuf4, lz4 or raw",
						   optarg);
			break;
		case 'H':
			o->hash_first = 1;
			break;
		case 'C':
			o->tls_cert = optarg;
			break;
		case 'k':
			o->tls_key = optarg;
			break;
		case 'A':
			o->tls_client_ca = optarg;
			break;
		case 'T':
			o->tokens_path = optarg;
			break;
		case OPT_METRICS:
			if (repl_metrics_access_parse(optarg, &o->metrics) <
			    0) {
				base_error("--metrics takes open, loopback or "
					   "off, not '%s'",
					   optarg);
				return 2;
			}
			break;
		case OPT_PUBLISH:
			if (c->n_publish == PUBLISH_MAX)
				return usage_error("at most %d --publish",
						   PUBLISH_MAX);
			c->publish[c->n_publish++] = optarg;
			break;
		case OPT_SESSION:
			o->session = 1;
			break;
		case OPT_SERVE_LAST:
			o->serve_last = 1;
			break;
		case OPT_REHASH:
			o->rehash = 1;
			break;
		case 'S':
			o->sign_key = optarg;
			break;
		case 'N':
			o->ns_file = optarg;
			break;
		case 'v':
			c->level = BASE_LOG_DEBUG;
			break;
		case 'q':
			c->level = BASE_LOG_ERROR;
			break;
		case 'h':
			print_usage();
			return 0;
		case 'V':
			printf(PROG " %s\n", FERRY_VERSION);
			return 0;
		default:
			base_opt_error(opt, argv);
			return 2;
		}
	}
	return -1;
}

/* The option pairs and the address. -1 to go on, else 2 (said). */
static int check_options(const struct repl_server_opts *o)
{
	char host[HTTPD_HOST_MAX];
	uint16_t port;

	const size_t pl = strlen(REPL_LISTEN_UNIX);

	if (strncmp(o->listen, REPL_LISTEN_UNIX, pl) == 0) {
		if (o->listen[pl] != '/' || strlen(o->listen + pl) >= 108)
			return usage_error("bad --listen address '%s': a Unix "
					   "socket's path is absolute and "
					   "shorter than 108 bytes",
					   o->listen);
	} else if (httpd_listen_split(o->listen, host, sizeof(host), &port) <
		   0) {
		return usage_error("bad --listen address '%s': expected "
				   "HOST:PORT or unix:PATH",
				   o->listen);
	}
	if (!o->tls_cert != !o->tls_key)
		return usage_error("%s",
				   "--tls-cert and --tls-key go together");
	if (o->tls_client_ca && !o->tls_cert)
		return usage_error("%s", "--client-ca needs --tls-cert and "
					 "--tls-key");
	return -1;
}

/* The NAME=DIR arguments into list (*ret_n_args of them), each DIR a
 * directory, then --namespaces FILE's. -1 to go on, else the exit status
 * (said once: a missing DIR or an unusable file is a bad argument). */
static int load_namespaces(int argc, char **argv,
			   const struct repl_server_opts *o,
			   struct repl_ns_list *list, size_t *ret_n_args)
{
	char err[512];
	size_t k;
	int i, r;

	for (i = optind; i < argc; i++) {
		r = repl_ns_list_add_arg(list, argv[i], strlen(argv[i]), err,
					 sizeof(err));
		if (r == -ENOMEM) {
			base_error("out of memory");
			return 1;
		}
		if (r < 0)
			return usage_error("%s", err);
	}
	*ret_n_args = list->n;
	if (list->n < 1 && !o->ns_file)
		return usage_error("%s", "no NAME=DIR given");
	for (k = 0; k < list->n; k++) {
		const struct repl_ns_spec *sp = &list->v[k];
		struct stat st;

		if (stat(sp->dir, &st) < 0) {
			base_log_err(BASE_LOG_ERROR, errno,
				     "cannot use the source directory ns=%s "
				     "path=\"%s\"",
				     sp->name, sp->dir);
			return 2;
		}
		if (!S_ISDIR(st.st_mode)) {
			base_error("source is not a directory ns=%s "
				   "path=\"%s\"",
				   sp->name, sp->dir);
			return 2;
		}
	}
	if (!o->ns_file)
		return -1;
	/* One line, naming the line of the file. */
	r = repl_ns_list_load(list, o->ns_file, err, sizeof(err));
	if (r == 0)
		r = repl_ns_list_check_dirs(list, *ret_n_args, err,
					    sizeof(err));
	if (r == -ENOMEM) {
		base_error("out of memory");
		return 1;
	}
	if (r < 0) {
		base_error("cannot use the namespaces file path=\"%s\" "
			   "why=\"%s\"",
			   o->ns_file, err);
		return 2;
	}
	if (list->n == 0)
		base_warn("no namespace to serve yet: the namespaces file "
			  "names none path=\"%s\"",
			  o->ns_file);
	return -1;
}

/* What serving needs beyond the options: a usable tokens file (a bad
 * argument otherwise, said once before anything starts) and the test
 * hook that slows hashing down to watch it. -1 to go on, else 2. */
static int check_serving(struct repl_server_opts *o)
{
	if (o->tokens_path) {
		struct repl_tokens *t = NULL;
		char err[256];

		if (repl_tokens_load(o->tokens_path, &t, err, sizeof(err)) <
		    0) {
			base_error("cannot use the tokens file path=\"%s\" "
				   "why=\"%s\"",
				   o->tokens_path, err);
			return 2;
		}
		repl_tokens_free(t);
	}
	if (getenv("FERRY_HASH_DELAY_MS")) {
		uint64_t ms;

		if (base_parse_u64(getenv("FERRY_HASH_DELAY_MS"), 0, 60000,
				   &ms) < 0)
			return usage_error("%s", "FERRY_HASH_DELAY_MS is 0 to "
						 "60000");
		o->hash_delay_ms = (unsigned)ms;
	}
	return -1;
}

/* Serve until a signal ends it: 0, or 1 (repl_server_new has logged
 * why it failed). */
static int serve(struct repl_server_opts *o)
{
	struct repl_server *srv;
	int rc = 1;

	raise_nofile();
	/* A peer that goes away mid-write must be an EPIPE, not our death. */
	signal(SIGPIPE, SIG_IGN);
	/* One pool thread goes to scanning; keep enough for chunk reads. */
	setenv("UV_THREADPOOL_SIZE", "8", 0);
	if (repl_server_new(o, &srv) == 0) {
		repl_server_run(srv);
		repl_server_free(srv);
		rc = 0;
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct cli c = {.o = {.listen = DEFAULT_LISTEN},
			.level = BASE_LOG_INFO};
	struct repl_ns_list list = {0};
	const char **names = NULL, **dirs = NULL;
	size_t n_args = 0, k;
	int rc;

	/* Usage errors need the name before -v/-q are known; the level is
	 * set again below, still before any thread exists. */
	base_log_init(PROG, BASE_LOG_INFO);
	rc = parse_options(argc, argv, &c);
	if (rc >= 0)
		goto out;
	base_log_init(PROG, c.level);
	rc = check_options(&c.o);
	if (rc < 0)
		rc = load_namespaces(argc, argv, &c.o, &list, &n_args);
	if (rc >= 0)
		goto out;
	names = calloc(list.n + 1, sizeof(*names));
	dirs = calloc(list.n + 1, sizeof(*dirs));
	if (!names || !dirs) {
		base_error("out of memory");
		rc = 1;
		goto out;
	}
	for (k = 0; k < list.n; k++) {
		names[k] = list.v[k].name;
		dirs[k] = list.v[k].dir;
	}
	if (!c.state) {
		c.state = default_state_dir();
		if (!c.state) {
			rc = usage_error("%s", "no HOME: give --state-dir");
			goto out;
		}
	}
	c.o.state_dir = c.state;
	if (c.n_publish) {
		rc = publish_all(&c.o, &list, c.publish, c.n_publish);
		goto out;
	}
	rc = check_serving(&c.o);
	if (rc >= 0)
		goto out;
	c.o.n_ns = list.n;
	c.o.n_args = n_args;
	c.o.ns_names = names;
	c.o.ns_dirs = dirs;
	rc = serve(&c.o);
out:
	repl_ns_list_fini(&list);
	free(names);
	free(dirs);
	free(c.state);
	return rc;
}
