#!/bin/bash
# bench/bench.sh - runs ah-bench and draws the start-up plot.
#
#   [BENCH_OUT=DIR] bash bench/bench.sh BUILD [ah-bench options: --sizes N,N
#        --runs R --keep --max-rebuild-s S --systems arrheap,arrheap-bg,...]
#
# Called by `make bench` and `make bench-quick` after the programs are built.
# ah-bench checks the free disk space first (~320 bytes per update of the
# largest size: 32 GB for 100M), records the machine's load before and after (the machine may be
# shared), writes BUILD/bench/{results.json,table.md,startup.dat,startup.png}
# and prints the table on stdout.  It measures only: no speed is asserted.
set -euo pipefail
build=${1:?usage: bench.sh BUILD [ah-bench options]}
shift
out=${BENCH_OUT:-$build/bench}  # programs in BUILD/bench, output in BENCH_OUT
mkdir -p "$out"
echo "disk: $(df -h --output=avail "$out" | tail -1 | tr -d ' ') free under $out" >&2
for a in "$@"; do
	case "$a" in
	--out|--bin) echo "bench.sh: set the output directory with BENCH_OUT, not $a" >&2
		exit 2 ;;
	esac
done
echo "load before: $(uptime)" >&2
start=$(date +%s)
# The driver runs in the background so that an interrupt of this script
# reaches it: it kills its measured child, removes the data and exits,
# leaving results.json marked "complete": false.
"$build/bench/ah-bench" --out "$out" --bin "$build/bench" "$@" &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null' INT TERM
rc=0
wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || rc=$?; done
trap - INT TERM
if [ "$rc" -ne 0 ]; then
	echo "bench.sh: ah-bench stopped with status $rc; no plot drawn" >&2
	exit "$rc"
fi
echo "load after: $(uptime); $(( $(date +%s) - start )) s" >&2
gnuplot -e "datafile='$out/startup.dat'; outfile='$out/startup.png'" bench/startup.gp
echo "wrote $out/results.json $out/table.md $out/startup.png" >&2
