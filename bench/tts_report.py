#!/usr/bin/env python3
"""bench/tts_report.py — the rows of bench/tts.sh ("time to serve") from its
runs: medians, the wire floor, ratios and verdicts.

  tts_report.py --runs WORK/runs.jsonl --tree WORK/tree.json --out OUTDIR
                [--target-rtts "20 50 100"] [--started T] [--commit C]
                [--note TEXT]
  tts_report.py --bytes-per-s RATE      tc's rate syntax to bytes/s

Reads the run records bench/tts.sh wrote (kind ferry, ferry_trace,
ferry_rehearsal (ignored), rsync or probe; one
JSON object a line) and writes OUTDIR/tts.json (a list, one object per
rate, RTT and job: rate, rtt_ms, job, bytes, ferry_s, rsync_s,
rsync_job_s, floor_s, ratio_rsync, ratio_floor, verdict, and the details
below) and OUTDIR/tts.md (the table), and prints one summary line.

  ferry_s      median over the runs of: hydrator start -> job done
  rsync_s      median rsync time; rsync_job_s the median job time on the
               copy; ratio_rsync = ferry_s / (rsync_s + rsync_job_s)
  floor_s      the job's bytes / the link's rate (tbf RATE in bytes/s);
               ratio_floor = ferry_s / floor_s
  link_frac    bytes / ferry_s / rate: the share of the link the job got
  verdict      FAIL: a run failed (a job error, missing or wrong files or
               bytes, rsync's status, a mount that failed, a hydrator
               whose log does not end in exit status=0); cat: PASS when
               link_frac >= 0.8; the other jobs at the target RTTs: PASS
               when ratio_rsync <= 1.0 and ratio_floor <= 1.5, else MISS;
               "-" at other RTTs (measured, not judged)
  trace_s      median of the ferry_trace runs (the job with --prefetch of
               its trace); ratio_trace_rsync, ratio_trace_ferry against
               rsync-then-job and ferry without it; trace_verdict: the
               epoch and the walk PASS when <= 0.7x and <= 0.5x, the model
               when ferry without a trace is <= 1.2x the floor
"""
import argparse
import json
import os
import re
import statistics
import sys

RSYNC_MAX, FLOOR_MAX, CAT_MIN = 1.0, 1.5, 0.8
# with the job's trace (--prefetch): <= 0.7x rsync-then-job and <= 0.5x
# the same job without it (the epoch and the walk); the model without a
# trace (its loader reads in tensor order): <= 1.2x the floor
TRACE_RSYNC_MAX, TRACE_FERRY_MAX, MODEL_FLOOR_MAX = 0.7, 0.5, 1.2


def bytes_per_s(rate):
    m = re.fullmatch(r"([0-9]+)([kmg]?)(bit|bps)", rate.lower())
    if not m:
        raise ValueError("cannot read rate %r (e.g. 1gbit, 200mbit)" % rate)
    n = int(m.group(1)) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[m.group(2)]
    return n if m.group(3) == "bps" else n // 8


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def r3(x):
    return None if x is None else round(x, 3)


def medi(xs):
    m = med(xs)
    return None if m is None else int(round(m))


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def rows_of(runs, tree, target_rtts):
    keys, probes = [], {}
    for r in runs:
        if r.get("kind") == "probe":
            probes[(r["rate"], str(r["rtt_ms"]), r["streams"])] = r.get("mbit")
            continue
        k = (r["rate"], str(r["rtt_ms"]), r["job"])
        if k not in keys:
            keys.append(k)
    rows = []
    for rate, rtt, job in keys:
        mine = [r for r in runs if (r.get("rate"), str(r.get("rtt_ms")), r.get("job")) == (rate, rtt, job)]
        fe = [r for r in mine if r["kind"] == "ferry"]
        rs = [r for r in mine if r["kind"] == "rsync"]
        tr = [r for r in mine if r["kind"] == "ferry_trace"]
        want = tree["jobs"][job]
        bps = bytes_per_s(rate)
        bad = ["%s#%s %s" % (r["kind"], r["run"], r["ok"]) for r in fe + rs + tr if r.get("ok") != "ok"]
        bad += ["%s#%s hydrator %s" % (r["kind"], r["run"], r.get("hydrator_exit"))
                for r in fe + tr if r.get("ok") == "ok" and str(r.get("hydrator_exit")) != "0"]
        good_tr = [r for r in tr if r.get("ok") == "ok"]
        trace_s = med(r.get("seconds") for r in good_tr)
        good_fe = [r for r in fe if r.get("ok") == "ok"]
        good_rs = [r for r in rs if r.get("ok") == "ok"]
        ferry_s = med(r.get("seconds") for r in good_fe)
        rsync_s = med(r.get("rsync_s") for r in good_rs)
        rsync_job_s = med(r.get("job_s") for r in good_rs)
        floor_s = want["bytes"] / bps
        rsync_total = rsync_s + rsync_job_s if rsync_s is not None and rsync_job_s is not None else None
        ratio_rsync = ferry_s / rsync_total if ferry_s is not None and rsync_total else None
        ratio_floor = ferry_s / floor_s if ferry_s is not None else None
        link_frac = want["bytes"] / ferry_s / bps if ferry_s else None
        rtt_n = float(rtt)
        judged = any(abs(rtt_n - float(t)) < 1e-9 for t in target_rtts)
        why = []
        if bad:
            verdict = "FAIL"
            why = bad
        elif ferry_s is None:
            verdict = "-"
            why = ["ferry not run"]
        elif job == "cat":
            verdict = "PASS" if link_frac >= CAT_MIN else "MISS"
            why = ["%.0f%% of the link (target >= %.0f%%)" % (100 * link_frac, 100 * CAT_MIN)]
        elif not judged:
            verdict = "-"
            why = ["RTT outside the target RTTs"]
        else:
            miss = []
            if ratio_rsync is not None and ratio_rsync > RSYNC_MAX:
                miss.append("%.2fx rsync-then-job (target <= %.1fx)" % (ratio_rsync, RSYNC_MAX))
            if ratio_floor > FLOOR_MAX:
                miss.append("%.2fx the floor (target <= %.1fx)" % (ratio_floor, FLOOR_MAX))
            if ratio_rsync is None:
                why.append("no rsync run: judged on the floor only")
            verdict = "MISS" if miss else "PASS"
            why += miss
        # issue 31's targets: a trace's replay (epoch, walk), the model
        # without one
        trace_verdict, trace_why = "-", []
        ratio_trace_rsync = trace_s / rsync_total if trace_s is not None and rsync_total else None
        ratio_trace_ferry = trace_s / ferry_s if trace_s is not None and ferry_s else None
        if bad:
            trace_verdict = "FAIL"
        elif judged and job in ("epoch", "walk") and trace_s is not None:
            if ratio_trace_rsync is not None and ratio_trace_rsync > TRACE_RSYNC_MAX:
                trace_why.append("%.2fx rsync-then-job with the trace (target <= %.1fx)"
                                 % (ratio_trace_rsync, TRACE_RSYNC_MAX))
            if ratio_trace_ferry is not None and ratio_trace_ferry > TRACE_FERRY_MAX:
                trace_why.append("%.2fx the job without the trace (target <= %.1fx)"
                                 % (ratio_trace_ferry, TRACE_FERRY_MAX))
            trace_verdict = "MISS" if trace_why else "PASS"
        elif judged and job == "model" and ratio_floor is not None:
            if ratio_floor > MODEL_FLOOR_MAX:
                trace_why.append("%.2fx the floor without a trace (target <= %.1fx)"
                                 % (ratio_floor, MODEL_FLOOR_MAX))
            trace_verdict = "MISS" if trace_why else "PASS"
        rows.append({
            "rate": rate, "rtt_ms": int(rtt_n) if rtt_n.is_integer() else rtt_n, "job": job,
            "dir": want.get("file") or want["dir"], "files": want["files"], "bytes": want["bytes"],
            "runs": len(fe) or len(rs),
            "ferry_s": r3(ferry_s), "rsync_s": r3(rsync_s), "rsync_job_s": r3(rsync_job_s),
            "floor_s": r3(floor_s), "ratio_rsync": r3(ratio_rsync), "ratio_floor": r3(ratio_floor),
            "verdict": verdict,
            "why": why,
            "trace_s": r3(trace_s), "ratio_trace_rsync": r3(ratio_trace_rsync),
            "ratio_trace_ferry": r3(ratio_trace_ferry),
            "trace_verdict": trace_verdict, "trace_why": trace_why,
            "trace_wire_bytes": medi(r.get("wire_bytes") for r in good_tr),
            "link_frac": r3(link_frac),
            "ferry_mount_s": r3(med(r.get("mount_s") for r in good_fe)),
            "ferry_job_s": r3(med(r.get("job_s") for r in good_fe)),
            "ferry_wire_bytes": medi(r.get("wire_bytes") for r in good_fe),
            "ferry_veth_bytes": medi(r.get("veth_bytes") for r in good_fe),
            "rsync_veth_bytes": medi(r.get("veth_bytes") for r in good_rs),
            "ferry_exit_wait_s": r3(med(r.get("exit_wait_s") for r in fe)),
            "ferry_killed": sum(1 for r in fe if r.get("killed") == 1),
            "ferry_errors": sum(1 for r in fe if r.get("ok") != "ok"),
            "rsync_errors": sum(1 for r in rs if r.get("ok") != "ok"),
            "link_mbit_1": probes.get((rate, rtt, 1)),
            "link_mbit_4": probes.get((rate, rtt, 4)),
            "rate_mbit": bps * 8 / 1e6,
        })
    return rows, probes


def table(rows):
    out = ["| rate | RTT | job | MB | ferry s | rsync s | job s | floor s | ferry / (rsync+job) | ferry / floor | of link | verdict "
           "| with trace s | trace / (rsync+job) | trace / ferry | trace verdict |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        out.append("| %s | %s ms | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["rate"], r["rtt_ms"], r["job"], r["bytes"] / 1e6, fmt(r["ferry_s"]), fmt(r["rsync_s"]),
            fmt(r["rsync_job_s"]), fmt(r["floor_s"]),
            fmt(r["ratio_rsync"], "%.2fx"), fmt(r["ratio_floor"], "%.2fx"),
            "-" if r["link_frac"] is None else "%.0f%%" % (100 * r["link_frac"]), r["verdict"],
            fmt(r["trace_s"]), fmt(r["ratio_trace_rsync"], "%.2fx"), fmt(r["ratio_trace_ferry"], "%.2fx"),
            r["trace_verdict"]))
    return out


def main():
    ap = argparse.ArgumentParser(description="the rows of bench/tts.sh")
    ap.add_argument("--bytes-per-s", metavar="RATE")
    ap.add_argument("--runs")
    ap.add_argument("--tree")
    ap.add_argument("--out")
    ap.add_argument("--target-rtts", default="20 50 100")
    ap.add_argument("--started", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    if a.bytes_per_s:
        print(bytes_per_s(a.bytes_per_s))
        return 0
    if not (a.runs and a.tree and a.out):
        ap.error("--runs, --tree and --out are needed")
    tree = json.load(open(a.tree))
    runs = [json.loads(l) for l in open(a.runs) if l.strip()] if os.path.exists(a.runs) else []
    rows, probes = rows_of(runs, tree, a.target_rtts.split())
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tts.json"), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    n = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("PASS", "MISS", "FAIL", "-")}
    md = ["## Time to serve (bench/tts.sh)", "",
          "%s UTC, commit %s; %s. Tree: %d files, %.1f MB (seed %s, scale %s)." % (
              a.started, a.commit, a.note, tree["files"], tree["bytes"] / 1e6, tree["seed"], tree["scale"]),
          "",
          "ferry: hydrator start (fresh cache, default options, backfill on) to the job's end on the "
          "mount; rsync: `rsync -a` of the job's subtree into an empty directory, then the job on the copy "
          "(job s); floor: the job's bytes / the link rate. Targets: ferry <= 1.0x rsync+job and <= 1.5x "
          "the floor at %s ms; cat >= 80%% of the link. With trace: the same job on a fresh cache with "
          "`--prefetch` of the trace an earlier mount of that job recorded (`ferry trace export`); "
          "trace verdict: epoch and walk <= %.1fx rsync+job and <= %.1fx the job without the trace, "
          "the model <= %.1fx the floor without one." % (", ".join(a.target_rtts.split()),
                                                         TRACE_RSYNC_MAX, TRACE_FERRY_MAX, MODEL_FLOOR_MAX),
          ""] + table(rows)
    if probes:
        md += ["", "The link through rttproxy (bench/tts_probe.py, bulk TCP): " + "; ".join(
            "%s %s ms: %s Mbit/s one stream, %s four" % (rate, rtt, probes.get((rate, rtt, 1), "-"),
                                                          probes.get((rate, rtt, 4), "-"))
            for rate, rtt in dict.fromkeys((k[0], k[1]) for k in probes))]
    notes = ["- %s %s ms %s: %s" % (r["rate"], r["rtt_ms"], r["job"], "; ".join(r["why"]))
             for r in rows if r["verdict"] == "FAIL"]
    if notes:
        md += ["", "Failures:"] + notes
    fe = [r for r in runs if r.get("kind") == "ferry" and "exit_wait_s" in r]
    if fe:
        waits = sorted(r["exit_wait_s"] for r in fe)
        md += ["", "After the unmount the hydrator was gone in %.1f s (median; %.1f s at most); "
               "%d of %d needed SIGTERM (EXIT_WAIT)." % (
                   statistics.median(waits), waits[-1], sum(1 for r in fe if r.get("killed") == 1), len(fe))]
    summary = "tts: %d rows: %d PASS, %d MISS, %d FAIL%s" % (
        len(rows), n["PASS"], n["MISS"], n["FAIL"], ", %d not judged" % n["-"] if n["-"] else "")
    rr = [r["ratio_rsync"] for r in rows if r["ratio_rsync"] is not None and r["job"] != "cat"]
    if rr:
        summary += "; ferry / (rsync+job) %.2fx to %.2fx" % (min(rr), max(rr))
    tv = {v: sum(1 for r in rows if r["trace_verdict"] == v) for v in ("PASS", "MISS")}
    tt = [r["ratio_trace_rsync"] for r in rows if r["ratio_trace_rsync"] is not None]
    if tt:
        summary += "; with a trace %.2fx to %.2fx (prefetch targets: %d PASS, %d MISS)" % (
            min(tt), max(tt), tv["PASS"], tv["MISS"])
    cat = [r for r in rows if r["job"] == "cat" and r["link_frac"] is not None]
    if cat:
        summary += "; cat %s" % ", ".join("%.0f%% of %s" % (100 * r["link_frac"], r["rate"]) for r in cat)
    md += ["", summary]
    with open(os.path.join(a.out, "tts.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(table(rows)))
    print(summary + " (%s)" % os.path.join(a.out, "tts.md"))
    return 1 if n["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
