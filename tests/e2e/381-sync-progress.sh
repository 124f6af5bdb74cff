#!/usr/bin/env bash
# 381: `ferry sync -P` never shows its percentage going backwards. The
# replicator publishes first and hashes after (FERRY_HASH_DELAY_MS slows
# it: the manifests of three segments of files arrive over seconds), so
# the fetch's total grows while the sync runs. While it grows the progress
# line shows the bytes stored "of at least" the total known so far, with
# no percentage and no time to go; once it is final, a percentage that
# only goes up within each phase (fetch, then write), as ferry(1) says.
. "$(dirname "$0")/lib/common.sh"
[ -x "$FERRY" ] || die "ferry not built"
[ -x "$REPL" ] || die "ferry-replicator not built"
# 2,100 files: inos over three manifest segments (1,024 inos each); every
# 150th is 1 MiB, the rest 4 KiB.
python3 - "$T/src" <<'PY'
import os, random, sys
root, r = sys.argv[1], random.Random(381)
for i in range(2100):
    d = os.path.join(root, "d%d" % (i // 500))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d" % i), "wb") as f:
        f.write(r.randbytes(1 << 20 if i % 150 == 0 else 4096))
PY
port=$(free_port)
FERRY_HASH_DELAY_MS=3 REPL_OPTS="--scan-threads 1" start_repl "$port" "p=$T/src"
ready=$(grep ' ready' "$T/repl.log" | tail -n 1)
echo "$ready" | grep -q "pending=2100 " || die "the files are not pending at publication: $ready"
URL="http://127.0.0.1:$port/v1/p"

"$FERRY" sync -P --cache-dir "$T/cache" "$URL" "$T/dest" >"$T/progress.out" 2>"$T/progress.err" ||
	{ cat "$T/progress.err"; die "the sync failed"; }
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs"; }
python3 - "$T/progress.out" <<'PY' || die "the progress line went backwards or showed a percentage too early (above)"
import re, sys
text = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
lines = [l.replace("\x1b[K", "").strip() for l in re.split(r"[\r\n]", text)]
last = {}
growing = shown = 0
totals = []
for l in lines:
    m = re.search(r" (fetch|write) ", l)
    if not m:
        continue
    phase = m.group(1)
    man = re.search(r"manifests=(\d+)/(\d+)", l)
    g = re.search(r"of at least (\S+)", l)
    p = re.match(r"\S+\s+(\d+)%", l)
    if g:
        growing += 1
        totals.append(g.group(1))
        continue
    if not p:
        sys.exit("a progress line with neither a percentage nor 'of at least': %r" % l)
    if man and int(man.group(1)) < int(man.group(2)):
        sys.exit("a percentage while manifests are still coming: %r" % l)
    pct = int(p.group(1))
    if pct < last.get(phase, 0):
        sys.exit("the %s percentage went from %d%% to %d%%: %r" % (phase, last[phase], pct, l))
    last[phase] = pct
    shown += 1
if growing < 2 or len(set(totals)) < 2:
    sys.exit("the total was not seen growing (%d 'of at least' lines: %s)" % (growing, totals))
if last.get("write") != 100:
    sys.exit("the run did not end at 100%% written: %s" % last)
print("%d lines while the total grew (%s ... %s), %d with a percentage" % (growing, totals[0], totals[-1], shown))
PY
ok "progress: 'of at least' while manifests arrive, then percentages that never go down"
stop_repl
