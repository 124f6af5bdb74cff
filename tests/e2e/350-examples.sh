#!/usr/bin/env bash
# 350: the runnable examples, run as shipped against this build:
# examples/quickstart.sh (what `make demo` runs), kv-cache.sh (a KV-cache
# store carried to a new region), published-store.sh (a published store
# behind nginx, followed by a mount) and regional-cache.sh (hydrators
# behind one nginx cache). Each checks its own result and exits non-zero
# when it is wrong (a tree that differs, a KV store read wrong or left
# over its bound, a hydrator that never completes); here each must exit 0, say
# its last check passed, and leave no mount and no ferry process behind.
# Only the example's own: it runs in a mount namespace of its own
# (unshare -m), so the ferry mounts counted are the ones it made there,
# and its processes are the ferry programs in that namespace; a mount or
# process of another test or of a benchmark on this machine, made or gone
# meanwhile, is none of its business. The namespace starts with copies
# of the machine's mounts: the FUSE ones are detached there first, or a
# copy would keep its file system alive after its owner unmounts it (a
# hydrator exits when its last mount goes, the copy included).
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/nginx.sh"
need_fuse
need_nginx
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
command -v unshare >/dev/null || skip "unshare (util-linux) missing"
EX=$(cd "$E2E_LIB/../../../examples" && pwd)
B=$(cd "$FERRY_BIN/.." && pwd)

# ns_procs NS — the ferry-replicator and ferry-hydrator processes in
# mount namespace NS (as readlink /proc/PID/ns/mnt says it).
ns_procs() {
	local p
	for p in $(pgrep -f 'ferry-(replicator|hydrator)'); do
		case $(readlink "/proc/$p/exe" 2>/dev/null) in
		*/ferry-replicator | */ferry-hydrator) ;;
		*) continue ;;
		esac
		[ "$(readlink "/proc/$p/ns/mnt" 2>/dev/null)" = "$1" ] && echo "$p"
	done
}

run_example() { # NAME WHAT-ITS-LAST-CHECK-SAYS
	local ns left rc
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare -m --propagation private bash -c '
		fuse=$(awk "\$3 ~ /^fuse/ { print \$2 }" /proc/self/mounts)
		while IFS= read -r m; do
			[ -z "$m" ] || umount -l "$(printf "%b" "$m")" 2>/dev/null
		done <<<"$fuse"
		readlink /proc/self/ns/mnt >"$1.ns"
		bash "$2" "$3" >"$1.out" 2>&1
		rc=$?
		grep -c " fuse\.ferry" /proc/self/mounts >"$1.mounts"
		exit $rc' _ "$T/$1" "$EX/$1.sh" "$B"
	rc=$?
	ns=$(cat "$T/$1.ns" 2>/dev/null) || die "examples/$1.sh: no mount namespace of its own (unshare -m)"
	[ "$rc" = 0 ] || { tail -n 30 "$T/$1.out" >&2; kill $(ns_procs "$ns") 2>/dev/null; die "examples/$1.sh exited non-zero"; }
	grep -q "$2" "$T/$1.out" || { tail -n 30 "$T/$1.out" >&2; die "examples/$1.sh: no '$2'"; }
	[ "$(cat "$T/$1.mounts")" = 0 ] || { kill $(ns_procs "$ns") 2>/dev/null; die "examples/$1.sh left a mount behind"; }
	# a daemon unmounted at the example's end may take a moment to go
	for _ in $(seq 100); do [ -z "$(ns_procs "$ns")" ] && break; sleep 0.1; done
	left=$(ns_procs "$ns")
	[ -z "$left" ] || { kill $left 2>/dev/null; die "examples/$1.sh left a ferry process behind: pid $left"; }
	ok "examples/$1.sh: $2"
}

run_example quickstart "chunk store: [0-9]* chunks"
# the KV store at a third of its size (the example's knobs): the same
# checks, a minute less on each build
KV_BLOBS=150 KV_LOOKUPS=1000 run_example kv-cache "every blob identical to the source"
run_example published-store "the mount switched to generation 2: identical to the source"
run_example regional-cache "hydrator 3: complete, tree identical"
