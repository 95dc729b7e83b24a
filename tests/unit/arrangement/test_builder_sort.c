/*
 * tests/unit/arrangement/test_builder_sort.c - the builder's run sort
 * (run_sort.h: MSD radix on the key prefix, comparison sort for short
 * ranges and prefix ties) and the fused consolidate-and-write, against a
 * model that knows nothing of prefixes: updates with inline key/val bytes
 * compared as bytes (memcmp, shorter first), consolidated in 128 bits.
 *
 * Shapes try to break the radix: keys of 0..20 bytes sharing long
 * prefixes (ties on all 8 prefix bytes, keys that are prefixes of each
 * other, zero bytes), small big-endian integers (common leading bytes the
 * radix skips), equal keys with different vals, many equal (key, val,
 * time), (key, val)s with more times than one pushed run holds; sizes
 * straddle the radix and insertion thresholds.  The golden
 * digests pin the output bytes: they were those of the builder before the
 * radix sort (commit 8708e69) until chunk body version 2 changed the
 * bytes, and were taken again then from a builder whose output the
 * model comparisons of this file and builder.c's tests accept.  Seeds
 * are fixed and printed.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch.h"
#include "arrangement/builder.h"
#include "arrangement/run_sort.h"
#include "arr_test.h"

#define KMAX 20
#define VMAX 20

typedef struct mu {
	uint8_t key[KMAX], val[VMAX];
	uint8_t klen, vlen;
	uint64_t time;
	int64_t diff;
} mu;

enum shape { SH_SHARED, SH_INTS, SH_WIDE, SH_FEW, SH_TIMES, SH_COUNT };
static const char *const shape_name[] = { "shared", "ints", "wide", "few",
                                          "times" };

static const size_t sizes[] = { 0, 1, 2, 15, 16, 17, 63, 64, 65, 127, 128,
                                129, 255, 256, 257, 1000, 4097, 30000 };

static void be64(uint8_t *p, uint64_t x)
{
	for (int i = 7; i >= 0; i--, x >>= 8)
		p[i] = (uint8_t)x;
}

static void gen_bytes(uint64_t *st, uint8_t *p, uint8_t len, unsigned shared,
                      unsigned alpha)
{
	static const uint8_t pre[] = "prefix\0prefix_20_bytes";
	for (unsigned j = 0; j < len; j++)
		p[j] = j < shared ? pre[j] : (uint8_t)(tl_rand(st) % alpha);
}

/* One update of shape sh. */
static void gen_one(uint64_t *st, enum shape sh, mu *u)
{
	memset(u, 0, sizeof *u);
	switch (sh) {
	case SH_SHARED: /* 0..20 bytes, up to 14 shared, then 2 letters */
		u->klen = (uint8_t)(tl_rand(st) % (KMAX + 1));
		gen_bytes(st, u->key, u->klen, (unsigned)(tl_rand(st) % 15), 2);
		u->vlen = (uint8_t)(tl_rand(st) % 13);
		gen_bytes(st, u->val, u->vlen, (unsigned)(tl_rand(st) % 10), 2);
		u->time = tl_rand(st) % 4;
		break;
	case SH_INTS: /* small big-endian integers: leading zero bytes */
		u->klen = 8;
		be64(u->key, tl_rand(st) % 300);
		u->vlen = 16;
		be64(u->val, tl_rand(st) % 3);
		be64(u->val + 8, tl_rand(st) % 2);
		u->time = tl_rand(st) % 3;
		break;
	case SH_WIDE: /* the bench's: random 8-byte keys, 16-byte vals */
		u->klen = 8;
		be64(u->key, tl_rand(st) % 5000 * 0x9e3779b97f4a7c15ull);
		u->vlen = 16;
		be64(u->val, tl_rand(st) % 4);
		be64(u->val + 8, tl_rand(st));
		u->time = tl_rand(st) % 2;
		break;
	case SH_TIMES: /* (key, val)s of 63..66, 300 or all distinct times */
		u->klen = (uint8_t)(tl_rand(st) % 3 * 6);
		gen_bytes(st, u->key, u->klen, 12, 2);
		u->vlen = (uint8_t)(tl_rand(st) % 3);
		u->val[0] = (uint8_t)(tl_rand(st) % 4);
		u->time = u->vlen == 1 ? tl_rand(st) % (63u + u->val[0]) :
		          u->vlen == 0 ? tl_rand(st) % 300 : tl_rand(st);
		break;
	default: /* few distinct (key, val, time): long equal runs */
		u->klen = (uint8_t)(9 + tl_rand(st) % 3);
		gen_bytes(st, u->key, u->klen, 9, 2);
		u->vlen = (uint8_t)(tl_rand(st) % 2);
		u->time = tl_rand(st) % 2;
		break;
	}
	u->diff = (int64_t)(tl_rand(st) % 5) - 2;
}

static int mu_cmp3(const mu *a, const mu *b)
{
	int c = bytes_cmp(a->key, a->klen, b->key, b->klen);
	if (c == 0)
		c = bytes_cmp(a->val, a->vlen, b->val, b->vlen);
	if (c == 0)
		c = (a->time > b->time) - (a->time < b->time);
	return c;
}

/* (key, val, time), then diff: a total order for comparing sequences. */
static int mu_cmp4(const void *x, const void *y)
{
	const mu *a = x, *b = y;
	int c = mu_cmp3(a, b);
	return c ? c : (a->diff > b->diff) - (a->diff < b->diff);
}

/* Sorts and sums equal (key, val, time) in 128 bits, dropping zeros. */
static size_t model_consolidate(mu *u, size_t n)
{
	size_t o = 0;
	qsort(u, n, sizeof *u, mu_cmp4);
	for (size_t i = 0, j; i < n; i = j) {
		diff_sum s = 0;
		for (j = i; j < n && mu_cmp3(&u[i], &u[j]) == 0; j++)
			s += u[j].diff;
		cr_assert(diff_fits(s));
		if (s) {
			u[o] = u[i];
			u[o++].diff = (int64_t)s;
		}
	}
	return o;
}

/* Entries of u (key and val bytes packed in store) as the builder makes them. */
static void to_entries(const mu *u, size_t n, uint8_t *store, run_entry *e)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = store + i * (KMAX + VMAX);
		memcpy(p, u[i].key, u[i].klen);
		memcpy(p + u[i].klen, u[i].val, u[i].vlen);
		e[i] = (run_entry){ bytes_prefix8(p, u[i].klen),
		                    bytes_prefix8(p + u[i].klen, u[i].vlen), p,
		                    u[i].klen, u[i].vlen, u[i].time, u[i].diff };
	}
}

static void from_entries(const run_entry *e, size_t n, mu *u)
{
	for (size_t i = 0; i < n; i++) {
		memset(&u[i], 0, sizeof u[i]);
		u[i].klen = (uint8_t)e[i].klen;
		u[i].vlen = (uint8_t)e[i].vlen;
		memcpy(u[i].key, e[i].key, e[i].klen);
		memcpy(u[i].val, e[i].key + e[i].klen, e[i].vlen);
		u[i].time = e[i].time;
		u[i].diff = e[i].diff;
		cr_assert_eq(e[i].pfx, bytes_prefix8(e[i].key, e[i].klen));
		cr_assert_eq(e[i].vpfx, bytes_prefix8(e[i].key + e[i].klen, e[i].vlen));
	}
}

/* Sorts u's entries with sort and checks the result against the model:
 * in (key, val, time) order, and the same multiset of updates. */
static void check_sort(const mu *u, size_t n, void (*sort)(run_entry *, size_t),
                       const char *what, uint64_t seed, const char *shape)
{
	uint8_t *store = malloc(n * (KMAX + VMAX) + 1);
	run_entry *e = malloc(n * sizeof *e + 1);
	mu *got = malloc(n * sizeof *got + 1), *want = malloc(n * sizeof *want + 1);

	to_entries(u, n, store, e);
	sort(e, n);
	from_entries(e, n, got);
	for (size_t i = 1; i < n; i++)
		cr_assert_leq(mu_cmp3(&got[i - 1], &got[i]), 0,
		              "%s seed %llu %s n %zu: out of order at %zu", what,
		              (unsigned long long)seed, shape, n, i);
	memcpy(want, u, n * sizeof *u);
	qsort(want, n, sizeof *want, mu_cmp4);
	qsort(got, n, sizeof *got, mu_cmp4);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(mu_cmp4(&got[i], &want[i]), 0,
		             "%s seed %llu %s n %zu: update %zu lost or changed",
		             what, (unsigned long long)seed, shape, n, i);
	free(store);
	free(e);
	free(got);
	free(want);
}

Test(builder_sort, radix_and_compare_sorts_match_model, .timeout = 120)
{
	const uint64_t seed = 1813;
	size_t nmax = sizes[sizeof sizes / sizeof *sizes - 1];
	mu *u = malloc(nmax * sizeof *u);

	cr_log_info("builder_sort/sorts seed %llu", (unsigned long long)seed);
	for (int sh = 0; sh < SH_COUNT; sh++)
		for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
			uint64_t st = seed * 1000003 + (uint64_t)sh * 101 + si;
			size_t n = sizes[si];
			for (size_t i = 0; i < n; i++)
				gen_one(&st, (enum shape)sh, &u[i]);
			check_sort(u, n, run_sort, "radix", seed, shape_name[sh]);
			check_sort(u, n, run_sort_compare, "compare", seed,
			           shape_name[sh]);
		}
	free(u);
}

/* Reads batch id back into out (keys and vals of up to 20 bytes). */
static size_t scan_batch(at_env *e, uint64_t id, mu *out, size_t cap)
{
	batch *b = NULL;
	batch_cursor *c = NULL;
	size_t n = 0;

	if (id == 0)
		return 0;
	cr_assert_eq(batch_load(e->t, id, &b), 0);
	cr_assert_eq(bcur_open(e->t, b, frontier_of(0), &c), 0);
	while (bcur_key_valid(c)) {
		const void *k, *v;
		size_t kl, vl;
		bcur_key(c, &k, &kl);
		cr_assert_leq(kl, KMAX);
		while (bcur_val_valid(c)) {
			uint64_t t;
			int64_t d;
			int r;
			bcur_val(c, &v, &vl);
			cr_assert_leq(vl, VMAX);
			while ((r = bcur_time_next(c, &t, &d)) == 1) {
				cr_assert_lt(n, cap);
				memset(&out[n], 0, sizeof out[n]);
				memcpy(out[n].key, k, kl);
				out[n].klen = (uint8_t)kl;
				if (vl)
					memcpy(out[n].val, v, vl);
				out[n].vlen = (uint8_t)vl;
				out[n].time = t;
				out[n++].diff = d;
			}
			cr_assert_eq(r, 0);
			cr_assert_eq(bcur_step_val(c), 0);
		}
		cr_assert_eq(bcur_step_key(c), 0);
	}
	bcur_close(c);
	cr_assert_eq(b->updates, n);
	batch_free(b);
	return n;
}

static int build(at_env *e, const mu *u, size_t n, size_t budget, uint64_t *id)
{
	const batch_desc d = { { 0 }, { 100 }, { 0 } };
	ah_update buf[512];
	builder *b = NULL;
	int rc = builder_new(e->t, e->p, budget, &b);

	cr_assert_eq(rc, 0);
	*id = 0;
	for (size_t i = 0; i < n && rc == 0; i += 512) {
		size_t m = n - i < 512 ? n - i : 512;
		for (size_t j = 0; j < m; j++)
			buf[j] = (ah_update){ u[i + j].key, u[i + j].klen, u[i + j].val,
			                      u[i + j].vlen, u[i + j].time,
			                      u[i + j].diff };
		rc = builder_push(b, buf, m);
	}
	if (rc) {
		builder_free(b);
		return rc;
	}
	return builder_finish(b, &d, id);
}

Test(builder_sort, built_batch_equals_model, .timeout = 120)
{
	const uint64_t seed = 1814;
	const size_t budgets[] = { 0, 8 << 10 };
	size_t nmax = sizes[sizeof sizes / sizeof *sizes - 1];
	mu *u = malloc(nmax * sizeof *u), *want = malloc(nmax * sizeof *u);
	mu *got = malloc(nmax * sizeof *u);
	at_env e;

	cr_log_info("builder_sort/model seed %llu", (unsigned long long)seed);
	at_open(&e);
	for (int sh = 0; sh < SH_COUNT; sh++)
		for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
			for (size_t bi = 0; bi < 2; bi++) {
				uint64_t st = seed * 1000003 + (uint64_t)sh * 101 + si, id;
				size_t n = sizes[si], nw, ng;
				for (size_t i = 0; i < n; i++)
					gen_one(&st, (enum shape)sh, &u[i]);
				memcpy(want, u, n * sizeof *u);
				nw = model_consolidate(want, n);
				cr_assert_eq(build(&e, u, n, budgets[bi], &id), 0);
				ng = scan_batch(&e, id, got, nmax);
				cr_assert_eq(ng, nw, "seed %llu %s n %zu budget %zu: %zu "
				             "updates, model %zu", (unsigned long long)seed,
				             shape_name[sh], n, budgets[bi], ng, nw);
				for (size_t i = 0; i < nw; i++)
					cr_assert_eq(mu_cmp4(&got[i], &want[i]), 0,
					             "seed %llu %s n %zu budget %zu: update %zu",
					             (unsigned long long)seed, shape_name[sh],
					             n, budgets[bi], i);
			}
	at_close(&e);
	free(u);
	free(want);
	free(got);
}

/* Equal (key, val, time) whose int64 partial sums overflow in some orders
 * but whose 128-bit sum fits, among enough other updates that the radix
 * path sorts them: the sum is kept whatever order the sort leaves. */
Test(builder_sort, radix_path_sums_in_128_bits)
{
	const int64_t big[] = { INT64_MAX, INT64_MAX, INT64_MIN, INT64_MIN,
	                        INT64_MAX, -5 };
	mu u[300], got[300];
	uint64_t st = 1815, id;
	at_env e;

	cr_log_info("builder_sort/sums seed 1815");
	for (size_t i = 0; i < 300; i++)
		gen_one(&st, SH_WIDE, &u[i]);
	for (size_t i = 0; i < 6; i++) { /* spread over the run */
		mu *x = &u[i * 50 + 7];
		memset(x, 0, sizeof *x);
		memcpy(x->key, "same-key", 8);
		x->klen = 8;
		x->time = 1;
		x->diff = big[i];
	}
	at_open(&e);
	cr_assert_eq(build(&e, u, 300, 0, &id), 0);
	size_t n = scan_batch(&e, id, got, 300);
	bool found = false;
	for (size_t i = 0; i < n; i++)
		if (got[i].klen == 8 && memcmp(got[i].key, "same-key", 8) == 0) {
			cr_assert_eq(got[i].diff, INT64_MAX - 7);
			found = true;
		}
	cr_assert(found);
	/* One more INT64_MAX: the 128-bit sum no longer fits. */
	u[1] = u[7];
	u[1].diff = INT64_MAX;
	cr_assert_eq(build(&e, u, 300, 0, &id), AH_ELIMIT);
	/* A (key, val) of 100 times (past one pushed run's 64) whose time 95
	 * sums past INT64_MAX: AH_ELIMIT too, from the one-at-a-time path. */
	for (size_t i = 0; i < 300; i++)
		gen_one(&st, SH_WIDE, &u[i]);
	for (size_t i = 0; i < 102; i++) {
		mu *x = &u[i];
		memset(x, 0, sizeof *x);
		memcpy(x->key, "many-times", 10);
		x->klen = 10;
		x->time = i < 100 ? i : 95;
		x->diff = i < 100 ? 1 : INT64_MAX;
	}
	cr_assert_eq(build(&e, u, 300, 0, &id), AH_ELIMIT);
	u[101].diff = -1; /* now it fits: 1 + MAX - 1 */
	cr_assert_eq(build(&e, u, 300, 0, &id), 0);
	n = scan_batch(&e, id, got, 300);
	size_t times = 0;
	for (size_t i = 0; i < n; i++)
		if (got[i].klen == 10 && memcmp(got[i].key, "many-times", 10) == 0) {
			cr_assert_eq(got[i].time, times);
			cr_assert_eq(got[i].diff, times == 95 ? INT64_MAX : 1);
			times++;
		}
	cr_assert_eq(times, 100);
	at_close(&e);
}

/* FNV-1a over the batch's counters and every chunk body, in order. */
static uint64_t batch_digest(at_env *e, uint64_t id)
{
	uint64_t h = 0xcbf29ce484222325ull;
	batch *b = NULL;
#define MIX(p, n) do { const uint8_t *q_ = (const uint8_t *)(p); \
	for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ q_[i_]) * 0x100000001b3ull; \
	} while (0)

	cr_assert_eq(batch_load(e->t, id, &b), 0);
	MIX(&b->updates, 8);
	MIX(&b->keys, 8);
	MIX(&b->vals, 8);
	MIX(&b->bytes, 8);
	MIX(&b->nchunks, sizeof b->nchunks);
	for (uint32_t i = 0; i < b->nchunks; i++) {
		const void *body;
		size_t used;
		cr_assert_eq(heap_chunk_get(e->t, b->chunk_ids[i], &body, &used), 0);
		MIX(body, used);
	}
#undef MIX
	batch_free(b);
	return h;
}

/* Output bytes equal the builder's before the radix sort and the fused
 * write (digests recorded at commit 8708e69, introsort + batch_writer_push):
 * for each shape, 30000 updates through one run and through spilled runs. */
Test(builder_sort, output_bytes_as_before, .timeout = 120)
{
	static const uint64_t golden[SH_COUNT] = {
		/* chunk body version 2 (format 4); the version-1 digests
		 * were 0x6f358112a50124e4, 0x6fdf01320e2476a3,
		 * 0x85d0382b6960959b, 0xb08644bfb731198c, 0x00994ec146b08e92 */
		0x77a6426b9cfc02ceull, 0x90dcfad416fd857eull,
		0xa7438c9c61b003b5ull, 0x37f0e5bfe30f6081ull,
		0xb8e049b908a7c3daull,
	};
	const uint64_t seed = 1816;
	const size_t n = 30000, budgets[] = { 0, 8 << 10 };
	mu *u = malloc(n * sizeof *u);
	at_env e;

	cr_log_info("builder_sort/golden seed %llu", (unsigned long long)seed);
	at_open(&e);
	for (int sh = 0; sh < SH_COUNT; sh++)
		for (size_t bi = 0; bi < 2; bi++) {
			uint64_t st = seed + (uint64_t)sh, id, h;
			for (size_t i = 0; i < n; i++)
				gen_one(&st, (enum shape)sh, &u[i]);
			cr_assert_eq(build(&e, u, n, budgets[bi], &id), 0);
			h = batch_digest(&e, id);
			cr_log_info("golden %s budget %zu: 0x%016llx", shape_name[sh],
			            budgets[bi], (unsigned long long)h);
			cr_expect_eq(h, golden[sh], "seed %llu %s budget %zu: "
			             "digest 0x%016llx", (unsigned long long)seed,
			             shape_name[sh], budgets[bi], (unsigned long long)h);
		}
	at_close(&e);
	free(u);
}

/* One builder_push of every update: reserve grows the entry array once
 * when the push fits the run, and never past the budget when it does not
 * (the run then spills as before); the bytes are the golden ones. */
Test(builder_sort, one_big_push_keeps_budget, .timeout = 120)
{
	const size_t n = 30000, budgets[] = { 0, 1 << 20, 64 << 10, 16 << 10 };
	const batch_desc d = { { 0 }, { 100 }, { 0 } };
	mu *u = malloc(n * sizeof *u);
	ah_update *a = malloc(n * sizeof *a);
	at_env e;

	cr_log_info("builder_sort/one_push seed 1818");
	at_open(&e);
	for (size_t bi = 0; bi < 4; bi++) {
		uint64_t st = 1816 + SH_WIDE, id, peak;
		builder *b = NULL;
		for (size_t i = 0; i < n; i++) {
			gen_one(&st, SH_WIDE, &u[i]);
			a[i] = (ah_update){ u[i].key, u[i].klen, u[i].val, u[i].vlen,
			                    u[i].time, u[i].diff };
		}
		cr_assert_eq(builder_new(e.t, e.p, budgets[bi], &b), 0);
		cr_assert_eq(builder_push(b, a, n), 0);
		peak = builder_peak_bytes(b);
		cr_assert_eq(builder_finish(b, &d, &id), 0);
		cr_assert_leq(peak, budgets[bi] ? budgets[bi] : (size_t)64 << 20,
		              "budget %zu: peak %llu", budgets[bi],
		              (unsigned long long)peak);
		cr_assert_eq(batch_digest(&e, id), 0xa7438c9c61b003b5ull,
		             "budget %zu", budgets[bi]);
	}
	at_close(&e);
	free(u);
	free(a);
}
