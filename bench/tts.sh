#!/usr/bin/env bash
# bench/tts.sh BUILD_DIR — "time to serve": at a new region a job starts on
# a cold ferry mount; how long until the job is done, against copying just
# what it needs with rsync first and then running it, across a WAN (tbf on
# a veth between two network namespaces, bench/link.sh; the round trip by
# bench/rttproxy in the destination's namespace).
#
# The tree is bench/tts_gen.py's (a 4-shard safetensors model, 3,000
# training samples, 2,000 Python sources, a 2 GiB blob); the jobs are
# bench/tts_job.py's, each on its own subtree:
#   model  models/llm   headers read, then every shard mmapped and every
#                       tensor touched in offset order
#   epoch  data/train   every sample, shuffled, read whole by 8 threads
#   walk   src/pkg      os.walk, stat and read every .py, one thread
#   cat    big/blob-2g.bin  read in 1 MiB reads (only where CAT_AT says)
# For each (rate, RTT) of the matrix and each job, RUNS times each:
#   ferry  a fresh cache; ferry-hydrator (default options: backfill on) in
#          the destination's namespace mounts http://127.0.0.1:PROXY/v1/tts
#          (the replicator serves the whole tree as namespace tts, started
#          once per rate, published and fully hashed before any timing);
#          timed from just before the hydrator starts to the job's end on
#          MNT/<subtree>; then ferry status --json, unmount, the daemon's
#          exit awaited (its log must end in "exit status=0")
#   rsync  rsync -a rsync://127.0.0.1:PROXY/tts/<subtree>/ into an empty
#          directory (an rsync daemon in the source's namespace), timed,
#          then the same job on the copy, timed
#   floor  the bytes the job reads / the link's rate (tbf's RATE)
# The blob is part of the served tree: every mount's backfill (on by
# default) has the whole 2.7 GB to fetch beside the job's reads, as a
# mount of a tree larger than what its first job needs does (BIG=0: 0.6
# GB, and the jobs' numbers change with it).
# Every job's report (files, bytes) must match the tree's and show no
# error, or the row is FAIL. Targets (bench/tts_report.py prints PASS or
# MISS): ferry <= 1.0x rsync-then-job and <= 1.5x the floor at the RTTs of
# TARGET_RTTS; the cat >= 80% of the link rate. Before each timed step:
# sync, drop the page cache, read the job's source subtree back (both
# servers read it from memory), 1 s (SETTLE=0: none of it). Each (rate,
# RTT) first measures what the link holds through the proxy
# (bench/tts_probe.py: 1 and 4 bulk streams), reported beside the rows.
#
# Out: OUT/tts.json (one object per row), OUT/tts.md (the table), a
# summary line on stdout; every run's record in WORK/runs.jsonl (with
# launch_s, the job's launch to its first line of Python, and own_s, its
# time from there: ferry's seconds = mount_s + launch_s + own_s, about)
# and its logs in WORK/logs/. Needs root (namespaces, tbf, FUSE), rsync, nsenter,
# ip, tc, python3, fusermount3 (and gcc when BUILD_DIR has no
# bench/rttproxy).
#
# Knobs (environment):
#   MATRIX ["1gbit:20 1gbit:50 1gbit:100 10gbit:50"]  RATE:RTT_MS pairs
#   RATES, RTTS           instead of MATRIX: every RATE with every RTT
#                         (RATES [1gbit], RTTS ["20 50 100"] when only the
#                         other is given)
#   JOBS ["model epoch walk cat"]
#   CAT_AT ["1gbit:50"]   the pairs where the cat row runs (BIG=1 only)
#   TOOLS ["ferry rsync trace"]  what is timed (the floor is always
#                         there); trace: the job again on a fresh cache
#                         with --prefetch of the trace the job's ferry run
#                         left (ferry trace export of its cache; without a
#                         ferry run an untimed rehearsal first), not for
#                         the cat
#   RUNS [1]              runs of each; the median is reported
#   SCALE [full]          tts_gen.py --scale (full, small, tiny or a number)
#   BIG [1]               generate big/blob-2g.bin (0: no cat row)
#   SEED [1]              the tree's seed
#   TARGET_RTTS ["20 50 100"]  where the 1.0x / 1.5x targets apply (other
#                         RTTs get "-": measured, not judged)
#   HYD_OPTS [""]         extra ferry-hydrator options
#   SOURCE_NICE [19]      the nice of the source's servers (the replicator,
#                         the rsync daemon). Source and destination share
#                         this machine's CPUs; a source has its own. At 19
#                         a server takes the CPU the destination's job and
#                         ferry-hydrator leave, which is as near to a
#                         machine of its own as one machine gets (0: a
#                         replicator serving backfill took 0.3-0.4 of a
#                         core from the job's session, 2026-12-07)
#   INTO [0]              1: every ferry run mounts with --into a DIR of
#                         its own, made empty before it (the job beside
#                         a landing); DIR is removed after the run
#   SETTLE [1]            drop caches and settle before each timed step
#   PROBE [1]             measure the link at each (rate, RTT)
#   EXIT_WAIT [30]        seconds the hydrator gets to exit after the
#                         unmount before it is sent SIGTERM (recorded)
#   JOB_TIMEOUT [3600]    seconds a mount, a job or an rsync may take; one
#                         that takes longer is killed and its row is FAIL
#   WORK [build/bench/tts]  tree (made again when SCALE, SEED or BIG
#                         change), replicator state, copies, logs
#   OUT [build/bench]     where tts.json and tts.md go
#   NS_SRC [tts-src] NS_DST [tts-dst] IF_SRC [tts-s] IF_DST [tts-d]
#   IP_SRC [10.99.77.1] IP_DST [10.99.77.2]  the link (bench/link.sh)
#   TTS_TIMELINE [unset]  a file: each job run writes there when each of
#                         its files' reads began and how long it took (ms
#                         since the job's interpreter was up), and an "L"
#                         line: seconds from the job's launch to that
#                         point (a diagnostic of where a job waits; the
#                         last run's wins)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/tts.sh BUILD_DIR}" && pwd) || exit 2
WORK=${WORK:-$ROOT/build/bench/tts}
OUT=${OUT:-$ROOT/build/bench}
if [ -n "${RATES:-}${RTTS:-}" ]; then
	MATRIX=
	for r in ${RATES:-1gbit}; do
		for t in ${RTTS:-20 50 100}; do MATRIX="$MATRIX $r:$t"; done
	done
else
	MATRIX=${MATRIX:-"1gbit:20 1gbit:50 1gbit:100 10gbit:50"}
fi
JOBS=${JOBS:-"model epoch walk cat"}
CAT_AT=${CAT_AT:-"1gbit:50"}
TOOLS=${TOOLS:-"ferry rsync trace"}
RUNS=${RUNS:-1}
SCALE=${SCALE:-full}
BIG=${BIG:-1}
SEED=${SEED:-1}
TARGET_RTTS=${TARGET_RTTS:-"20 50 100"}
HYD_OPTS=${HYD_OPTS:-}
SOURCE_NICE=${SOURCE_NICE:-19}
INTO=${INTO:-0}
SETTLE=${SETTLE:-1}
PROBE=${PROBE:-1}
EXIT_WAIT=${EXIT_WAIT:-30}
JOB_TIMEOUT=${JOB_TIMEOUT:-3600}
# The link's namespaces, veth ends and addresses (link.sh reads the same
# variables); names of our own, so other runs can share the machine.
export NS_SRC=${NS_SRC:-tts-src} NS_DST=${NS_DST:-tts-dst} IF_SRC=${IF_SRC:-tts-s} IF_DST=${IF_DST:-tts-d}
export IP_SRC=${IP_SRC:-10.99.77.1} IP_DST=${IP_DST:-10.99.77.2}
NSS="nsenter --net=/run/netns/$NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
LINK=$ROOT/bench/link.sh
GEN=$ROOT/bench/tts_gen.py
JOB=$ROOT/bench/tts_job.py
PROBE_PY=$ROOT/bench/tts_probe.py
REPORT=$ROOT/bench/tts_report.py
# source side: replicator, rsync daemon, probe server; destination side:
# one rttproxy with a port for each
REPL_PORT=7480 RSYNC_PORT=7481 PROBE_PORT=7482
P_REPL=7490 P_RSYNC=7491 P_PROBE=7492
URL=http://127.0.0.1:$P_REPL/v1/tts
TREE=$WORK/tree
MNT=$WORK/mnt
LOGS=$WORK/logs
RES=$WORK/runs.jsonl
TRACES=$WORK/traces

log() { echo "[$(date +%H:%M:%S)] tts: $*" >&2; }
now() { date +%s.%N; }
dt() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
wire() { local s; s=$("$LINK" stats 2>/dev/null) || { echo 0; return; }; echo $((${s% *} + ${s#* })); }
jget() { # FILE KEY: a top-level field of a one-line JSON file ("" if none)
	python3 -c "import json,sys
try: v = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], '')
except Exception: v = ''
print('' if v is None else v)" "$1" "$2"
}
emit() { # KEY=VALUE...: one record to RES (numbers stay numbers)
	python3 -c "import json,sys
r = {}
for a in sys.argv[1:]:
    k, _, v = a.partition('=')
    try: r[k] = int(v)
    except ValueError:
        try: r[k] = float(v)
        except ValueError: r[k] = v
print(json.dumps(r))" "$@" >>"$RES"
}

# ------------------------------------------------------------ preflight
if [ "$(id -u)" != 0 ]; then
	echo "bench/tts.sh needs root: it creates network namespaces and a shaped veth link (bench/link.sh) and mounts FUSE file systems." >&2
	exit 2
fi
for t in rsync nsenter ip tc python3 fusermount3 mountpoint timeout; do
	command -v "$t" >/dev/null || { echo "bench/tts.sh: '$t' is missing (Debian: apt-get install rsync util-linux iproute2 python3 fuse3)" >&2; exit 2; }
done
for p in ferry-replicator ferry-hydrator ferry; do
	[ -x "$B/bin/$p" ] || { echo "bench/tts.sh: $B/bin/$p is missing; build first (make VARIANT=release all)" >&2; exit 2; }
done
for f in "$LINK" "$GEN" "$JOB" "$PROBE_PY" "$REPORT"; do
	[ -f "$f" ] || { echo "bench/tts.sh: $f is missing" >&2; exit 2; }
done
case " $TOOLS " in *" ferry "* | *" rsync "* | *" trace "*) ;; *) echo "bench/tts.sh: TOOLS='$TOOLS' names none of ferry, rsync, trace" >&2; exit 2 ;; esac
for m in $MATRIX; do
	[[ $m =~ ^[0-9]+[kmgKMG]?(bit|bps):[0-9]+(\.[0-9]+)?$ ]] ||
		{ echo "bench/tts.sh: cannot read '$m' in MATRIX (RATE:RTT_MS, e.g. 1gbit:50)" >&2; exit 2; }
done
[ -n "$MATRIX" ] || { echo "bench/tts.sh: empty matrix" >&2; exit 2; }
mkdir -p "$WORK" "$OUT" "$LOGS" || exit 2
# the round-trip injector: make's (BUILD_DIR/bench/rttproxy), else built here
RTTPROXY=$B/bench/rttproxy
if [ ! -x "$RTTPROXY" ]; then
	RTTPROXY=$WORK/rttproxy
	if [ ! -x "$RTTPROXY" ] || [ "$ROOT/bench/rttproxy.c" -nt "$RTTPROXY" ]; then
		command -v gcc >/dev/null || { echo "bench/tts.sh: $B/bench/rttproxy is missing and there is no gcc to build it" >&2; exit 2; }
		log "building $RTTPROXY from bench/rttproxy.c ($B/bench/rttproxy is missing)"
		gcc -O2 -D_GNU_SOURCE -o "$RTTPROXY" "$ROOT/bench/rttproxy.c" -lpthread -lm ||
			{ echo "bench/tts.sh: cannot build rttproxy" >&2; exit 2; }
	fi
fi

# The jobs run on the interpreter itself, not through a wrapper that may
# stand first in PATH (a version manager's shim is a few shell scripts:
# 0.1-0.3 s of CPU before the job, timed, on two cores the servers share)
JOB_PY=$(python3 -c 'import sys; print(sys.executable)') && [ -x "$JOB_PY" ] || JOB_PY=$(command -v python3)

# ------------------------------------------------------------ cleanup
REPL_PID='' RSYNCD_PID='' PROXY_PID='' PROBE_PID='' MNT_ACTIVE='' HYD_CACHE=''
stop_pid() { # PID: SIGTERM, wait up to 10 s, then SIGKILL
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || return 0
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}
stop_link_side() { # everything that lives in the namespaces
	stop_pid "$PROXY_PID"
	stop_pid "$PROBE_PID"
	stop_pid "$RSYNCD_PID"
	stop_pid "$REPL_PID"
	PROXY_PID='' PROBE_PID='' RSYNCD_PID='' REPL_PID=''
}
tts_cleanup() {
	if [ -n "$MNT_ACTIVE" ] && mountpoint -q "$MNT_ACTIVE"; then
		fusermount3 -u "$MNT_ACTIVE" 2>/dev/null || fusermount3 -u -z "$MNT_ACTIVE" 2>/dev/null
	fi
	[ -n "$HYD_CACHE" ] && stop_pid "$(cat "$HYD_CACHE/hydrator.pid" 2>/dev/null)"
	stop_link_side
	"$LINK" down >/dev/null 2>&1
	rm -rf "$WORK/dst"
}
trap tts_cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ the tree
# Made again only when its parameters change (tree.json records them).
prepare_tree() {
	local have
	have=$(python3 -c "import json,sys
try: s = json.load(open(sys.argv[1])); print('%s/%s/%d/%s' % (s['scale'], s['seed'], s['big'], s['version']))
except Exception: print('')" "$WORK/tree.json" 2>/dev/null)
	if [ -d "$TREE" ] && [ "${have%/*}" = "$SCALE/$SEED/$([ "$BIG" = 1 ] && echo 1 || echo 0)" ] &&
		[ "${have##*/}" = "$(python3 -c "import importlib.util as u, sys
s = u.spec_from_file_location('g', sys.argv[1]); m = u.module_from_spec(s); s.loader.exec_module(m); print(m.VERSION)" "$GEN")" ]; then
		log "tree: $TREE (scale $SCALE, seed $SEED, big $BIG) is there"
	else
		log "tree: generating $TREE (scale $SCALE, seed $SEED, big $BIG)"
		rm -rf "$TREE" "$WORK/tree.json" "$WORK/repl-state"
		local big=
		[ "$BIG" = 1 ] && big=--big
		python3 "$GEN" "$TREE" --scale "$SCALE" --seed "$SEED" $big >"$WORK/tree.json.new" || { log "tts_gen.py failed"; exit 1; }
		tail -n1 "$WORK/tree.json.new" >"$WORK/tree.json" && rm -f "$WORK/tree.json.new"
	fi
	log "tree: $(python3 -c "import json,sys; s = json.load(open(sys.argv[1])); print('%d files, %.1f MB; ' % (s['files'], s['bytes'] / 1e6) + ', '.join('%s %s: %d files %.1f MB' % (k, v['dir'], v['files'], v['bytes'] / 1e6) for k, v in s['jobs'].items()))" "$WORK/tree.json")"
}
expect() { # JOB KEY: files, bytes, dir or file of JOB in the tree ("" if none)
	python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['jobs'].get(sys.argv[2], {}).get(sys.argv[3], ''))" "$WORK/tree.json" "$1" "$2"
}

# ------------------------------------------------------------ the link
# the replicator's /stats, asked directly in the source's namespace:
# "published" (it answers, generation >= 1) and its hashing state
repl_state() {
	$NSS python3 -c "import json,sys,urllib.request
try:
    s = json.load(urllib.request.urlopen(sys.argv[1], timeout=5))
except Exception:
    print('unpublished'); sys.exit()
h = s.get('hashing') or {}
st = h.get('state', '')
if s.get('generation', 0) < 1: print('unpublished')
elif st in ('none', 'done'): print('hashed')
elif st == 'stopped': print('stopped')
else: print('hashing %s/%s files %s/%s bytes' % (h.get('files_done'), h.get('files'), h.get('bytes_done'), h.get('bytes')))" \
		"http://$IP_SRC:$REPL_PORT/v1/tts/stats" 2>/dev/null
}

# start_servers: the replicator (state kept across rates: a restart walks,
# finds nothing changed and reads nothing) and the rsync daemon, in the
# source's namespace; returns once the tree is published and hashed.
start_servers() {
	local i st t0
	if [[ " $TOOLS " == *" ferry "* || " $TOOLS " == *" trace "* ]]; then
		mkdir -p "$WORK/repl-state"
		t0=$(now)
		$NSS nice -n "$SOURCE_NICE" "$B/bin/ferry-replicator" -l "$IP_SRC:$REPL_PORT" -s "$WORK/repl-state" tts="$TREE" \
			>>"$LOGS/replicator.log" 2>&1 &
		REPL_PID=$!
		st=
		for i in $(seq 1 36000); do # up to an hour: the full tree hashes in a minute or two
			kill -0 "$REPL_PID" 2>/dev/null || { tail -n 20 "$LOGS/replicator.log" >&2; log "the replicator died"; exit 1; }
			st=$(repl_state)
			case $st in hashed) break ;; stopped) log "the replicator's hashing stopped (see $LOGS/replicator.log)"; exit 1 ;; esac
			[ $((i % 100)) = 0 ] && log "replicator: $st"
			sleep 0.1
		done
		[ "$st" = hashed ] || { log "the replicator did not finish hashing: $st"; exit 1; }
		log "replicator: published and hashed in $(dt "$t0" "$(now)") s ($(grep ' ready' "$LOGS/replicator.log" | tail -n1 | sed 's/.*namespace ready //'))"
	fi
	if [[ " $TOOLS " == *" rsync "* ]]; then
		cat >"$WORK/rsyncd.conf" <<-EOF
			# bench/tts.sh: the tree for rsync://HOST:$RSYNC_PORT/tts/
			use chroot = no
			uid = 0
			gid = 0
			lock file = $WORK/rsyncd.lock
			log file = $LOGS/rsyncd.log
			[tts]
			path = $TREE
			read only = yes
		EOF
		$NSS nice -n "$SOURCE_NICE" rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --address="$IP_SRC" --port="$RSYNC_PORT" \
			>>"$LOGS/rsyncd.log" 2>&1 &
		RSYNCD_PID=$!
	fi
	if [ "$PROBE" = 1 ]; then
		$NSS python3 "$PROBE_PY" serve "$IP_SRC:$PROBE_PORT" >>"$LOGS/probe.log" 2>&1 &
		PROBE_PID=$!
	fi
	sleep 0.5
	[ -z "$RSYNCD_PID" ] || kill -0 "$RSYNCD_PID" 2>/dev/null || { tail -n 5 "$LOGS/rsyncd.log" >&2; log "the rsync daemon died"; exit 1; }
}

# start_proxy RTT_MS: rttproxy in the destination's namespace, a port per
# server, each byte held RTT/2 each way
start_proxy() {
	local ow i
	stop_pid "$PROXY_PID"
	PROXY_PID=
	ow=$(python3 -c "import sys; print('%g' % (float(sys.argv[1]) / 2))" "$1")
	: >"$LOGS/rttproxy.log"
	$NSD "$RTTPROXY" "127.0.0.1:$P_REPL" "$IP_SRC:$REPL_PORT" "$ow" \
		"127.0.0.1:$P_RSYNC" "$IP_SRC:$RSYNC_PORT" \
		"127.0.0.1:$P_PROBE" "$IP_SRC:$PROBE_PORT" >>"$LOGS/rttproxy.log" 2>&1 &
	PROXY_PID=$!
	for i in $(seq 1 100); do
		[ "$(grep -c 'rttproxy: ready' "$LOGS/rttproxy.log")" = 3 ] && return 0
		kill -0 "$PROXY_PID" 2>/dev/null || break
		sleep 0.05
	done
	cat "$LOGS/rttproxy.log" >&2
	log "rttproxy did not start"
	exit 1
}

# probe RATE RTT: what one stream and four hold through the proxy (about
# 3 s at the rate, at least 64 MiB)
probe() {
	local rate=$1 rtt=$2 bps n s out
	[ "$PROBE" = 1 ] || return 0
	bps=$(python3 "$REPORT" --bytes-per-s "$rate")
	n=$((bps * 3))
	[ "$n" -ge $((64 << 20)) ] || n=$((64 << 20))
	[ "$n" -le $((4 << 30)) ] || n=$((4 << 30))
	for s in 1 4; do
		out=$($NSD python3 "$PROBE_PY" pull "127.0.0.1:$P_PROBE" "$n" --streams "$s")
		emit kind=probe rate="$rate" rtt_ms="$rtt" streams="$s" bytes="$(echo "$out" | jget /dev/stdin bytes)" \
			seconds="$(echo "$out" | jget /dev/stdin seconds)" mbit="$(echo "$out" | jget /dev/stdin mbit)"
		log "link $rate ${rtt} ms: $s stream(s) held $(echo "$out" | jget /dev/stdin mbit) Mbit/s"
	done
}

# ------------------------------------------------------------ the runs
SEQ=0
fresh_dir() { # VAR NAME: VAR=$WORK/dst/NAME.SEQ, made empty
	SEQ=$((SEQ + 1))
	printf -v "$1" '%s' "$WORK/dst/$2.$SEQ"
	rm -rf "$WORK/dst/$2.$SEQ"
	mkdir -p "$WORK/dst/$2.$SEQ"
}
settle() { # SUBTREE: the same start for every timed step
	[ "$SETTLE" = 1 ] || return 0
	sync
	echo 3 >/proc/sys/vm/drop_caches
	find "$TREE/$1" -type f -exec cat {} + >/dev/null
	sleep 1
}
# check_job OUTFILE RC JOB: "ok" or what is wrong with the job's report
check_job() {
	python3 -c "import json,sys
out, rc, files, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try: r = json.loads(open(out).read().strip().splitlines()[-1])
except Exception: print('no_report_rc%d' % rc); sys.exit()
bad = []
if rc: bad.append('rc%d' % rc)
if r.get('errors'): bad.append('errors%d' % r['errors'])
if r.get('files') != files: bad.append('files%s/%d' % (r.get('files'), files))
if r.get('bytes') != nbytes: bad.append('bytes%s/%d' % (r.get('bytes'), nbytes))
print(','.join(bad) or 'ok')" "$1" "$2" "$(expect "$3" files)" "$(expect "$3" bytes)"
}
job_target() { # JOB ROOT: what tts_job.py is given
	if [ "$1" = cat ]; then echo "$2/$(expect cat file)"; else echo "$2/$(expect "$1" dir)"; fi
}

# ferry_run RATE RTT JOB RUN [MODE]: MODE "" (kind ferry), rehearsal (the
# same, kind ferry_rehearsal: only its trace is wanted) or trace (kind
# ferry_trace: --prefetch the job's trace). Every run but a trace run
# leaves its record as the job's trace (TRACES/JOB.trace).
ferry_run() {
	local rate=$1 rtt=$2 job=$3 run=$4 mode=${5:-} sub cache into='' pid t0 t1 t2 t3 w0 w1 rc ok hexit tag how killed exit_s target
	local kind=ferry extra=
	[ -n "$mode" ] && kind=ferry_$mode
	[ "$mode" = trace ] && extra="--prefetch $TRACES/$job.trace"
	sub=$(expect "$job" dir)
	tag=$kind-$rate-$rtt-$job-$run
	fresh_dir cache cache
	if [ "$INTO" = 1 ]; then
		fresh_dir into into
		extra="$extra --into $into"
	fi
	mkdir -p "$MNT"
	mountpoint -q "$MNT" && { fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT"; }
	# everything the timed part needs is worked out before it starts
	target=$(job_target "$job" "$MNT")
	settle "$sub"
	w0=$(wire)
	t0=$(now)
	# shellcheck disable=SC2086
	if ! $NSD timeout -k 10 "$JOB_TIMEOUT" "$B/bin/ferry-hydrator" $HYD_OPTS $extra -c "$cache" "$URL" "$MNT" 2>"$LOGS/$tag.err"; then
		mountpoint -q "$MNT" && { fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT"; }
		stop_pid "$(cat "$cache/hydrator.pid" 2>/dev/null)"
		cp "$cache/hydrator.log" "$LOGS/$tag.log" 2>/dev/null
		emit kind=$kind rate="$rate" rtt_ms="$rtt" job="$job" run="$run" ok=mount_failed
		log "$kind $job@$rate/${rtt}ms#$run: the mount failed (see $LOGS/$tag.err)"
		rm -rf "$cache" ${into:+"$into"}
		return 1
	fi
	MNT_ACTIVE=$MNT HYD_CACHE=$cache
	t1=$(now)
	$NSD env TTS_LAUNCH=$(date +%s.%N) timeout -k 10 "$JOB_TIMEOUT" "$JOB_PY" "$JOB" "$job" "$target" >"$LOGS/$tag.job" 2>"$LOGS/$tag.job.err"
	rc=$?
	t2=$(now)
	w1=$(wire)
	# the hydrator's own numbers right at the job's end (backfill goes on)
	$NSD "$B/bin/ferry" status "$MNT" --json >"$LOGS/$tag.status" 2>"$LOGS/$tag.status.err"
	ok=$(check_job "$LOGS/$tag.job" "$rc" "$job")
	pid=$(cat "$cache/hydrator.pid" 2>/dev/null)
	t3=$(now)
	how=clean
	fusermount3 -u "$MNT" 2>"$LOGS/$tag.umount" ||
		{ how=lazy; sleep 1; fusermount3 -u -z "$MNT" 2>>"$LOGS/$tag.umount"; }
	MNT_ACTIVE=
	killed=0
	for _ in $(seq 1 $((EXIT_WAIT * 10))); do
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		log "ferry $job: the hydrator ($pid) is still there ${EXIT_WAIT} s after the unmount ($how); SIGTERM"
		killed=1
		stop_pid "$pid"
	fi
	exit_s=$(dt "$t3" "$(now)")
	HYD_CACHE=
	cp "$cache/hydrator.log" "$LOGS/$tag.log" 2>/dev/null
	if tail -n1 "$LOGS/$tag.log" 2>/dev/null | grep -q 'exit status=0'; then hexit=0; else hexit="$(tail -n1 "$LOGS/$tag.log" 2>/dev/null | grep -o 'exit status=[0-9]*' || echo none)"; fi
	# the job's reads, for the trace runs (a rehearsal of the same job)
	if [ "$mode" != trace ] && [ "$ok" = ok ]; then
		"$B/bin/ferry" trace export -q "$cache" -o "$TRACES/$job.trace" 2>>"$LOGS/$tag.err" ||
			log "$kind $job: no trace exported (see $LOGS/$tag.err)"
	fi
	rm -rf "$cache" ${into:+"$into"}
	emit kind=$kind rate="$rate" rtt_ms="$rtt" job="$job" run="$run" ok="$ok" \
		seconds="$(dt "$t0" "$t2")" mount_s="$(dt "$t0" "$t1")" job_s="$(dt "$t1" "$t2")" \
		files="$(jget "$LOGS/$tag.job" files)" bytes="$(jget "$LOGS/$tag.job" bytes)" \
		launch_s="$(jget "$LOGS/$tag.job" launch_s)" own_s="$(jget "$LOGS/$tag.job" seconds)" \
		wire_bytes="$(jget "$LOGS/$tag.status" wire_bytes)" bytes_hydrated="$(jget "$LOGS/$tag.status" bytes_hydrated)" \
		hyd_failures="$(jget "$LOGS/$tag.status" failures)" hyd_retries="$(jget "$LOGS/$tag.status" retries)" \
		veth_bytes=$((w1 - w0)) hydrator_exit="$hexit" unmount="$how" exit_wait_s="$exit_s" killed="$killed"
	log "$kind $job@$rate/${rtt}ms#$run: $(dt "$t0" "$t2") s (mount $(dt "$t0" "$t1") s, job $(dt "$t1" "$t2") s) $ok, hydrator wire $(jget "$LOGS/$tag.status" wire_bytes) B, veth $((w1 - w0)) B; unmount $how, hydrator gone after ${exit_s} s$([ "$killed" = 1 ] && echo " (SIGTERM)"), its log: $hexit"
}

# rsync_run RATE RTT JOB RUN
rsync_run() {
	local rate=$1 rtt=$2 job=$3 run=$4 sub dest target t0 t1 t2 rc jrc ok tag w0 w1
	sub=$(expect "$job" dir)
	tag=rsync-$rate-$rtt-$job-$run
	fresh_dir dest rsync
	# the copy of SUBTREE is DEST itself; worked out before the timed part
	target=$dest
	[ "$job" = cat ] && target=$dest/$(basename "$(expect cat file)")
	settle "$sub"
	w0=$(wire)
	t0=$(now)
	$NSD timeout -k 10 "$JOB_TIMEOUT" rsync -a "rsync://127.0.0.1:$P_RSYNC/tts/$sub/" "$dest/" >"$LOGS/$tag.rsync" 2>&1
	rc=$?
	t1=$(now)
	$NSD env TTS_LAUNCH=$(date +%s.%N) timeout -k 10 "$JOB_TIMEOUT" "$JOB_PY" "$JOB" "$job" "$target" >"$LOGS/$tag.job" 2>"$LOGS/$tag.job.err"
	jrc=$?
	t2=$(now)
	w1=$(wire) # the job on the copy moves nothing over the link
	ok=$(check_job "$LOGS/$tag.job" "$jrc" "$job")
	[ "$rc" = 0 ] || ok="rsync_rc$rc${ok#ok}"
	emit kind=rsync rate="$rate" rtt_ms="$rtt" job="$job" run="$run" ok="$ok" \
		rsync_s="$(dt "$t0" "$t1")" job_s="$(dt "$t1" "$t2")" seconds="$(dt "$t0" "$t2")" \
		files="$(jget "$LOGS/$tag.job" files)" bytes="$(jget "$LOGS/$tag.job" bytes)" veth_bytes=$((w1 - w0)) \
		launch_s="$(jget "$LOGS/$tag.job" launch_s)" own_s="$(jget "$LOGS/$tag.job" seconds)"
	log "rsync $job@$rate/${rtt}ms#$run: rsync $(dt "$t0" "$t1") s + job $(dt "$t1" "$t2") s $ok, veth $((w1 - w0)) B"
	# the copy stays until the end (WORK/dst goes then): deleting thousands
	# of files right before a step that creates as many slows that step
	# (ext4 does not reuse an inode freed less than a minute ago)
}

# ------------------------------------------------------------ main
STARTED=$(date -u '+%Y-%m-%d %H:%M')
T_ALL=$(now)
prepare_tree
rm -rf "$WORK/dst" "$RES" "$TRACES"
mkdir -p "$WORK/dst" "$TRACES"
: >"$LOGS/replicator.log"
: >"$LOGS/rsyncd.log"
: >"$LOGS/probe.log"
log "matrix: $MATRIX; jobs: $JOBS; tools: $TOOLS; runs: $RUNS; build: $B"

LAST_RATE=
for m in $MATRIX; do
	rate=${m%%:*} rtt=${m#*:}
	if [ "$rate" != "$LAST_RATE" ]; then
		stop_link_side
		"$LINK" up "$rate" >&2 || { log "bench/link.sh up $rate failed"; exit 1; }
		start_servers
		LAST_RATE=$rate
	fi
	start_proxy "$rtt"
	probe "$rate" "$rtt"
	for job in $JOBS; do
		if [ "$job" = cat ]; then
			[ -n "$(expect cat file)" ] || continue
			[[ " $CAT_AT " == *" $m "* ]] || continue
		fi
		[ -n "$(expect "$job" dir)" ] || { log "no job '$job' in the tree"; continue; }
		for run in $(seq 1 "$RUNS"); do
			[[ " $TOOLS " == *" ferry "* ]] && ferry_run "$rate" "$rtt" "$job" "$run"
			[[ " $TOOLS " == *" rsync "* ]] && rsync_run "$rate" "$rtt" "$job" "$run"
			if [[ " $TOOLS " == *" trace "* ]] && [ "$job" != cat ]; then
				[ -f "$TRACES/$job.trace" ] || ferry_run "$rate" "$rtt" "$job" "$run" rehearsal
				[ -f "$TRACES/$job.trace" ] && ferry_run "$rate" "$rtt" "$job" "$run" trace
			fi
		done
	done
done
stop_link_side
"$LINK" down >/dev/null 2>&1

log "all runs in $(dt "$T_ALL" "$(now)") s"
python3 "$REPORT" --runs "$RES" --tree "$WORK/tree.json" --out "$OUT" \
	--target-rtts "$TARGET_RTTS" --started "$STARTED" \
	--commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	--note "scale $SCALE, seed $SEED, runs $RUNS, tools $TOOLS, hydrator options '${HYD_OPTS:-default}'$([ "$INTO" = 1 ] && echo ' --into DIR'), build $B"
