/*
 * tests/unit/heap/test_hash.c - the AVX2 XXH3 of pages and chunks
 * (heap/hash.c) gives exactly the inline (SSE2) XXH3 of every other file,
 * for every length class XXH3 treats differently (around its stripe and
 * block sizes) and for misaligned inputs; seed fixed and printed.
 */
#include <stdlib.h>

#include <criterion/criterion.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/heap_int.h"
#include "tl_rand.h"

Test(hash, avx2_equals_inline)
{
	const uint64_t seed = 1201;
	const size_t lens[] = { 1024, 1025, 1087, 1088, 2048, 4095, 4096, 4097,
	                        8192, 65520, 1048560, 1048576 + 13 };
	size_t max = 1048576 + 32;
	uint8_t *b = malloc(max);
	uint64_t s = seed;

	if (!__builtin_cpu_supports("avx2"))
		cr_skip_test("no AVX2 on this CPU");
	cr_log_info("hash seed %llu", (unsigned long long)seed);
	for (size_t i = 0; i < max; i++)
		b[i] = (uint8_t)tl_below(&s, 256);
	for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
		for (size_t off = 0; off < 3; off++)
			cr_assert_eq(heap_xxh3_avx2(b + off, lens[i]),
			             XXH3_64bits(b + off, lens[i]), "len %zu off %zu",
			             lens[i], off);
	free(b);
}
