#!/usr/bin/env bash
# bench/ssh_ttfb.sh BUILD_DIR — time to first byte over ssh against https
# with tokens: from `ferry-hydrator` start to the first file read back
# through a cold mount, the source a tree of SSH_FILES small files.
# Called by bench/run.sh (SSH=1, the default); runs on its own as well.
#
#   ttfb_tls     ferry-hydrator --ca-file --token-file https://SRC/v1/w MNT
#                (a replicator started beforehand with --tls-cert and
#                --tokens, as a site runs one)
#   ttfb_ssh     ferry-hydrator -e SSH root@SRC:PATH MNT: ssh logs in,
#                starts ferry-replicator --session there (its state kept
#                from a warm-up run, as a second day's mount finds it),
#                forwards its Unix socket; nothing set up but sshd
#   ttfb_ssh_cm  the same through an ssh ControlMaster already up (the
#                login is not paid again)
# then cat MNT/one/first.txt. sshd runs in the source's namespace, the
# clients in the destination's; with an RTT the client reaches both
# through rttproxy (RTT/2 each way). The cache is new for every run.
#
# Knobs: SSH_RTTS ["0 50"], SSH_RUNS [3], SSH_FILES [10000], SSH_RATE
# [1gbit], BENCH_OUT (as run.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/ssh_ttfb.sh BUILD_DIR}" && pwd)
OUT=${BENCH_OUT:-$ROOT/build/bench}
RES=${RES:-$OUT/results.jsonl}
RATE=${SSH_RATE:-1gbit}
RTTS=${SSH_RTTS:-"0 50"}
RUNS=${SSH_RUNS:-3}
NFILES=${SSH_FILES:-10000}
WORK=$ROOT/build/bench/work
W=$WORK/ssh
SRC_IP=10.99.0.1
PORT=7076
SSH_PORT=2222
PX_TLS=7077
PX_SSH=7078
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
LINK=$ROOT/bench/link.sh
RTTPROXY=$B/bench/rttproxy

log() { echo "[$(date +%H:%M:%S)] ssh_ttfb: $*" >&2; }
. "$ROOT/bench/lib.sh"
emit() { python3 "$ROOT/bench/emit.py" "$@" >>"$RES"; }
SSHD_PID= PROXY_PID=
cleanup_ssh() {
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
	[ -f "$W/ssh/sshd.pid" ] && kill "$(cat "$W/ssh/sshd.pid")" 2>/dev/null
	[ -S "$W/cm.sock" ] && ssh -o ControlPath="$W/cm.sock" -O exit x 2>/dev/null
	mountpoint -q "$W/mnt" && fusermount3 -u "$W/mnt"
	bench_cleanup
}
trap cleanup_ssh EXIT
[ -x /usr/sbin/sshd ] || { log "sshd (openssh-server) is not installed"; exit 1; }
[ -x "$RTTPROXY" ] || { log "$RTTPROXY is missing (make builds it)"; exit 1; }

rm -rf "$W"
mkdir -p "$W/src/one" "$W/ssh" "$W/home" /run/sshd
python3 - "$W/src" "$NFILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = "%s/d%03d" % (root, i % 100)
    os.makedirs(d, exist_ok=True)
    with open("%s/f%05d.py" % (d, i), "wb") as f:
        f.write(os.urandom(2048))
with open(root + "/one/first.txt", "wb") as f:
    f.write(b"the first byte\n" * 64)
EOF
"$LINK" up "$RATE" >&2 || exit 1

# https with tokens: the certificates and a token, a replicator
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/ca.key" \
	-out "$W/ca.pem" -days 2 -subj "/CN=ferry bench CA" 2>/dev/null &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/srv.key" \
		-out "$W/srv.csr" -subj "/CN=$SRC_IP" 2>/dev/null &&
	printf 'subjectAltName=IP:%s,IP:127.0.0.1\n' "$SRC_IP" >"$W/ext" &&
	openssl x509 -req -in "$W/srv.csr" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial \
		-days 2 -extfile "$W/ext" -out "$W/srv.pem" 2>/dev/null || { log "openssl failed"; exit 1; }
"$B/bin/ferry" token new w >"$W/tok.out" || exit 1
head -n 1 "$W/tok.out" >"$W/token"
sed -n 2p "$W/tok.out" >"$W/tokens"
: >"$W/repl.log"
$NSS "$B/bin/ferry-replicator" -l "$SRC_IP:$PORT" -s "$W/state" --tls-cert "$W/srv.pem" \
	--tls-key "$W/srv.key" --tokens "$W/tokens" w="$W/src" >>"$W/repl.log" 2>&1 &
REPL_PID=$!
for i in $(seq 1 600); do grep -q ' ready' "$W/repl.log" && break; sleep 0.05; done

# sshd with its own keys; the session's HOME keeps the replicator's state
ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/host" && ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/user" || exit 1
cp "$W/ssh/user.pub" "$W/ssh/authorized_keys"
chmod 600 "$W/ssh/authorized_keys"
cat >"$W/ssh/sshd_config" <<EOF
ListenAddress $SRC_IP:$SSH_PORT
HostKey $W/ssh/host
AuthorizedKeysFile $W/ssh/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
AllowStreamLocalForwarding yes
PidFile $W/ssh/sshd.pid
SetEnv HOME=$W/home
EOF
$NSS /usr/sbin/sshd -f "$W/ssh/sshd_config" -E "$W/ssh/sshd.log" || { cat "$W/ssh/sshd.log" >&2; exit 1; }

# one run: APPR SOURCE [hydrator options...]; t from start to the byte
run() {
	local appr=$1 src=$2 rtt=$3 run=$4 t0 t1 ok
	shift 4
	rm -rf "$W/cache"
	mkdir -p "$W/mnt"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now)
	$NSD "$B/bin/ferry-hydrator" -q -c "$W/cache" "$@" "$src" "$W/mnt" >"$W/$appr.out" 2>&1 &&
		$NSD cat "$W/mnt/one/first.txt" >"$W/first.txt" 2>>"$W/$appr.out"
	t1=$(now)
	ok=$(cmp -s "$W/first.txt" "$W/src/one/first.txt" && echo exact || echo DIFF)
	mountpoint -q "$W/mnt" && fusermount3 -u "$W/mnt"
	for i in $(seq 1 100); do pgrep -f "ferry-hydrator -q -c $W/cache" >/dev/null || break; sleep 0.05; done
	[ "$appr" = ttfb_warmup ] || emit "$appr" "ttfb-${rtt}ms" "$run" rc=0 full_s="$(dt "$t0" "$t1")" verdict="$ok" \
		strict_ok="$([ "$ok" = exact ] && echo true || echo false)"
	log "$appr at ${rtt} ms: $(dt "$t0" "$t1")s $ok"
}

for rtt in $RTTS; do
	if [ "$rtt" = 0 ]; then
		host=$SRC_IP tport=$PORT sport=$SSH_PORT
	else
		: >"$W/px.log"
		$NSD "$RTTPROXY" "127.0.0.1:$PX_TLS" "$SRC_IP:$PORT" "$(python3 -c "print($rtt / 2)")" \
			"127.0.0.1:$PX_SSH" "$SRC_IP:$SSH_PORT" >"$W/px.log" 2>&1 &
		PROXY_PID=$!
		for i in $(seq 1 100); do [ "$(grep -c '^rttproxy: ready' "$W/px.log")" -ge 2 ] && break; sleep 0.05; done
		host=127.0.0.1 tport=$PX_TLS sport=$PX_SSH
	fi
	RSH="ssh -i $W/ssh/user -o UserKnownHostsFile=$W/ssh/known -o StrictHostKeyChecking=accept-new -o BatchMode=yes -p $sport"
	SSHO=(-e "$RSH" --remote-ferry "$B/bin/ferry-replicator")
	# warm-up: the session replicator's state on the host (its first walk
	# and hashing), and the host key
	run ttfb_warmup "root@$host:$W/src" "$rtt" 0 "${SSHO[@]}" >/dev/null 2>&1
	for i in $(seq 1 "$RUNS"); do
		run ttfb_tls "https://$host:$tport/v1/w" "$rtt" "$i" --ca-file "$W/ca.pem" --token-file "$W/token"
		run ttfb_ssh "root@$host:$W/src" "$rtt" "$i" "${SSHO[@]}"
	done
	$NSD $RSH -o ControlMaster=yes -o ControlPath="$W/cm.sock" -o ControlPersist=120 -N -f root@"$host" || log "no ControlMaster"
	for i in $(seq 1 "$RUNS"); do
		run ttfb_ssh_cm "root@$host:$W/src" "$rtt" "$i" -e "$RSH -o ControlPath=$W/cm.sock" \
			--remote-ferry "$B/bin/ferry-replicator"
	done
	$NSD ssh -o ControlPath="$W/cm.sock" -O exit root@"$host" 2>/dev/null
	[ -n "$PROXY_PID" ] && { kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null; PROXY_PID=; }
done
kill "$REPL_PID" 2>/dev/null
wait "$REPL_PID" 2>/dev/null
exit 0
