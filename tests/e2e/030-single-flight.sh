#!/usr/bin/env bash
# 030: concurrent reads of one chunk cause one fetch; a file of many chunks
# read by several readers at once is fetched once per distinct chunk.
# Backfill off (--no-backfill): only the readers fetch.
#
# The readers open with O_DIRECT and start together (a barrier), so the
# kernel's page cache cannot merge them: each read is its own FUSE request
# and reaches the hydrator, whose single-flight table is what has to join
# them. (Plain cached reads of one page wait on the page lock in the
# kernel, and "1 fetch" would hold even with ferry's single flight broken.)
# Checked that it can fail: with hyd_flights_join never finding a flight,
# 16 readers of one chunk cause about 12 fetches and this test fails.
. "$(dirname "$0")/lib/common.sh"
need_fuse
mkdir -p "$T/src"
# Smaller than the chunker's 16 KiB minimum, so exactly one chunk (a
# random 50 KB file is cut in two about one time in eight).
head -c 12000 /dev/urandom >"$T/src/one-chunk"
head -c 6000000 /dev/urandom >"$T/src/many-chunks"
port=$(free_port)
start_repl "$port" "s=$T/src"
mount_hyd "http://127.0.0.1:$port/v1/s" "$T/mnt" --no-backfill

# direct_readers FILE N BLOCK — N threads open FILE with O_DIRECT, wait for
# each other, then read it whole in BLOCK-byte preads (the same offsets in
# the same order); each must get the bytes of the source file.
direct_readers() {
	python3 - "$1" "$2" "$3" "$T/src/$(basename "$1")" <<'PY'
import mmap, os, sys, threading
path, n, block, src = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
want = open(src, "rb").read()
bar = threading.Barrier(n)
got, errs = [None] * n, []
def reader(i):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT likes
        parts, off = [], 0
        bar.wait(timeout=60)
        while True:
            k = os.preadv(fd, [buf], off)
            if k == 0:
                break
            parts.append(bytes(buf[:k]))
            off += k
        os.close(fd)
        got[i] = b"".join(parts)
    except Exception as e:
        errs.append("reader %d: %r" % (i, e))
ts = [threading.Thread(target=reader, args=(i,)) for i in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join()
assert not errs, errs
for i, g in enumerate(got):
    assert g == want, "reader %d got %d bytes, not the source's %d" % (i, len(g), len(want))
PY
}

direct_readers "$T/mnt/one-chunk" 16 16384 || die "16 O_DIRECT readers of one-chunk failed or got wrong bytes"
MAN=$(manifests_db s "$T/manifests.db")
n1=$(sql "$MAN" "select count(*) from chunk c join dirent d on d.ino = c.ino where d.name = cast('one-chunk' as blob)")
[ "$n1" = 1 ] || die "one-chunk has $n1 chunks in its manifest, expected 1"
served=$(repl_stat "$port" s chunks_served)
[ "$served" = 1 ] || die "16 concurrent O_DIRECT readers of one chunk caused $served fetches"
ok "16 concurrent O_DIRECT readers of one chunk: 1 fetch"

direct_readers "$T/mnt/many-chunks" 6 1048576 || die "6 O_DIRECT readers of many-chunks failed or got wrong bytes"
n=$(sql "$MAN" "select count(distinct id) from chunk")
served=$(repl_stat "$port" s chunks_served)
[ "$served" = "$n" ] || die "6 readers of $((n - 1))-chunk file caused $served fetches, expected $n in all"
ok "6 concurrent O_DIRECT readers of a multi-chunk file: one fetch per distinct chunk ($served)"
umount_hyd "$T/mnt"
