/*
 * tests/api/test_bgmerge.c - the merge thread (AH_OPEN_BGMERGE), from
 * outside: a heap merged by it answers exactly as a twin heap merged
 * inline after every commit, also while the user drops and recreates the
 * arrangement, moves since and runs ah_maintain during background merges
 * (the thread must discard what it computed from a merge that changed);
 * ah_close while the thread computes leaves a heap that verifies and
 * holds everything committed; ah_merge_wait's errors.  Twins are driven
 * by the same seeded operations; hashes are of the logical contents
 * (tl_state_hash shape 0), and of the shape once both are fully merged.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"
#include "tl_run.h"

#define OK(expr)                                                               \
	do {                                                                   \
		int ok_rc_ = (expr);                                           \
		cr_assert_eq(ok_rc_, 0, "%s: %s", #expr, ah_err_name(ok_rc_)); \
	} while (0)

typedef struct twin {
	ah_heap *h[2];   /* 0: inline, 1: merge thread */
	uint64_t upper;
	uint64_t since;
} twin;

static void twin_open(twin *w, const char *dir, uint64_t quantum)
{
	memset(w, 0, sizeof *w);
	w->h[0] = tl_open(dir, "inline", AH_OPEN_NOSYNC, quantum);
	w->h[1] = tl_open(dir, "bg", AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, quantum);
}

/* n random updates at time upper: keys below kspace, some retractions. */
static void fill(uint64_t *s, ah_update *u, uint64_t *keys, size_t n,
                 uint64_t kspace, uint64_t time)
{
	for (size_t i = 0; i < n; i++) {
		keys[i] = tl_below(s, kspace);
		u[i] = (ah_update){ &keys[i], 8, "val", 1 + (keys[i] & 1), time,
		                    tl_below(s, 5) ? 1 : -1 };
	}
}

/* One seeded operation on both heaps, one commit each. */
static void twin_op(twin *w, uint64_t *s, uint64_t op, ah_update *u,
                    uint64_t *keys, size_t n)
{
	uint64_t kind = tl_below(s, 10), m = op + 1;
	uint64_t fuel = 1 + tl_below(s, 5000);
	size_t k = 1 + tl_below(s, n);

	fill(s, u, keys, k, 4 * n, w->upper);
	for (int i = 0; i < 2; i++) {
		ah_txn *t;

		OK(ah_txn_begin(w->h[i], 0, &t));
		if (op == 0 || kind == 9) {
			if (op != 0)
				OK(ah_arrangement_drop(t, "a"));
			OK(ah_arrangement_create(t, "a"));
		}
		uint64_t up = op == 0 || kind == 9 ? 0 : w->upper;
		if (kind == 8)
			OK(ah_maintain(t, "a", fuel, NULL));
		else if (kind == 7 && up > 0)
			OK(ah_set_since(t, "a", up - 1));
		for (size_t j = 0; j < k; j++)
			u[j].time = up;
		OK(ah_append(t, "a", up, up + 1, u, k));
		OK(ah_source_put(t, "model", &m, sizeof m));
		OK(ah_txn_commit(t));
	}
	w->upper = (op == 0 || kind == 9) ? 1 : w->upper + 1;
}

static void twin_same(twin *w, int shape, uint64_t op)
{
	uint64_t ha, hb, na, nb, ma, mb;

	tl_content(w->h[0], "a", &ha, &na, &ma);
	tl_content(w->h[1], "a", &hb, &nb, &mb);
	cr_assert_eq(ma, mb);
	cr_assert_eq(na, nb, "op %" PRIu64 ": %" PRIu64 " vs %" PRIu64
	             " updates", op, na, nb);
	cr_assert_eq(ha, hb, "op %" PRIu64 ": contents differ", op);
	if (shape) {
		tl_state a, b;

		OK(tl_state_hash(w->h[0], 1, &a));
		OK(tl_state_hash(w->h[1], 1, &b));
		cr_assert_eq(a.hash, b.hash, "shapes differ once merged");
	}
}

static void run_twins(const char *test, uint64_t seed, uint64_t ops,
                      size_t n, uint64_t quantum)
{
	tl_dir d = tl_tmpdir("bgmerge");
	uint64_t s = tl_seed(test, seed);
	ah_update *u = calloc(n, sizeof *u);
	uint64_t *keys = calloc(n, sizeof *keys);
	ah_merge_stats st;
	ah_arrangement_info in;
	twin w;
	ah_txn *t;

	cr_assert(u && keys);
	twin_open(&w, d.dir, quantum);
	for (uint64_t op = 0; op < ops; op++) {
		twin_op(&w, &s, op, u, keys, n);
		twin_same(&w, 0, op);
	}
	OK(ah_merge_wait(w.h[1], &st));
	cr_log_info("%s: %" PRIu64 " slices installed, %" PRIu64 " discarded",
	            test, st.installed, st.discarded);
	cr_assert_gt(st.installed, 0, "the merge thread did nothing");
	cr_assert_eq(st.errors, 0);
	OK(ah_txn_begin(w.h[1], AH_TXN_RDONLY, &t));
	OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	cr_assert_eq(in.merging, 0, "merges left after ah_merge_wait");
	for (int i = 0; i < 2; i++) {
		OK(tl_verify(w.h[i], NULL));
		OK(ah_txn_begin(w.h[i], 0, &t));
		OK(ah_maintain(t, "a", 0, NULL));
		OK(ah_txn_commit(t));
	}
	twin_same(&w, 1, ops);
	OK(ah_close(w.h[0]));
	OK(ah_close(w.h[1]));
	free(u);
	free(keys);
	tl_rmdir(&d);
}

Test(bgmerge, same_answers_as_inline, .timeout = 300)
{
	run_twins("bgmerge/same_answers_as_inline", 1301, 120, 3000, 1024);
}

Test(bgmerge, same_answers_default_quantum, .timeout = 300)
{
	run_twins("bgmerge/same_answers_default_quantum", 1302, 40, 60000, 0);
}

/* k appends of n updates at times 0..k-1 (k = TL_FANIN: the size
 * policy's first merge; fewer of one size: none). */
static void appends(ah_heap *h, uint64_t seed, uint64_t k, size_t n)
{
	ah_update *u = calloc(n, sizeof *u);
	uint64_t *keys = calloc(n, sizeof *keys), s = seed;

	cr_assert(u && keys);
	for (uint64_t c = 0; c < k; c++) {
		ah_txn *t;

		fill(&s, u, keys, n, 4 * n, c);
		OK(ah_txn_begin(h, 0, &t));
		if (c == 0)
			OK(ah_arrangement_create(t, "a"));
		OK(ah_append(t, "a", c, c + 1, u, n));
		OK(ah_source_put(t, "model", &(uint64_t){ c + 1 }, 8));
		OK(ah_txn_commit(t));
	}
	free(u);
	free(keys);
}

Test(bgmerge, close_while_computing, .timeout = 300)
{
	tl_dir d = tl_tmpdir("bgclose");
	uint64_t want, got, n, m, interrupted = 0;
	ah_merge_stats st;
	ah_heap *h = tl_open(d.dir, "model", AH_OPEN_NOSYNC, 0);

	tl_seed("bgmerge/close_while_computing", 1303);
	appends(h, 1303, TL_FANIN, 140000);
	tl_content(h, "a", &want, &n, &m);
	OK(ah_close(h));
	for (uint64_t r = 0; r < 8; r++) {
		ah_arrangement_info in;
		ah_txn *t;

		tl_rmdir(&d);
		d = tl_tmpdir("bgclose");
		h = tl_open_path(d.path, AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, 0);
		appends(h, 1303, TL_FANIN, 140000);
		usleep((useconds_t)(r * r * 2000));
		OK(ah_close(h)); /* the thread is stopped mid-slice */
		h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
		OK(tl_verify(h, NULL));
		tl_content(h, "a", &got, &n, &m);
		cr_assert_eq(got, want, "round %" PRIu64, r);
		OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
		OK(ah_arrangement_info_get(t, "a", &in));
		ah_txn_abort(t);
		interrupted += in.merging;
		OK(ah_close(h));
		/* the next commit of a merge thread resumes it to the end */
		h = tl_open_path(d.path, AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, 0);
		OK(ah_txn_begin(h, 0, &t));
		OK(ah_advance(t, "a", TL_FANIN, TL_FANIN + 1));
		OK(ah_maintain(t, "a", 1, NULL));
		OK(ah_txn_commit(t));
		OK(ah_merge_wait(h, &st));
		OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
		OK(ah_arrangement_info_get(t, "a", &in));
		ah_txn_abort(t);
		cr_assert_eq(in.merging, 0, "round %" PRIu64, r);
		cr_assert_eq(in.batches, 1);
		OK(tl_verify(h, NULL));
		tl_content(h, "a", &got, &n, &m);
		cr_assert_eq(got, want, "round %" PRIu64 " after the resume", r);
		OK(ah_close(h));
	}
	cr_log_info("bgmerge/close_while_computing: %" PRIu64 " of 8 closes "
	            "left the merge in progress", interrupted);
	cr_assert_gt(interrupted, 0, "no close met a merge in progress");
	tl_rmdir(&d);
}

Test(bgmerge, wait_errors_and_read_only, .timeout = 60)
{
	tl_dir d = tl_tmpdir("bgwait");
	ah_merge_stats st;
	ah_heap *h = tl_open_path(d.path, AH_OPEN_BGMERGE, 0);
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY | AH_OPEN_BGMERGE, 0, 0);
	ah_heap *ro;
	ah_txn *t;

	cr_assert_eq(ah_merge_wait(NULL, &st), AH_EINVAL);
	OK(ah_merge_wait(h, &st)); /* nothing started yet */
	cr_assert_eq(st.installed + st.discarded + st.errors, 0);
	OK(ah_txn_begin(h, 0, &t));
	/* the thread could never install while this thread holds the lock */
	cr_assert_eq(ah_merge_wait(h, &st), AH_ESTATE);
	OK(ah_arrangement_create(t, "a"));
	OK(ah_txn_commit(t));
	OK(ah_close(h));
	/* read-only: the flag is accepted and starts nothing */
	OK(ah_open(d.path, &o, &ro));
	OK(ah_merge_wait(ro, &st));
	cr_assert_eq(st.installed + st.discarded + st.errors, 0);
	OK(ah_close(ro));
	tl_rmdir(&d);
}

/* A forked child of a process with a merge thread has no thread: every
 * call fails with AH_EFORK before touching it, and the parent's thread
 * goes on merging. */
Test(bgmerge, fork_child_gets_efork, .timeout = 120)
{
	tl_dir d = tl_tmpdir("bgfork");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, 0);
	ah_merge_stats st;
	ah_arrangement_info in;
	ah_txn *t;
	int status;
	pid_t pid;

	appends(h, 1304, TL_FANIN, 70000); /* the thread is merging */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_txn *ct;
		int ok = ah_merge_wait(h, NULL) == AH_EFORK &&
		         ah_txn_begin(h, 0, &ct) == AH_EFORK &&
		         ah_set_max_bytes(h, 1u << 30) == AH_EFORK &&
		         ah_close(h) == AH_EFORK;
		_exit(ok ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "the child's calls were not all AH_EFORK");
	OK(ah_merge_wait(h, &st));
	cr_assert_gt(st.installed, 0);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	cr_assert_eq(in.merging, 0);
	cr_assert_eq(in.batches, 1);
	OK(tl_verify(h, NULL));
	OK(ah_close(h));
	tl_rmdir(&d);
}

/* Two appends of n updates at times 0 and 1 and their content hash: two
 * batches of one size, which the size policy leaves unmerged. */
static uint64_t two_batches(ah_heap *h, uint64_t seed, size_t n)
{
	uint64_t hash, cnt, m;
	ah_arrangement_info in;
	ah_txn *t;

	appends(h, seed, 2, n);
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	cr_assert_eq(in.batches, 2);
	cr_assert_eq(in.merging, 0);
	tl_content(h, "a", &hash, &cnt, &m);
	return hash;
}

/* ah_maintain(fuel > 0) on a heap with the merge thread starts the merge
 * an idle arrangement deserves and leaves its computing to the thread:
 * inside the txn the two batches are still there, the merge recorded and
 * *idle 0; after the commit the thread merges them into one.  Without
 * the flag the same call merges inline: one batch and *idle 1 at once. */
Test(bgmerge, maintain_leaves_merges_to_the_thread, .timeout = 120)
{
	tl_dir d = tl_tmpdir("bgmaint");
	ah_heap *h[2] = {
		tl_open(d.dir, "inline", AH_OPEN_NOSYNC, 1024),
		tl_open(d.dir, "bg", AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, 1024),
	};
	uint64_t want = 0;

	for (int i = 0; i < 2; i++) {
		ah_arrangement_info in;
		ah_merge_stats st;
		uint64_t got, n, m;
		ah_txn *t;
		int idle = -1;

		got = two_batches(h[i], 1305, 3000);
		if (i == 0)
			want = got;
		cr_assert_eq(got, want);
		OK(ah_txn_begin(h[i], 0, &t));
		OK(ah_maintain(t, "a", 1000000, &idle));
		OK(ah_arrangement_info_get(t, "a", &in));
		cr_assert_eq(idle, i == 0 ? 1 : 0, "heap %d: idle %d", i, idle);
		cr_assert_eq(in.batches, i == 0 ? 1 : 2, "heap %d", i);
		cr_assert_eq(in.merging, i == 0 ? 0 : 1, "heap %d", i);
		OK(ah_txn_commit(t));
		OK(ah_merge_wait(h[i], &st));
		cr_assert_eq(st.installed > 0, i == 1, "heap %d: %" PRIu64
		             " slices installed", i, st.installed);
		cr_assert_eq(st.errors, 0);
		OK(ah_txn_begin(h[i], AH_TXN_RDONLY, &t));
		OK(ah_arrangement_info_get(t, "a", &in));
		ah_txn_abort(t);
		cr_assert_eq(in.batches, 1, "heap %d", i);
		cr_assert_eq(in.merging, 0, "heap %d", i);
		OK(tl_verify(h[i], NULL));
		tl_content(h[i], "a", &got, &n, &m);
		cr_assert_eq(got, want, "heap %d: contents changed", i);
		OK(ah_txn_begin(h[i], 0, &t));
		OK(ah_maintain(t, "a", 1000000, &idle));
		cr_assert_eq(idle, 1, "heap %d: one batch, nothing to do", i);
		OK(ah_txn_commit(t));
		OK(ah_close(h[i]));
	}
	tl_rmdir(&d);
}

/* The merge thread can make no progress when another process holds every
 * reader slot (each slice is computed in a read txn: AH_EBUSY).  A loop
 * of ah_maintain(fuel) calls, one commit each, still ends: each call
 * grants credit, and the merge runs inline once it is 8 quanta behind.
 * The thread installed nothing and reports AH_EBUSY; the contents are
 * unchanged and the trace is one batch. */
Test(bgmerge, maintain_loop_ends_when_the_thread_is_stuck, .timeout = 120)
{
	tl_dir d = tl_tmpdir("bgstuck");
	int go[2], ready[2];
	char b = 0;

	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	pid_t pid = fork(); /* before this process opens anything */
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
		ah_heap *ro;
		ah_txn *t;
		int rc;
		uint32_t held = 0;

		if (read(go[0], &b, 1) != 1 || ah_open(d.path, &o, &ro) != 0)
			_exit(1);
		while ((rc = ah_txn_begin(ro, AH_TXN_RDONLY, &t)) == 0)
			held++;
		b = rc == AH_EBUSY && held > 0 ? 'r' : 'x';
		if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
			_exit(1);
		_exit(0);
	}
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC | AH_OPEN_BGMERGE, 1024);
	uint64_t want = two_batches(h, 1306, 3000), got, n, m;
	ah_arrangement_info in;
	ah_merge_stats st;
	int idle = 0, calls = 0, status;

	cr_assert_eq(write(go[1], "g", 1), 1);
	cr_assert_eq(read(ready[0], &b, 1), 1);
	cr_assert_eq(b, 'r', "the child could not fill the reader table");
	while (!idle && calls < 64) {
		ah_txn *t;

		OK(ah_txn_begin(h, 0, &t));
		OK(ah_maintain(t, "a", 1000000, &idle));
		OK(ah_txn_commit(t));
		calls++;
	}
	cr_log_info("bgmerge/maintain_loop_ends_when_the_thread_is_stuck: idle "
	            "after %d calls", calls);
	cr_assert_eq(idle, 1, "still not idle after %d calls", calls);
	cr_assert_eq(ah_merge_wait(h, &st), AH_EBUSY);
	cr_assert_eq(st.installed, 0);
	cr_assert_gt(st.errors, 0);
	ah_txn *t; /* a write txn: every reader slot is taken */
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	cr_assert_eq(in.batches, 1);
	cr_assert_eq(in.merging, 0);
	cr_assert_eq(write(go[1], "e", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	tl_content(h, "a", &got, &n, &m);
	cr_assert_eq(got, want, "contents changed");
	OK(tl_verify(h, NULL));
	OK(ah_close(h));
	tl_rmdir(&d);
}
