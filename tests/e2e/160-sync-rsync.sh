#!/usr/bin/env bash
# 160: `ferry sync` for the cutover, against rsync on the same changes.
# After a tree mutates (content, time, mode, xattr, deleted file and
# directory, new file and directory, symlink retargeted, a file replaced
# by a symlink, a directory replaced by a file, a new hard link, a
# directory renamed) and the replicator
# rescans: `-n -i --delete` prints what `rsync -aHX -n -i --delete` prints,
# the real run itemizes the same and leaves DEST equal to rsync's copy, a
# rerun changes nothing. Include/exclude rules give the trees rsync
# gives, and so do --existing, --ignore-existing, -u, --max-size,
# --min-size and --delete-after/-delay (-i lines too); a subtree URL
# follows rsync's trailing-slash rule; --delete
# deletes nothing after an entry failed (exit 24: it vanished at the
# source) unless --ignore-errors; exit codes 1, 10 and 23; --watch follows
# a new generation and Ctrl-C ends it with 20.
. "$(dirname "$0")/lib/common.sh"
command -v rsync >/dev/null || skip "rsync missing"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built"
S="$T/src"
mkdir -p "$S/dir/deep" "$S/gone/in" "$S/old" "$S/sub"
echo alpha >"$S/a.txt"
echo bravo >"$S/b.txt"
echo log1 >"$S/x.log"
echo top >"$S/top.txt"
echo c-src >"$S/dir/m.c"
echo h-src >"$S/dir/m.h"
echo deep >"$S/dir/deep/x"
echo gone >"$S/gone/in/g"
echo old >"$S/old/o"
echo s >"$S/sub/s.c"
echo rep >"$S/replaced"
ln -s a.txt "$S/link"
ln "$S/a.txt" "$S/dir/a-link"
mkfifo "$S/fifo"
setfattr -n user.k -v 1 "$S/b.txt" 2>/dev/null || log "no user xattrs here"
# Times well in the past: rsync compares whole seconds, and leaves a time
# alone that is in the same second as the copy it just made.
find "$S" -exec touch -h -d '2020-02-02 10:00:00.25' {} +
touch -d '2020-01-01' "$S/top.txt"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/r"
start_repl "$port" "r=$S"

"$FERRY" sync -q --cache-dir "$T/c" "$URL" "$T/d" || die "first sync failed"
rsync -aHX "$S/" "$T/rs/" || die "first rsync failed"
# whole seconds apart, as rsync compares times
sleep 1.1
echo 'alpha, longer now' >"$S/a.txt"
touch -d '2021-06-01' "$S/top.txt"
chmod 600 "$S/b.txt"
setfattr -n user.k -v 2 "$S/b.txt" 2>/dev/null || true
rm "$S/x.log"
rm -r "$S/gone"
echo new >"$S/new.txt"
mkdir "$S/newdir" && echo z >"$S/newdir/z"
rm "$S/link" && ln -s b.txt "$S/link"
rm "$S/replaced" && ln -s top.txt "$S/replaced"
ln "$S/new.txt" "$S/dir/new-link"
mv "$S/old" "$S/renamed"
rm -r "$S/sub" && echo 'a file where a directory was' >"$S/sub"
sleep 1.1 # the same for the directories the change touched
kill -HUP "$REPL_PID"
for i in $(seq 1 100); do [ "$(curl -sf "$URL/HEAD")" = 2 ] && break; sleep 0.1; done
[ "$(curl -sf "$URL/HEAD")" = 2 ] || die "no generation 2 after the rescan"

items() { grep -v -e '^wrote ' -e '^would ' -e '^deleted ' -e '^total size ' | sort; }
rsync -aHX --delete -n -i "$S/" "$T/rs/" | sort >"$T/rsync-n.txt"
"$FERRY" sync --cache-dir "$T/c" --delete -n -i "$URL" "$T/d" | items >"$T/ferry-n.txt" ||
	die "ferry sync -n failed"
diff "$T/rsync-n.txt" "$T/ferry-n.txt" >"$T/diff-n.txt" || { cat "$T/diff-n.txt"; die "-n -i differs from rsync's"; }
[ "$(wc -l <"$T/ferry-n.txt")" -ge 12 ] || { cat "$T/ferry-n.txt"; die "too few items: the change did not show"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/rs" "$T/d" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "the dry run changed DEST"; }
ok "-n -i --delete prints what rsync -n -i prints ($(wc -l <"$T/ferry-n.txt") items) and changes nothing"

rsync -aHX --delete -i "$S/" "$T/rs/" | sort >"$T/rsync-i.txt"
"$FERRY" sync --cache-dir "$T/c" --delete -i "$URL" "$T/d" >"$T/ferry-i.raw" || die "ferry sync --delete failed"
items <"$T/ferry-i.raw" >"$T/ferry-i.txt"
diff "$T/rsync-i.txt" "$T/ferry-i.txt" >"$T/diff-i.txt" || { cat "$T/diff-i.txt"; die "-i differs from rsync's"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/rs" "$T/d" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "DEST differs from rsync -aHX --delete's"; }
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/d" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "DEST differs from the source"; }
grep -q '^deleted 8 entries' "$T/ferry-i.raw" || { cat "$T/ferry-i.raw"; die "summary does not count 8 deletions"; }
"$FERRY" sync --cache-dir "$T/c" --delete -i "$URL" "$T/d" | items >"$T/again.txt"
[ ! -s "$T/again.txt" ] || { cat "$T/again.txt"; die "a rerun changed something"; }
ok "--delete -i: the same items as rsync, DEST equal to rsync's copy, a rerun changes nothing"

"$FERRY" sync --cache-dir "$T/c" --delete -v "$URL" "$T/dv" >"$T/v.txt" || die "sync -v failed"
grep -qx 'a.txt' "$T/v.txt" && grep -qx 'new.txt => dir/new-link' "$T/v.txt" && grep -qx 'newdir/' "$T/v.txt" || { cat "$T/v.txt"; die "-v does not name what it wrote"; }
ok "-v names what it writes"

# Include/exclude rules: the tree rsync makes with them.
n=0
check_rules() {
	n=$((n + 1))
	rsync -aHX --delete "$@" "$S/" "$T/rf$n/" || die "rsync $* failed"
	"$FERRY" sync -q --cache-dir "$T/c" --delete "$@" "$URL" "$T/ff$n" || die "ferry sync $* failed"
	python3 "$E2E_LIB/treecmp.py" --content "$T/rf$n" "$T/ff$n" >"$T/cmp$n.txt" ||
		{ cat "$T/cmp$n.txt"; die "rules '$*': ferry's tree differs from rsync's"; }
}
printf '# comment\n; comment\n\n*.c\ndeep/\n' >"$T/rules"
check_rules --exclude '*.txt'
check_rules --exclude 'dir/'
check_rules --include '*/' --include '*.c' --exclude '*'
check_rules --exclude '/top.txt' --exclude 'deep/x'
check_rules --filter '- **/deep/x' --filter '- /renamed'
check_rules --exclude-from "$T/rules"
check_rules --filter '+ /dir/***' --filter '- *'
check_rules --filter '+ /dir/' --filter '- /dir/*.h' --filter '+ /dir/**' --filter '- *'
ok "$n rule sets: the same trees as rsync"

# --files-from: only the listed paths and the directories above them;
# with -r, all below a listed directory too; -0 for NUL-separated names.
printf 'top.txt\n# a comment\n./dir/m.c\n\nnewdir\n/b.txt\n' >"$T/list"
printf 'dir/m.c\0newdir\0' >"$T/list0"
for opts in "--files-from=$T/list" "-r --files-from=$T/list" "--from0 --files-from=$T/list0"; do
	rm -rf "$T/rff" "$T/fff"
	# shellcheck disable=SC2086
	rsync -aHX $opts "$S/" "$T/rff/" || die "rsync $opts failed"
	# shellcheck disable=SC2086
	"$FERRY" sync -q --cache-dir "$T/c" $opts "$URL" "$T/fff" || die "ferry sync $opts failed"
	python3 "$E2E_LIB/treecmp.py" --content --no-dir-times "$T/rff" "$T/fff" >"$T/ffcmp.txt" ||
		{ cat "$T/ffcmp.txt"; die "'$opts': ferry's tree differs from rsync's"; }
done
[ -e "$T/fff/dir/m.c" ] && [ ! -e "$T/fff/top.txt" ] && [ -d "$T/fff/newdir" ] || die "--files-from: the checks prove nothing"
ok "--files-from (with -r, with --from0): rsync's trees"

# rsync's leave-alone rules, from one DEST that is partly there: a file
# missing (top.txt), one older and different (b.txt), one newer and
# different (dir/m.c), a directory missing (newdir), a file of DEST's own.
# For each: the same tree as rsync, the same -i lines.
mkdir -p "$T/lbase"
rsync -aHX "$S/" "$T/lbase/" || die "rsync for the base failed"
rm "$T/lbase/top.txt"
rm -r "$T/lbase/newdir"
echo 'b, changed here' >"$T/lbase/b.txt"
touch -d '2019-01-01' "$T/lbase/b.txt"
echo 'c, newer here' >"$T/lbase/dir/m.c"
touch -d '2030-01-01' "$T/lbase/dir/m.c"
echo 'h-XXX' >"$T/lbase/dir/m.h" # the source's size, other bytes
touch -d '2019-01-01' "$T/lbase/dir/m.h"
echo mine >"$T/lbase/own.txt"
touch -d '2020-03-03 03:03:03' "$T/lbase/own.txt" "$T/lbase" "$T/lbase/dir"
m=0
check_leave() {
	m=$((m + 1))
	cp -a "$T/lbase" "$T/lr$m"
	cp -a "$T/lbase" "$T/lf$m"
	rsync -aHX -i "$@" "$S/" "$T/lr$m/" | sort >"$T/lr$m.items" || die "rsync $* failed"
	"$FERRY" sync --cache-dir "$T/c" -i "$@" "$URL" "$T/lf$m" | items >"$T/lf$m.items" ||
		die "ferry sync $* failed"
	# NODIRTIMES=1: -O (directories keep whatever time they get)
	python3 "$E2E_LIB/treecmp.py" --content ${NODIRTIMES:+--no-dir-times} "$T/lr$m" "$T/lf$m" >"$T/lcmp$m.txt" ||
		{ cat "$T/lcmp$m.txt"; die "'$*': ferry's tree differs from rsync's"; }
	# NOITEMS=1: trees only. A change to a hard-linked inode is named at
	# the first name each tool reaches, and the two walk in different
	# orders (rsync: a directory's files before its subdirectories).
	[ "${NOITEMS:-0}" = 1 ] || diff "$T/lr$m.items" "$T/lf$m.items" >"$T/ldiff$m.txt" ||
		{ cat "$T/ldiff$m.txt"; die "'$*': ferry's -i differs from rsync's"; }
}
check_leave --existing
check_leave --ignore-existing
check_leave -u
check_leave --update --existing
check_leave --max-size=10
check_leave --min-size 1K
check_leave --max-size=0.01K
check_leave --delete-after
check_leave --delete-delay --ignore-existing
check_leave --size-only
# rsync's --chmod, and (as root, where owners are set) --chown,
# --usermap, --groupmap: DEST's modes and owners from the source's
check_leave --chmod=D750,Fu+w
check_leave --chmod=u=rwX,go=rX
NOITEMS=1 check_leave --chmod=D750,Fg+w,o-r --chmod=F600
[ "$(stat -c %a "$T/lf11/dir")" = 750 ] && [ "$(stat -c %a "$T/lf13/b.txt")" = 600 ] ||
	die "--chmod: the checks prove nothing"
# --backup: what is replaced or deleted is renamed first
NODIRTIMES=1 check_leave -b --delete
NODIRTIMES=1 check_leave --backup-dir=BK --delete # BK's own times are now
[ "$(stat -c %Y "$T/lf$m/dir")" = "$(stat -c %Y "$S/dir")" ] || die "--backup-dir: a directory's mtime is not the source's"
NODIRTIMES=1 check_leave -b --suffix=.old
NODIRTIMES=1 check_leave -O
[ -e "$T/lf$((m - 3))/b.txt~" ] && [ -e "$T/lf$((m - 3))/own.txt~" ] && [ -e "$T/lf$((m - 2))/BK/dir/m.c" ] &&
	[ -e "$T/lf$((m - 1))/b.txt.old" ] || die "--backup: the checks prove nothing"
if [ "$(id -u)" = 0 ]; then
	NOITEMS=1 check_leave --usermap=0:1234,'*':99 --groupmap=0-10:2345
	NOITEMS=1 check_leave --chown=1234:2345
	[ "$(stat -c %u:%g "$T/lf$m/b.txt")" = 1234:2345 ] || die "--chown: the checks prove nothing"
fi
[ ! -e "$T/lf1/top.txt" ] && [ ! -e "$T/lf1/newdir" ] && cmp -s "$S/b.txt" "$T/lf1/b.txt" || die "--existing: the checks prove nothing"
[ -e "$T/lf2/top.txt" ] && [ "$(cat "$T/lf2/b.txt")" = 'b, changed here' ] || die "--ignore-existing: the checks prove nothing"
[ "$(cat "$T/lf3/dir/m.c")" = 'c, newer here' ] && [ "$(cat "$T/lf3/b.txt")" != 'b, changed here' ] || die "-u: the checks prove nothing"
[ "$(cat "$T/lf10/dir/m.h")" = 'h-XXX' ] && [ "$(stat -c %Y "$T/lf10/dir/m.h")" = "$(stat -c %Y "$S/dir/m.h")" ] ||
	die "--size-only: the checks prove nothing (the same-size file was rewritten, or its time not set)"
"$FERRY" sync --max-size 1Q "$URL" "$T/lx" 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q -- "--max-size '1Q'" "$T/err" || die "a bad --max-size: exit $rc, or not named"
"$FERRY" sync --chmod=g=u "$URL" "$T/lx" 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q -- "--chmod 'g=u'" "$T/err" || die "a --chmod copy form: exit $rc, or not named"
ok "$m leave-alone and attribute rule sets (--existing, --ignore-existing, -u, --max-size, --min-size, --size-only, --delete-after/-delay, --chmod, --chown, --usermap, --groupmap, --backup, --backup-dir, --suffix): rsync's trees and -i lines"

# Excluded entries in DEST are protected from --delete, unless
# --delete-excluded; P protects too.
mkdir -p "$T/rp" "$T/fp"
# Each copy of these is the test's own write: one fixed mtime for both,
# or two writes that straddle a clock tick differ before ferry runs.
for d in rp fp; do
	echo mine >"$T/$d/local.log"
	echo mine >"$T/$d/other"
	touch -d '2020-03-03 03:03:03.5' "$T/$d/local.log" "$T/$d/other"
done
rsync -aHX --delete --exclude '*.log' "$S/" "$T/rp/"
"$FERRY" sync -q --cache-dir "$T/c" --delete --exclude '*.log' "$URL" "$T/fp" || die "sync --exclude --delete failed"
[ -f "$T/fp/local.log" ] && [ ! -e "$T/fp/other" ] || die "--delete: excluded entry not protected, or extra entry kept"
python3 "$E2E_LIB/treecmp.py" --content "$T/rp" "$T/fp" >"$T/cmp-p.txt" ||
	{ cat "$T/cmp-p.txt"; die "--exclude --delete differs from rsync's"; }
rsync -aHX --delete-excluded --exclude '*.log' "$S/" "$T/rp/"
"$FERRY" sync -q --cache-dir "$T/c" --delete-excluded --exclude '*.log' "$URL" "$T/fp" || die "sync --delete-excluded failed"
[ ! -e "$T/fp/local.log" ] || die "--delete-excluded kept the excluded entry"
python3 "$E2E_LIB/treecmp.py" --content "$T/rp" "$T/fp" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "--delete-excluded differs from rsync's"; }
echo mine >"$T/fp/keep.me"
"$FERRY" sync -q --cache-dir "$T/c" --delete --filter 'P *.me' "$URL" "$T/fp" || die "sync --filter P failed"
[ -f "$T/fp/keep.me" ] || die "a P rule did not protect from --delete"
ok "--delete protects excluded and P entries; --delete-excluded removes excluded ones"

# A subtree: with a trailing slash its contents, without it DEST/NAME.
rsync -aHX "$S/dir" "$T/rsub1/"
"$FERRY" sync -q --cache-dir "$T/c" "$URL/dir" "$T/fsub1" || die "sync of a subtree failed"
[ -d "$T/fsub1/dir/deep" ] || die "URL/dir did not make DEST/dir"
python3 "$E2E_LIB/treecmp.py" --content "$T/rsub1/dir" "$T/fsub1/dir" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "URL/dir differs from rsync SRC/dir"; }
[ "$(ls "$T/fsub1")" = dir ] || die "URL/dir put more than dir into DEST"
rsync -aHX "$S/dir/" "$T/rsub2/"
"$FERRY" sync -q --cache-dir "$T/c" "$URL/dir/" "$T/fsub2" || die "sync of a subtree/ failed"
python3 "$E2E_LIB/treecmp.py" --content "$T/rsub2" "$T/fsub2" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "URL/dir/ differs from rsync SRC/dir/"; }
"$FERRY" sync -q --cache-dir "$T/c" "$URL/no/such" "$T/fsub3" 2>"$T/err"
rc=$?
[ "$rc" = 23 ] || die "a missing subtree exits $rc, not 23: $(cat "$T/err")"
# A single-file source: DEST a directory takes DEST/NAME, any other
# DEST is the file itself (rsync's rule).
mkdir -p "$T/rsf1" "$T/fsf1"
rsync -aHX "$S/dir/m.c" "$T/rsf1/"
rsync -aHX "$S/top.txt" "$T/rsf2"
"$FERRY" sync -q --cache-dir "$T/c" "$URL/dir/m.c" "$T/fsf1" || die "sync of a single file into a directory failed"
"$FERRY" sync -q --cache-dir "$T/c" "$URL/top.txt" "$T/fsf2" || die "sync of a single file as DEST failed"
python3 "$E2E_LIB/treecmp.py" --content --no-dir-times "$T/rsf1" "$T/fsf1" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "URL/dir/m.c into a directory differs from rsync's"; }
[ -f "$T/fsf2" ] && cmp -s "$T/rsf2" "$T/fsf2" &&
	[ "$(stat -c '%a %Y' "$T/rsf2")" = "$(stat -c '%a %Y' "$T/fsf2")" ] || die "URL/top.txt as DEST differs from rsync's"
"$FERRY" sync -q --cache-dir "$T/c" "$URL/top.txt/" "$T/fsf3" 2>"$T/err"; rc=$?
[ "$rc" = 23 ] || die "URL/FILE/ exits $rc, not 23: $(cat "$T/err")"
ok "subtrees follow rsync's trailing-slash rule; a missing one exits 23; a single file goes into a directory DEST or becomes DEST"

# Exit codes of a whole run.
"$FERRY" sync 2>/dev/null; rc=$?
[ "$rc" = 1 ] || die "no arguments exit $rc, not 1"
"$FERRY" sync --no-such-option "$URL" "$T/x" 2>/dev/null; rc=$?
[ "$rc" = 1 ] || die "an unknown option exits $rc, not 1"
"$FERRY" sync --bwlimit fast "$URL" "$T/x" 2>/dev/null; rc=$?
[ "$rc" = 1 ] || die "a bad --bwlimit exits $rc, not 1"
dead=$(free_port)
"$FERRY" sync -q --cache-dir "$T/cdead" "http://127.0.0.1:$dead/v1/r" "$T/x" 2>"$T/err"; rc=$?
[ "$rc" = 10 ] || die "an unreachable server exits $rc, not 10: $(cat "$T/err")"
"$FERRY" sync -a -H -X -z -P --bwlimit 100M --stats --cache-dir "$T/c" "$URL" "$T/d" >"$T/stats.txt" ||
	die "rsync's everyday flags are refused"
grep -q '^Number of deleted entries: 0' "$T/stats.txt" || die "--stats has no deletion count"
ok "exit codes 1 (usage), 10 (unreachable); -a -H -X -z -P --bwlimit --stats accepted"

# rsync's letters with rsync's meanings: -h is human-readable (a script's
# -avhP copies, it does not print help), -c --checksum, -A and -S what
# ferry does anyway; -x is refused by name; --version.
tree_of() { (cd "$1" && find . -printf '%y %m %s %T@ %l %P\n' | sort && find . -type f -exec sha256sum {} + | sort); }
"$FERRY" sync -avhP --cache-dir "$T/c" "$URL" "$T/davhp" >"$T/avhp.txt" 2>&1 ||
	{ cat "$T/avhp.txt"; die "-avhP URL DEST failed"; }
grep -q '^Usage' "$T/avhp.txt" && die "-avhP printed the help"
[ "$(tree_of "$T/d")" = "$(tree_of "$T/davhp")" ] || die "-avhP did not copy the tree"
"$FERRY" sync -aHAXSc -q --cache-dir "$T/c" "$URL" "$T/dahax" || die "-aHAXSc failed"
[ "$(tree_of "$T/d")" = "$(tree_of "$T/dahax")" ] || die "-aHAXSc did not copy the tree"
"$FERRY" sync -ax --cache-dir "$T/c" "$URL" "$T/dx" 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q -- '-x (--one-file-system)' "$T/err" ||
	{ cat "$T/err"; die "-x: exit $rc, not 1 with one line naming it"; }
[ ! -e "$T/dx" ] || die "-x was refused but DEST was made"
"$FERRY" sync --fuzzy "$URL" "$T/dx" 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q -- "--fuzzy" "$T/err" || die "an unsupported rsync option: exit $rc, or not named"
"$FERRY" sync --version | grep -q '^ferry sync [0-9]' || die "--version"
# ferry(1)'s table of every rsync option says what each does here: the
# refused ones exit 1 naming themselves, the others are taken
python3 "$E2E_LIB/rsync_table.py" "$FERRY" "$E2E_LIB/../../../docs/man/ferry.1" >"$T/table.txt" ||
	{ cat "$T/table.txt"; die "ferry(1)'s RSYNC OPTIONS table does not hold"; }
# --out-format, --log-file: rsync's escapes
"$FERRY" sync --cache-dir "$T/c" --out-format='%o|%i|%n|%L|%l|%B|%M|%f' --log-file "$T/of.log" "$URL" "$T/of" >"$T/of.out" 2>&1 ||
	{ cat "$T/of.out"; die "--out-format, --log-file: the sync failed"; }
want="recv|>f+++++++++|top.txt||$(stat -c %s "$S/top.txt")|$(stat -c %A "$S/top.txt" | cut -c2-)|$(date -d @"$(stat -c %Y "$S/top.txt")" +%Y/%m/%d-%H:%M:%S)|top.txt"
grep -qxF "$want" "$T/of.out" || { cat "$T/of.out"; die "--out-format: no line '$want'"; }
grep -q '^recv|cd+++++++++|dir/||0|' "$T/of.out" || die "--out-format: the directory's line is not rsync's"
grep -qE '^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} \[[0-9]+\] >f\+{9} top\.txt$' "$T/of.log" && grep -q 'done: received' "$T/of.log" ||
	{ cat "$T/of.log"; die "--log-file: not rsync's lines"; }
"$FERRY" sync --out-format='%n %c' "$URL" "$T/ox" 2>"$T/err"; rc=$?
[ "$rc" = 1 ] && grep -q -- "--out-format '%n %c'" "$T/err" || die "--out-format with %c: exit $rc, or not named"
ok "-avhP copies, -aHAXSc copies, -x and --fuzzy refused by name, --version; ferry(1)'s rsync table holds ($(tail -n1 "$T/table.txt")); --out-format and --log-file lines"

# --delete after an entry vanished at the source: nothing deleted (exit
# 24), unless --ignore-errors.
stop_repl || die "replicator did not stop cleanly"
V="$T/vsrc"
mkdir -p "$V"
for i in 1 2 3; do head -c 100000 /dev/urandom >"$V/f$i"; done
FERRY_HASH_DELAY_MS=1500 start_repl "$port" "r=$V"
echo changed >>"$V/f3" # before the hasher reaches it
mkdir -p "$T/dv2" && echo extra >"$T/dv2/extra"
"$FERRY" sync -q --cache-dir "$T/cv" --delete "$URL" "$T/dv2" 2>"$T/err"; rc=$?
[ "$rc" = 24 ] || die "a file changed before it was hashed exits $rc, not 24: $(cat "$T/err")"
grep -q 'IO error encountered -- skipping file deletion' "$T/err" || die "no 'skipping file deletion' line: $(cat "$T/err")"
[ -f "$T/dv2/extra" ] || die "--delete deleted after an error"
"$FERRY" sync -q --cache-dir "$T/cv" --delete --ignore-errors "$URL" "$T/dv2" 2>/dev/null; rc=$?
[ "$rc" = 24 ] || die "--ignore-errors run exits $rc, not 24"
[ ! -e "$T/dv2/extra" ] || die "--ignore-errors did not delete"
ok "a vanished file: exit 24, deletions skipped; --ignore-errors deletes"
stop_repl || die "replicator did not stop cleanly"

# --watch follows a new generation; SIGINT ends it with 20.
start_repl "$port" "r=$S"
"$FERRY" sync -q --watch --poll 1 --delete --cache-dir "$T/cw" "$URL" "$T/dw" 2>"$T/watch.err" &
wpid=$!
for i in $(seq 1 100); do [ -f "$T/dw/new.txt" ] && break; sleep 0.1; done
[ -f "$T/dw/new.txt" ] || die "--watch did not sync at first"
echo watched >"$S/watched.txt"
rm "$S/new.txt" "$S/dir/new-link"
sleep 1.1
kill -HUP "$REPL_PID"
for i in $(seq 1 150); do [ -f "$T/dw/watched.txt" ] && [ ! -e "$T/dw/new.txt" ] && break; sleep 0.1; done
[ -f "$T/dw/watched.txt" ] && [ ! -e "$T/dw/new.txt" ] || die "--watch did not follow the new generation"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dw" >"$T/treecmp.out" ||
	{ cat "$T/treecmp.out"; die "--watch left DEST different from the source"; }
kill -INT "$wpid"
wait "$wpid"; rc=$?
[ "$rc" = 20 ] || die "--watch ended by SIGINT exits $rc, not 20"
ok "--watch: followed generation 2 -> 3 with --delete; SIGINT exits 20"
stop_repl || die "replicator did not stop cleanly"
