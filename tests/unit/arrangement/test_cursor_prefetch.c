/*
 * tests/unit/arrangement/test_cursor_prefetch.c - what a batch cursor reads
 * from a cold heap (the map has no read-around, MDB_NORDAHEAD): a seek reads
 * only pages of the one chunk the fences name; a cursor walking the batch
 * from its start asks for its first two chunks whole, and no further.
 * Residency is read with mincore on the file; a prefetch completes
 * asynchronously, so it is polled for up to 10 s.
 */
#include <stdio.h>
#include <string.h>

#include "arr_test.h"

#define N 300000u /* ~7 MiB of batch at 24 bytes an update: six or more 1 MiB chunks */

static void gen(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[16];
	(void)arg;
	for (int b = 0; b < 8; b++)
		k[b] = (uint8_t)(i >> (56 - 8 * b));
	memset(v, (int)(i % 251), sizeof v);
	*it = (at_item){ k, v, sizeof k, sizeof v, 1, 1 };
}

/* The first page and the page count of the chunk holding index ci of b. */
static void chunk_span(heap_txn *t, const batch *b, uint32_t ci, uint64_t *off,
                       size_t *len)
{
	heap_chunk_info info;

	cr_assert_eq(heap_chunk_next(t, b->chunk_ids[ci] - 1, false, &info), 0);
	cr_assert_eq(info.id, b->chunk_ids[ci]);
	cr_assert_eq(info.class_pages, 256);
	*off = info.file_offset - 16; /* the value starts 16 bytes into its page */
	*len = (size_t)info.class_pages * 4096;
}

Test(cursor_prefetch, seek_reads_one_chunk_scan_prefetches_two)
{
	at_env e;
	char path[128];
	ah_open_opts o = { .size = sizeof o };
	batch_desc d = { { 0 }, { 2 }, { 0 } };
	uint64_t id, off[5];
	size_t len[5];
	uint8_t key[8];
	batch *b;
	batch_cursor *c;

	at_open(&e);
	id = at_write(&e, gen, NULL, N, &d);
	at_commit(&e, true);
	b = at_load(&e, id);
	cr_assert_geq(b->nchunks, 6);
	for (uint32_t i = 0; i < 5; i++)
		chunk_span(e.t, b, i, &off[i], &len[i]);
	batch_free(b);
	cr_assert_eq(heap_txn_commit(e.t), 0);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);
	snprintf(path, sizeof path, "%s", e.dir.path);
	tl_evict(path);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(tl_resident(path, off[i], len[i]), 0);

	cr_assert_eq(heap_open(path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	b = at_load(&e, id);
	/* A seek into chunk 3 (past its first key, so that the fences name it
	 * alone) reads some of its pages and nothing of chunks 1, 2 and 4.
	 * (Chunk 0 is left out: it lies right after LMDB's first pages, which
	 * the open reads with pread, and the kernel reads ahead of those.) */
	cr_assert_eq(b->fence_len[3], 8);
	memcpy(key, b->fence[3], 8);
	key[7]++; /* keys are consecutive big-endian integers */
	cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), key, 8, &c), 0);
	cr_assert(bcur_key_valid(c));
	bcur_close(c);
	size_t in3 = tl_resident(path, off[3], len[3]);
	cr_assert(in3 >= 1 && in3 < 64, "seek read %zu pages of its chunk", in3);
	cr_assert_eq(tl_resident(path, off[1], len[1]), 0);
	cr_assert_eq(tl_resident(path, off[2], len[2]), 0);
	cr_assert_eq(tl_resident(path, off[4], len[4]), 0);
	/* a walk from the start: chunks 0 and 1 whole, chunk 2 untouched */
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	bcur_close(c);
	cr_assert_eq(tl_wait_resident(path, off[0], len[0], 256), 256);
	cr_assert_eq(tl_wait_resident(path, off[1], len[1], 256), 256);
	cr_assert_eq(tl_resident(path, off[2], len[2]), 0);
	batch_free(b);
	at_close(&e);
}
