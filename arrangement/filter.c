/*
 * arrangement/filter.c - the blocked Bloom filter's sizing and checksum
 * (the hash, add and probe are inline in filter.h).
 *
 * Block index: (hi32 * nblocks) >> 32 (Lemire's multiply-shift, no
 * division).  In-block bits: FILTER_PROBES 9-bit positions, the top 9 bits
 * of lo32 after each multiply by 0x9e3779b9 (as RocksDB's FastLocalBloom
 * does).  The layout of the bits is part of the stored format: changing
 * either mapping needs a new filter hash id in the record (batch_int.h).
 */
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
