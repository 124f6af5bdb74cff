#!/usr/bin/env bash
# bench/follow_scale.sh BUILD_DIR [ENTRIES...] — how a mount's in-place
# switch grows with the tree. For each size (default 100000 1000000): a
# tree of empty files (1,000 a directory, bench/micro_gen.py), the
# replicator on loopback, a mount with --poll 1 --no-backfill; then 1% of
# the files get a byte (a changed file: a new inode number), SIGHUP, and
# the mount's "switched generation" line gives install_ms (HEAD, the delta,
# applying and checking it) and ms (opening the new catalog, comparing it
# with the served one, the switch and the kernel invalidations). Also the
# rescan's time, the delta's size against the whole catalog's, and an
# `ls -lR` of the mount before and after the switch, kernel caches dropped
# first (lookups after a switch cost what they cost before). Prints one
# line per size.
# Root (FUSE); the trees go to $WORK (default build/bench/work/follow).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/follow_scale.sh BUILD_DIR [ENTRIES...]}" && pwd)
shift
SIZES=${*:-100000 1000000}
WORK=${WORK:-$ROOT/build/bench/work/follow}
PORT=${PORT:-7091}
now() { date +%s.%N; }
dt() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
REPL_PID=
MNT=
cleanup() {
	[ -n "$MNT" ] && { fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; }
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT

for n in $SIZES; do
	W=$WORK/$n
	rm -rf "$W"
	mkdir -p "$W"
	dirs=$((n / 1000))
	python3 "$ROOT/bench/micro_gen.py" tree "$W/src" "$dirs" 1000 0 >/dev/null
	"$B/bin/ferry-replicator" -l 127.0.0.1:$PORT -s "$W/state" t="$W/src" >"$W/repl.log" 2>&1 &
	REPL_PID=$!
	for i in $(seq 1 3000); do grep -q ' ready' "$W/repl.log" && break; sleep 0.1; done
	URL=http://127.0.0.1:$PORT/v1/t
	mkdir -p "$W/mnt"
	"$B/bin/ferry-hydrator" -c "$W/cache" --poll 1 --no-backfill "$URL" "$W/mnt" || exit 1
	MNT=$W/mnt
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now)
	ls -lR "$W/mnt" >/dev/null
	ls1=$(dt "$t0" "$(now)")
	# 1% of the files, spread over every directory
	python3 - "$W/src" "$dirs" <<'PY'
import os, sys
root, dirs = sys.argv[1], int(sys.argv[2])
for d in range(dirs):
    for i in range(0, 1000, 100):
        with open(os.path.join(root, "d%04d" % d, "f%04d" % i), "ab") as f:
            f.write(b"x")
PY
	t0=$(now)
	kill -HUP "$REPL_PID"
	for i in $(seq 1 6000); do grep -q ' ready ns=t generation=2 ' "$W/repl.log" && break; sleep 0.05; done
	t1=$(now)
	for i in $(seq 1 6000); do grep -q 'switched generation from=1 to=2' "$W/cache/hydrator.log" && break; sleep 0.05; done
	t2=$(now)
	line=$(grep 'switched generation from=1 to=2' "$W/cache/hydrator.log")
	full=$(stat -c %s "$W/state/t/catalog/2.db.zst")
	delta=$(curl -sf "$URL/delta/1/2" | wc -c)
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t3=$(now)
	ls -lR "$W/mnt" >/dev/null
	ls2=$(dt "$t3" "$(now)")
	echo "entries=$n rescan_s=$(dt "$t0" "$t1") publish_to_switched_s=$(dt "$t1" "$t2") delta_bytes=$delta catalog_bytes=$full ls_lR_before_s=$ls1 ls_lR_after_s=$ls2 :: ${line#*switched }"
	fusermount3 -u "$W/mnt"
	MNT=
	kill "$REPL_PID"
	wait "$REPL_PID" 2>/dev/null
	REPL_PID=
	rm -rf "$W"
done
