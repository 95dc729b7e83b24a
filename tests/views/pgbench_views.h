/*
 * tests/views/pgbench_views.h - the three views over pgbench's
 * tables, as the view tests give them to ah-pgsync --views (the same
 * views as tools/demo-views.sql).
 */
#ifndef TESTS_VIEWS_PGBENCH_VIEWS_H
#define TESTS_VIEWS_PGBENCH_VIEWS_H

static const char *const PGBENCH_VIEWS =
	"-- the issue's three views over pgbench\n"
	"CREATE VIEW acct_by_branch AS\n"
	"  SELECT bid, count(*), sum(abalance), min(abalance), max(abalance)\n"
	"  FROM pgbench_accounts GROUP BY bid;\n"
	"CREATE VIEW teller_branch AS\n"
	"  SELECT t.tid, t.bid, t.tbalance, b.bbalance\n"
	"  FROM pgbench_tellers t JOIN pgbench_branches b ON t.bid = b.bid;\n"
	"CREATE VIEW branch_delta AS\n"
	"  SELECT b.bid, sum(h.delta) FROM pgbench_history h\n"
	"  JOIN pgbench_tellers t ON h.tid = t.tid JOIN pgbench_branches b ON t.bid = b.bid\n"
	"  GROUP BY b.bid;\n";

#endif
