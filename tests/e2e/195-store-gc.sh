#!/usr/bin/env bash
# 195: the store drops what no kept generation references. A mount with
# --keep-generations 2 follows two changes of a big file: while generations
# 1 and 2 are kept nothing is dropped (`ferry gc` asks the running mount:
# 0 dropped); when generation 3 comes, 1 leaves the cache and the store
# keeps exactly the chunks of generations 2 and 3, and gives the space of
# the others back. On the idle cache, with 2's catalog gone, `ferry gc`
# drops 2's chunks; the remount serves the source exactly without fetching
# a chunk (nothing it needs was dropped).
. "$(dirname "$0")/lib/common.sh"
need_fuse
[ -x "$FERRY" ] || die "ferry not built"
S="$T/src"
mkdir -p "$S/d"
head -c $((6 << 20)) /dev/urandom >"$S/big"
head -c 300000 /dev/urandom >"$S/d/stays"
port=$(free_port)
URL="http://127.0.0.1:$port/v1/r"
start_repl "$port" "r=$S"
M="$T/mnt"
C="$T/cache"
hlog="$C/hydrator.log"
mount_hyd "$URL" "$M" --poll 1 --keep-generations 2
wait_status "$C" state complete 60 || die "generation 1 not complete"
stored() { sqlite3 -readonly "$C/state.db" "select count(*) from chunk"; }
# gen_ids G...: distinct chunk ids of the generations' manifests (catalog
# and hashed), holes left out, as the replicator published them
gen_ids() {
	wait_hashed "$port" r 60 || die "not hashed"
	python3 - "$T/state/r" "$@" <<'PY'
import sqlite3, sys
root, gens = sys.argv[1], sys.argv[2:]
ids = set()
for g in gens:
    for db, q in (("catalog/%s.db" % g, "select id from chunk"),
                  ("source/%s.db" % g, "select id from manifest")):
        c = sqlite3.connect("file:%s/%s?mode=ro" % (root, db), uri=True)
        ids.update(r[0] for r in c.execute(q) if r[0] != bytes(32))
print(len(ids))
PY
}
# next_gen N: change big, SIGHUP, wait for the mount to switch to N and
# complete it
next_gen() {
	head -c $((6 << 20)) /dev/urandom >"$S/big"
	kill -HUP "$REPL_PID"
	for i in $(seq 1 300); do grep -q "switched generation from=$(($1 - 1)) to=$1 " "$hlog" && break; sleep 0.1; done
	grep -q "switched generation from=$(($1 - 1)) to=$1 " "$hlog" || { tail "$hlog"; die "no switch to $1"; }
	wait_hashed "$port" r 60 || die "generation $1 not hashed"
	wait_status "$C" state complete 60 || die "generation $1 not complete"
}
next_gen 2
out=$("$FERRY" gc "$C") || die "ferry gc on the mounted cache failed"
echo "$out" | grep -q ' 0 chunks dropped .*(by the running hydrator)' || die "ferry gc with generations 1 and 2 kept: $out"
[ "$(stored)" = "$(gen_ids 1 2)" ] || die "store holds $(stored) chunks, generations 1 and 2 have $(gen_ids 1 2)"
ok "generations 1 and 2 kept: ferry gc (by the mount) drops nothing; the store holds both ($(stored) chunks)"

vols_before=$(du -k -s "$C/volumes" | cut -f1)
next_gen 3
for i in $(seq 1 100); do grep -q 'store collected' "$hlog" && break; sleep 0.1; done
line=$(grep 'store collected' "$hlog" | tail -n 1)
[ -n "$line" ] || die "no collection after generation 1 left"
[ ! -e "$C/catalogs/1.db" ] || die "generation 1's catalog is still in the cache"
want=$(gen_ids 2 3)
[ "$(stored)" = "$want" ] || die "store holds $(stored) chunks, generations 2 and 3 have $want ($line)"
vols_after=$(du -k -s "$C/volumes" | cut -f1)
# generation 3 added 6 MiB, generation 1's 6 MiB went
[ "$vols_after" -lt $((vols_before + 3000)) ] || die "volumes grew from $vols_before KiB to $vols_after KiB: the space was not given back"
ok "generation 3 in, 1 out: the store keeps exactly 2's and 3's chunks ($want), volumes $vols_before -> $vols_after KiB ($line)"

umount_hyd "$M"
want=$(gen_ids 3)
rm -f "$C/catalogs/2.db" "$C/catalogs/2.overlay.db"*
out=$("$FERRY" gc "$C") || die "ferry gc of the idle cache failed"
echo "$out" | grep -q 'by the running hydrator' && die "an idle cache was collected by a hydrator: $out"
[ "$(stored)" = "$want" ] || die "idle gc: store holds $(stored) chunks, generation 3 has $want ($out)"
served0=$(repl_stat "$port" r chunks_served)
mount_hyd "$URL" "$M" --poll 0
python3 "$E2E_LIB/treecmp.py" --content "$S" "$M" >"$T/cmp.txt" || { head "$T/cmp.txt"; die "the remount after gc differs from the source"; }
[ "$(repl_stat "$port" r chunks_served)" = "$served0" ] || die "the remount fetched chunks: gc dropped something generation 3 needs"
"$FERRY" verify -q "$C" || die "the store does not verify after gc"
ok "idle cache: ferry gc drops what only generation 2 had; the remount serves the source from the store alone"
umount_hyd "$M"
stop_repl || die "the replicator did not exit cleanly"
