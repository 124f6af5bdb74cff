#!/usr/bin/env bash
# tests/run.sh BUILD_DIR — run every test against one build variant:
# the cmocka unit tests, the fuzz targets over their committed corpus, and
# the end-to-end scripts (real replicator, real FUSE mounts). A test exits
# 0 (pass), 77 (skip, with its reason on the last line) or anything else
# (fail). Ends with the plain "N passed, N failed, N skipped" line.
set -u
B=${1:?usage: tests/run.sh BUILD_DIR}
B=$(cd "$B" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
logdir="$B/test-logs"
rm -rf "$logdir"; mkdir -p "$logdir"
pass=0; fail=0; skip=0; failed=()
export FERRY_BIN="$B/bin" ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() { # name, command...
	local name=$1; shift
	local log="$logdir/$(echo "$name" | tr '/ ' '__').log"
	local t0=$SECONDS rc
	timeout -k 10 "${FERRY_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1
	rc=$?
	local dt=$((SECONDS - t0))
	if [ $rc -eq 0 ]; then
		pass=$((pass + 1)); printf 'PASS %-40s %4ss\n' "$name" "$dt"
	elif [ $rc -eq 77 ]; then
		skip=$((skip + 1)); printf 'SKIP %-40s %s\n' "$name" "$(tail -n 1 "$log")"
	else
		fail=$((fail + 1)); failed+=("$name")
		printf 'FAIL %-40s %4ss (exit %s)\n' "$name" "$dt" "$rc"
		sed 's/^/    | /' "$log" | tail -n 40
	fi
}

echo "== $(basename "$B"): unit tests"
for t in "$B"/tests/test_*; do
	[ -x "$t" ] || continue
	run_one "unit/$(basename "$t")" "$t"
done
echo "== $(basename "$B"): fuzz corpus replay"
for f in "$B"/fuzz/fuzz_*; do
	[ -x "$f" ] || continue
	n=$(basename "$f"); n=${n#fuzz_}
	if [ -d "tests/fuzz/corpus/$n" ]; then
		run_one "fuzz/$n" "$f" "tests/fuzz/corpus/$n"
	else
		echo "FAIL fuzz/$n: no corpus at tests/fuzz/corpus/$n"; fail=$((fail + 1)); failed+=("fuzz/$n")
	fi
done
echo "== $(basename "$B"): lint rules (make lint fails on planted violations)"
for l in tests/lint/[0-9]*.sh; do
	[ -e "$l" ] || continue
	run_one "lint/$(basename "$l" .sh)" bash "$l"
done
echo "== $(basename "$B"): end-to-end"
for e in tests/e2e/[0-9]*.sh; do
	[ -e "$e" ] || continue
	run_one "e2e/$(basename "$e" .sh)" bash "$e"
done
echo
[ $fail -eq 0 ] || echo "failed: ${failed[*]} (logs in $logdir)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
