/*
 * tests/unit/arrangement/test_order.c - the cached 8-byte prefixes of
 * arrangement/order.h agree with bytes_cmp: for random fields of 0 to 12
 * bytes over a small alphabet (so that long shared prefixes and prefix
 * fields are common), differing prefixes order the fields as bytes_cmp does,
 * and equal prefixes leave the decision to bytes_cmp_rest, which then gives
 * bytes_cmp's answer.  Seed fixed and printed.
 */
#include <criterion/criterion.h>

#include "arrangement/order.h"
#include "tests/lib/tl_rand.h"

static int sign(int x)
{
	return (x > 0) - (x < 0);
}

Test(order, prefixes_agree_with_bytes_cmp)
{
	const uint64_t seed = 41;
	uint64_t st = seed;
	uint8_t a[12], b[12];

	cr_log_info("order seed %llu", (unsigned long long)seed);
	for (int i = 0; i < 200000; i++) {
		size_t al = tl_rand(&st) % 13, bl = tl_rand(&st) % 13;
		for (size_t j = 0; j < al; j++)
			a[j] = (uint8_t)(tl_rand(&st) % 3 ? 0x61 : tl_rand(&st) % 4 * 0x55);
		for (size_t j = 0; j < bl; j++)
			b[j] = j < al && tl_rand(&st) % 4 ? a[j] : (uint8_t)(tl_rand(&st) % 3 ? 0x61 : tl_rand(&st) % 4 * 0x55);
		int want = sign(bytes_cmp(a, al, b, bl));
		uint64_t pa = bytes_prefix8(a, al), pb = bytes_prefix8(b, bl);
		int got = pa != pb ? (pa < pb ? -1 : 1) : sign(bytes_cmp_rest(a, al, b, bl));
		cr_assert_eq(got, want, "seed %llu, round %d: lengths %zu %zu",
		             (unsigned long long)seed, i, al, bl);
	}
}
