/*
 * tools/ferry_main.c — the `ferry` command: dispatch to a subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"
#include "hydrator/hydrator.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: ferry COMMAND [ARGS]\n"
	    "\n"
	    "Commands:\n"
	    "  sync URL DEST        hydrate everything and write a plain tree\n"
	    "                       at DEST identical to the source\n"
	    "  status MOUNT|CACHE   what is hydrated, how fast, how long to "
	    "go\n"
	    "  verify CACHE|DEST    re-hash what is stored, or check a tree\n"
	    "                       against its catalog\n"
	    "  gc CACHE             drop the chunks no kept catalog names\n"
	    "  trace export MOUNT|CACHE\n"
	    "                       a mount's first reads as a trace file,\n"
	    "                       for --prefetch at the next mount\n"
	    "  trace show FILE      print a trace file\n"
	    "  token new NAME       a fresh bearer token for namespace NAME\n"
	    "                       and the replicator's tokens file line\n"
	    "  keygen DIR           a key pair for signed generations\n"
	    "  finish MOUNTPOINT    end a mount made with --into DIR: DIR\n"
	    "                       takes the mount's place\n"
	    "  pin MOUNTPOINT PATH...  keep PATHs whole in a bounded cache\n"
	    "                       (--cache-max): fetched first, never\n"
	    "                       evicted\n"
	    "\n"
	    "ferry COMMAND --help shows a command's options. See ferry(1),\n"
	    "ferry-hydrator(1) and ferry-replicator(1).\n");
}

int main(int argc, char **argv)
{
	hyd_pool_default();
	/* Each command names itself ("ferry sync") once it starts. */
	base_log_init("ferry", BASE_LOG_INFO);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
		printf("ferry %s\n", FERRY_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "sync"))
		return ferry_cmd_sync(argc - 1, argv + 1);
	if (!strcmp(argv[1], "status"))
		return ferry_cmd_status(argc - 1, argv + 1);
	if (!strcmp(argv[1], "verify"))
		return ferry_cmd_verify(argc - 1, argv + 1);
	if (!strcmp(argv[1], "gc"))
		return ferry_cmd_gc(argc - 1, argv + 1);
	if (!strcmp(argv[1], "trace"))
		return ferry_cmd_trace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "token"))
		return ferry_cmd_token(argc - 1, argv + 1);
	if (!strcmp(argv[1], "keygen"))
		return ferry_cmd_keygen(argc - 1, argv + 1);
	if (!strcmp(argv[1], "finish"))
		return ferry_cmd_finish(argc - 1, argv + 1);
	if (!strcmp(argv[1], "pin"))
		return ferry_cmd_pin(argc - 1, argv + 1);
	base_error("unknown command '%s' (see ferry --help)", argv[1]);
	return 2;
}
