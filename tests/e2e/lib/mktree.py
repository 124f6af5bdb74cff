#!/usr/bin/env python3
"""mktree.py DIR [--big-dir N] [--sparse-gib G] [--seed S]

Make a source tree that exercises what ferry must carry exactly: odd names
(spaces, unicode, a leading dash, non-UTF-8 bytes), symlinks (relative,
absolute, dangling), hard links, xattrs, empty files and directories, a fifo,
a character device (as root), assorted modes, owners (as root) and
nanosecond mtimes, files of many sizes, two identical files, a sparse file
larger than 4 GiB, and a directory with many entries.
"""
import argparse
import os
import random
import stat


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--big-dir", type=int, default=20000)
    ap.add_argument("--sparse-gib", type=float, default=4.25)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    root = os.fsencode(a.dir)
    os.makedirs(root, exist_ok=True)
    j = lambda *p: os.path.join(root, *[os.fsencode(x) if isinstance(x, str) else x for x in p])
    is_root = os.geteuid() == 0

    # Plain files of many sizes: 0, tiny, around chunk bounds, multi-chunk.
    os.makedirs(j("data"))
    sizes = [0, 1, 100, 4095, 4096, 16383, 16384, 65536, 65537, 262143,
             262144, 262145, 1 << 20, 3 * (1 << 20) + 17]
    for i, n in enumerate(sizes):
        write(j("data", "f%02d.bin" % i), rnd.randbytes(n))
    # Compressible text (so frames really use zstd) and a mixed file.
    text = b"".join(b"line %d of a very repetitive log file\n" % i for i in range(60000))
    write(j("data", "log.txt"), text)
    # Two identical multi-chunk files in different places: stored once.
    same = rnd.randbytes(700 * 1024)
    os.makedirs(j("dup", "a"))
    os.makedirs(j("dup", "b"))
    write(j("dup", "a", "same.bin"), same)
    write(j("dup", "b", "same-copy.bin"), same)
    # A file the test changes after the scan, and one it never reads online.
    write(j("changed.bin"), rnd.randbytes(300 * 1024))
    write(j("unread.bin"), rnd.randbytes(200 * 1024))

    # Odd names.
    odd = os.path.join(root, b"odd")
    os.makedirs(odd)
    for name in [b"with space", b"-leading-dash", "unicod\u00e9-\u65e5\u672c".encode(),
                 b"non-utf8-\xff\xfe", b"tab\there", b"new\nline", b"#hash", b"..dots",
                 b"x" * 255]:
        write(os.path.join(odd, name), name)
    # Symlinks.
    os.symlink(b"../data/f05.bin", os.path.join(odd, b"rel-link"))
    os.symlink(b"/etc/hostname", os.path.join(odd, b"abs-link"))
    os.symlink(b"does/not/exist", os.path.join(odd, b"dangling"))
    os.symlink(b"non-utf8-\xff\xfe", os.path.join(odd, b"link-to-odd"))
    # Hard links: three names of one file, across directories.
    write(j("hl-1"), b"hard linked content\n" * 100)
    os.link(j("hl-1"), j("odd", "hl-2"))
    os.link(j("hl-1"), j("data", "hl-3"))
    # Empty file, empty directories (nested).
    write(j("empty"), b"")
    os.makedirs(j("empty-dir", "nested-empty"))
    # Special files.
    os.mkfifo(j("fifo"))
    if is_root:
        os.mknod(j("chardev"), stat.S_IFCHR | 0o640, os.makedev(1, 3))
    # xattrs, including binary and empty values.
    for p, kv in [(j("data", "f05.bin"), {b"user.ferry.text": b"hello",
                                          b"user.bin": bytes(range(256)),
                                          b"user.empty": b""}),
                  (j("odd"), {b"user.dir-attr": b"on a directory"}),
                  (j("hl-1"), {b"user.link": b"shared by all names"})]:
        for k, v in kv.items():
            os.setxattr(p, k, v)
    # Modes.
    os.chmod(j("data", "f01.bin"), 0o600)
    os.chmod(j("data", "f02.bin"), 0o755)
    os.chmod(j("data", "f03.bin"), 0o4755)
    os.chmod(j("empty-dir"), 0o700)
    os.chmod(j("data", "f04.bin"), 0o000)
    # Owners.
    if is_root:
        os.lchown(j("data", "f06.bin"), 1234, 5678)
        os.lchown(j("odd", "rel-link"), 4321, 8765)
        os.lchown(j("empty-dir"), 1000, 1000)
    # Many entries in one directory.
    if a.big_dir:
        big = j("big")
        os.makedirs(big)
        for i in range(a.big_dir):
            fd = os.open(os.path.join(big, b"e%06d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
            os.close(fd)
    # A sparse file larger than 4 GiB, with some data past 4 GiB.
    if a.sparse_gib:
        n = int(a.sparse_gib * (1 << 30))
        with open(j("sparse.img"), "wb") as f:
            f.truncate(n)
            f.seek((4 << 30) + 12345)
            f.write(b"data past four GiB" * 100)
            f.seek(1 << 20)
            f.write(rnd.randbytes(100000))
    # Nanosecond mtimes, set last (children before parents).
    t = 1_600_000_000_123_456_789
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            p = os.path.join(dirpath, n)
            t += 1_000_000_007
            os.utime(p, ns=(t, t), follow_symlinks=False)
    os.utime(root, ns=(t, t))


if __name__ == "__main__":
    main()
