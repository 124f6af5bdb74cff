#!/usr/bin/env bash
# bench/update.sh BUILD_DIR — the "5% changed" row: a source that changed
# after the first copy, and the rerun that brings the copy up to date.
# Called by bench/run.sh (UPDATE=1, the default); runs on its own as well.
#
# The bench tree (the small one of make bench) is copied to a working
# source; rsync -aHX (from an rsync daemon) and ferry sync (from
# ferry-replicator) each make a first copy over the shaped link. Then the
# source changes once for both: gen_tree.py --mutate 5 (5% of the
# files changed in place) and bench/update_mutate.py (1% deleted, 1% new,
# one directory renamed). The replicator rescans (SIGHUP: its time is
# rescan_s, and hash_s until the changed files are hashed), and each tool
# reruns with --delete, timed, from the same memory state:
#   update_rsync   rsync -aHX --delete rsync://SRC/w/ DEST/
#   update_ferry   ferry sync --delete URL DEST
# Before that, a mount made and completed before the change follows it by
# itself (--poll 1): update_mount times the publication -> the switch
# (switch_s) and -> every changed chunk stored (full_s), and checks the
# mount against the changed source.
# Both copies are checked against the changed source (treecmp --content).
# For ferry, changed_bytes is what the update needs at least: the
# compressed bytes of the chunks it had to fetch (the store's growth)
# plus the new generation's compressed catalog.
#
# Knobs: UPDATE_RATE [RATE or 200mbit], UPDATE_TREE [the bench tree; any
# gen_tree.py tree, e.g. a medium one, for how the cost grows],
# BENCH_OUT (as run.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/update.sh BUILD_DIR}" && pwd)
OUT=${BENCH_OUT:-$ROOT/build/bench}
RES=${RES:-$OUT/results.jsonl}
RATE=${UPDATE_RATE:-${RATE:-200mbit}}
WORK=$ROOT/build/bench/work
UW=$WORK/update
SRC_IP=10.99.0.1
PORT=7073
# The link's namespaces and veth ends (link.sh reads the same variables;
# other names let a run share the machine with someone else's)
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
NSL="nsenter --net=/run/netns/$NS_SRC"
LINK=$ROOT/bench/link.sh
TREECMP="python3 $ROOT/tests/e2e/lib/treecmp.py"
URL=http://$SRC_IP:$PORT/v1/w
LABEL=update-$RATE

log() { echo "[$(date +%H:%M:%S)] update: $*" >&2; }
. "$ROOT/bench/lib.sh"
emit() { python3 "$ROOT/bench/emit.py" "$@" >>"$RES"; }
RSYNCD_PID=
cleanup_update() {
	[ -n "$RSYNCD_PID" ] && kill "$RSYNCD_PID" 2>/dev/null
	bench_cleanup
}
trap cleanup_update EXIT

settle() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	find "$UW/src" -type f -exec cat {} + >/dev/null
	sleep 2
}

TREE=${UPDATE_TREE:-$WORK/src/tree}
[ -n "${UPDATE_TREE:-}" ] && LABEL=update-$RATE-$(basename "$TREE")
if [ ! -d "$TREE" ]; then
	log "generating the bench tree"
	mkdir -p "$WORK/src"
	python3 "$ROOT/bench/gen_tree.py" "$TREE" --scale small --seed 1 >&2 || exit 1
fi
rm -rf "$UW"
mkdir -p "$UW"
cp -a "$TREE" "$UW/src"
"$LINK" up "$RATE" >&2 || exit 1

cat >"$UW/rsyncd.conf" <<EOF
use chroot = no
uid = root
gid = root
log file = $UW/rsyncd.log
[w]
  path = $UW/src
  read only = yes
EOF
$NSS rsync --daemon --no-detach --config="$UW/rsyncd.conf" --address="$SRC_IP" >"$UW/rsyncd.out" 2>&1 &
RSYNCD_PID=$!
: >"$UW/repl.log"
$NSS "$B/bin/ferry-replicator" -l "$SRC_IP:$PORT" -s "$UW/state" w="$UW/src" >>"$UW/repl.log" 2>&1 &
REPL_PID=$!
for i in $(seq 1 600); do grep -q ' ready' "$UW/repl.log" && break; sleep 0.05; done
until_hashed "$NSL" "$URL" 1200 >/dev/null
for i in $(seq 1 100); do $NSD bash -c "exec 3<>/dev/tcp/$SRC_IP/873" 2>/dev/null && break; sleep 0.1; done

log "first copies: rsync -aHX and ferry sync at $RATE"
$NSD rsync -aHX "rsync://$SRC_IP/w/" "$UW/rsync/" || { log "first rsync failed"; exit 1; }
$NSD "$B/bin/ferry" sync -q --cache-dir "$UW/cache" "$URL" "$UW/ferry" || { log "first ferry sync failed"; exit 1; }
rest0=$(sqlite3 "$UW/cache/state.db" "select coalesce(sum(frame_len),0) from chunk" 2>/dev/null || echo 0)

# A mount that follows the source (--poll 1), complete before the change.
mstatus() { "$B/bin/ferry" status "$UW/mcache" --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['state'], d['generation'])" 2>/dev/null; }
mkdir -p "$UW/mnt"
$NSD "$B/bin/ferry-hydrator" -c "$UW/mcache" --poll 1 "$URL" "$UW/mnt" || { log "mount failed"; exit 1; }
MLOG=$UW/mcache/hydrator.log
MNT_ACTIVE=$UW/mnt
MPID=$(cat "$UW/mcache/hydrator.pid")
for i in $(seq 1 6000); do [ "$(mstatus)" = "complete 1" ] && break; sleep 0.1; done
[ "$(mstatus)" = "complete 1" ] || { log "the mount did not complete generation 1"; exit 1; }
mrest0=$(sqlite3 "$UW/mcache/state.db" "select coalesce(sum(frame_len),0) from chunk" 2>/dev/null || echo 0)

log "changing the source: 5% in place, 1% deleted, 1% new, a directory renamed"
python3 "$ROOT/bench/gen_tree.py" "$UW/src" --mutate 5 --seed 1 >&2
python3 "$ROOT/bench/update_mutate.py" "$UW/src" >&2
mw0=$(wire)
t0=$(now)
kill -HUP "$REPL_PID"
for i in $(seq 1 1200); do grep -q ' ready ns=w generation=2 ' "$UW/repl.log" && break; sleep 0.05; done
t1=$(now)
# The mount, meanwhile: it switches at its next poll (at most a second
# after the publication), then fetches the changed chunks, the source
# hashing the changed files as they are asked for.
# The moments come from the mount's log, watched every 50 ms: its switch
# line, then its second "state=complete" (backfill logs it as it happens).
ms=""
for i in $(seq 1 12000); do
	[ -z "$ms" ] && grep -q 'switched generation from=1 to=2 ' "$MLOG" && ms=$(now)
	[ -n "$ms" ] && [ "$(grep -c 'backfill state=complete' "$MLOG")" -ge 2 ] && break
	sleep 0.05
done
t3=$(now)
[ "$(mstatus)" = "complete 2" ] || log "the mount is not complete on generation 2: $(mstatus)"
mw1=$(wire)
until_hashed "$NSL" "$URL" 1200 >/dev/null
t2=$(now)
rescan_s=$(dt "$t0" "$t1")
hash_s=$(dt "$t1" "$t2")
log "rescan ${rescan_s}s, hashing the changes ${hash_s}s: $(grep ' ready ns=w generation=2 ' "$UW/repl.log")"
mok=$($TREECMP --content "$UW/src" "$UW/mnt" >/dev/null 2>&1 && echo exact || echo DIFF)
mrest1=$(sqlite3 "$UW/mcache/state.db" "select coalesce(sum(frame_len),0) from chunk" 2>/dev/null || echo 0)
# the catalog came as the delta 1 -> 2 (compressed)
delta_zst=$(stat -c %s "$UW/state/w/catalog/1-2.delta.zst" 2>/dev/null || stat -c %s "$UW/state/w/catalog/2.db.zst" 2>/dev/null || echo 0)
umount_wait "$UW/mnt" "$MPID"
emit update_mount "$LABEL" 1 rc=0 full_s="$(dt "$t1" "$t3")" switch_s="$(dt "$t1" "${ms:-$t3}")" \
	wire_bytes=$((mw1 - mw0)) verdict="$mok" strict_ok="$([ "$mok" = exact ] && echo true || echo false)" \
	changed_bytes=$((mrest1 - mrest0 + delta_zst)) chunk_bytes=$((mrest1 - mrest0)) catalog_bytes="$delta_zst"
log "mount --poll 1: switched $(dt "$t1" "${ms:-$t3}")s after the publication, complete $(dt "$t1" "$t3")s, wire=$((mw1 - mw0)), changed chunks $((mrest1 - mrest0)) B + delta $delta_zst B, $mok: $(grep 'switched generation' "$MLOG" | sed 's/.*switched/switched/')"

settle
w0=$(wire)
t0=$(now)
$NSD rsync -aHX --delete "rsync://$SRC_IP/w/" "$UW/rsync/"
rc=$?
t1=$(now)
w1=$(wire)
ok=$($TREECMP --content "$UW/src" "$UW/rsync" >/dev/null 2>&1 && echo exact || echo DIFF)
emit update_rsync "$LABEL" 1 rc=$rc full_s="$(dt "$t0" "$t1")" wire_bytes=$((w1 - w0)) verdict="$ok" strict_ok="$([ "$ok" = exact ] && echo true || echo false)"
log "rsync -aHX --delete rerun: $(dt "$t0" "$t1")s wire=$((w1 - w0)) $ok"

settle
w0=$(wire)
t0=$(now)
$NSD "$B/bin/ferry" sync --delete --stats --cache-dir "$UW/cache" "$URL" "$UW/ferry" >"$UW/ferry.stats" 2>&1
rc=$?
t1=$(now)
w1=$(wire)
ok=$($TREECMP --content "$UW/src" "$UW/ferry" >/dev/null 2>&1 && echo exact || echo DIFF)
rest1=$(sqlite3 "$UW/cache/state.db" "select coalesce(sum(frame_len),0) from chunk" 2>/dev/null || echo 0)
cat_zst=$(stat -c %s "$UW/state/w/catalog/2.db.zst" 2>/dev/null || echo 0)
fetched=$(awk -F': ' '/^Chunks fetched/ {print $2}' "$UW/ferry.stats")
emit update_ferry "$LABEL" 1 rc=$rc full_s="$(dt "$t0" "$t1")" wire_bytes=$((w1 - w0)) verdict="$ok" \
	strict_ok="$([ "$ok" = exact ] && echo true || echo false)" changed_bytes=$((rest1 - rest0 + cat_zst)) \
	chunk_bytes=$((rest1 - rest0)) catalog_bytes="$cat_zst" chunks="${fetched:-NA}" \
	rescan_s="$rescan_s" hash_s="$hash_s"
log "ferry sync --delete rerun: $(dt "$t0" "$t1")s wire=$((w1 - w0)) changed chunks $((rest1 - rest0)) B in ${fetched:-?} chunks + catalog $cat_zst B, $ok"
