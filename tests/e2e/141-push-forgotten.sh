#!/usr/bin/env bash
# 141: a push to inodes the kernel has forgotten is dropped without a word
# on the hydrator's log. The kernel answers FUSE_NOTIFY_STORE for an inode
# it does not hold with ENOENT, which is no error here (the reader will
# read the file itself). Sent by splice, as libfuse does for buffers of
# two pages or more, that answer made libfuse print "fuse: splice from
# pipe: No such file or directory" on the daemon's stderr, one line per
# file, into hydrator.log, where it reads as a failure. A fresh mount of a
# complete cache; d listed (READDIRPLUS notes every file for the push);
# the kernel's dentries and inodes dropped (FORGET for every file); one
# read of d/f00, whose push job then stores f01..f39 (12 KiB each) to
# inodes the kernel no longer has. The log must hold no such line, the
# files must read back exact, and the push's count must not claim them.
# Then the same push from files --into has landed in DIR (read from
# DIR's files): a fresh mount over the landed DIR, d listed, f00 read:
# f01..f39 are pushed, cached whole, and read back exact; and after a
# write into DIR's f05 (mtime put back), f05 is not pushed from DIR and
# reads as the source.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/push.sh"
need_fuse
[ -w /proc/sys/vm/drop_caches ] || skip "cannot drop the kernel's caches (not root)"
command -v fincore >/dev/null || skip "fincore (util-linux) is missing"
mkdir -p "$T/src/d"
for i in $(seq -w 0 39); do head -c 12288 /dev/urandom >"$T/src/d/f$i"; done
port=$(free_port)
start_repl "$port" "s=$T/src"
URL=http://127.0.0.1:$port/v1/s
mount_hyd "$URL" "$T/mnt"
wait_status "$T/cache" state complete 60 || die "backfill did not complete"
umount_hyd "$T/mnt"

mount_hyd "$URL" "$T/mnt"
ls -l "$T/mnt/d" >/dev/null # READDIRPLUS: every file noted for the push
sync
echo 2 >/proc/sys/vm/drop_caches # dentries and inodes: FORGET for each
head -c 1 "$T/mnt/d/f00" >/dev/null
# the push runs on its own thread: wait until its job has gone through
# (the forgotten files are not pushed again: only a listing's are)
sleep 2
for i in $(seq -w 0 39); do
	cmp -s "$T/src/d/f$i" "$T/mnt/d/f$i" || die "d/f$i read back wrong"
done
ok "d reads back the source's bytes"
umount_hyd "$T/mnt"
if grep -n "splice from pipe\|writing device" "$T/cache/hydrator.log" >&2; then
	die "the hydrator's log has libfuse's complaint of a push to a forgotten inode (above)"
fi
ok "no complaint of a push to a forgotten inode in the log"
line=$(push_line)
pushed=$(pushed_of "$line")
[ -n "$pushed" ] || die "no push line in the log: $line"
[ "$pushed" -le 10 ] || die "$pushed files counted as pushed, most of them to forgotten inodes ($line)"
ok "$pushed files counted as pushed (the kernel had forgotten the rest)"

D="$T/dir"
mount_hyd "$URL" "$T/mnt" --into "$D"
wait_status "$T/cache" into landed 120 || die "DIR did not land"
umount_hyd "$T/mnt"
mount_hyd "$URL" "$T/mnt" --into "$D"
wait_status "$T/cache" into landed 120 || die "DIR is not landed on the second mount"
ls -l "$T/mnt/d" >/dev/null
head -c 1 "$T/mnt/d/f00" >/dev/null
n=$(seen_cached "$T/mnt/d/f" 01 39 12288)
[ "$n" -ge 35 ] || die "after the first read of d/f00 on a landed mount, $n of f01..f39 were seen cached; not: $(tr '\n' ' ' <"$T/missing")"
for i in $(seq -w 0 39); do
	cmp -s "$T/src/d/f$i" "$T/mnt/d/f$i" || die "d/f$i read back wrong from the landed mount"
done
umount_hyd "$T/mnt"
line=$(push_line)
pushed=$(pushed_of "$line")
[ "$pushed" = 39 ] || die "$pushed files pushed from DIR's files, not 39 ($line)"
ok "landed mount: f01..f39 pushed from DIR's files ($n seen cached), all read back exact"

# Someone writes into DIR's f05 (its mtime put back: only the ctime
# tells): a push from DIR must not put those bytes in the mount's page
# cache; f05 reads as the source has it.
touch -r "$D/d/f05" "$T/stamp"
printf 'NOT THE SOURCE' | dd of="$D/d/f05" bs=1 seek=100 conv=notrunc status=none
touch -r "$T/stamp" "$D/d/f05"
cmp -s "$T/src/d/f05" "$D/d/f05" && die "DIR's d/f05 equals the source: the write into it did not happen"
mount_hyd "$URL" "$T/mnt" --into "$D"
ls -l "$T/mnt/d" >/dev/null
head -c 1 "$T/mnt/d/f00" >/dev/null
sleep 2
cmp "$T/src/d/f05" "$T/mnt/d/f05" || die "d/f05, written into in DIR, reads through the mount as DIR has it"
for i in $(seq -w 0 39); do
	cmp -s "$T/src/d/f$i" "$T/mnt/d/f$i" || die "d/f$i read back wrong after the write into DIR's f05"
done
umount_hyd "$T/mnt"
ok "a file written into in DIR is not pushed with DIR's bytes; the directory reads as the source"
stop_repl
