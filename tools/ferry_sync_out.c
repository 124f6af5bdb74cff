/*
 * tools/ferry_sync_out.c — what `ferry sync` prints: the progress line,
 * the items of -i and -v, and the summary.
 *
 * Progress goes to stdout when it is a terminal (or when -P, --progress
 * or --info=progress2 ask for it), one line rewritten with \r like `rsync
 * --info=progress2`: first while chunks are fetched (bytes are unique
 * chunk bytes stored), then while the tree is written (bytes are file
 * bytes checked or written). The percentage never goes down within a
 * phase: while manifests of pending files are still arriving, each adds
 * to the fetch total, so the line shows the bytes stored "of at least"
 * the total known so far and no percentage (nor time to go) until the
 * total is final. Items are whole lines on stdout: -i prints
 * rsync's itemized code and the path, -v the path of each entry created,
 * written or deleted ("deleting PATH"). The writer and the fetching
 * thread both call in, so every print holds one lock.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"
#include "tools/ferry_priv.h"

static double now_s(void)
{
	return (double)base_now_ns() / 1e9;
}

void ferry_human(uint64_t v, char *buf, size_t cap)
{
	static const char units[] = "KMGTPE";
	double d = (double)v;
	int u = -1;

	while (d >= 1024.0 && u < 5) {
		d /= 1024.0;
		u++;
	}
	if (u < 0)
		snprintf(buf, cap, "%" PRIu64, v);
	else
		snprintf(buf, cap, "%.2f%c", d, units[u]);
}

/* The progress line goes before anything else is printed. */
static void clear_line(struct ferry_sync_out *c)
{
	if (c->shown) {
		printf("\r\033[K");
		c->shown = 0;
	}
}

void ferry_sync_progress(void *arg, const struct hyd_status *st)
{
	struct ferry_sync_out *c = arg;
	char done[32], rate[32], eta[32], man[64] = "", of[48];
	uint64_t num, den;
	double pct, dt, r = 0;
	int phase = st->state == HYD_STATE_BACKFILLING;
	/* While manifests of pending files are still coming, each one adds
	 * its chunks to the total: the total is only a lower bound, and a
	 * percentage of it would go backwards. */
	int growing = phase && st->manifests_local < st->manifests_total;

	if (c->quiet || !(c->tty || c->progress))
		return;
	pthread_mutex_lock(&c->lock);
	if (st->state == HYD_STATE_BACKFILLING) {
		num = st->unique_bytes_stored;
		den = st->unique_bytes_total;
	} else {
		num = st->bytes_hydrated;
		den = st->bytes_total;
	}
	if (phase != c->phase) {
		c->phase = phase;
		c->t0 = now_s();
		c->num0 = num;
		c->pct_shown = 0;
	}
	dt = now_s() - c->t0;
	if (dt > 0.2 && num >= c->num0)
		r = (double)(num - c->num0) / dt;
	pct = den ? 100.0 * (double)num / (double)den : 100.0;
	if (pct > 100)
		pct = 100;
	/* Never backwards within a phase: the end-of-fetch recount (chunks
	 * two manifests share were counted twice as they came) may lower the
	 * share a little; the percentage holds until it is passed. */
	if (pct < c->pct_shown)
		pct = c->pct_shown;
	ferry_human(num, done, sizeof(done));
	ferry_human((uint64_t)r, rate, sizeof(rate));
	/* no time to go against a total that still grows */
	ferry_fmt_hms(growing ? -1 : st->eta_s, eta, sizeof(eta));
	/* Pending files: how many manifests are here, while any is not (the
	 * chunk total grows as they come). */
	if (st->manifests_local < st->manifests_total)
		snprintf(man, sizeof(man), " manifests=%" PRIu64 "/%" PRIu64,
			 st->manifests_local, st->manifests_total);
	if (growing) {
		/* What is stored of what is known, and the total as at least
		 * what is known: no percentage until the total is final. */
		ferry_human(den, of, sizeof(of));
		printf("\r%14s of at least %-9s %10s/s %10s  fetch "
		       "chunks=%" PRIu64 "/%" PRIu64 "%s\033[K",
		       done, of, rate, eta, st->chunks_stored, st->chunks_total,
		       man);
	} else if (phase) {
		c->pct_shown = pct;
		printf("\r%14s %3.0f%% %10s/s %10s  fetch chunks=%" PRIu64
		       "/%" PRIu64 "%s\033[K",
		       done, pct, rate, eta, st->chunks_stored,
		       st->chunks_total, man);
	} else {
		c->pct_shown = pct;
		printf("\r%14s %3.0f%% %10s/s %10s  write files=%" PRIu64
		       "\033[K",
		       done, pct, rate, eta, st->files_hydrated);
	}
	fflush(stdout);
	c->shown = 1;
	pthread_mutex_unlock(&c->lock);
}

/* rsync's --log-file line: DATE TIME [PID] then the format's. */
static void log_item(struct ferry_sync_out *c, const char *code,
		     const char *path, const char *extra,
		     const struct hyd_item_attrs *a)
{
	char line[2 * PATH_MAX], ts[32];
	time_t now = time(NULL);
	struct tm tm;

	ferry_outfmt(c->log_format ? c->log_format : "%i %n%L", code, path,
		     extra, a, line, sizeof(line));
	if (!localtime_r(&now, &tm) ||
	    !strftime(ts, sizeof(ts), "%Y/%m/%d %H:%M:%S", &tm))
		ts[0] = '\0';
	fprintf(c->log, "%s [%ld] %s\n", ts, (long)getpid(), line);
}

void ferry_sync_item(void *arg, const char *code, const char *path,
		     const char *extra, const struct hyd_item_attrs *a)
{
	struct ferry_sync_out *c = arg;
	int del = code[0] == '*';
	/* every change, as -i; else only what is created, written or
	 * deleted, as -v (rsync's --out-format without %i is -v's) */
	int all = c->itemize || (c->out_format && strstr(c->out_format, "%i"));
	char line[2 * PATH_MAX];

	pthread_mutex_lock(&c->lock);
	if (c->log)
		log_item(c, code, path, extra, a);
	pthread_mutex_unlock(&c->lock);
	/* -q silences progress and the summary; asked-for items stay */
	if (!all && !c->out_format && (c->quiet || !c->verbose))
		return;
	if (!all && !del && code[0] == '.')
		return;
	pthread_mutex_lock(&c->lock);
	clear_line(c);
	if (c->out_format && (all || !del)) {
		ferry_outfmt(c->out_format, code, path, extra, a, line,
			     sizeof(line));
		printf("%s\n", line);
	} else if (c->itemize) {
		printf("%-11s %s%s\n", code, path, extra);
	} else {
		printf("%s%s%s\n", del ? "deleting " : "", path, extra);
	}
	pthread_mutex_unlock(&c->lock);
}

void ferry_sync_end_line(struct ferry_sync_out *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->shown)
		printf("\n");
	c->shown = 0;
	pthread_mutex_unlock(&c->lock);
}

void ferry_sync_summary(const struct ferry_sync_out *c,
			const struct hyd_sync_result *r)
{
	char a[32], b[32], d[32];
	uint64_t files_all = r->files + r->dirs + r->symlinks + r->specials;
	double rate =
	    r->elapsed_s > 0 ? (double)r->wire_bytes / r->elapsed_s : 0;
	const char *dry = c->dry_run ? " (DRY RUN)" : "";

	if (c->log)
		fprintf(c->log,
			"%s: received %" PRIu64 " wire bytes, wrote %" PRIu64
			" files (%" PRIu64 " bytes), deleted %" PRIu64
			", total size %" PRIu64 ", generation %" PRIu64 "%s\n",
			c->dry_run ? "dry run" : "done", r->wire_bytes,
			r->files_written, r->bytes_written, r->deleted,
			r->logical_bytes, r->generation,
			r->failed ? ", some entries failed" : "");
	if (c->quiet)
		return;
	ferry_human(r->bytes_written, a, sizeof(a));
	ferry_human(r->wire_bytes, b, sizeof(b));
	ferry_human((uint64_t)rate, d, sizeof(d));
	printf("%s %" PRIu64 " files (%s bytes), fetched %" PRIu64
	       " chunks (%s wire bytes)  %s bytes/sec\n",
	       c->dry_run ? "would write" : "wrote", r->files_written, a,
	       r->chunks_fetched, b, d);
	if (r->deleted || c->delete_extra)
		printf("%s %" PRIu64 " entr%s%s\n",
		       c->dry_run ? "would delete" : "deleted", r->deleted,
		       r->deleted == 1 ? "y" : "ies",
		       r->deletions_skipped ? " (deletions skipped)" : "");
	if (r->seed.bytes_seeded || r->files_linked || r->files_copied ||
	    r->files_compared) {
		ferry_human(r->seed.bytes_seeded, a, sizeof(a));
		printf("seeded %" PRIu64 " chunks (%s bytes) from local "
		       "files; linked %" PRIu64 ", copied %" PRIu64
		       ", left to --compare-dest %" PRIu64 "\n",
		       r->seed.chunks_seeded, a, r->files_linked,
		       r->files_copied, r->files_compared);
	}
	ferry_human(r->logical_bytes, a, sizeof(a));
	printf("total size is %s in %" PRIu64 " entries, generation %" PRIu64
	       ", %.1f s%s%s\n",
	       a, files_all, r->generation, r->elapsed_s,
	       r->failed ? "  (SOME ENTRIES FAILED)" : "", dry);
	if (!c->stats)
		return;
	printf("\nNumber of entries: %" PRIu64 " (reg: %" PRIu64
	       ", dir: %" PRIu64 ", link: %" PRIu64 ", special: %" PRIu64 ")\n",
	       files_all, r->files, r->dirs, r->symlinks, r->specials);
	printf("Number of regular files written: %" PRIu64 "\n",
	       r->files_written);
	printf("Number of deleted entries: %" PRIu64 "\n", r->deleted);
	printf("Total file size: %" PRIu64 " bytes\n", r->logical_bytes);
	printf("Total written file size: %" PRIu64 " bytes\n",
	       r->bytes_written);
	printf("Unique chunk bytes: %" PRIu64 " bytes\n", r->unique_bytes);
	printf("Dedup savings: %" PRId64 " bytes\n",
	       (int64_t)(r->logical_bytes - r->unique_bytes));
	printf("Bytes at rest in the store: %" PRIu64 " bytes\n",
	       r->rest_bytes);
	printf("Compression savings: %" PRId64 " bytes\n",
	       (int64_t)(r->unique_bytes - r->rest_bytes));
	printf("Chunks fetched: %" PRIu64 "\n", r->chunks_fetched);
	printf("Chunks written from memory: %" PRIu64 "\n", r->chunks_handed);
	printf("Seed files read: %" PRIu64 " (%" PRIu64 " bytes)\n",
	       r->seed.files_read, r->seed.bytes_read);
	printf("Chunks seeded: %" PRIu64 " (%" PRIu64 " bytes)\n",
	       r->seed.chunks_seeded, r->seed.bytes_seeded);
	printf("Files linked, copied, compared from -dest dirs: %" PRIu64
	       ", %" PRIu64 ", %" PRIu64 "\n",
	       r->files_linked, r->files_copied, r->files_compared);
	printf("Wire bytes received: %" PRIu64 "\n", r->wire_bytes);
	printf("Generation: %" PRIu64 "\n", r->generation);
	printf("Elapsed: %.3f s\n", r->elapsed_s);
	printf("Rate: %.0f wire bytes/sec\n", rate);
	printf("Failed entries: %" PRIu64 " (vanished at the source: %" PRIu64
	       ")\n",
	       r->failed, r->vanished);
}
