#!/usr/bin/env bash
# 250: ferry-replicator(1) on an IPv6 address and its SIGTERM:
#  (a) -l [::1]:PORT serves; a mount of http://[::1]:PORT/v1/NS reads a
#      file exactly, and an IPv4 client finds nothing on that port;
#      a malformed address is refused with one line;
#  (b) SIGTERM while the background hasher runs and a keep-alive client
#      holds an idle connection: the replicator closes the connection,
#      logs "shutting down" and exits 0 (the hasher is held by the test
#      hook, so the signal surely comes mid-way); started again it keeps
#      the generation, hashes the rest, and ferry sync then gives the
#      exact tree.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null ||
	skip "no IPv6 loopback (::1) on this machine"
S="$T/src"
mkdir -p "$S/d"
for i in $(seq 1 12); do head -c $((200000 + i)) /dev/urandom >"$S/d/f$i"; done
port=$(free_port)
"$REPL" -l "[::1]:$port" -s "$T/state" "v6=$S" >>"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_for 60 grep -q ' ready ns=v6 ' "$T/repl.log" || { cat "$T/repl.log"; die "not ready on [::1]:$port"; }
URL="http://[::1]:$port/v1/v6"

# (a) IPv6
[ "$(curl -sf "$URL/HEAD")" = 1 ] || die "(a) GET HEAD over [::1] failed"
curl -s -o /dev/null "http://127.0.0.1:$port/v1/v6/HEAD" && die "(a) the replicator answers on 127.0.0.1 too"
mount_hyd "$URL" "$T/mnt" --no-backfill
cmp "$S/d/f12" "$T/mnt/d/f12" || die "(a) the mount over [::1] reads wrong bytes"
umount_hyd "$T/mnt"
# Refused with one line. (They exit 1, "cannot listen", found when the
# server starts, not 2 as arguments parsed up front would: not asserted
# here, see the exit-code work of issue 14.)
for bad in "[::1" "[::1]:" "[nope]:$port"; do
	"$REPL" -l "$bad" -s "$T/state-bad" "x=$S" 2>"$T/err"
	rc=$?
	[ "$rc" = 2 ] || [ "$rc" = 1 ] || die "(a) -l '$bad' exits $rc"
	[ "$(wc -l <"$T/err")" = 1 ] || die "(a) -l '$bad': not one line: $(cat "$T/err")"
	log "(a) -l '$bad' -> exit $rc: $(cat "$T/err")"
done
ok "(a) -l [::1]:PORT: HEAD, and a mount reads exactly; not on 127.0.0.1; bad addresses refused with one line"

# (b) SIGTERM with the hasher busy and an idle keep-alive connection:
# generation 2 adds files, and the test hook holds the hasher 60 s before
# each, so it is surely mid-way when SIGTERM comes.
stop_repl || die "replicator did not exit 0 on SIGTERM"
mkdir -p "$S/n"
for i in $(seq 1 6); do head -c $((300000 + i)) /dev/urandom >"$S/n/g$i"; done
FERRY_HASH_DELAY_MS=60000 "$REPL" -l "[::1]:$port" -s "$T/state" --scan-threads 1 "v6=$S" >>"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_for 60 grep -q ' ready ns=v6 generation=2 ' "$T/repl.log" || { cat "$T/repl.log"; die "(b) generation 2 not ready"; }
hash_state() { curl -sf "$URL/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["hashing"]["state"])'; }
state=$(hash_state)
[ "$state" = hashing ] || die "(b) the hasher is not running (state $state): nothing to interrupt"
python3 - "$port" >"$T/idle.txt" 2>&1 <<'PY' &
import socket, sys
s = socket.create_connection(("::1", int(sys.argv[1])), timeout=120)
s.sendall(b"GET /v1/v6/HEAD HTTP/1.1\r\nHost: t\r\n\r\n")
got = s.recv(4096)
print("answered" if b" 200 " in got else "bad answer %r" % got, flush=True)
while True:  # idle until the server closes
    if not s.recv(4096):
        print("closed by the server", flush=True)
        break
PY
cpid=$!
wait_for 30 grep -q answered "$T/idle.txt" || die "(b) the keep-alive client got no answer: $(cat "$T/idle.txt")"
kill -TERM "$REPL_PID"
wait_exited "$REPL_PID" 30 || die "(b) the replicator did not exit within 30 s of SIGTERM"
wait "$REPL_PID"
rc=$?
REPL_PID=""
[ "$rc" = 0 ] || die "(b) SIGTERM: exit $rc, not 0"
grep -q 'shutting down' "$T/repl.log" || die "(b) no 'shutting down' line"
wait_exited "$cpid" 10 || die "(b) the idle connection was not closed"
grep -q "closed by the server" "$T/idle.txt" || die "(b) idle client: $(cat "$T/idle.txt")"
left=$(sqlite3 "$T/state/v6/source/2.db" "select count(*) from todo")
[ "$left" -ge 1 ] || die "(b) every file was hashed before SIGTERM"
ok "(b) SIGTERM while the hasher runs ($left of 6 files still to hash) with an idle keep-alive connection: closed, 'shutting down', exit 0"

"$REPL" -l "[::1]:$port" -s "$T/state" "v6=$S" >>"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_for 60 eval '[ "$(grep -c " ready ns=v6 " "$T/repl.log")" -ge 3 ]' || die "(b) restart not ready"
grep ' ready ns=v6 ' "$T/repl.log" | tail -n 1 | grep -q 'generation=2 ' || die "(b) the restart published a new generation"
wait_for 120 eval '[ "$(hash_state)" = done ]' ||
	die "(b) hashing did not finish after the restart"
"$FERRY" sync -q --cache-dir "$T/scache" "$URL" "$T/dest" || die "(b) ferry sync failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(b) tree differs"; }
ok "(b) restarted: generation 2 kept, hashing finished, ferry sync over [::1] exact"
stop_repl || die "replicator did not exit 0 on SIGTERM"
