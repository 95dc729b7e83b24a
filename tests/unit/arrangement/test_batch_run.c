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

typedef struct run {
	const char *k, *v;
	bool same_key;
	int want; /* 0 accepted, else the error */
} run;

static int push(batch_writer *w, const run *r, uint64_t time)
{
	time_diff td[2] = { { time, 1 }, { time + 1, -1 } };
	return batch_writer_push_run(w, r->k, strlen(r->k), r->v, strlen(r->v),
	                             r->same_key, td, 2);
}

Test(batch_run, order_settled_on_prefixes_and_bytes)
{
	/* 12-byte keys sharing 8 bytes ("keyprefx"), vals likewise. */
	static const run runs[] = {
		{ "keyprefx0001", "valprefx0001", false, 0 },
		{ "keyprefx0001", "valprefx0001", true, AH_EINVAL },  /* equal */
		{ "keyprefx0001", "valprefx0000", true, AH_EINVAL },  /* tie, less */
		{ "keyprefx0001", "valprefx", true, AH_EINVAL },      /* prefix of it */
		{ "keyprefx0001", "valprefx0002", true, 0 },          /* tie, more */
		{ "keyprefx0001", "valprefw9999", false, AH_EINVAL }, /* prefix less */
		{ "keyprefx0000", "zzz", false, AH_EINVAL },          /* key tie, less */
		{ "keyprefx", "zzz", false, AH_EINVAL },              /* key prefix */
		{ "keyprefw", "zzz", false, AH_EINVAL },              /* key less */
		{ "keyprefx0001", "valprefy", false, 0 },             /* same key, told not */
		{ "keyprefx0002", "a", false, 0 },                    /* key tie, more */
		{ "keyprefy", "a", false, 0 },                        /* key prefix more */
		{ "keyprefy", "a", true, AH_EINVAL },                 /* equal val */
		{ "kz", "", false, 0 },                               /* short, empty val */
		{ "kz", "", true, AH_EINVAL },
		{ "kz", "\x01", true, 0 },
	};
	const size_t n = sizeof runs / sizeof runs[0];
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
