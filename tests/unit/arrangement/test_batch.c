/*
 * tests/unit/arrangement/test_batch.c - the batch_* suite: writer, record
 * and batch cursor round trips for basic shapes.  Every batch is written in a
 * write txn, committed, and read back in a read txn.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arr_test.h"

/* key = 8-byte big-endian i / 4, val = 16 bytes of i % 4, time i. */
static void gen_small(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[16];
	(void)arg;
	for (int j = 0; j < 8; j++)
		k[j] = (uint8_t)((i / 4) >> (56 - 8 * j));
	memset(v, (int)(i % 4), sizeof v);
	it->key = k;
	it->klen = 8;
	it->val = v;
	it->vlen = 16;
	it->time = i;
	it->diff = (int64_t)(i % 7) + 1;
}

Test(batch_basic, round_trip)
{
	at_env e;
	batch_desc d = { { 0 }, { 1000 }, { 0 } };
	at_open(&e);
	uint64_t id = at_write(&e, gen_small, NULL, 1000, &d);
	cr_assert_neq(id, 0);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_small, NULL, 1000);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	cr_assert_eq(b->keys, 250);
	cr_assert_eq(b->vals, 1000);
	cr_assert_eq(b->nchunks, 1);
	cr_assert_eq(frontier_time(b->desc.upper), 1000);
	batch_free(b);
	at_close(&e);
}
