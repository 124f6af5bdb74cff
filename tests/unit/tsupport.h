/*
 * tests/unit/tsupport.h — small helpers the cmocka unit tests share, so that
 * each test_*.c does not carry its own copy: removing a temporary tree, a
 * free loopback port, whole-file write and read, a fixed stream of
 * pseudo-random test bytes, and stopping a child program with its exit
 * status and log checked. Helpers that can fail do so with cmocka's
 * assert macros, failing the test that called them. Not a test itself:
 * the Makefile links tsupport.o into every unit test.
 */
#ifndef FERRY_TESTS_TSUPPORT_H
#define FERRY_TESTS_TSUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "catalog/catalog.h"

/* rm -rf of dir: depth first, links not followed. Returns nftw's result;
 * callers in teardown may ignore it. */
int tsup_rm_rf(const char *dir);

/* mkdtemp of $TMPDIR/NAME.XXXXXX (TMPDIR unset or empty: /tmp) into
 * dir[cap]. 0, or -1 when it does not fit or cannot be made. */
int tsup_tmpdir(char *dir, size_t cap, const char *name);

/* A loopback port nobody listens on right now (bound, then closed). */
int tsup_free_port(void);

/* 1 when something accepts a TCP connection on 127.0.0.1:port. */
int tsup_port_answers(int port);

/* XOR the byte at off of the file at path with mask (bit rot on disk);
 * asserts that it worked. */
void tsup_flip_byte(const char *path, uint64_t off, uint8_t mask);

/* Create or truncate path (0644) and write len bytes of buf with one
 * write(2), which must write them all. */
void tsup_write_file(const char *path, const void *buf, size_t len);

/* The whole of path, malloc'd with one spare byte after it (so a caller may
 * put a '\0' at [*ret_len]); *ret_len is its size. Free with free(). */
void *tsup_read_file(const char *path, size_t *ret_len);

/* Pages of path in the page cache (mincore), and in *ret_pages how many
 * pages it has. */
size_t tsup_resident(const char *path, size_t *ret_pages);

/* splitmix64: a fixed, portable stream of 64-bit test values. */
uint64_t tsup_splitmix64(uint64_t *state);

/* n pseudo-random bytes from seed (byte i is bits 24..31 of the i-th
 * splitmix64 value), malloc'd; n may be 0. Free with free(). */
uint8_t *tsup_random_bytes(size_t n, uint64_t seed);

/* SIGTERM to the child pid (a ferry program: the replicator) and reap
 * it. 0 when it exited with status 0, as SIGTERM promises; else -1 with
 * one line on stderr naming what and how it ended (status, signal).
 * Returns, not asserts, so teardowns can use it: tests assert it is 0. */
int tsup_stop_child(pid_t pid, const char *what);

/* The same for a helper server the test runs (python3's http.server):
 * 0 when it ended by that SIGTERM (or exited 0), so it was still serving
 * when stopped; else -1, said on stderr. */
int tsup_stop_server(pid_t pid, const char *what);

/* 0 when the file at path (a child's log) holds no sanitizer report —
 * "ERROR: AddressSanitizer", "ERROR: LeakSanitizer", UBSan's "runtime
 * error:" — or does not exist; else -1, with the log copied to stderr. */
int tsup_log_clean(const char *path);

/* A catalog writer on path for generation 1 with the default chunk
 * parameters, its root directory (mode 0755, nlink 2) already added. */
cat_writer *tsup_cat_begin(const char *path);

/* A certificate and its private key (EC P-256, or RSA 2048 when rsa) as
 * PEM files. cn is the
 * subject's common name; valid from now + from_s to now + to_s seconds
 * (negative: in the past). With ca_cert/ca_key (PEM paths) it is signed
 * by that CA and names 127.0.0.1 and localhost (subjectAltName), fit for
 * a server or a client; without, it is a self-signed CA. */
void tsup_cert_make(const char *cert, const char *key, const char *cn,
		    const char *ca_cert, const char *ca_key, long from_s,
		    long to_s, int rsa);

#endif
