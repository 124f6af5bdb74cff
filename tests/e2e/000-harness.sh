#!/usr/bin/env bash
# 000: the harness can fail. A script that sources lib/common.sh and whose
# body passes must still exit 1 when a process it started went wrong: an
# ASan/LSan report file under $SAN_DIR (from a process whose stderr went
# nowhere), UBSan's "runtime error:" in a hydrator log, an LSan report in
# a command's output file, a hydrator daemon whose log ends in exit
# status 1, a foreground hydrator (a job of the test) exiting 5, a
# replicator that does not exit 0 on SIGTERM (left to cleanup, or stopped
# by stop_repl); nothing wrong exits 0, a skip 77, a failure 1.
# Then tests/run.sh over a made-up build directory: cmocka's
# "[  SKIPPED ]" with exit 0 is a SKIP (a FAIL with --strict), its
# "[  FAILED  ] GROUP TEARDOWN" with exit 0 a FAIL, a sanitizer line in a
# test's output or a report under its log_path a FAIL, exit 77 a SKIP (a
# FAIL with --strict), and a suite with no test a FAIL.
. "$(dirname "$0")/lib/common.sh"
# The cases' scripts and outputs hold sanitizer reports on purpose: they
# live below $W, where this test's own cleanup does not look.
W="$T/work"
mkdir -p "$W"

# case NAME WANT BODY — a script sourcing common.sh, then BODY, exits WANT
# (and, when WANT is 1 and BODY passes, says FAIL on stderr).
n=0
case_() {
	local name=$1 want=$2 body=$3 rc
	printf '. %q\n%s\n' "$E2E_LIB/common.sh" "$body" >"$W/case.sh"
	mkdir -p "$W/tmp"
	KEEP_TMP= TMPDIR="$W/tmp" bash "$W/case.sh" >"$W/case.out" 2>"$W/case.err"
	rc=$?
	[ "$rc" = "$want" ] || { cat "$W/case.out" "$W/case.err"; die "harness case '$name': exit $rc, not $want"; }
	[ "$want" != 1 ] || grep -q '^FAIL' "$W/case.err" || { cat "$W/case.err"; die "harness case '$name': no FAIL line"; }
	[ -z "$(ls -A "$W/tmp")" ] || die "harness case '$name' left $(ls "$W/tmp")"
	n=$((n + 1))
}

# A stand-in replicator: says ready, exits 3 on SIGTERM.
cat >"$W/fake-repl" <<'EOF'
#!/usr/bin/env bash
trap 'kill $!; exit 3' TERM
echo "fake-replicator: namespace ready ns=x"
sleep 1000 &
wait
EOF
chmod +x "$W/fake-repl"

case_ "nothing wrong" 0 'ok fine'
case_ "a skip" 77 'skip "nothing to do here"'
case_ "a failure" 1 'die "the test failed"'
case_ "ASan report file" 1 'echo "==1==ERROR: AddressSanitizer: heap-use-after-free" >"$SAN_DIR/asan.1"'
case_ "a skip with an ASan report" 1 'echo "==1==ERROR: LeakSanitizer: detected memory leaks" >"$SAN_DIR/asan.1"; skip "x"'
case_ "UBSan in a hydrator log" 1 'mkdir -p "$T/cache"; echo "hyd.c:1:2: runtime error: signed integer overflow" >"$T/cache/hydrator.log"'
case_ "LSan in an output file" 1 'echo "==9==ERROR: LeakSanitizer: detected memory leaks" >"$T/sync.err"'
case_ "a daemon's exit status 1" 1 'mkdir -p "$T/c"; echo "2026-01-01T00:00:00.000Z ferry-hydrator: exit status=1 pid=42" >"$T/c/hydrator.log"'
case_ "a daemon's exit status 0" 0 'mkdir -p "$T/c"; echo "2026-01-01T00:00:00.000Z ferry-hydrator: exit status=0 pid=42" >"$T/c/hydrator.log"'
# A foreground hydrator (-f &) left to cleanup: its exit status is wait's.
fg='mkdir -p "$T/c"; bash -c '"'"'echo $$ >"$1/hydrator.pid"; %s'"'"' _ "$T/c" &
for i in $(seq 1 100); do [ -s "$T/c/hydrator.pid" ] && break; sleep 0.05; done'
# shellcheck disable=SC2059 # the format is ours
case_ "a foreground hydrator exits 5" 1 "$(printf "$fg" 'exit 5')"
# shellcheck disable=SC2059
case_ "a foreground hydrator exits 0" 0 "$(printf "$fg" 'exit 0')"
case_ "replicator exit 3, left to cleanup" 1 "REPL=$W/fake-repl; start_repl 1 x=/"
case_ "replicator exit 3, stop_repl" 1 "REPL=$W/fake-repl; start_repl 1 x=/; stop_repl; ok stopped"
ok "common.sh: $n cases; each planted problem fails a test whose body passed"

# tests/run.sh over a made-up build directory.
FB="$W/fake-build"
mkdir -p "$FB/tests" "$FB/fuzz"
fake_unit() { # NAME RC OUTPUT...
	local name=$1 rc=$2
	shift 2
	printf '#!/usr/bin/env bash\n' >"$FB/tests/$name"
	printf 'echo %q\n' "$@" >>"$FB/tests/$name"
	printf 'exit %s\n' "$rc" >>"$FB/tests/$name"
	chmod +x "$FB/tests/$name"
}
fake_unit test_pass 0 '[       OK ] t1'
fake_unit test_cmocka_skip 0 '[ RUN      ] t2' '[  SKIPPED ] t2' '[  SKIPPED ] 1 test(s), listed below:' '[  SKIPPED ] t2'
fake_unit test_teardown 0 '[  PASSED  ] 1 test(s).' '[  FAILED  ] GROUP TEARDOWN'
fake_unit test_ubsan 0 'x.c:3:4: runtime error: load of misaligned address'
fake_unit test_77 77 'SKIP: no python3'
cat >"$FB/tests/test_logpath" <<'EOF'
#!/usr/bin/env bash
# what ASan does with log_path: the report goes to PATH.PID
p=${ASAN_OPTIONS##*log_path=}
p=${p%%:*}
echo "==1==ERROR: AddressSanitizer: stack-buffer-overflow" >"$p.$$"
EOF
chmod +x "$FB/tests/test_logpath"
runsh() { # ARGS... — tests/run.sh, its output in $W/run.out; sets RC
	"$E2E_LIB/../../run.sh" "$@" >"$W/run.out" 2>&1
	RC=$?
}
line() { grep -q "^$1 *unit/$2 " "$W/run.out" || { cat "$W/run.out"; die "run.sh did not say $1 for $2"; }; }
runsh --only unit "$FB"
[ "$RC" = 1 ] || { cat "$W/run.out"; die "run.sh exit $RC, not 1"; }
line PASS test_pass
line SKIP test_cmocka_skip
line FAIL test_teardown
line FAIL test_ubsan
line FAIL test_logpath
line SKIP test_77
grep -q '^1 passed, 3 failed, 2 skipped$' "$W/run.out" || { cat "$W/run.out"; die "run.sh totals"; }
ok "run.sh: cmocka skip -> SKIP; teardown failure, UBSan line, log_path report -> FAIL though exit 0"
rm "$FB/tests/test_teardown" "$FB/tests/test_ubsan" "$FB/tests/test_logpath"
runsh --only unit "$FB"
[ "$RC" = 0 ] || { cat "$W/run.out"; die "without failures run.sh exits $RC, not 0"; }
runsh --strict --only unit "$FB"
[ "$RC" = 1 ] || { cat "$W/run.out"; die "run.sh --strict exits $RC with skips, not 1"; }
line FAIL test_cmocka_skip
line FAIL test_77
ok "run.sh: skips pass without --strict and fail with it"
runsh --only fuzz "$FB"
[ "$RC" = 1 ] && grep -q '^FAIL fuzz .*no tests found' "$W/run.out" || { cat "$W/run.out"; die "an empty fuzz suite did not fail"; }
rm "$FB"/tests/*
runsh --only unit "$FB"
[ "$RC" = 1 ] && grep -q '^FAIL unit .*no tests found' "$W/run.out" || { cat "$W/run.out"; die "an empty unit suite did not fail"; }
runsh --only nosuch "$FB"
[ "$RC" = 2 ] || die "run.sh --only nosuch exits $RC, not 2"
ok "run.sh: a suite with no test fails; an unknown suite is a usage error"
