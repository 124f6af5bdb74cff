#!/usr/bin/env bash
# examples/regional-cache.sh [BUILD_DIR] [HYDRATORS] — one replicator (the
# old site), one nginx cache (the new region, examples/nginx/ferry-cache.conf
# as shipped but for ports and paths), several hydrators with stores of their
# own mounting through the cache with --cacheable, all on loopback. Shows
# each tree complete and how many chunk bytes the origin served for all of
# them: about one copy, not one per hydrator. Needs root (FUSE) and nginx
# (Debian package nginx-light).
set -eu
B=${1:-build/release}
N=${2:-3}
BIN=$(cd "$B/bin" && pwd)
EX=$(cd "$(dirname "$0")" && pwd)
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ "$(id -u)" -eq 0 ] || { echo "regional-cache: FUSE mounts here need root" >&2; exit 1; }
[ -x "$NGINX" ] || { echo "regional-cache: needs nginx (apt-get install nginx-light)" >&2; exit 1; }
T=$(mktemp -d /tmp/ferry-region.XXXXXX)
PIDS=()
cleanup() {
	for k in $(seq 1 "$N"); do mountpoint -q "$T/m$k" 2>/dev/null && fusermount3 -u "$T/m$k"; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "regional-cache: FAILED: $*" >&2; exit 1; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "1. an estate at the old site: checkpoints that share most chunks, many small files"
python3 - "$T/estate" <<'PY'
import os, random, sys
r = random.Random(11); root = sys.argv[1]
w = bytearray(r.randbytes(24 << 20))
for v in range(3):
    os.makedirs(os.path.join(root, "ckpt/v%d" % v))
    open(os.path.join(root, "ckpt/v%d/model.bin" % v), "wb").write(w)
    for k in range(0, len(w), 2 << 20):
        w[k:k + 128] = r.randbytes(128)
os.makedirs(os.path.join(root, "data"))
for i in range(600):
    open(os.path.join(root, "data/s%04d.json" % i), "wb").write(r.randbytes(r.randint(500, 40000)))
PY
du -sh --apparent-size "$T/estate" | sed 's/^/   /'

rp=$(port); cp=$(port)
say "2. ferry-replicator on 127.0.0.1:$rp (the origin)"
"$BIN/ferry-replicator" -l "127.0.0.1:$rp" -s "$T/state" "estate=$T/estate" 2>"$T/repl.log" &
PIDS+=($!)
for _ in $(seq 300); do grep -q ' namespace hashed' "$T/repl.log" && break; sleep 0.1; done

say "3. nginx on 127.0.0.1:$cp caching it (examples/nginx/ferry-cache.conf)"
mkdir -p "$T/nginx/tmp"
{
	echo "daemon off; worker_processes 2; user root; pid $T/nginx/pid; error_log $T/nginx/error.log;"
	echo "events { } http { log_format st '\$upstream_cache_status'; access_log $T/nginx/access.log st;"
	echo "proxy_temp_path $T/nginx/tmp/p; client_body_temp_path $T/nginx/tmp/b;"
	echo "fastcgi_temp_path $T/nginx/tmp/f; uwsgi_temp_path $T/nginx/tmp/u; scgi_temp_path $T/nginx/tmp/s;"
	sed -e "s|/var/cache/nginx/ferry|$T/nginx/cache|" -e "s|origin.example:8700|127.0.0.1:$rp|" \
		-e "s|listen 8080;|listen 127.0.0.1:$cp;|" "$EX/nginx/ferry-cache.conf"
	echo "}"
} >"$T/nginx/nginx.conf"
"$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" &
PIDS+=($!)
sleep 1

served() { curl -s "http://127.0.0.1:$rp/metrics" | awk '/^ferry_replicator_frame_bytes_served_total\{namespace="estate"\}/ {print $2}'; }
before=$(served)
say "4. $N hydrators, each with its own store, through the cache (--cacheable)"
for k in $(seq 1 "$N"); do
	mkdir -p "$T/m$k"
	"$BIN/ferry-hydrator" -c "$T/c$k" --cacheable "http://127.0.0.1:$cp/v1/estate" "$T/m$k"
done
for k in $(seq 1 "$N"); do
	for _ in $(seq 400); do
		"$BIN/ferry" status --json "$T/m$k" | grep -q '"state": *"complete"' && break
		sleep 0.3
	done
	diff -r "$T/estate" "$T/m$k" >/dev/null || fail "hydrator $k: not complete in 2 minutes, or its tree differs"
	echo "   hydrator $k: complete, tree identical"
done
got=$(($(served) - before))
one=$(du -sb "$T/c1" | cut -f1)
echo "   the origin served $got frame bytes for $N hydrators (one hydrator's store: $one bytes)"
echo "   the cache answered $(grep -c '^HIT' "$T/nginx/access.log") requests from its copy, went to the origin for $(grep -c '^MISS' "$T/nginx/access.log")"
