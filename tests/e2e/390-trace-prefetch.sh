#!/usr/bin/env bash
# 390: a mount records its first reads; `ferry trace export` writes them
# as a trace (paths, each file's size and mtime, ranges in read order);
# `ferry trace show` prints it; a fresh mount with --prefetch TRACE (and
# no backfill) fetches exactly the chunks of the traced ranges of files
# unchanged since, and nothing else: with the replicator stopped those
# files read back, a file the trace says changed and a file never read
# do not. A bad trace is a usage error (exit 2) naming the line.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"

python3 - "$T/src" <<'PY'
import os, random, sys
root = sys.argv[1]
r = random.Random(390)
for d, n, size in (("data", 12, 150000), ("other", 6, 90000)):
    os.makedirs(os.path.join(root, d))
    for i in range(n):
        with open(os.path.join(root, d, "f%02d" % i), "wb") as f:
            f.write(r.randbytes(size))
os.makedirs(os.path.join(root, "model"))
with open(os.path.join(root, "model", "big name.bin"), "wb") as f:
    f.write(r.randbytes(8 << 20))
PY
port=$(free_port)
start_repl "$port" "t=$T/src"
URL="http://127.0.0.1:$port/v1/t"
wait_hashed "$port" t 120 || die "the replicator did not finish hashing"
mdb=$(manifests_db t "$T/manifests.db")

# 1. The rehearsal: read two data files whole and 1 MiB in the middle of
# the model; nothing else moves (no backfill).
mount_hyd "$URL" "$T/m1" --no-backfill
cat "$T/m1/data/f03" >"$T/f03.a"
cat "$T/m1/data/f07" >/dev/null
dd if="$T/m1/model/big name.bin" of="$T/mid.a" bs=64k skip=32 count=16 status=none
cmp "$T/f03.a" "$T/src/data/f03" || die "data/f03 read wrong"
# The record is written by the mount as it goes (at least every second).
wait_for 10 grep -q '^r ' "$T/cache/trace.rec" || die "no read recorded in trace.rec"
"$FERRY" trace export "$T/m1" -o "$T/live.trace" 2>"$T/export.err" || { cat "$T/export.err"; die "export from the mountpoint failed"; }
umount_hyd "$T/m1"
"$FERRY" trace export "$T/cache" -o "$T/job.trace" 2>"$T/export.err" || { cat "$T/export.err"; die "export failed"; }
grep -q "3 files" "$T/export.err" || { cat "$T/export.err"; die "export does not count 3 files"; }
head -1 "$T/job.trace" | grep -qx 'ferry-trace 1' || die "no magic line"
tail -1 "$T/job.trace" | grep -qx 'end' || die "no end line"
# Paths, in the order first read; the space in a name escaped.
paths=$(awk '$1 == "f" { print $5 }' "$T/job.trace" | tr '\n' ' ')
[ "$paths" = "data/f03 data/f07 model/big%20name.bin " ] || die "trace files are: $paths"
# The model's range covers what dd read (2 MiB .. 3 MiB) and not the
# whole file.
python3 - "$T/job.trace" <<'PY' || die "the model's ranges are wrong"
import sys
files, rng = {}, []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "f":
        files[f[1]] = (int(f[2]), f[4])
    elif f[0] == "r":
        rng.append((files[f[2]][1], int(f[3]), int(f[4])))
m = [(o, l) for p, o, l in rng if p.startswith("model/")]
assert m, rng
lo, hi = min(o for o, _ in m), max(o + l for o, l in m)
assert lo <= 2 << 20 and hi >= 3 << 20, (lo, hi)
assert sum(l for _, l in m) < 8 << 20, m
for p, o, l in rng:
    if p.startswith("data/"):
        assert (o, l) == (0, 150000), (p, o, l)
PY
ok "export: 3 files in read order, whole data files, the model's middle only"
"$FERRY" trace show "$T/job.trace" >"$T/show.out" 2>"$T/show.err" || die "trace show failed"
grep -q "model/big name.bin" "$T/show.out" || die "show does not print the path"
grep -q "3 files" "$T/show.err" || die "show's summary"
"$FERRY" trace show --files "$T/job.trace" >"$T/showf.out" 2>/dev/null || die "trace show --files failed"
[ "$(grep -cE '^ *[0-9]+\.[0-9]+ ' "$T/showf.out")" = 3 ] || { cat "$T/showf.out"; die "show --files is not one line a file"; }
cmp -s "$T/live.trace" "$T/job.trace" || log "the live export differs from the final one (reads after it)"
ok "trace show prints ranges and files"

# data/f07 "changed since the trace": another mtime in the trace.
python3 - "$T/job.trace" "$T/replay.trace" <<'PY'
import sys
out = []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split(" ")
    if f[0] == "f" and f[4] == "data/f07":
        f[3] = str(int(f[3]) + 1)
    out.append(" ".join(f))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY

# A bad trace: refused before mounting, exit 2, the line named.
printf 'ferry-trace 1\ngeneration 1\nf 0 10 5 ../x\nend\n' >"$T/bad.trace"
mkdir -p "$T/m2"
"$HYD" -c "$T/cache2" --prefetch "$T/bad.trace" "$URL" "$T/m2" 2>"$T/bad.err"
rc=$?
[ $rc = 2 ] || die "a bad trace: exit $rc, not 2"
grep -q "line 3" "$T/bad.err" || { cat "$T/bad.err"; die "the error does not name the line"; }
mountpoint -q "$T/m2" && die "mounted with a bad trace"
ok "a bad trace is refused (exit 2, line 3)"

# 2. The replay on a fresh cache: only the traced chunks move.
served0=$(repl_stat "$port" t chunks_served)
"$HYD" -c "$T/cache2" --no-backfill --timeout 3 --prefetch "$T/replay.trace" "$URL" "$T/m2" ||
	die "mount with --prefetch"
MOUNTS+=("$T/m2")
wait_status "$T/cache2" prefetch done 60 || die "prefetch did not finish"
[ "$(status_field "$T/cache2" prefetch_files)" = 3 ] || die "prefetch_files != 3"
[ "$(status_field "$T/cache2" prefetch_skipped)" = 1 ] || die "prefetch_skipped != 1 (data/f07 changed)"
"$FERRY" status "$T/cache2" | grep -q "prefetch done" || die "ferry status does not show the prefetch"
want=$(python3 - "$T/replay.trace" "$mdb" <<'PY'
import sqlite3, sys
files, rng = {}, []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "f":
        files[f[1]] = (int(f[2]), int(f[3]), f[4].replace("%20", " "))
    elif f[0] == "r":
        rng.append((files[f[2]], int(f[3]), int(f[4])))
db = sqlite3.connect(sys.argv[2])
def ino_of(path):
    ino = 1
    for name in path.split("/"):
        ino = db.execute("select ino from dirent where parent=? and cast(name as text)=?",
                         (ino, name)).fetchone()[0]
    return ino
ids = set()
for (size, mtime, path), off, ln in rng:
    ino = ino_of(path)
    s, m = db.execute("select size, mtime_ns from inode where ino=?", (ino,)).fetchone()
    if (s, m) != (size, mtime):
        continue
    for (cid,) in db.execute("select id from chunk where ino=? and off < ? and off + len > ?",
                             (ino, off + ln, off)):
        ids.add(cid)
print(len(ids))
PY
)
[ "$want" -gt 0 ] || die "no chunk to expect"
# Every chunk asked for lands: the flights end within the wait's bound.
wait_for 30 eval '[ "$(($(repl_stat "$port" t chunks_served) - served0))" -ge "$want" ]' ||
	die "the replicator served $(($(repl_stat "$port" t chunks_served) - served0)) chunks, want $want"
sleep 1 # (an observation window: nothing more may come)
got=$(($(repl_stat "$port" t chunks_served) - served0))
[ "$got" = "$want" ] || die "prefetch moved $got chunks, the trace names $want"
ok "prefetch moved exactly the $want chunks of the traced ranges"
# In the trace's order: the store appends chunks as they arrive, so
# data/f03's (first in the trace) sit before the model's (last), on
# average (the decode threads may swap neighbours).
python3 - "$T/cache2/state.db" "$mdb" <<'PY' || die "the prefetch did not follow the trace's order"
import sqlite3, sys
st, db = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
def ids(d, f):
    ino = db.execute("select d.ino from dirent d join dirent p on d.parent = p.ino "
                     "where cast(p.name as text) = ? and cast(d.name as text) = ?", (d, f)).fetchone()[0]
    return [r[0] for r in db.execute("select id from chunk where ino = ?", (ino,))]
pos = {r[0]: i for i, r in enumerate(st.execute("select id from chunk order by vol, off"))}
a = [pos[i] for i in ids("data", "f03")]
b = [pos[i] for i in ids("model", "big name.bin") if i in pos]
assert a and b, (a, b)
assert sum(a) / len(a) < sum(b) / len(b), (a, b)
PY
ok "the chunks arrived in the trace's order"

stop_repl
cmp "$T/m2/data/f03" "$T/src/data/f03" || die "data/f03 does not read back offline"
cat "$T/m2/data/f07" >/dev/null 2>&1 && die "data/f07 (changed) was prefetched"
cat "$T/m2/other/f01" >/dev/null 2>&1 && die "other/f01 (never read) was fetched"
ok "offline: the traced file reads back, the changed and the unread do not"
pid=$(cat "$T/cache2/hydrator.pid")
fusermount3 -u "$T/m2" || die "unmount m2"
e2e_gone "$pid" 30 || die "hydrator still running"
[ "$(hyd_exit_status "$T/cache2" "$pid")" = 0 ] || die "hydrator exit status"
sanitizer_clean || die "sanitizer report (above)"

# --previous: the rehearsal's record survives one more mount.
"$FERRY" trace export --previous -q "$T/cache2" >/dev/null 2>&1 && die "cache2 has no previous record"
"$FERRY" trace export -q "$T/cache2" -o "$T/c2.trace" || die "export of cache2"
grep -q "data/f03" "$T/c2.trace" || die "cache2's own reads are not in its record"
ok "the second mount recorded its own reads"

# 3. Pushes: with the data stored, a first read of a small file pushes the
# files after it in its directory into the kernel's cache; the job's reads
# of those never reach the mount, so the record keeps the pushes in their
# place ("p" lines), and --reads-only leaves them out.
start_repl "$port" "t=$T/src"
mkdir -p "$T/m3"
"$HYD" -c "$T/cache3" "$URL" "$T/m3" || die "mount 3"
MOUNTS+=("$T/m3")
wait_status "$T/cache3" state complete 120 || die "backfill of mount 3 did not complete"
ls -l "$T/m3/data" >/dev/null
cat "$T/m3/data/f00" >/dev/null
wait_for 10 grep -q '^p ' "$T/cache3/trace.rec" || die "no push recorded (p lines) in trace.rec"
"$FERRY" trace export -q "$T/cache3" -o "$T/push.trace" || die "export with pushes"
"$FERRY" trace export -q --reads-only "$T/cache3" -o "$T/reads.trace" || die "export --reads-only"
np=$(grep -c '^f ' "$T/push.trace")
nr=$(grep -c '^f ' "$T/reads.trace")
[ "$nr" = 1 ] || die "--reads-only names $nr files, not 1 (data/f00)"
[ "$np" -gt 1 ] || die "the pushes are not in the default export ($np files)"
awk '$1 == "f" { print $5 }' "$T/push.trace" | grep -qv '^data/' && die "a pushed file outside data/"
ok "pushed files count as read ($np files), --reads-only leaves them out"
pid=$(cat "$T/cache3/hydrator.pid")
fusermount3 -u "$T/m3" || die "unmount m3"
e2e_gone "$pid" 30 || die "hydrator 3 still running"
[ "$(hyd_exit_status "$T/cache3" "$pid")" = 0 ] || die "hydrator 3 exit status"

# 4. ferry sync --prefetch: the trace's files first (the plan is logged,
# data/f07 skipped as changed), then the rest; the copy is exact. A bad
# trace is a syntax error (rsync's exit 1) before anything moves.
"$FERRY" sync --prefetch "$T/replay.trace" --cache-dir "$T/cache4" "$URL" "$T/copy" >"$T/sync.out" 2>"$T/sync.err" ||
	{ cat "$T/sync.err"; die "ferry sync --prefetch failed"; }
grep -q "prefetch files=3 gone=0 changed=1 " "$T/sync.err" || { cat "$T/sync.err"; die "sync did not plan the trace"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/copy" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "the copy differs"; }
"$FERRY" sync --prefetch "$T/bad.trace" --cache-dir "$T/cache5" "$URL" "$T/copy5" >/dev/null 2>"$T/sync5.err"
rc=$?
[ $rc = 1 ] || die "sync with a bad trace: exit $rc, not 1"
grep -q "line 3" "$T/sync5.err" || die "sync's error does not name the line"
[ -e "$T/copy5" ] && die "sync with a bad trace made DEST"
ok "ferry sync --prefetch: the trace planned first, the copy exact; a bad trace refused"
stop_repl
