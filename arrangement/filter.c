/*
 * arrangement/filter.c - the blocked Bloom filter of filter.h.
 *
 * Block index: (hi32 * nblocks) >> 32 (Lemire's multiply-shift, no
 * division).  In-block bits: FILTER_PROBES 9-bit positions, the top 9 bits
 * of lo32 after each multiply by 0x9e3779b9 (as RocksDB's FastLocalBloom
 * does).  The layout of the bits is part of the stored format: changing
 * either mapping needs a new filter hash id in the record (batch_int.h).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "arrangement/filter.h"

uint64_t filter_hash(const void *key, size_t len)
{
	return XXH3_64bits(key, len);
}

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

static const uint64_t *block_of(const uint64_t *blocks, uint64_t nblocks,
                                uint64_t h)
{
	uint64_t i = (uint64_t)(((unsigned __int128)(h >> 32) * nblocks) >> 32);

	return blocks + i * FILTER_WORDS;
}

void filter_add(uint64_t *blocks, uint64_t nblocks, uint64_t h)
{
	uint64_t *b = (uint64_t *)block_of(blocks, nblocks, h);
	uint32_t x = (uint32_t)h;

	for (unsigned i = 0; i < FILTER_PROBES; i++) {
		uint32_t bit = x >> 23;
		b[bit >> 6] |= 1ull << (bit & 63);
		x *= 0x9e3779b9u;
	}
}

bool filter_may_hold(const uint64_t *blocks, uint64_t nblocks, uint64_t h)
{
	const uint64_t *b = block_of(blocks, nblocks, h);
	uint32_t x = (uint32_t)h;

	for (unsigned i = 0; i < FILTER_PROBES; i++) {
		uint32_t bit = x >> 23;
		if (!(b[bit >> 6] & (1ull << (bit & 63))))
			return false;
		x *= 0x9e3779b9u;
	}
	return true;
}
