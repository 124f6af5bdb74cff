#!/usr/bin/env bash
# 240: hydration from a static layout (docs/protocol.md: v1/NS/HEAD,
# v1/NS/catalog/GEN and v1/NS/chunk/ID as plain files are enough for a
# hydrator, GET only, no batch), served by python's http.server with the
# replicator stopped:
#  (a) a mount backfills to complete: the batch endpoint answers 501, and
#      from then on chunks come one GET each (ferry-hydrator(1)), each
#      distinct chunk once; the tree is exact;
#  (b) ferry sync writes the same tree from the layout;
#  (c) the same layout over https (a self-signed certificate the test
#      makes, trusted inside a private mount namespace by binding it over
#      the system's CA bundle): ferry sync and a mount work; outside that
#      namespace the certificate is refused with a line that says so.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
S="$T/src"
mk_bulk_tree "$S" 8
mkdir -p "$S/small"
for i in 1 2 3; do echo "small $i" >"$S/small/s$i"; done
ln -s ../small/s1 "$S/small/link"
port=$(free_port)
REPL_OPTS=--hash-before-publish start_repl "$port" "st=$S"
URL="http://127.0.0.1:$port/v1/st"

# The static layout: HEAD, the catalog and every chunk as files.
W="$T/www/v1/st"
mkdir -p "$W/catalog" "$W/chunk"
curl -sf "$URL/HEAD" >"$W/HEAD" || die "GET HEAD"
gen=$(cat "$W/HEAD")
curl -sf "$URL/catalog/$gen" >"$W/catalog/$gen" || die "GET catalog"
sql "$T/state/st/catalog/$gen.db" "select distinct lower(hex(id)) from chunk where id != zeroblob(32)" >"$T/ids"
distinct=$(wc -l <"$T/ids")
while read -r id; do curl -sf "$URL/chunk/$id" >"$W/chunk/$id" || die "GET chunk $id"; done <"$T/ids"
stop_repl || die "replicator did not exit 0 on SIGTERM"
log "static layout: generation $gen, $distinct chunks; the replicator is stopped"

# serve_static PORT LOGFILE [CERT KEY] — python's threading http.server
# over $T/www (https when given a certificate); sets SPID.
serve_static() {
	python3 - "$1" "$T/www" "${3:-}" "${4:-}" 2>"$2" <<'PY' &
import functools, http.server, ssl, sys
port, root, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
s = http.server.ThreadingHTTPServer(("127.0.0.1", port), h)
if cert:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
PY
	SPID=$!
	SPIDS+=("$SPID")
}
SPIDS=()
static_cleanup() {
	local p
	for p in "${SPIDS[@]}"; do kill "$p" 2>/dev/null; done
	cleanup
}
trap static_cleanup EXIT
sport=$(free_port)
serve_static "$sport" "$T/http.log"
SURL="http://127.0.0.1:$sport/v1/st"
wait_for 30 curl -sf -o /dev/null "$SURL/HEAD" || die "the static server did not start"

# (a) a mount of the layout backfills by single GETs after the 501
mount_hyd "$SURL" "$T/mnt" --jobs 4
wait_status "$T/cache" state complete 120 || die "(a) backfill from the static layout did not complete"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(a) tree differs"; }
umount_hyd "$T/mnt"
posts=$(grep -c '"POST /v1/st/chunks HTTP/1.1" 501' "$T/http.log")
gets=$(grep -c '"GET /v1/st/chunk/[0-9a-f]\{64\} HTTP/1.1" 200' "$T/http.log")
log "static server: $posts POST chunks (501), $gets chunk GETs for $distinct distinct chunks"
[ "$posts" -ge 1 ] || die "(a) the hydrator never tried the batch endpoint"
# one try per batch transfer at most (--jobs 4: 3 for batches), then never again
[ "$posts" -le 3 ] || die "(a) $posts batch requests: the hydrator did not fall back after the 501"
[ "$(grep -c '"POST ' "$T/http.log")" = "$posts" ] || die "(a) a POST answered other than 501"
[ "$gets" = "$distinct" ] || die "(a) $gets chunk GETs for $distinct distinct chunks"
ok "(a) mount of a static layout: batch 501 ($posts), then one GET per distinct chunk ($gets); complete, tree exact"

# (b) ferry sync of the layout
"$FERRY" sync -q --cache-dir "$T/scache" "$SURL" "$T/dest" || die "(b) ferry sync of the static layout failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(b) tree differs"; }
ok "(b) ferry sync of the static layout: tree exact"

# (c) https
command -v openssl >/dev/null || skip "openssl CLI missing (Debian package openssl): cannot make a test certificate"
command -v unshare >/dev/null || skip "unshare (util-linux) missing"
[ -f /etc/ssl/certs/ca-certificates.crt ] || skip "no /etc/ssl/certs/ca-certificates.crt (Debian package ca-certificates) to stand in for"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" -days 3650 \
	-subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2>"$T/openssl.err" ||
	die "(c) openssl could not make a certificate: $(cat "$T/openssl.err")"
tport=$(free_port)
serve_static "$tport" "$T/https.log" "$T/cert.pem" "$T/key.pem"
TURL="https://127.0.0.1:$tport/v1/st"
wait_for 30 curl -sf --cacert "$T/cert.pem" -o /dev/null "$TURL/HEAD" || die "the https server did not start"
# Not trusted here: refused, and the line says why.
mkdir -p "$T/m-untrusted"
"$HYD" -c "$T/c-untrusted" "$TURL" "$T/m-untrusted" 2>"$T/err"
rc=$?
[ "$rc" = 1 ] || die "(c) an untrusted certificate: the hydrator exits $rc, not 1"
! mountpoint -q "$T/m-untrusted" || die "(c) mounted over an untrusted certificate"
grep -qi "certificate\|SSL" "$T/err" || die "(c) the refusal does not say it is the certificate: $(cat "$T/err")"
log "(c) untrusted: $(cat "$T/err")"
# Trusted inside a private mount namespace: the certificate stands in
# for the system's bundle there only.
mkdir -p "$T/m-tls"
T="$T" TURL="$TURL" FERRY="$FERRY" HYD="$HYD" E2E_LIB="$E2E_LIB" S="$S" \
	unshare -m --propagation private bash -c '
	set -u
	mount --bind "$T/cert.pem" /etc/ssl/certs/ca-certificates.crt || exit 10
	"$FERRY" sync -q --cache-dir "$T/tcache" "$TURL" "$T/tdest" || exit 11
	python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/tdest" >"$T/tcmp.txt" || exit 12
	"$HYD" -c "$T/tmcache" --no-backfill "$TURL" "$T/m-tls" || exit 13
	trap "fusermount3 -u \"$T/m-tls\"" EXIT
	python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/m-tls" >"$T/tcmp2.txt" || exit 14
	exit 0'
rc=$?
case $rc in
0) ;;
10) die "(c) cannot bind the certificate over the CA bundle in a private namespace" ;;
11) die "(c) ferry sync over https failed" ;;
12) cat "$T/tcmp.txt"; die "(c) ferry sync over https: tree differs" ;;
13) die "(c) the hydrator could not mount over https" ;;
14) cat "$T/tcmp2.txt"; die "(c) the mount over https: tree differs" ;;
*) die "(c) https checks exited $rc" ;;
esac
grep -q '"GET /v1/st/chunk/' "$T/https.log" || die "(c) no chunk came over https"
ok "(c) https: with the certificate trusted, ferry sync and a mount read the layout exactly; untrusted, exit 1 naming the certificate"
