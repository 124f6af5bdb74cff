#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR SECONDS — run every libFuzzer target of
# BUILD_DIR/libfuzzer (make fuzz builds them with clang) for SECONDS each,
# starting from a scratch copy of its committed corpus
# (tests/fuzz/corpus/NAME: the committed files are never changed). A
# crash, a leak, a timeout or a sanitizer report fails the target; the
# input that did it is kept as BUILD_DIR/artifacts/NAME-crash-...
# (rename it ok_* or bad_* to add it to the corpus that make check
# replays). Ends with "N passed, N failed".
set -u
B=${1:?usage: tests/fuzz/run.sh BUILD_DIR SECONDS}
S=${2:-60}
top=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$B" && pwd)
mkdir -p "$B/artifacts"
pass=0 fail=0 found=0
for f in "$B"/libfuzzer/fuzz_*; do
	[ -x "$f" ] || continue
	found=$((found + 1))
	n=$(basename "$f")
	n=${n#fuzz_}
	[ -d "$top/tests/fuzz/corpus/$n" ] || { echo "FAIL $n: no corpus at tests/fuzz/corpus/$n"; fail=$((fail + 1)); continue; }
	work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-fuzz-$n.XXXXXX")
	cp -a "$top/tests/fuzz/corpus/$n/." "$work/"
	rm -f "$work/README"* "$work"/*.py "$work"/*.sh
	log="$B/artifacts/$n.log"
	echo "== $n: $S s from $(ls "$work" | wc -l) inputs"
	# -handle_term=0: the request target stops its in-process server with
	# SIGTERM at exit, which is the server's to handle.
	"$f" -max_total_time="$S" -timeout=20 -rss_limit_mb=4096 \
		-handle_term=0 -print_final_stats=1 \
		-artifact_prefix="$B/artifacts/$n-" "$work" >"$log" 2>&1
	rc=$?
	grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|cov: ' "$log" | tail -n 3 | sed 's/^/   /'
	if [ $rc -eq 0 ]; then
		pass=$((pass + 1))
		echo "PASS $n"
	else
		fail=$((fail + 1))
		echo "FAIL $n (exit $rc; log $log)"
		grep -E 'ERROR|SUMMARY|crash-|leak-|timeout-' "$log" | head -n 10 | sed 's/^/   | /'
	fi
	rm -rf "$work"
done
[ $found -gt 0 ] || { echo "no libFuzzer targets in $B/libfuzzer"; exit 1; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
