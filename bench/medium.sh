#!/usr/bin/env bash
# bench/medium.sh BUILD_DIR — the medium tree (bench/gen_tree.py --scale
# medium: ~2.5 GB, ~21,000 entries, 12 shards of ~134 MB, a 66 MB
# optimizer file and ~17,000 files under 64 KiB) on a fast link and on no
# link at all. Called by bench/run.sh
# (MEDIUM=1, the default); runs on its own as well.
#
#   medium-RATE       rsync -aHX (bench/peers.sh), ferry mount -> backfill
#                     complete, ferry mount --into DIR -> ferry finish,
#                     ferry sync; all over the same shaped veth
#                     (link.sh, RATE = MEDIUM_RATE, default 1gbit)
#   medium-loopback   the same without the link: clients in the source's
#                     network namespace, talking to its own address (the
#                     kernel routes that over lo). rsync -aHX is a local
#                     copy of the tree; then a warm tar (fresh mount of the
#                     complete cache, its volumes in the page cache) and a hot
#                     tar (the same mount again: kernel page cache)
#
# "complete" for a mount is the moment the hydrator logs state=complete
# (backfill logs it as it happens); the mount's start is before the
# ferry-hydrator command. rsync's time is its own exit, as a user sees it
# (its writeback is after; ferry's volumes are fdatasynced, ferry sync ends
# with a syncfs of DEST): synced_s has rsync plus a sync. Each timed step
# starts after `sync`, a drop of the page cache, the source tree read back
# and 2 s (settle, below). Records go to RES (bench/emit.py); the peers'
# runs are copied there with the rate relabelled.
#
# Knobs: MEDIUM_RATE [1gbit], MEDIUM_RUNS [1], BENCH_OUT (as run.sh),
# MEDIUM_STEPS ["peers mount into sync local"]: the steps run (peers:
# rsync -aHX over the link; mount: the mount to complete; into: --into
# and finish; sync: ferry sync; local: the loopback rows), for a
# before/after of one of them.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/medium.sh BUILD_DIR}" && pwd)
OUT=${BENCH_OUT:-$ROOT/build/bench}
RES=${RES:-$OUT/results.jsonl}
RATE=${MEDIUM_RATE:-1gbit}
RUNS=${MEDIUM_RUNS:-1}
STEPS=" ${MEDIUM_STEPS:-peers mount into sync local} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
MW=$ROOT/build/bench/work/medium
SRC_IP=10.99.0.1
PORT=7072
# The link's namespaces and veth ends (link.sh reads the same variables;
# other names let a run share the machine with someone else's)
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
NSL="nsenter --net=/run/netns/$NS_SRC"
LINK=$ROOT/bench/link.sh
LIB="python3 $ROOT/bench/peers_lib.py"
TREECMP="python3 $ROOT/tests/e2e/lib/treecmp.py"
URL=http://$SRC_IP:$PORT/v1/tree

log() { echo "[$(date +%H:%M:%S)] medium: $*" >&2; }
# now, dt, wire, and the EXIT trap (unmount, stop servers, link down)
. "$ROOT/bench/lib.sh"
emit() { python3 "$ROOT/bench/emit.py" "$@" >>"$RES"; }
# Before each timed step, the same state for every tool: the writeback
# of the step before (GBs of files and volumes) must not land on this one's
# fdatasyncs, and the page cache starts empty but for the source tree
# (read back) and any DIR given. Without the drop each step filled memory
# this VM had not touched yet, which costs the first write of every page:
# runs got 30-50% slower the later they came, the more so the more bytes
# they wrote.
settle() { # [DIR...]
	sync
	echo 3 >/proc/sys/vm/drop_caches
	find "$TREE" "$@" -type f -exec cat {} + >/dev/null
	sleep 2
}
# Every copy goes to a directory of its own, removed only at the end: ext4
# (no journal here) will not reuse an inode freed less than a minute ago
# and checks each candidate, so creating 21,000 files right after deleting
# 21,000 costs seconds of system time in inode allocation alone.
SEQ=0
fresh_dir() { # VAR NAME: VAR=$MW/dst/NAME.SEQ (not in a subshell: SEQ counts)
	SEQ=$((SEQ + 1))
	printf -v "$1" '%s' "$MW/dst/$2.$SEQ"
}


# --- rsync -aHX over the link, by bench/peers.sh (it also makes the
# tree, with the manifests its verdicts use).
peers() {
	log "rsync -aHX at $RATE (bench/peers.sh, $RUNS run(s))"
	rm -rf "$OUT/medium-peers"
	WORKDIR=$MW RES=$OUT/medium-peers RATES=$RATE RUNS=$RUNS RTT_MS=0 SCALE=medium FILES= SEED=1 MUTATE=0 \
		APPROACHES=rsync_hx bash "$ROOT/bench/peers.sh" "$B" >"$OUT/medium-peers.table" ||
		log "bench/peers.sh failed (see $OUT/medium-peers.table)"
	[ -f "$OUT/medium-peers/results.jsonl" ] &&
		python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); r['rate'] = 'medium-' + r['rate']; print(json.dumps(r))" \
			"$OUT/medium-peers/results.jsonl" >>"$RES"
	tree_vars
}

# The tree bench/peers.sh made (without the peers step: an earlier run's).
tree_vars() {
	TREE=$MW/src/tree
	[ -d "$TREE" ] || { log "no medium tree at $TREE (run the peers step once)"; exit 1; }
	TREE_BYTES=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['bytes'])" "$MW/src/tree.summary.json")
}

start_replicator() {
	local i st
	rm -rf "$MW/ferry-state"
	: >"$MW/repl.log"
	$NSS "$B/bin/ferry-replicator" -l "$SRC_IP:$PORT" -s "$MW/ferry-state" tree="$TREE" >>"$MW/repl.log" 2>&1 &
	REPL_PID=$!
	for i in $(seq 1 1200); do
		grep -q ' ready' "$MW/repl.log" && break
		kill -0 "$REPL_PID" 2>/dev/null || { cat "$MW/repl.log" >&2; exit 1; }
		sleep 0.05
	done
	# Every file hashed first: this measures the transfer, not the source.
	st=$(until_hashed "$NSL" "$URL" 1200)
	log "$(grep ' ready' "$MW/repl.log") hashing=$st"
}


# mount_complete LABEL RUN NS: fresh cache, mount, wait for complete.
mount_complete() {
	local label=$1 run=$2 ns=$3 cache mnt=$MW/mnt w0 w1 t0 t1 pid hwm full wb
	fresh_dir cache cache
	mkdir -p "$mnt"
	settle
	w0=$(wire)
	t0=$(now)
	$ns "$B/bin/ferry-hydrator" -c "$cache" "$URL" "$mnt" 2>>"$MW/hyd.err" ||
		{ emit ferry_mount "$label" "$run" error=mount_failed; return 1; }
	MNT_ACTIVE=$mnt
	t1=$(complete_at "$cache/hydrator.log")
	w1=$(wire)
	pid=$(pid_of_cache "$cache")
	hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)
	full=NA
	[ "$t1" != NA ] && full=$(dt "$t0" "$t1")
	wb=$((w1 - w0))
	# Loopback traffic never crosses the veth: the hydrator's own count.
	[ "$label" = medium-loopback ] && wb=$("$B/bin/ferry" status "$cache" --json |
		python3 -c "import json,sys; print(json.load(sys.stdin).get('wire_bytes') or 'NA')")
	if [ "$label" = medium-loopback ]; then
		warm_tar "$run" "$ns" "$cache" "$mnt" "$pid"
	else
		umount_wait "$mnt" "$pid"
	fi
	emit ferry_mount "$label" "$run" full_s="$full" wire_bytes="$wb" tree_bytes="$TREE_BYTES" \
		peak_rss_kb="${hwm:-NA}" verdict="${VERDICT:-NA}" strict_ok="${STRICT:-NA}"
	log "ferry mount@$label#$run complete=${full}s wire=$wb"
	VERDICT= STRICT=
}

# warm_tar RUN NS CACHE MNT PID: remount the complete cache (kernel caches
# empty, the volumes in the page cache), tar it twice; checks the content.
warm_tar() {
	local run=$1 ns=$2 cache=$3 mnt=$4 pid=$5 t0 n1 n2 warm hot
	umount_wait "$mnt" "$pid"
	settle "$cache/volumes" # "warm": the store's volumes in the page cache
	$ns "$B/bin/ferry-hydrator" -c "$cache" "$URL" "$mnt" 2>>"$MW/hyd.err" || return 1
	MNT_ACTIVE=$mnt
	sleep 1 # the mount's own start-up work, not the reader's
	t0=$(now)
	n1=$(tar -C "$mnt" -cf - . | wc -c)
	warm=$(dt "$t0" "$(now)")
	t0=$(now)
	n2=$(tar -C "$mnt" -cf - . | wc -c)
	hot=$(dt "$t0" "$(now)")
	if $TREECMP --content "$TREE" "$mnt" >"$MW/treecmp.out" 2>&1; then STRICT=true; else STRICT=false; fi
	VERDICT=$($LIB compare "$MW/src/tree.manifest.json" "$mnt")
	emit ferry_tar medium-loopback "$run" warm_s="$warm" hot_s="$hot" tar_bytes="$n1" \
		warm_mbps="$(python3 -c "print('%.1f' % ($n1 / 1e6 / $warm))")" \
		hot_mbps="$(python3 -c "print('%.1f' % ($n2 / 1e6 / $hot))")" strict_ok="$STRICT"
	log "tar of the complete mount: warm ${warm}s, hot ${hot}s ($n1 bytes) strict=$STRICT"
	umount_wait "$mnt" "$(pid_of_cache "$cache")"
}

# into_run LABEL RUN NS: a fresh cache mounted with --into DIR until
# `ferry finish` has put DIR in the mount's place; then the disk both
# use (DIR and what is left of the cache, after the hydrator dropped its
# store), and a tar of the mountpoint (now DIR) beside a tar of the
# source tree, both from a dropped page cache: the disk's speed.
into_run() {
	local label=$1 run=$2 ns=$3 cache dir mnt=$MW/mnt w0 t0 t1 t2 pid full landed st n
	local disk tree_alloc strict verdict tar_s tar_b src_s src_b tw tf warm warm_b
	fresh_dir cache into-cache
	fresh_dir dir into
	mkdir -p "$mnt"
	settle
	w0=$(wire)
	t0=$(now)
	$ns "$B/bin/ferry-hydrator" -c "$cache" --into "$dir" "$URL" "$mnt" 2>>"$MW/hyd.err" ||
		{ emit ferry_into "$label" "$run" error=mount_failed; return 1; }
	MNT_ACTIVE=$mnt
	pid=$(pid_of_cache "$cache")
	# when the hydrator logged the landing (as the plain mount's
	# complete, from its log), then checked once by ferry status
	t1=$(logged_at "$cache/hydrator.log" "--into: landed generation=") ||
		{ emit ferry_into "$label" "$run" error=not_landed; return 1; }
	st=$("$B/bin/ferry" status "$cache" --json 2>/dev/null |
		python3 -c "import json,sys; j=json.load(sys.stdin); print(j.get('into'), j.get('into_generation'), j.get('generation'))")
	[ "$st" = "landed 1 1" ] || { emit ferry_into "$label" "$run" error=not_landed_$st; return 1; }
	landed=$(dt "$t0" "$t1")
	# A warm read through the mount of what landed (DIR's files in the
	# page cache, as the plain mount's warm tar has its volumes): not
	# counted in the time to finish.
	settle "$dir"
	tw=$(now)
	warm_b=$(tar -C "$mnt" -cf - . | wc -c)
	warm=$(dt "$tw" "$(now)")
	tf=$(now)
	"$B/bin/ferry" finish -q "$mnt" >>"$MW/hyd.err" 2>&1 ||
		{ emit ferry_into "$label" "$run" error=finish_failed landed_s="$landed"; return 1; }
	t2=$(now)
	full=$(python3 -c "print('%.3f' % ($landed + $(dt "$tf" "$t2")))")
	MNT_ACTIVE=
	for n in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	disk=$(du -s --block-size=1 "$dir" "$cache" | awk '{s += $1} END {printf "%.0f\n", s}')
	tree_alloc=$(du -s --block-size=1 "$TREE" | awk '{print $1}')
	if $TREECMP --content "$TREE" "$mnt" >"$MW/treecmp.out" 2>&1; then strict=true; else strict=false; fi
	verdict=$($LIB compare "$MW/src/tree.manifest.json" "$mnt")
	# both cold: settle would read the source tree back into memory
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now)
	tar_b=$(tar -C "$mnt" -cf - . | wc -c)
	tar_s=$(dt "$t0" "$(now)")
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now)
	src_b=$(tar -C "$TREE" -cf - . | wc -c)
	src_s=$(dt "$t0" "$(now)")
	umount "$mnt" 2>/dev/null || umount -l "$mnt"
	emit ferry_into "$label" "$run" full_s="$full" landed_s="$landed" \
		wire_bytes="$(($(wire) - w0))" tree_bytes="$TREE_BYTES" disk_bytes="$disk" \
		tree_alloc_bytes="$tree_alloc" tar_s="$tar_s" tar_bytes="$tar_b" \
		src_tar_s="$src_s" src_tar_bytes="$src_b" warm_s="$warm" warm_tar_bytes="$warm_b" \
		verdict="$verdict" strict_ok="$strict"
	log "ferry mount --into@$label#$run landed=${landed}s finished=${full}s warm tar of the mount=${warm}s disk=$disk (tree $tree_alloc) tar=${tar_s}s (source ${src_s}s) strict=$strict"
}

# sync_run LABEL RUN NS
sync_run() {
	local label=$1 run=$2 ns=$3 cache dest w0 t0 t1 rc wb strict verdict
	fresh_dir cache sync-cache
	fresh_dir dest sync
	settle
	w0=$(wire)
	t0=$(now)
	$ns /usr/bin/time -f %M -o "$MW/sync.rss" "$B/bin/ferry" sync -q --cache-dir "$cache" "$URL" "$dest" >"$MW/sync.log" 2>&1
	rc=$?
	t1=$(now)
	wb=$(($(wire) - w0))
	[ "$label" = medium-loopback ] && wb=$("$B/bin/ferry" status "$cache" --json |
		python3 -c "import json,sys; print(json.load(sys.stdin).get('wire_bytes') or 'NA')")
	if $TREECMP --content "$TREE" "$dest" >"$MW/treecmp.out" 2>&1; then strict=true; else strict=false; fi
	verdict=$($LIB compare "$MW/src/tree.manifest.json" "$dest")
	emit ferry_sync "$label" "$run" rc=$rc full_s="$(dt "$t0" "$t1")" wire_bytes="$wb" \
		tree_bytes="$TREE_BYTES" peak_rss_kb="$(tail -n1 "$MW/sync.rss" | tr -dc 0-9)" \
		verdict="$verdict" strict_ok="$strict"
	log "ferry sync@$label#$run rc=$rc full=$(dt "$t0" "$t1")s wire=$wb strict=$strict"
}

rsync_local() {
	local run=$1 dest t0 t1 t2
	fresh_dir dest rsync
	settle
	t0=$(now)
	rsync -aHX "$TREE/" "$dest/"
	t1=$(now)
	sync
	t2=$(now)
	emit rsync_local medium-loopback "$run" full_s="$(dt "$t0" "$t1")" \
		synced_s="$(dt "$t0" "$t2")" tree_bytes="$TREE_BYTES" \
		verdict="$($LIB compare "$MW/src/tree.manifest.json" "$dest")"
	log "rsync -aHX local copy #$run: $(dt "$t0" "$t1")s (with sync $(dt "$t0" "$t2")s)"
}

# The last run's copies go first, long before anything is created here.
rm -rf "$MW/dst"
sync
if step peers; then peers; else tree_vars; fi
mkdir -p "$MW/dst"
"$LINK" up "$RATE" >&2 || exit 1
start_replicator
for run in $(seq 1 "$RUNS"); do
	step mount && mount_complete "medium-$RATE" "$run" "$NSD"
	step into && into_run "medium-$RATE" "$run" "$NSD"
	step sync && sync_run "medium-$RATE" "$run" "$NSD"
	if step local; then
		rsync_local "$run"
		mount_complete medium-loopback "$run" "$NSL"
		sync_run medium-loopback "$run" "$NSL"
	fi
done
kill "$REPL_PID" 2>/dev/null
wait "$REPL_PID" 2>/dev/null
REPL_PID=
"$LINK" down >&2
rm -rf "$MW/dst"
