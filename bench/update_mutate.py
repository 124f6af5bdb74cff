#!/usr/bin/env python3
"""update_mutate.py DIR — the rest of the "5% changed" step of bench/update.sh.

gen_tree.py --mutate 5 changes 5% of the regular files in place; this
adds, deterministically (seed 7): 1% of the files deleted, 1% new files
(4-200 KiB, half text, half random) in existing directories, and one
directory renamed (the first one under dataset/). Prints what it did.
"""
import os
import random
import sys


def regular_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            st = os.lstat(p)
            if os.path.isfile(p) and not os.path.islink(p) and st.st_nlink == 1:
                out.append(os.path.relpath(p, root))
    return out


def main():
    root = sys.argv[1]
    rng = random.Random(7)
    files = regular_files(root)
    k = max(1, len(files) // 100)
    gone = rng.sample(files, k)
    for rel in gone:
        os.unlink(os.path.join(root, rel))
    dirs = sorted({os.path.dirname(f) for f in files})
    for i in range(k):
        d = os.path.join(root, rng.choice(dirs))
        if not os.path.isdir(d):
            continue
        n = rng.randint(4 << 10, 200 << 10)
        if i % 2:
            data = rng.randbytes(n)
        else:
            words = [b"ferry", b"update", b"sample", b"row", b"%d" % i]
            data = b" ".join(rng.choice(words) for _ in range(n // 6))[:n]
        with open(os.path.join(d, "new-%04d.bin" % i), "wb") as f:
            f.write(data)
    ds = os.path.join(root, "dataset")
    first = sorted(e for e in os.listdir(ds) if os.path.isdir(os.path.join(ds, e)))[0]
    os.rename(os.path.join(ds, first), os.path.join(ds, first + "-renamed"))
    print("deleted %d, added %d files, renamed dataset/%s" % (k, k, first))


if __name__ == "__main__":
    main()
