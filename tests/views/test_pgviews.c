/*
 * tests/views/test_pgviews.c - ah-pgsync --views against PostgreSQL 15:
 * the three pgbench views after pgbench -i and a pgbench run with a kill -9
 * in the middle, verified against the same queries run by PostgreSQL; the
 * SQL NULL rules; and every bad input refused in one line with nothing
 * written.  Each test has its own cluster (tests/pg/pgtest.h).
 */
#include "tests/pg/pgtest.h"

#include "tests/views/pgbench_views.h"

static void write_file(pgt *c, const char *name, const char *text)
{
	char path[300];
	snprintf(path, sizeof path, "%s/%s", c->dir, name);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
}

static void pgbench_init(pgt *c)
{
	cr_assert_eq(pgt_sh("PGHOST=127.0.0.1 PGPORT=%d PGUSER=postgres " PGT_BIN "/pgbench -i -q "
	                    "-s 1 postgres >/dev/null 2>&1", c->port), 0);
	pgt_exec(c, "postgres", "ALTER TABLE pgbench_accounts REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_branches REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_tellers REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_history REPLICA IDENTITY FULL;"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;");
}

Test(views, pgbench_kill_restart_verify, .timeout = 180, .fini = pgt_fini)
{
	pgt c;
	char args[400];
	pgt_start(&c);
	pgbench_init(&c);
	write_file(&c, "views.sql", PGBENCH_VIEWS);
	snprintf(args, sizeof args, "--views %s/views.sql", c.dir);
	pid_t e = pgt_engine(&c, "heap", "e1.log", args);
	pgt_wait_heap(&c, "heap");
	/* after pgbench -i: exact values */
	char *s = pgt_read(&c, "heap", "view.acct_by_branch");
	cr_assert_str_eq(s, "1|100000,0,0,0|1\n");
	free(s);
	s = pgt_read(&c, "heap", "view.teller_branch");
	cr_assert_str_eq(s, "1,1,0,0||1\n2,1,0,0||1\n3,1,0,0||1\n4,1,0,0||1\n5,1,0,0||1\n"
	                 "6,1,0,0||1\n7,1,0,0||1\n8,1,0,0||1\n9,1,0,0||1\n10,1,0,0||1\n");
	free(s);
	s = pgt_read(&c, "heap", "view.branch_delta");
	cr_assert_str_eq(s, "");
	free(s);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	/* a pgbench run, the engine killed in the middle and restarted without --views */
	cr_assert_eq(pgt_sh("cd %s && PGHOST=127.0.0.1 PGPORT=%d PGUSER=postgres " PGT_BIN
	                    "/pgbench -n -c 2 -j 2 -T 4 postgres >pgbench.log 2>&1 &", c.dir, c.port), 0);
	sleep(2);
	kill(e, SIGKILL);
	cr_assert_eq(pgt_wait_pid(e), 128 + SIGKILL);
	/* after the kill: the views' uppers are the tables' */
	{
		char path[300];
		ah_heap *h;
		ah_txn *t;
		ah_arrangement_info a, b;
		ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
		snprintf(path, sizeof path, "%s/heap", c.dir);
		cr_assert_eq(ah_open(path, &o, &h), 0);
		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		cr_assert_eq(ah_arrangement_info_get(t, "public.pgbench_history", &a), 0);
		const char *vn[] = { "view.acct_by_branch", "view.teller_branch", "view.branch_delta" };
		for (int i = 0; i < 3; i++) {
			cr_assert_eq(ah_arrangement_info_get(t, vn[i], &b), 0);
			cr_assert_eq(a.upper, b.upper, "%s", vn[i]);
		}
		ah_txn_abort(t);
		cr_assert_eq(ah_close(h), 0);
	}
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	/* verify beside an engine that commits (and compacts) meanwhile: a
	 * comparison or a difference, never an error */
	for (int i = 0; i < 3; i++) {
		int vrc = pgt_verify(&c, "postgres", "heap");
		char *vl = pgt_file(&c, "verify.log");
		cr_assert(vrc == 0 || vrc == 1, "verify status %d: %s", vrc, vl);
		cr_assert(strstr(vl, "verified: ") || strstr(vl, "DIFFERENT: "), "%s", vl);
		cr_assert_null(strstr(vl, "compacted away"), "%s", vl);
		free(vl);
	}
	sleep(1);
	for (int i = 0; i < 100 && pgt_sh("pgrep -f 'pgbench -n -c 2' >/dev/null") == 0; i++)
		usleep(100000);
	cr_assert_eq(waitpid(e, NULL, WNOHANG), 0, "the engine stopped: %s", pgt_file(&c, "e2.log"));
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	char *log = pgt_file(&c, "e2.log");
	cr_assert(strstr(log, "first view query (view.acct_by_branch) answered"), "%s", log);
	free(log);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	log = pgt_file(&c, "verify.log");
	cr_assert(strstr(log, "view.branch_delta: query 1 rows, heap 1 rows at LSN"), "%s", log);
	cr_assert(strstr(log, "view.teller_branch: query 10 rows, heap 10 rows"), "%s", log);
	cr_assert(strstr(log, "verified: 4 tables,"), "%s", log);
	free(log);
	/* the sum over history equals PostgreSQL's */
	char *want = pgt_sql(&c, "postgres", "SELECT '1|' || sum(delta) || '|1' FROM pgbench_history");
	s = pgt_read(&c, "heap", "view.branch_delta");
	cr_assert(!strncmp(s, want, strlen(want)) && s[strlen(want)] == '\n', "%s vs %s", s, want);
	free(s);
	free(want);
	/* ah-dump reads a view like any arrangement */
	cr_assert_eq(pgt_sh("$(dirname %s)/ah-dump %s/heap read view.acct_by_branch > %s/dump.txt 2>&1",
	                    c.sync, c.dir, c.dir), 0, "%s", pgt_file(&c, "dump.txt"));
	s = pgt_file(&c, "dump.txt");
	cr_assert(strstr(s, "100000"), "%s", s);
	free(s);
	pgt_stop(&c);
}

Test(views, null_rules, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char args[400];
	pgt_start(&c);
	pgt_exec(&c, "postgres",
		"CREATE TABLE g (id int PRIMARY KEY, k int, x int, n numeric);\n"
		"CREATE TABLE j (id int PRIMARY KEY, k int, label text);\n"
		"ALTER TABLE g REPLICA IDENTITY FULL; ALTER TABLE j REPLICA IDENTITY FULL;\n"
		"INSERT INTO g VALUES (1, 1, NULL, NULL), (2, 1, NULL, NULL), (3, 2, 5, 1.5),\n"
		"  (4, 2, NULL, 2.25), (5, NULL, 7, -1), (6, NULL, 1, NULL);\n"
		"INSERT INTO j VALUES (1, 1, 'one'), (2, NULL, 'null'), (3, 2, 'two');\n"
		"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	write_file(&c, "v.sql",
		"CREATE VIEW agg AS SELECT k, count(*), count(x) AS cx, sum(x), min(x), max(x), "
		"sum(n) AS sn, min(n) AS mn, max(n) AS mx FROM g GROUP BY k;\n"
		"CREATE VIEW twice AS SELECT k, count(*) AS a, count(*) AS b, count(x) AS c, "
		"count(x) AS d FROM g GROUP BY k;\n"
		"CREATE VIEW jn AS SELECT g.id, j.label FROM g JOIN j ON g.k = j.k;\n");
	snprintf(args, sizeof args, "--views %s/v.sql", c.dir);
	pid_t e = pgt_engine(&c, "heap", "e.log", args);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "INSERT INTO g VALUES (7, 2, NULL, 0.125);\n"
	         "UPDATE g SET x = 3 WHERE id = 1;\nDELETE FROM g WHERE id = 6;\n"
	         "INSERT INTO j VALUES (4, NULL, 'null2');\n");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	/* count(col) skips NULLs, sum/min/max of only NULLs are NULL, a NULL
	 * group is a group, sum(numeric) keeps the largest scale */
	char *s = pgt_read(&c, "heap", "view.agg");
	cr_assert_str_eq(s,
		"NULL|1,1,7,7,7,-1,-1,-1|1\n"
		"1|2,1,3,3,3,NULL,NULL,NULL|1\n"
		"2|3,1,5,5,5,3.875,0.125,2.25|1\n", "%s", s);
	free(s);
	/* a join on NULL matches nothing */
	s = pgt_read(&c, "heap", "view.jn");
	cr_assert_str_eq(s, "1,one||1\n2,one||1\n3,two||1\n4,two||1\n7,two||1\n", "%s", s);
	free(s);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	pgt_stop(&c);
}

/* Runs the engine expecting a one-line error containing want. */
static void refused(pgt *c, const char *heap, const char *args, const char *want)
{
	char full[600];
	snprintf(full, sizeof full, "%s", args);
	cr_assert_eq(pgt_engine_run(c, heap, "bad.log", full), 1, "%s", pgt_file(c, "bad.log"));
	char *log = pgt_file(c, "bad.log");
	cr_assert(strstr(log, want), "want \"%s\" in:\n%s", want, log);
	cr_assert_eq(strchr(log, '\n'), log + strlen(log) - 1, "not one line:\n%s", log);
	free(log);
}

Test(views, bad_input_refused, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char args[400], path[300];
	pgt_start(&c);
	pgt_exec(&c, "postgres",
		"CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric, f float8);\n"
		"ALTER TABLE t REPLICA IDENTITY FULL;\n"
		"INSERT INTO t VALUES (1, 'a', 1.5, 0.5);\n"
		"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	struct { const char *file, *want; } cases[] = {
		{ "CREATE VIEW v AS SELECT id FROM nosuch;\n",
		  "views.sql:1:33: view v: table nosuch is not one of the heap's tables" },
		{ "CREATE VIEW v AS SELECT nosuch FROM t;\n",
		  "views.sql:1:25: view v: column nosuch does not exist in the table" },
		{ "CREATE VIEW v AS SELECT name, sum(f) FROM t GROUP BY name;\n",
		  "views.sql:1:31: view v: sum(f): type float8 is not supported (sum, min and max take "
		  "int2, int4, int8 and numeric; count takes any type)" },
		{ "CREATE VIEW v AS SELECT name, max(name) FROM t GROUP BY name;\n",
		  "view v: max(name): type text is not supported" },
		{ "CREATE VIEW v AS SELECT amount, count(*) FROM t GROUP BY amount;\n",
		  "view v: GROUP BY column amount has type numeric, whose equal values may print "
		  "differently" },
		{ "CREATE VIEW v AS SELECT id FROM t WHERE id = 1;\n", "views.sql:1:35: expected ;" },
		{ "CREATE VIEW v AS SELECT name, count(*), count(id) FROM t GROUP BY name;\n",
		  "views.sql:1:41: view v: output column count appears twice: give one an AS label" },
		{ "CREATE VIEW v AS SELECT id, id FROM t;\n",
		  "views.sql:1:29: view v: output column id appears twice" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		write_file(&c, "views.sql", cases[i].file);
		snprintf(args, sizeof args, "--views %s/views.sql", c.dir);
		refused(&c, "heap", args, cases[i].want);
		snprintf(path, sizeof path, "%s/heap", c.dir);
		cr_assert_neq(access(path, F_OK), 0, "case %zu made a heap", i);
		/* no slot was created */
		char *n = pgt_sql(&c, "postgres", "SELECT count(*) FROM pg_replication_slots");
		cr_assert_str_eq(n, "0", "case %zu", i);
		free(n);
	}
	/* a heap with views: another file, then a heap without views given --views */
	write_file(&c, "views.sql", "CREATE VIEW v AS SELECT name, count(*) FROM t GROUP BY name;\n");
	snprintf(args, sizeof args, "--views %s/views.sql", c.dir);
	pid_t e = pgt_engine(&c, "heap", "e.log", args);
	pgt_wait_heap(&c, "heap");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	uint64_t before = pgt_last_txn(&c, "heap");
	write_file(&c, "views2.sql", "CREATE VIEW v AS SELECT name, count(id) FROM t GROUP BY name;\n");
	snprintf(args, sizeof args, "--views %s/views2.sql", c.dir);
	refused(&c, "heap", args, "was made with other views than");
	cr_assert_eq(pgt_last_txn(&c, "heap"), before);
	/* the same file again is fine, and so is no flag */
	snprintf(args, sizeof args, "--views %s/views.sql", c.dir);
	e = pgt_engine(&c, "heap", "e2.log", args);
	pgt_wait_log(&c, "e2.log", "first view query (view.v) answered", 30);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	pgt_stop(&c);
}
