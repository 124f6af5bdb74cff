#!/usr/bin/env bash
# 180: delta catalogs. After 1% of a 2,000-file tree changes, the delta
# from the generation before (GET .../delta/N/N+1) is a few percent of the
# whole catalog's compressed bytes; a `ferry sync` rerun whose cache holds
# generation N builds N+1 from it, and the catalog it builds has exactly
# the rows the replicator published; the tree is exact. With the older
# generation gone from the replicator (--keep-generations 1) the delta is
# 404 and the rerun fetches the whole catalog instead.
. "$(dirname "$0")/lib/common.sh"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built"
S="$T/src"
python3 - "$S" <<'PY'
import os, random, sys
root, r = sys.argv[1], random.Random(5)
for d in range(20):
    os.makedirs(os.path.join(root, "d%02d" % d))
    for i in range(100):
        with open(os.path.join(root, "d%02d" % d, "f%03d" % i), "wb") as f:
            f.write(r.randbytes(r.randint(100, 9000)))
PY
port=$(free_port)
URL="http://127.0.0.1:$port/v1/r"
start_repl "$port" "r=$S"
wait_hashed "$port" r 60 || die "not hashed"
# change_1pct N: 20 files of directory dN get longer, then a rescan
gen_now() { curl -sf "$URL/HEAD"; }
change_1pct() {
	local g0 i
	g0=$(gen_now)
	for i in $(seq 0 19); do printf 'more %s\n' "$1" >>"$S/d$1/f$(printf %03d "$i")"; done
	kill -HUP "$REPL_PID"
	for i in $(seq 1 100); do [ "$(gen_now)" -gt "$g0" ] && break; sleep 0.1; done
	[ "$(gen_now)" -gt "$g0" ] || die "no new generation after the change"
	wait_hashed "$port" r 60 || die "not hashed"
}
change_1pct 01 # generation 2: the manifests hashed since 1 are in it
"$FERRY" sync -q --cache-dir "$T/cache" "$URL" "$T/dest" || die "first sync failed"
change_1pct 02 # generation 3
full=$(curl -sf "$URL/catalog/3" | wc -c)
delta=$(curl -sf "$URL/delta/2/3" | wc -c)
[ "$delta" -gt 0 ] || die "no delta 2 -> 3"
[ $((delta * 100)) -le $((full * 5)) ] || die "delta $delta bytes is more than 5% of the catalog's $full"
ok "1% changed: delta 2 -> 3 is $delta bytes, $((delta * 1000 / full))/1000 of the whole catalog ($full)"

"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/sync.out" 2>"$T/sync.err" || { cat "$T/sync.err"; die "sync failed"; }
grep -q 'catalog from a delta from=2 to=3' "$T/sync.err" || { cat "$T/sync.err"; die "the rerun did not use the delta"; }
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >/dev/null || die "tree differs after the delta"
rows() { # DB: every row of the catalog's tables, in key order
	sqlite3 -readonly "$1" "select * from meta order by key; select * from inode order by ino;
		select parent, pos, hex(name), ino from dirent order by parent, pos;
		select ino, hex(name), hex(value) from xattr order by ino, name;
		select ino, off, len, hex(id) from chunk order by ino, off; select * from pending order by ino"
}
rows "$T/state/r/catalog/3.db" >"$T/rows.src"
rows "$T/cache/catalogs/3.db" >"$T/rows.dst"
cmp -s "$T/rows.src" "$T/rows.dst" || { diff "$T/rows.src" "$T/rows.dst" | head; die "the catalog built from the delta differs from the published one"; }
[ ! -e "$T/cache/catalogs/2.db" ] || die "the cache kept generation 2's catalog after installing 3"
[ -e "$T/cache/catalogs/3.db" ] || die "the cache lost generation 3's catalog"
ok "the rerun built generation 3 from the delta: the published rows exactly, the tree exact; generation 2's catalog dropped from the cache"

stop_repl || die "replicator did not stop cleanly"
REPL_OPTS="--keep-generations 1" start_repl "$port" "r=$S"
change_1pct 03 # generation 4; 3 is removed
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/delta/3/4")
[ "$code" = 404 ] || die "delta from a removed generation answers $code"
"$FERRY" sync --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/sync.out" 2>"$T/sync.err" || { cat "$T/sync.err"; die "sync without a delta failed"; }
grep -q 'catalog from a delta' "$T/sync.err" && die "a delta was used though the server has none"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >/dev/null || die "tree differs after the full catalog"
ok "older generation removed: delta 404, the rerun fetched the whole catalog and the tree is exact"
