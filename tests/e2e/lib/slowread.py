#!/usr/bin/env python3
"""slowread.py: clients that ask a replicator for large answers and never
read them, beside one client that asks as a user would and times each
answer. Used by e2e 285 (a bounded run) and by hand for the full one
(docs/security.md, "Slow readers"):

  slowread.py --port P --ns NS --path pack/G/I/0 --conns 4200 --addrs 34 \
      --token-file A --probe-token-file B --probe-path chunk/ID \
      --pid REPL_PID --seconds 60

Each attacking connection comes from 127.0.0.N (N = 2 .. addrs+1, round
robin), sets a small receive buffer (--rcvbuf), sends one GET of --path
and reads nothing; one the server closes is opened again (at most
--reopen a second). The probe asks --probe-path every --every seconds on
a fresh connection from 127.0.0.1 and reads the whole answer. The last
line printed is JSON: the probe's slowest answer and failures, the
server's peak resident memory (VmRSS sampled, and VmHWM), how many
attacking connections were open at most and how many the server closed.
"""
import argparse
import json
import os
import select
import socket
import sys
import time


def rss_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def request(host, port, path, token, close=False):
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    conn = "Connection: close\r\n" if close else ""
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}{conn}"
            "\r\n").encode()


def fetch_ids(args, token, path):
    """The chunk ids of a pack answer (id, then a frame whose header says
    its length), for a POST /chunks body."""
    s = socket.create_connection(("127.0.0.1", args.port), timeout=30)
    s.sendall(request("127.0.0.1", args.port, f"/v1/{args.ns}/{path}",
                      token, close=True).replace(b"HTTP/1.1", b"HTTP/1.0"))
    buf = b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        buf += d
    s.close()
    body = buf.partition(b"\r\n\r\n")[2]
    ids, off = [], 0
    while off + 48 <= len(body):
        ids.append(body[off:off + 32])
        stored = int.from_bytes(body[off + 44:off + 48], "little")
        off += 48 + stored
    return ids


def probe(args, token):
    """One whole answer on a fresh connection: (seconds, status or None)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", args.port),
                                     timeout=args.probe_timeout)
        s.settimeout(args.probe_timeout)
        t_conn = time.monotonic() - t0
        s.sendall(request("127.0.0.1", args.port,
                          f"/v1/{args.ns}/{args.probe_path}", token,
                          close=True))
        buf = b""
        t_first = None
        while True:
            d = s.recv(65536)
            if not d:
                break
            if t_first is None:
                t_first = time.monotonic() - t0
            buf += d
        head, _, body = buf.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        length, chunked = None, False
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        if chunked and not body.endswith(b"0\r\n\r\n"):
            raise OSError("chunked answer cut")
        if not chunked and (length is None or len(body) != length):
            raise OSError("answer cut or unframed")
        s.close()
        if args.trace:
            print(f"slowread: probe connect {t_conn:.3f} s, first byte "
                  f"{t_first or 0:.3f} s, whole "
                  f"{time.monotonic() - t0:.3f} s", file=sys.stderr)
        return time.monotonic() - t0, status
    except OSError as e:
        print(f"slowread: probe failed: {e}", file=sys.stderr)
        return time.monotonic() - t0, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ns", required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--conns", type=int, default=300)
    ap.add_argument("--addrs", type=int, default=34)
    ap.add_argument("--rcvbuf", type=int, default=4096)
    ap.add_argument("--token-file")
    ap.add_argument("--probe-token-file")
    ap.add_argument("--probe-path", required=True)
    ap.add_argument("--probe-timeout", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--post", action="store_true",
                    help="POST /chunks with the ids of --path (a pack)")
    ap.add_argument("--trace", action="store_true",
                    help="each probe's times on stderr")
    ap.add_argument("--reopen", type=int, default=200,
                    help="new connections a second at most")
    a = ap.parse_args()

    def tok(path):
        if not path:
            return None
        with open(path) as f:
            return f.read().split()[0]

    token, ptoken = tok(a.token_file), tok(a.probe_token_file)
    if a.post:
        ids = fetch_ids(a, ptoken, a.path)
        if not ids:
            sys.exit("slowread: no chunk ids in " + a.path)
        body = b"".join((ids * (1024 // len(ids) + 1))[:1024])
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        req = (f"POST /v1/{a.ns}/chunks HTTP/1.1\r\nHost: 127.0.0.1:"
               f"{a.port}\r\n{auth}Content-Type: application/octet-stream"
               f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    else:
        req = request("127.0.0.1", a.port, f"/v1/{a.ns}/{a.path}", token)
    ep = select.epoll()
    socks = {}  # fd -> [socket, connected]
    opened = closed = failed = 0
    most = 0
    k = 0
    WATCH = select.EPOLLRDHUP | select.EPOLLERR | select.EPOLLHUP

    def open_one():
        nonlocal opened, failed, k
        src = f"127.0.0.{2 + k % a.addrs}"
        k += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
        s.setblocking(False)
        try:
            s.bind((src, 0))
            s.connect_ex(("127.0.0.1", a.port))
        except OSError:
            failed += 1
            s.close()
            return
        socks[s.fileno()] = [s, False]
        ep.register(s.fileno(), select.EPOLLOUT | WATCH)
        opened += 1

    def drop(fd):
        nonlocal closed
        ep.unregister(fd)
        socks.pop(fd)[0].close()
        closed += 1

    end = time.monotonic() + a.seconds
    next_probe = time.monotonic() + 1.0
    slowest, fails, probes, statuses = 0.0, 0, 0, {}
    peak_rss = 0
    budget, last = 0.0, time.monotonic()
    while len(socks) < a.conns and time.monotonic() < end:
        open_one()
    while time.monotonic() < end:
        for fd, ev in ep.poll(0.05):
            if fd not in socks:
                continue
            s, up = socks[fd]
            # a reset or a close the server sent (never read: the
            # answer's bytes stay in the small receive buffer)
            if ev & (select.EPOLLERR | select.EPOLLHUP | select.EPOLLRDHUP):
                drop(fd)
                continue
            if not up and ev & select.EPOLLOUT:
                try:
                    s.send(req)
                except OSError:
                    drop(fd)
                    continue
                socks[fd][1] = True
                ep.modify(fd, WATCH)
        now = time.monotonic()
        budget = min(a.reopen, budget + (now - last) * a.reopen)
        last = now
        while len(socks) < a.conns and budget >= 1:
            open_one()
            budget -= 1
        most = max(most, len(socks))
        if a.pid:
            peak_rss = max(peak_rss, rss_kb(a.pid, "VmRSS"))
        if now >= next_probe:
            secs, st = probe(a, ptoken)
            probes += 1
            statuses[str(st)] = statuses.get(str(st), 0) + 1
            slowest = max(slowest, secs)
            if st != 200:
                fails += 1
            next_probe = time.monotonic() + a.every
    out = {
        "probes": probes,
        "probe_failures": fails,
        "probe_statuses": statuses,
        "probe_slowest_s": round(slowest, 3),
        "attack_opened": opened,
        "attack_closed_by_server": closed,
        "attack_open_most": most,
        "attack_bind_failures": failed,
        "server_rss_peak_mb": round(peak_rss / 1024, 1),
        "server_hwm_mb": round(rss_kb(a.pid, "VmHWM") / 1024, 1)
        if a.pid else 0,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
