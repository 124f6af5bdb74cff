/*
 * hydrator/metrics/hyd_metrics.h — ferry-hydrator
 * --metrics-listen HOST:PORT: GET /metrics in the Prometheus text format
 * (docs/metrics.md lists every metric).
 *
 * A thread of its own runs a libuv loop with the shared HTTP engine
 * (catalog/httpd/): one request per connection, GET or HEAD /metrics
 * only, a bounded head, a deadline per connection, a cap on connections
 * (HTTPD_LIMITS_METRICS). It has no authentication: bind it to loopback
 * (or a network only the monitoring can reach). Neither the fetch loop nor a
 * FUSE thread ever waits on a scrape: the numbers are relaxed atomics read
 * where they are (hyd_fetch_stats, struct hyd_read_counts, struct
 * hyd_mount_counts) and the control socket's status (hyd_control_status: the
 * same numbers `ferry status` shows).
 */
#ifndef FERRY_HYD_METRICS_H
#define FERRY_HYD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/base/base.h"
#include "hydrator/fetch/hyd_fetch.h"
#include "hydrator/read/hyd_read.h"
#include "hydrator/status/hyd_control.h"

typedef struct hyd_metrics hyd_metrics;

/* Where the numbers are; everything borrowed until hyd_metrics_stop. */
struct hyd_metrics_src {
	hyd_fetch *fetch;		/* chunk and batch transfers */
	struct hyd_read_counts *read;	/* FUSE reads, store hits */
	struct hyd_mount_counts *mount; /* catalogs, manifests, switches */
	/* backfill progress and state; NULL: left out (see
	 * hyd_metrics_set_control) */
	hyd_control *ctl;
};

/* The metrics text of src into p (base_prom: check p->err after). Any
 * thread; may wait up to about 1.5 s for the control socket's count of
 * the cache (hyd_control_status). */
void hyd_metrics_render(const struct hyd_metrics_src *src, struct base_prom *p);

/* Bind and listen on listen (HOST:PORT, httpd_listen_split's rule; HOST
 * a numeric address or a name that resolves; port 0: any free one, which
 * the log line names), then start the thread. Call after any fork.
 * Returns 0, -EINVAL, -EADDRINUSE, -EADDRNOTAVAIL, -ENOMEM, -errno; logs
 * the failure with the address. */
int hyd_metrics_start(const char *listen, const struct hyd_metrics_src *src,
		      hyd_metrics **ret);

/* Read backfill's progress from ctl from now on (the control socket
 * starts after the metrics server; m NULL: no-op). Any thread; ctl must
 * outlive the server (hyd_metrics_stop first). */
void hyd_metrics_set_control(hyd_metrics *m, hyd_control *ctl);

/* Stop the thread (open connections are closed), free. NULL is a no-op. */
void hyd_metrics_stop(hyd_metrics *m);

#endif
