/*
 * tests/unit/arrangement/test_merge.c - the merger (merge.h): consolidation
 * across inputs, byte-identical output whatever the split and order of the
 * inputs, logical compaction (accumulations at every T >= since preserved),
 * and suspended/resumed merges equal to an unfueled one.  Inputs are built
 * with the builder.  Seeds are fixed and printed on failure.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/merge.h"
#include "arr_test.h"

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

/* Merges batches ids[0..n) with since, unfueled; returns the rc of the
 * first failing step and the output id. */
static int merge_ids(at_env *e, const uint64_t *ids, size_t n, uint64_t since,
                     const batch_desc *d, uint64_t *out)
{
	batch *in[16];
	merger *m = NULL;
	bool done = false;
	uint64_t spent = 0;
	int rc;

	cr_assert_leq(n, 16);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(batch_load(e->t, ids[i], &in[i]), 0);
	rc = merger_open(e->t, e->p, in, n, frontier_of(since), NULL, &m);
	cr_assert_eq(rc, 0);
	rc = merger_step(m, 0, &done, &spent);
	if (rc == 0) {
		cr_assert(done);
		rc = merger_finish(m, d, out);
	}
	merger_free(m);
	for (size_t i = 0; i < n; i++)
		batch_free(in[i]);
	return rc;
}

static uint64_t merge_ok(at_env *e, const uint64_t *ids, size_t n,
                         uint64_t since, const batch_desc *d)
{
	uint64_t id = 0;
	int rc = merge_ids(e, ids, n, since, d, &id);
	cr_assert_eq(rc, 0, "merge: %s", ah_strerror(rc));
	return id;
}

Test(merge_consolidate, cancelling_and_absent_retraction)
{
	const batch_desc da = { { 0 }, { 10 }, { 0 } }, db = { { 10 }, { 20 }, { 0 } },
	                 dc = { { 20 }, { 30 }, { 0 } }, dm = { { 0 }, { 30 }, { 25 } };
	at_up u[3], got[8];
	uint64_t ids[3], before, out;
	at_env e;

	at_open(&e);
	/* x: +2 at 1, -1 at 12, -1 at 22: cancels once advanced to 25.
	 * y: +1 at 3 and -1 at 13 cancel; z: retraction of nothing. */
	u[0] = up("x", "v", 1, 2);
	u[1] = up("y", "v", 3, 1);
	ids[0] = at_build(&e, u, 2, 0, &da);
	u[0] = up("x", "v", 12, -1);
	u[1] = up("y", "v", 13, -1);
	u[2] = up("z", "w", 14, -1);
	ids[1] = at_build(&e, u, 3, 0, &db);
	u[0] = up("x", "v", 22, -1);
	ids[2] = at_build(&e, u, 1, 0, &dc);
	before = at_count_chunks(&e);
	out = merge_ok(&e, ids, 3, 25, &dm);
	cr_assert_neq(out, 0);
	cr_assert_eq(at_scan(&e, out, 0, got, 8), 1);
	cr_assert_eq(got[0].key[0], 'z');
	cr_assert_eq(got[0].val[0], 'w');
	cr_assert_eq(got[0].time, 25);
	cr_assert_eq(got[0].diff, -1);
	/* Inputs untouched. */
	cr_assert_eq(at_scan(&e, ids[1], 0, got, 8), 3);
	cr_assert_eq(at_count_chunks(&e), before + 1);
	at_close(&e);
}

/* A sum outside int64 made by advancing to since is kept apart: pieces
 * at distinct times <= since (since - 1, since), each inside int64.  (It
 * used to be AH_ELIMIT, which wedged the arrangement: every later merge
 * failed.)  Without compaction the two times simply stay apart. */
Test(merge_consolidate, overflow_across_inputs_is_kept_apart)
{
	const batch_desc da = { { 0 }, { 10 }, { 0 } }, db = { { 10 }, { 20 }, { 0 } },
	                 dm = { { 0 }, { 20 }, { 15 } };
	at_up u[1], got[4];
	uint64_t ids[2], out = 0;
	at_env e;

	at_open(&e);
	u[0] = up("x", "v", 1, INT64_MAX);
	ids[0] = at_build(&e, u, 1, 0, &da);
	u[0] = up("x", "v", 12, 1);
	ids[1] = at_build(&e, u, 1, 0, &db);
	out = merge_ok(&e, ids, 2, 0, &dm);
	cr_assert_eq(at_scan(&e, out, 0, got, 4), 2);
	cr_assert(got[0].time == 1 && got[0].diff == INT64_MAX);
	cr_assert(got[1].time == 12 && got[1].diff == 1);
	out = merge_ok(&e, ids, 2, 15, &dm);
	cr_assert_eq(at_scan(&e, out, 0, got, 4), 2);
	cr_assert(got[0].time == 14 && got[0].diff == INT64_MAX,
	          "%" PRIu64 " %" PRId64, got[0].time, got[0].diff);
	cr_assert(got[1].time == 15 && got[1].diff == 1);
	/* Merged again at a later since, the pieces stay apart. */
	const batch_desc dm2 = { { 0 }, { 20 }, { 18 } };
	uint64_t again[1] = { out };
	out = merge_ok(&e, again, 1, 18, &dm2);
	cr_assert_eq(at_scan(&e, out, 0, got, 4), 2);
	cr_assert(got[0].time == 17 && got[0].diff == INT64_MAX);
	cr_assert(got[1].time == 18 && got[1].diff == 1);
	at_close(&e);
}

Test(merge_consolidate, all_retracted_merges_to_nothing)
{
	const batch_desc da = { { 0 }, { 5 }, { 0 } }, db = { { 5 }, { 10 }, { 0 } }, dm = { { 0 }, { 10 }, { 8 } };
	at_up u[1];
	uint64_t ids[2], before, out = 99;
	at_env e;

	at_open(&e);
	u[0] = up("k", "v", 1, 1);
	ids[0] = at_build(&e, u, 1, 0, &da);
	u[0] = up("k", "v", 7, -1);
	ids[1] = at_build(&e, u, 1, 0, &db);
	before = at_count_chunks(&e);
	out = merge_ok(&e, ids, 2, 8, &dm);
	cr_assert_eq(out, 0);
	cr_assert_eq(at_count_chunks(&e), before, "no chunk for an empty merge");
	/* Below since 8 is not reached, the two stay apart. */
	out = merge_ok(&e, ids, 2, 6, &dm);
	cr_assert_neq(out, 0);
	at_close(&e);
}

static void shuffle(at_up *u, size_t n, uint64_t *st)
{
	for (size_t j = n - 1; j > 0; j--) {
		size_t r = tl_rand(st) % (j + 1);
		at_up x = u[j];
		u[j] = u[r];
		u[r] = x;
	}
}

Test(merge_orders, splits_and_orders_give_identical_bytes, .timeout = 60)
{
	const uint64_t seed = 7;
	const size_t n = 50000;
	const at_shape s = { .kmax = 6, .vmax = 4, .alpha = 3, .times = 16,
	                     .dmax = 3 };
	const batch_desc d = { { 0 }, { 16 }, { 0 } };
	at_up *u = malloc(n * sizeof *u), *got = malloc(n * sizeof *got);
	uint64_t st = seed, ab[2], cde[3], out1, out2, out3, all;
	size_t c1 = n / 10, c2 = n * 7 / 10, nw;
	at_env e;

	cr_log_info("merge_orders seed %llu", (unsigned long long)seed);
	at_gen(u, n, seed, &s);
	at_open(&e);
	ab[0] = at_build(&e, u, n / 2, 0, &d);
	ab[1] = at_build(&e, u + n / 2, n - n / 2, 0, &d);
	shuffle(u, n, &st);
	cde[2] = at_build(&e, u, c1, 0, &d);
	cde[0] = at_build(&e, u + c1, c2 - c1, 0, &d);
	cde[1] = at_build(&e, u + c2, n - c2, 4 << 10, &d);
	all = at_build(&e, u, n, 0, &d);
	out1 = merge_ok(&e, ab, 2, 0, &d);
	out2 = merge_ok(&e, cde, 3, 0, &d);
	{
		uint64_t rev[5] = { cde[1], ab[1], cde[0], ab[0], cde[2] };
		/* Every update twice: all diffs double. */
		out3 = merge_ok(&e, rev, 5, 0, &d);
	}
	at_assert_same_chunks(&e, out1, out2);
	at_assert_same_chunks(&e, out1, all);
	nw = at_consolidate(u, n, 0);
	at_assert_equal(got, at_scan(&e, out1, 0, got, n), u, nw, seed);
	cr_assert_eq(at_scan(&e, out3, 0, got, n), nw);
	for (size_t i = 0; i < nw; i++)
		cr_assert_eq(got[i].diff, 2 * u[i].diff, "seed %llu: %zu",
		             (unsigned long long)seed, i);
	at_close(&e);
	free(u);
	free(got);
}

/* Accumulated diff of group [g, end) at time T. */
static int64_t acc(const at_up *g, size_t n, uint64_t T)
{
	int64_t s = 0;
	for (size_t i = 0; i < n; i++)
		if (g[i].time <= T)
			s += g[i].diff;
	return s;
}

static int up_kv_cmp(const at_up *a, const at_up *b)
{
	int c = bytes_cmp(a->key, a->klen, b->key, b->klen);
	return c ? c : bytes_cmp(a->val, a->vlen, b->val, b->vlen);
}

Test(merge_compaction, accumulations_preserved_from_since, .timeout = 60)
{
	const uint64_t seed = 11, S = 50, T_END = 100;
	const size_t n = 30000;
	const at_shape s = { .kmax = 4, .vmax = 3, .alpha = 3, .times = T_END,
	                     .dmax = 2 };
	const uint64_t cut[4] = { 0, 34, 67, 100 };
	at_up *u = malloc(n * sizeof *u), *part = malloc(n * sizeof *part);
	at_up *got = malloc(n * sizeof *got), *ref = malloc(n * sizeof *ref);
	uint64_t ids[3], out;
	size_t nr, ng, i = 0, j = 0;
	at_env e;
	batch_desc dm = { { 0 }, { 100 }, { S } };

	cr_log_info("merge_compaction seed %llu", (unsigned long long)seed);
	at_gen(u, n, seed, &s);
	at_open(&e);
	for (int b = 0; b < 3; b++) {
		batch_desc d = { { cut[b] }, { cut[b + 1] }, { 0 } };
		size_t np = 0;
		for (size_t k = 0; k < n; k++)
			if (u[k].time >= cut[b] && u[k].time < cut[b + 1])
				part[np++] = u[k];
		ids[b] = at_build(&e, part, np, 0, &d);
	}
	out = merge_ok(&e, ids, 3, S, &dm);
	ng = at_scan(&e, out, 0, got, n);
	memcpy(ref, u, n * sizeof *u);
	nr = at_consolidate(ref, n, 0);
	for (size_t k = 0; k < ng; k++)
		cr_assert_geq(got[k].time, S, "seed %llu", (unsigned long long)seed);
	/* Walk (key, val) groups of the reference and of the output. */
	while (i < nr || j < ng) {
		size_t i2 = i, j2 = j;
		int c = i == nr ? 1 : j == ng ? -1 : up_kv_cmp(&ref[i], &got[j]);
		if (c <= 0)
			while (i2 < nr && up_kv_cmp(&ref[i2], &ref[i]) == 0)
				i2++;
		if (c >= 0)
			while (j2 < ng && up_kv_cmp(&got[j2], &got[j]) == 0)
				j2++;
		for (uint64_t T = S; T < T_END; T++)
			cr_assert_eq(acc(ref + i, i2 - i, T), acc(got + j, j2 - j, T),
			             "seed %llu: group %zu/%zu at T %llu",
			             (unsigned long long)seed, i, j,
			             (unsigned long long)T);
		i = i2;
		j = j2;
	}
	/* And exactly the reference advanced to S. */
	nr = at_consolidate(u, n, S);
	at_assert_equal(got, ng, u, nr, seed);
	at_close(&e);
	free(u);
	free(part);
	free(got);
	free(ref);
}
