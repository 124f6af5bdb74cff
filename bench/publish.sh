#!/usr/bin/env bash
# bench/publish.sh BUILD_DIR — ferry-replicator --publish at two sizes
# (docs/performance.md, "Publishing"): the bench's tiny and small trees
# (bench/gen_tree.py), each published three times into a fresh OUTDIR:
#   first      every chunk object written
#   unchanged  the same tree again: the walk only, nothing written
#   changed    after gen_tree.py --mutate 1 (1% of files changed)
# Prints seconds, objects written and bytes written per run. No root.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:?usage: bench/publish.sh BUILD_DIR}" && pwd)
W=$ROOT/build/bench/work/publish
REPL="$B/bin/ferry-replicator"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2" | tail -n 1; }
echo "| tree | entries | bytes | run | seconds | objects written | bytes written | objects in all |"
echo "|---|---|---|---|---|---|---|---|"
for scale in tiny small; do
	rm -rf "$W/$scale"
	mkdir -p "$W/$scale"
	python3 "$ROOT/bench/gen_tree.py" "$W/$scale/tree" --scale "$scale" >/dev/null || exit 1
	entries=$(find "$W/$scale/tree" | wc -l)
	bytes=$(du -sb --apparent-size "$W/$scale/tree" | cut -f1)
	for run in first unchanged changed; do
		[ "$run" = changed ] && python3 "$ROOT/bench/gen_tree.py" "$W/$scale/tree" --mutate 1 >/dev/null
		sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
		log="$W/$scale/$run.log"
		t0=$(date +%s.%N)
		"$REPL" -s "$W/$scale/state" --publish "t=$W/$scale/out/v1/t" "t=$W/$scale/tree" 2>"$log" || { cat "$log"; exit 1; }
		t1=$(date +%s.%N)
		secs=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
		echo "| $scale | $entries | $bytes | $run | $secs | $(field written "$log") | $(field written_bytes "$log") | $(field chunks "$log") |"
	done
done
