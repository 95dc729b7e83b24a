/*
 * tests/pg/test_loss.c - "nothing acknowledged is ever lost": a source
 * transaction the engine has received is in the heap before pg.lsn or the
 * slot passes it, whatever stops the stream.  Each test has its own cluster
 * (tests/pg/pgtest.h).
 */
#include "tests/pg/pgtest.h"

static const char *SETUP =
	"CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	"ALTER TABLE t REPLICA IDENTITY FULL;\n"
	"INSERT INTO t VALUES (1, 'one'), (2, 'two');\n"
	"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n";

/* Waits until the engine reports (standby status "write") that it has
 * received everything up to the current WAL position, and checks that the
 * heap has not committed it (flush is behind): the transactions are
 * received and buffered in an open group. */
static void wait_received_not_flushed(pgt *c)
{
	char q[512];
	char *lsn = pgt_sql(c, "postgres", "SELECT pg_current_wal_lsn()");
	snprintf(q, sizeof q, "SELECT coalesce(bool_or(write_lsn >= '%s'), false) FROM "
	         "pg_stat_replication WHERE application_name = 'ah-pgsync'", lsn);
	pgt_poll(c, "postgres", q, 60);
	snprintf(q, sizeof q, "SELECT bool_and(flush_lsn < '%s') FROM pg_stat_replication "
	         "WHERE application_name = 'ah-pgsync'", lsn);
	char *r = pgt_sql(c, "postgres", q);
	cr_assert_str_eq(r, "t", "the group was committed early: the test needs it open");
	free(r);
	free(lsn);
}

/* The walsender dies between a received Commit and its group commit: the
 * transaction must reach the heap with the flush made on reconnecting (the
 * heap's pg.lsn and the slot pass it), not be dropped as if it were open. */
Test(pgsync, connection_drop_keeps_received_commits, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP);
	pid_t e = pgt_engine(&c, "heap", "e.log", "--group-ms 600000");
	pgt_wait_heap(&c, "heap");
	pgt_exec(&c, "postgres", "INSERT INTO t VALUES (3, 'three');");
	pgt_exec(&c, "postgres", "UPDATE t SET v = 'uno' WHERE id = 1;");
	pgt_exec(&c, "postgres", "INSERT INTO t VALUES (4, 'four');");
	wait_received_not_flushed(&c);
	pgt_exec(&c, "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_replication "
	         "WHERE application_name = 'ah-pgsync';");
	pgt_wait_log(&c, "e.log", "reconnected, streaming from LSN", 60);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	char *s = pgt_read(&c, "heap", "public.t");
	cr_assert_str_eq(s, "1|1,uno|1\n2|2,two|1\n3|3,three|1\n4|4,four|1\n");
	free(s);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	/* after the restart the stream goes on from there: later changes
	 * retract rows the heap really has */
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	pgt_exec(&c, "postgres", "DELETE FROM t WHERE id = 4; UPDATE t SET v = 'eins' WHERE id = 1;");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	s = pgt_read(&c, "heap", "public.t");
	cr_assert_str_eq(s, "1|1,eins|1\n2|2,two|1\n3|3,three|1\n");
	free(s);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	pgt_stop(&c);
}
