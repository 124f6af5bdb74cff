#!/usr/bin/env python3
"""report.py --out DIR --rate RATE RESULTS.jsonl...

Turn the runs of `make bench` (ferry's results.jsonl and the peers'
results.jsonl from bench/peers.sh) into:
  DIR/bench.md    the table (median of runs) and the targets with PASS/MISS
  DIR/bench.json  the same as data
  DIR/bench.png   time-to-browse and time-to-complete per tool and link
                  (gnuplot)
The table is also printed. The targets are the issue's, stated as ratios
against the peers measured in the same run; a target whose inputs are
missing is reported as "n/a", never as a pass.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

COLS = [("browse_s", "browse s"), ("fb_large_s", "1st byte large s"),
        ("fb_small_s", "1st byte small s"), ("full_s", "complete s"),
        ("wire_bytes", "wire MB"), ("wire_ratio", "tree/wire"),
        ("peak_rss_kb", "peak RSS MB"), ("repl_cpu_s_per_gb", "replicator CPU s/GB"),
        ("correct", "correct")]
# Only in the "5% changed" rows (bench/update.sh).
UPDATE_COLS = [("changed_bytes", "changed chunks+catalog"), ("rescan_s", "rescan s"),
               ("hash_s", "hash s"), ("switch_s", "mount switch s")]
# Only in the local copy's row (bench/medium.sh): rsync, then sync(1).
LOCAL_COLS = [("synced_s", "with sync s")]
# Only in the medium tree's tar rows (bench/medium.sh).
TAR_COLS = [("warm_s", "warm tar s"), ("warm_mbps", "warm MB/s"),
            ("hot_s", "hot tar s"), ("hot_mbps", "hot MB/s")]

# Only in the --into row (bench/medium.sh): read by its targets.
INTO_COLS = [("landed_s", "landed s"), ("disk_bytes", "disk bytes"),
             ("tree_alloc_bytes", "tree allocated bytes"), ("tar_s", "tar of DIR s"),
             ("src_tar_s", "tar of the source s")]

# Only in the rows of many machines (bench/s3.sh, bench/cache.sh).
REGION_COLS = [("get_mib_s", "GetObject MiB/s (boto3)"), ("curl_mib_s", "GetObject MiB/s (curl)"),
               ("cat_mib_s", "mount read MiB/s"), ("list_s", "ListObjectsV2 s"), ("ls_s", "ls s"),
               ("direct_s", "direct complete s"), ("slowest_s", "slowest cached complete s"),
               ("origin_ratio", "origin / unique bytes"), ("time_ratio", "slowest / direct")]
REGION = ("ferry_s3", "ferry_cache")
# Only in the KV-cache row (bench/kv.sh).
KV_COLS = [("hit_pct", "ferry hit %"), ("ideal_lru_pct", "ideal LRU %"), ("hit_ms_p50", "hit ms"),
           ("local_ms_p50", "local read ms"), ("hit_vs_local", "hit / local"), ("miss_ms_p50", "miss ms"),
           ("miss_ms_p90", "miss ms p90"), ("absent_stat_ms_p50", "absent key stat ms"),
           ("store_peak_mb", "store peak MB"), ("store_end_mb", "store end MB"),
           ("cache_max_mb", "--cache-max MB")]

NAMES = {"rsync_hx": "rsync -aHX", "rsync": "rsync -a", "rsync_z": "rsync -az",
         "rclone_mount": "rclone mount", "rclone_copy": "rclone copy",
         "casync_mount": "casync mount", "casync_extract": "casync extract",
         "ferry_mount": "ferry mount", "ferry_sync": "ferry sync",
         "ferry_mount_tls": "ferry mount over https",
         "ferry_start": "ferry from source start",
         "ferry_kv": "ferry mount --cache-max, KV-cache lookups",
         "rsync_local": "rsync -aHX (local copy)", "ferry_tar": "tar of the complete mount",
         "update_rsync": "rsync -aHX --delete rerun", "update_ferry": "ferry sync --delete rerun",
         "update_mount": "ferry mount --poll 1 follows",
         "seed_rsync": "rsync -aHX --delete into the old copy",
         "seed_rsync_link": "rsync -aHX --link-dest=OLD",
         "seed_rsync_copy": "rsync -aHX --copy-dest=OLD",
         "seed_ferry": "ferry sync --seed OLD",
         "seed_ferry_link": "ferry sync --link-dest OLD",
         "seed_ferry_basis": "ferry sync --delete into the old copy",
         "seed_ferry_cold": "ferry sync, nothing local",
         "ttfb_tls": "mount over https + token, first byte",
         "ttfb_ssh": "mount over ssh, first byte",
         "ttfb_ssh_cm": "mount over ssh (ControlMaster up), first byte"}


def rate_bps(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)(bit|bps)?", rate.lower())
    if not m:
        sys.exit("report.py: cannot parse rate %r" % rate)
    v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    return v * 8 if m.group(3) == "bps" else v


def correct_of(r):
    """exact / content / DIFF, as bench/peers.sh labels its runs; ferry
    runs must also pass the stricter treecmp to be called exact."""
    if "correct" in r and r["correct"] is not None and "strict_ok" not in r:
        return r["correct"]
    if r.get("verdict") is None and r.get("strict_ok") is None:
        return None  # not checked in this run (medium.sh checks elsewhere)
    v = r.get("verdict") or {}
    if not isinstance(v, dict):
        return None
    if v.get("meta_ok") and r.get("strict_ok", True):
        return "exact"
    return "content" if v.get("content_ok") else "DIFF"


def load(paths):
    runs = {}
    for p in paths:
        if not os.path.exists(p):
            continue
        for line in open(p):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("error"):
                continue
            if r.get("tree_bytes") and r.get("wire_bytes"):
                r["wire_ratio"] = r["tree_bytes"] / r["wire_bytes"]
            r["correct"] = correct_of(r)
            runs.setdefault((r["rate"], r["approach"]), []).append(r)
    return runs


def medians(runs):
    rows = {}
    for key, rs in runs.items():
        row = {"runs": len(rs)}
        for k, _ in COLS + TAR_COLS + UPDATE_COLS + REGION_COLS + LOCAL_COLS + INTO_COLS + KV_COLS:
            vals = [r.get(k) for r in rs if r.get(k) is not None]
            if k == "correct":
                row[k] = ",".join(sorted(set(str(v) for v in vals))) or None
                continue
            nums = [v for v in vals if isinstance(v, (int, float))]
            row[k] = statistics.median(nums) if nums else None
        rows[key] = row
    return rows


def fmt(k, v):
    if v is None:
        return "—"
    if k == "wire_bytes":
        return "%.1f" % (v / 1e6)
    if k == "peak_rss_kb":
        return "%.0f" % (v / 1024)
    if k == "wire_ratio":
        return "%.2f" % v
    if isinstance(v, float):
        return "%.3f" % v if v < 1 else "%.2f" % v
    return str(v)


def medium_targets(rows, rate, add):
    """The fast-link issue's targets on the medium tree (bench/medium.sh)."""
    m, lo = "medium-" + rate, "medium-loopback"
    bps = rate_bps(rate)

    def get(label, appr, k):
        return (rows.get((label, appr)) or {}).get(k)

    def ratio(a, b):
        return a / b if a is not None and b else None

    rs = get(m, "rsync_hx", "full_s")
    for appr in ("ferry_mount", "ferry_sync"):
        full = get(m, appr, "full_s")
        add("medium %s: %s complete vs rsync -aHX" % (rate, NAMES[appr]), ratio(full, rs), 0.6, "le",
            "time to everything local / rsync -aHX over the same link")
        wire = get(m, appr, "wire_bytes")
        add("medium %s: %s complete vs own wire bytes / link rate" % (rate, NAMES[appr]),
            ratio(full, wire * 8 / bps if wire else None), 1.25, "le",
            "completion / (wire bytes * 8 / %s)" % rate)
    # ferry ends durable (the store's groups are fdatasynced before they
    # count; ferry sync ends with a syncfs of DEST), rsync does not: the
    # same two ratios also against rsync followed by sync(1).
    for what, key, copy in (("", "full_s", "local rsync -aHX copy"),
                            (", both durable", "synced_s", "local rsync -aHX + sync")):
        local = get(lo, "rsync_local", key)
        add("medium loopback%s: ferry mount complete vs %s" % (what, copy),
            ratio(get(lo, "ferry_mount", "full_s"), local), 1.0, "le",
            "mount start -> backfill complete / (%s) on this machine" % copy)
        add("medium loopback%s: ferry sync vs %s" % (what, copy),
            ratio(get(lo, "ferry_sync", "full_s"), local), 1.2, "le",
            "ferry sync to an empty DEST / (%s) on this machine" % copy)
    # the mount that becomes the copy (--into DIR, then ferry finish)
    into = rows.get((m, "ferry_into")) or {}
    add("medium %s: mount --into DIR to ferry finish vs the mount's complete" % rate,
        ratio(into.get("full_s"), get(m, "ferry_mount", "full_s")), 1.1, "le",
        "mount start -> DIR in the mount's place / mount start -> backfill complete")
    add("medium %s: disk used after ferry finish vs the tree's allocated size" % rate,
        ratio(into.get("disk_bytes"), into.get("tree_alloc_bytes")), 1.05, "le",
        "du of DIR and the cache (store dropped) / du of the source tree")
    add("medium %s: tar of DIR after ferry finish vs tar of the source tree" % rate,
        ratio(into.get("tar_s"), into.get("src_tar_s")), 1.1, "le",
        "both from a dropped page cache, on the same disk")
    add("medium: warm tar of the mount with --into (landed) vs without (complete)",
        ratio(get(lo, "ferry_tar", "warm_s"), into.get("warm_s")), 1.5, "ge",
        "speed-up: warm tar of the plain mount (volumes in the page cache) / "
        "warm tar of the --into mount once landed (DIR in the page cache)")
    warm = get(lo, "ferry_tar", "warm_mbps")
    add("medium loopback: warm tar of the complete mount, GB/s",
        warm / 1000 if warm is not None else None, 1.0, "ge",
        "fresh mount of the complete cache (packs in the page cache), tar | wc -c")


def region_targets(rows, add):
    """The targets of many machines (bench/s3.sh, bench/cache.sh)."""
    s3 = next((v for (label, appr), v in rows.items() if appr == "ferry_s3"), {})
    ca = next((v for (label, appr), v in rows.items() if appr == "ferry_cache"), {})
    g, c = s3.get("get_mib_s"), s3.get("cat_mib_s")
    add("S3 GetObject (hydrated 1 GiB) vs reading it through the mount",
        g / c if g and c else None, 0.8, "ge",
        "boto3 GetObject MiB/s / cat of the mount MiB/s, medians")
    l, s = s3.get("list_s"), s3.get("ls_s")
    add("S3 ListObjectsV2 of 30,000 entries in pages of 1,000 vs ls on the mount",
        l / s if l and s else None, 2.0, "le", "list seconds / ls seconds, medians")
    add("hydrators behind one nginx: origin bytes / unique frame bytes",
        ca.get("origin_ratio"), 1.15, "le", "frame bytes the replicator served / one direct hydrator's")
    add("hydrators behind one nginx: slowest complete / one direct hydrator",
        ca.get("time_ratio"), 1.5, "le", "each cached hydrator's complete time / the direct one's")


def kv_targets(rows, add):
    """The KV-cache row's targets (bench/kv.sh)."""
    kv = next((v for (label, appr), v in rows.items() if appr == "ferry_kv"), {})
    h, i = kv.get("hit_pct"), kv.get("ideal_lru_pct")
    add("KV cache, --cache-max 1/10 of the store: ferry hit rate vs ideal LRU, points apart",
        abs(h - i) if h is not None and i is not None else None, 5.0, "le",
        "|ferry's hit % - an ideal LRU's of --cache-max bytes on the same trace|")
    add("KV cache: read time per hit vs a read of a local file of the same size",
        kv.get("hit_vs_local"), 2.0, "le",
        "median over hits of (read of a stored blob through the mount / read of the same file "
        "on local disk right after, in memory)")


def targets(rows, rate, medium_rate=None):
    """The issue's targets: (name, measured ratio, limit, 'le'|'ge', how)."""
    r0, r20 = rate, rate + "+rtt20ms"
    bps = rate_bps(rate)

    def get(label, appr, k):
        return (rows.get((label, appr)) or {}).get(k)

    def ratio(a, b):
        return a / b if a is not None and b else None

    out = []

    def add(name, value, limit, op, how):
        out.append({"target": name, "ratio": value, "limit": limit, "op": op, "how": how,
                    "result": "n/a" if value is None else
                    ("PASS" if (value <= limit if op == "le" else value >= limit) else "MISS")})

    fb = get(r0, "ferry_mount", "browse_s")
    add("browse vs rsync -aHX (0 RTT)", ratio(fb, get(r0, "rsync_hx", "full_s")), 1 / 20, "le",
        "ferry mount start -> ls -lR done / rsync -aHX completion")
    add("browse vs rclone mount (0 RTT)", ratio(fb, get(r0, "rclone_mount", "browse_s")), 1 / 2, "le",
        "ferry browse / rclone mount browse")
    add("browse vs rclone mount (20 ms RTT)",
        ratio(get(r20, "ferry_mount", "browse_s"), get(r20, "rclone_mount", "browse_s")), 1 / 10, "le",
        "ferry browse / rclone mount browse")
    for size in ("large", "small"):
        k = "fb_%s_s" % size
        add("first byte %s vs rclone mount (0 RTT)" % size,
            ratio(get(r0, "ferry_mount", k), get(r0, "rclone_mount", k)), 1.0, "le",
            "fresh mount start -> head -c1 returned, mount included")
        add("first byte %s vs casync mount (20 ms RTT)" % size,
            ratio(get(r20, "ferry_mount", k), get(r20, "casync_mount", k)), 1 / 2, "le",
            "fresh mount start -> head -c1 returned, mount included")
    st = lambda k: get(r0, "ferry_start", k)
    add("from source start: browse vs rsync -aHX (0 RTT)",
        ratio(st("browse_s"), get(r0, "rsync_hx", "full_s")), 1 / 10, "le",
        "replicator start (fresh state) -> ls -lR of a fresh mount done / rsync -aHX completion")
    add("from source start: first byte small vs rsync -aHX (0 RTT)",
        ratio(st("fb_small_s"), get(r0, "rsync_hx", "fb_small_s")), 1 / 2, "le",
        "replicator start -> head -c1 returned / rsync -aHX start -> the file exists")
    add("from source start: first byte large vs rsync -aHX (0 RTT)",
        ratio(st("fb_large_s"), get(r0, "rsync_hx", "fb_large_s")), 1 / 2, "le",
        "replicator start -> head -c1 returned / rsync -aHX start -> the file exists")
    for appr in ("ferry_mount", "ferry_sync"):
        full = get(r0, appr, "full_s")
        add("%s complete vs rsync -aHX (0 RTT)" % NAMES[appr],
            ratio(full, get(r0, "rsync_hx", "full_s")), 0.6, "le",
            "time to everything local / rsync -aHX completion")
        wire = get(r0, appr, "wire_bytes")
        add("%s complete vs own wire bytes / link rate (0 RTT)" % NAMES[appr],
            ratio(full, wire * 8 / bps if wire else None), 1.25, "le",
            "completion / (wire bytes * 8 / %s)" % rate)
        add("%s complete at 20 ms RTT vs 0 RTT" % NAMES[appr],
            ratio(get(r20, appr, "full_s"), full), 1.2, "le", "own completion time, 20 ms / 0 ms RTT")
        exact = get(r0, appr, "correct")
        wr = get(r0, appr, "wire_ratio")
        add("%s logical/wire (0 RTT, exact metadata)" % NAMES[appr],
            wr if exact == "exact" else (0.0 if wr is not None else None), 1.9, "ge",
            "tree bytes / wire bytes on the link; 0 when the result was not exact")
    for label, rtt in ((r0, "0 RTT"), (r20, "20 ms RTT")):
        add("ferry mount complete over https vs plain http (%s)" % rtt,
            ratio(get(label, "ferry_mount_tls", "full_s"), get(label, "ferry_mount", "full_s")), 1.1,
            "le", "the same mount and tar, --tls-cert on the replicator / without")
    u = "update-" + rate
    add("5%% changed: ferry sync --delete rerun vs rsync -aHX --delete rerun (%s)" % rate,
        ratio(get(u, "update_ferry", "full_s"), get(u, "update_rsync", "full_s")), 2.0, "le",
        "rerun time after the change, both from the same memory state")
    add("5%% changed: ferry wire vs changed chunks + catalog (%s)" % rate,
        ratio(get(u, "update_ferry", "wire_bytes"), get(u, "update_ferry", "changed_bytes")), 1.5,
        "le", "wire bytes / (compressed bytes of the chunks fetched + the compressed catalog)")
    add("5%% changed: mount follows, complete vs rsync -aHX --delete rerun (%s)" % rate,
        ratio(get(u, "update_mount", "full_s"), get(u, "update_rsync", "full_s")), 2.0, "le",
        "publication -> every changed chunk stored in the mount (exact tree) / rsync's rerun")
    add("5%% changed: mount wire vs changed chunks + delta (%s)" % rate,
        ratio(get(u, "update_mount", "wire_bytes"), get(u, "update_mount", "changed_bytes")), 1.5,
        "le", "wire bytes / (compressed bytes of the chunks fetched + the compressed delta)")
    sd = "seed-" + rate
    for appr, peer in (("seed_ferry", "seed_rsync_copy"), ("seed_ferry_link", "seed_rsync_link"),
                       ("seed_ferry_basis", "seed_rsync")):
        add("90%% here: %s vs %s, time (%s)" % (NAMES[appr], NAMES[peer], rate),
            ratio(get(sd, appr, "full_s"), get(sd, peer, "full_s")), 1.0, "le",
            "time to the new copy, both from the same memory state and an empty cache")
        add("90%% here: %s vs %s, wire bytes (%s)" % (NAMES[appr], NAMES[peer], rate),
            ratio(get(sd, appr, "wire_bytes"), get(sd, peer, "wire_bytes")), 1.0, "le",
            "bytes on the link, both directions")
    add("90%% here: ferry sync --seed OLD vs nothing local, wire bytes (%s)" % rate,
        ratio(get(sd, "seed_ferry", "wire_bytes"), get(sd, "seed_ferry_cold", "wire_bytes")), 0.2,
        "le", "what the seed saves: 10% changed should move about 10%")
    for rtt in ("0ms", "50ms"):
        tl = "ttfb-" + rtt
        for appr in ("ttfb_ssh", "ttfb_ssh_cm"):
            add("time to first byte: %s vs over https with tokens (%s RTT)" % (NAMES[appr], rtt),
                ratio(get(tl, appr, "full_s"), get(tl, "ttfb_tls", "full_s")), 1.5, "le",
                "hydrator start -> the first file read back, cold mount of 10,000 files")
    if medium_rate:
        medium_targets(rows, medium_rate, add)
    region_targets(rows, add)
    kv_targets(rows, add)
    return out


def table(rows):
    lines = ["| link | approach | runs | " + " | ".join(c[1] for c in COLS) + " |",
             "|" + "---|" * (len(COLS) + 3)]
    tar, region, kv = [], [], []
    for (label, appr) in sorted(rows, key=lambda k: (k[0], not k[1].startswith("ferry"), k[1])):
        row = rows[(label, appr)]
        if appr in REGION:
            region.append("| %s | %s | %d | " % (label, appr, row["runs"]) +
                          " | ".join(fmt(k, row[k]) for k, _ in REGION_COLS) + " |")
            continue
        if appr == "ferry_kv":
            kv.append("| %s | %s | %d | " % (label, NAMES[appr], row["runs"]) +
                      " | ".join(fmt(k, row[k]) for k, _ in KV_COLS) + " |")
            continue
        if appr == "ferry_tar":
            tar.append("| %s | %s | %d | " % (label, NAMES[appr], row["runs"]) +
                       " | ".join(fmt(k, row[k]) for k, _ in TAR_COLS) + " |")
            continue
        lines.append("| %s | %s | %d | " % (label, NAMES.get(appr, appr), row["runs"]) +
                     " | ".join(fmt(k, row[k]) for k, _ in COLS) + " |")
    if tar:
        lines += ["", "| link | read | runs | " + " | ".join(c[1] for c in TAR_COLS) + " |",
                  "|" + "---|" * (len(TAR_COLS) + 3)] + tar
    if region:
        lines += ["", "| link | rows | runs | " + " | ".join(c[1] for c in REGION_COLS) + " |",
                  "|" + "---|" * (len(REGION_COLS) + 3)] + region
    if kv:
        lines += ["", "| link | rows | runs | " + " | ".join(c[1] for c in KV_COLS) + " |",
                  "|" + "---|" * (len(KV_COLS) + 3)] + kv
    upd = ["| %s | %s | " % (label, NAMES[appr]) +
           " | ".join(fmt("wire_bytes" if k == "changed_bytes" else k, rows[(label, appr)][k])
                      for k, _ in UPDATE_COLS) + " |"
           for (label, appr) in sorted(rows) if appr in ("update_ferry", "update_mount")]
    if upd:
        lines += ["", "| link | rerun | changed chunks+catalog MB | rescan s | hash s | mount switch s |",
                  "|---|---|---|---|---|---|"] + upd
    return lines


def target_lines(tg):
    lines = ["| target | measured | limit | result |", "|---|---|---|---|"]
    for t in tg:
        meas = "—" if t["ratio"] is None else "%.3f" % t["ratio"]
        lim = ("<= " if t["op"] == "le" else ">= ") + "%.3g" % t["limit"]
        lines.append("| %s | %s | %s | %s |" % (t["target"], meas, lim, t["result"]))
    return lines


def chart(rows, out):
    """Clustered bars: browse and complete per tool and link, log scale."""
    if not shutil.which("gnuplot"):
        print("report.py: gnuplot not found, no chart", file=sys.stderr)
        return None
    dat = os.path.join(out, "bench.dat")
    keys = sorted(rows, key=lambda k: (k[0], not k[1].startswith("ferry"), k[1]))
    with open(dat, "w") as f:
        for label, appr in keys:
            row = rows[(label, appr)]
            if row["browse_s"] is None or row["full_s"] is None:
                continue
            name = "%s\\n%s" % (NAMES.get(appr, appr), label.replace("+", " +"))
            f.write('"%s" %.3f %.3f\n' % (name, row["browse_s"], row["full_s"]))
    png = os.path.join(out, "bench.png")
    script = f"""
set terminal pngcairo size 1400,700 font ",10"
set output "{png}"
set title "time to browse and time to complete (median of runs; log scale; lower is better)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.01:*]
set ylabel "seconds"
set xtics rotate by -30 scale 0 font ",9"
set grid ytics
set key top left
plot "{dat}" using 2:xtic(1) title "time to browse (mount start -> ls -lR done; copy tools: completion)", \\
     "" using 3 title "time to complete (every byte local)"
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        print("report.py: gnuplot failed: " + r.stderr.strip(), file=sys.stderr)
        return None
    return png


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", required=True)
    ap.add_argument("--medium-rate", help="the medium tree's link (bench/medium.sh)")
    ap.add_argument("results", nargs="+")
    a = ap.parse_args()
    rows = medians(load(a.results))
    tg = targets(rows, a.rate, a.medium_rate)
    lines = table(rows) + [""] + target_lines(tg)
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.out, "bench.md"), "w") as f:
        f.write(text + "\n")
    png = chart(rows, a.out)
    doc = {"rate": a.rate,
           "rows": [dict(link=k[0], approach=k[1], **v) for k, v in sorted(rows.items())],
           "targets": tg, "chart": png}
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump(doc, f, indent=1)
    if png:
        print("\nchart: " + png)


if __name__ == "__main__":
    main()
