#!/usr/bin/env bash
# 402: local data as a seed. A new region that holds last month's copy
# moves only what changed since.
#  (a) ferry sync --seed OLD: DEST is the source exactly, and only the
#      chunks that changed are fetched (an insertion that shifts a file,
#      an in-place change, an append, a new file); the rest comes from
#      OLD, verified by SHA-256: unchanged files copied, the changed
#      ones' other chunks found by offset or by cutting;
#  (b) DEST's own older files are seeds too (rsync's basis files): a sync
#      into a DEST that holds the old copy, with an empty cache, fetches
#      the same few chunks;
#  (c) --link-dest, --copy-dest, --compare-dest give the trees rsync -c
#      gives with them (names, sizes, link counts, modes, contents): an
#      OLD file with the right size and mtime but other bytes is never
#      linked, copied or left out, however the quick check looks;
#  (d) mixing the -dest kinds is refused naming them (exit 1);
#  (e) ferry-hydrator --seed OLD: the mount seeds before backfill, which
#      fetches only the changed chunks; every file reads back exact.
. "$(dirname "$0")/lib/common.sh"
[ -x "$FERRY" ] || die "ferry not built"
command -v rsync >/dev/null || skip "rsync not installed"
export XDG_CACHE_HOME="$T/xdg" # the replicator's state for this source

python3 - "$T/old" <<'EOF'
import os, random, sys
random.seed(402)
root = sys.argv[1]
for d in range(3):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
    for i in range(8):
        with open(f"{root}/d{d}/f{i}.bin", "wb") as f:
            f.write(random.randbytes(256 * 1024 + i * 1000))
EOF
cp -a "$T/old" "$T/src"
python3 - "$T/src" <<'EOF'
import os, random, sys
random.seed(4021)
root = sys.argv[1]
p = f"{root}/d0/f0.bin"; b = open(p, "rb").read()
open(p, "wb").write(b"inserted at the start " * 50 + b)       # shifts
p = f"{root}/d1/f1.bin"; b = bytearray(open(p, "rb").read())
b[100000:100016] = b"changed in place"; open(p, "wb").write(b)  # in place
with open(f"{root}/d2/f2.bin", "ab") as f:
    f.write(random.randbytes(50000))                          # appended
open(f"{root}/d2/new.bin", "wb").write(random.randbytes(100000))  # new
os.remove(f"{root}/d1/f7.bin")
EOF
tree_of() { (cd "$1" && find . -printf '%y %m %s %T@ %n %P\n' | sort && find . -type f -exec sha256sum {} + | sort); }
# (c) compares what the -dest kinds decide: files, and directories by name
files_of() { (cd "$1" && find . \( -type f -printf '%y %m %s %T@ %n %P\n' \) -o -printf '%y %P\n' | sort && find . -type f -exec sha256sum {} + | sort); }
fetched() { sed -n 's/^Chunks fetched: //p' "$1"; }
seeded() { sed -n 's/^Chunks seeded: \([0-9]*\).*/\1/p' "$1"; }

# The chunks a sync with nothing local fetches: the yardstick.
"$FERRY" sync --stats --cache-dir "$T/c0" "$T/src/" "$T/d0" >"$T/s0.out" 2>&1 ||
	{ cat "$T/s0.out"; die "the plain sync failed"; }
all=$(fetched "$T/s0.out")
[ "${all:-0}" -gt 60 ] || { cat "$T/s0.out"; die "the plain sync fetched ${all:-no} chunks: the tree is too small to tell"; }

# (a) --seed OLD
"$FERRY" sync --stats --cache-dir "$T/c1" --seed "$T/old" "$T/src/" "$T/d1" >"$T/s1.out" 2>&1 ||
	{ cat "$T/s1.out"; die "(a) ferry sync --seed failed"; }
[ "$(tree_of "$T/src")" = "$(tree_of "$T/d1")" ] || die "(a) DEST is not the source"
n=$(fetched "$T/s1.out")
s=$(seeded "$T/s1.out")
cp_=$(sed -n 's/^Files linked, copied, compared from -dest dirs: [0-9]*, \([0-9]*\),.*/\1/p' "$T/s1.out")
# one shifted head, one in-place chunk, the append's tail (its last chunk
# or two), the new file's 100 KB: a dozen at most, of about 100. The 20
# unchanged files are copied from OLD (size and mtime match; every chunk
# verified as it is copied); the changed ones give their other chunks.
[ "${n:-999}" -le 12 ] || { cat "$T/s1.out"; die "(a) --seed fetched $n chunks of $all: not only what changed"; }
[ "${cp_:-0}" = 20 ] || { cat "$T/s1.out"; die "(a) --seed copied ${cp_:-no} unchanged files from OLD, not 20"; }
[ "${s:-0}" -ge 6 ] || { cat "$T/s1.out"; die "(a) --seed took only ${s:-0} chunks from the changed files' old copies"; }
ok "(a) --seed: exact, fetched $n of $all chunks, copied 20 unchanged files, seeded $s chunks of the changed ones"

# (b) DEST's own old files
cp -a "$T/old" "$T/d2"
"$FERRY" sync --stats --cache-dir "$T/c2" "$T/src/" "$T/d2" >"$T/s2.out" 2>&1 ||
	{ cat "$T/s2.out"; die "(b) the sync into the old copy failed"; }
[ "$(tree_of "$T/src" | grep -v 'd1/f7.bin$')" = "$(tree_of "$T/d2" | grep -v 'd1/f7.bin$')" ] ||
	die "(b) DEST is not the source (f7 aside, which stays without --delete)"
n=$(fetched "$T/s2.out")
[ "${n:-999}" -le 12 ] || { cat "$T/s2.out"; die "(b) a DEST holding the old copy still fetched $n of $all chunks"; }
ok "(b) DEST's old files seed: fetched $n of $all chunks"

# (c) the -dest kinds against rsync -c. OLD2 is the source but for one
# file with the same size and mtime and other bytes, and one mode.
cp -a "$T/src" "$T/old2"
python3 - "$T/old2/d0/f3.bin" <<'EOF'
import os, sys
p = sys.argv[1]; st = os.stat(p); b = bytearray(open(p, "rb").read())
b[5] ^= 0xff; open(p, "wb").write(b); os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
EOF
chmod 600 "$T/old2/d1/f2.bin"
for kind in link copy compare; do
	"$FERRY" sync --stats --cache-dir "$T/c-$kind" --$kind-dest ../old2 "$T/src/" "$T/f-$kind" >"$T/f-$kind.out" 2>&1 ||
		{ cat "$T/f-$kind.out"; die "(c) --$kind-dest failed"; }
	rsync -a -c --$kind-dest=../old2 "$T/src/" "$T/r-$kind/"
	[ "$(files_of "$T/f-$kind")" = "$(files_of "$T/r-$kind")" ] ||
		{ diff <(files_of "$T/f-$kind") <(files_of "$T/r-$kind") | head; die "(c) --$kind-dest: not rsync -c's tree"; }
	n=$(fetched "$T/f-$kind.out")
	[ "${n:-999}" -le 8 ] || { cat "$T/f-$kind.out"; die "(c) --$kind-dest fetched $n chunks: more than the one bad file"; }
done
[ "$(stat -c %i "$T/f-link/d2/f5.bin")" = "$(stat -c %i "$T/old2/d2/f5.bin")" ] || die "(c) --link-dest did not link an unchanged file"
[ "$(stat -c %i "$T/f-link/d0/f3.bin")" != "$(stat -c %i "$T/old2/d0/f3.bin")" ] || die "(c) --link-dest linked a file whose bytes differ"
[ "$(stat -c %i "$T/f-link/d1/f2.bin")" != "$(stat -c %i "$T/old2/d1/f2.bin")" ] || die "(c) --link-dest linked a file whose mode differs"
cmp -s "$T/f-link/d0/f3.bin" "$T/src/d0/f3.bin" || die "(c) the differing file is not the source's"
[ "$(stat -c %h "$T/f-copy/d2/f5.bin")" = 1 ] || die "(c) --copy-dest linked instead of copying"
[ ! -e "$T/f-compare/d2/f5.bin" ] && [ -e "$T/f-compare/d0/f3.bin" ] || die "(c) --compare-dest: wrong files left out"
ok "(c) --link-dest, --copy-dest, --compare-dest: rsync -c's trees; a same-size, same-mtime impostor is fetched"

# (d)
"$FERRY" sync --link-dest "$T/old" --copy-dest "$T/old" "$T/src/" "$T/dx" >"$T/mix.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q -- '--copy-dest' "$T/mix.out" && grep -q -- '--link-dest' "$T/mix.out" ||
	{ cat "$T/mix.out"; die "(d) mixing --link-dest and --copy-dest: exit $rc, not 1 naming both"; }
[ ! -e "$T/dx" ] || die "(d) a refused run made DEST"
ok "(d) mixed -dest kinds refused, named"

# (e) the mount
need_fuse
port=$(free_port)
start_repl "$port" seed="$T/src"
wait_hashed "$port" seed 60 || die "(e) the source was not hashed"
mount_hyd "http://127.0.0.1:$port/v1/seed" "$T/mnt" --seed "$T/old"
wait_status "$T/cache" state complete 120 || die "(e) backfill did not complete"
grep -q 'seeded files_read=' "$T/cache/hydrator.log" || { tail "$T/cache/hydrator.log"; die "(e) no seeding logged"; }
s=$(sed -n 's/.*seeded files_read=[0-9]* bytes_read=[0-9]* chunks=\([0-9]*\).*/\1/p' "$T/cache/hydrator.log" | tail -1)
wire=$(status_field "$T/cache" wire_bytes)
total=$(du -sb --apparent-size "$T/src" | cut -f1)
[ "${s:-0}" -ge $((all - 12)) ] || { tail "$T/cache/hydrator.log"; die "(e) the mount seeded ${s:-0} chunks of $all"; }
[ "$wire" -lt $((total / 5)) ] || die "(e) the mount fetched $wire wire bytes of $total: the seed did not spare them"
for f in $(cd "$T/src" && find . -type f); do
	cmp -s "$T/src/$f" "$T/mnt/$f" || die "(e) $f reads back wrong through the mount"
done
umount_hyd "$T/mnt"
stop_repl
ok "(e) mount --seed: seeded $s chunks, $wire wire bytes of $total, every file exact"
