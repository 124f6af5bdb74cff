#!/usr/bin/env bash
# tools/deps.sh PKG... — make sure the Debian packages ferry needs are there.
# As root, installs the missing ones with apt-get; otherwise prints the exact
# apt-get line to run and fails. Called by `make deps` (and so by `make check`
# and `make demo`).
set -u
missing=()
for p in "$@"; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing Debian packages; run as root:" >&2
	echo "  apt-get update && $line" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && $line || { echo "deps: apt-get failed" >&2; exit 1; }
