#!/usr/bin/env bash
# 120: namespace first. With hashing slowed by the test hook, the
# replicator publishes after a walk that reads nothing; the mount is
# browsable and metadata-exact (ls -lR, find, stat, du) while the source
# files are still waiting to be hashed; a read of the file last in walk
# order completes while others are still queued; a file rewritten before
# its turn is reported by path and reads of it fail with EIO, never mixed
# bytes; `ferry status` (text and --json) shows the source's hashing;
# backfill then completes and the tree is byte- and metadata-exact.
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
S="$T/src"
mkdir -p "$S/a" "$S/b" "$S/zz"
for i in 1 2 3 4 5 6 7 8; do head -c $((2 << 20)) /dev/urandom >"$S/a/big$i.bin"; done
for i in $(seq 1 30); do head -c $((i * 37)) /dev/urandom >"$S/b/small$i"; done
head -c $((6 << 20)) /dev/urandom >"$S/b/victim.bin"
head -c $((24 << 20)) /dev/urandom >"$S/zz/last.bin"
ln -s ../a/big1.bin "$S/b/link"
ln "$S/b/small1" "$S/b/hard"
setfattr -n user.k -v v "$S/a/big2.bin" 2>/dev/null || true
: >"$S/empty"
touch -d '2001-02-03 04:05:06.123456789' "$S/a/big3.bin"
files=$(find "$S" -type f -size +0 -links 1 | wc -l)
files=$((files + 1)) # small1 and hard are one inode
port=$(free_port)
# one hashing thread, 1.5 s before each file: 40 files take a minute
FERRY_HASH_DELAY_MS=1500 REPL_OPTS="--scan-threads 1" start_repl "$port" "n=$S"
ready=$(grep ' ready' "$T/repl.log" | tail -n 1)
echo "$ready" | grep -q "bytes_read=0 pending=$files " || die "the walk read data or missed files: $ready (want pending=$files)"
ok "published after the walk: nothing read, $files files pending"
URL="http://127.0.0.1:$port/v1/n"
M="$T/mnt"
mount_hyd "$URL" "$M" --jobs 2

# Browse at once: metadata exact while nearly nothing is hashed.
ls -lR "$M" >/dev/null || die "ls -lR failed"
[ "$(find "$M" | wc -l)" -eq "$(find "$S" | wc -l)" ] || die "find counts differ"
[ "$(stat -c '%s %Y %a' "$M/a/big3.bin")" = "$(stat -c '%s %Y %a' "$S/a/big3.bin")" ] || die "stat differs"
du -s "$M" >/dev/null || die "du failed"
python3 "$E2E_LIB/treecmp.py" "$S" "$M" >"$T/cmp0.txt" || { cat "$T/cmp0.txt"; die "metadata differs while hashing"; }
done0=$(hash_stat "$port" n files_done)
[ "$done0" -le $((files / 4)) ] || die "browse waited for hashing: $done0 of $files hashed"
ok "browsable and metadata-exact with $done0 of $files files hashed"

# ferry status shows the source's hashing next to hydration.
source_status() { # STATE: the text line and the JSON object agree with it
	"$FERRY" status "$M" >"$T/st.txt" || die "ferry status failed"
	grep -Eq "^source +$1: [0-9]+ of $files files hashed" "$T/st.txt" ||
		{ cat "$T/st.txt"; die "ferry status has no source line saying $1"; }
	"$FERRY" status "$M" --json >"$T/st.json" || die "ferry status --json failed"
	python3 - "$T/st.json" "$files" "$1" <<'PY' || die "source_hashing in ferry status --json is wrong: $(cat "$T/st.json")"
import json, sys
h = json.load(open(sys.argv[1]))["source_hashing"]
files, state = int(sys.argv[2]), sys.argv[3]
assert h["state"] == state and h["files"] == files, h
if state == "hashing":
    assert 0 <= h["files_done"] < files and h["bytes_done"] < h["bytes"], h
else:
    assert h["files_done"] == files and h["bytes_done"] == h["bytes"], h
    assert h["changed"] == 1, h
assert isinstance(h["rate"], float) and isinstance(h["eta_s"], float), h
PY
}
source_status hashing
ok "ferry status: the source is hashing, text and JSON"

# The file last in walk order, read now: it jumps the queue.
t0=$(date +%s.%N)
cmp "$S/zz/last.bin" "$M/zz/last.bin" || die "last.bin differs"
dt=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 2))")
done1=$(hash_stat "$port" n files_done)
[ "$done1" -lt "$files" ] || die "the read waited for every file to be hashed"
ok "zz/last.bin read exactly in ${dt}s with $done1 of $files files hashed"

# Rewritten before the hasher reaches it: reported, then EIO.
# in place, so the directory itself stays as the walk saw it
head -c $((1 << 20)) /dev/urandom | dd of="$S/b/victim.bin" conv=notrunc status=none
if out=$(timeout 120 cat "$M/b/victim.bin" 2>&1 >/dev/null); then
	die "a read of the rewritten file succeeded"
fi
echo "$out" | grep -q "Input/output error" || die "expected EIO, got: $out"
grep -q 'no manifest for a file.*path=".*/b/victim.bin"' "$T/repl.log" || die "the replicator did not name the changed file"
ok "rewritten file: replicator named it, the read failed with EIO"

wait_hashed "$port" n 180 || die "hashing did not finish"
[ "$(hash_stat "$port" n changed)" = 1 ] || die "changed count is not 1"
grep -q ' namespace hashed .*changed=1 ' "$T/repl.log" || die "no hashed line"
source_status done
ok "ferry status: the source is done hashing, one file changed"
wait_status "$T/cache" state complete 180 || die "backfill did not complete"
python3 "$E2E_LIB/treecmp.py" --content --exclude b/victim.bin "$S" "$M" >"$T/cmp1.txt" ||
	{ cat "$T/cmp1.txt"; die "tree differs after backfill"; }
ok "backfill complete: every other file byte- and metadata-exact ($(tail -n 1 "$T/cmp1.txt"))"
umount_hyd "$M"
