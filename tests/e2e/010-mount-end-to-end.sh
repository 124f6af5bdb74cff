#!/usr/bin/env bash
# 010: the metadata-first slice end to end on loopback.
# A generated tree (odd names, links, xattrs, devices, >4 GiB sparse file,
# 20,000-entry directory) is served by the real replicator and mounted by the
# real hydrator. Checks, in order:
#  (a) every path's metadata matches the source while no chunk was fetched;
#  (e) a source file changed after the scan is refused with EIO;
#  (b) reading every file gives the source's bytes;
#  (c) identical content is fetched once and stored once;
#  (d) with the replicator stopped, a remount on the same cache serves what
#      was read, the cache first turned back into the layout of a ferry
#      from before volumes (packs/NNNNNNNN.pack, column pack, schema 3),
#      which the remount moves to volumes/ in place;
#  (f) a never-fetched file (never/unread.bin, in a directory nothing
#      else of is read) fails with EIO within a bounded time.
# Background backfill is off here (--no-backfill): this test is about the
# demand path; 040-060 cover backfill. A directory of which the job reads
# two small files gets the rest of its small files asked for (the mount's
# readahead by directory): unread.bin, in the root, may come that way.
. "$(dirname "$0")/lib/common.sh"
need_fuse
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"

python3 "$E2E_LIB/mktree.py" "$T/src" || die "mktree failed"
mkdir "$T/src/never"
head -c 300000 /dev/urandom >"$T/src/never/unread.bin"
port=$(free_port)
start_repl "$port" "tree=$T/src"
URL="http://127.0.0.1:$port/v1/tree"
M="$T/mnt"
mount_hyd "$URL" "$M" --timeout 3 --no-backfill

# (a) metadata, answered from the catalog alone.
python3 "$E2E_LIB/treecmp.py" "$T/src" "$M" >"$T/cmp-a.txt" || { cat "$T/cmp-a.txt"; die "(a) metadata differs"; }
tail -n 1 "$T/cmp-a.txt"
python3 - "$M/big" <<'PY' || die "(a) 20,000-entry readdir is not exactly-once"
import os, sys
names = os.listdir(sys.argv[1])
assert len(names) == 20000 and len(set(names)) == 20000, (len(names), len(set(names)))
assert sorted(names) == ["e%06d" % i for i in range(20000)]
PY
served=$(repl_stat "$port" tree chunks_served)
[ "$served" = 0 ] || die "(a) metadata walk fetched $served chunks"
stored=$(sql "$T/cache/state.db" "select count(*) from chunk")
[ "$stored" = 0 ] || die "(a) store holds $stored chunks after a metadata walk"
ok "(a) metadata of every path matches; 0 chunks fetched, 0 stored"
# du at the mount is du at the source: a sparse file's holes take no blocks.
[ "$(stat -c %b "$M/sparse.img")" = "$(stat -c %b "$T/src/sparse.img")" ] ||
	die "(a) sparse.img: $(stat -c %b "$M/sparse.img") blocks at the mount, $(stat -c %b "$T/src/sparse.img") at the source"
ok "(a) sparse.img reports the source's $(stat -c %b "$T/src/sparse.img") blocks"

# (e) change a file at the source after the scan (same size, new bytes).
python3 -c 'import os,sys; f=open(sys.argv[1],"r+b"); f.seek(1000); f.write(os.urandom(64)); f.close()' "$T/src/changed.bin"
if out=$(python3 -c 'import sys; open(sys.argv[1],"rb").read()' "$M/changed.bin" 2>&1); then
	die "(e) changed source file was served"
fi
echo "$out" | grep -q "Input/output error" || die "(e) expected EIO, got: $out"
ok "(e) a source file changed after the scan gives EIO"

# (b) contents of everything else.
python3 "$E2E_LIB/treecmp.py" --content --exclude changed.bin --exclude unread.bin --exclude never/unread.bin \
	"$T/src" "$M" >"$T/cmp-b.txt" || { cat "$T/cmp-b.txt"; die "(b) content differs"; }
ok "(b) every file reads back the source's bytes"

# (c) dedup: every distinct chunk of what was read is fetched once and
# stored once. changed.bin's unchanged chunks were legitimately fetched too,
# and the root's unread.bin by the readahead by directory, so the store
# holds between "everything but changed.bin and the two unread.bin" and
# that plus changed.bin's and the root unread.bin's chunks; never the one
# in never/.
CAT=$(manifests_db tree "$T/manifests.db")
file_ids() { # NAME... -> "select id" over those files at the root
	local q="" n
	for n in "$@"; do q="$q${q:+,}cast('$n' as blob)"; done
	echo "select id from chunk where ino in (select ino from dirent where parent=1 and name in ($q))"
}
never=$(sql "$CAT" "select ino from dirent where parent=1 and name=cast('never' as blob)")
never_ids="select id from chunk where ino in (select ino from dirent where parent=$never)"
want=$(sql "$CAT" "select count(distinct id) from chunk where id not in ($(file_ids changed.bin unread.bin)) and id not in ($never_ids)")
extra=$(sql "$CAT" "select count(distinct id) from chunk where id in ($(file_ids changed.bin unread.bin))")
nn=0
for h in $(sql "$CAT" "select hex(id) from chunk where ino in (select ino from dirent where parent=$never)"); do
	nn=$((nn + 1))
	[ "$(sql "$T/cache/state.db" "select count(*) from chunk where hex(id) = '$h'")" = 0 ] ||
		die "(c) never/unread.bin was fetched (chunk $h is stored)"
done
[ "$nn" -ge 1 ] || die "(c) never/unread.bin has no chunk in the catalog: the check proves nothing"
stored=$(sql "$T/cache/state.db" "select count(*) from chunk")
served=$(repl_stat "$port" tree chunks_served)
log "distinct chunks read: $want (+ up to $extra of changed.bin and unread.bin), stored: $stored, served by the replicator: $served"
[ "$stored" -ge "$want" ] && [ "$stored" -le $((want + extra)) ] ||
	die "(c) store holds $stored chunks, expected $want..$((want + extra)) distinct"
[ "$served" = "$stored" ] || die "(c) replicator served $served chunks for $stored distinct: some were fetched twice"
vols=$(cat "$T"/cache/volumes/*.vol | wc -c)
framed=$(sql "$T/cache/state.db" "select sum(frame_len) from chunk")
[ "$vols" = "$framed" ] || die "(c) volumes hold $vols bytes, index accounts for $framed"
a=$(sql "$CAT" "select group_concat(hex(id)) from (select id from chunk c join dirent d on d.ino=c.ino where d.name=cast('same.bin' as blob) order by off)")
b=$(sql "$CAT" "select group_concat(hex(id)) from (select id from chunk c join dirent d on d.ino=c.ino where d.name=cast('same-copy.bin' as blob) order by off)")
[ -n "$a" ] && [ "$a" = "$b" ] || die "(c) identical files do not share chunk ids"
ok "(c) identical content fetched once and stored once ($stored chunks, $vols bytes at rest)"

# (d) replicator gone; remount on the same cache serves what was read.
stop_repl || die "replicator did not shut down cleanly"
umount_hyd "$M"
nvols=$(ls "$T"/cache/volumes | wc -l)
for f in "$T"/cache/volumes/*.vol; do mv "$f" "${f%.vol}.pack"; done
mv "$T/cache/volumes" "$T/cache/packs"
sqlite3 "$T/cache/state.db" "drop index chunk_used; drop table pin; alter table chunk drop column used; alter table chunk rename column vol to pack; alter table gc_free rename column vol to pack; pragma user_version = 3"
mount_hyd "$URL" "$M" --timeout 3 --no-backfill
[ ! -e "$T/cache/packs" ] && [ "$(ls "$T"/cache/volumes/*.vol | wc -l)" = "$nvols" ] &&
	[ "$(sql "$T/cache/state.db" "pragma user_version")" = 5 ] &&
	[ "$(sql "$T/cache/state.db" "select sum(frame_len) from chunk where vol > 0")" = "$framed" ] ||
	{ ls -la "$T/cache" "$T"/cache/*/; die "(d) the cache from before volumes was not moved"; }
python3 "$E2E_LIB/treecmp.py" --content --exclude changed.bin --exclude unread.bin --exclude never/unread.bin \
	"$T/src" "$M" >"$T/cmp-d.txt" || { cat "$T/cmp-d.txt"; die "(d) cached remount differs"; }
ok "(d) with the replicator stopped, the remount of the cache, moved from packs/ to volumes/ ($nvols files), serves everything read"

# (f) never-fetched chunks with the replicator stopped: EIO, bounded time.
t0=$(date +%s)
if out=$(timeout 60 python3 -c 'import sys; open(sys.argv[1],"rb").read()' "$M/never/unread.bin" 2>&1); then
	die "(f) read of never-fetched data succeeded with the replicator stopped"
fi
dt=$(( $(date +%s) - t0 ))
echo "$out" | grep -q "Input/output error" || die "(f) expected EIO, got: $out"
[ "$dt" -le 20 ] || die "(f) EIO took $dt s (timeout 3 s)"
ok "(f) unfetched read fails with EIO after ${dt}s"

umount_hyd "$M"
ok "hydrator exited after fusermount3 -u"
