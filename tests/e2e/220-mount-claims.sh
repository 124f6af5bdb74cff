#!/usr/bin/env bash
# 220: what ferry-hydrator(1) says about the mount itself:
#  (a) it is read-only: writing, creating, removing, renaming, chmod,
#      truncating, setting an xattr or linking inside it fail with EROFS;
#  (b) -o allow_other lets another user see the tree, subject to its
#      permission bits (default_permissions); without it that user gets
#      nothing; -o with anything else is a usage error (exit 2);
#  (c) SIGTERM ends the hydrator: a read blocked on an unreachable server
#      fails at once instead of waiting out its --timeout, the mount goes
#      away, the pid file is removed; in the foreground (-f) it exits 0;
#      and a SIGTERM in the middle of a backfill leaves a cache the next
#      mount completes;
#  (d) df: used is the tree's size, available the cache directory's file
#      system's free space (never 100% used);
#  (e) a kill -9 costs at most the two store groups not yet durable and
#      the transfers under way, fetched again by the next mount.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
command -v setfattr >/dev/null || skip "setfattr (Debian package attr) missing"
# the other user must be able to walk to the mountpoint
chmod 755 "$T"
S="$T/src"
mkdir -p "$S/d"
head -c 50000 /dev/urandom >"$S/open.bin"
chmod 644 "$S/open.bin"
head -c 50000 /dev/urandom >"$S/private.bin"
chmod 600 "$S/private.bin"
echo x >"$S/d/f"
mk_bulk_tree "$S/bulk" 24
port=$(free_port)
REPL_OPTS=--hash-before-publish start_repl "$port" "m=$S"
URL="http://127.0.0.1:$port/v1/m"
M="$T/mnt"

# (a) read-only
mount_hyd "$URL" "$M" --no-backfill
python3 - "$M" <<'PY' || die "(a) a write to the mount did not fail with EROFS"
import errno, os, sys
m = sys.argv[1]
p = lambda *x: os.path.join(m, *x)
tries = {
    "open O_WRONLY": lambda: os.open(p("open.bin"), os.O_WRONLY),
    "open O_RDWR": lambda: os.open(p("open.bin"), os.O_RDWR),
    "open O_TRUNC": lambda: os.open(p("open.bin"), os.O_RDONLY | os.O_TRUNC),
    "create": lambda: os.open(p("new"), os.O_WRONLY | os.O_CREAT, 0o644),
    "mkdir": lambda: os.mkdir(p("newdir")),
    "unlink": lambda: os.unlink(p("open.bin")),
    "rmdir": lambda: os.rmdir(p("d")),
    "rename": lambda: os.rename(p("open.bin"), p("moved")),
    "chmod": lambda: os.chmod(p("open.bin"), 0o600),
    "chown": lambda: os.chown(p("open.bin"), 1, 1),
    "utime": lambda: os.utime(p("open.bin"), (1, 1)),
    "truncate": lambda: os.truncate(p("open.bin"), 0),
    "setxattr": lambda: os.setxattr(p("open.bin"), "user.x", b"1"),
    "symlink": lambda: os.symlink("open.bin", p("sl")),
    "link": lambda: os.link(p("open.bin"), p("hl")),
    "mknod fifo": lambda: os.mkfifo(p("fifo")),
}
bad = []
for what, f in tries.items():
    try:
        f()
        bad.append("%s succeeded" % what)
    except OSError as e:
        if e.errno != errno.EROFS:
            bad.append("%s: %s, not EROFS" % (what, e))
assert not bad, bad
print("# %d kinds of write, each EROFS" % len(tries))
PY
cmp "$S/open.bin" "$M/open.bin" || die "(a) the file changed"
ok "(a) every kind of write to the mount fails with EROFS; the tree is unchanged"
umount_hyd "$M"

# (b) other users: nothing without allow_other, permission bits with it
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
mount_hyd "$URL" "$M" --no-backfill
if as_nobody stat "$M/open.bin" >/dev/null 2>&1; then die "(b) another user sees the mount without allow_other"; fi
as_nobody cat "$M/open.bin" >/dev/null 2>"$T/err" && die "(b) another user read the mount without allow_other"
grep -q "Permission denied" "$T/err" || die "(b) without allow_other: $(cat "$T/err")"
umount_hyd "$M"
rm -rf "$T/cache"
mount_hyd "$URL" "$M" --no-backfill -o allow_other
as_nobody cat "$M/open.bin" >"$T/open.out" || die "(b) another user cannot read a 0644 file with allow_other"
cmp -s "$S/open.bin" "$T/open.out" || die "(b) another user read wrong bytes"
as_nobody ls "$M/d" >/dev/null || die "(b) another user cannot list a directory with allow_other"
as_nobody cat "$M/private.bin" >/dev/null 2>"$T/err" && die "(b) another user read a 0600 file of root"
grep -q "Permission denied" "$T/err" || die "(b) 0600 file: $(cat "$T/err")"
cat "$M/private.bin" | cmp -s - "$S/private.bin" || die "(b) root cannot read its 0600 file"
umount_hyd "$M"
mkdir -p "$T/m2"
"$HYD" -c "$T/c2" -o allow_other,bogus "$URL" "$T/m2" 2>"$T/err"
rc=$?
[ "$rc" = 2 ] || die "(b) -o bogus exits $rc, not 2: $(cat "$T/err")"
! mountpoint -q "$T/m2" || die "(b) -o bogus left a mount"
grep -q "bogus" "$T/err" || die "(b) -o bogus: the message does not name it: $(cat "$T/err")"
"$HYD" -c "$T/c2" -o ro,default_permissions --no-backfill "$URL" "$T/m2" || die "(b) -o ro,default_permissions refused"
MOUNTS+=("$T/m2")
fusermount3 -u "$T/m2"
ok "(b) without allow_other another user gets EACCES; with it, permission bits decide; -o bogus exits 2; ro and default_permissions accepted"

# (c) SIGTERM with a read blocked on an unreachable server (--timeout 60):
# the read fails at once, the mount and the pid file go.
rm -rf "$T/cache"
mount_hyd "$URL" "$M" --no-backfill --timeout 60
pid=$(cat "$T/cache/hydrator.pid")
stop_repl || die "replicator did not exit 0 on SIGTERM"
python3 -c 'import sys
try:
    open(sys.argv[1], "rb").read()
except OSError as e:
    print(e.errno)
    sys.exit(0)
sys.exit(1)' "$M/open.bin" >"$T/reader.out" 2>&1 &
rpid=$!
# the read is under way once the hydrator counts retries (the catalog
# holds every chunk list: --hash-before-publish; no backfill:
# only this read fetches)
wait_for 30 eval '[ "$(status_field "$T/cache" retries 2>/dev/null || echo 0)" -ge 1 ]' ||
	die "(c) the hydrator never retried the read's fetch"
kill -0 $rpid 2>/dev/null || die "(c) the read ended before SIGTERM: $(cat "$T/reader.out")"
kill -TERM "$pid"
# long before the read's own --timeout (60 s) would end it
wait_exited $rpid 20 || die "(c) the blocked read did not end after SIGTERM"
wait "$rpid" || die "(c) the read succeeded with the server gone: $(cat "$T/reader.out")"
log "(c) the blocked read ended with errno $(cat "$T/reader.out")"
wait_exited "$pid" 20 || die "(c) the hydrator did not exit after SIGTERM"
wait_for 10 eval '! mountpoint -q "$M"' || die "(c) the mount is still there after SIGTERM"
[ ! -e "$T/cache/hydrator.pid" ] || die "(c) hydrator.pid left behind"
grep -q "stopping" "$T/cache/hydrator.log" || die "(c) no stop line in the log"
ok "(c) SIGTERM: a blocked read fails at once (not after --timeout), the hydrator exits, unmounted, pid file removed"

# (c) in the foreground, in the middle of a backfill: exit 0, and the
# next mount on the cache completes.
REPL_OPTS=--hash-before-publish start_repl "$port" "m=$S"
rm -rf "$T/cache"
mkdir -p "$M"
"$HYD" -f -c "$T/cache" --bwlimit 4M "$URL" "$M" 2>"$T/fg.log" &
fpid=$!
wait_for 60 eval '[ "$(sqlite3 "$T/cache/state.db" "select count(*) from chunk" 2>/dev/null || echo 0)" -ge 20 ]' ||
	die "(c) the foreground hydrator stored nothing"
kill -TERM "$fpid"
wait "$fpid"
rc=$?
[ "$rc" = 0 ] || { tail "$T/fg.log"; die "(c) -f ended by SIGTERM exits $rc, not 0"; }
! mountpoint -q "$M" || die "(c) -f: still mounted after SIGTERM"
[ "$(sqlite3 "$T/cache/state.db" "pragma integrity_check")" = ok ] || die "(c) state.db damaged"
have=$(sqlite3 "$T/cache/state.db" "select count(*) from chunk")
total=$(sql "$(manifests_db m "$T/manifests.db")" "select count(distinct id) from chunk")
[ "$have" -lt "$total" ] || die "(c) SIGTERM landed after the backfill was done ($have of $total)"
log "(c) SIGTERM with $have of $total chunks stored"
mount_hyd "$URL" "$M"
wait_status "$T/cache" state complete 120 || die "(c) the next mount did not complete the backfill"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$M" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(c) tree differs"; }
ok "(c) -f and SIGTERM mid-backfill: exit 0, unmounted, index intact; the next mount completes, tree exact"
umount_hyd "$M"

# (d) df on the mount: used is the tree's size, available what the cache
# directory's file system can still take (positive: a read-only mount no
# longer reads 100% full), size the two together; inodes alike.
mount_hyd "$URL" "$M" --no-backfill
read -r bsize blocks bfree bavail files ffree <<<"$(stat -f -c '%S %b %f %a %c %d' "$M")"
read -r cbsize cavail cffree <<<"$(stat -f -c '%S %a %d' "$T/cache")"
want_used=$(python3 - "$S" "$bsize" <<'PY'
import os, sys
seen, total = set(), 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        st = os.lstat(os.path.join(d, f))
        if st.st_ino not in seen and not os.path.islink(os.path.join(d, f)):
            seen.add(st.st_ino)
            total += st.st_size
print((total + int(sys.argv[2]) - 1) // int(sys.argv[2]))
PY
)
[ $((blocks - bfree)) = "$want_used" ] || die "(d) used blocks $((blocks - bfree)), not the tree's $want_used"
[ "$bavail" -gt 0 ] && [ "$bavail" = "$bfree" ] || die "(d) available $bavail, free $bfree: not positive and equal"
# the cache's free bytes, give or take what changed in between
c=$((cavail * cbsize / bsize))
diff=$((bavail > c ? bavail - c : c - bavail))
[ "$diff" -le $((c / 20 + 16384)) ] || die "(d) available $bavail blocks, the cache's file system has $c free"
[ "$ffree" -gt 0 ] && [ "$files" -gt "$ffree" ] || die "(d) inodes: $files total, $ffree free"
pcent=$(df --output=pcent "$M" | tail -n 1 | tr -d ' %')
ipcent=$(df --output=ipcent "$M" | tail -n 1 | tr -d ' %')
[ "$pcent" -lt 100 ] && [ "$ipcent" -lt 100 ] || die "(d) df says ${pcent}% used, ${ipcent}% of inodes"
umount_hyd "$M"
ok "(d) df: used = the tree ($want_used blocks), available = the cache's free space ($bavail blocks), ${pcent}% used, ${ipcent}% of inodes"
stop_repl || die "replicator did not exit 0 on SIGTERM"

# (e) what a kill -9 costs (README, ferry-hydrator(1) Stopping): the
# chunks verified but not yet durable, at most the two groups the store
# commits at a time (about 32 MiB of frames each), besides the transfers
# under way. Each group's sync is held 4 s (FERRY_STORE_SYNC_DELAY_MS),
# so on loopback the whole 100 MiB tree would arrive long before anything
# is durable if nothing bounded it; one connection (--jobs 1) bounds the
# transfers under way. After the kill the replicator served more than the
# store kept, by no more than 64 MiB and those transfers (16 MiB here);
# the next mount fetches at most that again and completes. (Bytes are
# the chunks' raw bytes: random data, stored as it came, so the frames
# the groups count are the same size.)
mk_bulk_tree "$T/big" 100
REPL_OPTS=--hash-before-publish start_repl "$port" "k=$T/big"
KURL="http://127.0.0.1:$port/v1/k"
rm -rf "$T/cache"
FERRY_STORE_SYNC_DELAY_MS=4000 mount_hyd "$KURL" "$M" --jobs 1
pid=$(cat "$T/cache/hydrator.pid")
wait_for 60 eval '[ "$(repl_stat "$port" k chunk_bytes_served)" -ge $((48 << 20)) ]' ||
	die "(e) the backfill did not get going"
sleep 2
kill -9 "$pid"
wait_exited "$pid" || die "(e) hydrator $pid still running after kill -9"
fusermount3 -u "$M" 2>/dev/null || umount -l "$M"
wait_repl_quiet "$port" || die "(e) the replicator kept connections of the killed hydrator open"
served=$(repl_stat "$port" k chunk_bytes_served)
kept=$(sqlite3 "$T/cache/state.db" "select ifnull(sum(raw_len), 0) from chunk")
lost=$((served - kept))
log "(e) killed: served $((served >> 20)) MiB, durable $((kept >> 20)) MiB, lost $((lost >> 20)) MiB"
[ "$lost" -gt 0 ] || die "(e) a kill with groups held lost nothing: the test proves nothing"
[ "$lost" -le $(((64 + 16) << 20)) ] || die "(e) a kill lost $((lost >> 20)) MiB, more than two groups and the transfers under way"
mount_hyd "$KURL" "$M"
wait_status "$T/cache" state complete 180 || die "(e) the next mount did not complete"
total=$(sqlite3 "$T/cache/state.db" "select sum(raw_len) from chunk")
again=$(($(repl_stat "$port" k chunk_bytes_served) - total))
[ "$again" -le "$lost" ] || die "(e) fetched $((again >> 20)) MiB twice, more than the $((lost >> 20)) MiB the kill lost"
python3 "$E2E_LIB/treecmp.py" --content "$T/big" "$M" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(e) tree differs"; }
umount_hyd "$M"
ok "(e) kill -9 with groups held: lost $((lost >> 20)) MiB (<= 2 x 32 MiB + transfers), fetched $((again >> 20)) MiB again, tree exact"
stop_repl || die "replicator did not exit 0 on SIGTERM"
