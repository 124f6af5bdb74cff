#!/usr/bin/env bash
# 140: the first read of a small file pushes the files after it in its
# directory into the kernel's page cache (FUSE_NOTIFY_STORE), so a reader
# walking the directory finds them there. Checked by page residency
# (fincore) on a fresh mount of a complete cache: before the first read
# no later file has a page cached; after it the daemon says it pushed all
# 59, and all of their pages are cached (but a few the VM's own reclaim
# may take back), with the source's bytes. Then a listing: on a second
# fresh mount a process reads one small file (its thread is a reader now)
# and lists another directory, d2, without reading it: d2's files are
# pushed at the listing; d3, listed by another process (ls: no reader),
# gets nothing pushed; then d3 read in a random order: no file is pushed
# twice. Last, a reader that read a file further on first (d4/k25, then
# k10): the second job passes over what was read or pushed and pushes the
# files between the two.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/push.sh"
need_fuse
command -v fincore >/dev/null || skip "fincore (util-linux) is missing"
mkdir -p "$T/src/d"
for i in $(seq -w 0 59); do head -c 8192 /dev/urandom >"$T/src/d/f$i"; done
head -c 3000000 /dev/urandom >"$T/src/d/zz-big" # over 1 MiB: not pushed
mkdir -p "$T/src/d2" "$T/src/d3"
for i in $(seq -w 0 29); do
	head -c 4096 /dev/urandom >"$T/src/d2/g$i"
	head -c 4096 /dev/urandom >"$T/src/d3/h$i"
done
mkdir -p "$T/src/d4"
for i in $(seq -w 0 29); do head -c 4096 /dev/urandom >"$T/src/d4/k$i"; done
port=$(free_port)
start_repl "$port" "s=$T/src"
URL=http://127.0.0.1:$port/v1/s
mount_hyd "$URL" "$T/mnt"
wait_status "$T/cache" state complete 60 || die "backfill did not complete"
umount_hyd "$T/mnt"
# read_back DIR: every file of DIR reads back through the mount with the
# source's bytes.
read_back() {
	local f
	for f in "$T/src/$1"/*; do
		cmp -s "$f" "$T/mnt/$1/${f##*/}" || die "$1/${f##*/} read back wrong"
	done
}
mount_hyd "$URL" "$T/mnt"
ls -l "$T/mnt/d" >/dev/null # READDIRPLUS: the kernel knows every inode
for i in $(seq -w 1 59); do
	[ "$(resident "$T/mnt/d/f$i")" = 0 ] || die "f$i is cached before any read"
done
head -c 1 "$T/mnt/d/f00" >/dev/null
# Which of f01..f59 were seen with all their pages cached at any poll: the
# push runs on a thread of its own, so it gets up to 10 s for all 59. This
# VM also reclaims page cache it finds cold on its own (a kdamond with a
# pageout scheme, which takes pages just filled in physical memory that
# had been idle for a minute): a file pushed here can lose its pages again
# before the next poll, so a file counts once seen whole, and up to 4 of
# the 59 may still be missed. The daemon's own count of pushes, below,
# must be exact; without the push, none is cached.
n=$(seen_cached "$T/mnt/d/f" 01 59 8192)
[ "$n" -ge 55 ] || die "after the first read of f00, $n of the 59 files after it are cached; not: $(tr '\n' ' ' <"$T/missing")"
[ "$n" = 59 ] || log "not all pages stayed (the VM's reclaim): $(tr '\n' ' ' <"$T/missing")"
ok "first read of f00: $n of the 59 files after it are in the page cache"
[ "$(resident "$T/mnt/d/zz-big")" = 0 ] || die "a 3 MB file was pushed"
ok "a file over 1 MiB is left to readahead"
read_back d
ok "pushed files read back the source's bytes"
umount_hyd "$T/mnt"
grep -q "pushed small files into the page cache files=59" "$T/cache/hydrator.log" ||
	die "the log does not say 59 files were pushed: $(grep pushed "$T/cache/hydrator.log")"
ok "hydrator log: 59 files pushed"

# A listing by a thread that read a small file.
mount_hyd "$URL" "$T/mnt"
python3 - "$T/mnt" <<'PY' || die "the reader failed"
import os, sys
m = sys.argv[1]
with open(os.path.join(m, "d", "f00"), "rb") as f:
    assert len(f.read()) == 8192
assert len(os.listdir(os.path.join(m, "d2"))) == 30
PY
n=$(seen_cached "$T/mnt/d2/g" 00 29 4096)
[ "$n" -ge 26 ] || die "after a reader listed d2, $n of its 30 files are cached; not: $(tr '\n' ' ' <"$T/missing")"
ok "a reader lists d2 and reads none of it: $n of its 30 files are in the page cache"
ls -l "$T/mnt/d3" >/dev/null
sleep 1
for i in $(seq -w 0 29); do
	[ "$(resident "$T/mnt/d3/h$i")" = 0 ] || die "d3/h$i is cached: a listing by ls (no reader) pushed"
done
ok "a listing by a process that read nothing pushes nothing"
read_back d2
ok "files pushed at a listing read back the source's bytes"
# d3 read whole in a random order: each first read not pushed ahead starts
# a job for the files after it, and the jobs overlap; no file is pushed
# twice, so this mount pushes at most 59 + 30 + 29 files.
python3 - "$T/mnt/d3" "$T/src/d3" <<'PY' || die "the random-order reader of d3 failed"
import os, random, sys
names = sorted(os.listdir(sys.argv[2]))
random.Random(7).shuffle(names)
for n in names:
    with open(os.path.join(sys.argv[1], n), "rb") as a, open(os.path.join(sys.argv[2], n), "rb") as b:
        assert a.read() == b.read(), n
PY
umount_hyd "$T/mnt"
line=$(push_line)
case $line in *" listings=1 "*) ;; *) die "the log does not say one listing was pushed: $line" ;; esac
ok "hydrator log: one listing pushed"
pushed=$(pushed_of "$line")
[ -n "$pushed" ] && [ "$pushed" -le 118 ] || die "$pushed files pushed on the second mount: some more than once ($line)"
ok "second mount: $pushed pushes, no file twice (at most 118)"

# A reader that has read a file further on. A fresh mount: d4/k25 read
# first (its job pushes k26..k29), then k10, whose job goes from k29 back
# to k11: it passes over k26..k29 (pushed) and k25 (read) and pushes
# k24..k11. It once stopped at the first file read (k25), which left
# k11..k24 to their reads: a data loader's epoch got 350-540 of its 3,000
# files pushed.
mount_hyd "$URL" "$T/mnt"
ls -l "$T/mnt/d4" >/dev/null # READDIRPLUS; ls reads nothing: no listing push
head -c 1 "$T/mnt/d4/k25" >/dev/null
n=$(seen_cached "$T/mnt/d4/k" 26 29 4096)
[ "$n" -ge 3 ] || die "after the first read of d4/k25, $n of k26..k29 are cached"
head -c 1 "$T/mnt/d4/k10" >/dev/null
n=$(seen_cached "$T/mnt/d4/k" 11 24 4096)
[ "$n" -ge 12 ] || die "after reads of d4/k25 then k10, $n of k11..k24 are cached; not: $(tr '\n' ' ' <"$T/missing")"
ok "reads of k25 then k10: $n of the 14 files between them are pushed (the job passes over k25)"
read_back d4
ok "d4 reads back the source's bytes"
umount_hyd "$T/mnt"
