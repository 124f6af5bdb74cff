#!/usr/bin/env bash
# 403: ferry-replicator --serve-last serves the generation its state holds
# at once, before its walk (what a mount over ssh and a restart at scale
# want: browsable now, the walk's changes at the next poll).
#  (a) restarted with --serve-last, it serves the generation its state
#      holds before its walk runs (the log says so, in that order; HEAD
#      answers it; a mount lists the tree); the walk that follows finds
#      no change and publishes nothing;
#  (b) a change after that is published by the next walk (its
#      --rescan-interval), and the mount switches to it.
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$REPL" ] || die "ferry-replicator not built"
mkdir -p "$T/src/d"
printf 'one\n' >"$T/src/a.txt"
printf 'two\n' >"$T/src/d/b.txt"
port=$(free_port)
start_repl "$port" last="$T/src"
stop_repl
URL="http://127.0.0.1:$port/v1/last"

# (a) restarted with --serve-last
: >"$T/repl.log"
REPL_OPTS="--serve-last --rescan-interval 1" start_repl "$port" last="$T/src"
grep -q 'serving the last generation before the walk ns=last generation=1' "$T/repl.log" ||
	{ cat "$T/repl.log"; die "(a) --serve-last did not say it serves generation 1"; }
[ "$(curl -sf "$URL/HEAD")" = 1 ] || die "(a) --serve-last: HEAD is not generation 1"
for i in $(seq 1 100); do grep -q 'rescan found no change ns=last' "$T/repl.log" && break; sleep 0.05; done
first=$(grep -n 'serving the last generation' "$T/repl.log" | cut -d: -f1)
walk=$(grep -n 'rescan found no change ns=last' "$T/repl.log" | head -1 | cut -d: -f1)
[ -n "$walk" ] && [ "$first" -lt "$walk" ] || { cat "$T/repl.log"; die "(a) the walk did not follow, or came first"; }
mount_hyd "$URL" "$T/mnt" --poll 1
[ "$(ls "$T/mnt" | tr '\n' ' ')" = "a.txt d " ] || die "(a) the mount does not list the last generation: $(ls "$T/mnt")"
ok "(a) --serve-last serves the state's generation before its walk, which finds no change"

# (b) a change: the next walk publishes generation 2
printf 'three\n' >"$T/src/c.txt"
for i in $(seq 1 200); do [ "$(curl -sf "$URL/HEAD")" = 2 ] && break; sleep 0.1; done
[ "$(curl -sf "$URL/HEAD")" = 2 ] || { tail "$T/repl.log"; die "(b) the walk after --serve-last did not publish generation 2"; }
for i in $(seq 1 100); do [ -e "$T/mnt/c.txt" ] && break; sleep 0.1; done
[ "$(cat "$T/mnt/c.txt" 2>/dev/null)" = three ] && [ "$(cat "$T/mnt/a.txt")" = one ] ||
	die "(b) the mount did not switch to generation 2"
umount_hyd "$T/mnt"
stop_repl
ok "(b) the walk that follows publishes the change; the mount switches to it"
