/*
 * tests/unit/heap/heap_test.h - the heap layer's unit-test fixture:
 * deterministic chunk bodies from (seed, id), writing one chunk, counting
 * the chunks a transaction sees.  The helpers that do not need the layer's
 * internals (private directories, options, the seeded generator, file
 * fingerprints, the page cache) come from tests/lib.  Everything here that
 * asserts does so through Criterion: the test's own process only (ht_fill
 * and ht_same do not assert).  Test-only; never linked into the library.
 */
#ifndef TESTS_UNIT_HEAP_HEAP_TEST_H
#define TESTS_UNIT_HEAP_HEAP_TEST_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap/heap.h"
#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_rand.h"

#define MiB TL_MiB

/* Bytes of a chunk body: a function of (seed, id, offset). */
static inline void ht_fill(void *buf, size_t n, uint64_t seed, uint64_t id)
{
	uint64_t s = seed * 1000003u + id, w;
	unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		w = tl_rand(&s);
		memcpy(p + i, &w, 8);
	}
	w = tl_rand(&s);
	memcpy(p + i, &w, n - i);
}

static inline bool ht_same(const void *body, size_t n, uint64_t seed,
                           uint64_t id)
{
	void *want = malloc(n + 8);
	bool same;

	ht_fill(want, n, seed, id);
	same = memcmp(want, body, n) == 0;
	free(want);
	return same;
}

/* Writes one chunk of n body bytes in t; returns its id. */
static inline uint64_t ht_put_chunk(heap_txn *t, size_t n, uint64_t seed)
{
	uint64_t id = 0;
	void *body = NULL;
	size_t cap = 0;

	int rc = heap_chunk_reserve(t, n, &id, &body, &cap);

	cr_assert_eq(rc, 0, "reserve %zu: %s", n, ah_err_name(rc));
	cr_assert_geq(cap, n);
	ht_fill(body, n, seed, id);
	cr_assert_eq(heap_chunk_seal(t, id, body, n), 0);
	return id;
}

/* The chunks t sees (heap_chunk_next to AH_ENOTFOUND). */
static inline uint64_t ht_count_chunks(heap_txn *t)
{
	heap_chunk_info ci;
	uint64_t n = 0, after = 0;
	bool first = true;
	int rc;

	while ((rc = heap_chunk_next(t, after, first, &ci)) == 0) {
		n++;
		after = ci.id;
		first = false;
	}
	cr_assert_eq(rc, AH_ENOTFOUND);
	return n;
}

#endif /* TESTS_UNIT_HEAP_HEAP_TEST_H */
