/*
 * tests/dump/test_ops_write.c - ah-dump's write commands, exact output:
 * since, advance, maintain and drop with the library's frontier rules and
 * messages, their JSON, every error; and the writer lock: a write command
 * started while a real second process holds a write transaction waits,
 * says so once naming that process, and finishes after it.
 */
#include <inttypes.h>
#include <signal.h>

#include "tests/dump/ops_util.h"

static char heap[300];

/* Arrangement w: batches of 100 and 10 updates over [0, 4), since 0. */
static void setup(void)
{
	static char keys[110][8];
	ah_update u[110];
	ah_heap *h;
	ah_txn *t;

	du_setup();
	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	h = tl_open_path(heap, 0, 0);
	for (int i = 0; i < 110; i++) {
		snprintf(keys[i], sizeof keys[i], "k%03d", i);
		u[i] = (ah_update){ keys[i], 4, "v", 1, i < 100 ? 0 : 2, 1 };
	}
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "w"), "create");
	du_ok(ah_append(t, "w", 0, 2, u, 100), "append 1");
	du_ok(ah_append(t, "w", 2, 4, u + 100, 10), "append 2");
	du_ok(ah_source_put(t, "s", "1", 1), "source");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
}

Test(ops_write, since_and_advance_follow_the_rules, .init = setup,
     .fini = du_teardown)
{
	ops_expect(heap, "since w 2", 0, "w: since 0 -> 2 (upper 4)\n", "");
	ops_expect(heap, "since w 2", 0, "w: since 2 -> 2 (upper 4)\n", "");
	ops_expect(heap, "since w 1", 1, "",
	           "ah-dump: %H: since w 1: arrangement 'w': since 1 is before the "
	           "since 2 (since never goes backwards)\n");
	ops_expect(heap, "since w 5", 1, "",
	           "ah-dump: %H: since w 5: arrangement 'w': since 5 beyond the "
	           "upper 4\n");
	ops_expect(heap, "advance w 10", 0,
	           "w: upper 4 -> 10 (no data: an empty batch; since 2)\n", "");
	ops_expect(heap, "advance w 3", 1, "",
	           "ah-dump: %H: advance w 3: arrangement 'w': new upper 3 is before "
	           "the upper 10\n");
	ops_expect(heap, "since w 10", 0, "w: since 2 -> 10 (upper 10)\n", "");
	ops_expect(heap, "since nope 1", 1, "",
	           "ah-dump: %H: since nope 1: unknown arrangement nope\n");
	ops_expect(heap, "advance nope 1", 1, "",
	           "ah-dump: %H: advance nope 1: unknown arrangement nope\n");
	ops_expect(heap, "since w x", 2, "",
	           "ah-dump: bad SINCE \"x\": a decimal uint64\n"
	           "usage: ah-dump HEAP since NAME SINCE [--json] [--hex]\n");
	ops_expect(heap, "advance w", 2, "",
	           "usage: ah-dump HEAP advance NAME UPPER [--json] [--hex]\n");
	du_json_eq(heap, "advance w 12", "d", "{'arrangement': 'w', "
	           "'upper_before': 10, 'upper': 12, 'since': 10}");
	du_json_eq(heap, "since w 11", "d", "{'arrangement': 'w', "
	           "'since_before': 10, 'since': 11, 'upper': 12}");
	{
		char *got = du_json(heap, "since w 1", 1, "d['error']['code'], "
		                    "d['error']['exit']");

		cr_assert_str_eq(got, "AH_EFRONTIER 1");
		free(got);
	}
	du_json_eq(heap, "", "[(a['name'], a['upper'], a['since']) for a in "
	           "d['arrangements']]", "[('w', 12, 11)]");
	du_json_eq(heap, "verify", "d['ok']", "True");
}

/* Batches of 80,000 and 39,000 updates: their merge is larger than the
 * merge quantum (65,536), so a little fuel leaves it in progress. */
static void big_merge(const char *path)
{
	ah_update *u = calloc(119000, sizeof *u);
	char (*k)[8] = calloc(119000, 8);
	ah_heap *h = tl_open_path(path, 0, 0);
	ah_txn *t;

	for (int i = 0; i < 119000; i++) {
		snprintf(k[i], 8, "%c%06d", i < 80000 ? 'k' : 'j', i);
		u[i] = (ah_update){ k[i], 7, "v", 1, i < 80000 ? 0 : 1, 1 };
	}
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "m"), "create");
	du_ok(ah_append(t, "m", 0, 1, u, 80000), "append 1");
	du_ok(ah_append(t, "m", 1, 2, u + 80000, 39000), "append 2");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	free(u);
	free(k);
}

Test(ops_write, maintain_and_drop, .init = setup, .fini = du_teardown,
     .timeout = 60)
{
	char big[300], *out;

	snprintf(big, sizeof big, "%s/big", du_tmp.dir);
	big_merge(big);
	ops_expect(big, "maintain m --fuel 1000", 0,
	           "m: batches 2 -> 2, merges in progress 0 -> 1, updates 119,000 -> "
	           "119,000, chunks 2 -> 3; more merge\n    work left (maintain again)\n",
	           "");
	ops_expect(big, "maintain m", 0,
	           "m: batches 2 -> 1, merges in progress 1 -> 0, updates 119,000 -> "
	           "119,000, chunks 3 -> 2; idle\n", "");
	du_json_eq(big, "verify", "d['ok']", "True");
	ops_expect(heap, "maintain w --fuel 1", 0,
	           "w: batches 2 -> 1, merges in progress 0 -> 0, updates 110 -> "
	           "110, chunks 2 -> 1; idle\n", "");
	du_json_eq(heap, "maintain w", "sorted(d), d['arrangement'], d['fuel'], "
	           "d['idle'], d['before'] == d['after'], [d['after'][k] for k in "
	           "('batches', 'merging', 'updates', 'chunks')], "
	           "d['after']['bytes'] > 0", "['after', 'arrangement', 'before', "
	           "'fuel', 'idle'] w 0 True True [1, 0, 110, 1] True");
	ops_expect(heap, "maintain nope", 1, "",
	           "ah-dump: %H: maintain nope: unknown arrangement nope\n");
	ops_expect(heap, "maintain w --fuel x", 2, "", NULL);
	ops_expect(heap, "maintain", 2, "", NULL);
	ops_expect(heap, "drop w", 0,
	           "dropped w: 1 batch, 110 updates, 1 chunk (1 page, reusable "
	           "once no reader's snapshot still sees\n    them)\n", "");
	ops_expect(heap, "drop w", 1, "",
	           "ah-dump: %H: drop w: unknown arrangement w\n");
	ops_expect(heap, "drop", 2, "", NULL);
	ops_expect(heap, "arrangements", 0, "", "");
	du_json_eq(heap, "space", "d['chunks'], d['chunk_pages']", "0 0");
	du_json_eq(heap, "verify", "d['ok']", "True");
	/* The source positions stay. */
	ops_expect(heap, "source s", 0, "1", "");
	/* The name again, through ah-load. */
	{
		char cmd[1024];

		snprintf(cmd, sizeof cmd, "printf 'arrange\\tw\\nupdate\\tw\\t0\\tk\\tv"
		         "\\t1\\nadvance\\tw\\t1\\ncommit\\n' | '%s/ah-load' '%s' - "
		         "--source t", tl_build(), heap);
		cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s", out);
		free(out);
	}
	ops_expect(heap, "read w", 0, "k\tv\t1\n", "");
	du_json_eq(heap, "drop w", "d", "{'dropped': 'w', 'batches': 1, "
	           "'updates': 1, 'chunks': 1, 'chunk_pages': 1}");
}

/* ------------------------------------------------------ the writer lock */

static pid_t holder;

static void lock_teardown(void)
{
	if (holder > 0) {
		kill(holder, SIGKILL);
		waitpid(holder, NULL, 0);
	}
	du_teardown();
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* Holds a write transaction until `release` exists, then commits a source
 * position and exits 0.  No Criterion calls. */
static void hold_lock(const char *locked, const char *release)
{
	ah_open_opts o = { .size = sizeof o };
	ah_heap *h;
	ah_txn *t;
	FILE *f;

	if (ah_open(heap, &o, &h) || ah_txn_begin(h, 0, &t))
		_exit(3);
	if (!(f = fopen(locked, "w")))
		_exit(4);
	fclose(f);
	while (!exists(release))
		usleep(2000);
	if (ah_source_put(t, "holder", "done", 4) || ah_txn_commit(t) || ah_close(h))
		_exit(5);
	_exit(0);
}

static char *slurp(const char *path)
{
	char *buf = calloc(1, 1 << 16);
	FILE *f = fopen(path, "r");

	if (f) {
		if (fread(buf, 1, (1 << 16) - 1, f) == 0)
			buf[0] = 0;
		fclose(f);
	}
	return buf;
}

Test(ops_write, waits_for_the_writer_lock_and_says_who, .init = setup,
     .fini = lock_teardown, .timeout = 60)
{
	char locked[300], release[300], outf[300], errf[300], comm[64] = "",
		want[1024], *got;
	pid_t dumper;
	int st;
	FILE *f;

	snprintf(locked, sizeof locked, "%s/locked", du_tmp.dir);
	snprintf(release, sizeof release, "%s/release", du_tmp.dir);
	snprintf(outf, sizeof outf, "%s/out", du_tmp.dir);
	snprintf(errf, sizeof errf, "%s/err", du_tmp.dir);
	holder = fork();
	cr_assert_geq(holder, 0);
	if (holder == 0)
		hold_lock(locked, release);
	while (!exists(locked))
		usleep(2000);
	dumper = fork();
	cr_assert_geq(dumper, 0);
	if (dumper == 0) {
		char tool[300];

		snprintf(tool, sizeof tool, "%s/ah-dump", tl_build());
		if (!freopen(outf, "w", stdout) || !freopen(errf, "w", stderr))
			_exit(6);
		execl(tool, "ah-dump", heap, "since", "w", "2", (char *)NULL);
		_exit(7);
	}
	/* It waits, and says so once: wait for the line, however long. */
	for (;;) {
		got = slurp(errf);
		if (strchr(got, '\n'))
			break;
		free(got);
		cr_assert_eq(waitpid(dumper, &st, WNOHANG), 0, "ah-dump ended "
		             "while the lock was held");
		usleep(5000);
	}
	snprintf(want, sizeof want, "/proc/%d/comm", (int)holder);
	cr_assert_not_null(f = fopen(want, "r"));
	cr_assert_not_null(fgets(comm, sizeof comm, f));
	fclose(f);
	comm[strcspn(comm, "\n")] = 0;
	snprintf(want, sizeof want, "ah-dump: %s: waiting for the heap's writer "
	         "lock: another process has a write transaction open (the heap is "
	         "open in pid %d (%s)); ^C gives up, nothing written\n", heap,
	         (int)holder, comm);
	cr_assert_str_eq(got, want);
	free(got);
	got = slurp(outf);
	cr_assert_str_eq(got, "", "nothing done while the lock is held");
	free(got);
	cr_assert_eq(waitpid(dumper, &st, WNOHANG), 0);

	f = fopen(release, "w");
	cr_assert_not_null(f);
	fclose(f);
	cr_assert_eq(waitpid(holder, &st, 0), holder);
	holder = 0;
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder: %d", st);
	cr_assert_eq(waitpid(dumper, &st, 0), dumper);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ah-dump: %d", st);
	got = slurp(outf);
	cr_assert_str_eq(got, "w: since 0 -> 2 (upper 4)\n");
	free(got);
	got = slurp(errf);
	cr_assert_str_eq(got, want, "said once");
	free(got);
	/* Both writes are in: the holder's first, then ah-dump's. */
	ops_expect(heap, "source holder", 0, "done", "");
	du_json_eq(heap, "", "[(a['name'], a['since']) for a in "
	           "d['arrangements']]", "[('w', 2)]");
}

/* A write command that does not have to wait says nothing about it. */
Test(ops_write, no_wait_no_message, .init = setup, .fini = du_teardown)
{
	ops_expect(heap, "since w 1 --json", 0,
	           "{\n  \"arrangement\": \"w\",\n  \"since_before\": 0,\n  "
	           "\"since\": 1,\n  \"upper\": 4\n}\n", "");
}

/* Appends batches of the given sizes (distinct keys, one per update) to a
 * new arrangement m of a new heap at path, opened with that merge
 * quantum. */
static void sized_heap(const char *path, uint64_t quantum, const int *sizes,
                       int n)
{
	ah_heap *h = tl_open_path(path, 0, quantum);
	ah_update *u = calloc(100000, sizeof *u);
	char (*keys)[12] = calloc(100000, sizeof *keys);
	ah_txn *t;

	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "m"), "create");
	for (int b = 0; b < n; b++) {
		for (int i = 0; i < sizes[b]; i++) {
			snprintf(keys[i], sizeof keys[i], "%c%06d", 'a' + b, i);
			u[i] = (ah_update){ keys[i], 7, "v", 1, (uint64_t)b, 1 };
		}
		du_ok(ah_append(t, "m", (uint64_t)b, (uint64_t)b + 1, u,
		                (size_t)sizes[b]), "append");
	}
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	free(u);
	free(keys);
}

/* batches counts the merges in progress as the summary's merging does:
 * a merge that has not run yet (its inputs 60 + 45 + 40 exceed the quantum of
 * 100) has no * row, and the last line says so.  --fuel N spends exactly N
 * units (one update per (key, val) here) on a merge larger than the
 * quantum, as the man page says; --fuel 0 does the whole merge at once. */
Test(ops_write, merging_counts_and_fuel, .init = du_setup, .fini = du_teardown)
{
	static const int waiting[] = { 60, 45, 40 },
	                 big[] = { 50000, 30000, 30000 };
	char p[300];

	snprintf(p, sizeof p, "%s/waiting", du_tmp.dir);
	sized_heap(p, 100, waiting, 3); /* SPINE_FANIN batches */
	ops_expect(p, "batches m", 0,
	           "      id      lower      upper      since       updates        "
	           "keys        vals  chunks      bytes\n"
	           "       1          0          1          0            60          "
	           "60          60       1      576 B\n"
	           "       2          1          2          0            45          "
	           "45          45       1      456 B\n"
	           "       3          2          3          0            40          "
	           "40          40       1      408 B\n"
	           "merges in progress: 1, 0 with output so far (marked *)\n", "");
	du_json_eq(p, "", "d['arrangements'][0]['merging']", "1");
	snprintf(p, sizeof p, "%s/big", du_tmp.dir);
	sized_heap(p, 0, big, 3);
	du_json_eq(p, "batches m", "[b['updates'] for b in d['batches'] if "
	           "b['partial']]", "[]");
	ops_expect(p, "maintain m --fuel 1000", 0, "m: batches 3 -> 3, merges in "
	           "progress 1 -> 1, updates 110,000 -> 110,000, chunks 3 -> 4; more "
	           "merge\n    work left (maintain again)\n", "");
	du_json_eq(p, "batches m", "[b['updates'] for b in d['batches'] if "
	           "b['partial']]", "[1000]");
	ops_expect(p, "maintain m --fuel 1", 0, "m: batches 3 -> 3, merges in "
	           "progress 1 -> 1, updates 110,000 -> 110,000, chunks 4 -> 4; more "
	           "merge\n    work left (maintain again)\n", "");
	du_json_eq(p, "batches m", "[b['updates'] for b in d['batches'] if "
	           "b['partial']]", "[1001]");
	ops_expect(p, "maintain m --fuel 0", 0, "m: batches 3 -> 1, merges in "
	           "progress 1 -> 0, updates 110,000 -> 110,000, chunks 4 -> 1; idle\n",
	           "");
	du_json_eq(p, "batches m", "[(b['updates'], b['partial']) for b in "
	           "d['batches']]", "[(110000, False)]");
}
