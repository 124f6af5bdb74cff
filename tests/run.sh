#!/usr/bin/env bash
# tests/run.sh [--strict] [--only SUITE,...] BUILD_DIR — run every test
# (or those of the suites named: unit, fuzz, lint, e2e) against one build
# variant: the cmocka unit tests, the fuzz targets over their committed
# corpus (and the check that a wrong verdict fails the replay), the lint
# rules, and the end-to-end scripts (real replicator, real FUSE mounts).
#
# A test exits 0 (pass), 77 (skip, with its reason on the last line) or
# anything else (fail). Beyond its exit status:
#  - a sanitizer report fails the test that started the process: one in
#    the test's output, or one ASan/LSan wrote under the test's log_path
#    (so also from a child or daemon whose stderr went elsewhere);
#  - a unit test whose cmocka output says "[  FAILED  ]" or "[  ERROR   ]"
#    fails though it exited 0 (cmocka exits 0 when a group teardown
#    fails), and one that says "[  SKIPPED ]" (cmocka's skip(), also exit
#    0) is a skip, not a pass;
#  - a suite (unit, fuzz, lint, e2e) that finds no test fails: a build
#    without its test binaries must not pass as "0 passed".
# --strict (or FERRY_STRICT=1): every skip is a failure too. make check
# runs strict unless STRICT=0 (README). Ends with the plain
# "N passed, N failed, N skipped" line; exit 0 only when nothing failed.
set -u
case ${FERRY_STRICT:-0} in 0 | "") strict=0 ;; *) strict=1 ;; esac
only=""
while [ $# -gt 1 ]; do
	case $1 in
	--strict) strict=1; shift ;;
	--only) only=$2; shift 2 ;;
	*) break ;;
	esac
done
B=${1:?usage: tests/run.sh [--strict] [--only SUITE,...] BUILD_DIR}
for s in ${only//,/ }; do
	case $s in unit | fuzz | lint | e2e) ;; *) echo "tests/run.sh: no suite '$s' (unit, fuzz, lint, e2e)" >&2; exit 2 ;; esac
done
# suite NAME — 0 when NAME is to run.
suite() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
B=$(cd "$B" && pwd) || exit 2
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
logdir="$B/test-logs"
rm -rf "$logdir"; mkdir -p "$logdir"
pass=0; fail=0; skip=0; failed=()
export FERRY_BIN="$B/bin"
# cmocka's plain output, which run_one reads.
export CMOCKA_MESSAGE_OUTPUT=stdout
asan_opts=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
ubsan_opts=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)'

ok_line() { pass=$((pass + 1)); printf 'PASS %-40s %4ss\n' "$1" "$2"; }
fail_line() { # name, why, log
	fail=$((fail + 1)); failed+=("$1")
	printf 'FAIL %-40s %s\n' "$1" "$2"
	sed 's/^/    | /' "$3" | tail -n 40
}

run_one() { # suite, name, command...
	local kind=$1 name=$2; shift 2
	local tag log san t0=$SECONDS rc dt why="" reason
	tag=$(echo "$name" | tr '/ ' '__')
	log="$logdir/$tag.log"
	san="$logdir/sanitizer/$tag"
	mkdir -p "$san"
	ASAN_OPTIONS="$asan_opts:log_path=$san/asan" UBSAN_OPTIONS="$ubsan_opts:log_path=$san/ubsan" \
		timeout -k 10 "${FERRY_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1
	rc=$?
	dt=$((SECONDS - t0))
	if [ -n "$(ls -A "$san")" ]; then
		why="sanitizer report (log_path)"
		for reason in "$san"/*; do
			{ echo "== $reason"; head -n 60 "$reason"; } >>"$log"
		done
	elif grep -Eaq "$SAN_RE" "$log"; then
		why="sanitizer report in its output"
	elif [ "$kind" = unit ] && [ $rc -eq 0 ] && grep -Eq '^\[  (FAILED|ERROR) *\]' "$log"; then
		why="cmocka reported a failure but exited 0"
	elif [ "$kind" = unit ] && [ $rc -eq 0 ] && grep -q '^\[  SKIPPED \]' "$log"; then
		rc=77
		reason="cmocka skipped: $(sed -n 's/^\[  SKIPPED \] \([A-Za-z_][A-Za-z0-9_]*\)$/\1/p' "$log" | sort -u | tr '\n' ' ' | sed 's/ $//')"
		reason="$reason$(grep -v '^\[' "$log" | grep -m 1 'SKIP' | sed 's/^/ (/; s/$/)/')"
		echo "$reason" >>"$log"
	fi
	if [ -n "$why" ]; then
		fail_line "$name" "${dt}s ($why; exit $rc)" "$log"
	elif [ $rc -eq 0 ]; then
		ok_line "$name" "$dt"
	elif [ $rc -eq 77 ] && [ "$strict" = 1 ]; then
		fail_line "$name" "skipped, which --strict fails: $(tail -n 1 "$log")" "$log"
	elif [ $rc -eq 77 ]; then
		skip=$((skip + 1)); printf 'SKIP %-40s %s\n' "$name" "$(tail -n 1 "$log")"
	else
		fail_line "$name" "${dt}s (exit $rc)" "$log"
	fi
}

# none_found SUITE WHERE — a suite that found nothing fails.
none_found() {
	fail=$((fail + 1)); failed+=("$1")
	printf 'FAIL %-40s no tests found in %s\n' "$1" "$2"
}

[ "$strict" = 1 ] && echo "strict: a skip is a failure"
if suite unit; then
	echo "== $(basename "$B"): unit tests"
	n=0
	for t in "$B"/tests/test_*; do
		[ -x "$t" ] || continue
		run_one unit "unit/$(basename "$t")" "$t"
		n=$((n + 1))
	done
	[ $n -gt 0 ] || none_found unit "$B/tests"
fi
if suite fuzz; then
	echo "== $(basename "$B"): fuzz corpus replay"
	n=0
	for f in "$B"/fuzz/fuzz_*; do
		[ -x "$f" ] || continue
		n=$((n + 1))
		c=$(basename "$f"); c=${c#fuzz_}
		if [ -d "tests/fuzz/corpus/$c" ]; then
			run_one fuzz "fuzz/$c" "$f" "tests/fuzz/corpus/$c"
		else
			echo "FAIL fuzz/$c: no corpus at tests/fuzz/corpus/$c"; fail=$((fail + 1)); failed+=("fuzz/$c")
		fi
	done
	if [ $n -gt 0 ]; then
		run_one fuzz "fuzz/verdicts" bash tests/fuzz_driver/verdicts.sh "$B"
	else
		none_found fuzz "$B/fuzz"
	fi
fi
if suite lint; then
	echo "== $(basename "$B"): lint rules (make lint fails on planted violations)"
	n=0
	for l in tests/lint/[0-9]*.sh; do
		[ -e "$l" ] || continue
		run_one lint "lint/$(basename "$l" .sh)" bash "$l"
		n=$((n + 1))
	done
	[ $n -gt 0 ] || none_found lint tests/lint
fi
if suite e2e; then
	echo "== $(basename "$B"): end-to-end"
	n=0
	for e in tests/e2e/[0-9]*.sh; do
		[ -e "$e" ] || continue
		run_one e2e "e2e/$(basename "$e" .sh)" bash "$e"
		n=$((n + 1))
	done
	[ $n -gt 0 ] || none_found e2e tests/e2e
fi
echo
[ $fail -eq 0 ] || echo "failed: ${failed[*]} (logs in $logdir)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
