/*
 * tests/pg/test_settings.c - the text forms ah-pgsync stores do not follow
 * the environment: hostile PGTZ, PGDATESTYLE, PGCLIENTENCODING, PGOPTIONS
 * and a conninfo that sets options and client_encoding leave the heap with
 * the documented forms (ARCHITECTURE.md section 12) for the first copy and
 * for streamed rows, also across a restart under another environment; a
 * heap whose recorded settings differ is refused.  Each test has its own
 * cluster (tests/pg/pgtest.h).
 */
#include "pgtest.h"

static const char *SETUP =
	"CREATE TABLE s (id int PRIMARY KEY, ts timestamptz, d date, iv interval, f float8,\n"
	"                b bytea, m money, tx text, r regclass);\n"
	"ALTER TABLE s REPLICA IDENTITY FULL;\n"
	"INSERT INTO s VALUES (1, '2024-06-01 12:00:00+00', '2024-06-01', '1 day 02:03:04', 1/3::float8,\n"
	"                      '\\x00ff', 12.5, 'caf\u00e9', 's');\n"
	"CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n";

static const char *ROW =
	"'2024-06-01 12:00:00+00', '2024-06-01', '1 day 02:03:04', 1/3::float8, '\\x00ff', 12.5, "
	"'caf\u00e9', 's'";

/* The documented text forms of ROW (DateStyle ISO, TimeZone UTC, IntervalStyle
 * postgres, extra_float_digits 3, bytea hex, lc_monetary C, search_path
 * pg_catalog, UTF8), as pgt_read prints them. */
#define FORMS "2024-06-01 12:00:00+00,2024-06-01,1 day 02:03:04,0.3333333333333333,\\\\x00ff," \
	"$12.50,caf\xc3\xa9,public.s"

/* Each of these would change a text form if it reached a connection. */
static const char *HOSTILE_A =
	"export PGTZ=America/New_York PGDATESTYLE='SQL, DMY' PGCLIENTENCODING=LATIN1 "
	"PGOPTIONS='-c extra_float_digits=0 -c bytea_output=escape -c IntervalStyle=sql_standard "
	"-c search_path=public';";
/* Another environment for the restart, with values the server refuses. */
static const char *HOSTILE_B =
	"export PGTZ=Not/AZone PGDATESTYLE=garbage PGCLIENTENCODING=garbage "
	"PGOPTIONS='-c extra_float_digits=1 -c IntervalStyle=iso_8601 -c DateStyle=German';";

Test(pgsync, settings_ignore_environment, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char sql[512];
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP);
	/* the conninfo sets them too */
	strcat(c.conn, " options=-c\\ TimeZone=Asia/Tokyo\\ -c\\ bytea_output=escape "
	       "client_encoding=LATIN1");
	c.env = HOSTILE_A;
	pid_t e = pgt_engine(&c, "heap", "e1.log", NULL);
	pgt_wait_heap(&c, "heap");
	snprintf(sql, sizeof sql, "INSERT INTO s VALUES (2, %s), (3, %s);", ROW, ROW);
	pgt_exec(&c, "postgres", sql);
	pgt_catch_up(&c, "postgres", "heap");
	char *s = pgt_read(&c, "heap", "public.s");
	cr_assert_str_eq(s, "1|1," FORMS "|1\n2|2," FORMS "|1\n3|3," FORMS "|1\n");
	free(s);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));

	/* restart elsewhere: the copied row 1 and the streamed row 2 are
	 * retracted with the forms they were stored in */
	kill(e, SIGKILL);
	cr_assert_eq(pgt_wait_pid(e), 128 + SIGKILL);
	c.env = HOSTILE_B;
	e = pgt_engine(&c, "heap", "e2.log", NULL);
	pgt_exec(&c, "postgres", "UPDATE s SET id = 10 WHERE id = 1; DELETE FROM s WHERE id = 2;");
	snprintf(sql, sizeof sql, "INSERT INTO s VALUES (4, %s);", ROW);
	pgt_exec(&c, "postgres", sql);
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	s = pgt_read(&c, "heap", "public.s");
	cr_assert_str_eq(s, "3|3," FORMS "|1\n4|4," FORMS "|1\n10|10," FORMS "|1\n");
	free(s);
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	pgt_stop(&c);
}

/* A heap made with other text settings (an older ah-pgsync, or one that
 * fixed other values) is refused at restart, naming the setting, and left
 * as it was. */
Test(pgsync, settings_differ_refused, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char path[300];
	pgt_start(&c);
	pgt_exec(&c, "postgres", SETUP);
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	pgt_catch_up(&c, "postgres", "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));

	/* rewrite the record as if the heap had been made with TimeZone=EST5EDT */
	ah_heap *h;
	ah_txn *t;
	const void *p;
	size_t len;
	ah_open_opts o = { .size = sizeof o };
	snprintf(path, sizeof path, "%s/heap", c.dir);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_source_get(t, "pg.settings", &p, &len), 0);
	char *set = strndup(p, len), *tz = strstr(set, "TimeZone=UTC\n");
	cr_assert_str_eq(set, "DateStyle=ISO, MDY\nTimeZone=UTC\nIntervalStyle=postgres\n"
	                 "extra_float_digits=3\nbytea_output=hex\nlc_monetary=C\n"
	                 "search_path=pg_catalog\nclient_encoding=UTF8\n");
	char other[600];
	snprintf(other, sizeof other, "%.*sTimeZone=EST5EDT\n%s", (int)(tz - set), set,
	         tz + strlen("TimeZone=UTC\n"));
	cr_assert_eq(ah_source_put(t, "pg.settings", other, strlen(other)), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	free(set);

	uint64_t before = pgt_last_txn(&c, "heap");
	cr_assert_eq(pgt_engine_run(&c, "heap", "err.log", NULL), 1);
	char *log = pgt_file(&c, "err.log");
	char want[1200];
	snprintf(want, sizeof want, "ah-pgsync: heap %s was made with the text setting "
	         "TimeZone='EST5EDT', this connection has TimeZone='UTC': values would print "
	         "otherwise and its rows could not be retracted; run the ah-pgsync that made it, or "
	         "make a new heap (delete %s)\n", path, path);
	cr_assert(strstr(log, want), "%s", log);
	free(log);
	cr_assert_eq(pgt_last_txn(&c, "heap"), before, "heap changed");
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 1);
	log = pgt_file(&c, "verify.log");
	cr_assert(strstr(log, "was made with the text setting TimeZone='EST5EDT'"), "%s", log);
	free(log);
	pgt_stop(&c);
}
