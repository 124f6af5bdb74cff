#!/usr/bin/env bash
# tools/lint.sh — the include rules of STYLE.md, checked:
#   catalog/    includes no libuv, curl or FUSE header, nor replicator/hydrator;
#   replicator/ and hydrator/ never include each other;
#   tools/ and other folders use public headers only (no *_internal.h
#   from another folder).
set -u
fail=0
bad() { echo "lint: $*" >&2; fail=1; }
while IFS= read -r hit; do bad "catalog/ must not include it: $hit"; done < <(
	grep -nE '#include *[<"](uv\.h|curl/|fuse|fuse3/|replicator/|hydrator/)' catalog/*.[ch] 2>/dev/null)
while IFS= read -r hit; do bad "replicator/ must not include hydrator/: $hit"; done < <(
	grep -nE '#include *"hydrator/' replicator/*.[ch] 2>/dev/null)
while IFS= read -r hit; do bad "hydrator/ must not include replicator/: $hit"; done < <(
	grep -nE '#include *"replicator/' hydrator/*.[ch] 2>/dev/null)
for d in catalog replicator hydrator tools tests/unit tests/fuzz; do
	for f in "$d"/*.[ch]; do
		[ -e "$f" ] || continue
		grep -nE '#include *"[a-z]+/[a-z_]+_internal\.h"' "$f" | while IFS= read -r hit; do
			inc=$(printf '%s' "$hit" | sed -E 's/.*"([a-z]+)\/.*/\1/')
			case "$d" in
			"$inc") ;;
			tests/unit | tests/fuzz) ;; # tests may reach a folder's internals
			*) echo "lint: $f uses another folder's internal header: $hit" >&2; echo x ;;
			esac
		done | grep -q x && fail=1
	done
done
for f in catalog/*.c replicator/*.c hydrator/*.c tools/*.c; do
	[ -e "$f" ] || continue
	if grep -nE '\b(sprintf|strcpy|strcat|atoi|atol|gets)\(' "$f" | grep -v snprintf >/dev/null; then
		bad "$f uses a banned function: $(grep -nE '\b(sprintf|strcpy|strcat|atoi|atol|gets)\(' "$f" | head -1)"
	fi
done
[ $fail -eq 0 ] && echo "lint: include rules and banned functions ok"
exit $fail
