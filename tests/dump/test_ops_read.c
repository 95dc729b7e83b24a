/*
 * tests/dump/test_ops_read.c - ah-dump's reading commands for operators,
 * exact output (text and JSON) on the heap of tests/dump/ops_util.h:
 * history and updates (stored times, per batch), key ranges, --limit and
 * --count, --hex in and out, get of a missing key, reads with no readable
 * time, source positions of several lines or 64 KiB, JSON errors (alone,
 * and after part of a document), --version of every tool.
 */
#include <inttypes.h>
#include <signal.h>

#include "tests/dump/ops_util.h"

static char heap[300];

/* The note --limit ends a cut listing with (the key it resumes from). */
#define LIMIT_NOTE(k) "ah-dump: --limit reached (at the end of a key); more " \
	"follow from key " k " (--from '" k "')\n"

static void setup(void)
{
	du_setup();
	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	ops_heap(heap);
}

Test(ops_read, history_per_batch_stored_times, .init = setup,
     .fini = du_teardown)
{
	ops_expect(heap, "history a k1", 0,
	           "1\tx\t0\t3\n1\tx\t1\t-1\n1\ty\t1\t2\n2\tx\t2\t5\n", "");
	ops_expect(heap, "history a k1 --val y", 0, "1\ty\t1\t2\n", "");
	ops_expect(heap, "history a k4", 0, "1\tw\t0\t1\n1\tw\t1\t-1\n", "");
	ops_expect(heap, "history bin 00ff09 --hex", 0, "3\t76\t7\t1\n", "");
	ops_expect(heap, "history bin '\\x00\\xff\\t'", 0, "3\tv\t7\t1\n", "");
	ops_expect(heap, "history a k9", 1, "",
	           "ah-dump: %H: history a: no update of key k9 in any batch\n");
	ops_expect(heap, "history a k1 --val q", 1, "",
	           "ah-dump: %H: history a: no update of key k1 with val q in any "
	           "batch\n");
	ops_expect(heap, "history nope k1", 1, "",
	           "ah-dump: %H: unknown arrangement nope\n");
	ops_expect(heap, "history a", 2, "", "usage: ah-dump HEAP history NAME KEY "
	           "[--val V] [--json] [--hex]\n");
	ops_expect(heap, "history a 'k\\q'", 2, "", "ah-dump: bad KEY \"k\\q\": bad "
	           "escape (only \\\\ \\t \\n \\xHH are allowed)\nusage: ah-dump HEAP "
	           "history NAME KEY [--val V] [--json] [--hex]\n");
	du_json_eq(heap, "history a k1", "d", "{'arrangement': 'a', 'key': 'k1', "
	           "'upper': 4, 'since': 3, 'batches': [{'batch': 1, 'lower': 0, "
	           "'upper': 2, 'since': 0, 'updates': [{'val': 'x', 'time': 0, "
	           "'diff': 3}, {'val': 'x', 'time': 1, 'diff': -1}, {'val': 'y', "
	           "'time': 1, 'diff': 2}]}, {'batch': 2, 'lower': 2, 'upper': 4, "
	           "'since': 0, 'updates': [{'val': 'x', 'time': 2, 'diff': 5}]}]}");
	du_json_eq(heap, "history a k1 --val x", "d['val'], [len(b['updates']) "
	           "for b in d['batches']]", "x [2, 1]");
}

Test(ops_read, updates_of_one_batch, .init = setup, .fini = du_teardown)
{
	const char *all = "k1\tx\t0\t3\nk1\tx\t1\t-1\nk1\ty\t1\t2\nk2\tx\t0\t1\n"
	                  "k3\tz\t1\t1\nk4\tw\t0\t1\nk4\tw\t1\t-1\n";

	ops_expect(heap, "updates a --batch 1", 0, all, "");
	ops_expect(heap, "updates a --batch 2", 0, "k1\tx\t2\t5\n", "");
	ops_expect(heap, "updates a --batch 1 --from k2 --to k4", 0,
	           "k2\tx\t0\t1\nk3\tz\t1\t1\n", "");
	ops_expect(heap, "updates a --batch 1 --prefix k4", 0,
	           "k4\tw\t0\t1\nk4\tw\t1\t-1\n", "");
	ops_expect(heap, "updates a --batch 1 --count", 0, "7\n", "");
	ops_expect(heap, "updates a --batch 1 --limit 2", 0,
	           "k1\tx\t0\t3\nk1\tx\t1\t-1\nk1\ty\t1\t2\n", LIMIT_NOTE("k2"));
	ops_expect(heap, "updates a --batch 1 --limit 7", 0, all, "");
	ops_expect(heap, "updates a --batch 1 --limit 0", 0, "",
	           LIMIT_NOTE("k1"));
	ops_expect(heap, "updates a --batch 1 --prefix k2 --hex", 2, "",
	           "ah-dump: bad --prefix \"k2\": not a hex digit\n"
	           "usage: ah-dump HEAP updates NAME --batch ID [RANGE] [--limit N | "
	           "--count] [--json] [--hex]\n");
	ops_expect(heap, "updates a --batch 3", 1, "",
	           "ah-dump: %H: updates a --batch 3: a has no batch 3 (ah-dump %H "
	           "batches a lists them)\n");
	ops_expect(heap, "updates a", 2, "", NULL);
	ops_expect(heap, "updates a --batch x", 2, "", NULL);
	ops_expect(heap, "updates a --batch 1 --count --limit 1", 2, "", NULL);
	du_json_eq(heap, "updates a --batch 2", "d", "{'arrangement': 'a', "
	           "'batch': 2, 'lower': 2, 'upper': 4, 'since': 0, 'partial': "
	           "False, 'updates': [{'key': 'k1', 'val': 'x', 'time': 2, "
	           "'diff': 5}]}");
	du_json_eq(heap, "updates a --batch 1 --limit 1", "len(d['updates']), "
	           "d['truncated'], d['next_key']", "3 True k2");
	du_json_eq(heap, "updates a --batch 1 --count", "d['count'], 'updates' in d",
	           "7 False");
}

/* Paging by the --limit note: k has three vals, so a limit that falls
 * inside k finishes it and names the next key; following each note (run
 * through sh as printed) lists every row exactly once and ends.  A key
 * with a quote is quoted for sh; one with a byte that is not printable
 * also gets its --hex form. */
Test(ops_read, limit_pages_never_repeat, .init = setup, .fini = du_teardown)
{
	char p[300];
	ah_heap *h;
	ah_txn *t;
	ah_update u[] = {
		{ "it's", 4, "v", 1, 0, 1 }, { "k", 1, "v1", 2, 0, 1 },
		{ "k", 1, "v2", 2, 0, 1 }, { "k", 1, "v3", 2, 0, 1 },
		{ "m", 1, "v", 1, 0, 1 }, { "z\x01", 2, "v", 1, 0, 1 },
	};

	snprintf(p, sizeof p, "%s/paged", du_tmp.dir);
	h = tl_open_path(p, 0, 0);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "p"), "create");
	du_ok(ah_append(t, "p", 0, 1, u, 6), "append");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	ops_expect(p, "read p --limit 0", 0, "",
	           "ah-dump: --limit reached (at the end of a key); more follow "
	           "from key it's (--from 'it'\\''s')\n");
	ops_expect(p, "read p --limit 2 --from 'it'\\''s'", 0,
	           "it's\tv\t1\nk\tv1\t1\nk\tv2\t1\nk\tv3\t1\n", LIMIT_NOTE("m"));
	ops_expect(p, "read p --limit 2 --from 'k'", 0,
	           "k\tv1\t1\nk\tv2\t1\nk\tv3\t1\n", LIMIT_NOTE("m"));
	ops_expect(p, "read p --limit 1 --from 'm'", 0, "m\tv\t1\n",
	           "ah-dump: --limit reached (at the end of a key); more follow "
	           "from key z\\x01 (--from 'z\\x01', or with --hex: --from "
	           "7a01)\n");
	ops_expect(p, "read p --limit 1 --from 'z\\x01'", 0, "z\\x01\tv\t1\n", "");
	ops_expect(p, "read p --limit 1 --hex --from 7a01", 0, "7a01\t76\t1\n", "");
	ops_expect(p, "read p --limit 1 --hex --from 6d", 0, "6d\t76\t1\n",
	           "ah-dump: --limit reached (at the end of a key); more follow "
	           "from key 7a01 (--from '7a01')\n");
	ops_expect(p, "updates p --batch 1 --limit 2 --from k", 0,
	           "k\tv1\t0\t1\nk\tv2\t0\t1\nk\tv3\t0\t1\n", LIMIT_NOTE("m"));
	du_json_eq(p, "read p --limit 2 --from k", "len(d['rows']), d['next_key']",
	           "3 m");
	du_json_eq(p, "updates p --batch 1 --limit 1 --from k",
	           "len(d['updates']), d['next_key']", "3 m");
}

Test(ops_read, ranges_limits_counts, .init = setup, .fini = du_teardown)
{
	ops_expect(heap, "read a", 0, "k1\tx\t7\nk1\ty\t2\nk2\tx\t1\nk3\tz\t1\n", "");
	ops_expect(heap, "read a --from k2", 0, "k2\tx\t1\nk3\tz\t1\n", "");
	ops_expect(heap, "read a --from k1x --to k3", 0, "k2\tx\t1\n", "");
	ops_expect(heap, "read a --prefix k1", 0, "k1\tx\t7\nk1\ty\t2\n", "");
	ops_expect(heap, "read a --prefix k --from k3", 0, "k3\tz\t1\n", "");
	ops_expect(heap, "read a --to k1", 0, "", "");
	ops_expect(heap, "read a --count", 0, "4\n", "");
	ops_expect(heap, "read a --count --prefix k1", 0, "2\n", "");
	ops_expect(heap, "read a --limit 3", 0, "k1\tx\t7\nk1\ty\t2\nk2\tx\t1\n",
	           LIMIT_NOTE("k3"));
	ops_expect(heap, "read a --limit 1", 0, "k1\tx\t7\nk1\ty\t2\n",
	           LIMIT_NOTE("k2"));
	ops_expect(heap, "read a --limit 4", 0,
	           "k1\tx\t7\nk1\ty\t2\nk2\tx\t1\nk3\tz\t1\n", "");
	ops_expect(heap, "read a --limit 0", 0, "",
	           LIMIT_NOTE("k1"));
	ops_expect(heap, "read a --hex --prefix 6b32", 0, "6b32\t78\t1\n", "");
	ops_expect(heap, "keys a", 0, "k1\nk2\nk3\nk4\n", "");
	ops_expect(heap, "keys a --from k2 --to k4", 0, "k2\nk3\n", "");
	ops_expect(heap, "keys a --count", 0, "4\n", "");
	ops_expect(heap, "keys a --limit 0", 0, "",
	           LIMIT_NOTE("k1"));
	ops_expect(heap, "keys a --limit 2", 0, "k1\nk2\n",
	           LIMIT_NOTE("k3"));
	ops_expect(heap, "keys bin --hex", 0, "00ff09\n", "");
	ops_expect(heap, "keys bin", 0, "\\x00\\xff\\t\n", "");
	du_json_eq(heap, "read a --limit 1", "d", "{'arrangement': 'a', 'as_of': 3, "
	           "'rows': [{'key': 'k1', 'val': 'x', 'diff': 7}, {'key': 'k1', "
	           "'val': 'y', 'diff': 2}], 'truncated': True, 'next_key': 'k2'}");
	du_json_eq(heap, "read a --count --from k3", "d",
	           "{'arrangement': 'a', 'as_of': 3, 'count': 1}");
	du_json_eq(heap, "keys a --limit 2", "d", "{'arrangement': 'a', 'keys': "
	           "['k1', 'k2'], 'truncated': True, 'next_key': 'k3'}");
	du_json_eq(heap, "keys a --count", "d", "{'arrangement': 'a', 'count': 4}");
	du_json_eq(heap, "keys bin --hex", "d['keys']", "['00ff09']");
	ops_expect(heap, "keys a --limit -1", 2, "", NULL);
	ops_expect(heap, "read a --from", 2, "", NULL);
}

Test(ops_read, get_missing_and_unreadable, .init = setup, .fini = du_teardown)
{
	ops_expect(heap, "get a k1", 0, "x\t7\ny\t2\n", "");
	ops_expect(heap, "get a k1 --as-of 3", 0, "x\t7\ny\t2\n", "");
	ops_expect(heap, "get bin 00ff09 --hex", 0, "76\t1\n", "");
	ops_expect(heap, "get a k9", 1, "",
	           "ah-dump: %H: get a as of 3: no key k9\n");
	ops_expect(heap, "get a k0", 1, "",
	           "ah-dump: %H: get a as of 3: no key k0\n");
	ops_expect(heap, "get a k4", 1, "",
	           "ah-dump: %H: get a as of 3: key k4 has no val with a non-zero "
	           "sum (ah-dump %H history a k4 lists its updates)\n");
	ops_expect(heap, "read e", 1, "",
	           "ah-dump: %H: read e: no readable time yet: nothing is sealed "
	           "(upper 0); reads need since <= T < upper\n");
	ops_expect(heap, "get e k", 1, "",
	           "ah-dump: %H: get e: no readable time yet: nothing is sealed "
	           "(upper 0); reads need since <= T < upper\n");
	ops_expect(heap, "read c", 1, "",
	           "ah-dump: %H: read c: no readable time: since = upper = 5 "
	           "(compacted up to its upper); it is readable at 5 once its upper "
	           "passes that\n");
	ops_expect(heap, "get c k", 1, "",
	           "ah-dump: %H: get c: no readable time: since = upper = 5 "
	           "(compacted up to its upper); it is readable at 5 once its upper "
	           "passes that\n");
	ops_expect(heap, "read c --as-of 4", 1, "",
	           "ah-dump: %H: read c as of 4: arrangement 'c': as_of 4 is before "
	           "since 5: compacted away\n");
	ops_expect(heap, "get a k1 --as-of 4", 1, "",
	           "ah-dump: %H: get a as of 4: arrangement 'a': as_of 4 is not "
	           "before upper 4: not yet complete\n");
	du_json_eq(heap, "get a k1", "d", "{'arrangement': 'a', 'key': 'k1', "
	           "'as_of': 3, 'vals': [{'val': 'x', 'diff': 7}, {'val': 'y', "
	           "'diff': 2}]}");
}

Test(ops_read, source_positions, .init = setup, .fini = du_teardown)
{
	char *out, want[1024], x200[201];

	memset(x200, 'x', 200);
	x200[200] = 0;
	cr_assert_eq(du_dump(heap, "", false, &out), 0);
	snprintf(want, sizeof want, "source big: position %s (65,536 bytes; "
	         "ah-dump %s source big prints it whole)\n"
	         "source bin: position hex:00ff\n"
	         "source lines: position, 3 lines of text:\n"
	         "    system=1\n    database=db\n    slot=s\n"
	         "source s: position pos-7\n", x200, heap);
	cr_assert(strstr(out, want), "%s", out);
	free(out);
	ops_expect(heap, "source lines", 0, "system=1\ndatabase=db\nslot=s\n", "");
	ops_expect(heap, "source bin --hex", 0, "00ff\n", "");
	ops_expect(heap, "source s", 0, "pos-7", "");
	ops_expect(heap, "source nope", 1, "", "ah-dump: %H: unknown source nope\n");
	{
		char cmd[600];

		snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' source big | wc -c",
		         tl_build(), heap);
		cr_assert_eq(tl_sh(cmd, false, &out), 0);
		cr_assert_str_eq(out, "65536\n");
		free(out);
	}
	du_json_eq(heap, "source lines", "d", "{'source': 'lines', 'bytes': 28, "
	           "'position': 'system=1\\ndatabase=db\\nslot=s\\n', 'position_hex': "
	           "'73797374656d3d310a64617461626173653d64620a736c6f743d730a'}");
	du_json_eq(heap, "", "[(s['name'], s['position'] and len(s['position']), "
	           "len(s['position_hex'])) for s in d['sources']]",
	           "[('big', 65536, 131072), ('bin', None, 4), ('lines', 28, 56), "
	           "('s', 5, 10)]");
}

/* --json: a failure is the document's error member on stdout, stderr
 * stays empty, the exit status is the same. */
Test(ops_read, json_errors, .init = setup, .fini = du_teardown)
{
	char cmd[1200], *out, *err;

	du_json_eq(heap, "", "1", "1");
	{
		char *got = du_json(heap, "get a k9", 1, "d");

		snprintf(cmd, sizeof cmd, "{'error': {'code': 'AH_ENOTFOUND', "
		         "'message': '%s: get a as of 3: no key k9', 'exit': 1}}", heap);
		cr_assert_str_eq(got, cmd);
		free(got);
	}
	{
		char *got = du_json(heap, "read c", 1, "d['error']['code'], "
		                    "d['error']['exit']");

		cr_assert_str_eq(got, "AH_ENOTREADY 1");
		free(got);
	}
	{
		char *got = du_json(heap, "read", 2, "d");

		cr_assert_str_eq(got, "{'error': {'code': 'usage', 'message': 'usage: "
		                 "ah-dump HEAP read NAME [--as-of T] [RANGE] [--limit N "
		                 "| --count] [--json] [--hex]', 'exit': 2}}");
		free(got);
	}
	{
		char *got = du_json(heap, "frobnicate", 2, "d['error']");

		cr_assert_str_eq(got, "{'code': 'usage', 'message': 'unknown command "
		                 "\"frobnicate\" (see ah-dump --help)', 'exit': 2}");
		free(got);
	}
	snprintf(cmd, sizeof cmd, "%s/missing", du_tmp.dir);
	{
		char *got = du_json(cmd, "", 1, "d['error']['code'], "
		                    "d['error']['message']");
		char want[700];

		snprintf(want, sizeof want, "AH_ENOTFOUND %s/missing: No such file or "
		         "directory", du_tmp.dir);
		cr_assert_str_eq(got, want);
		free(got);
	}
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' get a k9 --json", tl_build(),
	         heap);
	cr_assert_eq(ops_run(cmd, &out, &err), 1);
	cr_assert_str_eq(err, "", "stderr stays empty under --json");
	free(out);
	free(err);
}

/* A read that meets a damaged chunk after printing rows: the rows so far,
 * then the error member, in one valid document. */
Test(ops_read, json_error_after_rows, .init = du_setup, .fini = du_teardown,
     .timeout = 60)
{
	static char val[3000];
	char path[300], *got;
	ah_heap *h;
	ah_txn *t;
	unsigned long long off = 0, len = 0;
	int fd;

	snprintf(path, sizeof path, "%s/d", du_tmp.dir);
	h = tl_open_path(path, 0, 0);
	memset(val, 'v', sizeof val);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "m"), "create");
	for (int i = 0; i < 2000; i++) {
		char key[16];
		ah_update u = { key, 0, val, sizeof val, (uint64_t)i, 1 };

		u.key_len = (size_t)snprintf(key, sizeof key, "key%05d", i);
		du_ok(ah_append(t, "m", (uint64_t)i, (uint64_t)i + 1, &u, 1), "append");
	}
	du_ok(ah_maintain(t, "m", 0, NULL), "maintain");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	got = du_json(path, "chunks m", 0, "len(d['chunks']), "
	              "d['chunks'][-1]['file_offset'], d['chunks'][-1]['bytes']");
	cr_assert_eq(sscanf(strchr(got, ' ') + 1, "%llu %llu", &off, &len), 2, "%s",
	             got);
	cr_assert_gt(atoi(got), 2, "several chunks: %s", got);
	free(got);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	{
		unsigned char b;

		cr_assert_eq(pread(fd, &b, 1, (off_t)(off + len / 2)), 1);
		b ^= 0x40;
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)(off + len / 2)), 1);
	}
	close(fd);
	got = du_json(path, "read m", 1, "len(d['rows']) > 0, d['error']['code'], "
	              "d['error']['exit'], sorted(d)");
	cr_assert_str_eq(got, "True AH_ECORRUPT 1 ['arrangement', 'as_of', 'error', "
	                 "'rows']");
	free(got);
}

Test(ops_read, version_of_every_tool, .init = setup, .fini = du_teardown)
{
	const char *tools[] = { "ah-dump", "ah-load", "ah-pgsync", "ah-snapshot" };
	char cmd[600], want[200], *out;

	for (int i = 0; i < 4; i++) {
		snprintf(cmd, sizeof cmd, "'%s/%s' --version", tl_build(), tools[i]);
		cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s", out);
		snprintf(want, sizeof want, "%s (arrheap) %s, library %s%s", tools[i],
		         AH_VERSION_STRING, ah_version(NULL, NULL, NULL),
		         i == 2 ? ", libpq " : "\n");
		cr_assert(!strncmp(out, want, strlen(want)), "%s", out);
		free(out);
	}
	/* --version is never a heap path. */
	snprintf(cmd, sizeof cmd, "cd '%s' && '%s/ah-dump' --version && ls",
	         du_tmp.dir, tl_build());
	cr_assert_eq(tl_sh(cmd, true, &out), 0);
	snprintf(want, sizeof want, "ah-dump (arrheap) %s, library %s\nh\nh-lock\n",
	         AH_VERSION_STRING, ah_version(NULL, NULL, NULL));
	cr_assert_str_eq(out, want);
	free(out);
	snprintf(want, sizeof want, "ah-dump (arrheap) %s, library %s\n",
	         AH_VERSION_STRING, ah_version(NULL, NULL, NULL));
	ops_expect(heap, "--version", 0, want, "");
}

/* With --json a fault (here SIGABRT, as liblmdb's assertions raise it) is
 * the error object on stdout, after whatever part of the document was
 * written, and nothing on stderr.  Sent while `read` blocks on a full
 * pipe, so the guard is installed. */
Test(ops_read, json_fault_is_reported, .init = du_setup, .fini = du_teardown)
{
	static ah_update u[8000];
	static char keys[8000][16], got[1 << 20];
	char path[300], tool[512], errf[300], want[1024], *err;
	size_t n = 0;
	ssize_t r;
	int out[2], st;
	ah_heap *h;
	ah_txn *t;
	pid_t pid;

	snprintf(path, sizeof path, "%s/big", du_tmp.dir);
	snprintf(errf, sizeof errf, "%s/err", du_tmp.dir);
	h = tl_open_path(path, 0, 0);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "big"), "create");
	for (int i = 0; i < 8000; i++) {
		snprintf(keys[i], sizeof keys[i], "key%06d", i);
		u[i] = (ah_update){ keys[i], 9, "some value", 10, 0, 1 };
	}
	du_ok(ah_append(t, "big", 0, 1, u, 8000), "append");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	snprintf(tool, sizeof tool, "%s/ah-dump", tl_build());
	cr_assert_eq(pipe(out), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int e = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(out[1], 1);
		dup2(e, 2);
		close(out[0]);
		execl(tool, tool, path, "read", "big", "--json", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	cr_assert_eq(read(out[0], got, 1), 1);
	n = 1;
	cr_assert_eq(kill(pid, SIGABRT), 0);
	while ((r = read(out[0], got + n, sizeof got - 1 - n)) > 0)
		n += (size_t)r;
	got[n] = 0;
	close(out[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	snprintf(want, sizeof want, "{\n  \"error\": {\n    \"code\": "
	         "\"AH_ECORRUPT\",\n    \"message\": \"%s: heap corrupt: checksum "
	         "or structure check failed (LMDB stopped on a damaged page: "
	         "SIGABRT)\",\n    \"exit\": 1\n  }\n}\n", path);
	cr_assert(n > strlen(want) && !strcmp(got + n - strlen(want), want),
	          "ends with: %s", n > 300 ? got + n - 300 : got);
	{
		FILE *f = fopen(errf, "r");

		cr_assert_not_null(f);
		err = calloc(1, 4096);
		if (fread(err, 1, 4095, f) == 0)
			err[0] = 0;
		fclose(f);
		cr_assert_str_eq(err, "");
		free(err);
	}
}

/* The remaining argument errors of the key commands. */
Test(ops_read, bad_arguments, .init = setup, .fini = du_teardown)
{
	ops_expect(heap, "read a --as-of x", 2, "",
	           "ah-dump: bad --as-of \"x\": a decimal uint64\nusage: ah-dump "
	           "HEAP read NAME [--as-of T] [RANGE] [--limit N | --count] "
	           "[--json] [--hex]\n");
	ops_expect(heap, "updates nope --batch 1", 1, "",
	           "ah-dump: %H: unknown arrangement nope\n");
	ops_expect(heap, "keys nope", 1, "",
	           "ah-dump: %H: unknown arrangement nope\n");
	ops_expect(heap, "history a 6b31 --val 7 --hex", 2, "",
	           "ah-dump: bad --val \"7\": odd number of hex digits\nusage: "
	           "ah-dump HEAP history NAME KEY [--val V] [--json] [--hex]\n");
	ops_expect(heap, "read a --from 'k\\x'", 2, "", NULL);
	ops_expect(heap, "source", 2, "", "usage: ah-dump HEAP source NAME "
	           "[--json] [--hex]\n");
	ops_expect(heap, "get a", 2, "", NULL);
}

/* JSON strings copy well-formed UTF-8 as it is and write any other byte as
 * \u00XX: a heap named "hé" is "hé" in the document (not "h\u00c3\u00a9"),
 * and one whose name holds a stray 0xff, an overlong "/" (C0 AF), a lone
 * continuation byte (80) or an encoded surrogate (ED A0 80) is still valid
 * JSON that python's json.tool reads. */
Test(ops_read, json_strings_keep_utf8, .init = setup, .fini = du_teardown)
{
	static const struct { const char *name, *json; } cases[] = {
		{ "h\xc3\xa9", "h\xc3\xa9" },
		{ "x\xff", "x\\u00ff" },
		{ "o\xc0\xaf", "o\\u00c0\\u00af" },
		{ "c\x80", "c\\u0080" },
		{ "s\xed\xa0\x80", "s\\u00ed\\u00a0\\u0080" },
		{ "e\xe2\x82\xac\xf0\x9f\x98\x80", "e\xe2\x82\xac\xf0\x9f\x98\x80" },
		{ "t\xe2\x82", "t\\u00e2\\u0082" },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char p[300], cmd[1200], want[400], *out;

		snprintf(p, sizeof p, "%s/%s", du_tmp.dir, cases[i].name);
		du_ok(ah_close(tl_open_path(p, 0, 0)), "create");
		snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' --json | grep '\"heap\"'",
		         tl_build(), p);
		cr_assert_eq(tl_sh(cmd, false, &out), 0, "%s", cmd);
		snprintf(want, sizeof want, "  \"heap\": \"%s/%s\",\n", du_tmp.dir,
		         cases[i].json);
		cr_assert_str_eq(out, want, "%zu", i);
		free(out);
		snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' --json | LC_ALL=C.UTF-8 "
		         "PYTHONIOENCODING=utf-8 python3 -m json.tool >/dev/null",
		         tl_build(), p);
		cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s: %s", cmd, out);
		free(out);
	}
}

/* A path or name with a newline or a byte that is not printable stays on
 * one line, escaped as keys are (\n, \xHH), in ah-dump's messages and
 * summary and in ah-load's messages. */
Test(ops_read, paths_and_names_escaped, .init = setup, .fini = du_teardown)
{
	char p[300], want[1200], cmd[1200], *out, *err;

	snprintf(p, sizeof p, "%s/H\nx\xff", du_tmp.dir);
	ops_heap(p);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' | grep '^heap '", tl_build(),
	         p);
	cr_assert_eq(tl_sh(cmd, false, &out), 0);
	snprintf(want, sizeof want, "heap           %s/H\\nx\\xff\n", du_tmp.dir);
	cr_assert_str_eq(out, want);
	free(out);
	snprintf(want, sizeof want, "ah-dump: %s/H\\nx\\xff: get a as of 3: no key "
	         "k9\n", du_tmp.dir);
	ops_expect(p, "get a k9", 1, "", want);
	snprintf(want, sizeof want, "ah-dump: %s/H\\nx\\xff: unknown arrangement "
	         "n\\no\\xff\n", du_tmp.dir);
	ops_expect(p, "read \"$(printf 'n\\no\\377')\"", 1, "", want);
	snprintf(want, sizeof want, "ah-dump: %s/H\\nx\\xff: maintain n\\no: "
	         "unknown arrangement n\\no\n", du_tmp.dir);
	ops_expect(p, "maintain \"$(printf 'n\\no')\"", 1, "", want);
	ops_expect(p, "backup /nonexistent/\"$(printf 'b\\nk')\"", 1, "",
	           "ah-dump: backup /nonexistent/b\\nk: not found\n");
	ops_expect(p, "salvage /nonexistent/\"$(printf 's\\nv')\"", 1, "",
	           "ah-dump: salvage /nonexistent/s\\nv: no such directory\n");
	snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' /dev/null --source \"$(printf "
	         "'a\\nb\\377')\"", tl_build(), p);
	cr_assert_eq(ops_run(cmd, &out, &err), 2);
	cr_assert_str_eq(err, "ah-load: bad source name \"a\\nb\\xff\" (1 to 64 of "
	                 "[A-Za-z0-9_.:/-])\n");
	free(out);
	free(err);
	snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' \"$(printf '/nonexistent/"
	         "c\\nl')\"", tl_build(), p);
	cr_assert_eq(ops_run(cmd, &out, &err), 1);
	cr_assert_str_eq(err, "ah-load: /nonexistent/c\\nl: No such file or "
	                 "directory\n");
	free(out);
	free(err);
}
