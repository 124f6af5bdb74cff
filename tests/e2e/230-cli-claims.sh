#!/usr/bin/env bash
# 230: claims of ferry(1) no other test exercises:
#  (a) ferry sync carries sockets, block and character devices (type and
#      device number), and a mount shows them the same;
#  (b) ferry verify -c CACHEDIR DEST: 0 and "0 mismatches" on the copy;
#      then each kind of difference it names (content with size and mtime
#      kept, mode, mtime, symlink target, device number, user.* xattr, a
#      missing entry, a hard link broken) adds one mismatch, named on
#      stderr, exit 1; --catalog FILE is the same; exit 2 on bad usage,
#      1 for a path that is neither a cache nor given a catalog;
#  (c) ferry verify CACHEDIR re-hashes the store: 0 when sound; one byte
#      flipped in a volume is a mismatch, exit 1, and still is in a cache
#      laid out as before volumes (packs/NNNNNNNN.pack, column pack), which
#      verify reads as it is (only the store's open moves it);
#  (d) ferry status --watch refreshes until complete and then exits 0 by
#      itself (JSON lines, the last "complete"), and ends on SIGINT (exit
#      0) on a mount that never completes; ferry status MOUNTPOINT and
#      --json MOUNTPOINT agree on the state.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v setfattr >/dev/null || skip "setfattr (Debian package attr) missing"
S="$T/src"
mkdir -p "$S/dev" "$S/d"
python3 - "$S/dev/sock" <<'PY' || die "cannot make a socket"
import socket, sys
socket.socket(socket.AF_UNIX).bind(sys.argv[1])
PY
mknod "$S/dev/blk" b 7 200 || die "cannot make a block device"
mknod "$S/dev/chr" c 1 3 || die "cannot make a character device"
mkfifo "$S/dev/fifo"
for i in 1 2 3 4; do head -c $((100000 * i)) /dev/urandom >"$S/d/f$i"; done
ln "$S/d/f1" "$S/d/f1-link"
ln -s f2 "$S/d/sl"
setfattr -n user.k -v v1 "$S/d/f3"
echo x >"$S/d/x"
setfattr -n user.a -v 1 "$S/d/x"
mk_bulk_tree "$S/bulk" 24
port=$(free_port)
start_repl "$port" "c=$S"
URL="http://127.0.0.1:$port/v1/c"

# (a) sync and mount: sockets and devices as they are at the source
"$FERRY" sync -q --cache-dir "$T/scache" "$URL" "$T/dest" || die "(a) sync failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(a) DEST differs from the source"; }
[ -S "$T/dest/dev/sock" ] || die "(a) the socket is not a socket in DEST"
[ -b "$T/dest/dev/blk" ] && [ "$(stat -c '%t:%T' "$T/dest/dev/blk")" = "7:c8" ] || die "(a) the block device is not 7,200 in DEST"
[ -c "$T/dest/dev/chr" ] && [ "$(stat -c '%t:%T' "$T/dest/dev/chr")" = "1:3" ] || die "(a) the character device is not 1,3 in DEST"
mount_hyd "$URL" "$T/mnt" --no-backfill
[ -S "$T/mnt/dev/sock" ] && [ -b "$T/mnt/dev/blk" ] && [ -c "$T/mnt/dev/chr" ] || die "(a) the mount shows other types"
[ "$(stat -c '%F %t:%T %a' "$T/mnt/dev/blk")" = "$(stat -c '%F %t:%T %a' "$S/dev/blk")" ] || die "(a) the mount's block device differs"
umount_hyd "$T/mnt"
ok "(a) a socket, a block and a character device: ferry sync writes them, the mount shows them"

# (b) verify DEST against the cache's catalog
verify() { # ARGS... -> RC; stdout $T/v.out, stderr $T/v.err
	"$FERRY" verify "$@" >"$T/v.out" 2>"$T/v.err"
	RC=$?
}
verify -c "$T/scache" "$T/dest"
[ "$RC" = 0 ] || { cat "$T/v.err"; die "(b) verify of a fresh copy exits $RC"; }
grep -q ' 0 mismatches$' "$T/v.out" || die "(b) summary: $(cat "$T/v.out")"
ok "(b) verify of the copy: exit 0, $(cat "$T/v.out")"
n=0
# tamper WHAT PATH CMD... — change DEST (PATH relative to it, one level
# below its root), then verify finds one more mismatch and names PATH on
# stderr.
tamper() {
	local what=$1 path=$2
	shift 2
	"$@" || die "(b) cannot tamper: $what"
	# only that one difference: the parent directory keeps its time
	touch -r "$S/${path%/*}" "$T/dest/${path%/*}"
	n=$((n + 1))
	verify -c "$T/scache" "$T/dest"
	[ "$RC" = 1 ] || { cat "$T/v.err"; die "(b) $what: verify exits $RC, not 1"; }
	grep -q " $n mismatch\(es\)\?$" "$T/v.out" || { cat "$T/v.out" "$T/v.err"; die "(b) $what: not $n mismatches"; }
	grep -qF "$path" "$T/v.err" || { cat "$T/v.err"; die "(b) $what: $path not named"; }
	log "(b) $what: $(grep -F "$path" "$T/v.err" | head -n 1)"
}
same_size_new_bytes() { # keep size and mtime
	local keep
	keep=$(stat -c %y "$1")
	printf 'XXXX' | dd of="$1" bs=1 seek=5000 conv=notrunc status=none
	touch -d "$keep" "$1"
}
tamper "content, size and mtime kept" "d/f4" same_size_new_bytes "$T/dest/d/f4"
tamper "mode" "d/f2" chmod 600 "$T/dest/d/f2"
tamper "mtime" "d/f3" touch -d '2001-01-01' "$T/dest/d/f3"
tamper "symlink target" "d/sl" sh -c "ln -sfn f4 '$T/dest/d/sl' && touch -h -r '$S/d/sl' '$T/dest/d/sl'"
tamper "device number" "dev/blk" sh -c "rm '$T/dest/dev/blk' && mknod '$T/dest/dev/blk' b 7 201 && touch -r '$S/dev/blk' '$T/dest/dev/blk'"
tamper "user xattr value" "d/x" setfattr -n user.a -v 2 "$T/dest/d/x"
tamper "missing entry" "dev/fifo" rm "$T/dest/dev/fifo"
tamper "hard link broken" "d/f1-link" sh -c "cp -p '$T/dest/d/f1-link' '$T/dest/d/tmp' && mv '$T/dest/d/tmp' '$T/dest/d/f1-link'"
verify --catalog "$T/scache/catalogs/1.db" "$T/dest"
[ "$RC" = 1 ] && grep -q " $n mismatches$" "$T/v.out" || die "(b) --catalog FILE: exit $RC, $(cat "$T/v.out")"
ok "(b) verify names each of $n kinds of difference, one mismatch each, exit 1; --catalog FILE agrees"
verify
[ "$RC" = 2 ] || die "(b) verify without arguments exits $RC, not 2"
verify --bogus "$T/dest"
[ "$RC" = 2 ] || die "(b) verify --bogus exits $RC, not 2"
verify -c "$T/scache" "$T/dest" "$T/dest"
[ "$RC" = 2 ] || die "(b) verify with two paths exits $RC, not 2"
verify "$T/dest"
[ "$RC" = 1 ] || die "(b) verify of a path that is no cache, without a catalog, exits $RC, not 1 (ferry(1): not a ferry cache)"
[ "$(wc -l <"$T/v.err")" = 1 ] || die "(b) not one line: $(cat "$T/v.err")"
ok "(b) bad usage exits 2; a path that is no cache exits 1 with one line"

# (c) verify CACHEDIR: the store re-hashed
verify "$T/scache"
[ "$RC" = 0 ] && grep -q ' 0 mismatches$' "$T/v.out" || die "(c) verify of a sound store: exit $RC, $(cat "$T/v.out")"
stored=$(sql "$T/scache/state.db" "select count(*) from chunk")
grep -q " $stored chunks checked" "$T/v.out" || die "(c) not every chunk checked: $(cat "$T/v.out") ($stored stored)"
# one byte inside the payload of the largest frame
read -r vol off len < <(sqlite3 -separator ' ' "$T/scache/state.db" "select vol, off, frame_len from chunk order by frame_len desc limit 1")
pf=$(printf '%s/volumes/%08d.vol' "$T/scache" "$vol")
[ -f "$pf" ] || die "(c) no volume file $pf"
python3 - "$pf" $((off + len / 2)) <<'PY'
import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x40])); f.close()
PY
verify "$T/scache"
[ "$RC" = 1 ] && grep -q ' 1 mismatch$' "$T/v.out" || { cat "$T/v.out" "$T/v.err"; die "(c) a flipped byte: exit $RC"; }
grep -q "vol=volumes/$(printf %08d "$vol").vol " "$T/v.err" || die "(c) the mismatch does not name its volume: $(cat "$T/v.err")"
# the same cache in the layout from before volumes
for f in "$T"/scache/volumes/*.vol; do mv "$f" "${f%.vol}.pack"; done
mv "$T/scache/volumes" "$T/scache/packs"
sqlite3 "$T/scache/state.db" "drop index chunk_used; drop table pin; alter table chunk drop column used; alter table chunk rename column vol to pack; alter table gc_free rename column vol to pack; pragma user_version = 3"
verify "$T/scache"
[ "$RC" = 1 ] && grep -q " $stored chunks checked, 1 mismatch$" "$T/v.out" || { cat "$T/v.out" "$T/v.err"; die "(c) the old layout: exit $RC"; }
grep -q "vol=packs/$(printf %08d "$vol").pack " "$T/v.err" || die "(c) old layout: the mismatch does not name its pack file: $(cat "$T/v.err")"
ok "(c) verify CACHEDIR: $stored chunks, 0 mismatches; a flipped byte in a volume: 1 mismatch, exit 1; the same in a cache from before volumes"

# (d) ferry status --watch until complete, on a mount that backfills
rm -rf "$T/cache"
mount_hyd "$URL" "$T/mnt" --bwlimit 8M
"$FERRY" status "$T/mnt" --json --watch 0.2 >"$T/watch.json" 2>"$T/watch.err" &
wpid=$!
wait_exited $wpid 180 || die "(d) ferry status --watch did not end by itself"
wait $wpid || { cat "$T/watch.err"; die "(d) ferry status --watch exits non-zero"; }
python3 - "$T/watch.json" <<'PY' || die "(d) --watch output: $(head -c 600 "$T/watch.json")"
import json, sys
lines = open(sys.argv[1], "rb").read().decode().splitlines()
docs = [json.loads(l) for l in lines]
assert len(docs) >= 3, "only %d refreshes" % len(docs)
assert docs[-1]["state"] == "complete", docs[-1]["state"]
assert all(d["state"] != "complete" for d in docs[:-1]), "went on after complete"
stored = [d["chunks_stored"] for d in docs]
assert stored == sorted(stored) and stored[0] < stored[-1], stored
print("# %d refreshes, chunks_stored %d -> %d, last state complete" % (len(docs), stored[0], stored[-1]))
PY
ok "(d) ferry status --json --watch MOUNTPOINT: refreshes while backfilling, exits 0 once complete"
"$FERRY" status "$T/mnt" >"$T/st.txt" || die "(d) ferry status MOUNTPOINT failed"
grep -q '^state  *complete' "$T/st.txt" || { cat "$T/st.txt"; die "(d) human status of the mount"; }
umount_hyd "$T/mnt"
rm -rf "$T/cache"
mount_hyd "$URL" "$T/mnt" --no-backfill
"$FERRY" status "$T/mnt" --watch 0.2 >"$T/watch.txt" 2>&1 &
wpid=$!
wait_for 30 eval '[ "$(grep -c "^state" "$T/watch.txt")" -ge 2 ]' || die "(d) --watch did not refresh: $(cat "$T/watch.txt")"
kill -0 $wpid || die "(d) --watch on a browsing mount ended by itself"
kill -INT $wpid
wait_exited $wpid 10 || die "(d) --watch did not end on SIGINT"
wait $wpid
rc=$?
[ "$rc" = 0 ] || die "(d) --watch ended by SIGINT exits $rc"
grep -q '^state  *browsing' "$T/watch.txt" || die "(d) --watch of a --no-backfill mount: $(head "$T/watch.txt")"
ok "(d) ferry status --watch on a mount that never completes: refreshes until SIGINT, exit 0"
umount_hyd "$T/mnt"
stop_repl || die "replicator did not exit 0 on SIGTERM"
