/*
 * tools/ferry_token.c — `ferry token new NAME`: a fresh bearer token for
 * namespace NAME. Two lines go to standard output: the token, for the
 * client's --token-file, then "NAME SHA256HEX", the line to add to the
 * replicator's --tokens file (which never holds the token itself). The
 * token is 32 bytes from OpenSSL's RAND_bytes as base64url (43
 * characters). Exit: 0 done, 1 no randomness or no output, 2 bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "catalog/base/base.h"
#include "replicator/replicator.h"
#include "tools/ferry_priv.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: ferry token new NAME\n"
		"\n"
		"Make a fresh token for namespace NAME and print two lines:\n"
		"  1. the token: put it alone in the client's token file\n"
		"     (ferry-hydrator, ferry sync, ferry status --token-file\n"
		"     FILE), readable by that user only;\n"
		"  2. \"NAME SHA256\": add it to the replicator's --tokens\n"
		"     file, then send the replicator SIGHUP.\n"
		"The replicator keeps only the SHA-256, so its tokens file\n"
		"gives nobody a token.\n"
		"\n"
		"Example:\n"
		"  ferry token new data | { read -r tok; read -r line;\n"
		"    (umask 077; echo \"$tok\" > data.token)\n"
		"    echo \"$line\" >> /etc/ferry/tokens; }\n"
		"\n"
		"Exit status: 0 done, 1 failed, 2 bad usage. See ferry(1).\n");
}

int ferry_cmd_token(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char token[REPL_TOKEN_TEXT_MAX + 1], hex[65];
	struct ferry_opts fo = {.prog = "ferry token",
				.shortopts = ":h",
				.longopts = longopts,
				.usage = usage};
	int ch, r;

	ch = ferry_opts_parse(argc, argv, &fo);
	if (ch >= 0)
		return ch;
	if (argc - optind != 2 || strcmp(argv[optind], "new") != 0) {
		base_error("expected: ferry token new NAME (see --help)");
		return FERRY_EXIT_USAGE;
	}
	if (base_ns_name_check(argv[optind + 1], strlen(argv[optind + 1])) <
	    0) {
		base_error("bad namespace name '%s': use 1-64 of "
			   "[A-Za-z0-9._-], not starting with '.'",
			   argv[optind + 1]);
		return FERRY_EXIT_USAGE;
	}
	r = repl_token_new(token, sizeof(token), hex);
	if (r < 0) {
		base_log_err(BASE_LOG_ERROR, r, "cannot make a token");
		return 1;
	}
	printf("%s\n%s %s\n", token, argv[optind + 1], hex);
	memset(token, 0, sizeof(token));
	if (fflush(stdout) != 0 || ferror(stdout)) {
		base_error("cannot write the token to standard output");
		return 1;
	}
	return 0;
}
