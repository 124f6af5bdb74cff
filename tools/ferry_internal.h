/*
 * tools/ferry_internal.h — the subcommands of the `ferry` command. Each
 * takes the arguments after its own name (argv[0] is the subcommand) and
 * returns the process exit status. tools/ uses public headers only.
 */
#ifndef FERRY_TOOLS_INTERNAL_H
#define FERRY_TOOLS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

int ferry_cmd_sync(int argc, char **argv);   /* tools/ferry_sync.c */
int ferry_cmd_status(int argc, char **argv); /* tools/ferry_status.c */
int ferry_cmd_verify(int argc, char **argv); /* tools/ferry_verify.c */

/* Seconds as H:MM:SS, "--:--:--" when s < 0 (unknown). tools/ferry_fmt.c */
void ferry_fmt_hms(int64_t s, char *buf, size_t cap);

#endif
