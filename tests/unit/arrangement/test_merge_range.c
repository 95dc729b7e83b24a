/*
 * tests/unit/arrangement/test_merge_range.c - the pieces of the merge of
 * all batches on two threads (merge_par.c), each alone: a range merger
 * merges exactly the keys in [lo, hi) (the run loop's and merge_group's
 * stop, the seek to lo), ranges absorbed in order into one writer give the
 * updates, counts and key filter of one merge, and every misuse of the
 * range API is a clear error that changes nothing: a range writer not
 * sealed (AH_ESTATE), not a range writer or a detached target (AH_EINVAL),
 * a range merger suspended or finished with the caller's writer
 * (AH_ESTATE), a bound without bytes (AH_EINVAL); an empty range absorbs
 * as nothing.  Seeds are fixed and printed.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/merge.h"
#include "arr_test.h"
#include "tl_rand.h"

#define PER 60000u

/* Two inputs of 8-byte keys over [0, 4 * PER) and 16-byte vals. */
static void inputs(at_env *e, uint64_t ids[2], uint64_t seed)
{
	at_up *u = malloc(PER * sizeof *u);
	uint64_t s = seed;

	cr_assert_not_null(u);
	for (size_t b = 0; b < 2; b++) {
		batch_desc d = { { 10 * b }, { 10 * (b + 1) }, { 0 } };

		for (size_t i = 0; i < PER; i++) {
			uint64_t k = tl_below(&s, 4 * PER);

			memset(&u[i], 0, sizeof u[i]);
			u[i].klen = 8;
			u[i].vlen = 16;
			for (int j = 0; j < 8; j++)
				u[i].key[j] = (uint8_t)(k >> (56 - 8 * j));
			u[i].val[15] = (uint8_t)tl_below(&s, 3);
			u[i].time = 10 * b + tl_below(&s, 10);
			u[i].diff = tl_below(&s, 4) ? 1 : -1;
		}
		ids[b] = at_build(e, u, PER, 0, &d);
	}
	free(u);
}

static void key_of(uint8_t k[8], uint64_t x)
{
	for (int j = 0; j < 8; j++)
		k[j] = (uint8_t)(x >> (56 - 8 * j));
}

/* Merges [lo, hi) of in into w (w NULL: a new range writer, returned
 * sealed in *rw); the units read. */
static uint64_t merge_range(at_env *e, batch *in[2], const uint8_t *lo,
                            const uint8_t *hi, batch_writer *w,
                            batch_writer **rw)
{
	merger *m = NULL;
	bool done = false;
	uint64_t spent = 0;

	if (!w) {
		cr_assert_eq(batch_writer_new_range(e->t, e->p, rw), 0);
		w = *rw;
	}
	cr_assert_eq(merger_open_range(e->t, e->p, in, 2, frontier_of(0), lo,
	                               lo ? 8 : 0, hi, hi ? 8 : 0, w, &m), 0);
	cr_assert_eq(merger_step(m, 0, &done, &spent), 0);
	cr_assert(done);
	cr_assert_eq(merger_release_writer(m), w);
	merger_free(m);
	if (rw)
		cr_assert_eq(batch_writer_seal_staged(w), 0);
	return spent;
}

Test(merge_range, ranges_absorbed_equal_one_merge, .timeout = 120)
{
	at_env e;
	uint64_t ids[2], one = 0, two = 0, units = 0, all = 0;
	batch *in[2];
	uint8_t s1[8], s2[8];
	batch_writer *w, *r1;
	merger *m = NULL;
	bool done = false;
	batch_desc d = { { 0 }, { 20 }, { 0 } };

	cr_log_info("merge_range seed 41");
	at_open(&e);
	inputs(&e, ids, 41);
	for (int i = 0; i < 2; i++)
		in[i] = at_load(&e, ids[i]);
	/* one merge */
	cr_assert_eq(merger_open(e.t, e.p, in, 2, frontier_of(0), NULL, &m), 0);
	cr_assert_eq(merger_step(m, 0, &done, &all), 0);
	cr_assert_eq(merger_finish(m, &d, &one), 0);
	merger_free(m);
	/* three ranges: [.., s1) here, [s1, s2) as a range writer, [s2, ..) */
	key_of(s1, PER);
	key_of(s2, 3 * PER);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	units += merge_range(&e, in, NULL, s1, w, NULL);
	units += merge_range(&e, in, s1, s2, NULL, &r1);
	cr_assert_eq(batch_writer_absorb(w, r1), 0);
	batch_writer_free(r1);
	units += merge_range(&e, in, s2, NULL, w, NULL);
	cr_assert_eq(units, all, "every input update read once");
	cr_assert_eq(batch_writer_finish(w, &d, &two), 0);
	{
		batch *a = at_load(&e, one), *b = at_load(&e, two);
		at_up *x = malloc(2 * PER * sizeof *x), *y = malloc(2 * PER * sizeof *y);
		size_t nx = at_scan(&e, one, 0, x, 2 * PER),
		       ny = at_scan(&e, two, 0, y, 2 * PER);

		at_assert_equal(y, ny, x, nx, 41);
		cr_assert_eq(a->updates, b->updates);
		cr_assert_eq(a->keys, b->keys);
		cr_assert_eq(a->vals, b->vals);
		cr_assert_eq(b->filter_keys, b->keys);
		at_assert_same_filter(&e, one, two);
		cr_assert_gt(b->nchunks, a->nchunks - 1);
		at_check_ok(&e, two);
		batch_free(a);
		batch_free(b);
		free(x);
		free(y);
	}
	for (int i = 0; i < 2; i++)
		batch_free(in[i]);
	at_close(&e);
}

Test(merge_range, misuse_is_refused, .timeout = 60)
{
	at_env e;
	uint64_t ids[2], id = 0;
	batch *in[2];
	uint8_t lo[8], hi[8];
	batch_writer *w, *r, *r2;
	merger *m = NULL;
	merge_resume res;
	batch_desc d = { { 0 }, { 20 }, { 0 } };
	bool done = false;
	uint64_t spent;

	at_open(&e);
	inputs(&e, ids, 42);
	for (int i = 0; i < 2; i++)
		in[i] = at_load(&e, ids[i]);
	key_of(lo, PER);
	key_of(hi, 2 * PER);
	/* a bound without bytes */
	cr_assert_eq(merger_open_range(e.t, e.p, in, 2, frontier_of(0), NULL, 8,
	                               NULL, 0, NULL, &m), AH_EINVAL);
	cr_assert_eq(merger_open_range(e.t, e.p, in, 2, frontier_of(0), NULL, 0,
	                               NULL, 8, NULL, &m), AH_EINVAL);
	/* a range merger into the caller's writer: neither suspended nor
	 * finished by the merger */
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	cr_assert_eq(merger_open_range(e.t, e.p, in, 2, frontier_of(0), lo, 8,
	                               hi, 8, w, &m), 0);
	cr_assert_eq(merger_step(m, 1000, &done, &spent), 0);
	cr_assert_eq(merger_suspend(m, &res), AH_ESTATE);
	cr_assert_eq(merger_step(m, 0, &done, &spent), 0);
	cr_assert(done);
	cr_assert_eq(merger_finish(m, &d, &id), AH_ESTATE);
	merger_free(m); /* not the merger's writer: w lives on */
	/* a range writer with staged updates */
	cr_assert_eq(batch_writer_new_range(e.t, e.p, &r), 0);
	cr_assert_eq(batch_writer_push(r, lo, 8, "v", 1, 3, 1), 0);
	cr_assert_eq(batch_writer_absorb(w, r), AH_ESTATE);
	cr_assert_eq(batch_writer_seal_staged(r), 0);
	/* not a range writer; a detached target; a writer into itself */
	cr_assert_eq(batch_writer_new_detached(e.t, e.p, 0, &r2), 0);
	cr_assert_eq(batch_writer_absorb(w, r2), AH_EINVAL);
	cr_assert_eq(batch_writer_absorb(r2, r), AH_EINVAL);
	cr_assert_eq(batch_writer_absorb(w, w), AH_EINVAL);
	cr_assert_eq(batch_writer_seal_staged(w), AH_EINVAL);
	batch_writer_free(r2);
	/* an empty range writer absorbs as nothing */
	cr_assert_eq(batch_writer_new_range(e.t, e.p, &r2), 0);
	cr_assert_eq(batch_writer_seal_staged(r2), 0);
	cr_assert_eq(batch_writer_absorb(w, r2), 0);
	batch_writer_free(r2);
	/* r's key is below w's last: not for w (the caller's rule), but a
	 * range after all of w's is taken */
	batch_writer_free(r);
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	cr_assert_neq(id, 0);
	at_check_ok(&e, id);
	for (int i = 0; i < 2; i++)
		batch_free(in[i]);
	at_close(&e);
}
