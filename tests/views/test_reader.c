/*
 * tests/views/test_reader.c - a second reader (ah-pgsync reader) beside the
 * engine, against PostgreSQL 15: it keeps its own copies of the heap's
 * views behind the writer, killed with SIGKILL in the middle of a pgbench
 * run and resumed from its stored position; its read holds stop the
 * writer's compaction exactly at its position; a reader whose lease ran
 * out while the tables moved on is released (ah-dump holds says so) and
 * refused at restart; `recompute` equals the stored views.
 */
#include "tests/pg/pgtest.h"

#include "tests/views/pgbench_views.h"

#define VIEWS PGBENCH_VIEWS

static const char *TABLES[] = { "public.pgbench_accounts", "public.pgbench_branches",
	                        "public.pgbench_history", "public.pgbench_tellers" };
static const char *VNAMES[] = { "acct_by_branch", "teller_branch", "branch_delta" };

static void setup(pgt *c)
{
	char path[300];
	pgt_start(c);
	cr_assert_eq(pgt_sh("PGHOST=127.0.0.1 PGPORT=%d PGUSER=postgres " PGT_BIN "/pgbench -i -q "
	                    "-s 1 postgres >/dev/null 2>&1", c->port), 0);
	pgt_exec(c, "postgres", "ALTER TABLE pgbench_accounts REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_branches REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_tellers REPLICA IDENTITY FULL;"
	         "ALTER TABLE pgbench_history REPLICA IDENTITY FULL;"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;");
	snprintf(path, sizeof path, "%s/views.sql", c->dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(VIEWS, f);
	fclose(f);
}

/* Starts `ah-pgsync reader HEAP ARGS`, stderr to dir/LOG. */
static pid_t reader(pgt *c, const char *log, const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "exec %s reader %s/heap %s 2>%s/%s", c->sync, c->dir, args, c->dir,
	         log);
	return pgt_spawn(cmd);
}

typedef struct hstate {
	uint64_t views_upper, pos, since[4], hold[4];
	int have_pos, nholds, released;
	const char *hold_name;
} hstate;

static int on_hold(const ah_hold_info *h, void *user)
{
	hstate *s = user;
	if (strcmp(h->name, s->hold_name))
		return 0;
	for (int i = 0; i < 4; i++)
		if (!strcmp(h->arrangement, TABLES[i])) {
			s->hold[i] = h->frontier;
			s->nholds++;
			s->released += h->released;
		}
	return 0;
}

/* Reader R's views' upper (all equal), its stored position, its holds and
 * the tables' since. */
static hstate state(pgt *c, const char *r)
{
	char path[300], name[80], hold[80];
	ah_heap *h;
	ah_txn *t;
	hstate s = { .hold_name = hold };
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	const void *p;
	size_t len;

	snprintf(hold, sizeof hold, "reader.%s", r);
	snprintf(path, sizeof path, "%s/heap", c->dir);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (int i = 0; i < 3; i++) {
		ah_arrangement_info ai;
		snprintf(name, sizeof name, "%s.view.%s", r, VNAMES[i]);
		cr_assert_eq(ah_arrangement_info_get(t, name, &ai), 0, "%s", name);
		if (i == 0)
			s.views_upper = ai.upper;
		cr_assert_eq(ai.upper, s.views_upper, "%s: the reader's views move together", name);
	}
	for (int i = 0; i < 4; i++) {
		ah_arrangement_info ai;
		cr_assert_eq(ah_arrangement_info_get(t, TABLES[i], &ai), 0);
		s.since[i] = ai.since;
	}
	if (ah_source_get(t, hold, &p, &len) == 0) {
		cr_assert_eq(len, 8);
		for (int b = 0; b < 8; b++)
			s.pos |= (uint64_t)((const uint8_t *)p)[b] << (8 * b);
		s.have_pos = 1;
	}
	cr_assert_eq(ah_hold_foreach(t, NULL, on_hold, &s), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	return s;
}

/* The heap's LSN as text (malloc), from ah-pgsync status. */
static char *heap_lsn(pgt *c)
{
	char cmd[700], *out = calloc(1, 64);
	snprintf(cmd, sizeof cmd, "%s status %s/heap | sed -n 's/^lsn //p'", c->sync, c->dir);
	FILE *f = popen(cmd, "r");
	cr_assert(f && fgets(out, 64, f));
	pclose(f);
	out[strcspn(out, "\n")] = 0;
	return out;
}

/* The reader's copy of every view equals the engine's. */
static void same_views(pgt *c, const char *r)
{
	char name[80], mine[80];
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof name, "view.%s", VNAMES[i]);
		snprintf(mine, sizeof mine, "%s.view.%s", r, VNAMES[i]);
		char *a = pgt_read(c, "heap", name), *b = pgt_read(c, "heap", mine);
		cr_assert_str_eq(b, a, "%s differs from %s", mine, name);
		cr_assert_neq(a[0], 0, "%s is empty", name);
		free(a);
		free(b);
	}
}

Test(views, second_reader_behind_with_holds, .timeout = 240, .fini = pgt_fini)
{
	pgt c;
	char args[400];
	setup(&c);
	snprintf(args, sizeof args, "--views %s/views.sql", c.dir);
	pid_t e = pgt_engine(&c, "heap", "e.log", args);
	pgt_wait_heap(&c, "heap");
	pid_t r = reader(&c, "r1a.log", "--name r1 --interval 20");
	pgt_wait_log(&c, "r1a.log", "3 views computed at LSN", 30);
	cr_assert_eq(pgt_sh("cd %s && PGHOST=127.0.0.1 PGPORT=%d PGUSER=postgres " PGT_BIN
	                    "/pgbench -n -c 2 -j 2 -T 5 postgres >pgbench.log 2>&1 &", c.dir, c.port), 0);
	sleep(2);
	kill(r, SIGKILL);
	cr_assert_eq(pgt_wait_pid(r), 128 + SIGKILL);
	/* killed: views, position and holds agree */
	hstate s = state(&c, "r1");
	cr_assert(s.have_pos);
	cr_assert_eq(s.pos, s.views_upper);
	cr_assert_eq(s.nholds, 4, "a hold on each of the 4 tables the views read");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(s.hold[i], s.pos - 1, "%s", TABLES[i]);
	/* the writer goes on, and its compaction stops at the hold exactly */
	sleep(2);
	hstate s2 = state(&c, "r1");
	cr_assert_eq(s2.pos, s.pos, "the killed reader did not move");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(s2.since[i], s.pos - 1, "%s: since %" PRIu64 ", hold %" PRIu64, TABLES[i],
		             s2.since[i], s.pos - 1);
	/* resumed: catches up with the end of the run */
	for (int i = 0; i < 100 && pgt_sh("pgrep -f 'pgbench -n -c 2' >/dev/null") == 0; i++)
		usleep(100000);
	pgt_catch_up(&c, "postgres", "heap");
	char *l1 = heap_lsn(&c), ua[600];
	snprintf(ua, sizeof ua, "--name r1 --interval 20 --until-lsn %s", l1);
	int rrc = pgt_wait_pid(reader(&c, "r1b.log", ua));
	if (rrc != 0)
		cr_assert_fail("reader status %d: %s", rrc, pgt_file(&c, "r1b.log"));
	char *log = pgt_file(&c, "r1b.log");
	cr_assert(strstr(log, "3 views caught up at LSN"), "%s", log);
	free(log);
	same_views(&c, "r1");
	/* the engine's views equal PostgreSQL's, and a recomputation */
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));
	cr_assert_eq(pgt_verify(&c, "postgres", "heap"), 0, "%s", pgt_file(&c, "verify.log"));
	cr_assert_eq(pgt_sh("%s recompute %s/heap >%s/rc.log 2>&1", c.sync, c.dir, c.dir), 0, "%s",
	             pgt_file(&c, "rc.log"));
	log = pgt_file(&c, "rc.log");
	cr_assert(strstr(log, "every stored view equals its recomputation"), "%s", log);
	cr_assert(strstr(log, "view.branch_delta: stored 1 rows, recomputed 1 rows: equal"), "%s", log);
	free(log);
	e = pgt_engine(&c, "heap", "e2.log", NULL);

	/* a reader with a 1 ms lease, at the same position as r1, then gone */
	snprintf(ua, sizeof ua, "--name r2 --lease 1 --until-lsn %s", l1);
	cr_assert_eq(pgt_wait_pid(reader(&c, "r2a.log", ua)), 0, "%s", pgt_file(&c, "r2a.log"));
	usleep(50000);
	/* new writes: since stays at r1's live hold (r2's expired one at the
	 * same place is not passed yet, so not released) */
	pgt_exec(&c, "postgres", "UPDATE pgbench_branches SET bbalance = bbalance + 7 WHERE bid = 1");
	pgt_catch_up(&c, "postgres", "heap");
	s = state(&c, "r2");
	cr_assert_eq(s.nholds, 4);
	cr_assert_eq(s.released, 0);
	{
		/* r1 and r2 each stepped to the tables' upper of their moment,
		 * r2's no earlier (an idle engine moves pg.lsn on): since is at
		 * r1's live hold, not past r2's expired one */
		hstate q1 = state(&c, "r1");
		cr_assert_leq(q1.pos, s.pos);
		for (int i = 0; i < 4; i++)
			cr_assert_eq(s.since[i], q1.pos - 1, "%s", TABLES[i]);
	}
	/* r1 moves on; the next writes pass r2's expired hold: released */
	char *l2 = heap_lsn(&c);
	snprintf(ua, sizeof ua, "--name r1 --until-lsn %s", l2);
	cr_assert_eq(pgt_wait_pid(reader(&c, "r1c.log", ua)), 0, "%s", pgt_file(&c, "r1c.log"));
	pgt_exec(&c, "postgres", "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1");
	pgt_catch_up(&c, "postgres", "heap");
	s = state(&c, "r2");
	cr_assert_eq(s.released, 4, "r2's holds released once since passed them");
	hstate s1 = state(&c, "r1");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(s1.since[i], s1.pos - 1, "since stops at r1's hold, past r2's: %s",
		             TABLES[i]);
	cr_assert_eq(pgt_sh("$(dirname %s)/ah-dump %s/heap holds >%s/holds.txt 2>&1", c.sync, c.dir,
	                    c.dir), 0);
	log = pgt_file(&c, "holds.txt");
	cr_assert(strstr(log, "reader.r2") && strstr(log, "released"), "%s", log);
	free(log);
	/* r2 comes back too late: one line naming the fix, nothing written */
	cr_assert_eq(pgt_wait_pid(reader(&c, "r2b.log", "--name r2")), 1);
	log = pgt_file(&c, "r2b.log");
	cr_assert(strstr(log, "its views must be computed anew: start it again with --reset"), "%s",
	          log);
	cr_assert_eq(strchr(log, '\n') - log + 1, (long)strlen(log), "one line: %s", log);
	free(log);
	hstate s3 = state(&c, "r2");
	cr_assert_eq(s3.pos, s.pos);
	/* --reset computes its views anew, and it holds again */
	char *l3 = heap_lsn(&c);
	snprintf(ua, sizeof ua, "--name r2 --reset --until-lsn %s", l3);
	rrc = pgt_wait_pid(reader(&c, "r2c.log", ua));
	if (rrc != 0)
		cr_assert_fail("reader status %d: %s", rrc, pgt_file(&c, "r2c.log"));
	same_views(&c, "r2");
	s3 = state(&c, "r2");
	cr_assert_eq(s3.released, 0);
	cr_assert_eq(s3.nholds, 4);
	free(l3);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	free(l1);
	free(l2);
	pgt_stop(&c);
}

Test(views, reader_bad_input, .timeout = 120, .fini = pgt_fini)
{
	pgt c;
	char args[900];
	setup(&c);
	/* copies a killed first run left behind go at the next first run; one
	 * of a live process (a concurrent first run) stays */
	int dead = 4000000 + (int)(getpid() % 100000);
	cr_assert_neq(kill(dead, 0), 0);
	pgt_sh("cd %s && : >heap.creating.%d && : >heap.creating.%d-lock && : >heap.creating.%d",
	       c.dir, dead, dead, (int)getpid());
	/* a heap without views, and no file: refused */
	pid_t e = pgt_engine(&c, "heap", "e.log", NULL);
	pgt_wait_heap(&c, "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0);
	cr_assert_neq(pgt_sh("test -e %s/heap.creating.%d", c.dir, dead), 0);
	cr_assert_neq(pgt_sh("test -e %s/heap.creating.%d-lock", c.dir, dead), 0);
	cr_assert_eq(pgt_sh("test -e %s/heap.creating.%d", c.dir, (int)getpid()), 0);
	cr_assert_eq(pgt_wait_pid(reader(&c, "a.log", "--name r1")), 1);
	char *log = pgt_file(&c, "a.log");
	cr_assert_str_eq(log, "ah-pgsync reader r1: the heap has no views: give the reader its own "
	                      "with --views FILE\n");
	free(log);
	cr_assert_eq(pgt_wait_pid(reader(&c, "b.log", "--name BAD")), 2);
	log = pgt_file(&c, "b.log");
	cr_assert_str_eq(log, "ah-pgsync reader: --name BAD: a reader name is 1 to 13 of [a-z0-9_]\n");
	free(log);
	/* its own file, types from the database: works on a heap without views */
	snprintf(args, sizeof args, "--name r1 -d '%s' --views %s/views.sql --until-lsn 0/0", c.conn,
	         c.dir);
	cr_assert_eq(pgt_wait_pid(reader(&c, "c.log", args)), 0, "%s", pgt_file(&c, "c.log"));
	char *s = pgt_read(&c, "heap", "r1.view.acct_by_branch");
	cr_assert_str_eq(s, "1|100000,0,0,0|1\n");
	free(s);
	/* another file at a restart: refused */
	pgt_sh("echo 'CREATE VIEW x AS SELECT bid, count(*) FROM pgbench_accounts GROUP BY bid;' "
	       ">%s/other.sql", c.dir);
	snprintf(args, sizeof args, "--name r1 --views %s/other.sql", c.dir);
	cr_assert_eq(pgt_wait_pid(reader(&c, "d.log", args)), 1);
	log = pgt_file(&c, "d.log");
	cr_assert(strstr(log, "reader r1 was started with other views than"), "%s", log);
	free(log);
	pgt_stop(&c);
}
