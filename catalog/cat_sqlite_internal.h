/*
 * catalog/cat_sqlite_internal.h — what the catalog writer and reader share
 * about SQLite: the file identity (application_id, user_version), the one
 * function that turns SQLite result codes into -errno, and small statement
 * helpers. Internal to catalog/; nothing outside includes it.
 */
#ifndef FERRY_CAT_SQLITE_INTERNAL_H
#define FERRY_CAT_SQLITE_INTERNAL_H

#include <stdint.h>
#include <sqlite3.h>

/* PRAGMA application_id of every catalog: "FERY" in ASCII. */
#define CAT__APP_ID 0x46455259
/* PRAGMA user_version: the schema revision. One migration step per bump. */
#define CAT__USER_VERSION 1

/* Translate a SQLite result code into -errno and log the native code and
 * message once to stderr ("catalog: op=<what> sqlite_rc=..."). db may be
 * NULL. rc must be an error (not SQLITE_OK/ROW/DONE). Mapping:
 *   NOMEM -> -ENOMEM; CORRUPT, NOTADB, FORMAT, TOOBIG -> -EBADMSG;
 *   CONSTRAINT -> -EEXIST; FULL -> -ENOSPC; BUSY, LOCKED -> -EBUSY;
 *   PERM, AUTH -> -EACCES; READONLY -> -EROFS; RANGE, MISUSE -> -EINVAL;
 *   INTERRUPT -> -EINTR; CANTOPEN, IOERR -> the OS errno when SQLite
 *   reports one, else -EIO; anything else -> -EIO. */
int cat__sqlite_errno(sqlite3 *db, int rc, const char *what);

/* Build a SQLite URI "file:<path percent-encoded>[?query]" for path, so a
 * path containing '?', '#' or '%' cannot be misread as URI syntax. query
 * may be NULL. *ret_uri is malloc'ed; the caller frees it.
 * Returns 0, -EINVAL (empty path), -ENOMEM. */
int cat__sqlite_uri(const char *path, const char *query, char **ret_uri);

/* Run fixed SQL (no parameters) with sqlite3_exec. Returns 0 or -errno. */
int cat__sqlite_exec(sqlite3 *db, const char *sql, const char *what);

/* Prepare one statement for repeated use (SQLITE_PREPARE_PERSISTENT).
 * Returns 0 or -errno; *ret_st is NULL on failure. */
int cat__sqlite_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret_st);

/* Finalize *st if set and clear it. */
void cat__sqlite_finalize(sqlite3_stmt **st);

#endif /* FERRY_CAT_SQLITE_INTERNAL_H */
