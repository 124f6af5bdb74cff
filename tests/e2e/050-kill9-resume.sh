#!/usr/bin/env bash
# 050: kill -9 of the hydrator at several points of a backfill, driven by
# the test (at 20%, 45% and 70% of the chunks stored), restart on the same
# cache each time, then completion: the tree is identical to the source, and
# the chunks fetched in all exceed the distinct chunks by no more than what
# was in flight at the kills (served by the replicator, not yet stored).
# Each kill must land mid-run: fewer chunks stored than the tree has.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
mk_bulk_tree "$T/src" 48
port=$(free_port)
start_repl "$port" "k=$T/src"
URL="http://127.0.0.1:$port/v1/k"
M="$T/mnt"
# A bandwidth cap makes the backfill last long enough to stop it where the
# test wants, not where the scheduler happens to be.
opts=(--jobs 4 --bwlimit 8M)
mount_hyd "$URL" "$M" "${opts[@]}"
CAT=$(manifests_db k "$T/manifests.db")
total=$(sql "$CAT" "select count(distinct id) from chunk")
stored() { sqlite3 "$T/cache/state.db" "select count(*) from chunk"; }
waste=0
for pct in 20 45 70; do
	target=$((total * pct / 100))
	for i in $(seq 1 600); do
		[ "$(stored)" -ge "$target" ] && break
		sleep 0.05
	done
	[ "$(stored)" -ge "$target" ] || die "backfill did not reach $pct% ($target of $total)"
	pid=$(cat "$T/cache/hydrator.pid")
	kill -9 "$pid"
	wait_exited "$pid" || die "hydrator $pid still running after kill -9"
	fusermount3 -u "$M" 2>/dev/null || umount -l "$M"
	# The replicator's count is final once it closed the dead
	# connections: nothing more is counted for them.
	wait_repl_quiet "$port" || die "the replicator kept connections of the killed hydrator open"
	served=$(repl_stat "$port" k chunks_served)
	have=$(stored)
	waste=$((served - have))
	log "killed at $pct%: stored $have of $total, served $served, in flight and lost: $waste"
	[ "$have" -ge "$target" ] || die "store lost chunks across kill -9: $have < $target"
	[ "$have" -lt "$total" ] || die "the kill at $pct% landed after the backfill was done ($have of $total stored)"
	mount_hyd "$URL" "$M" "${opts[@]}"
done
ok "three kill -9 restarts"
wait_status "$T/cache" state complete 180 || die "backfill did not complete after the kills"
served=$(repl_stat "$port" k chunks_served)
extra=$((served - total))
log "distinct chunks $total, fetched in all $served, extra $extra, lost in flight at the last kill $waste"
[ "$extra" -le "$waste" ] || die "refetched $extra chunks, more than the $waste in flight at the kills"
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$M" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs"; }
ok "complete after kills; tree identical; extra fetches ($extra) <= in flight at kills ($waste)"
umount_hyd "$M"
