/*
 * tests/unit/arrangement/test_merge_run.c - the merge's run loop
 * (merge_run.c) against the group-at-a-time merge: for inputs of fixed
 * key and val widths (8, 16 and wider than 16, where the compare needs
 * the rest), with (key, val)s shared by several inputs (equal times
 * summed, cancelled, distinct times kept apart), vals with several
 * updates, since at 0, inside and past the inputs, fuel in small steps
 * and unfueled, every output is byte-identical with the loop on and
 * off: chunk bodies, counts and key filter.  The units spent per step
 * are identical too, and the loop is shown to have taken groups (and
 * none when the widths differ).  Seeds are fixed and printed.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/merge.h"
#include "arr_test.h"
#include "tl_rand.h"

/* Inputs: n updates over nk keys and 3 vals per key, of widths kw and vw
 * (0: lengths 1..kw vary), times in [lower, upper), diffs in [-2, 2]
 * minus 0; the keys' first 8 bytes are shared by runs of keys when
 * kw > 8, so compares reach bytes 8-16 and past 16. */
typedef struct gen {
	unsigned kw, vw;
	uint64_t nk;
	bool varlen;
} gen;

static void fill(uint8_t *p, unsigned w, uint64_t x, uint64_t salt)
{
	memset(p, 0, w);
	for (unsigned i = 0; i < w; i++) {
		/* byte i: most of the number in the last bytes, so wide fields
		 * tie on their first 8 or 16 bytes */
		unsigned sh = (unsigned)(8 * ((w - 1 - i) % 8));
		p[i] = (uint8_t)((x >> sh) ^ (i < w - 8 ? salt : 0));
	}
}

static void gen_batch(at_up *u, size_t n, uint64_t *st, const gen *g,
                      uint64_t lower, uint64_t upper)
{
	for (size_t i = 0; i < n; i++) {
		memset(&u[i], 0, sizeof u[i]);
		uint64_t k = tl_below(st, g->nk), v = tl_below(st, 3);
		u[i].klen = (uint8_t)(g->varlen ? 1 + (k % g->kw) : g->kw);
		u[i].vlen = (uint8_t)g->vw;
		fill(u[i].key, u[i].klen, k, k / 64);
		fill(u[i].val, u[i].vlen, v * 7919 + k, v);
		u[i].time = lower + tl_below(st, upper - lower);
		u[i].diff = (int64_t)tl_below(st, 4) - 2;
		if (u[i].diff >= 0)
			u[i].diff++;
	}
}

typedef struct out {
	uint64_t id;
	uint64_t spent[4096];
	size_t steps;
	uint64_t run_groups;
} out;

static void merge(at_env *e, const uint64_t *ids, size_t n, uint64_t since,
                  uint64_t fuel, bool runs, const batch_desc *d, out *o)
{
	batch *in[8];
	merger *m = NULL;
	bool done = false;

	cr_assert_leq(n, 8);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(batch_load(e->t, ids[i], &in[i]), 0);
	cr_assert_eq(merger_open(e->t, e->p, in, n, frontier_of(since), NULL, &m), 0);
	merger_set_runs(m, runs);
	o->steps = 0;
	while (!done) {
		uint64_t spent = 0;
		cr_assert_eq(merger_step(m, fuel, &done, &spent), 0);
		cr_assert_lt(o->steps, sizeof o->spent / sizeof o->spent[0]);
		o->spent[o->steps++] = spent;
	}
	o->run_groups = merger_run_groups(m);
	cr_assert_eq(merger_finish(m, d, &o->id), 0);
	merger_free(m);
	for (size_t i = 0; i < n; i++)
		batch_free(in[i]);
}

static void assert_same_batch(at_env *e, uint64_t a, uint64_t b)
{
	at_assert_same_chunks(e, a, b);
	at_assert_same_filter(e, a, b);
}

/* Builds ninputs batches of per updates each (times advancing from batch
 * to batch; of three or more, the last retracts the first's updates at
 * later times), then merges them with the loop on and off at each since and
 * fuel, and compares.  Returns the groups the loop took, over all. */
static uint64_t compare(uint64_t seed, const gen *g, size_t ninputs,
                        size_t per)
{
	const uint64_t sinces[] = { 0, 5 * ninputs, 10 * ninputs + 3 };
	const uint64_t fuels[] = { 0, 1, 997 };
	at_up *u = malloc(per * sizeof *u);
	uint64_t ids[8], st = seed, took = 0;
	batch_desc d = { { 0 }, { 10 * ninputs }, { 0 } };
	at_env e;
	out *a = malloc(sizeof *a), *b = malloc(sizeof *b);

	cr_log_info("merge_run seed %llu kw %u vw %u%s inputs %zu",
	            (unsigned long long)seed, g->kw, g->vw,
	            g->varlen ? " (varlen)" : "", ninputs);
	cr_assert(u && a && b);
	at_open(&e);
	for (size_t i = 0; i < ninputs; i++) {
		batch_desc di = { { 10 * i }, { 10 * (i + 1) }, { 0 } };
		bool again = i + 1 == ninputs && i > 1;
		uint64_t s = again ? seed : st;
		gen_batch(u, per, &s, g, 10 * i, 10 * (i + 1));
		if (again) /* the first batch's (key, val)s, retracted */
			for (size_t j = 0; j < per; j++)
				u[j].diff = -u[j].diff;
		else
			st = s;
		ids[i] = at_build(&e, u, per, 0, &di);
	}
	for (size_t si = 0; si < 3; si++) {
		for (size_t fi = 0; fi < 3; fi++) {
			uint64_t fuel = fuels[fi] == 1 ? per / 7 + 1 : fuels[fi];
			if (fuels[fi] == 1 && si != 1)
				continue; /* the tiny fuel at one since: its steps */
			d.since.t = sinces[si];
			merge(&e, ids, ninputs, sinces[si], fuel, true, &d, a);
			merge(&e, ids, ninputs, sinces[si], fuel, false, &d, b);
			cr_assert_eq(b->run_groups, 0);
			cr_assert_eq(a->steps, b->steps, "seed %llu: steps %zu vs %zu",
			             (unsigned long long)seed, a->steps, b->steps);
			for (size_t k = 0; k < a->steps; k++)
				cr_assert_eq(a->spent[k], b->spent[k],
				             "seed %llu since %llu fuel %llu step %zu",
				             (unsigned long long)seed,
				             (unsigned long long)sinces[si],
				             (unsigned long long)fuel, k);
			cr_assert_eq(a->id == 0, b->id == 0);
			if (a->id)
				assert_same_batch(&e, a->id, b->id);
			took += a->run_groups;
			if (a->id && si == 0 && fi == 0) {
				batch *x = at_load(&e, a->id);
				cr_log_info("  output: %u chunks, %llu updates, "
				            "%llu groups by the loop",
				            x->nchunks, (unsigned long long)x->updates,
				            (unsigned long long)a->run_groups);
				batch_free(x);
			}
		}
	}
	at_close(&e);
	free(u);
	free(a);
	free(b);
	return took;
}

Test(merge_run, two_inputs_8_byte_keys_16_byte_vals, .timeout = 120)
{
	const gen g = { 8, 16, 100000, false };
	cr_assert_gt(compare(11, &g, 2, 100000), 0);
}

Test(merge_run, three_inputs_8_byte_keys_8_byte_vals, .timeout = 120)
{
	const gen g = { 8, 8, 30000, false };
	cr_assert_gt(compare(12, &g, 3, 30000), 0);
}

Test(merge_run, wide_fields_compare_past_16_bytes, .timeout = 120)
{
	const gen g = { 16, 24, 20000, false };
	cr_assert_gt(compare(13, &g, 4, 20000), 0);
}

Test(merge_run, one_input_compaction, .timeout = 120)
{
	const gen g = { 4, 3, 40000, false };
	cr_assert_gt(compare(14, &g, 1, 40000), 0);
}

Test(merge_run, eight_inputs_hot_keys, .timeout = 120)
{
	const gen g = { 8, 16, 4000, false };
	cr_assert_gt(compare(15, &g, 8, 4000), 0);
}

/* Zero-width vals: the writer keeps no buffer for the empty column, and
 * the loop copies nothing to or from it (UBSan: memcpy with NULL). */
Test(merge_run, empty_vals, .timeout = 120)
{
	const gen g = { 8, 0, 20000, false };
	cr_assert_gt(compare(17, &g, 2, 20000), 0);
}

Test(merge_run, varying_widths_never_take_the_loop, .timeout = 120)
{
	const gen g = { 8, 16, 5000, true };
	cr_assert_eq(compare(16, &g, 2, 20000), 0);
}

/* ---------------------------------------------- inputs that lie about order */

/* Merges ids with the loop on or off, unfueled: the first error, or 0 and
 * the output in *id. */
static int merge_rc(at_env *e, const uint64_t *ids, size_t n, bool runs,
                    uint64_t *id)
{
	const batch_desc d = { { 0 }, { 100 }, { 0 } };
	batch *in[4];
	merger *m = NULL;
	bool done = false;
	uint64_t spent;
	int rc;

	*id = 0;
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(batch_load(e->t, ids[i], &in[i]), 0);
	cr_assert_eq(merger_open(e->t, e->p, in, n, frontier_of(0), NULL, &m), 0);
	merger_set_runs(m, runs);
	while ((rc = merger_step(m, 0, &done, &spent)) == 0 && !done)
		;
	if (rc == 0)
		rc = merger_finish(m, &d, id);
	merger_free(m);
	for (size_t i = 0; i < n; i++)
		batch_free(in[i]);
	return rc;
}

static void be64(uint8_t *p, uint64_t x)
{
	for (int i = 7; i >= 0; i--, x >>= 8)
		p[i] = (uint8_t)x;
}

/* Two batches of 8-byte keys (even, odd: 2000 each) with two 16-byte vals
 * per key, one update each; in the first, key or val number `at` is
 * rewritten (bytes found in the chunk's column and the chunk resealed, as
 * a buggy writer would leave it) to `to`'s.  Merged with the loop on and
 * off: the same result, the same output bytes when it succeeds. */
enum lie { LIE_KEY_SMALLER, LIE_KEY_EQUAL, LIE_VAL_EQUAL, LIE_VAL_SMALLER };

static void lie_case(enum lie how)
{
	static at_up u[2][4000];
	uint64_t ids[2], a = 0, b = 0;
	at_env e;

	at_open(&e);
	for (int s = 0; s < 2; s++) {
		for (size_t i = 0; i < 4000; i++) {
			memset(&u[s][i], 0, sizeof u[s][i]);
			u[s][i].klen = 8;
			be64(u[s][i].key, 1000 + 2 * (i / 2) * 2 + (uint64_t)s * 2);
			u[s][i].vlen = 16;
			be64(u[s][i].val, 7);
			be64(u[s][i].val + 8, 100 + i); /* distinct: found once */
			u[s][i].time = (uint64_t)s;
			u[s][i].diff = 1;
		}
		batch_desc di = { { (uint64_t)s }, { (uint64_t)s + 1 }, { 0 } };
		ids[s] = at_build(&e, u[s], 4000, 0, &di);
	}
	batch *x = at_load(&e, ids[0]);
	cr_assert_eq(x->nchunks, 1);
	uint64_t cid = x->chunk_ids[0];
	batch_free(x);
	const void *bp;
	size_t used;
	cr_assert_eq(heap_chunk_get(e.t, cid, &bp, &used), 0);
	uint8_t *body = (uint8_t *)bp; /* test-only write through the map */
	uint8_t want[16], to[16];
	size_t len = how <= LIE_KEY_EQUAL ? 8 : 16;
	const at_up *at = &u[0][2 * 1200], *prev = &u[0][2 * 1199];
	switch (how) {
	case LIE_KEY_SMALLER: /* key 1200 becomes less than key 1199 */
		memcpy(want, at->key, 8);
		be64(to, 3);
		break;
	case LIE_KEY_EQUAL:   /* key 1200 becomes key 1199 */
		memcpy(want, at->key, 8);
		memcpy(to, prev->key, 8);
		break;
	case LIE_VAL_EQUAL:   /* key 1200's second val becomes its first */
		memcpy(want, u[0][2 * 1200 + 1].val, 16);
		memcpy(to, at->val, 16);
		break;
	default:              /* key 1200's second val becomes less */
		memcpy(want, u[0][2 * 1200 + 1].val, 16);
		memset(to, 0, 16);
		break;
	}
	/* the field's one occurrence in the chunk (keys and vals distinct) */
	uint8_t *p = memmem(body, used, want, len);
	cr_assert(p, "field bytes not found in the chunk");
	memcpy(p, to, len);
	at_reseal(&e, ids[0], cid, body, used);
	int ra = merge_rc(&e, ids, 2, true, &a);
	int rb = merge_rc(&e, ids, 2, false, &b);
	cr_log_info("merge_run lie %d: loop on %d, off %d", (int)how, ra, rb);
	cr_assert_eq(ra, rb, "lie %d: loop on %d, off %d", (int)how, ra, rb);
	if (ra == 0 && a)
		assert_same_batch(&e, a, b);
	at_close(&e);
}

Test(merge_run, input_key_out_of_order_resealed, .timeout = 60)
{
	lie_case(LIE_KEY_SMALLER);
}

Test(merge_run, input_key_repeated_resealed, .timeout = 60)
{
	lie_case(LIE_KEY_EQUAL);
}

Test(merge_run, input_val_repeated_resealed, .timeout = 60)
{
	lie_case(LIE_VAL_EQUAL);
}

Test(merge_run, input_val_out_of_order_resealed, .timeout = 60)
{
	lie_case(LIE_VAL_SMALLER);
}

/* A merge resumed at its boundary (the spine's fueled merges, every
 * append) takes the loop at once: its inputs' seeks load their chunks as
 * a walk does (bcur_set_walk: checked whole), not a page at a time, which
 * the loop does not take (it did not before: the rest of each input's
 * first chunk went group by group). */
Test(merge_run, resumed_merge_takes_the_loop_at_once, .timeout = 120)
{
	const gen g = { 8, 16, 100000, false };
	enum { PER = 100000, FUEL = 5000 };
	at_up *u = malloc(PER * sizeof *u);
	uint64_t ids[2], st = 15, spent = 0;
	batch *in[2];
	merger *m = NULL, *m2 = NULL;
	merge_resume res;
	bool done = false;
	at_env e;

	cr_assert_not_null(u);
	at_open(&e);
	for (size_t i = 0; i < 2; i++) {
		batch_desc di = { { 10 * i }, { 10 * (i + 1) }, { 0 } };

		gen_batch(u, PER, &st, &g, 10 * i, 10 * (i + 1));
		ids[i] = at_build(&e, u, PER, 0, &di);
	}
	for (size_t i = 0; i < 2; i++)
		cr_assert_eq(batch_load(e.t, ids[i], &in[i]), 0);
	cr_assert_eq(merger_open(e.t, e.p, in, 2, frontier_of(0), NULL, &m), 0);
	/* past each input's first chunk (about 40,000 updates a chunk) */
	cr_assert_eq(merger_step(m, 150000, &done, &spent), 0);
	cr_assert(!done);
	cr_assert_eq(merger_suspend(m, &res), 0);
	cr_assert(res.has_boundary);
	cr_assert_eq(res.klen, 8);
	cr_assert_eq(res.vlen, 16);
	/* a new handle, as a later process's append: no chunk is known to
	 * be checked whole (the handle's verified cache is empty) */
	uint8_t bk[8], bv[16];
	memcpy(bk, res.key, 8);
	memcpy(bv, res.val, 16);
	res.key = bk;
	res.val = bv;
	merger_free(m);
	m = NULL;
	for (size_t i = 0; i < 2; i++)
		batch_free(in[i]);
	cr_assert_eq(heap_txn_commit(e.t), 0);
	cr_assert_eq(heap_close(e.h), 0);
	{
		ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_NOSYNC };

		cr_assert_eq(heap_open(e.dir.path, &o, &e.h), 0);
	}
	e.p = heap_pool(e.h);
	cr_assert_eq(heap_txn_begin(e.h, false, &e.t), 0);
	for (size_t i = 0; i < 2; i++)
		cr_assert_eq(batch_load(e.t, ids[i], &in[i]), 0);
	cr_assert_eq(merger_open(e.t, e.p, in, 2, frontier_of(0), &res, &m2), 0);
	cr_assert_eq(merger_step(m2, FUEL, &done, &spent), 0);
	cr_log_info("resumed: %llu of %llu units, %llu groups by the loop",
	            (unsigned long long)spent, (unsigned long long)FUEL,
	            (unsigned long long)merger_run_groups(m2));
	/* every group but the few at a chunk's last val */
	cr_assert_geq(merger_run_groups(m2), FUEL / 2 - 16);
	merger_free(m2);
	merger_free(m);
	for (size_t i = 0; i < 2; i++)
		batch_free(in[i]);
	at_close(&e);
	free(u);
}
