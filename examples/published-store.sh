#!/usr/bin/env bash
# examples/published-store.sh [BUILD_DIR] — a tree published as static files
# (ferry-replicator --publish), served by nginx with no ferry process at the
# origin, mounted by a hydrator that checks the source's signature; then a
# change at the source is published again (only the new chunks are written)
# and the mount follows. Needs root (FUSE) and nginx (nginx-light).
set -eu
B=${1:-build/release}
BIN=$(cd "$B/bin" && pwd)
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ "$(id -u)" -eq 0 ] || { echo "published-store: FUSE mounts here need root" >&2; exit 1; }
[ -x "$NGINX" ] || { echo "published-store: needs nginx (apt-get install nginx-light)" >&2; exit 1; }
T=$(mktemp -d /tmp/ferry-publish.XXXXXX)
NPID=""
cleanup() {
	mountpoint -q "$T/mnt" 2>/dev/null && fusermount3 -u "$T/mnt"
	[ -n "$NPID" ] && kill "$NPID" 2>/dev/null && wait "$NPID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "published-store: FAILED: $*" >&2; exit 1; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
publish() { "$BIN/ferry-replicator" -s "$T/state" --sign-key "$T/keys/sign.key" --publish "data=$T/www/v1/data" "data=$T/src" 2>&1 | sed 's/^/   /'; }

say "1. a source tree and a signing key"
mkdir -p "$T/src/models" "$T/src/docs"
head -c 20000000 /dev/urandom >"$T/src/models/weights.bin"
for i in $(seq 1 50); do echo "note $i" >"$T/src/docs/n$i.txt"; done
"$BIN/ferry" keygen -q "$T/keys"

say "2. publish it as static files"
publish
(cd "$T/www/v1/data" && ls && echo "   chunk objects: $(ls chunk | wc -l)") | sed 's/^/   /'

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "3. nginx serves $T/www on 127.0.0.1:$port: nothing of ferry runs there"
mkdir -p "$T/nginx/tmp"
cat >"$T/nginx/nginx.conf" <<CONF
daemon off; worker_processes 1; user root; pid $T/nginx/pid; error_log $T/nginx/error.log;
events { }
http { access_log off; client_body_temp_path $T/nginx/tmp/b; proxy_temp_path $T/nginx/tmp/p;
  fastcgi_temp_path $T/nginx/tmp/f; uwsgi_temp_path $T/nginx/tmp/u; scgi_temp_path $T/nginx/tmp/s;
  server { listen 127.0.0.1:$port; root $T/www; } }
CONF
"$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" &
NPID=$!
sleep 1

say "4. mount it, checking every generation's signature, and follow changes (--poll 1)"
mkdir -p "$T/mnt"
"$BIN/ferry-hydrator" -c "$T/cache" --poll 1 --trust-key "$T/keys/sign.pub" "http://127.0.0.1:$port/v1/data" "$T/mnt"
cmp "$T/src/models/weights.bin" "$T/mnt/models/weights.bin" || fail "weights.bin differs through the mount"
echo "   weights.bin read through the mount: identical"

say "5. a change at the source, published again: only new chunks are written"
echo "note 51" >"$T/src/docs/n51.txt"
head -c 1000000 /dev/urandom >>"$T/src/models/weights.bin"
publish
for _ in $(seq 50); do "$BIN/ferry" status --json "$T/mnt" | grep -q '"generation": *2' && break; sleep 0.2; done
diff -r "$T/src" "$T/mnt" >/dev/null || fail "the mount did not switch to generation 2, or differs from the source"
echo "   the mount switched to generation 2: identical to the source"
