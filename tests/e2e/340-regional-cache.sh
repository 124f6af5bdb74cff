#!/usr/bin/env bash
# 340: many hydrators through one regional HTTP cache, GET only
# (--cacheable: packs and single chunks, no POST), with the example
# configurations of examples/nginx and examples/varnish run as shipped:
#  (a) 3 hydrators with separate caches mount through one nginx
#      proxy_cache at once: each completes with the tree exact, nothing
#      reaches the origin but GETs, and the origin serves each distinct
#      chunk about once (at most 1.15x), not 3x;
#  (b) ferry sync --cacheable through the same nginx: exact, and the
#      origin serves no chunk for it (every pack is a cache hit);
#  (c) 2 hydrators through Varnish at once: exact, the origin serves each
#      distinct chunk about once more for them (Varnish's cache is cold);
#  (d) a --cacheable hydrator fed by nginx serving a published store (no
#      packs there): after the first 404 it takes single chunk GETs, exact;
#  (e) a replicator with --tokens behind examples/nginx/ferry-cache-tokens.conf
#      (the cache holds the namespace's token, the clients none): 2
#      hydrators exact, the origin serves each distinct chunk about once,
#      and the origin itself still refuses a request without the token.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
. "$E2E_LIB/nginx.sh"
need_fuse
need_nginx
[ -x "$FERRY" ] || die "ferry not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
VARNISHD=$(command -v varnishd || echo /usr/sbin/varnishd)
[ -x "$VARNISHD" ] || skip "varnishd missing (Debian package varnish)"
VPID="" TPID=""
e2e_after_cleanup() {
	stop_nginx_all
	[ -z "$VPID" ] || { kill "$VPID" 2>/dev/null; wait "$VPID" 2>/dev/null; }
	[ -z "$TPID" ] || { kill "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null; }
}
EX="$E2E_LIB/../../../examples"

S="$T/src"
mk_bulk_tree "$S" 20
mkdir -p "$S/many"
python3 - "$S/many" <<'PY'
import os, random, sys
r = random.Random(5)
for i in range(400):
    with open(os.path.join(sys.argv[1], "s%03d" % i), "wb") as f:
        f.write(r.randbytes(r.randint(100, 30000)))
PY
port=$(free_port)
start_repl "$port" "s=$S"
wait_hashed "$port" s 120 || die "the source was not hashed"
distinct=$(sql "$T/state/s/source/1.db" "select count(*) from chunk")

# mount_via URL N [options] — a hydrator of its own (cache $T/cN, mount
# $T/mN), --cacheable
mount_via() {
	local url=$1 k=$2; shift 2
	mkdir -p "$T/m$k"
	MOUNTS+=("$T/m$k")
	"$HYD" -c "$T/c$k" --cacheable --jobs 4 "$@" "$url" "$T/m$k" || die "hydrator $k failed to mount $url"
}
# exact N — hydrator N completes and its tree is the source's
exact() {
	wait_status "$T/c$1" state complete 180 || die "hydrator $1 did not complete: $(tail -n 3 "$T/c$1/hydrator.log")"
	python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/m$1" >"$T/cmp$1.txt" || { cat "$T/cmp$1.txt"; die "hydrator $1: tree differs"; }
}
served() { repl_stat "$port" s chunks_served; }
# about_once GOT — the origin served each distinct chunk about once
about_once() { [ "$1" -ge "$distinct" ] && [ $(($1 * 100)) -le $((distinct * 115)) ]; }
# through URL COUNTER N... — hydrators N... mount URL and complete, exact;
# GOT is how much COUNTER (a function printing the origin's chunks served)
# grew meanwhile
through() {
	local url=$1 counter=$2 before k
	shift 2
	before=$($counter)
	for k in "$@"; do mount_via "$url" "$k"; done
	for k in "$@"; do exact "$k"; done
	GOT=$(($($counter) - before))
}

# (a) nginx, from the example as shipped
nport=$(free_port)
conf=$(sed -e "s|/var/cache/nginx/ferry|$T/nginx-cache|" \
	-e "s|origin.example:8700|127.0.0.1:$port|" \
	-e "s|listen 8080;|listen 127.0.0.1:$nport;|" "$EX/nginx/ferry-cache.conf")
start_nginx_http "$nport" "$conf"
NG="$NGINX_DIR"
CURL="http://127.0.0.1:$nport/v1/s"
through "$CURL" served 1 2 3
got=$GOT
log "(a) origin served $got chunk frames for $distinct distinct chunks to 3 hydrators"
[ "$got" -ge "$distinct" ] || die "(a) the origin served $got chunks, fewer than the $distinct distinct ones"
[ $((got * 100)) -le $((distinct * 115)) ] || die "(a) the origin served $got chunks for $distinct distinct: the cache did not collapse 3 hydrators"
grep -v '^GET \|^HEAD ' "$NG/access.log" | grep -q . && die "(a) not only GETs went through the cache: $(grep -v '^GET \|^HEAD ' "$NG/access.log" | head -n 3)"
packs=$(grep -c '^GET /v1/s/pack/' "$NG/access.log")
hits=$(grep -c '^GET /v1/s/pack/[^ ]* 200 [0-9]* HIT' "$NG/access.log")
[ "$packs" -gt 0 ] || die "(a) no pack was asked for"
[ $((hits * 2)) -ge "$packs" ] || die "(a) only $hits of $packs pack requests were cache hits"
ok "(a) 3 hydrators through nginx: exact; origin served $got for $distinct distinct chunks; $hits of $packs pack GETs were hits; GETs only"

# (b) ferry sync through the warm cache
before=$(served)
"$FERRY" sync -q --cacheable --cache-dir "$T/scache" "$CURL" "$T/dest" || die "(b) ferry sync --cacheable through nginx failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(b) tree differs"; }
[ "$(served)" = "$before" ] || die "(b) the origin served $(($(served) - before)) chunks for a sync through a warm cache"
ok "(b) ferry sync --cacheable through the warm cache: exact, nothing from the origin"

# (c) Varnish, from the example as shipped
vport=$(free_port)
sed -e "s|\"8700\"|\"$port\"|" "$EX/varnish/ferry.vcl" >"$T/ferry.vcl"
"$VARNISHD" -j none -C -f "$T/ferry.vcl" >/dev/null 2>"$T/vcl.err" || { cat "$T/vcl.err"; die "(c) the example VCL does not compile"; }
"$VARNISHD" -F -j none -n "$T/varnish" -a "127.0.0.1:$vport" -f "$T/ferry.vcl" -s malloc,256m >"$T/varnish.log" 2>&1 &
VPID=$!
wait_for 30 curl -sf -o /dev/null "http://127.0.0.1:$vport/v1/s/HEAD" || { cat "$T/varnish.log"; die "(c) varnishd did not start"; }
VURL="http://127.0.0.1:$vport/v1/s"
through "$VURL" served 4 5
got=$GOT
about_once "$got" ||
	die "(c) the origin served $got chunks for $distinct distinct to 2 hydrators through Varnish"
ok "(c) 2 hydrators through Varnish: exact; origin served $got for $distinct distinct chunks"

# (d) a published store behind nginx: no packs there, single GETs
"$REPL" -s "$T/pstate" --publish "s=$T/www/v1/s" "s=$S" 2>"$T/publish.log" || { cat "$T/publish.log"; die "(d) publish failed"; }
sport=$(free_port)
start_nginx "$sport" "location / { root $T/www; }"
SN="$NGINX_DIR"
mount_via "http://127.0.0.1:$sport/v1/s" 6
exact 6
p404=$(grep -c '^GET /v1/s/pack/[^ ]* 404 ' "$SN/access.log")
# Backfill has --jobs 4 transfers: up to 4 packs may be asked for before
# the first 404 is back; none after it.
[ "$p404" -ge 1 ] && [ "$p404" -le 4 ] || die "(d) $p404 pack requests answered 404: the hydrator did not fall back after the first answer"
grep -q '^POST ' "$SN/access.log" && die "(d) a --cacheable hydrator sent a POST"
ok "(d) --cacheable from a published store: $p404 pack 404, then single GETs; exact"

# (e) tokens at the origin, the token in the cache, none at the clients
"$FERRY" token new s >"$T/tok.out" || die "(e) ferry token new failed"
tok=$(head -n 1 "$T/tok.out")
sed -n 2p "$T/tok.out" >"$T/tokens"
tport=$(free_port)
"$REPL" -l "127.0.0.1:$tport" -s "$T/tstate" --hash-before-publish --tokens "$T/tokens" "s=$S" >"$T/trepl.log" 2>&1 &
TPID=$!
wait_ready "$T/trepl.log" "$TPID"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$tport/v1/s/HEAD")
[ "$code" = 401 ] || die "(e) the origin answered $code to a request without its token, not 401"
tserved() { curl -sf -H "Authorization: Bearer $tok" "http://127.0.0.1:$tport/v1/s/stats" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["chunks_served"])'; }
eport=$(free_port)
conf=$(sed -e "s|/var/cache/nginx/ferry-tokens|$T/nginx-tcache|" \
	-e "s|origin.example:8700|127.0.0.1:$tport|" \
	-e "s|listen 8081;|listen 127.0.0.1:$eport;|" \
	-e "s|~^/v1/data/  \"TOKEN-OF-data\";|~^/v1/s/ \"$tok\";|" "$EX/nginx/ferry-cache-tokens.conf")
grep -qF -- "$tok" <<<"$conf" || die "(e) the token did not go into the example's map"
start_nginx_http "$eport" "$conf"
EN="$NGINX_DIR"
through "http://127.0.0.1:$eport/v1/s" tserved 7 8
got=$GOT
about_once "$got" ||
	die "(e) the origin served $got chunks for $distinct distinct to 2 hydrators through the token-holding cache"
hits=$(grep -c '^GET /v1/s/pack/[^ ]* 200 [0-9]* HIT' "$EN/access.log")
[ "$hits" -ge 1 ] || die "(e) no pack came from the cache"
grep -q '^GET /v1/s/HEAD [0-9]* [0-9]* -' "$EN/access.log" || die "(e) HEAD did not go to the origin uncached"
for k in 7 8; do fusermount3 -u "$T/m$k" || die "(e) cannot unmount $T/m$k"; done
kill "$TPID"
wait "$TPID"
rc=$?
TPID=""
[ "$rc" = 0 ] || die "(e) the replicator with --tokens exited $rc on SIGTERM"
ok "(e) --tokens at the origin, the token in nginx: 2 hydrators exact; origin served $got for $distinct distinct chunks; $hits pack hits; 401 without the token"
