/*
 * tests/unit/arrangement/test_batch_one.c - batch_writer_push_one, the
 * merge's one-pair entry: it must write exactly what batch_writer_push
 * writes for the same stream (byte-identical chunk bodies, the same counts,
 * a filter holding every key), through every way its fast path hands over
 * to the general one: a new dictionary entry, a dictionary overflowing, a
 * key or val width changing, a second val of a key, chunk boundaries, and
 * its staging columns growing.  And its order check (B1) refuses what
 * push_run refuses, leaving the staged chunk as it was.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/order.h"
#include "arr_test.h"
#include "tl_rand.h"

/* a and b hold the same key filter, and it has every key (a writer that
 * missed a key's hash writes none: batch_writer_record.c). */
static void same_filter(at_env *e, uint64_t a, uint64_t b)
{
	batch *x = at_load(e, a);

	cr_assert_eq(x->filter_keys, x->keys, "no filter of every key");
	batch_free(x);
	at_assert_same_filter(e, a, b);
}

static int one(batch_writer *w, const char *k, const char *v, bool same,
               uint64_t time, int64_t diff)
{
	return batch_writer_push_one(w, k, strlen(k),
	                             bytes_prefix8((const uint8_t *)k, strlen(k)),
	                             v, strlen(v),
	                             bytes_prefix8((const uint8_t *)v, strlen(v)),
	                             same, time, diff);
}

Test(batch_one, order_refusals_leave_the_staging_alone)
{
	const at_order_case *runs = at_order_cases;
	const size_t n = at_order_ncases;
	const batch_desc d = { { 0 }, { 100 }, { 0 } };
	batch_writer *w = NULL, *ref = NULL;
	uint64_t id = 0, rid = 0;
	at_env e;

	at_open(&e);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	cr_assert_eq(batch_writer_new(e.t, e.p, &ref), 0);
	for (size_t i = 0; i < n; i++) {
		int rc = one(w, runs[i].k, runs[i].v, runs[i].same_key, 10 + i, 1);
		cr_assert_eq(rc, runs[i].want, "update %zu (%s, %s): got %d", i,
		             runs[i].k, runs[i].v, rc);
		if (rc == 0)
			cr_assert_eq(batch_writer_push(ref, runs[i].k,
			                               strlen(runs[i].k), runs[i].v,
			                               strlen(runs[i].v), 10 + i, 1), 0);
	}
	/* diff 0 is refused like push's */
	cr_assert_eq(one(w, "kzz", "a", false, 50, 0), AH_EINVAL);
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	cr_assert_eq(batch_writer_finish(ref, &d, &rid), 0);
	at_assert_same_chunks(&e, id, rid);
	same_filter(&e, id, rid);
	batch *b = at_load(&e, id);
	cr_assert_eq(b->updates, 7);
	cr_assert_eq(b->keys, 4);
	batch_free(b);
	at_check_ok(&e, id);
	at_close(&e);
}

/* A stream whose shape changes under the writer: 8-byte keys and vals
 * with now and then a 5-byte key or a 3- or 12-byte val, 1-4 vals per
 * key, times from a few values with stretches of many (the time
 * dictionary overflows), diffs mostly 1.  One update per (key, val). */
typedef struct gen {
	uint64_t s, key, vi, nv;
	uint8_t k[16], v[16];
	size_t kl, vl;
	bool newkey;
} gen;

static void gen_next(gen *g, uint64_t i)
{
	g->newkey = g->vi == g->nv;
	if (g->newkey) {
		g->key += 1 + tl_below(&g->s, 3);
		g->vi = 0;
		g->nv = 1 + tl_below(&g->s, 4);
		/* the key in the top 5 bytes, big-endian, so that keys increase
		 * as bytes; a 5-byte key is its 8-byte form's prefix, and still
		 * sorts after every smaller key */
		uint64_t u = g->key << 24 | 0xabcdefu;
		for (int b = 0; b < 8; b++)
			g->k[b] = (uint8_t)(u >> (56 - 8 * b));
		g->kl = tl_below(&g->s, 1500) == 0 ? 5 : 8;
	}
	uint64_t vv = 2 * g->vi + 1;
	memset(g->v, 0, sizeof g->v);
	g->v[0] = (uint8_t)vv;
	g->vl = tl_below(&g->s, 900) == 0 ? 3 : tl_below(&g->s, 700) == 0 ? 12 : 8;
	g->vi++;
	(void)i;
}

Test(batch_one, same_chunks_as_push_through_every_handover)
{
	const uint64_t seed = 0x6f6e65ull, n = 150000;
	const batch_desc d = { { 0 }, { 1u << 20 }, { 0 } };
	batch_writer *w = NULL, *ref = NULL;
	uint64_t id = 0, rid = 0, s = seed;
	gen g = { .s = seed ^ 0x9e37 };
	at_env e;

	printf("batch_one/same_chunks_as_push_through_every_handover: seed %llu\n",
	       (unsigned long long)seed);
	at_open(&e);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	cr_assert_eq(batch_writer_new(e.t, e.p, &ref), 0);
	for (uint64_t i = 0; i < n; i++) {
		gen_next(&g, i);
		bool wide = (i / 5000) % 3 == 2; /* stretches of many times */
		uint64_t time = wide ? tl_below(&s, 100000) : tl_below(&s, 4);
		int64_t diff = tl_below(&s, 50) == 0 ?
		               (int64_t)tl_below(&s, 1000) - 500 : 1;
		if (diff == 0)
			diff = 7;
		/* same_key: the truth, or "not known" */
		bool same = !g.newkey && tl_below(&s, 2);
		int rc = batch_writer_push_one(
			w, g.k, g.kl, bytes_prefix8(g.k, g.kl), g.v, g.vl,
			bytes_prefix8(g.v, g.vl), same, time, diff);
		cr_assert_eq(rc, 0, "update %llu: %d (seed %llu)",
		             (unsigned long long)i, rc, (unsigned long long)seed);
		cr_assert_eq(batch_writer_push(ref, g.k, g.kl, g.v, g.vl, time,
		                               diff), 0);
	}
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	cr_assert_eq(batch_writer_finish(ref, &d, &rid), 0);
	batch *b = at_load(&e, id);
	cr_assert_gt(b->nchunks, 2, "the stream must cross chunk boundaries");
	cr_assert_eq(b->updates, n);
	batch_free(b);
	at_assert_same_chunks(&e, id, rid);
	same_filter(&e, id, rid);
	at_check_ok(&e, id);
	at_close(&e);
}
