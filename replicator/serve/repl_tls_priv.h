/*
 * replicator/serve/repl_tls_priv.h — TLS for the replicator's connections
 * (repl_tls.c), with OpenSSL over memory BIOs: the HTTP layer
 * (repl_http.c) keeps doing its own socket I/O on libuv and hands TLS
 * ciphertext in and out, so TLS never touches a socket and never blocks.
 *
 * A connection's ciphertext from uv_read goes in (repl_tls_conn_feed),
 * plaintext for http_parser comes out (repl_tls_conn_read), every byte the
 * server sends is encrypted (repl_tls_conn_write) and the records taken
 * out (repl_tls_conn_take) for uv_write, in order. The handshake, alerts
 * and session tickets come out of the same take. Records are written
 * once, into the buffer take hands over.
 *
 * Settings: TLS 1.2 and 1.3 only; ECDHE key exchange with AEAD ciphers
 * (AES-GCM, ChaCha20-Poly1305) only; no renegotiation, no compression.
 * With a client CA, a client certificate signed by it is required.
 *
 * Reload: repl_tls_reload builds a new SSL_CTX from the same files; new
 * connections take it, connections made before keep the context they were
 * made with (each SSL holds a reference to its own). A reload that fails
 * changes nothing.
 *
 * Threads: one thread at a time per object (the loop thread). Errors:
 * -errno, with a one-line reason in why when asked.
 */
#ifndef FERRY_REPL_TLS_PRIV_H
#define FERRY_REPL_TLS_PRIV_H

#include <stddef.h>
#include <sys/types.h>

struct repl_tls;
struct repl_tls_conn;

struct repl_tls_opts {
	const char *cert;      /* PEM: the certificate, then its chain */
	const char *key;       /* PEM: its private key */
	const char *client_ca; /* PEM CAs a client certificate must chain
				* to; NULL: no client certificate asked */
};

/* Load the certificate, key and client CAs of o (the paths are copied, to
 * be read again at each reload). Returns 0, or -EINVAL (a file cannot be
 * read or is not what it should be: why says which and why) or -ENOMEM.
 * *ret is freed with repl_tls_free. */
int repl_tls_new(const struct repl_tls_opts *o, struct repl_tls **ret,
		 char *why, size_t cap);

/* Read the files again into a new context for new connections. On
 * failure (-EINVAL, -ENOMEM; why says) the old context stays in use. */
int repl_tls_reload(struct repl_tls *t, char *why, size_t cap);

/* One line about the certificate in use: subject="..." not_after=...
 * (UTC). Returns 1 when it is outside its validity period now (expired or
 * not valid yet), else 0. */
int repl_tls_describe(const struct repl_tls *t, char *buf, size_t cap);

/* Free t; connections made from it keep working on their own context. */
void repl_tls_free(struct repl_tls *t);

/* A server-side TLS state for a new connection, on t's current context.
 * NULL when out of memory. */
struct repl_tls_conn *repl_tls_conn_new(struct repl_tls *t);

void repl_tls_conn_free(struct repl_tls_conn *tc);

/* Ciphertext the peer sent (copied). Returns 0 or -ENOMEM. */
int repl_tls_conn_feed(struct repl_tls_conn *tc, const void *p, size_t len);

/* Plaintext the peer sent, up to cap bytes, once the handshake is done.
 * Returns the byte count (> 0), 0 when more ciphertext is needed (feed
 * it, then take what the handshake has to send), -ESHUTDOWN when the peer
 * closed its side cleanly (close_notify; its plaintext was all returned
 * before), -ENOPROTOOPT when the peer sent a plain HTTP request instead
 * of a TLS handshake (nothing was read or sent: it may be answered in the
 * clear), or -EPROTO when TLS failed (a handshake refused, a bad record;
 * repl_tls_conn_why says why; take the alert out and close). */
ssize_t repl_tls_conn_read(struct repl_tls_conn *tc, void *buf, size_t cap);

/* Encrypt len bytes to send (all of them, as records). Returns 0, or
 * -EPROTO after a failure (-ENOMEM: no room for the records; the
 * connection cannot go on either). */
int repl_tls_conn_write(struct repl_tls_conn *tc, const void *p, size_t len);

/* Make room, before writes of len plaintext bytes in all, for the records
 * they make (with what waits to be taken): a big answer's records then
 * go into one buffer of the right size. Returns 0 or -ENOMEM. */
int repl_tls_conn_reserve(struct repl_tls_conn *tc, size_t len);

/* Say close_notify (after the last write); a no-op after a failure. */
void repl_tls_conn_shutdown(struct repl_tls_conn *tc);

/* Everything encrypted so far and not taken yet, in order: *ret is
 * malloc'd (the caller frees it; it may be larger than *ret_len) and
 * *ret_len its length; NULL and 0 when there is nothing. Returns 0. */
int repl_tls_conn_take(struct repl_tls_conn *tc, char **ret, size_t *ret_len);

/* Why the connection's TLS failed (OpenSSL's reason), "" if it did not.
 * Valid until tc is freed. */
const char *repl_tls_conn_why(const struct repl_tls_conn *tc);

#endif
