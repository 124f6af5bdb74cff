#!/usr/bin/env bash
# bench/s3.sh BUILD_DIR — ferry-hydrator --s3-listen against the mount it
# serves (issue 12, docs/performance.md "S3 on the same copy"), on
# loopback, anonymous (a loopback listener needs no keys):
#   get_mib_s    GetObject of a hydrated 1 GiB file with curl to /dev/null
#   cat_mib_s    the same file read through the mount (cat to /dev/null)
#                after its pages were evicted from the kernel's cache
#                (dd iflag=nocache), so FUSE serves it again
#   list_s       ListObjectsV2 of a 30,000-entry directory in pages of
#                1,000 (continuation tokens; one client, keep-alive)
#   ls_s         ls of that directory on the mount
# Sizes: S3_MIB (default 1024) for the object, S3_ENTRIES (default
# 30000) for the directory, listed in pages of 1,000.
# Each is the best of RUNS (default 3). Both reads come from the same
# warm store: the file is hydrated once before any timing. The tree goes
# to $WORK (default build/bench/work/s3). Needs FUSE (root or fuse group).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/s3.sh BUILD_DIR}" && pwd)
WORK=${WORK:-$ROOT/build/bench/work/s3}
RUNS=${RUNS:-3}
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

best() { sort -n | head -n 1; }
secs() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
get_t=$(for _ in $(seq "$RUNS"); do
	t0=$(now); curl -sf -o /dev/null "$EP/b/big/$MIB.bin" || exit 1; secs "$t0" "$(now)"
done | best)
cat_t=$(for _ in $(seq "$RUNS"); do
	dd if="$MNT/big/$MIB.bin" iflag=nocache count=0 status=none
	t0=$(now); cat "$MNT/big/$MIB.bin" >/dev/null; secs "$t0" "$(now)"
done | best)
list_t=$(for _ in $(seq "$RUNS"); do
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
done | best)
ls_t=$(for _ in $(seq "$RUNS"); do
	t0=$(now); ls "$MNT/wide" >/dev/null; secs "$t0" "$(now)"
done | best)
python3 - "$get_t" "$cat_t" "$list_t" "$ls_t" "$MIB" "$ENTRIES" <<'PY'
import sys
g, c, l, s = map(float, sys.argv[1:5])
mib, ent = int(sys.argv[5]), int(sys.argv[6])
print("| object MiB | entries | get_mib_s | cat_mib_s | get/cat | list_s (%d pages) | ls_s | list/ls |" % ((ent + 999) // 1000))
print("|---|---|---|---|---|---|---|---|")
print("| %d | %d | %.0f | %.0f | %.2f | %.3f | %.3f | %.2f |" % (mib, ent, mib / g, mib / c, c / g, l, s, l / s))
PY
