/*
 * tests/pg/test_loss.c - "nothing acknowledged is ever lost": a source
 * transaction the engine has received is in the heap before pg.lsn or the
 * slot passes it, whatever stops the stream.  Each test has its own cluster
 * (tests/pg/pgtest.h).
 */
#include "pgtest.h"

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
	char *lsn = pgt_wal_lsn(c, "postgres");
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

/* The file offset of the last chunk of arrangement name (ah-dump chunks). */
static uint64_t last_chunk_offset(pgt *c, const char *heap, const char *name, int *nchunks)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s/ah-dump %s/%s chunks %s --json | python3 -c 'import json,sys; "
	         "d = json.load(sys.stdin)[\"chunks\"]; print(len(d), d[-1][\"file_offset\"])'",
	         getenv("AH_BUILD"), c->dir, heap, name);
	FILE *p = popen(cmd, "r");
	uint64_t off = 0;
	cr_assert(p);
	cr_assert_eq(fscanf(p, "%d %" SCNu64, nchunks, &off), 2);
	pclose(p);
	return off;
}

/* Flips a bit of byte off of the heap file; returns the 4 bytes at off
 * (native order) before the flip. */
static uint32_t flip_byte(pgt *c, const char *heap, uint64_t off, uint8_t mask)
{
	char path[300];
	uint8_t b[4];
	uint32_t v;
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	FILE *f = fopen(path, "r+b");
	cr_assert(f);
	cr_assert_eq(fseeko(f, (off_t)off, SEEK_SET), 0);
	cr_assert_eq(fread(b, 1, 4, f), 4);
	memcpy(&v, b, 4);
	b[0] ^= mask;
	cr_assert_eq(fseeko(f, (off_t)off, SEEK_SET), 0);
	cr_assert_eq(fwrite(b, 1, 1, f), 1);
	cr_assert_eq(fclose(f), 0);
	return v;
}

/* A chunk the cursor reaches by stepping is damaged: verify reports the
 * error (not a difference) and a TRUNCATE fails without committing a
 * retraction of part of the table. */
Test(pgsync, damaged_heap_fails_truncate_and_verify, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	int n;
	pgt_start(&c);
	pgt_exec(&c, "postgres", "CREATE TABLE t (id int PRIMARY KEY, v text);\n"
	         "ALTER TABLE t REPLICA IDENTITY FULL;\n"
	         "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 30000) g;\n"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	uint64_t off = last_chunk_offset(&c, "heap", "public.t", &n);
	cr_assert_geq(n, 2, "the table needs more than one chunk");
	/* A byte in the last chunk's first page: the cursor opens the first
	 * chunk of the batch, so only a step into the last chunk (which checks
	 * it whole) can see the damage. */
	uint64_t at = off + 100;
	flip_byte(&c, "heap", at, 0x40);

	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 1);
	char *log = pgt_file(&c, "verify.log");
	cr_assert(strstr(log, "ah-pgsync verify: reading public.t: ") && !strstr(log, "DIFFERENT"),
	          "%s", log);
	free(log);

	e = pgt_engine(&c, "heap", "e2.log", NULL);
	pgt_exec(&c, "postgres", "TRUNCATE t;");
	cr_assert_eq(pgt_wait_pid(e), 1);
	log = pgt_file(&c, "e2.log");
	cr_assert(strstr(log, "reading public.t for TRUNCATE: "), "%s", log);
	free(log);
	flip_byte(&c, "heap", at, 0x40);
	cr_assert_eq(pgt_rows(&c, "heap", "public.t"), 30000);
	pgt_stop(&c);
}

/* Under synchronous_commit=off a commit returns before its WAL is written
 * (here up to wal_writer_delay, 10 s, later): pgt_catch_up must still wait
 * for it, as tools/demo.sh does after pgbench (which runs so). */
Test(pgsync, catch_up_covers_async_commits, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	pgt_start_opts(&c, "-c wal_writer_delay=10000");
	pgt_exec(&c, "postgres", SETUP);
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_catch_up(&c, "postgres", "heap");
	pgt_exec(&c, "postgres", "SET synchronous_commit = off; INSERT INTO t VALUES (3, 'async');");
	pgt_catch_up(&c, "postgres", "heap");
	char *s = pgt_read(&c, "heap", "public.t");
	cr_assert_str_eq(s, "1|1,one|1\n2|2,two|1\n3|3,async|1\n");
	free(s);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	pgt_stop(&c);
}
