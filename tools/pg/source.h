/*
 * tools/pg/source.h - the PostgreSQL side of ah-pgsync, over libpq only:
 * a replication connection (replication=database) for IDENTIFY_SYSTEM,
 * CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT, START_REPLICATION with
 * pgoutput and standby status updates, and a normal connection for catalog
 * queries and the COPY of the first snapshot.
 *
 * Both connections fix the settings that shape a value's text form
 * (DateStyle, TimeZone, IntervalStyle, extra_float_digits, bytea_output,
 * lc_monetary, search_path, client encoding = server encoding) whatever
 * the environment or the conninfo says, and read them back: COPY and
 * pgoutput print every value alike, on every run.  Every failure leaves
 * one line naming the cause and the fix in src->err.
 *
 * It must never tell the server a position it was not given: src_status
 * reports exactly the written and flushed LSNs its caller passes.  Nothing
 * here reads or writes the heap.
 */
#ifndef TOOLS_PG_SOURCE_H
#define TOOLS_PG_SOURCE_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/pg/sink.h"

typedef struct pg_src {
	const char *conninfo, *slot, *pub;
	PGconn *repl, *sql;
	char sysid[32];
	char dbname[256];
	char *msg;             /* the last CopyData, freed on the next receive */
	uint64_t wal_end;      /* the server's WAL end, from 'w' and 'k' */
	int reply_requested;   /* the last keepalive asked for a reply */
	uint64_t bytes;        /* CopyData bytes received */
	char settings[512];    /* the effective text settings, "name=value" lines */
	uint32_t pub_oid;      /* the publication's OID, at connect */
	char err[1024];
} pg_src;

typedef struct pg_slot {
	int exists;
	int active_pid;
	char plugin[64], database[256];
	uint64_t confirmed, restart;
} pg_slot;

/* The publication as it is now: filtered names a table with a row filter
 * or a column list ("" if none). */
typedef struct pg_pub {
	uint32_t oid;
	int all_tables;
	int ins, upd, del, trunc;   /* what it publishes */
	char filtered[300];
} pg_pub;

/* What the catalog says now of a relation. */
typedef struct pg_rel {
	int exists;                 /* 0: no such relation (any more) */
	uint32_t relfilenode;
	char persistence, kind, replident;
} pg_rel;

/* Connects both connections and checks the publication: it must exist,
 * publish inserts, updates, deletes and truncates, and have no row filter
 * or column list (else the stream would lack changes the heap needs). */
int src_connect(pg_src *s);
/* Only the normal connection (for `verify`). */
int src_connect_sql(pg_src *s);
void src_close(pg_src *s);
int src_slot(pg_src *s, pg_slot *out);
int src_create_slot(pg_src *s, uint64_t *consistent, char *snapshot, size_t len);
/* The publication's tables with their columns and primary keys; fails when
 * one lacks REPLICA IDENTITY FULL. */
int src_tables(pg_src *s, pg_table **out, int *nt);
/* COPY of table t inside the exported snapshot: row(ctx, line, len) per
 * line (without its newline; the line may be modified). */
int src_copy_begin(pg_src *s, const char *snapshot);
int src_copy(pg_src *s, const pg_table *t, int (*row)(void *, char *, size_t), void *ctx);
int src_copy_end(pg_src *s);
/* COPY (sql) TO STDOUT in the same transaction: row() per line. */
int src_copy_query(pg_src *s, const char *sql, int (*row)(void *, char *, size_t), void *ctx);
/* Sets t[i].types (pg_type names per column) for t[0..nt) from the catalog. */
int src_column_types(pg_src *s, pg_table *t, int nt);
int src_publication(pg_src *s, pg_pub *out);
/* Relation relid now: out->exists, and if it exists t gets its names,
 * columns and primary key (as src_tables; t's strings are malloc'd). */
int src_relation(pg_src *s, uint32_t relid, pg_table *t, pg_rel *out);
/* The largest pg_class OID the current snapshot sees (inside the first
 * copy's snapshot: every relation that existed at the consistent point
 * has an OID <= it). */
int src_relid_max(pg_src *s, uint32_t *out);
/* The WAL the slot holds on the server: bytes from its restart_lsn to the
 * current WAL position (-1 if unknown). */
int src_wal_held(pg_src *s, uint64_t *bytes);
int src_start(pg_src *s, uint64_t lsn);
/* Waits up to timeout_ms for a message: 1 with pgoutput bytes in *data,
 * 2 for a keepalive (wal_end, reply_requested updated), 0 timed out,
 * -1 error (connection lost or the server ended the stream). */
int src_recv(pg_src *s, int timeout_ms, const uint8_t **data, size_t *len);
/* 1 while the normal connection is up, reading what the server sent it
 * while idle; 0 (src->err set) once the server closed it, as it closes
 * every session first at a fast shutdown. */
int src_sql_alive(pg_src *s);
/* Standby status update: written = received, flushed = applied = flush. */
int src_status(pg_src *s, uint64_t written, uint64_t flush);

#endif /* TOOLS_PG_SOURCE_H */
