#!/usr/bin/env bash
# bench/micro.sh BUILD_DIR — ferry's micro-benchmark: the hot paths measured
# against this machine's limits (bench/LIMITS.md, measured by
# bench/limits.sh).
#
#   sudo bench/micro.sh build/release        # `make bench-micro`
#
# Needs root (FUSE mounts and a tmpfs; exits 2 otherwise), fusermount3,
# python3, curl, about 10 GB free under build/bench and 8 GB of memory
# for the 5M-entry tmpfs; openssl makes the random input fast. Takes 8-12
# minutes on the 2-core VM (MICRO_5M=0 skips the 5M-entry rows).
# Prints a table (metric | measured | limit/target | ratio | PASS/MISS) and
# writes build/bench/micro.json (one object per metric). Each timing is the
# median of MICRO_REPS (default 3) runs. The VM is shared: the JSON keeps
# the 1-minute load average of each measurement, so contended runs show.
# Everything lives in build/bench/micro-work and is removed at the end,
# also on error or ctrl-C: mounts unmounted, daemons stopped (a failed
# run keeps its logs in build/bench/micro-logs).
set -euo pipefail
export LC_ALL=C

B=${1:?usage: bench/micro.sh BUILD_DIR (e.g. build/release)}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
[ -d "$B/bin" ] || { echo "bench/micro.sh: no $B/bin (build it first)" >&2; exit 2; }
BIN=$(cd "$B/bin" && pwd)
REPL=$BIN/ferry-replicator HYD=$BIN/ferry-hydrator FERRY=$BIN/ferry
OUT=$top/build/bench
W=$OUT/micro-work
RES=$W/results.tsv
REPS=${MICRO_REPS:-3}

# Limits and targets (MB = 10^6 bytes). The limits are bench/LIMITS.md's
# (bench/limits.sh, 2026-12-04). PIPE: content-defined chunking (64 KiB)
# + SHA-256 on 2 threads, the scanner's ceiling without compression; the
# issue's target (1750) was set at 70% of the limit measured then (2.5
# GB/s). STAT/RD_*: this script's own stat and readdir loops on a FUSE
# file system that answers from arithmetic, the same 200 x 100 tree (cold
# stat; cold opendir+readdir+closedir of a 100-entry dir; per entry of
# it): references, not targets.
PIPE_LIMIT=2090 SCAN_TARGET=1750
WARM_TARGET=1200 HOT_TARGET=5000
STAT_LIMIT=12.6 RD_DIR_LIMIT=70 RD_ENTRY_LIMIT=0.70
# Small files (issue 13): a warm open+read+close of a 2 KiB file within
# four FUSE round trips (104 us: four of the 26 us cold stat measured when
# the target was set), a hot one (kernel caches) near a local file's.
SMALL_WARM_TARGET=104 SMALL_HOT_TARGET=20
# The store (issue 13): frames durable and indexed, MB/s. DISK: LIMITS.md
# sequential buffered write (4 GiB, 1 MiB blocks) including fsync. The target: 4x what a 1 Gbit/s
# link brings (125 MB/s of frames), so the store never holds backfill back
# there, and at least 16 frames per fdatasync.
DISK_LIMIT=2580 STORE_TARGET=500 STORE_GROUP_TARGET=16
MOUNT_TARGET=3 FIND_TARGET=10 RSS_TARGET=300 RSS_ENTRY_TARGET=300
START_FIND_TARGET=20 FIRST_BYTE_TARGET=3

die() { echo "bench/micro.sh: $*" >&2; exit 1; }
calc() { awk "BEGIN { printf \"%.6g\", $* }"; }
py() { local s=$1; shift; python3 "$here/$s" "$@"; }

if [ "$(id -u)" -ne 0 ]; then
	echo "bench/micro.sh: needs root (FUSE mounts and a tmpfs)" >&2
	exit 2
fi
for p in "$REPL" "$HYD" "$FERRY"; do
	[ -x "$p" ] || { echo "bench/micro.sh: $p not built" >&2; exit 2; }
done
for c in fusermount3 python3 curl; do
	command -v $c >/dev/null || { echo "bench/micro.sh: $c missing" >&2; exit 2; }
done
[ -c /dev/fuse ] || { echo "bench/micro.sh: no /dev/fuse" >&2; exit 2; }
if awk -v w="$W/" 'index($2, w) == 1 { f = 1 } END { exit !f }' /proc/mounts; then
	echo "bench/micro.sh: $W has mounts (another run?)" >&2
	exit 2
fi

# Cleanup: FUSE mounts, then our daemons (pid files under $W whose command
# line names $W, so a recycled pid is never hit), then the tmpfs.
mounts_under() { # FSTYPE-REGEX
	awk -v w="$W/" -v t="$1" 'index($2, w) == 1 && $3 ~ t { print $2 }' /proc/mounts | sort -r
}
ours() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qF "$W/"; }
stop_pid() { # PID: SIGTERM, then SIGKILL after 10 s
	local i
	ours "$1" || return 0
	kill -TERM "$1" 2>/dev/null || return 0
	for i in $(seq 100); do ours "$1" || return 0; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null || true
}
cleanup() {
	local rc=$? m f
	set +e
	trap - EXIT INT TERM
	if [ $rc -ne 0 ] && [ -d "$W" ]; then # keep the logs of a failed run
		rm -rf "$OUT/micro-logs"
		mkdir -p "$OUT/micro-logs"
		for f in "$W"/*.log "$W"/*.out "$W"/cache-*/hydrator.log; do
			[ -f "$f" ] && cp "$f" "$OUT/micro-logs/$(basename "$(dirname "$f")")-${f##*/}"
		done
		echo "bench/micro.sh: failed; logs kept in $OUT/micro-logs" >&2
	fi
	for m in $(mounts_under '^fuse'); do fusermount3 -u "$m" || umount -l "$m"; done
	for f in "$W"/*.pid "$W"/cache-*/hydrator.pid; do
		[ -f "$f" ] && stop_pid "$(cat "$f")"
	done
	for m in $(mounts_under .); do umount "$m" || umount -l "$m"; done
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "$W" "$OUT/micro-logs"
mkdir -p "$W"
: >"$RES"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# result NAME UNIT LIMIT OP TARGET "SAMPLES" [NOTE] — one row of the table.
result() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" \
		"$(cut -d' ' -f1 /proc/loadavg)" "${7:-}" >>"$RES"
}

# mount_hyd CACHE NS MNT — mount with the defaults; prints the seconds from
# the start of ferry-hydrator to its return (it returns once mounted).
mount_hyd() {
	local t0 t1 i
	mkdir -p "$3"
	t0=$EPOCHREALTIME
	"$HYD" -c "$1" "http://127.0.0.1:$PORT/v1/$2" "$3" >>"$W/hydrator.out" 2>&1 ||
		die "ferry-hydrator could not mount $2 (see $W/hydrator.out)"
	t1=$EPOCHREALTIME
	mountpoint -q "$3" || die "$3 is not mounted after ferry-hydrator returned"
	# The daemon writes hydrator.pid before the command returns.
	for i in $(seq 100); do [ -s "$1/hydrator.pid" ] && break; sleep 0.05; done
	[ -s "$1/hydrator.pid" ] || die "no $1/hydrator.pid 5 s after mounting"
	calc "$t1 - $t0"
}
umount_hyd() { # CACHE MNT — unmount and wait until the daemon is gone
	local pid i
	pid=$(cat "$1/hydrator.pid")
	fusermount3 -u "$2"
	for i in $(seq 100); do ours "$pid" || return 0; sleep 0.1; done
	die "hydrator $pid still running 10 s after unmounting $2"
}
dd_mbps() { # FILE — MB/s of one `dd bs=1M` pass to /dev/null
	dd if="$1" of=/dev/null bs=1M 2>&1 | tail -n 1 |
		awk '{ for (i = 2; i <= NF; i++) if ($i == "s,") s = $(i - 1)
		       printf "%.1f", $1 / s / 1e6 }'
}
in_page_cache() { find "$@" -type f -exec cat {} + >/dev/null; }
wait_complete() { # CACHE — poll `ferry status` (0.5 s) until complete
	local st i stalled=0
	for ((i = 0; ; i++)); do
		st=$("$FERRY" status "$1" --json || true)
		grep -Eq '"state": *"complete"' <<<"$st" && return 0
		if grep -Eq '"state": *"stalled"' <<<"$st"; then stalled=$((stalled + 1)); else stalled=0; fi
		[ $stalled -lt 60 ] || die "backfill stalled for 30 s: $st"
		[ $i -lt 1200 ] || die "backfill not complete after 600 s: $st"
		sleep 0.5
	done
}
repl_start() { # LOG NREADY NAME=DIR... — serve in the background
	local log=$1 n=$2
	shift 2
	py micro_run.py repl "$W/$log.log" "$W/$log.pid" "$n" -- \
		"$REPL" -l "127.0.0.1:$PORT" -s "$W/state-$log" "$@"
}
repl_stop() { stop_pid "$(cat "$W/$1.pid")"; rm -f "$W/$1.pid"; }

echo "ferry micro-benchmark: $(git -C "$top" describe --always --dirty 2>/dev/null || echo '?')," \
	"$BIN, $REPS runs each, load $(cut -d' ' -f1-3 /proc/loadavg)"

# --- inputs --------------------------------------------------------------
echo "# generating inputs"
mkdir -p "$W/rand" "$W/fp16" "$W/big"
for i in 0 1 2 3; do
	py micro_gen.py rand "$W/rand/r$i.bin" 256 "rand$i"
	py micro_gen.py fp16 "$W/fp16/w$i.bin" 256 "fp16$i"
done
py micro_gen.py rand "$W/big/rand.bin" 1024 bigrand
py micro_gen.py fp16 "$W/big/fp16.bin" 1024 bigfp16
py micro_gen.py tree "$W/meta" 200 100 0 >/dev/null
py micro_gen.py small "$W/small2k" 50 200 2048
py gen_tree.py "$W/small" --scale small --seed 1 >/dev/null

# --- scan: walk + read + FastCDC + SHA-256 + catalog, input in page cache.
# Wall time from the replicator's start to its "ready" line (the scan is
# published: catalog, its .zst, source index, HEAD), fresh state each run.
# The read-cut-hash pipeline: with --hash-before-publish the walk hashes
# every file before it is ready, so scan-to-ready is that pipeline's time
# (by default the walk reads nothing and hashing runs after "ready").
scan_bench() { # LABEL DIR
	local i r wall files dirs mb secs mbps="" fps=""
	echo "# scan $1"
	for ((i = 0; i < REPS; i++)); do
		rm -rf "$W/state-scan"
		in_page_cache "$2"
		r=$(repl_start scan 1 --hash-before-publish "s=$2")
		repl_stop scan
		read -r wall files dirs mb secs <<<"$r"
		mbps+=" $(calc "$mb / $wall")"
		fps+=" $(calc "$files / $wall")"
	done
	result "scan $1 bytes" MB/s $PIPE_LIMIT ">=" $SCAN_TARGET "$mbps" \
		"$files files, $dirs dirs, $mb MB (last run: replicator says $secs s); limit: CDC+SHA-256 on 2 threads"
	result "scan $1 files" files/s "" "" "" "$fps"
}
scan_bench "rand 4x256MiB" "$W/rand"
scan_bench "fp16 4x256MiB" "$W/fp16"
[ -d "$W/small" ] && scan_bench "small dataset" "$W/small"

# --- reads through the mount. Hydrate both 1 GiB files by backfill, then
# per run: a fresh mount (kernel FUSE cache empty, store volumes in the page
# cache) and `dd bs=1M` = warm (decode + verify + FUSE copy); the same file
# again = hot (keep_cache: served from the kernel's page cache).
echo "# reads: hydrating 2 GiB"
repl_start serve 3 "big=$W/big" "meta=$W/meta" "small2k=$W/small2k" >/dev/null
mount_hyd "$W/cache-big" big "$W/mnt-big" >/dev/null
t0=$EPOCHREALTIME
wait_complete "$W/cache-big"
result "backfill 2 GiB rand+fp16" MB/s "" "" "" "$(calc "2147483648 / 1e6 / ($EPOCHREALTIME - $t0)")" \
	"mount to status complete, 1 run (0.5 s polling)"
umount_hyd "$W/cache-big" "$W/mnt-big"
declare -A warm hot
for ((i = 0; i < REPS; i++)); do
	in_page_cache "$W/cache-big/volumes"
	mount_hyd "$W/cache-big" big "$W/mnt-big" >/dev/null
	for f in rand fp16; do
		warm[$f]+=" $(dd_mbps "$W/mnt-big/$f.bin")"
		hot[$f]+=" $(dd_mbps "$W/mnt-big/$f.bin")"
	done
	umount_hyd "$W/cache-big" "$W/mnt-big"
done
for f in rand fp16; do
	result "warm read $f 1GiB" MB/s "" ">=" $WARM_TARGET "${warm[$f]}" "store in page cache, fresh mount"
	result "hot read $f 1GiB" MB/s "" ">=" $HOT_TARGET "${hot[$f]}" "second dd on the same mount"
done

# --- cold metadata latency: 200 dirs x 100 empty files, a fresh mount per
# run. stat every file once (each a cold LOOKUP, plus one LOOKUP per dir);
# then on another fresh mount opendir+readdir+closedir every dir. Python's
# own overhead is included: nothing is subtracted.
echo "# cold stat / readdir"
stat_us="" rd_dir="" rd_ent=""
for ((i = 0; i < REPS; i++)); do
	mount_hyd "$W/cache-meta" meta "$W/mnt-meta" >/dev/null
	r=$(py micro_run.py stat "$W/meta" "$W/mnt-meta")
	stat_us+=" ${r%% *}"
	umount_hyd "$W/cache-meta" "$W/mnt-meta"
	mount_hyd "$W/cache-meta" meta "$W/mnt-meta" >/dev/null
	r=$(py micro_run.py readdir "$W/meta" "$W/mnt-meta")
	read -r d e nd ne <<<"$r"
	rd_dir+=" $d" rd_ent+=" $e"
	umount_hyd "$W/cache-meta" "$W/mnt-meta"
done
result "cold stat (20k files)" us $STAT_LIMIT "" "" "$stat_us" "python os.stat per file; limit: the same loop on a do-nothing FUSE fs"
result "cold readdir per dir" us $RD_DIR_LIMIT "" "" "$rd_dir" \
	"$nd dirs of 100; limit: the same dirs on a do-nothing FUSE fs"
result "cold readdir per entry" us $RD_ENTRY_LIMIT "" "" "$rd_ent" \
	"$ne entries, whole time / entries; limit: as the row above"

# --- small files: 50 dirs x 200 files of 2 KiB, each its own bytes. Hydrate
# by backfill, then per run a fresh mount (store volumes in the page cache):
# open+read+close of every file ("warm": one READ each, no OPEN and no
# RELEASE where the kernel opens by itself), then again on the same mount
# ("hot": the kernel's page and attribute caches).
echo "# small files: hydrating 10,000 x 2 KiB"
mount_hyd "$W/cache-s2k" small2k "$W/mnt-s2k" >/dev/null
wait_complete "$W/cache-s2k"
umount_hyd "$W/cache-s2k" "$W/mnt-s2k"
sw="" sh=""
for ((i = 0; i < REPS; i++)); do
	in_page_cache "$W/cache-s2k/volumes"
	mount_hyd "$W/cache-s2k" small2k "$W/mnt-s2k" >/dev/null
	r=$(py micro_run.py readall "$W/small2k" "$W/mnt-s2k") || die "small-file read failed"
	sw+=" ${r%% *}"
	r=$(py micro_run.py readall "$W/small2k" "$W/mnt-s2k") || die "small-file read failed"
	sh+=" ${r%% *}"
	umount_hyd "$W/cache-s2k" "$W/mnt-s2k"
done
result "warm read 2 KiB file" us $STAT_LIMIT "<=" $SMALL_WARM_TARGET "$sw" \
	"open+read+close per file, fresh mount of a complete cache; limit: 1 FUSE round trip"
result "hot read 2 KiB file" us "" "<=" $SMALL_HOT_TARGET "$sh" "the same files again on the same mount"
repl_stop serve

# --- the chunk store: 256 MiB of 64 KiB raw frames into a fresh store
# (tests/bench/store_put.c): puts that wait for their row from 1 and 12
# threads (12: the hydrator's landing threads), and async puts from 12
# threads (what the fetcher does: a group holds what arrives during the
# previous sync).
STORE_PUT=$B/bench/store_put
if [ -x "$STORE_PUT" ]; then
	echo "# chunk store: group commit"
	w1="" w12="" a12="" pps=""
	for ((i = 0; i < REPS; i++)); do
		for mode in w1 w12 a12; do
			rm -rf "$W/store"
			sync
			case $mode in
			w1) r=$("$STORE_PUT" "$W/store" 1 256) ;;
			w12) r=$("$STORE_PUT" "$W/store" 12 256) ;;
			a12) r=$("$STORE_PUT" --async "$W/store" 12 256) ;;
			esac || die "store_put failed"
			v=$(sed -n 's/.* mbps=\([0-9.]*\).*/\1/p' <<<"$r")
			printf -v "$mode" '%s %s' "${!mode}" "$v"
			if [ $mode = a12 ]; then
				pps+=" $(sed -n 's/.* puts_per_sync=\([0-9.]*\).*/\1/p' <<<"$r")"
			fi
		done
	done
	rm -rf "$W/store"
	result "store put, 1 thread, waiting" MB/s $DISK_LIMIT "" "" "$w1" \
		"one fdatasync and one transaction per 64 KiB frame"
	result "store put, 12 threads, waiting" MB/s $DISK_LIMIT "" "" "$w12" \
		"a group is at most one frame per thread"
	result "store group commit, async puts" MB/s $DISK_LIMIT ">=" $STORE_TARGET "$a12" \
		"12 threads; durable and indexed; the fetcher's path"
	result "store group commit: frames per fdatasync" x "" ">=" $STORE_GROUP_TARGET "$pps" \
		"async puts, same runs"
else
	echo "# $STORE_PUT missing (make tests builds it): no store rows"
fi

# --- metadata-only trees on a tmpfs (creation not measured), 1M and 5M
# entries: catalog build (one scan), catalog bytes shipped, then per run on
# a fresh cache: mount time (catalog download + check + FUSE mount),
# `find | wc -l` (count checked), the hydrator daemon's peak RSS (VmHWM)
# after the find; start -> find complete adds the walk; the replicator's
# peak RSS at the end.
# entries_rows LABEL NDIRS NFILES RUNS RSS_LIMITS(0|1)
entries_rows() {
	local L=$1 nd=$2 nf=$3 runs=$4 lim=$5 n r gen zst got db i m t0 f c hwm
	local mnt_s="" find_s="" rss="" s2f="" per="" x rhwm
	echo "# $L-entry tree"
	mkdir -p "$W/tmpfs"
	mount -t tmpfs -o "size=8G,nr_inodes=$((nd * (nf + 1) * 6 / 5 + 1000)),mode=755" ferry-micro "$W/tmpfs"
	n=$(py micro_gen.py tree "$W/tmpfs/m" "$nd" "$nf" 10)
	r=$(repl_start "m$L" 1 "m=$W/tmpfs/m")
	result "$L: catalog build" s "" "" "" "${r%% *}" "$n entries, 1 run, scan to ready"
	gen=$(cat "$W/state-m$L/m/HEAD")
	zst=$(stat -c %s "$W/state-m$L/m/catalog/$gen.db.zst")
	got=$(curl -sf -o /dev/null -w '%{size_download}' "http://127.0.0.1:$PORT/v1/m/catalog/$gen")
	[ "$got" = "$zst" ] || die "GET catalog/$gen sent $got bytes, the .zst has $zst"
	db=$(stat -c %s "$W/state-m$L/m/catalog/$gen.db")
	result "$L: catalog shipped" MB "" "" "" "$(calc "$zst / 1e6")" "GEN.db.zst = GET catalog; the .db is $(calc "$db / 1e6") MB"
	result "$L: catalog shipped per entry" B/entry "" "" "" "$(calc "$zst / $n")"
	for ((i = 0; i < runs; i++)); do
		rm -rf "$W/cache-m$L"
		m=$(mount_hyd "$W/cache-m$L" m "$W/mnt-m$L")
		mnt_s+=" $m"
		t0=$EPOCHREALTIME
		c=$(find "$W/mnt-m$L" | wc -l)
		f=$(calc "$EPOCHREALTIME - $t0")
		find_s+=" $f"
		s2f+=" $(calc "${r%% *} + $m + $f")"
		[ "$c" -eq $((n + 1)) ] || die "find listed $c entries through the mount, want $((n + 1))"
		hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$(cat "$W/cache-m$L/hydrator.pid")/status")
		rss+=" $(calc "$hwm * 1024 / 1e6")"
		umount_hyd "$W/cache-m$L" "$W/mnt-m$L"
		rm -rf "$W/cache-m$L"
	done
	for x in $rss; do per+=" $(calc "$x * 1e6 / $n")"; done
	if [ "$lim" = 1 ]; then
		result "$L: mount (fresh cache)" s "" "<=" $MOUNT_TARGET "$mnt_s" "ferry-hydrator start to return, defaults"
		result "$L: find | wc -l" s "" "<=" $FIND_TARGET "$find_s" "$((n + 1)) lines, checked"
		result "$L: hydrator peak RSS" MB "" "<=" $RSS_TARGET "$rss" "VmHWM after the find"
		result "$L: hydrator peak RSS per entry" B/entry "" "<=" $RSS_ENTRY_TARGET "$per"
		result "$L: start -> find complete" s "" "<=" $START_FIND_TARGET "$s2f" \
			"walk + mount + find | wc -l, source on tmpfs (warm)"
	else
		result "$L: mount (fresh cache)" s "" "" "" "$mnt_s" "ferry-hydrator start to return, defaults"
		result "$L: find | wc -l" s "" "" "" "$find_s" "$((n + 1)) lines, checked"
		result "$L: hydrator peak RSS" MB "" "" "" "$rss" "VmHWM after the find"
		result "$L: hydrator peak RSS per entry" B/entry "" "<=" $RSS_ENTRY_TARGET "$per"
		result "$L: start -> find complete" s "" "" "" "$s2f" \
			"walk + mount + find | wc -l, source on tmpfs (warm)"
	fi
	rhwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$(cat "$W/m$L.pid")/status")
	result "$L: replicator peak RSS" MB "" "" "" "$(calc "$rhwm * 1024 / 1e6")" \
		"VmHWM after the walk and the finds"
	repl_stop "m$L"
	rm -rf "$W/state-m$L"
	umount "$W/tmpfs"
}
entries_rows 1M 1000 999 "$REPS" 1
# 5M: one run (about 3 minutes); no time target, the row decides whether
# one catalog per namespace still browses in seconds (docs/performance.md).
[ "${MICRO_5M:-1}" = 1 ] && entries_rows 5M 5000 999 1 0

# --- namespace first, the issue's targets: 8 GiB and 0.25 GiB in 2,000
# files (40 big files, 1,960 of 1 KiB) of the same shape. Per run, cold
# (page cache dropped): replicator start until `ls -lR` of a fresh mount is
# done, for both sizes; at 8 GiB then the first byte of the big file last
# in walk order, read while the source is still hashing. Then: a warm
# `find -printf` of the 8 GiB tree plus a GET of its catalog (what browse
# is held against), the restart of the unchanged 8 GiB tree once it is
# hashed (cold, time to serving and the bytes the replicator read, from
# /proc/PID/io), and a 6 GiB sparse file with 64 KiB of data.
echo "# 8 GiB and 0.25 GiB in 2,000 files"
mk_tree() { # DIR MIB_PER_BIG SEED
	local d f
	for d in $(seq -w 0 39); do
		mkdir -p "$1/d$d"
		py micro_gen.py rand "$1/d$d/big.bin" "$2" "$3$d"
		for f in $(seq -w 0 48); do head -c 1024 /dev/urandom >"$1/d$d/s$f"; done
	done
}
mk_tree "$W/g8" 205 g8big
mk_tree "$W/g025" 6 g025big
browse_cold() { # NAME DIR: seconds from replicator start to ls -lR done
	local t0
	rm -rf "$W/state-$1" "$W/cache-$1"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$EPOCHREALTIME
	repl_start "$1" 1 "g=$2" >/dev/null
	mount_hyd "$W/cache-$1" g "$W/mnt-$1" >/dev/null
	ls -lR "$W/mnt-$1" >/dev/null
	calc "$EPOCHREALTIME - $t0"
}
# Five runs each (cheap, and a shared VM's outliers are seconds here); the
# ratios are of the medians.
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 }
	END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
sync
sleep 5 # let the writeback of what came before settle
b8="" b025="" fb8=""
for ((i = 0; i < ${MICRO_NS_REPS:-5}; i++)); do
	x=$(browse_cold g025 "$W/g025")
	b025+=" $x"
	umount_hyd "$W/cache-g025" "$W/mnt-g025"
	repl_stop g025
	y=$(browse_cold g8 "$W/g8")
	b8+=" $y"
	t0=$EPOCHREALTIME
	head -c 1 "$W/mnt-g8/d39/big.bin" >/dev/null
	fb8+=" $(calc "$EPOCHREALTIME - $t0")"
	umount_hyd "$W/cache-g8" "$W/mnt-g8"
	repl_stop g8
done
# What browse is held against: a warm find of the tree and the catalog.
find "$W/g8" -printf '%s %T@ %i\n' | wc -l >/dev/null
t0=$EPOCHREALTIME
nf=$(find "$W/g8" -printf '%s %T@ %i\n' | wc -l)
find_s=$(calc "$EPOCHREALTIME - $t0")
rm -rf "$W/state-g8"
repl_start g8 1 "g=$W/g8" >/dev/null
gen=$(cat "$W/state-g8/g/HEAD")
t0=$EPOCHREALTIME
curl -sf -o /dev/null "http://127.0.0.1:$PORT/v1/g/catalog/$gen" || die "GET catalog/$gen failed"
cat_s=$(calc "$EPOCHREALTIME - $t0")
floor=$(calc "$find_s + $cat_s")
m8=$(median $b8)
m025=$(median $b025)
rs=$(calc "$m8 / $m025")
vs8=$(calc "$m8 / ($floor)")
vs025=$(calc "$m025 / ($floor)")
result "0.25 GiB: start -> browsable" s "" "" "" "$b025" \
	"cold: replicator start to ls -lR of a fresh mount done"
result "8 GiB: start -> browsable" s "" "" "" "$b8" \
	"cold: replicator start to ls -lR of a fresh mount done"
result "8 GiB / 0.25 GiB start -> browsable" x "" "<=" 1.5 "$rs" "medians of the same runs, same shape"
result "8 GiB browsable vs find + catalog" x "" "<=" 2 "$vs8" \
	"warm find -printf of $nf lines $(calc "$find_s * 1000") ms + GET catalog $(calc "$cat_s * 1000") ms"
result "0.25 GiB browsable vs find + catalog" x "" "<=" 2 "$vs025" "the same floor; medians"
result "8 GiB: first byte, last file" s "" "<=" $FIRST_BYTE_TARGET "$fb8" \
	"205 MiB file last in walk order, read right after browse"
# Restart of the unchanged tree once it is hashed: serving the old
# generation at once, reading (almost) nothing.
for i in $(seq 1200); do
	st=$(curl -sf "http://127.0.0.1:$PORT/v1/g/stats" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['hashing']['state'])")
	[ "$st" = done ] && break
	sleep 0.1
done
[ "$st" = done ] || die "the 8 GiB tree was not hashed in 120 s"
repl_stop g8
sync
echo 3 >/proc/sys/vm/drop_caches
r=$(repl_start g8 1 "g=$W/g8")
rb=$(awk '/^read_bytes:/ { print $2 }' "/proc/$(cat "$W/g8.pid")/io")
g2=$(cat "$W/state-g8/g/HEAD")
[ "$g2" = "$gen" ] || die "the restart published generation $g2, not $gen"
tree=$(du -sb "$W/g8" | cut -f1)
result "8 GiB: restart -> serving" s "" "<=" 1 "${r%% *}" "cold, unchanged tree, generation $gen kept"
result "8 GiB: restart reads" % "" "<=" 1 "$(calc "$rb * 100 / $tree")" \
	"/proc/PID/io read_bytes at ready: $(calc "$rb / 1e6") MB of $(calc "$tree / 1e6") MB"
repl_stop g8
rm -rf "$W/g8" "$W/g025"
# A 6 GiB sparse file with 64 KiB of data: with --hash-before-publish
# "ready" is the whole scan, hashing included.
mkdir -p "$W/sparse"
truncate -s 6G "$W/sparse/holes.img"
head -c 65536 /dev/urandom | dd of="$W/sparse/holes.img" bs=64K seek=40000 conv=notrunc status=none
sync
echo 3 >/proc/sys/vm/drop_caches
rm -rf "$W/state-sp"
r=$(repl_start sp 1 --hash-before-publish "s=$W/sparse")
result "6 GiB sparse: scan" s "" "<=" 1 "${r%% *}" \
	"64 KiB of data; walk, read and hash (--hash-before-publish)"
repl_stop sp
rm -rf "$W/sparse"

echo
py micro_report.py "$RES" "$OUT/micro.json"
echo "wrote $OUT/micro.json; load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
