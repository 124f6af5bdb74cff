#!/usr/bin/env bash
# 370: a catalog whose entries are a graph, not a tree, is refused whole
# (docs/catalog.md, "The tree rule"). Before the rule a 908-byte catalog
# whose root lists a -> 1 and b -> 1 made ferry sync create 245,935
# directories and 1.9 GB in 40 s (its depth limit of 256 stops each
# branch, but two back edges a level make 2^256 branches).
# A real catalog of a small tree (directories and empty files: nothing
# to fetch) is changed with sqlite3 the way a compromised source could,
# and served as a static layout (HEAD, catalog/GEN) by python's
# http.server:
#  (a) the unchanged catalog syncs (exit 0): the layout is sound;
#  (b) two cycles, root_twice (the root lists x -> 1 and y -> 1) and
#      ancestor (a/b/up -> a): ferry sync exits 12 (docs/man/ferry.1,
#      "a catalog that does not check out") in under 1 s, with one line
#      naming the inode and its parents, and DEST stays empty; the
#      hydrator refuses to mount either (exit 1, the same line), and
#      neither is left in the cache;
#  (c) a cache left by an older ferry (the bad catalog in place of the
#      good one, no marker of the check) with the server gone: ferry sync
#      still exits 12 with nothing in DEST, and so does the mount.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
command -v zstd >/dev/null || skip "zstd CLI missing (Debian package zstd)"

S="$T/src"
mkdir -p "$S/a/b" "$S/c"
: >"$S/a/b/f"
: >"$S/c/g"
port=$(free_port)
start_repl "$port" "t=$S"
gen=$(curl -sf "http://127.0.0.1:$port/v1/t/HEAD") || die "GET HEAD"
curl -sf "http://127.0.0.1:$port/v1/t/catalog/$gen" | zstd -q -d >"$T/good.db" ||
	die "GET catalog"
stop_repl || die "replicator did not exit 0 on SIGTERM"
a=$(sql "$T/good.db" "select ino from dirent where parent=1 and name=cast('a' as blob)")
b=$(sql "$T/good.db" "select ino from dirent where parent=$a and name=cast('b' as blob)")
[ -n "$a" ] && [ -n "$b" ] || die "no a/b in the catalog"

# publish NS DB — DB as namespace NS of the static layout in $T/www.
publish() {
	mkdir -p "$T/www/v1/$1/catalog"
	echo "$gen" >"$T/www/v1/$1/HEAD"
	zstd -q -f -c "$2" >"$T/www/v1/$1/catalog/$gen" || die "zstd $2"
}
# bad NS SQL — the good catalog with SQL applied, published as NS.
bad() {
	cp "$T/good.db" "$T/$1.db"
	sqlite3 "$T/$1.db" "$2" || die "sqlite3 $1"
	publish "$1" "$T/$1.db"
}
publish good "$T/good.db"
bad root_twice "insert into dirent values(1, 100, cast('x' as blob), 1),
	(1, 101, cast('y' as blob), 1)"
bad ancestor "insert into dirent values($b, 100, cast('up' as blob), $a)"

sport=$(free_port)
python3 -m http.server --bind 127.0.0.1 "$sport" --directory "$T/www" >"$T/http.log" 2>&1 &
SPID=$!
e2e_after_cleanup() { kill "$SPID" 2>/dev/null; }
SURL="http://127.0.0.1:$sport/v1"
wait_for 30 curl -sf -o /dev/null "$SURL/good/HEAD" || die "the static server did not start"

# (a)
mkdir -p "$T/d-good"
"$FERRY" sync -q --cache-dir "$T/c-good" "$SURL/good" "$T/d-good" 2>"$T/err" ||
	die "(a) ferry sync of the unchanged catalog: $(cat "$T/err")"
[ -f "$T/d-good/a/b/f" ] && [ -f "$T/d-good/c/g" ] || die "(a) the tree was not written"
[ -f "$T/c-good/catalogs/$gen.db.tree-ok" ] || die "(a) no marker of the passed check beside the catalog"
ok "(a) the unchanged catalog syncs from the static layout, its check remembered"

# refused WHAT ERRFILE WORDS... — ERRFILE is one line holding each word.
refused() {
	local what=$1 f=$2 w
	shift 2
	[ "$(wc -l <"$f")" = 1 ] || { cat "$f" >&2; die "$what: not one line on stderr"; }
	for w in "$@"; do
		grep -qF -- "$w" "$f" || die "$what: the line does not say \"$w\": $(cat "$f")"
	done
}
# now_ms — milliseconds since the epoch.
now_ms() { date +%s%3N; }

# (b)
for ns in root_twice ancestor; do
	case $ns in
	root_twice) words=("root directory (inode 1)" "in directory 1") ;;
	ancestor) words=("directory inode $a" "2 entries" "in directories 1 and $b") ;;
	esac
	mkdir -p "$T/d-$ns"
	t0=$(now_ms)
	"$FERRY" sync -q --cache-dir "$T/c-$ns" "$SURL/$ns" "$T/d-$ns" 2>"$T/err-$ns"
	rc=$?
	ms=$(($(now_ms) - t0))
	[ "$rc" = 12 ] || die "(b) $ns: ferry sync exits $rc, not 12: $(cat "$T/err-$ns")"
	[ "$ms" -lt 1000 ] || die "(b) $ns: ferry sync took $ms ms to refuse it"
	[ -z "$(ls -A "$T/d-$ns")" ] || die "(b) $ns: ferry sync created $(ls -A "$T/d-$ns" | head -3) in DEST"
	refused "(b) $ns: ferry sync" "$T/err-$ns" "not a valid ferry catalog" "${words[@]}"
	[ -z "$(ls "$T/c-$ns/catalogs/" 2>/dev/null | grep '\.db')" ] ||
		die "(b) $ns: the refused catalog is in the cache: $(ls "$T/c-$ns/catalogs/")"
	log "$ns: ferry sync exits 12 in $ms ms: $(cat "$T/err-$ns")"

	mkdir -p "$T/m-$ns"
	"$HYD" -c "$T/h-$ns" "$SURL/$ns" "$T/m-$ns" >"$T/hout-$ns" 2>"$T/herr-$ns"
	rc=$?
	! mountpoint -q "$T/m-$ns" || { fusermount3 -u "$T/m-$ns"; die "(b) $ns: the hydrator mounted it"; }
	[ "$rc" = 1 ] || die "(b) $ns: the hydrator exits $rc, not 1: $(cat "$T/herr-$ns")"
	refused "(b) $ns: the hydrator" "$T/herr-$ns" "not a valid ferry catalog" "${words[@]}"
done
ok "(b) both cycles: ferry sync exits 12 in under 1 s naming the inode and its parents, DEST empty; the hydrator refuses to mount them"

# (c) the good cache of (a), its catalog swapped for a bad one as if an
# older ferry had installed it, the server gone: the cached catalog
# stands in, and is checked before anything walks it.
cp "$T/root_twice.db" "$T/c-good/catalogs/$gen.db"
kill "$SPID"
wait "$SPID" 2>/dev/null
wait_for 10 bash -c "! curl -s -o /dev/null '$SURL/good/HEAD'" || die "(c) the static server did not stop"
mkdir -p "$T/d-off"
t0=$(now_ms)
"$FERRY" sync -q --cache-dir "$T/c-good" "$SURL/good" "$T/d-off" 2>"$T/err-off"
rc=$?
ms=$(($(now_ms) - t0))
[ "$rc" = 12 ] || die "(c) ferry sync of the cached bad catalog exits $rc, not 12: $(cat "$T/err-off")"
[ "$ms" -lt 1000 ] || die "(c) ferry sync took $ms ms to refuse it"
[ -z "$(ls -A "$T/d-off")" ] || die "(c) ferry sync created $(ls -A "$T/d-off" | head -3) in DEST"
grep -qF "root directory (inode 1)" "$T/err-off" || die "(c) the refusal does not name the root: $(cat "$T/err-off")"
mkdir -p "$T/m-off"
"$HYD" -c "$T/c-good" "$SURL/good" "$T/m-off" >"$T/hout-off" 2>"$T/herr-off"
rc=$?
! mountpoint -q "$T/m-off" || { fusermount3 -u "$T/m-off"; die "(c) the hydrator mounted the cached bad catalog"; }
[ "$rc" = 1 ] || die "(c) the hydrator exits $rc, not 1: $(cat "$T/herr-off")"
grep -qF "root directory (inode 1)" "$T/herr-off" || die "(c) the hydrator's refusal does not name the root: $(cat "$T/herr-off")"
ok "(c) a cached bad catalog with the server gone: ferry sync exits 12, DEST empty; the hydrator refuses it"
