/*
 * heap/record.c - checked records: every value of the small tables
 * (arrangement records, batch records, the batch id counter, source
 * positions, read holds) is stored framed with a checksum over its table, its key and
 * its bytes, so that a flipped byte anywhere in it, or in the key it is
 * stored under (a renamed arrangement, a batch record under another id),
 * is AH_ECORRUPT instead of a wrong answer.  Format 2 (heap.h).
 *
 *   off  size  field
 *     0     8  check   XXH3-64 of the bytes, seeded with XXH3-64 of the
 *                      key seeded with the table number + 1
 *     8     n  the bytes the layer above stored
 *
 * Values are only 2-byte aligned in the map; the 8-byte frame keeps the
 * bytes' alignment as it was.  A version-1 heap's values are raw; a reader
 * that opened such a heap before another process upgraded it recognises a
 * framed value by its check (a raw value that happens to carry a matching
 * check is a 2^-64 chance).  This file never decides what a record means.
 */
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/heap_int.h"

static uint64_t check_of(int tb, const void *key, size_t klen, const void *val,
                         size_t vlen)
{
	uint64_t seed = XXH3_64bits_withSeed(key, klen, (uint64_t)tb + 1);

	return XXH3_64bits_withSeed(val, vlen, seed);
}

void heap_record_frame(int tb, const void *key, size_t klen, const void *val,
                       size_t vlen, void *out)
{
	uint64_t c = check_of(tb, key, klen, val, vlen);

	if (vlen)
		memmove((char *)out + HEAP_RECORD_FRAME, val, vlen);
	memcpy(out, &c, sizeof c);
}

int heap_record_unframe(const heap *h, int tb, const void *key, size_t klen,
                        const void **val, size_t *vlen)
{
	const char *p = *val;
	uint64_t c;
	bool ok;

	if (*vlen < HEAP_RECORD_FRAME)
		ok = false;
	else {
		memcpy(&c, p, sizeof c);
		ok = c == check_of(tb, key, klen, p + HEAP_RECORD_FRAME,
		                   *vlen - HEAP_RECORD_FRAME);
	}
	if (ok) {
		*val = p + HEAP_RECORD_FRAME;
		*vlen -= HEAP_RECORD_FRAME;
		return 0;
	}
	if (heap_format_of(h) < 2 && tb != HEAP_T_HOLD)
		return 0; /* a raw version-1 value (holds are never raw) */
	return CORRUPT("record checksum (value or key damaged)");
}
