#!/usr/bin/env bash
# 260: the replicator over https (--tls-cert/--tls-key, certificates made
# here with the openssl CLI), with a counting TCP relay between the
# clients and the server that keeps every byte it carries:
#  (a) everything a site-to-site run turns on: https (--ca-file), a token
#      of the namespace (--tokens, --token-file) and signed generations
#      (--sign-key, --trust-key). A mount reads the tree exactly and ferry
#      sync makes it exactly, both through the relay; without the token
#      sync is refused (exit 12); the relay carried TLS records (a
#      handshake first) and more bytes than the files hold, and neither a
#      known 64-byte sample of a source file (served raw: --codec raw) nor
#      the token is anywhere in them;
#  (b) the control: the same sync over plain http through the relay, and
#      the sample and the token are there, so (a)'s checks can fail;
#  (c) the warning: serving plain HTTP on a non-loopback address logs one
#      line saying so; on loopback, or with TLS, none.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
. "$E2E_LIB/tls.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
e2e_after_cleanup() { stop_relay; }
S="$T/src"
mk_bulk_tree "$S" 6
# The file the sample comes from: random bytes, so its 64 bytes at
# SAMPLE_OFF occur nowhere else by chance, and raw frames carry them as
# they are.
python3 -c 'import random,sys; sys.stdout.buffer.write(random.Random(260).randbytes(1 << 20))' >"$S/secret.bin"
SAMPLE_OFF=300000
mk_pki "$T/pki" || die "openssl could not make the test certificates"
CA="$T/pki/ca.pem"
bytes=$(find "$S" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
port=$(free_port)
rport=$(free_port)

# (a) https through the relay
"$FERRY" token new s >"$T/tok.out" || die "(a) ferry token new failed"
head -n 1 "$T/tok.out" >"$T/s.token"
sed -n 2p "$T/tok.out" >"$T/tokens"
TOKEN=$(cat "$T/s.token")
# has_token FILE... — 0 when the token is in one of them, 1 when in none
# (a token may start with '-': -e; grep's error 2 is a failure, not "no")
has_token() {
	local r
	grep -qaF -e "$TOKEN" "$@"
	r=$?
	[ "$r" -le 1 ] || die "grep failed ($r) looking for the token"
	return "$r"
}
"$FERRY" keygen -q "$T/keys" || die "(a) ferry keygen failed"
REPL_OPTS="--codec raw --tls-cert $T/pki/srv.pem --tls-key $T/pki/srv.key --tokens $T/tokens --sign-key $T/keys/sign.key" start_repl "$port" "s=$S"
grep -q 'tls on cert=.* subject="CN=ferry srv 1"' "$T/repl.log" || die "(a) no 'tls on' line naming the certificate"
start_relay "$rport" "$port" "$T/wire-tls"
URL="https://127.0.0.1:$rport/v1/s"
CREDS=(--ca-file "$CA" --token-file "$T/s.token" --trust-key "$T/keys/sign.pub")
mount_hyd "$URL" "$T/mnt" "${CREDS[@]}"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(a) the mount over https differs from the source"; }
umount_hyd "$T/mnt"
"$FERRY" sync -q --cache-dir "$T/ncache" --ca-file "$CA" --trust-key "$T/keys/sign.pub" "$URL" "$T/ndest" 2>"$T/ntok.err"
rc=$?
[ "$rc" = 12 ] || die "(a) ferry sync without the token exited $rc, not 12: $(cat "$T/ntok.err")"
"$FERRY" sync -q --cache-dir "$T/scache" "${CREDS[@]}" "$URL" "$T/dest" || die "(a) ferry sync over https failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp2.txt" || { cat "$T/cmp2.txt"; die "(a) ferry sync over https: tree differs"; }
stop_relay
down=$(stat -c %s "$T/wire-tls.down")
[ "$down" -gt "$bytes" ] || die "(a) the relay carried $down bytes to the clients, less than the $bytes of the files: not all went through it"
# Every connection opens with a TLS handshake record: 0x16, version 3.x.
[ "$(head -c 2 "$T/wire-tls.up" | od -An -tx1 | tr -d ' ')" = 1603 ] || die "(a) the first bytes to the server are not a TLS handshake"
if has_bytes "$T/wire-tls.down" "$S/secret.bin" "$SAMPLE_OFF" 64 ||
	has_bytes "$T/wire-tls.up" "$S/secret.bin" "$SAMPLE_OFF" 64; then
	die "(a) the 64-byte sample of secret.bin crossed the relay in the clear over https"
fi
! has_token "$T/wire-tls.up" "$T/wire-tls.down" || die "(a) the token crossed the relay in the clear over https"
! has_token "$T"/*.log || die "(a) the token is in a log"
ok "(a) https (--ca-file), a token, signed generations: mount and ferry sync exact through the relay, sync refused without the token; $down bytes to the clients, TLS from the first byte, neither the sample nor the token on the wire"
stop_repl

# (b) the control: plain http through the relay shows the sample
REPL_OPTS="--codec raw --tokens $T/tokens" start_repl "$port" "s=$S"
start_relay "$rport" "$port" "$T/wire-plain"
"$FERRY" sync -q --cache-dir "$T/pcache" --token-file "$T/s.token" "http://127.0.0.1:$rport/v1/s" "$T/pdest" || die "(b) ferry sync over http failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/pdest" >"$T/cmp3.txt" || { cat "$T/cmp3.txt"; die "(b) ferry sync over http: tree differs"; }
stop_relay
has_bytes "$T/wire-plain.down" "$S/secret.bin" "$SAMPLE_OFF" 64 ||
	die "(b) over plain http the sample is not in what the relay carried: the check of (a) proves nothing"
has_token "$T/wire-plain.up" ||
	die "(b) over plain http the token is not in what the relay carried: the check of (a) proves nothing"
ok "(b) control: over plain http the same sample and the token are on the wire"
stop_repl
! grep -q 'plain HTTP on a non-loopback' "$T/repl.log" || die "(c) a warning for plain HTTP on loopback"

# (c) plain HTTP on every interface: one warning line; with TLS none
wport=$(free_port)
for mode in plain tls; do
	opts=()
	[ $mode = tls ] && opts=(--tls-cert "$T/pki/srv.pem" --tls-key "$T/pki/srv.key")
	"$REPL" -l "0.0.0.0:$wport" -s "$T/wstate" "${opts[@]}" "w=$S" >"$T/w-$mode.log" 2>&1 &
	wpid=$!
	wait_for 60 grep -qs ' ready ns=w ' "$T/w-$mode.log" || { cat "$T/w-$mode.log"; die "(c) $mode on 0.0.0.0 not ready"; }
	kill -TERM "$wpid"
	wait "$wpid" || die "(c) the replicator ($mode on 0.0.0.0) did not exit 0 on SIGTERM"
	n=$(grep -c 'warning: serving plain HTTP on a non-loopback address address=0.0.0.0' "$T/w-$mode.log")
	case $mode in
	plain) [ "$n" = 1 ] || { cat "$T/w-$mode.log"; die "(c) plain HTTP on 0.0.0.0: $n warning lines, not 1"; } ;;
	tls) [ "$n" = 0 ] || die "(c) https on 0.0.0.0 warned about plain HTTP" ;;
	esac
done
log "(c) $(grep 'plain HTTP' "$T/w-plain.log")"
ok "(c) plain HTTP on 0.0.0.0 warned once; on loopback and with TLS not"
