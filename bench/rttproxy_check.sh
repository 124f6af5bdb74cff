#!/usr/bin/env bash
# bench/rttproxy_check.sh BUILD_DIR — checks bench/rttproxy.c on a veth
# pair between two network namespaces, and measures it:
#   1. correctness through the proxy: 1-byte ping-pong (median RTT within
#      1 ms of 2 * ONE_WAY_MS), 200 concurrent connections doing verified
#      request/response rounds, half-close both ways, 64 MiB each way at
#      once (bytes compared by SHA-256);
#   2. throughput of one bulk stream (sender in rtpA, proxy and reader in
#      rtpB), unshaped and with tbf at RATE on both ends, for each one-way
#      delay, REPS times (min / median / max), and the proxy's CPU.
# Needs root, iproute2 and python3. Namespaces rtpA (10.77.0.1) and rtpB
# (10.77.0.2), veth rtpa/rtpb; all removed at the end, whatever happens.
# Knobs (environment): RATE [2gbit]  DELAYS ["10 25 50 75"] (one-way ms)
#   SIZE [2048] MiB a bulk run  REPS [3]  THREADS [2] (--threads)
#   ONLY [all]: "check" or "bench" for half of it.
set -euo pipefail
B=${1:?usage: bench/rttproxy_check.sh BUILD_DIR (e.g. build/release)}
PROXY=$(cd "$B" && pwd)/bench/rttproxy
RATE=${RATE:-2gbit}
DELAYS=${DELAYS:-10 25 50 75}
SIZE=${SIZE:-2048}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
ONLY=${ONLY:-all}
A=rtpA Z=rtpB IPA=10.77.0.1 IPZ=10.77.0.2
PBULK=7701 PECHO=7702 PREV=7703 PPROXY=7710

[ "$(id -u)" = 0 ] || { echo "rttproxy_check: needs root (namespaces, tbf)" >&2; exit 2; }
[ -x "$PROXY" ] || { echo "rttproxy_check: $PROXY not built (make VARIANT=release $PROXY)" >&2; exit 2; }
W=$(mktemp -d /tmp/rttproxy-check.XXXXXX)
PIDS=() PROXY_PID=
cleanup() {
	for p in "${PIDS[@]}" $PROXY_PID; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del $A 2>/dev/null || true
	ip netns del $Z 2>/dev/null || true
	ip link del rtpa 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
NA="ip netns exec $A" NZ="ip netns exec $Z"

cat >"$W/h.py" <<'PY'
import hashlib, os, random, socket, socketserver, statistics, sys, threading, time

def bulk_serve(port):  # each connection: 8-byte count, then that many bytes
    buf = memoryview(os.urandom(4 << 20))
    class H(socketserver.BaseRequestHandler):
        def handle(self):
            s = self.request
            n = int.from_bytes(recv_exact(s, 8), "big")
            while n > 0:
                k = min(n, len(buf))
                s.sendall(buf[:k])
                n -= k
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
    serve(port, H)

def echo_serve(port):  # echo; on EOF, echo the rest, then half-close
    class H(socketserver.BaseRequestHandler):
        def handle(self):
            s = self.request
            while True:
                d = s.recv(1 << 20)
                if not d:
                    break
                s.sendall(d)
            s.shutdown(socket.SHUT_WR)
    serve(port, H)

def rev_serve(port, out):  # send 1 MiB, half-close, then read to EOF
    class H(socketserver.BaseRequestHandler):
        def handle(self):
            s = self.request
            s.sendall(pattern(1 << 20))
            s.shutdown(socket.SHUT_WR)
            h, n = hashlib.sha256(), 0
            while True:
                d = s.recv(1 << 20)
                if not d:
                    break
                h.update(d); n += len(d)
            with open(out, "a") as f:
                f.write("%d %s\n" % (n, h.hexdigest()))
    serve(port, H)

def serve(port, handler):
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    socketserver.ThreadingTCPServer.request_queue_size = 1024
    srv = socketserver.ThreadingTCPServer(("0.0.0.0", port), handler)
    print("ready", flush=True)
    srv.serve_forever()

def pattern(n):
    return bytes(i * 7 % 251 for i in range(256)) * (n // 256)

def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise EOFError("EOF after %d of %d bytes" % (len(b), n))
        b += d
    return bytes(b)

def conn(port, host="127.0.0.1"):
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def bulk(host, port, mib):  # prints Mbit/s (first byte to EOF), s to it
    n = mib << 20
    buf = bytearray(4 << 20)
    mv = memoryview(buf)
    t0 = time.monotonic()
    s = conn(port, host)
    s.sendall(n.to_bytes(8, "big"))
    got, t1 = 0, None
    while True:
        k = s.recv_into(mv)
        if k == 0:
            break
        if t1 is None:
            t1 = time.monotonic()
        got += k
    t2 = time.monotonic()
    assert got == n, "got %d of %d bytes" % (got, n)
    print("%.0f %.3f %.3f" % (got * 8 / (t2 - t1) / 1e6, t1 - t0, t2 - t0))

def ping(port, n, one_way):  # 1-byte ping-pong; RTTs after the first
    s = conn(port)
    t0 = time.monotonic()
    s.sendall(b"x"); recv_exact(s, 1)
    first = time.monotonic() - t0
    rtts = []
    for _ in range(n):
        t = time.monotonic()
        s.sendall(b"x"); recv_exact(s, 1)
        rtts.append((time.monotonic() - t) * 1000)
    s.shutdown(socket.SHUT_WR)
    assert s.recv(1) == b""
    rtts.sort()
    med = statistics.median(rtts)
    print("ping one-way %s ms: first exchange %.2f ms (expect %.1f), "
          "RTT min %.3f median %.3f p90 %.3f max %.3f ms (expect %.1f)" %
          (one_way, first * 1000, 4 * one_way, rtts[0], med,
           rtts[int(len(rtts) * 0.9)], rtts[-1], 2 * one_way))
    return abs(med - 2 * one_way) <= 1.0 and rtts[0] >= 2 * one_way - 0.1

def many(port, nconn, rounds):  # concurrent verified echo rounds
    errors, barrier = [], threading.Barrier(nconn)
    def one(i):
        rnd = random.Random(i)
        try:
            s = conn(port)
            barrier.wait()
            for _ in range(rounds):
                msg = rnd.randbytes(rnd.randint(1, 200000))
                s.sendall(msg)
                if recv_exact(s, len(msg)) != msg:
                    raise ValueError("echo differs")
            tail = rnd.randbytes(5000)
            s.sendall(tail)
            s.shutdown(socket.SHUT_WR)
            if recv_exact(s, len(tail)) != tail or s.recv(1) != b"":
                raise ValueError("half-close: tail or EOF wrong")
            s.close()
        except Exception as e:
            errors.append("conn %d: %r" % (i, e))
    t0 = time.monotonic()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(nconn)]
    for t in ts: t.start()
    for t in ts: t.join()
    print("many: %d connections x %d rounds in %.2f s, %d errors %s" %
          (nconn, rounds, time.monotonic() - t0, len(errors), errors[:3]))
    return not errors

def bigecho(port, mib):  # send and receive mib MiB at once, compare
    data = os.urandom(mib << 20)
    s = conn(port)
    got = bytearray()
    def rd():
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            got.extend(d)
    t = threading.Thread(target=rd); t.start()
    t0 = time.monotonic()
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    t.join()
    ok = hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    print("bigecho: %d MiB both ways in %.2f s, identical: %s" %
          (mib, time.monotonic() - t0, ok))
    return ok

def rev(port, out):  # the server half-closes first; we send after its EOF
    s = conn(port)
    got = bytearray()
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += d
    data = os.urandom(3 << 20)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # EOF once the server closed
    s.close()
    for _ in range(50):
        if os.path.exists(out) and open(out).read().strip():
            break
        time.sleep(0.1)
    line = open(out).read().split()
    ok = bytes(got) == pattern(1 << 20) and line == [
        str(len(data)), hashlib.sha256(data).hexdigest()]
    print("half-close, server first: %d bytes in, server got %s: %s" %
          (len(got), line[0] if line else "nothing", ok))
    return ok

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "bulk-serve": bulk_serve(int(args[0]))
    elif cmd == "echo-serve": echo_serve(int(args[0]))
    elif cmd == "rev-serve": rev_serve(int(args[0]), args[1])
    elif cmd == "bulk": bulk(args[0], int(args[1]), int(args[2]))
    elif cmd == "ping": sys.exit(0 if ping(int(args[0]), int(args[1]), float(args[2])) else 1)
    elif cmd == "many": sys.exit(0 if many(int(args[0]), int(args[1]), int(args[2])) else 1)
    elif cmd == "bigecho": sys.exit(0 if bigecho(int(args[0]), int(args[1])) else 1)
    elif cmd == "rev": sys.exit(0 if rev(int(args[0]), args[1]) else 1)
PY

ip netns del $A 2>/dev/null || true
ip netns del $Z 2>/dev/null || true
ip link del rtpa 2>/dev/null || true  # a veth left by an interrupted run
ip netns add $A
ip netns add $Z
ip link add rtpa type veth peer name rtpb
ip link set rtpa netns $A
ip link set rtpb netns $Z
ip -n $A addr add $IPA/24 dev rtpa
ip -n $Z addr add $IPZ/24 dev rtpb
for ns in $A $Z; do ip -n $ns link set lo up; done
ip -n $A link set rtpa up
ip -n $Z link set rtpb up

shape() {  # shape RATE|none: tbf on both ends, burst as bench/link.sh's
	local bps burst
	$NA tc qdisc del dev rtpa root 2>/dev/null || true
	$NZ tc qdisc del dev rtpb root 2>/dev/null || true
	[ "$1" = none ] && return
	bps=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+(?:\.\d+)?)([kmg]?)bit', sys.argv[1]); print(int(float(m.group(1))*{'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)]))" "$1")
	burst=$((bps / 8 / 250 * 2))
	[ "$burst" -lt 65536 ] && burst=65536
	$NA tc qdisc add dev rtpa root tbf rate "$1" burst "$burst" latency 50ms
	$NZ tc qdisc add dev rtpb root tbf rate "$1" burst "$burst" latency 50ms
}

start_bg() {  # start_bg LOG CMD...: run in the background, wait for "ready"
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	LAST=$!
	case $log in */proxy.log) PROXY_PID=$LAST ;; *) PIDS+=("$LAST") ;; esac
	for _ in $(seq 100); do
		grep -q ready "$log" && return 0
		kill -0 "$LAST" 2>/dev/null || { cat "$log" >&2; exit 1; }
		sleep 0.05
	done
	echo "rttproxy_check: $* not ready" >&2
	exit 1
}

proxy_start() {  # proxy_start ONE_WAY_MS: proxies for the three servers
	start_bg "$W/proxy.log" $NZ "$PROXY" --threads "$THREADS" \
		127.0.0.1:$PPROXY $IPA:$PBULK "$1" \
		127.0.0.1:$((PPROXY + 1)) $IPA:$PECHO \
		127.0.0.1:$((PPROXY + 2)) $IPA:$PREV
}
proxy_stop() {
	local rc=0
	kill -TERM "$PROXY_PID"
	wait "$PROXY_PID" || rc=$?
	PROXY_PID=
	[ $rc = 0 ] || { echo "rttproxy_check: rttproxy exited $rc on SIGTERM" >&2; exit 1; }
}
mmm() {  # min/median/max of the arguments
	printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "%s/%s/%s", a[1], a[int((NR+1)/2)], a[NR]}'
}
cpu_s() {  # user + system CPU seconds of PID so far
	awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz}' "/proc/$1/stat"
}

start_bg "$W/bulk.log" $NA python3 "$W/h.py" bulk-serve $PBULK
start_bg "$W/echo.log" $NA python3 "$W/h.py" echo-serve $PECHO
start_bg "$W/rev.log" $NA python3 "$W/h.py" rev-serve $PREV "$W/rev.out"
fail=0

if [ "$ONLY" != bench ]; then
	echo "== correctness (unshaped link)"
	shape none
	for d in 0 10 25 75; do
		proxy_start "$d"
		$NZ python3 "$W/h.py" ping $((PPROXY + 1)) 200 "$d" || { echo "FAIL: RTT accuracy at one-way $d ms"; fail=1; }
		proxy_stop
	done
	proxy_start 25
	$NZ python3 "$W/h.py" many $((PPROXY + 1)) 200 5 || { echo "FAIL: many connections"; fail=1; }
	$NZ python3 "$W/h.py" bigecho $((PPROXY + 1)) 64 || { echo "FAIL: bigecho"; fail=1; }
	rm -f "$W/rev.out"
	$NZ python3 "$W/h.py" rev $((PPROXY + 2)) "$W/rev.out" || { echo "FAIL: half-close, server first"; fail=1; }
	proxy_stop
fi

if [ "$ONLY" != check ]; then
	echo "== throughput: one stream, $SIZE MiB, $REPS runs, proxy --threads $THREADS"
	printf '%-8s %-9s %-24s %-26s %s\n' rate one-way "Mbit/s min/med/max" \
		"proxy CPU % min/med/max" "first byte s"
	for rate in none "$RATE"; do
		shape "$rate"
		for d in direct 0 $DELAYS; do
			[ "$d" = direct ] || proxy_start "$d"
			rates=() cpus=() first=
			for _ in $(seq "$REPS"); do
				if [ "$d" = direct ]; then
					out=$($NZ python3 "$W/h.py" bulk $IPA $PBULK "$SIZE")
				else
					c0=$(cpu_s "$PROXY_PID")
					out=$($NZ python3 "$W/h.py" bulk 127.0.0.1 $PPROXY "$SIZE")
					c1=$(cpu_s "$PROXY_PID")
				fi
				set -- $out
				rates+=("$1")
				first=$2
				if [ "$d" != direct ]; then
					cpus+=("$(python3 -c "print('%.0f' % (100 * ($c1 - $c0) / $3))")")
				fi
			done
			[ "$d" = direct ] || proxy_stop
			printf '%-8s %-9s %-24s %-26s %s\n' "$rate" "$d" "$(mmm "${rates[@]}")" \
				"$([ "$d" = direct ] && echo - || mmm "${cpus[@]}")" "$first"
		done
	done
fi
[ $fail = 0 ] && echo "rttproxy_check: ok" || echo "rttproxy_check: FAILED"
exit $fail
