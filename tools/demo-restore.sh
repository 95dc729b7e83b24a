#!/usr/bin/env bash
# tools/demo-restore.sh - `make demo-restore`: a machine lost mid-run, its
# heap rebuilt elsewhere from incremental snapshots, the stream resumed.
#   demo-restore.sh BUILD_DIR       (environment: SCALE=5 SECS=40 INTERVAL=3 KEEP=0)
# Makes a throwaway PostgreSQL cluster in a temp dir on a free loopback port
# (as the postgres user when run as root), runs `pgbench -i -s SCALE`, sets
# REPLICA IDENTITY FULL and a publication, and starts build/ah-pgsync with
# --confirm-after-snapshot DIR, so the slot is confirmed only up to the
# newest snapshot in DIR.  pgbench runs for SECS seconds with 4 clients while a
# loop runs `ah-snapshot push HEAP DIR` every INTERVAL seconds.  Half way,
# the "machine" is lost: the engine and the push loop (and a push under
# way) are killed with SIGKILL and the heap is deleted.  A new heap is
# restored from DIR on another path (ah-snapshot restore) and ah-pgsync
# resumes on it from the snapshot's LSN, the slot still holding the WAL
# after it.  When pgbench ends and the heap has every commit, the engine
# stops and `ah-pgsync verify` compares every table with its arrangement.
# The report: the restore time, the bytes each push shipped (ah-snapshot
# list --json), the WAL the restored heap re-read to catch up (from the
# snapshot's LSN to the source's position when it caught up) against what a
# re-snapshot of the tables would read (pg_total_relation_size), and
# "verified" only when verify says every table equals PostgreSQL.  The
# cluster and the temp dir go away on exit, failure or ^C; KEEP=1 keeps
# them (the cluster stopped).  Needs jq (make demo-restore installs it).
set -euo pipefail
build=${1:-build}; scale=${SCALE:-5}; secs=${SECS:-40}; interval=${INTERVAL:-3}
keep=${KEEP:-0}
sync=$build/ah-pgsync; snap=$build/ah-snapshot
[ -x "$sync" ] && [ -x "$snap" ] || { echo "demo-restore: build $sync and $snap first (make)" >&2; exit 2; }
command -v jq >/dev/null || { echo "demo-restore: needs jq (apt-get install jq)" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$pgbin/initdb" ] || { echo "demo-restore: PostgreSQL server not installed (make deps)" >&2; exit 2; }
ms() { date +%s%3N; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
t_start=$(ms)
work=$(mktemp -d /tmp/ah-pgrestore-XXXXXX); chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$work"
engine=""; pgbench_pid=""; loop=""
cleanup() {
  [ -n "$engine" ] && kill -9 "$engine" 2>/dev/null || true
  [ -n "$loop" ] && kill -9 "$loop" 2>/dev/null || true
  [ -f "$work/push.pid" ] && kill -9 "$(cat "$work/push.pid")" 2>/dev/null || true
  [ -n "$pgbench_pid" ] && kill "$pgbench_pid" 2>/dev/null || true
  if [ "$keep" = 1 ]; then
    [ -f "$work/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$work/data" -m fast stop >/dev/null 2>&1 || true
    echo "kept (KEEP=1): $work (heap restored/heap, snapshots snaps/, cluster data/, stopped;"
    echo "  its slot ah_pgsync retains WAL until dropped); remove with: rm -rf $work"
    return
  fi
  [ -f "$work/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/demo-cluster.sh"
slot() { sql "SELECT $1 FROM pg_replication_slots WHERE slot_name = 'ah_pgsync'"; }
echo "cluster: PostgreSQL $(sql 'SHOW server_version') on 127.0.0.1:$port in $work"

t=$(ms); "$pgbin/pgbench" -i -q -s "$scale" 2>&1 | tail -1
echo "pgbench -i -s $scale: $(( $(ms) - t )) ms"
for tb in accounts branches tellers history; do sql "ALTER TABLE pgbench_$tb REPLICA IDENTITY FULL"; done
sql "CREATE PUBLICATION ah_pgsync FOR ALL TABLES"

snaps=$work/snaps; heap=$work/machine-a/heap; heap2=$work/machine-b/heap
mkdir -p "$work/machine-a" "$work/machine-b"
t=$(ms); "$sync" --confirm-after-snapshot "$snaps" "$heap" 2>"$work/sync1.log" & engine=$!
until [ -e "$heap" ]; do kill -0 "$engine" 2>/dev/null || { cat "$work/sync1.log" >&2; exit 1; }; sleep 0.1; done
echo "first copy into $heap: $(( $(ms) - t )) ms"

"$pgbin/pgbench" -c 4 -j 2 -T "$secs" -n >"$work/pgbench.log" 2>&1 & pgbench_pid=$!
# The push loop: one push every INTERVAL s (each push's pid in push.pid, so
# that the loss kills a push under way too).
( while :; do
    "$snap" push "$heap" "$snaps" >>"$work/push.log" 2>&1 & echo $! >"$work/push.pid"
    wait $! || echo "push failed" >>"$work/push.log"
    sleep "$interval"
  done ) & loop=$!
sleep $((secs / 2))

# The machine is lost: engine, push loop and a push under way, and the heap.
lost_lsn=$("$sync" status "$heap" | sed -n 's/^lsn //p')
kill -9 "$engine" "$loop" 2>/dev/null || true; kill -9 "$(cat "$work/push.pid")" 2>/dev/null || true
{ wait "$engine"; wait "$loop"; } 2>/dev/null || true; engine=""; loop=""
rm -f "$heap" "$heap-lock"
pushes=$(grep -c '^pushed' "$work/push.log" || true)
confirmed=$(slot confirmed_flush_lsn); restart_lsn=$(slot restart_lsn)
echo "machine lost after $((secs / 2)) s of pgbench and $pushes pushes: heap (at LSN $lost_lsn) deleted;"
echo "  slot confirmed_flush_lsn $confirmed, restart_lsn $restart_lsn (WAL held for the snapshots)"

"$snap" list "$snaps" --json >"$work/list.json"
snap_id=$(jq -r '[.snapshots[] | select(.damaged != true)] | last | .id' "$work/list.json")
snap_lsn=$(jq -r '[.snapshots[] | select(has("error") | not)] | last | .sources[] | select(.name == "pg.lsn") | .position' "$work/list.json")
t=$(ms)
"$snap" restore "$snaps" "$heap2" >"$work/restore.log" 2>&1 || { cat "$work/restore.log" >&2; exit 1; }
restore_ms=$(( $(ms) - t ))
echo "restored snapshot $snap_id (LSN $snap_lsn) to $heap2: $restore_ms ms"
[ "$("$sync" status "$heap2" | sed -n 's/^lsn //p')" = "$snap_lsn" ] || { echo "restored heap not at $snap_lsn" >&2; exit 1; }

t=$(ms); "$sync" --confirm-after-snapshot "$snaps" "$heap2" 2>"$work/sync2.log" & engine=$!
# the pushes go on from the new machine
( while :; do
    "$snap" push "$heap2" "$snaps" >>"$work/push.log" 2>&1 & echo $! >"$work/push.pid"
    wait $! || echo "push failed" >>"$work/push.log"
    sleep "$interval"
  done ) & loop=$!
caught=$(covering_lsn)
"$sync" wait "$heap2" "$caught" 120 >/dev/null || { cat "$work/sync2.log" >&2; exit 1; }
catchup_ms=$(( $(ms) - t ))
echo "ah-pgsync resumed on $heap2 from LSN $snap_lsn; caught up with the source (LSN $caught) in $catchup_ms ms"
wait "$pgbench_pid"; pgbench_pid=""
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)
target=$(covering_lsn)
"$sync" wait "$heap2" "$target" 120 >/dev/null || { cat "$work/sync2.log" >&2; exit 1; }
kill "$loop" 2>/dev/null || true; { wait "$loop"; } 2>/dev/null || true; loop=""
while kill -0 "$(cat "$work/push.pid")" 2>/dev/null; do sleep 0.1; done
kill -TERM "$engine"; wait "$engine" || { cat "$work/sync2.log" >&2; exit 1; }; engine=""
final=$("$sync" status "$heap2" | sed -n 's/^lsn //p')
echo "pgbench done ($tps tps); heap caught up with every commit (LSN $final)"

wal_reread=$(sql "SELECT pg_wal_lsn_diff('$caught', '$snap_lsn')::bigint")
wal_redone=$(sql "SELECT greatest(pg_wal_lsn_diff('$lost_lsn', '$snap_lsn'), 0)::bigint")
tables=$(sql "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c WHERE relname LIKE 'pgbench_%' AND relkind = 'r'")
"$snap" list "$snaps" --json >"$work/list.json"
if "$sync" verify "$heap2" >"$work/verify.log" 2>&1; then ok=1; else ok=0; fi

echo
echo "report"
echo "  snapshots pushed every $interval s (ah-snapshot list --json; new = shipped by that push):"
jq -r '.snapshots[] | if has("error") then "    \(.id)  unusable (\(.error))" else
  "    \(.id)  \(.time)  new \(.objects_new) objects \(.bytes_new) B + manifest \(.manifest_bytes) B, total \(.bytes) B  pg.lsn \([.sources[] | select(.name == "pg.lsn") | .position] | first)" end' "$work/list.json"
jq -r '[.snapshots[] | select(has("error") | not)] | "    \(length) snapshots, \(map(.bytes_new + .manifest_bytes) | add) B shipped in all: the first (every chunk)\n    \(.[0].bytes_new + .[0].manifest_bytes) B, the later ones \(.[1:] | map(.bytes_new + .manifest_bytes) | add / length | floor) B per push on average (the chunks sealed\n    since the last push); the newest snapshot names \(last.bytes) B of chunks"' "$work/list.json"
echo "  the slot at the loss: confirmed_flush_lsn $confirmed (the newest snapshot's pg.lsn $snap_lsn;"
echo "    the lost heap held $lost_lsn): the WAL after the snapshot was still on the server"
echo "  restore of $snap_id (every object checked, the heap verified): $restore_ms ms"
echo "  WAL re-read after the restore: $(mib "$wal_reread"), from the snapshot's LSN $snap_lsn to the"
echo "    source's position $caught when the restored heap caught up; of it $(mib "$wal_redone") the lost"
echo "    heap had applied after that snapshot, the rest was written while no engine ran"
echo "  a full re-snapshot instead:   $(mib "$tables") of tables (pg_total_relation_size) to copy"
echo "  total demo time:              $(( ($(ms) - t_start) / 1000 )) s"
sed 's/^/  /' "$work/verify.log" | grep -v '^  verified'
if [ "$ok" = 1 ] && grep -q '^verified' "$work/verify.log"; then
  echo "verified: every arrangement of the restored heap at LSN $final equals SELECT * FROM its table"
else
  echo "NOT verified (ah-pgsync verify):" >&2; cat "$work/verify.log" >&2; exit 1
fi
