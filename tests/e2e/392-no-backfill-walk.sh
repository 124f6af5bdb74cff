#!/usr/bin/env bash
# 392: a mount with --no-backfill, across a round trip (bench/rttproxy,
# 10 ms each way, on loopback), walked as an import walk walks a package
# tree: list a directory, read each of its files in name order, next
# directory. Nothing but reads brings data there, yet a walk must not
# pay a round trip per file:
#  (a) every byte read is the source's;
#  (b) the walked files' chunks came in batches: far fewer single-chunk
#      GETs than files walked, and at least one batch (the first read of
#      a small file asks for the directory's next small files at once);
#  (c) their manifests came by segment (the source had hashed them: one
#      request for 1,024 inos), not one request per file;
#  (d) nothing else moved: the directories not walked and a big file are
#      not fetched (the wire carried less than the walked bytes plus one
#      unwalked directory), and with the replicator stopped an unwalked
#      file does not read;
#  (e) a job that reads one file of a directory moves that file alone
#      (the directory's rest is asked for from its second read on).
. "$(dirname "$0")/lib/common.sh"
need_fuse
PROXY="$FERRY_BIN/../bench/rttproxy"
[ -x "$PROXY" ] || die "the round-trip injector is not built: $PROXY (make tests builds it)"

# 10 directories of 30 files of 16-48 KiB (incompressible), a 16 MiB file.
python3 - "$T/src" <<'PY'
import os, random, sys
root = sys.argv[1]
r = random.Random(392)
for d in range(10):
    p = os.path.join(root, "pkg", "mod%02d" % d)
    os.makedirs(p)
    for i in range(30):
        with open(os.path.join(p, "m%02d.py" % i), "wb") as f:
            f.write(r.randbytes(r.randint(16 << 10, 48 << 10)))
with open(os.path.join(root, "big.bin"), "wb") as f:
    f.write(r.randbytes(16 << 20))
PY
port=$(free_port)
start_repl "$port" "t=$T/src"
wait_hashed "$port" t 120 || die "the replicator did not finish hashing"
pport=$(free_port)
"$PROXY" "127.0.0.1:$pport" "127.0.0.1:$port" 10 >"$T/proxy.log" 2>&1 &
PROXY_PID=$!
for i in $(seq 1 100); do grep -q ready "$T/proxy.log" && break; sleep 0.05; done
grep -q ready "$T/proxy.log" || { cat "$T/proxy.log"; die "rttproxy not ready"; }
trap 'kill $PROXY_PID 2>/dev/null; wait $PROXY_PID 2>/dev/null; cleanup' EXIT

mount_hyd "http://127.0.0.1:$pport/v1/t" "$T/mnt" --no-backfill --timeout 5

# The walk: the first five directories, as an import walk goes.
python3 - "$T/mnt/pkg" "$T/src/pkg" >"$T/walk.out" <<'PY' || { cat "$T/walk.out"; die "(a) the walk read wrong bytes"; }
import os, sys
mnt, src = sys.argv[1], sys.argv[2]
n = nbytes = bad = 0
for d in sorted(os.listdir(mnt))[:5]:
    for name in sorted(os.listdir(os.path.join(mnt, d))):
        with open(os.path.join(mnt, d, name), "rb") as f:
            got = f.read()
        with open(os.path.join(src, d, name), "rb") as f:
            bad += got != f.read()
        n += 1
        nbytes += len(got)
print("files=%d bytes=%d bad=%d" % (n, nbytes, bad))
sys.exit(1 if bad or n != 150 else 0)
PY
walked=$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' "$T/walk.out")
ok "(a) 150 files in 5 directories read back exact ($walked bytes)"

metric() { # ROUTE: the replicator's answers to that route, summed
	curl -sf "http://127.0.0.1:$port/metrics" |
		awk -v r="route=\"$1\"" 'index($0, "ferry_replicator_requests_total{") == 1 && index($0, r) { s += $2 } END { print s + 0 }'
}
gets=$(metric chunk)
batches=$(metric chunks)
[ "$batches" -ge 1 ] || die "(b) no batch was asked for: the walk fetched file by file ($gets GETs)"
[ "$gets" -lt 50 ] || die "(b) $gets single-chunk GETs for 150 files: a round trip per file"
ok "(b) chunks: $batches batches, $gets single GETs for 150 files"

segs=$(metric manifests)
files=$(metric manifest)
[ "$segs" -ge 1 ] || die "(c) no manifest segment was asked for"
[ "$files" -lt 20 ] || die "(c) $files manifests asked for one file at a time (of 150 files walked)"
ok "(c) manifests: $segs segment requests, $files single-file ones"

"$FERRY" status "$T/mnt" --json >"$T/status.json" || die "ferry status failed"
wire=$(json_get "$T/status.json" wire_bytes)
dir5=$(du -sb --apparent-size "$T/src/pkg/mod05" | cut -f1)
[ "$wire" -ge "$walked" ] || die "(d) the wire carried $wire bytes, less than the $walked read"
[ "$wire" -lt $((walked + dir5)) ] ||
	die "(d) the wire carried $wire bytes for $walked read: more than the walk's directories were fetched"
# (e) one file read in a directory: that file alone moves
ls -l "$T/mnt/pkg/mod08" >/dev/null
cmp -s "$T/mnt/pkg/mod08/m04.py" "$T/src/pkg/mod08/m04.py" || die "(e) mod08/m04.py read wrong"
sleep 1
"$FERRY" status "$T/mnt" --json >"$T/status2.json" || die "ferry status failed"
wire2=$(json_get "$T/status2.json" wire_bytes)
one=$(stat -c %s "$T/src/pkg/mod08/m04.py")
[ $((wire2 - wire)) -ge "$one" ] && [ $((wire2 - wire)) -lt $((one + 65536)) ] ||
	die "(e) reading one file of mod08 moved $((wire2 - wire)) bytes for its $one"
ok "(e) one file read in a directory: $((wire2 - wire)) bytes moved for its $one"
stop_repl
if timeout 20 cat "$T/mnt/pkg/mod07/m03.py" >/dev/null 2>&1; then
	die "(d) an unwalked file read back with the replicator stopped: it was fetched"
fi
ok "(d) $wire bytes on the wire for $walked read; unwalked files and the big file stayed at the source"
umount_hyd "$T/mnt"
