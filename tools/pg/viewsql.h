/*
 * tools/pg/viewsql.h - the view file of ah-pgsync (--views FILE): a
 * restricted SQL subset that PostgreSQL runs unchanged, parsed into a
 * small syntax tree.  Names are resolved and types checked later
 * (tools/pg/views.h); this file knows only the grammar:
 *
 *   file   := { view } ;                    -- comments to end of line
 *   view   := CREATE VIEW name AS SELECT item {, item}
 *             FROM table [[AS] alias] { [INNER] JOIN table [[AS] alias]
 *             ON col = col } [ GROUP BY col {, col} ] ;
 *   item   := col | COUNT(*) | COUNT(col) | SUM(col) | MIN(col) | MAX(col)
 *             [ [AS] label ]
 *   col    := ident [ . ident ]             -- [alias.]column
 *   table  := ident [ . ident ]             -- [schema.]table
 *   ident  := [A-Za-z_][A-Za-z0-9_$]*  (folded to lower case, as
 *             PostgreSQL folds it) | "quoted" ("" for a quote)
 *
 * Keywords are case-insensitive.  View names are [a-z0-9_], 1 to 40
 * bytes (an arrangement "view.NAME.N" must fit 64 bytes).  Anything else
 * (WHERE, OUTER JOIN, expressions, DISTINCT, *, subqueries) is a one-line
 * error "LINE:COL: ..." naming what is supported.
 *
 * Pure: no I/O; the tree owns malloc'd copies of the names.
 */
#ifndef TOOLS_PG_VIEWSQL_H
#define TOOLS_PG_VIEWSQL_H

#include <stddef.h>

typedef enum vs_kind { VS_COL, VS_COUNT_STAR, VS_COUNT, VS_SUM, VS_MIN, VS_MAX } vs_kind;

/* A column reference, as written; tab/col filled by views_resolve. */
typedef struct vs_ref {
	char *qual;        /* alias or table name, or NULL */
	char *name;
	int line, pos;     /* where it starts, 1-based */
	int tab, col;      /* resolved: index in the view's FROM list, column index */
} vs_ref;

typedef struct vs_item {
	vs_kind kind;
	vs_ref ref;        /* unused for VS_COUNT_STAR */
	char *label;       /* AS label, or NULL */
	int line, pos;
} vs_item;

typedef struct vs_from {
	char *schema;      /* NULL if not qualified */
	char *table;
	char *alias;       /* NULL if none */
	int line, pos;
	vs_ref on_a, on_b; /* the ON columns of a JOIN (every entry but the first) */
} vs_from;

typedef struct vs_view {
	char *name;
	int line, pos;
	vs_item *items;
	int nitems;
	vs_from *from;
	int nfrom;
	vs_ref *group;
	int ngroup;
} vs_view;

typedef struct vs_file {
	vs_view *v;
	int nv;
} vs_file;

/* Parses text[0..len).  0, or -1 with one line "LINE:COL: what" in err
 * (and *out empty); -2 out of memory.  A file without views is an error. */
int vs_parse(const char *text, size_t len, vs_file *out, char *err, size_t errlen);
void vs_free(vs_file *f);

/* The name of an aggregate kind as written ("count", "sum", ...). */
const char *vs_kind_name(vs_kind k);

#endif /* TOOLS_PG_VIEWSQL_H */
