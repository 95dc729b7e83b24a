#!/usr/bin/env bash
# tools/demo-small.sh - a tiny self-contained demo of a resumable load, run by
# `make demo` until the real demo lands.
#   demo-small.sh BUILD_DIR
# Generates a small changelog in a temp dir, loads it uninterrupted into one
# heap, kills a second load with SIGKILL mid-way and resumes it, prints the
# first lines of one arrangement and "verified" when both heaps dump equal.
# Touches nothing outside its temp dir, which it removes on exit.
set -euo pipefail
build=${1:-build}
load=$build/ah-load; dump=$build/ah-dump
[ -x "$load" ] && [ -x "$dump" ] || { echo "demo: build $load and $dump first" >&2; exit 2; }
work=$(mktemp -d /tmp/ah-demo-XXXXXX); trap 'rm -rf "$work"' EXIT

# 3 arrangements, 400 commit groups of ~500 updates each (fixed seed: awk's srand(7)).
awk 'BEGIN { srand(7); n = split("orders lines cust:1", a, " ");
  for (i = 1; i <= n; i++) { printf "arrange\t%s\n", a[i]; up[i] = 0 }
  for (g = 0; g < 400; g++) {
    for (u = 0; u < 500; u++) { i = 1 + int(rand() * n); d = int(rand() * 5) - 2; if (d == 0) d = 1;
      printf "update\t%s\t%d\tk%05d\tv%d\\t%s\t%d\n", a[i], up[i] + int(rand() * 3),
             int(rand() * 20000), int(rand() * 4), (rand() < 0.1 ? "\\xff" : ""), d }
    for (i = 1; i <= n; i++) { up[i] += 3; printf "advance\t%s\t%d\n", a[i], up[i] }
    if (g % 50 == 49) printf "since\torders\t%d\n", up[1] - 10
    print "commit" } }' > "$work/changelog"
echo "changelog: $(wc -l < "$work/changelog") lines, $(wc -c < "$work/changelog") bytes"

start=$(date +%s%N)
"$load" "$work/whole" "$work/changelog"
echo "uninterrupted load: $(( ($(date +%s%N) - start) / 1000000 )) ms"

"$load" "$work/resumed" "$work/changelog" & pid=$!
sleep 0.3; kill -9 $pid 2>/dev/null && echo "killed load $pid with SIGKILL" || echo "load finished before the kill"
wait $pid 2>/dev/null || true
echo "stored position after the kill: $("$dump" "$work/resumed" 2>/dev/null | sed -n 's/^source changelog: position //p')"
"$load" "$work/resumed" "$work/changelog" && echo "resumed load finished"

"$dump" "$work/resumed"
echo "first lines of orders:"
"$dump" "$work/resumed" read orders | head -5 || true # head closes the pipe early
for arr in orders lines cust:1; do
  cmp -s <("$dump" "$work/whole" read "$arr") <("$dump" "$work/resumed" read "$arr") ||
    { echo "demo: $arr differs between the resumed and the uninterrupted load" >&2; exit 1; }
done
echo verified
