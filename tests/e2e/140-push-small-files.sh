#!/usr/bin/env bash
# 140: the first read of a small file pushes the files after it in its
# directory into the kernel's page cache (FUSE_NOTIFY_STORE), so a reader
# walking the directory finds them there. Checked by page residency
# (fincore) on a fresh mount of a complete cache: before the first read
# no later file has a page cached; after it the daemon says it pushed all
# 59, and all of their pages are cached (but a few the VM's own reclaim
# may take back), with the source's bytes.
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
# cached N — how many of f01..f59 have all their pages; the missing ones
# go to $T/missing
cached() {
	local i n=0
	: >"$T/missing"
	for i in $(seq -w 1 59); do
		if [ "$(resident "$T/mnt/d/f$i")" = 8192 ]; then n=$((n + 1)); else echo "f$i" >>"$T/missing"; fi
	done
	echo "$n"
}
# The push runs on a thread of its own: give it up to 10 s for all 59.
# This VM also reclaims page cache it finds cold on its own (a kdamond
# with a pageout scheme): a page pushed here can be taken again seconds
# later, so up to 4 of the 59 may have lost one. The daemon's own count
# of pushes, below, must be exact; without the push, none is cached.
for k in $(seq 1 100); do
	n=$(cached)
	[ "$n" = 59 ] && break
	sleep 0.1
done
[ "$n" -ge 55 ] || die "after the first read of f00, $n of the 59 files after it are cached; not: $(tr '\n' ' ' <"$T/missing")"
[ "$n" = 59 ] || log "not all pages stayed (the VM's reclaim): $(tr '\n' ' ' <"$T/missing")"
ok "first read of f00: $n of the 59 files after it are in the page cache"
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
