#!/usr/bin/env bash
# 406: --into's later passes look only at the files the last pass left,
# not at the whole tree. A tree of 60 directories of small files and 1 MiB
# files in a directory, one below it (a path of three names, read-only)
# and at the top, landed under --bwlimit so that backfill spans several
# passes: the first walks the tree, the next ones look at the files left
# in the directories the debug log counts (fewer than the tree has), so
# the landed line's count of entries visited stays below passes x the
# tree's entries (what walking the tree every pass costs); the record of what was
# written holds every file; DIR ends equal to the source, the late files
# included, with every metadata kind treecmp reads.
. "$(dirname "$0")/lib/common.sh"
need_fuse
S="$T/src"
for d in $(seq -w 1 60); do
	mkdir -p "$S/d$d"
	for f in $(seq 1 10); do echo "file $d $f" >"$S/d$d/f$f.txt"; done
	chmod 750 "$S/d$d"
	touch -d "2020-01-0$((10#$d % 9 + 1)) 12:00" "$S/d$d"
done
mkdir -p "$S/late/deeper/still"
for i in $(seq 1 8); do head -c 1048576 /dev/urandom >"$S/late/b$i"; done
for i in 1 2; do head -c 1048576 /dev/urandom >"$S/late/deeper/still/c$i"; done
for i in 1 2; do head -c 1048576 /dev/urandom >"$S/top$i.bin"; done
chmod 555 "$S/late/deeper/still"
touch -d '2021-06-01 08:00' "$S/late" "$S/late/deeper/still"
entries=$(($(find "$S" | wc -l) - 1)) # what a pass walking the tree visits
port=$(free_port)
URL="http://127.0.0.1:$port/v1/t"
start_repl "$port" "t=$S"
M="$T/mnt"
D="$T/dir"

mount_hyd "$URL" "$M" --into "$D" --bwlimit 3M --poll 1 -v
wait_status "$T/cache" into landed 120 || die "DIR did not land"
L="$T/cache/hydrator.log"
line=$(grep 'landed generation=1 ' "$L") || die "no landed line in the log"
passes=$(sed -n 's/.* passes=\([0-9]*\) .*/\1/p' <<<"$line")
visited=$(sed -n 's/.* visited=\([0-9]*\) .*/\1/p' <<<"$line")
[ -n "$passes" ] && [ -n "$visited" ] || die "the landed line lacks passes= or visited=: $line"
[ "$passes" -ge 3 ] || die "landed in $passes passes: nothing to test (backfill too quick?)"
[ "$visited" -ge "$entries" ] || die "visited $visited entries, fewer than the tree's $entries: the first pass did not walk it"
[ "$visited" -lt $(((passes - 1) * entries)) ] ||
	die "visited $visited entries in $passes passes of a tree of $entries: later passes walked the tree"
dirs=$(sed -n 's/.*wait for backfill in \([0-9]*\) directories.*/\1/p' "$L" | tail -n1)
[ -n "$dirs" ] && [ "$dirs" -ge 1 ] && [ "$dirs" -lt 63 ] ||
	{ grep 'into' "$L"; die "no pass left files in fewer directories than the tree's 63: '$dirs'"; }
# The record of what was written (which `ferry finish` and a restart
# trust instead of reading files back) holds every file: a pass that
# visits some directories adds its files to it, it does not replace it.
nreg=$(find "$S" -type f | wc -l)
nrec=$(python3 -c 'import sqlite3,sys,glob
print(sum(sqlite3.connect(p).execute("SELECT count(*) FROM file").fetchone()[0] for p in glob.glob(sys.argv[1] + "/sync/*.db")))' "$T/cache")
[ "$nrec" -ge "$nreg" ] || die "the record of what was written holds $nrec files of $nreg"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$D" >"$T/cmp.txt" ||
	{ cat "$T/cmp.txt"; die "DIR differs from the source"; }
ok "landed in $passes passes visiting $visited entries (the tree has $entries; the last pass left files in $dirs directories); the record holds $nrec files of $nreg; DIR equals the source ($(tail -n1 "$T/cmp.txt"))"
umount_hyd "$M"
