#!/usr/bin/env python3
"""Input trees for bench/micro.sh (python3 stdlib only).

  micro_gen.py rand  FILE MIB SEED   incompressible bytes (AES-CTR keystream
                                     from `openssl enc`, else os.urandom)
  micro_gen.py fp16  FILE MIB SEED   fp16-like weights: low byte uniform, high
                                     byte a sign and a skewed exponent (as
                                     the checkpoints of bench/gen_tree.py),
                                     so zstd-1 saves ~10-15% and lz4 nothing
  micro_gen.py tree  DIR NDIRS NFILES NLINKS
                                     metadata-only tree: NDIRS dirs of NFILES
                                     empty files each, plus NLINKS symlinks in
                                     the root; prints the entry count (root
                                     excluded)
  micro_gen.py small DIR NDIRS NFILES SIZE
                                     NDIRS dirs of NFILES files of SIZE bytes,
                                     each file its own bytes (its path, then
                                     a keystream), so none dedups

The keystream is seeded by SEED, so two files with different seeds share no
chunk and a file never dedups against itself.
"""
import os
import shutil
import subprocess
import sys

PIECE = 8 << 20


def fp16_table():
    """Map a uniform byte to a skewed 'fp16 high byte' (sign|exp5|mant2)."""
    exps = [13] * 22 + [12] * 7 + [11] * 2 + [14] * 1
    t = bytearray(256)
    for i in range(256):
        t[i] = ((i & 1) << 7) | (exps[i >> 3] << 2) | ((i >> 1) & 3)
    return bytes(t)


def keystream(seed):
    """Yield PIECE-sized blocks of incompressible bytes, forever."""
    if shutil.which("openssl"):
        p = subprocess.Popen(
            ["openssl", "enc", "-aes-128-ctr", "-nosalt", "-pbkdf2",
             "-pass", "pass:ferry-micro-%s" % seed, "-in", "/dev/zero"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            while True:
                b = p.stdout.read(PIECE)
                if len(b) != PIECE:
                    raise SystemExit("openssl keystream ended early")
                yield b
        finally:
            p.kill()
            p.wait()
    while True:
        yield os.urandom(PIECE)


def write_stream(path, mib, seed, table):
    left = mib << 20
    with open(path, "wb") as f:
        for b in keystream(seed):
            if table is not None:
                b = bytearray(b)
                b[1::2] = bytes(b[1::2]).translate(table)
            n = min(left, len(b))
            f.write(b[:n])
            left -= n
            if left == 0:
                break


def make_tree(root, ndirs, nfiles, nlinks):
    os.makedirs(root, exist_ok=True)
    n = 0
    for d in range(ndirs):
        dp = os.path.join(root, "d%04d" % d)
        os.mkdir(dp)
        n += 1
        for i in range(nfiles):
            os.mknod(os.path.join(dp, "f%04d" % i), 0o644 | 0o100000)
        n += nfiles
    for k in range(nlinks):
        os.symlink("d%04d/f0000" % (k % max(ndirs, 1)),
                   os.path.join(root, "link%02d" % k))
        n += 1
    print(n)


def make_small(root, ndirs, nfiles, size):
    os.makedirs(root, exist_ok=True)
    ks = keystream("small")
    buf = b""
    for d in range(ndirs):
        dp = os.path.join(root, "d%04d" % d)
        os.mkdir(dp)
        for i in range(nfiles):
            name = "f%04d" % i
            head = ("%s/%s\n" % (dp, name)).encode()
            while len(buf) < size:
                buf += next(ks)
            with open(os.path.join(dp, name), "wb") as f:
                f.write((head + buf[:size])[:size])
            buf = buf[size:]


def main(argv):
    if len(argv) == 5 and argv[1] in ("rand", "fp16"):
        write_stream(argv[2], int(argv[3]), argv[4],
                     fp16_table() if argv[1] == "fp16" else None)
    elif len(argv) == 6 and argv[1] == "tree":
        make_tree(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif len(argv) == 6 and argv[1] == "small":
        make_small(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
