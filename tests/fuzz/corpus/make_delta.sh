#!/usr/bin/env bash
# make_delta.sh BUILD_DIR OUT — the seed inputs of tests/fuzz/fuzz_delta.c:
# real catalogs and deltas from the replicator of BUILD_DIR over a small
# tree changed twice (a file changed, one added, one removed, a
# directory renamed), packed as u32 length + base catalog + delta (zstd
# undone), ok_* for the right base, bad_* for each kind of damage.
set -eu
B=$(cd "$1" && pwd)
OUT=$2
mkdir -p "$OUT"
W=$(mktemp -d)
trap 'kill $RP 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/src/d" "$W/src/e"
for i in 1 2 3 4 5; do printf 'file %s\n' "$i" >"$W/src/d/f$i"; done
printf 'gone soon\n' >"$W/src/e/x"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
U=http://127.0.0.1:$port/v1/r
"$B/bin/ferry-replicator" -q -l 127.0.0.1:$port -s "$W/state" --hash-before-publish r="$W/src" &
RP=$!
gen() { curl -sf "$U/HEAD" || true; }
for i in $(seq 1 100); do [ "$(gen)" = 1 ] && break; sleep 0.1; done
printf 'changed content\n' >"$W/src/d/f2"
printf 'new\n' >"$W/src/d/f9"
kill -HUP $RP
for i in $(seq 1 100); do [ "$(gen)" = 2 ] && break; sleep 0.1; done
rm "$W/src/e/x"
mv "$W/src/d" "$W/src/renamed"
kill -HUP $RP
for i in $(seq 1 100); do [ "$(gen)" = 3 ] && break; sleep 0.1; done
[ "$(gen)" = 3 ] || { echo "make_delta: no generation 3" >&2; exit 1; }
for a in "1 2" "2 3" "1 3"; do
	set -- $a
	curl -sf "$U/delta/$1/$2" | zstd -dq >"$W/d$1$2.db"
done
python3 - "$W" "$OUT" <<'PY'
import os, shutil, sqlite3, struct, sys
w, out = sys.argv[1], sys.argv[2]
cat = lambda g: open(os.path.join(w, "state/r/catalog/%d.db" % g), "rb").read()
delta = lambda a, b: open(os.path.join(w, "d%d%d.db" % (a, b)), "rb").read()
def pack(name, base, d):
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<I", len(base)) + base + d)
def altered(d, sql):
    p = os.path.join(w, "alt.db")
    open(p, "wb").write(d)
    c = sqlite3.connect(p)
    c.executescript(sql)
    c.commit()
    c.close()
    return open(p, "rb").read()
pack("ok_1_2", cat(1), delta(1, 2))
pack("ok_2_3", cat(2), delta(2, 3))
pack("ok_1_3", cat(1), delta(1, 3))
pack("bad_wrong_base", cat(2), delta(1, 2))
pack("bad_row_changed", cat(1), altered(delta(1, 2),
     "UPDATE put_inode SET size = size + 1 WHERE rowid = (SELECT min(rowid) FROM put_inode)"))
pack("bad_digest_changed", cat(1), altered(delta(1, 2),
     "UPDATE dmeta SET value = '00' || substr(value, 3) WHERE key = 'to_digest'"))
pack("bad_format", cat(1), altered(delta(1, 2),
     "UPDATE dmeta SET value = 'ferry-delta/9' WHERE key = 'format'"))
pack("bad_truncated", cat(1), delta(1, 2)[: len(delta(1, 2)) // 2])
pack("bad_garbage", cat(1), b"not a delta at all" * 10)
pack("bad_empty_delta", cat(1), b"")
with open(os.path.join(out, "bad_length_past_end"), "wb") as f:
    f.write(struct.pack("<I", 1 << 30) + cat(1)[:100])
PY
ls "$OUT" | wc -l
