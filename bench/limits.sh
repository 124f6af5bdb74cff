#!/usr/bin/env bash
# bench/limits.sh — measure the machine limits that bench/micro.sh
# (`make bench-micro`) holds ferry against, on this machine, with nothing
# of ferry in the way. bench/LIMITS.md keeps what it printed, with the
# date and the machine; micro.sh's *_LIMIT values come from there.
#
#   sudo bench/limits.sh        # ~1 minute on the 2-core VM
#
# Needs root (a FUSE mount, drop_caches), cc, libssl-dev and libfuse3-dev
# (make deps installs them), python3, about 4.5 GB free under build/bench.
# What it measures (LIMITS_REPS runs each, default 5; the limit is the
# best run, the fastest or the shortest: on a shared VM others' work only
# ever slows a probe down, so the best run is the closest to what the
# machine can do; the median is shown next to it):
#   PIPE_LIMIT      MB/s of content-defined chunking (avg 64 KiB) plus
#                   SHA-256 of every chunk on 2 threads, random bytes in
#                   RAM: the scanner's ceiling before any compression or
#                   I/O (limits_probe pipe; 1 thread shown too)
#   STAT_LIMIT      us per cold stat, RD_DIR_LIMIT us per cold readdir of a
#                   100-entry directory, RD_ENTRY_LIMIT us per entry of it:
#                   micro_run.py stat / readdir (micro.sh's own loops) on a
#                   FUSE file system that answers from arithmetic
#                   (limits_probe fuse), the 200 x 100 tree of micro.sh
#   DISK_LIMIT      MB/s of a 4 GiB sequential write in 1 MiB blocks,
#                   fsync included (dd conv=fsync), under build/bench
# Prints a table and the line for micro.sh.
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
W=$top/build/bench/limits-work
REPS=${LIMITS_REPS:-5}
PROBE=$W/limits_probe
MNT=$W/mnt

[ "$(id -u)" = 0 ] || { echo "bench/limits.sh: needs root (FUSE, drop_caches)" >&2; exit 2; }
FPID=
cleanup() {
	mountpoint -q "$MNT" 2>/dev/null && { fusermount3 -u "$MNT" || umount -l "$MNT"; }
	[ -n "$FPID" ] && wait "$FPID" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
rm -rf "$W"
mkdir -p "$W" "$MNT"
cc -std=gnu11 -O3 -march=native -Wall -Wextra -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 $(pkg-config --cflags fuse3) \
	-o "$PROBE" "$here/limits_probe.c" -lcrypto $(pkg-config --libs fuse3) -pthread
load0=$(cut -d' ' -f1 /proc/loadavg)
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
best() { # max|min VALUES...
	local how=$1
	shift
	printf '%s\n' "$@" | sort -g | if [ "$how" = max ]; then tail -n 1; else head -n 1; fi
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }

# --- CDC + SHA-256, 1 and 2 threads (2 GiB per run)
p1="" p2="" avg=""
for ((i = 0; i < REPS; i++)); do
	r=$("$PROBE" pipe 1 256 8)
	p1+=" $(field mbps <<<"$r")"
	r=$("$PROBE" pipe 2 256 4)
	p2+=" $(field mbps <<<"$r")"
	avg=$(field avg_kib <<<"$r")
done

# --- cold stat and readdir through a FUSE file system that does nothing
python3 "$here/micro_gen.py" tree "$W/meta" 200 100 0 >/dev/null
fuse_up() {
	"$PROBE" fuse "$MNT" 200 100 &
	FPID=$!
	for _ in $(seq 100); do mountpoint -q "$MNT" && return 0; sleep 0.05; done
	echo "bench/limits.sh: the probe did not mount" >&2
	exit 1
}
fuse_down() {
	fusermount3 -u "$MNT"
	wait "$FPID"
	FPID=
}
st="" rd="" re=""
for ((i = 0; i < REPS; i++)); do
	fuse_up
	r=$(python3 "$here/micro_run.py" stat "$W/meta" "$MNT")
	st+=" ${r%% *}"
	fuse_down
	fuse_up
	read -r d e _ _ <<<"$(python3 "$here/micro_run.py" readdir "$W/meta" "$MNT")"
	rd+=" $d" re+=" $e"
	fuse_down
done

# --- sequential write, fsync included
dk=""
for ((i = 0; i < REPS; i++)); do
	sync
	echo 3 >/proc/sys/vm/drop_caches
	dk+=" $(dd if=/dev/zero of="$W/disk.bin" bs=1M count=4096 conv=fsync 2>&1 | tail -n 1 |
		awk '{ for (i = 2; i <= NF; i++) if ($i == "s,") s = $(i - 1); printf "%.0f", $1 / s / 1e6 }')"
	rm -f "$W/disk.bin"
done

echo "bench/limits.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), $REPS runs each," \
	"1-minute load $load0 before, $(cut -d' ' -f1 /proc/loadavg) after (this adds about 1-2; more means others were running)"
echo "| limit | best | median | runs |"
echo "|---|---|---|---|"
echo "| CDC (avg 64 KiB, mean chunk $avg KiB) + SHA-256, 1 thread, MB/s | $(best max $p1) | $(median $p1) |$p1 |"
echo "| CDC + SHA-256, 2 threads, MB/s | $(best max $p2) | $(median $p2) |$p2 |"
echo "| cold stat through a do-nothing FUSE fs, us | $(best min $st) | $(median $st) |$st |"
echo "| cold readdir of a 100-entry dir, us per dir | $(best min $rd) | $(median $rd) |$rd |"
echo "| the same, us per entry | $(best min $re) | $(median $re) |$re |"
echo "| sequential write 4 GiB, 1 MiB blocks, with fsync, MB/s | $(best max $dk) | $(median $dk) |$dk |"
echo
echo "PIPE_LIMIT=$(best max $p2) STAT_LIMIT=$(best min $st) RD_DIR_LIMIT=$(best min $rd)" \
	"RD_ENTRY_LIMIT=$(best min $re) DISK_LIMIT=$(best max $dk)"
