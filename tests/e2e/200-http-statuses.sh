#!/usr/bin/env bash
# 200: the HTTP answers docs/protocol.md and ferry-replicator(1) promise,
# from the real replicator, over raw sockets (python3), one persistent
# connection where keep-alive is promised:
#  - GET and HEAD of HEAD, catalog and chunk: status, Content-Type,
#    Cache-Control (no-cache / immutable), ETag (the catalog's is the
#    SHA-256 of the bytes sent, the chunk's its id), and HEAD answers the
#    GET's headers with no body (the next answer on the connection parses);
#  - pipelining: several requests in one write are answered in order;
#  - 405 with Allow (POST on HEAD, GET on chunks, DELETE), 413 (a batch of
#    1025 ids, a Content-Length over 32 KiB), 414 (URL over 4 KiB; 4000
#    bytes is a 404), 431 (headers over 16 KiB; 15 KiB pass), 503 with
#    Retry-After for a namespace whose scan failed (not_ready) and for a
#    manifest still hashing (hashing, Retry-After: 1, no-store); the same
#    manifest once hashed: 200, ETag "m-GEN-INO", immutable;
#  - every error: the one-line JSON body {"error","detail"}, newline-ended,
#    application/json.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
[ -x "$REPL" ] || die "ferry-replicator not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
S="$T/src"
mkdir -p "$S"
head -c 10000 /dev/urandom >"$S/a.bin" # one chunk
head -c 700000 /dev/urandom >"$S/big.bin"
port=$(free_port)
# Generation 1, hashed: the restart below keeps these manifests.
start_repl "$port" "ns=$S"
wait_hashed "$port" ns 60 || die "generation 1 not hashed"
stop_repl || die "replicator did not exit 0 on SIGTERM"

# Generation 2 adds a file the hasher reaches only after 15 s (the test
# hook), and a namespace whose scan cannot start (its state dir is a file).
head -c 5000 /dev/urandom >"$S/new.bin"
: >"$T/state/broken"
FERRY_HASH_DELAY_MS=15000 "$REPL" -l "127.0.0.1:$port" -s "$T/state" --scan-threads 1 \
	"ns=$S" "broken=$S" >>"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_for 60 grep -q ' ready ns=ns generation=2 ' "$T/repl.log" || { cat "$T/repl.log"; die "generation 2 not ready"; }
wait_for 60 grep -q 'scan failed ns=broken' "$T/repl.log" || { cat "$T/repl.log"; die "broken namespace did not fail its scan"; }
CAT2="$T/state/ns/catalog/2.db"
chunk=$(sql "$CAT2" "select lower(hex(c.id)) from chunk c join dirent d on d.ino=c.ino where d.name=cast('a.bin' as blob)")
[ ${#chunk} = 64 ] || die "no chunk id for a.bin in generation 2"
pino=$(sql "$CAT2" "select p.ino from pending p join dirent d on d.ino=p.ino where d.name=cast('new.bin' as blob)")
[ -n "$pino" ] || die "new.bin is not pending in generation 2"

timeout 120 python3 - "$port" "$chunk" "$pino" "$T/state/ns/catalog/2.db.zst" <<'PY' || die "HTTP checks failed"
import hashlib, json, socket, sys, time

port, chunk, pino, catzst = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
IMM = "public, max-age=31536000, immutable"


class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read(self, head=False):
        """One answer: (status, {lower-case header: value}, body)."""
        status = int(self._line().split(b" ", 2)[1])
        hdr = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            hdr[k.strip().lower()] = v.strip()
        body = b""
        if head:
            return status, hdr, body
        if hdr.get("transfer-encoding") == "chunked":
            while True:
                n = int(self._line().split(b";")[0], 16)
                if n == 0:
                    self._line()
                    break
                body += self._take(n)
                self._take(2)
        else:
            body = self._take(int(hdr.get("content-length", "0")))
        return status, hdr, body

    def closed(self):
        """True when the server closed (after what it sent)."""
        self.s.settimeout(10)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
                self.buf += d
        except socket.timeout:
            return False


def req(method, path, extra=b"", body=b""):
    r = b"%s %s HTTP/1.1\r\nHost: t\r\n" % (method.encode(), path.encode())
    if body:
        r += b"Content-Length: %d\r\n" % len(body)
    return r + extra + b"\r\n" + body


def error(ans, status, code, what):
    st, h, b = ans
    assert st == status, "%s: status %d, want %d: %r" % (what, st, status, b[:200])
    assert h.get("content-type") == "application/json", (what, h)
    assert b.endswith(b"\n") and b.count(b"\n") == 1, (what, b)
    d = json.loads(b)
    assert d["error"] == code and isinstance(d["detail"], str), (what, d)
    print("# %s -> %d %s" % (what, st, b.decode().strip()[:120]))
    return h


# 503 hashing: first, while the hasher still waits out its 15 s.
c = Conn()
c.send(req("GET", "/v1/ns/manifest/2/%d?wait=0" % pino))
h = error(c.read(), 503, "hashing", "manifest still hashing")
assert h.get("retry-after") == "1" and h.get("cache-control") == "no-store", h
c.send(req("GET", "/v1/broken/HEAD"))
h = error(c.read(), 503, "not_ready", "namespace whose scan failed")
assert h.get("retry-after", "").isdigit(), h
print("ok - 503 with Retry-After: manifest still hashing (1, no-store), namespace not ready (%s)" % h["retry-after"])

# GET and HEAD of HEAD, catalog, chunk on one connection.
c.send(req("GET", "/v1/ns/HEAD"))
st, h, b = c.read()
assert st == 200 and b == b"2\n", (st, b)
assert h["content-type"] == "text/plain" and h["cache-control"] == "no-cache", h
get_head = h
c.send(req("GET", "/v1/ns/catalog/2"))
st, h, cat = c.read()
assert st == 200 and h["content-type"] == "application/zstd", (st, h)
assert cat == open(catzst, "rb").read(), "catalog bytes differ from the published file"
assert h["etag"] == '"%s"' % hashlib.sha256(cat).hexdigest(), h["etag"]
assert h["cache-control"] == IMM, h
get_cat = h
c.send(req("GET", "/v1/ns/chunk/" + chunk))
st, h, frame = c.read()
assert st == 200 and h["content-type"] == "application/octet-stream", (st, h)
assert h["etag"] == '"%s"' % chunk and h["cache-control"] == IMM, h
assert frame[:4] == b"FRC1" and int.from_bytes(frame[8:12], "little") == 10000, frame[:16]
get_chunk = h
print("ok - GET HEAD, catalog (ETag = SHA-256 of the body), chunk (ETag = id): types, immutable Cache-Control")

# HEAD?catalog=1: the current catalog in the same answer, its generation
# in Ferry-Generation, not cacheable; any other query is HEAD's text.
c.send(req("GET", "/v1/ns/HEAD?catalog=1"))
st, h, b = c.read()
assert st == 200 and h["content-type"] == "application/zstd", (st, h)
assert h["ferry-generation"] == "2" and h["cache-control"] == "no-cache", h
assert b == cat, "HEAD?catalog=1 bytes differ from catalog/2"
c.send(req("GET", "/v1/ns/HEAD?catalog=0&x=1"))
st, h, b = c.read()
assert st == 200 and b == b"2\n" and "ferry-generation" not in h, (st, h, b)
print("ok - GET HEAD?catalog=1: catalog/2's bytes, Ferry-Generation: 2, no-cache; another query: HEAD's text")

# HEAD: the GET's headers, no body; the answer after it parses.
for path, want in (("/v1/ns/HEAD", get_head), ("/v1/ns/catalog/2", get_cat), ("/v1/ns/chunk/" + chunk, get_chunk)):
    c.send(req("HEAD", path))
    st, h, _ = c.read(head=True)
    assert st == 200, (path, st)
    for k in ("content-type", "content-length", "etag", "cache-control"):
        assert h.get(k) == want.get(k), (path, k, h.get(k), want.get(k))
c.send(req("GET", "/v1/ns/HEAD"))
st, _, b = c.read()
assert st == 200 and b == b"2\n", "the answer after the HEADs does not parse: %r" % b
print("ok - HEAD answers the GET's headers (length, ETag...) and no body")

# Pipelining: five requests in one write, answered in order.
c.send(req("GET", "/v1/ns/chunk/" + chunk) + req("GET", "/v1/nope/HEAD") + req("HEAD", "/v1/ns/catalog/2")
       + req("GET", "/v1/ns/HEAD") + req("GET", "/v1/ns/stats"))
st, h, b = c.read()
assert st == 200 and b == frame, "pipelined 1: %d" % st
error(c.read(), 404, "not_found", "pipelined 2 (unknown namespace)")
st, h, b = c.read(head=True)
assert st == 200 and h["etag"] == get_cat["etag"], "pipelined 3"
st, h, b = c.read()
assert st == 200 and b == b"2\n", "pipelined 4"
st, h, b = c.read()
assert st == 200 and json.loads(b)["generation"] == 2, "pipelined 5"
print("ok - five pipelined requests answered in order on one connection")

# 405 with Allow; the connection goes on.
h = error((c.send(req("POST", "/v1/ns/HEAD", body=b"x")), c.read())[1], 405, "method_not_allowed", "POST on HEAD")
assert h["allow"] == "GET, HEAD", h
h = error((c.send(req("GET", "/v1/ns/chunks")), c.read())[1], 405, "method_not_allowed", "GET on chunks")
assert h["allow"] == "POST", h
h = error((c.send(req("DELETE", "/v1/ns/catalog/2")), c.read())[1], 405, "method_not_allowed", "DELETE on a catalog")
assert h["allow"] == "GET, HEAD", h
c.send(req("GET", "/v1/ns/HEAD"))
assert c.read()[0] == 200
print("ok - 405 with Allow (GET, HEAD / POST); keep-alive goes on")

# Bounds. Under them: answered as usual.
error((c.send(req("GET", "/v1/ns/" + "x" * 4000)), c.read())[1], 404, "not_found", "a 4000-byte URL")
c.send(req("GET", "/v1/ns/HEAD", extra=b"X-Pad: " + b"p" * 15000 + b"\r\n"))
assert c.read()[0] == 200, "15 KiB of headers refused"
# Over them: a fresh connection each (the server may close after).
def fresh(data, status, code, what):
    k = Conn()
    k.send(data)
    h = error(k.read(), status, code, what)
    k.s.close()
    return h
fresh(req("GET", "/v1/ns/" + "x" * 4100), 414, "uri_too_long", "a 4100-byte URL")
fresh(req("GET", "/v1/ns/HEAD", extra=b"X-Pad: " + b"p" * 17000 + b"\r\n"), 431, "headers_too_large", "17 KB of one header")
fresh(req("GET", "/v1/ns/HEAD", extra=b"".join(b"X-%d: %s\r\n" % (i, b"q" * 1000) for i in range(20))),
      431, "headers_too_large", "20 headers of 1 KB")
ids = bytes.fromhex(chunk) * 1025
fresh(req("POST", "/v1/ns/chunks", body=ids), 413, "too_large", "a batch of 1025 ids")
fresh(b"POST /v1/ns/chunks HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n", 413, "too_large",
      "Content-Length 10 MB (no body sent)")
print("ok - 414 over 4 KiB of URL, 431 over 16 KiB of headers, 413 over 1024 ids or 32 KiB of body")

# The pending manifest once hashed: 200, immutable, ETag "m-2-INO".
c.send(req("GET", "/v1/ns/manifest/2/%d?wait=30" % pino))
st, h, b = c.read()
assert st == 200, "manifest after hashing: %d %r" % (st, b[:200])
assert h["content-type"] == "application/x-ferry-manifests" and h["cache-control"] == IMM, h
assert h["etag"] == '"m-2-%d"' % pino, h["etag"]
assert b[:8] == b"FERRYMN1" and int.from_bytes(b[8:16], "little") == 2, b[:16]
print("ok - the manifest once hashed: 200, ETag \"m-2-%d\", immutable" % pino)
PY
kill -0 "$REPL_PID" || die "the replicator died"
stop_repl || die "replicator did not exit 0 on SIGTERM"
ok "replicator still serving after all of it, then exits 0 on SIGTERM"
