/*
 * tests/stress/test_writers.c - several writer threads of one process on
 * one heap.  The header promises that a second writer waits for the first
 * (LMDB's writer lock) and that a thread which already holds a write
 * transaction gets AH_ESTATE from a second ah_txn_begin instead of a
 * deadlock.  Before this test, the end of one writer's transaction reset
 * the shared pool and cleared the writer flags after LMDB had already
 * handed the lock to the next writer: the next writer's memory was freed
 * under it (SIGSEGV in jemalloc within ~30 commits) and its nested begin
 * blocked forever.
 *
 * Each thread loops: write txn -> nested begin (must be AH_ESTATE, at
 * once) -> append to its own arrangement and, by compare-and-append at the
 * upper it reads, to a shared one -> ah_maintain with a little fuel (tiny
 * merge quantum, so merges run and suspend) -> commit.  Afterwards every
 * arrangement must hold exactly what the threads committed, and the heap
 * must verify clean.  Public header only; threads never call Criterion.
 * Also run by `make tsan`.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrheap.h"
#include "tl_dir.h"

#define NWRITERS 3
#define NUPD 40
#define VAL "val-val-val-val-val-val-val-val-val-val-val-val-val-val-val-val"

typedef struct wshared {
	ah_heap *h;
	uint64_t commits; /* per writer */
	unsigned nupd;    /* updates per commit (NUPD) */
	size_t vlen;      /* bytes of each val (1), at most sizeof VAL - 1 */
	bool aborts;      /* after each commit, a txn that appends and aborts */
	atomic_int failed;
	pthread_mutex_t mu;
	char msg[256];
} wshared;

typedef struct writer_arg {
	wshared *s;
	int id;
} writer_arg;

static void fail(wshared *s, const char *what, uint64_t k, int rc,
                 const char *detail)
{
	pthread_mutex_lock(&s->mu);
	if (!atomic_load(&s->failed))
		snprintf(s->msg, sizeof s->msg, "%s at commit %" PRIu64 ": %s %s",
		         what, k, ah_err_name(rc) ? ah_err_name(rc) : "?",
		         detail ? detail : "");
	atomic_store(&s->failed, 1);
	pthread_mutex_unlock(&s->mu);
}

/* Commit k of writer id: keys "w<id>-<k>-<j>", inserted at time k - 1 of
 * its own arrangement; and one update per commit to "shared".  With
 * s->aborts, a second txn then appends as much again at time k and a merge
 * of it, and aborts: nothing of it may remain (its chunks' writes may be
 * in flight when it ends). */
static int one_commit(wshared *s, int id, uint64_t k)
{
	char name[16];
	char (*keys)[32] = malloc(s->nupd * sizeof *keys);
	ah_update *ups = malloc(s->nupd * sizeof *ups);
	ah_arrangement_info info;
	ah_txn *t, *t2 = NULL;
	int rc, idle;

	snprintf(name, sizeof name, "w%d", id);
	if (keys == NULL || ups == NULL) {
		fail(s, "malloc", k, AH_ENOMEM, NULL);
		rc = AH_ENOMEM;
		goto out;
	}
	for (unsigned j = 0; j < s->nupd; j++) {
		snprintf(keys[j], sizeof keys[j], "w%d-%" PRIu64 "-%u", id, k, j);
		ups[j] = (ah_update){ keys[j], strlen(keys[j]), VAL, s->vlen, k - 1, 1 };
	}
	if ((rc = ah_txn_begin(s->h, 0, &t)) != 0) {
		fail(s, "begin", k, rc, NULL);
		goto out;
	}
	rc = ah_txn_begin(s->h, 0, &t2);
	if (rc != AH_ESTATE) {
		fail(s, "nested begin (want AH_ESTATE)", k, rc, NULL);
		if (rc == 0)
			ah_txn_abort(t2);
		ah_txn_abort(t);
		rc = -1;
		goto out;
	}
	rc = 0;
	if (k == 1)
		rc = ah_arrangement_create(t, name);
	if (rc == 0)
		rc = ah_append(t, name, k - 1, k, ups, s->nupd);
	if (rc == 0)
		rc = ah_maintain(t, name, 40, &idle);
	if (rc == 0)
		rc = ah_arrangement_info_get(t, "shared", &info);
	if (rc == 0) {
		ah_update u = { keys[0], strlen(keys[0]), "s", 1, info.upper, 1 };

		rc = ah_append(t, "shared", info.upper, info.upper + 1, &u, 1);
	}
	if (rc == 0)
		rc = ah_maintain(t, "shared", 40, &idle);
	if (rc != 0) {
		fail(s, "mutation", k, rc, ah_txn_errmsg(t));
		ah_txn_abort(t);
		goto out;
	}
	if ((rc = ah_txn_commit(t)) != 0) {
		fail(s, "commit", k, rc, NULL);
		goto out;
	}
	if (!s->aborts)
		goto out;
	for (unsigned j = 0; j < s->nupd; j++)
		ups[j].time = k;
	if ((rc = ah_txn_begin(s->h, 0, &t)) != 0) {
		fail(s, "begin (to abort)", k, rc, NULL);
		goto out;
	}
	rc = ah_append(t, name, k, k + 1, ups, s->nupd);
	if (rc == 0)
		rc = ah_maintain(t, name, 0, &idle);
	if (rc != 0)
		fail(s, "mutation (to abort)", k, rc, ah_txn_errmsg(t));
	ah_txn_abort(t);
out:
	free(keys);
	free(ups);
	return rc;
}

static void *writer(void *arg)
{
	writer_arg *a = arg;

	for (uint64_t k = 1; k <= a->s->commits && !atomic_load(&a->s->failed);
	     k++)
		if (one_commit(a->s, a->id, k) != 0)
			break;
	return NULL;
}

/* Live keys of name at as_of, each with multiplicity 1; -1 on error or a
 * count other than 0/1. */
static int64_t live(ah_heap *h, const char *name, uint64_t as_of)
{
	ah_txn *t;
	ah_cursor *c;
	int64_t n = 0, sum;
	int rc;

	if (ah_txn_begin(h, AH_TXN_RDONLY, &t) != 0)
		return -1;
	if ((rc = ah_cursor_open(t, name, &c)) != 0) {
		ah_txn_abort(t);
		return -1;
	}
	for (; rc >= 0 && ah_cursor_key_valid(c); rc = ah_cursor_step_key(c))
		for (; rc >= 0 && ah_cursor_val_valid(c);
		     rc = ah_cursor_step_val(c)) {
			if ((rc = ah_cursor_accumulate(c, as_of, &sum)) < 0)
				break;
			if (sum != 0 && sum != 1)
				rc = -1;
			n += sum;
		}
	ah_cursor_close(c);
	ah_txn_abort(t);
	return rc < 0 ? -1 : n;
}

static int count_problem(const ah_problem *p, void *user)
{
	(void)p;
	++*(int *)user;
	return 0;
}

/* A reader thread of the merge-thread and large-chunk variants: in each
 * snapshot, every writer's arrangement holds exactly upper * nupd live
 * keys as of upper - 1 (each commit k made nupd keys at time k - 1),
 * whatever the merge thread and the writers' inline merges did to its
 * batches, and nothing of the aborted txns. */
typedef struct rarg {
	wshared *s;
	atomic_int done;
	uint64_t reads;
} rarg;

static int check_snapshot(ah_heap *h, const char *name, unsigned nupd)
{
	ah_arrangement_info in;
	ah_cursor *c = NULL;
	ah_txn *t;
	int64_t n = 0, sum;
	int rc;

	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &t)) != 0)
		return rc;
	rc = ah_arrangement_info_get(t, name, &in);
	if (rc == AH_ENOTFOUND || (rc == 0 && in.upper == 0)) {
		ah_txn_abort(t);
		return 0;
	}
	if (rc == 0)
		rc = ah_cursor_open(t, name, &c);
	for (; rc >= 0 && c && ah_cursor_key_valid(c); rc = ah_cursor_step_key(c))
		for (; rc >= 0 && ah_cursor_val_valid(c);
		     rc = ah_cursor_step_val(c)) {
			if ((rc = ah_cursor_accumulate(c, in.upper - 1, &sum)) < 0)
				break;
			n += sum;
		}
	ah_cursor_close(c);
	ah_txn_abort(t);
	if (rc < 0)
		return rc;
	return n == (int64_t)(in.upper * nupd) ? 0 : -1;
}

static void *reader(void *arg)
{
	rarg *r = arg;

	while (!atomic_load(&r->done) && !atomic_load(&r->s->failed))
		for (int i = 0; i < NWRITERS; i++) {
			char name[16];
			int rc;

			snprintf(name, sizeof name, "w%d", i);
			if ((rc = check_snapshot(r->s->h, name, r->s->nupd)) != 0)
				fail(r->s, "reader", r->reads, rc, name);
			r->reads++;
		}
	return NULL;
}

static void run_writers(unsigned flags, const char *tag, wshared s)
{
	tl_dir d = tl_tmpdir(tag);
	ah_open_opts o = { .size = sizeof o,
	                   .flags = AH_OPEN_CREATE | AH_OPEN_NOSYNC | flags,
	                   .max_bytes = 1u << 30, .merge_quantum = 64 };
	writer_arg args[NWRITERS];
	pthread_t th[NWRITERS], rth;
	rarg ra = { .s = &s };
	bool bg = flags & AH_OPEN_BGMERGE, rd = bg || s.aborts;
	ah_merge_stats st;
	ah_txn *t;
	int problems = 0;

	cr_assert_eq(ah_open(d.path, &o, &s.h), 0);
	pthread_mutex_init(&s.mu, NULL);
	atomic_init(&ra.done, 0);
	cr_assert_eq(ah_txn_begin(s.h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "shared"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	for (int i = 0; i < NWRITERS; i++) {
		args[i] = (writer_arg){ &s, i };
		cr_assert_eq(pthread_create(&th[i], NULL, writer, &args[i]), 0);
	}
	if (rd)
		cr_assert_eq(pthread_create(&rth, NULL, reader, &ra), 0);
	for (int i = 0; i < NWRITERS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&ra.done, 1);
	if (rd)
		pthread_join(rth, NULL);
	if (bg) {
		cr_assert_eq(ah_merge_wait(s.h, &st), 0);
		cr_log_info("%s: %" PRIu64 " reads, %" PRIu64 " slices installed, "
		            "%" PRIu64 " discarded", tag, ra.reads, st.installed,
		            st.discarded);
		cr_assert_gt(st.installed, 0);
	}
	cr_assert_eq(atomic_load(&s.failed), 0, "%s", s.msg);
	for (int i = 0; i < NWRITERS; i++) {
		char name[16];

		snprintf(name, sizeof name, "w%d", i);
		cr_assert_eq(live(s.h, name, s.commits - 1),
		             (int64_t)(s.commits * s.nupd), "%s", name);
	}
	cr_assert_eq(live(s.h, "shared", NWRITERS * s.commits - 1),
	             (int64_t)(NWRITERS * s.commits));
	cr_assert_eq(ah_txn_begin(s.h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_verify(t, count_problem, &problems, NULL), 0);
	ah_txn_abort(t);
	cr_assert_eq(problems, 0);
	cr_assert_eq(ah_close(s.h), 0);
	pthread_mutex_destroy(&s.mu);
	tl_rmdir(&d);
}

Test(stress, writer_threads, .timeout = 240)
{
	run_writers(0, "writers",
	            (wshared){ .commits = 150, .nupd = NUPD, .vlen = 1 });
}

/* Batches of ~200 KiB and their merges: chunks large enough for the
 * writeback thread (64 KiB and up), whose writes may be in flight when a
 * writer's txn commits or aborts and the next writer (another thread)
 * begins; every writer also aborts a txn of as much data after each
 * commit (also run by `make tsan`). */
Test(stress, writer_threads_large_chunks, .timeout = 240)
{
	run_writers(0, "writersbig",
	            (wshared){ .commits = 12, .nupd = 3000, .vlen = 48,
	                       .aborts = true });
}

/* The same with the merge thread (AH_OPEN_BGMERGE) and a reader thread:
 * writers, their inline ah_maintain, readers and the merge thread race on
 * the same arrangements (also run by `make tsan`). */
Test(stress, writer_threads_with_merge_thread, .timeout = 240)
{
	run_writers(AH_OPEN_BGMERGE, "writersbg",
	            (wshared){ .commits = 150, .nupd = NUPD, .vlen = 1 });
}

/* Large synced write transactions (34 MB each, past the flusher's 32 MiB:
 * heap/flush.c runs fdatasync while the append goes on, and every commit
 * blocks it) beside a reader thread and the merge thread: every snapshot
 * holds whole appends only, the end holds all of them, and the heap
 * verifies clean.  Also run by `make tsan` (the flusher, the writeback
 * thread, the merge thread and a reader in one process). */
#define FL_N 34000u
#define FL_VAL 1000u

typedef struct farg {
	ah_heap *h;
	atomic_int done, bad;
	uint64_t reads;
} farg;

static void *flush_reader(void *p)
{
	farg *a = p;

	while (!atomic_load(&a->done)) {
		ah_arrangement_info in;
		ah_txn *t;
		int rc = ah_txn_begin(a->h, AH_TXN_RDONLY, &t);

		if (rc != 0) {
			atomic_store(&a->bad, rc);
			break;
		}
		rc = ah_arrangement_info_get(t, "big", &in);
		if (rc == 0 && in.updates % FL_N != 0)
			atomic_store(&a->bad, 1); /* part of an append */
		else if (rc != 0 && rc != AH_ENOTFOUND)
			atomic_store(&a->bad, rc);
		ah_txn_abort(t);
		a->reads++;
	}
	return NULL;
}

Test(stress, large_synced_txns_with_the_flusher, .timeout = 300)
{
	tl_dir d = tl_tmpdir("flushers");
	ah_open_opts o = { .size = sizeof o,
	                   .flags = AH_OPEN_CREATE | AH_OPEN_BGMERGE,
	                   .max_bytes = 1u << 30 };
	static char keys[FL_N][16], vals[FL_N][FL_VAL];
	static ah_update u[FL_N];
	farg a = { 0 };
	pthread_t th;
	ah_merge_stats st;
	ah_arrangement_info in;
	ah_txn *t;
	int problems = 0;

	/* distinct vals of pseudo-random bytes: 34 MB of chunks an append */
	uint64_t x = 20261206u;
	for (unsigned i = 0; i < FL_N; i++)
		for (unsigned j = 0; j < FL_VAL; j++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			vals[i][j] = (char)(x >> 56);
		}
	cr_assert_eq(ah_open(d.path, &o, &a.h), 0);
	cr_assert_eq(ah_txn_begin(a.h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "big"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(pthread_create(&th, NULL, flush_reader, &a), 0);
	for (unsigned r = 0; r < 4; r++) {
		for (unsigned i = 0; i < FL_N; i++) {
			snprintf(keys[i], sizeof keys[i], "%u-%06u", r, i);
			u[i] = (ah_update){ keys[i], strlen(keys[i]), vals[i],
			                    FL_VAL, r, 1 };
		}
		cr_assert_eq(ah_txn_begin(a.h, 0, &t), 0);
		cr_assert_eq(ah_append(t, "big", r, r + 1, u, FL_N), 0);
		cr_assert_eq(ah_txn_commit(t), 0, "round %u", r);
	}
	atomic_store(&a.done, 1);
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&a.bad), 0, "a reader saw %d", atomic_load(&a.bad));
	cr_assert_eq(ah_merge_wait(a.h, &st), 0);
	cr_assert_eq(ah_txn_begin(a.h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "big", &in), 0);
	cr_assert_eq(in.updates, 4 * FL_N);
	cr_assert_eq(ah_verify(t, count_problem, &problems, NULL), 0);
	ah_txn_abort(t);
	cr_assert_eq(problems, 0);
	cr_log_info("flushers: %" PRIu64 " reads", a.reads);
	cr_assert_eq(ah_close(a.h), 0);
	tl_rmdir(&d);
}
