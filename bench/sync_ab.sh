#!/usr/bin/env bash
# bench/sync_ab.sh TREE "BINDIR1 BINDIR2 ..." [ROUNDS] — `ferry sync` of
# TREE by two (or more) builds, alternating, same hour, same replicator:
# an honest before/after for the sync path. Each run goes over the shaped
# veth (RATE, default 1gbit: the client in netns dst) and then on
# loopback (the client in netns src, talking to the replicator's own
# address), after `sync`, a drop of the page cache, TREE read back and
# 2 s, into a directory of its own (kept until the end: ext4 scans
# recently freed inodes when files are created within a minute of a big
# delete). The replicator (the first BINDIR's) hashes TREE first.
#
# Prints one line a run: where, build, seconds, the sync's own elapsed,
# user and system CPU seconds and peak RSS KiB (GNU time), and "Chunks
# written from memory" / "Chunks fetched" from --stats.
#
# Knobs: RATE [1gbit], ONLY [link|loop], SHARED (the bench kit: wan.sh),
# WORK [build/bench/work/sync_ab].
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=$(cd "${1:?usage: bench/sync_ab.sh TREE \"BINDIR...\" [ROUNDS]}" && pwd)
BINS=${2:?usage: bench/sync_ab.sh TREE \"BINDIR...\" [ROUNDS]}
ROUNDS=${3:-2}
RATE=${RATE:-1gbit}
SHARED=$(cd "${SHARED:-$ROOT/../shared/bench}" && pwd)
WAN=$SHARED/wan.sh
W=${WORK:-$ROOT/build/bench/work/sync_ab}
SRC_IP=10.99.0.1 PORT=7073
URL=http://$SRC_IP:$PORT/v1/tree
NSS="ip netns exec src"
NSD="nsenter --net=/run/netns/dst"
NSL="nsenter --net=/run/netns/src"
# now, dt, and the EXIT trap (stops REPL_PID, takes the link down)
. "$ROOT/bench/lib.sh"
settle() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	find "$TREE" -type f -exec cat {} + >/dev/null
	sleep 2
}

mkdir -p "$W/dst"
"$WAN" up "$RATE" >&2 || exit 1
set -- $BINS
rm -rf "$W/state"
$NSS "$1/ferry-replicator" -l "$SRC_IP:$PORT" -s "$W/state" tree="$TREE" >"$W/repl.log" 2>&1 &
REPL_PID=$!
for i in $(seq 1 1200); do
	grep -q ' ready' "$W/repl.log" && break
	sleep 0.05
done
until_hashed "$NSL" "$URL" 1200 >/dev/null
n=0
for r in $(seq 1 "$ROUNDS"); do
	for b in $BINS; do
		for where in link loop; do
			[ -n "${ONLY:-}" ] && [ "$ONLY" != "$where" ] && continue
			n=$((n + 1))
			ns=$NSD
			[ "$where" = loop ] && ns=$NSL
			settle
			t0=$(now)
			$ns /usr/bin/time -f "%e %U %S %M" -o "$W/time.$n" "$b/ferry" sync --stats \
				-c "$W/dst/cache.$n" "$URL" "$W/dst/tree.$n" >"$W/sync.$n.log" 2>&1
			t1=$(now)
			rm -rf "$W/dst/cache.$n"
			echo "$where $b $(dt "$t0" "$t1") time=$(cat "$W/time.$n" | tr ' ' ,)" \
				"memory=$(awk -F': ' '/^Chunks written from memory/ {print $2}' "$W/sync.$n.log")" \
				"fetched=$(awk -F': ' '/^Chunks fetched/ {print $2}' "$W/sync.$n.log")"
		done
	done
done
rm -rf "$W/dst"
