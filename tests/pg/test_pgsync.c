/*
 * tests/pg/test_pgsync.c - build/ah-pgsync against a real PostgreSQL 15:
 * the small demo (pgbench -s 1, kill -9, restart, equality with the
 * database) and the edge cases of issue 6: delete and re-insert in one
 * transaction, primary key changes, composite keys, NULLs, tabs, newlines,
 * non-ASCII, bytea, TRUNCATE, two tables in one transaction, a server
 * restart under the engine, slots behind or ahead of the heap, and verify
 * reporting every differing table.
 * Each test has its own cluster (tests/pg/pgtest.h).
 */
#include "pgtest.h"

static const char *SETUP_EDGE =
	"CREATE TABLE t_pk (id int PRIMARY KEY, a text, b bytea, n int);\n"
	"CREATE TABLE t_comp (a int, b text, v text, PRIMARY KEY (b, a));\n"
	"CREATE TABLE t_nopk (x int, y text);\n"
	"CREATE TABLE t_trunc (id int PRIMARY KEY, v text);\n"
	"ALTER TABLE t_pk REPLICA IDENTITY FULL; ALTER TABLE t_comp REPLICA IDENTITY FULL;\n"
	"ALTER TABLE t_nopk REPLICA IDENTITY FULL; ALTER TABLE t_trunc REPLICA IDENTITY FULL;\n"
	"INSERT INTO t_pk VALUES (1, E'one\\ttab', '\\x00ff', NULL), (2, 'two', NULL, 2);\n"
	"INSERT INTO t_trunc VALUES (1, 'a'), (2, 'b');\n"
	"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n";

Test(pgsync, small_demo_kill_restart, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	cr_assert_eq(pgt_sh("PGHOST=127.0.0.1 PGPORT=%d PGUSER=postgres " PGT_BIN "/pgbench -i -q "
	                    "-s 1 postgres >/dev/null 2>&1", c.port), 0);
	pgt_exec(&c, "postgres", "ALTER TABLE pgbench_accounts REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_branches REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_tellers REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_history REPLICA IDENTITY FULL;"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;");
	pid_t e = pgt_engine(&c, "heap", "e1.log", NULL);
	char heap[256];
	snprintf(heap, sizeof heap, "%s/heap", c.dir);
	pgt_wait_heap(&c, "heap");
	cr_assert_eq(pgt_sh("cd %s && PGHOST=127.0.0.1 PGPORT=%d PGUSER=postgres " PGT_BIN
	                    "/pgbench -n -c 2 -j 2 -T 4 postgres >pgbench.log 2>&1 &", c.dir, c.port), 0);
	sleep(2);
	kill(e, SIGKILL);
	cr_assert_eq(pgt_wait_pid(e), 128 + SIGKILL);
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	sleep(3);
	for (int i = 0; i < 100 && pgt_sh("pgrep -f 'pgbench -n -c 2' >/dev/null") == 0; i++)
		usleep(100000);
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);
	char *log = pgt_file(&c, "e2.log");
	cr_assert(strstr(log, "first query answered"), "%s", log);
	free(log);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	/* every pgbench transaction inserts one history row: the heap's
	 * transaction count is exact */
	char *n = pgt_sql(&c, "postgres", "SELECT count(*) FROM pgbench_history");
	cr_assert_gt(atoi(n), 0);
	cr_assert_eq(pgt_sh("%s status %s | grep -qx 'txns %s'", c.sync, heap, n), 0);
	free(n);
	pgt_stop(&c);
}

Test(pgsync, edge_values, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP_EDGE);
	/* keys sort by their encoding: a length prefix first, so "4" < "20" */
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres",
		"INSERT INTO t_pk VALUES (3, E'tab\\there\\nnew line \\u00fcn\\u00efc\\u00f6de \\\\ back', "
		"'\\x0a09005c', NULL), (4, NULL, NULL, NULL);\n"
		"BEGIN; DELETE FROM t_pk WHERE id = 1; INSERT INTO t_pk VALUES (1, 'again', NULL, 1); COMMIT;\n"
		"UPDATE t_pk SET id = 20 WHERE id = 2;\n"
		"INSERT INTO t_comp VALUES (1, 'x', 'v1'), (2, 'x', 'v2'), (1, 'y', NULL);\n"
		"UPDATE t_comp SET a = 3 WHERE a = 2 AND b = 'x';\n"
		"INSERT INTO t_nopk VALUES (1, 'dup'), (1, 'dup'), (2, NULL);\n"
		"DELETE FROM t_nopk WHERE x = 2;\n"
		"BEGIN; INSERT INTO t_trunc VALUES (3, 'c'); TRUNCATE t_trunc; INSERT INTO t_trunc VALUES (9, 'z'); COMMIT;\n"
		"BEGIN; INSERT INTO t_pk VALUES (50, 'both', NULL, 50); INSERT INTO t_comp VALUES (50, 'both', 'v'); COMMIT;\n");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));

	char *s = pgt_read(&c, "heap", "public.t_pk");
	cr_assert_str_eq(s,
		"1|1,again,NULL,1|1\n"
		"3|3,tab\\there\\nnew line \xc3\xbcn\xc3\xaf" "c\xc3\xb6" "de \\\\ back,\\\\x0a09005c,NULL|1\n"
		"4|4,NULL,NULL,NULL|1\n"
		"20|20,two,NULL,2|1\n"
		"50|50,both,NULL,50|1\n");
	free(s);
	s = pgt_read(&c, "heap", "public.t_comp");
	cr_assert_str_eq(s, "x,1|1,x,v1|1\nx,3|3,x,v2|1\ny,1|1,y,NULL|1\nboth,50|50,both,v|1\n");
	free(s);
	s = pgt_read(&c, "heap", "public.t_nopk");
	cr_assert_str_eq(s, "1,dup||2\n");
	free(s);
	s = pgt_read(&c, "heap", "public.t_trunc");
	cr_assert_str_eq(s, "9|9,z|1\n");
	free(s);
	/* one source transaction over two tables: one time in both */
	uint64_t t1 = pgt_time_of(&c, "heap", "public.t_pk", "50");
	uint64_t t2 = pgt_time_of(&c, "heap", "public.t_comp", "both,50");
	cr_assert_neq(t1, 0);
	cr_assert_eq(t1, t2, "times %" PRIu64 " and %" PRIu64, t1, t2);
	pgt_stop(&c);
}

static const char *SETUP_SMALL =
	"CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	"ALTER TABLE t REPLICA IDENTITY FULL;\n"
	"INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;\n"
	"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n";

Test(pgsync, server_restart, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP_SMALL);
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "UPDATE t SET v = 'u' || id WHERE id <= 10;");
	pgt_catch_up(&c, "postgres", "heap");
	cr_assert_eq(pgt_sh("%s" PGT_BIN "/pg_ctl -D %s/data -m fast -w restart >/dev/null",
	                    pgt_as_pg(), c.dir), 0);
	pgt_exec(&c, "postgres", "DELETE FROM t WHERE id > 90; INSERT INTO t VALUES (1000, 'after');");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	char *log = pgt_file(&c, "e.log");
	cr_assert(strstr(log, "reconnected, streaming from LSN"), "%s", log);
	free(log);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	char *s = pgt_read(&c, "heap", "public.t");
	cr_assert(strstr(s, "1000|1000,after|1\n") && strstr(s, "10|10,u10|1\n") && !strstr(s, "|91,"), "%s", s);
	free(s);
	pgt_stop(&c);
}

/* A slot ahead of the heap (a copy of an older heap) is refused and the
 * heap untouched; a slot behind it (an older copy of the slot) resends
 * what the heap has, which the engine skips. */
Test(pgsync, slot_behind_and_ahead, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP_SMALL);
	pid_t e = pgt_engine(&c, "heap", "e1.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "INSERT INTO t VALUES (101, 'a');");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);
	pgt_exec(&c, "postgres", "SELECT pg_copy_logical_replication_slot('ah_pgsync', 'saved');");
	cr_assert_eq(pgt_sh("cp %s/heap %s/old", c.dir, c.dir), 0);
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	pgt_exec(&c, "postgres", "INSERT INTO t VALUES (102, 'b'); UPDATE t SET v = 'c' WHERE id = 1;");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);

	uint64_t before = pgt_last_txn(&c, "old");
	cr_assert_eq(pgt_engine_run(&c, "old", "ahead.log", NULL), 1);
	char *log = pgt_file(&c, "ahead.log");
	cr_assert(strstr(log, "ahead of heap") && strstr(log, "make a new heap"), "%s", log);
	free(log);
	cr_assert_eq(pgt_last_txn(&c, "old"), before, "heap changed");

	pgt_exec(&c, "postgres", "SELECT pg_drop_replication_slot('ah_pgsync');"
	         "SELECT pg_copy_logical_replication_slot('saved', 'ah_pgsync');");
	e = pgt_engine(&c, "heap", "e3.log", NULL);
	pgt_exec(&c, "postgres", "INSERT INTO t VALUES (103, 'd');");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);
	log = pgt_file(&c, "e3.log");
	/* START_REPLICATION at the heap's LSN: the server starts decoding there
	 * although the slot is behind, so nothing is resent and nothing doubled */
	cr_assert(strstr(log, "1 transactions applied (0 already in the heap, skipped), 1 updates"),
	          "%s", log);
	free(log);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	pgt_stop(&c);
}

static void expect_error(pgt *c, const char *heap, const char *args, const char *needle)
{
	char path[300];
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	int existed = access(path, F_OK) == 0;
	cr_assert_eq(pgt_engine_run(c, heap, "err.log", args), 1, "for %s", needle);
	char *log = pgt_file(c, "err.log");
	size_t n = strlen(log);
	cr_assert(n > 0 && log[n - 1] == '\n', "%s", log);
	log[n - 1] = 0;
	char *last = strrchr(log, '\n') ? strrchr(log, '\n') + 1 : log;
	/* the error is the last line, one line */
	cr_assert(strstr(last, needle) && !strncmp(last, "ah-pgsync: ", 11),
	          "expected \"%s\" in the last line of: %s", needle, log);
	free(log);
	if (!existed)
		cr_assert_neq(access(path, F_OK), 0, "heap %s created on error", heap);
}

Test(pgsync, errors, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char args[300];
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);"
	         "CREATE ROLE weak LOGIN; CREATE DATABASE other;");
	pgt_exec(&c, "other", "CREATE TABLE t (id int PRIMARY KEY, v text);"
	         "ALTER TABLE t REPLICA IDENTITY FULL; CREATE PUBLICATION ah_pgsync FOR ALL TABLES;");
	expect_error(&c, "h1", "-d 'host=127.0.0.1 port=1 user=postgres'", "cannot connect to the server");
	expect_error(&c, "h1", NULL, "publication \"ah_pgsync\" does not exist");
	pgt_exec(&c, "postgres", "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;");
	expect_error(&c, "h1", NULL, "lacks REPLICA IDENTITY FULL");
	snprintf(args, sizeof args, "-d 'host=127.0.0.1 port=%d user=weak dbname=postgres'", c.port);
	expect_error(&c, "h1", args, "refuses a replication connection");
	pgt_exec(&c, "postgres", "ALTER TABLE t REPLICA IDENTITY FULL; INSERT INTO t VALUES (1, 'x');");
	pid_t e = pgt_engine(&c, "h1", "e.log", NULL);
	pgt_wait_heap(&c, "h1");
	pgt_catch_up(&c, "postgres", "h1");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);
	uint64_t before = pgt_last_txn(&c, "h1");
	snprintf(args, sizeof args, "-d 'host=127.0.0.1 port=%d user=postgres dbname=other'", c.port);
	expect_error(&c, "h1", args, "belongs to database postgres");
	expect_error(&c, "h1", "--slot other_slot", "follows slot ah_pgsync");
	expect_error(&c, "h2", NULL, "replication slot ah_pgsync already exists but heap");
	pgt_exec(&c, "postgres", "SELECT pg_drop_replication_slot('ah_pgsync');");
	expect_error(&c, "h1", NULL, "replication slot ah_pgsync does not exist");
	cr_assert_eq(pgt_last_txn(&c, "h1"), before, "heap changed");
	pgt_stop(&c);
}

/* verify goes on past a differing table: every table is reported, each
 * differing one with what differs, and the summary names them all. */
Test(pgsync, verify_reports_every_table, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char want[1024], heap[300];
	pgt_start(&c);
	pgt_exec(&c, "postgres",
		"CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text);\n"
		"CREATE TABLE c (id int PRIMARY KEY, v text);\n"
		"ALTER TABLE a REPLICA IDENTITY FULL; ALTER TABLE b REPLICA IDENTITY FULL;\n"
		"ALTER TABLE c REPLICA IDENTITY FULL;\n"
		"INSERT INTO a VALUES (1, 'x'), (2, 'y'); INSERT INTO b VALUES (1, 'x'), (2, 'y');\n"
		"INSERT INTO c VALUES (1, 'x');\n"
		"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	/* the engine is stopped: the heap keeps the old contents */
	pgt_exec(&c, "postgres", "INSERT INTO a VALUES (3, 'z'); UPDATE b SET v = 'w' WHERE id = 2;");
	snprintf(heap, sizeof heap, "%s/heap", c.dir);
	cr_assert_eq(pgt_sh("%s status %s | sed -n 's/^lsn //p' >%s/lsn", c.sync, heap, c.dir), 0);
	char *lsn = pgt_file(&c, "lsn");
	lsn[strcspn(lsn, "\n")] = 0;
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 1);
	snprintf(want, sizeof want,
		"public.a: table 3 rows, heap 2 rows at LSN %s: DIFFERENT (the heap has 1 row fewer)\n"
		"public.b: table 2 rows, heap 2 rows at LSN %s: DIFFERENT (same number of rows, other "
		"contents)\n"
		"public.c: table 1 rows, heap 1 rows at LSN %s: equal\n"
		"DIFFERENT: 2 of 3 tables differ from the database at LSN %s: public.a, public.b\n",
		lsn, lsn, lsn, lsn);
	char *out = pgt_file(&c, "verify.log");
	cr_assert_str_eq(out, want);
	free(out);
	free(lsn);
	pgt_stop(&c);
}

/* A publication whose stream would lack changes the heap needs is refused,
 * at the first run and at a restart: one that does not publish every kind
 * of change, one with a row filter, one dropped and re-created. */
Test(pgsync, publication_changes_refused, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);"
	         "ALTER TABLE t REPLICA IDENTITY FULL; INSERT INTO t VALUES (1, 'x');"
	         "CREATE PUBLICATION ah_pgsync FOR TABLE t WITH (publish = 'insert, update');");
	expect_error(&c, "h1", NULL, "publication ah_pgsync does not publish deletes, so the heap "
	             "would keep rows the tables no longer have: ALTER PUBLICATION ah_pgsync SET "
	             "(publish = 'insert, update, delete, truncate')");
	pgt_exec(&c, "postgres", "ALTER PUBLICATION ah_pgsync SET (publish = 'insert, update, delete, "
	         "truncate'); ALTER PUBLICATION ah_pgsync SET TABLE t WHERE (id > 0);");
	expect_error(&c, "h1", NULL, "publication ah_pgsync has a row filter or a column list on "
	             "table public.t");
	pgt_exec(&c, "postgres", "SELECT pg_drop_replication_slot('ah_pgsync') FROM pg_replication_slots;"
	         "ALTER PUBLICATION ah_pgsync SET TABLE t;");
	pid_t e = pgt_engine(&c, "h1", "e.log", NULL);
	pgt_wait_heap(&c, "h1");
	pgt_catch_up(&c, "postgres", "h1");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);
	uint64_t before = pgt_last_txn(&c, "h1");
	pgt_exec(&c, "postgres", "ALTER PUBLICATION ah_pgsync SET (publish = 'insert, update, delete');");
	expect_error(&c, "h1", NULL, "publication ah_pgsync does not publish truncates");
	pgt_exec(&c, "postgres", "DROP PUBLICATION ah_pgsync; CREATE PUBLICATION ah_pgsync FOR TABLE t;");
	expect_error(&c, "h1", NULL, "publication ah_pgsync was dropped and re-created since heap ");
	cr_assert_eq(pgt_last_txn(&c, "h1"), before, "heap changed");
	pgt_stop(&c);
}
