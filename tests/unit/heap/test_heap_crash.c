/*
 * tests/unit/heap/test_heap_crash.c - processes that die: a writer killed
 * between reserving a chunk and committing leaves the previous commit
 * exactly; 50 readers killed while holding snapshots leave stale slots that
 * the next open clears, after which the writer reuses freed space.
 */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "heap_test.h"

#define SEED 7777u

Test(heap_crash, writer_killed_before_commit)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	int fds[2];
	char c;
	pid_t pid;
	int status;

	cr_log_info("seed %u", SEED);
	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 3; i++)
		ht_put_chunk(t, 100000 * (size_t)(i + 1), SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		heap *hc;
		heap_txn *tc;
		uint64_t id;
		void *body;
		size_t cap;

		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (heap_open(d.path, &o, &hc) != 0 ||
		    heap_txn_begin(hc, false, &tc) != 0 ||
		    heap_chunk_reserve(tc, 3 * MiB, &id, &body, &cap) != 0)
			_exit(1);
		ht_fill(body, 3 * MiB, SEED + 1, id);
		if (heap_chunk_seal(tc, id, body, 3 * MiB) != 0 ||
		    heap_chunk_free(tc, 1) != 0)
			_exit(1);
		(void)!write(fds[1], "r", 1);
		for (;;)
			pause();
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], &c, 1), 1, "child failed before pausing");
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	close(fds[0]);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 3);
	for (uint64_t id = 1; id <= 3; id++) {
		const void *body;
		size_t used;

		cr_assert_eq(heap_chunk_get(t, id, &body, &used), 0);
		cr_assert_eq(used, 100000 * id);
		cr_assert(ht_same(body, used, SEED, id));
		cr_assert_eq(heap_chunk_verify(t, id), 0);
	}
	heap_txn_abort(t);
	/* The writer lock died with the child: writing works. */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(ht_put_chunk(t, 10, SEED), 4);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

#define NREADERS 50

static void rewrite(heap *h, int n)
{
	heap_txn *t;

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (;;) {
		heap_chunk_info ci;

		if (heap_chunk_next(t, 0, true, &ci) != 0)
			break;
		cr_assert_eq(heap_chunk_free(t, ci.id), 0);
	}
	for (int i = 0; i < n; i++)
		ht_put_chunk(t, heap_chunk_max_body(h), SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
}

Test(heap_crash, readers_killed)
{
	tl_dir d;
	heap *h;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 256 * MiB, 0);
	ah_heap_stat st;
	pid_t pids[NREADERS];
	uint64_t used[8];
	int fds[2], status;
	char c;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	rewrite(h, 8);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(pipe(fds), 0);
	for (int i = 0; i < NREADERS; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			heap *hc;
			heap_txn *tc;

			close(fds[0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (heap_open(d.path, &o, &hc) != 0 ||
			    heap_txn_begin(hc, true, &tc) != 0)
				_exit(1);
			(void)!write(fds[1], "r", 1);
			for (;;)
				pause();
		}
	}
	close(fds[1]);
	for (int i = 0; i < NREADERS; i++)
		if (read(fds[0], &c, 1) != 1)
			break;
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(heap_close(h), 0);
	for (int i = 0; i < NREADERS; i++) {
		cr_assert_eq(kill(pids[i], SIGKILL), 0);
		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
	}
	cr_assert_eq(st.readers_used, NREADERS, "readers_used %u",
	             st.readers_used);
	close(fds[0]);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(st.readers_used, 0);
	cr_assert_eq(st.readers_max, 126);
	for (int r = 0; r < 8; r++) {
		rewrite(h, 8);
		cr_assert_eq(heap_stat(h, &st), 0);
		used[r] = st.pages_used;
		cr_log_info("round %d: pages_used %lu pages_free %lu", r,
		            (unsigned long)st.pages_used,
		            (unsigned long)st.pages_free);
	}
	/* LMDB reuses a page two commits after it was freed (the last commit
	 * stays readable), so three generations of 8 MiB settle the size; the
	 * free-list records settle a few rounds later.  No more growth. */
	cr_assert_eq(used[7], used[4], "pages_used %lu then %lu",
	             (unsigned long)used[4], (unsigned long)used[7]);
	cr_assert_lt(used[7] * st.page_size, 25 * MiB);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
