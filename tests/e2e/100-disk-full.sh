#!/usr/bin/env bash
# 100: a full disk under the cache stops backfill with a clear status and
# error, keeps serving what is stored, and resumes when space returns. The
# cache lives on a small tmpfs the test mounts and then grows. Then `ferry
# sync` onto a full DEST (another small tmpfs): exit 11 naming the cause,
# no temp file left, every file there whole; grown, a rerun completes.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
mk_bulk_tree "$T/src" 40
port=$(free_port)
start_repl "$port" "f=$T/src"
mkdir -p "$T/cache"
mount -t tmpfs -o size=12m tmpfs "$T/cache" || skip "cannot mount a tmpfs here"
MOUNTS+=("$T/mnt")
# The FUSE mount goes first (its hydrator holds files in the tmpfs), then
# the tmpfs, then the usual cleanup.
tmpfs_cleanup() {
	local m pid
	pid=$(cat "$T/cache/hydrator.pid" 2>/dev/null)
	for m in "${MOUNTS[@]}"; do fusermount3 -u "$m" 2>/dev/null; done
	# the hydrator closes its files in the tmpfs as it exits
	[ -z "$pid" ] || wait_exited "$pid" 30
	umount -l "$T/cache" 2>/dev/null
	umount -l "$T/dest" 2>/dev/null
	cleanup
}
trap tmpfs_cleanup EXIT
mount_hyd "http://127.0.0.1:$port/v1/f" "$T/mnt" --jobs 4
wait_status "$T/cache" state stalled 60 || die "a full disk did not stall the backfill"
err=$(status_field "$T/cache" last_error)
echo "$err" | grep -qi "disk full\|no space" || die "stalled, but the error does not say the disk is full: $err"
ok "disk full: status stalled ($err)"
mountpoint -q "$T/mnt" || die "mount went away on a full disk"
# A file whose chunks are all stored still reads correctly.
CAT="$T/cache/catalogs/1.db"
name=$(sqlite3 "$CAT" "attach '$T/cache/state.db' as st;
	select d.name from dirent d join inode i on i.ino=d.ino where i.kind=1 and i.size>0
	and not exists (select 1 from chunk c where c.ino=i.ino and c.id not in (select id from st.chunk))
	and d.parent in (select ino from dirent where parent=1) limit 1")
[ -n "$name" ] || die "nothing fully stored before the disk filled"
src=$(find "$T/src" -name "$name" | head -n 1); rel=${src#"$T/src/"}
cmp "$src" "$T/mnt/$rel" || die "a stored file reads wrong on a full disk"
ok "stored data still served while the disk is full ($rel)"
mount -o remount,size=256m "$T/cache" || die "cannot grow the tmpfs"
wait_status "$T/cache" state complete 120 || die "backfill did not resume when space returned"
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs"; }
ok "space back: backfill resumed by itself and completed; tree identical"
umount_hyd "$T/mnt"

# --- ferry sync onto a full disk
URL="http://127.0.0.1:$port/v1/f"
mkdir -p "$T/dest"
mount -t tmpfs -o size=8m tmpfs "$T/dest" || die "cannot mount a second tmpfs"
rc=0
"$FERRY" sync --cache-dir "$T/scache" "$URL" "$T/dest" >"$T/sync-full.log" 2>&1 || rc=$?
[ "$rc" = 11 ] || { cat "$T/sync-full.log"; die "sync onto a full disk exits $rc, not 11"; }
grep -qi "no space" "$T/sync-full.log" || { cat "$T/sync-full.log"; die "sync onto a full disk does not say why"; }
left=$(find "$T/dest" -name '.ferry-tmp.*' | wc -l)
[ "$left" = 0 ] || die "$left temp file(s) left in DEST after a full disk"
n=0
while IFS= read -r -d '' f; do
	cmp -s "$f" "$T/src/${f#"$T/dest/"}" || die "a file in DEST is not whole after a full disk: ${f#"$T/dest/"}"
	n=$((n + 1))
done < <(find "$T/dest" -type f -print0)
[ "$n" -gt 0 ] || die "nothing written before the disk filled"
ok "sync onto a full disk: exit 11 (no space), no temp file, the $n file(s) there whole"
mount -o remount,size=256m "$T/dest" || die "cannot grow the DEST tmpfs"
"$FERRY" sync --cache-dir "$T/scache" "$URL" "$T/dest" >"$T/sync-again.log" 2>&1 || { cat "$T/sync-again.log"; die "sync after space returned failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/cmp2.txt" || { cat "$T/cmp2.txt"; die "tree differs after the rerun"; }
ok "space back: a rerun of the sync completed; tree identical"
