/*
 * tests/dump/test_live.c - ah-dump against a heap another process is
 * writing: every command exits 0 while a forked writer appends in a loop,
 * and the writer keeps committing (ah-dump never blocks it).  Also replays
 * the fuzzer's regression inputs (tests/fuzz/corpus and tests/fuzz/crashers)
 * through the fuzzed path, tests/fuzz/fuzz_path.h.
 */
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include "dump_util.h"
#include "tl_file.h"
#include "tests/fuzz/fuzz_path.h"

/* The writer child: appends one update per commit to "live" until killed,
 * counting its commits in the file at count_path.  No Criterion calls. */
static void writer(const char *heap, const char *count_path)
{
	ah_open_opts o = { .size = sizeof o };
	ah_heap *h;
	ah_txn *t;
	char key[32], tmp[300];

	snprintf(tmp, sizeof tmp, "%s.tmp", count_path);
	if (ah_open(heap, &o, &h))
		_exit(3);
	for (uint64_t u = 1;; u++) {
		ah_update up = { key, 0, "v", 1, u, 1 };
		FILE *f;

		up.key_len = (size_t)snprintf(key, sizeof key, "k%06llu",
		                              (unsigned long long)(u % 5000));
		if (ah_txn_begin(h, 0, &t) || ah_append(t, "live", u, u + 1, &up, 1) ||
		    ah_source_put(t, "w", key, up.key_len) || ah_txn_commit(t))
			_exit(4);
		/* rename: a reader never sees a half-written count */
		if ((f = fopen(tmp, "w"))) {
			fprintf(f, "%llu\n", (unsigned long long)u);
			fclose(f);
			rename(tmp, count_path);
		}
	}
}

static pid_t writer_pid;

/* .fini: the writer must not outlive a failed assertion. */
static void live_teardown(void)
{
	if (writer_pid > 0) {
		kill(writer_pid, SIGKILL);
		waitpid(writer_pid, NULL, 0);
	}
	du_teardown();
}

static uint64_t commits(const char *count_path)
{
	unsigned long long n = 0;
	FILE *f = fopen(count_path, "r");

	if (f) {
		if (fscanf(f, "%llu", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n;
}

Test(live, every_command_while_writing, .init = du_setup, .fini = live_teardown,
     .timeout = 120)
{
	const char *cmds[] = { "", "arrangements", "batches live", "chunks live",
	                       "read live", "keys live --limit 5", "get live k000001",
	                       "verify", "space", "backup '%s/backup'" };
	char heap[256], count[256], args[300], *out;
	ah_heap *h = NULL;
	ah_txn *t;
	pid_t pid;
	int st;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	snprintf(count, sizeof count, "%s/count", du_tmp.dir);
	h = tl_open_path(heap, 0, 0);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "live"), "create");
	du_ok(ah_advance(t, "live", 0, 1), "advance");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		writer(heap, count);
	writer_pid = pid;
	while (commits(count) < 20)
		usleep(1000);
	for (int round = 0; round < 2; round++)
		for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
			uint64_t before = commits(count);

			snprintf(args, sizeof args, cmds[i], du_tmp.dir);
			if (round == 1 && i + 1 == sizeof cmds / sizeof *cmds)
				break; /* the backup exists */
			cr_assert_eq(du_dump(heap, args, true, &out), 0, "%s: %s", args, out);
			free(out);
			snprintf(args, sizeof args, "%s --json", cmds[i]);
			if (i + 1 < sizeof cmds / sizeof *cmds) {
				cr_assert_eq(du_dump(heap, args, true, &out), 0, "%s: %s", args,
				             out);
				free(out);
			}
			/* the writer is not blocked: it commits while we read */
			for (int w = 0; commits(count) == before && w < 30000; w++)
				usleep(1000);
			cr_assert_gt(commits(count), before, "writer stalled after %s",
			             cmds[i]);
		}
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	writer_pid = 0;
	cr_assert(WIFSIGNALED(st), "writer exited early: %d", WEXITSTATUS(st));
	snprintf(args, sizeof args, "%s/backup", du_tmp.dir);
	du_json_eq(args, "verify", "d['ok']", "True");
	du_json_eq(heap, "verify", "d['ok']", "True");
}

/* Every regression input of the fuzzer, through the same path. */
Test(live, fuzz_regressions, .init = du_setup, .fini = du_teardown, .timeout = 120)
{
	const char *dirs[] = { "corpus", "crashers" };
	char path[512], work[512], lock[520];
	int n = 0;

	snprintf(path, sizeof path, "%s/tests/fuzz/seeds", tl_src());
	snprintf(work, sizeof work, "%s/heap", du_tmp.dir);
	snprintf(lock, sizeof lock, "%s-lock", work);
	cr_assert_geq(fz_load_seeds(path, work), 1, "seeds in %s", path);
	for (size_t i = 0; i < 2; i++) {
		DIR *d;
		struct dirent *e;

		snprintf(path, sizeof path, "%s/tests/fuzz/%s", tl_src(), dirs[i]);
		if (!(d = opendir(path)))
			continue;
		while ((e = readdir(d))) {
			char file[1024];
			uint8_t *buf;
			size_t len;

			if (e->d_name[0] == '.')
				continue;
			snprintf(file, sizeof file, "%s/%s", path, e->d_name);
			buf = (uint8_t *)tl_read(file, &len);
			cr_assert_eq(fz_run(buf, len, work), 0, "%s", file);
			free(buf);
			unlink(work);
			unlink(lock);
			n++;
		}
		closedir(d);
	}
	cr_log_info("replayed %d fuzz inputs", n);
	cr_assert_geq(n, 6);
}
