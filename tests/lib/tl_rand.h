/*
 * tests/lib/tl_rand.h - the seeded generator of the randomised tests:
 * splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014; the constants of Vigna's reference code), one
 * 64-bit state the caller owns, so a test is replayed from its seed alone
 * and a child derives its own stream (seed * K + i) without sharing state.
 *
 * Every randomised test has a fixed seed and prints it (tl_seed, or its own
 * message with the seed in it) and names the seed in its failure messages.
 * tl_rand and tl_below are pure functions of the state: forked children and
 * threads may call them.  tl_seed logs through Criterion: the test's own
 * process only.  Public header only.
 */
#ifndef TESTS_LIB_TL_RAND_H
#define TESTS_LIB_TL_RAND_H

#include <criterion/criterion.h>
#include <stdint.h>

/* The next value of the stream in *s. */
static inline uint64_t tl_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A value in [0, n) (n > 0; modulo bias accepted: tests, not statistics). */
static inline uint64_t tl_below(uint64_t *s, uint64_t n)
{
	return tl_rand(s) % n;
}

/* Logs "TEST seed N" (criterion --verbose shows it) and returns seed, so
 * that `uint64_t s = tl_seed("suite/test", 42);` both starts the stream
 * and records it. */
static inline uint64_t tl_seed(const char *test, uint64_t seed)
{
	cr_log_info("%s seed %llu", test, (unsigned long long)seed);
	return seed;
}

#endif /* TESTS_LIB_TL_RAND_H */
