#!/usr/bin/env bash
# bench/tls_cpu.sh BUILD_DIR [TREE] — what https costs the replicator, on
# loopback (no link in the way): two replicators serve the same tree, one
# plain, one with --tls-cert (a certificate made here); ferry sync copies
# the tree from each in turn, RUNS times alternating, to a fresh DEST and
# cache. Per run: wall time, the replicator's CPU seconds (utime+stime
# from /proc/PID/stat, read before and after) and the client's (time(1)).
# Prints the runs and, per mode, the medians with the replicator's CPU per
# GB on the wire (the bytes of the frames, what the store keeps).
#
# TREE defaults to make bench's dataset (build/bench/work/src/tree; run
# make bench once, or give any directory). RUNS [5]. Not run by make
# bench: the copies go to $WORK [/tmp/ferry-tls-cpu], about 2x TREE.
set -u
B=$(cd "${1:?usage: bench/tls_cpu.sh BUILD_DIR [TREE]}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=${2:-$ROOT/build/bench/work/src/tree}
RUNS=${RUNS:-5}
W=${WORK:-/tmp/ferry-tls-cpu}
[ -d "$TREE" ] || { echo "bench/tls_cpu.sh: no tree at $TREE" >&2; exit 2; }
for t in openssl python3 /usr/bin/time; do
	command -v "$t" >/dev/null || { echo "bench/tls_cpu.sh: $t missing" >&2; exit 2; }
done
rm -rf "$W"
mkdir -p "$W"
P1= P2=
trap 'kill $P1 $P2 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/key.pem" \
	-out "$W/cert.pem" -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null ||
	{ echo "bench/tls_cpu.sh: openssl could not make a certificate" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p1=$(port)
p2=$(port)
"$B/bin/ferry-replicator" -l "127.0.0.1:$p1" -s "$W/s1" "t=$TREE" 2>"$W/r1.log" &
P1=$!
"$B/bin/ferry-replicator" -l "127.0.0.1:$p2" -s "$W/s2" --tls-cert "$W/cert.pem" --tls-key "$W/key.pem" \
	"t=$TREE" 2>"$W/r2.log" &
P2=$!
# both hashed: their CPU from here on is serving only
for i in $(seq 1 3000); do
	grep -q 'namespace hashed' "$W/r1.log" && grep -q 'namespace hashed' "$W/r2.log" && break
	sleep 0.2
done
cpu() { awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz}' "/proc/$1/stat"; }
: >"$W/runs"
for run in $(seq 1 "$RUNS"); do
	for mode in http https; do
		if [ $mode = http ]; then
			pid=$P1 url=http://127.0.0.1:$p1/v1/t opts=()
		else
			pid=$P2 url=https://127.0.0.1:$p2/v1/t opts=(--ca-file "$W/cert.pem")
		fi
		rm -rf "$W/dest" "$W/cache"
		c0=$(cpu "$pid")
		t0=$(date +%s.%N)
		/usr/bin/time -f "%U %S" -o "$W/time" "$B/bin/ferry" sync -q --cache-dir "$W/cache" "${opts[@]}" "$url" "$W/dest" ||
			{ echo "bench/tls_cpu.sh: ferry sync over $mode failed" >&2; exit 1; }
		t1=$(date +%s.%N)
		c1=$(cpu "$pid")
		echo "$mode $run $t0 $t1 $c0 $c1 $(cat "$W/time") $(du -sb "$W/cache/volumes" | cut -f1)" | tee -a "$W/runs"
	done
done
python3 - "$W/runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for mode in ("http", "https"):
    r = [x for x in rows if x[0] == mode]
    wall = statistics.median(float(x[3]) - float(x[2]) for x in r)
    cpu = statistics.median(float(x[5]) - float(x[4]) for x in r)
    cli = statistics.median(float(x[6]) + float(x[7]) for x in r)
    gb = int(r[0][8]) / 1e9
    print("%-5s runs=%d wall=%.2fs replicator_cpu=%.2fs (%.2f s/GB of %.3f GB) client_cpu=%.2fs"
          % (mode, len(r), wall, cpu, cpu / gb, gb, cli))
PY
