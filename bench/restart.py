#!/usr/bin/env python3
"""bench/restart.py [--state-base DIR] NAME=REPLICATOR... -- GIB...

Replicator start -> ready ("namespace ready" in its log), first start and
restart of the unchanged tree, with a cold page cache before each start
(root: it writes /proc/sys/vm/drop_caches). For each size in GiB a tree of
2,000 files in 40 directories is generated whose bytes sit in 40 large
files; each replicator binary (NAME=PATH, e.g. before=... after=...) is
started twice on its own state directory. Prints the wall time to ready and
the bytes the process read from storage (/proc/PID/io read_bytes) at that
moment, and the generation it serves. python3 stdlib only.

  sudo bench/restart.py after=build/release/bin/ferry-replicator -- 0.25 2 8
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

W = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                 "bench", "restart-work")


def gen(root, total):
    shutil.rmtree(root, ignore_errors=True)
    big = total // 40
    for d in range(40):
        dd = os.path.join(root, "d%02d" % d)
        os.makedirs(dd)
        with open(os.path.join(dd, "big.bin"), "wb") as f:
            left = big
            while left:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
        for i in range(49):
            with open(os.path.join(dd, "s%02d" % i), "wb") as f:
                f.write(os.urandom(1024))


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def start(binp, state, src, log):
    drop_caches()
    with open(log, "ab") as out:
        pos = out.tell()
        t0 = time.monotonic()
        p = subprocess.Popen([binp, "-l", "127.0.0.1:0", "-s", state,
                              "t=" + src], stdout=out, stderr=out)
    while True:
        with open(log, "rb") as f:
            f.seek(pos)
            txt = f.read().decode(errors="replace")
        if " ready" in txt:
            break
        if p.poll() is not None:
            sys.exit("replicator exited: " + txt)
        time.sleep(0.002)
    dt = time.monotonic() - t0
    with open("/proc/%d/io" % p.pid) as f:
        io = dict(l.split(": ") for l in f.read().split("\n") if l)
    line = [l for l in txt.splitlines() if " ready" in l][-1]
    p.send_signal(signal.SIGTERM)
    p.wait()
    gen_ = re.search(r"generation[= ](\d+)", line)
    return dt, int(io["read_bytes"]), gen_.group(1) if gen_ else "?"


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    k = argv.index("--")
    bins = [a.split("=", 1) for a in argv[:k]]
    sizes = [float(x) for x in argv[k + 1:]]
    if not bins or not sizes or any(len(b) != 2 for b in bins):
        sys.exit(__doc__)
    os.makedirs(W, exist_ok=True)
    try:
        for gib in sizes:
            src = os.path.join(W, "src")
            gen(src, int(gib * (1 << 30)))
            for name, binp in bins:
                state = os.path.join(W, "state-" + name)
                shutil.rmtree(state, ignore_errors=True)
                log = os.path.join(W, "log-" + name)
                open(log, "w").close()
                first, rb1, _ = start(binp, state, src, log)
                again, rb2, g = start(binp, state, src, log)
                print("%5.2f GiB %-8s first start->ready %6.2f s (read %8.1f MB)"
                      " | restart->ready %6.2f s (read %8.1f MB, generation %s)"
                      % (gib, name, first, rb1 / 1e6, again, rb2 / 1e6, g),
                      flush=True)
    finally:
        shutil.rmtree(W, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
