#!/usr/bin/env bash
# bench/kv.sh BUILD_DIR — a KV-cache store served from a remote region
# (examples/kv-cache.sh's workload, across the bench's WAN): LMCache's
# file-system connector layout (bench/kv_gen.py: one <key>.data per chunk
# of tokens in one directory, incompressible, 1-4 MiB each) served by a
# replicator in the source's namespace, mounted in the destination's with
# --cache-max a tenth of the store's bytes and --no-backfill, through the
# bench's link (bench/link.sh: two network namespaces, a veth, tbf at
# KV_RATE) and round trip (bench/rttproxy, KV_RTT ms, in the destination's
# namespace), as bench/tts.sh does. The reader (bench/kv_job.py, in the
# destination's namespace) looks KV_LOOKUPS keys up by stat (10% do not
# exist), Zipf s=1.1 with a fixed seed, reads each one found whole and
# checks its sha256; every read's pages are dropped after it, so each one
# reaches ferry.
#
# Reported (one table on stdout, OUT/kv.json; with RES set, as make bench
# does, one record, approach ferry_kv, for bench/report.py):
#   ferry hit %      reads that fetched nothing (the hydrator's metrics:
#                    no chunk fetched, no store miss during the read; the
#                    latency cross-check, under half a round trip, is in
#                    kv.json)
#   ideal LRU %      an LRU cache of --cache-max bytes over whole blobs on
#                    the same trace
#   hit ms           a read of a stored blob through the mount, median/p90
#   local ms         a read of the same file from the source tree on this
#                    machine, its pages in memory, for each hit (in
#                    brackets: the same read once its pages are dropped,
#                    from the disk; context, not a target)
#   hit / local      each hit's time over its local read's, the median
#   miss ms          a read that fetched, median/p90
#   absent stat ms   stat of a key that does not exist (answered from the
#                    catalog: no round trip)
#   store MB         peak: the store's volumes, allocated bytes, sampled
#                    after each read; end: ferry's count of the chunks
#                    stored once the run is over
# Targets (bench/report.py prints PASS or MISS): ferry's hit rate within 5
# points of the ideal LRU's; hit / local <= 2. The hydrator also keeps up
# to 256 decoded chunks (32 MiB) in memory, which serve hits of their own:
# with a small bound (KV_SCALE=tiny: 10 MB) ferry does better than the
# ideal LRU of the bound alone.
#
# Cost. Disk: KV_BLOBS x 2.5 MiB on average at the source (kept in KV_WORK,
# made again only when KV_BLOBS or KV_GEN_SEED change: ~5 s per GB, and
# the replicator hashes it before anything is timed, ~1 s per GB), at most
# a tenth of that in ferry's cache. Time: linear in KV_LOOKUPS. A lookup
# of a key that exists costs (1 - hit rate) x a miss + hit rate x a hit; at
# 1 Gbit/s and 50 ms a miss is 65-70 ms (a round trip and a bit, plus the
# blob's ~20 ms on the wire; it grows with KV_RTT), a hit ~3 ms plus ~6 ms
# of local reads beside it: ~35 ms a lookup at the ~50-60% hit rate of a
# tenth. Measured on 2 cores: full (400 blobs, 1 GB; 3000 lookups) 2 min,
# small (120, 340 MB; 800) 45 s, tiny (40, 100 MB; 300) 15-25 s.
#
# Knobs (environment):
#   KV_SCALE [full]      full: 400 blobs, 3000 lookups; small: 120, 800;
#                        tiny: 40, 300
#   KV_BLOBS, KV_LOOKUPS override the scale's
#   KV_RATE [1gbit]  KV_RTT [50]  the link (tbf rate, round trip in ms)
#   KV_CACHE_DIV [10]    --cache-max = the store's bytes / KV_CACHE_DIV
#   KV_ZIPF [1.1]  KV_ABSENT [0.1]  KV_SEED [7] (trace)  KV_GEN_SEED [1]
#   KV_HYD_OPTS [""]     extra ferry-hydrator options (e.g. --pin ...)
#   KV_WORK [build/bench/kv]  store, replicator state, cache, logs
#   OUT [build/bench]    where kv.json goes;  RES [unset] the record
#   JOB_TIMEOUT [3600]   seconds the reader may take
# Needs root (namespaces, tbf, FUSE), nsenter, ip, tc, python3, curl,
# fusermount3, and a ferry-hydrator with --cache-max.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/kv.sh BUILD_DIR}" && pwd)
case ${KV_SCALE:-full} in
full) blobs=400 lookups=3000 ;;
small) blobs=120 lookups=800 ;;
tiny) blobs=40 lookups=300 ;;
*) echo "bench/kv.sh: KV_SCALE is full, small or tiny, not '$KV_SCALE'" >&2; exit 2 ;;
esac
BLOBS=${KV_BLOBS:-$blobs}
LOOKUPS=${KV_LOOKUPS:-$lookups}
RATE=${KV_RATE:-1gbit}
RTT=${KV_RTT:-50}
DIV=${KV_CACHE_DIV:-10}
ZIPF=${KV_ZIPF:-1.1}
ABSENT=${KV_ABSENT:-0.1}
SEED=${KV_SEED:-7}
GEN_SEED=${KV_GEN_SEED:-1}
HYD_OPTS=${KV_HYD_OPTS:-}
WORK=${KV_WORK:-$ROOT/build/bench/kv}
OUT=${OUT:-$ROOT/build/bench}
JOB_TIMEOUT=${JOB_TIMEOUT:-3600}
# the link's namespaces, veth ends and addresses (bench/link.sh reads
# them): names of our own, as tts.sh and cache.sh have theirs
export NS_SRC=kv-src NS_DST=kv-dst IF_SRC=kv-s IF_DST=kv-d IP_SRC=10.99.78.1 IP_DST=10.99.78.2
NSS="nsenter --net=/run/netns/$NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
LINK=$ROOT/bench/link.sh
REPL_PORT=7580 P_REPL=7590 METRICS_PORT=7591
URL=http://127.0.0.1:$P_REPL/v1/kv
TREE=$WORK/tree
MAN=$WORK/tree.json
CACHE=$WORK/cache
MNT=$WORK/mnt
LOGS=$WORK/logs
LABEL=kv-$RATE+rtt${RTT}ms

log() { echo "[$(date +%H:%M:%S)] kv: $*" >&2; }
# now, dt, wire, umount_wait, until_hashed, bench_cleanup (unmounts
# MNT_ACTIVE, stops PROXY_PID and REPL_PID, takes the link down)
. "$ROOT/bench/lib.sh"
kv_cleanup() {
	set +e
	bench_cleanup
	local pid
	pid=$(cat "$CACHE/hydrator.pid" 2>/dev/null)
	for _ in $(seq 1 100); do
		if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
		sleep 0.1
	done
}
trap kv_cleanup EXIT

# ------------------------------------------------------------ preflight
if [ "$(id -u)" != 0 ]; then
	echo "bench/kv.sh needs root: it creates network namespaces and a shaped veth link (bench/link.sh) and mounts FUSE file systems." >&2
	exit 2
fi
for t in nsenter ip tc python3 curl fusermount3 mountpoint timeout; do
	command -v "$t" >/dev/null || { echo "bench/kv.sh: '$t' is missing (Debian: apt-get install util-linux iproute2 python3 curl fuse3)" >&2; exit 2; }
done
for p in ferry-replicator ferry-hydrator ferry; do
	[ -x "$B/bin/$p" ] || { echo "bench/kv.sh: $B/bin/$p is missing; build first (make VARIANT=release all)" >&2; exit 2; }
done
help=$("$B/bin/ferry-hydrator" --help 2>&1 || true)
case $help in
*--cache-max*) ;;
*) echo "bench/kv.sh: $B/bin/ferry-hydrator has no --cache-max (the cache size bound this row measures)" >&2; exit 2 ;;
esac
# the round-trip injector: make's (BUILD_DIR/bench/rttproxy), else built here
RTTPROXY=$B/bench/rttproxy
if [ ! -x "$RTTPROXY" ]; then
	mkdir -p "$WORK"
	RTTPROXY=$WORK/rttproxy
	if [ ! -x "$RTTPROXY" ] || [ "$ROOT/bench/rttproxy.c" -nt "$RTTPROXY" ]; then
		command -v gcc >/dev/null || { echo "bench/kv.sh: $B/bench/rttproxy is missing and there is no gcc to build it" >&2; exit 2; }
		gcc -O2 -D_GNU_SOURCE -o "$RTTPROXY" "$ROOT/bench/rttproxy.c" -lpthread -lm
	fi
fi
# the reader runs on the interpreter itself, not a version manager's shim
JOB_PY=$(python3 -c 'import sys; print(sys.executable)')
mkdir -p "$WORK" "$OUT" "$LOGS"

# ------------------------------------------------------------ the store
want="$BLOBS/$GEN_SEED/$(python3 -c "import importlib.util as u, sys
s = u.spec_from_file_location('g', sys.argv[1]); m = u.module_from_spec(s); s.loader.exec_module(m); print(m.VERSION)" "$ROOT/bench/kv_gen.py")"
have=$(python3 -c "import json,sys
try: m = json.load(open(sys.argv[1])); print('%d/%d/%d' % (m['blobs_asked'], m['seed'], m['version']))
except Exception: print('')" "$MAN")
if [ -d "$TREE" ] && [ "$have" = "$want" ]; then
	log "store: $TREE is there ($BLOBS blobs, seed $GEN_SEED)"
else
	log "store: generating $TREE ($BLOBS blobs of 1-4 MiB, seed $GEN_SEED)"
	rm -rf "$TREE" "$MAN" "$WORK/repl-state"
	python3 "$ROOT/bench/kv_gen.py" "$TREE" --manifest "$MAN" --blobs "$BLOBS" --seed "$GEN_SEED" >/dev/null
fi
BYTES=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$MAN")
CMAX_K=$((BYTES / DIV / 1024))
CMAX=$((CMAX_K * 1024))
log "store: $BLOBS blobs, $BYTES bytes; --cache-max ${CMAX_K}K (1/$DIV)"

# ------------------------------------------------------------ the link
"$LINK" up "$RATE" >&2
mkdir -p "$WORK/repl-state"
$NSS "$B/bin/ferry-replicator" -l "$IP_SRC:$REPL_PORT" -s "$WORK/repl-state" kv="$TREE" >"$LOGS/replicator.log" 2>&1 &
REPL_PID=$!
for _ in $(seq 1 600); do
	grep -q ' ready' "$LOGS/replicator.log" && break
	kill -0 "$REPL_PID" 2>/dev/null || { tail -n 20 "$LOGS/replicator.log" >&2; log "the replicator died"; exit 1; }
	sleep 0.1
done
# hashed before anything is timed (a first read would wait for it)
until_hashed "$NSS" "http://$IP_SRC:$REPL_PORT/v1/kv" 36000 >/dev/null ||
	{ log "the replicator is still hashing after an hour"; exit 1; }
ow=$(python3 -c "import sys; print('%g' % (float(sys.argv[1]) / 2))" "$RTT")
$NSD "$RTTPROXY" "127.0.0.1:$P_REPL" "$IP_SRC:$REPL_PORT" "$ow" >"$LOGS/rttproxy.log" 2>&1 &
PROXY_PID=$!
for _ in $(seq 1 100); do
	grep -q 'rttproxy: ready' "$LOGS/rttproxy.log" && break
	sleep 0.05
done
grep -q 'rttproxy: ready' "$LOGS/rttproxy.log" || { cat "$LOGS/rttproxy.log" >&2; log "rttproxy did not start"; exit 1; }

# ------------------------------------------------------------ the run
# the same start as tts.sh's timed steps: caches dropped, the source tree
# read back (the replicator and the local reads find it in memory)
sync
echo 3 >/proc/sys/vm/drop_caches
cat "$TREE"/*.data >/dev/null
sleep 1
rm -rf "$CACHE"
mkdir -p "$MNT"
mountpoint -q "$MNT" && { fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT"; }
w0=$(wire)
# shellcheck disable=SC2086 # options, word-split on purpose
$NSD "$B/bin/ferry-hydrator" $HYD_OPTS -c "$CACHE" --cache-max "${CMAX_K}K" --no-backfill \
	--metrics-listen "127.0.0.1:$METRICS_PORT" "$URL" "$MNT" 2>"$LOGS/hydrator.err" ||
	{ cat "$LOGS/hydrator.err" >&2; log "the mount failed"; exit 1; }
MNT_ACTIVE=$MNT
log "mounted; $LOOKUPS lookups at $RATE, ${RTT} ms"
rc=0
$NSD timeout -k 10 "$JOB_TIMEOUT" "$JOB_PY" "$ROOT/bench/kv_job.py" "$MNT" "$MAN" --cache-max "$CMAX" \
	--lookups "$LOOKUPS" --zipf "$ZIPF" --absent "$ABSENT" --seed "$SEED" \
	--metrics "http://127.0.0.1:$METRICS_PORT/metrics" --miss-ms "$ow" --local "$TREE" --store "$CACHE" \
	--json "$WORK/job.json" >"$LOGS/job.out" 2>"$LOGS/job.err" || rc=$?
w1=$(wire)
sleep 2 # the last fetched chunks committed, and evicted for
"$B/bin/ferry" status "$MNT" --json >"$LOGS/status.json" 2>/dev/null || true
pid=$(cat "$CACHE/hydrator.pid" 2>/dev/null || true)
umount_wait "$MNT" "$pid"
cp "$CACHE/hydrator.log" "$LOGS/hydrator.log" 2>/dev/null || true
hexit=$(tail -n1 "$LOGS/hydrator.log" 2>/dev/null | grep -o 'exit status=[0-9]*' || echo none)
sed 's/^/  /' "$LOGS/job.out" >&2
[ "$rc" = 0 ] || { cat "$LOGS/job.err" >&2; log "the reader failed (exit $rc): see above"; }

# ------------------------------------------------------------ report
python3 - "$WORK/job.json" "$OUT/kv.json" "$LABEL" "$BLOBS" "$rc" "$((w1 - w0))" "$hexit" "$LOGS/status.json" <<'PY'
import json, sys
src, dst, label, blobs, rc, wire, hexit, status = sys.argv[1:9]
try:
    r = json.load(open(src))
except Exception:
    r = {}
rec = dict(r, link=label, rc=int(rc), wire_bytes=int(wire), hydrator_exit=hexit)
try:
    rec["store_end_mb"] = round(json.load(open(status))["rest_bytes"] / 1e6, 1)
except Exception:
    pass
for k in ("hit_rate", "ideal_lru_hit_rate"):
    if r.get(k) is not None:
        rec[k.replace("_hit_rate", "").replace("_rate", "") + "_pct"] = 100 * r[k]
for k in ("cache_max", "store_peak_alloc", "store_bytes"):
    if r.get(k) is not None:
        rec[k + "_mb"] = round(r[k] / 1e6, 1)
json.dump(rec, open(dst, "w"))
f = lambda v, d=2: "—" if v is None else ("%.*f" % (d, v))  # noqa: E731
print("| link | blobs | store MB | --cache-max MB | lookups | reads | ferry hit % | ideal LRU % "
      "| hit ms p50 / p90 | local ms p50 (disk) | hit / local | miss ms p50 / p90 | absent stat ms "
      "| store peak / end MB | bytes ok |")
print("|" + "---|" * 15)
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s (%s) | %s | %s / %s | %s | %s / %s | %s |" % (
    label, blobs, f(rec.get("store_bytes_mb"), 0), f(rec.get("cache_max_mb"), 1), r.get("lookups", "—"),
    r.get("reads", "—"), f(rec.get("hit_pct"), 1), f(rec.get("ideal_lru_pct"), 1),
    f(r.get("hit_ms_p50")), f(r.get("hit_ms_p90")), f(r.get("local_ms_p50")), f(r.get("local_cold_ms_p50")),
    f(r.get("hit_vs_local")),
    f(r.get("miss_ms_p50"), 1), f(r.get("miss_ms_p90"), 1), f(r.get("absent_stat_ms_p50"), 3),
    f(rec.get("store_peak_alloc_mb"), 1), f(rec.get("store_end_mb"), 1),
    "yes" if r and int(rc) == 0 and not r.get("bad_bytes") else "NO"))
PY
if [ -n "${RES:-}" ] && [ "$rc" = 0 ]; then
	kv() { python3 -c "import json,sys; v = json.load(open(sys.argv[1])).get(sys.argv[2]); print('' if v is None else v)" "$OUT/kv.json" "$1"; }
	python3 "$ROOT/bench/emit.py" ferry_kv "$LABEL" 1 blobs="$BLOBS" lookups="$(kv lookups)" reads="$(kv reads)" \
		hit_pct="$(kv hit_pct)" ideal_lru_pct="$(kv ideal_lru_pct)" latency_hit_rate="$(kv latency_hit_rate)" \
		hit_ms_p50="$(kv hit_ms_p50)" hit_ms_p90="$(kv hit_ms_p90)" local_ms_p50="$(kv local_ms_p50)" \
		local_cold_ms_p50="$(kv local_cold_ms_p50)" hit_vs_local="$(kv hit_vs_local)" \
		miss_ms_p50="$(kv miss_ms_p50)" miss_ms_p90="$(kv miss_ms_p90)" \
		absent_stat_ms_p50="$(kv absent_stat_ms_p50)" store_peak_mb="$(kv store_peak_alloc_mb)" \
		store_end_mb="$(kv store_end_mb)" \
		cache_max_mb="$(kv cache_max_mb)" store_mb="$(kv store_bytes_mb)" wire_bytes="$(kv wire_bytes)" \
		hydrator_exit="$hexit" >>"$RES"
fi
[ "$rc" = 0 ] || exit 1
