/*
 * tests/pg/test_new_tables.c - tables that are new to the stream
 * (tools/pg/follow.c): one created after the slot in a FOR ALL TABLES
 * publication is followed, also through kill -9 and restart; one whose
 * earlier rows may be missing from the stream (it existed before the slot,
 * or was unlogged) is refused with one line that names the WAL the slot
 * holds, again on every restart, and the heap keeps what it had.  Each test
 * has its own cluster (tests/pg/pgtest.h).
 */
#include <regex.h>

#include "pgtest.h"

/* The uppers of every arrangement in `ah-pgsync status`, all equal to the
 * stored LSN + 1 (ARCHITECTURE.md section 12). */
static void check_uppers(pgt *c, const char *heap, int ntables)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "%s status %s/%s >%s/status.log", c->sync, c->dir, heap, c->dir);
	cr_assert_eq(pgt_sh("%s", cmd), 0);
	char *st = pgt_file(c, "status.log"), *p = st;
	unsigned hi, lo;
	cr_assert_eq(sscanf(st, "lsn %X/%X", &hi, &lo), 2, "%s", st);
	uint64_t want = ((uint64_t)hi << 32 | lo) + 1;
	int n = 0;
	while ((p = strstr(p, ", upper "))) {
		uint64_t up = strtoull(p + 8, &p, 10);
		cr_assert_eq(up, want, "%s", st);
		n++;
	}
	cr_assert_eq(n, ntables, "%s", st);
	free(st);
}

Test(pgsync, new_table_followed, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	         "ALTER TABLE t REPLICA IDENTITY FULL; INSERT INTO t VALUES (1, 'one');\n"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	pid_t e = pgt_engine(&c, "heap", "e1.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "CREATE TABLE n (id int PRIMARY KEY, v text);\n"
	         "ALTER TABLE n REPLICA IDENTITY FULL;\n"
	         "INSERT INTO n VALUES (1, 'a'), (2, 'b');\n"
	         "BEGIN; INSERT INTO n VALUES (3, 'c'); UPDATE t SET v = 'uno' WHERE id = 1; COMMIT;\n");
	pgt_catch_up(&c, "postgres", "heap");
	char *log = pgt_file(&c, "e1.log");
	cr_assert(strstr(log, "ah-pgsync: following table public.n (relid "), "%s", log);
	free(log);
	check_uppers(&c, "heap", 2);
	kill(e, SIGKILL);
	cr_assert_eq(pgt_wait_pid(e), 128 + SIGKILL);

	/* while it is down: changes of the followed table, and another table
	 * created and filled in one transaction */
	pgt_exec(&c, "postgres", "UPDATE n SET v = 'bb' WHERE id = 2; DELETE FROM n WHERE id = 1;\n"
	         "BEGIN; CREATE TABLE n2 (k text PRIMARY KEY, x int);\n"
	         "ALTER TABLE n2 REPLICA IDENTITY FULL; INSERT INTO n2 VALUES ('z', 26), ('y', NULL);\n"
	         "COMMIT;\n");
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	pgt_exec(&c, "postgres", "DELETE FROM n2 WHERE k = 'y'; INSERT INTO n VALUES (4, 'd');");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	log = pgt_file(&c, "e2.log");
	cr_assert(strstr(log, "ah-pgsync: following table public.n2 (relid "), "%s", log);
	cr_assert(!strstr(log, "following table public.n "), "%s", log);
	free(log);

	char *s = pgt_read(&c, "heap", "public.n");
	cr_assert_str_eq(s, "2|2,bb|1\n3|3,c|1\n4|4,d|1\n");
	free(s);
	s = pgt_read(&c, "heap", "public.n2");
	cr_assert_str_eq(s, "z|z,26|1\n");
	free(s);
	s = pgt_read(&c, "heap", "public.t");
	cr_assert_str_eq(s, "1|1,uno|1\n");
	free(s);
	check_uppers(&c, "heap", 3);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	log = pgt_file(&c, "verify.log");
	cr_assert(strstr(log, "verified: 3 tables, 5 rows equal"), "%s", log);
	free(log);
	pgt_stop(&c);
}

/* The last line of log is the one-line refusal of table name with its
 * cause, and names the WAL the slot holds and how to release it. */
static void expect_refusal(pgt *c, const char *log_name, const char *cause)
{
	char *log = pgt_file(c, log_name);
	size_t n = strlen(log);
	cr_assert(n > 0 && log[n - 1] == '\n', "%s", log);
	log[n - 1] = 0;
	char *last = strrchr(log, '\n') ? strrchr(log, '\n') + 1 : log;
	cr_assert(strstr(last, cause), "expected \"%s\" in the last line of:\n%s", cause, log);
	regex_t re;
	cr_assert_eq(regcomp(&re, "^ah-pgsync: table .*: make a new heap and slot to include it; "
	                     "until then slot ah_pgsync holds [0-9]+\\.[0-9] MB of WAL on the server "
	                     "\\(SELECT pg_drop_replication_slot\\('ah_pgsync'\\) releases it, and "
	                     "this heap cannot resume after that\\)$", REG_EXTENDED), 0);
	cr_assert_eq(regexec(&re, last, 0, NULL, 0), 0, "%s", last);
	regfree(&re);
	free(log);
}

/* A table that existed before the slot joins a FOR TABLE publication:
 * its earlier rows are not in the stream, so the engine stops, and stops
 * again at every restart; the heap keeps what it had, and the rows of the
 * transactions before are in it. */
Test(pgsync, preexisting_table_refused, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	         "CREATE TABLE t2 (id int PRIMARY KEY, v text);\n"
	         "ALTER TABLE t REPLICA IDENTITY FULL; ALTER TABLE t2 REPLICA IDENTITY FULL;\n"
	         "INSERT INTO t VALUES (1, 'one'); INSERT INTO t2 VALUES (1, 'before');\n"
	         "CREATE PUBLICATION ah_pgsync FOR TABLE t;\n");
	pid_t e = pgt_engine(&c, "heap", "e1.log", "--group-ms 600000");
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "INSERT INTO t VALUES (2, 'two');\n"
	         "ALTER PUBLICATION ah_pgsync ADD TABLE t2;\n"
	         "BEGIN; INSERT INTO t VALUES (3, 'three'); INSERT INTO t2 VALUES (2, 'after'); COMMIT;\n");
	cr_assert_eq(pgt_wait_pid(e), 1, "%s", pgt_file(&c, "e1.log"));
	expect_refusal(&c, "e1.log", "ah-pgsync: table public.t2 is new to the stream but it joined "
	               "publication ah_pgsync after the heap was made, and that publication is not "
	               "FOR ALL TABLES, so its earlier rows are missing");
	/* the transaction before it is in the heap, the refused one is not */
	char *s = pgt_read(&c, "heap", "public.t");
	cr_assert_str_eq(s, "1|1,one|1\n2|2,two|1\n");
	free(s);
	cr_assert_eq(pgt_engine_run(&c, "heap", "e2.log", NULL), 1);
	expect_refusal(&c, "e2.log", "ah-pgsync: table public.t2 is new to the stream but it joined");
	s = pgt_read(&c, "heap", "public.t");
	cr_assert_str_eq(s, "1|1,one|1\n2|2,two|1\n");
	free(s);
	pgt_stop(&c);
}

/* FOR ALL TABLES: a table that existed before the slot but was unlogged
 * (so not copied), and one created after it unlogged, are refused once set
 * LOGGED: their rows written while unlogged are in no WAL. */
Test(pgsync, unlogged_tables_refused, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	         "CREATE UNLOGGED TABLE u1 (id int PRIMARY KEY);\n"
	         "ALTER TABLE t REPLICA IDENTITY FULL; ALTER TABLE u1 REPLICA IDENTITY FULL;\n"
	         "INSERT INTO u1 VALUES (1);\n"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	pid_t e = pgt_engine(&c, "heap", "e1.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "CREATE UNLOGGED TABLE u2 (id int PRIMARY KEY);\n"
	         "ALTER TABLE u2 REPLICA IDENTITY FULL; INSERT INTO u2 VALUES (1);\n"
	         "ALTER TABLE u2 SET LOGGED; INSERT INTO u2 VALUES (2);\n");
	cr_assert_eq(pgt_wait_pid(e), 1, "%s", pgt_file(&c, "e1.log"));
	expect_refusal(&c, "e1.log", "ah-pgsync: table public.u2 is new to the stream but it is not "
	               "a permanent ordinary table that was never rewritten");
	pgt_exec(&c, "postgres", "DROP TABLE u2; SELECT pg_drop_replication_slot('ah_pgsync');");
	pgt_sh("rm -f %s/heap %s/heap-lock", c.dir, c.dir);
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "ALTER TABLE u1 SET LOGGED; INSERT INTO u1 VALUES (2);\n");
	cr_assert_eq(pgt_wait_pid(e), 1, "%s", pgt_file(&c, "e2.log"));
	expect_refusal(&c, "e2.log", "ah-pgsync: table public.u1 is new to the stream but it existed "
	               "before the slot (relid ");
	pgt_stop(&c);
}

/* A table whose name holds a newline and a backslash: the engine's
 * messages name it escaped, on one line (tools/pg/sink.h pg_disp). */
Test(pgsync, odd_table_names_escaped, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	         "ALTER TABLE t REPLICA IDENTITY FULL; INSERT INTO t VALUES (1, 'one');\n"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	pid_t e = pgt_engine(&c, "heap", "e1.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "CREATE TABLE \"odd\nna\\me\" (id int PRIMARY KEY);\n"
	         "ALTER TABLE \"odd\nna\\me\" REPLICA IDENTITY FULL;\n"
	         "INSERT INTO \"odd\nna\\me\" VALUES (7);\n");
	pgt_catch_up(&c, "postgres", "heap");
	char *log = pgt_file(&c, "e1.log");
	cr_assert(strstr(log, "ah-pgsync: following table public.odd\\nna\\\\me (relid "),
	          "%s", log);
	cr_assert(!strstr(log, "odd\nna"), "%s", log);
	free(log);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e1.log"));
	pgt_stop(&c);
}
