#!/usr/bin/env bash
# 290: signed generations. `ferry keygen` makes a key pair (sign.key 0600,
# never overwritten); a replicator with --sign-key serves each
# generation's signed statement; `ferry sync` and a mount with
# --trust-key through a relay that passes everything are exact. Then the
# relay (a small python3 HTTP proxy between client and replicator) turns
# hostile, and each attack is refused with one clear line, nothing
# mounted or installed, the cache as it was:
#  (a) one byte of a catalog altered (a symlink's target; the zstd stream
#      re-made, so only the signature can tell): a fresh mount and sync
#      refuse it, a mount that follows (--poll 1) does not switch to it
#      and keeps serving, then switches once the relay passes the real
#      catalog;
#  (b) an older generation's catalog and statement after a newer one was
#      seen (HEAD rolled back, and generation 1's files served as 2's);
#  (c) another namespace's catalog and statement;
#  (d) a manifests answer altered: another file's manifest of the same
#      size (its signature kept), or a byte flipped: the read fails, the
#      overlay and store get nothing of it; ferry sync writes none of
#      those files (exit 23, each named);
#  a wrong --trust-key: one line, exit 1 (sync: 12), nothing mounted; an
#  unsigned replicator with --trust-key on the client: refused.
# Each check can fail: the same relay without --trust-key is accepted
# (the altered symlink, the older generation, the other namespace's tree,
# the other file's bytes), and the relay set back to passing lets the
# signed client through.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v zstd >/dev/null || skip "zstd (Debian package zstd) missing"

A="$T/srcA"
B="$T/srcB"
mkdir -p "$A/d/e" "$B/x"
python3 - "$A" "$B" <<'PY'
import os, random, sys
r = random.Random(29)
a, b = sys.argv[1], sys.argv[2]
def w(p, n):
    with open(p, "wb") as f:
        f.write(r.randbytes(n))
w(os.path.join(a, "d/one.bin"), 300000)
w(os.path.join(a, "d/e/two.bin"), 7000)
w(os.path.join(a, "three.txt"), 100)
os.symlink("sigcheck-target-aaaa", os.path.join(a, "link"))
# two files of one size: a manifest of one fits the other
w(os.path.join(b, "x/x.bin"), 50000)
w(os.path.join(b, "x/y.bin"), 50000)
w(os.path.join(b, "only-in-b"), 10)
PY

# -- keygen --
K="$T/keys"
"$FERRY" keygen "$K" >"$T/keygen.out" 2>"$T/keygen.err" || { cat "$T/keygen.err"; die "ferry keygen failed"; }
[ "$(stat -c %a "$K/sign.key")" = 600 ] || die "sign.key is mode $(stat -c %a "$K/sign.key"), not 600"
[ "$(stat -c %a "$K")" = 700 ] || die "the key directory is mode $(stat -c %a "$K"), not 700"
grep -q 'BEGIN PUBLIC KEY' "$K/sign.pub" || die "sign.pub is not a PEM public key"
openssl pkey -in "$K/sign.key" -pubout 2>/dev/null | cmp -s - "$K/sign.pub" || die "sign.pub is not sign.key's public key"
sum=$(cat "$K/sign.key" "$K/sign.pub" | sha256sum)
"$FERRY" keygen "$K" >/dev/null 2>"$T/keygen2.err"
rc=$?
[ $rc = 1 ] || die "keygen over an existing key exited $rc, not 1"
[ "$(wc -l <"$T/keygen2.err")" = 1 ] && grep -q 'not overwriting' "$T/keygen2.err" || { cat "$T/keygen2.err"; die "keygen over a key: not one clear line"; }
[ "$(cat "$K/sign.key" "$K/sign.pub" | sha256sum)" = "$sum" ] || die "keygen changed an existing key"
"$FERRY" keygen -q "$T/other" || die "second keygen failed"
ok "keygen: sign.key 0600 in a 0700 directory, sign.pub its public half (openssl agrees); an existing key is refused (exit 1, one line) and left as it was"

# -- a signed replicator, and a relay in front of it --
port=$(free_port)
REPL_OPTS="--sign-key $K/sign.key" start_repl "$port" "a=$A" "b=$B"
wait_hashed "$port" a 60 || die "a not hashed"
wait_hashed "$port" b 60 || die "b not hashed"
grep -q "signing generations key=" "$T/repl.log" || die "the replicator does not say it signs"
curl -sf "http://127.0.0.1:$port/v1/a/signature/1" >"$T/sig1" || die "no signature of a's generation 1"
head -n 1 "$T/sig1" | grep -qx 'ferry-signed-generation/1' || die "the statement has no format line"
grep -qx 'namespace a' "$T/sig1" && grep -qx 'generation 1' "$T/sig1" && grep -qx 'parent 0' "$T/sig1" || die "the statement does not name a/1/0"
[ -e "$T/state/a/catalog/1.db.sig" ] || die "no statement beside the catalog in the state dir"
curl -sf -D "$T/mh" -o /dev/null "http://127.0.0.1:$port/v1/b/manifests/1/0" || die "GET manifests"
grep -qi '^Ferry-Signature: [0-9a-f]\{128\}' "$T/mh" || die "a manifests answer without a Ferry-Signature"

MODE="$T/relay.mode"
echo pass >"$MODE"
pport=$(free_port)
python3 - "$pport" "$port" "$MODE" 2>"$T/relay.log" <<'PY' &
# The relay: every request to the replicator and back, whole, unless the
# mode file says to attack (read per request):
#   pass | flip (catalogs: one byte of the symlink target; deltas 404)
#   old G (HEAD says G; catalog/N, signature/N are G's; deltas 404)
#   swapgen G (HEAD as is; catalog/N, signature/N are G's; deltas 404)
#   other NS (namespace a's requests go to NS)
#   mswap X Y (manifest/G/X answers Y's manifest, ino patched to X; a
#     segment, manifests/G/S, is 503 "hashing": a mount looks its files'
#     segments up too, even with --no-backfill, and the file's own answer
#     must be the one it takes)
#   mflip (the last byte of every manifests answer flipped)
import http.client, http.server, subprocess, sys
port, up, modefile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
KEEP = ("content-type", "cache-control", "etag", "ferry-signature",
        "retry-after", "allow")

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def upstream(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", up, timeout=120)
        c.request(method, path, body=body)
        r = c.getresponse()
        data = r.read()
        hdrs = [(k, v) for k, v in r.getheaders() if k.lower() in KEEP]
        c.close()
        return r.status, hdrs, data

    def reply(self, status, hdrs, data):
        self.send_response(status)
        for k, v in hdrs:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def relay(self, body=None):
        try:
            mode = open(modefile).read().split()
        except FileNotFoundError:
            mode = ["pass"]
        kind, path = mode[0], self.path
        if kind == "other":
            path = path.replace("/v1/a/", "/v1/%s/" % mode[1], 1)
        p, _, q = path.partition("?")
        seg = p.split("/")  # '', 'v1', NS, WHAT, ...
        what = seg[3] if len(seg) > 3 else ""
        if kind in ("old", "swapgen", "flip") and what == "delta":
            return self.reply(404, [("Content-Type", "application/json")],
                              b'{"error":"not_found","detail":"relay"}\n')
        if kind == "old" and what == "HEAD":
            return self.reply(200, [("Content-Type", "text/plain")],
                              (mode[1] + "\n").encode())
        if kind in ("old", "swapgen") and what in ("catalog", "signature"):
            path = "/".join(seg[:4] + [mode[1]])
        if kind == "mswap" and what == "manifests":
            return self.reply(503, [("Content-Type", "application/json"),
                                    ("Retry-After", "1"),
                                    ("Cache-Control", "no-store")],
                              b'{"error":"hashing","detail":"relay"}\n')
        swap = (kind == "mswap" and what == "manifest" and len(seg) > 5 and
                seg[5] == mode[1])
        if swap:
            path = "/".join(seg[:5] + [mode[2]]) + ("?" + q if q else "")
        st, hdrs, data = self.upstream(self.command, path, body)
        data = bytearray(data)
        if kind == "flip" and what == "catalog" and st == 200:
            raw = subprocess.run(["zstd", "-dcq"], input=bytes(data),
                                 capture_output=True, check=True).stdout
            if raw.count(b"sigcheck-target-aaaa") != 1:
                return self.reply(502, [], b"relay: no target to flip\n")
            raw = raw.replace(b"sigcheck-target-aaaa", b"sigcheck-target-aaab")
            data = bytearray(subprocess.run(["zstd", "-cq"], input=raw,
                             capture_output=True, check=True).stdout)
        if swap and st == 200:
            x = int(mode[1]).to_bytes(8, "little")
            data[16:24] = x   # first
            data[24:32] = x   # last
            data[36:44] = x   # the record's ino
        if kind == "mflip" and what in ("manifest", "manifests") and st == 200:
            data[-1] ^= 1
        self.reply(st, hdrs, bytes(data))

    def do_GET(self):
        self.relay()

    def do_HEAD(self):
        self.relay()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.relay(self.rfile.read(n))

class S(http.server.ThreadingHTTPServer):
    daemon_threads = True

S(("127.0.0.1", port), H).serve_forever()
PY
RELAY=$!
trap 'kill "$RELAY" 2>/dev/null; cleanup' EXIT
PA="http://127.0.0.1:$pport/v1/a"
PB="http://127.0.0.1:$pport/v1/b"
wait_for 30 curl -sf -o /dev/null "$PA/HEAD" || die "the relay did not start"
relay() { echo "$*" >"$MODE"; }

# mount_at CACHE URL MNT [options] — mount_hyd with a cache of our own.
mount_at() {
	local c=$1 url=$2 mnt=$3
	shift 3
	mkdir -p "$mnt"
	MOUNTS+=("$mnt")
	"$HYD" -c "$c" "$@" "$url" "$mnt" || die "hydrator failed to mount $url on $mnt"
	mountpoint -q "$mnt" || die "$mnt is not a mountpoint"
}
# umount_at CACHE MNT — its daemon exits 0.
umount_at() {
	local pid st
	pid=$(cat "$1/hydrator.pid") || die "no hydrator.pid in $1"
	fusermount3 -u "$2" || die "fusermount3 -u $2"
	e2e_gone "$pid" 10 || die "hydrator $pid still running after unmount"
	st=$(hyd_exit_status "$1" "$pid")
	[ "$st" = 0 ] || die "hydrator $pid exit status ${st:-not logged}"
}
# refused_mount CACHE URL MNT PATTERN [options] — exit 1, one line on
# stderr saying PATTERN, nothing mounted.
refused_mount() {
	local c=$1 url=$2 mnt=$3 pat=$4 rc
	shift 4
	mkdir -p "$mnt"
	"$HYD" -c "$c" "$@" "$url" "$mnt" >"$T/hyd.out" 2>"$T/hyd.err"
	rc=$?
	[ $rc = 1 ] || { cat "$T/hyd.err"; die "hydrator exited $rc, not 1 ($pat)"; }
	! mountpoint -q "$mnt" || { fusermount3 -u "$mnt"; die "mounted though refused ($pat)"; }
	[ "$(wc -l <"$T/hyd.err")" = 1 ] || { cat "$T/hyd.err"; die "not one line ($pat)"; }
	grep -q "$pat" "$T/hyd.err" || { cat "$T/hyd.err"; die "the line does not say '$pat'"; }
	log "refused: $(cat "$T/hyd.err")"
}
# refused_sync CACHE URL DEST PATTERN [options] — exit 12, one line.
refused_sync() {
	local c=$1 url=$2 dest=$3 pat=$4 rc
	shift 4
	"$FERRY" sync -q --cache-dir "$c" "$@" "$url" "$dest" >"$T/sync.out" 2>"$T/sync.err"
	rc=$?
	[ $rc = 12 ] || { cat "$T/sync.err"; die "ferry sync exited $rc, not 12 ($pat)"; }
	[ "$(wc -l <"$T/sync.err")" = 1 ] && grep -q "$pat" "$T/sync.err" || { cat "$T/sync.err"; die "ferry sync: not one line saying '$pat'"; }
	[ -z "$(ls -A "$dest" 2>/dev/null)" ] || die "ferry sync wrote into $dest though refused"
}
# no_catalog CACHE — nothing was installed in the cache.
no_catalog() {
	[ -z "$(find "$1/catalogs" -name '*.db' 2>/dev/null)" ] || { ls -la "$1/catalogs"; die "a catalog was installed in $1"; }
	[ ! -e "$1/catalogs/seen" ] || die "$1 records a generation as seen"
	[ "$(sqlite3 "$1/state.db" 'select count(*) from chunk' 2>/dev/null || echo 0)" = 0 ] || die "chunks stored in $1"
}
# snapshot CACHE — the cache's catalogs and store, as bytes.
snapshot() {
	(cd "$1" && find catalogs volumes -type f -print0 | sort -z | xargs -0 sha256sum
		sqlite3 state.db 'select hex(id), vol, off from chunk order by id')
}
PUB="$K/sign.pub"

# -- signed, through the relay passing everything: exact --
"$FERRY" sync -q --cache-dir "$T/c-sync" --trust-key "$PUB" "$PA" "$T/dest" 2>"$T/s0.err" || { cat "$T/s0.err"; die "signed sync failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$A" "$T/dest" >"$T/cmp.txt" || { head "$T/cmp.txt"; die "signed sync: tree differs"; }
[ "$(cat "$T/c-sync/catalogs/seen")" = 1 ] || die "sync did not record generation 1 as seen"
cmp -s "$T/c-sync/catalogs/1.sig" "$T/sig1" || die "the cache does not keep the statement it checked"
M="$T/mnt"
mount_hyd "$PA" "$M" --trust-key "$PUB" --poll 1
wait_status "$T/cache" state complete 60 || die "signed mount not complete"
python3 "$E2E_LIB/treecmp.py" --content "$A" "$M" >"$T/cmp.txt" || { head "$T/cmp.txt"; die "signed mount: tree differs"; }
ok "signed: ferry sync and a mount with --trust-key through the relay are exact; the cache keeps the statement and generation 1 as seen"

# -- (a) one byte of a catalog altered --
echo "new in 2" >"$A/new-in-2"
relay flip
kill -HUP "$REPL_PID"
wait_for 60 eval '[ "$(curl -sf "http://127.0.0.1:$port/v1/a/HEAD")" = 2 ]' || die "no generation 2"
hlog="$T/cache/hydrator.log"
wait_for 60 grep -q "not switching generations: .*refusing generation 2: the catalog's rows do not have the digest" "$hlog" ||
	{ tail -n 5 "$hlog"; die "(a) the mount that follows did not refuse the altered catalog"; }
grep "not switching generations" "$hlog" | grep -q 'error:' || die "(a) the refusal is not an error line"
[ "$(status_field "$T/cache" generation)" = 1 ] || die "(a) the mount switched to the altered generation"
[ ! -e "$M/new-in-2" ] || die "(a) the mount shows the altered generation"
[ "$(readlink "$M/link")" = sigcheck-target-aaaa ] || die "(a) the mount's symlink changed"
[ ! -e "$T/cache/catalogs/2.db" ] && [ ! -e "$T/cache/catalogs/2.sig" ] || die "(a) the altered catalog was installed"
[ "$(cat "$T/cache/catalogs/seen")" = 1 ] || die "(a) seen moved on an altered catalog"
refused_mount "$T/c-a" "$PA" "$T/m-a" "refusing generation 2: the catalog's rows do not have the digest" --trust-key "$PUB"
no_catalog "$T/c-a"
refused_sync "$T/c-a" "$PA" "$T/d-a" "refusing generation 2: the catalog's rows do not have the digest" --trust-key "$PUB"
no_catalog "$T/c-a"
# without --trust-key the altered catalog goes through
"$FERRY" sync -q --cache-dir "$T/c-a2" "$PA" "$T/d-a2" || die "(a) unsigned sync through the flipping relay failed"
[ "$(readlink "$T/d-a2/link")" = sigcheck-target-aaab ] || die "(a) the relay's alteration did not reach an unchecked client: the test proves nothing"
relay pass
wait_for 60 eval '[ "$(status_field "$T/cache" generation)" = 2 ]' || die "(a) the mount did not switch once the real catalog came"
[ -e "$M/new-in-2" ] || die "(a) the switched mount lacks new-in-2"
python3 "$E2E_LIB/treecmp.py" --content "$A" "$M" >"$T/cmp.txt" || { head "$T/cmp.txt"; die "(a) tree differs after the switch"; }
[ "$(cat "$T/cache/catalogs/seen")" = 2 ] || die "(a) seen is not 2 after the switch"
ok "(a) an altered catalog byte: the mount that follows logs an error and keeps serving 1; a fresh mount (exit 1) and sync (exit 12) refuse it with one line, nothing installed; unchecked, it is taken (symlink -> ...aaab); the real one is switched to"

# -- (b) rollback: an older generation after a newer one was seen --
umount_hyd "$M"
snapshot "$T/cache" >"$T/snap.before"
relay old 1
refused_mount "$T/cache" "$PA" "$M" "generation 1 is older than generation 2 already seen from this URL (a rollback)" --trust-key "$PUB"
snapshot "$T/cache" >"$T/snap.after"
cmp -s "$T/snap.before" "$T/snap.after" || { diff "$T/snap.before" "$T/snap.after" | head; die "(b) the cache changed"; }
refused_sync "$T/cache" "$PA" "$T/d-b" "a rollback" --trust-key "$PUB"
snapshot "$T/cache" >"$T/snap.after"
cmp -s "$T/snap.before" "$T/snap.after" || die "(b) the cache changed after the refused sync"
relay swapgen 1
refused_mount "$T/cache" "$PA" "$M" "refusing generation 2: the signature is for generation 1, not 2" --trust-key "$PUB"
refused_mount "$T/c-b" "$PA" "$T/m-b" "the signature is for generation 1, not 2" --trust-key "$PUB"
no_catalog "$T/c-b"
snapshot "$T/cache" >"$T/snap.after"
cmp -s "$T/snap.before" "$T/snap.after" || die "(b) the cache changed after the swapped generation"
# unchecked, a copy of the same cache takes generation 1 again
relay old 1
cp -a "$T/cache" "$T/cache-copy"
rm -f "$T/cache-copy/hydrator.pid"
"$FERRY" sync --cache-dir "$T/cache-copy" "$PA" "$T/d-b2" >"$T/b2.out" 2>&1 || { cat "$T/b2.out"; die "(b) unchecked sync of the rollback failed"; }
grep -q 'generation 1,' "$T/b2.out" || { cat "$T/b2.out"; die "(b) the unchecked client did not take generation 1: the test proves nothing"; }
[ ! -e "$T/d-b2/new-in-2" ] || die "(b) the unchecked rollback still has new-in-2"
relay pass
mount_hyd "$PA" "$M" --trust-key "$PUB" --no-backfill
[ -e "$M/new-in-2" ] || die "(b) the remount is not generation 2"
umount_hyd "$M"
ok "(b) rollback: HEAD back to 1, or 1's catalog and statement served as 2's: refused (one line, exit 1 / 12), the cache byte for byte as it was; unchecked, a copy of the cache takes generation 1; the relay passing, the signed remount serves 2"

# -- (c) another namespace's catalog and statement --
relay other b
refused_mount "$T/c-c" "$PA" "$T/m-c" "the signature is for namespace 'b', not 'a'" --trust-key "$PUB"
no_catalog "$T/c-c"
refused_sync "$T/c-c" "$PA" "$T/d-c" "the signature is for namespace 'b', not 'a'" --trust-key "$PUB"
no_catalog "$T/c-c"
"$FERRY" sync -q --cache-dir "$T/c-c2" "$PA" "$T/d-c2" || die "(c) unchecked sync through the relay failed"
python3 "$E2E_LIB/treecmp.py" --content "$B" "$T/d-c2" >/dev/null || die "(c) the unchecked client did not get b's tree: the test proves nothing"
ok "(c) namespace b's catalog and statement for a: refused (one line, exit 1 / 12), nothing installed; unchecked, a's URL gives b's tree"

# -- (d) an altered manifests answer --
relay pass
xi=$(sql "$T/state/b/catalog/1.db" "select ino from dirent where name = cast('x.bin' as blob)")
yi=$(sql "$T/state/b/catalog/1.db" "select ino from dirent where name = cast('y.bin' as blob)")
[ -n "$xi" ] && [ -n "$yi" ] || die "(d) no inos for x.bin, y.bin"
[ "$(sql "$T/state/b/catalog/1.db" "select count(*) from pending where ino in ($xi, $yi)")" = 2 ] || die "(d) x.bin and y.bin are not pending in b's generation 1"
relay mswap "$xi" "$yi"
MD="$T/m-d"
mount_at "$T/c-d" "$PB" "$MD" --trust-key "$PUB" --no-backfill
! cat "$MD/x/x.bin" >/dev/null 2>&1 || die "(d) the read of x.bin with another file's manifest succeeded"
grep -q "manifest fetch failed ino=$xi .*its signature does not verify with the trusted key" "$T/c-d/hydrator.log" ||
	{ tail -n 5 "$T/c-d/hydrator.log"; die "(d) no clear line about the manifest's signature"; }
[ "$(sqlite3 "$T/c-d/catalogs/1.overlay.db" "select count(*) from file where ino = $xi")" = 0 ] || die "(d) the altered manifest was stored"
[ "$(sqlite3 "$T/c-d/state.db" 'select count(*) from chunk')" = 0 ] || die "(d) chunks were stored for the refused manifest"
relay mflip
! cat "$MD/x/y.bin" >/dev/null 2>&1 || die "(d) a manifests answer with a flipped byte was taken"
grep -q "manifest fetch failed ino=$yi .*its signature does not verify" "$T/c-d/hydrator.log" || die "(d) no clear line about the flipped manifest"
[ "$(sqlite3 "$T/c-d/catalogs/1.overlay.db" 'select count(*) from file')" = 0 ] || die "(d) the flipped manifest was stored"
relay pass
cmp -s "$MD/x/x.bin" "$B/x/x.bin" || die "(d) x.bin does not read right once the relay passes"
cmp -s "$MD/x/y.bin" "$B/x/y.bin" || die "(d) y.bin does not read right once the relay passes"
umount_at "$T/c-d" "$MD"
# ferry sync: the files whose manifests are refused are not written
relay mflip
"$FERRY" sync -q --cache-dir "$T/c-d3" --trust-key "$PUB" "$PB" "$T/d-d3" >"$T/d3.out" 2>"$T/d3.err"
rc=$?
[ $rc = 23 ] || { cat "$T/d3.err"; die "(d) ferry sync with refused manifests exited $rc, not 23"; }
grep -q "manifest fetch failed segment=0 .*its signature does not verify" "$T/d3.err" || { cat "$T/d3.err"; die "(d) ferry sync does not say why"; }
[ ! -e "$T/d-d3/x/x.bin" ] && [ ! -e "$T/d-d3/x/y.bin" ] || die "(d) ferry sync wrote files whose manifests it refused"
[ "$(sqlite3 "$T/c-d3/catalogs/1.overlay.db" 'select count(*) from file')" = 0 ] || die "(d) ferry sync stored a refused manifest"
# unchecked, x.bin reads as y.bin's bytes
relay mswap "$xi" "$yi"
mount_at "$T/c-d2" "$PB" "$T/m-d2" --no-backfill
cmp -s "$T/m-d2/x/x.bin" "$B/x/y.bin" || die "(d) the unchecked mount did not take the swapped manifest: the test proves nothing"
relay pass
umount_at "$T/c-d2" "$T/m-d2"
ok "(d) a manifests answer swapped for another file's (signature kept) or with a byte flipped: the read fails, an error line says why, nothing stored; ferry sync names each file it could not write (exit 23); passing, both read right; unchecked, x.bin reads as y.bin"

# -- a wrong --trust-key --
refused_mount "$T/c-w" "$PA" "$T/m-w" "signed by another key" --trust-key "$T/other/sign.pub"
no_catalog "$T/c-w"
refused_sync "$T/c-w" "$PA" "$T/d-w" "signed by another key" --trust-key "$T/other/sign.pub"
no_catalog "$T/c-w"
"$HYD" -c "$T/c-w" --trust-key "$K/sign.key" "$PA" "$T/m-w" 2>"$T/hyd.err"
rc=$?
[ $rc = 2 ] && grep -q 'not an Ed25519 public key' "$T/hyd.err" || { cat "$T/hyd.err"; die "a private key as --trust-key: exit $rc"; }
ok "a wrong --trust-key: one line naming the other key, exit 1 (sync 12), nothing mounted or installed; a private key given as --trust-key is a usage error"

# -- an unsigned replicator --
stop_repl || die "the signed replicator did not stop cleanly"
uport=$(free_port)
REPL_OPTS="-s $T/state-unsigned" start_repl "$uport" "a=$A"
UA="http://127.0.0.1:$uport/v1/a"
code=$(curl -s -o /dev/null -w '%{http_code}' "$UA/signature/1")
[ "$code" = 404 ] || die "an unsigned replicator answers $code for a signature"
refused_mount "$T/c-u" "$UA" "$T/m-u" "it is not signed (HTTP 404)" --trust-key "$PUB"
no_catalog "$T/c-u"
refused_sync "$T/c-u" "$UA" "$T/d-u" "it is not signed" --trust-key "$PUB"
no_catalog "$T/c-u"
"$FERRY" sync -q --cache-dir "$T/c-u2" "$UA" "$T/d-u2" || die "unchecked sync from the unsigned replicator failed"
ok "an unsigned replicator: --trust-key refuses it (one line, exit 1 / 12, nothing installed); without it, sync works"
stop_repl || die "the unsigned replicator did not stop cleanly"
