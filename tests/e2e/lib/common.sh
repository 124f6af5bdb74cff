# tests/e2e/lib/common.sh — shared set-up for the end-to-end scripts:
# a temp dir, a free loopback port, the real replicator and hydrator started
# and stopped, and cleanup that never leaves a mount behind.
# Sourced by tests/e2e/NNN-*.sh. FERRY_BIN points at build/<variant>/bin.
#
# Every process a test starts is held to account, on both builds:
#  - sanitizer reports fail the test: ASan and LSan write theirs to files
#    under $SAN_DIR (log_path), wherever the process's stderr went (a
#    daemon's, a command's 2>/dev/null); UBSan writes to stderr, which for
#    the daemons is CACHEDIR/hydrator.log and $T/repl.log. sanitizer_clean
#    looks at all of them and at every file at the top of $T, where the
#    scripts put a command's output;
#  - the replicator must exit 0 on SIGTERM (stop_repl, cleanup);
#  - a hydrator daemon cannot be waited for, so it ends its log with
#    "exit status=N pid=PID" (ferry-hydrator(1), FILES): umount_hyd and
#    cleanup wait for the daemon to go and want status 0 there, and no
#    hydrator log under $T may hold another status. A daemon the test
#    killed with SIGKILL writes no such line and is not counted against it.
#    A hydrator run with -f in the background (a job of the test's shell)
#    that the test left running, or that exited without removing its pid
#    file, is waited for by cleanup and must exit 0;
# cleanup runs all of this at exit and makes a test that passed fail
# (exit 1) when anything is wrong. A test's own EXIT trap calls cleanup
# last: on a failure it exits there.
set -u
E2E_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FERRY_BIN=${FERRY_BIN:-$(cd "$E2E_LIB/../../.." && pwd)/build/release/bin}
REPL="$FERRY_BIN/ferry-replicator"
HYD="$FERRY_BIN/ferry-hydrator"

skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok - $*"; }
log() { echo "# $*"; }

need_fuse() {
	[ "$(id -u)" -eq 0 ] || skip "needs root for FUSE mounts"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	command -v fusermount3 >/dev/null || skip "fusermount3 missing (Debian package fuse3)"
	[ -x "$REPL" ] && [ -x "$HYD" ] || die "programs not built in $FERRY_BIN"
}

T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-e2e.XXXXXX")
REPL_PID=""
E2E_NETNS="" # network namespaces to delete (ns_link)
MOUNTS=()

# Sanitizer reports of every process started from here on (the options
# already set, e.g. by tests/run.sh, are kept; a later log_path wins).
SAN_DIR="$T/sanitizer"
mkdir -p "$SAN_DIR"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}:log_path=$SAN_DIR/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}:log_path=$SAN_DIR/ubsan"
SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)'

# sanitizer_clean — 0 when no process of this test has reported anything
# so far; else the reports on stderr and 1.
sanitizer_clean() {
	local f bad=0
	for f in "$SAN_DIR"/*; do
		[ -e "$f" ] || continue
		echo "FAIL: sanitizer report $f:" >&2
		head -n 60 "$f" | sed 's/^/    | /' >&2
		bad=1
	done
	while IFS= read -r -d '' f; do
		grep -Eaq "$SAN_RE" "$f" || continue
		echo "FAIL: sanitizer report in $f:" >&2
		grep -Ea -A 40 "$SAN_RE" "$f" | head -n 60 | sed 's/^/    | /' >&2
		bad=1
	done < <(find "$T" -maxdepth 1 -type f -print0 2>/dev/null
		find "$T" -mindepth 2 -maxdepth 3 -name hydrator.log -type f -print0 2>/dev/null)
	return $bad
}

# e2e_running PID — 0 while PID runs (a zombie, exited but not yet
# waited for by its parent, does not).
e2e_running() {
	local st
	st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)
	[ -n "$st" ] && [ "$st" != Z ]
}

# e2e_gone PID SECONDS — 0 once PID no longer runs, 1 if it still does
# after SECONDS.
e2e_gone() {
	local i
	for i in $(seq 1 $(($2 * 10))); do
		e2e_running "$1" || return 0
		sleep 0.1
	done
	! e2e_running "$1"
}

# hyd_exit_status CACHEDIR PID — the status the daemon PID wrote last in
# CACHEDIR/hydrator.log ("exit status=N pid=PID"); nothing if none.
hyd_exit_status() {
	sed -n "s/.* ferry-hydrator: exit status=\(-\{0,1\}[0-9]*\) pid=$2\$/\1/p" \
		"$1/hydrator.log" 2>/dev/null | tail -n 1
}

cleanup() {
	local m f pid st kids bad=0 live=()
	# The hydrators still running, found by their pid files; those this
	# shell started with -f in the background are its jobs.
	kids=" $(jobs -p | tr '\n' ' ') "
	while IFS= read -r -d '' f; do
		pid=$(cat "$f" 2>/dev/null) || continue
		[ -n "$pid" ] || continue
		# A job of ours even when it has exited (then its pid file says
		# it did not exit cleanly); a daemon only while it runs.
		if [[ $kids == *" $pid "* ]] || e2e_running "$pid"; then
			live+=("$pid ${f%/hydrator.pid}")
		fi
	done < <(find "$T" -mindepth 2 -maxdepth 3 -name hydrator.pid -type f -print0 2>/dev/null)
	for m in "${MOUNTS[@]}"; do
		mountpoint -q "$m" 2>/dev/null && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
	done
	# Each exits by itself once unmounted, with status 0: a daemon says
	# it in its log, a foreground child to wait.
	for f in "${live[@]}"; do
		pid=${f%% *}
		if ! e2e_gone "$pid" 60; then
			echo "FAIL: hydrator $pid still running 60 s after its unmount" >&2
			kill -9 "$pid" 2>/dev/null
			bad=1
			continue
		fi
		if [[ $kids == *" $pid "* ]]; then
			wait "$pid"
			st=$?
		else
			st=$(hyd_exit_status "${f#* }" "$pid")
		fi
		[ "$st" = 0 ] || { echo "FAIL: hydrator $pid (${f#* }) exit status ${st:-not logged}, not 0" >&2; bad=1; }
	done
	if [ -n "$REPL_PID" ]; then
		kill -TERM "$REPL_PID" 2>/dev/null
		wait "$REPL_PID" 2>/dev/null
		st=$?
		[ "$st" = 0 ] || { echo "FAIL: the replicator exited $st after SIGTERM, not 0" >&2; bad=1; }
		REPL_PID=""
	fi
	# Any daemon that ended by itself while the test ran: status 0 too.
	while IFS= read -r -d '' f; do
		st=$(grep -a ' ferry-hydrator: exit status=' "$f" | grep -v ' exit status=0 pid=')
		[ -z "$st" ] || { echo "FAIL: $f: $st" >&2; bad=1; }
	done < <(find "$T" -mindepth 2 -maxdepth 3 -name hydrator.log -type f -print0 2>/dev/null)
	sanitizer_clean || bad=1
	[ -n "${KEEP_TMP:-}" ] || rm -rf "$T"
	# A test's own teardown, whatever was found; then the network
	# namespaces ns_link made (after the daemons in them have stopped).
	if declare -F e2e_after_cleanup >/dev/null; then e2e_after_cleanup; fi
	for f in $E2E_NETNS; do ip netns del "$f" 2>/dev/null; done
	[ $bad = 0 ] || exit 1
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_ready LOG PID [N] [SECS] — until LOG holds N (default 1) " ready"
# lines of replicator PID. Dies with the log if PID exits first or after
# SECS (default 120: an ASan build on a busy 2-core machine hashes slowly).
wait_ready() {
	local logf=$1 pid=$2 want=${3:-1} secs=${4:-120} i rc
	for i in $(seq 1 $((secs * 10))); do
		[ "$(grep -c ' ready' "$logf" 2>/dev/null)" -ge "$want" ] && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			rc=$?
			cat "$logf" >&2
			die "replicator $pid exited with status $rc before it was ready"
		fi
		sleep 0.1
	done
	cat "$logf" >&2
	die "replicator $pid not ready after $secs s"
}

# start_repl PORT NAME=DIR... — start the replicator in the background and
# wait until every namespace logged "ready". $REPL_OPTS (word-split) go
# before the namespaces, e.g. REPL_OPTS=--hash-before-publish for a test
# that reads manifests straight from the catalog.
start_repl() {
	local port=$1; shift
	local before
	before=$(grep -c ' ready' "$T/repl.log" 2>/dev/null || true)
	# shellcheck disable=SC2086
	"$REPL" -l "127.0.0.1:$port" -s "$T/state" ${REPL_OPTS:-} "$@" >>"$T/repl.log" 2>&1 &
	REPL_PID=$!
	wait_ready "$T/repl.log" "$REPL_PID" $(($# + ${before:-0}))
}

# stop_repl — SIGTERM; the replicator must exit 0 (its man page's clean
# shutdown) with no sanitizer report anywhere, or the test dies here.
stop_repl() {
	[ -n "$REPL_PID" ] || return 0
	local rc
	kill -TERM "$REPL_PID"
	wait "$REPL_PID"
	rc=$?
	REPL_PID=""
	[ $rc -eq 0 ] || { tail -n 20 "$T/repl.log" >&2; die "the replicator exited $rc after SIGTERM, not 0"; }
	sanitizer_clean || die "sanitizer report (above)"
}

# mount_hyd URL MNT [options...] — run the hydrator; it returns once mounted
# and its daemon is set up: the pid file names it already (the man page's
# promise that scripts rely on).
mount_hyd() {
	local url=$1 mnt=$2 pid; shift 2
	mkdir -p "$mnt"
	MOUNTS+=("$mnt")
	"$HYD" -c "$T/cache" "$@" "$url" "$mnt" || die "hydrator failed to mount $url"
	mountpoint -q "$mnt" || die "$mnt is not a mountpoint after the hydrator returned"
	pid=$(cat "$T/cache/hydrator.pid" 2>/dev/null) || die "no hydrator.pid when the hydrator returned"
	kill -0 "$pid" 2>/dev/null || die "hydrator.pid names no live process: $pid"
}

# umount_hyd MNT — unmount a mount_hyd mount: its hydrator must exit by
# itself, log exit status 0, and no process may have a sanitizer report.
umount_hyd() {
	local mnt=$1 pid st
	pid=$(cat "$T/cache/hydrator.pid" 2>/dev/null) || die "no hydrator.pid for $mnt"
	fusermount3 -u "$mnt" || die "fusermount3 -u $mnt failed"
	e2e_gone "$pid" 30 || die "hydrator pid $pid still running 30 s after unmount"
	st=$(hyd_exit_status "$T/cache" "$pid")
	[ "$st" = 0 ] || { tail -n 20 "$T/cache/hydrator.log" >&2; die "hydrator $pid exit status ${st:-not logged}, not 0"; }
	sanitizer_clean || die "sanitizer report (above)"
}

# stat_of PORT NS KEY — one counter from the replicator's stats endpoint.
repl_stat() {
	curl -sf "http://127.0.0.1:$1/v1/$2/stats" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$3"
}

# hash_stat PORT NS KEY — one field of the stats' "hashing" object.
hash_stat() {
	curl -sf "http://127.0.0.1:$1/v1/$2/stats" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["hashing"][sys.argv[1]])' "$3"
}

# wait_hashed PORT NS SECONDS — until the replicator's hashing is done
# (or there was nothing to hash).
wait_hashed() {
	local i s
	for i in $(seq 1 $(($3 * 10))); do
		s=$(hash_stat "$1" "$2" state 2>/dev/null)
		[ "$s" = done ] || [ "$s" = none ] && return 0
		sleep 0.1
	done
	return 1
}

# manifests_db NS OUT — once the replicator has hashed everything (its
# source index has nothing left to do), OUT is an SQLite file with the
# served generation's inode and dirent rows and every manifest row (the
# catalog's own and the hasher's), holes left out: what a test counts
# chunks against. Prints OUT.
manifests_db() {
	local ns=$1 out=$2 gen src i
	gen=$(cat "$T/state/$ns/HEAD")
	src="$T/state/$ns/source/$gen.db"
	for i in $(seq 1 3000); do
		[ "$(sqlite3 "$src" "select count(*) from todo" 2>/dev/null)" = 0 ] && break
		sleep 0.1
	done
	[ "$i" -lt 3000 ] || die "the replicator did not finish hashing"
	rm -f "$out"
	# the replicator may be writing its source db (a rescan): wait for
	# its lock instead of failing with "database is locked"
	sqlite3 -cmd ".timeout 30000" "$out" "attach '$T/state/$ns/catalog/$gen.db' as c;
		attach '$T/state/$ns/source/$gen.db' as s;
		create table inode as select * from c.inode;
		create table dirent as select * from c.dirent;
		create table chunk as select ino, off, len, id from c.chunk
			where id != zeroblob(32)
		union all select ino, off, len, id from s.manifest
			where id != zeroblob(32);" || die "manifests_db $out"
	echo "$out"
}

# sql DB QUERY — one value from an SQLite file (read-only).
sql() { sqlite3 -readonly "$1" "$2"; }

FERRY="$FERRY_BIN/ferry"

# status_field CACHEDIR KEY — one field of `ferry status --json`.
status_field() {
	"$FERRY" status "$1" --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}

# wait_status CACHEDIR KEY VALUE SECONDS — until the field equals VALUE.
wait_status() {
	local i v
	for i in $(seq 1 $(($4 * 5))); do
		v=$(status_field "$1" "$2" 2>/dev/null || true)
		[ "$v" = "$3" ] && return 0
		sleep 0.2
	done
	"$FERRY" status "$1" --json >&2 || true
	return 1
}

# ns_link NS_A ADDR_A NS_B ADDR_B — two network namespaces of this test
# joined by a veth pair (ADDR_* given without a prefix: both get /24),
# each with its loopback up (the veth ends: fva$$ in NS_A, fvb$$ in
# NS_B); skips when namespaces cannot be made here.
# The cleanup deletes both (and with them the veth).
ns_link() {
	local va="fva$$" vb="fvb$$"
	command -v ip >/dev/null || skip "ip (iproute2) missing"
	ip netns add "$1" 2>/dev/null || skip "cannot create network namespaces here"
	E2E_NETNS="$E2E_NETNS $1"
	ip netns add "$3" || die "ip netns add $3"
	E2E_NETNS="$E2E_NETNS $3"
	ip link add "$va" type veth peer name "$vb" || die "cannot make a veth pair"
	ip link set "$va" netns "$1"
	ip link set "$vb" netns "$3"
	ip -n "$1" addr add "$2/24" dev "$va"
	ip -n "$3" addr add "$4/24" dev "$vb"
	ip -n "$1" link set "$va" up; ip -n "$1" link set lo up
	ip -n "$3" link set "$vb" up; ip -n "$3" link set lo up
}

# A source tree of N MiB of incompressible data in files of mixed sizes,
# plus some shared content: enough to take a few seconds to hydrate.
mk_bulk_tree() { # DIR MIB
	python3 - "$1" "$2" <<'PY'
import os, random, sys
root, mib = sys.argv[1], int(sys.argv[2])
r = random.Random(3)
os.makedirs(root, exist_ok=True)
left, i = mib << 20, 0
shared = r.randbytes(1 << 20)
while left > 0:
    d = os.path.join(root, "d%02d" % (i % 7))
    os.makedirs(d, exist_ok=True)
    n = min(left, r.choice([4096, 60000, 300000, 1 << 20, 3 << 20]))
    data = r.randbytes(n)
    if i % 9 == 0:
        data = shared + data
    with open(os.path.join(d, "f%04d" % i), "wb") as f:
        f.write(data)
    left -= n
    i += 1
PY
}

# unfetched_file CATALOG CACHEDIR — the name of a non-empty regular file one
# directory below the root none of whose chunks is stored yet.
unfetched_file() {
	sqlite3 "$1" "attach '$2/state.db' as st;
	select d.name from dirent d join inode i on i.ino=d.ino where i.kind=1 and i.size>0
	and not exists (select 1 from chunk c join st.chunk s on s.id=c.id where c.ino=i.ino)
	and d.parent in (select ino from dirent where parent=1) limit 1"
}

# json_get FILE KEY — one field of the single JSON line in FILE, parsed
# strictly (bytes that are not UTF-8 fail), printed as python prints it.
json_get() {
	python3 - "$1" "$2" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
lines = raw.split(b"\n")
assert len(lines) == 2 and lines[1] == b"", "not one line: %r" % raw[:200]
print(json.loads(lines[0].decode("utf-8"))[sys.argv[2]])
PY
}
