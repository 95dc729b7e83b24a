/*
 * tests/unit/heap/test_heap_pool.c - the transient-memory pool: exact
 * allocation counters and peak, readable statistics, reset, injected
 * failures, and the pool a heap owns.
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
