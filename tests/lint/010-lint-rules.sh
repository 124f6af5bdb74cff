#!/usr/bin/env bash
# tests/lint/010: `make lint` (tools/lint.sh) fails on each kind of
# violation it exists for. Each case plants one violation in a fresh copy
# of the source tree and expects a non-zero exit and a line naming the
# file and the rule; the untouched copy must pass first, so a lint that
# always fails cannot pass this test either.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/ferry-lint.XXXXXX")
trap 'rm -rf "$T"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok - $*"; }
command -v clang-format >/dev/null || die "clang-format missing (make deps installs it)"

fresh() { # a clean copy in $T/tree
	rm -rf "$T/tree"
	mkdir -p "$T/tree"
	(cd "$top" && cp -r catalog replicator hydrator tools tests .clang-format "$T/tree/")
	rm -rf "$T/tree/tests/lint"
}
# plant NAME PATTERN FILE LINE — insert LINE after the first #include of
# FILE (or append it when the file has none), run lint, expect a failure
# whose output matches PATTERN.
plant() {
	local what=$1 pat=$2 file=$3 line=$4 out rc
	fresh
	[ -f "$T/tree/$file" ] || mkdir -p "$(dirname "$T/tree/$file")"
	if grep -q '^#include' "$T/tree/$file" 2>/dev/null; then
		awk -v l="$line" '{print} !done && /^#include/ {print l; done=1}' \
			"$T/tree/$file" >"$T/f" && mv "$T/f" "$T/tree/$file"
	else
		printf '%s\n' "$line" >>"$T/tree/$file"
	fi
	out=$("$top/tools/lint.sh" "$T/tree" 2>&1); rc=$?
	[ $rc -ne 0 ] || die "$what: lint passed with it planted in $file"
	echo "$out" | grep -E "$pat" >/dev/null ||
		die "$what: lint failed without naming it: $out"
	ok "$what: $(echo "$out" | grep -E "$pat" | head -n 1)"
}

fresh
out=$("$top/tools/lint.sh" "$T/tree" 2>&1) || die "the untouched tree fails lint: $out"
ok "untouched copy passes"

plant "a room including one it may not (store -> fetch)" \
	'hydrator/store/hyd_store.c:.*may not include room hydrator/fetch' \
	hydrator/store/hyd_store.c '#include "hydrator/fetch/hyd_fetch.h"'
plant "a header another room keeps to itself" \
	'hydrator/read/hyd_read.c:.*hyd_fetch_loop_priv.h is internal to room hydrator/fetch' \
	hydrator/read/hyd_read.c '#include "hydrator/fetch/hyd_fetch_loop_priv.h"'
plant "replicator including the hydrator" \
	'replicator/serve/repl_chunk_pool.c:.*may not include room hydrator' \
	replicator/serve/repl_chunk_pool.c '#include "hydrator/hydrator.h"'
plant "a replicator room including one above it (source -> serve)" \
	'replicator/source/repl_scan.c:.*may not include room replicator/serve' \
	replicator/source/repl_scan.c '#include "replicator/serve/repl_serve.h"'
plant "a replicator room including one above it (publish -> serve)" \
	'replicator/publish/repl_static.c:.*may not include room replicator/serve' \
	replicator/publish/repl_static.c '#include "replicator/serve/repl_auth.h"'
plant "a replicator room's private header from another room" \
	'replicator/publish/repl_pack.c:.*repl_scan_priv.h is internal to room replicator/source' \
	replicator/publish/repl_pack.c '#include "replicator/source/repl_scan_priv.h"'
plant "tools reaching into the replicator past replicator.h" \
	'tools/ferry_token.c:.*may not include room replicator/serve' \
	tools/ferry_token.c '#include "replicator/serve/repl_serve.h"'
plant "tools reaching an internal room" \
	'tools/ferry_sync.c:.*may not include room hydrator/store' \
	tools/ferry_sync.c '#include "hydrator/store/hyd_store.h"'
plant "a library the room may not use (libuv in catalog/)" \
	'catalog/cat_frame.c:.*room catalog may not use uv' \
	catalog/cat_frame.c '#include <uv.h>'
plant "FUSE outside the read room" \
	'hydrator/backfill/hyd_backfill.c:.*may not use fuse' \
	hydrator/backfill/hyd_backfill.c '#include <fuse_lowlevel.h>'
plant "a file in no room" \
	'hydrator/newroom/hyd_new.c: in no room' \
	hydrator/newroom/hyd_new.c '#include "catalog/catalog.h"'
plant "a room's own header named like a face" \
	'hydrator/fetch/hyd_extra.h: not a face of room hydrator/fetch.*must end in _priv.h' \
	hydrator/fetch/hyd_extra.h '#include "catalog/catalog.h"'
plant "a face named like a room's own header" \
	'hydrator/store/hyd_store_priv.h: a face of room hydrator/store, so its name may not end in _priv.h' \
	tools/rooms.txt 'face hydrator/store    hyd_store.h hyd_store_priv.h'
plant "a banned function" \
	'replicator/serve/repl_chunk_pool.c uses a banned function' \
	replicator/serve/repl_chunk_pool.c 'static void f(char *b) { sprintf(b, "x"); }'
plant "a line clang-format would change" \
	'format: catalog/cat_kind.c' \
	catalog/cat_kind.c 'int  lint_badly_formatted ( void ) ;'
echo "all planted violations caught"
