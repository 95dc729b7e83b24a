# tools/demo-cluster.sh - sourced by tools/demo.sh and tools/demo-restore.sh:
# a throwaway PostgreSQL cluster in $work on a free loopback port, and the
# two SQL helpers both demos use.  Needs $work, $pgbin and as_pg from the
# caller; sets $port and $pgopts and exports the PG* variables.
# It must never touch a cluster or a port it did not make.

port=54321
while (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
as_pg "$pgbin/initdb" -N -A trust -U postgres -D "$work/data" >/dev/null
pgopts="-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$work -c wal_level=logical \
-c max_replication_slots=8 -c max_wal_senders=8 -c synchronous_commit=off"
as_pg "$pgbin/pg_ctl" -D "$work/data" -l "$work/pg.log" -w -o "$pgopts" start >/dev/null
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
sql() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }
# An LSN at or past the end of every transaction that has returned so far.
# Under synchronous_commit=off a commit returns before its WAL is written,
# so pg_current_wal_lsn() (the write position) can lag it.  A marker
# transaction that writes WAL (a transactional logical message, which
# pgoutput does not send) committed synchronously flushes all WAL before
# its commit, so the flush position after it covers every earlier commit;
# and unlike pg_current_wal_insert_lsn() it never points past WAL not yet
# written (the insert position can sit after the header of an empty page).
covering_lsn() {
  psql -X -A -t -q -v ON_ERROR_STOP=1 -c "SET synchronous_commit = on" \
    -c "SELECT pg_logical_emit_message(true, 'ah-pgsync', 'marker') IS NOT NULL" \
    -c "SELECT pg_current_wal_flush_lsn()" | tail -1
}
