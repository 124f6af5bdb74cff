#!/usr/bin/env bash
# 380: `ferry sync` whose cache directory fills up. The writer gets the
# verified bytes from memory, so DEST may still come out whole, but the
# cache could not keep the chunks: that is not a clean run. The sync exits
# 11 (rsync's file I/O error, ferry(1) EXIT STATUS: the cache cannot be
# written), says why on stderr (no space, naming the cache), and leaves
# whole files only; with room again, a rerun completes with 0 and the
# tree is exact. (100 checks a full DEST, and a full cache under a mount.)
. "$(dirname "$0")/lib/common.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to mount a small tmpfs"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built"
mkdir -p "$T/src" "$T/cache"
for i in 1 2 3 4 5 6; do head -c 4000000 /dev/urandom >"$T/src/f$i"; done
mount -t tmpfs -o size=6m tmpfs "$T/cache" || skip "cannot mount a tmpfs here"
cache_cleanup() {
	umount -l "$T/cache" 2>/dev/null
	cleanup
}
trap cache_cleanup EXIT
port=$(free_port)
REPL_OPTS=--hash-before-publish start_repl "$port" "f=$T/src"
URL="http://127.0.0.1:$port/v1/f"

rc=0
"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/full.out" 2>"$T/full.err" || rc=$?
[ "$rc" = 11 ] || { cat "$T/full.out" "$T/full.err"; die "a sync whose cache fills up exits $rc, not 11"; }
grep -q "error: verified chunks could not be stored in the cache .*dir=$T/cache err=\"No space left on device\"" "$T/full.err" ||
	{ cat "$T/full.err"; die "the sync does not say the cache is full"; }
left=$(find "$T/dest" -name '.ferry-tmp.*' | wc -l)
[ "$left" = 0 ] || die "$left temp file(s) left in DEST"
n=0
while IFS= read -r -d '' f; do
	cmp -s "$f" "$T/src/${f#"$T/dest/"}" || die "a file in DEST is not whole: ${f#"$T/dest/"}"
	n=$((n + 1))
done < <(find "$T/dest" -type f -print0)
ok "cache full: exit 11, the cause named, no temp file, the $n file(s) in DEST whole"

mount -o remount,size=64m "$T/cache" || die "cannot grow the tmpfs"
"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/again.out" 2>&1 ||
	{ cat "$T/again.out"; die "the rerun with room again did not exit 0"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs after the rerun"; }
"$FERRY" verify -q "$T/cache" || die "the cache does not verify after the rerun"
ok "room again: the rerun exits 0, the tree is exact, the cache verifies"
stop_repl
