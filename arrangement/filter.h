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

#define FILTER_BITS_PER_KEY 10u
#define FILTER_PROBES 6u
#define FILTER_BLOCK 64u /* bytes: one cache line */
#define FILTER_WORDS (FILTER_BLOCK / 8u)
/* Filters of at most this many bytes of blocks (about 1,600 keys) are
 * stored in the batch record, larger ones in a chunk of their own: the
 * heap checks a record's frame checksum, over all its bytes, at every
 * read, so a large filter there would cost every batch load. */
#define FILTER_INLINE_MAX 2048u

/* The key's hash, the same for every filter (XXH3-64, seed 0). */
uint64_t filter_hash(const void *key, size_t len);
/* The checksum of nblocks blocks (XXH3-64 of their bytes). */
uint64_t filter_sum(const void *blocks, uint64_t nblocks);
/* Blocks for nkeys distinct keys: ceil(nkeys * bits per key / 512), >= 1. */
uint64_t filter_blocks(uint64_t nkeys);
/* Sets h's bits in blocks[0 .. nblocks * FILTER_WORDS). */
void filter_add(uint64_t *blocks, uint64_t nblocks, uint64_t h);
/* false: no key with hash h was added (nblocks >= 1). */
bool filter_may_hold(const uint64_t *blocks, uint64_t nblocks, uint64_t h);

#endif
