# bench/lib.sh — what bench/run.sh and bench/medium.sh share. Sourced;
# the caller sets WAN (the shared kit's wan.sh) first. The EXIT trap
# unmounts MNT_ACTIVE, stops PROXY_PID, REPL_PID and REPL_TLS_PID and
# takes the link down, whatever ends the script.
now() { date +%s.%N; }
dt() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
wire() { local s; s=$($WAN stats); echo $((${s% *} + ${s#* })); }

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

REPL_PID= REPL_TLS_PID= PROXY_PID= MNT_ACTIVE=
bench_cleanup() {
	[ -n "$MNT_ACTIVE" ] && mountpoint -q "$MNT_ACTIVE" && fusermount3 -u "$MNT_ACTIVE" 2>/dev/null
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	[ -n "$REPL_TLS_PID" ] && kill "$REPL_TLS_PID" 2>/dev/null
	wait 2>/dev/null
	"$WAN" down >/dev/null 2>&1
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
