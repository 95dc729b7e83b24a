/*
 * tests/unit/arrangement/test_writer_hints.c - the pool's writer hints
 * (ARCHITECTURE.md section 7): a batch writer starts its staging buffers
 * and key hashes at the capacities the last writer of its pool reached,
 * each remembered capped at 16 MiB, across pool resets; and what it
 * writes is the same with and without them.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "arr_test.h"

/* 8-byte keys, 16-byte vals, one update each, two per key. */
static void gen(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[16];
	uint64_t key = i / 2;

	(void)arg;
	for (int b = 0; b < 8; b++)
		k[b] = (uint8_t)(key >> (56 - 8 * b));
	memset(v, 0, sizeof v);
	v[15] = (uint8_t)(i & 1);
	it->key = k;
	it->klen = 8;
	it->val = v;
	it->vlen = 16;
	it->time = 0;
	it->diff = 1;
}

/* The capacities of a fresh writer's hinted buffers, and their count. */
static size_t fresh_caps(at_env *e, size_t caps[POOL_HINTS])
{
	batch_writer *w;
	size_t n;

	cr_assert_eq(batch_writer_new(e->t, e->p, &w), 0);
	n = batch_writer_hinted_caps(w, caps);
	cr_assert_leq(n, POOL_HINTS);
	batch_writer_free(w);
	return n;
}

Test(writer_hints, next_writer_starts_at_the_last_capacities)
{
	at_env e;
	size_t before[POOL_HINTS], after[POOL_HINTS], again[POOL_HINTS], n;
	const batch_desc d = { { 0 }, { 1 }, { 0 } };
	const uint64_t items = 200000;
	uint64_t live;

	at_open(&e);
	n = fresh_caps(&e, before);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(before[i], 0, "slot %zu: no hint before any writer", i);
	uint64_t id = at_write(&e, gen, NULL, items, &d);
	at_scan_equal(&e, id, gen, NULL, items);
	/* the writer that wrote 200,000 updates (several chunks) left its
	 * capacities: a fresh writer has them from the start */
	cr_assert_eq(fresh_caps(&e, after), n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(after[i], pool_hint(e.p, (unsigned)i), "slot %zu", i);
		cr_assert_gt(after[i], 256, "slot %zu grew past the first step", i);
	}
	cr_assert_geq(after[n - 1], 8 * (items / 2), "key hashes: every key");
	/* kept across a reset of the pool (every writer freed) */
	pool_counts(e.p, NULL, NULL, &live);
	cr_assert_eq(live, 0);
	pool_reset(e.p);
	cr_assert_eq(fresh_caps(&e, again), n);
	cr_assert_eq(memcmp(again, after, n * sizeof *after), 0);
	/* a second batch written from the hinted start reads back the same */
	const batch_desc d2 = { { 1 }, { 2 }, { 0 } };
	uint64_t id2 = at_write(&e, gen, NULL, items, &d2);
	at_scan_equal(&e, id2, gen, NULL, items);
	at_close(&e);
}

Test(writer_hints, remembered_capped_at_16_mib)
{
	at_env e;
	batch_writer *w;
	size_t caps[POOL_HINTS], n;

	at_open(&e);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	n = batch_writer_hinted_caps(w, caps);
	cr_assert_eq(batch_writer_grow_hinted(w, n - 1, (size_t)40 << 20), 0);
	cr_assert_eq(batch_writer_grow_hinted(w, n, 1), AH_EINVAL);
	batch_writer_hinted_caps(w, caps);
	cr_assert_gt(caps[n - 1], (size_t)16 << 20);
	batch_writer_free(w);
	cr_assert_eq(pool_hint(e.p, (unsigned)(n - 1)), (size_t)16 << 20);
	at_close(&e);
}
