#!/usr/bin/env bash
# examples/quickstart.sh [BUILD_DIR] — ferry in one minute, on loopback.
# Builds a small example estate (datasets, two checkpoint versions that share
# most bytes), serves it with ferry-replicator, mounts it with ferry-hydrator,
# shows the tree is browsable before any file data moved, reads a file (which
# fetches just its chunks), then cleans up. Run by `make demo`.
set -eu
B=${1:-build/release}
BIN=$(cd "$B/bin" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "demo: FUSE mounts here need root; run: sudo make demo" >&2; exit 1; }
T=$(mktemp -d /tmp/ferry-demo.XXXXXX)
REPL_PID=""
cleanup() {
	mountpoint -q "$T/mnt" 2>/dev/null && fusermount3 -u "$T/mnt"
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null && wait "$REPL_PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "demo: FAILED: $*" >&2; exit 1; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "1. an example estate at the old site: $T/estate"
python3 - "$T/estate" <<'PY'
import os, random, sys
r = random.Random(7); root = sys.argv[1]
for d in ["datasets/train", "datasets/eval", "checkpoints/step-1000", "checkpoints/step-2000", "code"]:
    os.makedirs(os.path.join(root, d))
for i in range(40):
    rows = "".join("%d,%d,sample text %d\n" % (i, j, r.randrange(10**6)) for j in range(2000))
    open(os.path.join(root, "datasets/train/part-%03d.csv" % i), "w").write(rows)
open(os.path.join(root, "datasets/eval/eval.csv"), "w").write("id,label\n" * 5000)
w = bytearray(r.randbytes(8 << 20))
open(os.path.join(root, "checkpoints/step-1000/model.bin"), "wb").write(w)
for k in range(0, len(w), 1 << 20):  # fine-tuning touched a few places only
    w[k:k + 64] = r.randbytes(64)
open(os.path.join(root, "checkpoints/step-2000/model.bin"), "wb").write(w)
open(os.path.join(root, "code/train.py"), "w").write("print('training')\n")
os.symlink("step-2000", os.path.join(root, "checkpoints/latest"))
PY
du -sh --apparent-size "$T/estate" | sed 's/^/   /'

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "2. ferry-replicator scans it into a catalog and serves it on 127.0.0.1:$port"
"$BIN/ferry-replicator" -l "127.0.0.1:$port" -s "$T/state" "estate=$T/estate" 2>"$T/repl.log" &
REPL_PID=$!
for _ in $(seq 100); do grep -q ' ready' "$T/repl.log" && break; sleep 0.1; done
sed 's/^/   /' "$T/repl.log"

URL="http://127.0.0.1:$port/v1/estate"
say "3. ferry-hydrator $URL $T/mnt   (returns once the tree is browsable)"
mkdir -p "$T/mnt"
t0=$(date +%s.%N)
"$BIN/ferry-hydrator" -c "$T/cache" "$URL" "$T/mnt"
t1=$(date +%s.%N)
printf '   mounted in %.2f s\n' "$(echo "$t1 - $t0" | bc 2>/dev/null || python3 -c "print($t1-$t0)")"
stats() { curl -s "$URL/stats"; echo; }

say "4. browse: ls -lR, find, stat — all answered from the catalog"
(cd "$T/mnt" && ls -lR --time-style=long-iso | head -n 25 | sed 's/^/   /')
echo "   ... $(find "$T/mnt" | wc -l) entries in all"
echo "   replicator counters now: $(stats)"

say "5. first read of a checkpoint fetches just its chunks, verified, into the store"
sha256sum "$T/mnt/checkpoints/step-1000/model.bin" "$T/estate/checkpoints/step-1000/model.bin" | sed 's/^/   /'
cmp -s "$T/mnt/checkpoints/step-1000/model.bin" "$T/estate/checkpoints/step-1000/model.bin" ||
	fail "step-1000/model.bin differs through the mount"
echo "   replicator counters now: $(stats)"
say "6. the next version shares most chunks: only the changed ones cross the wire"
sha256sum "$T/mnt/checkpoints/latest/model.bin" | sed 's/^/   /'
cmp -s "$T/mnt/checkpoints/latest/model.bin" "$T/estate/checkpoints/latest/model.bin" ||
	fail "latest/model.bin differs through the mount"
echo "   replicator counters now: $(stats)"
echo "   chunk store: $(sqlite3 "$T/cache/state.db" 'select count(*)||" chunks, "||sum(raw_len)||" bytes raw, "||sum(frame_len)||" bytes at rest" from chunk' 2>/dev/null)"

say "7. clean up: fusermount3 -u, stop the replicator"
fusermount3 -u "$T/mnt"
kill "$REPL_PID"; wait "$REPL_PID" || true; REPL_PID=""
echo "   done"
