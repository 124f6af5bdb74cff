#!/usr/bin/env python3
"""bench/kv_job.py MOUNT MANIFEST --cache-max BYTES [options] — an
inference server's KV-cache lookups against a store laid out as LMCache's
file-system connector lays it out (bench/kv_gen.py made it; MOUNT serves
it, e.g. a ferry mount), for examples/kv-cache.sh and bench/kv.sh.

The trace: LOOKUPS keys, fixed by the seed. A share ABSENT of them are
keys that do not exist (bench/kv_gen.py's "absent"); the rest are drawn
from the blobs in a skewed Zipf order (exponent ZIPF over a seeded
ranking of the blobs: a few hot prefixes, a long tail). Each lookup does
what the connector does: os.stat of MOUNT/KEY.data (not there: a miss in
LMCache's sense; no read), then, when it exists, the file read whole
into one buffer. Every byte read is checked against the manifest's
sha256.

The reader's memory does not hold the store: after each read the file's
pages are dropped (posix_fadvise DONTNEED), so every read reaches the
file system (on a ferry mount the kernel would otherwise serve a re-read
from its page cache, which ferry never sees).

A read is a hit when it fetched nothing: with --metrics (the hydrator's
--metrics-listen URL), when ferry_hydrator_chunks_fetched_total and the
store's miss count did not move during it; without, when it took less
than --miss-ms. --metrics also gives ferry's own chunk lookups
(ferry_hydrator_store_lookups_total, hit and miss) over the trace.

Printed: lookups, files read, ferry's hit rate, time per hit and per
miss (median, p90), with --local DIR (a plain local copy of the store)
the time of a read of the same file from DIR for each hit, its pages
in memory (what a hit is compared with: the median of each hit's time
over its local read's) and then dropped (from the disk, for context),
the ideal LRU hit rate of a cache of --cache-max bytes on the
same trace (whole blobs, least recently read evicted first), and with
--store CACHEDIR the peak of the store's allocated bytes (CACHEDIR's
volumes, sampled after every read). --scan then reads every blob once
more, in name order, checked the same way. --json FILE gets one JSON
object with every number.

Exit status: 0; 1 when a byte read differs from the source, a read
fails, a key that exists is missing or one that does not exist is there
(printed loudly); 2 on bad arguments. Standard library only.
"""
import argparse
import bisect
import collections
import hashlib
import json
import math
import os
import random
import statistics
import sys
import time
import urllib.request


def pct(vals, p):
    """Nearest-rank percentile (p in 0..100) in ms; None for no values."""
    if not vals:
        return None
    s = sorted(vals)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def med(vals):
    return statistics.median(vals) if vals else None


def ms(v):
    return "—" if v is None else ("%.2f ms" % v if v < 10 else "%.1f ms" % v)


def scrape(url):
    """{chunks_fetched, lookup_hit, lookup_miss} from the hydrator's /metrics."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {"chunks_fetched": 0.0, "lookup_hit": 0.0, "lookup_miss": 0.0}
    for line in text.splitlines():
        if line.startswith("ferry_hydrator_chunks_fetched_total "):
            out["chunks_fetched"] = float(line.split()[-1])
        elif line.startswith('ferry_hydrator_store_lookups_total{result="hit"}'):
            out["lookup_hit"] = float(line.split()[-1])
        elif line.startswith('ferry_hydrator_store_lookups_total{result="miss"}'):
            out["lookup_miss"] = float(line.split()[-1])
    return out


def store_bytes(cachedir):
    """(allocated, apparent) bytes of the store's volumes in CACHEDIR."""
    alloc = app = 0
    for root, _, files in os.walk(os.path.join(cachedir, "volumes")):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            alloc += st.st_blocks * 512
            app += st.st_size
    return alloc, app


def ideal_lru(trace, sizes, cap):
    """Hits of an LRU cache of CAP bytes over whole blobs on TRACE."""
    cache, used, hits = collections.OrderedDict(), 0, 0
    for k in trace:
        if k in cache:
            hits += 1
            cache.move_to_end(k)
            continue
        if sizes[k] > cap:
            continue
        while used + sizes[k] > cap:
            _, s = cache.popitem(last=False)
            used -= s
        cache[k] = sizes[k]
        used += sizes[k]
    return hits


class Reader:
    def __init__(self, maxsize):
        self.buf = bytearray(maxsize)
        self.mv = memoryview(self.buf)

    def read(self, path, size, drop):
        """(ms, bytes read, sha256 hex) of PATH read whole into the buffer."""
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            n = 0
            while n < size:
                k = f.readinto(self.mv[n:size])
                if not k:
                    break
                n += k
            t1 = time.perf_counter()
            if drop:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return (t1 - t0) * 1e3, n, hashlib.sha256(self.mv[:n]).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mount")
    ap.add_argument("manifest")
    ap.add_argument("--cache-max", type=int, required=True, help="bytes, for the ideal LRU")
    ap.add_argument("--lookups", type=int, default=3000)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--absent", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--metrics", help="the hydrator's metrics URL")
    ap.add_argument("--miss-ms", type=float, help="without metrics: a read slower than this fetched")
    ap.add_argument("--local", help="a plain local copy of the store")
    ap.add_argument("--store", help="the hydrator's cache directory")
    ap.add_argument("--scan", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    a = ap.parse_args()

    man = json.load(open(a.manifest))
    blobs = {b["name"]: b for b in man["blobs"]}
    sizes = {k: b["size"] for k, b in blobs.items()}
    absent = man.get("absent") or []
    if not blobs or a.lookups < 1 or not 0 <= a.absent < 1 or (a.absent > 0 and not absent):
        print("kv_job: nothing to look up (no blobs, no absent keys, or bad --lookups/--absent)", file=sys.stderr)
        return 2

    # the trace: a seeded ranking, Zipf weights over it, ABSENT lookups of
    # keys that do not exist
    r = random.Random(a.seed)
    ranked = sorted(blobs)
    r.shuffle(ranked)
    cum, acc = [], 0.0
    for i in range(len(ranked)):
        acc += 1.0 / (i + 1) ** a.zipf
        cum.append(acc)
    trace = []
    for _ in range(a.lookups):
        if r.random() < a.absent:
            trace.append((r.choice(absent), False))
        else:
            trace.append((ranked[min(bisect.bisect_left(cum, r.random() * acc), len(ranked) - 1)], True))

    m0 = None
    if a.metrics:
        try:
            m0 = scrape(a.metrics)
        except Exception as e:  # noqa: BLE001 - any failure means: no metrics
            print("kv_job: no metrics at %s (%s): hits by latency only" % (a.metrics, e), file=sys.stderr)
            a.metrics = None
    if not a.metrics and a.miss_ms is None:
        print("kv_job: need --metrics or --miss-ms to tell hits from misses", file=sys.stderr)
        return 2

    rd = Reader(max(sizes.values()))
    warm = set()
    errors, bad = [], []
    hit_ms, miss_ms, local_ms, cold_ms, absent_ms, found_ms, ratios = [], [], [], [], [], [], []
    reads = hits = lat_hits = disagree = nbytes = 0
    peak_alloc = peak_app = 0
    peak_at = None
    prev = m0
    t_all = time.perf_counter()

    def sample_store(where):
        nonlocal peak_alloc, peak_app, peak_at
        if a.store:
            al, ap_ = store_bytes(a.store)
            if al > peak_alloc:
                peak_alloc, peak_at = al, where
            peak_app = max(peak_app, ap_)

    for i, (key, exists) in enumerate(trace):
        path = os.path.join(a.mount, key)
        t0 = time.perf_counter()
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        dt = (time.perf_counter() - t0) * 1e3
        if not exists:
            absent_ms.append(dt)
            if st is not None:
                errors.append("%s: exists, but the source has no such key" % key)
            continue
        found_ms.append(dt)
        if st is None or st.st_size != sizes[key]:
            errors.append("%s: %s" % (key, "missing" if st is None else "size %d, not %d" % (st.st_size, sizes[key])))
            continue
        try:
            t, n, digest = rd.read(path, sizes[key], True)
        except OSError as e:
            errors.append("%s: read failed: %s" % (key, e))
            continue
        reads += 1
        nbytes += n
        if n != sizes[key] or digest != blobs[key]["sha256"]:
            bad.append(key)
            print("kv_job: BYTES DIFFER: %s (%d bytes read, sha256 %s, the source's %s)" %
                  (key, n, digest, blobs[key]["sha256"]), file=sys.stderr, flush=True)
        hit = None
        if a.metrics:
            cur = scrape(a.metrics)
            hit = (cur["chunks_fetched"] == prev["chunks_fetched"] and cur["lookup_miss"] == prev["lookup_miss"])
            prev = cur
        if a.miss_ms is not None:
            lh = t < a.miss_ms
            lat_hits += lh
            if hit is None:
                hit = lh
            elif hit != lh:
                disagree += 1
        if hit:
            hits += 1
            hit_ms.append(t)
            if a.local:
                lp = os.path.join(a.local, key)
                if key not in warm:
                    rd.read(lp, sizes[key], False)
                    warm.add(key)
                # in memory, then its pages dropped and read from the disk
                lt, ln, ld = rd.read(lp, sizes[key], True)
                ct, _, _ = rd.read(lp, sizes[key], False)
                if ln != n or ld != digest:
                    errors.append("%s: the local copy differs from the manifest" % key)
                local_ms.append(lt)
                cold_ms.append(ct)
                ratios.append(t / lt)
        else:
            miss_ms.append(t)
        sample_store("lookup %d of the trace" % (i + 1))
        if not a.quiet and (i + 1) % max(1, a.lookups // 10) == 0:
            print("kv_job: %d/%d lookups, %d reads, %d hits, %.0f s" %
                  (i + 1, a.lookups, reads, hits, time.perf_counter() - t_all), file=sys.stderr, flush=True)
    trace_s = time.perf_counter() - t_all
    m1 = scrape(a.metrics) if a.metrics else None

    scanned = 0
    if a.scan:
        for j, key in enumerate(sorted(blobs)):
            try:
                _, n, digest = rd.read(os.path.join(a.mount, key), sizes[key], True)
            except OSError as e:
                errors.append("%s: read failed in the scan: %s" % (key, e))
                continue
            scanned += 1
            if n != sizes[key] or digest != blobs[key]["sha256"]:
                bad.append(key)
                print("kv_job: BYTES DIFFER (scan): %s" % key, file=sys.stderr, flush=True)
            sample_store("blob %d of the scan" % (j + 1))
    final_alloc, final_app = store_bytes(a.store) if a.store else (None, None)

    read_keys = [k for k, e in trace if e and k in blobs]
    ideal = ideal_lru(read_keys, sizes, a.cache_max)
    res = {
        "lookups": len(trace), "absent_lookups": len(absent_ms), "found_lookups": len(found_ms),
        "reads": reads, "read_bytes": nbytes, "hits": hits, "misses": reads - hits,
        "hit_rate": hits / reads if reads else None,
        "hit_by": "metrics" if a.metrics else "latency",
        "latency_hit_rate": lat_hits / reads if reads and a.miss_ms is not None else None,
        "miss_ms_threshold": a.miss_ms,
        "latency_disagreements": disagree if a.metrics and a.miss_ms is not None else None,
        "ideal_lru_hit_rate": ideal / len(read_keys) if read_keys else None,
        "cache_max": a.cache_max, "store_bytes": man["bytes"], "blobs": len(blobs),
        "hit_ms_p50": med(hit_ms), "hit_ms_p90": pct(hit_ms, 90),
        "miss_ms_p50": med(miss_ms), "miss_ms_p90": pct(miss_ms, 90),
        "local_ms_p50": med(local_ms), "local_ms_p90": pct(local_ms, 90),
        "local_cold_ms_p50": med(cold_ms), "local_cold_ms_p90": pct(cold_ms, 90),
        "absent_stat_ms_p50": med(absent_ms), "found_stat_ms_p50": med(found_ms),
        "chunk_lookup_hits": m1["lookup_hit"] - m0["lookup_hit"] if m1 else None,
        "chunk_lookup_misses": m1["lookup_miss"] - m0["lookup_miss"] if m1 else None,
        "chunks_fetched": m1["chunks_fetched"] - m0["chunks_fetched"] if m1 else None,
        "store_peak_alloc": peak_alloc if a.store else None, "store_peak_at": peak_at,
        "store_peak_apparent": peak_app if a.store else None,
        "store_final_alloc": final_alloc, "store_final_apparent": final_app,
        "scanned": scanned if a.scan else None, "trace_s": round(trace_s, 3),
        "zipf": a.zipf, "absent_share": a.absent, "seed": a.seed,
        "bad_bytes": len(bad), "errors": len(errors),
    }
    if ratios:  # each hit against the local read right after it
        res["hit_vs_local"] = med(ratios)
    if res["hit_rate"] is not None and res["ideal_lru_hit_rate"] is not None:
        res["points_below_ideal"] = 100 * (res["ideal_lru_hit_rate"] - res["hit_rate"])

    mb = lambda v: "%.1f MB" % (v / 1e6)  # noqa: E731
    print("   lookups: %d (%d found by stat, %d absent: ENOENT, a miss in LMCache's sense; "
          "stat median %s found, %s absent)" %
          (len(trace), len(found_ms), len(absent_ms), ms(med(found_ms)), ms(med(absent_ms))))
    print("   files read: %d, %s; every read dropped from the page cache after it" % (reads, mb(nbytes)))
    if reads:
        how = ("per the metrics, no chunk fetched and no chunk lookup missed during the read" if a.metrics
               else "each took under %g ms" % a.miss_ms)
        print("   ferry hit rate: %.1f%%: %d of %d reads fetched nothing (%s)" %
              (100 * res["hit_rate"], hits, reads, how))
        if a.metrics and a.miss_ms is not None:
            print("     by latency alone (under %g ms): %.1f%%, %d reads classed otherwise" %
                  (a.miss_ms, 100 * res["latency_hit_rate"], disagree))
        if m1:
            lk = res["chunk_lookup_hits"] + res["chunk_lookup_misses"]
            print("     ferry's chunk lookups (metrics): %d hit, %d miss (%.1f%% hit); %d chunks fetched" %
                  (res["chunk_lookup_hits"], res["chunk_lookup_misses"],
                   100 * res["chunk_lookup_hits"] / lk if lk else 0, res["chunks_fetched"]))
        print("   ideal LRU of %s (--cache-max) on the same trace: %.1f%% (ferry %+.1f points)" %
              (mb(a.cache_max), 100 * res["ideal_lru_hit_rate"], -res["points_below_ideal"]))
        loc = ""
        if local_ms:
            loc = ("\n   a local file of the same size, in memory: median %s, p90 %s "
                   "(hit / local, read by read: median %.2fx); from the disk: median %s, p90 %s" % (
                       ms(res["local_ms_p50"]), ms(res["local_ms_p90"]), res.get("hit_vs_local") or 0,
                       ms(res["local_cold_ms_p50"]), ms(res["local_cold_ms_p90"])))
        print("   time per hit: median %s, p90 %s%s" % (ms(res["hit_ms_p50"]), ms(res["hit_ms_p90"]), loc))
        print("   time per miss: median %s, p90 %s" % (ms(res["miss_ms_p50"]), ms(res["miss_ms_p90"])))
    if a.store:
        print("   store: volumes at most %s allocated (after %s; %s apparent), %s at the end; --cache-max %s" %
              (mb(peak_alloc), peak_at, mb(peak_app), mb(final_alloc), mb(a.cache_max)))
    if a.scan:
        print("   scan: %d of %d blobs read once more in name order" % (scanned, len(blobs)))
    if a.json:
        with open(a.json, "w") as f:
            f.write(json.dumps(res) + "\n")
    for e in errors[:20]:
        print("kv_job: ERROR: " + e, file=sys.stderr)
    if bad:
        print("kv_job: FAILED: %d reads returned bytes that differ from the source" % len(bad), file=sys.stderr)
    if bad or errors:
        return 1
    print("   sha256: every byte read equals the source's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
