/*
 * replicator/replicator.h — the source side of ferry, as other folders
 * see it.
 *
 * The one public header of replicator/ for the rest of the project:
 * tools/ (`ferry token new`) includes this and nothing below it. The
 * replicator itself is three rooms, each with a face of its own:
 *   source/  the walk, the source index, the hasher, chunks read again
 *            from the source, the state directory (repl_source.h);
 *   publish/ generations, catalogs, deltas, signatures, pack lists, the
 *            static published store (repl_publish.h);
 *   serve/   HTTP, TLS, tokens, routes, namespaces, limits, metrics, the
 *            running server (repl_serve.h, repl_auth.h, repl_nslist.h);
 * and repl_main.c, ferry-replicator, on top. tools/rooms.txt holds which
 * may include which.
 */
#ifndef FERRY_REPLICATOR_H
#define FERRY_REPLICATOR_H

/* Bearer tokens: repl_token_new, repl_token_hash_hex. */
#include "replicator/serve/repl_auth.h"

#endif /* FERRY_REPLICATOR_H */
