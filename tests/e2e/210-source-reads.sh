#!/usr/bin/env bash
# 210: how the replicator reads chunks from DIR (ferry-replicator(1),
# docs/protocol.md):
#  (a) it never follows a symlink: after the scan, a source file is
#      replaced by a symlink to a file outside DIR with the very same
#      bytes (so re-hashing alone would let it through), and a directory
#      by a symlink to a copy outside DIR; their chunks are refused, by
#      GET and in a batch, and a mount's read of the file fails with EIO;
#      the bytes outside DIR never go out;
#  (b) a batch whose source changed mid-way: the status (200) is sent,
#      the frames before the changed chunk arrive whole, then the
#      connection is cut (no chunked-body end), the chunks after it are
#      never sent, and the mismatch is counted.
# The replicator runs with --rehash (every chunk hashed again, as these
# files, written just now, would be anyway): the option is accepted and
# changes none of the above.
# Checked that (a) can fail: with repl_open_beneath made a plain openat
# (following symlinks), the replicator served the file outside DIR and
# this test failed.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
S="$T/src"
O="$T/outside"
mkdir -p "$S/d" "$S/sub" "$O/sub"
# one chunk each (under the chunker's 16 KiB minimum)
for f in d/victim.bin d/other.bin sub/inner.bin b1.bin b2.bin changed.bin; do
	head -c 12000 /dev/urandom >"$S/$f"
done
cp "$S/d/victim.bin" "$O/victim.bin"
cp "$S/sub/inner.bin" "$O/sub/inner.bin"
port=$(free_port)
REPL_OPTS="--hash-before-publish --rehash" start_repl "$port" "s=$S"
URL="http://127.0.0.1:$port/v1/s"
CAT="$T/state/s/catalog/1.db"
id_of() { # PATH below DIR -> its one chunk id (hex)
	local dir=${1%/*} name=${1##*/}
	sql "$CAT" "select lower(hex(c.id)) from chunk c join dirent d on d.ino=c.ino
		where d.name=cast('$name' as blob) and d.parent=(select ino from dirent
		where parent=1 and name=cast('$dir' as blob))"
}
id_root() { sql "$CAT" "select lower(hex(c.id)) from chunk c join dirent d on d.ino=c.ino where d.parent=1 and d.name=cast('$1' as blob)"; }
victim=$(id_of d/victim.bin) other=$(id_of d/other.bin) inner=$(id_of sub/inner.bin)
b1=$(id_root b1.bin) b2=$(id_root b2.bin) changed=$(id_root changed.bin)
for v in "$victim" "$other" "$inner" "$b1" "$b2" "$changed"; do [ ${#v} = 64 ] || die "missing chunk id"; done
code() { curl -s -o "$T/body" -w '%{http_code}' "$URL/chunk/$1"; }
for v in "$victim" "$inner"; do [ "$(code "$v")" = 200 ] || die "chunk $v not served before the swap"; done
ok "before the swap both chunks are served"

# (a) after the scan: a file and a directory become symlinks out of DIR.
rm "$S/d/victim.bin"
ln -s "$O/victim.bin" "$S/d/victim.bin"
mv "$S/sub" "$T/sub.away"
ln -s "$O/sub" "$S/sub"
served0=$(repl_stat "$port" s chunks_served)
for v in "$victim" "$inner"; do
	c=$(code "$v")
	[ "$c" != 200 ] || die "chunk $v served through a symlink out of DIR"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["error"] and d["detail"]' "$T/body" ||
		die "chunk $v: $c without the JSON error body: $(head -c 200 "$T/body")"
	log "chunk through a symlink -> $c $(cat "$T/body")"
done
# in a batch: nothing of it goes out
python3 - "$port" "$other" "$victim" >"$T/batch-a.txt" <<'PY' || die "batch with a symlinked chunk: $(cat "$T/batch-a.txt")"
import socket, sys
port, ids = int(sys.argv[1]), [bytes.fromhex(x) for x in sys.argv[2:]]
body = b"".join(ids)
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(b"POST /v1/s/chunks HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
got = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
head, _, rest = got.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode())
assert ids[1] not in rest, "the symlinked chunk's id was sent"
assert not rest.endswith(b"0\r\n\r\n"), "the batch ended as if whole"
PY
log "batch [other, symlinked]: $(head -n 1 "$T/batch-a.txt"), cut before the symlinked chunk"
[ "$(repl_stat "$port" s chunks_served)" -le $((served0 + 1)) ] || die "chunks counted as served through a symlink"
ok "(a) a file and a directory swapped for symlinks out of DIR: refused by GET and cut from a batch"

mount_hyd "$URL" "$T/mnt" --no-backfill --timeout 3
if out=$(timeout 60 cat "$T/mnt/d/victim.bin" 2>&1 >"$T/read.out"); then die "the mount served d/victim.bin through the symlink"; fi
echo "$out" | grep -q "Input/output error" || die "expected EIO, got: $out"
! cmp -s "$T/read.out" "$O/victim.bin" || die "the bytes outside DIR reached the reader"
cmp "$S/d/other.bin" "$T/mnt/d/other.bin" || die "d/other.bin reads wrong"
ok "(a) through the mount: EIO for the symlinked file, its neighbour reads fine"
umount_hyd "$T/mnt"

# (b) a batch whose middle chunk's source changed (same size, new bytes).
python3 -c 'import os,sys; f=open(sys.argv[1],"r+b"); f.seek(100); f.write(os.urandom(64)); f.close()' "$S/changed.bin"
mism0=$(repl_stat "$port" s mismatches)
python3 - "$port" "$b1" "$changed" "$b2" <<'PY' || die "batch cut mid-stream: checks failed"
import socket, sys
port, ids = int(sys.argv[1]), [bytes.fromhex(x) for x in sys.argv[2:]]
body = b"".join(ids)
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(b"POST /v1/s/chunks HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
got = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
head, _, rest = got.partition(b"\r\n\r\n")
lines = head.split(b"\r\n")
assert b" 200 " in lines[0], lines[0]
assert b"transfer-encoding: chunked" in head.lower(), head
# chunked pieces: each is one id and its frame
pieces, p = [], rest
while True:
    n_end = p.find(b"\r\n")
    if n_end < 0:
        break
    n = int(p[:n_end], 16)
    if n == 0 or len(p) < n_end + 2 + n + 2:
        pieces.append(("end" if n == 0 else "partial", p[n_end + 2:n_end + 2 + n]))
        break
    pieces.append(("whole", p[n_end + 2:n_end + 2 + n]))
    p = p[n_end + 2 + n + 2:]
whole = [x for k, x in pieces if k == "whole"]
assert whole and whole[0][:32] == ids[0] and whole[0][32:36] == b"FRC1", "the first chunk did not arrive whole"
assert all(x[:32] != ids[1] for x in whole), "the changed chunk was sent"
assert all(x[:32] != ids[2] for x in whole), "a chunk after the changed one was sent"
assert not any(k == "end" for k, _ in pieces), "the body ended as if whole"
print("# status %s; %d whole piece(s) before the cut, then the connection closed" % (lines[0].decode(), len(whole)))
PY
wait_for 10 eval '[ "$(repl_stat "$port" s mismatches)" -gt "$mism0" ]' || die "the mismatch was not counted"
grep -q "no longer matches\|mismatch\|changed" "$T/repl.log" || die "the replicator did not log the changed chunk"
ok "(b) a batch whose source changed: 200, the chunk before it whole, then cut; the mismatch counted and logged"
kill -0 "$REPL_PID" || die "the replicator died"
stop_repl || die "replicator did not exit 0 on SIGTERM"
