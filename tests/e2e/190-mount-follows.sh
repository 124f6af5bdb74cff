#!/usr/bin/env bash
# 190: a mount that follows its source. With --poll 1, after a change of
# every kind at the source (content, deletion, new file and directory,
# renamed directory, file replaced by a symlink, new hard link, xattr,
# mode) and a SIGHUP, the mount shows the new tree exactly (content and
# metadata) within seconds, without a remount; the replicator serves
# exactly the chunks that changed (nothing stored is fetched again); a
# reader that opened a file before the switch reads only the bytes of the
# generation it opened (its cached pages dropped, so the reads reach the
# daemon after the switch); `ferry status --json` says generation and
# switched_at. A kill -9 of the hydrator between the new catalog landing
# and the switch leaves a cache that mounts the new generation exactly.
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
command -v setfattr >/dev/null || skip "setfattr missing (Debian package attr)"
S="$T/src"
python3 - "$S" <<'PY'
import os, random, sys
root, r = sys.argv[1], random.Random(19)
for d in ("keep/sub", "olddir/inner", "x"):
    os.makedirs(os.path.join(root, d))
def w(p, n):
    with open(os.path.join(root, p), "wb") as f:
        f.write(r.randbytes(n))
w("keep/same.bin", 400000)
w("keep/sub/small", 2000)
w("change.bin", 600000)
w("gone.txt", 5000)
w("olddir/inner/f", 70000)
w("tolink", 3000)
w("linked", 4000)
w("xa", 1000)
w("mode", 1000)
w("held.bin", 8 << 20)
os.symlink("keep/same.bin", os.path.join(root, "sym"))
PY
setfattr -n user.tag -v one "$S/xa"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/r"
start_repl "$port" "r=$S"
wait_hashed "$port" r 60 || die "generation 1 not hashed"
M1=$(manifests_db r "$T/m1.db")
M="$T/mnt"
mount_hyd "$URL" "$M" --poll 1 --keep-generations 2
wait_status "$T/cache" state complete 60 || die "generation 1 not complete"
hlog="$T/cache/hydrator.log"
# The kernel caches everything of generation 1: entries, attributes, pages,
# and the names that do not exist yet (negative entries).
python3 "$E2E_LIB/treecmp.py" --content "$S" "$M" >"$T/cmp.txt" || { head -20 "$T/cmp.txt"; die "generation 1 differs from the source"; }
for n in new.txt newdir newname x/linked2; do
	[ ! -e "$M/$n" ] || die "$n exists before the change"
done

# A reader opens held.bin and reads its first MiB now; after the switch it
# drops its cached pages and reads the rest, which must be generation 1's.
cp "$S/held.bin" "$T/held.old"
python3 - "$M/held.bin" "$T/ready" "$T/go" "$T/reader.out" <<'PY' &
import hashlib, os, sys, time
path, ready, go, out = sys.argv[1:5]
fd = os.open(path, os.O_RDONLY)
h = hashlib.sha256()
h.update(os.pread(fd, 1 << 20, 0))
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.05)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
off = 1 << 20
while True:
    b = os.pread(fd, 1 << 20, off)
    if not b:
        break
    h.update(b)
    off += len(b)
with open(out, "w") as f:
    f.write("%s %d\n" % (h.hexdigest(), off))
PY
READER=$!
# A reader left behind would hold the mount (and the test's output) open.
trap 'kill "$READER" 2>/dev/null; cleanup' EXIT
for i in $(seq 1 300); do [ -e "$T/ready" ] && break; sleep 0.1; done
[ -e "$T/ready" ] || die "the reader did not open held.bin"

# Every kind of change.
head -c 600000 /dev/urandom >"$S/change.bin"
head -c $((8 << 20)) /dev/urandom >"$S/held.bin"
rm "$S/gone.txt"
printf 'new file\n' >"$S/new.txt"
mkdir "$S/newdir" && printf 'in a new dir\n' >"$S/newdir/n2"
mv "$S/olddir" "$S/newname"
rm "$S/tolink" && ln -s keep/sub/small "$S/tolink"
ln "$S/linked" "$S/x/linked2"
setfattr -n user.tag -v two "$S/xa"
chmod 600 "$S/mode"
served0=$(repl_stat "$port" r chunks_served)
kill -HUP "$REPL_PID"
for i in $(seq 1 300); do grep -q 'switched generation from=1 to=2' "$hlog" && break; sleep 0.1; done
grep -q 'switched generation from=1 to=2' "$hlog" || { tail "$hlog"; die "the mount did not switch to generation 2 within 30 s"; }
python3 "$E2E_LIB/treecmp.py" --content "$S" "$M" >"$T/cmp.txt" || { head -20 "$T/cmp.txt"; die "the mount after the switch differs from the source"; }
ok "--poll 1: the mount shows generation 2 exactly after the change (no remount)"

[ "$(status_field "$T/cache" generation)" = 2 ] || die "status generation is not 2"
sw=$(status_field "$T/cache" switched_at)
echo "$sw" | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$' || die "status switched_at is not a UTC time: $sw"
ok "ferry status --json: generation 2, switched_at $sw"

touch "$T/go"
wait "$READER" || die "the reader across the switch failed"
want=$(sha256sum "$T/held.old" | cut -d' ' -f1)
read -r got len <"$T/reader.out"
[ "$len" = $((8 << 20)) ] || die "the reader across the switch read $len bytes"
[ "$got" = "$want" ] || die "the reader that opened held.bin before the switch read bytes that are not generation 1's"
cmp -s "$S/held.bin" "$M/held.bin" || die "a new open of held.bin does not read generation 2"
ok "a file opened before the switch reads generation 1's bytes to its end; a new open reads generation 2's"

# Chunks: once generation 2 is complete, the replicator served exactly the
# chunks that generation 1 did not have.
wait_hashed "$port" r 60 || die "generation 2 not hashed"
wait_status "$T/cache" state complete 60 || die "generation 2 not complete"
M2=$(manifests_db r "$T/m2.db")
changed=$(sqlite3 "$M2" "attach '$M1' as a; select count(distinct id) from chunk where id not in (select id from a.chunk)")
served=$(($(repl_stat "$port" r chunks_served) - served0))
[ "$changed" -gt 0 ] || die "no changed chunks counted"
[ "$served" = "$changed" ] || die "the replicator served $served chunks for the update; $changed changed"
ok "chunks served for the update: $served = chunks that changed"

# kill -9 between the new catalog landing and the switch.
umount_hyd "$M"
printf 'third generation\n' >"$S/keep/sub/small"
printf 'also new\n' >"$S/newdir/n3"
FERRY_TEST_SWITCH_DELAY_MS=20000 mount_hyd "$URL" "$M" --poll 1
pid=$(cat "$T/cache/hydrator.pid")
kill -HUP "$REPL_PID"
for i in $(seq 1 300); do grep -q 'switching generation from=2 to=3 (after a test delay' "$hlog" && break; sleep 0.1; done
grep -q 'switching generation from=2 to=3 (after a test delay' "$hlog" || { tail "$hlog"; die "no switch to 3 began"; }
kill -9 "$pid"
for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
umount -l "$M" 2>/dev/null || fusermount3 -u "$M" 2>/dev/null
[ -e "$T/cache/catalogs/3.db" ] || die "generation 3's catalog was not in the cache at the kill"
mount_hyd "$URL" "$M" --poll 0
python3 "$E2E_LIB/treecmp.py" --content "$S" "$M" >"$T/cmp.txt" || { head -20 "$T/cmp.txt"; die "after a kill -9 mid-switch the remount differs from the source"; }
[ "$(status_field "$T/cache" generation)" = 3 ] || die "the remount does not serve generation 3"
"$FERRY" verify -q "$T/cache" || die "the store does not verify after the kill"
ok "kill -9 mid-switch: the remount serves generation 3 exactly, the store verifies"
umount_hyd "$M"
stop_repl || die "the replicator did not exit cleanly"
