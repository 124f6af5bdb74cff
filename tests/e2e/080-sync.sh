#!/usr/bin/env bash
# 080: `ferry sync URL DEST` makes a plain tree equal to the source in
# content and metadata — compared with the same tree copied by rsync -aHX —
# a second run writes nothing (no file's ctime, mtime or inode moves, and
# the contents are the source's) and fetches nothing, and a run killed in
# the middle (fewer chunks stored than the tree has) completes when run
# again.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (owners, devices)"
[ -x "$FERRY" ] || die "ferry not built"
command -v rsync >/dev/null || skip "rsync missing"
python3 "$E2E_LIB/mktree.py" "$T/src" --big-dir 3000 --sparse-gib 4.25 || die "mktree"
mk_bulk_tree "$T/src/bulk" 24
port=$(free_port)
start_repl "$port" "s=$T/src"
URL="http://127.0.0.1:$port/v1/s"
rsync -aHX "$T/src/" "$T/rsync/" || die "rsync -aHX failed"

# A first run killed part way, then run again to completion.
# (a cap keeps it running long enough to be killed part way)
"$FERRY" sync --bwlimit 4M --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/sync0.log" 2>&1 &
spid=$!
stored_n() { sqlite3 "$T/cache/state.db" "select count(*) from chunk" 2>/dev/null || echo 0; }
wait_for 60 eval '[ "$(stored_n)" -ge 20 ]' || die "the first run did not store 20 chunks"
kill -9 $spid || die "the first run ended before the kill"
wait $spid 2>/dev/null
# The replicator's count is final once it closed the dead connections.
wait_repl_quiet "$port" || die "the replicator kept the killed sync's connections open"
at_kill=$(sqlite3 "$T/cache/state.db" 'select count(*) from chunk')
lost=$(($(repl_stat "$port" s chunks_served) - at_kill))
distinct=$(sql "$(manifests_db s "$T/manifests.db")" "select count(distinct id) from chunk")
log "first run killed with $at_kill of $distinct chunks stored, $lost in flight"
[ "$at_kill" -lt "$distinct" ] || die "the kill landed after every chunk was stored ($at_kill of $distinct)"
"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/sync1.log" 2>&1 || { cat "$T/sync1.log"; die "sync after the kill failed"; }
tail -n 12 "$T/sync1.log"
extra=$(($(repl_stat "$port" s chunks_served) - distinct))
[ "$extra" -le "$lost" ] || die "the resumed sync refetched $extra chunks, more than the $lost in flight at the kill"
ok "resumed sync fetched only what was missing (extra $extra <= $lost in flight)"
python3 "$E2E_LIB/treecmp.py" --content "$T/rsync" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "ferry sync tree differs from rsync -aHX's"; }
ok "sync (resumed after kill -9) equals rsync -aHX's copy: $(tail -n 1 "$T/cmp.txt")"
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "sync tree differs from the source"; }
# Holes stay holes: the source's sparse file takes few blocks there.
sb=$(stat -c %b "$T/src/sparse.img") db=$(stat -c %b "$T/dest/sparse.img")
[ "$db" -le $((2 * sb + 2048)) ] || die "sparse.img takes $db blocks in DEST, $sb at the source"
grep -q 'namespace hashed .*bytes_read=' "$T/repl.log" || die "no hashed line"
ok "sparse.img: $sb blocks at the source, $db in DEST ($(stat -c %s "$T/src/sparse.img") bytes apparent)"

served=$(repl_stat "$port" s chunks_served)
# Any write, chmod, chown, xattr change or rename moves a ctime; a
# replaced file also gets a new inode.
find "$T/dest" -printf '%p %T@ %C@ %i\n' | sort >"$T/before.txt"
"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/sync2.log" 2>&1 || { cat "$T/sync2.log"; die "second sync failed"; }
find "$T/dest" -printf '%p %T@ %C@ %i\n' | sort >"$T/after.txt"
[ "$(repl_stat "$port" s chunks_served)" = "$served" ] || die "second sync fetched chunks"
cmp -s "$T/before.txt" "$T/after.txt" || { diff "$T/before.txt" "$T/after.txt" | head; die "second sync touched entries (mtime, ctime or inode moved)"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/cmp2.txt" || { cat "$T/cmp2.txt"; die "after the second run DEST differs from the source"; }
ok "second run: nothing fetched, no entry touched (ctime, mtime, inode), contents still the source's"

# Refused destinations and a bad URL: one line, non-zero exit.
mkdir -p "$T/mnt"; MOUNTS+=("$T/mnt")
"$HYD" -c "$T/cache-m" --no-backfill "$URL" "$T/mnt" || die "mount for the refusal test"
if "$FERRY" sync --cache-dir "$T/cache2" "$URL" "$T/mnt/inside" 2>"$T/err"; then die "DEST inside the mount accepted"; fi
grep -qi "mount" "$T/err" || die "refusal does not say why: $(cat "$T/err")"
ok "DEST inside a ferry mount refused: $(cat "$T/err")"
fusermount3 -u "$T/mnt"
