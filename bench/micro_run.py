#!/usr/bin/env python3
"""Timing helpers for bench/micro.sh (python3 stdlib only).

  micro_run.py repl [--stop] LOG PIDFILE NREADY -- ferry-replicator ARGS...
      Start the replicator (own session, output to LOG, pid to PIDFILE) and
      wait until NREADY namespaces logged "ready". Prints one line
      "WALL_S FILES DIRS MB SCANNED_S": the wall time from spawn to the last
      ready line (polled every 2 ms), then the fields of that line. The
      replicator's own "scanned in" has 0.1 s resolution, hence the wall
      time. With --stop the replicator is stopped (SIGTERM) afterwards,
      otherwise it keeps serving.
  micro_run.py stat SRC MNT
      stat(2) every non-directory of SRC once, under MNT (a fresh mount, so
      every stat is a cold FUSE LOOKUP; the first file of a directory also
      looks the directory up). Prints "US_PER_STAT COUNT".
  micro_run.py readdir SRC MNT
      opendir + readdir to the end + closedir of every directory of SRC,
      under MNT (a fresh mount), checking each entry count against SRC.
      Prints "US_PER_DIR US_PER_ENTRY DIRS ENTRIES".
  micro_run.py readall SRC MNT
      os.open + os.read to the end + os.close of every file of SRC under MNT, in
      tree order, the bytes checked against SRC's (read before the clock
      starts). Prints "US_PER_FILE FILES".
"""
import os
import re
import signal
import subprocess
import sys
import time

# ferry-replicator: namespace ready ns=N generation=G files=F dirs=D
#   bytes=B chunks=C unique=U seconds=S
READY = re.compile(r"namespace ready ns=\S+ generation=\d+ files=(\d+) dirs=(\d+) "
                   r"bytes=(\d+) .*seconds=([\d.]+)")


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def repl(args):
    do_stop = args[0] == "--stop"
    if do_stop:
        args = args[1:]
    log, pidfile, nready, sep, argv = args[0], args[1], int(args[2]), args[3], args[4:]
    if sep != "--" or not argv:
        sys.exit(__doc__)
    with open(log, "ab") as out:
        start = out.tell()
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True)
    with open(pidfile, "w") as f:
        f.write("%d\n" % p.pid)
    found = []
    with open(log, "rb") as f:
        f.seek(start)
        buf = b""
        while len(found) < nready:
            chunk = f.read()
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for ln in (x.decode(errors="replace") for x in lines):
                    if re.search(r"scan failed ns=", ln):
                        stop(p)
                        sys.exit(ln)
                    if re.search(r"namespace ready ns=", ln):
                        m = READY.search(ln)
                        if not m:
                            stop(p)
                            sys.exit("unexpected ready line (update micro_run.py): " + ln)
                        found.append(m)
                continue
            if p.poll() is not None:
                sys.exit("replicator exited (%d) before ready; see %s" % (p.returncode, log))
            if time.monotonic() - t0 > 600:
                stop(p)
                sys.exit("replicator not ready after 600 s; see %s" % log)
            time.sleep(0.002)
    wall = time.monotonic() - t0
    if do_stop:
        stop(p)
    m = found[-1]
    mb = "%.1f" % (int(m.group(3)) / 1e6)
    print("%.4f %s %s %s %s" % (wall, m.group(1), m.group(2), mb, m.group(4)))


def tree(src):
    """Relative paths of SRC's directories (root excluded) and other entries."""
    dirs, other = [], []
    for dp, dns, fns in os.walk(src):
        rel = os.path.relpath(dp, src)
        dns.sort()
        if rel != ".":
            dirs.append(rel)
        other += [os.path.normpath(os.path.join(rel, fn)) for fn in sorted(fns)]
    return dirs, other


def stat_all(src, mnt):
    _, files = tree(src)
    paths = [os.path.join(mnt, f) for f in files]
    t0 = time.perf_counter()
    for p in paths:
        os.stat(p, follow_symlinks=False)
    dt = time.perf_counter() - t0
    print("%.3f %d" % (dt / len(paths) * 1e6, len(paths)))


def readdir_all(src, mnt):
    dirs, _ = tree(src)
    want = [len(os.listdir(os.path.join(src, d))) for d in dirs]
    paths = [os.path.join(mnt, d) for d in dirs]
    got = []
    t0 = time.perf_counter()
    for p in paths:
        n = 0
        with os.scandir(p) as it:
            for _ in it:
                n += 1
        got.append(n)
    dt = time.perf_counter() - t0
    if got != want:
        sys.exit("readdir through the mount disagrees with %s" % src)
    entries = sum(got)
    print("%.3f %.4f %d %d" % (dt / len(paths) * 1e6, dt / entries * 1e6, len(paths), entries))


def read_all(src, mnt):
    """open + read + close every file through the mount, in tree order;
    the bytes must be the source's."""
    _, files = tree(src)
    want = [open(os.path.join(src, f), "rb").read() for f in files]
    paths = [os.path.join(mnt, f) for f in files]
    got = []
    # os.open/os.read/os.close: the syscalls tar or cat make. Python's
    # open() adds an isatty() ioctl per file, which FUSE forwards to the
    # daemon (one more round trip each).
    t0 = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        parts = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            parts.append(b)
        os.close(fd)
        got.append(b"".join(parts))
    dt = time.perf_counter() - t0
    if got != want:
        sys.exit("a file read through the mount differs from %s" % src)
    print("%.3f %d" % (dt / len(paths) * 1e6, len(paths)))


def main(argv):
    if len(argv) >= 6 and argv[1] == "repl":
        repl(argv[2:])
    elif len(argv) == 4 and argv[1] == "stat":
        stat_all(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "readdir":
        readdir_all(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "readall":
        read_all(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
