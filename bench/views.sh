#!/usr/bin/env bash
# bench/views.sh - `make bench-views` (issue 14): what the views cost.
#   views.sh BUILD_DIR        (environment: SCALES="10 100" SECS=60 PERF_SECS=0 KEEP=0)
# Per scale, on a throwaway PostgreSQL cluster (tools/demo-cluster.sh, as
# tools/demo.sh makes it; PostgreSQL runs as the postgres user when run as
# root):
#   1. pgbench -i -s SCALE, REPLICA IDENTITY FULL on the 4 tables, a
#      publication FOR ALL TABLES;
#   2. floor: pgbench alone (no engine, no slot), -c 4 -j 2 -T SECS -n;
#   3. without views: ah-pgsync HEAP1 (slot ah_bench_nov): the first copy
#      (timed), pgbench with the engine running, the lag at pgbench's end
#      (heap LSN behind the server's; sampled every 3 s) and the catch-up (ah-pgsync wait),
#      SIGTERM, the exit line, engine CPU (/proc) per update, verify; the
#      slot is dropped after, so it retains no WAL for the next run;
#   4. with views: the three pgbench views of tests/views/pgbench_views.h via
#      ah-pgsync --views FILE HEAP2 (slot ah_bench_views): the same, plus the
#      views' exit line "views: N steps in X ms (Y us per table update)";
#   5. restart: ah-pgsync HEAP2 --slot ah_bench_views (no --views) three times with the heap in the
#      page cache and once with it evicted (dd iflag=nocache), each stopped
#      after its "first view query ... answered N ms"; then ah-pgsync
#      recompute HEAP2 (every view computed again from the tables) and
#      ah-pgsync verify HEAP2 (tables and views against PostgreSQL).  A
#      recompute or verify that finds a difference makes the run fail.
# Before each pgbench run: VACUUM of branches and tellers (what pgbench does
# without -n, minus truncating history) and a CHECKPOINT, so the runs start
# alike.  Writes BUILD_DIR/bench/views-SCALE.txt (markdown) and prints it.
# PERF_SECS=N (N > 0) also records the engine with perf for N seconds in the
# middle of the with-views pgbench run: BUILD_DIR/bench/views-SCALE.perf.txt
# (the run's figures are then perturbed by perf: use a separate run).
# The cluster and its temp dir go away on exit, failure or ^C (KEEP=1 keeps
# them, the cluster stopped).  Measures only; asserts nothing about speed.
set -euo pipefail
build=${1:-build}; scales=${SCALES:-10 100}; secs=${SECS:-60}; perf_secs=${PERF_SECS:-0}
keep=${KEEP:-0}
sync=$build/ah-pgsync
[ -x "$sync" ] || { echo "bench-views: build $sync first (make)" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$pgbin/initdb" ] || { echo "bench-views: PostgreSQL server not installed (make deps)" >&2; exit 2; }
for s in $scales; do
  [[ $s =~ ^[1-9][0-9]*$ ]] || { echo "bench-views: SCALES: '$s' is not a positive integer" >&2; exit 2; }
done
[[ $secs =~ ^[1-9][0-9]*$ ]] || { echo "bench-views: SECS: '$secs' is not a positive integer" >&2; exit 2; }
[[ $perf_secs =~ ^[0-9]+$ ]] || { echo "bench-views: PERF_SECS: '$perf_secs' is not an integer" >&2; exit 2; }
if [ "$perf_secs" -gt 0 ]; then
  command -v perf >/dev/null || { echo "bench-views: PERF_SECS needs perf (apt-get install linux-perf)" >&2; exit 2; }
  [ "$perf_secs" -lt "$secs" ] || { echo "bench-views: PERF_SECS must be below SECS" >&2; exit 2; }
fi
out=$build/bench; mkdir -p "$out"
sync=$(cd "$(dirname "$sync")" && pwd)/$(basename "$sync")
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
hz=$(getconf CLK_TCK)
ms() { date +%s%3N; }
log() { echo "[$(( ($(ms) - t_start) / 1000 )) s] $*"; }
t_start=$(ms)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
work=""; engine=""; pgbench_pid=""; sampler=""; perf_pid=""
cleanup() {
  [ -n "$engine" ] && kill -9 "$engine" 2>/dev/null || true
  [ -n "$pgbench_pid" ] && kill "$pgbench_pid" 2>/dev/null || true
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
  [ -n "$perf_pid" ] && kill "$perf_pid" 2>/dev/null || true
  [ -n "$work" ] || return 0
  if [ "$keep" = 1 ]; then
    [ -f "$work/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$work/data" -m fast stop >/dev/null 2>&1 || true
    echo "kept (KEEP=1): $work (heaps heap1, heap2; cluster data/, stopped); remove with: rm -rf $work"
  else
    [ -f "$work/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
  fi
  work=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "bench-views: $*" >&2; exit 1; }
fail_log() { echo "bench-views: $1" >&2; [ -f "${2:-}" ] && sed 's/^/  | /' "$2" >&2; exit 1; }

# The three views the view tests use (PGBENCH_VIEWS, in
# tests/views/pgbench_views.h, earlier in test_pgviews.c), verbatim.
views_sql() {
  local f=$here/tests/views/pgbench_views.h
  [ -f "$f" ] || f=$here/tests/views/test_pgviews.c
  sed -n '/PGBENCH_VIEWS =$/,/;$/p' "$f" | sed -n 's/^[^"]*"\(.*\)\\n"[;]*$/\1/p'
}

# CPU seconds (user + system) of a live process, from /proc/PID/stat.
cpu_s() { awk -v hz="$hz" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat"; }
# The engine's stderr, each line prefixed by the ms clock when it was read.
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(ms)" "$l"; done; }
heap_lsn() { "$sync" status "$1" | sed -n 's/^lsn //p'; }
lsn_diff() { sql "SELECT pg_wal_lsn_diff('$1', '$2')::bigint"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
prep() {
  sql "VACUUM pgbench_branches" && sql "VACUUM pgbench_tellers" && sql "CHECKPOINT"
}
# pgbench SECS with 4 clients; prints tps.
pgbench_run() {  # LOGFILE
  "$pgbin/pgbench" -c 4 -j 2 -T "$secs" -n >"$1" 2>&1 & pgbench_pid=$!
}
pgbench_tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$1" | head -1; }

# Starts the engine: ENGINE_ARGS... ; logs to $elog (stamped).
start_engine() {  # LOG ARGS...
  local lg=$1; shift
  "$sync" "$@" 2> >(stamp >"$lg") & engine=$!
}
stop_engine() {  # LOG
  kill -TERM "$engine" 2>/dev/null || true
  local rc=0; wait "$engine" || rc=$?
  engine=""
  sleep 0.3  # the stamper's last lines
  [ "$rc" = 0 ] || fail_log "the engine exited with $rc" "$1"
}

# One streaming run on HEAP (first copy, pgbench, catch-up, stop, verify);
# sets r_* variables.
stream_run() {  # NAME HEAP SLOT [--views FILE]
  local name=$1 heap=$2 slot=$3; shift 3
  local lg=$work/$name.log t0 t1 tcopy
  prep
  log "$name: first copy"
  t0=$(ms)
  start_engine "$lg" "$heap" --slot "$slot" "$@"
  until [ -e "$heap" ]; do
    kill -0 "$engine" 2>/dev/null || fail_log "$name: the engine died in its first copy" "$lg"
    sleep 0.05
  done
  r_copy_ms=$(( $(ms) - t0 ))
  # views computed: from the last "copied" line to "computed N views"
  sleep 0.3
  tcopy=$(grep ' ah-pgsync: copied ' "$lg" | tail -1 | cut -d' ' -f1)
  t1=$(grep ' ah-pgsync: computed .* views' "$lg" | cut -d' ' -f1 || true)
  r_views_first_ms=-; [ -n "$t1" ] && r_views_first_ms=$(( t1 - tcopy ))
  local cpu0 ws ws_cpu0 lsn0
  cpu0=$(cpu_s "$engine")
  prep
  lsn0=$(sql "SELECT pg_current_wal_lsn()")
  log "$name: pgbench -c 4 -j 2 -T $secs -n with the engine (copy $r_copy_ms ms; load $(load))"
  r_load0=$(load)
  pgbench_run "$work/$name.pgbench"
  sleep 1
  ws=$(sql "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'" || true)
  ws_cpu0=""; [ -n "$ws" ] && ws_cpu0=$(cpu_s "$ws")
  # lag every 3 s: the server's WAL position minus the heap's LSN
  ( while sleep 3; do
      echo "$(( ($(ms) - t0) / 1000 )) $(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$(heap_lsn "$heap")')::bigint")"
    done >"$work/$name.lag" 2>/dev/null ) & sampler=$!
  if [ "$perf_secs" -gt 0 ] && [ "$name" = views ]; then
    sleep $(( (secs - perf_secs) / 2 ))
    log "$name: perf record for $perf_secs s"
    perf record -q --call-graph dwarf,16384 -F 250 -p "$engine" -o "$work/perf.data" -- sleep "$perf_secs" \
      >/dev/null 2>&1 & perf_pid=$!
  fi
  local rc=0; wait "$pgbench_pid" || rc=$?; pgbench_pid=""
  [ "$rc" = 0 ] || fail_log "$name: pgbench failed" "$work/$name.pgbench"
  kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=""
  kill -0 "$engine" 2>/dev/null || fail_log "$name: the engine died during pgbench" "$lg"
  r_tps=$(pgbench_tps "$work/$name.pgbench")
  r_load1=$(load)
  local target; target=$(covering_lsn)
  r_lag_end=$(lsn_diff "$target" "$(heap_lsn "$heap")")
  r_wal=$(lsn_diff "$target" "$lsn0")
  r_lag_max=$(awk 'BEGIN { m = 0 } $2 > m { m = $2 } END { print m }' "$work/$name.lag")
  t0=$(ms)
  "$sync" wait "$heap" "$target" 3600 >/dev/null || fail_log "$name: the heap did not catch up" "$lg"
  r_catchup_ms=$(( $(ms) - t0 ))
  r_cpu=$(awk -v a="$(cpu_s "$engine")" -v b="$cpu0" 'BEGIN { printf "%.2f", a - b }')
  r_ws_cpu=-
  [ -n "$ws_cpu0" ] && [ -e "/proc/$ws" ] &&
    r_ws_cpu=$(awk -v a="$(cpu_s "$ws")" -v b="$ws_cpu0" 'BEGIN { printf "%.2f", a - b }')
  if [ -n "$perf_pid" ]; then wait "$perf_pid" || true; perf_pid=""; fi
  stop_engine "$lg"
  r_exit=$(grep ' ah-pgsync: stopped at LSN' "$lg" | cut -d' ' -f2-)
  r_vexit=$(grep ' ah-pgsync: views: ' "$lg" | cut -d' ' -f2- || true)
  r_updates=$(sed -n 's/.* \([0-9]*\) updates; streamed.*/\1/p' <<<"$r_exit")
  r_txns=$(sed -n 's/.*: \([0-9]*\) transactions applied.*/\1/p' <<<"$r_exit")
  r_cpu_us=$(awk -v c="$r_cpu" -v u="$r_updates" 'BEGIN { printf "%.2f", u ? c * 1e6 / u : 0 }')
  r_vms=-; r_vus=-
  if [ -n "$r_vexit" ]; then
    r_vms=$(sed -n 's/.* steps in \([0-9.]*\) ms.*/\1/p' <<<"$r_vexit")
    r_vus=$(sed -n 's/.*(\([0-9.]*\) us per table update).*/\1/p' <<<"$r_vexit")
  fi
  r_heap_bytes=$(du -B1 "$heap" | cut -f1)
  log "$name: $r_tps tps; lag at pgbench's end $(mib "$r_lag_end") MiB, caught up in $r_catchup_ms ms; engine CPU $r_cpu s"
  "$sync" verify "$heap" >"$work/$name.verify" 2>&1 || fail_log "$name: verify FAILED (a bug)" "$work/$name.verify"
  r_verify=$(grep '^verified' "$work/$name.verify")
  log "$name: $r_verify"
}

run_scale() {
  local scale=$1
  work=$(mktemp -d /tmp/ah-vbench-XXXXXX); chmod 755 "$work"
  [ "$(id -u)" = 0 ] && chown postgres "$work"
  . "$here/tools/demo-cluster.sh"
  local pgv
  pgv=$(sql 'SHOW server_version')
  log "scale $scale: PostgreSQL $pgv on 127.0.0.1:$port in $work; load $(load)"
  local t; t=$(ms)
  "$pgbin/pgbench" -i -q -s "$scale" >"$work/init.log" 2>&1 || fail_log "pgbench -i failed" "$work/init.log"
  local init_ms=$(( $(ms) - t ))
  log "pgbench -i -s $scale: $init_ms ms"
  for tb in accounts branches tellers history; do sql "ALTER TABLE pgbench_$tb REPLICA IDENTITY FULL"; done
  sql "CREATE PUBLICATION ah_pgsync FOR ALL TABLES"
  local tables; tables=$(sql "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c WHERE relname LIKE 'pgbench_%' AND relkind = 'r'")
  views_sql >"$work/views.sql"
  [ "$(grep -c '^CREATE VIEW' "$work/views.sql")" = 3 ] || die "could not read PGBENCH_VIEWS from tests/views/test_pgviews.c"

  # 2. floor
  prep
  local f_load0; f_load0=$(load)
  log "floor: pgbench alone (load $f_load0)"
  pgbench_run "$work/floor.pgbench"
  wait "$pgbench_pid" || fail_log "floor: pgbench failed" "$work/floor.pgbench"; pgbench_pid=""
  local f_tps f_load1; f_tps=$(pgbench_tps "$work/floor.pgbench"); f_load1=$(load)
  log "floor: $f_tps tps"

  # 3. without views
  stream_run noviews "$work/heap1" ah_bench_nov
  local n_copy=$r_copy_ms n_tps=$r_tps n_lag_end=$r_lag_end n_lag_max=$r_lag_max n_wal=$r_wal
  local n_catch=$r_catchup_ms n_cpu=$r_cpu n_cpu_us=$r_cpu_us n_ws=$r_ws_cpu n_upd=$r_updates
  local n_txns=$r_txns n_exit=$r_exit n_verify=$r_verify n_bytes=$r_heap_bytes n_load="$r_load0 → $r_load1"
  sql "SELECT pg_drop_replication_slot('ah_bench_nov')" >/dev/null

  # 4. with views
  stream_run views "$work/heap2" ah_bench_views --views "$work/views.sql"
  local v_copy=$r_copy_ms v_vfirst=$r_views_first_ms v_tps=$r_tps v_lag_end=$r_lag_end v_lag_max=$r_lag_max
  local v_wal=$r_wal v_catch=$r_catchup_ms v_cpu=$r_cpu v_cpu_us=$r_cpu_us v_ws=$r_ws_cpu v_upd=$r_updates
  local v_txns=$r_txns v_exit=$r_exit v_vexit=$r_vexit v_vms=$r_vms v_vus=$r_vus v_verify=$r_verify
  local v_bytes=$r_heap_bytes v_load="$r_load0 → $r_load1"
  if [ -f "$work/perf.data" ]; then
    log "perf report"
    { echo "# perf, engine, with views, scale $scale, $perf_secs s of pgbench (self time, then with children)"
      perf report -i "$work/perf.data" --stdio --no-children --sort symbol -g none --percent-limit 0.7 2>/dev/null |
        grep -v '^$' | grep -v '^#' | grep '%' | head -40
      echo; echo "# with children (callers included)"
      perf report -i "$work/perf.data" --stdio --children --sort symbol -g none --percent-limit 2 2>/dev/null |
        grep -v '^$' | grep -v '^#' | head -50
    } >"$out/views-$scale.perf.txt"
  fi

  # 5. restart against recompute
  local first=() i lg
  for i in 1 2 3 cold; do
    lg=$work/restart-$i.log
    if [ "$i" = cold ]; then
      sync "$work/heap2"; dd if="$work/heap2" iflag=nocache count=0 status=none
    fi
    start_engine "$lg" "$work/heap2" --slot ah_bench_views
    until grep -q 'first view query' "$lg" 2>/dev/null; do
      kill -0 "$engine" 2>/dev/null || fail_log "restart: the engine died" "$lg"
      sleep 0.05
    done
    stop_engine "$lg"
    first+=("$(sed -n 's/.*first view query (\([^)]*\)) answered \([0-9.]*\) ms.*/\2/p' "$lg")")
  done
  local fview; fview=$(sed -n 's/.*first view query (\([^)]*\)).*/\1/p' "$work/restart-1.log")
  local warm_med; warm_med=$(printf '%s\n' "${first[@]:0:3}" | sort -g | sed -n 2p)
  "$sync" recompute "$work/heap2" >"$work/recompute.log" 2>&1 ||
    fail_log "recompute: a stored view differs from its recomputation (a bug)" "$work/recompute.log"
  local rec_line rec_ms
  rec_line=$(grep '^recomputed' "$work/recompute.log")
  rec_ms=$(sed -n 's/.* in \([0-9.]*\) ms.*/\1/p' <<<"$rec_line")
  grep -q '^every stored view equals its recomputation' "$work/recompute.log" ||
    fail_log "recompute did not say every view equals" "$work/recompute.log"
  "$sync" verify "$work/heap2" >"$work/verify2.log" 2>&1 ||
    fail_log "verify after the restarts FAILED (a bug)" "$work/verify2.log"
  local v2; v2=$(grep '^verified' "$work/verify2.log")
  log "restart: first view answer ${first[*]} ms; recompute $rec_ms ms; $v2"

  local ratio; ratio=$(awk -v a="$rec_ms" -v b="$warm_med" 'BEGIN { printf "%.0f", a / b }')
  local res=$out/views-$scale.txt
  pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", (a - b) * 100 / b }'; }
  {
    echo "# bench-views, pgbench scale $scale, $secs s runs (-c 4 -j 2 -n)"
    echo
    echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(uname -sr); PostgreSQL $pgv"
    echo "- code: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$here" diff --quiet 2>/dev/null || echo ' (modified)'); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- tables after pgbench -i: $(mib "$tables") MiB (pg_total_relation_size); pgbench -i took $init_ms ms"
    echo "- load average (1/5/15 min) at start → end of each pgbench run: floor $f_load0 → $f_load1; without views $n_load; with views $v_load"
    [ "$perf_secs" -gt 0 ] && echo "- perf recorded the engine for $perf_secs s of the with-views run (its figures are perturbed)"
    echo
    echo "| figure | floor (pgbench alone) | without views | with views |"
    echo "|---|---:|---:|---:|"
    echo "| pgbench tps | $f_tps | $n_tps ($(pct "$n_tps" "$f_tps")) | $v_tps ($(pct "$v_tps" "$f_tps")) |"
    echo "| first copy (slot, COPY, views), ms | - | $n_copy | $v_copy (views $v_vfirst) |"
    echo "| source transactions / updates applied during pgbench | - | $n_txns / $n_upd | $v_txns / $v_upd |"
    echo "| WAL written during pgbench, MiB | - | $(mib "$n_wal") | $(mib "$v_wal") |"
    echo "| lag at pgbench's end (server WAL − heap LSN), MiB | - | $(mib "$n_lag_end") | $(mib "$v_lag_end") |"
    echo "| largest lag sampled (every 3 s during pgbench), MiB | - | $(mib "$n_lag_max") | $(mib "$v_lag_max") |"
    echo "| catch-up after pgbench, ms | - | $n_catch | $v_catch |"
    echo "| engine CPU during pgbench + catch-up, s | - | $n_cpu | $v_cpu |"
    echo "| engine CPU per input update, us | - | $n_cpu_us | $v_cpu_us |"
    echo "| walsender CPU (decoding), s | - | $n_ws | $v_ws |"
    echo "| view maintenance (eg_step + compaction), ms total | - | - | $v_vms |"
    echo "| view maintenance per input update, us | - | - | $v_vus |"
    echo "| heap file, MiB allocated | - | $(mib "$n_bytes") | $(mib "$v_bytes") |"
    echo
    echo "| restart against recompute (heap2) | ms |"
    echo "|---|---:|"
    echo "| restart to first view answer ($fview), warm, 3 runs | ${first[0]}, ${first[1]}, ${first[2]} (median $warm_med) |"
    echo "| restart to first view answer, heap evicted from the page cache | ${first[3]} |"
    echo "| recompute the 3 views from the tables | $rec_ms |"
    echo "| recompute / warm restart | ${ratio}× |"
    echo
    echo "Exit lines and checks:"
    echo
    echo "- without views: \`$n_exit\`"
    echo "- without views: \`$n_verify\`"
    echo "- with views: \`$v_exit\`"
    echo "- with views: \`$v_vexit\`"
    echo "- with views: \`$v_verify\`"
    echo "- recompute: \`$rec_line\`; every stored view equals its recomputation"
    echo "- after the restarts: \`$v2\`"
  } >"$res"
  cat "$res"
  echo
  cleanup
}

log "bench-views: scales $scales, $secs s per pgbench run; results in $out"
for s in $scales; do run_scale "$s"; done
log "done"
