#!/usr/bin/env bash
# 300: ferry-replicator --namespaces FILE, reread on SIGHUP, with the real
# programs on loopback:
#  (a) a bad file at start (a malformed line, a missing file, a DIR that
#      is not a directory, a name also given as an argument) is exit 2
#      and one line naming the line;
#  (b) a file of 3 namespaces (comments, blank lines, blanks around a
#      line) plus one NAME=DIR argument: each served exactly (ferry sync
#      + treecmp), a name in no list is 404;
#  (c) while a throttled `ferry sync` reads b, a throttled batch of
#      chunks streams from c and a loop of requests hits b and c, the
#      file drops c and adds d, SIGHUP: one info line added=1 removed=1
#      kept=3 (a, b and the argument z); d is served (sync exact), c
#      answers the 404 of an unknown name, the sync of b ends exact, the batch of c that was streaming
#      ends whole (the same bytes as before), b never answered anything
#      but 200 and c only 200 then 404; the replicator keeps running;
#  (d) a malformed file on SIGHUP: one error line naming the line, the
#      set stays;
#  (e) c added again is served again from its kept state (generation 1,
#      unchanged: nothing re-published), exact;
#  (f) d's DIR changed: removed and added, now serving the new DIR;
#  (g) SIGTERM: exit 0, no sanitizer report (common.sh);
#  (h) a manifest request waiting for the hasher of a namespace
#      (FERRY_HASH_DELAY_MS: 20 s a file) when the namespace is removed
#      answers 503 at once instead of waiting out its 25 s; the
#      replicator exits 0.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
command -v curl >/dev/null || skip "curl missing"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built in $FERRY_BIN"

mkdir -p "$T/a/sub" "$T/c" "$T/d" "$T/e" "$T/z"
echo "hello from a" >"$T/a/hello.txt"
head -c 70000 /dev/urandom >"$T/a/sub/x.bin"
mk_bulk_tree "$T/b" 24
head -c $((16 << 20)) /dev/urandom >"$T/c/big.bin"
echo "c small" >"$T/c/small.txt"
echo "d here" >"$T/d/d.txt"
mkdir -p "$T/d/empty"
echo "e instead of d" >"$T/e/e.txt"
echo "z, an argument" >"$T/z/z.txt"

# The background readers of (c), should the test die while they run.
LOAD="" SYNC="" SLOW=""
e2e_after_cleanup() {
	local p
	for p in $LOAD $SYNC $SLOW; do kill "$p" 2>/dev/null; done
}

# wait_log PATTERN COUNT — until the replicator's log has COUNT lines
# matching PATTERN (60 s).
wait_log() {
	local i
	for i in $(seq 1 600); do
		[ "$(grep -c -- "$1" "$T/repl.log")" -ge "$2" ] && return 0
		kill -0 "$REPL_PID" 2>/dev/null || { cat "$T/repl.log" >&2; die "replicator exited"; }
		sleep 0.1
	done
	cat "$T/repl.log" >&2
	die "no $2 lines '$1' in the replicator's log"
}
code_of() { curl -s -o /dev/null -w '%{http_code}' "$1"; }
sync_exact() { # NS SRC: a fresh ferry sync of NS equals SRC
	rm -rf "$T/out-$1" "$T/cache-$1"
	"$FERRY" sync --cache-dir "$T/cache-$1" "$BASE/$1" "$T/out-$1" >"$T/sync-$1.log" 2>&1 ||
		{ cat "$T/sync-$1.log" >&2; die "ferry sync of $1 failed"; }
	python3 "$E2E_LIB/treecmp.py" --content "$2" "$T/out-$1" >"$T/cmp-$1.txt" ||
		{ cat "$T/cmp-$1.txt" >&2; die "ferry sync of $1 differs from $2"; }
}

# (a) bad files at start: exit 2, one line that names the line.
bad_start() { # WHAT WANT FILE-TEXT [ARGS...]
	local what=$1 want=$2 rc
	printf '%b' "$3" >"$T/bad.ns"
	shift 3
	"$REPL" -l "127.0.0.1:$(free_port)" -s "$T/badstate" --namespaces "$T/bad.ns" "$@" >"$T/bad.out" 2>&1
	rc=$?
	[ $rc = 2 ] || { cat "$T/bad.out" >&2; die "(a) $what: exit $rc, not 2"; }
	[ "$(wc -l <"$T/bad.out")" = 1 ] || { cat "$T/bad.out" >&2; die "(a) $what: not one line"; }
	grep -q -- "$want" "$T/bad.out" || { cat "$T/bad.out" >&2; die "(a) $what: no '$want'"; }
}
bad_start "malformed line" 'why="line 3: .a b. is not NAME=DIR"' "a=$T/a\n# ok\na b\n"
bad_start "bad name" "line 2: bad namespace name '.x'" "a=$T/a\n.x=$T/a\n"
bad_start "name twice" "line 2: namespace 'a' given twice" "a=$T/a\na=$T/c\n"
bad_start "name of an argument" "line 1: namespace 'z' given twice" "z=$T/a\n" "z=$T/z"
bad_start "DIR missing" "line 1: cannot use the source directory of namespace 'a'" "a=$T/nowhere\n"
rm -f "$T/bad.ns"
"$REPL" -l "127.0.0.1:$(free_port)" -s "$T/badstate" --namespaces "$T/bad.ns" >"$T/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'No such file' "$T/bad.out" || { cat "$T/bad.out" >&2; die "(a) a missing file: exit $rc"; }
[ ! -e "$T/badstate" ] || die "(a) a refused start left a state dir"
ok "(a) bad namespaces files at start: exit 2, one line naming the line"

# (b) three namespaces from the file, one from an argument.
NSF="$T/namespaces"
printf '# tenants of test 300\na=%s\n\n   b=%s  \r\nc=%s\n' "$T/a" "$T/b" "$T/c" >"$NSF"
port=$(free_port)
BASE="http://127.0.0.1:$port/v1"
"$REPL" -l "127.0.0.1:$port" -s "$T/state" --namespaces "$NSF" "z=$T/z" >>"$T/repl.log" 2>&1 &
REPL_PID=$!
for n in a b c z; do wait_log " ready ns=$n " 1; done
for n in a b c z; do
	[ "$(curl -sf "$BASE/$n/HEAD")" = 1 ] || die "(b) $n: HEAD is not 1"
done
unknown=$(curl -s "$BASE/d/HEAD")
[ "$unknown" = "{\"error\":\"not_found\",\"detail\":\"unknown namespace 'd'\"}" ] || die "(b) d before it is added: $unknown"
[ "$(code_of "$BASE/d/HEAD")" = 404 ] || die "(b) d before it is added is not 404"
for n in a b c; do sync_exact "$n" "$T/$n"; done
sync_exact z "$T/z"
ok "(b) a, b, c from the file and z from an argument served exactly; d is 404"

# (c) the reload under load.
wait_hashed "$port" c 60 || die "(c) c not hashed"
python3 - "$T/state/c/source/1.db" "$T/ids.bin" <<'PY' || die "(c) cannot list c's chunk ids"
import sqlite3, sys
ids = [r[0] for r in sqlite3.connect(sys.argv[1]).execute("select id from chunk order by id")]
assert 100 < len(ids) <= 1024, len(ids)
open(sys.argv[2], "wb").write(b"".join(ids))
PY
batch() { # OUT [curl options]: POST every id of c
	local out=$1; shift
	curl -s -f "$@" -X POST --data-binary @"$T/ids.bin" -o "$out" "$BASE/c/chunks"
}
batch "$T/batch-ref.bin" || die "(c) the batch of c failed"
ref_size=$(stat -c %s "$T/batch-ref.bin")
[ "$ref_size" -gt $((16 << 20)) ] || die "(c) the batch of c is only $ref_size bytes"

# the load: b must always answer 200; c 200 until removed, then 404
(
	while [ ! -e "$T/load.stop" ]; do
		for u in b/HEAD b/stats c/HEAD c/stats; do
			echo "$u $(code_of "$BASE/$u")"
		done
	done >"$T/load.txt"
) &
LOAD=$!
"$FERRY" sync --cache-dir "$T/cache-b2" --bwlimit 3M "$BASE/b" "$T/out-b2" >"$T/sync-b2.log" 2>&1 &
SYNC=$!
batch "$T/batch-slow.bin" --limit-rate 2M &
SLOW=$!
sleep 1.5
kill -0 "$SYNC" 2>/dev/null || die "(c) the sync of b ended before the reload: nothing was in flight"
kill -0 "$SLOW" 2>/dev/null || die "(c) the batch of c ended before the reload: nothing was in flight"
printf 'a=%s\nb=%s\nd=%s\n' "$T/a" "$T/b" "$T/d" >"$NSF"
kill -HUP "$REPL_PID"
wait_log 'namespaces reloaded ' 1
line=$(grep 'namespaces reloaded ' "$T/repl.log")
echo "$line" | grep -q ' added=1 removed=1 kept=3 failed=0 namespaces=4$' || die "(c) reload line: $line"
echo "$line" | grep -q '^ferry-replicator: namespaces reloaded' || die "(c) the reload line is not at info level: $line"
[ "$(code_of "$BASE/c/HEAD")" = 404 ] || die "(c) c still served after its removal"
gone=$(curl -s "$BASE/c/catalog/1")
[ "$gone" = "{\"error\":\"not_found\",\"detail\":\"unknown namespace 'c'\"}" ] || die "(c) c's catalog after the removal: $gone"
kill -0 "$SLOW" 2>/dev/null || die "(c) the batch of c ended before the removal took effect"
wait_log " ready ns=d " 1
[ "$(curl -sf "$BASE/d/HEAD")" = 1 ] || die "(c) d: HEAD is not 1"
sync_exact d "$T/d"
wait "$SYNC" || { cat "$T/sync-b2.log" >&2; die "(c) the sync of b under the reload failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/b" "$T/out-b2" >"$T/cmp-b2.txt" ||
	{ cat "$T/cmp-b2.txt" >&2; die "(c) the sync of b under the reload differs"; }
wait "$SLOW" || die "(c) the batch of c that streamed across its removal failed"
cmp -s "$T/batch-ref.bin" "$T/batch-slow.bin" || die "(c) the batch of c that streamed across its removal is not whole"
touch "$T/load.stop"
wait "$LOAD"
bad=$(grep -v -E '^b/(HEAD|stats) 200$|^c/(HEAD|stats) (200|404)$' "$T/load.txt" | head -n 3)
[ -z "$bad" ] || die "(c) under load: $bad"
grep -q '^c/HEAD 200$' "$T/load.txt" || die "(c) the load never saw c served"
# once c was 404 it never came back during the load
awk '$1 ~ /^c\// { if ($2 == 404) g = 1; else if (g) { print; exit 1 } }' "$T/load.txt" >/dev/null ||
	die "(c) c answered 200 after a 404"
kill -0 "$REPL_PID" 2>/dev/null || die "(c) the replicator died"
ok "(c) SIGHUP under load: d added and exact, c 404, b's sync exact, c's streaming batch whole ($ref_size bytes), $(wc -l <"$T/load.txt") requests of the load all 200/404"

# (d) a malformed file keeps the set.
errs=$(grep -c 'error:' "$T/repl.log")
hups=$(grep -c 'rescan requested signal=SIGHUP' "$T/repl.log")
printf 'a=%s\nb=%s\n# fine so far\nd %s\n' "$T/a" "$T/b" "$T/d" >"$NSF"
kill -HUP "$REPL_PID"
wait_log 'rescan requested signal=SIGHUP' $((hups + 1))
[ "$(grep -c 'error:' "$T/repl.log")" = $((errs + 1)) ] || { tail -n 5 "$T/repl.log" >&2; die "(d) not one error line"; }
line=$(grep 'error:' "$T/repl.log" | tail -n 1)
echo "$line" | grep -q "namespaces file not reloaded, the namespaces served stay path=\"$NSF\" why=\"line 4: 'd .*' is not NAME=DIR\"" ||
	die "(d) error line: $line"
[ "$(grep -c 'namespaces reloaded ' "$T/repl.log")" = 1 ] || die "(d) a bad file was reloaded"
for n in a b d; do [ "$(code_of "$BASE/$n/HEAD")" = 200 ] || die "(d) $n not served after a bad reload"; done
[ "$(code_of "$BASE/c/HEAD")" = 404 ] || die "(d) c came back with a bad file"
ok "(d) a malformed file on SIGHUP: one error line naming line 4; a, b, d still served"

# (e) c again, from its kept state.
printf 'a=%s\nb=%s\nc=%s\nd=%s\n' "$T/a" "$T/b" "$T/c" "$T/d" >"$NSF"
kill -HUP "$REPL_PID"
wait_log " ready ns=c " 2
line=$(grep " ready ns=c " "$T/repl.log" | tail -n 1)
echo "$line" | grep -q ' generation=1 .* unchanged=1 ' || die "(e) c re-added did not start from its kept state: $line"
grep 'namespaces reloaded ' "$T/repl.log" | tail -n 1 | grep -q ' added=1 removed=0 kept=4 ' || die "(e) reload line"
sync_exact c "$T/c"
ok "(e) c added again: served from its kept state (generation 1, unchanged), exact"

# (f) d's DIR changes: removed + added.
printf 'a=%s\nb=%s\nc=%s\nd=%s\n' "$T/a" "$T/b" "$T/c" "$T/e" >"$NSF"
kill -HUP "$REPL_PID"
wait_log " ready ns=d " 2
grep 'namespaces reloaded ' "$T/repl.log" | tail -n 1 | grep -q ' added=1 removed=1 kept=4 ' || die "(f) reload line"
sync_exact d "$T/e"
[ "$(curl -sf "$BASE/d/HEAD")" = 2 ] || die "(f) d's new DIR is not its generation 2"
ok "(f) d's DIR changed: removed and added, serves the new DIR as generation 2"

stop_repl
ok "(g) SIGTERM: exit 0"

# (h) a waiting manifest request of a removed namespace.
mkdir -p "$T/w"
for i in 1 2 3; do echo "w$i" >"$T/w/f$i"; done
printf 'w=%s\n' "$T/w" >"$NSF"
FERRY_HASH_DELAY_MS=20000 "$REPL" -l "127.0.0.1:$port" -s "$T/state2" --namespaces "$NSF" >>"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_log " ready ns=w " 1
ino=$(sqlite3 -readonly "$T/state2/w/source/1.db" "select max(ino) from todo")
[ -n "$ino" ] || die "(h) no pending file in w"
t0=$SECONDS
curl -s -o "$T/man.out" -w '%{http_code}' "$BASE/w/manifest/1/$ino?wait=25" >"$T/man.code" &
MAN=$!
sleep 1.5
kill -0 "$MAN" 2>/dev/null || die "(h) the manifest request did not wait ($(cat "$T/man.code"))"
: >"$NSF"
kill -HUP "$REPL_PID"
wait "$MAN"
[ "$(cat "$T/man.code")" = 503 ] || die "(h) the waiting manifest request answered $(cat "$T/man.code"): $(cat "$T/man.out")"
[ $((SECONDS - t0)) -lt 15 ] || die "(h) the waiting manifest request was answered only after $((SECONDS - t0)) s"
grep 'namespaces reloaded ' "$T/repl.log" | tail -n 1 | grep -q ' added=0 removed=1 kept=0 failed=0 namespaces=0$' || die "(h) reload line"
[ "$(code_of "$BASE/w/HEAD")" = 404 ] || die "(h) w still served"
stop_repl
ok "(h) a manifest request waiting on a removed namespace's hasher: 503 after $((SECONDS - t0)) s, not 25; exit 0"
