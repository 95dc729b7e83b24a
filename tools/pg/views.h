/*
 * tools/pg/views.h - ah-pgsync's views: a view file (tools/pg/viewsql.h)
 * resolved against the heap's tables and compiled into operator nodes
 * (tools/engine/engine.h) that keep one arrangement per view in the same
 * write transaction as the table updates they derive from.
 *
 * Arrangements (ARCHITECTURE.md section 12 has the contract):
 *   view.NAME      with GROUP BY: key = the GROUP BY columns (row.h
 *                  encoding, in GROUP BY order), val = the aggregates in
 *                  select-list order, count 1; without: key = the select
 *                  list, val empty, count = the row's multiplicity.
 *   view.NAME.N    intermediate arrangements (N = 1, 2, ...): a table
 *                  re-keyed by its join column and projected to the columns
 *                  later stages use, a join's output re-keyed for the next
 *                  join, the input of the GROUP BY's reduce.
 * Compilation of FROM t0 JOIN t1 ON .. JOIN t2 ON ..: left-deep.  Each
 * table is arranged by its column of the ON condition that joins it, with
 * only the columns needed later as val (so an update of any other column
 * consolidates away there and re-emits nothing downstream); NULL join keys
 * are dropped (SQL: NULL matches nothing); each join emits the next join's
 * key, or the view's key and the aggregate inputs; GROUP BY is one reduce
 * computing count/sum/min/max by SQL's NULL rules.
 *
 * Types (the columns' pg_type names, pg_table.types): sum, min and max
 * take int2, int4, int8 and numeric; count takes any type; GROUP BY and
 * join columns take types whose text form is canonical (equal values print
 * alike): int2, int4, int8, oid (one class: they join each other), text,
 * varchar, name (one class), bool, date, time, timestamp, timestamptz,
 * uuid, bytea.  Anything else is a one-line error at start.
 *
 * The record "pg.views" (written with the first copy, read at restart):
 *   "ah-pgsync views 1\n"
 *   "type\t<relid>\t<column index>\t<type name, escaped>\n"  per column used
 *   "text\t<N>\n" then the view file's N bytes as given
 * so a restart compiles the same views against the same types without the
 * file or the catalog.
 */
#ifndef TOOLS_PG_VIEWS_H
#define TOOLS_PG_VIEWS_H

#include <stddef.h>

#include "tools/engine/engine.h"
#include "tools/pg/row.h"
#include "tools/pg/sink.h"

typedef struct views views;

/* Parses and compiles text[0..len) against tables t[0..nt) (whose types
 * must be set for every table a view names) and builds the graph.  0, or
 * -1 with one line "LINE:COL: view NAME: what; the fix" in err, or -2 out
 * of memory.  *out owned by the caller (views_free). */
int views_compile(const char *text, size_t len, const pg_table *t, int nt, views **out,
                  char *err, size_t errlen);
/* As views_compile, but every arrangement is named PREFIX + NAME (+ ".N")
 * instead of "view." + NAME: a second reader's own views ("R.view."), or a
 * recomputation beside the stored ones.  PREFIX is at most 20 bytes. */
int views_compile_as(const char *text, size_t len, const pg_table *t, int nt, const char *prefix,
                     views **out, char *err, size_t errlen);
void views_free(views *v);

/* The graph (owned by v): its inputs are the tables' arrangements. */
eg_graph *views_graph(views *v);
int views_count(const views *v);
/* "view.NAME" */
const char *views_arrangement(const views *v, int i);
/* The view's SELECT as PostgreSQL runs it for verify: every name resolved,
 * quoted and qualified (owned by v). */
const char *views_sql(const views *v, int i);
/* The number of columns views_sql returns. */
int views_columns(const views *v, int i);
/* Encodes one row of views_sql's result (fields f[0..nitems)) as the
 * view's key and val into kv (key kv->p[0..*klen), val after).  0 or -1. */
int views_encode(const views *v, int i, const pg_field *f, pg_buf *kv, size_t *klen);

/* The pg.views record (see the top) into out.  0 or -1 (out of memory). */
int views_record(const views *v, const pg_table *t, int nt, pg_buf *out);
/* Reads a pg.views record: sets the stored types on t[0..nt) (matched by
 * relid) and points *text at the view file's bytes (inside p).  0, or -1
 * with a line in err. */
int views_record_parse(const char *p, size_t len, pg_table *t, int nt, const char **text,
                       size_t *tlen, char *err, size_t errlen);

#endif /* TOOLS_PG_VIEWS_H */
