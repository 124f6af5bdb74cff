#!/usr/bin/env bash
# 270: per-namespace tokens (ferry-replicator --tokens, ferry token new,
# --token-file on the clients), with the real programs on loopback:
#  (a) `ferry token new` prints a token (43 base64url characters) and the
#      line "NAME SHA256(token)" the tokens file takes; those two lines, as
#      made, are what every check below uses;
#  (b) the right token: mount, read every file exact; ferry sync exact;
#      immutable answers are Cache-Control: private;
#  (c) a missing, foreign (namespace b's) or malformed token: the hydrator
#      and ferry sync print one line with the server's reason and exit
#      non-zero, nothing is mounted, nothing is stored (no chunk in the
#      cache) and nothing is written;
#  (d) with a's token, every endpoint of b (HEAD, catalog, chunk, batch,
#      manifest, delta, stats; GET and HEAD) is 401 with the JSON error and
#      WWW-Authenticate: Bearer, as is a namespace that does not exist (the
#      same answer: no oracle of names) and one that no line opens;
#  (e) a chunk id that only b references, asked with a's token (GET, HEAD,
#      in a batch), is 404 with the very answer of an id that exists
#      nowhere, while a chunk a references (one b shares too) is 200;
#  (f) SIGHUP rereads the file: a new token works after it; a malformed
#      file on reload keeps the old tokens and logs one line;
#  (g) no token ever appears in a log (the replicator runs with -v, which
#      logs every request), and the cache directory is 0700 even under
#      umask 000;
#  (h) raw clients: the header sent a byte at a time is still read whole
#      (200); two Authorization headers, an over-long one, another scheme
#      or no blank after "Bearer" are 401, one keep-alive connection
#      taking each answer in turn.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
[ -x "$FERRY" ] || die "ferry not built"

# Two namespaces sharing one file's content; the rest differs.
mkdir -p "$T/a/sub" "$T/b" "$T/c"
head -c 300000 /dev/urandom >"$T/shared.bin"
cp "$T/shared.bin" "$T/a/shared.bin"
cp "$T/shared.bin" "$T/b/shared.bin"
head -c 200000 /dev/urandom >"$T/a/sub/only-a.bin"
echo "hello from a" >"$T/a/hello.txt"
head -c 250000 /dev/urandom >"$T/b/only-b.bin"
echo "c" >"$T/c/c.txt"

# (a) tokens as `ferry token new` makes them.
new_token() { # NS NAME: $T/NAME.token (the client's file), $T/NAME.line
	"$FERRY" token new "$1" >"$T/$2.out" || die "(a) ferry token new $1 failed"
	[ "$(wc -l <"$T/$2.out")" = 2 ] || die "(a) ferry token new printed $(wc -l <"$T/$2.out") lines, not 2"
	(umask 077; head -n 1 "$T/$2.out" >"$T/$2.token")
	sed -n 2p "$T/$2.out" >"$T/$2.line"
	printf 'Authorization: Bearer %s\n' "$(cat "$T/$2.token")" >"$T/$2.hdr"
	grep -Eqx '[A-Za-z0-9_-]{43}' "$T/$2.token" || die "(a) token is not 43 base64url characters"
	[ "$(cat "$T/$2.line")" = "$1 $(tr -d '\n' <"$T/$2.token" | sha256sum | cut -d' ' -f1)" ] ||
		die "(a) the tokens file line is not '$1 SHA256(token)'"
}
new_token a a
new_token b b
new_token a a2 # added later by SIGHUP
[ "$(cat "$T/a.token")" != "$(cat "$T/a2.token")" ] || die "(a) two tokens came out the same"
{
	echo "# ferry-replicator --tokens: NAME SHA256HEX"
	echo
	cat "$T/a.line"
	printf '  \t\n'
	cat "$T/b.line"
} >"$T/tokens"
ok "(a) ferry token new: a 43-character token and 'NAME SHA256(token)'"

port=$(free_port)
REPL_OPTS="-v --hash-before-publish --tokens $T/tokens" start_repl "$port" "a=$T/a" "b=$T/b" "c=$T/c"
grep -q 'no token opens this namespace.* ns=c' "$T/repl.log" || die "no warning about namespace c, which no line opens"
BASE="http://127.0.0.1:$port/v1"

# http TOKEN METHOD PATH [curl args] — the status; body in $T/body, head in
# $T/head. TOKEN is a name of $T/NAME.hdr, or - for none.
http() {
	local tok=$1 m=$2 p=$3 h=()
	shift 3
	[ "$tok" = - ] || h=(-H "@$T/$tok.hdr")
	if [ "$m" = HEAD ]; then
		curl -s -I -o "$T/head" -w '%{http_code}' "${h[@]}" "$@" "$BASE/$p"
		: >"$T/body"
	else
		curl -s -D "$T/head" -o "$T/body" -w '%{http_code}' -X "$m" "${h[@]}" "$@" "$BASE/$p"
	fi
}

# (b) the right token.
M="$T/mnt"
mount_hyd "$BASE/a" "$M" --token-file "$T/a.token" --no-backfill
python3 "$E2E_LIB/treecmp.py" --content "$T/a" "$M" >"$T/cmp-b.txt" || { cat "$T/cmp-b.txt"; die "(b) the mount differs from a"; }
mode=$(stat -c %a "$T/cache")
umount_hyd "$M"
"$FERRY" sync --token-file "$T/a.token" --cache-dir "$T/sync-cache" "$BASE/a" "$T/copy" >"$T/sync-ok.log" 2>&1 ||
	{ cat "$T/sync-ok.log"; die "(b) ferry sync with the right token failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/a" "$T/copy" >"$T/cmp-s.txt" || { cat "$T/cmp-s.txt"; die "(b) the sync differs from a"; }
[ "$(http a HEAD a/catalog/1)" = 200 ] || die "(b) HEAD of a's catalog with a's token"
grep -qi '^Cache-Control: private, max-age=31536000, immutable' "$T/head" || { cat "$T/head"; die "(b) a catalog under tokens is not Cache-Control: private"; }
ok "(b) right token: mount reads a exactly, ferry sync exact, immutable answers private"

# (c) refused clients: one line, non-zero, nothing mounted, nothing stored.
refused() { # WHAT TOKENFILE-OR-EMPTY
	local what=$1 tf=$2 args=() rc
	[ -z "$tf" ] || args=(--token-file "$tf")
	mkdir -p "$T/mnt-$what"
	rc=0
	"$HYD" -c "$T/cache-$what" "${args[@]}" "$BASE/a" "$T/mnt-$what" >"$T/hyd-$what.out" 2>"$T/hyd-$what.err" || rc=$?
	[ $rc != 0 ] || { MOUNTS+=("$T/mnt-$what"); die "(c) $what: the hydrator exited 0"; }
	! mountpoint -q "$T/mnt-$what" || { MOUNTS+=("$T/mnt-$what"); die "(c) $what: mounted anyway"; }
	[ "$(wc -l <"$T/hyd-$what.err")" = 1 ] || { cat "$T/hyd-$what.err"; die "(c) $what: the hydrator did not print one line"; }
	grep -q 'unauthorized\|401\|token' "$T/hyd-$what.err" || { cat "$T/hyd-$what.err"; die "(c) $what: the line does not say why"; }
	[ ! -s "$T/hyd-$what.out" ] || die "(c) $what: the hydrator wrote to standard output"
	rc=0
	"$FERRY" sync "${args[@]}" --cache-dir "$T/scache-$what" "$BASE/a" "$T/dest-$what" >"$T/sync-$what.out" 2>"$T/sync-$what.err" || rc=$?
	[ $rc != 0 ] || die "(c) $what: ferry sync exited 0"
	[ "$(wc -l <"$T/sync-$what.err")" = 1 ] || { cat "$T/sync-$what.err"; die "(c) $what: ferry sync did not print one line"; }
	for d in "$T/cache-$what" "$T/scache-$what"; do
		[ ! -e "$d/state.db" ] || [ "$(sql "$d/state.db" 'select count(*) from chunk')" = 0 ] ||
			die "(c) $what: chunks stored in $d"
		[ -z "$(find "$d" -name '*.db' -path '*catalogs*' 2>/dev/null)" ] || die "(c) $what: a catalog was stored in $d"
	done
	[ -z "$(find "$T/dest-$what" -type f 2>/dev/null)" ] || die "(c) $what: ferry sync wrote files"
	log "$what: $(cat "$T/hyd-$what.err")"
}
refused missing ""
refused foreign "$T/b.token"
printf 'not-a-valid-token\n' >"$T/bad.token"
refused garbage "$T/bad.token"
ok "(c) missing, foreign and unknown tokens: one line, non-zero exit, nothing mounted, stored or written"

# (d) a's token opens nothing of b (nor of c, nor of a name nobody serves).
bchunk=$(sql "$T/state/b/catalog/1.db" "select lower(hex(c.id)) from chunk c join dirent d on d.ino=c.ino where d.name=cast('only-b.bin' as blob) limit 1")
[ ${#bchunk} = 64 ] || die "no chunk id of only-b.bin"
unhex() { python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex(sys.argv[1]))' "$1"; }
unhex "$bchunk" >"$T/bid.bin"
want401() { # TOKEN METHOD PATH [curl args]
	local code
	code=$(http "$@")
	[ "$code" = 401 ] || die "(d) $2 /v1/$3 with ${1/-/no} token: $code, not 401"
	grep -qi '^WWW-Authenticate: Bearer' "$T/head" || die "(d) $2 /v1/$3: no WWW-Authenticate: Bearer"
	if [ "$2" != HEAD ]; then
		[ "$(json_get "$T/body" error)" = unauthorized ] || die "(d) $2 /v1/$3: body is not the JSON error"
	fi
}
for tok in a - bad; do
	[ "$tok" != bad ] || printf 'Authorization: Bearer %s\n' "not-$(cat "$T/b.token")" >"$T/bad.hdr"
	for m in GET HEAD; do
		for p in b/HEAD b/catalog/1 "b/chunk/$bchunk" b/stats b/manifest/1/2 b/manifests/1/0 b/delta/1/2 c/HEAD nosuch/HEAD; do
			want401 "$tok" "$m" "$p"
		done
	done
	want401 "$tok" POST b/chunks --data-binary "@$T/bid.bin"
done
# The same for a with no token or b's: the namespace's own endpoints too.
for p in a/HEAD a/catalog/1 a/stats; do
	want401 - GET "$p"
	want401 b GET "$p"
done
ok "(d) a's token (and none, and a wrong one) gets 401 for every endpoint of b, of c (no line), and of an unknown name"

# (e) no cross-tenant existence oracle.
achunk=$(sql "$T/state/a/catalog/1.db" "select lower(hex(c.id)) from chunk c join dirent d on d.ino=c.ino where d.name=cast('shared.bin' as blob) limit 1")
[ ${#achunk} = 64 ] || die "no chunk id of shared.bin"
[ -n "$(sql "$T/state/b/catalog/1.db" "select 1 from chunk where id=x'$achunk'")" ] || die "shared.bin's chunk is not b's too"
[ -z "$(sql "$T/state/a/catalog/1.db" "select 1 from chunk where id=x'$bchunk'")" ] || die "only-b.bin's chunk is a's too"
nowhere=$(python3 -c 'import os; print(os.urandom(32).hex())')
unhex "$nowhere" >"$T/nid.bin"
[ "$(http a GET "a/chunk/$achunk")" = 200 ] || die "(e) a's own chunk is not 200"
[ "$(http a HEAD "a/chunk/$achunk")" = 200 ] || die "(e) HEAD of a's own chunk is not 200"
for m in GET HEAD; do
	cb=$(http a "$m" "a/chunk/$bchunk")
	sed "s/$bchunk/ID/" "$T/body" >"$T/body-b"
	cn=$(http a "$m" "a/chunk/$nowhere")
	sed "s/$nowhere/ID/" "$T/body" >"$T/body-n"
	[ "$cb" = 404 ] && [ "$cn" = 404 ] || die "(e) $m a/chunk: b's chunk $cb, a chunk of nobody $cn (want 404, 404)"
	cmp -s "$T/body-b" "$T/body-n" || die "(e) $m: b's chunk and a chunk of nobody get different answers"
done
cb=$(http a POST a/chunks --data-binary "@$T/bid.bin")
sed "s/$bchunk/ID/" "$T/body" >"$T/body-b"
cn=$(http a POST a/chunks --data-binary "@$T/nid.bin")
sed "s/$nowhere/ID/" "$T/body" >"$T/body-n"
[ "$cb" = 404 ] && [ "$cn" = 404 ] && cmp -s "$T/body-b" "$T/body-n" ||
	die "(e) batch: b's chunk $cb, a chunk of nobody $cn, or different bodies"
[ "$(http b GET "b/chunk/$bchunk")" = 200 ] || die "(e) b's own chunk with b's token is not 200"
ok "(e) a chunk only b references is 404 to a (GET, HEAD, batch), the same answer as a chunk of nobody"

# (f) SIGHUP rereads the tokens file.
[ "$(http a2 GET a/HEAD)" = 401 ] || die "(f) the new token works before it was added"
cat "$T/a2.line" >>"$T/tokens"
kill -HUP "$REPL_PID"
wait_for 60 grep -q 'tokens reloaded .*tokens=3' "$T/repl.log" || die "(f) no 'tokens reloaded' line"
[ "$(http a2 GET a/HEAD)" = 200 ] || die "(f) the token added is refused after SIGHUP"
"$FERRY" sync --token-file "$T/a2.token" --cache-dir "$T/sync-cache2" "$BASE/a" "$T/copy2" >"$T/sync-a2.log" 2>&1 ||
	{ cat "$T/sync-a2.log"; die "(f) ferry sync with the token added failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/a" "$T/copy2" >/dev/null || die "(f) the sync with the added token differs"
cp "$T/tokens" "$T/tokens.good"
echo "a not-a-digest" >>"$T/tokens"
kill -HUP "$REPL_PID"
wait_for 60 grep -q 'tokens file not reloaded' "$T/repl.log" || die "(f) no line about the bad tokens file"
[ "$(grep -c 'tokens file not reloaded' "$T/repl.log")" = 1 ] || die "(f) more than one line about the bad file"
grep 'tokens file not reloaded' "$T/repl.log" | grep -q 'line 7' || die "(f) the line does not name line 7"
[ "$(http a2 GET a/HEAD)" = 200 ] && [ "$(http a GET a/HEAD)" = 200 ] || die "(f) a bad file on reload dropped the old tokens"
[ "$(http b GET a/HEAD)" = 401 ] || die "(f) a bad file on reload opened a to b's token"
ok "(f) SIGHUP: an added token works; a malformed file keeps the old tokens and logs one line"

# (g) no token in any log; the cache directory is 0700.
for f in a b a2; do
	tok=$(cat "$T/$f.token")
	! grep -rqF -- "$tok" "$T/repl.log" "$T"/hyd-*.err "$T"/sync-*.err "$T"/sync-*.log "$T/cache/hydrator.log" ||
		die "(g) token $f appears in a log"
done
grep -q 'request method=GET url=/v1/a/HEAD status=401' "$T/repl.log" || die "(g) the replicator's -v request log is missing"
[ "$mode" = 700 ] || die "(g) cache directory mode $mode, not 700"
mkdir -p "$T/mnt-umask"
(umask 000; "$HYD" -c "$T/cache-umask" --token-file "$T/a.token" "$BASE/a" "$T/mnt-umask" 2>"$T/hyd-umask.err") ||
	die "(g) the hydrator failed under umask 000: $(cat "$T/hyd-umask.err")"
MOUNTS+=("$T/mnt-umask")
[ -d "$T/cache-umask" ] || die "(g) no cache directory made under umask 000"
[ "$(stat -c %a "$T/cache-umask")" = 700 ] || die "(g) cache directory made $(stat -c %a "$T/cache-umask") under umask 000, not 700"
[ ! -e "$T/cache-umask/control.sock" ] || [ "$(stat -c %a "$T/cache-umask/control.sock")" = 600 ] || die "(g) control.sock is not 0600"
mountpoint -q "$T/mnt-umask" || die "(g) the mount under umask 000 failed: $(cat "$T/hyd-umask.err")"
pid=$(cat "$T/cache-umask/hydrator.pid") || die "(g) no hydrator.pid under umask 000"
fusermount3 -u "$T/mnt-umask" || die "(g) fusermount3 -u mnt-umask"
e2e_gone "$pid" 10 || die "(g) the hydrator of mnt-umask still runs 10 s after its unmount"
[ "$(hyd_exit_status "$T/cache-umask" "$pid")" = 0 ] || die "(g) the hydrator of mnt-umask did not exit 0"
ok "(g) no token in any log (replicator -v included); cache directory 0700 even under umask 000"

# (h) the Authorization header as raw bytes.
timeout 120 python3 - "$port" "$(cat "$T/a.token")" <<'PY' || die "(h) raw Authorization headers"
import socket, sys, time
port, tok = int(sys.argv[1]), sys.argv[2].encode()
s = socket.create_connection(("127.0.0.1", port), timeout=60)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""

def answer():
    global buf
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        assert d, "closed before an answer"
        buf += d
    head, buf = buf.split(b"\r\n\r\n", 1)
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0]
    while len(buf) < n:
        buf += s.recv(65536)
    buf = buf[n:]
    return int(head.split(b" ")[1])

def ask(headers, trickle=False):
    req = b"GET /v1/a/HEAD HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n"
    if trickle:  # pauses, so the server reads the value in pieces
        for i in range(0, len(req), 8):
            s.send(req[i:i + 8])
            time.sleep(0.02)
    else:
        s.sendall(req)
    return answer()

cases = [
    (b"Authorization: Bearer " + tok + b"\r\n", 200, True),
    (b"authorization:   bEaReR   " + tok + b"  \r\n", 200, False),
    (b"Authorization: Bearer " + tok + b"\r\nAuthorization: Bearer " + tok + b"\r\n", 401, False),
    (b"Authorization: Bearer " + tok + b"x" * 2000 + b"\r\n", 401, False),
    (b"Authorization: Basic " + tok + b"\r\n", 401, False),
    (b"Authorization: Bearer" + tok + b"\r\n", 401, False),
    (b"Authorization: Bearer " + tok[:-1] + b"\r\n", 401, False),
    (b"Authorization: Bearer " + tok + b"\r\n", 200, False),
]
for hdr, want, trickle in cases:
    got = ask(hdr, trickle)
    assert got == want, (hdr[:60], got, want)
print("ok: %d raw requests on one connection answered as expected" % len(cases))
PY
ok "(h) raw Authorization headers: trickled whole, doubled, over-long, other schemes"
stop_repl
