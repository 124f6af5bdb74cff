#!/usr/bin/env bash
# 400: ssh as the transport. A real sshd (openssh-server) on loopback in a
# network namespace of the test's own, key authentication; every client
# runs in that namespace (nsenter --net: its mounts stay visible here).
# Nothing is set up at the "remote" end but sshd: ferry sync and
# ferry-hydrator start ferry-replicator there through ssh, for themselves.
#  (a) `ferry sync root@127.0.0.1:SRC DEST` makes DEST/SRC exact (rsync's
#      rule), `...:SRC/ DEST2` fills DEST2, `...:SRC/FILE DEST` makes the
#      file DEST (or DEST/FILE in a directory);
#  (b) a rerun after one file changed moves only that file (the state on
#      the host is kept: only the changed file is fetched);
#  (c) after a sync nothing is left running: no replicator, no ssh, no
#      socket directory of ours;
#  (d) a mount over ssh is exact and follows a change at the source (the
#      replicator rescans at the mount's --poll), and the only TCP
#      listener in the namespace is sshd's (it serves a Unix socket);
#  (e) killing the mount's ssh (kill -9) stops the remote replicator; the
#      mount still serves what it has and unmounts cleanly;
#  (f) a host that refuses is exit 10 with a message, nothing left behind.
. "$(dirname "$0")/lib/common.sh"
need_fuse
SSHD=/usr/sbin/sshd
[ -x "$SSHD" ] || skip "sshd (openssh-server) is not installed"
command -v ssh >/dev/null || skip "ssh (openssh-client) is not installed"
command -v ip >/dev/null || skip "ip (iproute2) missing"
[ -x "$FERRY" ] || die "ferry not built"
NS="ferry-ssh-$$"
ip netns add "$NS" 2>/dev/null || skip "cannot create network namespaces here"
E2E_NETNS="$E2E_NETNS $NS"
ip -n "$NS" link set lo up
IN() { nsenter --net=/run/netns/"$NS" "$@"; }

# sshd: its own host key, our key, our config; the session's HOME is the
# test's, so the replicator's state stays in $T.
mkdir -p "$T/ssh" "$T/home" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/host" || die "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/user" || die "ssh-keygen"
cp "$T/ssh/user.pub" "$T/ssh/authorized_keys"
chmod 600 "$T/ssh/authorized_keys"
cat >"$T/ssh/sshd_config" <<EOF
ListenAddress 127.0.0.1:2222
HostKey $T/ssh/host
AuthorizedKeysFile $T/ssh/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
AllowStreamLocalForwarding yes
PidFile $T/ssh/sshd.pid
SetEnv HOME=$T/home
EOF
IN "$SSHD" -f "$T/ssh/sshd_config" -E "$T/ssh/sshd.log" || { cat "$T/ssh/sshd.log"; die "sshd did not start"; }
# (after cleanup, $T and the pid file in it are gone: found by its config)
e2e_after_cleanup() { pkill -f -- "-f $T/ssh/sshd_config" 2>/dev/null; }
RSH="ssh -i $T/ssh/user -o UserKnownHostsFile=$T/ssh/known -o StrictHostKeyChecking=accept-new -o BatchMode=yes -p 2222"
for i in $(seq 1 50); do IN $RSH root@127.0.0.1 true 2>/dev/null && break; sleep 0.1; done
IN $RSH root@127.0.0.1 true || die "cannot log in to the test's sshd"

mk_bulk_tree "$T/src" 4
printf 'hello\n' >"$T/src/small.txt"
chmod 640 "$T/src/small.txt"
SYNC=(IN "$FERRY" sync -e "$RSH" --remote-ferry "$REPL")
left() { # what of ours still runs: a session replicator or an ssh to it
	pgrep -f -- "--session .*-l unix:/tmp/ferry-ssh-"
	pgrep -f -- "ExitOnForwardFailure=yes -L"
	find /tmp -maxdepth 1 -type d -name 'ferry-ssh-*' -newer "$T/ssh/sshd_config"
}

# (a)
"${SYNC[@]}" --cache-dir "$T/cache" "root@127.0.0.1:$T/src" "$T/dst" >"$T/sync1.out" 2>&1 ||
	{ cat "$T/sync1.out"; die "(a) ferry sync over ssh failed"; }
diff -r "$T/src" "$T/dst/src" >/dev/null || die "(a) DEST/src is not the source"
[ "$(stat -c %a "$T/dst/src/small.txt")" = 640 ] || die "(a) a mode was not kept"
"${SYNC[@]}" --cache-dir "$T/cache" "ssh://root@127.0.0.1:2222$T/src/" "$T/dst2" >"$T/sync2.out" 2>&1 ||
	{ cat "$T/sync2.out"; die "(a) ferry sync of ssh://.../SRC/ failed"; }
diff -r "$T/src" "$T/dst2" >/dev/null || die "(a) SRC/ did not fill DEST2"
# a single file over ssh: DEST itself, or DEST/NAME in a directory
"${SYNC[@]}" -q --cache-dir "$T/cache1f" "root@127.0.0.1:$T/src/small.txt" "$T/one" ||
	die "(a) ferry sync HOST:FILE DEST failed"
mkdir -p "$T/onedir"
"${SYNC[@]}" -q --cache-dir "$T/cache1f" "root@127.0.0.1:$T/src/small.txt" "$T/onedir" ||
	die "(a) ferry sync HOST:FILE DIR failed"
cmp -s "$T/src/small.txt" "$T/one" && cmp -s "$T/src/small.txt" "$T/onedir/small.txt" &&
	[ "$(stat -c %a "$T/one")" = 640 ] || die "(a) a single file over ssh is not where rsync puts it"
ok "(a) HOST:SRC made DEST/SRC, ssh://HOST:PORT/SRC/ filled DEST2, HOST:FILE made DEST or DIR/FILE, exact"

# (b) one file changes; the rerun fetches it alone
printf 'changed\n' >"$T/src/small.txt"
touch -d '2020-01-01' "$T/src/small.txt"
"${SYNC[@]}" --cache-dir "$T/cache" "root@127.0.0.1:$T/src" "$T/dst" >"$T/sync3.out" 2>&1 ||
	{ cat "$T/sync3.out"; die "(b) the rerun failed"; }
cmp -s "$T/src/small.txt" "$T/dst/src/small.txt" || die "(b) the changed file did not come"
grep -q 'fetched 1 chunks' "$T/sync3.out" || { cat "$T/sync3.out"; die "(b) the rerun fetched more than the changed file"; }
[ -n "$(ls "$T/home/.cache/ferry/ssh/" 2>/dev/null)" ] || die "(b) no replicator state kept on the host"
ok "(b) a rerun fetched only the changed file; the state stays on the host"

# (c)
sleep 0.5
[ -z "$(left)" ] || die "(c) left after the sync: $(left)"
ok "(c) nothing of the sync left running"

# (d) a mount over ssh
mkdir -p "$T/mnt"
MOUNTS+=("$T/mnt")
IN "$HYD" -c "$T/cache" --poll 1 -e "$RSH" --remote-ferry "$REPL" "root@127.0.0.1:$T/src" "$T/mnt" 2>"$T/mount.err" ||
	{ cat "$T/mount.err"; die "(d) the mount over ssh failed"; }
diff -r "$T/src" "$T/mnt" >/dev/null || die "(d) the mount is not the source"
listeners=$(IN ss -Hltnp | grep -v sshd || true)
[ -z "$listeners" ] || die "(d) a TCP port is open besides sshd's: $listeners"
# it follows the source: the replicator rescans at the mount's --poll
echo followed >"$T/src/followed.txt"
for i in $(seq 1 200); do cmp -s "$T/src/followed.txt" "$T/mnt/followed.txt" 2>/dev/null && break; sleep 0.1; done
cmp -s "$T/src/followed.txt" "$T/mnt/followed.txt" || die "(d) a file made at the source did not reach the mount in 20 s"
ok "(d) the mount over ssh is exact and follows the source; no TCP port but sshd's"

# (e) the mount's ssh dies: the remote replicator goes with it
sshpid=$(pgrep -f -- "ExitOnForwardFailure=yes -L" | head -n1)
[ -n "$sshpid" ] || die "(e) no ssh process for the mount"
rpid=$(pgrep -f -- "--session .*-l unix:/tmp/ferry-ssh-" | head -n1)
[ -n "$rpid" ] || die "(e) no session replicator on the host"
kill -9 "$sshpid"
for i in $(seq 1 100); do kill -0 "$rpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$rpid" 2>/dev/null && die "(e) the remote replicator still runs 10 s after its ssh was killed"
cmp -s "$T/src/small.txt" "$T/mnt/small.txt" || die "(e) a file read before no longer reads"
umount_hyd "$T/mnt"
ok "(e) ssh killed: the remote replicator stopped; the mount unmounted cleanly"

# (f) a host that refuses
IN "$FERRY" sync -e "ssh -o BatchMode=yes -o ConnectTimeout=5 -p 1" "root@127.0.0.1:$T/src" "$T/dst3" >"$T/sync4.out" 2>&1
rc=$?
[ $rc = 10 ] || { cat "$T/sync4.out"; die "(f) exit $rc for a host that refuses, not 10"; }
grep -q 'ssh root@127.0.0.1' "$T/sync4.out" || { cat "$T/sync4.out"; die "(f) no message naming the host"; }
[ -z "$(left)" ] || die "(f) left after a failed start: $(left)"
ok "(f) a refusing host: exit 10, a message, nothing left"
