#!/usr/bin/env bash
# bench/sync_ab.sh TREE "BINDIR1 BINDIR2 ..." [ROUNDS] — `ferry sync` of
# TREE by two (or more) builds, alternating, same hour, same replicator:
# an honest before/after for the sync path. Each run goes over the shaped
# veth (RATE, default 1gbit: the client in netns dst) and then on
# loopback (the client in netns src, talking to the replicator's own
# address), after `sync`, a drop of the page cache, TREE read back and
# 2 s, into a directory of its own (kept until the end: ext4 scans
# recently freed inodes when files are created within a minute of a big
# delete). The replicator (the first BINDIR's) hashes TREE first; with
# REPL_EACH=1 each build's runs are served by that build's replicator
# (restarted on the same state, for a before/after of the serving side).
#
# Prints one line a run: where, build, seconds, the sync's own elapsed,
# user and system CPU seconds and peak RSS KiB (GNU time), "Chunks
# written from memory" / "Chunks fetched" and "Wire bytes received" from
# --stats, and the replicator's CPU seconds during the run.
#
# With WHAT=mount each run is a mount instead, timed from the
# ferry-hydrator command until its log says backfill state=complete (as
# bench/medium.sh does), then unmounted; the line then has the hydrator's
# wire bytes (ferry status) and the replicator's CPU.
#
# Knobs: RATE [1gbit], ONLY [link|loop], REPL_EACH [0], WHAT [sync|mount],
# WORK [build/bench/work/sync_ab], NS_SRC NS_DST IF_SRC IF_DST (the
# link's names, bench/link.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=$(cd "${1:?usage: bench/sync_ab.sh TREE \"BINDIR...\" [ROUNDS]}" && pwd)
BINS=${2:?usage: bench/sync_ab.sh TREE \"BINDIR...\" [ROUNDS]}
ROUNDS=${3:-2}
RATE=${RATE:-1gbit}
LINK=$ROOT/bench/link.sh
W=${WORK:-$ROOT/build/bench/work/sync_ab}
SRC_IP=10.99.0.1 PORT=7073
URL=http://$SRC_IP:$PORT/v1/tree
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
NSL="nsenter --net=/run/netns/$NS_SRC"
# now, dt, and the EXIT trap (stops REPL_PID, takes the link down)
. "$ROOT/bench/lib.sh"
settle() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	find "$TREE" -type f -exec cat {} + >/dev/null
	sleep 2
}

mkdir -p "$W/dst"
"$LINK" up "$RATE" >&2 || exit 1
# start_repl BINDIR: that build's replicator on the state, hashed
start_repl() {
	if [ -n "${REPL_PID:-}" ]; then
		kill "$REPL_PID"
		wait "$REPL_PID" 2>/dev/null
	fi
	: >"$W/repl.log"
	$NSS "$1/ferry-replicator" -l "$SRC_IP:$PORT" -s "$W/state" tree="$TREE" >"$W/repl.log" 2>&1 &
	REPL_PID=$!
	REPL_BIN=$1
	for i in $(seq 1 1200); do
		grep -q ' ready' "$W/repl.log" && break
		sleep 0.05
	done
	until_hashed "$NSL" "$URL" 1200 >/dev/null
}
# its CPU seconds so far (/proc/PID/stat utime + stime, in clock ticks)
repl_cpu() { awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' "/proc/$REPL_PID/stat"; }
# mount_run NS BINDIR CACHE: mount to backfill complete (MOUNT_S, the
# time of the log's state=complete line, or NA), MOUNT_WIRE from the
# cache; unmounted, cache removed.
mount_run() {
	local ns=$1 b=$2 cache=$3 t0 t1
	mkdir -p "$W/mnt"
	t0=$(now)
	$ns "$b/ferry-hydrator" -c "$cache" "$URL" "$W/mnt" || { MOUNT_S=NA MOUNT_WIRE=NA; return; }
	MNT_ACTIVE=$W/mnt
	MOUNT_S=NA
	t1=$(complete_at "$cache/hydrator.log") && MOUNT_S=$(dt "$t0" "$t1")
	MOUNT_WIRE=$("$b/ferry" status "$cache" --json |
		python3 -c "import json,sys; print(json.load(sys.stdin).get('wire_bytes'))")
	umount_wait "$W/mnt" "$(pid_of_cache "$cache")"
	rm -rf "$cache"
}
set -- $BINS
rm -rf "$W/state"
start_repl "$1"
n=0
for r in $(seq 1 "$ROUNDS"); do
	for b in $BINS; do
		for where in link loop; do
			[ -n "${ONLY:-}" ] && [ "$ONLY" != "$where" ] && continue
			n=$((n + 1))
			ns=$NSD
			[ "$where" = loop ] && ns=$NSL
			[ "${REPL_EACH:-0}" = 1 ] && [ "$REPL_BIN" != "$b" ] && start_repl "$b"
			settle
			c0=$(repl_cpu)
			if [ "${WHAT:-sync}" = mount ]; then
				mount_run "$ns" "$b" "$W/dst/cache.$n"
				echo "$where $b $MOUNT_S wire=$MOUNT_WIRE" \
					"repl_cpu=$(python3 -c "print('%.2f' % ($(repl_cpu) - $c0))")"
				continue
			fi
			t0=$(now)
			$ns /usr/bin/time -f "%e %U %S %M" -o "$W/time.$n" "$b/ferry" sync --stats \
				-c "$W/dst/cache.$n" "$URL" "$W/dst/tree.$n" >"$W/sync.$n.log" 2>&1
			t1=$(now)
			c1=$(repl_cpu)
			rm -rf "$W/dst/cache.$n"
			echo "$where $b $(dt "$t0" "$t1") time=$(cat "$W/time.$n" | tr ' ' ,)" \
				"memory=$(awk -F': ' '/^Chunks written from memory/ {print $2}' "$W/sync.$n.log")" \
				"fetched=$(awk -F': ' '/^Chunks fetched/ {print $2}' "$W/sync.$n.log")" \
				"wire=$(awk -F': ' '/^Wire bytes received/ {print $2+0}' "$W/sync.$n.log")" \
				"repl_cpu=$(python3 -c "print('%.2f' % ($c1 - $c0))")"
		done
	done
done
rm -rf "$W/dst"
