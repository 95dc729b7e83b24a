/*
 * tests/unit/arrangement/test_merge_resume.c - suspended and resumed merges
 * (merge.h): merge with small fuel, suspend after each step, commit, begin
 * a new transaction, resume from the boundary and the partial batch, ...
 * The output must be byte-identical to one unfueled merge, with no partial
 * chunk left over, also when the boundary lands inside a hot key holding
 * thousands of vals.  Seeds are fixed and printed on failure.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/merge.h"
#include "arr_test.h"

typedef struct saved {
	merge_resume r;
	uint8_t key[64], val[64];
} saved;

static void load_all(at_env *e, const uint64_t *ids, size_t n, batch **in,
                     uint64_t *updates)
{
	*updates = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(batch_load(e->t, ids[i], &in[i]), 0);
		*updates += in[i]->updates;
	}
}

/* Runs the merge in steps of `fuel`, one transaction per step. */
static uint64_t fueled_merge(at_env *e, const uint64_t *ids, size_t n,
                             uint64_t since, const batch_desc *d,
                             uint64_t fuel, size_t *nsteps)
{
	saved sv;
	uint64_t out = 0, total = 0, updates = 0;
	batch *in[8];

	memset(&sv, 0, sizeof sv);
	*nsteps = 0;
	for (;;) {
		merger *m = NULL;
		bool done = false;
		uint64_t spent = 0;
		merge_resume r;
		int rc;

		load_all(e, ids, n, in, &updates);
		rc = merger_open(e->t, e->p, in, n, frontier_of(since), &sv.r, &m);
		cr_assert_eq(rc, 0, "open: %s", ah_strerror(rc));
		rc = merger_step(m, fuel, &done, &spent);
		cr_assert_eq(rc, 0, "step: %s", ah_strerror(rc));
		total += spent;
		(*nsteps)++;
		if (done) {
			cr_assert_eq(merger_finish(m, d, &out), 0);
			merger_free(m);
			for (size_t i = 0; i < n; i++)
				batch_free(in[i]);
			break;
		}
		cr_assert_geq(spent, fuel, "a step stops only once fuel is spent");
		cr_assert_eq(merger_suspend(m, &r), 0);
		cr_assert(r.has_boundary);
		cr_assert_leq(r.klen, sizeof sv.key);
		cr_assert_leq(r.vlen, sizeof sv.val);
		memcpy(sv.key, r.key, r.klen);
		memcpy(sv.val, r.val, r.vlen);
		sv.r = r;
		sv.r.key = sv.key;
		sv.r.val = sv.val;
		merger_free(m);
		for (size_t i = 0; i < n; i++)
			batch_free(in[i]);
		at_commit(e, false);
	}
	/* Fuel: one unit per input (time, diff), each read exactly once. */
	cr_assert_eq(total, updates);
	return out;
}

/* The merge thread's way (merge.h, detached): each step computed in a
 * read transaction into chunk images, attached to the write transaction
 * and suspended (or finished) there, then committed. */
static uint64_t detached_merge(at_env *e, const uint64_t *ids, size_t n,
                               uint64_t since, const batch_desc *d,
                               uint64_t fuel, size_t *nsteps)
{
	saved sv;
	uint64_t out = 0, total = 0, updates = 0;
	batch *in[8];

	memset(&sv, 0, sizeof sv);
	*nsteps = 0;
	for (;;) {
		heap_txn *rt = NULL;
		merger *m = NULL;
		bool done = false;
		uint64_t spent = 0;
		merge_resume r;
		int rc;

		cr_assert_eq(heap_txn_begin(e->h, true, &rt), 0);
		updates = 0;
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(batch_load(rt, ids[i], &in[i]), 0);
			updates += in[i]->updates;
		}
		rc = merger_open_detached(rt, e->p, in, n, frontier_of(since),
		                          &sv.r, &m);
		cr_assert_eq(rc, 0, "open: %s", ah_strerror(rc));
		rc = merger_step(m, fuel, &done, &spent);
		cr_assert_eq(rc, 0, "step: %s", ah_strerror(rc));
		/* nothing of the step is in the heap before the attach */
		cr_assert_eq(merger_suspend(m, &r), AH_ESTATE);
		cr_assert_eq(merger_attach(m, e->t), 0);
		cr_assert_eq(merger_image_bytes(m), 0);
		total += spent;
		(*nsteps)++;
		if (done) {
			cr_assert_eq(merger_finish(m, d, &out), 0);
		} else {
			cr_assert_eq(merger_suspend(m, &r), 0);
			memcpy(sv.key, r.key, r.klen);
			memcpy(sv.val, r.val, r.vlen);
			sv.r = r;
			sv.r.key = sv.key;
			sv.r.val = sv.val;
		}
		merger_free(m);
		for (size_t i = 0; i < n; i++)
			batch_free(in[i]);
		at_commit(e, false);
		heap_txn_abort(rt);
		if (done)
			break;
	}
	cr_assert_eq(total, updates);
	return out;
}

static void make_inputs(at_env *e, size_t n, size_t hot_vals, uint64_t seed,
                        uint64_t *ids)
{
	const at_shape s = { .kmax = 5, .vmax = 5, .alpha = 3, .times = 12,
	                     .dmax = 2 };
	const batch_desc d = { { 0 }, { 12 }, { 0 } };
	size_t total = n + 3 * hot_vals;
	at_up *u = malloc(total * sizeof *u);
	uint64_t st = seed;

	at_gen(u, n, seed, &s);
	for (size_t i = 0; i < hot_vals; i++)
		for (size_t r = 0; r < 3; r++) {
			at_up *h = &u[n + 3 * i + r];
			memset(h, 0, sizeof *h);
			memcpy(h->key, "hot", 3);
			h->klen = 3;
			h->val[0] = (uint8_t)(i >> 8);
			h->val[1] = (uint8_t)i;
			h->vlen = 2;
			h->time = tl_rand(&st) % 12;
			h->diff = 1;
		}
	for (size_t j = total - 1; j > 0; j--) {
		size_t r = tl_rand(&st) % (j + 1);
		at_up x = u[j];
		u[j] = u[r];
		u[r] = x;
	}
	ids[0] = at_build(e, u, total / 4, 0, &d);
	ids[1] = at_build(e, u + total / 4, total / 2, 0, &d);
	ids[2] = at_build(e, u + total / 4 + total / 2,
	                  total - total / 4 - total / 2, 0, &d);
	free(u);
}

static void check_resume2(size_t n, size_t hot, uint64_t seed,
                          const uint64_t *fuels, size_t nf, bool detached)
{
	const batch_desc dm = { { 0 }, { 12 }, { 5 } };
	uint64_t ids[3], ref, base;
	at_env e;

	cr_log_info("merge_resume seed %llu n %zu hot %zu",
	            (unsigned long long)seed, n, hot);
	at_open(&e);
	make_inputs(&e, n, hot, seed, ids);
	{
		batch *in[3];
		merger *m = NULL;
		bool done;
		uint64_t spent, upd;
		load_all(&e, ids, 3, in, &upd);
		cr_assert_eq(merger_open(e.t, e.p, in, 3, frontier_of(5), NULL, &m), 0);
		cr_assert_eq(merger_step(m, 0, &done, &spent), 0);
		cr_assert(done);
		cr_assert_eq(spent, upd);
		cr_assert_eq(merger_finish(m, &dm, &ref), 0);
		cr_assert_neq(ref, 0);
		merger_free(m);
		for (int i = 0; i < 3; i++)
			batch_free(in[i]);
	}
	at_commit(&e, false);
	base = at_count_chunks(&e);
	for (size_t f = 0; f < nf; f++) {
		size_t steps;
		uint64_t out = detached ?
			detached_merge(&e, ids, 3, 5, &dm, fuels[f], &steps) :
			fueled_merge(&e, ids, 3, 5, &dm, fuels[f], &steps);
		batch *b;
		cr_log_info("fuel %llu: %zu steps", (unsigned long long)fuels[f],
		            steps);
		cr_assert_gt(steps, 1);
		at_assert_same_chunks(&e, ref, out);
		cr_assert_eq(batch_load(e.t, out, &b), 0);
		cr_assert_eq(at_count_chunks(&e), base + b->nchunks,
		             "seed %llu fuel %llu: partial chunks left over",
		             (unsigned long long)seed,
		             (unsigned long long)fuels[f]);
		batch_free(b);
		cr_assert_eq(batch_drop(e.t, out), 0);
		at_commit(&e, false);
	}
	at_close(&e);
}

static void check_resume(size_t n, size_t hot, uint64_t seed,
                         const uint64_t *fuels, size_t nf)
{
	check_resume2(n, hot, seed, fuels, nf, false);
}

/* The merge thread's slices (computed detached in a read txn, installed
 * in the write txn) give the same bytes as one unfueled merge, and free
 * every chunk they replace. */
Test(merge_resume, detached_slices_equal_unfueled, .timeout = 120)
{
	const uint64_t fuels[] = { 3, 1000, 20000 };
	check_resume2(40000, 5000, 4321, fuels, 3, true);
}

Test(merge_resume, fuel_one_inside_hot_key, .timeout = 60)
{
	const uint64_t fuels[] = { 1, 2 };
	check_resume(1500, 800, 99, fuels, 2);
}

Test(merge_resume, larger_fuels_equal_unfueled, .timeout = 60)
{
	const uint64_t fuels[] = { 37, 1000, 20000 };
	check_resume(40000, 5000, 1234, fuels, 3);
}

/* A step that consumes only groups that cancel leaves an empty output so
 * far: the boundary still moves, and resuming goes on after it. */
Test(merge_resume, boundary_over_cancelled_groups)
{
	const batch_desc da = { { 0 }, { 5 }, { 0 } }, db = { { 5 }, { 10 }, { 0 } }, dm = { { 0 }, { 10 }, { 9 } };
	at_up u[40];
	uint64_t ids[2], ref, out;
	size_t steps;
	at_env e;

	at_open(&e);
	for (int b = 0; b < 2; b++) {
		for (int i = 0; i < 40; i++) {
			memset(&u[i], 0, sizeof u[i]);
			u[i].key[0] = (uint8_t)('a' + i / 4);
			u[i].klen = 1;
			u[i].val[0] = (uint8_t)('0' + i % 4);
			u[i].vlen = 1;
			u[i].time = b ? 6 : 1;
			/* Keys a..h cancel at since 9, i and j do not. */
			u[i].diff = b ? (i < 32 ? -1 : 1) : 1;
		}
		ids[b] = at_build(&e, u, 40, 0, b ? &db : &da);
	}
	at_commit(&e, false);
	ref = 0;
	{
		batch *in[2];
		merger *m;
		bool done;
		uint64_t spent, upd;
		load_all(&e, ids, 2, in, &upd);
		cr_assert_eq(merger_open(e.t, e.p, in, 2, frontier_of(9), NULL, &m), 0);
		cr_assert_eq(merger_step(m, 0, &done, &spent), 0);
		cr_assert_eq(merger_finish(m, &dm, &ref), 0);
		merger_free(m);
		batch_free(in[0]);
		batch_free(in[1]);
	}
	out = fueled_merge(&e, ids, 2, 9, &dm, 3, &steps);
	cr_assert_eq(steps, 20);
	at_assert_same_chunks(&e, ref, out);
	at_close(&e);
}
