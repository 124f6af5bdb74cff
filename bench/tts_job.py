#!/usr/bin/env python3
"""bench/tts_job.py — the jobs of bench/tts.sh ("time to serve"): what a job
at a new region reads first, read the way the real thing reads it.

  tts_job.py model DIR    for each *.safetensors under DIR in name order:
                          the 8-byte header length and the JSON header
                          with ordinary reads, then mmap the file and
                          touch every tensor in offset order through the
                          mapping (a CRC over one byte per 4 KiB and each
                          tensor's last byte: every page is faulted in),
                          like a loader that maps the file
  tts_job.py epoch DIR [--threads 8] [--seed S]
                          every file under DIR, in an order shuffled by
                          the seed, each read whole, by 8 threads (a data
                          loader's epoch)
  tts_job.py walk DIR     an import walk: os.walk in name order, stat
                          every .py and read it whole, one thread
  tts_job.py cat FILE     FILE read sequentially in 1 MiB reads

Each prints one JSON line on stdout: job, path, files, bytes (what it
read), seconds (its own run, from the first open to the last byte), MB/s,
errors and a checksum. A read that fails (EIO, a short file, a bad header)
is reported on stderr and the job exits 1 after the JSON line (errors > 0),
so a failed run is never timed as a success.
"""
import argparse
import json
import mmap
import os
import random
import struct
import sys
import threading
import time
import zlib

PAGE = 4096
BLOCK = 1 << 20


class Job:
    def __init__(self, name, path):
        self.name, self.path = name, path
        self.files = self.bytes = self.errors = 0
        self.crc = 0
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def fail(self, what, err):
        with self.lock:
            self.errors += 1
        print("tts_job %s: %s: %s" % (self.name, what, err), file=sys.stderr, flush=True)

    def done(self):
        s = time.monotonic() - self.t0
        print(json.dumps({"job": self.name, "path": self.path, "files": self.files, "bytes": self.bytes,
                          "seconds": round(s, 3), "mbps": round(self.bytes / 1e6 / s, 1) if s > 0 else None,
                          "errors": self.errors, "crc": "%08x" % self.crc,
                          "launch_s": round(T0_LATE, 3)}), flush=True)
        return 1 if self.errors else 0


TIMELINE = os.environ.get("TTS_TIMELINE")
T0 = time.monotonic()
T0_LATE = time.time() - float(os.environ.get("TTS_LAUNCH", time.time()))
_marks = []


def mark(path, t):
    """TTS_TIMELINE=FILE: when each file's read began and how long it took
    (ms since the job started), written at the end (a diagnostic: which
    reads waited, and when)."""
    if TIMELINE:
        _marks.append("%.1f %.1f %s" % ((t - T0) * 1e3, (time.monotonic() - t) * 1e3, path))


def read_whole(path):
    """(bytes read, crc of the first block) of PATH read to its end."""
    n, crc = 0, 0
    t = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        while True:
            b = f.read(BLOCK)
            if not b:
                break
            if n == 0:
                crc = zlib.crc32(b[:PAGE])
            n += len(b)
    if n != size:
        raise OSError("read %d bytes of %d" % (n, size))
    mark(path, t)
    return n, crc


def job_model(j, d):
    shards = sorted(n for n in os.listdir(d) if n.endswith(".safetensors"))
    if not shards:
        j.fail(d, "no *.safetensors")
    for name in shards:
        path = os.path.join(d, name)
        try:
            with open(path, "rb") as f:
                raw = f.read(8)
                if len(raw) != 8:
                    raise OSError("short header length")
                (hlen,) = struct.unpack("<Q", raw)
                hj = f.read(hlen)
                if len(hj) != hlen:
                    raise OSError("short header")
                header = json.loads(hj)
                size = os.fstat(f.fileno()).st_size
                base = 8 + hlen
                ts = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
                mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
                try:
                    crc, end = j.crc, base
                    for (b, e), _ in ts:
                        if base + e > size:
                            raise OSError("tensor past the end of the file")
                        if e > b:
                            # one byte a page, and the tensor's last: every
                            # page of it is faulted in, in offset order
                            crc = zlib.crc32(mm[base + b:base + e:PAGE] + mm[base + e - 1:base + e], crc)
                        end = max(end, base + e)
                finally:
                    mm.close()
            if end != size:
                raise OSError("tensors end at %d, the file at %d" % (end, size))
            j.crc = crc
            j.files += 1
            j.bytes += size
        except (OSError, ValueError, KeyError, TypeError) as e:
            # (an EIO on a mapped page is SIGBUS: the process dies, non-zero)
            j.fail(path, e)


def job_epoch(j, d, threads, seed):
    paths = []
    for dp, dns, fns in os.walk(d):
        dns.sort()
        paths += [os.path.join(dp, n) for n in sorted(fns)]
    random.Random(seed).shuffle(paths)
    it = iter(paths)
    take = threading.Lock()

    def worker():
        files = nbytes = 0
        crc = 0
        while True:
            with take:
                p = next(it, None)
            if p is None:
                break
            try:
                n, c = read_whole(p)
                files += 1
                nbytes += n
                crc ^= c
            except OSError as e:
                j.fail(p, e)
        with j.lock:
            j.files += files
            j.bytes += nbytes
            j.crc ^= crc

    ws = [threading.Thread(target=worker) for _ in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()


def job_walk(j, d):
    for dp, dns, fns in os.walk(d, onerror=lambda e: j.fail(e.filename, e)):
        dns.sort()
        for n in sorted(fns):
            if not n.endswith(".py"):
                continue
            p = os.path.join(dp, n)
            try:
                os.stat(p)
                nb, c = read_whole(p)
                j.files += 1
                j.bytes += nb
                j.crc ^= c
            except OSError as e:
                j.fail(p, e)


def job_cat(j, path):
    try:
        n, c = read_whole(path)
        j.files, j.bytes, j.crc = 1, n, c
    except OSError as e:
        j.fail(path, e)


def main():
    ap = argparse.ArgumentParser(description="the jobs of bench/tts.sh")
    ap.add_argument("job", choices=["model", "epoch", "walk", "cat"])
    ap.add_argument("path")
    ap.add_argument("--threads", type=int, default=8, help="epoch: reader threads (default 8)")
    ap.add_argument("--seed", type=int, default=1, help="epoch: the order's seed (default 1)")
    a = ap.parse_args()
    j = Job(a.job, a.path)
    if a.job != "cat" and not os.path.isdir(a.path):
        j.fail(a.path, "not a directory")
    elif a.job == "model":
        job_model(j, a.path)
    elif a.job == "epoch":
        job_epoch(j, a.path, max(1, a.threads), a.seed)
    elif a.job == "walk":
        job_walk(j, a.path)
    else:
        job_cat(j, a.path)
    if j.files == 0 and not j.errors:
        j.fail(a.path, "nothing read")
    if TIMELINE:
        _marks.append("L %.3f" % T0_LATE)
        with open(TIMELINE, "w") as f:
            f.write("\n".join(_marks) + "\n")
    return j.done()


if __name__ == "__main__":
    sys.exit(main())
