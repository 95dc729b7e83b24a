/*
 * tests/api/test_verify_partial.c - ah_verify on a healthy heap whose
 * merges are suspended while since runs ahead of their inputs: no problem
 * may be reported.  Before, a suspended merge's partial batch recorded its
 * since clamped to its upper while its times were advanced to the merge's
 * since (beyond that upper), and verify reported "time outside the
 * description" about a heap that was fine: ah-load of a long changelog
 * with since advancing was enough, no crash needed.
 */
#include "tl_dir.h"
#include "tl_heap.h"

typedef struct found {
	int n;
	char first[256];
} found;

static int on_problem(const ah_problem *p, void *user)
{
	found *f = user;

	if (f->n++ == 0)
		snprintf(f->first, sizeof f->first, "%s batch %" PRIu64 ": %s",
		         p->arrangement, p->batch, p->message);
	return 0;
}

Test(api_verify, partial_merge_with_since_ahead_verifies_clean, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 64);
	static char keys[400][16];
	static ah_update ups[400];
	ah_txn *t;
	int partial_seen = 0;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	for (uint64_t k = 0; k < 60; k++) {
		found f = { 0 };
		ah_verify_stats st;
		int n = 50 + (int)(k % 7) * 50;

		for (int i = 0; i < n; i++) {
			snprintf(keys[i], sizeof keys[i], "k%03d-%03d", i, (int)(k % 5));
			ups[i] = (ah_update){ keys[i], strlen(keys[i]), "v", 1, k,
			                      (k % 3 == 2) ? -1 : 1 };
		}
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		cr_assert_eq(ah_append(t, "a", k, k + 1, ups, (size_t)n), 0,
		             "%s", ah_txn_errmsg(t));
		/* since runs right behind upper: past every input's upper */
		cr_assert_eq(ah_set_since(t, "a", k), 0);
		cr_assert_eq(ah_txn_commit(t), 0);
		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		ah_arrangement_info in;
		cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
		partial_seen += in.merging > 0;
		cr_assert_eq(ah_verify(t, on_problem, &f, &st), 0);
		ah_txn_abort(t);
		cr_assert_eq(f.n, 0, "commit %" PRIu64 ": %d problems, first: %s",
		             k, f.n, f.first);
	}
	cr_assert_gt(partial_seen, 5, "the test needs suspended merges");
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
