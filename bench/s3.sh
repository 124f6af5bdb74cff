#!/usr/bin/env bash
# bench/s3.sh BUILD_DIR — ferry-hydrator --s3-listen against the mount it
# serves (issue 12, docs/performance.md "S3 on the same copy"), on
# loopback, anonymous (a loopback listener needs no keys):
#   get_mib_s    GetObject of a hydrated 1 GiB file with boto3 (the body
#                read in pieces of 1 MiB, bytes discarded)
#   curl_mib_s   the same GetObject with curl -o /dev/null (shown, not a
#                target: curl 7.88 writes its output 8 KiB at a time,
#                about 130,000 write(2) calls per GiB on the client)
#   cat_mib_s    the same file read through the mount (cat to /dev/null)
#                after its pages were evicted from the kernel's cache
#                (dd iflag=nocache), so FUSE serves it again
#   list_s       ListObjectsV2 of a 30,000-entry directory in pages of
#                1,000 (continuation tokens; one client, keep-alive)
#   ls_s         ls of that directory on the mount
# Sizes: S3_MIB (default 1024) for the object, S3_ENTRIES (default
# 30000) for the directory, listed in pages of 1,000.
# RUNS (default 5) runs, each measuring all five once in the same order;
# the table gives the best and the median of each. Both reads come from
# the same warm store: the file is hydrated once before any timing. The
# tree goes to $WORK (default build/bench/work/s3). Needs FUSE (root or
# fuse group). With RES set (make bench), each run is also one record
# (approach ferry_s3) appended to RES.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/s3.sh BUILD_DIR}" && pwd)
WORK=${WORK:-$ROOT/build/bench/work/s3}
RUNS=${RUNS:-5}
MIB=${S3_MIB:-1024}
ENTRIES=${S3_ENTRIES:-30000}
REPL="$B/bin/ferry-replicator"
HYD="$B/bin/ferry-hydrator"
[ -x "$REPL" ] && [ -x "$HYD" ] || { echo "no programs in $B/bin" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
REPL_PID=
MNT="$WORK/mnt"
cleanup() {
	mountpoint -q "$MNT" && fusermount3 -u "$MNT"
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT

mkdir -p "$WORK/src/big" "$WORK/src/wide" "$MNT"
OBJ="$WORK/src/big/$MIB.bin"
[ "$(stat -c %s "$OBJ" 2>/dev/null)" = $((MIB << 20)) ] || head -c $((MIB << 20)) /dev/urandom >"$OBJ"
rm -rf "$WORK/src/wide"
mkdir -p "$WORK/src/wide"
python3 - "$WORK/src/wide" "$ENTRIES" <<'PY'
import os, sys
d = sys.argv[1]
for i in range(int(sys.argv[2])):
    p = os.path.join(d, "f%05d" % i)
    if not os.path.exists(p):
        with open(p, "w") as f:
            f.write("%d\n" % i)
PY
rm -rf "$WORK/state" "$WORK/cache"
rp=$(port)
sp=$(port)
"$REPL" -l "127.0.0.1:$rp" -s "$WORK/state" --hash-before-publish "b=$WORK/src" >"$WORK/repl.log" 2>&1 &
REPL_PID=$!
for _ in $(seq 1 1200); do grep -q ' ready' "$WORK/repl.log" && break; sleep 0.5; done
grep -q ' ready' "$WORK/repl.log" || { tail "$WORK/repl.log" >&2; exit 1; }
"$HYD" -c "$WORK/cache" --no-backfill --s3-listen "127.0.0.1:$sp" \
	"http://127.0.0.1:$rp/v1/b" "$MNT" || exit 1
EP="http://127.0.0.1:$sp"
# hydrate once
cat "$MNT/big/$MIB.bin" >/dev/null
ls "$MNT/wide" >/dev/null

secs() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
# GetObject through boto3, the S3 SDK most readers of datasets use: the
# body read in pieces of 1 MiB, as cat reads the mount in pieces of
# 128 KiB; timed from the request to the last byte.
get_boto3() {
	python3 - "$EP" "big/$MIB.bin" "$((MIB << 20))" <<'PY'
import sys, time
import boto3
from botocore import UNSIGNED
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"}))
t0 = time.time()
body = s3.get_object(Bucket="b", Key=sys.argv[2])["Body"]
n = 0
while True:
    k = len(body.read(1 << 20))
    if not k:
        break
    n += k
dt = time.time() - t0
assert n == int(sys.argv[3]), n
print("%.3f" % dt)
PY
}
list_pages() {
	python3 - "$EP" "$ENTRIES" <<'PY'
import http.client, sys, time, urllib.parse, re
host = urllib.parse.urlparse(sys.argv[1]).netloc
want = int(sys.argv[2])
c = http.client.HTTPConnection(host)
t0, tok, n, pages = time.time(), "", 0, 0
while True:
    q = "list-type=2&prefix=wide/&max-keys=1000"
    if tok:
        q += "&continuation-token=" + urllib.parse.quote(tok)
    c.request("GET", "/b?" + q)
    body = c.getresponse().read().decode()
    n += body.count("<Key>")
    pages += 1
    m = re.search(r"<NextContinuationToken>([^<]*)<", body)
    if not m:
        break
    tok = m.group(1)
assert n == want and pages == (want + 999) // 1000, (n, pages)
print("%.3f" % (time.time() - t0))
PY
}
# Each run measures everything once, in the same order, so the two sides
# of each ratio see the same machine state.
: >"$WORK/runs.txt"
for run in $(seq "$RUNS"); do
	get_t=$(get_boto3) || exit 1
	t0=$(now); curl -sf -o /dev/null "$EP/b/big/$MIB.bin" || exit 1; curl_t=$(secs "$t0" "$(now)")
	dd if="$MNT/big/$MIB.bin" iflag=nocache count=0 status=none
	t0=$(now); cat "$MNT/big/$MIB.bin" >/dev/null; cat_t=$(secs "$t0" "$(now)")
	list_t=$(list_pages) || exit 1
	t0=$(now); ls "$MNT/wide" >/dev/null; ls_t=$(secs "$t0" "$(now)")
	echo "$run $get_t $curl_t $cat_t $list_t $ls_t" >>"$WORK/runs.txt"
	[ -n "${RES:-}" ] && python3 "$ROOT/bench/emit.py" ferry_s3 s3-loopback "$run" \
		object_mib="$MIB" entries="$ENTRIES" \
		get_mib_s="$(python3 -c "print(round($MIB / $get_t))")" \
		curl_mib_s="$(python3 -c "print(round($MIB / $curl_t))")" \
		cat_mib_s="$(python3 -c "print(round($MIB / $cat_t))")" \
		list_s="$list_t" ls_s="$ls_t" >>"$RES"
done
python3 - "$WORK/runs.txt" "$MIB" "$ENTRIES" <<'PY'
import statistics, sys
runs = [list(map(float, l.split()[1:])) for l in open(sys.argv[1]) if l.strip()]
mib, ent = int(sys.argv[2]), int(sys.argv[3])
cols = list(zip(*runs))
get, curl, cat, lst, ls = cols
print("| object MiB | entries | runs | | get MiB/s (boto3) | get MiB/s (curl) | cat MiB/s | get/cat | curl/cat | list s (%d pages) | ls s | list/ls |" % ((ent + 999) // 1000))
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, f in (("best", min), ("median", statistics.median)):
    g, cu, c, l, s = f(get), f(curl), f(cat), f(lst), f(ls)
    print("| %d | %d | %d | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.3f | %.3f | %.2f |" % (
        mib, ent, len(runs), name, mib / g, mib / cu, mib / c, c / g, c / cu, l, s, l / s))
PY
