#!/usr/bin/env bash
# tools/lint.sh [ROOT] — `make lint`: the checks every C file passes.
#   1. includes: tools/rooms.txt says which room (folder) may include which
#      rooms, which of their headers, and which libraries (tools/lint.py);
#   2. banned functions: sprintf, strcpy, strcat, atoi, atol, gets;
#   3. one format: clang-format --dry-run --Werror with the checked-in
#      .clang-format (reformat with `clang-format -i FILE`).
# ROOT defaults to this checkout; tests/lint/ runs it on a copy with a
# violation planted, to show each check fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${1:-$here/..}" && pwd)
fail=0
bad() { echo "lint: $*" >&2; fail=1; }

python3 "$here/lint.py" "$root" || fail=1

mapfile -t cfiles < <(cd "$root" && find catalog replicator hydrator tools tests \
	-name '*.[ch]' -type f 2>/dev/null | LC_ALL=C sort)
for f in "${cfiles[@]}"; do
	case "$f" in tests/*) continue ;; esac
	hit=$(grep -nE '\b(sprintf|strcpy|strcat|atoi|atol|gets)\(' "$root/$f" |
		grep -vE 'snprintf|vsnprintf' | head -n 1)
	[ -z "$hit" ] || bad "$f uses a banned function: $hit"
done
[ $fail -eq 0 ] && echo "lint: no banned functions"

if ! command -v clang-format >/dev/null; then
	bad "clang-format is missing (Debian package clang-format; make deps installs it)"
elif ! (cd "$root" && clang-format --dry-run --Werror "${cfiles[@]}" 2>&1 |
	grep -E 'error:' | sed 's/^/lint: format: /' >&2; exit "${PIPESTATUS[0]}"); then
	bad "files differ from .clang-format (run clang-format -i on them)"
else
	echo "lint: ${#cfiles[@]} C files formatted as .clang-format says"
fi
exit $fail
