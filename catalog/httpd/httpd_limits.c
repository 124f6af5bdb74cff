/*
 * catalog/httpd/httpd_limits.c — the limits every ferry server starts
 * from, side by side, so a difference between them is one a reader can
 * see and a reason is written next to it.
 */
#include "catalog/httpd/httpd.h"

/* ferry-replicator(1), LIMITS: --header-timeout, --idle-timeout,
 * --max-conns (then fitted to the open files limit),
 * --max-conns-per-addr and --max-inflight change the second half. */
const struct httpd_limits HTTPD_LIMITS_REPLICATOR = {
    .url_max = 4096,
    .head_max = 16384,
    .fields_max = 0,
    /* POST /v1/NS/chunks: 1024 ids of 32 bytes, the largest body */
    .body_max = 32768,
    .header_ms = 20000,
    .idle_ms = 60000,
    .max_conns = 4096,
    .per_addr = 128,
    /* a client may send this many requests before their answers */
    .pipeline = 16,
    .per_conn = 0,
    /* --max-inflight: frames read ahead, read buffers, bodies. A busy
     * client's answers hold a few MiB per connection; 128 MiB serves
     * dozens at full speed and keeps thousands that do not read small */
    .inflight_max = 128u << 20,
};

/* --metrics-listen: a scrape is rare and small, one request per
 * connection, ten seconds for all of it, a handful at once. */
const struct httpd_limits HTTPD_LIMITS_METRICS = {
    .url_max = 1024,
    .head_max = 8192,
    .fields_max = 0,
    .body_max = 8192, /* read and ignored: GET /metrics has none */
    .header_ms = 10000,
    .idle_ms = 10000,
    .max_conns = 16,
    .per_addr = 0,
    .pipeline = 1,
    .per_conn = 1,
};

/* --s3-listen: presigned URLs carry their signature in the query, and
 * SigV4 signs many headers; each connection is a thread of its own, so
 * the cap is low. No body is kept (writes are refused: 405), however
 * long, as S3 clients send one with a PUT. */
const struct httpd_limits HTTPD_LIMITS_S3 = {
    .url_max = 16384,
    .head_max = 16384,
    .fields_max = 64,
    .body_max = HTTPD_BODY_ANY,
    .header_ms = 60000,
    .idle_ms = 60000,
    .max_conns = 64,
    .per_addr = 0,
    .pipeline = 1,
    .per_conn = 0,
};
