#!/usr/bin/env bash
# 280: a replicator that idle connections cannot lock out, and a control
# socket other users cannot read, with the real programs on loopback:
#  (a) the replicator runs with 1,024 open files at most (the limit that
#      used to be the trouble); 2,000 connections that send nothing, from
#      100 addresses of 127/8 (20 each, under the per-address cap), kept up
#      by a client that opens a new one for each the server closes, plus
#      20 clients trickling a request head a byte at a time: a hydrator
#      still mounts and reads the tree exactly (within a generous bound),
#      because at the connection cap (fitted to the open files limit) the
#      connection that has waited longest for its client makes room;
#  (b) with short timeouts: a client trickling its request head, one that
#      connects and sends nothing, and an idle keep-alive connection are
#      closed (each within a generous bound, and the log says which
#      timeout), a client that stops reading a large answer is cut off,
#      while a keep-alive client asking every 0.2 s, for longer than both
#      timeouts, is answered throughout;
#  (c) --max-conns-per-addr 4: a fifth connection from 127.0.0.3 is closed
#      unanswered while 127.0.0.2 gets in, and once one of the four closes
#      127.0.0.3 gets in again;
#  (d) the hydrator's control socket answers root but not user nobody,
#      even with the cache directory and socket opened up to everyone
#      (SO_PEERCRED, not file modes, refuses).
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
command -v setpriv >/dev/null || skip "setpriv missing (Debian package util-linux)"
id nobody >/dev/null 2>&1 || skip "no user nobody"
SYS_PY=/usr/bin/python3
[ -x "$SYS_PY" ] || skip "no $SYS_PY for user nobody"
[ "$(ulimit -n)" -ge 8192 ] || ulimit -n 8192 || skip "cannot raise the open files limit to 8192"

mk_bulk_tree "$T/src" 8
port=$(free_port)
URL="http://127.0.0.1:$port/v1/s"
ATT_PID=""
e2e_after_cleanup() { [ -z "$ATT_PID" ] || kill "$ATT_PID" 2>/dev/null; }

# (a) fairness with 1,024 open files.
REAL_REPL=$REPL
cat >"$T/repl-1024" <<EOF
#!/bin/sh
ulimit -n 1024 || exit 9
exec "$REAL_REPL" "\$@"
EOF
chmod +x "$T/repl-1024"
REPL="$T/repl-1024" REPL_OPTS="--header-timeout 600 --idle-timeout 600" start_repl "$port" "s=$T/src"
REPL=$REAL_REPL
grep -q 'connection cap lowered to fit the open files limit max_conns=384 nofile=1024' "$T/repl.log" ||
	{ cat "$T/repl.log"; die "(a) no cap fitted to 1024 open files"; }

cat >"$T/attack.py" <<'PY'
# attack.py PORT STATUSFILE: hold 2,000 connections that send nothing
# (100 source addresses x 20) and 20 that trickle a request head, opening
# a new one for each the server closes (at most 200 a second).
import os, selectors, socket, sys, time
port, status = int(sys.argv[1]), sys.argv[2]
sel = selectors.DefaultSelector()
IDLE, SLOW = 2000, 20
made = closed = 0
slow = {}  # socket -> [bytes of its head sent, when the last one went]
head = b"GET /v1/s/HEAD HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"y" * 100000
want = [("idle", i) for i in range(IDLE)] + [("slow", i) for i in range(SLOW)]
budget, last = 2000.0, time.monotonic()
last_report = 0.0

def open_one(kind, i):
    global made
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.bind(("127.0.0.%d" % (10 + i % 100), 0))
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        want.append((kind, i))
        return
    made += 1
    sel.register(s, selectors.EVENT_READ, (kind, i))
    if kind == "slow":
        slow[s] = [0, 0.0]

while True:
    now = time.monotonic()
    budget = min(2000.0, budget + (now - last) * 200)
    last = now
    while want and budget >= 1:
        open_one(*want.pop())
        budget -= 1
    for key, _ in sel.select(timeout=0.1):
        s = key.fileobj
        try:
            d = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            d = b""
        if d:
            continue
        sel.unregister(s)
        slow.pop(s, None)
        s.close()
        closed += 1
        want.append(key.data)
    for s, st in slow.items():  # one byte of each slow head every 0.5 s
        if now - st[1] >= 0.5:
            st[1] = now
            try:
                st[0] += s.send(head[st[0]:st[0] + 1])
            except OSError:
                pass
    if now - last_report >= 0.5:
        last_report = now
        with open(status + ".tmp", "w") as f:
            f.write("made=%d closed=%d open=%d\n" % (made, closed, made - closed))
        os.replace(status + ".tmp", status)
PY
python3 "$T/attack.py" "$port" "$T/attack.status" 2>"$T/attack.err" &
ATT_PID=$!
att() { # the attacker's counter $1, 0 before its first report
	local v
	v=$(sed -n "s/.*$1=\([0-9]*\).*/\1/p" "$T/attack.status" 2>/dev/null)
	echo "${v:-0}"
}
wait_for 120 eval '[ "$(att made)" -ge 2020 ]' || { cat "$T/attack.err"; die "(a) the attacker did not open 2,020 connections"; }
wait_for 60 grep -q 'connection closed to make room why="connection cap"' "$T/repl.log" || die "(a) the cap never made room"
log "attacker: $(cat "$T/attack.status"); replicator connections: $(repl_conns "$port")"
M="$T/mnt"
mkdir -p "$M"
MOUNTS+=("$M")
timeout 120 "$HYD" -c "$T/cache" --timeout 60 "$URL" "$M" || die "(a) the hydrator did not mount under 2,000 idle connections"
mountpoint -q "$M" || die "(a) not mounted"
timeout 300 python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$M" >"$T/cmp-a.txt" ||
	{ cat "$T/cmp-a.txt"; die "(a) reading the tree under 2,000 idle connections failed or differs"; }
e2e_running "$ATT_PID" || { cat "$T/attack.err"; die "(a) the attacker died"; }
log "attacker at the end: $(cat "$T/attack.status")"
ok "(a) 2,000 idle + 20 trickling connections, 1,024 open files: the hydrator mounted and read the tree exactly"

# (d) the control socket, while this hydrator runs: root is answered, user
# nobody is not, though the directory and socket modes would let it in.
ask_status() { # [setpriv args...]: one line from CACHEDIR/control.sock
	# the system's python: one under root's home is not nobody's to run
	"$@" "$SYS_PY" - "$T/cache/control.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(sys.argv[1])
s.sendall(b"status\n")
buf = b""
while not buf.endswith(b"\n"):
    d = s.recv(65536)
    if not d:
        break
    buf += d
sys.stdout.write(buf.decode())
PY
}
ask_status >"$T/ctl-root.json" || die "(d) root could not ask the control socket"
[ -n "$(json_get "$T/ctl-root.json" state)" ] || die "(d) root got no status"
chmod 0711 "$T" "$T/cache"
chmod 0666 "$T/cache/control.sock"
ask_status setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups >"$T/ctl-nobody.json" 2>"$T/ctl-nobody.err" ||
	{ cat "$T/ctl-nobody.err"; die "(d) nobody could not connect (modes opened up) or read a reply"; }
chmod 0700 "$T" "$T/cache"
chmod 0600 "$T/cache/control.sock"
python3 - "$T/ctl-nobody.json" <<'PY' || die "(d) user nobody was answered: $(cat "$T/ctl-nobody.json")"
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert set(o) == {"error"} and "permission denied" in o["error"], o
PY
ok "(d) control socket: root gets the status, nobody gets 'permission denied' (SO_PEERCRED)"

kill "$ATT_PID"
wait "$ATT_PID" 2>/dev/null
ATT_PID=""
umount_hyd "$M"
stop_repl

# (b) timeouts, each closing what it should and nothing else.
REPL_OPTS="-v --header-timeout 2 --idle-timeout 3" start_repl "$port" "s=$T/src"
CAT=$(ls "$T/state/s/catalog/"*.db | head -n 1)
ids=$(sql "$CAT" "select lower(hex(id)) from chunk where id != zeroblob(32) group by id limit 1024")
[ -n "$ids" ] || ids=$(sql "$(manifests_db s "$T/man.db")" "select lower(hex(id)) from chunk group by id limit 1024")
echo "$ids" | python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes.fromhex(l.strip()) for l in sys.stdin if l.strip()))' >"$T/ids.bin"
log "batch of $(($(stat -c %s "$T/ids.bin") / 32)) chunk ids for the reader that stops"
timeout 300 python3 - "$port" "$T/ids.bin" <<'PY' || die "(b) timeouts"
import socket, subprocess, sys, time
port, ids = int(sys.argv[1]), open(sys.argv[2], "rb").read()
BOUND = 60

def conn(rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    return s

def closed(s, wait):
    """True once the server closed s (EOF or reset) within wait seconds."""
    s.settimeout(wait)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False

def answer(s):
    """Read one HTTP answer (Content-Length body) and return its status."""
    s.settimeout(BOUND)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        assert d, "closed before an answer"
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0]
    while len(rest) < n:
        d = s.recv(65536)
        assert d, "closed in a body"
        rest += d
    assert len(rest) == n, "unasked bytes"
    return int(head.split(b" ")[1])

GET = b"GET /v1/s/HEAD HTTP/1.1\r\nHost: x\r\n\r\n"
# a client that trickles its head: one byte every 0.5 s, forever
slow = conn()
slow.sendall(b"GET /v1/s/HEAD HTTP/1.1\r\nX-Slow: ")
t0 = time.monotonic()
slow.settimeout(0.5)
while True:
    try:
        if not slow.recv(65536):
            break
    except socket.timeout:
        pass
    except ConnectionResetError:
        break
    assert time.monotonic() - t0 < BOUND, "a trickled head was never cut"
    try:
        slow.send(b"y")
    except OSError:
        break
print("ok: a trickled request head was cut off")
silent = conn()
assert closed(silent, BOUND), "a connection that sent nothing stayed open"
print("ok: a connection that sent nothing was closed")
idle = conn()
idle.sendall(GET)
assert answer(idle) == 200
assert closed(idle, BOUND), "an idle keep-alive connection stayed open"
print("ok: an idle keep-alive connection was closed")
# busy for 10 s, longer than both timeouts: answered throughout
busy = conn()
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < 10:
    busy.sendall(GET)
    assert answer(busy) == 200, "a busy keep-alive connection lost an answer"
    n += 1
    time.sleep(0.2)
print("ok: a keep-alive connection asking every 0.2 s was answered %d times over 10 s" % n)
# a reader that stops: a batch of every chunk, nothing read
lazy = conn(rcvbuf=4096)
lazy.sendall(b"POST /v1/s/chunks HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(ids) + ids)
# Nothing is read from here on; the server's end of the connection leaves
# "established" when it is cut (the client's end cannot tell before it
# reads what is queued).
t0 = time.monotonic()
mine = ":%d" % lazy.getsockname()[1]
while True:
    out = subprocess.run(["ss", "-Htn", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True, check=True).stdout
    if not any(line.split()[-1].endswith(mine) for line in out.splitlines() if line.strip()):
        break
    assert time.monotonic() - t0 < BOUND, "a client that stopped reading was never cut off"
    time.sleep(0.2)
print("ok: a client that stopped reading its answer was cut off")
PY
for why in "header timeout" "idle timeout" "answer not read"; do
	grep -q "connection closed why=\"$why\"" "$T/repl.log" || die "(b) the log never says: connection closed why=\"$why\""
done
ok "(b) trickled head, silent and idle connections closed by their timeouts, a stalled reader cut off; a busy keep-alive connection kept"
stop_repl

# (c) the per-address cap.
REPL_OPTS="--max-conns-per-addr 4" start_repl "$port" "s=$T/src"
timeout 300 python3 - "$port" <<'PY' || die "(c) per-address cap"
import socket, sys, time
port = int(sys.argv[1])
GET = b"GET /v1/s/HEAD HTTP/1.1\r\nHost: x\r\n\r\n"

def conn(src):
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.settimeout(60)
    return s

def status(s):
    """The status of one answer to GET, or None when closed unanswered."""
    try:
        s.sendall(GET)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                return None
            buf += d
    except (ConnectionResetError, BrokenPipeError):
        return None
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0]
    while len(rest) < n:
        rest += s.recv(65536)
    return int(head.split(b" ")[1])

four = [conn("127.0.0.3") for _ in range(4)]
for s in four:
    assert status(s) == 200, "one of the first four was refused"
fifth = conn("127.0.0.3")
assert status(fifth) is None, "a fifth connection from 127.0.0.3 was answered"
other = conn("127.0.0.2")
assert status(other) == 200, "127.0.0.2 was refused"
print("ok: the fifth from 127.0.0.3 closed unanswered, 127.0.0.2 answered")
four.pop().close()
t0 = time.monotonic()
while True:  # until the server has seen the close
    s = conn("127.0.0.3")
    if status(s) == 200:
        break
    s.close()
    assert time.monotonic() - t0 < 60, "127.0.0.3 never got in again"
    time.sleep(0.1)
for s in four:
    assert status(s) == 200, "a connection under the cap lost its keep-alive"
print("ok: after one of the four closed, 127.0.0.3 got in again")
PY
grep -q 'connections refused why="per-address cap" addr=127.0.0.3' "$T/repl.log" || die "(c) no log line for the per-address cap"
ok "(c) per-address cap: the fifth from one address refused, another address and a freed slot get in"
stop_repl
