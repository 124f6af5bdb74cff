/*
 * hydrator/status/hyd_control.h — the hydrator's control socket.
 *
 * A running hydrator listens on CACHEDIR/control.sock (AF_UNIX, stream,
 * mode 0600). A client connects, writes one line ("status\n") and reads
 * one line back: the hyd_status_json of the live status, then the server
 * closes. Served by a small thread of its own (blocking accept/poll), so it
 * neither touches the fetch loop nor a FUSE worker.
 */
#ifndef FERRY_HYD_CONTROL_H
#define FERRY_HYD_CONTROL_H

#include "hydrator/hydrator.h"

typedef struct hyd_control hyd_control;

/* Fills the live parts of a status that hyd_status_from_cache cannot know:
 * state, last_error, pid, wire_bytes of this run added to the stored total,
 * mismatches, retries, failures, rate_now, rate_avg, eta_s, elapsed_s.
 * Called on the control thread with *st already filled from the cache. */
typedef void (*hyd_control_live_fn)(void *arg, struct hyd_status *st);

/* Runs a garbage collection of the store for "gc" (hyd_gc): blocks until
 * it is done; 0 with *ret filled, or -errno. On the control thread. */
typedef int (*hyd_control_gc_fn)(void *arg, struct hyd_gc_result *ret);

/* "pin PATH" (ferry pin): pin PATH (relative to the tree's root, a
 * literal path: glob characters escaped) for the running mount. 0, or
 * -errno with a reason in err. On the control thread. */
typedef int (*hyd_control_pin_fn)(void *arg, const char *path, char *err,
				  size_t cap);

/* Start serving cache_dir/control.sock (a stale socket file is replaced;
 * a live one — another hydrator answering — is -EBUSY). live, gc (may be
 * NULL: "gc" is then an error) and arg are borrowed until
 * hyd_control_stop. Call after daemonizing (it starts a thread). Returns 0
 * or -errno. */
int hyd_control_start(const char *cache_dir, hyd_control_live_fn live,
		      hyd_control_gc_fn gc, void *arg, hyd_control **ret);

/* Answer "pin PATH" with fn (arg as given to start); before it is set,
 * or with NULL, "pin" is an error. Any thread. */
void hyd_control_set_pin(hyd_control *c, hyd_control_pin_fn fn);

/* Send req (one line with its newline) to CACHEDIR/control.sock and read
 * one reply line into line (NUL-terminated, newline dropped), all within
 * timeout_ms. 0, -ENOENT / -ECONNREFUSED (nobody listens), -ETIMEDOUT,
 * -EMSGSIZE, -EPROTO, -errno. */
int hyd__control_ask(const char *cache_dir, const char *req,
		     unsigned timeout_ms, char *line, size_t cap,
		     size_t *ret_len);

/* The reply to "gc": {"catalogs":N,"live":N,"dropped":N,
 * "dropped_bytes":N,"kept":N,"elapsed_s":R} (hyd_gc.c), and back. */
int hyd__gc_json(const struct hyd_gc_result *r, char *buf, size_t cap);
int hyd__gc_parse(const char *buf, size_t len, struct hyd_gc_result *ret);

/* The live status as "status" answers it, for another reader in the
 * process (the metrics endpoint): the cache half from the scanner's memo
 * (a stale one has it count again, waiting for that up to about 1.5 s),
 * then the live callback. 0, -ETIMEDOUT (no count yet), the failed
 * count's -errno, -ENOMEM. Any thread but the control thread, while
 * started. */
int hyd_control_status(hyd_control *c, struct hyd_status *ret);

/* Stop the thread, remove the socket file, free. NULL is a no-op. */
void hyd_control_stop(hyd_control *c);

/* Bounds of the protocol: a reply line is at most HYD_STATUS_LINE_MAX bytes
 * with its newline; hyd_status_json never needs more than
 * HYD_STATUS_JSON_MAX bytes (every string byte written as "\\xNN"). */
#define HYD_STATUS_JSON_MAX 32768u
#define HYD_STATUS_LINE_MAX 65536u

/* Parse one status line (without or with its trailing newline) as
 * hyd_status_json writes it, back into *ret, with jansson: an object, keys
 * in any order, unknown keys ignored (whatever their value), "state"
 * required, missing counters 0 (eta_s -1); a string longer than its field
 * is cut at a UTF-8 character boundary. buf is untrusted: anything that is
 * not one JSON object, a duplicated key, a known field of the wrong type
 * or out of range (counters 0..INT64_MAX, pid 0..INT_MAX), text that is
 * not valid UTF-8 or holds \u0000, or more than HYD_STATUS_LINE_MAX bytes
 * is -EBADMSG and *ret is left untouched. Any thread. */
int hyd__status_parse(const char *buf, size_t len, struct hyd_status *ret);

#endif
