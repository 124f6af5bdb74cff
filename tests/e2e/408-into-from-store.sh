#!/usr/bin/env bash
# 408: a big file whose chunks the store holds already when --into places
# (here a plain mount of the same cache read them first; in a landing, a
# chunk that came before the placer knew its file's manifest) gets those
# ranges written into its part from the store and the part renamed in
# (adopted), rather than the whole file copied beside it and then read
# back: the placer read (almost) no range back from DIR (a copy of the big
# files reads their hundreds back: what tells the two apart), the landed
# line counts at least the two big files as adopted, and DIR equals the
# source. Small files may be copied (a copy costs less than the round an
# adoption waits for).
. "$(dirname "$0")/lib/common.sh"
need_fuse
S="$T/src"
mkdir -p "$S/m" "$S/s"
head -c $((20 * 1048576)) /dev/urandom >"$S/m/big.bin"
head -c $((12 * 1048576)) /dev/urandom >"$S/m/mid.bin"
for i in $(seq 1 5); do head -c $((i * 900)) /dev/urandom >"$S/s/f$i"; done
touch -d '2022-03-04 05:06' "$S/m/big.bin"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/t"
start_repl "$port" "t=$S"
M="$T/mnt"
D="$T/dir"

# A plain mount reads the big files: their chunks go to the store.
mount_hyd "$URL" "$M" --no-backfill
cmp "$S/m/big.bin" "$M/m/big.bin" || die "big.bin read through the plain mount differs"
cmp "$S/m/mid.bin" "$M/m/mid.bin" || die "mid.bin read through the plain mount differs"
umount_hyd "$M"

mount_hyd "$URL" "$M" --into "$D" --poll 1
wait_status "$T/cache" into landed 120 || die "DIR did not land"
L="$T/cache/hydrator.log"
line=$(grep 'landed generation=1 ' "$L") || die "no landed line in the log"
adopted=$(sed -n 's/.* adopted=\([0-9]*\).*/\1/p' <<<"$line")
[ -n "$adopted" ] || die "the landed line lacks adopted=: $line"
[ "$adopted" -ge 2 ] ||
	die "$adopted parts adopted: the big files were copied whole from the store, not filled in their parts ($line)"
# Ranges the placer found by reading a landed file back: what a copy of
# the big files would have cost (each of their ranges read and hashed).
found=$(sed -n 's/.* found=\([0-9]*\).*/\1/p' <<<"$line")
[ -n "$found" ] || die "the landed line lacks found=: $line"
[ "$found" -lt 20 ] ||
	die "$found ranges read back from DIR's files: the big files were copied, then read back"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$D" >"$T/cmp.txt" ||
	{ cat "$T/cmp.txt"; die "DIR differs from the source"; }
cmp "$S/m/big.bin" "$M/m/big.bin" || die "big.bin read through the --into mount differs"
ok "from the store into parts: $adopted parts adopted, $found ranges read back; DIR equals the source ($(tail -n1 "$T/cmp.txt"))"
umount_hyd "$M"
