#!/usr/bin/env python3
"""bench/peers_lib.py — the helpers of bench/peers.sh (and of run.sh and
medium.sh, which check ferry's copies the same way). python3 stdlib only.

  peers_lib.py manifest DIR OUT.json
      Record every entry below DIR (type, size, SHA-256 or symlink target,
      mode, mtime, hard-link group, user.* xattrs) in OUT.json; print a
      summary: {"entries", "files", "dirs", "symlinks", "bytes"}.
  peers_lib.py compare MANIFEST.json DIR
      Check DIR against a manifest; print a verdict (JSON):
        content_ok  the same names, types, bytes and symlink targets
        meta_ok     content_ok, and the same permission bits (not of
                    symlinks), mtimes in whole seconds (regular files
                    only), hard-link groups and user.* xattrs
      with counts (missing, extra, content_diff, meta_diff per field) and
      a few example paths. report.py turns it into exact/content/DIFF.
  peers_lib.py label VERDICT_JSON
      exact, content or DIFF.
  peers_lib.py waitfile PATH SIZE T0 [TIMEOUT]
      Poll (every 5 ms) until PATH exists with SIZE bytes; print the
      seconds since T0 (epoch seconds), or NA after TIMEOUT (3600 s).
  peers_lib.py casync-prep STORE TREE_BYTES SECONDS RSS_KB
      One JSON line about a casync store just made: chunks, store bytes,
      unique bytes before compression, both dedup ratios.
  peers_lib.py table RESULTS.jsonl [PREP.jsonl]
      The medians of the runs as a markdown table (what peers.sh prints);
      runs with an error (a copy that failed) are left out and counted.
"""
import hashlib
import json
import os
import stat
import statistics
import sys
import time


def entries(root):
    """(relative path, lstat) of everything below root, in sorted order."""
    todo = [""]
    while todo:
        rel = todo.pop(0)
        full = os.path.join(root, rel) if rel else root
        try:
            names = sorted(os.listdir(full))
        except OSError:
            continue
        sub = []
        for n in names:
            r = os.path.join(rel, n) if rel else n
            try:
                st = os.lstat(os.path.join(root, r))
            except OSError:
                continue
            yield r, st
            if stat.S_ISDIR(st.st_mode):
                sub.append(r)
        todo[0:0] = sub


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def user_xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    out = {}
    for n in sorted(names):
        if n.startswith("user."):
            try:
                out[n] = os.getxattr(path, n, follow_symlinks=False).hex()
            except OSError:
                pass
    return out


def describe(root):
    """{rel: record}; a hard-link group is named by its first path."""
    groups, out = {}, {}
    for rel, st in entries(root):
        p = os.path.join(root, rel)
        rec = {"mode": stat.S_IMODE(st.st_mode), "mtime": int(st.st_mtime), "xattr": user_xattrs(p)}
        if stat.S_ISDIR(st.st_mode):
            rec["type"] = "dir"
        elif stat.S_ISLNK(st.st_mode):
            rec["type"], rec["target"] = "link", os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            rec["type"], rec["size"], rec["sha256"] = "file", st.st_size, digest(p)
            if st.st_nlink > 1:
                rec["group"] = groups.setdefault((st.st_dev, st.st_ino), rel)
        else:
            rec["type"] = "special"
        out[rel] = rec
    return out


def summary(desc):
    s = {"entries": len(desc), "files": 0, "dirs": 0, "symlinks": 0, "bytes": 0}
    for r in desc.values():
        if r["type"] == "file":
            s["files"] += 1
            s["bytes"] += r["size"]
        elif r["type"] == "dir":
            s["dirs"] += 1
        elif r["type"] == "link":
            s["symlinks"] += 1
    return s


CONTENT = ("type", "size", "sha256", "target")


def verdict(want, got):
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ, meta = [], {"mode": 0, "mtime": 0, "hardlink": 0, "xattr": 0}
    for rel in sorted(set(want) & set(got)):
        a, b = want[rel], got[rel]
        if any(a.get(k) != b.get(k) for k in CONTENT):
            differ.append(rel)
            continue
        if a["type"] != "link" and a["mode"] != b["mode"]:
            meta["mode"] += 1
        if a["type"] == "file" and a["mtime"] != b["mtime"]:
            meta["mtime"] += 1
        if a.get("group") != b.get("group"):
            meta["hardlink"] += 1
        if a["xattr"] != b["xattr"]:
            meta["xattr"] += 1
    content_ok = not (missing or extra or differ)
    return {"content_ok": content_ok, "meta_ok": content_ok and not any(meta.values()),
            "missing": len(missing), "extra": len(extra), "content_diff": len(differ),
            "meta_diff": {k: v for k, v in meta.items() if v},
            "examples": missing[:3] + extra[:3] + differ[:3]}


def label(v):
    return "exact" if v.get("meta_ok") else "content" if v.get("content_ok") else "DIFF"


def waitfile(path, size, t0, timeout=3600.0):
    size, t0, timeout = int(size), float(t0), float(timeout)
    while time.time() - t0 < timeout:
        try:
            if os.stat(path).st_size == size:
                return "%.3f" % (time.time() - t0)
        except OSError:
            pass
        time.sleep(0.005)
    return "NA"


def casync_prep(store, tree_bytes, seconds, rss):
    import subprocess
    import threading
    paths = sorted(os.path.join(dp, n) for dp, _, fns in os.walk(store) for n in fns
                   if n.endswith(".cacnk"))
    stored = sum(os.path.getsize(p) for p in paths)
    unz = subprocess.Popen(["zstd", "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def feed():
        for p in paths:
            with open(p, "rb") as f:
                unz.stdin.write(f.read())
        unz.stdin.close()

    t = threading.Thread(target=feed)
    t.start()
    plain = sum(len(b) for b in iter(lambda: unz.stdout.read(1 << 20), b""))
    t.join()
    unz.wait()
    tb = int(tree_bytes)
    return {"approach": "casync_make", "make_s": float(seconds), "chunks": len(paths),
            "store_bytes": stored, "unique_uncompressed_bytes": plain, "tree_bytes": tb,
            "dedup_ratio": tb / max(1, plain), "dedup_plus_zstd_ratio": tb / max(1, stored),
            "peak_rss_kb": int(rss) if str(rss).isdigit() else None}


COLS = [("browse_s", "browse s"), ("fb_large_s", "1st byte large s"), ("fb_small_s", "1st byte small s"),
        ("full_s", "complete s"), ("wire_bytes", "wire MB"), ("http_reqs", "HTTP requests"),
        ("dest_bytes", "dest MB"), ("peak_rss_kb", "peak RSS MB"), ("correct", "correct")]


def cell(key, vals):
    if key == "correct":
        return ",".join(sorted(set(str(v) for v in vals))) or "—"
    nums = [v for v in vals if isinstance(v, (int, float))]
    if not nums:
        return "—"
    m = statistics.median(nums)
    if key in ("wire_bytes", "dest_bytes"):
        return "%.1f" % (m / 1e6)
    if key == "peak_rss_kb":
        return "%.0f" % (m / 1024)
    if key == "http_reqs":
        return "%d" % m
    return "%.2f" % m


def table(results, prep=None):
    rows, failed = {}, {}
    for line in open(results):
        if line.strip():
            r = json.loads(line)
            key = (r["rate"], r["approach"])
            if r.get("error") or r.get("rc") not in (None, 0):
                failed[key] = failed.get(key, 0) + 1
            else:
                rows.setdefault(key, []).append(r)
    out = ["| link | approach | runs | " + " | ".join(c[1] for c in COLS) + " |",
           "|" + "---|" * (len(COLS) + 3)]
    for (rate, appr), rs in rows.items():
        out.append("| %s | %s | %d | " % (rate, appr, len(rs)) +
                   " | ".join(cell(k, [r.get(k) for r in rs if r.get(k) is not None]) for k, _ in COLS) + " |")
    for (rate, appr), n in sorted(failed.items()):
        out.append("(%s at %s: %d failed run%s left out)" % (appr, rate, n, "" if n == 1 else "s"))
    if prep and os.path.exists(prep):
        for line in open(prep):
            if line.strip():
                p = json.loads(line)
                out += ["", "casync make (local, before the runs): %.2f s, %d chunks, store %.1f MB, "
                        "dedup %.2fx, dedup+zstd %.2fx" % (p["make_s"], p["chunks"], p["store_bytes"] / 1e6,
                                                           p["dedup_ratio"], p["dedup_plus_zstd_ratio"])]
    return "\n".join(out)


def main(a):
    if len(a) < 2:
        sys.exit(__doc__)
    cmd = a[1]
    if cmd == "manifest" and len(a) == 4:
        desc = describe(a[2])
        with open(a[3], "w") as f:
            json.dump(desc, f)
        print(json.dumps(summary(desc)))
    elif cmd == "compare" and len(a) == 4:
        with open(a[2]) as f:
            want = json.load(f)
        print(json.dumps(verdict(want, describe(a[3])), ensure_ascii=False))
    elif cmd == "label" and len(a) == 3:
        print(label(json.loads(a[2])))
    elif cmd == "waitfile" and len(a) in (5, 6):
        print(waitfile(*a[2:]))
    elif cmd == "casync-prep" and len(a) == 6:
        print(json.dumps(casync_prep(*a[2:])))
    elif cmd == "table" and len(a) in (3, 4):
        print(table(*a[2:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
