#!/usr/bin/env bash
# bench/cache.sh BUILD_DIR — many hydrators behind one regional HTTP cache
# (issue 12; docs/performance.md "A regional cache"). The bench's small
# tree (bench/gen_tree.py --scale small) at the source; the link
# (bench/link.sh, CACHE_RATE, default 200mbit) between the source's
# namespace and the region's; in the region, nginx with
# examples/nginx/ferry-cache.conf.
#
#   direct    one hydrator straight to the replicator over the link (the
#             default: POST batches), mount -> backfill complete
#   cached    N hydrators (CACHE_CLIENTS, default 4), each with a cache of
#             its own, --cacheable through nginx, all started at once;
#             each one's complete time, and what the origin served
#
# origin_ratio = the origin's frame bytes for the N cached hydrators over
# its frame bytes for the one direct hydrator (each distinct chunk once:
# the unique frame bytes); time_ratio = the slowest cached hydrator's
# complete time over the direct one's. Targets: origin_ratio <= 1.15,
# time_ratio <= 1.5. Needs root (namespaces, tbf, FUSE) and nginx. With
# RES set (make bench), one record (approach ferry_cache) goes to RES.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/cache.sh BUILD_DIR}" && pwd)
RATE=${CACHE_RATE:-200mbit}
N=${CACHE_CLIENTS:-4}
W=$ROOT/build/bench/work/cache
export NS_SRC=fc-src NS_DST=fc-dst IF_SRC=fc-s IF_DST=fc-d IP_SRC=10.98.0.1 IP_DST=10.98.0.2
LINK=$ROOT/bench/link.sh
NSS="nsenter --net=/run/netns/$NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
PORT=7073
NPORT=8088
REPL="$B/bin/ferry-replicator"
HYD="$B/bin/ferry-hydrator"
FERRY="$B/bin/ferry"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$REPL" ] && [ -x "$HYD" ] && [ -x "$NGINX" ] || { echo "need $B/bin programs and nginx" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] cache: $*" >&2; }
now() { date +%s.%N; }
MOUNTS=() REPL_PID= NGX_PID=
cleanup() {
	local m
	for m in "${MOUNTS[@]}"; do mountpoint -q "$m" && fusermount3 -u "$m" 2>/dev/null; done
	[ -n "$NGX_PID" ] && kill -QUIT "$NGX_PID" 2>/dev/null
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	wait 2>/dev/null
	"$LINK" down >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$W"
TREE=$W/tree
[ -d "$TREE" ] || python3 "$ROOT/bench/gen_tree.py" "$TREE" --scale small >/dev/null || exit 1
rm -rf "$W/state" "$W"/c* "$W"/m* "$W/nginx"
"$LINK" up "$RATE" >/dev/null || exit 1
$NSS "$REPL" -l "$IP_SRC:$PORT" -s "$W/state" "tree=$TREE" >"$W/repl.log" 2>&1 &
REPL_PID=$!
for _ in $(seq 1 600); do grep -q ' ready' "$W/repl.log" && break; sleep 0.1; done
for _ in $(seq 1 1200); do grep -q ' namespace hashed' "$W/repl.log" && break; sleep 0.5; done
frames() { # the origin's frame bytes served so far
	$NSS curl -sf "http://$IP_SRC:$PORT/metrics" |
		awk '/^ferry_replicator_frame_bytes_served_total\{namespace="tree"\}/ {print $2}'
}
# complete_times T0 MNT... — seconds from T0 until each mount's backfill
# is complete, one a line, in order
complete_times() {
	local t0=$1 m done_n=0
	shift
	local left=("$@")
	declare -A at
	while [ "$done_n" -lt "${#left[@]}" ]; do
		for m in "${left[@]}"; do
			[ -n "${at[$m]:-}" ] && continue
			if "$FERRY" status --json "$m" 2>/dev/null | grep -q '"state": *"complete"'; then
				at[$m]=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(now)")
				done_n=$((done_n + 1))
			fi
		done
		sleep 0.2
	done
	for m in "$@"; do echo "${at[$m]}"; done
}

# direct
sync; echo 3 >/proc/sys/vm/drop_caches
f0=$(frames)
mkdir -p "$W/m0"
MOUNTS+=("$W/m0")
t0=$(now)
$NSD "$HYD" -c "$W/c0" "http://$IP_SRC:$PORT/v1/tree" "$W/m0" || exit 1
t_direct=$(complete_times "$t0" "$W/m0")
unique=$(($(frames) - f0))
fusermount3 -u "$W/m0"
log "direct: complete in ${t_direct}s, origin frame bytes $unique"

# cached: nginx in the region, the example as shipped
mkdir -p "$W/nginx/tmp"
conf=$(sed -e "s|/var/cache/nginx/ferry|$W/nginx/cache|" \
	-e "s|origin.example:8700|$IP_SRC:$PORT|" \
	-e "s|listen 8080;|listen 127.0.0.1:$NPORT;|" "$ROOT/examples/nginx/ferry-cache.conf")
cat >"$W/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 2;
user root;
pid $W/nginx/nginx.pid;
error_log $W/nginx/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $W/nginx/tmp/body;
	proxy_temp_path $W/nginx/tmp/proxy;
	fastcgi_temp_path $W/nginx/tmp/fastcgi;
	uwsgi_temp_path $W/nginx/tmp/uwsgi;
	scgi_temp_path $W/nginx/tmp/scgi;
	sendfile on;
	$conf
}
CONF
$NSD "$NGINX" -p "$W/nginx" -c "$W/nginx/nginx.conf" -e "$W/nginx/error.log" &
NGX_PID=$!
sleep 1
sync; echo 3 >/proc/sys/vm/drop_caches
f0=$(frames)
ms=()
for k in $(seq 1 "$N"); do
	mkdir -p "$W/m$k"
	MOUNTS+=("$W/m$k")
	ms+=("$W/m$k")
done
t0=$(now)
for k in $(seq 1 "$N"); do
	$NSD "$HYD" -c "$W/c$k" --cacheable "http://127.0.0.1:$NPORT/v1/tree" "$W/m$k" &
done
wait_mounts() { local m; for m in "${ms[@]}"; do for _ in $(seq 1 300); do mountpoint -q "$m" && break; sleep 0.1; done; done; }
wait_mounts
ts=$(complete_times "$t0" "${ms[@]}")
origin=$(($(frames) - f0))
slowest=$(echo "$ts" | sort -n | tail -n 1)
log "cached: complete ${ts//$'\n'/ }s; origin frame bytes $origin"
python3 - "$RATE" "$N" "$t_direct" "$slowest" "$unique" "$origin" "$ts" <<'PY'
import sys
rate, n, td, ts, u, o, each = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7].split()
print("| link | hydrators | direct complete s | cached complete s (each) | slowest / direct | origin bytes / unique |")
print("|---|---|---|---|---|---|")
print("| %s | %d | %.2f | %s | %.2f | %.2f |" % (rate, n, td, " ".join(each), ts / td, o / u))
PY
# make bench: one record (approach ferry_cache) for the report's targets
if [ -n "${RES:-}" ]; then
	python3 "$ROOT/bench/emit.py" ferry_cache "cache-$RATE" 1 clients="$N" \
		direct_s="$t_direct" slowest_s="$slowest" \
		time_ratio="$(python3 -c "print(round($slowest / $t_direct, 3))")" \
		origin_ratio="$(python3 -c "print(round($origin / $unique, 3))")" >>"$RES"
fi
