# Sourced by the push tests (140, 141): what the kernel's page cache holds
# of files on the mount, and what the hydrator says it pushed.

# resident FILE: the bytes of FILE in the page cache
resident() { fincore -b -n -r -o RES "$1"; }

# seen_cached PREFIX FIRST LAST SIZE: how many of the files PREFIX<FIRST>
# .. PREFIX<LAST> (seq -w) were seen with all SIZE bytes cached at some
# poll, polling up to 10 s (the push runs on a thread of its own, and
# this VM may reclaim a pushed file's pages again before the next poll,
# so a file counts once seen whole); the others are listed in
# $T/missing.
seen_cached() {
	local prefix=$1 first=$2 last=$3 size=$4 i want
	local -A seen=()
	want=$(seq -w "$first" "$last" | wc -l)
	for _ in $(seq 1 200); do
		for i in $(seq -w "$first" "$last"); do
			[ -n "${seen[$i]:-}" ] && continue
			[ "$(resident "$prefix$i")" = "$size" ] && seen[$i]=1
		done
		[ "${#seen[@]}" = "$want" ] && break
		sleep 0.05
	done
	: >"$T/missing"
	for i in $(seq -w "$first" "$last"); do
		[ -n "${seen[$i]:-}" ] || basename "$prefix$i" >>"$T/missing"
	done
	echo "${#seen[@]}"
}

# push_line: the hydrator's last line about its pushes (in $T/cache's
# log, written when it stops)
push_line() {
	grep "pushed small files into the page cache" "$T/cache/hydrator.log" | tail -n 1
}

# pushed_of LINE: the files a push line counts
pushed_of() { sed -n 's/.* files=\([0-9]*\) .*/\1/p' <<<"$1"; }
