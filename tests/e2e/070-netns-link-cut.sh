#!/usr/bin/env bash
# 070: a link cut inside network namespaces this test creates: the
# replicator lives in namespace "src", the hydrator in "dst" (a veth pair
# between them). The link goes down in the middle of a backfill and comes
# back: reads fail with EIO within the configured time during the cut, and
# the hydrator recovers by itself afterwards.
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
NS_A="ferry-src-$$"; NS_B="ferry-dst-$$"
ns_link "$NS_A" 10.231.0.1 "$NS_B" 10.231.0.2
VB="fvb$$" # ns_link's end of the veth in NS_B

mk_bulk_tree "$T/src" 32
# nsenter into the namespace's network only (not ip netns exec), so the
# replicator stays our child for cleanup.
nsenter --net=/run/netns/"$NS_A" "$REPL" -l 10.231.0.1:8700 -s "$T/state" "n=$T/src" >"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_ready "$T/repl.log" "$REPL_PID"
URL="http://10.231.0.1:8700/v1/n"
M="$T/mnt"; mkdir -p "$M"; MOUNTS+=("$M")
# The mount is made from the dst namespace's network only, so it stays
# visible here (a mount made under `ip netns exec` would not be).
nsenter --net=/run/netns/"$NS_B" "$HYD" -c "$T/cache" --jobs 4 --bwlimit 6M --timeout 3 "$URL" "$M" ||
	die "hydrator failed to mount across the veth"
CAT=$(manifests_db n "$T/manifests.db")
total=$(sql "$CAT" "select count(distinct id) from chunk")
stored() { sqlite3 "$T/cache/state.db" "select count(*) from chunk"; }
for i in $(seq 1 600); do [ "$(stored)" -ge $((total / 4)) ] && break; sleep 0.05; done
ip -n "$NS_B" link set "$VB" down
log "link down at $(stored) of $total chunks"
victim=$(unfetched_file "$CAT" "$T/cache")
vpath=$(find "$T/src" -name "$victim" | head -n 1); rel=${vpath#"$T/src/"}
[ -n "$victim" ] && [ -f "$vpath" ] || die "no unfetched file found"
# ferry-hydrator(1): a read that fails by timeout takes up to twice
# --timeout (the kernel retries a failed read once). Measured with a
# monotonic clock; 1.5 s of slack for starting python and scheduling on a
# loaded machine, nothing more.
dt=$(eio_seconds "$M/$rel") || die "read during the cut: $dt"
python3 -c 'import sys; sys.exit(float(sys.argv[1]) > 2 * 3 + 1.5)' "$dt" ||
	die "EIO took ${dt}s with --timeout 3: ferry-hydrator(1) promises at most 2 x 3 s"
ok "link down: $rel -> EIO after ${dt}s"
# the cut lasts until the hydrator says it is stalled
wait_status "$T/cache" state stalled 60 || die "status did not say stalled during the cut"
ok "link down: status stalled ($(status_field "$T/cache" last_error))"
ip -n "$NS_B" link set "$VB" up
wait_status "$T/cache" state complete 180 || die "backfill did not resume after the link came back"
cmp "$vpath" "$M/$rel" || die "read after the link came back gives wrong bytes"
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$M" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs"; }
ok "link up: recovered by itself, backfill complete, tree identical"
umount_hyd "$M"
