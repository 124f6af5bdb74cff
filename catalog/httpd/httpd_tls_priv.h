/*
 * catalog/httpd/httpd_tls_priv.h — TLS of one engine connection
 * (httpd_tls.c), with OpenSSL over memory BIOs: the connection
 * (httpd_conn.c) keeps doing its own socket I/O on libuv and hands TLS
 * ciphertext in and out, so TLS never touches a socket and never blocks.
 * The context, its settings and reloads are in httpd.h.
 *
 * A connection's ciphertext from uv_read goes in (httpd_tls_conn_feed),
 * plaintext for the reader comes out (httpd_tls_conn_read), every byte the
 * server sends is encrypted (httpd_tls_conn_write) and the records taken
 * out (httpd_tls_conn_take) for uv_write, in order. The handshake, alerts
 * and session tickets come out of the same take. Records are written
 * once, into the buffer take hands over.
 *
 * Threads: one thread at a time per object (the loop thread). Errors:
 * -errno, with a one-line reason when asked.
 */
#ifndef FERRY_HTTPD_TLS_PRIV_H
#define FERRY_HTTPD_TLS_PRIV_H

#include <stddef.h>
#include <sys/types.h>

#include "catalog/httpd/httpd.h"

struct httpd_tls_conn;

/* A server-side TLS state for a new connection, on t's current context.
 * NULL when out of memory. */
struct httpd_tls_conn *httpd_tls_conn_new(struct httpd_tls *t);

void httpd_tls_conn_free(struct httpd_tls_conn *tc);

/* Ciphertext the peer sent (copied). Returns 0 or -ENOMEM. */
int httpd_tls_conn_feed(struct httpd_tls_conn *tc, const void *p, size_t len);

/* Plaintext the peer sent, up to cap bytes, once the handshake is done.
 * Returns the byte count (> 0), 0 when more ciphertext is needed (feed
 * it, then take what the handshake has to send), -ESHUTDOWN when the peer
 * closed its side cleanly (close_notify; its plaintext was all returned
 * before), -ENOPROTOOPT when the peer sent a plain HTTP request instead
 * of a TLS handshake (nothing was read or sent: it may be answered in the
 * clear), or -EPROTO when TLS failed (a handshake refused, a bad record;
 * httpd_tls_conn_why says why; take the alert out and close). */
ssize_t httpd_tls_conn_read(struct httpd_tls_conn *tc, void *buf, size_t cap);

/* Encrypt len bytes to send (all of them, as records). Returns 0, or
 * -EPROTO after a failure (-ENOMEM: no room for the records; the
 * connection cannot go on either). */
int httpd_tls_conn_write(struct httpd_tls_conn *tc, const void *p, size_t len);

/* Make room, before writes of len plaintext bytes in all, for the records
 * they make (with what waits to be taken): a big answer's records then
 * go into one buffer of the right size. Returns 0 or -ENOMEM. */
int httpd_tls_conn_reserve(struct httpd_tls_conn *tc, size_t len);

/* Say close_notify (after the last write); a no-op after a failure. */
void httpd_tls_conn_shutdown(struct httpd_tls_conn *tc);

/* Everything encrypted so far and not taken yet, in order: *ret is
 * malloc'd (the caller frees it; it may be larger than *ret_len) and
 * *ret_len its length; NULL and 0 when there is nothing. Returns 0. */
int httpd_tls_conn_take(struct httpd_tls_conn *tc, char **ret, size_t *ret_len);

/* Why the connection's TLS failed (OpenSSL's reason), "" if it did not.
 * Valid until tc is freed. */
const char *httpd_tls_conn_why(const struct httpd_tls_conn *tc);

#endif
