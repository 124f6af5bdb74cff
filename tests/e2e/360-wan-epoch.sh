#!/usr/bin/env bash
# 360: a data-loader epoch across a WAN, on a cold mount, backfill on.
# Two network namespaces joined by a veth shaped with tbf (1 Gbit/s), the
# replicator in one, and in the other the round-trip injector
# (bench/rttproxy, 25 ms each way: a 50 ms round trip) in front of it, the
# hydrator (--jobs 16: backfill holds 16 transfers) and 16 reader threads
# that read every file of a data set of small files in a random order,
# each whole, as a training job's data loader does, while the mount is
# still cold and backfill is running. The source is published and fully
# hashed first (its manifests come by segment, in bulk). Checks:
#  (a) no read fails (a job that gets EIO dies): reads have transfers of
#      their own that backfill never takes, and a read's --timeout (5 s
#      here, far below what 16 readers x 1,200 files wait in queues on a
#      50 ms link) counts from when its request is sent;
#  (b) every byte read is the source's (SHA-256 of every file);
#  (c) the round trip was really there: the fetcher measured it, and the
#      mount learnt the manifests in bulk (segments), not one per file;
#  (d) the hydrator exits 0 on unmount.
. "$(dirname "$0")/lib/common.sh"
need_fuse
PROXY="$FERRY_BIN/../bench/rttproxy"
[ -x "$PROXY" ] || die "the round-trip injector is not built: $PROXY (make tests builds it)"
command -v tc >/dev/null || skip "tc (iproute2) missing"
NS_A="ferry-wsrc-$$"; NS_B="ferry-wdst-$$"
ns_link "$NS_A" 10.234.0.1 "$NS_B" 10.234.0.2
for ns in "$NS_A" "$NS_B"; do
	ip netns exec "$ns" tc qdisc add dev "$([ "$ns" = "$NS_A" ] && echo "fva$$" || echo "fvb$$")" \
		root tbf rate 1gbit burst 1000000 latency 50ms ||
		skip "cannot shape the link with tbf here"
done

# 1,200 files of 48-80 KiB (incompressible, like images) in 12 class
# directories: about 75 MB.
python3 - "$T/src" <<'PY'
import os, random, sys
root = sys.argv[1]
r = random.Random(360)
for i in range(1200):
    d = os.path.join(root, "train", "class-%02d" % (i % 12))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "sample-%05d.bin" % i), "wb") as f:
        f.write(r.randbytes(r.randint(48 << 10, 80 << 10)))
PY
find "$T/src" -type f -printf '%P\n' | sort >"$T/files"
(cd "$T/src" && xargs -d '\n' sha256sum <"$T/files") >"$T/want.sha"

nsenter --net=/run/netns/"$NS_A" "$REPL" -l 10.234.0.1:8760 -s "$T/state" \
	"e=$T/src" >"$T/repl.log" 2>&1 &
REPL_PID=$!
wait_ready "$T/repl.log" "$REPL_PID"
# Published and fully hashed before the mount: the catalog still lists
# the files as pending (it went out before hashing), the manifests are
# all there to be had.
for i in $(seq 1 600); do
	s=$(nsenter --net=/run/netns/"$NS_A" curl -sf http://10.234.0.1:8760/v1/e/stats |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["hashing"]["state"])' 2>/dev/null)
	[ "$s" = done ] && break
	sleep 0.1
done
[ "$s" = done ] || die "the replicator did not finish hashing (state $s)"

nsenter --net=/run/netns/"$NS_B" "$PROXY" 127.0.0.1:8761 10.234.0.1:8760 25 >"$T/proxy.log" 2>&1 &
PROXY_PID=$!
for i in $(seq 1 100); do grep -q ready "$T/proxy.log" && break; sleep 0.05; done
grep -q ready "$T/proxy.log" || { cat "$T/proxy.log"; die "rttproxy not ready"; }
trap 'kill $PROXY_PID 2>/dev/null; wait $PROXY_PID 2>/dev/null; cleanup' EXIT

mkdir -p "$T/mnt"
MOUNTS+=("$T/mnt")
t0=$(date +%s.%N)
nsenter --net=/run/netns/"$NS_B" "$HYD" -c "$T/cache" --jobs 16 --timeout 5 \
	http://127.0.0.1:8761/v1/e "$T/mnt" || die "the hydrator did not mount"
mountpoint -q "$T/mnt" || die "not a mountpoint after the hydrator returned"

# (a), (b): the epoch, 16 threads, random order, every file whole.
python3 - "$T/mnt" "$T/files" "$T/want.sha" >"$T/epoch.out" 2>&1 <<'PY'
import hashlib, random, sys, threading
root, files, want = sys.argv[1], open(sys.argv[2]).read().split("\n")[:-1], {}
for line in open(sys.argv[3]):
    h, name = line.rstrip("\n").split("  ", 1)
    want[name] = h
order = files[:]
random.Random(7).shuffle(order)
lock, errors, bad, done = threading.Lock(), [], [], [0]
def worker(k):
    for name in order[k::16]:
        try:
            with open(root + "/" + name, "rb") as f:
                data = f.read()
        except OSError as e:
            with lock:
                errors.append("%s: %s" % (name, e))
            continue
        if hashlib.sha256(data).hexdigest() != want[name]:
            with lock:
                bad.append(name)
        with lock:
            done[0] += 1
ts = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print("read=%d errors=%d bad=%d" % (done[0], len(errors), len(bad)))
for e in errors[:5]: print("error:", e)
for b in bad[:5]: print("bad:", b)
sys.exit(1 if errors or bad or done[0] != len(files) else 0)
PY
rc=$?
secs=$(python3 -c "import sys,time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0")
cat "$T/epoch.out"
[ $rc -eq 0 ] || { grep -E 'error|warn' "$T/cache/hydrator.log" | tail -n 20 >&2; die "(a)/(b) the epoch failed (above)"; }
grep -q 'errno=' "$T/cache/hydrator.log" && grep 'fetch failed\|cannot' "$T/cache/hydrator.log" | head -n 5 >&2 &&
	die "(a) the hydrator logged failed reads"
ok "(a) (b) 16 readers, $(wc -l <"$T/files") files in a random order, every byte the source's, no error, in ${secs}s from mount"

# (c) the link as the hydrator saw it, and manifests in bulk.
ferry_status() { nsenter --net=/run/netns/"$NS_B" "$FERRY_BIN/ferry" status "$T/mnt" --json; }
ferry_status >"$T/status.json" || die "ferry status failed"
rtt=$(json_get "$T/status.json" link_rtt_ms)
python3 -c 'import sys; sys.exit(0 if 45 <= float(sys.argv[1]) < 500 else 1)' "$rtt" ||
	die "(c) the fetcher measured a round trip of $rtt ms, not about 50"
segs=$(nsenter --net=/run/netns/"$NS_A" curl -sf http://10.234.0.1:8760/metrics |
	awk '/^ferry_replicator_requests_total\{.*route="manifests"/ {s += $2} END {print s + 0}')
files=$(nsenter --net=/run/netns/"$NS_A" curl -sf http://10.234.0.1:8760/metrics |
	awk '/^ferry_replicator_requests_total\{.*route="manifest"[,}]/ {s += $2} END {print s + 0}')
[ "$segs" -ge 1 ] || die "(c) no manifest segment was asked for: the mount learnt no manifest in bulk"
[ "$files" -lt 100 ] || die "(c) $files manifests were asked for one file at a time (of $(wc -l <"$T/files"))"
ok "(c) the fetcher measured a round trip of $rtt ms; manifests: $segs segment requests, $files single-file ones"

umount_hyd "$T/mnt"
ok "(d) the hydrator exited 0 after its unmount"
kill "$PROXY_PID" 2>/dev/null
wait "$PROXY_PID" 2>/dev/null
stop_repl
