/*
 * tools/ferry_internal.h — the subcommands of the `ferry` command. Each
 * takes the arguments after its own name (argv[0] is the subcommand) and
 * returns the process exit status. tools/ uses public headers only.
 */
#ifndef FERRY_TOOLS_INTERNAL_H
#define FERRY_TOOLS_INTERNAL_H

int ferry_cmd_sync(int argc, char **argv);   /* tools/ferry_sync.c */
int ferry_cmd_status(int argc, char **argv); /* tools/ferry_status.c */
int ferry_cmd_verify(int argc, char **argv); /* tools/ferry_verify.c */

#endif
