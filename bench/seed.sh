#!/usr/bin/env bash
# bench/seed.sh BUILD_DIR — the "90% already here" rows: the destination
# holds an older copy of the tree (last month's data set, a previous
# checkpoint), the source has changed 10% of its files since, and a new
# copy is made. Called by bench/run.sh (SEED=1, the default); runs on its
# own as well.
#
# The bench tree (or SEED_TREE) is the old copy, OLD, on the destination
# side; the source is OLD with gen_tree.py --mutate 10 applied (10% of the
# regular files changed in place). rsync serves the source from an rsync
# daemon, ferry from ferry-replicator (hashed before the runs, so both
# start from a source at rest). Each run starts from the same memory
# state (caches dropped, the source read back in), with an empty cache:
#   seed_rsync        cp -a OLD DEST; rsync -aHX --delete rsync://SRC/w/ DEST/
#                     (rsync's delta transfer against the old files)
#   seed_rsync_link   rsync -aHX --link-dest=OLD rsync://SRC/w/ DEST/
#   seed_rsync_copy   rsync -aHX --copy-dest=OLD rsync://SRC/w/ DEST/
#   seed_ferry        ferry sync --seed OLD URL DEST
#   seed_ferry_link   ferry sync --link-dest OLD URL DEST
#   seed_ferry_basis  cp -a OLD DEST; ferry sync --delete URL DEST (DEST's
#                     own files are seeds)
#   seed_ferry_cold   ferry sync URL DEST with nothing local: what the
#                     seeds save
# The copy's time does not count for the cp -a rows (it is the state the
# destination is in). Every DEST is checked against the source
# (treecmp --content; link counts aside for the --link-dest rows); wire
# bytes are the link's counters.
#
# Knobs: SEED_RATE [RATE or 200mbit], SEED_TREE [the bench tree; any
# gen_tree.py tree, e.g. a medium one, for how the cost grows], SEED_PCT
# [10], SEED_RTT [0: ms added both ways through BUILD_DIR/bench/rttproxy
# in the destination's namespace, for rsync's daemon and the replicator
# alike], BENCH_OUT (as run.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/seed.sh BUILD_DIR}" && pwd)
OUT=${BENCH_OUT:-$ROOT/build/bench}
RES=${RES:-$OUT/results.jsonl}
RATE=${SEED_RATE:-${RATE:-200mbit}}
PCT=${SEED_PCT:-10}
WORK=$ROOT/build/bench/work
SW=$WORK/seed
SRC_IP=10.99.0.1
PORT=7074
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
NSL="nsenter --net=/run/netns/$NS_SRC"
LINK=$ROOT/bench/link.sh
TREECMP="python3 $ROOT/tests/e2e/lib/treecmp.py"
RTT=${SEED_RTT:-0}
PROXY_RSYNC=7079
PROXY_REPL=7080
URL=http://$SRC_IP:$PORT/v1/w
RSYNC_URL=rsync://$SRC_IP/w/
LABEL=seed-$RATE
[ "$RTT" != 0 ] && LABEL=seed-$RATE-${RTT}ms

log() { echo "[$(date +%H:%M:%S)] seed: $*" >&2; }
. "$ROOT/bench/lib.sh"
emit() { python3 "$ROOT/bench/emit.py" "$@" >>"$RES"; }
RSYNCD_PID= PROXY_PID=
cleanup_seed() {
	[ -n "$RSYNCD_PID" ] && kill "$RSYNCD_PID" 2>/dev/null
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
	bench_cleanup
}
trap cleanup_seed EXIT

settle() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	find "$SW/src" -type f -exec cat {} + >/dev/null
	sleep 2
}

TREE=${SEED_TREE:-$WORK/src/tree}
[ -n "${SEED_TREE:-}" ] && LABEL=seed-$RATE-$(basename "$TREE")
if [ ! -d "$TREE" ]; then
	log "generating the bench tree"
	mkdir -p "$WORK/src"
	python3 "$ROOT/bench/gen_tree.py" "$TREE" --scale small --seed 1 >&2 || exit 1
fi
rm -rf "$SW"
mkdir -p "$SW"
cp -a "$TREE" "$SW/old"
cp -a "$TREE" "$SW/src"
python3 "$ROOT/bench/gen_tree.py" "$SW/src" --mutate "$PCT" --seed 2 >&2 || exit 1
"$LINK" up "$RATE" >&2 || exit 1

cat >"$SW/rsyncd.conf" <<EOF
use chroot = no
uid = root
gid = root
log file = $SW/rsyncd.log
[w]
  path = $SW/src
  read only = yes
EOF
$NSS rsync --daemon --no-detach --config="$SW/rsyncd.conf" --address="$SRC_IP" >"$SW/rsyncd.out" 2>&1 &
RSYNCD_PID=$!
: >"$SW/repl.log"
$NSS "$B/bin/ferry-replicator" -l "$SRC_IP:$PORT" -s "$SW/state" w="$SW/src" >>"$SW/repl.log" 2>&1 &
REPL_PID=$!
for i in $(seq 1 600); do grep -q ' ready' "$SW/repl.log" && break; sleep 0.05; done
until_hashed "$NSL" "$URL" 1200 >/dev/null
for i in $(seq 1 100); do $NSD bash -c "exec 3<>/dev/tcp/$SRC_IP/873" 2>/dev/null && break; sleep 0.1; done

if [ "$RTT" != 0 ]; then
	: >"$SW/px.log"
	$NSD "$B/bench/rttproxy" "127.0.0.1:$PROXY_RSYNC" "$SRC_IP:873" "$(python3 -c "print($RTT / 2)")" \
		"127.0.0.1:$PROXY_REPL" "$SRC_IP:$PORT" >"$SW/px.log" 2>&1 &
	PROXY_PID=$!
	for i in $(seq 1 100); do [ "$(grep -c '^rttproxy: ready' "$SW/px.log")" -ge 2 ] && break; sleep 0.05; done
	[ "$(grep -c '^rttproxy: ready' "$SW/px.log")" -ge 2 ] || { log "rttproxy not ready: $(cat "$SW/px.log")"; exit 1; }
	URL=http://127.0.0.1:$PROXY_REPL/v1/w
	RSYNC_URL=rsync://127.0.0.1:$PROXY_RSYNC/w/
fi

# run APPROACH PREFILL COMMAND...: DEST (prefilled with OLD when PREFILL
# is 1) made by COMMAND, timed, wire counted, checked.
run() {
	local appr=$1 prefill=$2 w0 w1 t0 t1 rc ok
	shift 2
	rm -rf "$SW/dest" "$SW/cache"
	[ "$prefill" = 1 ] && cp -a "$SW/old" "$SW/dest"
	settle
	w0=$(wire)
	t0=$(now)
	"$@" >"$SW/$appr.out" 2>&1
	rc=$?
	t1=$(now)
	w1=$(wire)
	# a --link-dest copy shares inodes with OLD: link counts aside
	ok=$($TREECMP --content ${NO_NLINK:+--no-nlink} "$SW/src" "$SW/dest" >/dev/null 2>&1 && echo exact || echo DIFF)
	emit "$appr" "$LABEL" 1 rc=$rc full_s="$(dt "$t0" "$t1")" wire_bytes=$((w1 - w0)) \
		verdict="$ok" strict_ok="$([ "$ok" = exact ] && echo true || echo false)"
	log "$appr: $(dt "$t0" "$t1")s wire=$((w1 - w0)) rc=$rc $ok"
}

FS="$B/bin/ferry sync -q --cache-dir $SW/cache"
run seed_rsync 1 $NSD rsync -aHX --delete "$RSYNC_URL" "$SW/dest/"
NO_NLINK=1 run seed_rsync_link 0 $NSD rsync -aHX --link-dest="$SW/old" "$RSYNC_URL" "$SW/dest/"
run seed_rsync_copy 0 $NSD rsync -aHX --copy-dest="$SW/old" "$RSYNC_URL" "$SW/dest/"
run seed_ferry 0 $NSD $FS --seed "$SW/old" "$URL" "$SW/dest"
NO_NLINK=1 run seed_ferry_link 0 $NSD $FS --link-dest "$SW/old" "$URL" "$SW/dest"
run seed_ferry_basis 1 $NSD $FS --delete "$URL" "$SW/dest"
run seed_ferry_cold 0 $NSD $FS "$URL" "$SW/dest"
kill "$REPL_PID" 2>/dev/null
wait "$REPL_PID" 2>/dev/null
exit 0
