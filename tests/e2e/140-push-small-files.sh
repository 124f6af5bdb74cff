#!/usr/bin/env bash
# 140: the first read of a small file pushes the files after it in its
# directory into the kernel's page cache (FUSE_NOTIFY_STORE), so a reader
# walking the directory finds them there. Checked by page residency
# (fincore) on a fresh mount of a complete cache: before the first read
# no later file has a page cached; after it every one has all of its
# pages, with the source's bytes, and the daemon says how many it pushed.
. "$(dirname "$0")/lib/common.sh"
need_fuse
command -v fincore >/dev/null || skip "fincore (util-linux) is missing"
mkdir -p "$T/src/d"
for i in $(seq -w 0 59); do head -c 8192 /dev/urandom >"$T/src/d/f$i"; done
head -c 3000000 /dev/urandom >"$T/src/d/zz-big" # over 1 MiB: not pushed
port=$(free_port)
start_repl "$port" "s=$T/src"
URL=http://127.0.0.1:$port/v1/s
mount_hyd "$URL" "$T/mnt"
wait_status "$T/cache" state complete 60 || die "backfill did not complete"
umount_hyd "$T/mnt"
resident() { fincore -b -n -r -o RES "$1"; }
mount_hyd "$URL" "$T/mnt"
ls -l "$T/mnt/d" >/dev/null # READDIRPLUS: the kernel knows every inode
for i in $(seq -w 1 59); do
	[ "$(resident "$T/mnt/d/f$i")" = 0 ] || die "f$i is cached before any read"
done
head -c 1 "$T/mnt/d/f00" >/dev/null
for k in $(seq 1 100); do
	[ "$(resident "$T/mnt/d/f01")" = 8192 ] && break
	sleep 0.1
done
n=0
for i in $(seq -w 1 59); do
	[ "$(resident "$T/mnt/d/f$i")" = 8192 ] && n=$((n + 1))
done
[ "$n" = 59 ] || die "after the first read of f00, $n of the 59 files after it are cached"
ok "first read of f00: the 59 files after it are in the page cache"
[ "$(resident "$T/mnt/d/zz-big")" = 0 ] || die "a 3 MB file was pushed"
ok "a file over 1 MiB is left to readahead"
for i in $(seq -w 0 59); do
	cmp -s "$T/src/d/f$i" "$T/mnt/d/f$i" || die "f$i read back wrong"
done
ok "pushed files read back the source's bytes"
umount_hyd "$T/mnt"
grep -q "pushed small files into the page cache files=59" "$T/cache/hydrator.log" ||
	die "the log does not say 59 files were pushed: $(grep pushed "$T/cache/hydrator.log")"
ok "hydrator log: 59 files pushed"
