#!/usr/bin/env bash
# examples/kv-cache.sh [BUILD_DIR] — carrying a persisted KV-cache store to a
# new region. An inference server's disk backend (LMCache-style) leaves many
# content-named blobs of a few MiB, written once and never changed; prompts
# that share a system prompt or a document share the KV of that prefix, so
# many blobs begin with the same bytes. ferry publishes the store's namespace
# at once, a blob is fetched on its first read (then served warm from the
# local store), and a shared prefix crosses the wire once: chunks are
# content-defined and deduplicated. Needs root (FUSE).
set -eu
B=${1:-build/release}
BIN=$(cd "$B/bin" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "kv-cache: FUSE mounts here need root" >&2; exit 1; }
T=$(mktemp -d /tmp/ferry-kv.XXXXXX)
RPID=""
cleanup() {
	mountpoint -q "$T/mnt" 2>/dev/null && fusermount3 -u "$T/mnt"
	[ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "kv-cache: FAILED: $*" >&2; exit 1; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
now() { date +%s.%N; }
ms() { python3 -c "import sys; print('%.1f ms' % ((float(sys.argv[2]) - float(sys.argv[1])) * 1000))" "$1" "$2"; }

say "1. a KV-cache store: 300 content-named blobs of 2-5 MiB, 4 shared prefixes"
python3 - "$T/kv" <<'PY'
import hashlib, os, random, sys
r = random.Random(3); root = sys.argv[1]
prefixes = [r.randbytes(r.randint(1, 3) << 20) for _ in range(4)]  # system prompts, documents
for i in range(300):
    blob = prefixes[i % 4] + r.randbytes(r.randint(512, 2048) << 10)  # + the session's own tokens
    name = hashlib.sha256(blob).hexdigest()
    d = os.path.join(root, name[:2])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".kv"), "wb") as f:  # written once, append-only
        f.write(blob)
PY
echo "   $(find "$T/kv" -type f | wc -l) blobs, $(du -sb --apparent-size "$T/kv" | cut -f1) bytes"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "2. the old region serves it; the new region mounts it (no backfill: fetch on first access)"
"$BIN/ferry-replicator" -l "127.0.0.1:$port" -s "$T/state" "kv=$T/kv" 2>"$T/repl.log" &
RPID=$!
for _ in $(seq 300); do grep -q ' ready' "$T/repl.log" && break; sleep 0.1; done
mkdir -p "$T/mnt"
t0=$(now)
"$BIN/ferry-hydrator" -c "$T/cache" --no-backfill "http://127.0.0.1:$port/v1/kv" "$T/mnt"
echo "   browsable after $(ms "$t0" "$(now)"): $(find "$T/mnt" -type f | wc -l) blobs listed, none fetched"

one=$(find "$T/mnt" -type f | sort | head -n 1)
say "3. an inference server asks for one blob: cold, then warm"
t0=$(now); cat "$one" >/dev/null; t1=$(now)
echo 3 >/proc/sys/vm/drop_caches
t2=$(now); cat "$one" >/dev/null; t3=$(now)
echo "   first read (fetched, verified, stored): $(ms "$t0" "$t1"); again (local store): $(ms "$t2" "$t3")"

say "4. the whole store read once: shared prefixes crossed the wire once"
find "$T/mnt" -type f -exec cat {} + >/dev/null
served=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^ferry_replicator_frame_bytes_served_total\{namespace="kv"\}/ {print $2}')
logical=$(du -sb --apparent-size "$T/kv" | cut -f1)
python3 -c "import sys; l, s = int(sys.argv[1]), int(float(sys.argv[2])); print('   %d bytes of blobs, %d bytes on the wire: %.2fx less' % (l, s, l / s))" "$logical" "$served"
python3 -c "import sys; sys.exit(float(sys.argv[2]) >= int(sys.argv[1]))" "$logical" "$served" ||
	fail "the wire carried as many bytes as the blobs: nothing was deduplicated"
diff -r "$T/kv" "$T/mnt" >/dev/null || fail "the mount differs from the source"
echo "   every blob identical to the source"
