#!/usr/bin/env bash
# 130: kill -9 of the replicator in the middle of hashing. The restart
# finds the same tree, keeps the generation, and hashes only what was not
# hashed yet (the bytes it reads are counted: exactly the rest); a
# `ferry sync` started while hashing runs, and carried across the kill,
# ends with a tree byte- and metadata-exact.
. "$(dirname "$0")/lib/common.sh"
[ -x "$FERRY" ] || die "ferry not built"
S="$T/src"
mkdir -p "$S/d"
for i in $(seq 10 21); do head -c $((1 << 20)) /dev/urandom >"$S/d/f$i.bin"; done
for i in $(seq 1 20); do head -c $((i * 101)) /dev/urandom >"$S/s$i"; done
total=$(find "$S" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
port=$(free_port)
FERRY_HASH_DELAY_MS=300 REPL_OPTS="--scan-threads 1" start_repl "$port" "h=$S"
URL="http://127.0.0.1:$port/v1/h"
"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/sync.log" 2>&1 &
spid=$!
IDX="$T/state/h/source/1.db"
for i in $(seq 1 300); do
	n=$(sqlite3 "$IDX" "select count(*) from hashed" 2>/dev/null || echo 0)
	[ "${n:-0}" -ge 6 ] && break
	sleep 0.1
done
kill -9 "$REPL_PID"; wait "$REPL_PID" 2>/dev/null; REPL_PID=""
done_n=$(sqlite3 "$IDX" "select count(*) from hashed")
done_b=$(sqlite3 "$IDX" "select ifnull(sum(size),0) from hashed")
left=$(sqlite3 "$IDX" "select count(*) from todo")
[ "$done_n" -ge 1 ] && [ "$left" -ge 1 ] || die "the kill did not land mid-hashing: $done_n hashed, $left to do"
ok "killed with $done_n files hashed, $left to do"

start_repl "$port" "h=$S"
last=$(grep ' ready' "$T/repl.log" | tail -n 1)
echo "$last" | grep -q 'generation=1 .*unchanged=1' || die "restart published a new generation: $last"
wait_hashed "$port" h 120 || die "hashing did not finish after the restart"
read_b=$(hash_stat "$port" h bytes_read)
[ "$read_b" -eq $((total - done_b)) ] ||
	die "the restart read $read_b bytes; only $((total - done_b)) were left to hash"
ok "restart kept generation 1 and read only the $read_b bytes not hashed before"

wait "$spid" || { cat "$T/sync.log"; die "ferry sync failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "sync tree differs"; }
ok "ferry sync across the kill: tree exact ($(tail -n 1 "$T/cmp.txt"))"
