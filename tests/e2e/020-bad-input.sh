#!/usr/bin/env bash
# 020: bad input gets one clear stderr line, the exit code the man page
# gives it (1 start-up failed, 2 bad arguments), and nothing left mounted
# or half-written; bad requests get a JSON error, never a crash.
. "$(dirname "$0")/lib/common.sh"
need_fuse

# expect_fail WHAT CODE PATTERN CMD... — CMD must exit CODE with exactly
# one stderr line matching PATTERN (extended regex, case-insensitive).
expect_fail() {
	local what=$1 code=$2 pat=$3; shift 3
	local err="$T/err.txt" rc
	"$@" >/dev/null 2>"$err"; rc=$?
	[ $rc -eq "$code" ] || die "$what: exit $rc, not $code: $(cat "$err")"
	[ "$(wc -l <"$err")" -eq 1 ] || { cat "$err"; die "$what: expected one stderr line"; }
	grep -Eiq "$pat" "$err" || die "$what: message does not name the problem: $(cat "$err")"
	ok "$what -> exit $rc: $(cat "$err")"
}
not_mounted() { ! mountpoint -q "$1" || die "$1 left mounted"; }
no_temp_files() {
	local left
	left=$(find "$1" -name '*.tmp' 2>/dev/null | head -n 3)
	[ -z "$left" ] || die "half-written files left: $left"
}

mkdir -p "$T/src/sub" "$T/mnt" "$T/full"
echo hello >"$T/src/sub/file"
echo x >"$T/full/occupied"
port=$(free_port)
start_repl "$port" "ns=$T/src"
base="http://127.0.0.1:$port/v1"

# --- replicator ---
expect_fail "port in use" 1 "listen.*127\.0\.0\.1:$port|in use" \
	"$REPL" -l "127.0.0.1:$port" -s "$T/state2" "x=$T/src"
expect_fail "missing source dir" 2 "$T/nope" "$REPL" -l "127.0.0.1:$(free_port)" -s "$T/state3" "x=$T/nope"
expect_fail "bad NAME=DIR" 2 "name|usage|=" "$REPL" -l "127.0.0.1:$(free_port)" -s "$T/state4" "justadir"

# Unknown namespace, generation, chunk; malformed requests: status + JSON.
check_status() { # what expected-code curl-args...
	local what=$1 want=$2 code; shift 2
	code=$(curl -s -o "$T/body" -w '%{http_code}' "$@")
	[ "$code" = "$want" ] || die "$what: HTTP $code, expected $want"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "error" in d and "detail" in d' "$T/body" ||
		die "$what: body is not the JSON error: $(head -c 200 "$T/body")"
	ok "$what -> $code $(cat "$T/body")"
}
check_status "unknown namespace" 404 "$base/nope/HEAD"
check_status "unknown generation" 404 "$base/ns/catalog/99"
check_status "bad generation" 404 "$base/ns/catalog/-1"
check_status "unknown chunk" 404 "$base/ns/chunk/$(printf '0%.0s' $(seq 64))"
check_status "malformed chunk id" 400 "$base/ns/chunk/xyz"
check_status "unknown path" 404 "http://127.0.0.1:$port/etc/passwd"
check_status "batch of 33 bytes" 400 -X POST --data-binary "$(printf 'a%.0s' $(seq 33))" "$base/ns/chunks"
head -c 32 /dev/urandom >"$T/id"
check_status "batch with unknown id" 404 -X POST --data-binary @"$T/id" "$base/ns/chunks"
printf 'GARBAGE\r\n\r\n' | timeout 5 python3 -c '
import socket,sys
s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(sys.stdin.buffer.read()); s.settimeout(5)
print(s.recv(200).split(b"\r\n")[0].decode())' "$port" | grep -q ' 400 ' || die "garbage request not answered 400"
kill -0 "$REPL_PID" || die "replicator died on bad input"
ok "replicator still serving after bad requests"

# --- hydrator ---
dead=$(free_port)
expect_fail "unreachable URL" 1 "127\.0\.0\.1:$dead" "$HYD" -c "$T/c1" "http://127.0.0.1:$dead/v1/ns" "$T/mnt"
not_mounted "$T/mnt"; no_temp_files "$T/c1"
expect_fail "unknown namespace" 1 "nope" "$HYD" -c "$T/c2" "$base/nope" "$T/mnt"
not_mounted "$T/mnt"; no_temp_files "$T/c2"
expect_fail "not a URL" 2 "url" "$HYD" -c "$T/c3" "ftp://x/v1/n" "$T/mnt"
expect_fail "missing mountpoint" 1 "$T/absent" "$HYD" -c "$T/c4" "$base/ns" "$T/absent"
expect_fail "mountpoint not empty" 1 "not empty" "$HYD" -c "$T/c5" "$base/ns" "$T/full"
not_mounted "$T/full"

# A catalog that is not a ferry catalog, from a static server.
mkdir -p "$T/static/v1/bad/catalog"
echo 1 >"$T/static/v1/bad/HEAD"
head -c 5000 /dev/urandom | zstd -q -c >"$T/static/v1/bad/catalog/1" 2>/dev/null ||
	python3 -c 'import os,sys; sys.stdout.buffer.write(os.urandom(5000))' >"$T/static/v1/bad/catalog/1"
sport=$(free_port)
python3 -m http.server --bind 127.0.0.1 "$sport" --directory "$T/static" >/dev/null 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; cleanup' EXIT
for i in $(seq 50); do curl -sf "http://127.0.0.1:$sport/v1/bad/HEAD" >/dev/null && break; sleep 0.1; done
expect_fail "invalid catalog" 1 "catalog" "$HYD" -c "$T/c6" "http://127.0.0.1:$sport/v1/bad" "$T/mnt"
kill $spid
not_mounted "$T/mnt"; no_temp_files "$T/c6"
[ -z "$(ls "$T/c6/catalogs" 2>/dev/null | grep -v '^url$')" ] || die "invalid catalog left in the cache: $(ls "$T/c6/catalogs")"

# A cache directory already in use by a running hydrator.
mount_hyd "$base/ns" "$T/mnt"
mkdir -p "$T/mnt2"
expect_fail "cache in use" 1 "in use.*pid=$(cat "$T/cache/hydrator.pid")( |$)" "$HYD" -c "$T/cache" "$base/ns" "$T/mnt2"
not_mounted "$T/mnt2"
[ "$(cat "$T/mnt/sub/file")" = hello ] || die "first mount disturbed"
umount_hyd "$T/mnt"
ok "first mount still served; second refused"

stop_repl || die "replicator did not exit 0 on SIGTERM"
grep -q "shutting down" "$T/repl.log" || die "no shutdown line in replicator log"
ok "replicator shut down cleanly"
