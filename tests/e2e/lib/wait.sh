# tests/e2e/lib/wait.sh — waits on a condition, each with a generous bound,
# in place of fixed sleeps. Sourced after common.sh by the scripts that use
# it. Each returns 0 once the condition holds and 1 when the bound passed
# (the caller says what failed); none asserts anything about time.

# wait_for SECONDS CMD... — until CMD succeeds (polled every 0.1 s; the
# bound counts seconds, however long CMD takes).
wait_for() {
	local end=$((SECONDS + $1))
	shift
	while [ "$SECONDS" -lt "$end" ]; do
		"$@" && return 0
		sleep 0.1
	done
	"$@"
}

# wait_exited PID [SECONDS] — until process PID has exited (default 30 s).
wait_exited() {
	wait_for "${2:-30}" eval "! kill -0 $1 2>/dev/null"
}

# repl_conns PORT — how many TCP connections to local port PORT are open
# on this machine's side (established, or closed by the peer and not yet
# by us); the listening socket is not counted.
repl_conns() {
	ss -Htn state established state close-wait state syn-recv "( sport = :$1 )" | wc -l
}

# wait_repl_quiet PORT [SECONDS] — until the replicator on PORT has closed
# every connection (default 30 s): after a client was killed, its
# counters (chunks_served...) no longer move once this holds, since
# nothing is counted for a connection that is gone.
wait_repl_quiet() {
	wait_for "${2:-30}" eval "[ \"\$(repl_conns $1)\" = 0 ]"
}
