#!/usr/bin/env bash
# bench/peers.sh [BUILD_DIR] — the peers of `make bench`: rsync, rclone and
# casync moving the bench tree (bench/gen_tree.py) over the shaped link
# (bench/link.sh), timed as bench/run.sh times ferry. Needs root
# (namespaces, tbf, FUSE) and rsync, rclone, casync, nginx, zstd and GNU
# time (make bench installs them).
#
# The servers run in the source's namespace: an rsync daemon (modules tree
# and treemut) and nginx (bench/nginx-peers.conf.in: tree/ with
# autoindex for rclone's http remote, cas/ for casync's index and store).
# The clients run with the destination's network only (nsenter --net, so
# a FUSE mount they make is seen by this shell). Approaches (APPROACHES):
#   rsync           rsync -a rsync://SRC/tree/ DEST/
#   rsync_z         rsync -az ...
#   rsync_hx        rsync -aHX ... (hard links and xattrs too)
#   rsync_incr      rsync -aHX rsync://SRC/treemut/ into a copy of tree (the
#                   rerun after MUTATE% of the files changed)
#   rclone_copy     rclone copy --transfers 8 from an http remote (nginx)
#   rclone_mount    rclone mount --read-only --vfs-cache-mode full
#   casync_extract  casync extract of an index and store served by nginx
#   casync_mount    casync mount of the same
# A copy is timed from its start to its exit (browse = complete = that;
# first byte = when the large and the small file are there at full size).
# A mount is measured on three fresh mounts per run: the first byte of
# the large file, of the small one (from the mount's start, the mount
# included), and ls -lR (browse) then a tar of everything (complete). The
# wire bytes are the destination veth's; HTTP requests come from nginx's
# log; "correct" checks the copy (or the mount) against the tree's
# manifest (peers_lib.py compare: exact, content or DIFF).
#
# Knobs (environment):
#   WORKDIR [build/bench/work]  src/ (the trees, their manifests, the casync
#                        store), dst/, mnt/, peers-run/ (logs)
#   RES [WORKDIR/peers]  results.jsonl (one JSON object a run), prep.jsonl
#                        (casync make), versions.txt
#   SCALE [small] FILES [] SEED [1] MUTATE [5]   the tree (gen_tree.py);
#                        MUTATE=0: no treemut (and no rsync_incr)
#   RATES [200mbit]      link rates, one after another (link.sh syntax)
#   RUNS [3]             runs per approach and rate
#   APPROACHES ["rsync_hx rclone_mount casync_mount"]
#   RTT_MS [0]           >0: the clients reach the servers through
#                        rttproxy (RTT_MS/2 each way) in the destination's
#                        namespace; the rate's label gets "+rttNms"
#   RTTPROXY [BUILD_DIR/bench/rttproxy], BUILD_DIR [build/release]
#   NS_SRC NS_DST IF_SRC IF_DST IP_SRC   the link's (link.sh)
# Prints the median table at the end.
#
#   bench/peers.sh --prepare   only the tree, treemut and their manifests
#   bench/peers.sh --table     the table of RES/results.jsonl again
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VERB=run
case "${1:-}" in
--prepare) VERB=prepare; shift ;;
--table) VERB=table; shift ;;
esac
B=${1:-$ROOT/build/release}
WORKDIR=${WORKDIR:-$ROOT/build/bench/work}
RES=${RES:-$WORKDIR/peers}
SCALE=${SCALE:-small}
FILES=${FILES:-}
SEED=${SEED:-1}
MUTATE=${MUTATE:-5}
RATES=${RATES:-200mbit}
RUNS=${RUNS:-3}
APPROACHES=${APPROACHES:-"rsync_hx rclone_mount casync_mount"}
RTT_MS=${RTT_MS:-0}
RTTPROXY=${RTTPROXY:-$B/bench/rttproxy}
export NS_SRC=${NS_SRC:-src} NS_DST=${NS_DST:-dst} IF_SRC=${IF_SRC:-fb-src} IF_DST=${IF_DST:-fb-dst}
export IP_SRC=${IP_SRC:-10.99.0.1}
NSS="ip netns exec $NS_SRC"
NSD="nsenter --net=/run/netns/$NS_DST"
LINK=$HERE/link.sh
LIB="python3 $HERE/peers_lib.py"
SRC=$WORKDIR/src
DST=$WORKDIR/dst
MNT=$WORKDIR/mnt
RUN=$WORKDIR/peers-run

log() { echo "[$(date +%H:%M:%S)] peers: $*" >&2; }
now() { date +%s.%N; }
dt() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
wire() { local s; s=$("$LINK" stats) && echo $((${s% *} + ${s#* })); }
reqs() { if [ -f "$RUN/nginx-access.log" ]; then wc -l <"$RUN/nginx-access.log"; else echo 0; fi; }
bytes_under() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{ n += $1 } END { print n + 0 }'; }
rss() { # GNU time's %M (KiB) from FILE, or NA
	local k=
	[ -s "$1" ] && k=$(tail -n 1 "$1" | tr -dc 0-9)
	echo "${k:-NA}"
}
emit() { python3 "$HERE/emit.py" "$@" >>"$RES/results.jsonl"; }

# ---------------------------------------------------------------- the tree
# src/tree (gen_tree.py), src/treemut (the same, MUTATE% changed), their
# manifests and src/tree.summary.json; made again only when STAMP differs.
prepare() {
	local stamp="gen_tree scale=$SCALE files=$FILES seed=$SEED mutate=$MUTATE"
	mkdir -p "$SRC"
	if [ "$(cat "$SRC/STAMP" 2>/dev/null)" != "$stamp" ]; then
		log "making the tree ($stamp)"
		rm -rf "$SRC/tree" "$SRC/treemut" "$SRC/cas" "$SRC/STAMP"
		python3 "$HERE/gen_tree.py" "$SRC/tree" --scale "$SCALE" --seed "$SEED" ${FILES:+--files "$FILES"} >&2 || exit 1
		$LIB manifest "$SRC/tree" "$SRC/tree.manifest.json" >"$SRC/tree.summary.json" || exit 1
		if [ "$MUTATE" != 0 ]; then
			cp -a "$SRC/tree" "$SRC/treemut"
			python3 "$HERE/gen_tree.py" "$SRC/treemut" --mutate "$MUTATE" --seed "$SEED" >&2 || exit 1
			$LIB manifest "$SRC/treemut" "$SRC/treemut.manifest.json" >/dev/null || exit 1
		fi
		echo "$stamp" >"$SRC/STAMP"
	fi
	TREE_BYTES=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$SRC/tree.summary.json")
	TREE_ENTRIES=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['entries'])" "$SRC/tree.summary.json")
	LARGE_REL=checkpoints/llm-7b-sim/v3/$(ls "$SRC/tree/checkpoints/llm-7b-sim/v3" | grep 'safetensors$' | sort | tail -n 1)
	SMALL_REL=$(cd "$SRC/tree" && find dataset -type f -name '*.jpg' | sort | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')
	LARGE_SIZE=$(stat -c %s "$SRC/tree/$LARGE_REL")
	SMALL_SIZE=$(stat -c %s "$SRC/tree/$SMALL_REL")
	log "tree: $TREE_BYTES bytes, $TREE_ENTRIES entries; large $LARGE_REL, small $SMALL_REL"
}

# casync's index and store of the tree, made on the source (not over the
# link) once per tree; its cost goes to prep.jsonl.
prepare_casync() {
	[ -s "$SRC/cas/tree.caidx" ] && [ -s "$RES/prep.jsonl" ] && return 0
	rm -rf "$SRC/cas"
	mkdir -p "$SRC/cas"
	local t0 t1
	t0=$(now)
	/usr/bin/time -f %M -o "$RUN/casync-make.rss" casync make --store="$SRC/cas/store.castr" \
		"$SRC/cas/tree.caidx" "$SRC/tree" >"$RUN/casync-make.log" 2>&1 ||
		{ log "casync make failed: $(tail -n 3 "$RUN/casync-make.log")"; return 1; }
	t1=$(now)
	$LIB casync-prep "$SRC/cas/store.castr" "$TREE_BYTES" "$(dt "$t0" "$t1")" "$(rss "$RUN/casync-make.rss")" >"$RES/prep.jsonl"
	log "casync make: $(cat "$RES/prep.jsonl")"
}

# ---------------------------------------------------------------- servers
SERVERS=() PROXY_PID=
start_servers() {
	mkdir -p "$RUN/nginx-tmp"
	: >"$RUN/nginx-access.log"
	sed -e "s|@DIR@|$RUN|g" -e "s|@DOCROOT@|$SRC|g" -e "s|@ADDR@|$IP_SRC|g" \
		"$HERE/nginx-peers.conf.in" >"$RUN/nginx.conf"
	cat >"$RUN/rsyncd.conf" <<-EOF
		use chroot = no
		uid = root
		gid = root
		log file = $RUN/rsyncd.log
		[tree]
		    path = $SRC/tree
		    read only = yes
		[treemut]
		    path = $SRC/treemut
		    read only = yes
	EOF
	$NSS nginx -e "$RUN/nginx-error.log" -c "$RUN/nginx.conf" >"$RUN/nginx.out" 2>&1 &
	SERVERS+=($!)
	$NSS rsync --daemon --no-detach --config="$RUN/rsyncd.conf" --address="$IP_SRC" >"$RUN/rsyncd.out" 2>&1 &
	SERVERS+=($!)
	local port i
	for port in 80 873; do
		for i in $(seq 1 100); do
			$NSD bash -c "exec 3<>/dev/tcp/$IP_SRC/$port" 2>/dev/null && continue 2
			sleep 0.1
		done
		log "nothing listens on $IP_SRC:$port (see $RUN/nginx.out, $RUN/rsyncd.out)"
		return 1
	done
}

stop_servers() {
	local p
	for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${SERVERS[@]}"; do wait "$p" 2>/dev/null; done
	SERVERS=()
}

# Where the clients connect: the servers themselves, or with RTT_MS > 0
# rttproxy in the destination's namespace in front of each.
endpoints() {
	RATE_SUFFIX=
	HTTP=http://$IP_SRC
	RSYNC=rsync://$IP_SRC
	if [ "$RTT_MS" != 0 ]; then
		[ -x "$RTTPROXY" ] || { log "$RTTPROXY is missing (make builds it)"; return 1; }
		local half i
		half=$(python3 -c "import sys; print('%g' % (float(sys.argv[1]) / 2))" "$RTT_MS")
		: >"$RUN/rttproxy.log"
		$NSD "$RTTPROXY" 127.0.0.1:8080 "$IP_SRC:80" "$half" 127.0.0.1:8873 "$IP_SRC:873" \
			>"$RUN/rttproxy.log" 2>&1 &
		PROXY_PID=$!
		for i in $(seq 1 100); do
			[ "$(grep -c '^rttproxy: ready' "$RUN/rttproxy.log")" -ge 2 ] && break
			kill -0 "$PROXY_PID" 2>/dev/null || { log "rttproxy exited: $(cat "$RUN/rttproxy.log")"; return 1; }
			sleep 0.05
		done
		[ "$(grep -c '^rttproxy: ready' "$RUN/rttproxy.log")" -ge 2 ] || { log "rttproxy not ready after 5 s"; return 1; }
		HTTP=http://127.0.0.1:8080
		RSYNC=rsync://127.0.0.1:8873
		RATE_SUFFIX=+rtt${RTT_MS}ms
	fi
	export RCLONE_CONFIG=$RUN/rclone.conf RCLONE_CONFIG_PEERSRC_TYPE=http RCLONE_CONFIG_PEERSRC_URL=$HTTP/tree/
	: >"$RCLONE_CONFIG"
}

stop_proxy() {
	[ -n "$PROXY_PID" ] && { kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; }
	PROXY_PID=
}

unmount() {
	fusermount3 -u "$1" 2>/dev/null || umount "$1" 2>/dev/null ||
		{ sleep 1; umount -l "$1" 2>/dev/null; }
}

cleanup() {
	local m
	for m in "$MNT"/*; do mountpoint -q "$m" 2>/dev/null && unmount "$m"; done
	stop_proxy
	stop_servers
	"$LINK" down >/dev/null 2>&1
}

# ---------------------------------------------------------------- measuring
# copy_run NAME LABEL RUN DEST MANIFEST -- CMD...: CMD makes DEST (KEEP=1:
# DEST is already there; NOFB=1: no first-byte watch).
copy_run() {
	local name=$1 label=$2 run=$3 dest=$4 manifest=$5 t0 t1 w0 q0 rc pl= ps= fbl=NA fbs=NA v
	shift 6
	[ "${KEEP:-0}" = 1 ] || { rm -rf "$dest"; mkdir -p "$dest"; }
	q0=$(reqs)
	w0=$(wire)
	t0=$(now)
	if [ "${NOFB:-0}" != 1 ]; then
		$LIB waitfile "$dest/$LARGE_REL" "$LARGE_SIZE" "$t0" >"$RUN/fb-large" &
		pl=$!
		$LIB waitfile "$dest/$SMALL_REL" "$SMALL_SIZE" "$t0" >"$RUN/fb-small" &
		ps=$!
	fi
	$NSD /usr/bin/time -f %M -o "$RUN/$name.rss" "$@" >"$RUN/$name.log" 2>&1
	rc=$?
	t1=$(now)
	local wb=$(($(wire) - w0)) full
	full=$(dt "$t0" "$t1")
	if [ -n "$pl" ]; then
		sleep 0.05
		kill "$pl" "$ps" 2>/dev/null
		wait "$pl" "$ps" 2>/dev/null
		fbl=$(cat "$RUN/fb-large")
		fbs=$(cat "$RUN/fb-small")
	fi
	v=$($LIB compare "$manifest" "$dest")
	# a failed copy keeps its record, marked, out of the medians
	local err=
	[ "$rc" = 0 ] || err="exit status $rc: $(tail -n 1 "$RUN/$name.log")"
	emit "$name" "$label" "$run" rc=$rc error="$err" browse_s="$full" fb_large_s="${fbl:-NA}" fb_small_s="${fbs:-NA}" \
		full_s="$full" wire_bytes=$wb http_reqs=$(($(reqs) - q0)) dest_bytes="$(bytes_under "$dest")" \
		tree_bytes="$TREE_BYTES" peak_rss_kb="$(rss "$RUN/$name.rss")" correct="$($LIB label "$v")" verdict="$v"
	log "$name@$label#$run rc=$rc complete ${full}s, first bytes ${fbl:-NA}/${fbs:-NA}s, wire $wb, $($LIB label "$v")"
}

# mount_up NAME TAG MOUNTPOINT CACHE -- CMD...: CMD (a FUSE daemon in the
# foreground) in the background; back once the mount is there. Sets
# MPID, T0, MOUNT_S.
mount_up() {
	local name=$1 tag=$2 mnt=$3 cache=$4 i
	shift 5
	mountpoint -q "$mnt" && unmount "$mnt"
	rm -rf "$cache"
	mkdir -p "$cache" "$mnt"
	T0=$(now)
	$NSD /usr/bin/time -f %M -o "$RUN/$name.$tag.rss" "$@" >"$RUN/$name.$tag.log" 2>&1 &
	MPID=$!
	for i in $(seq 1 1200); do
		mountpoint -q "$mnt" && break
		kill -0 "$MPID" 2>/dev/null || break
		sleep 0.025
	done
	mountpoint -q "$mnt" || { log "$name: no mount (see $RUN/$name.$tag.log)"; MOUNT_S=NA; return 1; }
	MOUNT_S=$(dt "$T0" "$(now)")
}

# mount_down MOUNTPOINT: unmount, give the daemon 10 s to exit (casync
# mount has been seen to keep pulling after its unmount), then stop it.
mount_down() {
	local i
	unmount "$1"
	for i in $(seq 1 100); do
		kill -0 "$MPID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$MPID" 2>/dev/null; then
		log "$(basename "$1"): the daemon is still running 10 s after the unmount; stopping it"
		pkill -TERM -P "$MPID" 2>/dev/null
		sleep 2
		pkill -KILL -P "$MPID" 2>/dev/null
	fi
	wait "$MPID" 2>/dev/null
}

# first_byte NAME TAG REL MOUNTPOINT CACHE -- CMD...: a fresh mount, head -c1
# of REL; FB (s from the mount's start), FBW (wire bytes), FBQ (requests).
first_byte() {
	local name=$1 tag=$2 rel=$3 mnt=$4 cache=$5 w0 q0
	shift 6
	FB=NA FBW=NA FBQ=NA
	w0=$(wire)
	q0=$(reqs)
	mount_up "$name" "$tag" "$mnt" "$cache" -- "$@" || return 1
	head -c 1 "$mnt/$rel" >/dev/null
	FB=$(dt "$T0" "$(now)")
	FBW=$(($(wire) - w0))
	FBQ=$(($(reqs) - q0))
	mount_down "$mnt"
}

# mount_run NAME LABEL RUN CACHE -- CMD...: CMD mounts at MNT/NAME.
mount_run() {
	local name=$1 label=$2 run=$3 cache=$4 mnt=$MNT/$1
	shift 5
	local fbl fbs fblw fbsw fblq fbsq w0 q0 wls qls browse entries tr0 nbytes full tread v peak
	first_byte "$name" fbl "$LARGE_REL" "$mnt" "$cache" -- "$@"
	fbl=$FB fblw=$FBW fblq=$FBQ
	first_byte "$name" fbs "$SMALL_REL" "$mnt" "$cache" -- "$@"
	fbs=$FB fbsw=$FBW fbsq=$FBQ
	w0=$(wire)
	q0=$(reqs)
	mount_up "$name" main "$mnt" "$cache" -- "$@" || { emit "$name" "$label" "$run" error=mount_failed; return 1; }
	ls -lR "$mnt" >"$RUN/$name.ls-lR" 2>"$RUN/$name.ls-lR.err"
	browse=$(dt "$T0" "$(now)")
	wls=$(($(wire) - w0))
	qls=$(($(reqs) - q0))
	entries=$(find "$mnt" -mindepth 1 2>/dev/null | wc -l)
	tr0=$(now)
	nbytes=$(tar -C "$mnt" -cf - . 2>"$RUN/$name.tar.err" | wc -c)
	full=$(dt "$T0" "$(now)")
	tread=$(dt "$tr0" "$(now)")
	local wb=$(($(wire) - w0)) qb=$(($(reqs) - q0)) db
	db=$(bytes_under "$cache")
	v=$($LIB compare "$SRC/tree.manifest.json" "$mnt")
	mount_down "$mnt"
	peak=$(for t in fbl fbs main; do rss "$RUN/$name.$t.rss"; done | grep -E '^[0-9]+$' | sort -n | tail -n 1)
	emit "$name" "$label" "$run" mount_s="$MOUNT_S" browse_s="$browse" browse_entries="$entries" \
		expected_entries="$TREE_ENTRIES" ls_wire_bytes="$wls" ls_http_reqs="$qls" \
		fb_large_s="$fbl" fb_small_s="$fbs" fb_large_wire="$fblw" fb_small_wire="$fbsw" \
		fb_large_reqs="$fblq" fb_small_reqs="$fbsq" full_s="$full" read_s="$tread" tar_bytes="$nbytes" \
		wire_bytes="$wb" http_reqs="$qb" dest_bytes="$db" tree_bytes="$TREE_BYTES" peak_rss_kb="${peak:-NA}" \
		correct="$($LIB label "$v")" verdict="$v"
	log "$name@$label#$run mount ${MOUNT_S}s, browse ${browse}s ($entries/$TREE_ENTRIES entries), first bytes $fbl/${fbs}s, complete ${full}s, wire $wb, $($LIB label "$v")"
}

# ---------------------------------------------------------------- approaches
peer_rsync() { copy_run rsync "$1" "$2" "$DST/rsync" "$SRC/tree.manifest.json" -- rsync -a "$RSYNC/tree/" "$DST/rsync/"; }
peer_rsync_z() { copy_run rsync_z "$1" "$2" "$DST/rsync_z" "$SRC/tree.manifest.json" -- rsync -az "$RSYNC/tree/" "$DST/rsync_z/"; }
peer_rsync_hx() { copy_run rsync_hx "$1" "$2" "$DST/rsync_hx" "$SRC/tree.manifest.json" -- rsync -aHX "$RSYNC/tree/" "$DST/rsync_hx/"; }
peer_rsync_incr() {
	# the destination holds the tree already (copied here, not over the link)
	rm -rf "$DST/rsync_incr"
	cp -a "$SRC/tree" "$DST/rsync_incr"
	KEEP=1 NOFB=1 copy_run rsync_incr "$1" "$2" "$DST/rsync_incr" "$SRC/treemut.manifest.json" -- \
		rsync -aHX "$RSYNC/treemut/" "$DST/rsync_incr/"
}
peer_rclone_copy() {
	copy_run rclone_copy "$1" "$2" "$DST/rclone_copy" "$SRC/tree.manifest.json" -- \
		rclone copy peersrc: "$DST/rclone_copy" --transfers 8
}
peer_rclone_mount() {
	mount_run rclone_mount "$1" "$2" "$DST/rclone-cache" -- \
		rclone mount peersrc: "$MNT/rclone_mount" --read-only --vfs-cache-mode full --cache-dir "$DST/rclone-cache"
}
peer_casync_extract() {
	mkdir -p "$DST/casync-tmp"
	copy_run casync_extract "$1" "$2" "$DST/casync_extract" "$SRC/tree.manifest.json" -- \
		env TMPDIR="$DST/casync-tmp" casync extract --store="$HTTP/cas/store.castr" "$HTTP/cas/tree.caidx" "$DST/casync_extract"
}
peer_casync_mount() {
	# casync keeps the chunks it fetched in $TMPDIR while mounted
	mount_run casync_mount "$1" "$2" "$DST/casync-cache" -- \
		env TMPDIR="$DST/casync-cache" casync mount --store="$HTTP/cas/store.castr" "$HTTP/cas/tree.caidx" "$MNT/casync_mount"
}

main() {
	local t a rate run
	[ "$(id -u)" = 0 ] || { echo "bench/peers.sh needs root (namespaces, tbf, FUSE)" >&2; exit 2; }
	for a in $APPROACHES; do
		declare -F "peer_$a" >/dev/null || { echo "bench/peers.sh: no approach '$a'" >&2; exit 2; }
		[ "$a" != rsync_incr ] || [ "$MUTATE" != 0 ] || { echo "bench/peers.sh: rsync_incr needs MUTATE > 0" >&2; exit 2; }
	done
	for t in rsync rclone casync nginx nsenter zstd /usr/bin/time; do
		command -v "$t" >/dev/null || { echo "bench/peers.sh: '$t' is missing" >&2; exit 2; }
	done
	mkdir -p "$RES" "$DST" "$MNT" "$RUN"
	prepare
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	case " $APPROACHES " in *" casync_"*) prepare_casync || exit 1 ;; esac
	{
		echo "date: $(date -u +%FT%TZ)"
		uname -sr
		echo "nproc: $(nproc)"
		rsync --version | head -n 1
		rclone version 2>/dev/null | head -n 1
		casync --version 2>/dev/null | head -n 1
		nginx -v 2>&1
	} >"$RES/versions.txt"
	for rate in $RATES; do
		"$LINK" up "$rate" >&2 || exit 1
		start_servers || exit 1
		endpoints || exit 1
		for run in $(seq 1 "$RUNS"); do
			for a in $APPROACHES; do
				"peer_$a" "$rate$RATE_SUFFIX" "$run"
			done
		done
		stop_proxy
		stop_servers
		"$LINK" down >&2
	done
	$LIB table "$RES/results.jsonl" "$RES/prep.jsonl"
}

case $VERB in
prepare) prepare ;;
table) $LIB table "$RES/results.jsonl" "$RES/prep.jsonl" ;;
run) main ;;
esac
