/*
 * catalog/base/base_sqlite.c — the SQLite glue of every SQLite file ferry
 * keeps (catalogs, the source index, the hydrator's state.db): the single
 * place where SQLite result codes become -errno, URI building for paths,
 * and statement helpers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog/base/base.h"

/* OS errno behind CANTOPEN/IOERR when SQLite kept one, else EIO. */
static int os_errno(sqlite3 *db)
{
	int e = db ? sqlite3_system_errno(db) : 0;

	return e > 0 ? -e : -EIO;
}

int base_sqlite_errno(sqlite3 *db, int rc, const char *what)
{
	int ret;

	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		ret = -ENOMEM;
		break;
	/* Damaged or foreign bytes, or a value over our length limit: the
	 * catalog is bad, not the machine. */
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
	case SQLITE_FORMAT:
	case SQLITE_TOOBIG:
		ret = -EBADMSG;
		break;
	case SQLITE_CONSTRAINT:
		ret = -EEXIST;
		break;
	case SQLITE_FULL:
		ret = -ENOSPC;
		break;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		ret = -EBUSY;
		break;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		ret = -EACCES;
		break;
	case SQLITE_READONLY:
		ret = -EROFS;
		break;
	case SQLITE_RANGE:
	case SQLITE_MISUSE:
		ret = -EINVAL;
		break;
	case SQLITE_INTERRUPT:
		ret = -EINTR;
		break;
	case SQLITE_CANTOPEN:
	case SQLITE_IOERR:
		ret = (rc == SQLITE_IOERR_NOMEM) ? -ENOMEM : os_errno(db);
		break;
	default:
		ret = -EIO;
		break;
	}
	/* The event is the caller's to log, once, with its context; the
	 * native code and message are kept here for -v. sqlite3_errmsg
	 * describes the most recent failure on db, which is this one:
	 * callers translate right after the call. */
	base_debug("sqlite op=%s sqlite_rc=%d sqlite_err=\"%s\" msg=\"%s\"",
		   what ? what : "?", rc, sqlite3_errstr(rc),
		   db ? sqlite3_errmsg(db) : "-");
	return ret;
}

/* RFC 3986 unreserved characters plus '/', which needs no escaping. */
static int uri_plain(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~' || c == '/';
}

int base_sqlite_uri(const char *path, const char *query, char **ret_uri)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t plen, qlen, cap, n;
	char *uri;

	*ret_uri = NULL;
	if (!path || !path[0])
		return -EINVAL;
	plen = strlen(path);
	qlen = query ? strlen(query) : 0;
	/* "file://" + 3 bytes per path byte + "?" + query + NUL. */
	cap = 7 + 3 * plen + 1 + qlen + 1;
	uri = malloc(cap);
	if (!uri)
		return -ENOMEM;
	/* An absolute path goes after an empty authority ("file:///x") so a
	 * path starting with "//" is never read as a host name. */
	n = (size_t)snprintf(uri, cap, "%s",
			     path[0] == '/' ? "file://" : "file:");
	for (size_t i = 0; i < plen; i++) {
		unsigned char c = (unsigned char)path[i];

		if (uri_plain(c)) {
			uri[n++] = (char)c;
		} else {
			uri[n++] = '%';
			uri[n++] = hex[c >> 4];
			uri[n++] = hex[c & 15];
		}
	}
	if (qlen) {
		uri[n++] = '?';
		memcpy(uri + n, query, qlen);
		n += qlen;
	}
	uri[n] = '\0';
	*ret_uri = uri;
	return 0;
}

int base_sqlite_exec(sqlite3 *db, const char *sql, const char *what)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : base_sqlite_errno(db, rc, what);
}

int base_sqlite_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret_st)
{
	int rc;

	*ret_st = NULL;
	rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, ret_st,
				NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(*ret_st);
		*ret_st = NULL;
		return base_sqlite_errno(db, rc, "prepare");
	}
	return 0;
}

void base_sqlite_finalize(sqlite3_stmt **st)
{
	if (*st) {
		sqlite3_finalize(*st);
		*st = NULL;
	}
}

int base_sqlite_attach(sqlite3 *db, const char *path, const char *as)
{
	sqlite3_stmt *st = NULL;
	char sql[64];
	int rc;

	if (snprintf(sql, sizeof(sql), "ATTACH ?1 AS %s", as) >=
	    (int)sizeof(sql))
		return -EINVAL;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : base_sqlite_errno(db, rc, "attach");
}
