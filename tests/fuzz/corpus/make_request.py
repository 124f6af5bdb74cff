#!/usr/bin/env python3
"""make_request.py DIR — the seed requests of tests/fuzz/fuzz_request.c,
written into DIR as ok_* (the first answer is 2xx) and bad_* (an error
status, or no answer). The ids are the SHA-256 of the target's fixed
small files (each one chunk)."""
import hashlib
import os
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
hello = hashlib.sha256(b"hello, ferry\n").hexdigest()
world = hashlib.sha256(b"the other small file\n").hexdigest()
H = "Host: fuzz\r\n"


def req(method, path, headers="", body=b"", version="1.1"):
    head = "%s %s HTTP/%s\r\n%s%s" % (method, path, version, H, headers)
    if body:
        head += "Content-Length: %d\r\n" % len(body)
    return (head + "\r\n").encode() + body


seeds = {
    "ok_head": req("GET", "/v1/ns/HEAD"),
    "ok_head_method": req("HEAD", "/v1/ns/HEAD"),
    "ok_catalog": req("GET", "/v1/ns/catalog/1"),
    "ok_stats": req("GET", "/v1/ns/stats"),
    "ok_chunk": req("GET", "/v1/ns/chunk/" + hello),
    "ok_batch": req("POST", "/v1/ns/chunks", "Content-Type: application/octet-stream\r\n",
                    bytes.fromhex(hello) + bytes.fromhex(world)),
    "ok_pipelined": req("GET", "/v1/ns/HEAD") + req("GET", "/v1/ns/chunk/" + world)
    + req("GET", "/v1/ns/stats", "Connection: close\r\n"),
    "ok_http10": req("GET", "/v1/ns/HEAD", version="1.0"),
    "ok_expect": req("POST", "/v1/ns/chunks", "Expect: 100-continue\r\n", bytes.fromhex(hello)),
    "bad_delete": req("DELETE", "/v1/ns/HEAD"),
    "bad_no_namespace": req("GET", "/v1/nope/HEAD"),
    "bad_unknown_chunk": req("GET", "/v1/ns/chunk/" + "00" * 32),
    "bad_short_id": req("GET", "/v1/ns/chunk/abcd"),
    "bad_catalog_gen": req("GET", "/v1/ns/catalog/99"),
    "bad_delta_order": req("GET", "/v1/ns/delta/2/1"),
    "bad_url_long": req("GET", "/v1/ns/" + "a" * 4100),
    "bad_headers_big": req("GET", "/v1/ns/HEAD", "X-Pad: %s\r\n" % ("p" * 17000)),
    "bad_body_big": ("POST /v1/ns/chunks HTTP/1.1\r\n%sContent-Length: 10485760\r\n\r\n" % H).encode(),
    "bad_batch_odd": req("POST", "/v1/ns/chunks", "", b"x" * 33),
    "bad_garbage": b"\x00\x01\x02junk\r\n\r\n",
    "bad_half_request": b"GET /v1/ns/HE",
    "bad_empty": b"",
    "bad_manifest": req("GET", "/v1/ns/manifest/1/2?wait=0"),
    "bad_dotdot": req("GET", "/v1/../etc/passwd"),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print(len(seeds))
