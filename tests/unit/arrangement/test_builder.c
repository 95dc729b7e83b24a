/*
 * tests/unit/arrangement/test_builder.c - the batch builder (builder.h):
 * consolidation rules, spilled runs merged back equal to an in-test
 * reference, byte-identical output whatever the run budget, no temporary
 * batch left behind.  Seeds are fixed and printed on failure.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/builder.h"
#include "arr_test.h"

static const batch_desc D100 = { { 0 }, { 100 }, { 0 } };

static at_up up(const char *k, const char *v, uint64_t t, int64_t d)
{
	at_up u;
	memset(&u, 0, sizeof u);
	u.klen = (uint8_t)strlen(k);
	memcpy(u.key, k, u.klen);
	u.vlen = (uint8_t)strlen(v);
	memcpy(u.val, v, u.vlen);
	u.time = t;
	u.diff = d;
	return u;
}

/* Budgets: the default (one run) and 1 byte (one update per run, so every
 * rule also goes through spilled runs and the merger). */
static const size_t budgets[] = { 0, 1 };

Test(builder_consolidate, zero_and_cancelling_sums_disappear)
{
	for (size_t bi = 0; bi < 2; bi++) {
		at_env e;
		at_up u[6];
		at_open(&e);
		u[0] = up("x", "a", 5, 0);
		cr_assert_eq(at_build(&e, u, 1, budgets[bi], &D100), 0);
		u[0] = up("x", "a", 5, 1);
		u[1] = up("x", "a", 5, -1);
		cr_assert_eq(at_build(&e, u, 2, budgets[bi], &D100), 0);
		u[0] = up("x", "a", 5, 2);
		u[1] = up("x", "a", 5, -1);
		u[2] = up("x", "a", 5, -1);
		cr_assert_eq(at_build(&e, u, 3, budgets[bi], &D100), 0);
		/* Nothing written at all: no chunk survives. */
		cr_assert_eq(at_count_chunks(&e), 0, "budget %zu", budgets[bi]);
		at_close(&e);
	}
}

Test(builder_consolidate, retraction_of_absent_stays_minus_one)
{
	for (size_t bi = 0; bi < 2; bi++) {
		at_env e;
		at_up u[4], got[8];
		uint64_t id;
		at_open(&e);
		u[0] = up("y", "b", 7, -1);
		u[1] = up("x", "a", 5, 3);
		u[2] = up("x", "a", 6, 0);
		u[3] = up("x", "a", 5, -1);
		id = at_build(&e, u, 4, budgets[bi], &D100);
		cr_assert_neq(id, 0);
		cr_assert_eq(at_scan(&e, id, 0, got, 8), 2);
		cr_assert_eq(got[0].klen, 1);
		cr_assert_eq(got[0].key[0], 'x');
		cr_assert_eq(got[0].time, 5);
		cr_assert_eq(got[0].diff, 2);
		cr_assert_eq(got[1].key[0], 'y');
		cr_assert_eq(got[1].val[0], 'b');
		cr_assert_eq(got[1].time, 7);
		cr_assert_eq(got[1].diff, -1);
		at_close(&e);
	}
}

Test(builder_consolidate, overflowing_sum_is_elimit)
{
	for (size_t bi = 0; bi < 2; bi++) {
		at_env e;
		at_up u[3];
		uint64_t id = 77;
		at_open(&e);
		u[0] = up("x", "a", 5, INT64_MAX);
		u[1] = up("x", "a", 5, 1);
		cr_assert_eq(at_build_rc(&e, u, 2, budgets[bi], &D100, &id,
		                         NULL), AH_ELIMIT, "budget %zu",
		             budgets[bi]);
		heap_txn_abort(e.t);
		e.t = NULL;
		at_close(&e);

		at_open(&e);
		u[0] = up("x", "a", 5, INT64_MIN);
		u[1] = up("x", "a", 5, -1);
		cr_assert_eq(at_build_rc(&e, u, 2, budgets[bi], &D100, &id,
		                         NULL), AH_ELIMIT);
		heap_txn_abort(e.t);
		e.t = NULL;
		at_close(&e);
	}
}

/* Sums are taken whole (128-bit), so an intermediate overflow that the
 * sort order could expose does not fail: MAX + 1 - 1 = MAX. */
Test(builder_consolidate, exact_sum_within_range_is_kept)
{
	at_env e;
	at_up u[3], got[2];
	uint64_t id;
	at_open(&e);
	u[0] = up("x", "a", 5, INT64_MAX);
	u[1] = up("x", "a", 5, 1);
	u[2] = up("x", "a", 5, -1);
	id = at_build(&e, u, 3, 0, &D100);
	cr_assert_eq(at_scan(&e, id, 0, got, 2), 1);
	cr_assert_eq(got[0].diff, INT64_MAX);
	at_close(&e);
}

Test(builder_runs, tiny_budget_equals_reference, .timeout = 60)
{
	const uint64_t seed = 42;
	const size_t n = 200000;
	const at_shape s = { .kmax = 10, .vmax = 6, .alpha = 4, .times = 8,
	                     .dmax = 2 };
	at_up *u = malloc(n * sizeof *u), *got = malloc(n * sizeof *got);
	at_env e;
	uint64_t id, peak = 0;
	size_t nw;
	batch *b;

	cr_log_info("builder_runs/tiny_budget seed %llu", (unsigned long long)seed);
	at_gen(u, n, seed, &s);
	at_open(&e);
	cr_assert_eq(at_build_rc(&e, u, n, 64 << 10, &D100, &id, &peak), 0);
	cr_assert_leq(peak, 64 << 10, "seed %llu: run peak %llu",
	              (unsigned long long)seed, (unsigned long long)peak);
	nw = at_consolidate(u, n, 0);
	cr_assert_neq(id, 0);
	at_assert_equal(got, at_scan(&e, id, 0, got, n), u, nw, seed);
	/* Every temporary run was dropped: only the output's chunks remain. */
	cr_assert_eq(batch_load(e.t, id, &b), 0);
	cr_assert_eq(at_count_chunks(&e), b->nchunks + (b->filter_chunk != 0));
	cr_assert_eq(frontier_time(b->desc.lower), 0);
	cr_assert_eq(frontier_time(b->desc.upper), 100);
	batch_free(b);
	at_close(&e);
	free(u);
	free(got);
}

Test(builder_runs, output_bytes_independent_of_budget_and_order,
     .timeout = 60)
{
	const uint64_t seed = 4242;
	const size_t n = 60000;
	const at_shape s = { .kmax = 12, .vmax = 10, .alpha = 3, .times = 20,
	                     .dmax = 3 };
	const size_t bud[] = { 0, 64 << 10, 4 << 10, 700 };
	at_up *u = malloc(n * sizeof *u);
	uint64_t st = seed, ids[4];
	at_env e;

	cr_log_info("builder_runs/independent seed %llu", (unsigned long long)seed);
	at_gen(u, n, seed, &s);
	at_open(&e);
	for (size_t i = 0; i < 4; i++) {
		ids[i] = at_build(&e, u, n, bud[i], &D100);
		cr_assert_neq(ids[i], 0);
		for (size_t j = n - 1; j > 0; j--) {
			size_t r = tl_rand(&st) % (j + 1);
			at_up x = u[j];
			u[j] = u[r];
			u[r] = x;
		}
	}
	for (size_t i = 1; i < 4; i++)
		at_assert_same_chunks(&e, ids[0], ids[i]);
	at_close(&e);
	free(u);
}

/* Keys that tie on the cached 8-byte prefix: zero bytes, shorter prefixes
 * and long keys that differ only after byte 8. */
Test(builder_runs, prefix_ties_order_as_bytes)
{
	static const uint8_t keys[][12] = {
		{ 0 }, { 'a' }, { 'a', 0 }, { 'a', 0, 0 },
		{ 1, 2, 3, 4, 5, 6, 7, 8 }, { 1, 2, 3, 4, 5, 6, 7, 8, 0 },
		{ 1, 2, 3, 4, 5, 6, 7, 8, 9, 1 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9 },
		{ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },
	};
	static const uint8_t klen[] = { 0, 1, 2, 3, 8, 9, 10, 9, 10 };
	const size_t nk = sizeof klen;
	at_up u[64], got[64];
	size_t n = 0;
	at_env e;
	uint64_t id;

	for (size_t r = 0; r < 3; r++)
		for (size_t i = 0; i < nk; i++) {
			size_t k = (i * 5 + r) % nk;
			memset(&u[n], 0, sizeof u[n]);
			memcpy(u[n].key, keys[k], klen[k]);
			u[n].klen = klen[k];
			u[n].vlen = (uint8_t)r;
			u[n].time = 3 - r;
			u[n++].diff = 1;
		}
	at_open(&e);
	id = at_build(&e, u, n, 1, &D100);
	n = at_consolidate(u, n, 0);
	at_assert_equal(got, at_scan(&e, id, 0, got, 64), u, n, 0);
	at_close(&e);
}
