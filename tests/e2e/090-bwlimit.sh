#!/usr/bin/env bash
# 090: --bwlimit keeps the hydrator's average wire rate within 10% above the
# cap over a transfer of several seconds (bytes measured by the replicator).
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
mk_bulk_tree "$T/src" 24
port=$(free_port)
start_repl "$port" "w=$T/src"
cap=$((3 * 1024 * 1024)) # 3M in rsync's units
t0=$(date +%s.%N)
mount_hyd "http://127.0.0.1:$port/v1/w" "$T/mnt" --bwlimit 3M
sleep 6
bytes=$(repl_stat "$port" w chunk_bytes_served)
t1=$(date +%s.%N)
python3 - "$bytes" "$t0" "$t1" "$cap" <<'PY' || die "wire rate above the cap"
import sys
b, t0, t1, cap = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rate = b / (t1 - t0)
print("# %d bytes in %.2f s: %.0f B/s, cap %d B/s (%.2fx)" % (b, t1 - t0, rate, cap, rate / cap))
assert b > cap * 2, "too little moved to judge (%d bytes)" % b
assert rate <= cap * 1.10, "rate %.0f > 1.1 x cap" % rate
PY
ok "average wire rate within 10% of --bwlimit"
umount_hyd "$T/mnt"
