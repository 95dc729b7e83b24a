/*
 * arrangement/run_sort.h - the builder's run entry and its sort (builder.c
 * is the one user; the unit tests call both sorts directly).
 *
 * A run entry is 48 bytes: the cached big-endian 8-byte key and val
 * prefixes, a pointer to the key bytes (the val follows them), lengths,
 * time and diff.  run_sort orders entries by run_entry_cmp (B1's order:
 * key bytes, val bytes, time) in place, using no memory beyond its own
 * stack: an MSD radix sort (American flag sort) on the key prefix's bytes,
 * with ranges that are short, or that tie on all 8 prefix bytes, finished
 * by the comparison sort (introsort, run_sort_compare).
 *
 * Neither sort is stable: entries equal under run_entry_cmp (same key, val
 * and time, maybe different diffs) may come out in any order, which is why
 * the builder sums them in 128 bits (order.h).  It must never allocate.
 */
#ifndef ARRANGEMENT_RUN_SORT_H
#define ARRANGEMENT_RUN_SORT_H

#include "arrangement/order.h"
#include "arrangement/time.h"

typedef struct run_entry {
	uint64_t pfx;  /* first 8 key bytes, big-endian, zero padded */
	uint64_t vpfx; /* likewise for the val */
	const uint8_t *key; /* the val follows the key */
	uint32_t klen, vlen;
	uint64_t time;
	int64_t diff;
} run_entry;
_Static_assert(sizeof(run_entry) == 48, "entries are sorted by value: keep them small");

static inline int run_entry_cmp(const run_entry *a, const run_entry *b)
{
	int c;

	if (a->pfx != b->pfx)
		return a->pfx < b->pfx ? -1 : 1;
	if ((c = bytes_cmp_rest(a->key, a->klen, b->key, b->klen)) != 0)
		return c;
	if (a->vpfx != b->vpfx)
		return a->vpfx < b->vpfx ? -1 : 1;
	if ((c = bytes_cmp_rest(a->key + a->klen, a->vlen, b->key + b->klen,
	                        b->vlen)) != 0)
		return c;
	return time_cmp(a->time, b->time);
}

/* Equal keys (resp. vals) of two entries, as bytes. */
static inline bool run_key_eq(const run_entry *a, const run_entry *b)
{
	return a->pfx == b->pfx && a->klen == b->klen &&
	       (a->klen <= 8 || memcmp(a->key + 8, b->key + 8, a->klen - 8) == 0);
}

static inline bool run_val_eq(const run_entry *a, const run_entry *b)
{
	return a->vpfx == b->vpfx && a->vlen == b->vlen &&
	       (a->vlen <= 8 || memcmp(a->key + a->klen + 8, b->key + b->klen + 8,
	                               a->vlen - 8) == 0);
}

/* Sorts a[0..n) by run_entry_cmp: radix on the key prefix, then compares. */
void run_sort(run_entry *a, size_t n);
/* The comparison sort alone (introsort), as the builder sorted before. */
void run_sort_compare(run_entry *a, size_t n);

#endif /* ARRANGEMENT_RUN_SORT_H */
