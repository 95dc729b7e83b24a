/*
 * heap/pool.h - transient memory for builders, sorts and merges.
 *
 * A pool is a dedicated jemalloc arena (arenas.create), used through
 * mallocx/sdallocx with MALLOCX_ARENA(i) | MALLOCX_TCACHE_NONE so that its
 * statistics count exactly our transient memory and arena.<i>.reset can drop
 * it all at once.  It is for transient memory only: jemalloc's metadata holds
 * absolute pointers and can never be part of the persistent heap.
 * A pool is used by the heap's one writer at a time; it is not thread safe.
 */
#ifndef HEAP_POOL_H
#define HEAP_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "arrheap.h"

typedef struct pool pool;

/* Errors: AH_ENOMEM. */
int pool_create(pool **out);
void pool_destroy(pool *p);

/* NULL on failure (or on an injected fault).  size 0 returns NULL. */
void *pool_malloc(pool *p, size_t size);
/* Like realloc; old_size is the size the block was allocated with. */
void *pool_realloc(pool *p, void *ptr, size_t old_size, size_t new_size);
/* size must be the size the block was allocated (or reallocated) with. */
void pool_free(pool *p, void *ptr, size_t size);

/* Frees every block of the pool at once (arena.<i>.reset).  Only when no
 * block is live any more: the caller guarantees it. */
void pool_reset(pool *p);

/* active_bytes and peak_active_bytes are the exact sums of the sizes asked
 * for; dirty_bytes and resident_bytes come from jemalloc's arena statistics
 * (0 and active_bytes in AH_POOL_SYSTEM_MALLOC builds).
 * Errors: AH_EINVAL, AH_EIO (mallctl failed). */
int pool_stats(pool *p, ah_pool_stats *st);

/* Fault injection: the nth allocation (pool_malloc or pool_realloc) from now
 * on returns NULL, 1 being the next one; 0 turns injection off.  For tests. */
void pool_inject_failure(pool *p, uint64_t nth);

/* Exact counters since pool_create: successful allocations (a realloc counts
 * as one allocation and one free), frees, and blocks live now (pool_reset
 * sets it to 0).  Any out pointer may be NULL. */
void pool_counts(const pool *p, uint64_t *allocs, uint64_t *frees,
                 uint64_t *live_blocks);

/* Sizes a user of the pool remembers across pool_reset: POOL_HINTS slots,
 * 0 until set, never read by the pool itself.  The batch writer keeps its
 * buffers' last capacities here, so that the next writer of the same pool
 * allocates each once at that size instead of doubling up to it by
 * copying (4.6% of a 1M load's instructions). */
#define POOL_HINTS 16
size_t pool_hint(const pool *p, unsigned slot);
void pool_set_hint(pool *p, unsigned slot, size_t size);

/* The jemalloc arena index of p (0 in the system-malloc build): two live
 * pools never share one.  For tests. */
unsigned pool_arena(const pool *p);

#endif /* HEAP_POOL_H */
