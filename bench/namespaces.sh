#!/usr/bin/env bash
# bench/namespaces.sh BUILD_DIR [COUNTS...] — one replicator serving many
# namespaces from a --namespaces file (issue 12). For each count (default
# "100 1000") and each kind of tree — "small" (one directory of 10 files
# of 1-4 KiB each) and "empty" (an empty directory) — it measures, on
# loopback:
#   publish_s   start (fresh state dir) until every namespace logged
#               "namespace ready" (walked and published)
#   hashed_s    start until every small namespace logged "namespace
#               hashed" (its pending files hashed in the background)
#   rss_mb      VmRSS after that and 3 s idle
#   kb_per_ns   (rss - rss of the same server with one empty namespace)
#               / count
#   fds, fds_per_ns, threads   open descriptors (/proc/PID/fd) and threads
#               at that point (fds_per_ns as kb_per_ns, over the baseline)
#   heads_s     one GET /v1/NAME/HEAD to every namespace (one curl, one
#               keep-alive connection)
#   rss_mb_c, fds_c   after one chunk of every small namespace was served
#               (each namespace then pools a worker context: an open
#               source index, 3 descriptors)
#   rss_mb_i, fds_i   the same 45 s later (contexts idle for 30 s are
#               closed by a sweep every 10 s)
#   restart_s   a restart on the same state until every namespace is
#               ready again (nothing changed: nothing re-published)
#   add_s       SIGHUP with one more line in the file until the new
#               namespace is ready (behind a rescan of all the others)
# and prints one table row per count and kind. The trees go to $WORK
# (default build/bench/work/namespaces). Any user; no FUSE.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/namespaces.sh BUILD_DIR [COUNTS...]}" && pwd)
shift
COUNTS=${*:-100 1000}
WORK=${WORK:-$ROOT/build/bench/work/namespaces}
PORT=${PORT:-7093}
REPL="$B/bin/ferry-replicator"
[ -x "$REPL" ] || { echo "no $REPL" >&2; exit 1; }
now() { date +%s.%N; }
dt() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
REPL_PID=
cleanup() {
	[ -n "$REPL_PID" ] && kill "$REPL_PID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT

mk_trees() { # KIND COUNT: $WORK/KIND/nsNNNNN, and $WORK/KIND-COUNT.ns
	python3 - "$WORK/$1" "$2" "$1" "$WORK/$1-$2.ns" <<'PY'
import os, random, sys
root, n, kind, listf = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = random.Random(12)
with open(listf, "w") as out:
    out.write("# bench/namespaces.sh: %d %s namespaces\n" % (n, kind))
    for i in range(n):
        d = os.path.join(root, "ns%05d" % i)
        if not os.path.isdir(d):
            os.makedirs(d)
            if kind == "small":
                for j in range(10):
                    with open(os.path.join(d, "f%d" % j), "wb") as f:
                        f.write(r.randbytes(r.randint(1024, 4096)))
        out.write("ns%05d=%s\n" % (i, d))
PY
}

# wait_lines PATTERN COUNT SECONDS — until the log has COUNT such lines.
wait_lines() {
	local end=$((SECONDS + $3))
	while [ "$(grep -c -- "$1" "$LOG")" -lt "$2" ]; do
		[ $SECONDS -lt $end ] || { echo "timeout: $1 x$2" >&2; tail -n 3 "$LOG" >&2; return 1; }
		kill -0 "$REPL_PID" 2>/dev/null || { echo "replicator died" >&2; tail "$LOG" >&2; return 1; }
		sleep 0.05
	done
}
start() { # NSFILE: start the replicator on $STATE
	"$REPL" -l "127.0.0.1:$PORT" -s "$STATE" --namespaces "$1" >>"$LOG" 2>&1 &
	REPL_PID=$!
}
stop() {
	kill "$REPL_PID"
	wait "$REPL_PID" || echo "replicator exit status $?" >&2
	REPL_PID=
}
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$REPL_PID/status"; }
fds() { ls "/proc/$REPL_PID/fd" | wc -l; }
threads() { awk '/^Threads/ { print $2 }' "/proc/$REPL_PID/status"; }

mkdir -p "$WORK"
LOG="$WORK/repl.log"
STATE="$WORK/state"

# the baseline: one empty namespace
mk_trees empty 1
rm -rf "$STATE" "$LOG"
start "$WORK/empty-1.ns"
wait_lines ' ready ns=' 1 60 || exit 1
sleep 3
base_rss=$(rss_kb)
base_fds=$(fds)
stop
echo "# baseline (one empty namespace): rss=${base_rss} kB fds=${base_fds} nofile=$(ulimit -n) cpus=$(nproc)"

printf '| namespaces | tree | publish s | hashed s | RSS MB | KB/ns | fds | fds/ns | threads | HEAD to all s | RSS MB after a chunk each | fds after | RSS MB 45 s later | fds 45 s later | restart s | add one s |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for n in $COUNTS; do
	for kind in small empty; do
		mk_trees "$kind" "$n"
		nsf="$WORK/$kind-$n.ns"
		rm -rf "$STATE" "$LOG"
		sync
		t0=$(now)
		start "$nsf"
		wait_lines ' ready ns=' "$n" 1200 || exit 1
		t1=$(now)
		hashed=-
		if [ "$kind" = small ]; then
			wait_lines ' hashed ns=' "$n" 1200 || exit 1
			hashed=$(dt "$t0" "$(now)")
		fi
		sleep 3
		rss=$(rss_kb)
		fd=$(fds)
		th=$(threads)
		# one keep-alive connection asks every HEAD
		python3 -c "import sys; [print('url = \"http://127.0.0.1:%s/v1/ns%05d/HEAD\"\noutput = /dev/null' % (sys.argv[1], i)) for i in range(int(sys.argv[2]))]" \
			"$PORT" "$n" >"$WORK/heads.cfg"
		h0=$(now)
		curl -s -f -K "$WORK/heads.cfg" || echo "a HEAD failed" >&2
		heads=$(dt "$h0" "$(now)")
		rss_c=- fd_c=- rss_i=- fd_i=-
		if [ "$kind" = small ]; then
			python3 - "$STATE" "$PORT" "$n" >"$WORK/chunks.cfg" <<'PY'
import sqlite3, sys
state, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    name = "ns%05d" % i
    gen = open("%s/%s/HEAD" % (state, name)).read().strip()
    db = sqlite3.connect("file:%s/%s/source/%s.db?mode=ro" % (state, name, gen), uri=True)
    cid = db.execute("select lower(hex(id)) from chunk limit 1").fetchone()[0]
    print('url = "http://127.0.0.1:%s/v1/%s/chunk/%s"\noutput = /dev/null' % (port, name, cid))
PY
			curl -s -f -K "$WORK/chunks.cfg" || echo "a chunk request failed" >&2
			sleep 1
			rss_c=$(awk -v k="$(rss_kb)" 'BEGIN { printf "%.1f", k / 1024 }')
			fd_c=$(fds)
			sleep 45
			rss_i=$(awk -v k="$(rss_kb)" 'BEGIN { printf "%.1f", k / 1024 }')
			fd_i=$(fds)
		fi
		stop
		cp "$nsf" "$WORK/cur.ns"
		r0=$(now)
		start "$WORK/cur.ns"
		wait_lines ' ready ns=' $((2 * n)) 1200 || exit 1
		restart=$(dt "$r0" "$(now)")
		# one more namespace, by SIGHUP
		mkdir -p "$WORK/extra"
		cp "$nsf" "$WORK/plus.ns"
		echo "extra=$WORK/extra" >>"$WORK/plus.ns"
		sleep 1
		start_hup=$(now)
		cp "$WORK/plus.ns" "$WORK/cur.ns"
		kill -HUP "$REPL_PID"
		wait_lines ' ready ns=extra ' 1 600 || exit 1
		add=$(dt "$start_hup" "$(now)")
		stop
		printf '| %s | %s | %s | %s | %.1f | %.1f | %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
			"$n" "$kind" "$(dt "$t0" "$t1")" "$hashed" \
			"$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
			"$(awk -v k="$rss" -v b="$base_rss" -v n="$n" 'BEGIN { print (k - b) / n }')" \
			"$fd" "$(awk -v f="$fd" -v b="$base_fds" -v n="$n" 'BEGIN { print (f - b) / n }')" \
			"$th" "$heads" "$rss_c" "$fd_c" "$rss_i" "$fd_i" "$restart" "$add"
	done
done
