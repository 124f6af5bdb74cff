#!/usr/bin/env bash
# 060: the replicator stops in the middle of a backfill and starts again.
# During the outage the mount stays up, status says stalled with the error,
# and a read of data not yet stored fails with EIO within the configured
# time; afterwards the hydrator recovers by itself, backfill completes and
# the same read succeeds.
. "$(dirname "$0")/lib/common.sh"
need_fuse
# eio_seconds PATH — read PATH whole; it must fail with EIO. Prints the
# seconds it took (monotonic), or what went wrong.
eio_seconds() {
	timeout 60 python3 - "$1" 2>&1 <<'PY'
import errno, sys, time
t = time.monotonic()
try:
    with open(sys.argv[1], "rb") as f:
        while f.read(1 << 20):
            pass
except OSError as e:
    dt = time.monotonic() - t
    if e.errno != errno.EIO:
        sys.exit("expected EIO, got %r after %.2f s" % (e, dt))
    print("%.2f" % dt)
    sys.exit(0)
sys.exit("the read succeeded")
PY
}
[ -x "$FERRY" ] || die "ferry not built"
mk_bulk_tree "$T/src" 40
port=$(free_port)
start_repl "$port" "r=$T/src"
URL="http://127.0.0.1:$port/v1/r"
M="$T/mnt"
mount_hyd "$URL" "$M" --jobs 4 --bwlimit 8M --timeout 3
CAT=$(manifests_db r "$T/manifests.db")
total=$(sql "$CAT" "select count(distinct id) from chunk")
stored() { sqlite3 "$T/cache/state.db" "select count(*) from chunk"; }
for i in $(seq 1 600); do [ "$(stored)" -ge $((total / 4)) ] && break; sleep 0.05; done
stop_repl || die "replicator did not stop cleanly"
have=$(stored)
[ "$have" -lt "$total" ] || die "backfill finished before the outage; nothing to test"
# A file with no chunk stored yet (after the outage began).
victim=$(unfetched_file "$CAT" "$T/cache")
vpath=$(find "$T/src" -name "$victim" | head -n 1)
rel=${vpath#"$T/src/"}
[ -n "$victim" ] && [ -f "$vpath" ] || die "no unfetched file found"
# ferry-hydrator(1): a read that fails by timeout takes up to twice
# --timeout (the kernel retries a failed read once). Measured with a
# monotonic clock; 1.5 s of slack for starting python and scheduling on a
# loaded machine, nothing more.
dt=$(eio_seconds "$M/$rel") || die "read during the outage: $dt"
python3 -c 'import sys; sys.exit(float(sys.argv[1]) > 2 * 3 + 1.5)' "$dt" ||
	die "EIO took ${dt}s with --timeout 3: ferry-hydrator(1) promises at most 2 x 3 s"
ok "during the outage: $rel -> EIO after ${dt}s; mount still up"
mountpoint -q "$M" || die "mount went away"
wait_status "$T/cache" state stalled 30 || die "status did not say stalled"
err=$(status_field "$T/cache" last_error)
[ -n "$err" ] || die "stalled without last_error"
ok "status: stalled ($err)"

start_repl "$port" "r=$T/src"
# The tree did not change: the restart read no file and published nothing.
last=$(grep ' ready' "$T/repl.log" | tail -n 1)
echo "$last" | grep -q 'generation=1 ' || die "restart published a new generation: $last"
echo "$last" | grep -q 'bytes_read=0 .*unchanged=1' || die "restart read the unchanged tree again: $last"
ok "restart of the unchanged tree: generation 1 kept, no byte read"
wait_status "$T/cache" state complete 180 || die "backfill did not resume and complete by itself"
cmp "$vpath" "$M/$rel" || die "the same read after recovery gives wrong bytes"
ok "recovered by itself; backfill complete; the same read now succeeds"
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$M" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs"; }
umount_hyd "$M"
