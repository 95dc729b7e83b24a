/*
 * arrangement/filter.h - the per-batch key filter: a blocked Bloom filter
 * (Putze, Sanders, Singler, "Cache-, hash- and space-efficient Bloom
 * filters", 2007; the in-block probing of RocksDB's FastLocalBloom).
 *
 * A key's XXH3-64 picks one 64-byte block (the high 32 bits, by
 * multiply-shift) and FILTER_PROBES bits inside it (the low 32 bits, walked
 * by a golden-ratio multiply), so a probe reads one cache line.  Sized at
 * FILTER_BITS_PER_KEY bits per distinct key (about 1% false positives).
 * A filter answers "may hold" or "cannot hold"; it never says a key is
 * present.  Pure functions over memory the caller owns: nothing here reads
 * the map or allocates.  The stored form is in batch_int.h.
 */
#ifndef ARRANGEMENT_FILTER_H
#define ARRANGEMENT_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#define FILTER_BITS_PER_KEY 10u
#define FILTER_PROBES 6u
#define FILTER_BLOCK 64u /* bytes: one cache line */
#define FILTER_WORDS (FILTER_BLOCK / 8u)
/* Filters of at most this many bytes of blocks (about 1,600 keys) are
 * stored in the batch record, larger ones in a chunk of their own: the
 * heap checks a record's frame checksum, over all its bytes, at every
 * read, so a large filter there would cost every batch load. */
#define FILTER_INLINE_MAX 2048u

/* The checksum of nblocks blocks (XXH3-64 of their bytes). */
uint64_t filter_sum(const void *blocks, uint64_t nblocks);
/* Blocks for nkeys distinct keys: ceil(nkeys * bits per key / 512), >= 1
 * (hash 1), or / FILTER_CHECKED_BITS (hash 2, checked blocks). */
uint64_t filter_blocks(uint64_t nkeys);
uint64_t filter_blocks_checked(uint64_t nkeys);

/* Checked blocks (record hash 2, heap format 5): the high 32 bits of a
 * block's last word hold the low 32 bits of the XXH3-64, seeded with the
 * block's index, of the block with those bits zero; the other
 * FILTER_CHECKED_BITS bits are the filter's.  A probe checks the one block
 * it reads (a cache line and about 30 instructions), so a filter read in
 * place needs no page or chunk checksum: the large filters of the largest
 * batches, in jumbo chunks that are checked only whole, are probed too. */
#define FILTER_CHECKED_BITS 480u
/* Bound blocks (record hash 3, heap format 6): the same, with the seed
 * i ^ id * 0x9E3779B97F4A7C15 for the filter chunk id, so a block checks
 * only in its own chunk (a probe then needs no look at the chunk's
 * header to know whose block it read: batch_filter.c).  id 0 is hash 2. */
/* Writes block i's check; true when block i's check holds (id: the
 * filter chunk's for hash 3, 0 for hash 2). */
void filter_block_seal(uint64_t *block, uint64_t i, uint64_t id);
bool filter_block_ok(const uint64_t *block, uint64_t i, uint64_t id);

/* Inline below: the writer hashes and adds every key of every batch it
 * writes, the cursor probes once per batch per point query. */

/* The key's hash, the same for every filter (XXH3-64, seed 0). */
static inline uint64_t filter_hash(const void *key, size_t len)
{
	return XXH3_64bits(key, len);
}

/* The block of hash h: Lemire's multiply-shift of the high 32 bits. */
static inline uint64_t filter_block_of(uint64_t nblocks, uint64_t h)
{
	return (uint64_t)(((unsigned __int128)(h >> 32) * nblocks) >> 32);
}

/* Every probe loop here is unrolled (-O2 does not unroll): filling the
 * filters took 111 instructions a key in a 1M load, 91 unrolled
 * (callgrind). */

/* Sets h's bits in blocks[0 .. nblocks * FILTER_WORDS): FILTER_PROBES
 * 9-bit positions, the top 9 bits of the low 32 after each multiply by
 * 0x9e3779b9 (RocksDB's FastLocalBloom).  Part of the stored format. */
static inline void filter_add(uint64_t *blocks, uint64_t nblocks, uint64_t h)
{
	uint64_t *b = blocks + filter_block_of(nblocks, h) * FILTER_WORDS;
	uint32_t x = (uint32_t)h;

#pragma GCC unroll 8
	for (unsigned i = 0; i < FILTER_PROBES; i++) {
		uint32_t bit = x >> 23;
		b[bit >> 6] |= 1ull << (bit & 63);
		x *= 0x9e3779b9u;
	}
}

/* false: no key with hash h was added (nblocks >= 1). */
static inline bool filter_may_hold(const uint64_t *blocks, uint64_t nblocks,
                                   uint64_t h)
{
	const uint64_t *b = blocks + filter_block_of(nblocks, h) * FILTER_WORDS;
	uint32_t x = (uint32_t)h;
	bool all = true;

#pragma GCC unroll 8
	for (unsigned i = 0; i < FILTER_PROBES; i++) {
		uint32_t bit = x >> 23;
		all &= (b[bit >> 6] >> (bit & 63)) & 1;
		x *= 0x9e3779b9u;
	}
	return all;
}

/* filter_add and filter_may_hold of checked blocks: FILTER_PROBES
 * positions in [0, FILTER_CHECKED_BITS), the low 32 bits after each
 * multiply by 0x9e3779b9 scaled by multiply-shift.  Part of the stored
 * format. */
static inline uint32_t filter_checked_bit(uint32_t x)
{
	return (uint32_t)(((uint64_t)x * FILTER_CHECKED_BITS) >> 32);
}

static inline void filter_add_checked(uint64_t *blocks, uint64_t nblocks,
                                      uint64_t h)
{
	uint64_t *b = blocks + filter_block_of(nblocks, h) * FILTER_WORDS;
	uint32_t x = (uint32_t)h;

#pragma GCC unroll 8
	for (unsigned i = 0; i < FILTER_PROBES; i++) {
		uint32_t bit = filter_checked_bit(x);
		b[bit >> 6] |= 1ull << (bit & 63);
		x *= 0x9e3779b9u;
	}
}

/* One block (the one filter_block_of picks for h). */
static inline bool filter_block_may_hold_checked(const uint64_t *b, uint64_t h)
{
	uint32_t x = (uint32_t)h;
	bool all = true;

#pragma GCC unroll 8
	for (unsigned i = 0; i < FILTER_PROBES; i++) {
		uint32_t bit = filter_checked_bit(x);
		all &= (b[bit >> 6] >> (bit & 63)) & 1;
		x *= 0x9e3779b9u;
	}
	return all;
}

static inline bool filter_may_hold_checked(const uint64_t *blocks,
                                           uint64_t nblocks, uint64_t h)
{
	return filter_block_may_hold_checked(
		blocks + filter_block_of(nblocks, h) * FILTER_WORDS, h);
}

#endif
