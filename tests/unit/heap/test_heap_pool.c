/*
 * tests/unit/heap/test_heap_pool.c - the transient-memory pool: exact
 * allocation counters and peak, readable statistics, reset, injected
 * failures, and the pool a heap owns; destroyed pools' arenas are reused,
 * never shared by two live pools, and leave no jemalloc metadata behind.
 */
#include "heap/pool.h"
#include "heap_test.h"

Test(heap_pool, counters_stats_reset)
{
	pool *p;
	void *b[100];
	uint64_t allocs, frees, live, sum = 0, peak;
	ah_pool_stats st;

	cr_assert_eq(pool_create(&p), 0);
	cr_assert_null(pool_malloc(p, 0));
	for (size_t i = 0; i < 100; i++) {
		b[i] = pool_malloc(p, i * 37 + 1);
		cr_assert_not_null(b[i]);
		memset(b[i], (int)i, i * 37 + 1);
		sum += i * 37 + 1;
	}
	peak = sum;
	pool_counts(p, &allocs, &frees, &live);
	cr_assert_eq(allocs, 100);
	cr_assert_eq(frees, 0);
	cr_assert_eq(live, 100);
	cr_assert_eq(pool_stats(p, &st), 0);
	cr_assert_eq(st.active_bytes, sum);
	cr_assert_eq(st.peak_active_bytes, peak);
	cr_assert_gt(st.resident_bytes, 0);

	for (size_t i = 0; i < 100; i += 2) {
		pool_free(p, b[i], i * 37 + 1);
		sum -= i * 37 + 1;
	}
	b[1] = pool_realloc(p, b[1], 38, 100000);
	cr_assert_not_null(b[1]);
	cr_assert_eq(((unsigned char *)b[1])[37], 1, "realloc keeps bytes");
	sum += 100000 - 38;
	if (sum > peak)
		peak = sum;
	pool_counts(p, &allocs, &frees, &live);
	cr_assert_eq(allocs, 101);
	cr_assert_eq(frees, 51);
	cr_assert_eq(live, 50);
	cr_assert_eq(pool_stats(p, &st), 0);
	cr_assert_eq(st.active_bytes, sum);
	cr_assert_eq(st.peak_active_bytes, peak);

	for (size_t i = 1; i < 100; i += 2)
		pool_free(p, b[i], i == 1 ? 100000 : i * 37 + 1);
	pool_counts(p, NULL, NULL, &live);
	cr_assert_eq(live, 0);
	cr_assert_eq(pool_stats(p, &st), 0);
	cr_assert_eq(st.active_bytes, 0);
	pool_reset(p);
	cr_assert_eq(pool_stats(p, &st), 0);
	cr_assert_eq(st.active_bytes, 0);
	cr_assert_eq(st.peak_active_bytes, peak, "peak survives reset");
	b[0] = pool_malloc(p, 4096);
	cr_assert_not_null(b[0]);
	pool_free(p, b[0], 4096);
	pool_destroy(p);
}

Test(heap_pool, injected_failure)
{
	pool *p;
	void *a, *b2, *c, *d2;

	cr_assert_eq(pool_create(&p), 0);
	pool_inject_failure(p, 3);
	a = pool_malloc(p, 10);
	b2 = pool_malloc(p, 10);
	cr_assert_not_null(a);
	cr_assert_not_null(b2);
	cr_assert_null(pool_realloc(p, b2, 10, 20), "3rd allocation fails");
	c = pool_malloc(p, 10);
	cr_assert_not_null(c, "only the 3rd fails");
	pool_inject_failure(p, 1);
	cr_assert_null(pool_malloc(p, 10));
	pool_inject_failure(p, 0);
	d2 = pool_malloc(p, 10);
	cr_assert_not_null(d2);
	pool_free(p, a, 10);
	pool_free(p, b2, 10);
	pool_free(p, c, 10);
	pool_free(p, d2, 10);
	{
		uint64_t live;

		pool_counts(p, NULL, NULL, &live);
		cr_assert_eq(live, 0);
	}
	pool_destroy(p);
}

Test(heap_pool, heap_owns_a_pool)
{
	tl_dir d;
	heap *h;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * MiB, 0);
	ah_pool_stats st;
	void *x;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_not_null(heap_pool(h));
	x = pool_malloc(heap_pool(h), 1000);
	cr_assert_not_null(x);
	cr_assert_eq(pool_stats(heap_pool(h), &st), 0);
	cr_assert_eq(st.active_bytes, 1000);
	pool_free(heap_pool(h), x, 1000);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

#ifndef AH_POOL_SYSTEM_MALLOC
int ahj_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
                size_t newlen);

/* jemalloc's metadata bytes, and its arena count. */
static void je_meta(size_t *meta, unsigned *narenas)
{
	uint64_t epoch = 1;
	size_t sz = sizeof epoch;

	cr_assert_eq(ahj_mallctl("epoch", &epoch, &sz, &epoch, sz), 0);
	sz = sizeof *meta;
	cr_assert_eq(ahj_mallctl("stats.metadata", meta, &sz, NULL, 0), 0);
	sz = sizeof *narenas;
	cr_assert_eq(ahj_mallctl("arenas.narenas", narenas, &sz, NULL, 0), 0);
}

/* Up to 20 pools live at once (more than the 16 kept arenas), created
 * and destroyed in a shifting pattern 1,000 times, each writing a 256 KiB
 * and a small block: no two live pools share an arena, and jemalloc's
 * metadata stays where it was after the first rounds (destroying the
 * arena each time added 4.2 KiB a pool: 27 MB here). */
Test(heap_pool, arenas_reused_not_shared_no_metadata_growth)
{
	enum { LIVE = 20, ROUNDS = 1000 };
	pool *p[LIVE] = { 0 };
	size_t meta0 = 0, meta;
	unsigned n0 = 0, n;

	for (unsigned r = 0; r < ROUNDS; r++) {
		unsigned k = r % LIVE, live = 1 + (r * 7) % LIVE;
		for (unsigned i = 0; i < LIVE; i++)
			if (i < live && !p[(k + i) % LIVE])
				cr_assert_eq(pool_create(&p[(k + i) % LIVE]), 0);
		for (unsigned i = 0; i < LIVE; i++)
			for (unsigned j = i + 1; j < LIVE; j++)
				if (p[i] && p[j])
					cr_assert_neq(pool_arena(p[i]), pool_arena(p[j]),
					              "round %u: pools %u and %u share arena %u",
					              r, i, j, pool_arena(p[i]));
		for (unsigned i = 0; i < LIVE; i++) {
			if (!p[i])
				continue;
			uint8_t *big = pool_malloc(p[i], 256 << 10), *small = pool_malloc(p[i], 100);
			cr_assert(big && small);
			memset(big, (int)i, 256 << 10);
			memset(small, (int)i, 100);
			cr_assert_eq(big[12345], (uint8_t)i);
			if ((r + i) % 3 == 0) { /* destroyed with blocks live */
				pool_destroy(p[i]);
				p[i] = NULL;
			} else {
				pool_free(p[i], big, 256 << 10);
				pool_free(p[i], small, 100);
			}
		}
		if (r == 100)
			je_meta(&meta0, &n0);
	}
	for (unsigned i = 0; i < LIVE; i++)
		pool_destroy(p[i]);
	je_meta(&meta, &n);
	cr_assert_eq(n, n0, "arenas: %u after round 100, %u at the end", n0, n);
	cr_assert_lt(meta, meta0 + 256 * 1024,
	             "jemalloc metadata: %zu after round 100, %zu at the end",
	             meta0, meta);
}
#endif
