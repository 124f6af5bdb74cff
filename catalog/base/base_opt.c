/*
 * catalog/base/base_opt.c — the messages every command gives for a bad
 * command line, so ferry-replicator, ferry-hydrator and each ferry
 * subcommand say the same thing in the same words: which option, what it
 * wants, and where to look.
 */
#include <errno.h>
#include <getopt.h>
#include <string.h>

#include "catalog/base/base.h"

void base_opt_error(int c, char *const argv[])
{
	const char *word = optind > 0 ? argv[optind - 1] : "?";

	/* A short option inside a cluster ("-fz") is named by optopt; the
	 * word would be the whole cluster. Long options have optopt 0 (or
	 * their value) and are named by their word. */
	if (c == ':') {
		if (optopt && strncmp(word, "--", 2) != 0)
			base_error("option '-%c' needs a value (see --help)",
				   optopt);
		else
			base_error("option '%s' needs a value (see --help)",
				   word);
	} else if (optopt && strncmp(word, "--", 2) != 0) {
		base_error("unknown option '-%c' (see --help)", optopt);
	} else {
		base_error("unknown option '%s' (see --help)", word);
	}
}

int base_opt_long(const char *name, const char *arg, long lo, long hi,
		  long *ret)
{
	if (base_parse_long(arg, lo, hi, ret) == 0)
		return 0;
	base_error("%s wants a whole number from %ld to %ld, not '%s'", name,
		   lo, hi, arg ? arg : "");
	return -EINVAL;
}
