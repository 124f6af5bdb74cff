#!/usr/bin/env bash
# 161: `ferry sync`'s per-directory merge files against rsync's on the same
# tree: -F and -FF (".rsync-filter" in the root and below, anchored rules
# at their directory, "!" ending the parents' rules, inherited rules),
# ': NAME' with the 'n', '-', 'w' and 'e' modifiers, '. FILE', -C (the
# CVS list, ~/.cvsignore, $CVSIGNORE, each directory's .cvsignore) with
# --delete, where -C's perishable rules let a directory the source lost
# go, and per-directory rules protect DEST's entries. Each gives the tree
# rsync gives, and the -i lines of a --delete run are rsync's. A merge
# file the source holds in a pending state (not hashed at the scan) is
# read through its manifest. A bad rule in a merge file stops the run
# (exit 1) naming the file.
. "$(dirname "$0")/lib/common.sh"
command -v rsync >/dev/null || skip "rsync missing"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built"
S="$T/src"
mkdir -p "$S/a/b/c" "$S/keep" "$S/cvs/.git" "$S/cvs/sub" "$S/gone"
for f in x.log y.tmp top.txt a/x.log a/y.tmp a/top a/b/x.log a/b/top \
	a/b/c/x.log a/b/c/z.dat keep/k.log keep/x.o cvs/m.o cvs/m.c \
	cvs/core cvs/.git/HEAD cvs/sub/s.x cvs/sub/s.y cvs/t.x cvs/t.y \
	cvs/w.env cvs/w.home a/only.local a/b/only.local; do
	echo "$f" >"$S/$f"
done
# the root: logs out, except under keep/ (a later file's + wins)
printf -- '- *.log\n- /top.txt\n' >"$S/.rsync-filter"
# a: its own logs back in; /top anchored at a; *.tmp out below a
printf -- '+ x.log\n- /top\n- *.tmp\n' >"$S/a/.rsync-filter"
# a/b: "!" forgets a's and the root's rules for a/b and below
printf -- '!\n- z.dat\n' >"$S/a/b/.rsync-filter"
printf -- '+ *.log\n' >"$S/keep/.rsync-filter"
# ':nw- .local': words of patterns, this directory only
printf 'only.local  x.log\n' >"$S/a/.local"
# -C: .cvsignore is word-split, not inherited
printf '*.x\n' >"$S/cvs/.cvsignore"
find "$S" -exec touch -h -d '2020-02-02 10:00:00' {} +
mkdir -p "$T/home"
printf '*.home\n' >"$T/home/.cvsignore"
printf -- '- *.dat\n+ keep/\n' >"$T/merge-rules"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/m"
start_repl "$port" "m=$S"

n=0
check() {
	n=$((n + 1))
	rsync -aHX --delete "$@" "$S/" "$T/r$n/" || die "rsync $* failed"
	"$FERRY" sync -q --cache-dir "$T/c" --delete "$@" "$URL" "$T/f$n" || die "ferry sync $* failed"
	python3 "$E2E_LIB/treecmp.py" --content "$T/r$n" "$T/f$n" >"$T/cmp$n.txt" ||
		{ cat "$T/cmp$n.txt"; die "'$*': ferry's tree differs from rsync's"; }
}
check -F
[ -e "$T/f1/keep/k.log" ] && [ ! -e "$T/f1/x.log" ] && [ -e "$T/f1/a/x.log" ] &&
	[ ! -e "$T/f1/a/top" ] && [ -e "$T/f1/a/b/top" ] && [ -e "$T/f1/a/b/x.log" ] &&
	[ ! -e "$T/f1/a/b/c/z.dat" ] && [ -e "$T/f1/.rsync-filter" ] ||
	die "-F: the checks prove nothing"
check -FF
[ ! -e "$T/f2/.rsync-filter" ] && [ ! -e "$T/f2/a/.rsync-filter" ] || die "-FF: the filter files were sent"
check -f ': .rsync-filter'
check -f 'dir-merge,e .rsync-filter' --exclude 'c/'
check -f ':n- .local'
check -f ':nw- .local'
[ ! -e "$T/f$n/a/only.local" ] && [ -e "$T/f$n/a/b/only.local" ] && [ ! -e "$T/f$n/a/x.log" ] ||
	die "':nw- .local': the checks prove nothing"
check -f ':w- .local'
check -f "merge $T/merge-rules" -F
HOME="$T/home" CVSIGNORE='*.env' check -C
[ ! -e "$T/f$n/cvs/m.o" ] && [ ! -e "$T/f$n/cvs/core" ] && [ ! -e "$T/f$n/cvs/.git" ] &&
	[ ! -e "$T/f$n/cvs/t.x" ] && [ -e "$T/f$n/cvs/sub/s.x" ] && [ ! -e "$T/f$n/cvs/w.env" ] &&
	[ ! -e "$T/f$n/cvs/w.home" ] && [ -e "$T/f$n/cvs/m.c" ] || die "-C: the checks prove nothing"
HOME="$T/home" check -C -F
ok "$n merge-rule sets: the same trees as rsync"

# A dry run reads the merge files too: rsync's -n -i lines.
items() { grep -v -e '^wrote ' -e '^would ' -e '^deleted ' -e '^total size ' | sort; }
# (both name DEST they would create: "created directory DEST")
rsync -aHX -n -i -F "$S/" "$T/nr/" | sed "s|$T/nr|DEST|" | sort >"$T/nr.items" || die "rsync -n -F failed"
"$FERRY" sync --cache-dir "$T/cn" -n -i -F "$URL" "$T/nf" | sed "s|$T/nf|DEST|" | items >"$T/nf.items" ||
	die "ferry sync -n -F failed"
diff "$T/nr.items" "$T/nf.items" >"$T/ndiff.txt" || { cat "$T/ndiff.txt"; die "-n -i -F differs from rsync's"; }
grep -q 'a/x.log' "$T/nf.items" && ! grep -q 'a/top' "$T/nf.items" && [ ! -e "$T/nf" ] ||
	die "-n -i -F: the checks prove nothing, or DEST was made"
ok "-n -i -F: rsync's lines, nothing written"

# --delete: DEST's entries the per-directory rules exclude stay (they are
# protected), -C's perishable rules do not keep a directory the source
# lost; -i lines are rsync's. ferry judges deletions by the source's merge
# files, which is rsync's --delete-after (its --delete-during reads the
# files DEST held before the run).
mkdir -p "$T/base/gone2/in" "$T/base/a"
echo mine >"$T/base/a/own.tmp"   # a's "- *.tmp": protected
echo mine >"$T/base/own.txt"     # nothing protects it
echo o >"$T/base/gone2/in/x.o"   # -C's *.o is perishable: it goes
echo l >"$T/base/gone2/in/x.log" # the root's "- *.log" is not: it stays
touch -d '2020-03-03' "$T/base" "$T/base/a" "$T/base/gone2" "$T/base/gone2/in"
for opts in "-F -C" "-F"; do
	rm -rf "$T/dr" "$T/df"
	cp -a "$T/base" "$T/dr"
	cp -a "$T/base" "$T/df"
	# shellcheck disable=SC2086
	HOME="$T/home" rsync -aHX --delete-after -i $opts "$S/" "$T/dr/" >"$T/dr.raw" || die "rsync $opts failed"
	# rsync's "cannot delete non-empty directory" notes: ferry's are
	# warnings on stderr
	grep -v '^cannot delete non-empty directory' "$T/dr.raw" | sort >"$T/dr.items"
	# shellcheck disable=SC2086
	HOME="$T/home" "$FERRY" sync --cache-dir "$T/c" --delete-after -i $opts "$URL" "$T/df" | items >"$T/df.items" ||
		die "ferry sync --delete $opts failed"
	# (gone2 and gone2/in keep the time of the deletions made in them)
	python3 "$E2E_LIB/treecmp.py" --content --no-dir-times "$T/dr" "$T/df" >"$T/dcmp.txt" ||
		{ cat "$T/dcmp.txt"; die "--delete $opts: ferry's tree differs from rsync's"; }
	diff "$T/dr.items" "$T/df.items" >"$T/ddiff.txt" || { cat "$T/ddiff.txt"; die "--delete $opts: -i differs from rsync's"; }
	[ -e "$T/df/a/own.tmp" ] && [ ! -e "$T/df/own.txt" ] || die "--delete $opts: the checks prove nothing"
done
[ -e "$T/df/gone2/in/x.log" ] || die "--delete -F: a protected file went"
ok "--delete with merge files: rsync's tree and -i lines (protected entries stay, perishable ones go)"

# A merge file not hashed at the scan (a replicator that publishes first
# and hashes slowly): read through its manifest, the tree still rsync's.
stop_repl
cp -a "$S" "$T/src2"
printf 'bogus rule\n' >"$T/src2/a/.bad-filter"
touch -r "$S/a" "$T/src2/a"
port=$(free_port)
FERRY_HASH_DELAY_MS=300 REPL_OPTS="--scan-threads 1" start_repl "$port" "p=$T/src2"
grep ' ready' "$T/repl.log" | tail -n 1 | grep -q ' pending=[1-9]' || die "nothing pending at publication"
URL="http://127.0.0.1:$port/v1/p"
"$FERRY" sync -q --cache-dir "$T/c2" --exclude .bad-filter -F "$URL" "$T/p1" || die "ferry sync -F of a pending source failed"
python3 "$E2E_LIB/treecmp.py" --content "$T/r1" "$T/p1" >"$T/pcmp.txt" ||
	{ cat "$T/pcmp.txt"; die "-F of a pending source: the tree differs from rsync's"; }
ok "merge files not hashed yet: read through their manifests, rsync's tree"

# A bad rule in a merge file stops the run before anything is written.
"$FERRY" sync -q --cache-dir "$T/c2" -f ': .bad-filter' "$URL" "$T/p2" 2>"$T/bad.err"; rc=$?
[ "$rc" = 1 ] && grep -q 'a/.bad-filter' "$T/bad.err" && grep -q 'unknown filter rule' "$T/bad.err" ||
	{ cat "$T/bad.err"; die "a bad merge file: exit $rc, or not named"; }
[ ! -e "$T/p2/a" ] || die "a bad merge file: the sync wrote the tree anyway"
ok "a bad rule in a merge file: exit 1, the file named, nothing written"
