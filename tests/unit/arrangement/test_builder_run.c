/*
 * tests/unit/arrangement/test_builder_run.c - the builder's use of the
 * writer's run mode (builder.c: run_mode) against the builder without it:
 * for fixed key and val widths (8 and 16, 8 and 8, 16 and 24 where the
 * order check compares past the prefix, 4 and 3) and varying widths,
 * and fixed widths with a few fields one byte short,
 * with (key, val)s that repeat within a run (consolidated through
 * push_kv), equal (key, val, time)s that cancel, zero diffs, keys with
 * several vals, many chunks, and run budgets that spill into temporary
 * batches merged at finish, every output is byte-identical with the mode
 * on and off: chunk bodies, counts and key filter.  The mode is shown to
 * have staged updates (and the merge's run loop at finish is off with
 * it, so the off build is the writer's own path throughout).  Seeds are
 * fixed and printed.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/builder.h"
#include "arr_test.h"
#include "tl_rand.h"

typedef struct gen {
	unsigned kw, vw;   /* widths; varlen: 1..kw and 1..vw */
	uint64_t nk, nv;   /* distinct keys, vals per key */
	uint64_t times;    /* times in [0, times) */
	bool varlen;
	bool odd;          /* a few keys one byte short, a few vals too */
} gen;

static void fill(uint8_t *p, unsigned w, uint64_t x, uint64_t salt)
{
	for (unsigned i = 0; i < w; i++) {
		/* most of the number in the last bytes, so that fields wider
		 * than 8 tie on their prefix and compare the rest */
		unsigned sh = (unsigned)(8 * ((w - 1 - i) % 8));
		p[i] = (uint8_t)((x >> sh) ^ (i + 8 < w ? salt : 0));
	}
}

static void gen_ups(at_up *u, size_t n, uint64_t *st, const gen *g)
{
	for (size_t i = 0; i < n; i++) {
		memset(&u[i], 0, sizeof u[i]);
		uint64_t k = tl_below(st, g->nk), v = tl_below(st, g->nv);
		u[i].klen = (uint8_t)(g->varlen ? 1 + (k % g->kw) : g->kw);
		u[i].vlen = (uint8_t)(g->varlen ? 1 + (v % g->vw) : g->vw);
		if (g->odd && k % 4001 == 7)
			u[i].klen--;
		if (g->odd && (k + v) % 3001 == 5)
			u[i].vlen--;
		fill(u[i].key, u[i].klen, k * 0x9e3779b97f4a7c15ull, k / 64);
		fill(u[i].val, u[i].vlen, v * 7919 + k, v);
		u[i].time = tl_below(st, g->times);
		u[i].diff = (int64_t)tl_below(st, 5) - 2; /* zeros too */
	}
	/* some updates cancelled exactly by a later copy */
	for (size_t i = 0; i + 1 < n; i += 97) {
		u[i + 1] = u[i];
		u[i + 1].diff = -u[i].diff;
	}
}

static uint64_t build(at_env *e, const at_up *u, size_t n, size_t budget,
                      bool runs, uint64_t *pushes)
{
	const batch_desc d = { { 0 }, { 1000 }, { 0 } };
	ah_update buf[512];
	builder *b = NULL;
	uint64_t id = 0;

	cr_assert_eq(builder_new(e->t, e->p, budget, &b), 0);
	builder_set_runs(b, runs, pushes);
	for (size_t i = 0; i < n; i += 512) {
		size_t m = n - i < 512 ? n - i : 512;
		for (size_t j = 0; j < m; j++)
			at_to_ah(&u[i + j], &buf[j]);
		cr_assert_eq(builder_push(b, buf, m), 0);
	}
	cr_assert_eq(builder_finish(b, &d, &id), 0);
	return id;
}

static void assert_same_batch(at_env *e, uint64_t a, uint64_t b)
{
	at_assert_same_chunks(e, a, b);
	at_assert_same_filter(e, a, b);
}

/* Builds n updates of g with the mode on and off at each budget and
 * compares; returns the updates the mode staged, over all. */
static uint64_t compare(uint64_t seed, const gen *g, size_t n)
{
	const size_t budgets[] = { 0, 256 << 10 };
	at_up *u = malloc(n * sizeof *u);
	uint64_t st = seed, took = 0;
	at_env e;

	cr_log_info("builder_run seed %llu kw %u vw %u%s n %zu",
	            (unsigned long long)seed, g->kw, g->vw,
	            g->varlen ? " (varlen)" : "", n);
	cr_assert(u);
	gen_ups(u, n, &st, g);
	at_open(&e);
	for (size_t bi = 0; bi < 2; bi++) {
		uint64_t on = 0, off = 0;
		uint64_t a = build(&e, u, n, budgets[bi], true, &on);
		uint64_t b = build(&e, u, n, budgets[bi], false, &off);
		cr_assert_eq(off, 0);
		cr_assert_eq(a == 0, b == 0);
		if (a) {
			assert_same_batch(&e, a, b);
			batch *x = at_load(&e, a);
			cr_log_info("  budget %zu: %u chunks, %llu updates, %llu "
			            "staged by the mode", budgets[bi], x->nchunks,
			            (unsigned long long)x->updates,
			            (unsigned long long)on);
			batch_free(x);
		}
		took += on;
	}
	at_close(&e);
	free(u);
	return took;
}

Test(builder_run, keys_8_vals_16_one_time, .timeout = 120)
{
	const gen g = { 8, 16, 200000, 3, 1, false, false };
	cr_assert_gt(compare(21, &g, 150000), 0);
}

Test(builder_run, keys_8_vals_8_repeats_and_times, .timeout = 120)
{
	const gen g = { 8, 8, 3000, 4, 3, false, false };
	cr_assert_gt(compare(22, &g, 60000), 0);
}

Test(builder_run, wide_fields_order_past_the_prefix, .timeout = 120)
{
	const gen g = { 16, 24, 30000, 5, 2, false, false };
	cr_assert_gt(compare(23, &g, 60000), 0);
}

Test(builder_run, narrow_fields, .timeout = 120)
{
	const gen g = { 4, 3, 50000, 3, 1, false, false };
	cr_assert_gt(compare(24, &g, 60000), 0);
}

Test(builder_run, varying_widths, .timeout = 120)
{
	const gen g = { 8, 16, 20000, 3, 2, true, false };
	(void)compare(25, &g, 40000);
}

/* Fixed widths but for a few keys and vals one byte short: the mode,
 * begun on a chunk of one width, must leave them to push_kv. */
Test(builder_run, odd_widths_among_fixed, .timeout = 120)
{
	const gen g = { 8, 16, 200000, 3, 1, false, true };
	cr_assert_gt(compare(26, &g, 150000), 0);
}

/* Zero-width vals (an arrangement keyed with no val, as the engine's
 * views make) and zero-width keys: the writer keeps no buffer for an
 * empty column, and the mode must not copy to or from it (UBSan found
 * memcpy(NULL, _, 0) here through ah-pgsync's views). */
Test(builder_run, empty_vals, .timeout = 120)
{
	const gen g = { 8, 0, 50000, 1, 2, false, false };
	cr_assert_gt(compare(27, &g, 60000), 0);
}

Test(builder_run, empty_keys, .timeout = 120)
{
	const gen g = { 0, 8, 1, 5000, 2, false, false };
	cr_assert_gt(compare(28, &g, 20000), 0);
}
