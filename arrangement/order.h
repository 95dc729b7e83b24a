/*
 * arrangement/order.h - the order of updates and their consolidation,
 * shared by everything that sorts, merges or checks updates (builder.c,
 * merge.c, batch*.c, cursor.c): keys and vals compare as unsigned bytes,
 * shorter prefix first; the first 8 bytes of a field, cached as a
 * big-endian integer, settle most comparisons on one integer compare; and
 * equal (key, val, time) diffs are summed in 128 bits, so that the result
 * (and whether it fits int64) never depends on the order of the inputs.
 *
 * Header-only and inline: the sort and the merge call these per
 * comparison.  It must never allocate, touch the heap, or define an order
 * other than the one batch chunks are stored in (B1, batch.h).
 */
#ifndef ARRANGEMENT_ORDER_H
#define ARRANGEMENT_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Byte comparison of two fields: memcmp, then length (shorter first). */
static inline int bytes_cmp(const void *a, size_t alen, const void *b,
                            size_t blen)
{
	size_t n = alen < blen ? alen : blen;
	int c = n ? memcmp(a, b, n) : 0;

	if (c)
		return c;
	return (alen > blen) - (alen < blen);
}

/* The first 8 bytes of a field as a big-endian integer, zero-padded: two
 * fields' prefixes compare as integers the way bytes_cmp orders them
 * (ties need the rest and the lengths). */
static inline uint64_t bytes_prefix8(const uint8_t *p, size_t len)
{
	uint8_t buf[8] = { 0 };
	uint64_t x;

	if (len >= 8) { /* the common case: one load, no staging */
		memcpy(&x, p, 8);
	} else {
		if (len)
			memcpy(buf, p, len);
		memcpy(&x, buf, 8);
	}
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	x = __builtin_bswap64(x);
#endif
	return x;
}

/* bytes_cmp of two fields whose cached prefixes are equal: when both are
 * at least 8 bytes long those 8 bytes are equal and need no second look. */
static inline int bytes_cmp_rest(const uint8_t *a, size_t al,
                                 const uint8_t *b, size_t bl)
{
	if (al == bl && al <= 8)
		return 0;
	if (al >= 8 && bl >= 8)
		return bytes_cmp(a + 8, al - 8, b + 8, bl - 8);
	return bytes_cmp(a, al, b, bl);
}

/* A (key, val) with its cached prefixes, as sorts and merges hold it. */
typedef struct kv_ref {
	/* Each field beside its own, not in the order of a batch cursor's
	 * (key, val, klen, vlen): copied from one, gcc paired the loads into
	 * 16-byte moves that read two 8-byte fields the cursor had just
	 * stored apart, and the store-to-load forwarding failed (31% of the
	 * merge loop's cycles in perf at 10M). */
	uint64_t kp;           /* bytes_prefix8 of key */
	const uint8_t *k;
	size_t kl;
	uint64_t vp;           /* and of val */
	const uint8_t *v;
	size_t vl;
} kv_ref;

/* The (key, val) order: by key, then val.  Inline in every caller (a
 * merge's heap compares several times per (key, val), and a key in
 * several inputs ties on the key prefix). */
static inline __attribute__((always_inline)) int kv_cmp(const kv_ref *a,
                                                        const kv_ref *b)
{
	int c;

	if (a->kp != b->kp)
		return a->kp < b->kp ? -1 : 1;
	if ((c = bytes_cmp_rest(a->k, a->kl, b->k, b->kl)) != 0)
		return c;
	if (a->vp != b->vp)
		return a->vp < b->vp ? -1 : 1;
	return bytes_cmp_rest(a->v, a->vl, b->v, b->vl);
}

/* One (time, diff) of a (key, val)'s history. */
typedef struct time_diff {
	uint64_t time;
	int64_t diff;
} time_diff;

/* The sum of the diffs of one (key, val, time): exact, whatever their
 * number and order; diff_fits says whether it is an int64 (an update that
 * can be stored). */
__extension__ typedef __int128 diff_sum;

static inline bool diff_fits(diff_sum s)
{
	return s <= INT64_MAX && s >= INT64_MIN;
}

#endif /* ARRANGEMENT_ORDER_H */
