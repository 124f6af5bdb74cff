#!/usr/bin/env bash
# 401: `ferry sync /src /dst`: a local directory as the source, with no
# replicator started by hand. ferry sync runs ferry-replicator itself for
# the run, on a Unix socket of its own, and stops it at the end.
#  (a) SRC makes DEST/SRC and SRC/ fills DEST2 (rsync's rule), each exact:
#      modes, times, sizes, symlinks, contents;
#  (b) a rerun after one file changed fetches only that file (the
#      replicator's state for this source is kept between runs);
#      --watch follows the source (the replicator rescans at its poll);
#  (c) nothing is left running, no socket directory of the run's;
#  (d) a source that is neither a URL, HOST:PATH nor a directory is a
#      usage error (exit 1), as before;
#  (e) what --max-size and --ignore-existing leave is not fetched;
#  (f) a single file as the source (rsync's rule for DEST).
. "$(dirname "$0")/lib/common.sh"
[ -x "$FERRY" ] || die "ferry not built"
export XDG_CACHE_HOME="$T/xdg" # the replicator's state for this source

mk_bulk_tree "$T/src" 3
printf 'hello\n' >"$T/src/small.txt"
chmod 640 "$T/src/small.txt"
ln -s small.txt "$T/src/link"
tree_of() { (cd "$1" && find . -printf '%y %m %s %T@ %l %P\n' | sort && find . -type f -exec sha256sum {} + | sort); }
: >"$T/start"

"$FERRY" sync --cache-dir "$T/cache" "$T/src" "$T/dst" >"$T/sync1.out" 2>&1 ||
	{ cat "$T/sync1.out"; die "(a) ferry sync SRC DEST failed"; }
[ "$(tree_of "$T/src")" = "$(tree_of "$T/dst/src")" ] || die "(a) DEST/src is not the source"
"$FERRY" sync -q --cache-dir "$T/cache" "$T/src/" "$T/dst2" || die "(a) ferry sync SRC/ DEST2 failed"
[ "$(tree_of "$T/src")" = "$(tree_of "$T/dst2")" ] || die "(a) SRC/ did not fill DEST2"
ok "(a) SRC made DEST/SRC, SRC/ filled DEST2, exact"

printf 'changed\n' >"$T/src/small.txt"
touch -d '2020-01-01' "$T/src/small.txt"
"$FERRY" sync --cache-dir "$T/cache" "$T/src" "$T/dst" >"$T/sync3.out" 2>&1 ||
	{ cat "$T/sync3.out"; die "(b) the rerun failed"; }
[ "$(tree_of "$T/src")" = "$(tree_of "$T/dst/src")" ] || die "(b) DEST/src is not the changed source"
grep -q 'fetched 1 chunks' "$T/sync3.out" || { cat "$T/sync3.out"; die "(b) the rerun fetched more than the changed file"; }
[ -n "$(ls "$T/xdg/ferry/local/" 2>/dev/null)" ] || die "(b) no replicator state kept for the source"
ok "(b) a rerun fetched only the changed file"

# --watch: the replicator started for the run rescans as often as the
# sync polls, so a change at the source reaches DEST.
"$FERRY" sync -q --watch --poll 1 --cache-dir "$T/cache" "$T/src/" "$T/dstw" 2>"$T/watch.err" &
wpid=$!
for i in $(seq 1 100); do [ -e "$T/dstw/small.txt" ] && break; sleep 0.1; done
printf 'watched\n' >"$T/src/watched.txt"
for i in $(seq 1 150); do cmp -s "$T/src/watched.txt" "$T/dstw/watched.txt" 2>/dev/null && break; sleep 0.1; done
cmp -s "$T/src/watched.txt" "$T/dstw/watched.txt" || { kill "$wpid"; cat "$T/watch.err"; die "(b) --watch did not bring a new file within 15 s"; }
kill -INT "$wpid"
wait "$wpid"; rc=$?
[ $rc = 20 ] || die "(b) --watch ended by SIGINT exits $rc, not 20"
ok "(b) --watch on a local source follows a change; SIGINT exits 20"

sleep 0.3
left=$(pgrep -f -- "--session .*-l unix:" ; find "${TMPDIR:-/tmp}" -maxdepth 1 -type d -name 'ferry-ssh-*' -newer "$T/start")
[ -z "$left" ] || die "(c) left after the runs: $left"
ok "(c) nothing left running"

# (e) what rsync's leave-alone rules leave is not fetched either
mkdir -p "$T/ls"
head -c 3000000 /dev/urandom >"$T/ls/big"
echo small >"$T/ls/s"
"$FERRY" sync --cache-dir "$T/lc1" --max-size 1M "$T/ls/" "$T/ld1" >"$T/ls1.out" 2>&1 || { cat "$T/ls1.out"; die "(e) --max-size failed"; }
[ ! -e "$T/ld1/big" ] && [ -e "$T/ld1/s" ] && grep -q 'fetched 1 chunks' "$T/ls1.out" ||
	{ cat "$T/ls1.out"; die "(e) --max-size: the big file's chunks were fetched, or it was written"; }
mkdir -p "$T/ld2" && cp -a "$T/ls/big" "$T/ld2/big"
"$FERRY" sync --cache-dir "$T/lc2" --ignore-existing "$T/ls/" "$T/ld2" >"$T/ls2.out" 2>&1 || { cat "$T/ls2.out"; die "(e) --ignore-existing failed"; }
grep -q 'fetched 1 chunks' "$T/ls2.out" || { cat "$T/ls2.out"; die "(e) --ignore-existing: the existing file's chunks were fetched"; }
ok "(e) --max-size and --ignore-existing fetch nothing of what they leave"

"$FERRY" sync -q --cache-dir "$T/cache" "$T/no-such-dir" "$T/dst4" 2>"$T/err"; rc=$?
[ $rc = 1 ] || { cat "$T/err"; die "(d) a missing source: exit $rc, not 1"; }
ok "(d) a source that is no directory, URL or HOST:PATH: exit 1"

# (f) a single local file: into a directory DEST, or as DEST (rsync's)
mkdir -p "$T/one-dir"
"$FERRY" sync -q --cache-dir "$T/lc3" "$T/ls/s" "$T/one-dir" || die "(f) a single file into a directory failed"
"$FERRY" sync -q --cache-dir "$T/lc3" "$T/ls/s" "$T/one-file" || die "(f) a single file as DEST failed"
cmp -s "$T/ls/s" "$T/one-dir/s" && cmp -s "$T/ls/s" "$T/one-file" && [ "$(ls "$T/one-dir")" = s ] &&
	[ "$(stat -c %Y "$T/one-file")" = "$(stat -c %Y "$T/ls/s")" ] || die "(f) the single file is not where rsync puts it"
ok "(f) a single local file: DEST/NAME in a directory, else DEST itself"
