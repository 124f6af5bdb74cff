#!/usr/bin/env bash
# 076: across a link, a batch's codec follows how fast the link drains.
# With --codec auto a client on another host gets zstd while the link is
# what waits (bytes stay unsent in the replicator's socket), and lz4 once
# the link takes frames faster than zstd makes them (the socket drains).
# Two network namespaces joined by a veth: unshaped, where a client that
# only reads keeps the socket empty; then with tbf at 40 Mbit/s on the
# replicator's side, where the socket stays full. The frames of one
# batch answer are counted by codec, each checked against its chunk's
# length, and /stats counts the same.
. "$(dirname "$0")/lib/common.sh"
NS_A="ferry-lsrc-$$"; NS_B="ferry-ldst-$$"
ns_link "$NS_A" 10.233.0.1 "$NS_B" 10.233.0.2

# 12 MiB of text every codec shrinks (words drawn from a made-up
# vocabulary), with no two chunks alike: a few hundred chunks.
mkdir -p "$T/src"
python3 - "$T/src/words.txt" <<'PY'
import random, sys
r = random.Random(7)
vocab = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 9)))
         for _ in range(3000)]
out, size = [], 0
while size < 12 << 20:
    line = " ".join(r.choice(vocab) for _ in range(12)) + "\n"
    out.append(line); size += len(line)
open(sys.argv[1], "w").write("".join(out))
PY

nsenter --net=/run/netns/"$NS_A" "$REPL" -l 10.233.0.1:8711 -s "$T/state" "w=$T/src" >"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_ready "$T/repl.log" "$REPL_PID"
CAT=$(manifests_db w "$T/manifests.db")
sql "$CAT" "select lower(hex(id)) || ' ' || len from (select id, len from chunk order by off)" >"$T/ids"
N=$(wc -l <"$T/ids")
[ "$N" -ge 100 ] || die "want at least 100 chunks of the text, got $N"

# mix — from NS_B: one batch of every chunk of the text; prints
# "lz4=L zstd=Z raw=R" for its frames, and the change of /stats'
# lz4_frames_served and zstd_frames_served as "stats=L,Z".
mix() {
	nsenter --net=/run/netns/"$NS_B" python3 - "$T/ids" <<'PY'
import json, struct, sys, urllib.request
base = "http://10.233.0.1:8711/v1/w/"
rows = [l.split() for l in open(sys.argv[1])]
def stats():
    s = json.load(urllib.request.urlopen(base + "stats"))
    return s["lz4_frames_served"], s["zstd_frames_served"]
s0 = stats()
body = urllib.request.urlopen(urllib.request.Request(
    base + "chunks", data=b"".join(bytes.fromhex(i) for i, _ in rows))).read()
off, n = 0, {"raw": 0, "lz4": 0, "zstd": 0}
for i, want in rows:
    assert body[off:off + 32] == bytes.fromhex(i), "batch answer out of order"
    magic, codec, _, _, raw_len, stored = struct.unpack_from("<4sBBHII", body, off + 32)
    assert magic == b"FRC1" and raw_len == int(want), (magic, raw_len, want)
    n[["raw", "lz4", "zstd", "zstd", "zstd"][codec]] += 1
    off += 32 + 16 + stored
assert off == len(body), "bytes after the last frame"
s1 = stats()
print("lz4=%d zstd=%d raw=%d stats=%d,%d" % (n["lz4"], n["zstd"], n["raw"],
      s1[0] - s0[0], s1[1] - s0[1]))
PY
}
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# Unshaped: the client reads as fast as the veth carries, faster than
# zstd fills it. The connection starts at zstd and turns to lz4 within
# a few frames; most of a batch this long goes lz4.
got=$(mix) || die "the batch across the unshaped veth failed"
lz4=$(field lz4 "$got"); zstd=$(field zstd "$got")
[ "$(field raw "$got")" = 0 ] || die "unshaped: raw frames of compressible text: $got"
[ "$(field stats "$got")" = "$lz4,$zstd" ] || die "unshaped: /stats counts differ from the frames: $got"
[ "$lz4" -ge $((N / 4)) ] || die "unshaped link, --codec auto: want at least $((N / 4)) of $N frames in lz4, got $got"
ok "unshaped link: $lz4 of $N frames lz4, $zstd zstd"

# 40 Mbit/s: the socket never drains while the batch streams; zstd only.
ip netns exec "$NS_A" tc qdisc add dev "fva$$" root tbf rate 40mbit burst 65536 latency 50ms ||
	die "cannot shape the veth (tc tbf)"
got=$(mix) || die "the batch across the 40 Mbit/s veth failed"
[ "$(field stats "$got")" = "$(field lz4 "$got"),$(field zstd "$got")" ] ||
	die "40 Mbit/s: /stats counts differ from the frames: $got"
[ "$(field lz4 "$got")" = 0 ] && [ "$(field zstd "$got")" = "$N" ] ||
	die "40 Mbit/s link, --codec auto: want all $N frames in zstd, got $got"
ok "40 Mbit/s link: all $N frames zstd"
kill "$REPL_PID"; wait "$REPL_PID" 2>/dev/null; REPL_PID=
