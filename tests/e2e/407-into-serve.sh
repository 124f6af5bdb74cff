#!/usr/bin/env bash
# 407: once --into has landed a file, the mount reads it from DIR's file
# (spliced, no chunk lookup; ferry_hydrator_dir_read_bytes_total counts
# those bytes), and never serves DIR's bytes the landing did not write:
# after a landing, every file read through the mount equals the source
# and the big ones came from DIR; then someone writes into landed files
# of DIR: one not yet read through the mount (its mtime put back, so only
# the ctime tells), and one a reader holds open on the mount, half read.
# Both read on as the source's bytes (what changed in DIR is fetched
# again), and what DIR now holds is not served.
. "$(dirname "$0")/lib/common.sh"
need_fuse
S="$T/src"
mkdir -p "$S/small" "$S/a" "$S/b" "$S/c"
for i in $(seq 1 40); do head -c $((i * 700)) /dev/urandom >"$S/small/s$i"; done
for d in a b c; do head -c $((6 * 1048576)) /dev/urandom >"$S/$d/big"; done
head -c 3145728 /dev/urandom >"$S/top.bin"
port=$(free_port)
mport=$(free_port)
URL="http://127.0.0.1:$port/v1/t"
start_repl "$port" "t=$S"
M="$T/mnt"
D="$T/dir"
mount_hyd "$URL" "$M" --into "$D" --poll 1 --metrics-listen "127.0.0.1:$mport"
wait_status "$T/cache" into landed 120 || die "DIR did not land"
dirb() {
	curl -sf "http://127.0.0.1:$mport/metrics" |
		sed -n 's/^ferry_hydrator_dir_read_bytes_total \([0-9]*\)$/\1/p'
}
[ "$(dirb)" = 0 ] || die "bytes read from DIR before anything was read: $(dirb)"
for f in top.bin a/big small/s1 small/s17 small/s40; do
	cmp "$S/$f" "$M/$f" || die "$f read through the landed mount differs from the source"
done
got=$(dirb)
want=$((3145728 + 6 * 1048576))
[ -n "$got" ] && [ "$got" -ge "$want" ] ||
	die "$got bytes read from DIR's files, $want at least (top.bin and a/big)"
ok "a landed mount serves from DIR: every file read equals the source, $got bytes spliced from DIR's files"

# Written into after it landed, mtime put back: the ctime moved, so the
# file is not served from DIR; the range written over is fetched again.
touch -r "$D/b/big" "$T/stamp"
printf 'NOT THE SOURCE' | dd of="$D/b/big" bs=1 seek=2097152 conv=notrunc status=none
touch -r "$T/stamp" "$D/b/big"
before=$(dirb)
cmp "$S/b/big" "$M/b/big" || die "a file written into in DIR is served as DIR has it, not as the source"
after=$(dirb)
[ "$after" = "$before" ] || die "$((after - before)) bytes of a file written into were read from DIR"
cmp -s "$S/b/big" "$D/b/big" && die "DIR's b/big equals the source: the write into it did not happen"
ok "a landed file written into (mtime put back) is read through the chunks, as the source has it"

# Held open on the mount, half read, when someone writes into it in DIR:
# the rest reads as the source's.
exec 7<"$M/c/big"
head -c 1048576 <&7 >"$T/c.head"
cmp -n 1048576 "$S/c/big" "$T/c.head" || die "the first MiB of c/big differs"
mid=$(dirb)
[ "$mid" -gt "$after" ] || die "the first read of c/big was not served from DIR"
printf 'NOT THE SOURCE EITHER' | dd of="$D/c/big" bs=1 seek=4194304 conv=notrunc status=none
# what the kernel may have read ahead of the reader is gone: the rest
# comes from the mount again
echo 1 >/proc/sys/vm/drop_caches
cat <&7 >"$T/c.rest"
exec 7<&-
cat "$T/c.head" "$T/c.rest" | cmp - "$S/c/big" || die "a file held open read DIR's bytes after they were written into"
ok "a reader holding a landed file reads on as the source has it after DIR's file is written into"

umount_hyd "$M"
