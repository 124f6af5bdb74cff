#!/usr/bin/env bash
# 150: a replicator follows its source. SIGHUP rescans: nothing changed
# keeps the generation; a change publishes the next one, whose walk reads
# no file data and whose hashing reads only what changed, while the
# replicator keeps running. A mount made on the older generation still
# reads a file both generations share; `ferry sync` of the new one equals
# the changed source. --keep-generations 2 removes the older generations
# (404, files gone); --rescan-interval rescans without a signal.
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
S="$T/src"
mkdir -p "$S/d"
head -c 3000000 /dev/urandom >"$S/big"
printf 'first\n' >"$S/a.txt"
printf 'gone soon\n' >"$S/d/c"
ln -s a.txt "$S/link"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/r"
REPL_OPTS="--keep-generations 2" start_repl "$port" "r=$S"
head_is() { [ "$(curl -sf "$URL/HEAD")" = "$1" ]; }
head_is 1 || die "first HEAD is not 1"
# wait_log PATTERN COUNT — until the replicator's log has COUNT lines.
wait_log() {
	local i
	for i in $(seq 1 300); do
		[ "$(grep -c -- "$1" "$T/repl.log")" -ge "$2" ] && return 0
		kill -0 "$REPL_PID" 2>/dev/null || { cat "$T/repl.log" >&2; die "replicator exited"; }
		sleep 0.1
	done
	cat "$T/repl.log" >&2
	die "no $2 lines '$1' in the replicator's log"
}
wait_hashed "$port" r 60 || die "generation 1 not hashed"
M1=$(manifests_db r "$T/m1.db")
old_id=$(sql "$M1" "select lower(hex(c.id)) from chunk c join dirent d on d.ino=c.ino where d.name=cast('a.txt' as blob)")
[ ${#old_id} = 64 ] || die "no chunk id for a.txt in generation 1"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/chunk/$old_id")" = 200 ] || die "a.txt's chunk not served"

# A mount of generation 1 that fetches only what is read.
M="$T/mnt"
mount_hyd "$URL" "$M" --no-backfill --poll 0

kill -HUP "$REPL_PID"
wait_log 'rescan found no change ns=r generation=1' 1
head_is 1 || die "a rescan of the unchanged tree moved HEAD"
[ ! -e "$T/state/r/catalog/2.db" ] || die "an unchanged rescan left a catalog"
ok "SIGHUP, nothing changed: generation 1 kept, replicator running"

printf 'second, longer\n' >"$S/a.txt"
rm "$S/d/c"
printf 'new file\n' >"$S/d/n"
printf 'sorts first\n' >"$S/0first"
kill -HUP "$REPL_PID"
wait_log ' ready ns=r generation=2 ' 1
head_is 2 || die "HEAD is not 2 after the change"
line=$(grep ' ready ns=r generation=2 ' "$T/repl.log")
echo "$line" | grep -q ' bytes_read=0 ' || die "the rescan's walk read file data: $line"
echo "$line" | grep -q ' reused=1 ' || die "the unchanged big file was not reused: $line"
wait_hashed "$port" r 60 || die "generation 2 not hashed"
hl=$(grep 'hashed ns=r generation=2 ' "$T/repl.log")
# only a.txt (15), d/n (9) and 0first (12 bytes) are read, never big
echo "$hl" | grep -q ' bytes_read=36 ' || die "hashing read more than the changed files: $hl"
# inode numbers stay with their entries, though a new name sorts first;
# a file whose content changed gets a new one (a number names one content)
ino_of() { sqlite3 -readonly "$T/state/r/catalog/$1.db" "select ino from dirent where parent=1 and name=cast('$2' as blob)"; }
for n in big link d; do
	[ "$(ino_of 1 "$n")" = "$(ino_of 2 "$n")" ] || die "$n changed its inode number: $(ino_of 1 "$n") -> $(ino_of 2 "$n")"
done
max1=$(sqlite3 -readonly "$T/state/r/catalog/1.db" "select max(ino) from inode")
[ "$(ino_of 2 0first)" -gt "$max1" ] || die "the new file got a number generation 1 used"
[ "$(ino_of 2 a.txt)" -gt "$max1" ] || die "the changed a.txt kept its number (or got an old one): $(ino_of 1 a.txt) -> $(ino_of 2 a.txt)"
[ "$(stat -c %i "$M/big")" = "$(ino_of 2 big)" ] || die "the mount's inode number of big is not the catalog's"
[ "$(repl_stat "$port" r rescans)" = 2 ] || die "stats: rescans is not 2"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/chunk/$old_id")
[ "$code" = 404 ] || die "a chunk only generation 1 had answers $code, not 404"
ok "change + SIGHUP: generation 2 published; walk read 0 bytes, hashing 36 (the changed files); inode numbers kept, a new one for the changed file; a chunk only generation 1 had is 404"

cmp "$S/big" "$M/big" || die "the generation-1 mount cannot read a file generation 2 shares"
ok "a mount of generation 1 reads the shared file after the switch"

"$FERRY" sync --cache-dir "$T/scache" "$URL" "$T/dest" >"$T/sync.log" 2>&1 || { cat "$T/sync.log"; die "sync failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "sync of generation 2 differs from the source"; }
ok "ferry sync of generation 2 equals the changed source"

printf 'third\n' >"$S/a.txt"
kill -HUP "$REPL_PID"
wait_log ' ready ns=r generation=3 ' 1
printf 'fourth\n' >"$S/a.txt"
kill -HUP "$REPL_PID"
wait_log ' ready ns=r generation=4 ' 1
head_is 4 || die "HEAD is not 4"
for g in 1 2; do
	code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/catalog/$g")
	[ "$code" = 404 ] || die "catalog $g answers $code with --keep-generations 2"
	left=$(find "$T/state/r" -name "$g.db*")
	[ -z "$left" ] || die "generation $g left files: $left"
done
for g in 3 4; do
	code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/catalog/$g")
	[ "$code" = 200 ] || die "catalog $g answers $code"
done
ok "--keep-generations 2: generations 3 and 4 served, 1 and 2 removed"
stop_repl || die "the replicator did not exit cleanly after the rescans"

REPL_OPTS="--keep-generations 2 --rescan-interval 1" start_repl "$port" "r=$S"
head_is 4 || die "a restart on the unchanged tree moved HEAD"
printf 'fifth\n' >"$S/a.txt"
wait_log ' ready ns=r generation=5 ' 1
head_is 5 || die "HEAD is not 5 after the interval's rescan"
ok "--rescan-interval 1: generation 5 without a signal"
umount_hyd "$M"
stop_repl || die "the replicator did not exit cleanly"
