#!/usr/bin/env bash
# examples/kv-cache.sh [BUILD_DIR] — a KV-cache store served from a remote
# region. An inference server's LMCache file-system connector leaves one
# <key>.data file per chunk of tokens, all in one directory (the key names
# the model, the tensor-parallel layout, a hash of the token prefix and the
# KV dtype; each file written under a temporary name and renamed). The old
# region serves that directory; the new region mounts it with a cache bound
# (--cache-max, a tenth of the store here, least recently read chunks
# evicted) and no backfill: a blob is fetched on its first read and kept
# while it is read often. A reader looks keys up as the connector does
# (stat; no file is a miss), reads what exists, and checks every byte.
# Needs root (FUSE) and a ferry-hydrator with --cache-max. Runs on loopback.
# KV_BLOBS (default 400) and KV_LOOKUPS (default 3000) size it.
set -eu
B=${1:-build/release}
BIN=$(cd "$B/bin" && pwd)
BENCH=$(cd "$(dirname "$0")/../bench" && pwd) # kv_gen.py, kv_job.py
[ "$(id -u)" -eq 0 ] || { echo "kv-cache: FUSE mounts here need root" >&2; exit 1; }
help=$("$BIN/ferry-hydrator" --help 2>&1 || true)
case $help in
*--cache-max*) ;;
*) echo "kv-cache: FAILED: $BIN/ferry-hydrator has no --cache-max (the cache size bound this example is about); build a ferry that has it" >&2; exit 1 ;;
esac
T=$(mktemp -d /tmp/ferry-kv.XXXXXX)
RPID=""
cleanup() {
	local pid
	if mountpoint -q "$T/mnt" 2>/dev/null; then
		fusermount3 -u "$T/mnt" 2>/dev/null || fusermount3 -u -z "$T/mnt" 2>/dev/null || true
	fi
	pid=$(cat "$T/cache/hydrator.pid" 2>/dev/null || true)
	for _ in $(seq 100); do
		if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
		sleep 0.1
	done
	if [ -n "$RPID" ]; then kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; fi
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "kv-cache: FAILED: $*" >&2; exit 1; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
BLOBS=${KV_BLOBS:-400}
LOOKUPS=${KV_LOOKUPS:-3000}
now() { date +%s.%N; }
ms() { python3 -c "import sys; print('%.1f ms' % ((float(sys.argv[2]) - float(sys.argv[1])) * 1000))" "$1" "$2"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
jget() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

say "1. a KV-cache store as LMCache's file-system connector leaves it: $BLOBS blobs of 1-4 MiB in one directory"
python3 "$BENCH/kv_gen.py" "$T/kv" --manifest "$T/kv.json" --blobs "$BLOBS" --min-mib 1 --max-mib 4 --seed 1 >/dev/null
bytes=$(jget "$T/kv.json" bytes)
echo "   $(find "$T/kv" -type f -name '*.data' | wc -l) blobs, $bytes bytes, e.g. $(find "$T/kv" -name "*.data" -printf "%f\n" | sort | head -n 1)"
echo "   $(jget "$T/kv.json" shared_prefixes) system prompts shared by most sessions; keys of longer prompts are absent"

cmax=$((bytes / 10 / 1024 * 1024))
port=$(free_port)
mport=$(free_port)
say "2. the old region serves it; the new region mounts it: --cache-max $((cmax / 1024))K (a tenth), no backfill"
"$BIN/ferry-replicator" -l "127.0.0.1:$port" -s "$T/state" "kv=$T/kv" 2>"$T/repl.log" &
RPID=$!
for _ in $(seq 300); do grep -q ' ready' "$T/repl.log" && break; sleep 0.1; done
grep -q ' ready' "$T/repl.log" || fail "the replicator is not ready after 30 s: $(tail -n 3 "$T/repl.log")"
mkdir -p "$T/mnt"
t0=$(now)
"$BIN/ferry-hydrator" -c "$T/cache" --cache-max "$((cmax / 1024))K" --no-backfill \
	--metrics-listen "127.0.0.1:$mport" "http://127.0.0.1:$port/v1/kv" "$T/mnt"
echo "   browsable after $(ms "$t0" "$(now)"): $(find "$T/mnt" -type f | wc -l) blobs listed, none fetched"

say "3. an inference server looks up $LOOKUPS keys (Zipf s=1.1, 10% absent) and reads each one found"
python3 "$BENCH/kv_job.py" "$T/mnt" "$T/kv.json" --cache-max "$cmax" --lookups "$LOOKUPS" --zipf 1.1 \
	--absent 0.1 --seed 7 --metrics "http://127.0.0.1:$mport/metrics" --local "$T/kv" \
	--store "$T/cache" --scan --quiet --json "$T/job.json" ||
	fail "the reader found bytes that differ from the source, or a read that failed (above)"

say "4. checks"
sleep 2 # the last fetched chunks committed, and evicted for
"$BIN/ferry" status "$T/mnt" --json >"$T/status.json" || fail "ferry status did not answer"
python3 - "$T/job.json" "$T/status.json" "$T/cache/volumes" <<'PY' || fail "the store is larger than --cache-max"
import json, os, sys
r, st = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cap, peak, rest = r["cache_max"], r["store_peak_alloc"], st["rest_bytes"]
alloc = sum(os.stat(os.path.join(sys.argv[3], f)).st_blocks * 512 for f in os.listdir(sys.argv[3]))
print("   the store now: %.1f MB of chunks (ferry's count), %.1f MB allocated on disk; --cache-max %.1f MB" %
      (rest / 1e6, alloc / 1e6, cap / 1e6))
print("   at most %.1f MB allocated during the run, %+.0f%% of the bound (after %s)" %
      (peak / 1e6, 100 * (peak - cap) / cap, r["store_peak_at"]))
sys.exit(rest > cap or alloc > cap * 1.01)
PY
[ "$(jget "$T/job.json" bad_bytes)" = 0 ] || fail "bytes differ from the source"
[ "$(jget "$T/job.json" scanned)" = "$BLOBS" ] || fail "not every blob was read back"
echo "   every blob identical to the source (the trace's reads and a read of all $BLOBS, sha256 each)"
