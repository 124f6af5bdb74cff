#!/usr/bin/env python3
"""make_manifest.py DIR — the seed inputs of tests/fuzz/fuzz_manifest.c,
for the catalog it makes (generation 1, pending files 2..9 with SIZES,
file 10 with its manifest in the catalog, 11 a directory): u64 first,
u64 last, then a manifests body (docs/protocol.md, "Manifests"), ok_*
when it must be stored, bad_* when refused whole."""
import hashlib
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
SIZES = {2: 0, 3: 1, 4: 100, 5: 65536, 6: 70000, 7: 300000, 8: 5, 9: 4096}
MAX = 256 * 1024
CHANGED, ALONE = 0xFFFFFFFF, 0xFFFFFFFE


def cut(size, step=65536):
    lens, off = [], 0
    while off < size:
        n = min(step, size - off)
        lens.append(n)
        off += n
    return lens


def record(ino, size, lens=None, marker=None):
    if marker is not None:
        return struct.pack("<QQI", ino, size, marker)
    lens = cut(size) if lens is None else lens
    b = struct.pack("<QQI", ino, size, len(lens))
    for i, n in enumerate(lens):
        b += struct.pack("<I", n) + hashlib.sha256(b"%d-%d" % (ino, i)).digest()
    return b


def body(first, last, recs, gen=1, count=None, magic=b"FERRYMN1"):
    head = magic + struct.pack("<QQQI", gen, first, last, len(recs) if count is None else count)
    return struct.pack("<QQ", first, last) + head + b"".join(recs)


every = [record(i, s) for i, s in sorted(SIZES.items())]
seeds = {
    "ok_all": body(2, 9, every),
    "ok_one": body(5, 5, [record(5, SIZES[5])]),
    "ok_segment": body(0, 1023, every),
    "ok_markers": body(2, 9, [record(3, 1, marker=CHANGED), record(7, SIZES[7], marker=ALONE),
                              record(9, SIZES[9])]),
    "ok_empty_range": body(100, 200, []),
    "ok_max_chunks": body(7, 7, [record(7, SIZES[7], lens=[MAX, SIZES[7] - MAX])]),
    "bad_generation": body(2, 9, every, gen=2),
    "bad_range_not_asked": struct.pack("<QQ", 2, 8) + body(2, 9, every)[16:],
    "bad_magic": body(2, 9, every, magic=b"FERRYMN2"),
    "bad_size": body(4, 4, [record(4, 101)]),
    "bad_gap": body(6, 6, [record(6, SIZES[6], lens=[60000, 9999])]),
    "bad_past_end": body(4, 4, [record(4, SIZES[4], lens=[101])]),
    "bad_zero_len": body(6, 6, [record(6, SIZES[6], lens=[0, 70000])]),
    "bad_chunk_too_big": body(7, 7, [record(7, SIZES[7], lens=[MAX + 1, SIZES[7] - MAX - 1])]),
    "bad_out_of_order": body(2, 9, [record(5, SIZES[5]), record(4, SIZES[4])]),
    "bad_outside_range": body(2, 4, [record(5, SIZES[5])]),
    "bad_not_pending": body(10, 10, [record(10, 10)]),
    "bad_directory": body(11, 11, [record(11, 0)]),
    "bad_unknown_ino": body(2, 2000, [record(1500, 5)]),
    "bad_count_more": body(2, 9, every, count=9),
    "bad_count_less": body(2, 9, every, count=7),
    "bad_truncated": body(2, 9, every)[:-20],
    "bad_trailing": body(2, 9, every) + b"x",
    "bad_huge_count": body(7, 7, [struct.pack("<QQI", 7, SIZES[7], 0xFFFFFF00)]),
    "bad_short": struct.pack("<QQ", 2, 9) + b"FERRYMN1",
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print(len(seeds))
