#!/usr/bin/env bash
# bench/run.sh BUILD_DIR — `make bench`: ferry side by side with rsync,
# rclone and casync on the same data over the same shaped link.
#
# Needs root (network namespaces, tbf, FUSE mounts). Everything it uses is
# in bench/: the tree (gen_tree.py, small scale, seed 1), the link
# (link.sh), the peers (peers.sh), the round trips (rttproxy, built by
# make into BUILD_DIR/bench/). Everything lands in build/bench/: work/
# (tree, caches, mounts, logs), results.jsonl (one JSON object per ferry
# run), peers-rtt*/results.jsonl (the peers' runs), bench.json (medians,
# targets, PASS/MISS), bench.md (the table) and bench.png (time-to-browse
# and time-to-complete per tool and link). At the end bench.md is also
# appended to docs/results-log.md under a dated heading with the commit,
# so every make bench leaves its record.
#
# Knobs (environment):
#   RATE [200mbit]        link rate (link.sh / tbf syntax)
#   RTTS ["0 20"]         round-trip times to test, ms (other than 0 via
#                         BUILD_DIR/bench/rttproxy in the client's namespace)
#   RUNS [3]              runs per approach at 0 ms RTT (the median is reported)
#   RTT_RUNS [1]          runs per approach at the other RTTs
#   PEERS ["rsync_hx rclone_mount casync_mount"]  bench/peers.sh approaches;
#                         "" skips the peers (their last results are reused)
#   FERRY ["ferry_start ferry_mount ferry_sync ferry_mount_tls"]  ferry
#                         approaches; ferry_start times from the
#                         replicator's start (fresh state: walk, catalog,
#                         mount, browse / first byte / tar), the others
#                         from the mount's or the sync's start;
#                         ferry_mount_tls is ferry_mount over https (a
#                         second replicator with --tls-cert, certificates
#                         made here; the hydrator with --ca-file). Both
#                         mount rows report the replicator's CPU seconds
#                         (utime+stime) per GB on the wire while the tree
#                         is read
#   UPDATE [1]            also the "5% changed" row (bench/update.sh): the
#                         source changes after a first copy; rsync -aHX
#                         --delete and ferry sync --delete rerun at RATE
#   SEED [1]              also the "90% already here" rows (bench/seed.sh):
#                         the destination holds the tree as it was, the
#                         source changed 10% of its files; ferry sync
#                         --seed, --link-dest and into the old copy against
#                         rsync --link-dest and rsync into the old copy
#   SSH [1]               also the time-to-first-byte rows over ssh
#                         (bench/ssh_ttfb.sh): a cold mount of a 10,000-
#                         file tree through ferry-hydrator HOST:PATH (sshd
#                         only at the source; with and without an ssh
#                         ControlMaster) against https with tokens, at 0
#                         and 50 ms RTT on a 1 Gbit/s link
#   MEDIUM [1]            also the medium tree (bench/medium.sh): rsync -aHX,
#                         ferry mount and ferry sync at MEDIUM_RATE [1gbit]
#                         and on loopback, and tar of the complete mount
#   REGION [1]            also the rows of many machines (bench/s3.sh:
#                         GetObject and ListObjectsV2 against the mount
#                         on loopback; bench/cache.sh: CACHE_CLIENTS [4]
#                         hydrators behind one nginx proxy_cache at
#                         CACHE_RATE [200mbit]); their tables go to
#                         s3.table and cache.table
#   TTS [1]               also the time-to-serve rows across a WAN
#                         (bench/tts.sh: a model load, a data-loader
#                         epoch, an import-like walk and a 2 GiB cat on a
#                         cold mount against rsync of the subtree then
#                         the job, at 1 Gbit/s with 20, 50 and 100 ms and
#                         10 Gbit/s with 50 ms; TTS_MATRIX overrides its
#                         MATRIX); its table goes to tts.md, appended to
#                         bench.md
#   KV [1]                also the KV-cache row (bench/kv.sh): an LMCache
#                         file-system store read through a mount with
#                         --cache-max a tenth of it, Zipf lookups at
#                         1 Gbit/s and 50 ms RTT, against an ideal LRU
#                         and a local read; KV_SCALE (full, small, tiny)
#                         sizes it; its table goes to kv.table
#   EVICT [1]             also the eviction rows (bench/evict.sh, loopback):
#                         a scan 4x --cache-max with a pinned quarter
#                         (peak on disk, pinned bytes intact) and a warm
#                         working set beside a stream that evicts, against
#                         no bound; EVICT_MIB and WARM_MIB size it; its
#                         table goes to evict.table, appended to bench.md
#   HYD_OPTS [""]         extra ferry-hydrator options (e.g. "--jobs 8")
#   SYNC_OPTS [""]        extra ferry sync options
#   BENCH_OUT [build/bench]  where results go (e.g. to keep a baseline)
#   RESULTS_LOG [docs/results-log.md]  where the dated record goes ("" for
#                         none)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/run.sh BUILD_DIR}" && pwd)
OUT=${BENCH_OUT:-$ROOT/build/bench}
WORK=$ROOT/build/bench/work
RATE=${RATE:-200mbit}
RTTS=${RTTS:-"0 20"}
RUNS=${RUNS:-3}
RTT_RUNS=${RTT_RUNS:-1}
PEERS=${PEERS-"rsync_hx rclone_mount casync_mount"}
FERRY=${FERRY:-"ferry_start ferry_mount ferry_sync ferry_mount_tls"}
HYD_OPTS=${HYD_OPTS:-}
SYNC_OPTS=${SYNC_OPTS:-}
SRC_IP=10.99.0.1
PORT=7070
PROXY_PORT=7071
PORT_TLS=7072
PROXY_PORT_TLS=7073
# The link's namespaces and veth ends (link.sh reads the same variables;
# other names let a run share the machine with someone else's)
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
LINK=$ROOT/bench/link.sh
LIB="python3 $ROOT/bench/peers_lib.py"
RTTPROXY=$B/bench/rttproxy
TREECMP="python3 $ROOT/tests/e2e/lib/treecmp.py"
RES=$OUT/results.jsonl

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
# now, dt, wire, and the EXIT trap (unmount, stop servers, link down)
. "$ROOT/bench/lib.sh"

if [ "$(id -u)" != 0 ]; then
	echo "make bench needs root: it creates network namespaces and a shaped veth link (bench/link.sh) and mounts FUSE file systems. Run it as root." >&2
	exit 2
fi
tools="rsync nsenter ip tc python3 fusermount3 /usr/bin/time openssl curl"
# the peers' own tools and the chart only when the peers run
[ -n "$PEERS" ] && tools="$tools rclone casync nginx zstd gnuplot"
for t in $tools; do
	command -v "$t" >/dev/null || { echo "make bench: '$t' is missing (make bench installs the bench packages; see BENCH_PKGS in the Makefile)" >&2; exit 2; }
done
for rtt in $RTTS; do
	[ "$rtt" = 0 ] || [ -x "$RTTPROXY" ] ||
		{ echo "make bench: $RTTPROXY is missing (RTTS=\"$RTTS\" needs it); make bench builds it (make build/release/bench/rttproxy)" >&2; exit 2; }
done
for p in ferry-replicator ferry-hydrator ferry; do
	[ -x "$B/bin/$p" ] || { echo "make bench: $B/bin/$p is missing; build first (make all)" >&2; exit 2; }
done

mkdir -p "$OUT" "$WORK/run" "$WORK/mnt" "$WORK/dst"
STARTED=$(date -u '+%Y-%m-%d %H:%M')
RUN=$WORK/run


# ---------------------------------------------------------------- dataset
# The tree, its 5%-changed twin and their manifests, made by peers.sh (so
# both sides of the comparison read the very same tree, and the peers'
# runs reuse it): gen_tree.py --scale small --seed 1, made again only
# when that changes.
prepare_dataset() {
	WORKDIR=$WORK SCALE=small FILES= SEED=1 MUTATE=5 bash "$ROOT/bench/peers.sh" --prepare || exit 1
	TREE=$WORK/src/tree
	TREE_BYTES=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/src/tree.summary.json")
	LARGE_REL=checkpoints/llm-7b-sim/v3/$(ls "$TREE/checkpoints/llm-7b-sim/v3" | grep 'safetensors$' | sort | tail -n1)
	SMALL_REL=$(cd "$TREE" && find dataset -type f -name '*.jpg' | sort | awk '{a[NR]=$0} END{print a[int((NR+1)/2)]}')
	LARGE_SIZE=$(stat -c %s "$TREE/$LARGE_REL")
	SMALL_SIZE=$(stat -c %s "$TREE/$SMALL_REL")
	log "tree: $TREE_BYTES bytes; large=$LARGE_REL small=$SMALL_REL"
}

# ---------------------------------------------------------------- peers
run_peers() {
	local rtt runs
	for rtt in $RTTS; do
		runs=$RUNS
		[ "$rtt" = 0 ] || runs=$RTT_RUNS
		log "peers ($PEERS) at $RATE, ${rtt} ms RTT, $runs run(s): bench/peers.sh"
		rm -rf "$OUT/peers-rtt$rtt"
		WORKDIR=$WORK RES=$OUT/peers-rtt$rtt RATES=$RATE RUNS=$runs RTT_MS=$rtt \
			SCALE=small FILES= SEED=1 MUTATE=5 APPROACHES="$PEERS" \
			bash "$ROOT/bench/peers.sh" "$B" >"$OUT/peers-rtt$rtt.table" ||
			log "bench/peers.sh failed at ${rtt} ms RTT (see $OUT/peers-rtt$rtt.table)"
	done
}

# ---------------------------------------------------------------- ferry
emit() { python3 "$ROOT/bench/emit.py" "$@" >>"$RES"; }

# start_replicator: scan the tree into a fresh state dir inside netns src.
start_replicator() {
	rm -rf "$WORK/ferry-state"
	local t0 t1 i
	: >"$RUN/repl.log"
	t0=$(now)
	$NSS "$B/bin/ferry-replicator" -l "$SRC_IP:$PORT" -s "$WORK/ferry-state" tree="$TREE" >>"$RUN/repl.log" 2>&1 &
	REPL_PID=$!
	for i in $(seq 1 1200); do
		grep -q ' ready' "$RUN/repl.log" && break
		kill -0 "$REPL_PID" 2>/dev/null || { cat "$RUN/repl.log" >&2; log "ferry-replicator exited"; exit 1; }
		sleep 0.05
	done
	t1=$(now)
	grep -q ' ready' "$RUN/repl.log" || { log "ferry-replicator not ready after 60 s"; exit 1; }
	SCAN_S=$(dt "$t0" "$t1")
	log "$(grep ' ready' "$RUN/repl.log")"
}

# prepare_tls: a CA and a server certificate for the replicator's address
# (and 127.0.0.1, where the RTT proxy listens), made once.
prepare_tls() {
	local d=$WORK/tls
	TLS_CA=$d/ca.pem TLS_CERT=$d/srv.pem TLS_KEY=$d/srv.key
	[ -s "$TLS_CERT" ] && openssl x509 -checkend 86400 -noout -in "$TLS_CERT" >/dev/null && return 0
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/ca.key" \
		-out "$TLS_CA" -days 365 -subj "/CN=ferry bench CA" 2>/dev/null &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$TLS_KEY" \
			-out "$d/srv.csr" -subj "/CN=$SRC_IP" 2>/dev/null &&
		printf 'subjectAltName=IP:%s,IP:127.0.0.1\n' "$SRC_IP" >"$d/ext" &&
		openssl x509 -req -in "$d/srv.csr" -CA "$TLS_CA" -CAkey "$d/ca.key" -CAcreateserial \
			-days 365 -extfile "$d/ext" -out "$TLS_CERT" 2>/dev/null ||
		{ log "openssl could not make the bench certificates"; exit 1; }
}

# start_replicator_tls: a second replicator, over https, on its own port
# and state dir (started with the plain one, so it has walked and hashed
# by the time its row runs).
start_replicator_tls() {
	local i
	rm -rf "$WORK/ferry-state-tls"
	: >"$RUN/repl-tls.log"
	$NSS "$B/bin/ferry-replicator" -l "$SRC_IP:$PORT_TLS" -s "$WORK/ferry-state-tls" \
		--tls-cert "$TLS_CERT" --tls-key "$TLS_KEY" tree="$TREE" >>"$RUN/repl-tls.log" 2>&1 &
	REPL_TLS_PID=$!
	for i in $(seq 1 1200); do
		grep -q ' ready' "$RUN/repl-tls.log" && return 0
		kill -0 "$REPL_TLS_PID" 2>/dev/null || { cat "$RUN/repl-tls.log" >&2; log "ferry-replicator (https) exited"; exit 1; }
		sleep 0.05
	done
	log "ferry-replicator (https) not ready after 60 s"
	exit 1
}

# start_proxy RTT_MS: with RTT_MS > 0 the clients reach both replicators
# through rttproxy (RTT_MS / 2 each way) in the dst netns; back once it
# says ready for both.
start_proxy() {
	local rtt=$1 half i
	if [ "$rtt" = 0 ]; then
		URL=http://$SRC_IP:$PORT/v1/tree
		URL_TLS=https://$SRC_IP:$PORT_TLS/v1/tree
		return
	fi
	half=$(python3 -c "import sys; print('%g' % (float(sys.argv[1]) / 2))" "$rtt")
	: >"$RUN/rttproxy.log"
	$NSD "$RTTPROXY" "127.0.0.1:$PROXY_PORT" "$SRC_IP:$PORT" "$half" \
		"127.0.0.1:$PROXY_PORT_TLS" "$SRC_IP:$PORT_TLS" >"$RUN/rttproxy.log" 2>&1 &
	PROXY_PID=$!
	for i in $(seq 1 100); do
		[ "$(grep -c '^rttproxy: ready' "$RUN/rttproxy.log")" -ge 2 ] && break
		kill -0 "$PROXY_PID" 2>/dev/null || { log "rttproxy exited: $(cat "$RUN/rttproxy.log")"; exit 1; }
		sleep 0.05
	done
	[ "$(grep -c '^rttproxy: ready' "$RUN/rttproxy.log")" -ge 2 ] || { log "rttproxy not ready after 5 s"; exit 1; }
	URL=http://127.0.0.1:$PROXY_PORT/v1/tree
	URL_TLS=https://127.0.0.1:$PROXY_PORT_TLS/v1/tree
}

stop_servers() {
	[ -n "$PROXY_PID" ] && { kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; }
	[ -n "$REPL_PID" ] && { kill "$REPL_PID" 2>/dev/null; wait "$REPL_PID" 2>/dev/null; }
	[ -n "$REPL_TLS_PID" ] && { kill "$REPL_TLS_PID" 2>/dev/null; wait "$REPL_TLS_PID" 2>/dev/null; }
	PROXY_PID= REPL_PID= REPL_TLS_PID=
}

# cpu_s PID: user + system CPU seconds of a running process so far
# (/proc/PID/stat fields 14 and 15, in clock ticks).
cpu_s() {
	awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz}' "/proc/$1/stat"
}

# hyd_mount CACHE MNT: a fresh cache, the hydrator in the dst netns with its
# defaults (backfill on). It returns once the tree is browsable. Sets T0.
hyd_mount() {
	local cache=$1 mnt=$2
	rm -rf "$cache"
	mkdir -p "$mnt"
	T0=$(now)
	$NSD "$B/bin/ferry-hydrator" $HYD_OPTS -c "$cache" "$URL" "$mnt" 2>>"$RUN/hyd.err" || return 1
	MNT_ACTIVE=$mnt
}

# hyd_umount CACHE MNT: note the daemon's peak RSS (kB), unmount, wait for it.
hyd_umount() {
	local cache=$1 mnt=$2 pid
	pid=$(cat "$cache/hydrator.pid" 2>/dev/null)
	HWM=NA
	[ -n "$pid" ] && HWM=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)
	umount_wait "$mnt" "$pid"
}

first_byte() {  # REL -> FB (s from mount start, mount included), FBW (wire bytes)
	local rel=$1 cache=$WORK/dst/ferry-fb mnt=$WORK/mnt/ferry-fb w0
	w0=$(wire)
	if ! hyd_mount "$cache" "$mnt"; then FB=NA FBW=NA; return 1; fi
	head -c1 "$mnt/$rel" >/dev/null
	FB=$(dt "$T0" "$(now)")
	FBW=$(($(wire) - w0))
	hyd_umount "$cache" "$mnt"
}

# verdicts DIR: peers_lib.py's verdict (the peers' "correct" column) and the
# stricter treecmp (ns mtimes, owners, nlink, xattrs, hard-link structure,
# bytes) against the source tree itself.
verdicts() {
	local dir=$1
	VERDICT=$($LIB compare "$WORK/src/tree.manifest.json" "$dir")
	if $TREECMP --content "$TREE" "$dir" >"$RUN/treecmp.out" 2>&1; then
		STRICT=true
	else
		STRICT=false
		log "treecmp: $(head -n3 "$RUN/treecmp.out" | tr '\n' ' ')"
	fi
}

# restart_replicator: stop it and start it again on a fresh state dir (the
# proxy, if any, keeps running: it connects per client connection). Sets
# T_SRC to the moment it was started.
restart_replicator() {
	[ -n "$REPL_PID" ] && { kill "$REPL_PID" 2>/dev/null; wait "$REPL_PID" 2>/dev/null; }
	REPL_PID=
	T_SRC=$(now)
	start_replicator
}

# wait_hashed: until the replicator's background hashing is done (so the
# runs after ferry_start see the same replicator the others always saw).
wait_hashed() {  # [BASE_URL CURL_OPTS...]: the plain replicator by default
	local base=${1:-http://$SRC_IP:$PORT/v1/tree}
	[ $# -gt 0 ] && shift
	until_hashed "$NSD" "$base" 600 "$@" >/dev/null ||
		log "replicator still hashing after 60 s"
}

# ferry_start: what a user sees from the moment the replicator starts on a
# source it has never seen (fresh state dir: the walk and the catalog are
# included; hashing runs in the background as it does by default). Three
# replicator starts per run: one for browse (ls -lR of a fresh mount) and
# then the whole tree read through the mount (tar), one for the first byte
# of the large file, one for the small one. Next to rsync, whose times
# include its own start-up (its file list).
bench_ferry_start() {
	local label=$1 run=$2 cache=$WORK/dst/ferry-start mnt=$WORK/mnt/ferry-start
	local browse fbL fbS full w0 w1 nbytes scan rss what
	w0=$(wire)
	restart_replicator
	scan=$SCAN_S
	hyd_mount "$cache" "$mnt" || { emit ferry_start "$label" "$run" error=mount_failed; return 1; }
	ls -lR "$mnt" >"$RUN/ferry-start.lslR" 2>&1
	browse=$(dt "$T_SRC" "$(now)")
	nbytes=$(tar -C "$mnt" -cf - . 2>"$RUN/ferry-start.tar.err" | wc -c)
	full=$(dt "$T_SRC" "$(now)")
	w1=$(wire)
	verdicts "$mnt"
	hyd_umount "$cache" "$mnt"
	rss=$HWM
	for what in large small; do
		local rel=$LARGE_REL
		[ $what = small ] && rel=$SMALL_REL
		restart_replicator
		hyd_mount "$cache" "$mnt" || { emit ferry_start "$label" "$run" error=mount_failed; return 1; }
		head -c1 "$mnt/$rel" >/dev/null
		if [ $what = large ]; then fbL=$(dt "$T_SRC" "$(now)"); else fbS=$(dt "$T_SRC" "$(now)"); fi
		hyd_umount "$cache" "$mnt"
	done
	wait_hashed
	emit ferry_start "$label" "$run" browse_s="$browse" fb_large_s="$fbL" fb_small_s="$fbS" \
		full_s="$full" tar_bytes="$nbytes" wire_bytes=$((w1 - w0)) tree_bytes="$TREE_BYTES" \
		peak_rss_kb="$rss" verdict="$VERDICT" strict_ok="$STRICT" scan_s="$scan"
	log "ferry_start@$label#$run scan=${scan}s browse=${browse}s fbL=$fbL fbS=$fbS full=${full}s strict=$STRICT"
}

bench_ferry_mount() {
	wait_hashed
	ferry_mount_run ferry_mount "$REPL_PID" "$@"
}

# The same over https: the second replicator, the hydrator trusting the
# bench's CA.
bench_ferry_mount_tls() {
	local URL=$URL_TLS HYD_OPTS="$HYD_OPTS --ca-file $TLS_CA"
	wait_hashed "https://$SRC_IP:$PORT_TLS/v1/tree" --cacert "$TLS_CA"
	ferry_mount_run ferry_mount_tls "$REPL_TLS_PID" "$@"
}

# ferry_mount_run APPROACH REPL_PID LABEL RUN: first bytes, then a mount
# read whole (ls -lR, tar); the replicator's CPU is counted from the
# mount's start to the tar's end.
ferry_mount_run() {
	local appr=$1 rpid=$2 label=$3 run=$4 cache=$WORK/dst/ferry-cache mnt=$WORK/mnt/ferry
	local fbL fbS fbLw fbSw w0 wls browse full tread entries nbytes tr0 status cpu0 cpu
	first_byte "$LARGE_REL"; fbL=$FB fbLw=$FBW
	first_byte "$SMALL_REL"; fbS=$FB fbSw=$FBW
	cpu0=$(cpu_s "$rpid")
	w0=$(wire)
	hyd_mount "$cache" "$mnt" || { emit "$appr" "$label" "$run" error=mount_failed; return 1; }
	local mount_s; mount_s=$(dt "$T0" "$(now)")
	ls -lR "$mnt" >"$RUN/ferry.lslR" 2>"$RUN/ferry.lslR.err"
	browse=$(dt "$T0" "$(now)")
	wls=$(($(wire) - w0))
	entries=$(find "$mnt" -mindepth 1 | wc -l)
	tr0=$(now)
	nbytes=$(tar -C "$mnt" -cf - . 2>"$RUN/ferry.tar.err" | wc -c)
	full=$(dt "$T0" "$(now)")
	tread=$(dt "$tr0" "$(now)")
	local w1; w1=$(wire)
	cpu=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$cpu0" "$(cpu_s "$rpid")")
	status=$("$B/bin/ferry" status "$cache" --json 2>/dev/null)
	verdicts "$mnt"
	hyd_umount "$cache" "$mnt"
	emit "$appr" "$label" "$run" mount_s="$mount_s" browse_s="$browse" browse_entries="$entries" \
		ls_wire_bytes="$wls" fb_large_s="$fbL" fb_small_s="$fbS" fb_large_wire="$fbLw" fb_small_wire="$fbSw" \
		full_s="$full" read_s="$tread" tar_bytes="$nbytes" wire_bytes=$((w1 - w0)) \
		tree_bytes="$TREE_BYTES" peak_rss_kb="$HWM" dest_bytes="$(du -sb "$cache" | cut -f1)" \
		verdict="$VERDICT" strict_ok="$STRICT" ferry_status="$status" scan_s="$SCAN_S" \
		repl_cpu_s="$cpu" repl_cpu_s_per_gb="$(python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / (int(sys.argv[2]) / 1e9)))" "$cpu" $((w1 - w0)))"
	log "$appr@$label#$run browse=${browse}s fbL=$fbL fbS=$fbS full=${full}s wire=$((w1 - w0)) replicator_cpu=${cpu}s strict=$STRICT"
}

bench_ferry_sync() {
	local label=$1 run=$2 cache=$WORK/dst/ferry-sync-cache dest=$WORK/dst/ferry-sync
	local w0 t0 t1 rc pL pS fbL fbS
	rm -rf "$cache" "$dest"
	w0=$(wire)
	t0=$(now)
	$LIB waitfile "$dest/$LARGE_REL" "$LARGE_SIZE" "$t0" >"$RUN/fbL" &
	pL=$!
	$LIB waitfile "$dest/$SMALL_REL" "$SMALL_SIZE" "$t0" >"$RUN/fbS" &
	pS=$!
	$NSD /usr/bin/time -f %M -o "$RUN/sync.rss" "$B/bin/ferry" sync -q $SYNC_OPTS --cache-dir "$cache" "$URL" "$dest" >"$RUN/sync.log" 2>&1
	rc=$?
	t1=$(now)
	local w1; w1=$(wire)
	sleep 0.05
	kill "$pL" "$pS" 2>/dev/null
	wait "$pL" "$pS" 2>/dev/null
	fbL=$(cat "$RUN/fbL"); fbS=$(cat "$RUN/fbS")
	verdicts "$dest"
	local full; full=$(dt "$t0" "$t1")
	emit ferry_sync "$label" "$run" rc=$rc browse_s="$full" fb_large_s="${fbL:-NA}" fb_small_s="${fbS:-NA}" \
		full_s="$full" wire_bytes=$((w1 - w0)) tree_bytes="$TREE_BYTES" \
		peak_rss_kb="$(tail -n1 "$RUN/sync.rss" | tr -dc 0-9)" dest_bytes="$(du -sb "$dest" | cut -f1)" \
		verdict="$VERDICT" strict_ok="$STRICT" scan_s="$SCAN_S"
	log "ferry_sync@$label#$run rc=$rc full=${full}s fbL=$fbL fbS=$fbS wire=$((w1 - w0)) strict=$STRICT"
}

run_ferry() {
	local rtt runs run a label
	for rtt in $RTTS; do
		runs=$RUNS
		[ "$rtt" = 0 ] || runs=$RTT_RUNS
		label=$RATE
		[ "$rtt" = 0 ] || label=$RATE+rtt${rtt}ms
		log "ferry ($FERRY) at $label, $runs run(s)"
		"$LINK" up "$RATE" >&2 || exit 1
		start_replicator
		case " $FERRY " in *" ferry_mount_tls "*) start_replicator_tls ;; esac
		start_proxy "$rtt"
		for run in $(seq 1 "$runs"); do
			for a in $FERRY; do
				"bench_$a" "$label" "$run"
			done
		done
		stop_servers
		"$LINK" down >&2
	done
}

prepare_dataset
prepare_tls
: >"$RES"
[ -n "$PEERS" ] && run_peers
run_ferry
if [ "${UPDATE:-1}" = 1 ]; then
	BENCH_OUT=$OUT RES=$RES RATE=$RATE bash "$ROOT/bench/update.sh" "$B" ||
		log "bench/update.sh failed"
fi
if [ "${SEED:-1}" = 1 ]; then
	BENCH_OUT=$OUT RES=$RES RATE=$RATE bash "$ROOT/bench/seed.sh" "$B" ||
		log "bench/seed.sh failed"
fi
if [ "${SSH:-1}" = 1 ]; then
	BENCH_OUT=$OUT RES=$RES bash "$ROOT/bench/ssh_ttfb.sh" "$B" ||
		log "bench/ssh_ttfb.sh failed"
fi
MEDIUM_RATE=${MEDIUM_RATE:-1gbit}
if [ "${MEDIUM:-1}" = 1 ]; then
	BENCH_OUT=$OUT RES=$RES MEDIUM_RATE=$MEDIUM_RATE bash "$ROOT/bench/medium.sh" "$B" ||
		log "bench/medium.sh failed"
fi
if [ "${REGION:-1}" = 1 ]; then
	RES=$RES bash "$ROOT/bench/s3.sh" "$B" >"$OUT/s3.table" ||
		log "bench/s3.sh failed"
	RES=$RES bash "$ROOT/bench/cache.sh" "$B" >"$OUT/cache.table" ||
		log "bench/cache.sh failed"
fi
if [ "${TTS:-1}" = 1 ]; then
	# its own link (namespaces and addresses of its own)
	OUT=$OUT MATRIX=${TTS_MATRIX:-${MATRIX:-}} NS_SRC=tts-src NS_DST=tts-dst \
		IF_SRC=tts-s IF_DST=tts-d bash "$ROOT/bench/tts.sh" "$B" ||
		log "bench/tts.sh failed"
fi
if [ "${KV:-1}" = 1 ]; then
	# its own link (namespaces and addresses of its own)
	RES=$RES OUT=$OUT bash "$ROOT/bench/kv.sh" "$B" >"$OUT/kv.table" ||
		log "bench/kv.sh failed"
fi
if [ "${EVICT:-1}" = 1 ]; then
	RES=$RES OUT=$OUT/evict.table bash "$ROOT/bench/evict.sh" "$B" >/dev/null ||
		log "bench/evict.sh failed"
fi
{
	echo "date: $(date -u +%FT%TZ)"
	uname -sr
	echo "nproc: $(nproc)"
	"$B/bin/ferry" --version 2>&1 | head -1
	rsync --version | head -1
	rclone version 2>/dev/null | head -1
	casync --version 2>/dev/null | head -n 1
	openssl version
} >"$OUT/versions.txt"
python3 "$ROOT/bench/report.py" --out "$OUT" --rate "$RATE" --medium-rate "$MEDIUM_RATE" \
	"$RES" "$OUT"/peers-rtt*/results.jsonl || exit 1
if [ "${TTS:-1}" = 1 ] && [ -s "$OUT/tts.md" ]; then
	{
		echo
		echo "### Time to serve across a WAN (bench/tts.sh)"
		echo
		cat "$OUT/tts.md"
	} >>"$OUT/bench.md"
fi
if [ "${EVICT:-1}" = 1 ] && [ -s "$OUT/evict.table" ]; then
	{
		echo
		echo "### A store under --cache-max (bench/evict.sh, loopback)"
		echo
		cat "$OUT/evict.table"
	} >>"$OUT/bench.md"
fi

# The dated record: bench.md under a heading with the time and the commit
# (and what was reduced, when something was), appended to the results log.
LOGF=${RESULTS_LOG-$ROOT/docs/results-log.md}
if [ -n "$LOGF" ] && [ -s "$OUT/bench.md" ]; then
	[ -f "$LOGF" ] || echo "# make bench results" >"$LOGF"
	sha=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
	dirty=
	[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && dirty=", uncommitted changes on top"
	{
		echo
		echo "## $STARTED UTC — make bench, commit $sha"
		echo
		echo "RATE=$RATE RTTS=\"$RTTS\" RUNS=$RUNS RTT_RUNS=$RTT_RUNS PEERS=\"$PEERS\"" \
			"UPDATE=${UPDATE:-1} SEED=${SEED:-1} SSH=${SSH:-1} MEDIUM=${MEDIUM:-1} REGION=${REGION:-1} TTS=${TTS:-1} KV=${KV:-1} EVICT=${EVICT:-1}; $(nproc) cores, $(uname -r)$dirty."
		echo
		cat "$OUT/bench.md"
	} >>"$LOGF"
	log "appended the table to $LOGF"
fi
