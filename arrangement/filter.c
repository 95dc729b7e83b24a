/*
 * arrangement/filter.c - the blocked Bloom filter's sizing and checksum
 * (the hash, add and probe are inline in filter.h).
 *
 * Block index: (hi32 * nblocks) >> 32 (Lemire's multiply-shift, no
 * division).  In-block bits: FILTER_PROBES 9-bit positions, the top 9 bits
 * of lo32 after each multiply by 0x9e3779b9 (as RocksDB's FastLocalBloom
 * does).  The layout of the bits is part of the stored format: changing
 * either mapping needs a new filter hash id in the record (batch_int.h):
 * hash 2 is the same with bits in [0, 480) and a check per block.
 */
#include <string.h>

#include "arrangement/filter.h"

uint64_t filter_sum(const void *blocks, uint64_t nblocks)
{
	return XXH3_64bits(blocks, nblocks * FILTER_BLOCK);
}

uint64_t filter_blocks(uint64_t nkeys)
{
	uint64_t bits = nkeys * FILTER_BITS_PER_KEY;
	uint64_t n = (bits + 8 * FILTER_BLOCK - 1) / (8 * FILTER_BLOCK);

	return n ? n : 1;
}

uint64_t filter_blocks_checked(uint64_t nkeys)
{
	uint64_t bits = nkeys * FILTER_BITS_PER_KEY;
	uint64_t n = (bits + FILTER_CHECKED_BITS - 1) / FILTER_CHECKED_BITS;

	return n ? n : 1;
}

static uint32_t block_check(const uint64_t *block, uint64_t i)
{
	uint64_t w[FILTER_WORDS];

	memcpy(w, block, sizeof w);
	w[FILTER_WORDS - 1] &= 0xffffffffull;
	return (uint32_t)XXH3_64bits_withSeed(w, sizeof w, i);
}

/* The seed of block i of a filter bound to id (0: unbound, hash 2). */
static uint64_t block_seed(uint64_t i, uint64_t id)
{
	return i ^ id * 0x9E3779B97F4A7C15ull;
}

void filter_block_seal(uint64_t *block, uint64_t i, uint64_t id)
{
	uint64_t *last = &block[FILTER_WORDS - 1];

	*last = (*last & 0xffffffffull) |
	        (uint64_t)block_check(block, block_seed(i, id)) << 32;
}

bool filter_block_ok(const uint64_t *block, uint64_t i, uint64_t id)
{
	return (uint32_t)(block[FILTER_WORDS - 1] >> 32) ==
	       block_check(block, block_seed(i, id));
}
