/*
 * tools/ferry_opts.c — the option loop the small subcommands share
 * (ferry gc, keygen, token, verify): -h/--help, -q/--quiet and
 * -v/--verbose as each names them, anything else handed to the
 * subcommand, and one line for a bad option.
 */
#include <getopt.h>
#include <stdio.h>

#include "catalog/base/base.h"
#include "tools/ferry_priv.h"

int ferry_opts_parse(int argc, char **argv, struct ferry_opts *o)
{
	int ch;

	base_log_init(o->prog, BASE_LOG_INFO);
	opterr = 0; /* getopt's own messages would be a second line */
	optind = 1;
	while ((ch = getopt_long(argc, argv, o->shortopts, o->longopts,
				 NULL)) != -1) {
		switch (ch) {
		case 'q':
			o->quiet = 1;
			break;
		case 'v':
			base_log_init(o->prog, BASE_LOG_DEBUG);
			break;
		case 'h':
			o->usage(stdout);
			return 0;
		default:
			if (ch != ':' && ch != '?' && o->extra &&
			    o->extra(o->ctx, ch, optarg) == 0)
				break;
			base_opt_error(ch, argv);
			return FERRY_EXIT_USAGE;
		}
	}
	return -1;
}
