/*
 * tests/unit/heap/test_heap_prefetch.c - batched read-ahead (heap.h,
 * heap/prefetch.c): requests stay inside the chunk value they name, a
 * request for a chunk that is gone (freed, a dropped batch's) or for a
 * range past the value asks for nothing harmful and changes no read, a
 * write txn asks for nothing; and the decision: a fresh handle is cold,
 * a page out of the page cache keeps it cold, eight resident samples in a
 * row make it warm, and a warm handle samples every 16th seek.  Residency
 * comes from mincore (the heap lives under /tmp, a disk filesystem); no
 * timing.
 */
#include "heap_test.h"

#define SEED 20261203u

Test(heap_prefetch, requests_are_clipped_and_harmless)
{
	tl_dir d = tl_tmpdir("pf");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	heap_txn *t;
	heap *h;
	heap_prefetch pf;
	heap_prefetch_stat st;
	heap_chunk_view v;
	uint64_t a, gone, la = 0, lg = 0;

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	a = ht_put_chunk(t, 300000, SEED);    /* 256 pages */
	gone = ht_put_chunk(t, 20000, SEED);
	/* a write txn asks for nothing */
	heap_prefetch_begin(t, &pf);
	cr_assert_eq(heap_prefetch_chunk(&pf, a, NULL, 0, 4096), 0);
	cr_assert_eq(pf.n, 0);
	cr_assert_eq(heap_txn_commit(t), 0);

	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open_at(t, a, &la, HEAP_CHUNK_PAGES, &v), 0);
	cr_assert_eq(heap_chunk_open_at(t, gone, &lg, HEAP_CHUNK_PAGES, &v), 0);
	heap_txn_abort(t);
	/* gone is freed, as a dropped batch's chunks are */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_free(t, gone), 0);
	cr_assert_eq(heap_txn_commit(t), 0);

	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	heap_prefetch_begin(t, &pf);
	/* an id nobody has: nothing */
	cr_assert_eq(heap_prefetch_chunk(&pf, 999999, NULL, 0, 4096), 0);
	cr_assert_eq(pf.n, 0);
	/* the freed chunk through LMDB: not there, nothing */
	cr_assert_eq(heap_prefetch_chunk(&pf, gone, NULL, 0, 4096), 0);
	cr_assert_eq(pf.n, 0);
	/* its stale place: its old pages, inside the map; asked, harmless */
	cr_assert_eq(heap_prefetch_chunk(&pf, gone, &lg, 0, 4096), 0);
	/* a place past the map: looked up in LMDB instead */
	uint64_t wild = (UINT64_MAX >> 24) << 24 | 4;
	cr_assert_eq(heap_prefetch_chunk(&pf, a, &wild, 0, 1), 0);
	/* far past the body: clipped to the value */
	cr_assert_eq(heap_prefetch_chunk(&pf, a, &la, 0, UINT64_MAX / 2), 0);
	cr_assert_eq(heap_prefetch_chunk(&pf, a, &la, UINT64_MAX - 8, 4096), 0);
	cr_assert_eq(heap_prefetch_chunk(&pf, a, &la, 8, UINT64_MAX), 0);
	cr_assert_eq(heap_chunk_open(t, a, HEAP_CHUNK_PAGES, &v), 0);
	heap_prefetch_view(&pf, &v, v.value + v.value_bytes, 4096);
	heap_prefetch_view(&pf, &v, v.value + v.value_bytes - 1, 1u << 30);
	/* every page asked for is a's or the freed chunk's old one */
	uintptr_t alo = (uintptr_t)v.value - 16, ahi = alo + 256 * 4096;
	uintptr_t base = alo - (la >> 24) * 4096;
	uintptr_t glo = base + (lg >> 24) * 4096, ghi = glo + (lg & 0xffffff) * 4096;
	cr_assert_geq(pf.n, 1);
	for (unsigned i = 0; i < pf.n; i++)
		for (uintptr_t pg = pf.lo[i]; pg < pf.hi[i]; pg += 4096)
			cr_assert((pg >= alo && pg < ahi) || (pg >= glo && pg < ghi),
			          "range %u asks for a page of neither chunk", i);
	heap_prefetch_stat_get(h, &st);
	uint64_t issues = st.issues;
	heap_prefetch_issue(&pf);
	cr_assert_eq(pf.n, 0);
	heap_prefetch_issue(&pf); /* an empty request is not one */
	heap_prefetch_stat_get(h, &st);
	cr_assert_eq(st.issues, issues + 1);
	/* reads are what they were */
	cr_assert_eq(heap_chunk_open(t, a, HEAP_CHUNK_WHOLE, &v), 0);
	cr_assert(ht_same(v.body, v.body_used, SEED, a));
	cr_assert_eq(heap_chunk_open(t, gone, HEAP_CHUNK_PAGES, &v), AH_ENOTFOUND);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_prefetch, decision_samples_and_turns)
{
	tl_dir d = tl_tmpdir("pf");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	heap_txn *t;
	heap *h;
	heap_chunk_view v;
	heap_prefetch_stat st;
	uint64_t a;
	bool sample, first;

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	/* the last of four 1 MiB chunks: far from LMDB's first pages, which
	 * the open reads with pread (and the kernel reads ahead of those) */
	for (int i = 0; i < 4; i++)
		a = ht_put_chunk(t, 300000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_evict(d.path);

	o.flags = 0;
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, a, HEAP_CHUNK_PAGES, &v), 0);
	const uint8_t *far = v.value + 200 * 4096; /* never read */
	const uint8_t *head = v.value;             /* read by the open */

	/* fresh: cold, and a cold handle samples every seek */
	for (int i = 0; i < 3; i++) {
		cr_assert(heap_prefetch_due(h, &sample, &first));
		cr_assert(sample);
	}
	bool res = true;
	cr_assert(heap_prefetch_sample(h, far, &res), "a page out of the cache");
	cr_assert(!res);
	for (int i = 1; i < HEAP_PREFETCH_WARM_AFTER; i++) {
		cr_assert(heap_prefetch_sample(h, head, &res), "still cold after %d", i);
		cr_assert(res, "the page read is resident");
	}
	cr_assert(heap_prefetch_sample(h, far, NULL), "one cold sample starts over");
	for (int i = 1; i < HEAP_PREFETCH_WARM_AFTER; i++)
		cr_assert(heap_prefetch_sample(h, head, NULL));
	cr_assert(!heap_prefetch_sample(h, head, NULL), "eight in a row: warm");
	/* warm: a sample on every 16th seek (seeks counted from the open) */
	heap_prefetch_stat_get(h, &st);
	cr_assert_eq(st.seeks, 3);
	cr_assert(!st.cold);
	unsigned samples = 0;
	for (uint64_t n = 3; n < 3 + 4 * HEAP_PREFETCH_EVERY; n++) {
		cr_assert(!heap_prefetch_due(h, &sample, &first));
		cr_assert_eq(sample, n % HEAP_PREFETCH_EVERY == 0, "seek %llu",
		             (unsigned long long)n);
		samples += sample;
	}
	cr_assert_eq(samples, 4);
	/* a page outside the map counts as resident */
	cr_assert(!heap_prefetch_sample(h, (const void *)16, NULL));
	/* one page out of the cache: cold again */
	cr_assert(heap_prefetch_sample(h, far, NULL));
	cr_assert(heap_prefetch_due(h, &sample, &first));
	cr_assert(sample);
	heap_prefetch_stat_get(h, &st);
	cr_assert_eq(st.samples, 2 * HEAP_PREFETCH_WARM_AFTER + 3);
	cr_assert_eq(st.cold_samples, 3);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
