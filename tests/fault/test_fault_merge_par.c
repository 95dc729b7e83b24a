/*
 * tests/fault/test_fault_merge_par.c - write faults during the merge of
 * all batches on two threads (arrangement/merge_par.c).  The Nth pwrite
 * of ah_maintain(0)'s transaction fails (EIO, or ENOSPC: AH_EFULL), for
 * N = 1, 2, ... until a round sees no fault: the chunks of the writing
 * thread's ranges (written by the writeback thread or by the writer), and
 * the helper's ranges stored by the absorb.  Whatever call returns the
 * error, the transaction never commits: the heap after reopen holds
 * exactly its state before the merge, verifies clean, and the same merge
 * without a fault then succeeds with the contents of a merge on one
 * thread.  The thresholds are made small (merge_par_tune).  Seeds fixed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>

#include "arrangement/merge.h"
#include "interpose.h"
#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_rand.h"

#define NAPP 5
#define NUP 8000
#define VW 300

static ah_update ups[NUP];
static uint8_t kb[NUP][8], vb[NUP][VW];

static ah_heap *open_heap(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 1u << 30, 64);
	ah_heap *h;

	TL_OK(ah_open(path, &o, &h));
	return h;
}

static void load(ah_heap *h)
{
	ah_txn *t;

	TL_OK(ah_txn_begin(h, 0, &t));
	TL_OK(ah_arrangement_create(t, "a"));
	TL_OK(ah_txn_commit(t));
	for (unsigned k = 0; k < NAPP; k++) {
		uint64_t s = 977 * k + 3;

		for (unsigned i = 0; i < NUP; i++) {
			uint64_t key = tl_below(&s, 4 * NUP);

			for (int j = 0; j < 8; j++)
				kb[i][j] = (uint8_t)(key >> (56 - 8 * j));
			memset(vb[i], (int)(key & 0xff), VW);
			ups[i] = (ah_update){ kb[i], 8, vb[i], VW - key % 7, k,
			                      tl_below(&s, 5) ? 1 : -1 };
		}
		TL_OK(ah_txn_begin(h, 0, &t));
		TL_OK(ah_append(t, "a", k, k + 1, ups, NUP));
		TL_OK(ah_txn_commit(t));
	}
}

/* ah_maintain(0) and commit: the first error of the two. */
static int maintain_all(ah_heap *h)
{
	ah_txn *t;
	int idle, rc;

	TL_OK(ah_txn_begin(h, 0, &t));
	rc = ah_maintain(t, "a", 0, &idle);
	if (rc != 0) {
		ah_txn_abort(t);
		return rc;
	}
	return ah_txn_commit(t);
}

Test(fault, merge_par_pwrite_sweep, .timeout = 600)
{
	tl_dir d = tl_tmpdir("fmpar");
	char base[4200], path[4200];
	uint64_t before, merged, n, faults = 0, m0, h0, m1, h1;
	tl_state st;
	ah_heap *h;

	snprintf(base, sizeof base, "%s/base", d.dir);
	snprintf(path, sizeof path, "%s/heap", d.dir);
	h = open_heap(base);
	load(h);
	TL_OK(tl_state_hash(h, 1, &st));
	before = st.hash;
	TL_OK(ah_close(h));
	/* the merge on one thread, for its contents */
	cr_assert_eq(tl_copy(base, path), 0);
	h = open_heap(path);
	TL_OK(maintain_all(h));
	TL_OK(tl_state_hash(h, 1, &st));
	merged = st.hash;
	TL_OK(ah_close(h));

	merge_par_tune(1, 1);
	for (n = 1; n < 400; n++) {
		int err = n % 2 ? EIO : ENOSPC, want = n % 2 ? AH_EIO : AH_EFULL, rc;
		uint64_t inj = io_fault_injected();

		unlink(path);
		cr_assert_eq(tl_copy(base, path), 0);
		h = open_heap(path);
		merge_par_counts(&m0, &h0);
		io_fault_arm(n, 1u << IO_PWRITE, err);
		rc = maintain_all(h);
		io_fault_arm(0, 0, 0);
		merge_par_counts(&m1, &h1);
		cr_assert_eq(m1 - m0, 1, "N=%" PRIu64 ": on two threads", n);
		if (io_fault_injected() == inj) {
			cr_assert_eq(rc, 0, "N=%" PRIu64 ": %s", n, ah_err_name(rc));
			cr_assert_gt(h1 - h0, 0, "ranges from the helper");
			TL_OK(tl_verify(h, NULL));
			TL_OK(tl_state_hash(h, 1, &st));
			cr_assert_eq(st.hash, merged);
			TL_OK(ah_close(h));
			break;
		}
		faults++;
		cr_assert_eq(rc, want, "N=%" PRIu64 ": %s, not %s", n,
		             ah_err_name(rc), ah_err_name(want));
		TL_OK(ah_close(h));
		h = open_heap(path);
		TL_OK(tl_verify(h, NULL));
		TL_OK(tl_state_hash(h, 1, &st));
		cr_assert_eq(st.hash, before, "N=%" PRIu64 ": the state before", n);
		/* and the merge goes through afterwards */
		TL_OK(maintain_all(h));
		TL_OK(tl_state_hash(h, 1, &st));
		cr_assert_eq(st.hash, merged, "N=%" PRIu64 ": merged after", n);
		TL_OK(ah_close(h));
	}
	merge_par_tune(0, 0);
	cr_assert_lt(n, 400, "the merge never succeeded");
	cr_assert_geq(faults, 8, "%" PRIu64 " faults", faults);
	printf("fault/merge_par_pwrite_sweep: %" PRIu64 " faults\n", faults);
	tl_rmdir(&d);
}
