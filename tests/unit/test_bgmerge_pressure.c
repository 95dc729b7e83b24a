/*
 * tests/unit/test_bgmerge_pressure.c - the merge thread's backpressure
 * (ARCHITECTURE §6 "The merge thread"): with the thread held (bgm_pause,
 * txn/txn.h: the hold ah_set_max_bytes uses), 200 appends must still
 * merge inline once a merge lags by the slack, so the chain stays bounded
 * (without backpressure every append would stay a batch of its own), the
 * contents equal an inline twin's after every commit, and the released
 * thread then merges to the end.  Internal: it holds the thread directly.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txn.h"
#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"

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

/* Backpressure: with the merge thread held (bgm_pause, the hold
 * ah_set_max_bytes uses), appends must still merge inline once a merge
 * lags by the slack, so the chain stays bounded: at most twice the inline
 * twin's largest chain plus 4, where without backpressure every append
 * would stay a batch of its own (200 here). */
Test(bgmerge_pressure, chain_stays_bounded, .timeout = 300)
{
	tl_dir d = tl_tmpdir("bgpress");
	uint64_t s = tl_seed("bgmerge/backpressure_bounds_the_chain", 1305);
	size_t n = 2000;
	ah_update *u = calloc(n, sizeof *u);
	uint64_t *keys = calloc(n, sizeof *keys), most[2] = { 0, 0 };
	ah_merge_stats st;
	twin w;

	cr_assert(u && keys);
	twin_open(&w, d.dir, 1024);
	bgm_pause(w.h[1], true);
	for (uint64_t op = 0; op < 200; op++) {
		fill(&s, u, keys, n, 4 * n, op);
		for (int i = 0; i < 2; i++) {
			ah_arrangement_info in;
			ah_txn *t;

			OK(ah_txn_begin(w.h[i], 0, &t));
			if (op == 0)
				OK(ah_arrangement_create(t, "a"));
			OK(ah_append(t, "a", op, op + 1, u, n));
			OK(ah_source_put(t, "model", &(uint64_t){ op + 1 }, 8));
			OK(ah_arrangement_info_get(t, "a", &in));
			OK(ah_txn_commit(t));
			if (in.batches > most[i])
				most[i] = in.batches;
		}
	}
	twin_same(&w, 0, 200);
	cr_log_info("backpressure: longest chain %" PRIu64 " inline, %" PRIu64
	            " with the thread held", most[0], most[1]);
	cr_assert_leq(most[1], 2 * most[0] + 4, "chain %" PRIu64 " vs inline %"
	              PRIu64, most[1], most[0]);
	OK(ah_merge_wait(w.h[1], &st));
	cr_assert_eq(st.installed + st.discarded, 0, "the held thread ran");
	bgm_pause(w.h[1], false);
	OK(ah_merge_wait(w.h[1], &st));
	OK(tl_verify(w.h[1], NULL));
	twin_same(&w, 0, 201);
	OK(ah_close(w.h[0]));
	OK(ah_close(w.h[1]));
	free(u);
	free(keys);
	tl_rmdir(&d);
}
