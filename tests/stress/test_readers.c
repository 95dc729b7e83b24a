/*
 * tests/stress/test_readers.c - reader processes (issue 7): 200 readers
 * killed with SIGKILL while holding snapshots stop neither the writer nor
 * the next open (which clears their slots); one reader holding an old
 * snapshot makes the file's used pages grow while the writer merges and
 * compacts, and once it ends the growth stops.  Children never call
 * Criterion: plain checks and _exit codes.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "tl_dir.h"
#include "tl_heap.h"

#define NREADERS 200

static ah_open_opts opts(void)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC,
	                          256 * TL_MiB, 512);

	o.max_readers = NREADERS + 16;
	return o;
}

/* One writer round: 2000 updates that cancel the previous round's, since
 * moved up to the new upper - 1 and the spine fully maintained, so the
 * live data stays the same size and old chunks are freed every round. */
static void round_(ah_heap *h, uint64_t r)
{
	static ah_update ups[4000];
	static char keys[2000][8];
	static uint8_t vals[2];
	ah_txn *t;
	size_t n = 0;
	int idle;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	if (r == 0)
		cr_assert_eq(ah_arrangement_create(t, "g"), 0);
	/* Each key's val is the round number's low byte: retract the old. */
	vals[0] = (uint8_t)(r - 1);
	vals[1] = (uint8_t)r;
	for (int i = 0; i < 2000; i++) {
		snprintf(keys[i], sizeof keys[i], "k%05d", i);
		if (r > 0)
			ups[n++] = (ah_update){ keys[i], 6, &vals[0], 1, r, -1 };
		ups[n++] = (ah_update){ keys[i], 6, &vals[1], 1, r, 1 };
	}
	cr_assert_eq(ah_append(t, "g", r, r + 1, ups, n), 0);
	cr_assert_eq(ah_set_since(t, "g", r), 0);
	cr_assert_eq(ah_maintain(t, "g", 0, &idle), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
}

static uint64_t pages_used(ah_heap *h)
{
	ah_heap_stat st;

	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	return st.pages_used;
}

/* A reader child: opens, holds a snapshot that it reads, reports 'r',
 * then waits for a byte on in (or forever when in < 0). */
static void reader_child(const char *path, int out, int in)
{
	ah_open_opts o = opts();
	ah_heap *h;
	ah_txn *t;
	ah_cursor *c;
	char b;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	o.flags &= ~AH_OPEN_CREATE;
	if (ah_open(path, &o, &h) != 0 ||
	    ah_txn_begin(h, AH_TXN_RDONLY, &t) != 0 ||
	    ah_cursor_open(t, "g", &c) != 0 || !ah_cursor_key_valid(c))
		_exit(2);
	if (write(out, "r", 1) != 1)
		_exit(3);
	if (in < 0)
		for (;;)
			pause();
	if (read(in, &b, 1) != 1)
		_exit(4);
	ah_cursor_close(c);
	ah_txn_abort(t);
	ah_close(h);
	_exit(0);
}

Test(stress, readers_killed, .timeout = 120)
{
	tl_dir d;
	ah_open_opts o = opts();
	ah_heap *h;
	ah_heap_stat st;
	pid_t pids[NREADERS];
	int fds[2], status;
	uint64_t r = 0, p0;
	char c;

	d = tl_tmpdir("stress");
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	for (; r < 10; r++)
		round_(h, r);
	cr_assert_eq(pipe(fds), 0);
	for (int i = 0; i < NREADERS; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			close(fds[0]);
			reader_child(d.path, fds[1], -1);
		}
	}
	close(fds[1]);
	for (int i = 0; i < NREADERS; i++)
		cr_assert_eq(read(fds[0], &c, 1), 1, "reader %d failed", i);
	close(fds[0]);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.readers_used, NREADERS);
	/* The writer does not wait for readers. */
	round_(h, r++);
	for (int i = 0; i < NREADERS; i++)
		cr_assert_eq(kill(pids[i], SIGKILL), 0);
	for (int i = 0; i < NREADERS; i++) {
		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		cr_assert(WIFSIGNALED(status), "reader %d exited with %d", i,
		          WEXITSTATUS(status));
	}
	/* Dead readers' slots are cleared by the writer's next txn:
	 * the writer keeps going regardless. */
	round_(h, r++);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0, "the next open");
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.readers_used, 0, "stale reader slots not cleared");
	/* warm-up: the file reaches the size its free list settles at (with
	 * chunks of two classes, LMDB may need one more run of the larger
	 * one before the runs it frees line up; a leak grows every round) */
	for (int i = 0; i < 15; i++)
		round_(h, r++);
	p0 = pages_used(h);
	for (int i = 0; i < 10; i++)
		round_(h, r++);
	cr_assert_eq(pages_used(h), p0, "freed pages are not reused");
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	printf("stress/readers_killed: %d readers killed holding snapshots; "
	       "open cleared their slots, writer steady at %" PRIu64
	       " pages\n", NREADERS, p0);
	tl_rmdir(&d);
}

/* The reader that holds pages back is named: by ah_space_get, and by
 * `ah-dump HEAP space` when the tool is built (AH_BUILD). */
static void names_reader(ah_heap *h, const char *path, pid_t pid)
{
	const char *build = getenv("AH_BUILD");
	ah_space_info si;
	ah_txn *t;
	char cmd[512], buf[4096], want[32];
	size_t n;
	FILE *f;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_space_get(t, &si), 0);
	ah_txn_abort(t);
	cr_assert_eq(si.oldest_reader_pid, (int64_t)pid);
	cr_assert_geq(si.oldest_reader_age, 20);
	cr_assert_gt(si.pages_pinned, 0);
	snprintf(cmd, sizeof cmd, "%s/ah-dump", build ? build : "");
	if (build == NULL || access(cmd, X_OK) != 0) {
		cr_log_warn("ah-dump not built (AH_BUILD): space not checked");
		return;
	}
	snprintf(cmd, sizeof cmd, "%s/ah-dump '%s' space 2>&1", build, path);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	cr_assert_eq(pclose(f), 0, "%s: %s", cmd, buf);
	snprintf(want, sizeof want, "%d", (int)pid);
	cr_assert_not_null(strstr(buf, want), "ah-dump space does not name "
	                   "reader %d:\n%s", (int)pid, buf);
}

Test(stress, pinned_reader_growth, .timeout = 120)
{
	tl_dir d;
	ah_open_opts o = opts();
	ah_heap *h;
	int up[2], down[2], status;
	uint64_t r = 0, p1, p2, p3, p4;
	pid_t pid;
	char c;

	d = tl_tmpdir("stress");
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	for (; r < 30; r++)
		round_(h, r);
	p1 = pages_used(h);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	cr_assert_eq(pages_used(h), p1, "not steady without readers");

	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		reader_child(d.path, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	cr_assert_eq(read(up[0], &c, 1), 1);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	p2 = pages_used(h);
	cr_assert_gt(p2, p1 + 20, "an old snapshot should make the file grow"
	             " (%" PRIu64 " -> %" PRIu64 " pages)", p1, p2);
	names_reader(h, d.path, pid);
	cr_assert_eq(write(down[1], "x", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(up[0]);
	close(down[1]);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	p3 = pages_used(h);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	p4 = pages_used(h);
	cr_assert_eq(p3, p2, "growth goes on after the reader ended");
	cr_assert_eq(p4, p3);
	cr_assert_eq(ah_close(h), 0);
	printf("stress/pinned_reader_growth: %" PRIu64 " pages steady, %"
	       PRIu64 " while a reader pinned a snapshot for 20 rounds, %"
	       PRIu64 " 40 rounds after it ended\n", p1, p2, p4);
	tl_rmdir(&d);
}

/* A reader killed while it holds a snapshot stops pinning pages at the
 * writer's next transaction, with no reopen: a long-lived writer clears
 * dead readers' slots itself, and ah_space_get / ah_heap_stat_get never
 * name a dead process.  (Before, only ah_open cleared them: a killed
 * reader pinned space for as long as the writer lived.) */
Test(stress, dead_reader_released_without_reopen, .timeout = 120)
{
	tl_dir d;
	ah_open_opts o = opts();
	ah_heap *h;
	ah_heap_stat st;
	ah_space_info si;
	ah_txn *t;
	int up[2], status;
	uint64_t r = 0, p1, p2, p3, p4;
	pid_t pid;
	char c;

	d = tl_tmpdir("stress");
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	for (; r < 30; r++)
		round_(h, r);
	p1 = pages_used(h);
	cr_assert_eq(pipe(up), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(up[0]);
		reader_child(d.path, up[1], -1);
	}
	close(up[1]);
	cr_assert_eq(read(up[0], &c, 1), 1);
	close(up[0]);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	p2 = pages_used(h);
	cr_assert_gt(p2, p1 + 20, "the snapshot should pin pages");
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status));
	/* No reopen: the same handle. */
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.readers_used, 0, "a dead reader counted as used");
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_space_get(t, &si), 0);
	ah_txn_abort(t);
	cr_assert_eq(si.oldest_reader_pid, 0, "dead pid %d named as the "
	             "oldest reader", (int)si.oldest_reader_pid);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	p3 = pages_used(h);
	for (int i = 0; i < 20; i++)
		round_(h, r++);
	p4 = pages_used(h);
	cr_assert_eq(p3, p2, "the dead reader still pins pages (%" PRIu64
	             " -> %" PRIu64 ")", p2, p3);
	cr_assert_eq(p4, p3);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* Files in DIR/SUB: 0 when it is missing. */
static int count_files(const char *dir, const char *sub)
{
	char path[700];
	DIR *dp;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof path, "%s/%s", dir, sub);
	if (!(dp = opendir(path)))
		return 0;
	while ((e = readdir(dp)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(dp);
	return n;
}

/* What a push left in DIR: manifests, objects and temporary files (its
 * lock file and empty directories, made first, not counted). */
static int count_entries(const char *dir)
{
	return count_files(dir, "manifests") + count_files(dir, "objects") +
	       count_files(dir, "tmp");
}

/* A process killed while it holds every reader slot never blocks another
 * process's read txn: while it lives a read txn gets AH_EBUSY (the table
 * is full), and once it is dead the same handle's next read txn clears
 * the dead slots and begins, with no write txn or reopen between.  The
 * calls that read in a snapshot of their own (ah_heap_stat_get,
 * ah_backup, ah_snapshot_push) and ah_open (which takes a slot briefly)
 * say AH_EBUSY too while it lives, leave nothing behind, and work once
 * it is dead. */
Test(stress, dead_readers_never_block_a_reader, .timeout = 60)
{
	tl_dir d = tl_tmpdir("stress");
	ah_open_opts o = opts();
	ah_heap *h;
	ah_txn *t;
	int up[2], status;
	pid_t pid;
	char c = 0;

	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	round_(h, 0);
	cr_assert_eq(pipe(up), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_open_opts ro = tl_opts(AH_OPEN_RDONLY, 0, 0);
		ah_heap *hc;
		ah_txn *tc;
		unsigned held = 0;
		int rc;

		close(up[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (ah_open(d.path, &ro, &hc) != 0)
			_exit(1);
		while ((rc = ah_txn_begin(hc, AH_TXN_RDONLY, &tc)) == 0)
			held++;
		c = rc == AH_EBUSY && held >= 100 ? 'r' : 'x';
		(void)!write(up[1], &c, 1);
		for (;;)
			pause();
	}
	close(up[1]);
	cr_assert_eq(read(up[0], &c, 1), 1);
	close(up[0]);
	cr_assert_eq(c, 'r', "the child could not fill the reader table");
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), AH_EBUSY);
	/* the calls that read in a snapshot of their own say so too */
	ah_heap_stat hs;
	char copy[600];
	snprintf(copy, sizeof copy, "%s.copy", d.path);
	cr_assert_eq(ah_heap_stat_get(h, &hs), AH_EBUSY);
	cr_assert_eq(ah_backup(h, copy), AH_EBUSY);
	cr_assert_eq(access(copy, F_OK), -1, "a refused backup left a file");
	char snaps[600];
	snprintf(snaps, sizeof snaps, "%s.snaps", d.path);
	cr_assert_eq(ah_snapshot_push(h, snaps, NULL), AH_EBUSY);
	cr_assert_eq(count_entries(snaps), 0,
	             "a refused push left a snapshot or manifest");
	/* opening takes a slot briefly: refused too, and leaves the heap
	 * openable once a slot is free */
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), AH_EBUSY);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status));
	cr_assert_eq(ah_open(d.path, &o, &h), 0,
	             "a dead process's slots blocked an open");
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0,
	             "a dead process's slots blocked a read txn");
	ah_txn_abort(t);
	cr_assert_eq(ah_heap_stat_get(h, &hs), 0);
	cr_assert_eq(ah_backup(h, copy), 0);
	cr_assert_eq(unlink(copy), 0);
	ah_snapshot_info si;
	cr_assert_eq(ah_snapshot_push(h, snaps, &si), 0);
	cr_assert_gt(count_entries(snaps), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
