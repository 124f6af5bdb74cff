#!/usr/bin/env bash
# 310: GET /metrics on both daemons (docs/metrics.md), scraped over HTTP and
# parsed by a real Prometheus parser (Debian's python3-prometheus-client,
# prometheus_client.parser). Checks, in the order they run:
#  (c) a bad or taken --metrics-listen fails the mount (exit 2 / exit 1),
#      nothing mounted;
#  (a) both answer text/plain; version=0.0.4, the text parses, every
#      histogram is cumulative with +Inf == _count, and each daemon's
#      generation gauge equals the replicator's HEAD; the hydrator's
#      server answers GET and HEAD /metrics, 404 elsewhere, 405 to POST;
#  (b) a cold read of every file through the mount moves the counters by
#      what it did: the replicator's raw chunk bytes served >= the bytes
#      read, its chunk requests == the hydrator's chunk requests, frame
#      bytes sent == the chunk and batch body bytes received less the
#      32-byte id of each batch entry (a read that misses several chunks
#      asks for them in one batch); the hydrator's read bytes
#      == the bytes read, store lookups (hits + misses) cover the fetched
#      chunks, with misses; requests
#      grew; each time-to-first-byte / read-latency _count equals the
#      requests / reads counted;
#  (e) the replicator's hashing gauges agree with /v1/NS/stats once
#      hashing ends; after a change and SIGHUP both generation gauges move
#      to the new HEAD, with one rescan, one switch, and the catalog and
#      delta requests of the switch counted on both sides;
#  (f) a connection closed by the header timeout is counted by reason;
#  (d) with --tokens the replicator answers /metrics to loopback clients
#      only: a scrape from a non-loopback address is 403 (while the same
#      address reaches the server: /v1/NS/HEAD is its 401);
#      `--metrics off` is 404 even on loopback.
. "$(dirname "$0")/lib/common.sh"
need_fuse
PY3=/usr/bin/python3
"$PY3" -c 'import prometheus_client.parser' 2>/dev/null ||
	skip "python3-prometheus-client missing (Debian package; make deps)"

# $T/prom.py FILE — parse FILE (a scrape) with prometheus_client, check the
# histograms, print one line per sample: name{k="v",...} value (labels
# sorted), for grep and the checks below.
cat >"$T/prom.py" <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1], encoding="utf-8").read()
out = []
for fam in text_string_to_metric_families(text):
    if fam.type == "histogram":
        groups = {}
        for s in fam.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            groups.setdefault(key, []).append(s)
        for key, ss in groups.items():
            b = [s for s in ss if s.name.endswith("_bucket")]
            les = [float(s.labels["le"]) for s in b]
            assert les == sorted(les) and les[-1] == float("inf"), (fam.name, les)
            vals = [s.value for s in b]
            assert vals == sorted(vals), ("not cumulative", fam.name, vals)
            count = [s.value for s in ss if s.name.endswith("_count")]
            assert count == [vals[-1]], ("+Inf != _count", fam.name, count, vals[-1])
    for s in fam.samples:
        lab = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        out.append("%s{%s} %r" % (s.name, lab, s.value))
print("\n".join(out))
PY

# scrape URL OUT — GET URL into OUT.raw (head in OUT.head), parsed into OUT.
scrape() {
	curl -sS -D "$2.head" -o "$2.raw" "$1" || die "cannot GET $1"
	grep -qi '^Content-Type: text/plain; version=0.0.4; charset=utf-8' "$2.head" ||
		{ cat "$2.head" >&2; die "$1: not Content-Type text/plain; version=0.0.4"; }
	"$PY3" "$T/prom.py" "$2.raw" >"$2" || die "$1: the text does not parse (or a histogram is wrong): $2.raw"
}

# val FILE SERIES — the value of one series (exactly as prom.py prints it,
# labels sorted), as an integer; dies when it is missing.
val() {
	local v
	v=$(grep -F -- "$2 " "$1" | head -n 1 | awk '{print $NF}')
	[ -n "$v" ] || die "no series $2 in $1"
	"$PY3" -c 'import sys; print(int(float(sys.argv[1])))' "$v"
}

# val0 FILE SERIES — the same, 0 when the series is not there (the
# replicator writes a route and status class once it has counted one).
val0() {
	if grep -qF -- "$2 " "$1"; then val "$1" "$2"; else echo 0; fi
}

# sum FILE NAME — the sum of every series of one metric name.
sum() {
	awk -v n="$2" 'index($0, n "{") == 1 { s += $NF } END { printf "%d\n", s }' "$1"
}

# Incompressible and without repeats: every byte read is a chunk byte the
# replicator must send once (mk_bulk_tree shares content between files,
# which a cold read fetches once).
"$PY3" - "$T/src" <<'EOF2'
import os, random, sys
r = random.Random(310)
for i, n in enumerate([1, 4096, 70000, 300000, 1 << 20, 3 << 20, (2 << 20) + 17]):
    d = os.path.join(sys.argv[1], "d%d" % (i % 3))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%d" % i), "wb") as f:
        f.write(r.randbytes(n))
EOF2
port=$(free_port)
mport=$(free_port)
# A short header timeout, for (f).
REPL_OPTS="--header-timeout 1" start_repl "$port" "s=$T/src"
URL="http://127.0.0.1:$port/v1/s"
HEADGEN=$(cat "$T/state/s/HEAD")

# (c) first, while nothing is mounted: a malformed address is a usage
# error, a taken port a failed start; neither leaves a mount. In the
# foreground (-f), so the failure is this command's status and stderr.
mkdir -p "$T/mnt"
MOUNTS+=("$T/mnt")
"$HYD" -f -c "$T/cache" --metrics-listen nonsense "$URL" "$T/mnt" 2>"$T/bad.err"
rc=$?
[ $rc = 2 ] || die "(c) --metrics-listen nonsense: exit $rc, not 2"
grep -q 'metrics-listen' "$T/bad.err" || die "(c) no line naming --metrics-listen: $(cat "$T/bad.err")"
"$HYD" -f -c "$T/cache" --metrics-listen "127.0.0.1:$port" "$URL" "$T/mnt" 2>"$T/taken.err"
rc=$?
[ $rc = 1 ] || die "(c) --metrics-listen on a taken port: exit $rc, not 1"
! mountpoint -q "$T/mnt" || die "(c) mounted although the metrics address was taken"
grep -q 'cannot serve metrics' "$T/taken.err" || die "(c) no line says why: $(cat "$T/taken.err")"
ok "(c) a malformed --metrics-listen is exit 2, a taken one exit 1, nothing mounted"

mount_hyd "$URL" "$T/mnt" --no-backfill --poll 1 --metrics-listen "127.0.0.1:$mport"
scrape "http://127.0.0.1:$port/metrics" "$T/r0"
scrape "http://127.0.0.1:$mport/metrics" "$T/h0"

# (a) both generation gauges say HEAD.
[ "$(val "$T/r0" 'ferry_replicator_generation{namespace="s"}')" = "$HEADGEN" ] ||
	die "(a) replicator generation gauge is not HEAD ($HEADGEN)"
[ "$(val "$T/h0" 'ferry_hydrator_generation{}')" = "$HEADGEN" ] ||
	die "(a) hydrator generation gauge is not HEAD ($HEADGEN)"
[ "$(val "$T/r0" 'ferry_replicator_namespace_ready{namespace="s"}')" = 1 ] || die "(a) namespace not ready"
# The hydrator's server answers /metrics and nothing else.
hc() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(hc "http://127.0.0.1:$mport/nope")" = 404 ] || die "(a) hydrator: /nope is not 404"
[ "$(hc -X POST "http://127.0.0.1:$mport/metrics")" = 405 ] || die "(a) hydrator: POST /metrics is not 405"
[ "$(hc -I "http://127.0.0.1:$mport/metrics")" = 200 ] || die "(a) hydrator: HEAD /metrics is not 200"
ok "(a) both scrapes parse (prometheus_client), histograms cumulative, generation = HEAD = $HEADGEN"

# (b) a cold read of everything.
read_bytes=$(find "$T/mnt" -type f -print0 | xargs -0 cat | wc -c)
files_bytes=$(find "$T/src" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
[ "$read_bytes" = "$files_bytes" ] || die "(b) read $read_bytes bytes through the mount, the tree has $files_bytes"
scrape "http://127.0.0.1:$port/metrics" "$T/r1"
scrape "http://127.0.0.1:$mport/metrics" "$T/h1"
d() { # FILE0 FILE1 SERIES: the growth of a series
	echo $(($(val "$2" "$3") - $(val "$1" "$3")))
}
raw=$(d "$T/r0" "$T/r1" 'ferry_replicator_chunk_bytes_served_total{namespace="s"}')
[ "$raw" -ge "$read_bytes" ] || die "(b) replicator served $raw raw chunk bytes for a cold read of $read_bytes"
frames=$(d "$T/r0" "$T/r1" 'ferry_replicator_frame_bytes_served_total{namespace="s"}')
hchunk=$(d "$T/h0" "$T/h1" 'ferry_hydrator_fetch_bytes_total{kind="chunk"}')
hbatch=$(d "$T/h0" "$T/h1" 'ferry_hydrator_fetch_bytes_total{kind="batch"}')
# A retried transfer (a stall on a loaded machine) is counted by the
# replicator and not received whole: exact only without retries.
retries=$(d "$T/h0" "$T/h1" 'ferry_hydrator_errors_total{kind="retry"}')
same() { # A B WHAT: A = B without retries, A >= B with
	if [ "$retries" = 0 ]; then [ "$1" = "$2" ]; else [ "$1" -ge "$2" ]; fi ||
		die "(b) $3: replicator $1, hydrator $2 ($retries retries)"
}
rq=$(($(val "$T/r1" 'ferry_replicator_requests_total{code="2xx",route="chunk"}') -
	$(val0 "$T/r0" 'ferry_replicator_requests_total{code="2xx",route="chunk"}')))
hq=$(d "$T/h0" "$T/h1" 'ferry_hydrator_fetch_requests_total{kind="chunk"}')
[ "$hq" -gt 0 ] || die "(b) the hydrator counted no chunk request for a cold read"
if [ "$retries" = 0 ]; then
	[ "$rq" = "$hq" ] || die "(b) replicator answered $rq chunk requests, the hydrator sent $hq"
else
	[ "$rq" -le "$hq" ] || die "(b) replicator answered $rq chunk requests, the hydrator sent only $hq"
fi
chunks=$(d "$T/r0" "$T/r1" 'ferry_replicator_chunks_served_total{namespace="s"}')
hchunks=$(d "$T/h0" "$T/h1" 'ferry_hydrator_chunks_fetched_total{}')
[ "$hchunks" -gt 0 ] || die "(b) no chunk fetched for a cold read"
same "$chunks" "$hchunks" "chunks served / fetched"
# each chunk GET carries one frame; the rest came in batches, each entry
# its 32-byte id and its frame
same "$frames" $((hchunk + hbatch - 32 * (hchunks - hq))) \
	"frame bytes sent / chunk and batch frame bytes received"
rb=$(d "$T/h0" "$T/h1" 'ferry_hydrator_read_bytes_total{}')
# the kernel may read a page range again (evicted meanwhile), never less
[ "$rb" -ge "$read_bytes" ] && [ "$rb" -le $((2 * read_bytes)) ] ||
	die "(b) hydrator served $rb bytes to FUSE reads, $read_bytes were read"
miss=$(d "$T/h0" "$T/h1" 'ferry_hydrator_store_lookups_total{result="miss"}')
hit=$(d "$T/h0" "$T/h1" 'ferry_hydrator_store_lookups_total{result="hit"}')
# Every fetched chunk is read by a demand read: a miss, or a hit when
# readahead (not counted) stored it first. A cold read misses some.
[ "$miss" -gt 0 ] || die "(b) no store miss counted for a cold read"
[ $((hit + miss)) -ge "$hchunks" ] || die "(b) $hit hits + $miss misses for $hchunks chunks fetched"
for f in r0 r1; do
	n=$(sum "$T/$f" ferry_replicator_requests_total)
	c=$(val "$T/$f" 'ferry_replicator_time_to_first_byte_seconds_count{}')
	[ "$n" = "$c" ] || die "(b) $f: $n requests counted, time to first byte counted $c"
done
[ "$(sum "$T/r1" ferry_replicator_requests_total)" -gt "$(sum "$T/r0" ferry_replicator_requests_total)" ] ||
	die "(b) the replicator's requests did not grow"
reads=$(val "$T/h1" 'ferry_hydrator_reads_total{}')
[ "$reads" -gt 0 ] && [ "$reads" = "$(val "$T/h1" 'ferry_hydrator_read_duration_seconds_count{}')" ] ||
	die "(b) $reads reads, the latency histogram counted another number"
[ "$(val "$T/h1" 'ferry_hydrator_errors_total{kind="mismatch"}')" = 0 ] || die "(b) mismatches counted"
ok "(b) cold read of $read_bytes bytes: served raw $raw >= read, chunk requests $rq/$hq, frame bytes $frames sent, $hchunk in GETs + $hbatch in batches ($retries retries), $miss misses + $hit hits, histogram counts = requests"

# (e) hashing progress as /v1/s/stats has it, once hashing is done;
# then a change and SIGHUP: a new generation on both gauges, one
# rescan, one switch, and the switch's catalog requests counted.
wait_hashed "$port" s 60 || die "(e) hashing did not finish"
scrape "http://127.0.0.1:$port/metrics" "$T/r2"
for k in files bytes; do
	done_m=$(val "$T/r2" "ferry_replicator_hash_${k}{namespace=\"s\",state=\"done\"}")
	pend_m=$(val "$T/r2" "ferry_replicator_hash_${k}{namespace=\"s\",state=\"pending\"}")
	[ "$done_m" = "$(hash_stat "$port" s "${k}_done")" ] || die "(e) hash_$k done $done_m, /stats says otherwise"
	[ "$pend_m" = 0 ] || die "(e) hash_$k pending $pend_m after hashing ended"
	[ "$done_m" = "$(hash_stat "$port" s "$k")" ] || die "(e) hash_$k done $done_m is not every pending $k"
done
[ "$(val "$T/r2" 'ferry_replicator_hash_files{namespace="s",state="done"}')" = 7 ] ||
	die "(e) hashed files are not the tree's 7"
head -c 100000 /dev/urandom >"$T/src/d0/new"
kill -HUP "$REPL_PID"
hlog="$T/cache/hydrator.log"
for i in $(seq 1 300); do grep -q "switched generation from=$HEADGEN to=" "$hlog" && break; sleep 0.1; done
grep -q "switched generation from=$HEADGEN to=" "$hlog" || die "(e) the mount did not switch within 30 s"
GEN2=$(cat "$T/state/s/HEAD")
[ "$GEN2" -gt "$HEADGEN" ] || die "(e) HEAD did not move"
scrape "http://127.0.0.1:$port/metrics" "$T/r3"
scrape "http://127.0.0.1:$mport/metrics" "$T/h3"
[ "$(val "$T/r3" 'ferry_replicator_generation{namespace="s"}')" = "$GEN2" ] || die "(e) replicator generation gauge is not $GEN2"
[ "$(val "$T/h3" 'ferry_hydrator_generation{}')" = "$GEN2" ] || die "(e) hydrator generation gauge is not $GEN2"
[ "$(val "$T/r3" 'ferry_replicator_rescans_total{namespace="s"}')" = 1 ] || die "(e) rescans_total is not 1"
[ "$(d "$T/h1" "$T/h3" 'ferry_hydrator_generation_switches_total{}')" = 1 ] || die "(e) switches did not grow by 1"
[ "$(d "$T/h1" "$T/h3" 'ferry_hydrator_fetch_requests_total{kind="catalog"}')" -ge 2 ] ||
	die "(e) the switch's HEAD and catalog (or delta) requests were not counted"
cat2xx() { # FILE: delta and catalog answers of 2xx
	echo $(($(val0 "$1" 'ferry_replicator_requests_total{code="2xx",route="delta"}') +
		$(val0 "$1" 'ferry_replicator_requests_total{code="2xx",route="catalog"}')))
}
[ "$(cat2xx "$T/r3")" -gt "$(cat2xx "$T/r1")" ] ||
	die "(e) no delta or catalog answer counted by the replicator for the switch"
ok "(e) hashing gauges = /stats ($(val "$T/r2" 'ferry_replicator_hash_bytes{namespace="s",state="done"}') bytes done, 0 pending); after SIGHUP both gauges = $GEN2, 1 rescan, 1 switch"

# (f) a connection that never sends its request head is closed by the
# header timeout (1 s here), and counted.
acc0=$(val "$T/r3" 'ferry_replicator_connections_accepted_total{}')
"$PY3" - "$port" <<'EOF2' || die "(f) a silent connection was not closed by the header timeout"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(10)
assert s.recv(1) == b""
EOF2
scrape "http://127.0.0.1:$port/metrics" "$T/r4"
[ "$(d "$T/r3" "$T/r4" 'ferry_replicator_connections_limited_total{reason="header_timeout"}')" -ge 1 ] ||
	die "(f) the header timeout's close was not counted"
[ "$(val "$T/r4" 'ferry_replicator_connections_accepted_total{}')" -ge $((acc0 + 2)) ] ||
	die "(f) accepted connections did not grow by the silent one and the scrape"
[ "$(val "$T/r4" 'ferry_replicator_connections_open{}')" -ge 1 ] || die "(f) no open connection while scraping"
ok "(f) a silent connection closed by the header timeout is counted (reason=header_timeout)"

umount_hyd "$T/mnt"
stop_repl

# (d) tokens: /metrics for loopback clients only. The non-loopback
# client is in a network namespace of this test, behind a veth pair
# (10.233.N.1 here, 10.233.N.2 there), so no address of the machine is
# used.
NSM="ferry310m$$"
VH="f310h$$"
VN="f310n$$"
NET="10.233.$(($$ % 250)).0"
ADDR=${NET%.0}.1
PEER=${NET%.0}.2
R2=""
R3=""
# On a failure the extra replicators go too (stopped here, they are not
# the library's REPL_PID); on success they were stopped and checked below.
e2e_after_cleanup() {
	[ -z "$R2" ] || kill -TERM "$R2" 2>/dev/null
	[ -z "$R3" ] || kill -TERM "$R3" 2>/dev/null
	ip link del "$VH" 2>/dev/null
	ip netns del "$NSM" 2>/dev/null
}
ip netns add "$NSM" 2>/dev/null || skip "cannot create network namespaces here"
ip link add "$VH" type veth peer name "$VN" || die "(d) cannot make a veth pair"
ip link set "$VN" netns "$NSM"
ip addr add "$ADDR/30" dev "$VH"
ip link set "$VH" up
ip netns exec "$NSM" ip addr add "$PEER/30" dev "$VN"
ip netns exec "$NSM" ip link set "$VN" up
ip netns exec "$NSM" ip link set lo up
"$FERRY" token new s >"$T/tok.out" || die "(d) ferry token new"
sed -n 2p "$T/tok.out" >"$T/tokens"
port2=$(free_port)
"$REPL" -l "0.0.0.0:$port2" -s "$T/state2" --tokens "$T/tokens" "s=$T/src" >"$T/repl2.log" 2>&1 &
R2=$!
wait_ready "$T/repl2.log" "$R2"
code() { curl -s -o /dev/null -w '%{http_code}' "$1"; }
# from the namespace: the server sees the client at $PEER
ncurl() { nsenter --net=/run/netns/"$NSM" curl -s --max-time 10 "$@"; }
[ "$(code "http://127.0.0.1:$port2/metrics")" = 200 ] || die "(d) loopback scrape refused with --tokens"
[ "$(ncurl -o /dev/null -w '%{http_code}' "http://$ADDR:$port2/v1/s/HEAD")" = 401 ] || die "(d) $PEER does not reach the server (HEAD not 401)"
c=$(ncurl -o /dev/null -w '%{http_code}' "http://$ADDR:$port2/metrics")
[ "$c" = 403 ] || die "(d) a scrape from $PEER with --tokens got $c, not 403"
ncurl "http://$ADDR:$port2/metrics" | grep -q 'namespace="s"' && die "(d) the refusal names a namespace"
kill -TERM $R2
wait $R2 || die "(d) second replicator exited $? after SIGTERM"
R2=""
"$REPL" -l "127.0.0.1:$port2" -s "$T/state2" --metrics off "s=$T/src" >"$T/repl3.log" 2>&1 &
R3=$!
wait_ready "$T/repl3.log" "$R3"
c=$(code "http://127.0.0.1:$port2/metrics")
[ "$c" = 404 ] || die "(d) --metrics off answered $c, not 404"
kill -TERM $R3
wait $R3 || die "(d) third replicator exited $? after SIGTERM"
R3=""
ok "(d) with --tokens: loopback 200, $PEER (another network namespace) 403 (its HEAD 401); --metrics off: 404"
