#!/usr/bin/env bash
# bench/link.sh up RATE | down | stats — the bench's wide-area link, made
# on this machine: two network namespaces joined by a veth pair, each end
# sending at most RATE (tbf on both egress sides, so both directions are
# shaped). Needs root (ip, tc).
#
#   up RATE   (re)create the link; RATE in tc's syntax: 200mbit, 1gbit,
#             500kbit (bit/s) or 25mbps (bytes/s), whole numbers
#   down      remove both namespaces (and so the veth pair); no error if
#             they are not there
#   stats     "RX TX": the bytes received and sent by the destination's
#             end, what the bench calls the wire bytes (their sum)
#
# No delay is added: the veth's round trip is ~0.05 ms. bench/rttproxy
# adds round trips where a run asks for them (RTT_MS, RTTS).
#
# Knobs (environment; the bench scripts export them, other names let two
# runs share the machine): NS_SRC [src] NS_DST [dst] (the namespaces),
# IF_SRC [fb-src] IF_DST [fb-dst] (the veth ends), IP_SRC [10.99.0.1]
# IP_DST [10.99.0.2] (their addresses, in a /24).
set -euo pipefail
NS_SRC=${NS_SRC:-src}
NS_DST=${NS_DST:-dst}
IF_SRC=${IF_SRC:-fb-src}
IF_DST=${IF_DST:-fb-dst}
IP_SRC=${IP_SRC:-10.99.0.1}
IP_DST=${IP_DST:-10.99.0.2}

usage() {
	echo "usage: bench/link.sh up RATE | down | stats" >&2
	exit 2
}

# bytes_per_s RATE: tc's rate syntax to bytes per second
bytes_per_s() {
	local re='^([0-9]+)([kmg]?)(bit|bps)$' r=${1,,} n mult
	[[ $r =~ $re ]] || { echo "bench/link.sh: cannot read rate '$1' (e.g. 200mbit, 1gbit)" >&2; exit 2; }
	n=${BASH_REMATCH[1]}
	case ${BASH_REMATCH[2]} in k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; *) mult=1 ;; esac
	if [ "${BASH_REMATCH[3]}" = bps ]; then echo $((n * mult)); else echo $((n * mult / 8)); fi
}

down() {
	ip netns del "$NS_SRC" 2>/dev/null || true
	ip netns del "$NS_DST" 2>/dev/null || true
}

up() {
	local rate=$1 bps burst ns dev
	bps=$(bytes_per_s "$rate")
	# A bucket of 10 ms at the rate (at least 64 KiB): more than a timer
	# tick's worth, so tbf reaches the rate, yet small against a transfer.
	burst=$((bps / 100))
	[ "$burst" -ge 65536 ] || burst=65536
	down
	ip netns add "$NS_SRC"
	ip netns add "$NS_DST"
	ip link add "$IF_SRC" netns "$NS_SRC" type veth peer name "$IF_DST" netns "$NS_DST"
	ip -n "$NS_SRC" addr add "$IP_SRC/24" dev "$IF_SRC"
	ip -n "$NS_DST" addr add "$IP_DST/24" dev "$IF_DST"
	for ns in "$NS_SRC" "$NS_DST"; do
		dev=$IF_SRC
		[ "$ns" = "$NS_DST" ] && dev=$IF_DST
		ip -n "$ns" link set lo up
		ip -n "$ns" link set "$dev" up
		tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
	done
	echo "link up: $NS_SRC ($IF_SRC $IP_SRC) <-> $NS_DST ($IF_DST $IP_DST), tbf $rate each way, burst $burst B"
}

stats() {
	# sysfs as the destination's namespace sees it (ip netns exec mounts it)
	ip netns exec "$NS_DST" cat "/sys/class/net/$IF_DST/statistics/rx_bytes" \
		"/sys/class/net/$IF_DST/statistics/tx_bytes" | paste -sd' '
}

case "${1:-}" in
up) [ $# -eq 2 ] || usage; up "$2" ;;
down) down; echo "link down: $NS_SRC, $NS_DST" ;;
stats) stats ;;
*) usage ;;
esac
