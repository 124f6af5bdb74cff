#!/usr/bin/env python3
"""bench/kv_gen.py DIR --manifest FILE [options] — a KV-cache store laid out
the way LMCache's file-system connector lays it out, for
examples/kv-cache.sh and bench/kv.sh.

One file per chunk of tokens, all directly under DIR, named
MODEL@WORLD_SIZE@WORKER_ID@HASH@DTYPE.data: the model name with "/"
written as "-SEP-", the tensor-parallel world size and the worker's
rank, HASH the chunk's prefix hash in hex (64 bits: each chunk's hash
covers its own tokens and its parent chunk's hash, so a key names the
whole token prefix up to the end of its chunk) and the KV dtype. Each
file is written under its name with ".tmp" for ".data" and renamed into
place, as the connector does.

Prompts come in sessions: most begin with one of a few shared system
prompts or documents (their chunks are one set of files, however many
sessions share them), then have chunks of their own. The bytes are
random (KV tensors do not compress, and no two chunks share bytes: a
chunk's KV depends on every token before it), BLOBS files of
MIN_MIB..MAX_MIB MiB, fixed by the seed.

Also made: keys that do not exist (the chunk each session would have
next: a longer prompt than any cached one), which a reader looks up to
miss in LMCache's sense.

--manifest FILE (outside DIR, so it is not served) gets one JSON object:
the parameters, "bytes" (the blobs' total), "blobs" (name, size, sha256
each) and "absent" (names). Standard library only.
"""
import argparse
import hashlib
import json
import os
import random
import sys

VERSION = 1


def chunk_hash(parent, tokens):
    """64-bit prefix hash of a chunk: its parent's hash and its tokens."""
    h = hashlib.sha256(parent.to_bytes(8, "little"))
    h.update(b"".join(t.to_bytes(4, "little") for t in tokens))
    return int.from_bytes(h.digest()[:8], "little")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--blobs", type=int, default=400)
    ap.add_argument("--min-mib", type=float, default=1.0)
    ap.add_argument("--max-mib", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="ferry-demo/kv-7b")
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--worker-id", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--chunk-tokens", type=int, default=256)
    a = ap.parse_args()
    if a.blobs < 1 or not 0 < a.min_mib <= a.max_mib:
        sys.exit("kv_gen.py: need --blobs >= 1 and 0 < --min-mib <= --max-mib")

    r = random.Random(a.seed)
    prefix = "%s@%d@%d@" % (a.model.replace("/", "-SEP-"), a.world_size, a.worker_id)
    suffix = "@%s.data" % a.dtype

    def name(h):
        return "%s%016x%s" % (prefix, h, suffix)

    def tokens():
        return [r.randrange(32000) for _ in range(a.chunk_tokens)]

    # shared system prompts / documents: chains of 1-3 chunks
    shared = []
    for _ in range(max(3, a.blobs // 40)):
        chain, h = [], 0
        for _ in range(r.randint(1, 3)):
            h = chunk_hash(h, tokens())
            chain.append(h)
        shared.append(chain)

    order, seen, absent = [], set(), []

    def add(h):
        if h not in seen and len(order) < a.blobs:
            seen.add(h)
            order.append(h)

    while len(order) < a.blobs:
        h = 0
        if r.random() < 0.7:
            for h in r.choice(shared):
                add(h)
        for _ in range(r.randint(1, 8)):
            h = chunk_hash(h, tokens())
            add(h)
        nxt = chunk_hash(h, tokens())  # the chunk this session would have next
        if nxt not in seen:
            absent.append(nxt)
    absent = [h for h in absent if h not in seen]

    os.makedirs(a.dir, exist_ok=True)
    lo, hi = int(a.min_mib * (1 << 20)), int(a.max_mib * (1 << 20))
    blobs, total = [], 0
    for h in order:
        size = r.randint(lo, hi)
        data = b"".join(r.randbytes(min(1 << 20, size - o)) for o in range(0, size, 1 << 20))
        final = os.path.join(a.dir, name(h))
        tmp = final[: -len(".data")] + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, final)
        blobs.append({"name": name(h), "size": size, "sha256": hashlib.sha256(data).hexdigest()})
        total += size

    doc = {"version": VERSION, "seed": a.seed, "blobs_asked": a.blobs, "min_mib": a.min_mib,
           "max_mib": a.max_mib, "model": a.model, "world_size": a.world_size,
           "worker_id": a.worker_id, "dtype": a.dtype, "files": len(blobs), "bytes": total,
           "shared_prefixes": len(shared), "blobs": blobs, "absent": [name(h) for h in absent]}
    with open(a.manifest + ".new", "w") as f:
        json.dump(doc, f)
    os.replace(a.manifest + ".new", a.manifest)
    print(json.dumps({"files": len(blobs), "bytes": total, "absent": len(absent),
                      "shared_prefixes": len(shared)}))


if __name__ == "__main__":
    main()
