/*
 * catalog/base/base_prom.c — the Prometheus text exposition format
 * (version 0.0.4) both daemons answer GET /metrics with, and the
 * lock-free duration histogram behind their latency metrics.
 *
 * The format, as far as it matters here: "# HELP name text" (text with
 * '\' and newline escaped), "# TYPE name type", then one line per sample,
 * name{label="value",...} value, label values with '\', '"' and newline
 * escaped. A histogram is name_bucket{...,le="B"} lines, cumulative and
 * ending with le="+Inf", then name_sum and name_count (= the +Inf bucket).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/base/base.h"

void base_prom_init(struct base_prom *p)
{
	memset(p, 0, sizeof(*p));
}

void base_prom_fini(struct base_prom *p)
{
	base_buf_fini(&p->out);
}

static void prom_put(struct base_prom *p, const char *s, size_t n)
{
	base_buf_add(&p->out, s, n);
}

static void prom_puts(struct base_prom *p, const char *s)
{
	base_buf_str(&p->out, s);
}

/* s with '\' and newline escaped, and '"' too when quoted (label values;
 * HELP text leaves '"' alone, as the format says). */
static void prom_escaped(struct base_prom *p, const char *s, int quoted)
{
	const char *run = s;

	for (; *s; s++) {
		const char *esc = NULL;

		if (*s == '\\')
			esc = "\\\\";
		else if (*s == '\n')
			esc = "\\n";
		else if (*s == '"' && quoted)
			esc = "\\\"";
		if (!esc)
			continue;
		prom_put(p, run, (size_t)(s - run));
		prom_puts(p, esc);
		run = s + 1;
	}
	prom_put(p, run, (size_t)(s - run));
}

void base_prom_family(struct base_prom *p, const char *name, const char *type,
		      const char *help)
{
	prom_puts(p, "# HELP ");
	prom_puts(p, name);
	prom_puts(p, " ");
	prom_escaped(p, help, 0);
	prom_puts(p, "\n# TYPE ");
	prom_puts(p, name);
	prom_puts(p, " ");
	prom_puts(p, type);
	prom_puts(p, "\n");
}

/* name{labels[,le="le"]} : everything of a sample line but its value. */
static void prom_series(struct base_prom *p, const char *name,
			const char *suffix, const struct base_prom_label *l,
			size_t n, const char *le)
{
	size_t i;

	prom_puts(p, name);
	prom_puts(p, suffix);
	if (n == 0 && !le)
		return;
	prom_puts(p, "{");
	for (i = 0; i < n; i++) {
		if (i)
			prom_puts(p, ",");
		prom_puts(p, l[i].name);
		prom_puts(p, "=\"");
		prom_escaped(p, l[i].value ? l[i].value : "", 1);
		prom_puts(p, "\"");
	}
	if (le) {
		prom_puts(p, n ? ",le=\"" : "le=\"");
		prom_puts(p, le);
		prom_puts(p, "\"");
	}
	prom_puts(p, "}");
}

static void prom_value_u64(struct base_prom *p, uint64_t v)
{
	char num[32];
	int k = snprintf(num, sizeof(num), " %" PRIu64 "\n", v);

	prom_put(p, num, (size_t)k);
}

/* Go's strconv spellings, which every parser takes: +Inf, -Inf, NaN;
 * the shortest of %.15g and %.17g that reads back as the same double
 * (0.005, not 0.0050000000000000001). */
static void fmt_double(char *buf, size_t cap, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "NaN");
	else if (isinf(v))
		snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
	else if (snprintf(buf, cap, "%.15g", v) > 0 && strtod(buf, NULL) == v)
		return;
	else
		snprintf(buf, cap, "%.17g", v);
}

void base_prom_u64(struct base_prom *p, const char *name,
		   const struct base_prom_label *labels, size_t n,
		   uint64_t value)
{
	prom_series(p, name, "", labels, n, NULL);
	prom_value_u64(p, value);
}

void base_prom_double(struct base_prom *p, const char *name,
		      const struct base_prom_label *labels, size_t n,
		      double value)
{
	char num[40];

	fmt_double(num, sizeof(num), value);
	prom_series(p, name, "", labels, n, NULL);
	prom_puts(p, " ");
	prom_puts(p, num);
	prom_puts(p, "\n");
}

int base_hist_init(struct base_hist *h, const double *bounds, size_t n)
{
	size_t i;

	memset(h, 0, sizeof(*h));
	if (n > BASE_HIST_MAX)
		return -EINVAL;
	for (i = 1; i < n; i++)
		if (!(bounds[i] > bounds[i - 1]))
			return -EINVAL;
	h->bounds = bounds;
	h->n_bounds = n;
	return 0;
}

void base_hist_observe_ns(struct base_hist *h, uint64_t ns)
{
	double s = (double)ns / 1e9;
	size_t i = 0;

	/* a dozen bounds: a linear walk beats a search */
	while (i < h->n_bounds && s > h->bounds[i])
		i++;
	__atomic_fetch_add(&h->counts[i], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
}

void base_prom_hist(struct base_prom *p, const char *name,
		    const struct base_prom_label *labels, size_t n,
		    const struct base_hist *h)
{
	uint64_t cum = 0;
	char le[40];
	size_t i;

	for (i = 0; i <= h->n_bounds; i++) {
		/* the le of the last bucket is +Inf whatever the table */
		cum += __atomic_load_n(&h->counts[i], __ATOMIC_RELAXED);
		if (i < h->n_bounds)
			fmt_double(le, sizeof(le), h->bounds[i]);
		else
			snprintf(le, sizeof(le), "+Inf");
		prom_series(p, name, "_bucket", labels, n, le);
		prom_value_u64(p, cum);
	}
	prom_series(p, name, "_sum", labels, n, NULL);
	fmt_double(le, sizeof(le),
		   (double)__atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) / 1e9);
	prom_puts(p, " ");
	prom_puts(p, le);
	prom_puts(p, "\n");
	/* _count from the buckets read, so it always equals +Inf */
	prom_series(p, name, "_count", labels, n, NULL);
	prom_value_u64(p, cum);
}
