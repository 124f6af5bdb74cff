#!/bin/bash
# bench/slowreaders.sh BUILD [CONNS] [replicator options...] — one tenant
# opens CONNS connections (default 4200) from 34 loopback addresses, each
# asking for a 64 MiB file's pack with a 4 KiB receive buffer and never
# reading; another tenant fetches a 300 KB file's pack every half second.
# Prints tests/e2e/lib/slowread.py's JSON line: the other tenant's slowest
# answer and the replicator's peak resident memory.
# Env: SECS (default 20), POST=1 (batches of the big file's ids instead of
# a GET), NOTOK=1 (no --tokens: tenants are addresses), PORT (7700).
set -eu
BUILD=${1:-build/release}
CONNS=${2:-4200}
shift $(($# > 2 ? 2 : $#))
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$BUILD/bin" && pwd)
PORT=${PORT:-7700}
W=$(mktemp -d /tmp/ferry-slowreaders.XXXXXX)
RP=""
trap '[ -z "$RP" ] || kill "$RP" 2>/dev/null; rm -rf "$W"' EXIT
ulimit -n 65536 2>/dev/null || true

mkdir -p "$W/src"
head -c $((64 << 20)) /dev/urandom >"$W/src/big.bin"
head -c 300000 /dev/urandom >"$W/src/small.bin"
"$BIN/ferry" token new a >"$W/a.out"
"$BIN/ferry" token new a >"$W/b.out"
head -n 1 "$W/a.out" >"$W/tokA"
head -n 1 "$W/b.out" >"$W/tokB"
sed -n 2p "$W/a.out" >"$W/tokens"
sed -n 2p "$W/b.out" >>"$W/tokens"
tokopt=(--tokens "$W/tokens")
[ -z "${NOTOK:-}" ] || tokopt=()

"$BIN/ferry-replicator" -l "127.0.0.1:$PORT" -s "$W/state" --hash-before-publish \
	"${tokopt[@]}" "$@" "a=$W/src" >"$W/repl.log" 2>&1 &
RP=$!
for _ in $(seq 1 300); do grep -q ' ready' "$W/repl.log" && break; sleep 0.1; done
grep -q ' ready' "$W/repl.log" || { cat "$W/repl.log" >&2; exit 1; }
auth=(-H "Authorization: Bearer $(cat "$W/tokB")")
gen=$(curl -sf "${auth[@]}" "http://127.0.0.1:$PORT/v1/a/HEAD")
curl -sf "${auth[@]}" "http://127.0.0.1:$PORT/v1/a/catalog/$gen" | zstd -dc >"$W/cat.db"
ino() { sqlite3 "$W/cat.db" "select ino from dirent where cast(name as text)='$1'"; }
big=$(ino big.bin)
small=$(ino small.bin)
post=()
[ -z "${POST:-}" ] || post=(--post)
python3 "$here/tests/e2e/lib/slowread.py" --port "$PORT" --ns a \
	--path "pack/$gen/$big/3" --conns "$CONNS" --addrs 34 \
	--token-file "$W/tokA" --probe-token-file "$W/tokB" \
	--probe-path "pack/$gen/$small/0" --pid "$RP" \
	--seconds "${SECS:-20}" "${post[@]}"
kill "$RP"
wait "$RP" || true
RP=""
