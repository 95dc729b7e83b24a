/*
 * tests/crash/test_crash_bgmerge.c - SIGKILL of a process whose merge
 * thread computes and installs slices (AH_OPEN_BGMERGE).  A child appends
 * K seeded commits (each records its number in source "model"; some move
 * since, some run ah_maintain) while its merge thread merges, and is
 * killed at a random moment.  The heap must then verify, and hold exactly
 * the contents an inline run had after commit "model" (the model: the
 * same commits in the parent, no merge thread, hashed after each).  Then
 * the heap is reopened with the merge thread, one more commit wakes it,
 * and every merge left in progress by the kill must resume from its stored
 * boundary and complete (ah_merge_wait: no error, no merge left, verify
 * clean).  Children never call Criterion.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"
#include "tl_run.h"

#define K 40
#define NUPD 20000u
#define SEED 777001u
#define QUANTUM 4096u

static ah_update ups[NUPD];
static uint64_t keys[NUPD];

/* Commit k (1..K) of the history; 0 or an error (children: no asserts). */
static int commit_k(ah_heap *h, uint64_t k)
{
	uint64_t s = SEED * 31 + k, n = NUPD / 4 + tl_below(&s, 3 * NUPD / 4);
	ah_txn *t;
	int rc;

	for (uint64_t i = 0; i < n; i++) {
		keys[i] = tl_below(&s, 8 * NUPD);
		ups[i] = (ah_update){ &keys[i], 8, "v", 1, k - 1,
		                      tl_below(&s, 6) ? 1 : -1 };
	}
	if ((rc = ah_txn_begin(h, 0, &t)) != 0)
		return rc;
	if (k == 1)
		rc = ah_arrangement_create(t, "a");
	if (rc == 0)
		rc = ah_append(t, "a", k - 1, k, ups, n);
	if (rc == 0 && k % 5 == 0)
		rc = ah_set_since(t, "a", k - 2);
	if (rc == 0 && k % 7 == 0)
		rc = ah_maintain(t, "a", 5000, NULL);
	if (rc == 0)
		rc = ah_source_put(t, "model", &k, sizeof k);
	if (rc != 0) {
		ah_txn_abort(t);
		return rc;
	}
	return ah_txn_commit(t);
}

static int child(const char *path, int fd)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC | AH_OPEN_BGMERGE,
	                         1024 * TL_MiB, QUANTUM);
	ah_heap *h;
	int rc;

	if ((rc = ah_open(path, &o, &h)) != 0)
		return rc;
	if (write(fd, "g", 1) != 1)
		return AH_EIO;
	for (uint64_t k = 1; k <= K; k++)
		if ((rc = commit_k(h, k)) != 0)
			return rc;
	return ah_close(h);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* After a kill: reopen with the merge thread, commit K + 1 (or 1 when
 * nothing was committed), wait, and check that no merge is left. */
static void resume_merges(const char *path, uint64_t model)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC | AH_OPEN_BGMERGE,
	                         1024 * TL_MiB, QUANTUM);
	ah_arrangement_info in;
	ah_merge_stats st;
	ah_heap *h;
	ah_txn *t;

	TL_OK(ah_open(path, &o, &h));
	TL_OK(commit_k(h, model + 1));
	TL_OK(ah_merge_wait(h, &st));
	cr_assert_eq(st.errors, 0);
	TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	TL_OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	cr_assert_eq(in.merging, 0, "a merge left after the resume");
	TL_OK(tl_verify(h, NULL));
	TL_OK(ah_close(h));
}

Test(crash, kill_during_background_merge, .timeout = 900)
{
	tl_dir d = tl_tmpdir("crashbg");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC, 1024 * TL_MiB,
	                         QUANTUM);
	uint64_t want[K + 1], nupd, m, s = tl_seed("crash/kill_during_background_merge",
	                                           SEED);
	uint64_t rounds = tl_torture() ? 60 : 20, t0, span, seen[2] = { 0, 0 };
	ah_heap *h;

	/* The model: the inline run, hashed after every commit. */
	TL_OK(ah_open(d.path, &o, &h));
	want[0] = 0;
	t0 = now_us();
	for (uint64_t k = 1; k <= K; k++) {
		TL_OK(commit_k(h, k));
		tl_content(h, "a", &want[k], &nupd, &m);
		cr_assert_eq(m, k);
	}
	span = now_us() - t0;
	TL_OK(ah_close(h));
	/* round 0 is not killed: it measures the child's time, the span the
	 * kills of the other rounds fall in */
	for (uint64_t r = 0; r <= rounds; r++) {
		uint64_t delay = tl_below(&s, span + 1), got;
		int fds[2], status;
		char c;
		pid_t pid;

		tl_rmdir(&d);
		d = tl_tmpdir("crashbg");
		cr_assert_eq(pipe(fds), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(child(d.path, fds[1]) == 0 ? 0 : 2);
		}
		close(fds[1]);
		cr_assert_eq(read(fds[0], &c, 1), 1, "child failed to open");
		close(fds[0]);
		t0 = now_us();
		if (r > 0) {
			usleep((useconds_t)delay);
			kill(pid, SIGKILL);
		}
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		if (r == 0)
			span = now_us() - t0;
		cr_assert(WIFSIGNALED(status) ||
		          (WIFEXITED(status) && WEXITSTATUS(status) == 0),
		          "round %" PRIu64 ": child failed", r);
		seen[WIFSIGNALED(status) ? 0 : 1]++;
		o.flags &= ~AH_OPEN_CREATE;
		TL_OK(ah_open(d.path, &o, &h));
		int rc = tl_verify(h, NULL);
		cr_assert_eq(rc, 0, "round %" PRIu64 " (delay %" PRIu64 " us): "
		             "verify %s", r, delay, ah_err_name(rc));
		m = 0;
		got = 0;
		ah_txn *t;
		TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
		bool have = ah_arrangement_info_get(t, "a", &(ah_arrangement_info){ 0 }) == 0;
		ah_txn_abort(t);
		if (have)
			tl_content(h, "a", &got, &nupd, &m);
		TL_OK(ah_close(h));
		o.flags |= AH_OPEN_CREATE;
		cr_assert_leq(m, K);
		if (have)
			cr_assert_eq(got, want[m], "round %" PRIu64 " (delay %" PRIu64
			             " us): contents after commit %" PRIu64
			             " differ from the model", r, delay, m);
		if (have && m < K)
			resume_merges(d.path, m);
	}
	printf("crash/kill_during_background_merge: %" PRIu64 " kills (history "
	       "%" PRIu64 " ms with the merge thread): %" PRIu64 " killed, %"
	       PRIu64 " finished first\n", rounds, span / 1000, seen[0],
	       seen[1] - 1);
	tl_rmdir(&d);
}
