#!/usr/bin/env python3
"""bench/tts_probe.py — what the link of bench/tts.sh really holds: bulk TCP
streams from the source's namespace through bench/rttproxy to the
destination, timed at the reader.

  tts_probe.py serve HOST:PORT          each connection: an 8-byte count N
                                        (big-endian), then N bytes back
  tts_probe.py pull HOST:PORT BYTES [--streams K]
                                        K connections at once, BYTES in all;
                                        one JSON line: bytes, seconds
                                        (first connect to last byte, so
                                        the proxy's handshake round trip
                                        is in it), mbit (the rate held)

Standard library only; the server runs until killed.
"""
import argparse
import json
import os
import socket
import socketserver
import sys
import threading
import time


def hostport(s):
    h, _, p = s.rpartition(":")
    return h, int(p)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise OSError("connection closed early")
        b += k
    return b


def serve(addr):
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

    class S(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    with S(hostport(addr), H) as srv:
        print("tts_probe: serving %s" % addr, flush=True)
        srv.serve_forever()


def pull(addr, total, streams):
    per = total // streams
    got, errs = [0] * streams, []

    def one(i):
        try:
            s = socket.create_connection(hostport(addr))
            s.sendall(per.to_bytes(8, "big"))
            b = bytearray(4 << 20)
            while True:
                k = s.recv_into(b)
                if not k:
                    break
                got[i] += k
            s.close()
        except OSError as e:
            errs.append(str(e))

    t0 = time.monotonic()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    n = sum(got)
    print(json.dumps({"streams": streams, "bytes": n, "seconds": round(secs, 3),
                      "mbit": round(n * 8 / 1e6 / secs, 1), "errors": errs}))
    return 0 if n == per * streams and not errs else 1


def main():
    ap = argparse.ArgumentParser(description="bulk streams through the bench link")
    ap.add_argument("mode", choices=["serve", "pull"])
    ap.add_argument("addr")
    ap.add_argument("bytes", nargs="?", type=int, default=256 << 20)
    ap.add_argument("--streams", type=int, default=1)
    a = ap.parse_args()
    if a.mode == "serve":
        return serve(a.addr)
    return pull(a.addr, a.bytes, max(1, a.streams))


if __name__ == "__main__":
    sys.exit(main())
