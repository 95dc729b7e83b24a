/*
 * tools/pg/sink.h - the heap side of ah-pgsync: one arrangement per source
 * table, source transactions buffered until their commit, groups of them
 * committed to the heap in one write transaction with the stream position.
 * The staging, the source transactions and the group's write transaction
 * are the shared engine's (tools/common/ingest.h); the sink adds what is
 * PostgreSQL's: tables and their encoding, TRUNCATE, LSNs and the pg.*
 * records, and which tables are in the heap yet.
 *
 * Heap contents (ARCHITECTURE.md section 12 has the whole contract):
 *   arrangement per table  key = primary key fields, val = all fields
 *                          (row.h encoding); no primary key: key = all
 *                          fields, val empty.  time = the transaction's
 *                          commit end LSN; the first copy is at the slot's
 *                          consistent point.
 *   source "pg.lsn"        text "X/Y": every source transaction whose
 *                          commit end LSN is <= it is in the heap, none
 *                          after; every arrangement's upper is it + 1.
 *   source "pg.identity"   text lines system=, database=, slot=,
 *                          publication=: whose stream this heap follows.
 *   source "pg.stats"      text "txns=N updates=M": totals applied so far.
 *   source "pg.snapshot"   relid_max= (the largest pg_class OID the first
 *                          copy's snapshot saw), publication_oid=: what a
 *                          table new to the stream is measured against.
 *   source "pg.settings"   the text settings both connections had when the
 *                          heap was made ("name=value" lines, source.h): a
 *                          restart with others is refused.
 *   source "pg.views"      the view file and the types of the columns it
 *                          uses (tools/pg/views.h); its arrangements view.*
 *                          advance with the tables in every commit.
 *   source "pg.tables"     one line per table: relid, arrangement, schema,
 *                          table, key column indices, column names
 *                          (tab-separated, names escaped as escape.h).
 * It never confirms anything to the server (the caller does, after
 * sink_flush() returned 0), and never drops a source transaction that
 * sink_commit took: a lost connection keeps it for the next flush.
 */
#ifndef TOOLS_PG_SINK_H
#define TOOLS_PG_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "arrheap.h"
#include "tools/common/ingest.h"
#include "tools/pg/row.h"

typedef struct pg_table {
	uint32_t relid;
	char name[AH_NAME_MAX + 1];
	char *nsp, *rel;
	int ncols;
	char **cols;
	int nkey;
	int *key;          /* column indices of the primary key, in its order */
	int in_heap;       /* 0: followed since this run (sink_add_table), its
	                    * arrangement not made yet; 1: in the heap; 2: made
	                    * by the sink_flush under way (pg.tables lists it) */
	char **types;      /* ncols pg_type names, for the views (tools/pg/views.h);
	                    * NULL when not read, an entry NULL when not known */
	ingest_arr *arr;   /* its pending updates, in the sink's engine (set
	                    * by sink_start or sink_add_table; NULL outside a
	                    * sink); time 0 until their source txn commits */
} pg_table;

typedef struct sink {
	/* the heap (ig.heap: opened and closed by the caller), the tables'
	 * staging, the open source txn (ig.in_src) and the group commit */
	ingest ig;
	pg_table *t;
	int nt;
	uint64_t pos;        /* committed in the heap */
	uint64_t group_pos;  /* after the buffered group */
	size_t group_txns;
	uint64_t group_updates;
	uint64_t txns, skipped, updates;  /* totals of this run */
	uint64_t total_txns, total_updates; /* of earlier runs (pg.stats) */
	int stuck;           /* the last error is in the stream: a restart meets it again */
	const char *settings; /* written as pg.settings by the next flush if set */
	struct eg_graph *views; /* the views' operators (tools/pg/views.h), stepped
	                       * in every flush's transaction after the tables;
	                       * NULL: no views (not owned).  With views every
	                       * flush also advances since of the tables and
	                       * views to the new LSN, bounded by read holds */
	double views_ms;     /* spent stepping and compacting the views, this run */
	pg_buf kv;           /* scratch for one row's key and val */
	char err[1024];
} sink;

/* LSN text forms "X/Y". */
void lsn_fmt(uint64_t lsn, char *buf, size_t len);
int lsn_parse(const char *s, size_t len, uint64_t *out);

/* Arrangement name for a table: "schema.table" when it fits the name rules,
 * else "rel.<relid>". */
void table_name_for(pg_table *t);
pg_table *sink_table(sink *s, uint32_t relid);

/* Takes s->t[0..s->nt) (set by the caller: the first copy's tables, or the
 * stored ones) as the tables it stages for.  0, or -1 (out of memory). */
int sink_start(sink *s);

/* Follows table t (its fields moved into the sink; *t is cleared) from the
 * open source txn on: not in the heap until a flush commits its first
 * rows, creating its arrangement and adding it to pg.tables in the same
 * write transaction.  Fails (stuck) if its arrangement name is taken. */
int sink_add_table(sink *s, pg_table *t);

/* The stored table list, serialised and parsed (see above); tables not in
 * the heap (in_heap 0) are left out. */
int tables_format(const pg_table *t, int nt, pg_buf *out);
int tables_parse(const char *p, size_t len, pg_table **out, int *nt, char *err, size_t errlen);
void tables_free(pg_table *t, int nt);
/* Frees one table's fields (not t itself) and zeroes it. */
void table_clear(pg_table *t);

/* Encodes a row (ncols fields) as key and val into s->kv: key is
 * s->kv.p[0..*klen), val follows. */
int sink_encode(sink *s, const pg_table *t, const pg_field *f, size_t *klen);

/* Opens a source transaction (an open one, abandoned by the server, is
 * dropped first). */
void sink_begin(sink *s);
/* One change of the open source txn: diff +1 (new row) or -1 (old row). */
int sink_row(sink *s, pg_table *t, const pg_field *f, int64_t diff);
/* Retracts every current row of t (heap at its frontier + pending). */
int sink_truncate(sink *s, pg_table *t);
/* Ends the open source txn at end_lsn; drops it if end_lsn <= group_pos
 * (already applied: the server resent it).  *skipped set to 1 then. */
int sink_commit(sink *s, uint64_t end_lsn, int *skipped);
/* Drops the open source txn (connection lost mid-transaction); a no-op
 * outside one: committed transactions are never dropped. */
void sink_rollback(sink *s);
/* The stream is idle up to wal_end: nothing before it is missing. */
void sink_idle(sink *s, uint64_t wal_end);
/* Commits the buffered group to the heap (no-op when nothing new). */
int sink_flush(sink *s);
void sink_free(sink *s);

/* A PostgreSQL schema or table name as messages print it: escaped
 * (tools/common/escape.h's canonical form: \\n, \\t, \\\\ and \\xHH for
 * other control bytes), so a name with a newline never breaks a one-line
 * message.  Returns
 * one of 8 rotating static buffers (for up to 8 names per message; names
 * longer than 255 bytes are cut with "..."); single-threaded callers only. */
const char *pg_disp(const char *name);

#endif /* TOOLS_PG_SINK_H */
