#!/usr/bin/env bash
# 405: a cache that fits its disk. A tree three times --cache-max, read in
# full through the mount:
#  (a) every byte read is the source's, the store's volumes (blocks on
#      disk, sampled every 50 ms while the reads run) never hold more than
#      the bound plus one group of puts in flight, and chunks were evicted;
#  (b) backfill fetched the pinned directory (--pin) first, filled the
#      rest only up to 90% of the bound and stopped there (status
#      cache_full), and the pinned files and a file pinned later with
#      `ferry pin` still read with the replicator gone: never evicted;
#  (c) a kill -9 of the hydrator while it evicts leaves a store that
#      `ferry verify` finds whole and a new mount reads exact;
#  (d) two tiers: a small fast tier over a capacity tier (--cold-dir,
#      --cold-max) that holds the tree: after a full read, the whole tree
#      reads again with the replicator gone, exact (chunks demoted, then
#      promoted on the read).
. "$(dirname "$0")/lib/common.sh"
need_fuse

# 48 files of 1 MiB (incompressible) in data/, 3 in keep/: 51 MiB.
python3 - "$T/src" <<'PY'
import os, random, sys
root = sys.argv[1]
r = random.Random(405)
for d, n in (("data", 48), ("keep", 3)):
    os.makedirs(os.path.join(root, d))
    for i in range(n):
        with open(os.path.join(root, d, "f%02d.bin" % i), "wb") as f:
            f.write(r.randbytes(1 << 20))
PY
BOUND=$((16 << 20))
SLACK=$((9 << 20)) # two groups of puts in flight (a quarter of the bound each), a chunk
port=$(free_port)
start_repl "$port" "t=$T/src"
wait_hashed "$port" t 120 || die "the replicator did not finish hashing"
URL="http://127.0.0.1:$port/v1/t"
M="$T/mnt"

# Bad options are refused with one clear line.
rc=0
"$HYD" -c "$T/cx" --cold-dir "$T/cold" --cold-max 64M "$URL" "$M" 2>"$T/err" || rc=$?
[ "$rc" != 0 ] && grep -q -- '--cache-max' "$T/err" || { cat "$T/err"; die "--cold-dir without --cache-max: exit $rc"; }
rc=0
"$HYD" -c "$T/cx" --cache-max 10 "$URL" "$M" 2>"$T/err" || rc=$?
[ "$rc" != 0 ] && grep -q 'at least 1M' "$T/err" || { cat "$T/err"; die "--cache-max 10: exit $rc"; }
ok "refused: --cold-dir without --cache-max, a bound below 1M"

# sample_volumes OUT — the volumes' allocated bytes every 50 ms until
# $T/stop-sampling exists.
sample_volumes() {
	while [ ! -e "$T/stop-sampling" ]; do
		du -s --block-size=1 "$T/cache/volumes" 2>/dev/null | cut -f1 >>"$1"
		sleep 0.05
	done
}

# read_all SRC MNT — every file of the tree through the mount, compared.
read_all() {
	python3 - "$1" "$2" <<'PY'
import os, sys
src, mnt = sys.argv[1], sys.argv[2]
bad = n = 0
for d in sorted(os.listdir(src)):
    for name in sorted(os.listdir(os.path.join(src, d))):
        with open(os.path.join(mnt, d, name), "rb") as f:
            got = f.read()
        with open(os.path.join(src, d, name), "rb") as f:
            bad += got != f.read()
        n += 1
print("files=%d bad=%d" % (n, bad))
sys.exit(1 if bad else 0)
PY
}

mount_hyd "$URL" "$M" --cache-max 16M --pin keep --poll 0
wait_status "$T/cache" cache_full 1 60 || die "(b) backfill did not stop at the bound"
grep -q 'pins done patterns=1 files=3' "$T/cache/hydrator.log" || { tail "$T/cache/hydrator.log"; die "(b) the pins were not fetched"; }
st=$(status_field "$T/cache" state)
[ "$st" = browsing ] || die "(b) state $st after backfill stopped at the bound, not browsing"
used=$(du -s --block-size=1 "$T/cache/volumes" | cut -f1)
[ "$used" -le $((BOUND * 90 / 100 + (1 << 20))) ] || die "(b) backfill filled $used bytes, over 90% of the bound"
"$FERRY" pin "$M" data/f47.bin >"$T/pin.out" || { cat "$T/pin.out"; die "ferry pin failed"; }
grep -q 'pinned data/f47.bin' "$T/pin.out" || die "ferry pin said: $(cat "$T/pin.out")"
wait_status "$T/cache" pin_files 4 30 || die "(b) ferry pin's file was not taken"
rc=0
"$FERRY" pin "$M" /elsewhere/x 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q 'not under the mount' "$T/err" || { cat "$T/err"; die "ferry pin of a path outside the mount: exit $rc"; }
ok "(b) pinned files first; backfill stopped at 90% of the bound ($used bytes); ferry pin took data/f47.bin"

rm -f "$T/stop-sampling" "$T/samples"
sample_volumes "$T/samples" &
SAMPLER=$!
read_all "$T/src" "$M" >"$T/read1.out" || { cat "$T/read1.out"; die "(a) bytes read through the bounded mount differ"; }
touch "$T/stop-sampling"
wait $SAMPLER
max=$(sort -n "$T/samples" | tail -n 1)
n=$(wc -l <"$T/samples")
[ "$n" -ge 3 ] || die "(a) only $n samples of the store's size"
[ "$max" -le $((BOUND + SLACK)) ] || die "(a) the store held $max bytes on disk, over the bound $BOUND + $SLACK"
ev=$(status_field "$T/cache" cache_evicted)
[ "$ev" -gt $((16 << 20)) ] || die "(a) only $ev bytes evicted after reading 3x the bound"
hits=$(status_field "$T/cache" cache_hits)
misses=$(status_field "$T/cache" cache_misses)
[ "$misses" -gt 0 ] && [ "$hits" -gt 0 ] || die "(a) hit/miss counts $hits/$misses"
ok "(a) 51 MiB read exact through a 16 MiB bound; the store peaked at $max bytes on disk ($n samples); $ev bytes evicted"

# (c) kill -9 while evicting: a slower link (--bwlimit), a full read, the
# kill once evictions are under way.
umount_hyd "$M"
mount_hyd "$URL" "$M" --cache-max 16M --pin keep --poll 0 --bwlimit 8M
pid=$(cat "$T/cache/hydrator.pid")
( read_all "$T/src" "$M" >/dev/null 2>&1 ) &
READER=$!
ev=0
for i in $(seq 1 300); do
	ev=$(status_field "$T/cache" cache_evicted 2>/dev/null || echo 0)
	[ "$ev" -gt 0 ] && break
	sleep 0.1
done
[ "$ev" -gt 0 ] || die "(c) no eviction under way to kill"
sleep 0.3
kill -9 "$pid"
e2e_gone "$pid" 10 || die "the hydrator outlived kill -9"
wait $READER 2>/dev/null
fusermount3 -u "$M" 2>/dev/null || umount -l "$M"
"$FERRY" verify "$T/cache" >"$T/verify.out" 2>&1 || { cat "$T/verify.out"; die "(c) ferry verify after kill -9 while evicting"; }
mount_hyd "$URL" "$M" --cache-max 16M --pin keep --poll 0
read_all "$T/src" "$M" >"$T/read2.out" || { cat "$T/read2.out"; die "(c) reads after the kill -9 differ"; }
used=$(du -s --block-size=1 "$T/cache/volumes" | cut -f1)
[ "$used" -le $((BOUND + SLACK)) ] || die "(c) the store holds $used bytes after the resume"
ok "(c) kill -9 mid-eviction: ferry verify finds the store whole; the remount reads exact and stays under the bound"

# (b) the pinned files outlived every eviction: they read with no source.
stop_repl
for f in keep/f00.bin keep/f01.bin keep/f02.bin data/f47.bin; do
	cmp "$T/src/$f" "$M/$f" || die "(b) pinned $f does not read without the source: it was evicted"
done
# (the kernel's page cache of the mount may hold it: dropped first)
python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$M/data/f00.bin"
if cat "$M/data/f00.bin" >/dev/null 2>&1; then
	die "(b) data/f00.bin read without the source: nothing was evicted, the test proves nothing"
fi
umount_hyd "$M"
ok "(b) pinned files (--pin keep, ferry pin data/f47.bin) read with the replicator gone; an unpinned one does not"

# (d) two tiers: 8 MiB fast over a 128 MiB capacity tier.
start_repl "$port" "t=$T/src"
rm -rf "$T/cache"
mount_hyd "$URL" "$M" --cache-max 8M --cold-dir "$T/cold" --cold-max 128M --no-backfill --poll 0
read_all "$T/src" "$M" >"$T/read3.out" || { cat "$T/read3.out"; die "(d) first read over two tiers differs"; }
cold=$(status_field "$T/cache" cold_bytes)
[ "$cold" -gt $((32 << 20)) ] || die "(d) the capacity tier holds only $cold bytes after a 51 MiB read"
stop_repl
read_all "$T/src" "$M" >"$T/read4.out" || { cat "$T/read4.out"; die "(d) the tree does not read back from the two tiers without the source"; }
used=$(du -s --block-size=1 "$T/cache/volumes" | cut -f1)
[ "$used" -le $(((8 << 20) + SLACK)) ] || die "(d) the fast tier holds $used bytes, over its bound"
umount_hyd "$M"
"$FERRY" verify "$T/cold" >"$T/verify2.out" 2>&1 || { cat "$T/verify2.out"; die "(d) ferry verify of the capacity tier"; }
ok "(d) two tiers: $cold bytes demoted; the whole tree read again with no source, exact; the fast tier under its bound"
