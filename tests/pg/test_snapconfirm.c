/*
 * tests/pg/test_snapconfirm.c - `ah-pgsync --confirm-after-snapshot DIR`
 * (ARCHITECTURE.md sections 8 and 12): the slot is confirmed only up to the
 * pg.lsn of this heap's newest whole snapshot in DIR, so after the heap is
 * lost a heap restored from DIR (ah-snapshot restore) resumes from the
 * snapshot's LSN and the slot still has the WAL after it.  pgbench traffic
 * (-t: a fixed number of transactions); every check is exact, the waits
 * only poll.  Each test has its own cluster (tests/pg/pgtest.h).
 */
#include "pgtest.h"

static void pgbench_setup(pgt *c)
{
	cr_assert_eq(pgt_sh("pgbench -q -i -s 1 'host=127.0.0.1 port=%d user=postgres dbname="
	                    "postgres' >%s/pgbench-i.log 2>&1", c->port, c->dir), 0);
	pgt_exec(c, "postgres", "ALTER TABLE pgbench_accounts REPLICA IDENTITY FULL;\n"
	         "ALTER TABLE pgbench_branches REPLICA IDENTITY FULL;\n"
	         "ALTER TABLE pgbench_tellers REPLICA IDENTITY FULL;\n"
	         "ALTER TABLE pgbench_history REPLICA IDENTITY FULL;\n"
	         "CREATE PUBLICATION ah_pgsync FOR ALL TABLES;\n");
}

static void pgbench_run(pgt *c, int txns)
{
	cr_assert_eq(pgt_sh("pgbench -n -c 2 -t %d 'host=127.0.0.1 port=%d user=postgres dbname="
	                    "postgres' >%s/pgbench.log 2>&1", txns, c->port, c->dir), 0,
	             "%s", pgt_file(c, "pgbench.log"));
}

/* The slot's confirmed_flush_lsn (malloc). */
static char *slot_confirmed(pgt *c)
{
	return pgt_sql(c, "postgres", "SELECT confirmed_flush_lsn FROM pg_replication_slots "
	               "WHERE slot_name = 'ah_pgsync'");
}

/* Waits until the heap holds every commit so far and the engine has told
 * the server so (the write field of a standby status update: the flush
 * field travels in the same message), so the slot has seen every status
 * the engine will send for that position. */
static void caught_up_and_reported(pgt *c, const char *heap)
{
	char q[400];
	char *lsn = pgt_wal_lsn(c, "postgres");
	cr_assert_eq(pgt_sh("%s wait %s/%s %s 60 >/dev/null", c->sync, c->dir, heap, lsn), 0);
	snprintf(q, sizeof q, "SELECT coalesce(bool_or(write_lsn >= '%s'), false) FROM "
	         "pg_stat_replication WHERE application_name = 'ah-pgsync'", lsn);
	pgt_poll(c, "postgres", q, 60);
	free(lsn);
}

/* 1 if LSN a <= b, by the server's comparison. */
static int lsn_le(pgt *c, const char *a, const char *b)
{
	char q[200];
	snprintf(q, sizeof q, "SELECT '%s'::pg_lsn <= '%s'::pg_lsn", a, b);
	char *r = pgt_sql(c, "postgres", q);
	int le = !strcmp(r, "t");
	free(r);
	return le;
}

typedef struct newest {
	int n;
	char id[AH_SNAPSHOT_ID_MAX];
	char lsn[32];
} newest;

static int newest_one(const ah_snapshot_info *s, void *user)
{
	newest *w = user;
	if (s->status != 0)
		return 0;
	for (size_t i = 0; i < s->nsources; i++)
		if (!strcmp(s->sources[i].name, "pg.lsn")) {
			cr_assert_lt(s->sources[i].len, sizeof w->lsn);
			memcpy(w->lsn, s->sources[i].pos, s->sources[i].len);
			w->lsn[s->sources[i].len] = 0;
		}
	snprintf(w->id, sizeof w->id, "%s", s->id);
	w->n++;
	return 0;
}

/* Pushes a snapshot of heap to dir; returns the newest one's pg.lsn. */
static newest push(pgt *c, const char *heap, const char *dir)
{
	newest w = { 0 };
	char path[1024];
	cr_assert_eq(pgt_sh("%s/ah-snapshot push %s/%s %s/%s >>%s/push.log 2>&1", getenv("AH_BUILD"),
	                    c->dir, heap, c->dir, dir, c->dir), 0, "%s", pgt_file(c, "push.log"));
	snprintf(path, sizeof path, "%s/%s", c->dir, dir);
	cr_assert_eq(ah_snapshot_foreach(path, newest_one, &w), 0);
	cr_assert(w.n > 0 && w.lsn[0], "no snapshot with pg.lsn in %s", path);
	return w;
}

/* The stored LSN of a heap (ah-pgsync status), malloc. */
static char *heap_lsn(pgt *c, const char *heap)
{
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "%s status %s/%s | sed -n 's/^lsn //p'", c->sync, c->dir, heap);
	FILE *p = popen(cmd, "r");
	char *out = calloc(1, 64);
	cr_assert(p && fgets(out, 64, p));
	pclose(p);
	out[strcspn(out, "\n")] = 0;
	return out;
}

#define OPT "--confirm-after-snapshot %s/snaps"

/* No push: the slot stays at its start; a push: it advances to the
 * snapshot's LSN and no further; the heap lost: the restored heap resumes
 * from the snapshot's LSN and verifies equal to PostgreSQL. */
Test(pgsync, confirm_after_snapshot_and_restore, .timeout = 240, .fini = pgt_fini)
{
	pgt c;
	char args[300];
	pgt_start(&c);
	pgbench_setup(&c);
	snprintf(args, sizeof args, OPT, c.dir);
	pid_t e = pgt_engine(&c, "heap", "e.log", args);
	pgt_wait_heap(&c, "heap");
	char *start = slot_confirmed(&c);
	pgt_wait_log(&c, "e.log", "no snapshot of this heap in", 30);

	pgbench_run(&c, 300);
	caught_up_and_reported(&c, "heap");
	char *now = slot_confirmed(&c), *hl = heap_lsn(&c, "heap");
	cr_assert_str_eq(now, start, "no snapshot, yet the slot moved from %s to %s", start, now);
	cr_assert(!lsn_le(&c, hl, start), "the heap (%s) should be past the start %s", hl, start);
	free(now);
	free(hl);

	/* a push: the slot advances to exactly its LSN (the heap is past it) */
	newest s1 = push(&c, "heap", "snaps");
	cr_assert(!lsn_le(&c, s1.lsn, start));
	char q[300];
	snprintf(q, sizeof q, "SELECT confirmed_flush_lsn = '%s' FROM pg_replication_slots "
	         "WHERE slot_name = 'ah_pgsync'", s1.lsn);
	pgt_poll(&c, "postgres", q, 60);

	/* more traffic, none pushed: the slot stays at the snapshot */
	pgbench_run(&c, 300);
	caught_up_and_reported(&c, "heap");
	now = slot_confirmed(&c);
	hl = heap_lsn(&c, "heap");
	cr_assert_str_eq(now, s1.lsn, "the slot passed the snapshot's LSN %s: %s", s1.lsn, now);
	cr_assert(!lsn_le(&c, hl, s1.lsn), "the heap (%s) should be past the snapshot", hl);
	free(now);
	free(hl);

	/* machine loss: the engine and its heap are gone; the server goes on */
	kill(e, SIGKILL);
	pgt_wait_pid(e);
	cr_assert_eq(pgt_sh("rm -f %s/heap %s/heap-lock", c.dir, c.dir), 0);
	pgbench_run(&c, 200);
	cr_assert_eq(pgt_sh("%s/ah-snapshot restore %s/snaps %s/heap2 >%s/restore.log 2>&1",
	                    getenv("AH_BUILD"), c.dir, c.dir, c.dir), 0, "%s",
	             pgt_file(&c, "restore.log"));
	hl = heap_lsn(&c, "heap2");
	cr_assert_str_eq(hl, s1.lsn, "restored heap at %s, not the snapshot's %s", hl, s1.lsn);
	free(hl);
	e = pgt_engine(&c, "heap2", "e2.log", args);
	char want[200];
	snprintf(want, sizeof want, "heap2 at LSN %s,", s1.lsn);
	pgt_wait_log(&c, "e2.log", want, 60);
	snprintf(want, sizeof want, ": %s at LSN %s", s1.id, s1.lsn);
	pgt_wait_log(&c, "e2.log", want, 60);
	caught_up_and_reported(&c, "heap2");
	now = slot_confirmed(&c);
	cr_assert_str_eq(now, s1.lsn, "%s", now);
	free(now);

	/* the restored heap pushes on as the same heap (the next SEQ) */
	newest s2 = push(&c, "heap2", "snaps");
	cr_assert_eq(s2.n, 2);
	cr_assert(!lsn_le(&c, s2.lsn, s1.lsn));
	snprintf(q, sizeof q, "SELECT confirmed_flush_lsn = '%s' FROM pg_replication_slots "
	         "WHERE slot_name = 'ah_pgsync'", s2.lsn);
	pgt_poll(&c, "postgres", q, 60);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	cr_assert_eq(pgt_verify(&c, "postgres", "heap2"), 0, "%s", pgt_file(&c, "verify.log"));
	char *log = pgt_file(&c, "verify.log");
	cr_assert(strstr(log, "\nverified") || !strncmp(log, "verified", 8), "%s", log);
	free(log);
	free(start);
	pgt_stop(&c);
}

/* A damaged newest manifest is passed over: the engine confirms up to the
 * newest whole snapshot's LSN only. */
Test(pgsync, confirm_after_snapshot_skips_damaged, .timeout = 240, .fini = pgt_fini)
{
	pgt c;
	char args[300], q[300], path[400];
	pgt_start(&c);
	pgbench_setup(&c);
	snprintf(args, sizeof args, OPT, c.dir);
	pid_t e = pgt_engine(&c, "heap", "e.log", args);
	pgt_wait_heap(&c, "heap");
	pgbench_run(&c, 100);
	caught_up_and_reported(&c, "heap");
	newest s1 = push(&c, "heap", "snaps");
	snprintf(q, sizeof q, "SELECT confirmed_flush_lsn = '%s' FROM pg_replication_slots "
	         "WHERE slot_name = 'ah_pgsync'", s1.lsn);
	pgt_poll(&c, "postgres", q, 60);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e.log"));

	/* the engine stopped: the heap moved on since s1; push s2 of it and
	 * damage s2's manifest (one byte) before the next run reads it */
	pgbench_run(&c, 100);
	e = pgt_engine(&c, "heap", "e2.log", NULL);  /* without the option */
	caught_up_and_reported(&c, "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e2.log"));
	/* without the option the slot is at the heap's LSN: past s1 */
	char *now = slot_confirmed(&c), *hl = heap_lsn(&c, "heap");
	cr_assert_str_eq(now, hl);
	free(now);
	free(hl);
	pgbench_run(&c, 100);
	e = pgt_engine(&c, "heap", "e3.log", args);
	caught_up_and_reported(&c, "heap");
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e3.log"));
	char *held = slot_confirmed(&c);
	newest s2 = push(&c, "heap", "snaps");
	cr_assert_eq(s2.n, 2);
	cr_assert(!lsn_le(&c, s2.lsn, held), "s2 %s should be past the slot %s", s2.lsn, held);
	snprintf(path, sizeof path, "%s/snaps/manifests/%s", c.dir, s2.id);
	FILE *f = fopen(path, "r+b");
	cr_assert(f, "%s", path);
	cr_assert_eq(fseek(f, 40, SEEK_SET), 0);
	int ch = fgetc(f);
	cr_assert_eq(fseek(f, 40, SEEK_SET), 0);
	fputc(ch ^ 0x01, f);
	cr_assert_eq(fclose(f), 0);
	newest w = { 0 };
	snprintf(path, sizeof path, "%s/snaps", c.dir);
	cr_assert_eq(ah_snapshot_foreach(path, newest_one, &w), 0);
	cr_assert_eq(w.n, 1, "the damaged manifest should not read as whole");

	pgbench_run(&c, 100);
	e = pgt_engine(&c, "heap", "e4.log", args);
	caught_up_and_reported(&c, "heap");
	now = slot_confirmed(&c);
	cr_assert_str_eq(now, held, "the slot moved from %s to %s past s1 (s2 damaged)", held, now);
	free(now);
	kill(e, SIGTERM);
	cr_assert_eq(pgt_wait_pid(e), 0, "%s", pgt_file(&c, "e4.log"));
	free(held);
	pgt_stop(&c);
}

/* A fast shutdown waits for every walsender to see all it sent confirmed,
 * which this mode does not do before a push: the engine closes the stream
 * once the server has ended its SQL session, so the server stops. */
Test(pgsync, confirm_after_snapshot_lets_server_stop, .timeout = 240, .fini = pgt_fini)
{
	pgt c;
	char args[300];
	pgt_start(&c);
	pgbench_setup(&c);
	snprintf(args, sizeof args, OPT " --retry-secs 1", c.dir);
	pid_t e = pgt_engine(&c, "heap", "e.log", args);
	pgt_wait_heap(&c, "heap");
	char *start = slot_confirmed(&c);
	pgbench_run(&c, 100);
	caught_up_and_reported(&c, "heap");
	char *now = slot_confirmed(&c);
	cr_assert_str_eq(now, start);
	cr_assert_eq(pgt_sh("%s" PGT_BIN "/pg_ctl -D %s/data -m fast -t 100 stop >%s/stop.log 2>&1",
	                    pgt_as_pg(), c.dir, c.dir), 0, "%s", pgt_file(&c, "stop.log"));
	cr_assert_eq(pgt_wait_pid(e), 1, "%s", pgt_file(&c, "e.log"));
	char *log = pgt_file(&c, "e.log");
	cr_assert(strstr(log, "the server closed the SQL connection (shutting down?)"), "%s", log);
	free(log);
	free(now);
	free(start);
	pgt_stop(&c);
}
