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

/* The logical collection of "a" as of its latest time: every (key, val)
 * whose consolidated times are not all zero, with them (a (key, val) whose
 * diffs cancel is there until a merge drops it: not part of the answer). */
static void content(ah_heap *h, uint64_t *hash, uint64_t *nupd, uint64_t *m)
{
	XXH3_state_t *st = XXH3_createState();
	tl_td *buf = NULL;
	size_t cap = 0;
	ah_cursor *c = NULL;
	ah_txn *t;
	const void *k, *v, *pos;
	size_t kl, vl, len;
	int rc;

	*nupd = 0;
	XXH3_64bits_reset(st);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_source_get(t, "model", &pos, &len));
	memcpy(m, pos, 8);
	OK(ah_cursor_open(t, "a", &c));
	while (ah_cursor_key_valid(c)) {
		OK(ah_cursor_key(c, &k, &kl));
		while (ah_cursor_val_valid(c)) {
			XXH3_state_t *one = XXH3_createState();
			uint64_t n = 0;

			OK(ah_cursor_val(c, &v, &vl));
			XXH3_64bits_reset(one);
			OK(tl_hash_times(c, one, &buf, &cap, &n));
			if (n) {
				uint64_t x = XXH3_64bits_digest(one);

				XXH3_64bits_update(st, &kl, sizeof kl);
				XXH3_64bits_update(st, k, kl);
				XXH3_64bits_update(st, &vl, sizeof vl);
				XXH3_64bits_update(st, v, vl);
				XXH3_64bits_update(st, &x, sizeof x);
				*nupd += n;
			}
			XXH3_freeState(one);
			cr_assert_geq(rc = ah_cursor_step_val(c), 0);
		}
		cr_assert_geq(rc = ah_cursor_step_key(c), 0);
	}
	ah_cursor_close(c);
	ah_txn_abort(t);
	*hash = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	free(buf);
}

static void twin_same(twin *w, int shape, uint64_t op)
{
	uint64_t ha, hb, na, nb, ma, mb;

	content(w->h[0], &ha, &na, &ma);
	content(w->h[1], &hb, &nb, &mb);
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
