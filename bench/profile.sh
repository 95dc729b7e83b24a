#!/bin/bash
# bench/profile.sh - where arrheap's ingest and merge spend their time.
#
#   bash bench/profile.sh BUILD [N_PERF] [N_CALLGRIND]
#
# perf (cpu-clock samples: this VM has no hardware counters) over a load of
# N_PERF updates (default 10M) and the full merge that follows, and
# callgrind instruction counts (repeatable on a shared machine) over a load
# of N_CALLGRIND updates (default 1M) and its merge; the rebuild's builder is
# profiled too, for comparison.  Flat profiles go to BUILD/bench/profile/*.txt.
# Uses the same programs and workload as ah-bench; measures only.
set -euo pipefail
build=${1:?usage: profile.sh BUILD [N_PERF] [N_CALLGRIND]}
np=${2:-10000000}
nc=${3:-1000000}
b=$build/bench
out=$b/profile
data=$b/data/profile
rm -rf "$data"
mkdir -p "$out" "$data/perf" "$data/cg"
echo "profile: load before: $(uptime)" >&2

"$b/ah-bench" gen "$np" "$data/perf.log"
"$b/ah-bench" gen "$nc" "$data/cg.log"

flat() { # perf.data -> flat self-time profile by symbol
	perf report -i "$1" --stdio --no-children --sort dso,symbol 2>/dev/null |
		grep -v '^#' | grep -v '^$' | head -40 || true  # head closes early
}
prof() { # name, command...
	local name=$1
	shift
	# wall against on-CPU time: the difference is waiting (fsync, I/O)
	/usr/bin/time -o "$out/$name.time" -f "wall %e s, user %U s, sys %S s" \
		perf record -q -F 999 -e cpu-clock -o "$data/$name.perf" -- "$@" > "$out/$name.figures"
	flat "$data/$name.perf" > "$out/$name-perf.txt"
}
prof ingest "$b/ah-bench-arrheap" load "$data/perf" "$data/perf.log" "$np"
prof merge "$b/ah-bench-arrheap" merge "$data/perf" "$np"
prof rebuild "$b/ah-bench-arrheap" rebuild "$data/perf.log" "$np" 0 0

cg() { # name, command...
	local name=$1
	shift
	valgrind --tool=callgrind --callgrind-out-file="$data/$name.cg" "$@" \
		> "$out/$name-cg.figures" 2> /dev/null
	{ callgrind_annotate --inclusive=no "$data/$name.cg" 2>/dev/null |
		head -45 > "$out/$name-callgrind.txt"; } || true
	{ callgrind_annotate --inclusive=yes "$data/$name.cg" 2>/dev/null |
		head -60 > "$out/$name-callgrind-inclusive.txt"; } || true
}
cg ingest "$b/ah-bench-arrheap" load "$data/cg" "$data/cg.log" "$nc"
cg merge "$b/ah-bench-arrheap" merge "$data/cg" "$nc"

rm -rf "$data"
echo "profile: load after: $(uptime)" >&2
echo "wrote $out/*.txt" >&2
