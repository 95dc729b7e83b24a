/*
 * heap/hash.c - XXH3-64 of long inputs (pages, whole chunks) in AVX2 code:
 * this one file is compiled with -mavx2 (Makefile), so that the inlined
 * xxHash picks its AVX2 loop; xxh3 (chunk_int.h) calls it only when
 * the CPU has AVX2 (__builtin_cpu_supports), else it hashes with the
 * SSE2 code every other file compiles to.  XXH3 gives the same hash on
 * every vector unit (its specification), so files written either way
 * read the same.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/heap_int.h"

uint64_t heap_xxh3_avx2(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}
