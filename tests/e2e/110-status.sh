#!/usr/bin/env bash
# 110: `ferry status` finds a mount's cache through the mount table — the
# hydrator mounts with the fsname "ferry:CACHEDIR" and /proc/self/mountinfo
# shows it, kernel-escaped — and nothing else. Two mounts made from another
# working directory with relative mountpoints and relative cache
# directories whose names hold a space, a comma, a tab, a backslash and a
# byte that is not UTF-8. Checks, in order:
#  (a) the mount table records each cache, escaped (\040, \011, \134);
#  (b) status of a live mount, given relative, absolute and as a path
#      inside it, from yet another directory: the right url, the pid of
#      the hydrator of that very cache (running), the live state;
#  (c) the JSON is one line python's json.loads accepts, with an invalid
#      byte in url shown as the text \xNN;
#  (d) the one-line errors and exit codes of ferry(1): a ferry mount whose
#      recorded cache is gone, a plain directory (also one named with a
#      non-UTF-8 byte), a missing path, bad usage, a mount whose hydrator
#      was killed (ENOTCONN);
#  (e) status of each CACHEDIR after its hydrator is gone: pid 0, stopped
#      or complete.
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"

mkdir -p "$T/src/sub" "$T/work" "$T/elsewhere/deeper" "$T/plain"
python3 - "$T/src" <<'PY'
import os, random, sys
r = random.Random(110)
root = sys.argv[1]
for i in range(6):
    with open(os.path.join(root, "sub" if i % 2 else "", "f%d" % i), "wb") as f:
        f.write(r.randbytes(300000 + 1000 * i))
with open(os.path.join(root, "caf\u00e9.txt"), "w") as f:
    f.write("caf\u00e9\n")
PY
port=$(free_port)
start_repl "$port" "s=$T/src"
URL="http://127.0.0.1:$port/v1/s"

# Cache 1: a space and a comma. Cache 2: a tab, a backslash, a byte that
# is not UTF-8. Mountpoints: plain, and UTF-8.
C1N="my cache,1"
C2N=$'second\tcache\\\xff'
C1="$T/$C1N"
C2="$T/$C2N"
M1N="mnt1"
M2N=$'mnt-\xc3\xa9'
M1="$T/work/$M1N"
M2="$T/work/$M2N"
mkdir -p "$M1" "$M2"
MOUNTS+=("$M1" "$M2")
(cd "$T/work" && "$HYD" -c "../$C1N" --no-backfill "$URL" "$M1N") || die "mount 1 (relative paths)"
(cd "$T/work" && "$HYD" -c "../$C2N" "$URL" "$M2N") || die "mount 2 (relative paths)"
mountpoint -q "$M1" && mountpoint -q "$M2" || die "not mounted"

# (a) The source field of each mount is "ferry:" + the absolute cache
# directory, with the kernel's octal escapes.
python3 - "$M1" "$C1" '\040' "$M2" "$C2" '\011' <<'PY' || die "(a) the mount table does not record the cache"
import os, re, sys
a = [os.fsencode(x) for x in sys.argv[1:]]
table = open("/proc/self/mountinfo", "rb").read().splitlines()
def unesc(b):
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), b)
for mnt, cache, esc in ((a[0], a[1], a[2]), (a[3], a[4], a[5])):
    dev = os.stat(mnt).st_dev
    want = "%d:%d" % (os.major(dev), os.minor(dev))
    hits = [l for l in table if l.split(b" ")[2].decode() == want]
    assert hits, mnt
    fstype, source = hits[-1].split(b" - ", 1)[1].split(b" ")[:2]
    assert fstype == b"fuse.ferry", fstype
    assert esc in source, (esc, source)
    assert unesc(source) == b"ferry:" + os.path.realpath(cache), (source, cache)
print("# sources:", [l.split(b" - ")[1].split(b" ")[1] for l in table if b"fuse.ferry" in l])
PY
ok "(a) mountinfo records each cache as its fsname, escaped (\\040, \\011, \\134)"

# wait_gone PID — until that process has exited (30 s at most; a zombie
# waiting for its reaper counts as exited).
wait_gone() {
	e2e_gone "$1" 30 || die "process $1 still running after 30 s"
}

# st [ARGS...] — ferry status run from $T/elsewhere/deeper, so no relative
# path of the mounts means anything there by accident; sets RC and leaves
# stdout in $T/out, stderr in $T/err.
st() {
	(cd "$T/elsewhere/deeper" && "$FERRY" status "$@" >"$T/out" 2>"$T/err")
	RC=$?
}
# one_error WHAT — the last st failed with exit 1, nothing on stdout and
# exactly one line on stderr, which is valid UTF-8.
one_error() {
	[ "$RC" = 1 ] || { cat "$T/out" "$T/err" >&2; die "$1: exit $RC, not 1"; }
	[ ! -s "$T/out" ] || die "$1: something on stdout"
	[ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err" >&2; die "$1: not one line on stderr"; }
	python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$T/err" ||
		die "$1: stderr is not UTF-8"
	log "$1: $(cat "$T/err")"
}
# live_ok PATH CACHEDIR STATE — status of PATH is the live answer of the
# hydrator of CACHEDIR: exit 0, no stderr, url, pid (running), state.
live_ok() {
	local path=$1 cache=$2 want=$3 pid i u
	pid=$(cat "$cache/hydrator.pid") || die "no $cache/hydrator.pid"
	kill -0 "$pid" || die "hydrator $pid of $cache is not running"
	# The first count of the cache may still be under way: until then
	# the answer comes from the files (state stopped).
	for i in $(seq 1 50); do
		st "$path" --json
		[ "$RC" = 0 ] || { cat "$T/err" >&2; die "status $path: exit $RC"; }
		[ "$(json_get "$T/out" state)" = "$want" ] && break
		sleep 0.2
	done
	[ "$(json_get "$T/out" state)" = "$want" ] || { cat "$T/out"; die "status $path: state is not $want"; }
	[ ! -s "$T/err" ] || { cat "$T/err" >&2; die "status $path: stderr not empty"; }
	# The cache records curl's spelling of the base URL (a trailing '/').
	u=$(json_get "$T/out" url)
	[ "${u%/}" = "$URL" ] || die "status $path: url $u"
	[ "$(json_get "$T/out" pid)" = "$pid" ] || die "status $path: pid $(json_get "$T/out" pid), want $pid (the hydrator of $cache)"
	python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["elapsed_s"] > 0' "$T/out" ||
		die "status $path: not a live answer (elapsed_s 0)"
}

# (b) Mount 1 (no backfill: browsing), given relative to $T/elsewhere/deeper,
# absolute, and as a directory inside it; mount 2 likewise, until complete.
live_ok "../../work/$M1N" "$C1" browsing
live_ok "$M1" "$C1" browsing
live_ok "$M1/sub" "$C1" browsing
ok "(b) mount 1 by relative, absolute and inner path: url, pid $(cat "$C1/hydrator.pid"), browsing"
wait_status "$M2" state complete 120 || die "mount 2 did not complete its backfill"
live_ok "../../work/$M2N" "$C2" complete
live_ok "$M2/sub" "$C2" complete
[ "$(cat "$C1/hydrator.pid")" != "$(cat "$C2/hydrator.pid")" ] || die "both mounts report one pid"
ok "(b) mount 2 (UTF-8 mountpoint, cache with tab, backslash, \\xff): its own pid $(cat "$C2/hydrator.pid"), complete"
st "$M2"
[ "$RC" = 0 ] && grep -q '^state  *complete (pid' "$T/out" || { cat "$T/out" "$T/err"; die "human status of mount 2"; }
ok "(b) human output of mount 2: exit 0, state line"

# (d) A ferry mount whose recorded cache directory is gone for a moment.
mv "$C1" "$C1.away"
st "$M1" --json
mv "$C1.away" "$C1"
one_error "cache moved away"
grep -q 'ferry mount' "$T/err" || die "the error does not say it is a ferry mount"
live_ok "$M1" "$C1" browsing
ok "(d) a ferry mount whose recorded cache cannot be read: exit 1, one line"

# (d) Not a mount nor a cache, a name that is not UTF-8, a missing path.
st "$T/plain" --json
one_error "plain directory"
grep -q 'neither a ferry mount nor a ferry cache directory' "$T/err" || die "plain: unclear message"
mkdir "$T/plain/bad"$'\xff'
st "$T/plain/bad"$'\xff'
one_error "non-UTF-8 plain directory"
grep -qF 'bad\xff' "$T/err" || die "the non-UTF-8 byte is not shown as \\xff"
st "$T/no-such-dir"
one_error "missing path"
st -q "$T/plain"
one_error "plain directory with -q"
ok "(d) plain, non-UTF-8 and missing paths: exit 1, one UTF-8 line on stderr"

# (d) Usage: exit 2; --help: exit 0.
for args in "" "--bogus $T/plain" "$M1 $M2" "--watch=0 $M1" "--watch=x $M1"; do
	# shellcheck disable=SC2086 # word splitting wanted
	st $args
	[ "$RC" = 2 ] || die "ferry status $args: exit $RC, not 2"
	[ "$(wc -l <"$T/err")" = 1 ] || die "ferry status $args: not one line on stderr"
done
st --help
[ "$RC" = 0 ] && grep -q -- '-v, --verbose' "$T/out" || die "--help"
ok "(d) bad usage exits 2 with one line; --help exits 0"

# (e) Mount 2 unmounted: its cache from the files alone.
pid2=$(cat "$C2/hydrator.pid")
fusermount3 -u "$M2" || die "fusermount3 -u $M2 failed"
wait_gone "$pid2"
st "$C2" --json
[ "$RC" = 0 ] || { cat "$T/err"; die "status of cache 2: exit $RC"; }
[ "$(json_get "$T/out" pid)" = 0 ] || die "cache 2: pid not 0 after unmount"
[ "$(json_get "$T/out" state)" = complete ] || die "cache 2: state not complete"
u=$(json_get "$T/out" url)
[ "${u%/}" = "$URL" ] || die "cache 2: url $u"
st "$M2"
one_error "unmounted mountpoint"
ok "(e) cache 2 after unmount: pid 0, complete; its old mountpoint is an error"

# (d) Mount 1's hydrator killed: the mount is left dangling (ENOTCONN).
pid1=$(cat "$C1/hydrator.pid")
kill -9 "$pid1"
wait_gone "$pid1"
# The root's attributes may still be cached (stat works, statfs asks the
# daemon); a name never looked up fails stat itself.
for p in "$M1" "$M1/f2"; do
	st "$p"
	one_error "dead mount"
	grep -q 'daemon is gone' "$T/err" || die "dead mount: unclear message"
done
fusermount3 -u "$M1" 2>/dev/null || umount -l "$M1"
ok "(d) a mount whose hydrator was killed: exit 1, one line"

# (e) Cache 1 after its hydrator died (stale pid file and socket), given
# relative; -v says why there was no live answer.
st "../../$C1N" --json
[ "$RC" = 0 ] || { cat "$T/err"; die "status of cache 1: exit $RC"; }
[ "$(json_get "$T/out" pid)" = 0 ] || die "cache 1: pid not 0 after kill"
[ "$(json_get "$T/out" state)" = stopped ] || die "cache 1: state not stopped"
st -v "$C1"
[ "$RC" = 0 ] && grep -q 'debug: no live status' "$T/err" || { cat "$T/err"; die "-v shows no debug line"; }
ok "(e) cache 1 after kill -9: pid 0, stopped; -v explains"

# (c) An invalid byte in a string of the JSON: a copy of cache 1 whose
# catalogs/url ends in 0xff.
cp -a "$C1" "$T/copy"$'\xfe'
printf '%s\xff\n' "$URL" >"$T/copy"$'\xfe'"/catalogs/url"
st "$T/copy"$'\xfe' --json
[ "$RC" = 0 ] || { cat "$T/err"; die "status of the copy: exit $RC"; }
[ "$(json_get "$T/out" url)" = "$URL\\xff" ] || die "url with 0xff is not shown as \\xff: $(cat "$T/out")"
ok "(c) JSON stays valid UTF-8: an invalid byte in url is the text \\xff"
