#!/usr/bin/env python3
"""bench/tts_gen.py — the tree of bench/tts.sh ("time to serve"): what three
jobs at a new region read first, made up and deterministic.

  tts_gen.py OUTDIR [--scale full|small|tiny|S] [--seed S] [--big]

The tree (OUTDIR must be missing or empty), sizes at --scale full:

  models/llm/model-0000K-of-00004.safetensors
      4 shards of a llama-like model, ~92 MB each (~369 MB): the real
      safetensors layout (an 8-byte little-endian header length, a JSON
      header mapping every tensor name to its dtype, shape and
      data_offsets, plus "__metadata__", then the tensors back to back, in
      offset order). Weights are F16-like (the low byte uniform, the high
      byte a sign, a bell-shaped exponent and two mantissa bits: zstd
      saves ~13%, lz4 nothing), the norms BF16 near 1.0. Beside them
      config.json and model.safetensors.index.json (not read by the job).
  data/train/class-XX/sample-NNNNN.bin
      3,000 samples of 48-80 KiB (~197 MB) in 30 directories: a JPEG
      header, then random bytes (incompressible, nothing shared).
  src/pkg/modNNN/*.py
      2,000 Python-like source files (~4.5 KB on average, ~9 MB) in 200
      directories: imports, classes, functions and docstrings from a
      made-up vocabulary (zstd: about a fifth of the size).
  big/blob-2g.bin
      with --big only: one 2 GiB file of random bytes (the single-stream
      row).
  README.txt

--scale multiplies every count and size: tiny is 0.1 (a tenth of
everything: ~37 MB of model, 300 samples, 200 sources, a 205 MB blob),
small 0.25, full 1; a number works too. The model keeps its 4 shards and
12 layers and shrinks its widths.

Everything — bytes, names, modes, mtimes — is a pure function of --seed,
--scale and --big. The last line on stdout is a JSON summary: the
parameters, and per job (model, epoch, walk, cat) the subtree it reads and
the files and bytes it reads there; bench/tts.sh checks each job's own
report against it.
"""
import argparse
import json
import math
import os
import random
import struct
import sys

EPOCH = 1_700_000_000  # every mtime is EPOCH plus a fixed offset
SCALES = {"tiny": 0.1, "small": 0.25, "full": 1.0}
VERSION = 1  # bumped when the bytes for a given seed and scale change

# The model at scale 1: hidden, MLP width, vocabulary, layers, shards.
HIDDEN, INTER, VOCAB, LAYERS, SHARDS = 1024, 2816, 15000, 12, 4
SAMPLES, CLASSES, SAMPLE_MIN, SAMPLE_MAX = 3000, 30, 48 << 10, 80 << 10
SOURCES, PACKAGES = 2000, 200
BIG = 2 << 30

# --- fp16-like bytes --------------------------------------------------------

# 32 slots for the 5-bit exponent field: a narrow bell around 12 (weights
# of magnitude ~2^-3). The share of 12 sets what zstd can save (~13%).
EXP_SLOTS = [11] * 4 + [12] * 22 + [13] * 4 + [14] * 2
HIGH_F16 = bytes((b & 0x80) | (EXP_SLOTS[(b >> 2) & 31] << 2) | (b & 3) for b in range(256))
# BF16 norms near 1.0: the high byte 0x3f (sign 0, exponent 127's top bits)
HIGH_BF16 = bytes(0x3F for _ in range(256))


def randbytes(rng, n):
    out = bytearray()
    step = 32 << 20  # Random.randbytes wants its bit count to fit an int32
    while len(out) < n:
        out += rng.randbytes(min(step, n - len(out)))
    return out


def weights(key, nbytes, dtype):
    """nbytes (even) of F16- or BF16-like values; the same key, the same bytes."""
    out = randbytes(random.Random(key), nbytes)
    out[1::2] = bytes(out[1::2]).translate(HIGH_F16 if dtype == "F16" else HIGH_BF16)
    return out


# --- the model ----------------------------------------------------------------

def round_to(x, m):
    return max(m, int(round(x / m)) * m)


def tensors(scale):
    """[(name, dtype, shape)] in the order a checkpoint saves them."""
    w = math.sqrt(scale)
    h, inter, vocab = round_to(HIDDEN * w, 64), round_to(INTER * w, 64), round_to(VOCAB * w, 8)
    ts = [("model.embed_tokens.weight", "F16", [vocab, h])]
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        ts.append((p + "input_layernorm.weight", "BF16", [h]))
        for n in "qkvo":
            ts.append((p + "self_attn.%s_proj.weight" % n, "F16", [h, h]))
        ts.append((p + "post_attention_layernorm.weight", "BF16", [h]))
        ts.append((p + "mlp.gate_proj.weight", "F16", [inter, h]))
        ts.append((p + "mlp.up_proj.weight", "F16", [inter, h]))
        ts.append((p + "mlp.down_proj.weight", "F16", [h, inter]))
    ts.append(("model.norm.weight", "BF16", [h]))
    ts.append(("lm_head.weight", "F16", [vocab, h]))
    return ts, dict(hidden=h, intermediate=inter, vocab=vocab)


def nbytes(t):
    return 2 * math.prod(t[2])


def shard_plan(ts):
    """Cut the tensors, in order, into SHARDS shards of about equal size."""
    total = sum(nbytes(t) for t in ts)
    plan, cur, have, done = [], [], 0, 0
    for t in ts:
        left = SHARDS - len(plan)  # shards still to fill, this one included
        cap = (total - done) / left
        if cur and have + nbytes(t) / 2 > cap and left > 1:
            plan.append(cur)
            done += have
            cur, have = [], 0
        cur.append(t)
        have += nbytes(t)
    plan.append(cur)
    return plan


def gen_model(root, scale, seed):
    d = os.path.join(root, "models", "llm")
    os.makedirs(d)
    ts, dims = tensors(scale)
    plan = shard_plan(ts)
    weight_map, total = {}, 0
    for k, part in enumerate(plan):
        name = "model-%05d-of-%05d.safetensors" % (k + 1, len(plan))
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for t in part:
            header[t[0]] = {"dtype": t[1], "shape": t[2], "data_offsets": [off, off + nbytes(t)]}
            off += nbytes(t)
            weight_map[t[0]] = name
        hj = json.dumps(header, separators=(",", ":")).encode()
        hj += b" " * (-len(hj) % 8)  # the header is padded to 8 bytes, as safetensors does
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hj)) + hj)
            for t in part:
                f.write(weights("%d/%s" % (seed, t[0]), nbytes(t), t[1]))
        finish(path, EPOCH + k)
        total += off
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    put(os.path.join(d, "model.safetensors.index.json"), json.dumps(index, indent=2).encode() + b"\n", EPOCH)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": dims["hidden"],
           "intermediate_size": dims["intermediate"], "num_hidden_layers": LAYERS,
           "vocab_size": dims["vocab"], "torch_dtype": "float16"}
    put(os.path.join(d, "config.json"), json.dumps(cfg, indent=2).encode() + b"\n", EPOCH)


# --- the training samples -------------------------------------------------------

JPEG_HEAD = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"


def gen_data(root, scale, seed):
    n = max(1, round(SAMPLES * scale))
    classes = max(1, round(CLASSES * scale))
    for c in range(classes):
        d = os.path.join(root, "data", "train", "class-%02d" % c)
        os.makedirs(d)
        rng = random.Random("%d/data/%d" % (seed, c))
        for i in range(c * n // classes, (c + 1) * n // classes):
            size = rng.randrange(SAMPLE_MIN, SAMPLE_MAX + 1)
            put(os.path.join(d, "sample-%05d.bin" % i),
                JPEG_HEAD + randbytes(rng, size - len(JPEG_HEAD)), EPOCH + 1000 + i)


# --- the source checkout --------------------------------------------------------

WORDS = ("batch tensor shape layer block cache token index stream buffer config "
         "weight grad step epoch loader sample reader writer record field value "
         "scale offset window queue worker state model optim param device mask "
         "table chunk frame header codec store path node graph edge route score").split()
MODULES = ["__init__", "core", "utils", "models", "io", "config", "layers", "ops", "train", "data"]


def ident(rng, k=2):
    return "_".join(rng.choice(WORDS) for _ in range(k))


def py_chunk(rng):
    """One top-level definition of Python-like source."""
    kind = rng.random()
    if kind < 0.3:
        name = "".join(w.capitalize() for w in ident(rng).split("_"))
        lines = ["class %s:" % name, '    """%s %s for the %s."""' % (name, ident(rng, 1), ident(rng)), ""]
        attrs = [ident(rng) for _ in range(rng.randrange(1, 4))]
        lines.append("    def __init__(self, %s):" % ", ".join(attrs))
        lines += ["        self.%s = %s" % (a, a) for a in attrs]
        for _ in range(rng.randrange(1, 4)):
            lines += ["", "    def %s(self, %s=%d):" % (ident(rng), ident(rng, 1), rng.randrange(100)),
                      "        if self.%s is None:" % rng.choice(attrs),
                      "            raise ValueError(%r)" % ("no " + ident(rng)),
                      "        return self.%s * %d + %s" % (rng.choice(attrs), rng.randrange(1, 64), ident(rng, 1))]
        return "\n".join(lines) + "\n\n\n"
    name = ident(rng)
    args = [ident(rng, 1) for _ in range(rng.randrange(1, 4))]
    lines = ["def %s(%s):" % (name, ", ".join(args)),
             '    """Return the %s of %s."""' % (ident(rng), ", ".join(args))]
    for _ in range(rng.randrange(2, 8)):
        r = rng.random()
        if r < 0.4:
            lines.append("    %s = %s(%s, %d)" % (ident(rng), rng.choice(["min", "max", "round", "divmod"]),
                                                  rng.choice(args), rng.randrange(1, 4096)))
        elif r < 0.7:
            lines += ["    for %s in range(%d):" % (ident(rng, 1), rng.randrange(2, 256)),
                      "        %s += %s" % (rng.choice(args), rng.choice(args))]
        else:
            lines.append("    # %s %s %s" % (ident(rng, 1), ident(rng, 1), ident(rng)))
    lines.append("    return %s" % rng.choice(args))
    return "\n".join(lines) + "\n\n\n"


def py_source(rng, pkg, size):
    head = "# generated: mod%03d\nimport math\nimport os\nfrom . import %s\n\n\n" % (pkg, rng.choice(MODULES[1:]))
    parts, have = [head], len(head)
    while have < size:
        p = py_chunk(rng)
        parts.append(p)
        have += len(p)
    return "".join(parts).encode()


def gen_src(root, scale, seed):
    n = max(1, round(SOURCES * scale))
    pkgs = max(1, round(PACKAGES * scale))
    for p in range(pkgs):
        d = os.path.join(root, "src", "pkg", "mod%03d" % p)
        os.makedirs(d)
        rng = random.Random("%d/src/%d" % (seed, p))
        for j, i in enumerate(range(p * n // pkgs, (p + 1) * n // pkgs)):
            name = MODULES[j] if j < len(MODULES) else "%s_%d" % (ident(rng), j)
            # sizes skewed small, ~4.5 KB on average (lognormal, 300 B to 40 KB)
            size = int(min(40000, max(300, rng.lognormvariate(math.log(3300), 0.8))))
            put(os.path.join(d, name + ".py"), py_source(rng, p, size), EPOCH + 5000 + i)


def gen_big(root, scale, seed):
    d = os.path.join(root, "big")
    os.makedirs(d)
    size = max(1 << 20, round(BIG * scale / (1 << 20)) << 20)
    rng = random.Random("%d/big" % seed)
    path = os.path.join(d, "blob-2g.bin")
    with open(path, "wb") as f:
        left = size
        while left:
            k = min(left, 32 << 20)
            f.write(rng.randbytes(k))
            left -= k
    finish(path, EPOCH + 9000)


# --- files ----------------------------------------------------------------------

def finish(path, mtime):
    os.chmod(path, 0o644)
    os.utime(path, (mtime, mtime))


def put(path, data, mtime):
    with open(path, "wb") as f:
        f.write(data)
    finish(path, mtime)


def count(root, sub, pred=lambda name: True):
    files = nbytes_ = 0
    for dp, dns, fns in os.walk(os.path.join(root, sub)):
        for fn in fns:
            if pred(fn):
                files += 1
                nbytes_ += os.lstat(os.path.join(dp, fn)).st_size
    return {"files": files, "bytes": nbytes_}


def main():
    ap = argparse.ArgumentParser(description="the tree of bench/tts.sh")
    ap.add_argument("outdir")
    ap.add_argument("--scale", default="full", help="full, small, tiny or a number (default full)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big", action="store_true", help="also big/blob-2g.bin (2 GiB at full scale)")
    a = ap.parse_args()
    try:
        scale = SCALES[a.scale] if a.scale in SCALES else float(a.scale)
    except ValueError:
        ap.error("--scale: full, small, tiny or a number, not %r" % a.scale)
    if not 0 < scale <= 10:
        ap.error("--scale: between 0 and 10")
    root = a.outdir
    if os.path.exists(root) and os.listdir(root):
        ap.error("%s is not empty" % root)
    os.makedirs(root, exist_ok=True)
    gen_model(root, scale, a.seed)
    gen_data(root, scale, a.seed)
    gen_src(root, scale, a.seed)
    if a.big:
        gen_big(root, scale, a.seed)
    put(os.path.join(root, "README.txt"),
        b"bench/tts_gen.py seed=%d scale=%s big=%d: a model, a training set, a source\n"
        b"checkout (and a big file) for bench/tts.sh's time-to-serve rows.\n" % (a.seed, a.scale.encode(), a.big),
        EPOCH)
    for dp, dns, fns in os.walk(root, topdown=False):
        os.chmod(dp, 0o755)
        os.utime(dp, (EPOCH + 20000, EPOCH + 20000))
    jobs = {
        "model": dict(dir="models/llm", **count(root, "models/llm", lambda n: n.endswith(".safetensors"))),
        "epoch": dict(dir="data/train", **count(root, "data/train")),
        "walk": dict(dir="src/pkg", **count(root, "src/pkg", lambda n: n.endswith(".py"))),
    }
    if a.big:
        jobs["cat"] = dict(dir="big", file="big/blob-2g.bin", **count(root, "big"))
    tree = count(root, ".")
    print(json.dumps({"version": VERSION, "seed": a.seed, "scale": a.scale, "big": a.big,
                      "files": tree["files"], "bytes": tree["bytes"], "jobs": jobs}))


if __name__ == "__main__":
    sys.exit(main())
