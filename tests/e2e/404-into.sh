#!/usr/bin/env bash
# 404: the mount becomes the copy. ferry-hydrator --into DIR writes the
# mount's generation into DIR as the plain tree while the mount serves;
# DIR then equals the source in content and every kind of metadata the
# odd tree has (modes, times, owners as root, symlinks, hard links,
# xattrs, a fifo, a device, a sparse file). After a kill -9 in the middle
# of the first landing, a ferry sync into the same DIR writes none of the
# files the mount landed and takes the ranges its parts hold instead of
# fetching them, and a mount with --into again ends exact. A generation
# switch updates DIR as sync --delete would (a changed file written
# beside and renamed in: a process holding the old one keeps its bytes,
# as does one holding it on the mount). `ferry finish` then checks DIR
# (a DIR written over since it landed is named and landed again),
# detaches the mount lazily (a process holding a file open on it reads on
# and the hydrator exits 0 once it closes it) and binds DIR at the
# mountpoint; the hydrator drops its store's files when it exits (DIR
# holds the tree); a finish stopped between its detach and its bind is
# completed by running it again, and run once more it says it is done.
# Refused: a non-empty DIR that is not the cache's, one holding the
# cache or the mountpoint, --into with --no-backfill, a finish of
# a mount without --into.
. "$(dirname "$0")/lib/common.sh"
need_fuse
S="$T/src"
python3 "$E2E_LIB/mktree.py" "$S" --big-dir 300 --sparse-gib 0.1 || die "mktree failed"
mkdir -p "$S/bulk"
for i in $(seq 1 24); do head -c 1048576 /dev/urandom >"$S/bulk/b$i"; done
echo 'version one' >"$S/changing.txt"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/t"
start_repl "$port" "t=$S"
M="$T/mnt"
D="$T/dir"

# Refusals first.
mkdir -p "$T/full" "$T/mref" && echo mine >"$T/full/keep"
"$HYD" -c "$T/cref" --into "$T/full" "$URL" "$T/mref" 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q 'not empty' "$T/err" && [ -e "$T/full/keep" ] ||
	{ cat "$T/err"; die "--into a non-empty foreign DIR: exit $rc, or not said"; }
"$HYD" -c "$T/cref" --into "$T/empty" --no-backfill "$URL" "$T/mref" 2>"$T/err"; rc=$?
[ "$rc" = 2 ] && grep -q 'not with --no-backfill' "$T/err" || { cat "$T/err"; die "--into --no-backfill: exit $rc"; }
"$HYD" -c "$T/inside/c" --into "$T/inside" "$URL" "$T/mref" 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q 'the cache directory' "$T/err" || { cat "$T/err"; die "--into a DIR holding the cache: exit $rc"; }
mkdir -p "$T/wrap/m"
"$HYD" -c "$T/cref2" --into "$T/wrap" "$URL" "$T/wrap/m" 2>"$T/err"; rc=$?
[ "$rc" != 0 ] && grep -q 'the mountpoint' "$T/err" || { cat "$T/err"; die "--into a DIR holding the mountpoint: exit $rc"; }
ok "refused: a non-empty DIR that is not the cache's (nothing deleted), --into with --no-backfill, a DIR holding the cache or the mountpoint"

# A first landing slowed by --bwlimit, killed -9 half way.
mount_hyd "$URL" "$M" --into "$D" --bwlimit 4M --poll 1
pid=$(cat "$T/cache/hydrator.pid")
for i in $(seq 1 100); do [ -n "$(ls "$D" 2>/dev/null)" ] && break; sleep 0.1; done
sleep 1
grep -q '^generation=0' "$T/cache/into.state" || die "the first landing ended before the kill: no test of a resume"
kill -9 "$pid"
e2e_gone "$pid" 10 || die "the hydrator outlived kill -9"
fusermount3 -u "$M" 2>/dev/null || umount -l "$M"
n_before=$(find "$D" | wc -l)
# A sync into the same DIR (a cache of its own) moves nothing of what the
# mount landed there: those files are taken as they are, checked by content.
# (DIR/.ferry-into holds the files the mount was filling: not landed yet)
landed_reg=$(find "$D" -path "$D/.ferry-into" -prune -o -type f ! -name '.ferry-tmp.*' -print | wc -l)
total_reg=$(find "$S" -type f | wc -l)
# The ranges the killed mount had recorded in parts of files not landed
# yet (distinct chunks): the sync takes them from the parts, checked.
# Only parts still in DIR/.ferry-into count: a file renamed to its path
# just before the kill may lack its landed row (the landing commits its
# rows every 200 ms), and its ranges are then in DIR's file, not a part.
mkdir -p "$T/rec" && cp "$T/cache/into.db"* "$T/rec/"
left=$(ls "$D/.ferry-into" 2>/dev/null | grep -E '^[0-9]+$' | paste -sd, -)
in_parts=$(sqlite3 "$T/rec/into.db" "select coalesce(sum(len), 0) from (select distinct w.id, p.len
	from placed p join part t on t.ino = p.ino join want w on w.ino = p.ino and w.off = p.off
	where t.path is null and t.ino in (${left:-0}))") || die "cannot read the killed mount's record"
"$FERRY" sync --stats --cache-dir "$T/c3" "$URL" "$D" >"$T/sync3.out" 2>&1 || { cat "$T/sync3.out"; die "ferry sync into the mount's DIR failed"; }
written=$(sed -n 's/^Number of regular files written: //p' "$T/sync3.out")
[ "$landed_reg" -gt 0 ] && [ -n "$written" ] && [ "$written" -le $((total_reg - landed_reg)) ] ||
	{ cat "$T/sync3.out"; die "ferry sync wrote $written files into a DIR that held $landed_reg of $total_reg landed"; }
seeded=$(sed -n 's/^Chunks seeded: [0-9]* (\([0-9]*\) bytes)$/\1/p' "$T/sync3.out")
[ "$in_parts" -gt 0 ] || die "no part held a recorded range at the kill: nothing to test the sync's use of parts with"
# (all-zero chunks are holes in a part: fetched, not seeded; a half is margin)
[ -n "$seeded" ] && [ "$seeded" -ge $((in_parts / 2)) ] ||
	{ cat "$T/sync3.out"; die "ferry sync took $seeded bytes from the mount's parts, which held $in_parts bytes verified"; }
python3 "$E2E_LIB/treecmp.py" --content --exclude .ferry-into --no-dir-times "$S" "$D" >"$T/cmp0.txt" ||
	{ cat "$T/cmp0.txt"; die "DIR differs from the source after the sync"; }
mount_hyd "$URL" "$M" --into "$D" --poll 1
cmp "$S/changing.txt" "$M/changing.txt" || die "a read through the mount is not the source's"
wait_status "$T/cache" into landed 120 || die "DIR did not land after the restart"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$D" >"$T/cmp1.txt" ||
	{ cat "$T/cmp1.txt"; die "DIR differs from the source after a kill -9 and a resume"; }
# The chunks landed in DIR's files as they came (the killed mount's
# parts, the rest written by the sync), not in the store.
stored=$(du -sb "$T/cache/volumes" | cut -f1)
bulk=$(du -sb "$S/bulk" | cut -f1)
[ "$stored" -lt $((bulk / 4)) ] || die "the store holds $stored bytes of a $bulk-byte bulk: chunks went to the store, not DIR"
[ ! -e "$D/.ferry-into" ] || die "DIR/.ferry-into left after the landing"
ok "kill -9 mid-landing ($n_before entries in DIR); a ferry sync into DIR wrote $written files, not the $landed_reg the mount had landed, and took $seeded bytes from its parts (which held $in_parts verified); remounted with --into: DIR equals the source ($(tail -n1 "$T/cmp1.txt"))"

# A generation switch while a job holds the old file, on the mount and in DIR.
exec 7<"$M/changing.txt" 8<"$D/changing.txt"
echo 'version two, longer' >"$S/changing.txt"
rm "$S/bulk/b1"
echo new >"$S/new.txt"
kill -HUP "$REPL_PID"
for i in $(seq 1 300); do
	[ "$(status_field "$T/cache" into_generation)" = 2 ] && break
	sleep 0.2
done
[ "$(status_field "$T/cache" into_generation)" = 2 ] || die "DIR did not land generation 2"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$D" >"$T/cmp2.txt" ||
	{ cat "$T/cmp2.txt"; die "DIR differs from generation 2"; }
[ "$(cat <&7)" = 'version one' ] || die "a file held open on the mount lost its bytes at the switch"
[ "$(cat <&8)" = 'version one' ] || die "a file held open in DIR lost its bytes at the switch"
exec 7<&- 8<&-
ok "generation 2: DIR equals the source (one file changed, one deleted, one new); files held open keep their bytes"

# finish: a process holds a file open on the mount throughout.
exec 9<"$M/bulk/b2"
head -c 4096 <&9 >/dev/null
pid=$(cat "$T/cache/hydrator.pid")
# someone wrote into DIR after it landed: finish finds it and has the
# mount write the generation again before it goes on
echo 'not the source' >>"$D/bulk/b5"
rm "$D/new.txt"
FERRY_RUN_DIR="$T/run" FERRY_TEST_FINISH_STOP=1 "$FERRY" finish "$M" >"$T/fin1.out" 2>&1; rc=$?
[ "$rc" = 1 ] && ! mountpoint -q "$M" || { cat "$T/fin1.out"; die "the finish stopped after its detach: exit $rc, or still mounted"; }
grep -q 'bulk/b5' "$T/fin1.out" && grep -q 'new.txt' "$T/fin1.out" && grep -q 'writes the generation into' "$T/fin1.out" ||
	{ cat "$T/fin1.out"; die "finish did not name what differed in DIR, or did not have it written again"; }
python3 "$E2E_LIB/treecmp.py" --content "$S" "$D" >"$T/cmp3.txt" ||
	{ cat "$T/cmp3.txt"; die "DIR differs from the source after finish had it written again"; }
grep -q "checked dir=$D files=.* differences=[1-9]" "$T/fin1.out" && grep -q "checked dir=$D files=.* differences=0 " "$T/fin1.out" ||
	{ cat "$T/fin1.out"; die "finish's check did not say what it checked: differences, then none after the mount wrote DIR again"; }
FERRY_RUN_DIR="$T/run" "$FERRY" finish "$M" >"$T/fin2.out" 2>&1 || { cat "$T/fin2.out"; die "finish, run again, failed"; }
# the check walks what the landing wrote: the same files, counted alike
nreg=$(sed -n 's/.*landed generation=2 .* files=\([0-9]*\) .*/\1/p' "$T/cache/hydrator.log" | tail -n1)
[ -n "$nreg" ] && [ "$nreg" -gt 300 ] || die "no landed line for generation 2 with its files: '$nreg'"
grep -q "checked dir=$D files=$nreg .* differences=0 " "$T/fin2.out" ||
	{ cat "$T/fin2.out"; die "finish's check did not count the $nreg files the landing wrote"; }
[ "$(stat -c %d:%i "$M")" = "$(stat -c %d:%i "$D")" ] || die "MOUNTPOINT does not show DIR after finish"
cmp "$S/bulk/b3" "$M/bulk/b3" || die "a file through the bind differs"
rest=$(cat <&9 | wc -c)
[ "$rest" = $((1048576 - 4096)) ] || die "the file held open on the old mount read $rest bytes after finish"
e2e_running "$pid" || die "the hydrator exited while a file was open on its mount"
exec 9<&-
e2e_gone "$pid" 30 || die "the hydrator did not exit after the last file closed"
[ "$(hyd_exit_status "$T/cache" "$pid")" = 0 ] || die "the hydrator's exit status is not 0"
[ ! -e "$T/cache/state.db" ] && [ -z "$(ls "$T/cache/volumes")" ] ||
	{ ls -la "$T/cache" "$T/cache/volumes"; die "the store was not dropped at the hydrator's exit after finish"; }
FERRY_RUN_DIR="$T/run" "$FERRY" finish "$M" >"$T/fin3.out" 2>&1 && grep -q 'already finished' "$T/fin3.out" ||
	{ cat "$T/fin3.out"; die "a third finish does not say it is done"; }
ok "finish (DIR written over: named, landed again; stopped after its detach, run again): DIR bound at the mountpoint, a reader of the old mount read on, the hydrator exited 0 after it; again: already finished"

umount "$M" || die "cannot unmount the bind"

# A landing from scratch: whole files renamed in from their parts, the
# store left nearly empty, DIR exact, no DIR/.ferry-into after it.
M3="$T/mnt3"
mkdir -p "$M3"
"$HYD" -c "$T/c4" --into "$T/dir4" "$URL" "$M3" || die "a mount with --into failed"
MOUNTS+=("$M3")
wait_status "$T/c4" into landed 120 || die "DIR did not land"
grep -q 'landed generation=2 .*adopted=[1-9]' "$T/c4/hydrator.log" ||
	{ grep 'into' "$T/c4/hydrator.log"; die "no file landed by placement"; }
stored=$(du -sb "$T/c4/volumes" | cut -f1)
[ "$stored" -lt $((bulk / 4)) ] || die "the store holds $stored bytes of a $bulk-byte bulk after a landing"
[ ! -e "$T/dir4/.ferry-into" ] || die "DIR/.ferry-into left after the landing"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dir4" >"$T/cmp4.txt" ||
	{ cat "$T/cmp4.txt"; die "DIR differs from the source after a landing by placement"; }
cmp "$S/bulk/b7" "$M3/bulk/b7" || die "a read of placed bytes through the mount differs"
pid=$(cat "$T/c4/hydrator.pid")
fusermount3 -u "$M3"
e2e_gone "$pid" 30 || die "the hydrator did not exit"
ok "a landing by placement: files renamed in whole, the store holds $stored bytes of $bulk, DIR equals the source"
M2="$T/mnt2"
mkdir -p "$M2"
MOUNTS+=("$M2")
"$HYD" -c "$T/c2" "$URL" "$M2" || die "a mount without --into failed"
"$FERRY" finish --timeout 5 "$M2" 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q 'not mounted with --into' "$T/err" || { cat "$T/err"; die "finish of a mount without --into: exit $rc"; }
pid=$(cat "$T/c2/hydrator.pid")
fusermount3 -u "$M2"
e2e_gone "$pid" 30 || die "the second hydrator did not exit"
ok "finish of a mount without --into: exit 1, said"
