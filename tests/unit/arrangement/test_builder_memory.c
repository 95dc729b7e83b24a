/*
 * tests/unit/arrangement/test_builder_memory.c - the builder's memory stays
 * bounded: N updates of 8-byte keys and 16-byte vals through a builder with
 * the default 64 MiB run budget keep the pool's peak under 256 MiB, and the
 * output holds exactly N updates.  N = 2,000,000 by default, 20,000,000
 * with AH_TORTURE set (about 40 s on 2 cores; 2M takes about 3 s).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "arrangement/batch_int.h"
#include "arrangement/builder.h"
#include "arr_test.h"

#define KEYSPACE (1u << 20)
#define POOL_BOUND ((uint64_t)256 << 20)

static void be64(uint8_t *p, uint64_t x)
{
	for (int i = 7; i >= 0; i--, x >>= 8)
		p[i] = (uint8_t)x;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

Test(builder_memory, pool_peak_bounded, .timeout = 600)
{
	const uint64_t seed = 2024;
	const size_t n = getenv("AH_TORTURE") ? 20000000 : 2000000;
	const batch_desc d = { { 0 }, { 4 }, { 0 } };
	enum { CH = 4096 };
	static uint8_t kv[CH][24];
	static ah_update ups[CH];
	uint8_t *seen = calloc(KEYSPACE / 8, 1);
	uint64_t st = seed, keys = 0, id = 0, bpeak;
	ah_pool_stats ps;
	builder *b = NULL;
	batch *out = NULL;
	at_env e;
	double t0, t1, t2;

	cr_log_info("builder_memory seed %llu n %zu", (unsigned long long)seed, n);
	at_open(&e);
	cr_assert_eq(builder_new(e.t, e.p, 0, &b), 0);
	t0 = now();
	for (size_t i = 0; i < n; i += CH) {
		size_t m = n - i < CH ? n - i : CH;
		for (size_t j = 0; j < m; j++) {
			uint64_t k = tl_rand(&st) % KEYSPACE;
			if (!(seen[k / 8] & (1u << (k % 8)))) {
				seen[k / 8] |= (uint8_t)(1u << (k % 8));
				keys++;
			}
			be64(kv[j], k);
			be64(kv[j] + 8, tl_rand(&st));
			be64(kv[j] + 16, i + j); /* every val distinct */
			ups[j] = (ah_update){ kv[j], 8, kv[j] + 8, 16,
			                      (i + j) % 4, 1 };
		}
		cr_assert_eq(builder_push(b, ups, m), 0);
	}
	t1 = now();
	bpeak = builder_peak_bytes(b);
	cr_assert_eq(builder_finish(b, &d, &id), 0);
	t2 = now();
	cr_assert_eq(pool_stats(e.p, &ps), 0);
	cr_log_info("n %zu: builder peak %llu B, pool peak %llu B, push+spill "
	            "%.2f s, finish %.2f s", n, (unsigned long long)bpeak,
	            (unsigned long long)ps.peak_active_bytes, t1 - t0, t2 - t1);
	cr_assert_leq(bpeak, (uint64_t)64 << 20);
	cr_assert_lt(ps.peak_active_bytes, POOL_BOUND, "pool peak %llu",
	             (unsigned long long)ps.peak_active_bytes);
	cr_assert_eq(batch_load(e.t, id, &out), 0);
	cr_assert_eq(out->updates, n);
	cr_assert_eq(out->vals, n);
	cr_assert_eq(out->keys, keys);
	batch_free(out);
	cr_assert_lt(ps.active_bytes, (uint64_t)4 << 20,
	             "pool holds %llu B after finish",
	             (unsigned long long)ps.active_bytes);
	at_close(&e);
	free(seen);
}
