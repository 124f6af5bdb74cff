#!/usr/bin/env bash
# 075: the codec of a batch suits where its client is. With --codec auto
# (the default) a client on the replicator's own host gets its batches
# (POST chunks) framed with lz4: there is no wire to save, and zstd's CPU
# is what such a copy waits for. A client across a link (here a veth
# between two network namespaces this test creates) gets zstd. GET chunk
# answers are immutable and the same for both; --codec zstd is obeyed for
# both. Each batch frame follows the id it answers and gives that chunk's
# length; a `ferry sync` from either side (which verifies every chunk's
# SHA-256) makes the source's tree.
. "$(dirname "$0")/lib/common.sh"
NS_A="ferry-csrc-$$"; NS_B="ferry-cdst-$$"
ns_link "$NS_A" 10.232.0.1 "$NS_B" 10.232.0.2

# A chunk every codec shrinks: text that repeats.
mkdir -p "$T/src"
python3 -c 'import sys; sys.stdout.write("".join("line %d of a text that repeats itself\n" % (i % 50) for i in range(4000)))' >"$T/src/text.txt"

# run_repl CODEC — the replicator in NS_A (its network only, so it stays
# our child), until its namespace is hashed.
run_repl() {
	: >"$T/repl.log"
	nsenter --net=/run/netns/"$NS_A" "$REPL" -l 10.232.0.1:8710 -s "$T/state" --codec "$1" "n=$T/src" >"$T/repl.log" 2>&1 &
	REPL_PID=$!
	local i
	wait_ready "$T/repl.log" "$REPL_PID"
}
# codecs NS — from network namespace NS: the codec of each of the text's
# chunks in one batch answer (POST chunks), then in its GET chunk answer,
# as "batch=C,C,... get=C,C,..." where C is raw, lz4 or zstd (zstd over
# byte planes counts as zstd). Each frame must name its chunk (batch)
# and say it decodes to that chunk's length.
codecs() {
	nsenter --net=/run/netns/"$1" python3 - "$IDS" "$LENS" <<'PY'
import struct, sys, urllib.request
base = "http://10.232.0.1:8710/v1/n/"
ids = sys.argv[1].split(","); lens = [int(x) for x in sys.argv[2].split(",")]
def frame(buf, want_len):
    magic, codec, flags, res, raw_len, stored = struct.unpack_from("<4sBBHII", buf)
    assert magic == b"FRC1" and raw_len == want_len, (magic, raw_len, want_len)
    return ["raw", "lz4", "zstd", "zstd", "zstd"][codec], 16 + stored
body = urllib.request.urlopen(urllib.request.Request(
    base + "chunks", data=b"".join(bytes.fromhex(i) for i in ids))).read()
off, batch = 0, []
for i, n in zip(ids, lens):
    assert body[off:off + 32] == bytes.fromhex(i), "batch answer out of order"
    c, flen = frame(body[off + 32:], n)
    batch.append(c); off += 32 + flen
assert off == len(body), "bytes after the last frame"
get = [(frame(urllib.request.urlopen(base + "chunk/" + i).read(), n)[0])
       for i, n in zip(ids, lens)]
print("batch=%s get=%s" % (",".join(batch), ",".join(get)))
PY
}
# sync_from NS DEST — ferry sync of the namespace from NS; DEST must equal
# the source.
sync_from() {
	rm -rf "$T/cache.$2"
	nsenter --net=/run/netns/"$1" "$FERRY" sync --cache-dir "$T/cache.$2" http://10.232.0.1:8710/v1/n "$T/$2" >"$T/$2.log" 2>&1 ||
		{ cat "$T/$2.log"; die "ferry sync from $1 failed"; }
	python3 "$E2E_LIB/treecmp.py" --content "$T/src" "$T/$2" >"$T/cmp.txt" ||
		{ cat "$T/cmp.txt"; die "ferry sync from $1: tree differs from the source"; }
}

run_repl auto
CAT=$(manifests_db n "$T/manifests.db")
IDS=$(sql "$CAT" "select group_concat(lower(hex(id)), ',') from (select id from chunk order by off)")
LENS=$(sql "$CAT" "select group_concat(len, ',') from (select len from chunk order by off)")
[ -n "$IDS" ] || die "no chunk ids for text.txt"
n=$(echo "$IDS" | tr ',' '\n' | wc -l)
lz4s=$(printf 'lz4,%.0s' $(seq 1 "$n")); lz4s=${lz4s%,}
zstds=$(printf 'zstd,%.0s' $(seq 1 "$n")); zstds=${zstds%,}

got=$(codecs "$NS_A") || die "requests from the replicator's own host failed"
[ "$got" = "batch=$lz4s get=$zstds" ] || die "same host, --codec auto: want batch=$lz4s get=$zstds, got $got"
ok "same host, --codec auto: batches in lz4, GET chunk in zstd"
got=$(codecs "$NS_B") || die "requests across the veth failed"
[ "$got" = "batch=$zstds get=$zstds" ] || die "across a link, --codec auto: want zstd everywhere, got $got"
ok "across a link, --codec auto: zstd for batches and GET chunk"
sync_from "$NS_A" near
sync_from "$NS_B" far
ok "ferry sync from either side makes the source's tree"

kill "$REPL_PID"; wait "$REPL_PID" 2>/dev/null; REPL_PID=
run_repl zstd
got=$(codecs "$NS_A") || die "requests from the replicator's own host failed"
[ "$got" = "batch=$zstds get=$zstds" ] || die "same host, --codec zstd: want zstd everywhere, got $got"
ok "same host, --codec zstd: zstd is obeyed"
kill "$REPL_PID"; wait "$REPL_PID" 2>/dev/null; REPL_PID=
