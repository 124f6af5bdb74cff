#!/usr/bin/env bash
# 170: a `ferry sync` rerun costs what changed, not what DEST holds. After
# a sync, a rerun over the unchanged tree reads (read(2) bytes, children
# included) far less than the tree, because the writer recorded what it
# wrote; without that record (removed) the same rerun reads every byte
# back to hash it, which is what shows this test can fail. A file of DEST
# changed behind ferry's back, its size and mtime put back, is still found
# and rewritten (its ctime moved), and a file changed at the source is
# the only one fetched; one changed after the scan (no rescan) is named
# once, exit 24. A server killed mid-run ends the run with rsync's
# 10 or 30, and a rerun once it is back completes the tree.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built"
mk_bulk_tree "$T/src" 24
# One file of about 190 chunks: the writer's record digests its manifest
# in batches of 64 rows, and a rerun must find that digest equal to the
# catalog's for a file of several batches too (else it reads 12 MiB back).
head -c $((12 << 20)) /dev/urandom >"$T/src/big"
bytes=$(du -sb --apparent-size "$T/src" | cut -f1)
port=$(free_port)
URL="http://127.0.0.1:$port/v1/r"
start_repl "$port" "r=$T/src"
# rchar of one ferry sync run: bash adds a reaped child's I/O to its own
reads() {
	bash -c '"$@" >/dev/null 2>&1 || exit 1; awk "/^rchar/ {print \$2}" /proc/$$/io' _ \
		"$FERRY" sync -q --cache-dir "$T/cache" "$URL" "$T/dest"
}
first=$(reads) || die "first sync failed"
again=$(reads) || die "rerun failed"
[ "$again" -lt $((bytes / 4)) ] || die "a rerun over an unchanged tree read $again bytes of a $bytes-byte tree"
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "tree differs after the rerun"; }
ok "rerun of an unchanged $bytes-byte tree read $again bytes (first run $first)"

rm -rf "$T/cache/sync"
norec=$(reads) || die "rerun without the record failed"
[ "$norec" -ge "$bytes" ] || die "without the record the rerun read only $norec bytes: the check above proves nothing"
ok "without the record the same rerun reads $norec bytes (every file hashed again)"

# Behind ferry's back: same size, mtime put back.
victim=$(find "$T/dest" -type f -size +100k | sort | head -n 1)
rel=${victim#"$T/dest/"}
keep=$(stat -c %y "$victim")
printf 'XXXX' | dd of="$victim" bs=1 seek=10 conv=notrunc status=none
touch -d "$keep" "$victim"
cmp -s "$T/src/$rel" "$victim" && die "the tamper did not change the file"
reads >/dev/null || die "rerun after the tamper failed"
cmp "$T/src/$rel" "$victim" || die "a file changed in DEST behind ferry's back was not rewritten"
ok "a file changed in DEST with its size and mtime kept is found and rewritten"

# One file changed at the source: only its chunks travel.
src_victim=$(find "$T/src" -type f -size +1M | sort | head -n 1)
printf 'changed' | dd of="$src_victim" bs=1 seek=1000 conv=notrunc status=none
kill -HUP "$REPL_PID"
for i in $(seq 1 100); do [ "$(curl -sf "$URL/HEAD")" = 2 ] && break; sleep 0.1; done
"$FERRY" sync --cache-dir "$T/cache" --stats "$URL" "$T/dest" >"$T/stats.txt" 2>&1 || { cat "$T/stats.txt"; die "sync after the change failed"; }
fetched=$(awk -F': ' '/^Chunks fetched/ {print $2}' "$T/stats.txt")
written=$(awk -F': ' '/^Number of regular files written/ {print $2}' "$T/stats.txt")
[ "$written" = 1 ] || { cat "$T/stats.txt"; die "$written files written for one changed file"; }
[ "$fetched" -ge 1 ] && [ "$fetched" -le 3 ] || { cat "$T/stats.txt"; die "$fetched chunks fetched for one small change"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "tree differs after the change"; }
ok "one file changed at the source: 1 file written, $fetched chunk(s) fetched"

# A file changed at the source after the scan, and no rescan: the server
# refuses its chunks (409). The run names it once (rsync prints one line
# for such a file), asks for none of its chunks a second time, writes the
# rest and exits 24 (vanished at the source).
sv=$(find "$T/src" -type f -size +200k -size -400k | sort | head -n 1)
[ -n "$sv" ] || die "no file of 200-400 KiB in the tree"
srel=${sv#"$T/src/"}
# every chunk of it changes: each one is refused
head -c "$(stat -c %s "$sv")" /dev/urandom | dd of="$sv" conv=notrunc status=none
rc=0
"$FERRY" sync --cache-dir "$T/cache3" "$URL" "$T/dest3" >"$T/stale.out" 2>"$T/stale.err" || rc=$?
[ "$rc" = 24 ] || { cat "$T/stale.err"; die "a file changed after the scan exits $rc, not 24"; }
[ "$(grep -c "$srel" "$T/stale.err")" = 1 ] || { cat "$T/stale.err"; die "the changed file is not named exactly once"; }
grep -q "error: the source file changed since the scan .*path=\"$T/dest3/$srel\"" "$T/stale.err" ||
	{ cat "$T/stale.err"; die "the line naming the changed file does not say why"; }
! grep -q 'Stale file handle' "$T/stale.err" || { cat "$T/stale.err"; die "ESTALE's misleading text is shown"; }
twice=$(grep -o 'fetch failed chunk=[0-9a-f]*' "$T/stale.err" | sort | uniq -d | wc -l)
[ "$twice" = 0 ] || { cat "$T/stale.err"; die "$twice chunk(s) of the changed file asked for twice"; }
[ ! -e "$T/dest3/$srel" ] || die "the changed file was written"
nsrc=$(find "$T/src" -type f | wc -l)
ndst=$(find "$T/dest3" -type f | wc -l)
[ "$ndst" = $((nsrc - 1)) ] || die "$ndst files written of $nsrc, not all but the changed one"
ok "a file changed after the scan: named once, no chunk asked for twice, the rest written, exit 24"

# The server goes away in the middle of a run: rsync's exit code 10, what
# was fetched is kept, and a rerun once it is back completes the tree.
stop_repl || die "replicator did not stop cleanly"
mk_bulk_tree "$T/src2" 24
start_repl "$port" "r=$T/src" "s=$T/src2"
URL2="http://127.0.0.1:$port/v1/s"
total2=$(sql "$(manifests_db s "$T/m2.db")" "select count(distinct id) from chunk")
"$FERRY" sync -q --bwlimit 2M --timeout 1 --cache-dir "$T/cache2" "$URL2" "$T/dest2" 2>"$T/gone.err" &
spid=$!
stored2() { sqlite3 "$T/cache2/state.db" "select count(*) from chunk" 2>/dev/null || echo 0; }
wait_for 60 eval '[ "$(stored2)" -ge 10 ]' || die "the sync stored nothing from the second namespace"
kill -9 "$REPL_PID"
wait "$REPL_PID" 2>/dev/null
REPL_PID=""
kill -0 "$spid" 2>/dev/null || die "the sync had ended before the server was killed"
at_kill=$(stored2)
log "server killed with $at_kill of $total2 chunks stored"
[ "$at_kill" -lt "$total2" ] || die "the server was killed after the sync had every chunk"
wait "$spid"; rc=$?
# 10 when its port refuses, 30 when transfers under way time out first
[ "$rc" = 10 ] || [ "$rc" = 30 ] || { cat "$T/gone.err"; die "a server gone mid-run exits $rc, not 10 or 30"; }
grep -q 'giving up fetching' "$T/gone.err" || { cat "$T/gone.err"; die "no 'giving up' line"; }
start_repl "$port" "r=$T/src" "s=$T/src2"
"$FERRY" sync -q --cache-dir "$T/cache2" "$URL2" "$T/dest2" || die "rerun after the server came back failed"
python3 "$E2E_LIB/treecmp.py" --content "$T/src2" "$T/dest2" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "tree differs after the rerun"; }
ok "server killed mid-run: exit $rc; back again, the rerun completes the tree"
