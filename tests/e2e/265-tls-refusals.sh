#!/usr/bin/env bash
# 265: what https refuses, and a certificate reload (certificates made
# here with the openssl CLI):
#  (a) a server certificate the client does not trust (--ca-file of
#      another CA; the system's CAs): the hydrator exits 1 and ferry sync
#      12, each with one line saying the certificate is not trusted;
#      nothing mounted, nothing stored, no DEST;
#  (b) an expired server certificate: the replicator warns at start; the
#      clients refuse it the same way, the line says it is not valid now;
#  (c) --client-ca: without a client certificate, or with one of another
#      CA, the same refusal, its line saying what the server wants; with
#      --cert/--key a mount reads exactly and ferry sync is exact;
#  (d) SIGHUP with a new certificate in the files: a keep-alive
#      connection opened before keeps working (its next request answered
#      on the same connection, still under the old certificate), a new
#      connection is shown the new one (openssl s_client); a reload from
#      a bad file logs one error line and the new certificate stays.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
. "$E2E_LIB/tls.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
S="$T/src"
mkdir -p "$S/d"
for i in $(seq 1 8); do head -c $((150000 + i)) /dev/urandom >"$S/d/f$i"; done
echo small >"$S/small"
mk_pki "$T/pki" || die "openssl could not make the test certificates"
P="$T/pki"
kpid=""
# the keep-alive client of (d), should the test end before it does
e2e_after_cleanup() { [ -z "$kpid" ] || kill "$kpid" 2>/dev/null; }
port=$(free_port)
URL="https://127.0.0.1:$port/v1/s"

# refused NAME WANT CLIENT_OPTS... — both clients, given CLIENT_OPTS,
# refuse the server: the hydrator exits 1, ferry sync 12, each with one
# line on stderr matching WANT; nothing mounted, nothing stored.
refused() {
	local name=$1 want=$2 rc
	shift 2
	mkdir -p "$T/m-$name"
	"$HYD" -c "$T/c-$name" "$@" "$URL" "$T/m-$name" 2>"$T/err-$name"
	rc=$?
	MOUNTS+=("$T/m-$name")
	[ "$rc" = 1 ] || die "$name: the hydrator exits $rc, not 1: $(cat "$T/err-$name")"
	! mountpoint -q "$T/m-$name" || die "$name: mounted anyway"
	[ "$(wc -l <"$T/err-$name")" = 1 ] || { cat "$T/err-$name"; die "$name: the hydrator said more than one line"; }
	grep -q "$want" "$T/err-$name" || die "$name: the hydrator's line does not say '$want': $(cat "$T/err-$name")"
	[ "$(stored_chunks "$T/c-$name")" = 0 ] && [ "$(catalogs_in "$T/c-$name")" = 0 ] ||
		die "$name: the hydrator stored something"
	log "$name: hydrator: $(cat "$T/err-$name")"
	"$FERRY" sync --cache-dir "$T/sc-$name" "$@" "$URL" "$T/dest-$name" 2>"$T/serr-$name" >/dev/null
	rc=$?
	[ "$rc" = 12 ] || die "$name: ferry sync exits $rc, not 12: $(cat "$T/serr-$name")"
	[ "$(wc -l <"$T/serr-$name")" = 1 ] || { cat "$T/serr-$name"; die "$name: ferry sync said more than one line"; }
	grep -q "$want" "$T/serr-$name" || die "$name: ferry sync's line does not say '$want': $(cat "$T/serr-$name")"
	[ ! -e "$T/dest-$name" ] || [ -z "$(ls -A "$T/dest-$name")" ] || die "$name: ferry sync wrote into DEST"
	[ "$(stored_chunks "$T/sc-$name")" = 0 ] && [ "$(catalogs_in "$T/sc-$name")" = 0 ] ||
		die "$name: ferry sync stored something"
}

# (a) not trusted
REPL_OPTS="--tls-cert $P/srv.pem --tls-key $P/srv.key" start_repl "$port" "s=$S"
refused other-ca "certificate is not trusted" --ca-file "$P/other-ca.pem"
refused system-cas "certificate is not trusted"
ok "(a) a server certificate of another CA, or checked against the system's CAs: one line each, exit 1 and 12, nothing mounted or stored"
stop_repl

# (b) expired
REPL_OPTS="--tls-cert $P/expired.pem --tls-key $P/expired.key" start_repl "$port" "s=$S"
grep -q 'warning: tls certificate outside its validity period .*not_after=2020-02-01T00:00:00Z' "$T/repl.log" ||
	die "(b) the replicator did not warn about its expired certificate"
refused expired "certificate is not valid now.*expired" --ca-file "$P/ca.pem"
ok "(b) an expired server certificate: the replicator warns, the clients refuse it with one line each"
stop_repl

# (c) mutual TLS
REPL_OPTS="--tls-cert $P/srv.pem --tls-key $P/srv.key --client-ca $P/ca.pem" start_repl "$port" "s=$S"
grep -q 'tls on .*client_certificates=required' "$T/repl.log" || die "(c) the 'tls on' line does not say client certificates are required"
refused no-cert "requires a client certificate" --ca-file "$P/ca.pem"
refused stranger "refused the client certificate" --ca-file "$P/ca.pem" --cert "$P/stranger.pem" --key "$P/stranger.key"
mount_hyd "$URL" "$T/mnt" --ca-file "$P/ca.pem" --cert "$P/cli.pem" --key "$P/cli.key"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(c) the mount with a client certificate differs"; }
umount_hyd "$T/mnt"
"$FERRY" sync -q --cache-dir "$T/scache" --ca-file "$P/ca.pem" --cert "$P/cli.pem" --key "$P/cli.key" "$URL" "$T/dest" ||
	die "(c) ferry sync with a client certificate failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp2.txt" || { cat "$T/cmp2.txt"; die "(c) ferry sync with a client certificate: tree differs"; }
ok "(c) --client-ca: none or another CA's refused with one line each; with --cert/--key mount and sync exact"
stop_repl

# (d) reload on SIGHUP
cp "$P/srv.pem" "$T/live.pem"
cp "$P/srv.key" "$T/live.key"
REPL_OPTS="--tls-cert $T/live.pem --tls-key $T/live.key" start_repl "$port" "s=$S"
[ "$(served_cn "$port" "$P/ca.pem")" = "ferry srv 1" ] || die "(d) a new connection is not shown 'ferry srv 1' at first"
# A keep-alive client: one request, then (when told) another on the same
# connection; it says which certificate it saw and from which local port.
python3 - "$port" "$P/ca.pem" "$T/ka" <<'PY' &
import http.client, os, ssl, sys, time
port, ca, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = http.client.HTTPSConnection("127.0.0.1", port,
                                context=ssl.create_default_context(cafile=ca))
def ask():
    c.request("GET", "/v1/s/HEAD")
    r = c.getresponse()
    body = r.read().decode().strip()
    cn = dict(x[0] for x in c.sock.getpeercert()["subject"])["commonName"]
    return "%d %s %s %d" % (r.status, body, cn.replace(" ", "_"), c.sock.getsockname()[1])
with open(out + ".1.tmp", "w") as f:
    f.write(ask() + "\n")
os.rename(out + ".1.tmp", out + ".1")
end = time.monotonic() + 120
while not os.path.exists(out + ".go") and time.monotonic() < end:
    time.sleep(0.05)
with open(out + ".2.tmp", "w") as f:
    f.write(ask() + "\n")
os.rename(out + ".2.tmp", out + ".2")
PY
kpid=$!
wait_for 60 test -e "$T/ka.1" || die "(d) the keep-alive client's first request got no answer"
read -r st1 gen1 cn1 lport1 <"$T/ka.1"
[ "$st1 $cn1" = "200 ferry_srv_1" ] || die "(d) first request: $(cat "$T/ka.1")"
cp "$P/srv2.pem" "$T/live.pem"
cp "$P/srv2.key" "$T/live.key"
kill -HUP "$REPL_PID"
wait_for 60 grep -q 'tls certificate reloaded subject="CN=ferry srv 2"' "$T/repl.log" || { cat "$T/repl.log"; die "(d) no reload line after SIGHUP"; }
[ "$(served_cn "$port" "$P/ca.pem")" = "ferry srv 2" ] || die "(d) a new connection is not shown 'ferry srv 2' after the reload"
touch "$T/ka.go"
wait "$kpid" || { kpid=""; die "(d) the keep-alive client failed after the reload"; }
kpid=""
read -r st2 gen2 cn2 lport2 <"$T/ka.2"
[ "$st2" = 200 ] && [ "$gen2" = "$gen1" ] || die "(d) second request on the kept connection: $(cat "$T/ka.2")"
[ "$lport2" = "$lport1" ] || die "(d) the client had to connect again (local port $lport1, then $lport2)"
[ "$cn2" = ferry_srv_1 ] || die "(d) the kept connection changed certificate: $cn2"
ok "(d) SIGHUP: the connection opened before answered again on the same socket under 'ferry srv 1'; a new one is shown 'ferry srv 2'"
# A reload that fails: one error line, the certificate in use stays.
errs=$(grep -c 'error: ' "$T/repl.log")
echo "not a certificate" >"$T/live.pem"
kill -HUP "$REPL_PID"
wait_for 60 grep -q 'error: tls reload failed, the certificate in use stays: cannot load the certificate path=.*live.pem: no start line' "$T/repl.log" ||
	{ cat "$T/repl.log"; die "(d) no error line for a reload from a bad file"; }
# both rescans (SIGHUP's other job) done: no line of theirs comes later
wait_for 60 eval '[ "$(grep -c "rescan found no change" "$T/repl.log")" -ge 2 ]' || die "(d) the rescans did not finish"
[ "$(grep -c 'error: ' "$T/repl.log")" = $((errs + 1)) ] || { cat "$T/repl.log"; die "(d) the failed reload did not log exactly one error line"; }
[ "$(served_cn "$port" "$P/ca.pem")" = "ferry srv 2" ] || die "(d) after a failed reload a new connection is not shown 'ferry srv 2'"
log "(d) $(grep 'tls reload failed' "$T/repl.log")"
ok "(d) a reload from a bad file: one error line, 'ferry srv 2' still served"
stop_repl
