/*
 * tests/unit/test_bgmerge_whole.c - a merge run whole while a caller
 * waits (ARCHITECTURE §6 "The merge thread"): with the thread held
 * (bgm_test_hold) a fresh merge of two batches is queued; a caller then
 * waits in ah_merge_wait, and the released thread must run the merge to
 * its end on two threads (merge_parallel: exactly one more such merge).
 * Without a waiter, above the bound, or when merge_parallel does not take
 * the merge (inputs of one chunk each), the thread slices it as before
 * and never loops.  Every case ends with one batch, no merge, the
 * contents of an inline twin, and a heap that verifies.  Internal: it
 * holds the thread and tunes merge_parallel (merge_par_tune).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arrangement/merge.h"
#include "txn/txn.h"
#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"

#define OK(expr)                                                               \
	do {                                                                   \
		int ok_rc_ = (expr);                                           \
		cr_assert_eq(ok_rc_, 0, "%s: %s", #expr, ah_err_name(ok_rc_)); \
	} while (0)

/* Two appends of n updates (one commit each), then ah_maintain(fuel),
 * which on a heap with the thread starts their merge and leaves it to
 * the thread.  Returns the contents' hash before any merge. */
static uint64_t two_and_maintain(ah_heap *h, uint64_t seed, size_t n)
{
	ah_update *u = calloc(n, sizeof *u);
	uint64_t *keys = calloc(n, sizeof *keys), s = seed, hash, cnt, m;
	ah_txn *t;

	cr_assert(u && keys);
	for (uint64_t c = 0; c < 2; c++) {
		for (size_t i = 0; i < n; i++) {
			keys[i] = tl_below(&s, 4 * n);
			u[i] = (ah_update){ &keys[i], 8, "val", 1 + (keys[i] & 1),
			                    c, tl_below(&s, 5) ? 1 : -1 };
		}
		OK(ah_txn_begin(h, 0, &t));
		if (c == 0)
			OK(ah_arrangement_create(t, "a"));
		OK(ah_append(t, "a", c, c + 1, u, n));
		OK(ah_txn_commit(t));
	}
	tl_content(h, "a", &hash, &cnt, &m);
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_maintain(t, "a", 1000000, NULL));
	OK(ah_txn_commit(t));
	free(u);
	free(keys);
	return hash;
}

static uint64_t merging(ah_heap *h)
{
	ah_arrangement_info in;
	ah_txn *t;

	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	return in.merging;
}

struct waiter {
	ah_heap *h;
	ah_merge_stats st;
	int rc;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;

	w->rc = ah_merge_wait(w->h, &w->st);
	return NULL;
}

/* The case: n updates per batch, a waiter or not; *par the merges
 * merge_parallel ran meanwhile.  Checks the end state against an inline
 * twin. */
static void run_case(const char *name, size_t n, bool waiter, uint64_t *par)
{
	tl_dir d = tl_tmpdir(name);
	ah_heap *in = tl_open(d.dir, "inline", AH_OPEN_NOSYNC, 0);
	ah_heap *bg = tl_open(d.dir, "bg", AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, 0);
	uint64_t want, got, cnt, m, m0, m1, h0, h1;
	ah_txn *t;

	want = two_and_maintain(in, 1306, n);
	cr_assert_eq(merging(in), 0, "inline: merged at once");
	bgm_test_hold(true);
	got = two_and_maintain(bg, 1306, n);
	cr_assert_eq(got, want);
	cr_assert_eq(merging(bg), 1, "the merge is left to the thread");
	merge_par_counts(&m0, &h0);
	if (waiter) {
		struct waiter w = { bg, { 0 }, -1 };
		pthread_t th;

		cr_assert_eq(pthread_create(&th, NULL, wait_main, &w), 0);
		while (bgm_test_waiters(bg) != 1)
			usleep(1000);
		bgm_test_hold(false);
		cr_assert_eq(pthread_join(th, NULL), 0);
		OK(w.rc);
		cr_assert_eq(w.st.errors, 0);
	} else {
		bgm_test_hold(false);
		while (merging(bg) != 0) /* the thread's own pace */
			usleep(1000);
	}
	merge_par_counts(&m1, &h1);
	*par = m1 - m0;
	cr_assert_eq(merging(bg), 0);
	OK(ah_txn_begin(bg, AH_TXN_RDONLY, &t));
	ah_arrangement_info ai;
	OK(ah_arrangement_info_get(t, "a", &ai));
	ah_txn_abort(t);
	cr_assert_eq(ai.batches, 1);
	OK(tl_verify(bg, NULL));
	tl_content(in, "a", &want, &cnt, &m);
	tl_content(bg, "a", &got, &cnt, &m);
	cr_assert_eq(got, want, "%s: contents differ from the inline twin", name);
	OK(ah_close(in));
	OK(ah_close(bg));
	tl_rmdir(&d);
}

/* Inputs of several chunks each, two ranges at least. */
#define BIG 120000

Test(bgmerge_whole, a_waiter_gets_the_merge_run_whole, .timeout = 300)
{
	uint64_t par;

	merge_par_tune(1, 64 << 10);
	run_case("bgwhole", BIG, true, &par);
	cr_assert_eq(par, 1, "merge_parallel ran %" PRIu64 " merges", par);
}

Test(bgmerge_whole, without_a_waiter_it_is_sliced, .timeout = 300)
{
	uint64_t par;

	merge_par_tune(1, 64 << 10);
	run_case("bgsliced", BIG, false, &par);
	cr_assert_eq(par, 0);
}

Test(bgmerge_whole, above_the_bound_it_is_sliced, .timeout = 300)
{
	uint64_t par;

	merge_par_tune(1, 64 << 10);
	bgm_test_whole_max(1);
	run_case("bgbound", BIG, true, &par);
	cr_assert_eq(par, 0);
}

Test(bgmerge_whole, below_merge_par_min_it_is_sliced, .timeout = 300)
{
	uint64_t par;

	merge_par_tune((uint64_t)1 << 40, 64 << 10);
	run_case("bgmin", BIG, true, &par);
	cr_assert_eq(par, 0);
}

/* One chunk per input: merge_parallel finds no split and does not take
 * the merge; the install writes nothing, and the thread must slice it
 * from then on instead of trying again forever. */
Test(bgmerge_whole, a_merge_merge_parallel_refuses_is_sliced, .timeout = 300)
{
	uint64_t par;

	merge_par_tune(1, 64 << 10);
	run_case("bgrefused", 2000, true, &par);
	cr_assert_eq(par, 0);
}

/* Not in `make tsan`: ThreadSanitizer cannot start threads in a child
 * forked from a process that had threads, and the child needs two. */
#ifndef AH_TSAN_DRIVER
/* The child of a_kill_during_the_whole_merge_loses_nothing: reopens the
 * heap with the thread, holds it, commits an ah_maintain(fuel) that hands
 * it the merge, registers a waiter, tells the parent (one byte on fd) and
 * releases the thread, which runs the merge whole; a second byte once the
 * wait returned.  No Criterion here: _exit codes. */
static void kill_child(const char *path, int fd)
{
	ah_open_opts o = tl_opts(AH_OPEN_BGMERGE, 0, 0);
	struct waiter w = { NULL, { 0 }, -1 };
	pthread_t th;
	ah_txn *t;

	merge_par_tune(1, 64 << 10);
	bgm_test_hold(true);
	if (ah_open(path, &o, &w.h) || ah_txn_begin(w.h, 0, &t) ||
	    ah_maintain(t, "a", 1000000, NULL) || ah_txn_commit(t) ||
	    pthread_create(&th, NULL, wait_main, &w))
		_exit(2);
	while (bgm_test_waiters(w.h) != 1)
		usleep(100);
	uint64_t m0, m1, h0, h1;
	merge_par_counts(&m0, &h0);
	if (write(fd, "s", 1) != 1)
		_exit(3);
	bgm_test_hold(false);
	pthread_join(th, NULL);
	merge_par_counts(&m1, &h1);
	if (m1 != m0 + 1) /* not run whole */
		_exit(6);
	if (w.rc != 0 || write(fd, "d", 1) != 1)
		_exit(4);
	_exit(ah_close(w.h) == 0 ? 0 : 5);
}

/* A kill at any moment of the whole merge (its two threads, its commit)
 * leaves the heap of the last commit or of the merge's: it verifies, its
 * contents are the inline twin's, and one more wait finishes the merge.
 * Round 0 is not killed and times the merge (from the waiter's release to
 * the wait's end); the other rounds kill after a delay drawn from a fixed
 * seed below that time. */
Test(bgmerge_whole, a_kill_during_the_whole_merge_loses_nothing,
     .timeout = 600)
{
	uint64_t s = tl_seed("bgmerge_whole/a_kill_during_the_whole_merge", 1322);
	unsigned kills = 0, done = 0;
	uint64_t span_us = 0;

	for (int round = 0; round < 11; round++) {
		tl_dir d = tl_tmpdir("bgwkill");
		ah_heap *in = tl_open(d.dir, "inline", AH_OPEN_NOSYNC, 0);
		ah_heap *bg = tl_open(d.dir, "bg", AH_OPEN_BGMERGE, 0);
		char path[512];
		uint64_t want, got, cnt, m;
		int p[2], status;
		char c;

		snprintf(path, sizeof path, "%s/bg", d.dir);
		want = two_and_maintain(in, 1306 + round, BIG);
		bgm_test_hold(true); /* the merge stays queued, not started */
		cr_assert_eq(two_and_maintain(bg, 1306 + round, BIG), want);
		OK(ah_close(bg));
		bgm_test_hold(false);
		cr_assert_eq(pipe(p), 0);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(p[0]);
			kill_child(path, p[1]);
		}
		close(p[1]);
		cr_assert_eq(read(p[0], &c, 1), 1, "round %d: the child failed", round);
		if (round == 0) { /* the merge's time, unkilled */
			struct timespec a, b;
			clock_gettime(CLOCK_MONOTONIC, &a);
			cr_assert_eq(read(p[0], &c, 1), 1, "the wait failed");
			clock_gettime(CLOCK_MONOTONIC, &b);
			span_us = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000 +
			          (uint64_t)(b.tv_nsec - a.tv_nsec) / 1000 + 1;
			cr_assert_eq(waitpid(pid, &status, 0), pid);
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		} else {
			usleep((useconds_t)tl_below(&s, span_us));
			kill(pid, SIGKILL);
			cr_assert_eq(waitpid(pid, &status, 0), pid);
			if (read(p[0], &c, 1) == 1)
				done++;
			else
				kills++;
		}
		close(p[0]);
		bg = tl_open_path(path, AH_OPEN_BGMERGE, 0);
		OK(tl_verify(bg, NULL));
		tl_content(bg, "a", &got, &cnt, &m);
		cr_assert_eq(got, want, "round %d: contents after the kill", round);
		ah_txn *t; /* one more commit hands the merge to the thread */
		OK(ah_txn_begin(bg, 0, &t));
		OK(ah_maintain(t, "a", 1000000, NULL));
		OK(ah_txn_commit(t));
		ah_merge_stats st;
		OK(ah_merge_wait(bg, &st));
		cr_assert_eq(merging(bg), 0, "round %d: a merge is left", round);
		OK(tl_verify(bg, NULL));
		tl_content(bg, "a", &got, &cnt, &m);
		cr_assert_eq(got, want, "round %d: contents after the merge", round);
		OK(ah_close(bg));
		OK(ah_close(in));
		tl_rmdir(&d);
	}
	cr_log_info("bgmerge_whole/a_kill_during_the_whole_merge: merge %" PRIu64
	            " us; %u killed, %u finished first", span_us, kills, done);
	cr_assert_gt(kills, 0, "no kill landed during the merge");
}
#endif /* AH_TSAN_DRIVER */
