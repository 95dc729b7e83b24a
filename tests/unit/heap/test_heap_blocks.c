/*
 * tests/unit/heap/test_heap_blocks.c - the 1 KiB checksum blocks of the
 * chunks written since heap format 5 (heap/chunk.c): a seek checks each
 * block alone, exactly the blocks it touches; the sums of a 256-page chunk
 * fill four header blocks after block 0, and a sum is trusted only after
 * the block that holds it was checked.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap_test.h"

#define SEED 20261201u
#define BLK 1024u
#define BODY 1000000u /* a 256-page chunk */

static uint32_t sum_of(const uint8_t *p, size_t n)
{
	return (uint32_t)XXH3_64bits(p, n);
}

/* First value byte of block i (block 0 starts at the value's first byte,
 * 16 bytes into its first page). */
static uint64_t block_at(uint64_t i)
{
	return i ? i * BLK - 16 : 0;
}

/* A heap holding one 256-page chunk (id 1) of BODY bytes. */
static heap *one_chunk(tl_dir *d)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	heap_chunk_info ci;
	heap_txn *t;
	heap *h;

	*d = tl_tmpdir("blocks");
	cr_assert_eq(heap_open(d->path, &o, &h), 0);
	cr_assert_eq(heap_page_size(h), 4096, "1 KiB blocks are 4 per page");
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(ht_put_chunk(t, BODY, SEED), 1);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_next(t, 0, true, &ci), 0);
	cr_assert_eq(ci.class_pages, 256);
	cr_assert_eq(ci.block_bytes, BLK);
	cr_assert_eq(ci.format, 2);
	heap_txn_abort(t);
	return h;
}

/* Writes through the map (a writable heap maps its file with WRITEMAP):
 * value byte `at` of chunk 1 becomes b.  Test-only. */
static void poke(heap *h, uint64_t at, uint8_t b)
{
	heap_chunk_view v;
	heap_txn *t;

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	((uint8_t *)v.value)[at] = b;
	heap_txn_abort(t);
}

static uint8_t peek(heap *h, uint64_t at)
{
	heap_chunk_view v;
	heap_txn *t;
	uint8_t b;

	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	b = v.value[at];
	heap_txn_abort(t);
	return b;
}

/* Touches value bytes [at, at + len) of chunk 1 in a fresh read txn. */
static int touch(heap *h, uint64_t at, size_t len)
{
	heap_chunk_view v;
	heap_txn *t;
	int rc;

	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	rc = heap_chunk_touch(&v, v.value + at, len);
	heap_txn_abort(t);
	return rc;
}

/* Every block of the chunk but block 0 (checked at open), damaged in turn
 * at its first or its last byte, is AH_ECORRUPT exactly when a seek
 * touches it, and the whole check finds it; its neighbours' bytes next to
 * the damage still read (checked as other blocks).  A fresh handle reads
 * every block once all are restored. */
Test(heap_blocks, each_block_is_checked_alone)
{
	tl_dir d;
	heap *h = one_chunk(&d);
	const uint64_t n = 256 * 4;
	heap_txn *t;

	for (uint64_t i = 1; i < n; i++) {
		uint64_t at = i % 2 ? block_at(i) : block_at(i + 1) - 1;
		uint8_t b = peek(h, at);

		poke(h, at, b ^ 0x01);
		cr_assert_eq(touch(h, at, 1), AH_ECORRUPT, "block %" PRIu64, i);
		if (i % 97 == 0) {
			cr_assert_eq(heap_txn_begin(h, true, &t), 0);
			cr_assert_eq(heap_chunk_verify(t, 1), AH_ECORRUPT);
			heap_txn_abort(t);
		}
		poke(h, at, b);
	}
	cr_assert_eq(heap_close(h), 0);
	ah_open_opts o = tl_opts(0, 64 * MiB, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(touch(h, 0, 256 * 4096 - 16), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_verify(t, 1), 0);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* A touch checks exactly the blocks its range covers: with block 8
 * damaged, the last byte of block 7 and the first of block 9 read, a range
 * that reaches one byte into block 8 does not. */
Test(heap_blocks, a_touch_checks_only_its_blocks)
{
	tl_dir d;
	heap *h = one_chunk(&d);
	uint64_t at = block_at(8) + 100;

	poke(h, at, (uint8_t)(peek(h, at) ^ 0x80));
	cr_assert_eq(touch(h, block_at(8) - 1, 1), 0, "block 7");
	cr_assert_eq(touch(h, block_at(9), 1), 0, "block 9");
	cr_assert_eq(touch(h, block_at(8) - 10, 11), AH_ECORRUPT, "into 8");
	cr_assert_eq(touch(h, block_at(9) - 1, 1), AH_ECORRUPT, "last of 8");
	/* 4 KiB pages: block 8 is the first quarter of page 2; its other
	 * quarters read. */
	cr_assert_eq(touch(h, block_at(10), 2 * BLK), 0, "blocks 10, 11");
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* A block rewritten with its sum resealed in the header block that holds
 * it (block 2 holds the sums of blocks 499 to 754), without resealing
 * that header block: a reader that trusted the sum would take the new
 * bytes; the header block's own sum (in block 0) fails first. */
Test(heap_blocks, a_sum_is_trusted_only_after_its_block)
{
	tl_dir d;
	heap *h = one_chunk(&d);
	const uint64_t i = 600, slot = 40 + 4 * (i - 1);
	heap_chunk_view v;
	heap_txn *t;

	cr_assert_eq(block_at(2) <= slot && slot + 4 <= block_at(3), 1,
	             "the sum of block 600 lies in block 2");
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	uint8_t *val = (uint8_t *)v.value;
	val[block_at(i) + 5] ^= 0x40;
	uint32_t s = sum_of(val + block_at(i), BLK);
	memcpy(val + slot, &s, 4);
	heap_txn_abort(t);

	cr_assert_eq(touch(h, block_at(i) + 5, 1), AH_ECORRUPT);
	cr_assert_eq(touch(h, block_at(3) + 7, 1), 0, "block 3 is sound");
	cr_assert_eq(touch(h, block_at(300), 8), 0,
	             "block 300: its sum is in block 1");
	cr_assert_eq(touch(h, block_at(100), 8), 0,
	             "block 100: its sum is in block 0");
	/* Reseal block 2 as well, but not block 0, which holds its sum:
	 * block 0's own sum now fails at open, and the whole check. */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	val = (uint8_t *)v.value;
	s = sum_of(val + block_at(2), BLK);
	memcpy(val + 40 + 4 * (2 - 1), &s, 4);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	ah_open_opts o = tl_opts(0, 64 * MiB, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), AH_ECORRUPT,
	             "block 0 holds block 2's sum: its own sum fails at open");
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_WHOLE, &v), AH_ECORRUPT);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
