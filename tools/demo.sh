#!/usr/bin/env bash
# tools/demo.sh - `make demo`: arrangements and views of a live PostgreSQL
# database, killed and resumed.
#   demo.sh BUILD_DIR [SCALE] [SECONDS]      (defaults: 10, 30)
# Makes a throwaway PostgreSQL cluster in a temp dir on a free loopback port
# (as the postgres user when run as root), runs `pgbench -i -s SCALE`, sets
# REPLICA IDENTITY FULL and a publication, starts build/ah-pgsync with three
# views over pgbench's tables (a GROUP BY with count, sum, min and max, a
# join, and a GROUP BY over two joins: tools/demo-views.sql), runs pgbench
# for SECONDS with 4 clients, kill -9s the engine half way, restarts it (no
# flags: the views are in the heap), waits until the heap has caught up with
# every commit, verifies every table and every view against PostgreSQL at
# the heap's LSN and prints a report ending in "verified".  The report also
# gives the time from the restart to the first answered view query, against
# the time `ah-pgsync recompute` takes to compute the same views again from
# the base arrangements (what an engine without stored derived state does
# at every restart).  The report compares what the source must read to bring the
# heap from the kill to the end of the run: the WAL from the heap's LSN
# (resuming), against a copy of the tables plus the WAL from the restart
# on (a re-snapshot; that tail is streamed either way).  The cluster and
# the temp dir go away on exit, failure or ^C; with KEEP=1 (make demo
# KEEP=1) both stay, the cluster stopped, and the last lines say where
# (ah-dump HEAP, pg_ctl start).
set -euo pipefail
build=${1:-build}; scale=${2:-10}; secs=${3:-30}; keep=${KEEP:-0}
sync=$build/ah-pgsync
[ -x "$sync" ] || { echo "demo: build $sync first (make)" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$pgbin/initdb" ] || { echo "demo: PostgreSQL server not installed (make deps)" >&2; exit 2; }
ms() { date +%s%3N; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
t_start=$(ms)
work=$(mktemp -d /tmp/ah-pgdemo-XXXXXX); chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_pg_hint=""; [ "$(id -u)" = 0 ] && as_pg_hint="runuser -u postgres -- "
pgopts=""
[ "$(id -u)" = 0 ] && chown postgres "$work"
engine=""; pgbench_pid=""
cleanup() {
  [ -n "$engine" ] && kill -9 "$engine" 2>/dev/null || true
  [ -n "$pgbench_pid" ] && kill "$pgbench_pid" 2>/dev/null || true
  if [ "$keep" = 1 ]; then
    [ -f "$work/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$work/data" -m fast stop >/dev/null 2>&1 || true
    echo "kept (KEEP=1): the heap $work/heap (try: $build/ah-dump $work/heap space), the cluster"
    echo "  $work/data, stopped (start: ${as_pg_hint}$pgbin/pg_ctl -D $work/data -l $work/pg.log -o '$pgopts' start;"
    echo "  its slot ah_pgsync retains WAL until dropped); remove with: rm -rf $work"
    return
  fi
  [ -f "$work/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/demo-cluster.sh"
echo "cluster: PostgreSQL $(sql 'SHOW server_version') on 127.0.0.1:$port in $work"

t=$(ms); "$pgbin/pgbench" -i -q -s "$scale" 2>&1 | tail -1
echo "pgbench -i -s $scale: $(( $(ms) - t )) ms"
for tb in accounts branches tellers history; do sql "ALTER TABLE pgbench_$tb REPLICA IDENTITY FULL"; done
sql "CREATE PUBLICATION ah_pgsync FOR ALL TABLES"

heap=$work/heap
views=$(dirname "$0")/demo-views.sql
t=$(ms); "$sync" --views "$views" "$heap" 2>"$work/sync1.log" & engine=$!
until [ -e "$heap" ]; do kill -0 "$engine" 2>/dev/null || { cat "$work/sync1.log" >&2; exit 1; }; sleep 0.1; done
echo "first copy (slot, snapshot, COPY of 4 tables into the heap, 3 views computed): $(( $(ms) - t )) ms"
grep '^ah-pgsync: copied' "$work/sync1.log" | sed 's/^ah-pgsync: /  /'

"$pgbin/pgbench" -c 4 -j 2 -T "$secs" -n >"$work/pgbench.log" 2>&1 & pgbench_pid=$!
sleep $((secs / 2))
kill -9 "$engine"; wait "$engine" 2>/dev/null || true; engine=""
killed_at=$("$sync" status "$heap" | sed -n 's/^lsn //p')
restart_lsn=$(sql "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'ah_pgsync'")
echo "engine killed with SIGKILL after $((secs / 2)) s of pgbench; heap at LSN $killed_at, slot restart_lsn $restart_lsn"
sleep 2
# The WAL position when the engine restarts: a re-snapshot taken instead
# would copy the tables here and stream the WAL after it.
restart_at=$(sql "SELECT pg_current_wal_lsn()")
"$sync" "$heap" 2>"$work/sync2.log" & engine=$!
wait "$pgbench_pid"; pgbench_pid=""
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)
target=$(covering_lsn)
t=$(ms)
"$sync" wait "$heap" "$target" 120 >/dev/null || { cat "$work/sync2.log" >&2; exit 1; }
echo "pgbench done ($tps tps); heap caught up with every commit (LSN $target) $(( $(ms) - t )) ms after pgbench ended"
kill -TERM "$engine"; wait "$engine" || { cat "$work/sync2.log" >&2; exit 1; }; engine=""

first_ms=$(sed -n 's/.*first query answered \([0-9.]*\) ms.*/\1/p' "$work/sync2.log")
view_ms=$(sed -n 's/.*first view query (\(.*\)) answered \([0-9.]*\) ms.*/\2 ms (\1)/p' "$work/sync2.log")
[ -n "$view_ms" ] || { echo "demo: the restarted engine answered no view query" >&2; cat "$work/sync2.log" >&2; exit 1; }
views_cost=$(sed -n 's/^ah-pgsync: views: //p' "$work/sync2.log")
"$sync" recompute "$heap" >"$work/recompute.log" || { cat "$work/recompute.log" >&2; exit 1; }
recompute_ms=$(sed -n 's/^recomputed .* in \([0-9.]*\) ms .*/\1/p' "$work/recompute.log")
final=$("$sync" status "$heap" | sed -n 's/^lsn //p')
# Like with like: both ways end at the end of the run ($final) and both
# stream the WAL written after the restart; resuming reads the WAL from the
# heap's LSN at the kill, a re-snapshot copies the tables instead.
wal_resume=$(sql "SELECT pg_wal_lsn_diff('$final', '$killed_at')::bigint")
wal_decoded=$(sql "SELECT pg_wal_lsn_diff('$final', '$restart_lsn')::bigint")
wal_tail=$(sql "SELECT pg_wal_lsn_diff('$final', '$restart_at')::bigint")
streamed=$(sed -n 's/.*streamed \([0-9]*\) bytes.*/\1/p' "$work/sync2.log")
tables=$(sql "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c WHERE relname LIKE 'pgbench_%' AND relkind = 'r'")
updates=$("$sync" status "$heap" | sed -n 's/^updates //p')
txns=$("$sync" status "$heap" | sed -n 's/^txns //p')
"$sync" verify "$heap" >"$work/verify.log" || { cat "$work/verify.log" >&2; exit 1; }
rows=$(sed -n 's/^verified: [0-9]* tables, \([0-9]*\) rows.*/\1/p' "$work/verify.log")
grep -q '^verified: .* and the views equal' "$work/verify.log" || { echo "demo: verify did not check the views" >&2; cat "$work/verify.log" >&2; exit 1; }
echo
echo "report"
sed 's/^/  /' "$work/verify.log" | grep -v '^  verified'
echo "  rows arranged:                 $rows (4 tables)"
echo "  updates arranged:              $updates from $txns source transactions (after the first copy)"
echo "  restart to first answered query: $first_ms ms (heap opened, a key read at the frontier)"
echo "  restart to first answered view query: $view_ms, nothing recomputed"
echo "  recomputing the 3 views from the base arrangements instead: $recompute_ms ms"
echo "    ($(sed -n 's/^recomputed 3 views from the tables at LSN [^ ]* in [0-9.]* ms (\(.*\))$/\1/p' "$work/recompute.log"); $(tail -1 "$work/recompute.log"))"
echo "  view maintenance after the restart: $views_cost"
echo "  from the kill (heap at LSN $killed_at) to the end of the run ($final), what the source reads:"
echo "    resuming from the heap:        $(mib "$wal_resume") of WAL, the heap's LSN to the end"
echo "      (to decode it the server read the WAL from the slot's restart_lsn $restart_lsn: $(mib "$wal_decoded");"
echo "      $(mib "$streamed") of pgoutput streamed)"
echo "    a re-snapshot instead:         $(mib $((tables + wal_tail))): $(mib "$tables") of tables (pg_total_relation_size)"
echo "      + $(mib "$wal_tail") of WAL from the restart ($restart_at) to the end, streamed either way"
echo "  total demo time:               $(( ($(ms) - t_start) / 1000 )) s"
echo "verified: every table's arrangement at LSN $final equals SELECT * FROM the table, and every view the view's query"
