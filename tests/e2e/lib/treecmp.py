#!/usr/bin/env python3
"""treecmp.py SRC DST [--content] [--no-dir-times] [--no-nlink] [--exclude NAME]... [--only NAME]...

Compare two trees entry by entry without following symlinks: the set of
names, type and permission bits, size, mtime (ns), uid/gid, nlink, rdev of
devices, symlink targets, xattrs (user.*), and hard-link structure (names
sharing an inode in SRC share one in DST, and only those). With --content,
also the bytes of every regular file; with --no-dir-times, directories'
mtimes are not compared (rsync -O); with --no-nlink, link counts and
the hard-link structure are not (a --link-dest copy shares inodes with
its DIR). Names are compared as bytes.
Exits 0 when equal, 1 with one line per difference otherwise.
"""
import argparse
import hashlib
import os
import stat
import sys


def walk(root, excludes):
    out = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        full = os.path.join(root, rel) if rel else root
        st = os.lstat(full)
        out[rel] = st
        if stat.S_ISDIR(st.st_mode):
            for n in os.listdir(full):
                r = os.path.join(rel, n) if rel else n
                if r in excludes:
                    continue
                stack.append(r)
    return out


def xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    return {n: os.getxattr(path, n, follow_symlinks=False)
            for n in names if n.startswith("user.")}


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--content", action="store_true")
    ap.add_argument("--exclude", action="append", default=[])
    ap.add_argument("--no-dir-times", action="store_true")
    ap.add_argument("--no-nlink", action="store_true")
    ap.add_argument("--only", action="append", default=[],
                    help="with --content, read only these paths")
    a = ap.parse_args()
    src, dst = os.fsencode(a.src), os.fsencode(a.dst)
    ex = {os.fsencode(x) for x in a.exclude}
    s, d = walk(src, ex), walk(dst, ex)
    bad = []
    for r in sorted(set(s) ^ set(d)):
        bad.append("%s: only in %s" % (r, "source" if r in s else "destination"))
    s_groups, d_groups = {}, {}
    for r in sorted(set(s) & set(d)):
        a_, b_ = s[r], d[r]
        show = r.decode(errors="backslashreplace") or "."
        for f in ("st_mode", "st_uid", "st_gid", "st_mtime_ns"):
            if f == "st_mtime_ns" and a.no_dir_times and stat.S_ISDIR(a_.st_mode):
                continue
            if getattr(a_, f) != getattr(b_, f):
                bad.append("%s: %s %r != %r" % (show, f, getattr(a_, f), getattr(b_, f)))
        if not stat.S_ISDIR(a_.st_mode) and a_.st_size != b_.st_size:
            bad.append("%s: size %d != %d" % (show, a_.st_size, b_.st_size))
        if not stat.S_ISDIR(a_.st_mode) and a_.st_nlink != b_.st_nlink and not a.no_nlink:
            bad.append("%s: nlink %d != %d" % (show, a_.st_nlink, b_.st_nlink))
        if stat.S_ISCHR(a_.st_mode) or stat.S_ISBLK(a_.st_mode):
            if a_.st_rdev != b_.st_rdev:
                bad.append("%s: rdev differs" % show)
        sp, dp = os.path.join(src, r), os.path.join(dst, r)
        if stat.S_ISLNK(a_.st_mode) and stat.S_ISLNK(b_.st_mode):
            if os.readlink(sp) != os.readlink(dp):
                bad.append("%s: symlink target differs" % show)
        if not stat.S_ISLNK(a_.st_mode) and xattrs(sp) != xattrs(dp):
            bad.append("%s: xattrs %r != %r" % (show, xattrs(sp), xattrs(dp)))
        if not stat.S_ISDIR(a_.st_mode) and a_.st_nlink > 1 and not a.no_nlink:
            s_groups.setdefault(a_.st_ino, set()).add(r)
            d_groups.setdefault(b_.st_ino, set()).add(r)
        if a.content and stat.S_ISREG(a_.st_mode) and stat.S_ISREG(b_.st_mode):
            if a.only and os.fsdecode(r) not in a.only:
                continue
            try:
                if digest(sp) != digest(dp):
                    bad.append("%s: content differs" % show)
            except OSError as e:
                bad.append("%s: cannot read: %s" % (show, e))
    if sorted(map(sorted, s_groups.values())) != sorted(map(sorted, d_groups.values())):
        bad.append("hard-link groups differ: %r != %r" % (
            sorted(map(sorted, s_groups.values())), sorted(map(sorted, d_groups.values()))))
    for b in bad:
        print("treecmp:", b)
    print("treecmp: %d entries compared, %d differences" % (len(set(s) & set(d)), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
