/*
 * tests/views/test_viewsql.c - the view file parser (tools/pg/viewsql.h):
 * the three pgbench views parse into the exact tree, identifiers fold as
 * PostgreSQL folds them, and every construct outside the subset is a
 * one-line error at its line and column.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "tools/pg/viewsql.h"

static const char *PGBENCH =
	"-- pgbench views\n"
	"CREATE VIEW acct_by_branch AS\n"
	"  SELECT bid, count(*), sum(abalance), min(abalance), MAX(abalance) AS top\n"
	"  FROM pgbench_accounts GROUP BY bid;\n"
	"create view teller_branch as select t.tid, t.bid, b.bbalance\n"
	"  from pgbench_tellers t join pgbench_branches b on t.bid = b.bid;\n"
	"CREATE VIEW branch_delta AS SELECT b.bid, sum(h.delta) FROM public.pgbench_history AS h\n"
	"  INNER JOIN pgbench_tellers t ON h.tid = t.tid JOIN pgbench_branches b ON t.bid = b.bid\n"
	"  GROUP BY b.bid;\n";

Test(viewsql, pgbench_views)
{
	vs_file f;
	char err[256] = "";
	cr_assert_eq(vs_parse(PGBENCH, strlen(PGBENCH), &f, err, sizeof err), 0, "%s", err);
	cr_assert_eq(f.nv, 3);
	vs_view *v = &f.v[0];
	cr_assert_str_eq(v->name, "acct_by_branch");
	cr_assert_eq(v->line, 2);
	cr_assert_eq(v->nitems, 5);
	cr_assert_eq(v->items[0].kind, VS_COL);
	cr_assert_str_eq(v->items[0].ref.name, "bid");
	cr_assert_null(v->items[0].ref.qual);
	cr_assert_eq(v->items[1].kind, VS_COUNT_STAR);
	cr_assert_eq(v->items[2].kind, VS_SUM);
	cr_assert_str_eq(v->items[2].ref.name, "abalance");
	cr_assert_eq(v->items[3].kind, VS_MIN);
	cr_assert_eq(v->items[4].kind, VS_MAX);
	cr_assert_str_eq(v->items[4].label, "top");
	cr_assert_eq(v->nfrom, 1);
	cr_assert_str_eq(v->from[0].table, "pgbench_accounts");
	cr_assert_null(v->from[0].schema);
	cr_assert_null(v->from[0].alias);
	cr_assert_eq(v->ngroup, 1);
	cr_assert_str_eq(v->group[0].name, "bid");
	cr_assert_eq(v->group[0].line, 4);
	cr_assert_eq(v->group[0].pos, 34);

	v = &f.v[1];
	cr_assert_str_eq(v->name, "teller_branch");
	cr_assert_eq(v->nitems, 3);
	cr_assert_str_eq(v->items[2].ref.qual, "b");
	cr_assert_str_eq(v->items[2].ref.name, "bbalance");
	cr_assert_eq(v->nfrom, 2);
	cr_assert_str_eq(v->from[0].alias, "t");
	cr_assert_str_eq(v->from[1].table, "pgbench_branches");
	cr_assert_str_eq(v->from[1].alias, "b");
	cr_assert_str_eq(v->from[1].on_a.qual, "t");
	cr_assert_str_eq(v->from[1].on_b.qual, "b");
	cr_assert_eq(v->ngroup, 0);

	v = &f.v[2];
	cr_assert_eq(v->nfrom, 3);
	cr_assert_str_eq(v->from[0].schema, "public");
	cr_assert_str_eq(v->from[0].alias, "h");
	cr_assert_str_eq(v->from[1].on_a.name, "tid");
	cr_assert_str_eq(v->from[2].on_b.qual, "b");
	cr_assert_eq(v->ngroup, 1);
	cr_assert_str_eq(v->group[0].qual, "b");
	vs_free(&f);
}

Test(viewsql, identifiers_fold_unless_quoted)
{
	const char *s = "CREATE VIEW v AS SELECT \"MixedCase\", Other, \"a\"\"q\" FROM \"T\";";
	vs_file f;
	char err[256] = "";
	cr_assert_eq(vs_parse(s, strlen(s), &f, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(f.v[0].items[0].ref.name, "MixedCase");
	cr_assert_str_eq(f.v[0].items[1].ref.name, "other");
	cr_assert_str_eq(f.v[0].items[2].ref.name, "a\"q");
	cr_assert_str_eq(f.v[0].from[0].table, "T");
	vs_free(&f);
}

static void bad(const char *s, const char *want)
{
	vs_file f;
	char err[512] = "";
	cr_assert_eq(vs_parse(s, strlen(s), &f, err, sizeof err), -1, "accepted: %s", s);
	cr_assert_str_eq(err, want, "for: %s\ngot: %s", s, err);
	cr_assert_null(strchr(err, '\n'));
	cr_assert_eq(f.nv, 0);
}

Test(viewsql, outside_the_subset)
{
	bad("", "1:1: no views: the file holds CREATE VIEW name AS SELECT ...; statements");
	bad("SELECT 1;", "1:1: expected create (each view is CREATE VIEW name AS SELECT ...;), "
	    "found \"select\"");
	bad("CREATE VIEW v AS SELECT * FROM t;", "1:25: SELECT * is not supported: name the columns");
	bad("CREATE VIEW v AS SELECT a FROM t WHERE a = 1;", "1:34: expected ; at the end of view v, "
	    "found \"where\" (the subset has no WHERE, HAVING, ORDER BY, LIMIT or UNION)");
	bad("CREATE VIEW v AS SELECT a FROM t\n  LEFT JOIN u ON t.a = u.a;",
	    "2:3: left JOIN is not supported (only [INNER] JOIN ... ON)");
	bad("CREATE VIEW v AS SELECT avg(a) FROM t GROUP BY b;",
	    "1:28: expected a column ([alias.]column), found \"(\" (the select list takes columns and "
	    "count(*), count(col), sum(col), min(col), max(col); no other functions or expressions)");
	bad("CREATE VIEW v AS SELECT sum(a + 1) FROM t;",
	    "1:31: expected ) after the argument of sum, found \"+\" (the argument is one column)");
	bad("CREATE VIEW v AS SELECT a FROM t JOIN u ON t.a = u.a AND t.b = u.b;",
	    "1:54: ON takes one equality of two columns; \"and\" is not supported");
	bad("CREATE VIEW v AS SELECT a FROM t, u;",
	    "1:33: FROM a, b is not supported: write JOIN b ON a.x = b.y");
	bad("CREATE VIEW \"Bad\" AS SELECT a FROM t;",
	    "1:13: view name \"Bad\": view names are [a-z0-9_], 1 to 40 characters");
	bad("CREATE VIEW v AS SELECT a FROM t;\nCREATE VIEW v AS SELECT b FROM t;",
	    "2:1: view v is defined twice (first on line 1)");
	bad("CREATE VIEW v AS SELECT count(DISTINCT a) FROM t;",
	    "1:31: count(DISTINCT ...) is not supported");
	bad("CREATE VIEW v AS SELECT a FROM t", "1:33: expected ; at the end of view v, found the "
	    "end of the file (the subset has no WHERE, HAVING, ORDER BY, LIMIT or UNION)");
	bad("CREATE VIEW v AS SELECT a FROM (SELECT 1);",
	    "1:32: subqueries are not supported: FROM takes [schema.]table");
}
