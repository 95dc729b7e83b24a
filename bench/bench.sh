#!/bin/bash
# bench/bench.sh - runs ah-bench and draws the start-up plot.
#
#   [BENCH_OUT=DIR] bash bench/bench.sh BUILD [ah-bench options: --sizes N,N
#                                        --runs R --keep --max-rebuild-s S]
#
# Called by `make bench` and `make bench-quick` after the programs are built.
# Checks the free disk space first (100M updates need ~20 GB across the
# systems), records the machine's load before and after (the machine may be
# shared), writes BUILD/bench/{results.json,table.md,startup.dat,startup.png}
# and prints the table on stdout.  It measures only: no speed is asserted.
set -euo pipefail
build=${1:?usage: bench.sh BUILD [ah-bench options]}
shift
out=${BENCH_OUT:-$build/bench}  # programs in BUILD/bench, output in BENCH_OUT
mkdir -p "$out"
echo "disk: $(df -h --output=avail "$out" | tail -1 | tr -d ' ') free under $out" >&2
case " $* " in
*100000000*)
	avail=$(df --output=avail -k "$out" | tail -1)
	if [ "$avail" -lt $((25 * 1024 * 1024)) ]; then
		echo "bench.sh: 100M updates need ~25 GB free under $out" >&2
		exit 1
	fi ;;
esac
echo "load before: $(uptime)" >&2
start=$(date +%s)
"$build/bench/ah-bench" --out "$out" --bin "$build/bench" "$@"
echo "load after: $(uptime); $(( $(date +%s) - start )) s" >&2
gnuplot -e "datafile='$out/startup.dat'; outfile='$out/startup.png'" bench/startup.gp
echo "wrote $out/results.json $out/table.md $out/startup.png" >&2
