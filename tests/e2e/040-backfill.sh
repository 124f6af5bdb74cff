#!/usr/bin/env bash
# 040: background backfill with the mount idle stores every chunk; status
# says complete; afterwards every file reads back with the replicator gone.
# --no-backfill fetches nothing.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
mk_bulk_tree "$T/src" 40
mkdir -p "$T/src/empty-dir"; : >"$T/src/empty"
port=$(free_port)
start_repl "$port" "b=$T/src"
URL="http://127.0.0.1:$port/v1/b"

# --no-backfill: mounted, browsed, nothing fetched.
mkdir -p "$T/m0"; MOUNTS+=("$T/m0")
"$HYD" -c "$T/c0" --no-backfill "$URL" "$T/m0" || die "mount --no-backfill"
ls -lR "$T/m0" >/dev/null
# The live hydrator answers (a pid in its status) and says browsing...
wait_for 30 eval '[ "$(status_field "$T/c0" pid)" != 0 ] && [ "$(status_field "$T/c0" state)" = browsing ]' ||
	die "--no-backfill state is not browsing"
# ...and then, over an observation window (it proves an absence, it
# synchronizes nothing), nothing is fetched.
sleep 2
[ "$(repl_stat "$port" b chunks_served)" = 0 ] || die "--no-backfill fetched chunks"
fusermount3 -u "$T/m0"
ok "--no-backfill: browsable, 0 chunks fetched, state browsing"

mount_hyd "$URL" "$T/mnt" --jobs 4
wait_status "$T/cache" state complete 120 || die "backfill did not complete"
want=$(sql "$(manifests_db b "$T/manifests.db")" "select count(distinct id) from chunk")
[ "$(status_field "$T/cache" chunks_stored)" = "$want" ] || { "$FERRY" status "$T/cache" --json; die "status chunks_stored != $want"; }
[ "$(status_field "$T/cache" files_hydrated)" = "$(status_field "$T/cache" files_total)" ] || die "files not all hydrated"
served=$(repl_stat "$port" b chunks_served)
[ "$served" = "$want" ] || die "backfill fetched $served chunks for $want distinct"
ok "backfill complete: $want distinct chunks fetched once each"
"$FERRY" status "$T/cache" | sed 's/^/  /'

stop_repl
python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "tree differs after backfill"; }
ok "every file reads back with the replicator stopped"
umount_hyd "$T/mnt"
[ "$(status_field "$T/cache" state)" = complete ] || die "offline status of a complete cache is not complete"
ok "offline status: complete"
