#!/usr/bin/env bash
# 350: the runnable examples, run as shipped against this build:
# examples/quickstart.sh (what `make demo` runs), kv-cache.sh (a KV-cache
# store carried to a new region), published-store.sh (a published store
# behind nginx, followed by a mount) and regional-cache.sh (hydrators
# behind one nginx cache). Each checks its own result and exits non-zero
# when it is wrong (a tree that differs, a KV store not deduplicated on
# the wire, a hydrator that never completes); here each must exit 0, say
# its last check passed, and leave no mount and no ferry process behind.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/nginx.sh"
need_fuse
need_nginx
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
EX=$(cd "$E2E_LIB/../../../examples" && pwd)
B=$(cd "$FERRY_BIN/.." && pwd)

mounts() { grep -c ' fuse\.ferry' /proc/mounts; }
procs() { pgrep -fc "^$FERRY_BIN/ferry-(replicator|hydrator)" || true; }

run_example() { # NAME WHAT-ITS-LAST-CHECK-SAYS
	local m0 p0
	m0=$(mounts)
	p0=$(procs)
	bash "$EX/$1.sh" "$B" >"$T/$1.out" 2>&1 ||
		{ tail -n 30 "$T/$1.out" >&2; die "examples/$1.sh exited non-zero"; }
	grep -q "$2" "$T/$1.out" || { tail -n 30 "$T/$1.out" >&2; die "examples/$1.sh: no '$2'"; }
	[ "$(mounts)" = "$m0" ] || die "examples/$1.sh left a mount behind"
	# a daemon unmounted at the example's end may take a moment to go
	for _ in $(seq 100); do [ "$(procs)" = "$p0" ] && break; sleep 0.1; done
	[ "$(procs)" = "$p0" ] || die "examples/$1.sh left a ferry process behind"
	ok "examples/$1.sh: $2"
}

run_example quickstart "chunk store: [0-9]* chunks"
run_example kv-cache "every blob identical to the source"
run_example published-store "the mount switched to generation 2: identical to the source"
run_example regional-cache "hydrator 3: complete, tree identical"
