# bench/lib.sh — what bench/run.sh and bench/medium.sh share. Sourced;
# the caller sets LINK (bench/link.sh) first. The EXIT trap
# unmounts MNT_ACTIVE, stops PROXY_PID, REPL_PID and REPL_TLS_PID and
# takes the link down, whatever ends the script.
now() { date +%s.%N; }
dt() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
wire() { local s; s=$("$LINK" stats); echo $((${s% *} + ${s#* })); }

# umount_wait MNT PID: unmount (lazily if busy) and wait up to 10 s for
# the daemon PID to exit.
umount_wait() {
	local mnt=$1 pid=$2 i
	fusermount3 -u "$mnt" 2>/dev/null || { sleep 1; fusermount3 -u -z "$mnt"; }
	MNT_ACTIVE=
	for i in $(seq 1 100); do
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
}

# hashing_state NS BASE_URL [CURL_OPTS...]: the replicator's background
# hashing state from /stats ("" when it does not answer). NS is a command
# prefix (nsenter ...), word-split on purpose.
hashing_state() {
	local ns=$1 base=$2
	shift 2
	$ns curl -sf "$@" "$base/stats" |
		python3 -c "import json,sys; print(json.load(sys.stdin).get('hashing', {}).get('state', ''))" 2>/dev/null
}

# until_hashed NS BASE_URL TENTHS [CURL_OPTS...]: poll every 0.1 s, up to
# TENTHS times, until hashing is done (or there is none, or no answer);
# prints the last state, returns 1 when it was still hashing.
until_hashed() {
	local ns=$1 base=$2 n=$3 i st=
	shift 3
	for i in $(seq 1 "$n"); do
		st=$(hashing_state "$ns" "$base" "$@")
		case $st in done | none | "") echo "$st"; return 0 ;; esac
		sleep 0.1
	done
	echo "$st"
	return 1
}

REPL_PID= REPL_TLS_PID= PROXY_PID= MNT_ACTIVE=
bench_cleanup() {
	[ -n "$MNT_ACTIVE" ] && mountpoint -q "$MNT_ACTIVE" && fusermount3 -u "$MNT_ACTIVE" 2>/dev/null
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	[ -n "$REPL_TLS_PID" ] && kill "$REPL_TLS_PID" 2>/dev/null
	wait 2>/dev/null
	"$LINK" down >/dev/null 2>&1
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# logged_at LOG PATTERN: epoch seconds of the first line of LOG that has
# PATTERN (fixed string), waiting for it (up to 20 minutes); NA when none
# came. A grep of the log each 0.1 s costs the machine nothing next to
# asking the daemon (a `ferry status --json` and a parser each time took
# a tenth of this 2-core VM's CPU from what was timed).
logged_at() {
	local logf=$1 pat=$2 i line
	for i in $(seq 1 12000); do
		line=$(grep -m1 -F -e "$pat" "$logf" 2>/dev/null) && break
		sleep 0.1
	done
	[ -n "$line" ] || { echo NA; return 1; }
	date -d "${line%% *}" +%s.%N
}
# complete_at LOG: when backfill logged state=complete.
complete_at() { logged_at "$1" 'backfill state=complete'; }

pid_of_cache() { # the daemon serving CACHE (its pid file; pgrep for older builds)
	cat "$1/hydrator.pid" 2>/dev/null || pgrep -f "ferry-hydrator.* -c $1 " | head -n1
}
