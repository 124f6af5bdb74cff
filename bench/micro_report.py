#!/usr/bin/env python3
"""Table and JSON for bench/micro.sh (python3 stdlib only).

  micro_report.py RESULTS.tsv OUT.json

RESULTS.tsv has one line per metric, tab-separated:
  name, unit, limit, op, target, samples, load, note
limit is this machine's measured limit (bench/LIMITS.md, measured by
bench/limits.sh) or empty;
op is ">=" or "<=" when there is a target, empty for a reference-only or
informational number; samples are the space-separated runs (the value is
their median); load is the 1-minute load average when they were taken.

ratio = measured / limit (or / target when there is no limit). A metric
passes when measured op target holds. Writes OUT.json, a list with one
object per metric: name, value, unit, target, pass (null when there is no
target), op, limit, ratio, samples, load, note.
"""
import json
import statistics
import sys


def num(s):
    return float(s) if s.strip() else None


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1000 or v == int(v):
        return "{:,.0f}".format(v)
    return "%.1f" % v if a >= 10 else "%.2f" % v if a >= 1 else "%.3f" % v


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    rows = []
    with open(argv[1], encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            name, unit, limit, op, target, samples, load, note = line.rstrip("\n").split("\t")
            xs = [float(x) for x in samples.split()]
            value = statistics.median(xs)
            limit, target = num(limit), num(target)
            ref = limit if limit is not None else target
            ok = None
            if op == ">=":
                ok = value >= target
            elif op == "<=":
                ok = value <= target
            rows.append(dict(name=name, value=value, unit=unit, target=target, pass_=ok,
                             op=op or None, limit=limit,
                             ratio=round(value / ref, 3) if ref else None,
                             samples=xs, load=num(load), note=note))

    out = [[("metric"), "measured", "limit/target", "ratio", "PASS/MISS"]]
    for r in rows:
        u = r["unit"]
        goal = []
        if r["limit"] is not None:
            goal.append("limit %s" % fmt(r["limit"]))
        if r["op"]:
            goal.append("%s %s" % (r["op"], fmt(r["target"])))
        out.append([r["name"], "%s %s" % (fmt(r["value"]), u),
                    (", ".join(goal) + " " + u) if goal else "-",
                    "%.2f" % r["ratio"] if r["ratio"] is not None else "-",
                    {True: "PASS", False: "MISS", None: "info"}[r["pass_"]]])
    w = [max(len(row[i]) for row in out) for i in range(5)]
    for i, row in enumerate(out):
        print(" | ".join(c.ljust(w[k]) if k == 0 else c.rjust(w[k]) if k < 4 else c
                         for k, c in enumerate(row)).rstrip())
        if i == 0:
            print("-+-".join("-" * x for x in w))
    for r in rows:
        if r["note"]:
            print("  %s: %s" % (r["name"], r["note"]))
    loads = [r["load"] for r in rows if r["load"] is not None]
    if loads:
        print("1-minute load average while measuring: %.2f .. %.2f (2 cores; this benchmark"
              " adds about 1-2, more means others were running too)" % (min(loads), max(loads)))

    for r in rows:
        r["pass"] = r.pop("pass_")
    keys = ["name", "value", "unit", "target", "pass", "op", "limit", "ratio", "samples",
            "load", "note"]
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump([{k: r[k] for k in keys} for r in rows], f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
