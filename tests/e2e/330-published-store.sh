#!/usr/bin/env bash
# 330: the static published store (ferry-replicator --publish NS=OUTDIR)
# served by a real nginx, with no ferry process at the origin:
#  (a) the first publish writes one chunk object per distinct chunk of the
#      catalog, the catalog, the signature and HEAD; a mount fed only by
#      nginx (signatures checked with --trust-key) completes, tree exact,
#      each object fetched once;
#  (b) ferry sync from nginx writes the same tree;
#  (c) after changes at the source a publish writes only the new chunks'
#      objects and the delta, HEAD last; the mount (--poll 1) follows to
#      the new generation, fetching exactly those objects, tree exact;
#  (d) a publish of an unchanged tree writes nothing;
#  (e) kill -9 in the middle of a publish: HEAD still names the old
#      generation, what was renamed into chunk/ is whole, and the next
#      publish writes only the rest (and clears the temp files);
#  (f) a second publish into a locked OUTDIR, or of a NAME not given,
#      is refused with its line and exit status;
#  (g) --keep-generations 2: the publish of generation 3 drops generation
#      1 (its catalog, signature and deltas) and exactly the chunk objects
#      no kept generation names; every object generations 2 and 3 name
#      stays, and ferry sync from nginx is exact;
#  (h) a publish that stops part way through dropping (as a crash would:
#      some objects gone, the old catalogs still there) is finished by
#      the next publish: exactly the objects of the newest generation
#      stay, and ferry sync is exact.
. "$(dirname "$0")/lib/common.sh"
. "$E2E_LIB/wait.sh"
. "$E2E_LIB/nginx.sh"
need_fuse
need_nginx
[ -x "$FERRY" ] || die "ferry not built"
command -v sqlite3 >/dev/null || skip "sqlite3 CLI missing (Debian package sqlite3)"
e2e_after_cleanup() { stop_nginx_all; }

S="$T/src"
mk_bulk_tree "$S" 6
mkdir -p "$S/small" "$S/empty-dir"
for i in 1 2 3; do echo "small $i" >"$S/small/s$i"; done
ln -s ../small/s1 "$S/small/link"
ln "$S/small/s2" "$S/small/s2-hardlink"
chmod 0600 "$S/small/s3"
setfattr -n user.origin -v site-a "$S/small/s1" 2>/dev/null || true
"$FERRY" keygen -q "$T/keys" || die "ferry keygen failed"
OUT="$T/www/v1/pub"

# publish [ENV...] — one --publish run; its log lines go to $T/publish.log
publish() {
	env "$@" "$REPL" -s "$T/state" --sign-key "$T/keys/sign.key" \
		--publish "pub=$OUT" "pub=$S" 2>>"$T/publish.log"
}
# last_pub FIELD — FIELD=VALUE of the last "published" line
last_pub() { grep ' published ns=pub ' "$T/publish.log" | tail -n 1 | sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
objects() { find "$OUT/chunk" -type f | wc -l; }
distinct_of() { sql "$T/state/pub/catalog/$1.db" "select count(distinct id) from chunk where id != zeroblob(32)"; }

# (a)
publish || { cat "$T/publish.log"; die "(a) the first publish failed"; }
gen=$(cat "$OUT/HEAD")
[ "$gen" = 1 ] || die "(a) HEAD says '$gen', not 1"
d1=$(distinct_of 1)
[ "$(last_pub written)" = "$d1" ] || die "(a) wrote $(last_pub written) chunk objects for $d1 distinct chunks"
[ "$(objects)" = "$d1" ] || die "(a) $(objects) files in chunk/ for $d1 distinct chunks"
for f in catalog/1 signature/1; do [ -s "$OUT/$f" ] || die "(a) no $f in OUTDIR"; done
[ -z "$(find "$OUT/.ferry-tmp" -type f ! -name lock)" ] || die "(a) temp files left behind"
port=$(free_port)
start_nginx "$port" "location / { root $T/www; }"
NG="$NGINX_DIR"
URL="http://127.0.0.1:$port/v1/pub"
mount_hyd "$URL" "$T/mnt" --jobs 4 --poll 1 --trust-key "$T/keys/sign.pub"
wait_status "$T/cache" state complete 120 || die "(a) backfill from nginx did not complete"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(a) tree differs"; }
gets=$(grep -c '^GET /v1/pub/chunk/[0-9a-f]\{64\} 200 ' "$NG/access.log")
[ "$gets" = "$d1" ] || die "(a) $gets chunk GETs from nginx for $d1 distinct chunks"
# nginx answers the batch POST with its own 404 page: the hydrator must
# take that as "no batch endpoint" (one try per batch transfer at most,
# --jobs 4: 3), never again, and every GET must succeed (but the probe of
# start_nginx, and the source's stats, which ferry status asks for and a
# static store does not have).
posts=$(grep -c '^POST ' "$NG/access.log")
[ "$posts" -ge 1 ] && [ "$posts" -le 3 ] || die "(a) $posts batch POSTs: the hydrator did not fall back after nginx's 404"
others() { grep -v '^GET [^ ]* 200 \|^POST /v1/pub/chunks 404 \|^GET / 403 \|^GET /v1/pub/stats 404 ' "$NG/access.log"; }
others | grep -q . && die "(a) requests nginx did not answer as a static store would: $(others | head -n 3)"
ok "(a) publish: $d1 chunk objects + catalog + signature; a mount fed by nginx alone completes, tree exact, $gets GETs"

# (b)
"$FERRY" sync -q --cache-dir "$T/scache" --trust-key "$T/keys/sign.pub" "$URL" "$T/dest" || die "(b) ferry sync from nginx failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(b) tree differs"; }
ok "(b) ferry sync from the published store: tree exact"

# (c) changes: one file grows, one is new, one goes
f_changed=$(find "$S" -name 'f*' -size +100k | sort | head -n 1)
f_gone=$(find "$S" -name 'f*' | sort | tail -n 1)
head -c 200000 /dev/urandom >>"$f_changed"
head -c 150000 /dev/urandom >"$S/small/new"
rm -f "$f_gone"
before=$(objects)
# before the publish: the mount (--poll 1) may switch and fetch at once
gets_before=$(grep -c '^GET /v1/pub/chunk/' "$NG/access.log")
publish || { cat "$T/publish.log"; die "(c) the second publish failed"; }
[ "$(cat "$OUT/HEAD")" = 2 ] || die "(c) HEAD says $(cat "$OUT/HEAD"), not 2"
new_ids=$(sqlite3 "$T/state/pub/catalog/2.db" "attach '$T/state/pub/catalog/1.db' as o;
	select count(distinct id) from chunk where id != zeroblob(32) and id not in (select id from o.chunk)")
[ "$(last_pub written)" = "$new_ids" ] || die "(c) wrote $(last_pub written) chunk objects for $new_ids new chunks"
[ "$(objects)" = $((before + new_ids)) ] || die "(c) chunk/ holds $(objects), not $before + $new_ids"
[ "$(last_pub delta)" = 1 ] && [ -s "$OUT/delta/1/2" ] || die "(c) no delta/1/2 written"
[ -s "$OUT/signature/2" ] || die "(c) no signature/2"
wait_status "$T/cache" generation 2 30 || die "(c) the mount did not switch to generation 2"
wait_status "$T/cache" state complete 60 || die "(c) generation 2 did not complete"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/mnt" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(c) tree differs after the switch"; }
gets2=$(($(grep -c '^GET /v1/pub/chunk/' "$NG/access.log") - gets_before))
[ "$gets2" = "$new_ids" ] || die "(c) the mount fetched $gets2 chunk objects for $new_ids new chunks"
grep -q '^GET /v1/pub/delta/1/2 200 ' "$NG/access.log" || die "(c) the mount did not use the delta"
ok "(c) a change: $new_ids new chunk objects and delta/1/2 written; the mount followed with $gets2 GETs, tree exact"

# (d)
publish || die "(d) an unchanged publish failed"
[ "$(last_pub written)" = 0 ] && [ "$(last_pub unchanged)" = 1 ] || die "(d) an unchanged tree wrote $(last_pub written) objects"
[ "$(cat "$OUT/HEAD")" = 2 ] || die "(d) HEAD moved on an unchanged tree"
ok "(d) unchanged tree: nothing written, HEAD stays"
umount_hyd "$T/mnt"

# (e) kill -9 mid-publish into a new OUTDIR
OUT2="$T/www/v1/pub2"
mkdir -p "$OUT2/.ferry-tmp"
echo junk >"$OUT2/.ferry-tmp/leftover"
FERRY_TEST_PUBLISH_DELAY_MS=30 "$REPL" -s "$T/state2" --publish "pub2=$OUT2" "pub2=$S" 2>>"$T/publish2.log" &
kpid=$!
wait_for 60 sh -c "[ \$(find '$OUT2/chunk' -type f 2>/dev/null | wc -l) -ge 20 ]" || die "(e) the slowed publish wrote nothing"
kill -9 "$kpid"
wait "$kpid" 2>/dev/null
[ ! -e "$OUT2/HEAD" ] || die "(e) HEAD written by a publish killed before its end"
had=$(find "$OUT2/chunk" -type f | wc -l)
d2=$(distinct_of 2)
[ "$had" -lt "$d2" ] || die "(e) the kill landed after every object was written ($had of $d2)"
# every object there is a whole frame of its id
for f in $(find "$OUT2/chunk" -type f | head -n 40); do
	cmp -s "$f" "$OUT/chunk/$(basename "$f")" || die "(e) $f differs from the object the first store holds"
done
"$REPL" -s "$T/state2" --publish "pub2=$OUT2" "pub2=$S" 2>>"$T/publish2.log" || die "(e) the publish after the kill failed"
w=$(grep ' published ns=pub2 ' "$T/publish2.log" | tail -n 1 | sed -n 's/.* written=\([0-9]*\).*/\1/p')
[ $((had + w)) = "$d2" ] || die "(e) after the kill: $had objects were there, $w written, for $d2"
[ ! -e "$OUT2/.ferry-tmp/leftover" ] || die "(e) the temp files of the killed publish stayed"
[ "$(cat "$OUT2/HEAD")" = 1 ] || die "(e) HEAD after the resumed publish: $(cat "$OUT2/HEAD")"
"$FERRY" sync -q --cache-dir "$T/scache2" "http://127.0.0.1:$port/v1/pub2" "$T/dest2" || die "(e) ferry sync of the resumed store failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest2" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(e) tree differs"; }
ok "(e) kill -9 after $had of $d2 objects: no HEAD; the next publish wrote the other $w, cleared the temp files; exact"

# (f)
flock "$OUT/.ferry-tmp/lock" sleep 30 &
lpid=$!
wait_for 10 sh -c "! flock -n '$OUT/.ferry-tmp/lock' true" || die "(f) could not take the lock"
publish
rc=$?
pkill -P "$lpid" 2>/dev/null # flock's sleep holds the lock
kill "$lpid" 2>/dev/null
wait "$lpid" 2>/dev/null
[ "$rc" = 1 ] || die "(f) a publish into a locked OUTDIR exited $rc, not 1"
tail -n 1 "$T/publish.log" | grep -q "another publish into .* is running" || die "(f) no clear line: $(tail -n 1 "$T/publish.log")"
"$REPL" -s "$T/state" --publish "nope=$T/x" "pub=$S" 2>"$T/err"
rc=$?
[ "$rc" = 2 ] || die "(f) --publish of a name not given exited $rc, not 2"
grep -q "NAME one of the NAME=DIR given" "$T/err" || die "(f) no clear line: $(cat "$T/err")"
ok "(f) a locked OUTDIR (exit 1) and an unknown NAME (exit 2) are refused with one line each"

# (g) a third generation, keeping two: generation 1 goes
f_more=$(find "$S" -name 'f*' -size +100k | sort | sed -n 2p)
head -c 120000 /dev/urandom >>"$f_more"
cp "$T/state/pub/catalog/1.db" "$T/gen1.db" # the state dir keeps 2 as well
# (f)'s holder of the lock (flock's child sleep) may outlive its kill
wait_for 40 sh -c "flock -n '$OUT/.ferry-tmp/lock' true" || die "(g) the lock of (f) is still held"
"$REPL" -s "$T/state" --sign-key "$T/keys/sign.key" --keep-generations 2 \
	--publish "pub=$OUT" "pub=$S" 2>>"$T/publish.log" || { tail -n 3 "$T/publish.log"; die "(g) the publish failed"; }
[ "$(cat "$OUT/HEAD")" = 3 ] || die "(g) HEAD says $(cat "$OUT/HEAD"), not 3"
G2="$T/state/pub/catalog/2.db" G3="$T/state/pub/catalog/3.db"
only1=$(sqlite3 "$G3" "attach '$T/gen1.db' as a; attach '$G2' as b;
	select count(distinct id) from a.chunk where id != zeroblob(32)
	and id not in (select id from b.chunk) and id not in (select id from main.chunk)")
[ "$only1" -ge 1 ] || die "(g) the test is void: generation 1 has no chunk of its own"
sqlite3 "$G3" "attach '$G2' as b; select lower(hex(id)) from main.chunk where id != zeroblob(32)
	union select lower(hex(id)) from b.chunk where id != zeroblob(32)" >"$T/kept.ids"
[ "$(last_pub dropped_generations)" = 1 ] || die "(g) dropped $(last_pub dropped_generations) generations, not 1"
[ "$(last_pub dropped_chunks)" = "$only1" ] || die "(g) dropped $(last_pub dropped_chunks) chunk objects, not the $only1 only generation 1 named"
[ "$(objects)" = "$(wc -l <"$T/kept.ids")" ] || die "(g) chunk/ holds $(objects) objects for $(wc -l <"$T/kept.ids") ids of generations 2 and 3"
while read -r id; do [ -s "$OUT/chunk/$id" ] || die "(g) chunk/$id, named by a kept generation, is gone"; done <"$T/kept.ids"
for f in catalog/1 signature/1 delta/1; do [ ! -e "$OUT/$f" ] || die "(g) $f stayed"; done
for f in catalog/2 catalog/3 signature/3 delta/2/3; do [ -s "$OUT/$f" ] || die "(g) $f is missing"; done
[ -z "$(find "$OUT/.ferry-tmp" -type f ! -name lock)" ] || die "(g) scratch files left in .ferry-tmp"
"$FERRY" sync -q --cache-dir "$T/scache3" --trust-key "$T/keys/sign.pub" "$URL" "$T/dest3" || die "(g) ferry sync after the drop failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest3" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(g) tree differs"; }
ok "(g) keeping 2: generation 1 and the $only1 objects only it named went, the $(wc -l <"$T/kept.ids") of generations 2 and 3 stayed; sync exact"

# (h) keeping 1, stopped after 3 removals, then finished by the next publish
big=$(find "$S" -name 'f*' -size +300k | sort | head -n 1)
[ -n "$big" ] || die "(h) no file of 300 KB or more in the tree"
rm -f "$big"
cp "$G2" "$T/gen2.db"
cp "$G3" "$T/gen3.db"
wait_for 40 sh -c "flock -n '$OUT/.ferry-tmp/lock' true" || die "(h) the publish lock is held"
FERRY_TEST_PRUNE_STOP_AFTER=3 "$REPL" -s "$T/state" --sign-key "$T/keys/sign.key" --keep-generations 1 \
	--publish "pub=$OUT" "pub=$S" 2>>"$T/publish.log" || die "(h) the stopped publish failed"
tail -n 2 "$T/publish.log" | grep -q "cannot drop older generations.*stopped after 3 removals" ||
	die "(h) no warning for the stopped drop: $(tail -n 2 "$T/publish.log")"
[ "$(cat "$OUT/HEAD")" = 4 ] || die "(h) HEAD says $(cat "$OUT/HEAD"), not 4"
[ -s "$OUT/catalog/2" ] && [ -s "$OUT/catalog/3" ] || die "(h) a stopped drop removed a catalog"
G4="$T/state/pub/catalog/4.db"
gone=$(sqlite3 "$G4" "attach '$T/gen2.db' as a; attach '$T/gen3.db' as b;
	select count(*) from (select id from a.chunk union select id from b.chunk)
	where id != zeroblob(32) and id not in (select id from main.chunk)")
[ "$gone" -gt 3 ] || die "(h) the test is void: only $gone objects to drop"
"$REPL" -s "$T/state" --sign-key "$T/keys/sign.key" --keep-generations 1 \
	--publish "pub=$OUT" "pub=$S" 2>>"$T/publish.log" || die "(h) the publish after the stop failed"
[ "$(last_pub dropped_generations)" = 2 ] || die "(h) the next publish dropped $(last_pub dropped_generations) generations, not 2"
[ "$(last_pub dropped_chunks)" = $((gone - 3)) ] || die "(h) the next publish dropped $(last_pub dropped_chunks) objects, not the $((gone - 3)) left"
sqlite3 "$G4" "select distinct lower(hex(id)) from chunk where id != zeroblob(32)" >"$T/kept4.ids"
[ "$(objects)" = "$(wc -l <"$T/kept4.ids")" ] || die "(h) chunk/ holds $(objects) objects for $(wc -l <"$T/kept4.ids") ids of generation 4"
while read -r id; do [ -s "$OUT/chunk/$id" ] || die "(h) chunk/$id of generation 4 is gone"; done <"$T/kept4.ids"
[ "$(ls "$OUT/catalog")" = 4 ] || die "(h) catalogs left: $(ls "$OUT/catalog" | tr '\n' ' ')"
[ "$(ls "$OUT/signature")" = 4 ] || die "(h) signatures left: $(ls "$OUT/signature" | tr '\n' ' ')"
# delta/2/3 (into a dropped one) and delta/3/4 (from one) went, and their folders
[ -z "$(ls -A "$OUT/delta")" ] || die "(h) deltas left: $(find "$OUT/delta" | tr '\n' ' ')"
"$FERRY" sync -q --cache-dir "$T/scache4" --trust-key "$T/keys/sign.pub" "$URL" "$T/dest4" || die "(h) ferry sync failed"
python3 "$E2E_LIB/treecmp.py" --content "$S" "$T/dest4" >"$T/cmp.txt" || { cat "$T/cmp.txt"; die "(h) tree differs"; }
ok "(h) a drop stopped after 3 of $gone objects: catalogs stayed; the next publish removed the other $((gone - 3)) and generations 2 and 3; sync exact"
