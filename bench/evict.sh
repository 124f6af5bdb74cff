#!/usr/bin/env bash
# bench/evict.sh BUILD_DIR — a mount's store under --cache-max, on
# loopback (no WAN: what is measured is the store's own work):
#   scan    a sequential read (cat) of a tree four times the bound, with
#           a pinned directory a quarter of the bound: the store's blocks
#           on disk sampled every 50 ms (peak, and how far above the
#           bound), how many bytes were evicted, and whether every pinned
#           byte is still there afterwards (read again with the
#           replicator stopped: nothing pinned was evicted)
#   warm    the read throughput of a warm working set (every chunk in the
#           store, the mount's pages dropped before each read so FUSE
#           serves it again, the store's volumes left in the page cache)
#           while a second reader streams files never read before
#           through the same mount: with no bound, against a bound a
#           quarter above the working set (pinned, so its reads stay
#           hits) under which every group the stream brings evicts the
#           stream's older chunks; target: >= 0.95x (eviction costs at
#           most 5% of a warm workload's throughput)
# Knobs: EVICT_MIB (default 2048) the scanned tree, the bound a quarter
# of it; WARM_MIB (default 512) the working set; RUNS (default 3) warm
# reads per side, the median reported. Files are 8 MiB of incompressible
# bytes. Writes its table to $OUT (default build/bench/evict.table) and,
# with RES set (make bench), one record (approach ferry_evict) to RES.
# Cost: the scan moves 4x the bound once (O(tree)); each eviction costs
# the chunks it evicts, so the bound's size does not change the per-byte
# cost. Needs root (FUSE, drop_caches).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/evict.sh BUILD_DIR}" && pwd)
WORK=${WORK:-$ROOT/build/bench/work/evict}
OUT=${OUT:-$ROOT/build/bench/evict.table}
EVICT_MIB=${EVICT_MIB:-2048}
WARM_MIB=${WARM_MIB:-512}
RUNS=${RUNS:-3}
REPL="$B/bin/ferry-replicator"
HYD="$B/bin/ferry-hydrator"
FERRY="$B/bin/ferry"
[ -x "$REPL" ] && [ -x "$HYD" ] || { echo "no programs in $B/bin" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
field() { "$FERRY" status "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
MNT="$WORK/mnt"
REPL_PID=
SAMPLER=
cleanup() {
	[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
	mountpoint -q "$MNT" && fusermount3 -u "$MNT"
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT
die() { echo "evict: $*" >&2; exit 1; }

BOUND_MIB=$((EVICT_MIB / 4))
PIN_MIB=$((BOUND_MIB / 4))
[ "$PIN_MIB" -ge 8 ] || die "EVICT_MIB=$EVICT_MIB is too small (at least 128)"
mkdir -p "$WORK" "$MNT"
# The tree: scan/ (4x the bound), keep/ (a quarter of it), warm/ and cold/.
python3 - "$WORK/src" "$EVICT_MIB" "$PIN_MIB" "$WARM_MIB" "$RUNS" <<'PY'
import os, sys
root, scan, pin, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dirs = [("scan", scan), ("keep", pin), ("warm", warm)]
dirs += [("cold/r%d" % i, warm // 2) for i in range(1, int(sys.argv[5]) + 1)]
for d, mib in dirs:
    p = os.path.join(root, d)
    os.makedirs(p, exist_ok=True)
    for i in range(mib // 8):
        f = os.path.join(p, "f%04d.bin" % i)
        if os.path.exists(f) and os.path.getsize(f) == 8 << 20:
            continue
        with open(f, "wb") as o:
            o.write(os.urandom(8 << 20))
PY
rm -rf "$WORK/state"
rp=$(port)
"$REPL" -l "127.0.0.1:$rp" -s "$WORK/state" --hash-before-publish "e=$WORK/src" >"$WORK/repl.log" 2>&1 &
REPL_PID=$!
for _ in $(seq 1 2400); do grep -q ' ready' "$WORK/repl.log" && break; sleep 0.5; done
grep -q ' ready' "$WORK/repl.log" || { tail "$WORK/repl.log" >&2; exit 1; }
URL="http://127.0.0.1:$rp/v1/e"

# ---- scan: 4x the bound through the store, a quarter of it pinned ----
rm -rf "$WORK/cache"
"$HYD" -c "$WORK/cache" --cache-max "${BOUND_MIB}M" --pin keep --poll 0 "$URL" "$MNT" || die "mount failed"
for _ in $(seq 1 1200); do grep -q 'pins done' "$WORK/cache/hydrator.log" && break; sleep 0.1; done
grep -q 'pins done' "$WORK/cache/hydrator.log" || die "the pins were not fetched"
: >"$WORK/samples"
(while :; do du -s --block-size=1 "$WORK/cache/volumes" | cut -f1 >>"$WORK/samples"; sleep 0.05; done) &
SAMPLER=$!
t0=$(now)
cat "$MNT"/scan/* >/dev/null || die "scan read failed"
scan_s=$(secs "$t0" "$(now)")
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null; SAMPLER=
peak=$(sort -n "$WORK/samples" | tail -n 1)
nsamp=$(wc -l <"$WORK/samples")
evicted=$(field "$WORK/cache" cache_evicted)
# Every pinned byte still in the store: read with the source stopped.
kill "$REPL_PID"; wait "$REPL_PID" 2>/dev/null; REPL_PID=
sync; echo 3 >/proc/sys/vm/drop_caches
pinned_ok=yes
for f in "$WORK/src"/keep/*; do
	cmp -s "$f" "$MNT/keep/$(basename "$f")" || { pinned_ok=no; break; }
done
fusermount3 -u "$MNT"
for _ in $(seq 1 100); do [ -e "$WORK/cache/hydrator.pid" ] || break; sleep 0.1; done

# ---- warm: a working set read warm, no bound against a bound ----
"$REPL" -l "127.0.0.1:$rp" -s "$WORK/state" "e=$WORK/src" >>"$WORK/repl.log" 2>&1 &
REPL_PID=$!
for _ in $(seq 1 600); do [ "$(grep -c ' ready' "$WORK/repl.log")" -ge 2 ] && break; sleep 0.1; done
warm_side() { # NAME OPTS... : median MiB/s of RUNS warm reads of warm/
	local name=$1 t0 t i
	shift
	rm -rf "$WORK/cache-$name"
	"$HYD" -c "$WORK/cache-$name" --no-backfill --poll 0 "$@" "$URL" "$MNT" || die "mount ($name) failed"
	cat "$MNT"/warm/* >/dev/null
	: >"$WORK/warm-$name"
	for i in $(seq "$RUNS"); do
		# the mount's pages dropped (FUSE serves every read again),
		# the store's volumes left in the page cache: what is timed is
		# the store's own path, not the disk
		for f in "$MNT"/warm/*; do dd if="$f" iflag=nocache count=0 status=none; done
		# files never read before streamed beside the warm reads,
		# fetched on both sides (with the bound, each group of them
		# evicts older ones)
		(cat "$MNT"/cold/r"$i"/* >/dev/null) &
		local bg=$!
		t0=$(now)
		cat "$MNT"/warm/* >/dev/null
		t=$(secs "$t0" "$(now)")
		wait "$bg" 2>/dev/null
		python3 -c "print('%.1f' % ($WARM_MIB / $t))" >>"$WORK/warm-$name"
		echo "# $name run $i: $(tail -n1 "$WORK/warm-$name") MiB/s" >&2
	done
	field "$WORK/cache-$name" cache_evicted >"$WORK/evicted-$name"
	fusermount3 -u "$MNT"
	for _ in $(seq 1 100); do [ -e "$WORK/cache-$name/hydrator.pid" ] || break; sleep 0.1; done
	sort -n "$WORK/warm-$name" | sed -n "$(((RUNS + 1) / 2))p"
}
free_mibs=$(warm_side free)
# the working set pinned (all hits), a quarter more for the stream
# beside it: each run's stream evicts the one before
bound_mibs=$(warm_side bound --cache-max "$((WARM_MIB + WARM_MIB / 4))M" --pin warm)
warm_evicted=$(cat "$WORK/evicted-bound")

python3 - "$OUT" <<PY
import sys
bound = $BOUND_MIB << 20
peak, evicted = $peak, $evicted
free, bnd = $free_mibs, $bound_mibs
ratio = bnd / free if free else 0
over = max(0, peak - bound)
rows = [
    "| row | measure | value | target | verdict |",
    "|---|---|---|---|---|",
    "| scan $EVICT_MIB MiB through a ${BOUND_MIB} MiB bound ($scan_s s, $nsamp samples) | peak on disk | %.1f MiB (%.1f MiB over the bound) | bound + chunks in flight (2 x bound/4) | %s |"
    % (peak / 2**20, over / 2**20, "PASS" if peak <= bound * 1.5 + (1 << 20) else "MISS"),
    "| | evicted | %.0f MiB | > 0 | %s |" % (evicted / 2**20, "PASS" if evicted > 0 else "MISS"),
    "| | pinned keep/ (${PIN_MIB} MiB) after the scan, no source | $pinned_ok | every byte | %s |"
    % ("PASS" if "$pinned_ok" == "yes" else "MISS"),
    "| warm ${WARM_MIB} MiB, cold stream beside | no bound | %.0f MiB/s | | |" % free,
    "| | --cache-max $((WARM_MIB + WARM_MIB / 4)) MiB, --pin warm ($warm_evicted bytes evicted meanwhile) | %.0f MiB/s (%.2fx) | >= 0.95x | %s |"
    % (bnd, ratio, "PASS" if ratio >= 0.95 else "MISS"),
]
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
[ -n "${RES:-}" ] && python3 "$ROOT/bench/emit.py" ferry_evict evict-loopback 1 \
	scan_mib="$EVICT_MIB" bound_mib="$BOUND_MIB" peak_bytes="$peak" evicted_bytes="$evicted" \
	pinned_ok="$pinned_ok" warm_free_mib_s="$free_mibs" warm_bound_mib_s="$bound_mibs" >>"$RES"
exit 0
