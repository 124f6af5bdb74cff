#!/usr/bin/env bash
# 391: a model file a job opens is fetched whole, header first and then
# tensor by tensor in offset order, ahead of the job's reads, with no
# backfill and no trace: after reading only the first bytes of a
# safetensors file and of a GGUF file, both read back whole with the
# replicator stopped; a plain file of the same size opened the same way
# does not (only what was read and its readahead came). A file that says
# it is safetensors but whose header does not parse is left alone.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse

python3 - "$T/src" <<'PY'
import json, os, random, struct, sys
root = sys.argv[1]
r = random.Random(391)
os.makedirs(os.path.join(root, "model"))
os.makedirs(os.path.join(root, "other"))

# safetensors: 8-byte LE header length, JSON (keys sorted, as the writers
# do), data; tensors laid out in an order unlike their names'.
names = ["layer.%d.w" % i for i in range(24)]
sizes = [r.choice([65536, 200000, 300001, 450000]) for _ in names]
order = list(range(len(names)))
r.shuffle(order)
off, meta = 0, {"__metadata__": {"format": "pt"}}
for i in order:
    meta[names[i]] = {"dtype": "U8", "shape": [sizes[i]], "data_offsets": [off, off + sizes[i]]}
    off += sizes[i]
hj = json.dumps(meta, sort_keys=True).encode()
hj += b" " * (-len(hj) % 8)
with open(os.path.join(root, "model", "a.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj + r.randbytes(off))

# GGUF v3: key/values (a string, an array of strings, the alignment, a
# float), tensor infos, data from the next multiple of the alignment.
def s(b):
    return struct.pack("<Q", len(b)) + b
kv = b""
kv += s(b"general.name") + struct.pack("<I", 8) + s(b"tiny")
kv += s(b"tokenizer.tokens") + struct.pack("<IIQ", 9, 8, 3) + s(b"a") + s(b"bb") + s(b"ccc")
kv += s(b"general.alignment") + struct.pack("<II", 4, 64)
kv += s(b"x.scale") + struct.pack("<If", 6, 0.5)
tensors, toff = b"", 0
tsizes = [r.choice([70000, 130000, 260000]) for _ in range(16)]
for i, n in enumerate(tsizes):
    tensors += s(b"blk.%d.weight" % i) + struct.pack("<IQQ", 2, n // 2, 2) + struct.pack("<IQ", 0, toff)
    toff += n + (-n % 64)
head = b"GGUF" + struct.pack("<IQQ", 3, len(tsizes), 4) + kv + tensors
head += b"\0" * (-len(head) % 64)
with open(os.path.join(root, "model", "b.gguf"), "wb") as f:
    f.write(head + r.randbytes(toff))

# the same size, not a model; and one that claims to be safetensors
size = os.path.getsize(os.path.join(root, "model", "a.safetensors"))
with open(os.path.join(root, "other", "plain.bin"), "wb") as f:
    f.write(r.randbytes(size))
with open(os.path.join(root, "other", "bad.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", 40) + b'{"t": {"data_offsets": [0, 99999999999]}}'[:40] + r.randbytes(size))
PY
port=$(free_port)
start_repl "$port" "m=$T/src"
URL="http://127.0.0.1:$port/v1/m"
wait_hashed "$port" m 120 || die "the replicator did not finish hashing"

mount_hyd "$URL" "$T/mnt" --no-backfill --timeout 3
for f in model/a.safetensors model/b.gguf other/plain.bin other/bad.safetensors; do
	head -c 8 "$T/mnt/$f" >/dev/null || die "reading the start of $f"
done
wait_for 30 grep -q 'model prefetch kind=safetensors .*tensors=24 ' "$T/cache/hydrator.log" ||
	{ cat "$T/cache/hydrator.log" | tail -20; die "no model prefetch of the safetensors file (24 tensors)"; }
wait_for 30 grep -q 'model prefetch kind=gguf .*tensors=16 ' "$T/cache/hydrator.log" ||
	die "no model prefetch of the GGUF file (16 tensors)"
[ "$(grep -c 'model prefetch kind=' "$T/cache/hydrator.log")" = 2 ] ||
	die "a model prefetch of a file that is not one"
ok "the safetensors (24 tensors) and GGUF (16 tensors) headers were read"
# Every chunk of the two model files lands (the served count settles at
# theirs plus what the reads of the other two fetched).
want=$(python3 - "$(manifests_db m "$T/manifests.db")" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
ids = set()
for name in ("a.safetensors", "b.gguf"):
    ino = db.execute("select d.ino from dirent d join dirent p on d.parent = p.ino "
                     "where cast(p.name as text) = 'model' and cast(d.name as text) = ?", (name,)).fetchone()[0]
    ids |= {r[0] for r in db.execute("select id from chunk where ino = ?", (ino,))}
print(len(ids))
PY
)
wait_for 30 eval '[ "$(repl_stat "$port" m chunks_served)" -ge "$want" ]' || die "fewer than $want chunks served"
sleep 1 # an observation window: what was asked for lands
stop_repl
cmp "$T/mnt/model/a.safetensors" "$T/src/model/a.safetensors" || die "a.safetensors does not read back offline"
cmp "$T/mnt/model/b.gguf" "$T/src/model/b.gguf" || die "b.gguf does not read back offline"
ok "both model files read back whole with the replicator stopped"
cat "$T/mnt/other/plain.bin" >/dev/null 2>&1 && die "the plain file was fetched whole"
cat "$T/mnt/other/bad.safetensors" >/dev/null 2>&1 && die "the bad safetensors file was fetched whole"
ok "the plain file and the bad header were not prefetched"
umount_hyd "$T/mnt"
