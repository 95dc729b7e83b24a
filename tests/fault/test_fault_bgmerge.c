/*
 * tests/fault/test_fault_bgmerge.c - I/O faults during the merge thread's
 * installs (AH_OPEN_BGMERGE).  The user's append writes its chunks, then
 * the Nth pwrite (a chunk of a slice being installed) or the Nth
 * msync/fdatasync (the install's commit) from the commit on fails, for
 * N = 1, 2, ... until a round sees no fault: only the merge thread writes
 * then (with MDB_WRITEMAP, LMDB's own commit writes the meta in the map:
 * no pwrite; the sync fault is armed once the user's commit returned, so
 * it meets the thread's commits).  After each: ah_merge_wait reports the error (AH_EIO) or
 * none, the heap verifies and holds exactly the model's contents; the next
 * commit wakes the thread again, which resumes every merge from its
 * stored boundary to the end (no error, no merge left, verify clean,
 * contents still the model's).
 */
#include <criterion/criterion.h>
#include <errno.h>

#include "interpose.h"
#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"
#include "tl_run.h"

#define QUANTUM 2048u
#define NUPD 40000u /* ~41 bytes an update (32-byte vals): commit 5 spans two chunks */

static ah_update ups[NUPD];
static uint64_t keys[NUPD];

/* Commit k's updates (k = 1..6; 5 is as large as the rest together, so
 * that a merge of several chunks starts with it). */
static uint64_t updates_of(uint64_t k)
{
	uint64_t s = 99 * k + 5, n = k == 5 ? NUPD : NUPD / 8;

	for (uint64_t i = 0; i < n; i++) {
		keys[i] = tl_below(&s, 4 * NUPD);
		ups[i] = (ah_update){ &keys[i], 8, "val-val-val-val-val-val-val-val-", 32, k - 1,
		                      tl_below(&s, 5) ? 1 : -1 };
	}
	return n;
}

/* Commit k; with nth, the fault is armed after the append: before the
 * commit for pwrites (once the append's own writes are done: the commit
 * does none), after it for syncs. */
static void commit_k(ah_heap *h, uint64_t k, uint64_t nth, unsigned mask)
{
	uint64_t n = updates_of(k);
	ah_txn *t;

	TL_OK(ah_txn_begin(h, 0, &t));
	if (k == 1)
		TL_OK(ah_arrangement_create(t, "a"));
	TL_OK(ah_append(t, "a", k - 1, k, ups, n));
	if (k == 4)
		TL_OK(ah_set_since(t, "a", 2));
	TL_OK(ah_source_put(t, "model", &k, sizeof k));
	bool pw = mask == 1u << IO_PWRITE;
	/* The user's own chunks may still be in flight on the writeback
	 * thread (ARCHITECTURE.md §2): a walk of the chunks in this txn
	 * (ah_verify's) waits for them, so that the faults meet installs. */
	if (nth && pw) {
		int problems = 0;

		TL_OK(ah_verify(t, tl_verify_problem, &problems, NULL));
		cr_assert_eq(problems, 0);
		io_fault_arm(nth, mask, EIO);
	}
	TL_OK(ah_txn_commit(t));
	if (nth && !pw)
		io_fault_arm(nth, mask, EIO);
}

static void wait_done(ah_heap *h, bool clean)
{
	ah_arrangement_info in;
	ah_merge_stats st;
	ah_txn *t;
	int rc = ah_merge_wait(h, &st);

	if (!clean)
		return;
	cr_assert_eq(rc, 0, "merge thread: %s", ah_err_name(rc));
	TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	TL_OK(ah_arrangement_info_get(t, "a", &in));
	ah_txn_abort(t);
	cr_assert_eq(in.merging, 0);
}

static void check(ah_heap *h, uint64_t want, uint64_t k, const char *what)
{
	uint64_t got, n, m;

	TL_OK(tl_verify(h, NULL));
	tl_content(h, "a", &got, &n, &m);
	cr_assert_eq(m, k);
	cr_assert_eq(got, want, "%s: contents after commit %" PRIu64
	             " differ from the model", what, k);
}

static void sweep(unsigned mask, unsigned flags, const char *what)
{
	tl_dir d = tl_tmpdir("faultbg");
	uint64_t want[7], n, m, hits = 0, nth;
	ah_heap *h = tl_open_path(d.path, flags, QUANTUM);

	for (uint64_t k = 1; k <= 6; k++) { /* the model, inline */
		commit_k(h, k, 0, 0);
		tl_content(h, "a", &want[k], &n, &m);
	}
	TL_OK(ah_close(h));
	for (nth = 1; nth < 400; nth++) {
		uint64_t before = io_fault_injected();
		int rc;

		tl_rmdir(&d);
		d = tl_tmpdir("faultbg");
		h = tl_open_path(d.path, flags | AH_OPEN_BGMERGE, QUANTUM);
		for (uint64_t k = 1; k <= 4; k++)
			commit_k(h, k, 0, 0);
		wait_done(h, true);
		commit_k(h, 5, nth, mask);
		rc = ah_merge_wait(h, NULL);
		io_fault_arm(0, 0, 0);
		bool hit = io_fault_injected() != before;
		cr_assert(rc == 0 || (hit && rc == AH_EIO), "%s N=%" PRIu64
		          ": ah_merge_wait %s", what, nth, ah_err_name(rc));
		if (hit && mask != 1u << IO_PWRITE) {
			/* LMDB's failed commit sync makes the handle fatal
			 * (MDB_PANIC): reopen, as after the user's own. */
			TL_OK(ah_close(h));
			h = tl_open_path(d.path, flags | AH_OPEN_BGMERGE, QUANTUM);
		}
		check(h, want[5], 5, what);
		commit_k(h, 6, 0, 0);
		wait_done(h, true);
		check(h, want[6], 6, what);
		TL_OK(ah_close(h));
		h = tl_open_path(d.path, flags, QUANTUM);
		check(h, want[6], 6, what);
		TL_OK(ah_close(h));
		if (!hit)
			break;
		hits++;
	}
	printf("fault/bgmerge %s: %" PRIu64 " faults injected into installs, "
	       "then a clean round\n", what, hits);
	cr_assert_gt(hits, mask == 1u << IO_PWRITE ? 2 : 0,
	             "%s: the installs wrote almost nothing", what);
	tl_rmdir(&d);
}

Test(fault, bgmerge_install_pwrite, .timeout = 900)
{
	sweep(1u << IO_PWRITE, AH_OPEN_NOSYNC, "pwrite");
}

Test(fault, bgmerge_install_sync, .timeout = 900)
{
	sweep((1u << IO_MSYNC) | (1u << IO_FDATASYNC) | (1u << IO_FSYNC), 0,
	      "sync");
}
