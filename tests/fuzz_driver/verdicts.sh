#!/usr/bin/env bash
# tests/fuzz_driver/verdicts.sh BUILD_DIR — the corpus replay checks
# verdicts, shown by making it fail: for every fuzz target, on a copy of
# its corpus, the replay passes as committed, and fails (exit 1, naming
# the file) once one ok_ input is renamed bad_, once one bad_ input is
# renamed ok_, and once an input has neither prefix; an empty corpus
# fails too, and no argument is a usage error (exit 2). tests/run.sh runs
# it with the fuzz suite.
set -u
B=${1:?usage: tests/fuzz_driver/verdicts.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-verdicts.XXXXXX")
trap 'rm -rf "$T"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok - $*"; }

# replay BIN DIR WANT_RC [PATTERN] — the replay of DIR exits WANT_RC and,
# given PATTERN, says it on stderr.
replay() {
	local bin=$1 dir=$2 want=$3 pat=${4:-} rc
	"$bin" "$dir" >"$T/out" 2>"$T/err"
	rc=$?
	[ "$rc" = "$want" ] || { cat "$T/out" "$T/err"; die "$(basename "$bin") $dir: exit $rc, not $want"; }
	[ -z "$pat" ] || grep -Eq "$pat" "$T/err" || { cat "$T/err"; die "$(basename "$bin") $dir: stderr does not say '$pat'"; }
}

n=0
for bin in "$B"/fuzz/fuzz_*; do
	[ -x "$bin" ] || continue
	t=${bin##*/fuzz_}
	corpus="$top/tests/fuzz/corpus/$t"
	[ -d "$corpus" ] || die "no corpus for fuzz_$t at $corpus"
	okf=$(cd "$corpus" && ls | grep '^ok_' | head -n 1)
	badf=$(cd "$corpus" && ls | grep '^bad_' | head -n 1)
	[ -n "$okf" ] && [ -n "$badf" ] || die "corpus $t needs an ok_ and a bad_ input"
	c="$T/$t"

	rm -rf "$c"; cp -r "$corpus" "$c"
	replay "$bin" "$c" 0 ""
	grep -q 'inputs ok' "$T/out" || die "fuzz_$t: no summary line"

	mv "$c/$okf" "$c/bad_planted_$okf"
	replay "$bin" "$c" 1 "bad_planted_$okf error=a bad_ input accepted"

	rm -rf "$c"; cp -r "$corpus" "$c"
	mv "$c/$badf" "$c/ok_planted_$badf"
	replay "$bin" "$c" 1 "ok_planted_$badf error=an ok_ input refused"

	rm -rf "$c"; cp -r "$corpus" "$c"
	cp "$c/$okf" "$c/unnamed"
	replay "$bin" "$c" 1 "unnamed error=the name starts with neither ok_ nor bad_"

	rm -rf "$c"; mkdir "$c"
	replay "$bin" "$c" 1 "no inputs found"
	replay "$bin" "$T/missing" 1 "missing error="
	"$bin" >/dev/null 2>&1
	[ $? = 2 ] || die "fuzz_$t without arguments does not exit 2"
	ok "fuzz_$t: corpus passes; a renamed ok_ ($okf) or bad_ ($badf), an unnamed input and an empty corpus fail"
	n=$((n + 1))
done
[ "$n" -gt 0 ] || die "no fuzz targets in $B/fuzz"
