#!/usr/bin/env bash
# 030: concurrent reads of one chunk cause one fetch; a file of many chunks
# read by several readers at once is fetched once per distinct chunk.
# Backfill off (--no-backfill): only the readers fetch.
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
# Plain `wait` would also wait for the replicator: wait for the readers.
pids=()
for i in $(seq 16); do cat "$T/mnt/one-chunk" >"$T/out.$i" & pids+=($!); done
wait "${pids[@]}"
for i in $(seq 16); do cmp -s "$T/src/one-chunk" "$T/out.$i" || die "reader $i got wrong bytes"; done
MAN=$(manifests_db s "$T/manifests.db")
n1=$(sql "$MAN" "select count(*) from chunk c join dirent d on d.ino = c.ino where d.name = cast('one-chunk' as blob)")
[ "$n1" = 1 ] || die "one-chunk has $n1 chunks in its manifest, expected 1"
served=$(repl_stat "$port" s chunks_served)
[ "$served" = 1 ] || die "16 concurrent readers of one chunk caused $served fetches"
ok "16 concurrent readers of one chunk: 1 fetch"
pids=()
for i in $(seq 6); do cat "$T/mnt/many-chunks" >"$T/big.$i" & pids+=($!); done
wait "${pids[@]}"
for i in $(seq 6); do cmp -s "$T/src/many-chunks" "$T/big.$i" || die "reader $i of many-chunks got wrong bytes"; done
n=$(sql "$MAN" "select count(distinct id) from chunk")
served=$(repl_stat "$port" s chunks_served)
[ "$served" = "$n" ] || die "6 readers of $((n - 1))-chunk file caused $served fetches, expected $n in all"
ok "6 concurrent readers of a multi-chunk file: one fetch per distinct chunk ($served)"
umount_hyd "$T/mnt"
