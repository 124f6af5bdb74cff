#!/usr/bin/env bash
# 187: a mount with nothing cached asks GET HEAD?catalog=1 and gets the
# current catalog in that answer (one round trip instead of two): the
# replicator counts no catalog request for it. A mount with a cached
# catalog asks HEAD alone (a delta or nothing follows). A server that
# sends garbage as the catalog with a generation is refused with one line
# and nothing mounted; one that ignores the query (a static tree) is
# covered by 240.
. "$(dirname "$0")/lib/common.sh"
need_fuse
mkdir -p "$T/src/d"
for i in 1 2 3; do head -c 20000 /dev/urandom >"$T/src/d/f$i"; done
port=$(free_port)
start_repl "$port" "s=$T/src"
URL=http://127.0.0.1:$port/v1/s
reqs() { # ROUTE: 2xx answers of the replicator on that route
	curl -sf "http://127.0.0.1:$port/metrics" |
		awk -v r="route=\"$1\"" 'index($0, "ferry_replicator_requests_total{") == 1 && index($0, r) && index($0, "code=\"2xx\"") {s += $2} END {print s + 0}'
}

mount_hyd "$URL" "$T/mnt" --no-backfill
cmp -s "$T/src/d/f2" "$T/mnt/d/f2" || die "f2 read back wrong"
[ "$(reqs catalog)" = 0 ] || die "a fresh mount asked for catalog/GEN: $(reqs catalog) requests"
[ "$(reqs head)" -ge 1 ] || die "no HEAD request counted"
[ -e "$T/cache/catalogs/1.db" ] || die "the catalog that came with HEAD is not cached as 1.db"
ls "$T/cache/catalogs" | grep -q 'HEAD' && die "a temp file of the HEAD answer was left: $(ls "$T/cache/catalogs")"
ok "fresh cache: the catalog came with HEAD (no catalog request), cached as 1.db, no temp left"
umount_hyd "$T/mnt"

mount_hyd "$URL" "$T/mnt" --no-backfill
[ "$(reqs catalog)" = 0 ] && [ "$(reqs delta)" = 0 ] || die "a mount of a cached catalog downloaded it"
cmp -s "$T/src/d/f3" "$T/mnt/d/f3" || die "f3 read back wrong after the remount"
ok "cached catalog: nothing downloaded"
umount_hyd "$T/mnt"

# A server whose HEAD?catalog=1 answer is a catalog of generation 1 in name
# only.
fport=$(free_port)
python3 - "$fport" >"$T/fake.log" 2>&1 <<'PY' &
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.endswith("/HEAD?catalog=1"):
            body = os.urandom(3000)
            self.send_response(200)
            self.send_header("Content-Type", "application/zstd")
            self.send_header("Ferry-Generation", "1")
        else:
            body = b'{"error":"not_found","detail":"no"}\n'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
fpid=$!
for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$fport/" && break; sleep 0.1; done
mkdir -p "$T/mnt2"
"$HYD" -c "$T/cache2" "http://127.0.0.1:$fport/v1/x" "$T/mnt2" 2>"$T/fake.err"
rc=$?
kill "$fpid" 2>/dev/null
[ $rc != 0 ] || { fusermount3 -u "$T/mnt2"; die "garbage sent as the catalog with HEAD was mounted"; }
! mountpoint -q "$T/mnt2" || die "mounted although the catalog was garbage"
grep -q "not a valid ferry catalog" "$T/fake.err" || die "no line says the catalog is bad: $(cat "$T/fake.err")"
ls "$T/cache2/catalogs" 2>/dev/null | grep -q '\.db$' && die "a bad catalog was installed: $(ls "$T/cache2/catalogs")"
ok "garbage as the catalog with HEAD: exit $rc, one line ($(head -c 120 "$T/fake.err")), nothing installed"
stop_repl
