#!/usr/bin/env bash
# 185: the exit codes the man pages promise, exactly, where no other test
# checks them: the usage errors of ferry-replicator and ferry-hydrator (2,
# one stderr line each: every kind of bad option, value, argument and
# URL, a malformed --listen address), of ferry itself (2), ferry verify (2)
# and ferry sync (rsync's 1); --help and --version (0, on stdout); the
# replicator's clean stop on SIGINT (0; SIGTERM is checked by every test's
# stop_repl); ferry verify of a cache and of a tree (0), of a tampered
# tree (1) and of a directory that is no cache (1); ferry sync of a
# catalog that is not one (12) or of a later format (2, and the
# hydrator's 1), into a DEST that cannot be written (11) and into a ferry
# mount (1); a server that refuses the connection (10) and one whose
# connect times out (35); a catalog holding names that are no single path component
# ("..", "a/b", empty, a NUL): each named, exit 23. 020 checks the
# start-up failures (1),
# 110 ferry status, 160 and 170 ferry sync's 10, 20, 23, 24 and 30.
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"

N=0
# code WANT WHAT CMD... — CMD exits WANT; a failure says exactly one line
# on stderr, a success nothing there.
code() {
	local want=$1 what=$2 rc
	shift 2
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ "$rc" = "$want" ] || { cat "$T/out" "$T/err" >&2; die "$what: exit $rc, not $want"; }
	if [ "$want" = 0 ]; then
		[ ! -s "$T/err" ] || { cat "$T/err" >&2; die "$what: exit 0 but stderr says something"; }
	else
		[ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err" >&2; die "$what: not one line on stderr"; }
	fi
	N=$((N + 1))
}
# shown WHAT — the last command printed something on stdout (--help, -V).
shown() { [ -s "$T/out" ] || die "$1: nothing on stdout"; }

mkdir -p "$T/src/d" "$T/mnt" "$T/plain"
echo hello >"$T/src/d/f"
: >"$T/afile"
port=$(free_port)
S=(-s "$T/st")

# --- ferry-replicator: 2 for bad arguments, 0 for --help/--version ---
code 2 "replicator: no NAME=DIR" "$REPL" "${S[@]}"
code 2 "replicator: unknown option" "$REPL" "${S[@]}" --bogus "n=$T/src"
code 2 "replicator: option without its value" "$REPL" "${S[@]}" -l
code 2 "replicator: --scan-threads 0" "$REPL" "${S[@]}" --scan-threads 0 "n=$T/src"
code 2 "replicator: --keep-generations x" "$REPL" "${S[@]}" --keep-generations x "n=$T/src"
code 2 "replicator: --rescan-interval -1" "$REPL" "${S[@]}" --rescan-interval -1 "n=$T/src"
code 2 "replicator: unknown --codec" "$REPL" "${S[@]}" --codec zip "n=$T/src"
code 2 "replicator: not NAME=DIR" "$REPL" "${S[@]}" "$T/src"
code 2 "replicator: bad namespace name" "$REPL" "${S[@]}" ".hidden=$T/src"
code 2 "replicator: a namespace twice" "$REPL" "${S[@]}" "n=$T/src" "n=$T/src"
code 2 "replicator: DIR missing" "$REPL" "${S[@]}" "n=$T/nope"
code 2 "replicator: DIR is a file" "$REPL" "${S[@]}" "n=$T/afile"
for l in nonsense 127.0.0.1:99999 127.0.0.1: '[::1:8700' ':8700'; do
	code 2 "replicator: --listen $l" "$REPL" "${S[@]}" -l "$l" "n=$T/src"
done
grep -q "bad --listen address" "$T/err" || die "a malformed --listen does not say so: $(cat "$T/err")"
for a in -h --help -V --version; do code 0 "replicator $a" "$REPL" "$a"; shown "replicator $a"; done
[ ! -e "$T/st" ] || die "a usage error left a state directory"
ok "ferry-replicator: usage errors exit 2 with one line each, --help and --version 0 ($N cases)"

# SIGINT is a clean stop too.
start_repl "$port" "n=$T/src"
kill -INT "$REPL_PID"
wait "$REPL_PID"
rc=$?
REPL_PID=""
[ "$rc" = 0 ] || die "the replicator exited $rc on SIGINT, not 0"
ok "ferry-replicator: SIGINT exits 0"

# --- ferry-hydrator: 2 for bad arguments and malformed URLs ---
N=0
start_repl "$port" "n=$T/src"
URL="http://127.0.0.1:$port/v1/n"
C=(-c "$T/hc")
code 2 "hydrator: no arguments" "$HYD"
code 2 "hydrator: URL only" "$HYD" "${C[@]}" "$URL"
code 2 "hydrator: three arguments" "$HYD" "${C[@]}" "$URL" "$T/mnt" extra
code 2 "hydrator: unknown option" "$HYD" "${C[@]}" --bogus "$URL" "$T/mnt"
code 2 "hydrator: option without its value" "$HYD" "$URL" "$T/mnt" --timeout
code 2 "hydrator: --jobs 0" "$HYD" "${C[@]}" --jobs 0 "$URL" "$T/mnt"
code 2 "hydrator: --timeout x" "$HYD" "${C[@]}" --timeout x "$URL" "$T/mnt"
code 2 "hydrator: --bwlimit fast" "$HYD" "${C[@]}" --bwlimit fast "$URL" "$T/mnt"
code 2 "hydrator: -o rw" "$HYD" "${C[@]}" -o rw "$URL" "$T/mnt"
for u in ftp://127.0.0.1/v1/n "http://127.0.0.1:$port/x/n" "http://127.0.0.1:$port/v1/" \
	"http://127.0.0.1:$port/v1/.n" "http://127.0.0.1:99999/v1/n" "http://127.0.0.1:$port/v1/a%20b"; do
	code 2 "hydrator: URL $u" "$HYD" "${C[@]}" "$u" "$T/mnt"
done
! mountpoint -q "$T/mnt" || die "a usage error mounted something"
[ ! -e "$T/hc" ] || die "a usage error made the cache directory"
for a in -h --help -V --version; do code 0 "hydrator $a" "$HYD" "$a"; shown "hydrator $a"; done
ok "ferry-hydrator: usage errors exit 2 with one line each, --help and --version 0 ($N cases)"

# --- ferry: no command (usage on stderr) or an unknown one: 2 ---
N=0
"$FERRY" >/dev/null 2>&1
rc=$?
[ "$rc" = 2 ] || die "ferry without a command exits $rc, not 2"
code 2 "ferry: unknown command" "$FERRY" frobnicate
for a in -h --help -V --version; do code 0 "ferry $a" "$FERRY" "$a"; shown "ferry $a"; done

# --- ferry sync: rsync's 1 for bad usage ---
code 1 "sync: a bad URL" "$FERRY" sync -q --cache-dir "$T/sc" ftp://x/v1/n "$T/dx"
code 1 "sync: a malformed name" "$FERRY" sync -q --cache-dir "$T/sc" "http://127.0.0.1:$port/v1/.n" "$T/dx"
code 1 "sync: a bad --filter rule" "$FERRY" sync -q --cache-dir "$T/sc" --filter 'x y' "$URL" "$T/dx"
code 1 "sync: --jobs 0" "$FERRY" sync -q --cache-dir "$T/sc" --jobs 0 "$URL" "$T/dx"
code 1 "sync: option without its value" "$FERRY" sync --exclude
code 1 "sync: one argument" "$FERRY" sync "$URL"
code 0 "sync --help" "$FERRY" sync --help
shown "sync --help"
[ ! -e "$T/dx" ] || die "a usage error made DEST"

# --- ferry verify: 2 for bad usage ---
code 2 "verify: no argument" "$FERRY" verify
code 2 "verify: two paths" "$FERRY" verify "$T/a" "$T/b"
code 2 "verify: unknown option" "$FERRY" verify --bogus "$T/a"
code 2 "verify: option without its value" "$FERRY" verify --catalog
code 0 "verify --help" "$FERRY" verify --help
shown "verify --help"
ok "ferry: usage errors exit 2 (ferry, verify) and 1 (sync), --help and --version 0 ($N cases)"

# --- the outcomes of a run ---
code 0 "sync" "$FERRY" sync -q --cache-dir "$T/sc" "$URL" "$T/dest"
code 0 "verify of the cache" "$FERRY" verify -q "$T/sc"
code 0 "verify of the tree" "$FERRY" verify -q -c "$T/sc" "$T/dest"
code 1 "verify of a directory that is no cache" "$FERRY" verify -q "$T/plain"
echo changed >"$T/dest/d/f"
"$FERRY" verify -q -c "$T/sc" "$T/dest" >/dev/null 2>&1
rc=$?
[ "$rc" = 1 ] || die "verify of a tampered tree exits $rc, not 1"
ok "ferry verify: 0 for a good cache and tree, 1 for a tampered tree and for no cache"

"$FERRY" sync -q --cache-dir "$T/sc2" "$URL" "$T/afile/dest" 2>"$T/err"
rc=$?
[ "$rc" = 11 ] || die "sync into a DEST under a file exits $rc, not 11: $(cat "$T/err")"
"$FERRY" sync -q --cache-dir "$T/sc3" "$URL" "$T/afile" 2>"$T/err"
rc=$?
[ "$rc" = 11 ] || die "sync onto a DEST that is a file exits $rc, not 11: $(cat "$T/err")"
ok "ferry sync: a DEST that cannot be written exits 11"

# A server that is not there: refused is 10 (rsync's socket I/O error); a
# connect that times out is 35 (rsync's "timeout waiting for daemon
# connection"). The timeout comes from a listener whose accept queue is
# full, so the kernel drops further SYNs (tcp_abort_on_overflow 0, the
# default) and the connect waits out ferry's 5 s.
dead=$(free_port)
code 10 "sync: connection refused" "$FERRY" sync -q --cache-dir "$T/sc8" "http://127.0.0.1:$dead/v1/n" "$T/d8"
grep -q "cannot reach" "$T/err" || die "a refused connection does not say so: $(cat "$T/err")"
if [ "$(cat /proc/sys/net/ipv4/tcp_abort_on_overflow 2>/dev/null)" = 0 ]; then
	bport=$(free_port)
	python3 - "$bport" >"$T/blackhole.out" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen(0)
fill = []
for _ in range(3):  # the accept queue holds backlog + 1: full after these
    c = socket.socket()
    c.setblocking(False)
    c.connect_ex(("127.0.0.1", port))
    fill.append(c)
time.sleep(0.5)
print("ready", flush=True)
time.sleep(120)
PY
	bpid=$!
	for i in $(seq 1 50); do grep -q ready "$T/blackhole.out" && break; sleep 0.1; done
	t0=$SECONDS
	code 35 "sync: connect times out" "$FERRY" sync -q --cache-dir "$T/sc9" "http://127.0.0.1:$bport/v1/n" "$T/d9"
	kill "$bpid"
	wait "$bpid" 2>/dev/null
	grep -qi "timeout\|timed out" "$T/err" || die "a connect that timed out does not say so: $(cat "$T/err")"
	[ $((SECONDS - t0)) -lt 30 ] || die "the connect timeout took $((SECONDS - t0)) s"
	ok "ferry sync: a refused connection exits 10, a connect that times out 35"
else
	ok "ferry sync: a refused connection exits 10 (tcp_abort_on_overflow is on: no connect timeout to make here)"
fi

# From a static server: a catalog that is not one (12), and one of a
# later format than this build reads (ferry sync 2, the hydrator's
# start-up failure 1).
mkdir -p "$T/static/v1/bad/catalog" "$T/static/v1/later/catalog"
echo 1 >"$T/static/v1/bad/HEAD"
echo 1 >"$T/static/v1/later/HEAD"
python3 -c 'import os,sys; sys.stdout.buffer.write(os.urandom(5000))' >"$T/static/v1/bad/catalog/1"
python3 - "$T/later.db" <<'PY' || die "cannot write the later-format catalog"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("pragma application_id=%d" % 0x46455259)  # ferry's, catalog.h
c.execute("pragma user_version=99")
c.execute("create table meta(key text primary key, value) without rowid")
c.commit()
PY
zstd -q -c "$T/later.db" >"$T/static/v1/later/catalog/1" || die "zstd failed"
sport=$(free_port)
python3 -m http.server --bind 127.0.0.1 "$sport" --directory "$T/static" >/dev/null 2>&1 &
spid=$!
for i in $(seq 1 100); do curl -sf "http://127.0.0.1:$sport/v1/bad/HEAD" >/dev/null && break; sleep 0.1; done
"$FERRY" sync -q --cache-dir "$T/sc4" "http://127.0.0.1:$sport/v1/bad" "$T/dbad" 2>"$T/err"
rc=$?
[ "$rc" = 12 ] || { kill "$spid"; die "sync of a catalog that is not one exits $rc, not 12: $(cat "$T/err")"; }
"$FERRY" sync -q --cache-dir "$T/sc6" "http://127.0.0.1:$sport/v1/later" "$T/dlater" 2>"$T/err"
rc=$?
[ "$rc" = 2 ] && grep -q 'later format' "$T/err" ||
	{ kill "$spid"; die "sync of a later-format catalog exits $rc, not 2: $(cat "$T/err")"; }
code 1 "hydrator: a later-format catalog" "$HYD" -c "$T/hc2" "http://127.0.0.1:$sport/v1/later" "$T/mnt"
! mountpoint -q "$T/mnt" || die "a later-format catalog was mounted"
ok "ferry sync: a catalog that is not one exits 12, one of a later format 2; the hydrator refuses the latter with 1"

# A catalog holding names no directory can take ("..", "a/b", empty, a
# NUL): each is named on stderr (its directory, its bytes as \xNN) and
# counts as an entry that could not be transferred (23); the rest is
# written.
# The catalog comes from a replicator of its own that hashes before it
# publishes (the static copy serves no manifests).
uport=$(free_port)
"$REPL" -l "127.0.0.1:$uport" -s "$T/ust" --hash-before-publish "u=$T/src" >"$T/urepl.log" 2>&1 &
upid=$!
wait_ready "$T/urepl.log" "$upid"
UURL="http://127.0.0.1:$uport/v1/u"
U="$T/static/v1/u"
mkdir -p "$U/catalog" "$U/chunk"
curl -sf "$UURL/HEAD" >"$U/HEAD" || { kill "$spid" "$upid"; die "GET HEAD"; }
ugen=$(cat "$U/HEAD")
curl -sf "$UURL/catalog/$ugen" | zstd -dq >"$T/unsafe.db" || { kill "$spid" "$upid"; die "GET catalog"; }
for id in $(sqlite3 "$T/unsafe.db" "select distinct lower(hex(id)) from chunk"); do
	curl -sf "$UURL/chunk/$id" >"$U/chunk/$id" || { kill "$spid" "$upid"; die "GET chunk $id"; }
done
kill -TERM "$upid"
wait "$upid" || { kill "$spid"; die "the second replicator did not exit 0 on SIGTERM"; }
dino=$(sqlite3 "$T/unsafe.db" "select ino from dirent where parent=1 and name=cast('d' as blob)")
fino=$(sqlite3 "$T/unsafe.db" "select ino from dirent where parent=$dino and name=cast('f' as blob)")
[ -n "$dino" ] && [ -n "$fino" ] || die "no d/f in the catalog"
sqlite3 "$T/unsafe.db" "insert into dirent values(1, 1000, X'2E2E', $fino);
	insert into dirent values($dino, 1000, X'612F62', $fino);
	insert into dirent values($dino, 1001, X'', $fino);
	insert into dirent values($dino, 1002, X'7800FF79', $fino);" || die "cannot plant the names"
zstd -q -c "$T/unsafe.db" >"$U/catalog/$ugen" || die "zstd failed"
for dry in "" -n; do
	"$FERRY" sync -q $dry --cache-dir "$T/sc7" "http://127.0.0.1:$sport/v1/u" "$T/dunsafe" 2>"$T/err"
	rc=$?
	[ "$rc" = 23 ] || { kill "$spid"; die "sync $dry of a catalog with unsafe names exits $rc, not 23: $(cat "$T/err")"; }
	for want in "path=\"$T/dunsafe\" name=\"..\"" "path=\"$T/dunsafe/d\" name=\"a/b\"" \
		"path=\"$T/dunsafe/d\" name=\"\"" "path=\"$T/dunsafe/d\" name=\"x\\x00\\xffy\""; do
		[ "$(grep -cF "not a single path component: not written $want" "$T/err")" = 1 ] ||
			{ kill "$spid"; cat "$T/err" >&2; die "sync $dry does not name the entry $want once"; }
	done
	grep -q '4 entries could not be reproduced' "$T/err" || { kill "$spid"; cat "$T/err" >&2; die "sync $dry does not count 4 failed entries"; }
done
cmp "$T/dunsafe/d/f" "$T/src/d/f" || { kill "$spid"; die "the safe entries were not written"; }
kill "$spid"
wait "$spid" 2>/dev/null
ok "ferry sync: names that are no single path component are each named (directory, bytes as \\xNN) and exit 23, dry run too"

# DEST inside a ferry mount: refused with 1 (usage).
mount_hyd "$URL" "$T/mnt" --no-backfill
code 1 "sync into a ferry mount" "$FERRY" sync -q --cache-dir "$T/sc5" "$URL" "$T/mnt/inside"
grep -qi mount "$T/err" || die "the refusal does not say why: $(cat "$T/err")"
umount_hyd "$T/mnt"
ok "ferry sync into a ferry mount exits 1"
stop_repl
