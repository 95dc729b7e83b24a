/*
 * tests/unit/arrangement/test_batch_run.c - batch_writer_push_run's order
 * check (B1) against the last staged (key, val): settled on the cached
 * 8-byte prefixes when they differ, on the bytes when they tie (fields
 * longer than 8 bytes that differ later, a field that is a prefix of the
 * other), with same_key as the caller's word.  Every refused run is
 * AH_EINVAL and leaves what was staged untouched: the batch written after
 * the refusals holds exactly the accepted runs, in order.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arr_test.h"


static int push(batch_writer *w, const at_order_case *r, uint64_t time)
{
	time_diff td[2] = { { time, 1 }, { time + 1, -1 } };
	return batch_writer_push_run(w, r->k, strlen(r->k), r->v, strlen(r->v),
	                             r->same_key, td, 2);
}

Test(batch_run, order_settled_on_prefixes_and_bytes)
{
	/* 12-byte keys sharing 8 bytes ("keyprefx"), vals likewise. */
	const at_order_case *runs = at_order_cases;
	const size_t n = at_order_ncases;
	const batch_desc d = { { 0 }, { 100 }, { 0 } };
	batch_writer *w = NULL;
	batch_cursor *c = NULL;
	batch *b = NULL;
	uint64_t id = 0;
	at_env e;
	size_t ok = 0;

	at_open(&e);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(push(w, &runs[i], 10), runs[i].want,
		             "run %zu (%s, %s): got %d", i, runs[i].k, runs[i].v,
		             push(w, &runs[i], 10));
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	cr_assert_eq(batch_load(e.t, id, &b), 0);
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	for (size_t i = 0; i < n; i++) {
		const void *k, *v;
		size_t kl, vl;
		uint64_t t;
		int64_t df;

		if (runs[i].want)
			continue;
		while (bcur_key_valid(c) && !bcur_val_valid(c))
			cr_assert_eq(bcur_step_key(c), 0);
		cr_assert(bcur_val_valid(c), "run %zu missing", i);
		bcur_key(c, &k, &kl);
		bcur_val(c, &v, &vl);
		cr_assert(kl == strlen(runs[i].k) && memcmp(k, runs[i].k, kl) == 0,
		          "run %zu key", i);
		cr_assert(vl == strlen(runs[i].v) && memcmp(v, runs[i].v, vl) == 0,
		          "run %zu val", i);
		cr_assert_eq(bcur_times_rewind(c), 0);
		cr_assert_eq(bcur_time_next(c, &t, &df), 1);
		cr_assert(t == 10 && df == 1, "run %zu first update", i);
		cr_assert_eq(bcur_time_next(c, &t, &df), 1);
		cr_assert(t == 11 && df == -1, "run %zu second update", i);
		cr_assert_eq(bcur_time_next(c, &t, &df), 0);
		cr_assert_eq(bcur_step_val(c), 0);
		ok++;
	}
	while (bcur_key_valid(c) && !bcur_val_valid(c))
		cr_assert_eq(bcur_step_key(c), 0);
	cr_assert_not(bcur_key_valid(c), "more than the %zu accepted runs", ok);
	cr_assert_eq(ok, 7);
	cr_assert_eq(b->updates, 14);
	cr_assert_eq(b->keys, 4);
	bcur_close(c);
	batch_free(b);
	at_close(&e);
}
